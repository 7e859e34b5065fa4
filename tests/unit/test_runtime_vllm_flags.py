"""Every flag the runtime itself puts on `vllm serve` exists in vLLM 0.33.0's argument classes.

vLLM derives its CLI flags from dataclass fields (`served_model_name` -> `--served-model-name`):
EngineArgs (vllm/engine/arg_utils.py) and FrontendArgs (vllm/entrypoints/common/cli_args.py).
"""

from __future__ import annotations

import ast

import pytest

from specinfer.api import parse_spec
from specinfer.dev.vllm_wheels import read_source
from specinfer.runtime.contract.argv import vllm_argv

pytestmark = [pytest.mark.unit, pytest.mark.wheel]  # reads the pinned vLLM wheel


def dataclass_fields(path: str, class_name: str) -> set[str]:
    tree = ast.parse(read_source(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return {item.target.id for item in node.body
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}
    raise AssertionError(f"{class_name} not found in {path}")


def test_runtime_flags_are_vllm_fields():
    fields = dataclass_fields("vllm/engine/arg_utils.py", "EngineArgs")
    fields |= dataclass_fields("vllm/entrypoints/common/cli_args.py", "FrontendArgs")
    assert {"model", "tensor_parallel_size"} <= fields  # the parser found the classes
    spec = parse_spec({
        "model": {"name": "m", "revision": "main", "servedModelName": "s"},
        "speculation": {"method": "ngram"},
        "hardware": {"accelerator": "nvidia", "count": 2},
    })
    flags = [arg for arg in vllm_argv(spec) if arg.startswith("--")]
    assert len(flags) == 7  # --host, --port, --served-model-name, --tensor-parallel-size, --revision, the
    # speculative config and --shutdown-timeout
    for flag in flags:
        assert flag[2:].replace("-", "_") in fields, f"{flag} is not a vLLM 0.33.0 argument"
