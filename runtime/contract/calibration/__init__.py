"""What a calibration measures and concludes, shared by the Job's program (runtime/pod/calibration/)
and the operator (operator/calibration/). Pure.

`measurement` (one measured point, a candidate's report and its wire format, the Job's termination
message), `scrape` (the engine's /metrics text -> counters), `prompts` (a prompt file -> prompts),
`analysis` (points -> step-cost table, comparison and recommendation), `report` (what `specinfer
calibrate` prints). docs/calibration.md.
"""
