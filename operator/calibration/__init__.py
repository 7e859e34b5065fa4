"""The calibration controller: SpeculativeInferenceCalibration -> candidate Jobs -> measured status.

`render` (pure) turns a calibration and its target into the candidates and their Jobs;
`status` (pure) folds what the Jobs and their pods report into the calibration's status and the
target's status.calibration; `reconciler` (I/O) applies, watches and writes. docs/calibration.md.
"""
