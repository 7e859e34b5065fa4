"""The calibration Job's program (`specinfer calibrate`): measure step time by batch size and K and
acceptance per position. I/O.

`drive` (load + scrapes against an OpenAI-compatible endpoint, with the load generator of `specinfer
bench load` in `requests`), `engine` (start the engine from a RuntimeConfig, once per K), `cli`
(`specinfer calibrate`). What it measures and concludes, and the report it sends back, are the
contract's (runtime/contract/calibration/), which the operator reads too. docs/calibration.md.
"""
