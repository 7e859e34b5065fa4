"""Huawei Ascend NPUs: the vllm-ascend 0.26.0rc1 platform plugin over vLLM 0.26.0.

Everything here is read from the two wheels (engines.VLLM_ASCEND_0_26_0RC1; tests/contract/
test_vllm_ascend.py holds each line): vllm-ascend replaces vLLM's choice of model runner with the
environment variable alone, so without VLLM_USE_V2_MODEL_RUNNER (the operator never sets it) the
engine runs vllm-ascend's Model Runner V1 (`worker/model_runner_v1.py`) and its own proposers
(`spec_decode/`); its attention caps a decode query at 16 tokens, i.e. K <= 15. Nothing here has
run on an NPU.
"""

from specinfer.runtime.methods.accelerators.evidence import ASCEND_SOURCE
from specinfer.runtime.methods.accelerators.model import (
    Accelerator,
    AcceleratorSupport,
    PodDefaults,
    TorchDevices,
    device_taint_toleration,
)
from specinfer.runtime.methods.accelerators.registry import register_accelerator
from specinfer.runtime.methods.engines import VLLM_ASCEND_0_26_0RC1, SourceLine

RESOURCE = "huawei.com/Ascend910"

ASCEND = register_accelerator(Accelerator(
    name="ascend",
    summary="vllm-ascend 0.26.0rc1 (vLLM 0.26.0); K + 1 <= 16",
    device_resource=RESOURCE,
    engine=VLLM_ASCEND_0_26_0RC1,
    # VllmConfig.use_v2_model_runner is patched to read VLLM_USE_V2_MODEL_RUNNER only, False when unset
    model_runners=("v1",),
    model_runner_source=SourceLine("vllm_ascend/patch/platform/patch_use_v2_model_runner.py", 17, "return False"),
    # vLLM 0.26.0 defaults to FULL_AND_PIECEWISE graphs (optimization level O2) and downgrades them to
    # PIECEWISE under a schedule on V1 before vllm-ascend maps the mode to its ACL graphs; the price of that
    # (engine_truth.PIECEWISE_COST) is a CUDA measurement, the only one there is
    full_cuda_graphs=True,
    max_k=15,
    max_k_reason="vllm-ascend's attention takes at most K + 1 = 16 query tokens per request in a decode step",
    max_k_source=SourceLine("vllm_ascend/attention/attention_v1.py", 239, "assert self.decode_threshold <= 16"),
    device_count=TorchDevices("npu", plugin="torch_npu"),  # torch_npu adds torch.npu
    plain_decoding=AcceleratorSupport(ASCEND_SOURCE),
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
