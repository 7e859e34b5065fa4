"""What the operator and a pod agree on. Both sides import it; it imports neither (only the API and the
catalogue), so the pod side reaches the API through it alone. Pure.

- `runtime_config`: the RuntimeConfig the operator hands a pod, where the pod finds it, and the names of
  the spec the pod needs;
- `argv`: the engine's command line made of it (the pod execs it; the operator shows it on the pod);
- `live_schedule/`: retuning in place -- which specs, the envelope and startup schedule, the published
  file's names, format and validation;
- `telemetry/`: the series an engine serves (vLLM's and ours) and how one engine step counts into ours;
- `calibration/`: what a calibration measures (a point, the engine counters it reads, the report a Job
  sends back) and concludes (the comparison and recommendation, the report `specinfer calibrate` prints).
"""
