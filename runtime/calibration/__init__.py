"""Calibration: measure step time by batch size and K and acceptance per position, and compare methods.

Pure modules (no I/O; the operator imports only these): `measurement` (one measured point, a
candidate's report and its wire format), `scrape` (the engine's /metrics text -> counters),
`prompts` (a prompt file -> prompts), `analysis` (points -> step-cost table, comparison and
recommendation). I/O: `drive` (load + scrapes against an OpenAI-compatible endpoint, with the load
generator of `specinfer bench load`), `engine` (start the engine from a RuntimeConfig, once per K),
`cli` (`specinfer calibrate`). docs/calibration.md.
"""
