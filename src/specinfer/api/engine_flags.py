"""Which `vllm serve` flag a `spec.runtime.extraArgs` item sets, read the way vLLM 0.33.0 reads it.

An exact match on the text before `=` (the first version of this rule) is not how vLLM parses:
its FlexibleArgumentParser (vllm/utils/argparse_utils.py) and argparse underneath it also take

- `--speculative_config`: underscores in a flag name (up to the first `.`) become dashes;
- `--speculative-config.method=ngram` and `-sc.method ngram`: a dotted key sets one key of a JSON flag;
- `--speculative-conf`: argparse's `allow_abbrev` stays on, so any unambiguous prefix names the flag
  (`-s` is `-sc`, `-t` is `-tp`, the only short options with those letters);
- `--port 9000` as one item: argparse reads an item with a space as a positional argument, and vLLM
  refuses to start (an extra positional) -- a crash loop where admission could have said why;
- `--config FILE`: flags read from a YAML file that admission never sees;
- `--model X` anywhere: vLLM moves it in front, replacing the positional model.

So an item is refused when its key (the text before `=`, before the first `.` and before a space,
underscores read as dashes) is a non-empty prefix of a flag the spec owns, or starts with an owned short alias
(OWNED_FLAG_PATTERN, checked by parse_spec). The CRD's CEL rule checks the same without abbreviations
(ADMISSION_FLAG_PATTERN): the prefix regex over 64 items of 4096 characters is 3.7 times the API server's
cost budget for one rule (measured on kube-apiserver 1.37), so an abbreviated owned flag passes admission
and is refused by the operator (Ready=False InvalidSpec, the same message).
tests/contract/test_vllm_engine_flags.py checks both against every flag of the wheel: every owned flag
refused in each spelling, no other flag refused.

The spec owns vLLM's engine classes too (ENGINE_CLASS_FLAGS: the `*-cls` flags of vllm/engine/arg_utils.py
and every other flag there that names a class to import): the operator runs its own scheduler class, which
applies retuned Dynamic SD schedules in place. And the flags that load code by module or file path into the
parts the operator relies on (CODE_PATH_FLAGS: an ASGI middleware around the API server that serves /metrics
and the probes, the KV and encoder-cache connectors the scheduler calls at every step, parser plugins read
from a file): code comes from the allowed image, not from the spec. Flags that pick code already in the image
by name (TENANT_CODE_CHOICES) are the tenant's own risk, documented in docs/api.md. The CRD refuses the
code-path flags with a rule of their own (CODE_PATH_FLAG_PATTERN): the owned-flag pattern is at the edge of
one rule's cost budget.

Values vLLM's parser would refuse are refused as well, naming the flag, instead of a pod that never starts:

- an item with a control character (a newline, carriage return, tab, ...): each item is one argument;
- a value that is not a number for a flag vLLM parses as one (NUMERIC_FLAGS, the int and float flags of
  `vllm serve`, each with vLLM's own parser): `--max-num-seqs=abc` and `--max-num-seqs.x=1` (a dotted sub-key
  hands the flag a JSON object) on the item, CEL and parse_spec alike; `--max-num-seqs abc` (the value in the
  next item) and a flag with no value after it on the list, by parse_spec only (value_problems): a CEL rule
  would need each item's successor, and the two-variable comprehensions that give one (`all(i, v, ...)`) are
  newer than the Kubernetes 1.30 this CRD supports (docs/install.md). The operator reports those as it does an
  abbreviated owned flag: Ready=False InvalidSpec. Abbreviated and glued spellings (`--max-num-se abc`,
  `-n4`) are not type-checked: vLLM refuses a bad value there when it starts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, TypeAlias

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

# vLLM's engine classes: the `*-cls` flags of vllm/engine/arg_utils.py and the flags there that take a class
# path (an executor class for --distributed-executor-backend, logits processor classes, "module:class" model
# overrides, the scheduler's encoder cache manager class in --ec-manager-config). The operator sets
# --scheduler-cls (runtime/contract/argv.py); the others would swap the classes its scheduler runs with.
ENGINE_CLASSES = ("remove it: the operator sets vLLM's engine classes (its scheduler applies retuned schedules "
                  "in place, docs/tuner.md)")
# Flags that load code by module or file path (vLLM 0.33.0: vllm/entrypoints/common/cli_args.py `middleware`,
# "an import path"; vllm/config/kv_transfer.py and ec_transfer.py `*_connector_module_path`; the parser plugins,
# imported from a file by ToolParserManager.import_tool_parser and ReasoningParserManager.import_reasoning_parser).
CODE_PATHS = "remove it: it loads code by module or file path into the engine, and code comes from the allowed image"

# Flag -> the field (or the reason) that sets it instead. Besides the flags the runtime writes from typed
# fields: --host/--uds (the Service and the probes reach the port the operator binds), --config (a file
# admission cannot check), the flags that would put a credential on the command line (--api-key,
# --hf-token): argv lands in the ConfigMap, a pod annotation and the runtime's stderr; and the engine classes.
OWNED_FLAGS: dict[str, str] = {
    "--model": "set spec.model.name",
    "--revision": "set spec.model.revision",
    "--served-model-name": "set spec.model.servedModelName",
    "--tensor-parallel-size": "set spec.hardware.tensorParallelSize",
    "--speculative-config": "set spec.speculation",
    "--spec-method": "set spec.speculation.method",
    "--spec-model": "set spec.speculation.draftModel",
    "--spec-tokens": "set spec.speculation.numSpeculativeTokens",
    "--port": "set spec.runtime.port",
    "--host": "remove it: the operator binds the address its Service and probes use",
    "--uds": "remove it: the operator binds the address its Service and probes use",
    "--config": "use the typed fields and extraArgs: admission cannot see into a config file",
    "--api-key": "set spec.runtime.env VLLM_API_KEY with valueFrom.secretKeyRef",
    "--hf-token": "set spec.model.hubTokenSecretRef",
    "--scheduler-cls": ENGINE_CLASSES,
    "--worker-cls": ENGINE_CLASSES,
    "--worker-extension-cls": ENGINE_CLASSES,
    "--distributed-executor-backend": ENGINE_CLASSES + "; vLLM picks its mp or uni executor itself",
    "--logits-processors": ENGINE_CLASSES,
    "--model-class-overrides": ENGINE_CLASSES,
    "--ec-manager-config": ENGINE_CLASSES,
    "--middleware": CODE_PATHS + " (an ASGI middleware would wrap the API server that serves /metrics and the probes)",
    "--kv-transfer-config": CODE_PATHS + " (kv_connector_module_path: a connector the scheduler calls at every step)",
    "--ec-transfer-config": CODE_PATHS + " (ec_connector_module_path: a connector the scheduler calls at every step)",
    "--tool-parser-plugin": CODE_PATHS + " (a Python file, which need not be part of the image)",
    "--reasoning-parser-plugin": CODE_PATHS + " (a Python file, which need not be part of the image)",
}
SHORT_ALIASES: dict[str, str] = {"-sc": "--speculative-config", "-tp": "--tensor-parallel-size"}
# vLLM flags whose whole name is a prefix of an owned flag: argparse takes an exact name before any
# abbreviation, so these are themselves, not an owned flag abbreviated (the contract test derives the list).
NOT_ABBREVIATIONS = ("--reasoning-parser",)
ENGINE_CLASS_FLAGS = tuple(flag for flag, reason in OWNED_FLAGS.items() if reason.startswith(ENGINE_CLASSES))
CODE_PATH_FLAGS = tuple(flag for flag, reason in OWNED_FLAGS.items() if reason.startswith(CODE_PATHS))
# Flags that pick code by name among what the image already holds, or run the model's own code: accepted, the
# tenant's own risk (docs/api.md, "Flags that load code"); tests/contract/test_vllm_engine_flags.py checks that
# every flag of the wheel that loads code is here or owned.
TENANT_CODE_CHOICES: dict[str, str] = {
    "--compilation-config": "its backend may name a function to import (vllm/config/compilation.py)",
    "--io-processor-plugin": "the name of an installed IO processor plugin",
    "--trust-remote-code": "runs the Python code of the model repository the spec names",
}


_Trie: TypeAlias = dict[str, "_Trie"]  # one regex fragment per character -> the rest of the names


def _any_prefix(names: list[str]) -> str:
    """A regex matching every non-empty prefix of any of `names` (a trie, so shared prefixes appear
    once), each `-` also written `_`."""
    trie: _Trie = {}
    for name in names:
        node = trie
        for char in name:
            node = node.setdefault("[-_]" if char == "-" else re.escape(char), {})

    def emit(node: _Trie) -> str:
        branches = [char + (f"(?:{emit(child)})?" if child else "") for char, child in sorted(node.items())]
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"

    return emit(trie)


def _owned_pattern() -> str:
    longs = _any_prefix([flag[2:] for flag in OWNED_FLAGS])
    shorts = "|".join(alias[1:] for alias in SHORT_ALIASES)
    initials = "".join(sorted({alias[1] for alias in SHORT_ALIASES}))
    exact = "|".join(flag[2:].replace("-", "[-_]") for flag in NOT_ABBREVIATIONS)
    return f"^(?!--(?:{exact}){_END})(?:--{longs}{_END}|-(?:{shorts})|-[{initials}]{_END})"


def _admission_pattern(flags: list[str], aliases: list[str]) -> str:
    longs = "|".join(flag[2:].replace("-", "[-_]") for flag in flags)
    shorts = f"|-(?:{'|'.join(alias[1:] for alias in aliases)})" if aliases else ""
    return f"^(?:--(?:{longs}){_END}{shorts})"


# Where a flag's name ends: `=` (its value), `.` (a sub-key) or a space (a value in the same item, which
# argparse reads as a positional: vLLM refuses to start), or the item's end.
_END = "(?:[=. ]|$)"
# Matches (from the start) an extraArgs item that sets an owned flag in any spelling vLLM accepts.
OWNED_FLAG_PATTERN = _owned_pattern()
# The same without argparse's abbreviations, in two CEL rules (each has its own cost budget): the owned flags
# but the code-path ones, and those.
ADMISSION_FLAG_PATTERN = _admission_pattern([flag for flag in OWNED_FLAGS if flag not in CODE_PATH_FLAGS],
                                            list(SHORT_ALIASES))
CODE_PATH_FLAG_PATTERN = _admission_pattern(list(CODE_PATH_FLAGS), [])
_OWNED = re.compile(OWNED_FLAG_PATTERN)


def flag_key(arg: str) -> str:
    """The flag an item names as vLLM normalises it: `--speculative_config.method=x` -> `--speculative-config`."""
    key = arg.split("=", 1)[0].split(".", 1)[0]
    return "--" + key[2:].replace("_", "-") if key.startswith("--") else key


def owned_flag(arg: str) -> str | None:
    """The owned flag an extraArgs item would set (or, with a space after it, make vLLM refuse), or None."""
    if not _OWNED.match(arg):
        return None
    key = flag_key(arg).split(" ", 1)[0]
    for alias, flag in SHORT_ALIASES.items():
        if key.startswith(alias) or alias.startswith(key):
            return flag
    return next(flag for flag in OWNED_FLAGS if flag.startswith(key))


def refusal(arg: str) -> str | None:
    """Why an extraArgs item is refused (naming the flag and what to set instead), or None."""
    flag = owned_flag(arg)
    if flag is None:
        return None
    return f"{arg!r} sets vLLM's {flag}, which the spec owns: {OWNED_FLAGS[flag]}"


def _refuse_owned_flag(arg: str) -> str:
    reason = refusal(arg)
    if reason is not None:
        raise PydanticCustomError("specinfer_rule", reason, {"field": ""})
    return arg


# Control characters (C0, DEL, C1) and the Unicode line and paragraph separators: each item is one argument,
# and a newline inside one is a pasted command line or a planted one (argv lands in a ConfigMap, a pod
# annotation and the runtime's log).
_CONTROL_RANGES = ((0x00, 0x1F), (0x7F, 0x9F), (0x2028, 0x2029))
_CONTROL = re.compile("[" + "".join(f"\\u{low:04x}-\\u{high:04x}" for low, high in _CONTROL_RANGES) + "]")
# The same class in RE2 syntax, for CEL (RE2 reads \x{2028}, not \u2028)
CONTROL_CHARACTER_PATTERN = "[" + "".join(f"\\x{{{low:x}}}-\\x{{{high:x}}}" for low, high in _CONTROL_RANGES) + "]"


def control_character_refusal(arg: str) -> str | None:
    """Why an item with a control character is refused, or None."""
    found = _CONTROL.search(arg)
    if found is None:
        return None
    return (f"{arg!r} contains a control character ({found.group()!r} at offset {found.start()}): each extraArgs item "
            "is one argument: split it into items and remove newlines, carriage returns and other control characters")


def _refuse_control_characters(arg: str) -> str:
    reason = control_character_refusal(arg)
    if reason is not None:
        raise PydanticCustomError("specinfer_rule", reason)
    return arg


# -- Numeric flags: vLLM 0.33.0's parsers, and what admission lets through --------------------------------------

def _optional(parse: Callable[[str], object]) -> Callable[[str], object]:
    """vllm/engine/arg_utils.py optional_type: "" and "None" are None (a flag typed `int | None`)."""
    return lambda value: None if value in ("", "None") else parse(value)


_SUFFIXED = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _human_readable_int(value: str) -> int:
    """vllm/utils/argparse_utils.py human_readable_int: 8k is 8000, 8K is 8192, 2.5k is 2500; no 2.5K."""
    value = value.strip()
    match = _SUFFIXED.fullmatch(value)
    if match:
        number, suffix = match.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        return int(number) * _BINARY[suffix]  # int("2.5") raises: vLLM refuses decimals with binary suffixes
    return int(value)


def _human_readable_int_or_auto(value: str) -> int:
    """vllm/utils/argparse_utils.py human_readable_int_or_auto (--max-model-len): also -1 and auto."""
    value = value.strip()
    return -1 if value == "-1" or value.lower() == "auto" else _human_readable_int(value)


@dataclass(frozen=True)
class NumberType:
    """How vLLM parses one kind of numeric flag, and what the CRD's CEL rule lets through.

    `parse` raises ValueError where vLLM's parser refuses the value (it is vLLM's own function, or a copy).
    `admission` is an RE2 pattern (Python's re reads it the same) for the text after `=`: it admits at least
    what `parse` accepts (a character class, not a parser: CEL has none), so admission refuses a subset of
    what parse_spec refuses, never more.
    """

    takes: str
    parse: Callable[[str], object]
    admission: str


def _admit(extra: str = "", *, none: bool = False) -> str:
    """What CEL admits after `=`: the ASCII characters int() reads (digits, space, _, +, -) and `extra`, and
    anything outside ASCII (Unicode digits and spaces, which int() and float() read too); "None" and ""
    where the flag takes None."""
    characters = f"(?:[0-9 _+{extra}-]|[^\\x00-\\x7f])"
    return f"None|{characters}*" if none else f"{characters}+"


INTEGER = NumberType("an integer", int, _admit())
INTEGER_OR_NONE = NumberType("an integer", _optional(int), _admit(none=True))
SIZE = NumberType("an integer (8192, 8k or 8K)", _human_readable_int, _admit(".kKmMgGtT"))
SIZE_OR_NONE = NumberType("an integer (8192, 8k or 8K)", _optional(_human_readable_int),
                          _admit(".kKmMgGtT", none=True))
CONTEXT_LENGTH = NumberType("an integer (8192, 8k or 8K), auto or -1", _human_readable_int_or_auto,
                            _admit(".kKmMgGtTaAuUoO"))
# float() also reads 1e-3, nan, inf and infinity (any case)
NUMBER = NumberType("a number", float, _admit(".eEnNaAiIfFtTyY"))
NUMBER_OR_NONE = NumberType("a number", _optional(float), _admit(".eEnNaAiIfFtTyY", none=True))
NUMBER_TYPES = (INTEGER, INTEGER_OR_NONE, SIZE, SIZE_OR_NONE, CONTEXT_LENGTH, NUMBER, NUMBER_OR_NONE)

# The `vllm serve` flags vLLM 0.33.0 parses as numbers (vllm/engine/arg_utils.py: _compute_kwargs on int and
# float fields, and type=int; vllm/entrypoints/common/cli_args.py: the frontend's), but the owned ones.
# tests/contract/test_vllm_engine_flags.py derives this table from the wheel: a new or retyped flag fails it.
NUMERIC_FLAGS: dict[str, NumberType] = {
    **dict.fromkeys((
        "--api-server-count", "--block-size", "--cp-kv-cache-interleave-size", "--data-parallel-rank",
        "--data-parallel-rpc-port", "--data-parallel-size", "--data-parallel-size-local",
        "--data-parallel-start-rank", "--data-parallel-supervisor-port", "--dbo-decode-token-threshold",
        "--dbo-prefill-token-threshold", "--dcp-kv-cache-interleave-size", "--decode-context-parallel-size",
        "--dp-supervisor-probe-failure-threshold", "--dp-sync-interval", "--elastic-ep-max-dp-size",
        "--h11-max-header-count", "--h11-max-incomplete-event-size", "--long-prefill-token-threshold",
        "--mamba-cache-philox-rounds", "--master-port", "--max-cudagraph-capture-size", "--max-logprobs",
        "--max-loras", "--max-num-seqs", "--mm-shm-cache-max-object-size-mb", "--nnodes", "--node-rank",
        "--offload-group-size", "--offload-num-in-group", "--offload-prefetch-step", "--pipeline-parallel-size",
        "--prefill-context-parallel-size", "--prefill-schedule-interval", "--renderer-num-workers",
        "--replayssm-buffer-len", "--safetensors-prefetch-num-threads", "--seed", "--shutdown-timeout",
        "--sse-keep-alive-interval", "--ssl-cert-reqs", "--stream-interval", "--ubatch-size",
    ), INTEGER),
    **dict.fromkeys((
        "--cpu-distributed-timeout-seconds", "--distributed-timeout-seconds", "--grpc-port", "--mamba-block-size",
        "--max-cpu-loras", "--max-log-len", "--max-lora-cls-labels", "--max-num-active-seqs", "--max-num-queued-reqs",
        "--max-parallel-loading-workers", "--num-gpu-blocks-override", "--prefix-cache-retention-interval",
        "--prefix-match-unit",
    ), INTEGER_OR_NONE),
    **dict.fromkeys(("--max-num-batched-tokens", "--safetensors-prefetch-block-size"), SIZE),
    **dict.fromkeys(("--kv-cache-memory-bytes", "--max-num-queued-tokens", "--max-num-scheduled-tokens"),
                    SIZE_OR_NONE),
    "--max-model-len": CONTEXT_LENGTH,
    **dict.fromkeys((
        "--cpu-offload-gb", "--dp-supervisor-probe-interval-s", "--dp-supervisor-probe-timeout-s",
        "--gpu-memory-utilization", "--kv-cache-metrics-sample", "--mm-encoder-fp8-scale-save-margin",
        "--mm-ipc-gpu-memory-gb", "--mm-processor-cache-gb", "--watermark",
    ), NUMBER),
    **dict.fromkeys(("--kv-offloading-size", "--video-pruning-rate"), NUMBER_OR_NONE),
}
# Their other option strings (vLLM registers them with the long name)
NUMERIC_ALIASES: dict[str, str] = {
    "-asc": "--api-server-count", "-dcp": "--decode-context-parallel-size", "-dp": "--data-parallel-size",
    "-dpl": "--data-parallel-size-local", "-dpn": "--data-parallel-rank", "-dpp": "--data-parallel-rpc-port",
    "-dpr": "--data-parallel-start-rank", "-n": "--nnodes", "-pcp": "--prefill-context-parallel-size",
    "-pp": "--pipeline-parallel-size", "-r": "--node-rank",
    "--device-memory-utilization": "--gpu-memory-utilization",
}


def numeric_flag(arg: str) -> str | None:
    """The numeric flag an item names (its long name), unabbreviated, or None."""
    key = flag_key(arg)
    key = NUMERIC_ALIASES.get(key, key)
    return key if key in NUMERIC_FLAGS else None


def _refuses(kind: NumberType, value: str) -> bool:
    try:
        kind.parse(value)
    except (ValueError, OverflowError):  # OverflowError: vLLM's int(float("9" * 400) * 1000) crashes on it too
        return True
    return False


def number_refusal(arg: str) -> str | None:
    """Why one item gives a numeric flag a value vLLM refuses (`--max-num-seqs=abc`, `--max-num-seqs.x=1`)."""
    flag = numeric_flag(arg)
    if flag is None:
        return None
    kind, head = NUMERIC_FLAGS[flag], arg.split("=", 1)[0]
    if "." in head:
        return f"{arg!r}: vLLM's {flag} takes {kind.takes}, not dotted sub-keys (vLLM would refuse to start)"
    if "=" in arg and _refuses(kind, value := arg.split("=", 1)[1]):
        return f"{arg!r}: vLLM's {flag} takes {kind.takes}, not {value!r} (vLLM would refuse to start)"
    return None


def _refuse_bad_number(arg: str) -> str:
    reason = number_refusal(arg)
    if reason is not None:
        raise PydanticCustomError("specinfer_rule", reason)
    return arg


def _is_option(arg: str) -> bool:
    """Whether argparse reads an item as an option rather than a value: `-x`, `--x`, not `-1`, `-.5`, `-`."""
    return arg.startswith("-") and len(arg) > 1 and not arg[1].isdigit() and arg[1] != "." and " " not in arg


def value_problems(args: list[str]) -> list[tuple[int, str]]:
    """(index, message) for each numeric flag whose value is the next item and is refused, or missing.

    The list-level half of the numeric check (the item-level half is number_refusal): parse_spec runs it on
    spec.runtime.extraArgs; the CRD cannot (see the module docstring).
    """
    problems: list[tuple[int, str]] = []
    for index, arg in enumerate(args):
        flag = numeric_flag(arg)
        if flag is None or "=" in arg or "." in arg:
            continue
        kind = NUMERIC_FLAGS[flag]
        if index + 1 == len(args) or _is_option(args[index + 1]):
            after = "it is the last item" if index + 1 == len(args) else f"the next item {args[index + 1]!r} is a flag"
            problems.append((index, f"{arg!r} needs a value, but {after}: vLLM's {flag} takes {kind.takes} "
                                    f"(in the next item, or {flag}=VALUE; vLLM would refuse to start)"))
        elif _refuses(kind, value := args[index + 1]):
            problems.append((index + 1, f"vLLM's {flag} (spec.runtime.extraArgs[{index}]) takes {kind.takes}, "
                                        f"not {value!r} (vLLM would refuse to start)"))
    return problems


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _numbers_rule() -> dict[str, str]:
    """The item rule for numeric flags: a map from each spelling to its type's index in NUMBER_TYPES, and one
    regular expression per type, chosen by a conditional (the API server prices its costliest branch, not the
    sum). `[x].all(v, ...)` binds x to v once, so that the map is written once (CEL in Kubernetes 1.30 has no
    cel.bind)."""
    spellings = {flag: flag for flag in NUMERIC_FLAGS} | NUMERIC_ALIASES
    types = "{" + ", ".join(f"{_cel_string(spelling)}: {NUMBER_TYPES.index(NUMERIC_FLAGS[flag])}"
                            for spelling, flag in sorted(spellings.items())) + "}"
    aliases = "{" + ", ".join(f"{_cel_string(alias)}: {_cel_string(flag)}"
                              for alias, flag in sorted(NUMERIC_ALIASES.items())) + "}"
    head = "self.split('=', 2)[0]"
    key = f"{head}.split('.', 2)[0].replace('_', '-')"  # vLLM reads _ as - in a flag's name, up to the first .
    patterns = [_cel_string(f"^[^=]*=(?:{number.admission})$") for number in NUMBER_TYPES]
    choice = " : ".join(f"t[k] == {index} ? self.matches({pattern})" for index, pattern in enumerate(patterns[:-1]))
    takes = "[" + ", ".join(_cel_string(number.takes) for number in NUMBER_TYPES) + "]"
    return {
        "rule": f"[{types}].all(t, [{key}].all(k, !(k in t) || (!{head}.contains('.') && (!self.contains('=') || "
                f"({choice} : self.matches({patterns[-1]}))))))",
        "message": "spec.runtime.extraArgs: an item gives a numeric vLLM flag a value vLLM refuses (vLLM would "
                   "refuse to start)",
        "messageExpression": f"[{key}].map(k, \"spec.runtime.extraArgs: '\" + self + \"': vLLM's \" + "
                             f"(k in {aliases} ? {aliases}[k] : k) + \" takes \" + {takes}[{types}[k]] + "
                             "\" (vLLM would refuse to start)\")[0]",
    }


# One extraArgs item. The rules sit on the item (not on the list) so that the API server's cost estimate
# is one item's, and its error names the item: `spec.runtime.extraArgs[2]: ... '--speculative_config' sets`.
# Measured on kube-apiserver 1.37: an item's rule may use a regular expression of about 380 characters (a
# 404-character one is 1.06x the budget of one rule); ADMISSION_FLAG_PATTERN is near it.
ExtraArg = Annotated[str, Field(max_length=4096, json_schema_extra={"x-kubernetes-validations": [{
    "rule": f"!self.matches('{ADMISSION_FLAG_PATTERN}')",
    "message": "spec.runtime.extraArgs: an item sets a flag the spec owns (vLLM reads _ as -, and dotted "
               "sub-keys): use the typed fields (docs/api.md lists the owned flags)",
    "messageExpression": "\"spec.runtime.extraArgs: '\" + self + \"' sets a flag the spec owns (vLLM reads _ as -, "
                         "and dotted sub-keys): use the typed fields (docs/api.md lists the owned flags)\"",
}, {
    "rule": f"!self.matches('{CODE_PATH_FLAG_PATTERN}')",
    "message": "spec.runtime.extraArgs: an item sets a flag that loads code by module or file path into the "
               "engine: code comes from the allowed image (docs/api.md, Flags that load code)",
    "messageExpression": "\"spec.runtime.extraArgs: '\" + self + \"' sets a flag that loads code by module or "
                         "file path into the engine: code comes from the allowed image (docs/api.md, Flags that load "
                         "code)\"",
}, {
    "rule": f"!self.matches({_cel_string(CONTROL_CHARACTER_PATTERN)})",
    "message": "spec.runtime.extraArgs: an item contains a control character (a newline, carriage return, tab, "
               "...): each item is one argument: split it into items and remove the control characters",
}, _numbers_rule()]}), AfterValidator(_refuse_control_characters), AfterValidator(_refuse_owned_flag),
    AfterValidator(_refuse_bad_number)]
