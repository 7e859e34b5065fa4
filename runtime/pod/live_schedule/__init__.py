"""Retuning in place, inside the engine: the watcher that re-reads the published schedule and the vLLM
scheduler class that takes it between two steps. The file's names and format are the contract's
(runtime/contract/live_schedule/).

- `watcher.py` -- polling, swapping and the state file (file I/O only, no vLLM);
- `vllm_scheduler.py` -- the vLLM scheduler subclass (`--scheduler-cls`), imported only inside vLLM.
"""
