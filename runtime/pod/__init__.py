"""What runs in an engine pod (and a calibration Job's pod), on the runtime image.

`entrypoint` (`specinfer runtime`): read the RuntimeConfig (`config`), check it against the machine
(`preflight`), exec vLLM with the command line runtime/contract/argv.py makes of it, or run the simulator
(`sim_from_runtime_config`); `telemetry/`: the stat-logger plugin vLLM loads; `live_schedule/`: the
schedule's reader and scheduler class inside vLLM; `calibration/`: the calibration Job's program
(`specinfer calibrate`). It reaches the operator only through runtime/contract/.
"""
