"""specinfer: declarative, self-tuning speculative decoding for vLLM on Kubernetes."""

__version__ = "0.1.0"

# The vLLM release every vLLM-facing string in this project is pinned to (contract-tested).
VLLM_VERSION = "0.33.0"
