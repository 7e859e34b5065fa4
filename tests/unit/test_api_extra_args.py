"""spec.runtime.extraArgs: what parse_spec (and, for one item, the CRD's CEL) refuses besides owned flags.

vLLM's engine classes (--scheduler-cls, ...), control characters in an item, and values vLLM's parser would
refuse for a numeric flag: each refused naming the flag and the item, instead of a pod that never starts.
The same rules go to the real API server in tests/integration/test_admission.py (and
test_admission_cases.yaml); tests/contract/test_vllm_engine_flags.py holds the tables to the vLLM 0.33.0
wheel.
"""

from __future__ import annotations

import copy
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specinfer.api import InvalidSpecError, parse_spec
from specinfer.api.crd import build_crd
from specinfer.api.engine_flags import (
    ADMISSION_FLAG_PATTERN,
    CONTROL_CHARACTER_PATTERN,
    ENGINE_CLASS_FLAGS,
    ENGINE_CLASSES,
    NUMBER_TYPES,
    NUMERIC_ALIASES,
    NUMERIC_FLAGS,
    OWNED_FLAGS,
    value_problems,
)

pytestmark = pytest.mark.unit

BASE = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "speculation": {"method": "eagle3", "draftModel": {"name": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"},
                        "numSpeculativeTokens": 4},
        "hardware": {"accelerator": "nvidia"}}


def with_args(*args: str) -> dict:
    spec = copy.deepcopy(BASE)
    spec["runtime"] = {"extraArgs": list(args)}
    return spec


def refusal(*args: str) -> InvalidSpecError:
    with pytest.raises(InvalidSpecError) as caught:
        parse_spec(with_args(*args))
    return caught.value


def item_rules() -> list[dict[str, str]]:
    runtime = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "runtime"]
    return runtime["properties"]["extraArgs"]["items"]["x-kubernetes-validations"]


# -- Engine classes ---------------------------------------------------------------------------------------------

def test_the_engine_class_flags_are_owned():
    assert set(ENGINE_CLASS_FLAGS) == {"--scheduler-cls", "--worker-cls", "--worker-extension-cls",
                                       "--distributed-executor-backend", "--logits-processors",
                                       "--model-class-overrides", "--ec-manager-config"}
    assert all(OWNED_FLAGS[flag].startswith(ENGINE_CLASSES) for flag in ENGINE_CLASS_FLAGS)


@pytest.mark.parametrize("args", [
    ["--scheduler-cls", "my.pkg.Scheduler"], ["--scheduler_cls=my.pkg.Scheduler"], ["--scheduler-c", "x"],
    ["--enforce-eager", "--worker-cls", "x"], ["--worker-extension-cls=x"], ["--worker_extension_cls", "x"],
    ["--distributed-executor-backend", "my.Executor"], ["--logits-processors", "a.B"],
    ["--model-class-overrides.LlamaForCausalLM=x:Y"], ["--ec-manager-config.encoder_cache_manager_cls=x.Y"],
], ids=lambda args: " ".join(args))
def test_an_engine_class_flag_is_refused_in_every_spelling(args):
    error = refusal(*args)
    index = next(i for i, arg in enumerate(args) if arg.startswith(("--s", "--w", "--d", "--l", "--m", "--ec")))
    assert error.field_path == f"spec.runtime.extraArgs[{index}]"
    assert "which the spec owns: remove it: the operator sets vLLM's engine classes (its scheduler applies " \
           "retuned schedules in place, docs/tuner.md)" in str(error)


def test_the_scheduler_class_refusal_reads_in_full():
    assert str(refusal("--scheduler-cls", "x")) == (
        "spec.runtime.extraArgs[0]: '--scheduler-cls' sets vLLM's --scheduler-cls, which the spec owns: remove it: "
        "the operator sets vLLM's engine classes (its scheduler applies retuned schedules in place, docs/tuner.md)")
    assert str(refusal("--distributed-executor-backend=mp")).endswith("; vLLM picks its mp or uni executor itself")


def test_flags_that_merely_share_a_prefix_with_an_engine_class_flag_pass():
    parse_spec(with_args("--model-impl", "vllm", "--max-lora-cls-labels", "4", "--scheduler-reserve-full-isl",
                         "--distributed-timeout-seconds", "60", "--model-weights", "w", "--reasoning-parser", "r",
                         "--reasoning_parser=r"))


# -- One item, one argument; flags that load code (issue 44) ----------------------------------------------------

@pytest.mark.parametrize(("item", "flag"), [
    ("--port 9000", "--port"), ("--served_model_name other", "--served-model-name"), ("--po 9000", "--port"),
    ("-tp 2", "--tensor-parallel-size"), ("--speculative-config {}", "--speculative-config"),
])
def test_an_owned_flag_with_its_value_in_the_same_item_is_refused(item, flag):
    """argparse reads an item with a space as a positional: vLLM would refuse to start, in a crash loop."""
    error = refusal("--enforce-eager", item)
    assert error.field_path == "spec.runtime.extraArgs[1]"
    assert f"{item!r} sets vLLM's {flag}, which the spec owns" in str(error)


@pytest.mark.parametrize("args", [
    ["--middleware", "my.pkg.rewrite_metrics"], ["--middleware=a.b"], ["--kv-transfer-config", "{}"],
    ["--kv_transfer_config.kv_connector_module_path=my.pkg"], ["--ec-transfer-config={}"],
    ["--tool-parser-plugin", "/models/x/plugin.py"], ["--reasoning_parser_plugin=/tmp/p.py"],
    ["--middleware my.pkg.f"],
], ids=lambda args: " ".join(args))
def test_a_flag_that_loads_code_by_path_is_refused(args):
    assert "loads code by module or file path into the engine, and code comes from the allowed image" \
        in str(refusal(*args))


@pytest.mark.parametrize("item", ["--port 9000", "--served_model_name x", "--middleware=a.b", "--middleware",
                                  "--kv-transfer-config.kv_connector=x", "--tool_parser_plugin /p.py"])
def test_admission_refuses_them_too(item):
    patterns = [re.search(r"!self\.matches\('(.*)'\)$", rule["rule"]) for rule in item_rules()]
    assert any(match and re.match(match.group(1), item) for match in patterns), item


@pytest.mark.parametrize("args", [["--compilation-config", '{"mode": 3}'], ["--trust-remote-code"],
                                  ["--io-processor-plugin", "terratorch"], ["--max-num-seqs", "8"]])
def test_code_already_in_the_image_or_the_models_own_is_the_tenants_choice(args):
    parse_spec(with_args(*args))


# -- Control characters -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("char", ["\n", "\r", "\t", "\x00", "\x1b", "\x7f", "\x85", "\u2028", "\u2029"])
def test_an_item_with_a_control_character_is_refused(char):
    error = refusal("--enforce-eager", f"--max-model-len{char}8192")
    assert error.field_path == "spec.runtime.extraArgs[1]"
    assert f"contains a control character ({char!r} at offset 15): each extraArgs item is one argument" in str(error)
    assert "\n" not in str(error)  # the message quotes the character, it does not print it


def test_a_newline_is_refused_in_a_value_too():
    assert "contains a control character ('\\n' at offset 1)" in str(refusal("--hf-overrides", '{\n"a": 1}'))


def test_printable_unicode_passes():
    parse_spec(with_args("--chat-template", "{{ messages }} – «ok» ✓", "--response-role", "élève"))


def test_the_control_rule_in_the_crd_is_the_same_class_in_re2():
    rule = next(rule for rule in item_rules() if "control character" in rule["message"])
    assert rule["rule"] == "!self.matches('[\\\\x{0}-\\\\x{1f}\\\\x{7f}-\\\\x{9f}\\\\x{2028}-\\\\x{2029}]')"
    assert CONTROL_CHARACTER_PATTERN == "[\\x{0}-\\x{1f}\\x{7f}-\\x{9f}\\x{2028}-\\x{2029}]"


# -- Numeric flags ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "path", "message"), [
    (["--max-num-seqs=abc"], "spec.runtime.extraArgs[0]",
     "'--max-num-seqs=abc': vLLM's --max-num-seqs takes an integer, not 'abc' (vLLM would refuse to start)"),
    (["--max-num-seqs", "abc"], "spec.runtime.extraArgs[1]",
     "vLLM's --max-num-seqs (spec.runtime.extraArgs[0]) takes an integer, not 'abc' (vLLM would refuse to start)"),
    (["--enforce-eager", "--max-num-seqs"], "spec.runtime.extraArgs[1]",
     "'--max-num-seqs' needs a value, but it is the last item: vLLM's --max-num-seqs takes an integer (in the next "
     "item, or --max-num-seqs=VALUE; vLLM would refuse to start)"),
    (["--max-num-seqs", "--enforce-eager"], "spec.runtime.extraArgs[0]",
     "'--max-num-seqs' needs a value, but the next item '--enforce-eager' is a flag"),
    (["--max_num_seqs=8.5"], "spec.runtime.extraArgs[0]", "vLLM's --max-num-seqs takes an integer, not '8.5'"),
    (["--max-num-seqs.x=1"], "spec.runtime.extraArgs[0]",
     "'--max-num-seqs.x=1': vLLM's --max-num-seqs takes an integer, not dotted sub-keys"),
    (["--max-num-seqs.x", "1"], "spec.runtime.extraArgs[0]", "vLLM's --max-num-seqs takes an integer, not dotted"),
    (["--seed="], "spec.runtime.extraArgs[0]", "vLLM's --seed takes an integer, not ''"),
    (["--shutdown-timeout", "20s"], "spec.runtime.extraArgs[1]", "vLLM's --shutdown-timeout"),
    (["-dp", "two"], "spec.runtime.extraArgs[1]", "vLLM's --data-parallel-size (spec.runtime.extraArgs[0])"),
    (["-dp=two"], "spec.runtime.extraArgs[0]", "vLLM's --data-parallel-size takes an integer, not 'two'"),
    (["--max-model-len", "long"], "spec.runtime.extraArgs[1]",
     "vLLM's --max-model-len (spec.runtime.extraArgs[0]) takes an integer (8192, 8k or 8K), auto or -1, not 'long'"),
    (["--max-num-batched-tokens=2.5K"], "spec.runtime.extraArgs[0]",
     "vLLM's --max-num-batched-tokens takes an integer (8192, 8k or 8K), not '2.5K'"),
    (["--gpu-memory-utilization", "90%"], "spec.runtime.extraArgs[1]",
     "vLLM's --gpu-memory-utilization (spec.runtime.extraArgs[0]) takes a number, not '90%'"),
    (["--device-memory-utilization=high"], "spec.runtime.extraArgs[0]", "vLLM's --gpu-memory-utilization takes"),
    (["--max-log-len", "None", "--watermark", "x"], "spec.runtime.extraArgs[3]", "vLLM's --watermark"),
], ids=lambda value: " ".join(value) if isinstance(value, list) else None)
def test_a_value_vllm_would_refuse_is_refused_naming_the_flag_and_the_item(args, path, message):
    error = refusal(*args)
    assert error.field_path == path
    assert str(error) == f"{path}: {error.message}"
    assert message in error.message


def test_every_bad_value_is_reported_not_just_the_first():
    error = refusal("--max-num-seqs", "many", "--seed")
    assert error.describe_all().splitlines() == [
        "spec.runtime.extraArgs[1]: vLLM's --max-num-seqs (spec.runtime.extraArgs[0]) takes an integer, not 'many' "
        "(vLLM would refuse to start)",
        "spec.runtime.extraArgs[2]: '--seed' needs a value, but it is the last item: vLLM's --seed takes an integer "
        "(in the next item, or --seed=VALUE; vLLM would refuse to start)",
    ]


def test_a_value_with_braces_is_quoted_as_given():
    assert "not '{field}'" in str(refusal("--max-num-seqs", "{field}"))


@pytest.mark.parametrize("args", [
    ["--max-num-seqs", "256"], ["--max-num-seqs=256"], ["--max_num_seqs", " 1_024 "], ["--max-num-seqs", "+8"],
    ["--max-num-seqs", "-1"], ["--max-model-len", "8k"], ["--max-model-len=auto"], ["--max-model-len", "-1"],
    ["--max-model-len", "32K"], ["--max-num-batched-tokens", "2.5k"], ["--gpu-memory-utilization", "0.9"],
    ["--gpu-memory-utilization=.9"], ["--gpu-memory-utilization", "-.5"], ["--cpu-offload-gb", "1e1"],
    ["--max-log-len="], ["--max-log-len", "None"], ["--kv-offloading-size", "None"], ["-dp", "1"], ["-n=2"],
    ["--shutdown-timeout", "20", "--max-num-seqs", "4"], ["--enforce-eager"],
    ["--override-generation-config", '{"max_new_tokens": 8}'],
], ids=lambda args: " ".join(args))
def test_a_value_vllm_accepts_passes(args):
    assert parse_spec(with_args(*args)).runtime.extra_args == args


def test_a_flag_followed_by_a_negative_number_reads_it_as_the_value():
    assert value_problems(["--seed", "-3"]) == []
    assert value_problems(["--seed", "-x"]) != []


def test_abbreviations_are_left_to_vllm():
    """argparse takes --max-num-se for --max-num-seqs, but the table holds whole names only."""
    assert value_problems(["--max-num-se", "abc"]) == []


# -- What the CRD's CEL rule admits -----------------------------------------------------------------------------

def _accepts(number, value: str) -> bool:
    try:
        number.parse(value)
    except (ValueError, OverflowError):
        return False
    return True


VALUES = st.text(alphabet=st.sampled_from("0123456789 _+-.eEkKmMgGtTaAuUoOnNiIfFyY٣ x,%{}"), max_size=12)


@pytest.mark.parametrize("number", NUMBER_TYPES, ids=lambda number: number.takes)
@given(value=VALUES)
def test_admission_admits_every_value_vllm_accepts(number, value):
    """The CEL pattern is a character class, not vLLM's parser: it may admit more, never less."""
    if _accepts(number, value):
        assert re.fullmatch(number.admission, value), value


@pytest.mark.parametrize("number", NUMBER_TYPES, ids=lambda number: number.takes)
def test_admission_still_refuses_a_word(number):
    for value in ("abc", "8x", "{}", "1,000", "90%"):
        assert not _accepts(number, value)
        assert not re.fullmatch(number.admission, value), value


def test_admission_knows_every_spelling_of_every_numeric_flag():
    rule = next(rule for rule in item_rules() if "numeric vLLM flag" in rule["message"])
    for spelling, flag in {**{flag: flag for flag in NUMERIC_FLAGS}, **NUMERIC_ALIASES}.items():
        assert f"'{spelling}': {NUMBER_TYPES.index(NUMERIC_FLAGS[flag])}" in rule["rule"], spelling
    assert "[self.split('=', 2)[0].split('.', 2)[0].replace('_', '-')]" in rule["rule"]
    assert "takes" in rule["messageExpression"]


def test_the_owned_flag_pattern_stays_within_one_rules_cost_budget():
    """kube-apiserver 1.37 refuses an item rule with a regular expression of 404 characters (1.06x its
    budget); the pattern grows with every owned flag."""
    assert len(ADMISSION_FLAG_PATTERN) <= 380
