"""NVIDIA GPUs (CUDA): the reference platform; vLLM 0.33.0."""

from specinfer.runtime.methods.accelerators.evidence import GPU_SOURCE
from specinfer.runtime.methods.accelerators.model import (
    Accelerator,
    AcceleratorSupport,
    PodDefaults,
    TorchDevices,
    device_taint_toleration,
)
from specinfer.runtime.methods.accelerators.registry import register_accelerator
from specinfer.runtime.methods.engines import VLLM_0_33_0, SourceLine

RESOURCE = "nvidia.com/gpu"

NVIDIA = register_accelerator(Accelerator(
    name="nvidia",
    summary="CUDA; every method",
    device_resource=RESOURCE,
    engine=VLLM_0_33_0,
    # Model Runner V2 unless Triton is missing or the config uses a feature V2 lacks (suffix, ...).
    model_runners=("v2", "v1"),
    model_runner_source=SourceLine("vllm/config/vllm.py", 731, "def use_v2_model_runner(self) -> bool:"),
    # The default optimization level O2 captures FULL_AND_PIECEWISE graphs (vllm/config/vllm.py:311, 435).
    full_cuda_graphs=True,
    device_count=TorchDevices("cuda"),
    plain_decoding=AcceleratorSupport(GPU_SOURCE),
    pod=PodDefaults(
        image_flavour="cuda",
        product_label="nvidia.com/gpu.product",  # set by NVIDIA GPU feature discovery
        tolerations=(device_taint_toleration(RESOURCE),),
    ),
))
