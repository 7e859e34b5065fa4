"""Huawei Ascend NPUs through the vllm-ascend platform plugin, built on vLLM 0.33.0.

vllm-ascend is not in the wheels the contract tests read: its worker, graph mode and runner
choice are taken as vLLM's defaults, and its K cap from vllm-ascend's documentation.
"""

from specinfer.runtime.methods.accelerators.model import Accelerator, PodDefaults, device_taint_toleration
from specinfer.runtime.methods.accelerators.registry import register_accelerator
from specinfer.runtime.methods.engines import VLLM_0_33_0, SourceLine

RESOURCE = "huawei.com/Ascend910"

ASCEND = register_accelerator(Accelerator(
    name="ascend",
    summary="vllm-ascend; K + 1 <= 16",
    device_resource=RESOURCE,
    engine=VLLM_0_33_0,
    model_runners=("v2", "v1"),
    model_runner_source=SourceLine("vllm/config/vllm.py", 731, "def use_v2_model_runner(self) -> bool:"),
    full_cuda_graphs=False,  # NPU (ACL) graphs are vllm-ascend's own; the CUDA-graph downgrade is not priced here
    max_k=15,
    max_k_reason="vllm-ascend verifies at most K + 1 = 16 tokens per step",
    torch_device="npu",
    pod=PodDefaults(
        image_flavour="ascend",
        product_label="accelerator-type",  # Ascend device plugin's node label
        tolerations=(device_taint_toleration(RESOURCE),),
        shm_size="32Gi",      # HCCL keeps device buffers in shared memory
        startup_seconds=2700,  # loads are slower than CUDA's
        # CANN writes kernel_meta/ and logs at run time; not verified to stay off the root filesystem
        read_only_root_filesystem=False,
    ),
))
