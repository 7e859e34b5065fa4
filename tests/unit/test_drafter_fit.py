"""A drafter whose config does not fit its target is refused by preflight, naming the field and the cause."""

from __future__ import annotations

import json

import pytest

from specinfer.api import parse_spec
from specinfer.runtime.methods import get_method
from specinfer.runtime.pod.config import MisconfigurationError
from specinfer.runtime.pod.preflight import preflight

pytestmark = pytest.mark.unit


def drafter_misfit(method: str, target: dict, drafter: dict | None) -> str | None:
    """The method's own rule (its MethodSpec's drafter_fit); a method without one has nothing to check."""
    fit = get_method(method).drafter_fit
    return fit(target, drafter) if fit is not None else None

# The shapes of `specinfer models make`: a 2-layer target and the drafters written for it.
TARGET = {"hidden_size": 256, "vocab_size": 512, "num_hidden_layers": 2}
EAGLE = {"hidden_size": 256, "vocab_size": 512, "num_hidden_layers": 1}
EAGLE3 = {"hidden_size": 256, "vocab_size": 512, "draft_vocab_size": 512, "target_hidden_size": 256,
          "eagle_aux_hidden_state_layer_ids": [0, 1, 2],
          "eagle_config": {"use_aux_hidden_state": True, "eagle_aux_hidden_state_layer_ids": [0, 1, 2]}}
DFLASH = {"hidden_size": 256, "vocab_size": 512, "dflash_config": {"mask_token_id": 0, "target_layer_ids": [0, 1]}}


@pytest.mark.parametrize("method, drafter", [("eagle", EAGLE), ("eagle3", EAGLE3), ("dflash", DFLASH),
                                             ("draftModel", TARGET), ("mtp", None), ("ngram", None)])
def test_the_drafters_models_make_writes_fit(method, drafter):
    assert drafter_misfit(method, TARGET, drafter) is None


def test_every_method_that_loads_a_drafter_has_a_rule():
    for name in ("eagle", "eagle3", "dflash", "draftModel", "mtp"):
        assert get_method(name).drafter_fit is not None, name
    assert get_method("ngram").drafter_fit is None and get_method("none").drafter_fit is None


@pytest.mark.parametrize("method, drafter, cause", [
    ("eagle", {**EAGLE, "hidden_size": 128}, "hidden_size 128 does not match the target's hidden_size 256"),
    ("eagle", {**EAGLE, "vocab_size": 32000}, "vocab_size 32000 does not match the target's vocab_size 512"),
    ("eagle3", {**EAGLE3, "target_hidden_size": 4096}, "target_hidden_size 4096 does not match"),
    ("eagle3", {**EAGLE3, "draft_vocab_size": 600}, "draft_vocab_size 600 must be between 1 and"),
    ("eagle3", {**EAGLE3, "eagle_aux_hidden_state_layer_ids": [0, 1, 3]}, "name [3], outside the target's 0..2"),
    ("eagle3", {**EAGLE3, "eagle_aux_hidden_state_layer_ids": [1, 1, 2]}, "repeat an id"),
    ("eagle3", {**EAGLE3, "eagle_aux_hidden_state_layer_ids": [0, 2], "num_aux_hidden_states": 3},
     "are 2 states but num_aux_hidden_states is 3"),
    ("dflash", {**DFLASH, "dflash_config": {"target_layer_ids": [0, 2]}}, "name [3], outside"),
    ("dflash", {**DFLASH, "hidden_size": 512}, "hidden_size 512 does not match"),
    ("draftModel", {**TARGET, "vocab_size": 50000}, "vocab_size 50000 does not match"),
])
def test_a_misfit_names_the_key_and_both_values(method, drafter, cause):
    assert cause in (drafter_misfit(method, TARGET, drafter) or "")


def test_eagle3_layer_ids_are_read_where_vllm_reads_them():
    """Top-level first, else eagle_config's; without either, vLLM's default (2, n//2, n-3), which a
    2-layer target cannot satisfy."""
    nested_only = {key: value for key, value in EAGLE3.items() if key != "eagle_aux_hidden_state_layer_ids"}
    assert drafter_misfit("eagle3", TARGET, nested_only) is None
    bad_nested = {**nested_only, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [5, 6, 7]}}
    assert "outside" in drafter_misfit("eagle3", TARGET, bad_nested)
    no_ids = {key: value for key, value in nested_only.items() if key != "eagle_config"}
    assert "vLLM's default auxiliary layer ids [2, 1, -1] name [-1]" in drafter_misfit("eagle3", TARGET, no_ids)
    assert drafter_misfit("eagle3", {**TARGET, "num_hidden_layers": 32}, no_ids) is None  # (2, 16, 29)


def test_a_target_without_mtp_layers_cannot_serve_mtp():
    assert "carries no MTP layer" in drafter_misfit("mtp", {**TARGET, "num_nextn_predict_layers": 0}, None)
    assert drafter_misfit("mtp", {**TARGET, "num_nextn_predict_layers": 1}, None) is None
    multimodal = {"text_config": {**TARGET, "mtp_num_hidden_layers": 0}}
    assert "mtp_num_hidden_layers 0" in drafter_misfit("mtp", multimodal, None)


def test_hostile_configs_are_answered_not_raised():
    weird = {"hidden_size": "256", "vocab_size": True, "eagle_aux_hidden_state_layer_ids": ["a", None],
             "dflash_config": "no"}
    for method in ("eagle", "eagle3", "dflash", "draftModel", "mtp"):
        drafter_misfit(method, TARGET, weird)  # never raises
    assert "not all integers" in drafter_misfit("eagle3", TARGET, weird)


def write_model(directory, config):
    directory.mkdir()
    if config is not None:
        (directory / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return str(directory)


def spec(target: str, method: str, draft: str | None = None):
    speculation = {"method": method, **({"draftModel": {"name": draft}} if draft else {})}
    return parse_spec({"model": {"name": target}, "speculation": speculation, "hardware": {"accelerator": "cpu"}})


def test_preflight_refuses_a_misfit_drafter_naming_the_field(tmp_path):
    target = write_model(tmp_path / "target", TARGET)
    drafter = write_model(tmp_path / "head", {**EAGLE3, "target_hidden_size": 4096})
    with pytest.raises(MisconfigurationError) as raised:
        preflight(spec(target, "eagle3", drafter), engine_binary=False)
    assert raised.value.field == "spec.speculation.draftModel.name"
    assert f"the drafter {drafter} does not fit the target {target} (method eagle3)" in str(raised.value)
    assert "target_hidden_size 4096" in str(raised.value)
    preflight(spec(target, "eagle3", write_model(tmp_path / "good", EAGLE3)), engine_binary=False)


def test_preflight_refuses_an_mtp_target_without_mtp_layers(tmp_path):
    target = write_model(tmp_path / "target", {**TARGET, "num_nextn_predict_layers": 0})
    with pytest.raises(MisconfigurationError, match="spec.model.name: the target .* cannot serve method mtp"):
        preflight(spec(target, "mtp"), engine_binary=False)


def test_preflight_says_when_a_config_is_garbled_and_leaves_a_missing_one_to_vllm(tmp_path):
    target = write_model(tmp_path / "target", TARGET)
    with pytest.raises(MisconfigurationError, match="config.json cannot be read as JSON"):
        preflight(spec(target, "eagle", write_model(tmp_path / "garbled", "{not json")), engine_binary=False)
    with pytest.raises(MisconfigurationError, match="is not a JSON object"):
        preflight(spec(target, "eagle", write_model(tmp_path / "list", "[1, 2]")), engine_binary=False)
    preflight(spec(target, "eagle", write_model(tmp_path / "mistral-format", None)), engine_binary=False)
