"""advanced.enable_adaptive_verification: accepted wherever vLLM runs it, refused with vLLM's reason elsewhere."""

from __future__ import annotations

import pytest

from specinfer.api import InvalidSpecError, parse_spec
from specinfer.api.adaptive_rules import conflicting_flag
from specinfer.operator.pure.config import OperatorConfig
from specinfer.operator.render import render
from specinfer.runtime.methods import ACCELERATORS, all_methods
from specinfer.runtime.methods.adaptive import CONFLICTS
from specinfer.runtime.methods.engine_truth import model_runner

pytestmark = pytest.mark.unit


def spec(method: str, accelerator: str, **advanced) -> dict:
    body: dict = {"model": {"name": "m"}, "hardware": {"accelerator": accelerator},
                  "speculation": {"method": method, "advanced": {"enable_adaptive_verification": True, **advanced}}}
    if method in ("eagle", "eagle3", "draftModel", "dflash"):
        body["speculation"]["draftModel"] = {"name": "d"}
    return body


PAIRS = [(m.name, a) for m in all_methods() if m.speculates for a in m.accelerators]


@pytest.mark.parametrize(("method", "accelerator"), PAIRS)
def test_it_is_accepted_exactly_where_vllm_runs_it_on_model_runner_v2(method, accelerator):
    """vLLM 0.33.0 turns it on for every drafter on Model Runner V2; V1 refuses it, vllm-ascend's vLLM lacks it."""
    runs = (ACCELERATORS[accelerator].engine.has_field("enable_adaptive_verification")
            and model_runner(method, accelerator) == "v2")
    try:
        parse_spec(spec(method, accelerator))
        accepted = True
    except InvalidSpecError as error:
        accepted = False
        assert "enable_adaptive_verification" in str(error)
    assert accepted == runs, (method, accelerator)


def test_every_flag_it_conflicts_with_is_refused_in_one_item_or_two():
    lora, pp = (next(c for c in CONFLICTS if c.setting.startswith(prefix))
                for prefix in ("--enable-lora", "--pipeline"))
    assert conflicting_flag(lora, ["--max-num-seqs", "8", "--enable-lora"])
    assert not conflicting_flag(lora, ["--enable-lora=false"])  # said false: nothing to refuse
    assert conflicting_flag(pp, ["-pp", "2"]) and conflicting_flag(pp, ["--pipeline-parallel-size=4"])
    assert not conflicting_flag(pp, ["-pp", "1"]) and not conflicting_flag(pp, ["--pipeline-parallel-size=1"])
    with pytest.raises(InvalidSpecError, match="pipeline parallelism"):
        parse_spec({**spec("eagle3", "nvidia"), "runtime": {"extraArgs": ["-pp", "2"]}})


def test_status_effective_says_when_it_is_on():
    body = {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u"}, "spec": spec("eagle3", "nvidia")}
    assert render(body, OperatorConfig()).effective_status().adaptive_verification is True
    body["spec"]["speculation"]["advanced"] = {"enable_adaptive_verification": False}
    assert render(body, OperatorConfig()).effective_status().adaptive_verification is None


def test_status_effective_says_what_the_cell_rests_on():
    """Nothing on GPUs has run here: the status says so (evidence source), as it says engine where it ran."""
    body = {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u"}, "spec": spec("eagle3", "nvidia")}
    assert render(body, OperatorConfig()).effective_status().evidence == "source"
    body["spec"] = {"model": {"name": "m"}, "hardware": {"accelerator": "cpu"},
                    "speculation": {"method": "ngram", "numSpeculativeTokens": 3}}
    assert render(body, OperatorConfig()).effective_status().evidence == "engine"
