"""The calibration controller's pure logic: the candidates and their Jobs (`render`), the calibration's
status and the target's status.calibration (`status`)."""
