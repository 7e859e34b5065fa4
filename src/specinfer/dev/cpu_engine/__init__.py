"""The local vLLM-on-CPU engine: a pinned, cached Python environment that models the CPU runtime image.

- `environment`: install (atomically, idempotently) and locate the cached environment;
- `overlay`: put *this checkout's* specinfer (runtime entrypoint, stat-logger plugin) on
  that shared environment's path, as the runtime image has it installed;
- `models`: tiny hub-free models (run inside the engine environment).
"""
