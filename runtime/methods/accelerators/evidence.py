"""What the catalogue's (method, accelerator) cells rest on, written once for the method modules.

A cell is `engine` once a test under tests/engine/ serves the method there through the operator
(tests/unit/test_method_evidence.py checks the test names the method), `source` where only the pinned
wheel's source was read (the contract tests hold every line cited to it), `docs` where the platform
is not in a wheel we read and its own documentation is all there is (no cell rests on that now:
vllm-ascend's wheel is read too).
"""

from specinfer.runtime.methods.accelerators.model import Evidence, ran_here, read_from
from specinfer.runtime.methods.engines import VLLM_0_33_0, VLLM_ASCEND_0_26_0RC1, VLLM_CPU_0_32_0

GPU_SOURCE = read_from(VLLM_0_33_0)      # nvidia and amd run vLLM 0.33.0's own CUDA and ROCm platforms
CPU_SOURCE = read_from(VLLM_CPU_0_32_0)
# vllm-ascend 0.26.0rc1's proposers (vllm_ascend/spec_decode/__init__.py, get_spec_decode_method) and the
# vLLM 0.26.0 config they run under; never run on an NPU here
ASCEND_SOURCE = read_from(VLLM_ASCEND_0_26_0RC1)
# The real CPU engine through pods, calibration and the tuning story (tests/engine/)
CALIBRATION_ENGINE_TEST = "tests/engine/test_calibration_engine.py"
TUNING_ENGINE_TEST = "tests/engine/test_tuning_engine.py"  # draftModel, dflash's random drafter, none
SEED_METHODS_ENGINE_TEST = "tests/engine/test_seed_methods.py"  # eagle, eagle3, mtp with tiny drafters; ngram

__all__ = ["ASCEND_SOURCE", "CALIBRATION_ENGINE_TEST", "CPU_SOURCE", "GPU_SOURCE",
           "SEED_METHODS_ENGINE_TEST", "TUNING_ENGINE_TEST", "Evidence", "ran_here"]
