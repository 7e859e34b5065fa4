"""The engine's side: the catalogue of what vLLM runs, what a pod is handed, and what runs in the pod.

- `methods/`: the catalogue and the engine facts (every method and accelerator, each vLLM release's
  rules); the bottom layer, which imports no other part of specinfer;
- `contract/`: what the operator and a pod agree on -- the RuntimeConfig and the engine's command line
  made of it, the live schedule file, the series an engine serves, what a calibration measures and
  concludes. Pure; both sides import it, and neither imports the other;
- `pod/`: what runs in a pod: `specinfer runtime` (read the RuntimeConfig, preflight, exec vLLM), the
  telemetry plugin vLLM loads, the live schedule's reader inside vLLM, the calibration Job's program;
- `sim/`: the simulator, beside the product (a pod runs it when its spec asks for it).
"""
