"""AMD GPUs (ROCm); vLLM 0.33.0. Some methods pin an attention backend here (see their modules)."""

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

RESOURCE = "amd.com/gpu"

AMD = register_accelerator(Accelerator(
    name="amd",
    summary="ROCm; attention-backend pins for some methods",
    device_resource=RESOURCE,
    engine=VLLM_0_33_0,
    # ROCm ships Triton and uses the same GPU worker (vllm/platforms/rocm.py): V2 by default, as on CUDA.
    model_runners=("v2", "v1"),
    model_runner_source=SourceLine("vllm/config/vllm.py", 731, "def use_v2_model_runner(self) -> bool:"),
    full_cuda_graphs=True,  # HIP graphs, same cudagraph modes (vllm/config/vllm.py:311)
    device_count=TorchDevices("cuda"),  # ROCm builds of torch report AMD GPUs through torch.cuda
    plain_decoding=AcceleratorSupport(GPU_SOURCE),
    pod=PodDefaults(
        image_flavour="rocm",
        product_label="amd.com/gpu.product-name",  # set by AMD's node labeller
        tolerations=(device_taint_toleration(RESOURCE),),
        # ROCm's JIT kernel builds (AITER) are not verified to stay off the root filesystem
        read_only_root_filesystem=False,
    ),
))
