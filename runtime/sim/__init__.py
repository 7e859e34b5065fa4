"""A speculative-decoding engine simulator that speaks vLLM's HTTP API and metrics."""
