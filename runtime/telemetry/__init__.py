"""Engine telemetry the tuner needs and vLLM does not export (issue 10).

series.py names the `specinfer:` series; accumulator.py turns one engine step into counter
increments (pure); prometheus_sink.py exports them; vllm_plugin.py is the vLLM stat-logger
plugin (imports vLLM, loaded only by vLLM); sim_sink.py exports the same series from the
simulator; fields.py lists the vLLM fields read. (bench/wheel_stats.py loads vLLM's stats
classes from the cached wheel for tests and benchmarks.) See docs/metrics.md.
"""
