"""Method auto: default candidates, what serves before and after a choice, and rendering of each."""

from __future__ import annotations

import copy

import pytest

from specinfer.api import InvalidSpecError, parse_spec
from specinfer.api.auto import candidates_of, default_candidates, serving_spec
from specinfer.operator.pure.config import OperatorConfig
from specinfer.operator.render import render
from specinfer.runtime.methods import ACCELERATORS, all_methods, get_method

pytestmark = pytest.mark.unit

EAGLE3_HEAD = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
AUTO = {
    "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
    "speculation": {"method": "auto", "candidates": [
        {"method": "ngram", "numSpeculativeTokens": 4},
        {"method": "eagle3", "draftModel": {"name": EAGLE3_HEAD}, "numSpeculativeTokens": 3},
    ]},
    "hardware": {"accelerator": "nvidia"},
    "tuning": {"mode": "auto"},
}


def auto_resource(status: dict | None = None, **speculation) -> dict:
    spec = copy.deepcopy(AUTO)
    spec["speculation"].update(speculation)
    out = {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
           "metadata": {"name": "llama", "namespace": "ml", "uid": "u-1", "generation": 1}, "spec": spec}
    if status is not None:
        out["status"] = status
    return out


def test_default_candidates_are_the_methods_that_say_so_and_run_there():
    for accelerator in ACCELERATORS:
        said = [m.name for m in all_methods() if m.auto_candidate and m.supports(accelerator)]
        assert [c.method for c in default_candidates(accelerator)] == said
        assert ("ngram" in said) == get_method("ngram").supports(accelerator)
        assert "suffix" not in said  # suffix needs arctic-inference, not in the stock images
    spec = parse_spec({**AUTO, "speculation": {"method": "auto"}})
    assert [c.display_name() for c in candidates_of(spec)] == ["ngram", "none"]


def test_no_speculation_is_always_a_candidate_once():
    spec = parse_spec({**AUTO, "speculation": {"method": "auto", "candidates": [{"method": "none"},
                                                                                {"method": "ngram"}]}})
    assert [c.display_name() for c in candidates_of(spec)] == ["ngram", "none"]


def test_initial_none_serves_no_speculation_and_tuning_waits():
    serving = serving_spec(parse_spec(AUTO), None)
    assert serving.speculation.method == "none"
    assert serving.tuning.mode == "observe"  # nothing to tune while nothing drafts


def test_initial_first_serves_the_first_candidate():
    spec = parse_spec({**AUTO, "speculation": {**AUTO["speculation"], "initial": "first"}})
    serving = serving_spec(spec, None)
    assert (serving.speculation.method, serving.speculation.num_speculative_tokens) == ("ngram", 4)
    assert serving.tuning.mode == "auto"


def test_the_selected_candidate_serves_with_its_own_settings():
    serving = serving_spec(parse_spec(AUTO), "eagle3")
    assert serving.speculation.method == "eagle3"
    assert serving.speculation.draft_model is not None and serving.speculation.draft_model.name == EAGLE3_HEAD
    assert serving.speculation.candidates is None


def test_a_selection_no_longer_listed_falls_back_to_initial():
    assert serving_spec(parse_spec(AUTO), "removed-since").speculation.method == "none"


def test_a_fixed_method_serves_as_written():
    fixed = {**AUTO, "speculation": {"method": "ngram"}}
    assert serving_spec(parse_spec(fixed), "eagle3").speculation.method == "ngram"


def test_render_serves_initial_then_the_selection():
    before = render(auto_resource(), OperatorConfig())
    assert before.effective_status().method == "none"
    after = render(auto_resource({"selection": {"candidate": "eagle3", "method": "eagle3"}}), OperatorConfig())
    effective = after.effective_status()
    assert (effective.method, effective.num_speculative_tokens) == ("eagle3", 3)
    assert before.config_hash != after.config_hash  # a method change is a rollout


def test_render_ignores_a_tuned_config_of_another_candidate():
    """status.tuning.applied written for n-gram before eagle3 was chosen must not switch the method back."""
    status = {"selection": {"candidate": "eagle3"},
              "tuning": {"applied": {"method": "ngram", "numSpeculativeTokens": 7}}}
    assert render(auto_resource(status), OperatorConfig()).effective_status().method == "eagle3"
    tuned = {"selection": {"candidate": "eagle3"},
             "tuning": {"applied": {"method": "eagle3", "numSpeculativeTokens": 5}}}
    assert render(auto_resource(tuned), OperatorConfig()).effective_status().num_speculative_tokens == 5


def test_a_hostile_selection_reads_as_unset():
    for selection in ({"candidate": 7}, "eagle3", {"candidate": ["eagle3"]}):
        assert render(auto_resource({"selection": selection}), OperatorConfig()).effective_status().method == "none"


def test_a_candidate_is_checked_as_a_fixed_method_at_its_index():
    bad = copy.deepcopy(AUTO)
    bad["hardware"] = {"accelerator": "ascend"}
    bad["speculation"]["candidates"][1]["numSpeculativeTokens"] = 16  # ascend caps K + 1 at 16
    with pytest.raises(InvalidSpecError) as caught:
        parse_spec(bad)
    assert caught.value.field_path.startswith("spec.speculation.candidates[1]")
    assert "at most 15 on spec.hardware.accelerator ascend" in str(caught.value)


def test_the_tuner_tunes_the_candidate_that_serves_and_lets_go_of_the_last_ones_config():
    from specinfer.operator.tuner.pure.target import read_target, switched_method

    stale = auto_resource({"selection": {"candidate": "eagle3"},
                           "tuning": {"applied": {"method": "ngram", "numSpeculativeTokens": 7}}})
    target = read_target(stale)
    assert target.auto and target.spec is not None and target.spec.speculation.method == "eagle3"
    assert "now serves eagle3: the config tuned for ngram no longer applies" in (switched_method(target) or "")
    fresh = auto_resource({"selection": {"candidate": "eagle3"},
                           "tuning": {"applied": {"method": "eagle3", "numSpeculativeTokens": 4}}})
    assert switched_method(read_target(fresh)) is None
    fixed = copy.deepcopy(stale)
    fixed["spec"]["speculation"] = {"method": "eagle3", "draftModel": {"name": EAGLE3_HEAD}}
    assert switched_method(read_target(fixed)) is None  # a fixed method's mismatch is applied_problem's to report
