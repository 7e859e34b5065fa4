"""Development tools, beside the product (nothing in it imports them): the local control plane
and its pod runner (`cluster`), the demo (`demo`), the real vLLM CPU engine's environment and tiny
models (`cpu_engine`), and the pinned vLLM wheels the contract tests read (`vllm_wheels`)."""
