"""Contract: spec.runtime.extraArgs is refused exactly where vLLM 0.33.0 would set a flag the spec owns.

Reads the cached wheel's source (never imports vLLM): the flags `vllm serve` registers (EngineArgs,
FrontendArgs and BaseFrontendArgs fields, and every `add_argument` option string), and the parsing
rules of FlexibleArgumentParser (vllm/utils/argparse_utils.py) that src/specinfer/api/engine_flags.py
reproduces. Every owned flag must exist and be refused in each spelling vLLM accepts; no other
complete vLLM flag may be refused.
"""

from __future__ import annotations

import ast
import re
from functools import cache

import pytest

from specinfer.api.engine_flags import (
    ADMISSION_FLAG_PATTERN,
    OWNED_FLAG_PATTERN,
    OWNED_FLAGS,
    SHORT_ALIASES,
    owned_flag,
)
from specinfer.dev.vllm_wheels import read_source

pytestmark = pytest.mark.unit

SOURCES = ("vllm/engine/arg_utils.py", "vllm/entrypoints/common/cli_args.py")
ARG_CLASSES = ("EngineArgs", "FrontendArgs", "BaseFrontendArgs")


@cache
def vllm_flags() -> frozenset[str]:
    """Option strings of `vllm serve`: dataclass fields of the argument classes and explicit add_argument calls."""
    flags: set[str] = set()
    for path in SOURCES:
        tree = ast.parse(read_source(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name in ARG_CLASSES:
                flags |= {"--" + item.target.id.replace("_", "-") for item in node.body
                          if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                flags |= {arg.value for arg in node.args
                          if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("-")}
    return frozenset(flags)


def unambiguous_prefixes(flag: str) -> list[str]:
    """Prefixes argparse (allow_abbrev) resolves to `flag` alone among vLLM's flags."""
    others = vllm_flags() - {flag}
    return [flag[:n] for n in range(3, len(flag)) if not any(o.startswith(flag[:n]) for o in others)]


def test_the_flag_list_is_read_from_the_wheel():
    flags = vllm_flags()
    assert {"--max-model-len", "--enforce-eager", "--speculative-config", "-sc", "-tp", "--api-key"} <= flags
    assert len(flags) > 200


def test_every_owned_flag_and_alias_exists_in_vllm():
    assert set(OWNED_FLAGS) <= vllm_flags(), sorted(set(OWNED_FLAGS) - vllm_flags())
    assert set(SHORT_ALIASES) <= vllm_flags()


def test_the_parsing_rules_reproduced_are_vllms():
    """What engine_flags.py relies on is what the wheel does: `_` -> `-` up to the first `.`, dotted
    sub-keys for any flag starting with `-`, `--config FILE`, `--model` moved in front, abbreviations on."""
    source = read_source("vllm/utils/argparse_utils.py")
    assert 'pattern = re.compile(r"(?<=--)[^\\.]*")' in source          # names up to the first '.'
    assert 'return match.group(0).replace("_", "-")' in source
    assert 'if processed_arg.startswith("-") and "." in processed_arg:' in source  # -sc.method too
    assert 'if "--config" in args:' in source
    assert 're.match(r"^--model(=.+|$)", arg)' in source
    # where `vllm serve`'s parser and subparser are built: argparse's allow_abbrev stays at its default (on)
    parsers = ("vllm/entrypoints/cli/main.py", "vllm/entrypoints/cli/serve.py", "vllm/utils/argparse_utils.py",
               *SOURCES)
    assert not [path for path in parsers if "allow_abbrev" in read_source(path)]
    assert "FlexibleArgumentParser" in read_source("vllm/entrypoints/cli/main.py")


@pytest.mark.parametrize("flag", sorted(OWNED_FLAGS))
def test_owned_flag_is_refused_in_every_spelling_vllm_accepts(flag):
    name = flag[2:]
    spellings = [flag, f"{flag}=x", "--" + name.replace("-", "_"), f"--{name.replace('-', '_')}=x",
                 f"{flag}.key=1", f"{flag}.key", *unambiguous_prefixes(flag)]
    for spelling in spellings:
        assert owned_flag(spelling) == flag or (owned_flag(spelling) in OWNED_FLAGS and len(spelling) < len(flag)), \
            f"{spelling!r} sets {flag} in vLLM but is not refused"
        assert re.match(OWNED_FLAG_PATTERN, spelling), spelling


@pytest.mark.parametrize("alias", sorted(SHORT_ALIASES))
def test_short_alias_is_refused_glued_dotted_and_abbreviated(alias):
    for spelling in (alias, f"{alias}=x", f"{alias}.method=ngram", f"{alias}4", alias[:2]):
        assert owned_flag(spelling) == SHORT_ALIASES[alias], spelling


def test_no_other_vllm_flag_is_refused():
    owned = set(OWNED_FLAGS) | set(SHORT_ALIASES)
    def spellings(flag: str) -> tuple[str, ...]:
        return flag, f"{flag}=1", flag[:2] + flag[2:].replace("-", "_")

    refused = sorted(flag for flag in vllm_flags() - owned if any(owned_flag(s) for s in spellings(flag)))
    assert not refused, f"legitimate vLLM flags refused by the extraArgs rule: {refused}"


def test_values_are_never_read_as_flags():
    for value in ("8192", "{}", '{"method": "ngram"}', "meta-llama/Llama-3.1-8B", "auto", "-1"):
        assert owned_flag(value) is None, value


@pytest.mark.parametrize("flag", sorted(OWNED_FLAGS))
def test_admission_refuses_every_unabbreviated_spelling(flag):
    """The CEL rule (no abbreviations, for the API server's cost budget) still catches `_`, dotted and `=`."""
    name = flag[2:]
    for spelling in (flag, f"{flag}=x", "--" + name.replace("-", "_"), f"{flag}.key=1", f"{flag}.key"):
        assert re.match(ADMISSION_FLAG_PATTERN, spelling), spelling


def test_admission_refuses_nothing_parse_spec_would_admit():
    candidates = {*vllm_flags(), *(f"{f}=1" for f in vllm_flags()), *(f"{a}.x" for a in SHORT_ALIASES), "-tp4"}
    assert [c for c in candidates if re.match(ADMISSION_FLAG_PATTERN, c) and owned_flag(c) is None] == []

