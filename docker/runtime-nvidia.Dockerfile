# syntax=docker/dockerfile:1
# Runtime image for NVIDIA GPUs (CUDA): the pinned vLLM 0.33.0 build plus `specinfer runtime`,
# which reads the operator's RuntimeConfig, checks it, and execs `vllm serve` (or the simulator).
# Build from the repository root:
#   docker build -f docker/runtime-nvidia.Dockerfile -t ghcr.io/specinfer/runtime:0.1.0-vllm0.33.0-cuda .
# The base image and tag must match charts/specinfer/values.yaml (runtime.images.nvidia),
# operator/pure/hardware.py and docs/install.md; tests/unit/test_chart_images.py checks all four.

FROM vllm/vllm-openai:v0.33.0
LABEL org.opencontainers.image.title="specinfer-runtime-cuda" \
      org.opencontainers.image.description="vLLM 0.33.0 for NVIDIA GPUs (CUDA) with the specinfer runtime entrypoint" \
      org.opencontainers.image.version="0.1.0-vllm0.33.0-cuda" \
      org.opencontainers.image.base.name="vllm/vllm-openai:v0.33.0" \
      org.opencontainers.image.licenses="Apache-2.0"
WORKDIR /opt/specinfer
COPY pyproject.toml README.md ./
COPY src ./src
COPY operator ./operator
COPY runtime ./runtime
COPY bench ./bench
# --no-deps: the runtime needs only what vLLM already ships (pydantic, click, pyyaml, aiohttp,
# prometheus_client, numpy); letting pip resolve the operator's dependencies could move vLLM's pins.
RUN python3 -m pip install --no-cache-dir --no-deps . \
    && specinfer version \
    && groupadd --gid 10001 specinfer \
    && useradd --no-log-init --create-home --uid 10001 --gid 10001 specinfer
# Non-root, numerically (Kubernetes checks runAsNonRoot only for a numeric USER): the operator runs the pod
# as 10001 under the restricted Pod Security Standard, HOME and /tmp on emptyDirs (operator/render/deployment.py).
USER 10001:10001
ENV HOME=/home/specinfer
ENTRYPOINT ["specinfer", "runtime"]
