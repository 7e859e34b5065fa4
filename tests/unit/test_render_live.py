"""Rendering an engine retuned in place (issue 22): a choice within the engine's envelope changes the
published schedule only -- the pod template, its hash and the pods stay; anything else rolls out."""

from __future__ import annotations

import copy
import json

import pytest

from specinfer.api import parse_spec
from specinfer.operator.pure.config import OperatorConfig
from specinfer.operator.render import render
from specinfer.runtime.contract.live_schedule import SCHEDULER_CLASS
from specinfer.runtime.contract.live_schedule.envelope import live_envelope, own_ranges, why_not_in_place
from specinfer.runtime.contract.live_schedule.published import parse_published

pytestmark = pytest.mark.unit

BASE = {
    "apiVersion": "specinfer.io/v1alpha1",
    "kind": "SpeculativeInference",
    "metadata": {"name": "tiny", "namespace": "ml", "uid": "u-1"},
    "spec": {
        "model": {"name": "/models/target"},
        "speculation": {"method": "draftModel", "draftModel": {"name": "/models/draft"}, "numSpeculativeTokens": 3},
        "hardware": {"accelerator": "cpu"},
        "runtime": {"engine": "vllm"},
        "tuning": {"mode": "auto", "maxNumSpeculativeTokens": 4},
    },
}


def resource(applied: dict | None = None, **spec_patch) -> dict:
    out = copy.deepcopy(BASE)
    out["spec"].update(spec_patch)
    if applied is not None:
        out["status"] = {"tuning": {"applied": applied}}
    return out


def published(rendering) -> tuple[tuple[int, int, int], ...]:
    configmap = next(m for m in rendering.manifests if m["metadata"]["name"] == "tiny-schedule")
    return parse_published(configmap["data"]["schedule.json"], max_k=64).ranges


def template(rendering) -> dict:
    return rendering.manifest("Deployment")["spec"]["template"]


# what the BASE spec's engine runs before any tuning: its K=3, and K=0 above the crossover the tuner's
# default prior (an 8B target on an H100) predicts for a draft model at K=3
STARTUP = ((1, 166, 3), (167, 65536, 0))


SCHEDULE = {"numSpeculativeTokens": 4, "schedule": [
    {"minBatchSize": 1, "maxBatchSize": 4, "numSpeculativeTokens": 4},
    {"minBatchSize": 5, "maxBatchSize": 64, "numSpeculativeTokens": 0}]}


@pytest.mark.parametrize("applied", [{"numSpeculativeTokens": 1}, {"numSpeculativeTokens": 4}, SCHEDULE])
def test_a_choice_within_the_envelope_changes_only_the_published_schedule(applied):
    before, after = render(resource(), OperatorConfig()), render(resource(applied), OperatorConfig())
    assert template(after) == template(before)
    assert after.config_hash == before.config_hash
    assert after.manifest("ConfigMap") == before.manifest("ConfigMap")  # the RuntimeConfig too
    assert published(before) == STARTUP
    assert published(after) != published(before)
    effective = after.effective_status()
    assert effective.live_schedule.digest != before.effective_status().live_schedule.digest
    assert effective.live_schedule.max_num_speculative_tokens == 4


def test_the_engine_starts_with_the_envelope_and_follows_the_mounted_directory():
    rendering = render(resource(), OperatorConfig())
    config = json.loads(rendering.manifest("ConfigMap")["data"]["runtime.json"])
    assert config["liveSchedule"]["maxNumSpeculativeTokens"] == 4
    assert config["spec"]["speculation"]["numSpeculativeTokens"] == 4  # room for the tuner
    assert config["spec"]["speculation"]["schedule"] == [  # the spec's own K at start, none above the crossover
        {"minBatchSize": s, "maxBatchSize": e, "numSpeculativeTokens": k} for s, e, k in STARTUP]
    command = template(rendering)["metadata"]["annotations"]["specinfer.io/engine-command"]
    assert f"--scheduler-cls {SCHEDULER_CLASS}" in command
    pod = template(rendering)["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "live-schedule")
    assert volume == {"name": "live-schedule", "configMap": {"name": "tiny-schedule"}}  # every key, as a directory
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "live-schedule")
    assert "subPath" not in mount  # a subPath mount is never updated by the kubelet
    assert config["liveSchedule"]["file"].startswith(mount["mountPath"] + "/")


@pytest.mark.parametrize(("applied", "why"), [
    ({"numSpeculativeTokens": 0}, "speculation off: no drafter"),
    ({"method": "ngram", "numSpeculativeTokens": 3}, "another method"),
])
def test_what_the_envelope_cannot_hold_rolls_out(applied, why):
    before, after = render(resource(), OperatorConfig()), render(resource(applied), OperatorConfig())
    assert after.config_hash != before.config_hash, why
    assert after.live is None
    # the schedule ConfigMap stays (the children are the same set whatever the tuner chose), unmounted
    assert published(after) == STARTUP
    assert "live-schedule" not in json.dumps(template(after))


@pytest.mark.parametrize(("patch", "reason"), [
    ({"tuning": {"mode": "observe"}}, "tuning mode observe"),
    ({"speculation": {"method": "none"}, "tuning": {"mode": "off"}}, "tuning mode off"),
    ({"speculation": {"method": "suffix"}}, "Model Runner V1"),
    ({"runtime": {"engine": "vllm", "extraArgs": ["--data-parallel-size", "2"]}}, "data parallelism"),
])
def test_specs_that_are_not_retuned_in_place_render_as_before(patch, reason):
    spec = parse_spec({**BASE["spec"], **patch})
    assert reason in (why_not_in_place(spec) or "")
    rendering = render(resource(**patch), OperatorConfig())
    assert rendering.live is None
    assert SCHEDULER_CLASS not in json.dumps(rendering.manifests)


def test_model_runner_v2_starts_with_every_k_so_its_cuda_graphs_cover_them():
    spec = parse_spec({**BASE["spec"], "hardware": {"accelerator": "nvidia"},
                       "speculation": {"method": "eagle3", "draftModel": {"name": "d"}, "numSpeculativeTokens": 3}})
    envelope = live_envelope(spec)
    assert envelope is not None and envelope.model_runner == "v2"
    rendering = render({**BASE, "spec": spec.model_dump(by_alias=True, exclude_none=True)}, OperatorConfig())
    startup = json.loads(rendering.manifest("ConfigMap")["data"]["runtime.json"])["spec"]["speculation"]["schedule"]
    assert {r["numSpeculativeTokens"] for r in startup} == set(range(envelope.max_k + 1))
    # what runs from the first step is the spec's K, and no drafts above the predicted crossover
    assert published(rendering) == own_ranges(spec, envelope) == ((1, 194, 3), (195, 65536, 0))
    assert [r["numSpeculativeTokens"] for r in startup if r["minBatchSize"] > envelope.max_k + 1] == [3, 0]


def test_the_engine_starts_drafting_less_above_the_predicted_crossover():
    """Issue 43: an in-place engine starts with its spec's K where drafting pays and the cheapest K above the
    crossover its prior predicts -- K = 0 where the tuner may switch drafting off, else the tuning minimum --
    so a peak met at start-up does not run the tuning maximum; the tuner reads that as the config in force."""
    from specinfer.operator.tuner.pure.target import spec_config

    eagle3 = {"method": "eagle3", "draftModel": {"name": "d"}, "numSpeculativeTokens": 3}
    on_gpu = parse_spec({**BASE["spec"], "hardware": {"accelerator": "nvidia"}, "speculation": eagle3})
    starts = own_ranges(on_gpu, live_envelope(on_gpu))
    assert starts[0][2] == 3 and starts[-1][2] == 0 and 100 < starts[-1][0] < 256
    assert spec_config(on_gpu).dense(256)[1:] == [k for s, e, k in starts for _ in range(s, min(e, 256) + 1)]
    floor = parse_spec({**on_gpu.model_dump(by_alias=True, exclude_none=True),
                        "tuning": {"mode": "auto", "minNumSpeculativeTokens": 1}})
    assert [k for _, _, k in own_ranges(floor, live_envelope(floor))] == [3, 1]  # the tuning minimum, not off
    # a spec schedule that ends below the crossover: vLLM runs the batch sizes past it at its last K, so the
    # split is searched there too
    written = parse_spec({**on_gpu.model_dump(by_alias=True, exclude_none=True), "speculation": {
        **eagle3, "numSpeculativeTokens": 4, "schedule": [
            {"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 4},
            {"minBatchSize": 9, "maxBatchSize": 64, "numSpeculativeTokens": 3}]}})
    ranges = own_ranges(written, live_envelope(written))
    assert ranges[:2] == ((1, 8, 4), (9, ranges[2][0] - 1, 3)) and ranges[2][2] == 0 and 64 < ranges[2][0] < 256
    # where no split is found, the spec's schedule stays as written (its digest and the pods' hash with it)
    floored = parse_spec({**written.model_dump(by_alias=True, exclude_none=True),
                          "tuning": {"mode": "auto", "minNumSpeculativeTokens": 3}})
    assert own_ranges(floored, live_envelope(floored)) == ((1, 8, 4), (9, 64, 3))
    # a spec that is not retuned in place renders as written
    observed = parse_spec({**on_gpu.model_dump(by_alias=True, exclude_none=True), "tuning": {"mode": "observe"}})
    assert spec_config(observed).schedule is None


# -- a drafter that drafts its startup K on every step (issue 42) ---------------------------------------------

GPU_DRAFT_MODEL = {"hardware": {"accelerator": "nvidia"}, "tuning": {"mode": "auto", "maxNumSpeculativeTokens": 8}}


def with_status(applied: dict | None, running: int | None, method: str = "draftModel") -> dict:
    out = resource(applied, **GPU_DRAFT_MODEL)
    if running is not None:
        out.setdefault("status", {})["effective"] = {"method": method,
                                                     "liveSchedule": {"maxNumSpeculativeTokens": running,
                                                                      "digest": "d", "configMap": "tiny-schedule"}}
    return out


def test_a_draft_model_on_model_runner_v2_starts_at_the_k_in_force_not_the_tuning_maximum():
    """vLLM 0.33.0's StandaloneARSpeculator drafts the startup K every step (vllm#51510): started at the
    tuning maximum it would pay eight draft passes whatever the published schedule."""
    rendering = render(with_status(None, None), OperatorConfig())
    config = json.loads(rendering.manifest("ConfigMap")["data"]["runtime.json"])
    assert config["liveSchedule"]["maxNumSpeculativeTokens"] == 3  # the spec's own K, not 8
    assert rendering.live is not None and rendering.live.envelope.drafts_max_k
    # an EAGLE-3 head follows the step's K: its envelope stays the tuning maximum
    eagle = with_status(None, None)
    eagle["spec"]["speculation"]["method"] = "eagle3"
    assert render(eagle, OperatorConfig()).live.envelope.max_k == 8


def test_the_envelope_is_the_largest_k_in_force_and_another_one_rolls_out():
    """Issue 43: in place a schedule keeps the envelope somewhere and lowers what is verified elsewhere; a
    config with a smaller largest K rolls out to draft less on every step, a larger one to draft more."""
    started = render(with_status(None, None), OperatorConfig())
    kept = render(with_status({"numSpeculativeTokens": 3, "schedule": [
        {"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 3},
        {"minBatchSize": 9, "maxBatchSize": 64, "numSpeculativeTokens": 1}]}, 3), OperatorConfig())
    assert kept.config_hash == started.config_hash and kept.live.envelope.max_k == 3
    assert published(kept) == ((1, 8, 3), (9, 64, 1))  # verification lowered at 9-64; the engine still drafts 3
    lower = render(with_status({"numSpeculativeTokens": 2}, 3), OperatorConfig())
    assert lower.config_hash != started.config_hash and lower.live.envelope.max_k == 2  # drafts 2: new pods
    larger = render(with_status({"numSpeculativeTokens": 5}, 3), OperatorConfig())
    assert larger.config_hash != started.config_hash and larger.live.envelope.max_k == 5
    # speculation off keeps nothing to envelope; what runs next starts at its own largest K
    off = render(with_status({"numSpeculativeTokens": 0}, 5), OperatorConfig())
    assert off.live is None
    # an envelope recorded for another method says nothing about this one
    other = render(with_status({"numSpeculativeTokens": 2}, 5, method="eagle3"), OperatorConfig())
    assert other.live.envelope.max_k == 2


def test_a_rollout_away_from_the_schedule_keeps_what_the_replaced_pods_follow():
    """Issue 43: speculation off starts pods that do not read the schedule; the pods they replace follow it until
    they are gone, so the ConfigMap keeps the one published now -- and the spec's own where none valid is."""
    tuned = '{"digest":"x","kind":"LiveSchedule","schedule":[[1,8,3],[9,65536,1]]}'
    from specinfer.runtime.contract.live_schedule.published import published_text
    now = published_text(((1, 8, 3), (9, 65536, 1)))
    off = resource({"numSpeculativeTokens": 0})
    assert published(render(off, OperatorConfig(), published_now=now)) == ((1, 8, 3), (9, 65536, 1))
    assert published(render(off, OperatorConfig())) == STARTUP  # nothing published yet
    for hostile in (tuned, "not json", '{"kind":"LiveSchedule","schedule":[[1,4,99]]}', "", "[" * 60000):
        assert published(render(off, OperatorConfig(), published_now=hostile)) == STARTUP
    # in place the tuner's choice is published, whatever stood before
    assert published(render(resource({"numSpeculativeTokens": 2}), OperatorConfig(), published_now=now)) == (
        (1, 65536, 2),)


def test_an_ascend_engine_is_not_retuned_in_place():
    eagle3 = {"method": "eagle3", "draftModel": {"name": "d"}, "numSpeculativeTokens": 3}
    spec = parse_spec({**BASE["spec"], "speculation": eagle3, "hardware": {"accelerator": "ascend"}})
    assert "replaces vLLM's scheduler" in (why_not_in_place(spec) or "")
    simulated = parse_spec({**BASE["spec"], "speculation": eagle3, "hardware": {"accelerator": "ascend"},
                            "runtime": {"engine": "simulator"}})
    assert why_not_in_place(simulated) is None  # the simulator follows the schedule itself
    # a draft model there drafts and verifies its startup K: no schedule at all
    draft = parse_spec({**BASE["spec"], "hardware": {"accelerator": "ascend"}, "runtime": {"engine": "simulator"}})
    assert "drops it" in (why_not_in_place(draft) or "")


def test_the_envelope_after_a_change_is_what_the_operator_renders_next():
    """LiveEnvelope.after (what a bench engine runs after a change) agrees with rendering: in place keeps it, a
    larger K rolls out to that K for a drafter that drafts its startup K, to nothing new for the others."""
    started = render(with_status(None, None), OperatorConfig()).live.envelope
    assert started.after("draftModel", [3, 1]) == started
    assert started.after("draftModel", [2]).max_k == 2 == render(with_status({"numSpeculativeTokens": 2}, 3),
                                                                  OperatorConfig()).live.envelope.max_k
    grown = started.after("draftModel", [5, 5, 0])
    assert grown.max_k == 5 == render(with_status({"numSpeculativeTokens": 5}, 3), OperatorConfig()).live.envelope.max_k
    eagle = with_status(None, None)
    eagle["spec"]["speculation"]["method"] = "eagle3"
    fixed = render(eagle, OperatorConfig()).live.envelope
    assert fixed.after("eagle3", [12]) == fixed  # beyond the tuning maximum: not an envelope of its own


def test_the_tuners_adaptive_verification_rolls_out_and_status_says_so():
    """Issue 43: the tuner's choice of vLLM's adaptive verification lands in status.tuning.applied like K does;
    it is a setting of the engine's start (new pods), and status.effective says when it is on."""
    from specinfer.api import InvalidSpecError
    from specinfer.operator.tuner.pure.convert import adaptive_choice, config_of
    from specinfer.operator.tuner.pure.target import read_target

    eagle = resource(None, hardware={"accelerator": "nvidia"},
                     speculation={"method": "eagle3", "draftModel": {"name": "d"}, "numSpeculativeTokens": 3})
    started = render(eagle, OperatorConfig())
    eagle["status"] = {"tuning": {"applied": {"numSpeculativeTokens": 3, "adaptiveVerification": True}}}
    adaptive = render(eagle, OperatorConfig())
    assert adaptive.config_hash != started.config_hash and adaptive.live is not None  # still retuned in place
    config = json.loads(adaptive.manifest("ConfigMap")["data"]["runtime.json"])
    assert config["spec"]["speculation"]["advanced"]["enable_adaptive_verification"] is True  # vLLM's field name
    assert adaptive.effective_status().adaptive_verification is True
    assert started.effective_status().adaptive_verification is None
    target = read_target(eagle)
    assert config_of(target.tuning_status.applied).adaptive
    assert adaptive_choice(target.spec, config_of(target.tuning_status.applied)) is True
    assert adaptive_choice(target.spec, config_of(target.tuning_status.applied).model_copy(
        update={"adaptive_verification": False})) is None  # what the spec says: nothing to state
    # where vLLM refuses it (Model Runner V1 on the CPU) the renderer refuses the applied config
    on_cpu = resource({"numSpeculativeTokens": 3, "adaptiveVerification": True})
    with pytest.raises(InvalidSpecError, match="status.tuning.applied"):
        render(on_cpu, OperatorConfig())
