# syntax=docker/dockerfile:1
# The specinfer operator: slim Python, a wheel built in a throwaway stage, non-root at run time.
# Build from the repository root:
#   docker build -f docker/operator.Dockerfile -t ghcr.io/specinfer/operator:0.1.0 .
# The tag must match charts/specinfer (image.repository, appVersion); tests/unit/test_chart_images.py checks it.

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
COPY operator ./operator
COPY runtime ./runtime
COPY bench ./bench
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="specinfer-operator" \
      org.opencontainers.image.description="Kubernetes operator for vLLM speculative decoding (specinfer operator)" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
# The chart runs the pod as 65532 with a read-only root filesystem; /tmp is an emptyDir there.
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["specinfer", "operator"]
