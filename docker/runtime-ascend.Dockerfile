# syntax=docker/dockerfile:1
# Runtime image for Huawei Ascend NPUs: vllm-ascend 0.26.0rc1 (the newest vllm-ascend with wheels on PyPI) on
# the vLLM it pairs with, 0.26.0, plus `specinfer runtime`, which reads the operator's RuntimeConfig, checks it,
# and execs `vllm serve` (or the simulator). vllm-ascend tags its images `v<vllm-ascend version>`
# (quay.io/ascend/vllm-ascend:v0.26.0rc1; variants add -a3, -310p or -openeuler).
# Build from the repository root:
#   docker build -f docker/runtime-ascend.Dockerfile -t ghcr.io/specinfer/runtime:0.1.0-vllm0.26.0-ascend .
# The base image and tag must match charts/specinfer/values.yaml (runtime.images.ascend),
# operator/pure/hardware.py and docs/install.md; tests/unit/test_chart_images.py checks all four.

FROM quay.io/ascend/vllm-ascend:v0.26.0rc1
LABEL org.opencontainers.image.title="specinfer-runtime-ascend" \
      org.opencontainers.image.description="vllm-ascend 0.26.0rc1 (vLLM 0.26.0) for Huawei Ascend NPUs with the specinfer runtime entrypoint" \
      org.opencontainers.image.version="0.1.0-vllm0.26.0-ascend" \
      org.opencontainers.image.base.name="quay.io/ascend/vllm-ascend:v0.26.0rc1" \
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
