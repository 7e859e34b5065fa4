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
import zipfile
from functools import cache
from pathlib import Path

import pytest

from specinfer.api.engine_flags import (
    ADMISSION_FLAG_PATTERN,
    CODE_PATH_FLAG_PATTERN,
    CODE_PATH_FLAGS,
    CODE_PATHS,
    CONTEXT_LENGTH,
    ENGINE_CLASS_FLAGS,
    ENGINE_CLASSES,
    INTEGER,
    INTEGER_OR_NONE,
    NOT_ABBREVIATIONS,
    NUMBER,
    NUMBER_OR_NONE,
    NUMERIC_ALIASES,
    NUMERIC_FLAGS,
    OWNED_FLAG_PATTERN,
    OWNED_FLAGS,
    SHORT_ALIASES,
    SIZE,
    SIZE_OR_NONE,
    TENANT_CODE_CHOICES,
    owned_flag,
    refusal,
)
from specinfer.dev.vllm_wheels import read_source, wheel_path
from specinfer.runtime.methods.engines import RELEASES

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


@pytest.mark.parametrize("release", RELEASES, ids=lambda release: release.label)
def test_the_parsing_rules_reproduced_are_vllms(release):
    """What engine_flags.py relies on is what both wheels do: `_` -> `-` up to the first `.`, dotted
    sub-keys for any flag starting with `-`, `--config FILE`, `--model` moved in front, abbreviations on."""
    source = read_source("vllm/utils/argparse_utils.py", release)
    assert 'pattern = re.compile(r"(?<=--)[^\\.]*")' in source          # names up to the first '.'
    assert 'return match.group(0).replace("_", "-")' in source
    assert 'if processed_arg.startswith("-") and "." in processed_arg:' in source  # -sc.method too
    assert 'if "--config" in args:' in source
    assert 're.match(r"^--model(=.+|$)", arg)' in source
    # wherever `vllm serve`'s parsers and arguments are built (the entrypoints, the engine's and the parser's
    # modules): argparse's allow_abbrev stays at its default (on)
    names = zipfile.ZipFile(wheel_path(release)).namelist()
    parsers = [name for name in names if name.endswith(".py") and (name.startswith("vllm/entrypoints/") or name in (
        "vllm/utils/argparse_utils.py", "vllm/engine/arg_utils.py"))]
    assert "vllm/entrypoints/cli/serve.py" in parsers
    assert not [path for path in parsers if "allow_abbrev" in read_source(path, release)]
    assert "FlexibleArgumentParser" in read_source("vllm/entrypoints/cli/main.py", release)


@pytest.mark.parametrize("flag", sorted(OWNED_FLAGS))
def test_owned_flag_is_refused_in_every_spelling_vllm_accepts(flag):
    name = flag[2:]
    spellings = [flag, f"{flag}=x", "--" + name.replace("-", "_"), f"--{name.replace('-', '_')}=x",
                 f"{flag}.key=1", f"{flag}.key", *unambiguous_prefixes(flag),
                 # one item with a space: argparse reads it as a positional and vLLM refuses to start
                 f"{flag} x", f"--{name.replace('-', '_')} x",
                 *(f"{prefix} x" for prefix in unambiguous_prefixes(flag))]
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


def test_the_flags_that_are_no_abbreviation_are_the_wheels():
    """A vLLM flag whose name is a prefix of an owned one is an exact match for argparse, not an abbreviation."""
    owned = set(OWNED_FLAGS)
    prefixes = {flag for flag in vllm_flags() - owned if any(o.startswith(flag) and o != flag for o in owned)}
    assert set(NOT_ABBREVIATIONS) == prefixes
    for flag in NOT_ABBREVIATIONS:
        for spelling in (flag, f"{flag}=x", f"{flag} x", flag[:2] + flag[2:].replace("-", "_")):
            assert owned_flag(spelling) is None, spelling


def test_values_are_never_read_as_flags():
    for value in ("8192", "{}", '{"method": "ngram"}', "meta-llama/Llama-3.1-8B", "auto", "-1"):
        assert owned_flag(value) is None, value


def admitted(item: str) -> bool:
    """Whether the CRD's two owned-flag rules let the item through."""
    return not (re.match(ADMISSION_FLAG_PATTERN, item) or re.match(CODE_PATH_FLAG_PATTERN, item))


@pytest.mark.parametrize("flag", sorted(OWNED_FLAGS))
def test_admission_refuses_every_unabbreviated_spelling(flag):
    """The CEL rules (no abbreviations, for the API server's cost budget) still catch `_`, dotted, `=` and a
    value in the same item."""
    name = flag[2:]
    for spelling in (flag, f"{flag}=x", "--" + name.replace("-", "_"), f"{flag}.key=1", f"{flag}.key",
                     f"{flag} 9000", f"--{name.replace('-', '_')} x"):
        assert not admitted(spelling), spelling


def test_admission_refuses_nothing_parse_spec_would_admit():
    candidates = {*vllm_flags(), *(f"{f}=1" for f in vllm_flags()), *(f"{f} 1" for f in vllm_flags()),
                  *(f"{a}.x" for a in SHORT_ALIASES), "-tp4"}
    assert [c for c in candidates if not admitted(c) and owned_flag(c) is None] == []



# -- vLLM's engine classes --------------------------------------------------------------------------------------

@cache
def _config_classes() -> dict[str, ast.ClassDef]:
    """Every class of vllm/config/ and of the two argument modules, by name."""
    found: dict[str, ast.ClassDef] = {}
    for path in (*sorted(name for name in _wheel_files() if name.startswith("vllm/config/")), *SOURCES):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, node)
    return found


@cache
def _wheel_files() -> tuple[str, ...]:
    return tuple(name for name in zipfile.ZipFile(wheel_path()).namelist() if name.endswith(".py"))


@cache
def _tree(path: str) -> ast.Module:
    return ast.parse(read_source(path))


def _fields(cls: ast.ClassDef) -> dict[str, tuple[ast.AnnAssign, str]]:
    """A class's annotated fields: name -> (the assignment, its docstring)."""
    fields: dict[str, tuple[ast.AnnAssign, str]] = {}
    for index, item in enumerate(cls.body):
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            after = cls.body[index + 1] if index + 1 < len(cls.body) else None
            doc = after.value.value if (isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                                        and isinstance(after.value.value, str)) else ""
            fields[item.target.id] = (item, doc)
    return fields


def class_path_flags() -> dict[str, str]:
    """The flags of vllm/engine/arg_utils.py that name a class to import, and why: a `*_cls` field, a field
    that takes a class (`type[...]`), one whose config documents class names or "module:class" targets, or a
    JSON config with a `*_cls` field."""
    found: dict[str, str] = {}
    for name, (item, _) in _fields(_config_classes()["EngineArgs"]).items():
        flag = "--" + name.replace("_", "-")
        if flag not in vllm_flags():
            continue
        annotation, default = ast.unparse(item.annotation), item.value
        source = None  # where the default comes from: Config.field or get_field(Config, "field")
        if isinstance(default, ast.Attribute) and isinstance(default.value, ast.Name):
            source = default.value.id, default.attr
        elif isinstance(default, ast.Call) and ast.unparse(default.func) == "get_field":
            source = ast.unparse(default.args[0]), default.args[1].value
        doc = _fields(_config_classes()[source[0]]).get(source[1], (None, ""))[1] if source else ""
        configs = [c for c in re.findall(r"\w+", annotation) if c in _config_classes()
                   and any(field.endswith("_cls") for field in _fields(_config_classes()[c]))]
        if name.endswith("_cls"):
            found[flag] = "a *_cls field"
        elif "type[" in annotation:
            found[flag] = f"takes a class ({annotation})"
        elif re.search(r"class names?\b|module:class", doc):
            found[flag] = "documented as class names"
        elif configs:
            found[flag] = f"{configs[0]} has a *_cls field"
    return found


def test_the_engine_class_flags_are_every_class_path_flag_of_arg_utils():
    found = class_path_flags()
    assert {"--scheduler-cls", "--worker-cls", "--worker-extension-cls"} <= set(found)
    assert set(ENGINE_CLASS_FLAGS) == set(found), (
        f"class-path flags of vLLM 0.33.0 not owned: {sorted(set(found) - set(ENGINE_CLASS_FLAGS))}; "
        f"owned but no longer class paths: {sorted(set(ENGINE_CLASS_FLAGS) - set(found))}")


@pytest.mark.parametrize("flag", ENGINE_CLASS_FLAGS)
def test_every_engine_class_flag_is_owned_and_refused_with_the_reason(flag):
    assert flag in vllm_flags()
    assert OWNED_FLAGS[flag].startswith(ENGINE_CLASSES)
    for spelling in (flag, f"{flag}=my.pkg.Class", "--" + flag[2:].replace("-", "_"), f"{flag}.key=1",
                     *unambiguous_prefixes(flag)):
        assert owned_flag(spelling) == flag or (owned_flag(spelling) in OWNED_FLAGS and len(spelling) < len(flag))
        reason = refusal(spelling)
        assert reason is not None and "which the spec owns" in reason, spelling
    assert re.match(ADMISSION_FLAG_PATTERN, f"{flag[:2]}{flag[2:].replace('-', '_')}=x")


# -- Numeric flags ----------------------------------------------------------------------------------------------

PARSER_NAMES = {"int": INTEGER, "int?": INTEGER_OR_NONE, "human_int": SIZE, "human_int?": SIZE_OR_NONE,
                "int_or_auto": CONTEXT_LENGTH, "float": NUMBER, "float?": NUMBER_OR_NONE}
EXPLICIT_TYPES = {"int": "int", "float": "float", "human_readable_int": "human_int", "optional_type(int)": "int?",
                  "optional_type(float)": "float?", "human_readable_int_or_auto": "int_or_auto"}
CONTAINERS = ("bool", "Literal", "tuple", "list", "set")  # checked before int and float by _compute_kwargs


@cache
def _aliases() -> dict[str, ast.expr]:
    """Module-level type aliases of the config modules (`X = Literal[...]`, `X: TypeAlias = ...`)."""
    found: dict[str, ast.expr] = {}
    for path in (*sorted(name for name in _wheel_files() if name.startswith("vllm/config/")), *SOURCES):
        for node in _tree(path).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                found.setdefault(node.targets[0].id, node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None \
                    and "TypeAlias" in ast.unparse(node.annotation):
                found.setdefault(node.target.id, node.value)
    return found


def _hints(node: ast.expr, seen: tuple[str, ...] = ()) -> set[str]:
    """vLLM's get_type_hints, by name: 'int', 'float', 'bool', 'str', 'None', 'Literal', 'list', ...,
    'dataclass' (a vLLM config) or 'other'."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted annotation
        return _hints(ast.parse(node.value, mode="eval").body, seen)
    if isinstance(node, ast.Constant) and node.value is None:
        return {"None"}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _hints(node.left, seen) | _hints(node.right, seen)
    if isinstance(node, ast.Subscript):
        origin = ast.unparse(node.value).split(".")[-1]
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if origin == "Union":
            return set().union(*(_hints(arg, seen) for arg in args))
        if origin == "Optional":
            return _hints(args[0], seen) | {"None"}
        if origin == "Annotated":
            return _hints(args[0], seen)
        return {origin if origin in ("list", "tuple", "set", "dict", "Literal", "type") else "other"}
    name = ast.unparse(node).split(".")[-1]
    if name in ("int", "float", "bool", "str", "dict", "list", "tuple", "set"):
        return {name}
    if name in _aliases() and name not in seen:
        return _hints(_aliases()[name], (*seen, name))
    if name in _config_classes():
        decorators = {ast.unparse(d).split("(")[0].split(".")[-1] for d in _config_classes()[name].decorator_list}
        return {"dataclass"} if decorators & {"dataclass", "config"} else {"other"}
    return {"other"}


@cache
def _compute_kwargs_specials() -> tuple[frozenset[str], str]:
    """The field names _compute_kwargs parses with human_readable_int, and the one with ..._or_auto."""
    function = next(node for node in ast.walk(_tree(SOURCES[0]))
                    if isinstance(node, ast.FunctionDef) and node.name == "_compute_kwargs")
    human = next(node.value for node in ast.walk(function) if isinstance(node, ast.Assign)
                 and getattr(node.targets[0], "id", "") == "human_readable_int_args")
    auto = next(node.comparators[0].value for node in ast.walk(function) if isinstance(node, ast.Compare)
                and ast.unparse(node.left) == "name" and isinstance(node.comparators[0], ast.Constant))
    return frozenset(element.value for element in human.elts), auto


def _parser_of(config: str, field: str, overrides: dict[tuple[str, str], str]) -> str | None:
    """The numeric parser vLLM's _compute_kwargs gives a config field (None when it is not int or float)."""
    if (config, field) in overrides:
        return EXPLICIT_TYPES.get(overrides[(config, field)])
    cls, fields = _config_classes()[config], {}
    while True:  # a field may come from a base class (FrontendArgs <- BaseFrontendArgs)
        fields = _fields(cls) | fields
        bases = [b.id for b in cls.bases if isinstance(b, ast.Name) and b.id in _config_classes()]
        if field in fields or not bases:
            break
        cls = _config_classes()[bases[0]]
    hints = _hints(fields[field][0].annotation)
    if "dataclass" in hints or hints == {"bool", "str", "None"} or any(kind in hints for kind in CONTAINERS):
        return None
    human, auto = _compute_kwargs_specials()
    if "int" in hints:
        parser = "int_or_auto" if field == auto else "human_int" if field in human else "int"
    elif "float" in hints:
        parser = "float"
    else:
        return None
    return parser + ("?" if "None" in hints else "")


def _options(call: ast.Call) -> tuple[str, ...]:
    return tuple(arg.value for arg in call.args if isinstance(arg, ast.Constant) and str(arg.value).startswith("-"))


def numeric_flags_of_the_wheel() -> dict[tuple[str, ...], str]:
    """Option strings -> parser ("int", "int?", "human_int", ...) of every `vllm serve` flag vLLM 0.33.0
    parses as a number: the add_argument calls of arg_utils.py (fed from get_kwargs(Config), with the
    overrides they make, or an explicit type=), every field of the frontend argument classes, and
    make_arg_parser's own options."""
    found: dict[tuple[str, ...], str] = {}
    for function in ast.walk(_tree(SOURCES[0])):
        if not (isinstance(function, ast.FunctionDef) and function.name == "add_cli_args"):
            continue
        configs: dict[str, str] = {}  # x_kwargs = get_kwargs(Config)
        single: dict[str, tuple[str, str]] = {}  # y = get_kwargs(Config)["field"] or x_kwargs["field"]
        overrides: dict[tuple[str, str], str] = {}  # x_kwargs["field"]["type"] = ... / y["type"] = ...
        for node in ast.walk(function):
            if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)):
                continue
            value, target = node.value, node.targets[0].id
            if isinstance(value, ast.Call) and ast.unparse(value.func) == "get_kwargs":
                configs[target] = ast.unparse(value.args[0])
            elif isinstance(value, ast.Subscript) and isinstance(value.value, ast.Call) \
                    and ast.unparse(value.value.func) == "get_kwargs":
                single[target] = ast.unparse(value.value.args[0]), value.slice.value
            elif isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and value.value.id in configs:
                single[target] = configs[value.value.id], value.slice.value
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
                target = ast.unparse(node.targets[0])
                if match := re.fullmatch(r"(\w+)\['(\w+)'\]\['type'\]", target):
                    if match.group(1) in configs:
                        overrides[(configs[match.group(1)], match.group(2))] = ast.unparse(node.value)
                elif (match := re.fullmatch(r"(\w+)\['type'\]", target)) and match.group(1) in single:
                    overrides[single[match.group(1)]] = ast.unparse(node.value)
        for node in ast.walk(function):
            if not (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument"):
                continue
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            spread = [k.value for k in node.keywords if k.arg is None]
            parser = None
            if "type" in keywords:
                parser = EXPLICIT_TYPES.get(ast.unparse(keywords["type"]))
            elif spread and not ({"action", "choices"} & set(keywords)):
                value = spread[0]
                if isinstance(value, ast.Dict):  # {**x_kwargs["field"], "default": None}
                    assert "type" not in {k.value for k in value.keys if isinstance(k, ast.Constant)}
                    value = next(v for k, v in zip(value.keys, value.values, strict=True) if k is None)
                if isinstance(value, ast.Name):
                    parser = _parser_of(*single[value.id], overrides)
                else:
                    match = re.fullmatch(r"(\w+)\['(\w+)'\]", ast.unparse(value))
                    assert match, f"an add_argument this test cannot read: {ast.unparse(node)}"
                    parser = _parser_of(configs[match.group(1)], match.group(2), overrides)
            if parser:
                found[_options(node)] = parser
    frontend_overrides = {("FrontendArgs", match.group(1)): ast.unparse(node.value)
                          for node in ast.walk(_tree(SOURCES[1])) if isinstance(node, ast.Assign)
                          and isinstance(node.targets[0], ast.Subscript)
                          and (match := re.fullmatch(r"frontend_kwargs\['(\w+)'\]\['type'\]",
                                                     ast.unparse(node.targets[0])))}
    for name in ("BaseFrontendArgs", "FrontendArgs"):
        for field in _fields(_config_classes()[name]):
            if parser := _parser_of("FrontendArgs", field, frontend_overrides):
                found[("--" + field.replace("_", "-"),)] = parser
    for node in ast.walk(_tree(SOURCES[1])):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument" and _options(node):
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            if "type" in keywords and ast.unparse(keywords["type"]) in EXPLICIT_TYPES:
                found[_options(node)] = EXPLICIT_TYPES[ast.unparse(keywords["type"])]
    return found


def test_the_kwargs_rules_the_derivation_reproduces_are_vllms():
    """_compute_kwargs tries bool, Literal, tuple, list, set before int and float, and makes a field typed
    `X | None` optional_type(X): "" and "None" are None."""
    source = read_source(SOURCES[0])
    function = next(node for node in ast.walk(_tree(SOURCES[0]))
                    if isinstance(node, ast.FunctionDef) and node.name == "_compute_kwargs")
    branch = next(node for node in ast.walk(function)
                  if isinstance(node, ast.If) and ast.unparse(node.test) == "dataclass_cls is not None")
    chain = []  # the if/elif chain that picks a field's argparse type
    while branch is not None:
        chain.append(ast.unparse(branch.test))
        nested = branch.orelse[0] if len(branch.orelse) == 1 else None
        branch = nested if isinstance(nested, ast.If) else None
    assert chain[:9] == ["dataclass_cls is not None", "type_hints == {bool, str, type(None)}",
                         *(f"contains_type(type_hints, {kind})" for kind in (*CONTAINERS, "int", "float"))], chain
    assert "if type(None) in type_hints and not contains_type(type_hints, bool):" in source
    assert 'if val == "" or val == "None":' in source
    assert _compute_kwargs_specials() == (
        frozenset({"max_num_batched_tokens", "max_num_scheduled_tokens", "kv_cache_memory_bytes",
                   "safetensors_prefetch_block_size", "max_num_queued_tokens"}), "max_model_len")


def test_the_numeric_flag_table_is_the_wheels():
    found = numeric_flags_of_the_wheel()
    assert found[("--max-num-seqs",)] == "int" and found[("--max-model-len",)] == "int_or_auto"
    assert found[("--max-num-batched-tokens",)] == "human_int" and found[("--shutdown-timeout",)] == "int"
    assert found[("--gpu-memory-utilization", "--device-memory-utilization")] == "float"
    owned = set(OWNED_FLAGS) | set(SHORT_ALIASES)
    expected = {options[0]: PARSER_NAMES[parser] for options, parser in found.items() if options[0] not in owned}
    assert NUMERIC_FLAGS == expected, (
        f"missing: {sorted(set(expected) - set(NUMERIC_FLAGS))}; not numeric in the wheel: "
        f"{sorted(set(NUMERIC_FLAGS) - set(expected))}; another parser: "
        f"{sorted(f for f in set(expected) & set(NUMERIC_FLAGS) if expected[f] is not NUMERIC_FLAGS[f])}")
    aliases = {alias: options[0] for options in found for alias in options[1:] if options[0] not in owned}
    assert aliases == NUMERIC_ALIASES


def _vllm_function(path: str, name: str, namespace: dict) -> object:
    """One function of the wheel, compiled from its source (the wheel is never imported: it needs torch)."""
    tree = _tree(path)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    exec(compile(ast.Module(body=[node], type_ignores=[]), f"{path}:{name}", "exec"), namespace)
    return namespace[name]


VALUES = ["8", " 8 ", "+8", "-1", "1_024", "٣", "8k", "8K", "2.5k", "2.5K", "1.5m", "8M", "1g", "1T", "8x", "k",
          "", "None", "none", "auto", "AUTO", " auto ", "abc", "1.5", "1e3", "nan", "-inf", "Infinity", "0x10", "8 k",
          "9" * 400 + "k", "{}", '{"x": 1}', "1,000", "--", "-"]


@pytest.mark.parametrize(("parser", "kind"), sorted(PARSER_NAMES.items()))
def test_the_value_parsers_are_vllms_own(parser, kind):
    """Each NumberType parses as vLLM does: vLLM's human_readable_int(_or_auto), parse_type and optional_type,
    compiled from the wheel, against engine_flags's copies."""
    import argparse

    import regex

    namespace: dict = {"re": regex, "argparse": argparse}
    for name in ("human_readable_int", "human_readable_int_or_auto"):
        _vllm_function("vllm/utils/argparse_utils.py", name, namespace)
    for name in ("parse_type", "optional_type"):
        _vllm_function(SOURCES[0], name, namespace)
    base = {"int": int, "float": float, "human_int": namespace["human_readable_int"],
            "int_or_auto": namespace["human_readable_int_or_auto"]}[parser.rstrip("?")]
    vllm = namespace["optional_type"](base) if parser.endswith("?") else namespace["parse_type"](base)

    def outcome(parse, value):
        try:
            return parse(value)
        except (ValueError, OverflowError, argparse.ArgumentTypeError):
            return "refused"

    for value in VALUES:
        ours, theirs = outcome(kind.parse, value), outcome(vllm, value)
        assert ours == theirs or (ours != ours and theirs != theirs), (parser, value, ours, theirs)  # nan != nan


# -- Flags that load code -------------------------------------------------------------------------------------

CODE_WORDS = re.compile(r"import path|module path|qualified name|remote code", re.IGNORECASE)


def flag_fields() -> dict[str, tuple[str, str]]:
    """Every `vllm serve` flag that is a field of the argument classes: flag -> (its type, its docstring, from
    the config class the default comes from for EngineArgs)."""
    found: dict[str, tuple[str, str]] = {}
    for name, (item, doc) in _fields(_config_classes()["EngineArgs"]).items():
        default = item.value
        if isinstance(default, ast.Attribute) and isinstance(default.value, ast.Name) \
                and default.value.id in _config_classes():
            doc = _fields(_config_classes()[default.value.id]).get(default.attr, (None, doc))[1]
        elif isinstance(default, ast.Call) and ast.unparse(default.func) == "get_field" \
                and ast.unparse(default.args[0]) in _config_classes():
            doc = _fields(_config_classes()[ast.unparse(default.args[0])]).get(default.args[1].value, (None, doc))[1]
        found["--" + name.replace("_", "-")] = (ast.unparse(item.annotation), doc)
    for cls in ("BaseFrontendArgs", "FrontendArgs"):
        for name, (item, doc) in _fields(_config_classes()[cls]).items():
            found["--" + name.replace("_", "-")] = (ast.unparse(item.annotation), doc)
    return {flag: value for flag, value in found.items() if flag in vllm_flags()}


def code_loading_flags() -> dict[str, str]:
    """The flags of the wheel that load code, and why this test says so: a plugin (`*-plugin`), a docstring
    naming an import path, module path, qualified name or remote code, or a JSON config with such a field."""
    found: dict[str, str] = {}
    for flag, (annotation, doc) in flag_fields().items():
        configs = [c for c in re.findall(r"\w+", annotation) if c in _config_classes()]
        inner = [f"{config}.{field}" for config in configs
                 for field, (_, field_doc) in _fields(_config_classes()[config]).items()
                 if CODE_WORDS.search(field_doc) or field.endswith(("_module_path", "_cls"))]
        if flag.endswith("-plugin"):
            found[flag] = "a plugin"
        elif CODE_WORDS.search(doc):
            found[flag] = f"documented: {CODE_WORDS.search(doc).group()}"
        elif inner:
            found[flag] = f"its config's {inner[0]}"
    return found


def test_every_flag_that_loads_code_is_owned_or_the_tenants_documented_risk():
    found = code_loading_flags()
    assert {"--middleware", "--kv-transfer-config", "--tool-parser-plugin", "--trust-remote-code"} <= set(found), found
    classified = set(ENGINE_CLASS_FLAGS) | set(CODE_PATH_FLAGS) | set(TENANT_CODE_CHOICES)
    assert set(found) <= classified, (
        f"flags of vLLM 0.33.0 that load code, neither owned nor documented as the tenant's risk: "
        f"{ {flag: found[flag] for flag in sorted(set(found) - classified)} }")
    assert set(CODE_PATH_FLAGS) | set(TENANT_CODE_CHOICES) <= set(found), \
        sorted((set(CODE_PATH_FLAGS) | set(TENANT_CODE_CHOICES)) - set(found))
    assert not set(CODE_PATH_FLAGS) & set(TENANT_CODE_CHOICES)


def test_the_code_path_flags_load_code_by_path_in_the_wheel():
    """What the refusal says of each, in vLLM 0.33.0's source."""
    frontend = read_source(SOURCES[1])
    assert "The value should be an import path" in frontend  # --middleware
    assert "ToolParserManager.import_tool_parser(args.tool_parser_plugin)" in frontend
    assert "import_plugin(plugin_path)" in read_source("vllm/tool_parsers/abstract_tool_parser.py")
    assert "ReasoningParserManager.import_reasoning_parser(reasoning_parser_plugin)" in read_source(
        "vllm/v1/structured_output/__init__.py")
    assert "import_plugin(plugin_path)" in read_source("vllm/reasoning/abs_reasoning_parsers.py")
    for config, field in (("vllm/config/kv_transfer.py", "kv_connector_module_path"),
                          ("vllm/config/ec_transfer.py", "ec_connector_module_path")):
        assert f"    {field}: str | None = None" in read_source(config), config


@pytest.mark.parametrize("flag", CODE_PATH_FLAGS)
def test_every_code_path_flag_is_refused_in_every_spelling_and_at_admission(flag):
    assert flag in vllm_flags()
    assert OWNED_FLAGS[flag].startswith(CODE_PATHS)
    name = flag[2:]
    for spelling in (flag, f"{flag}=my.module", f"{flag} my.module", f"--{name.replace('-', '_')}=x",
                     f"{flag}.key=1", *unambiguous_prefixes(flag)):
        assert owned_flag(spelling) == flag or (owned_flag(spelling) in OWNED_FLAGS and len(spelling) < len(flag))
        reason = refusal(spelling)
        assert reason is not None and "loads code by module or file path" in reason, spelling
    for spelling in (flag, f"{flag}=x", f"{flag} x", f"--{name.replace('-', '_')}.k=1"):
        assert re.match(CODE_PATH_FLAG_PATTERN, spelling), spelling


@pytest.mark.parametrize("flag", sorted(TENANT_CODE_CHOICES))
def test_the_tenants_own_code_choices_are_accepted_and_documented(flag):
    assert flag in vllm_flags()
    assert owned_flag(flag) is None and owned_flag(f"{flag}=x") is None
    assert admitted(flag) and admitted(f"{flag}=x")
    assert f"`{flag}`" in (Path(__file__).parents[2] / "docs" / "api.md").read_text()
