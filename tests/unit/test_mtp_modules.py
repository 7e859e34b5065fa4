"""spec.speculation.mtpModules: the checkpoint's MTP module count decides how vLLM 0.33.0's Model Runner V2
drafts (one module: TargetDependentARSpeculator follows the schedule; several: MultiModuleMTPSpeculator drafts
the startup K every step), so a stated count lets the tuner retune MTP in place, and lets admission and the
tuner check vLLM's rule that a K above the count be a multiple of it."""

from __future__ import annotations

import pytest

from specinfer.api import parse_spec
from specinfer.api.errors import InvalidSpecError
from specinfer.operator.tuner.pure.target import TargetError, tuning_input
from specinfer.runtime.contract.live_schedule.envelope import live_envelope
from specinfer.runtime.contract.runtime_config import RuntimeConfig
from specinfer.runtime.methods.drafters import ASCEND_PROPOSER, MULTI_MODULE_MTP_V2, TARGET_DEPENDENT_AR_V2
from specinfer.runtime.methods.engine_truth import drafting, mtp_k_accepted
from specinfer.runtime.pod.sim_from_runtime_config import simulator_settings
from specinfer.runtime.sim.engine import Engine

pytestmark = pytest.mark.unit


def spec(modules: int | None = None, *, k: int = 1, accelerator: str = "nvidia", engine: str = "simulator",
         method: str = "mtp", max_k: int = 3):
    speculation: dict = {"method": method, "numSpeculativeTokens": k}
    if modules is not None:
        speculation["mtpModules"] = modules
    if method == "eagle3":
        speculation["draftModel"] = {"name": "org/head"}
    return parse_spec({"model": {"name": "org/moe"}, "speculation": speculation,
                       "hardware": {"accelerator": accelerator}, "runtime": {"engine": engine},
                       "tuning": {"mode": "auto", "maxNumSpeculativeTokens": max_k}})


def test_one_stated_module_follows_the_schedule_and_an_unstated_count_is_priced_as_several():
    assert drafting("mtp", "nvidia", mtp_modules=1) == TARGET_DEPENDENT_AR_V2
    assert drafting("mtp", "nvidia") == drafting("mtp", "nvidia", mtp_modules=2) == MULTI_MODULE_MTP_V2
    # vllm-ascend's proposer drafts its startup K whatever the checkpoint: the count changes nothing there
    assert drafting("mtp", "ascend", mtp_modules=1) == drafting("mtp", "ascend") == ASCEND_PROPOSER


def test_one_module_is_retuned_in_place_up_to_the_tuning_maximum():
    one, unstated = live_envelope(spec(1)), live_envelope(spec())
    assert one is not None and unstated is not None
    assert (one.max_k, one.drafts_max_k) == (3, False)       # started at the maximum, drafts the schedule's K
    assert (unstated.max_k, unstated.drafts_max_k) == (1, True)  # the K in force: every raise rolls out
    assert tuning_input(spec(1)).in_place_max_k == 3
    assert tuning_input(spec(1)).cost_prior.drafted_k == "scheduled"
    assert tuning_input(spec()).cost_prior.drafted_k == "startup"


@pytest.mark.parametrize(("modules", "k", "accepted"), [
    (1, 5, True), (2, 2, True), (2, 3, False), (2, 4, True), (3, 4, False), (3, 6, True), (None, 7, True)])
def test_vllms_rule_for_a_k_above_the_module_count(modules, k, accepted):
    assert mtp_k_accepted(k, modules) is accepted


def test_admission_refuses_a_k_vllm_would_refuse_when_it_starts_and_the_field_on_another_method():
    with pytest.raises(InvalidSpecError, match="must be a multiple of it"):
        spec(2, k=3)
    assert spec(2, k=4).speculation.mtp_modules == 2
    with pytest.raises(InvalidSpecError, match="applies only to method mtp"):
        spec(1, method="eagle3")


def bounds(modules: int | None, k: int, low: int | None, high: int) -> tuple[int, int]:
    resource = spec(modules, k=k, max_k=high)
    if low is not None:
        resource = resource.model_copy(update={"tuning": resource.tuning.model_copy(
            update={"min_num_speculative_tokens": low})})
    built = tuning_input(resource)
    return built.k_min, built.k_max


def test_the_tuner_keeps_to_the_ks_vllm_starts():
    assert bounds(2, 1, None, 5) == (1, 2)  # 3 is refused: the range stops below it
    assert bounds(1, 1, None, 5) == (1, 5)
    assert bounds(None, 1, None, 5) == (1, 5)  # unstated: vLLM is the judge when it starts
    assert bounds(2, 4, 3, 5) == (4, 4)  # a floor vLLM refuses (3) is not a K the tuner may choose
    assert bounds(3, 6, 4, 8) == (6, 6)
    with pytest.raises(TargetError, match="mtpModules 4"):
        bounds(4, 4, 5, 7)


def test_the_simulated_checkpoint_has_the_modules_the_spec_states():
    def settings(modules: int | None):
        return simulator_settings(RuntimeConfig(name="moe", namespace="ml", spec=spec(modules)))

    assert settings(1).mtp_modules == 1
    assert Engine(settings(1)).drafting == TARGET_DEPENDENT_AR_V2
    assert Engine(settings(None)).drafting == MULTI_MODULE_MTP_V2
