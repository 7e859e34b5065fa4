"""Engine telemetry the tuner needs and vLLM does not export (issue 10), exported from the engine.

prometheus_sink.py exports the `specinfer:` series (named and counted in runtime/contract/telemetry/);
vllm_plugin.py is the vLLM stat-logger plugin (imports vLLM, loaded only by vLLM); live_schedule_sink.py
exports the schedule in force; sim_sink.py exports the same series from the simulator; fields.py lists
the vLLM fields read. (bench/wheel_stats.py loads vLLM's stats classes from the cached wheel for tests
and benchmarks.) See docs/metrics.md.
"""
