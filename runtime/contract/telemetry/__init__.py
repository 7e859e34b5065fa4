"""The series an engine serves, as the tuner, the dashboard and the calibration read them. Pure.

`vllm_metrics` names vLLM's own series; `series` names the `specinfer:` series our plugin adds
(runtime/pod/telemetry/); `accumulator` turns one engine step into their counter increments, in the
plugin and the simulator alike. See docs/metrics.md.
"""
