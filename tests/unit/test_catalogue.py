"""The method catalogue: registry behaviour, speculative-config JSON and `specinfer methods`."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from specinfer.api import parse_spec
from specinfer.runtime.methods import ACCELERATORS, METHOD_NAMES, MethodSpec, UnknownMethodError, all_methods, get_method, register
from specinfer.runtime.methods.cli import methods_command

pytestmark = pytest.mark.unit


def speculation(method_name: str, accelerator: str = "nvidia", **extra):
    method = get_method(method_name)
    obj = {"method": method_name, **extra}
    if method.needs_draft_model:
        obj.setdefault("draftModel", {"name": "example/draft", "revision": "main"})
    return parse_spec({"model": {"name": "t"}, "speculation": obj, "hardware": {"accelerator": accelerator}}).speculation


def test_spec_method_names_are_the_api_enum():
    assert METHOD_NAMES == ("none", "eagle", "eagle3", "mtp", "draftModel", "ngram", "suffix", "dflash", "dspark")


def test_duplicate_registration_is_refused():
    before = all_methods()
    with pytest.raises(ValueError, match="already registered"):
        register(get_method("eagle3"))
    assert all_methods() == before


def test_unknown_accelerator_and_bad_default_are_refused():
    with pytest.raises(ValueError, match="unknown accelerators"):
        register(MethodSpec("x", "x", "forbidden", "none", 1, 2, 1, "x", accelerators={"tpu": None}))
    with pytest.raises(ValueError, match="k_default"):
        register(MethodSpec("y", "y", "forbidden", "none", 1, 2, 5, "y"))
    assert "x" not in METHOD_NAMES and all(m.name not in ("x", "y") for m in all_methods())


def test_unknown_method_lists_the_known_ones():
    with pytest.raises(UnknownMethodError) as caught:
        get_method("medusa")
    assert str(caught.value) == (
        "unknown speculative-decoding method 'medusa'; known methods: none, eagle, eagle3, mtp, draftModel, "
        "ngram, suffix, dflash, dspark"
    )


@pytest.mark.parametrize("method", all_methods(), ids=lambda m: m.name)
def test_speculative_config_per_supported_accelerator(method):
    for accelerator in method.accelerators:
        config = method.speculative_config(speculation(method.name, accelerator), accelerator)
        if method.vllm_method is None:
            assert config is None
            continue
        assert config["method"] == method.vllm_method
        assert config["num_speculative_tokens"] == min(method.k_default, ACCELERATORS[accelerator].max_k)
        assert ("model" in config) == method.needs_draft_model
        if method.needs_draft_model:
            assert config["revision"] == "main"


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


def test_dspark_draft_is_optional_and_mtp_never_names_a_model():
    assert "model" not in get_method("dspark").speculative_config(speculation("dspark"), "nvidia")
    with_draft = speculation("dspark", draftModel={"name": "deepseek-ai/dspark_qwen3_8b_block7"})
    assert get_method("dspark").speculative_config(with_draft, "nvidia")["model"] == "deepseek-ai/dspark_qwen3_8b_block7"
    assert "model" not in get_method("mtp").speculative_config(speculation("mtp"), "amd")


def test_rocm_attention_backend_pins():
    assert get_method("eagle3").accelerators["amd"].engine_args == ("--attention-backend", "ROCM_AITER_UNIFIED_ATTN")
    assert get_method("dflash").accelerators["amd"].engine_args == ("--attention-backend", "TRITON_ATTN")
    assert get_method("eagle3").accelerators["nvidia"].engine_args == ()


def test_ascend_caps_every_method_at_fifteen():
    for method in all_methods():
        assert method.k_max_on("ascend") <= 15
        assert method.default_k("ascend") <= method.k_max_on("ascend")


def test_methods_command_json_and_table():
    runner = CliRunner()
    listed = json.loads(runner.invoke(methods_command, ["--json"]).output)
    assert [entry["name"] for entry in listed] == list(METHOD_NAMES)
    for entry in listed:
        assert {"name", "vllm_method", "needs_draft_model", "accelerators", "drafting", "k_min", "k_max", "k_default"} <= set(entry)
    assert "cpu" not in next(entry for entry in listed if entry["name"] == "dspark")["accelerators"]
    table = runner.invoke(methods_command, []).output
    for name in METHOD_NAMES:
        assert f"\n{name} " in table or table.startswith(name)
    assert "ROCM_AITER_UNIFIED_ATTN" in table
