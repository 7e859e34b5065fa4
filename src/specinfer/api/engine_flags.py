"""Which `vllm serve` flag a `spec.runtime.extraArgs` item sets, read the way vLLM 0.33.0 reads it.

An exact match on the text before `=` (the first version of this rule) is not how vLLM parses:
its FlexibleArgumentParser (vllm/utils/argparse_utils.py) and argparse underneath it also take

- `--speculative_config`: underscores in a flag name (up to the first `.`) become dashes;
- `--speculative-config.method=ngram` and `-sc.method ngram`: a dotted key sets one key of a JSON flag;
- `--speculative-conf`: argparse's `allow_abbrev` stays on, so any unambiguous prefix names the flag
  (`-s` is `-sc`, `-t` is `-tp`, the only short options with those letters);
- `--config FILE`: flags read from a YAML file that admission never sees;
- `--model X` anywhere: vLLM moves it in front, replacing the positional model.

So an item is refused when its key (the text before `=` and before the first `.`, underscores read as
dashes) is a non-empty prefix of a flag the spec owns, or starts with an owned short alias
(OWNED_FLAG_PATTERN, checked by parse_spec). The CRD's CEL rule checks the same without abbreviations
(ADMISSION_FLAG_PATTERN): the prefix regex over 64 items of 4096 characters is about twice the API
server's cost budget for one rule, so an abbreviated owned flag passes admission and is refused by the
operator (Ready=False InvalidSpec, the same message). tests/contract/test_vllm_engine_flags.py checks
both against every flag of the wheel: every owned flag refused in each spelling, no other flag refused.
"""

from __future__ import annotations

import re
from typing import Annotated, TypeAlias

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

# Flag -> the field (or the reason) that sets it instead. Besides the flags the runtime writes from typed
# fields: --host/--uds (the Service and the probes reach the port the operator binds), --config (a file
# admission cannot check) and the flags that would put a credential on the command line (--api-key,
# --hf-token): argv lands in the ConfigMap, a pod annotation and the runtime's stderr.
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
}
SHORT_ALIASES: dict[str, str] = {"-sc": "--speculative-config", "-tp": "--tensor-parallel-size"}


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
    return f"^(?:--{longs}(?:[=.]|$)|-(?:{shorts})|-[{initials}](?:[=.]|$))"


def _admission_pattern() -> str:
    longs = "|".join(flag[2:].replace("-", "[-_]") for flag in OWNED_FLAGS)
    shorts = "|".join(alias[1:] for alias in SHORT_ALIASES)
    return f"^(?:--(?:{longs})(?:[=.]|$)|-(?:{shorts}))"


# Matches (from the start) an extraArgs item that sets an owned flag in any spelling vLLM accepts.
OWNED_FLAG_PATTERN = _owned_pattern()
# The same without argparse's abbreviations: what the CRD's CEL rule can afford.
ADMISSION_FLAG_PATTERN = _admission_pattern()
_OWNED = re.compile(OWNED_FLAG_PATTERN)


def flag_key(arg: str) -> str:
    """The flag an item names as vLLM normalises it: `--speculative_config.method=x` -> `--speculative-config`."""
    key = arg.split("=", 1)[0].split(".", 1)[0]
    return "--" + key[2:].replace("_", "-") if key.startswith("--") else key


def owned_flag(arg: str) -> str | None:
    """The owned flag an extraArgs item would set, or None when it sets none."""
    if not _OWNED.match(arg):
        return None
    key = flag_key(arg)
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


# One extraArgs item. The rule sits on the item (not on the list) so that the API server's cost estimate
# is one item's, and its error names the item: `spec.runtime.extraArgs[2]: ... '--speculative_config' sets`.
ExtraArg = Annotated[str, Field(max_length=4096, json_schema_extra={"x-kubernetes-validations": [{
    "rule": f"!self.matches('{ADMISSION_FLAG_PATTERN}')",
    "message": "spec.runtime.extraArgs: an item sets a flag the spec owns (vLLM reads _ as -, and dotted "
               "sub-keys): use the typed fields (docs/api.md lists the owned flags)",
    "messageExpression": "\"spec.runtime.extraArgs: '\" + self + \"' sets a flag the spec owns (vLLM reads _ as -, "
                         "and dotted sub-keys): use the typed fields (docs/api.md lists the owned flags)\"",
}]}), AfterValidator(_refuse_owned_flag)]

