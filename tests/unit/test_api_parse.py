"""parse_spec: defaults, the checks CEL cannot express (exact messages), RuntimeConfig, effective config."""

from __future__ import annotations

import pytest

from specinfer.api import (
    DEFAULT_TUNING_MODE,
    InvalidSpecError,
    SpeculationChoice,
    effective_spec,
    effective_speculation,
    parse_resource,
    parse_spec,
)
from specinfer.runtime.contract.runtime_config import parse_runtime_config
from specinfer.runtime.methods import ACCELERATORS, all_methods

pytestmark = pytest.mark.unit


def spec(**speculation):
    hardware = speculation.pop("hardware", {"accelerator": "nvidia"})
    tuning = speculation.pop("tuning", {})
    return {"model": {"name": "example/target"}, "speculation": speculation, "hardware": hardware, "tuning": tuning}


EAGLE3 = {"method": "eagle3", "draftModel": {"name": "example/head"}}


def refusal(obj) -> InvalidSpecError:
    with pytest.raises(InvalidSpecError) as caught:
        parse_spec(obj)
    return caught.value


def test_defaults_are_explicit_after_parsing():
    parsed = parse_spec({"model": {"name": "m"}, "speculation": {"method": "ngram"}})
    assert parsed.hardware.accelerator == "nvidia"
    assert parsed.runtime.engine == "vllm" and parsed.runtime.port == 8000
    assert parsed.tuning.mode == DEFAULT_TUNING_MODE == "observe"
    assert parsed.replicas == 1
    assert parsed.update_strategy == "Surge"


def test_json_round_trip_uses_camel_case():
    obj = spec(**EAGLE3, numSpeculativeTokens=4,
               schedule=[{"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 4}])
    parsed = parse_spec(obj)
    dumped = parsed.to_json()
    assert dumped["speculation"]["schedule"][0] == {"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 4}
    assert parse_spec(dumped) == parsed


def test_unknown_field_names_the_path():
    error = refusal({**spec(**EAGLE3), "replica": 2})
    assert error.field_path == "spec.replica"
    assert str(error) == "spec.replica is not a field of this API: remove it or check its spelling"


def test_update_strategy_is_surge_or_replace():
    assert parse_spec({**spec(**EAGLE3), "updateStrategy": "Replace"}).update_strategy == "Replace"
    error = refusal({**spec(**EAGLE3), "updateStrategy": "Recreate"})
    assert error.field_path == "spec.updateStrategy"
    assert "Surge" in str(error) and "Replace" in str(error)


def test_draft_tensor_parallel_size_must_be_one_or_the_targets():
    error = refusal(spec(**EAGLE3, advanced={"draft_tensor_parallel_size": 3}, hardware={"count": 4}))
    assert str(error) == (
        "spec.speculation.advanced.draft_tensor_parallel_size must be 1 or the target's tensor parallel size 4"
    )


def test_synthetic_rejection_needs_exactly_one_target():
    error = refusal(spec(**EAGLE3, advanced={"rejection_sample_method": "synthetic"}))
    assert str(error) == (
        "spec.speculation.advanced.rejection_sample_method synthetic needs exactly one of "
        "synthetic_acceptance_rates or synthetic_acceptance_length "
        "(vLLM 0.33.0 refuses it when it starts: vllm/config/speculative.py:607)"
    )


def test_synthetic_rates_need_one_rate_per_position_and_must_not_increase():
    error = refusal(spec(**EAGLE3, numSpeculativeTokens=3,
                         advanced={"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.5, 0.8]}))
    assert [message for _, message in error.problems] == [
        "spec.speculation.advanced.synthetic_acceptance_rates needs one rate per draft position (3), got 2 "
        "(vLLM 0.33.0 refuses it when it starts: vllm/config/speculative.py:615)",
        "spec.speculation.advanced.synthetic_acceptance_rates must be non-increasing "
        "(vLLM 0.33.0 refuses it when it starts: vllm/config/speculative.py:622)",
    ]


def test_synthetic_length_must_fit_k_and_the_default_k_is_named():
    error = refusal(spec(**EAGLE3, advanced={"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 5}))
    assert str(error) == (
        "spec.speculation.advanced.synthetic_acceptance_length must be between 1 and K + 1 = 4; K 3 is the default "
        "of method eagle3 (vLLM 0.33.0 refuses it when it starts: vllm/config/speculative.py:628)"
    )


def test_cpu_tensor_parallel_size_is_one_whatever_the_count():
    """vLLM on CPU runs tensor parallel size 1 with count 2 (runtime/contract/argv.py), so a draft TP of 2 is
    refused."""
    cpu = spec(**EAGLE3, advanced={"draft_tensor_parallel_size": 2}, hardware={"accelerator": "cpu", "count": 2})
    assert refusal(cpu).field_path == "spec.speculation.advanced.draft_tensor_parallel_size"
    assert "tensor parallel size 1" in str(refusal(cpu))
    from specinfer.runtime.contract.argv import vllm_argv

    served = parse_spec(spec(**EAGLE3, advanced={"draft_tensor_parallel_size": 1},
                             hardware={"accelerator": "cpu", "count": 2}))
    argv = vllm_argv(served)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "1"  # what validation assumed is what runs
    gpu = spec(**EAGLE3, advanced={"draft_tensor_parallel_size": 2}, hardware={"accelerator": "nvidia", "count": 2})
    assert parse_spec(gpu).hardware.tensor_parallel() == 2
    explicit = spec(**EAGLE3, advanced={"draft_tensor_parallel_size": 2},
                    hardware={"accelerator": "cpu", "count": 2, "tensorParallelSize": 2})
    assert parse_spec(explicit).hardware.tensor_parallel() == 2


def test_heterogeneous_vocab_needs_greedy_drafting():
    error = refusal(spec(method="draftModel", draftModel={"name": "d"},
                         advanced={"use_heterogeneous_vocab": True, "draft_sample_method": "probabilistic"}))
    assert str(error) == "spec.speculation.advanced.use_heterogeneous_vocab needs draft_sample_method greedy"


def test_tuning_minimum_beyond_the_methods_maximum():
    error = refusal(spec(method="mtp", tuning={"minNumSpeculativeTokens": 9}))
    assert str(error) == "spec.tuning.minNumSpeculativeTokens must be <= 8, the largest K of method mtp on nvidia"


def test_strict_types_in_advanced():
    error = refusal(spec(**EAGLE3, advanced={"enforce_eager": "yes"}))
    assert error.field_path == "spec.speculation.advanced.enforce_eager"


def test_every_supported_pair_parses_and_unsupported_ones_do_not():
    for method in all_methods():
        for accelerator in ACCELERATORS:
            obj = spec(method=method.name, hardware={"accelerator": accelerator})
            if method.needs_draft_model:
                obj["speculation"]["draftModel"] = {"name": "d"}
            if method.supports(accelerator):
                assert parse_spec(obj).speculation.method == method.name
            else:
                assert "is not supported on spec.hardware.accelerator" in str(refusal(obj))


def test_resource_and_runtime_config():
    resource = parse_resource({"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
                               "metadata": {"name": "a"}, "spec": spec(**EAGLE3)})
    assert resource.spec.speculation.draft_model.name == "example/head"
    config = parse_runtime_config({"apiVersion": "specinfer.io/v1alpha1", "kind": "RuntimeConfig", "name": "a",
                                   "namespace": "n", "spec": resource.spec.to_json()})
    assert config.spec == resource.spec
    with pytest.raises(InvalidSpecError):
        parse_runtime_config({"kind": "RuntimeConfig", "name": "a", "namespace": "n", "spec": spec(method="eagle3")})


def test_effective_k_defaults_from_the_catalogue_and_is_capped_on_ascend():
    assert effective_speculation(parse_spec(spec(method="suffix"))).num_speculative_tokens == 24
    ascend = parse_spec(spec(method="suffix", hardware={"accelerator": "ascend"}))
    assert effective_speculation(ascend).num_speculative_tokens == 15


def test_effective_merges_the_applied_tuning():
    base = parse_spec(spec(**EAGLE3, numSpeculativeTokens=4))
    tuned = effective_speculation(base, {"numSpeculativeTokens": 2, "schedule": [
        {"minBatchSize": 1, "maxBatchSize": 16, "numSpeculativeTokens": 2},
        {"minBatchSize": 17, "maxBatchSize": 17, "numSpeculativeTokens": 0},
    ]})
    assert tuned.num_speculative_tokens == 2
    assert tuned.schedule == [(1, 16, 2), (17, 17, 0)]
    assert tuned.speculative_config["num_speculative_tokens_per_batch_size"] == [[1, 16, 2], [17, 17, 0]]
    assert base.speculation.num_speculative_tokens == 4  # the spec itself is untouched


def test_applied_k_zero_means_no_speculative_config():
    base = parse_spec(spec(**EAGLE3, numSpeculativeTokens=4))
    off = effective_speculation(base, SpeculationChoice(num_speculative_tokens=0))
    assert off.method == "none" and off.speculative_config is None
    assert effective_spec(base, {"numSpeculativeTokens": 0}).speculation.draft_model is None


def test_an_invalid_applied_choice_is_refused():
    base = parse_spec(spec(**EAGLE3, numSpeculativeTokens=4))
    with pytest.raises(ValueError):
        effective_spec(base, {"numSpeculativeTokens": 40})


def test_every_failing_rule_is_reported_not_just_the_first():
    error = refusal(spec(method="eagle3", numSpeculativeTokens=17,
                         schedule=[{"minBatchSize": 2, "maxBatchSize": 8, "numSpeculativeTokens": 20}]))
    paths = [path for path, _ in error.problems]
    assert paths == ["spec.speculation.draftModel", "spec.speculation.numSpeculativeTokens",
                     "spec.speculation.schedule", "spec.speculation.schedule"]


@pytest.mark.parametrize("method", all_methods(), ids=lambda m: m.name)
def test_catalogue_bounds_and_draft_rules_per_method(method):
    draft = {"draftModel": {"name": "d"}} if method.accepts_draft_model else {}
    assert parse_spec(spec(method=method.name, numSpeculativeTokens=method.k_max, **draft))
    too_many = refusal(spec(method=method.name, numSpeculativeTokens=method.k_max + 1, **draft))
    assert too_many.field_path == "spec.speculation.numSpeculativeTokens"
    assert f"for method {method.name}" in str(too_many)
    if method.draft_model == "required":
        assert "is required for method" in str(refusal(spec(method=method.name)))
    if method.draft_model == "forbidden":
        assert "must not be set for method" in str(refusal(spec(method=method.name, draftModel={"name": "d"})))
