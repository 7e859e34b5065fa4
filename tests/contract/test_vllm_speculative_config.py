"""Contract: every method string and speculative-config key the project emits exists in vLLM 0.33.0.

Reads the cached wheel's source (specinfer.vllm_source), never imports vLLM.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache

import pytest

from specinfer.api import parse_spec
from specinfer.runtime.methods import ACCELERATORS, all_methods
from specinfer.runtime.methods.advanced import ADVANCED_FIELDS, RESERVED_FIELDS
from specinfer.vllm_source import read_source

pytestmark = pytest.mark.unit

SPECULATIVE = "vllm/config/speculative.py"


@lru_cache(maxsize=None)
def module(path: str) -> ast.Module:
    return ast.parse(read_source(path))


def literal_aliases(path: str) -> dict[str, set[str]]:
    """Top-level `Name = Literal[...]` aliases, with nested aliases expanded."""
    raw: dict[str, list[ast.expr]] = {}
    for node in module(path).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Subscript) and getattr(value.value, "id", None) == "Literal":
                elements = value.slice.elts if isinstance(value.slice, ast.Tuple) else [value.slice]
                raw[node.targets[0].id] = elements

    def expand(name: str) -> set[str]:
        values: set[str] = set()
        for element in raw[name]:
            if isinstance(element, ast.Constant):
                values.add(element.value)
            elif isinstance(element, ast.Name):
                values |= expand(element.id)
        return values

    return {name: expand(name) for name in raw}


def class_fields(path: str, class_name: str) -> dict[str, ast.expr]:
    for node in module(path).body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return {
                statement.target.id: statement.annotation
                for statement in node.body
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
            }
    raise AssertionError(f"{class_name} not found in {path}")


def test_every_catalogue_method_string_is_a_speculative_method():
    methods = literal_aliases(SPECULATIVE)["SpeculativeMethod"]
    assert {"eagle", "eagle3", "mtp", "draft_model", "ngram", "suffix", "dflash", "dspark"} <= methods
    for method in all_methods():
        if method.vllm_method is not None:
            assert method.vllm_method in methods, f"{method.name}: {method.vllm_method!r} not in SpeculativeMethod"


def test_every_key_the_project_can_emit_is_a_speculative_config_field():
    fields = class_fields(SPECULATIVE, "SpeculativeConfig")
    emitted = set(ADVANCED_FIELDS) | set(RESERVED_FIELDS)
    for method in all_methods():
        emitted |= set(method.fixed_config)
    missing = sorted(emitted - set(fields))
    assert missing == [], f"not SpeculativeConfig fields in vLLM 0.33: {missing}"


def test_built_configs_use_only_speculative_config_fields():
    fields = set(class_fields(SPECULATIVE, "SpeculativeConfig"))
    for method in all_methods():
        for accelerator in method.accelerators:
            speculation = {"method": method.name}
            if method.accepts_draft_model:
                speculation["draftModel"] = {"name": "d", "revision": "r"}
            if method.k_max:
                speculation["numSpeculativeTokens"] = method.k_min
                speculation["schedule"] = [{"minBatchSize": 1, "maxBatchSize": 4, "numSpeculativeTokens": method.k_min}]
            if method.name == "ngram":
                speculation["promptLookup"] = {"min": 1, "max": 2}
            spec = parse_spec({"model": {"name": "t"}, "speculation": speculation, "hardware": {"accelerator": accelerator}})
            config = method.speculative_config(spec.speculation, accelerator) or {}
            assert set(config) <= fields, (method.name, set(config) - fields)


def _literal_values(annotation: ast.expr, aliases: dict[str, set[str]]) -> set[str]:
    values: set[str] = set()
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id in aliases:
            values |= aliases[node.id]
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "Literal":
            elements = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            values |= {element.value for element in elements if isinstance(element, ast.Constant)}
    return values


def test_advanced_enums_match_vllm_literals():
    aliases = literal_aliases(SPECULATIVE)
    fields = class_fields(SPECULATIVE, "SpeculativeConfig")
    for key, field in ADVANCED_FIELDS.items():
        if field.kind == "enum":
            assert set(field.choices) == _literal_values(fields[key], aliases), key


def test_advanced_value_kinds_match_vllm_annotations():
    fields = class_fields(SPECULATIVE, "SpeculativeConfig")
    expected = {"bool": "bool", "int": "int", "number": "float", "numberList": "list[float]"}
    for key, field in ADVANCED_FIELDS.items():
        annotation = ast.unparse(fields[key])
        if field.kind in expected:
            assert expected[field.kind] in annotation, f"{key}: {field.kind} vs vLLM {annotation}"


def test_attention_backend_pins_exist_and_the_flag_is_accepted():
    registry = read_source("vllm/v1/attention/backends/registry.py")
    enum_members = set(re.findall(r"^    ([A-Z0-9_]+) = ", registry[registry.index("class AttentionBackendEnum"):], re.M))
    assert '"--attention-backend"' in read_source("vllm/engine/arg_utils.py")
    pins = [
        support.engine_args for method in all_methods() for support in method.accelerators.values() if support.engine_args
    ]
    assert pins, "the catalogue should pin at least one ROCm backend"
    for args in pins:
        assert args[0] == "--attention-backend" and args[1] in enum_members, args


def _supports_non_causal(backend_file: str) -> bool:
    source = read_source(f"vllm/v1/attention/backends/{backend_file}.py")
    match = re.search(r"def supports_non_causal\(cls\) -> bool:\s+return (True|False)", source)
    assert match, backend_file
    return match.group(1) == "True"


def test_dflash_pin_supports_non_causal_attention_and_the_eagle3_pin_is_rocm_aiter():
    # DFlash drafts with non-causal attention: its pin must support it.
    assert _supports_non_causal("triton_attn")
    assert not _supports_non_causal("rocm_aiter_unified_attn")
    assert "ROCM_AITER_UNIFIED_ATTN" in read_source("vllm/platforms/rocm.py")


def test_dspark_needs_model_runner_v2_as_the_catalogue_says():
    source = read_source("vllm/config/vllm.py")
    assert "DSpark is implemented only by the V2 GPU model runner." in source
    assert "cpu" not in next(m for m in all_methods() if m.name == "dspark").accelerators
    assert set(ACCELERATORS) - {"cpu"} <= set(next(m for m in all_methods() if m.name == "dspark").accelerators)


def test_methods_without_a_model_default_their_model_in_vllm():
    # vLLM fills `model` itself for mtp, dspark, ngram and suffix when num_speculative_tokens is given.
    source = read_source(SPECULATIVE)
    for method in ("mtp", "dspark", "suffix"):
        assert f'self.method == "{method}"' in source
    assert 'self.model = "ngram"' in source and 'self.model = "suffix"' in source
