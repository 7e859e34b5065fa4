"""The layer contracts (pyproject.toml [tool.importlinter]) hold, checked by `lint-imports` on a fresh
import view (tools/import_view.py), so `make test` catches a layering regression without `make lint`; and
the layers are folders: the contracts name the tree's pure rooms and every I/O module of the operator, the
operator's top holds only its commands and its wiring, and runtime/ holds only its rooms.

The view is built in a temporary folder, never in build/import-view, so a concurrent `make lint` is not
disturbed; its links point at the repository's files, which the tests only read.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _import_view_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_view", ROOT / "tools" / "import_view.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def view(tmp_path: Path) -> Path:
    return _import_view_tool().build(tmp_path / "import-view")


def _lint_imports(view: Path) -> subprocess.CompletedProcess[str]:
    if not LINT_IMPORTS.exists():
        pytest.fail(f"{LINT_IMPORTS} not found: import-linter is a dev dependency (pip install -e '.[dev]')")
    return subprocess.run([str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          cwd=view, env={**os.environ, "PYTHONPATH": str(view)},
                          capture_output=True, text=True, timeout=300)


def test_every_layer_contract_is_kept(view: Path):
    result = _lint_imports(view)
    assert result.returncode == 0, f"a layer contract is broken:\n{result.stdout}\n{result.stderr}"
    assert "0 broken" in result.stdout, result.stdout


def test_an_upward_import_breaks_its_contract(view: Path):
    """The check is live: a module in the API that imports the operator is reported, by contract name."""
    api = view / "specinfer" / "api"
    repository_api = api.resolve()
    api.unlink()  # a link to src/specinfer/api: replace it by a folder of links, so the probe stays out of the repo
    api.mkdir()
    for entry in repository_api.iterdir():
        (api / entry.name).symlink_to(entry)
    (api / "layer_probe.py").write_text("import specinfer.operator.controller\n")

    result = _lint_imports(view)

    assert result.returncode != 0, result.stdout
    assert "The API stands on the catalogue alone BROKEN" in " ".join(result.stdout.split()), result.stdout
    assert "specinfer.api.layer_probe -> specinfer.operator.controller" in result.stdout


def test_the_view_resolves_mapped_packages_to_the_repository_files(view: Path):
    """Python, given only the view on its path, imports the packages that the package-dir mapping hides
    from static tools from the repository's own folders."""
    expected = {
        "specinfer.operator.tuner.policy": ROOT / "operator" / "tuner" / "policy" / "__init__.py",
        "specinfer.runtime.methods": ROOT / "runtime" / "methods" / "__init__.py",
        "specinfer.bench": ROOT / "bench" / "__init__.py",
        "specinfer.api": ROOT / "src" / "specinfer" / "api" / "__init__.py",
    }
    script = ("import importlib, sys\n"
              "for name in sys.argv[1:]:\n"
              "    print(importlib.import_module(name).__file__)\n")
    result = subprocess.run([sys.executable, "-c", script, *expected], env={**os.environ, "PYTHONPATH": str(view)},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    found = dict(zip(expected, result.stdout.split(), strict=True))
    for name, path in expected.items():
        assert Path(found[name]).is_relative_to(view), f"{name} was imported from {found[name]}, not the view"
        assert Path(found[name]).resolve() == path, f"{name}: {found[name]} links to {Path(found[name]).resolve()}"


def test_the_tests_import_this_checkouts_code(tmp_path: Path):
    """tests/conftest.py refuses to run a checkout's tests on another checkout's code (an editable
    install made elsewhere): here the code is this checkout's, and for a second clone it is not."""
    from tests.conftest import PACKAGE_FOLDERS, code_from_elsewhere

    assert code_from_elsewhere(ROOT) == []
    second_clone = tmp_path / "clone"
    assert len(code_from_elsewhere(second_clone)) == len(PACKAGE_FOLDERS)


def test_the_installed_packages_are_the_package_folders():
    """pyproject's package list names every folder that holds a package, and nothing else."""
    import tomllib

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared = set(setup["packages"])
    roots = setup["package-dir"]
    found = set()
    for name, folder in roots.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            if any(part.startswith(".") or part in ("__pycache__", "build") for part in init.relative_to(ROOT).parts):
                continue
            relative = init.parent.relative_to(base)
            found.add(".".join(filter(None, [name, *relative.parts])) if name else ".".join(relative.parts))
    assert declared == found, f"declared only: {sorted(declared - found)}; folders only: {sorted(found - declared)}"


CONTRACTS = {"catalogue": "The catalogue is the bottom layer", "api": "The API stands on the catalogue alone",
             "policy": "The tuner policy is pure", "pure": "The pure rooms are pure"}
PURE_BLOCK = ("<!-- pure modules: the import contracts in pyproject.toml -->", "<!-- end of pure modules -->")


def _pyproject() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def contract_modules(layer: str) -> list[str]:
    contracts = _pyproject()["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["name"].startswith(CONTRACTS[layer])]
    return list(contract["source_modules"])


def _as_mypy_pattern(module: str) -> str:
    """A package is named "pkg.*" in mypy's overrides (itself and its submodules), a module by its name."""
    relative = module.removeprefix("specinfer.").split(".")
    folders = _pyproject()["tool"]["setuptools"]["package-dir"]
    for package, folder in sorted(folders.items(), key=lambda item: -len(item[0])):
        if module == package or module.startswith(package + "."):
            relative = module.removeprefix(package).lstrip(".").split(".") if module != package else []
            path = ROOT / folder / Path(*relative) if relative else ROOT / folder
            return f"{module}.*" if path.is_dir() else module
    raise AssertionError(f"{module}: not under any package-dir folder")


def pure_docs_block() -> str:
    modules = sorted(contract_modules("pure"))
    return "\n".join([PURE_BLOCK[0], "", *(f"- `{m}`" for m in modules), "", PURE_BLOCK[1]])


def test_which_modules_are_pure_is_written_once():
    """The import contracts name the pure layers; mypy's strict list and docs/architecture.md must be
    exactly those modules, so the three cannot drift apart again."""
    layers = [m for layer in CONTRACTS for m in contract_modules(layer)]
    expected = {_as_mypy_pattern(m) for m in layers}
    (strict,) = [o for o in _pyproject()["tool"]["mypy"]["overrides"] if o.get("disallow_untyped_defs")]
    assert set(strict["module"]) == expected, (f"strict only: {sorted(set(strict['module']) - expected)}; "
                                               f"contracts only: {sorted(expected - set(strict['module']))}")
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert pure_docs_block() in doc, "docs/architecture.md: replace the pure-modules block with:\n" + pure_docs_block()


# -- the layers are folders ---------------------------------------------------------------------------

OPERATOR = ROOT / "operator"
# Pure throughout, though not named `pure`: the child builders, shared by inference and calibration, and what
# the operator and a pod agree on. (The tuner policy is pure too, under its own stricter contract.)
PURE_THROUGHOUT = {"specinfer.operator.render": OPERATOR / "render",
                   "specinfer.runtime.contract": ROOT / "runtime" / "contract"}
POLICY = "specinfer.operator.tuner.policy"
# The only modules at operator/'s top: every other module has a room (docs/architecture.md, "Layers").
OPERATOR_TOP = {
    "__init__.py": "the package: the map of its rooms",
    "controller.py": "wires the controllers, the cache, the work queues and leadership: the one module that knows "
                     "every room, so it sits above them all",
    "operator_cli.py": "`specinfer operator`: the process (its configuration, the cluster check, kopf)",
    "render_cli.py": "`specinfer render`: the rendering offline; it reads files, so it stays out of the pure render/",
}
# runtime/ holds its rooms only: the catalogue, the operator-pod contract, the pod side, the simulator.
RUNTIME_ROOMS = {"methods", "contract", "pod", "sim"}
CLIENT_LIBRARIES = ("kubernetes", "aiohttp", "requests", "urllib3", "prometheus_api_client", "prometheus_client")


def module_name(path: Path, root: Path = ROOT) -> str:
    """operator/tuner/pure/observe.py -> specinfer.operator.tuner.pure.observe (a package for its __init__.py)."""
    relative = path.relative_to(root).with_suffix("")
    folders = _pyproject()["tool"]["setuptools"]["package-dir"]
    for package, folder in sorted(folders.items(), key=lambda item: -len(item[1])):
        if relative.is_relative_to(folder):
            parts = [*package.split("."), *relative.relative_to(folder).parts]
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    raise AssertionError(f"{path}: not under any package-dir folder")


def _under(module: str, packages: set[str]) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


def pure_rooms(root: Path = ROOT) -> set[str]:
    """Every package named `pure` under operator/, and the rooms pure throughout."""
    named = {module_name(init, root) for init in (root / "operator").rglob("pure/__init__.py")}
    return named | set(PURE_THROUGHOUT)


def io_modules(root: Path = ROOT) -> set[str]:
    """Every module of the operator outside its pure rooms and the policy (a package by its __init__, unless a
    pure room lies under it: then its __init__ is only the room's map)."""
    pure = pure_rooms(root) | {POLICY}
    modules = {module_name(path, root) for path in (root / "operator").rglob("*.py") if "__pycache__" not in path.parts}
    return {m for m in modules if not _under(m, pure) and not any(_under(room, {m}) for room in pure)}


def uncovered(modules: set[str], entries: list[str]) -> set[str]:
    """The modules that no entry names (an entry names itself and every module under it)."""
    return {m for m in modules if not _under(m, set(entries))}


def _forbidden_in_the_operator(layer: str) -> list[str]:
    contracts = _pyproject()["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["name"].startswith(CONTRACTS[layer])]
    return [m for m in contract["forbidden_modules"] if m.startswith("specinfer.operator")]


def test_the_pure_rooms_are_the_folders_named_pure():
    """Which modules are pure reads off the tree: the pure contract (and so mypy's strict list and the docs'
    list) names exactly the folders called `pure`, and the two rooms pure throughout."""
    assert all(folder.is_dir() for folder in PURE_THROUGHOUT.values())
    assert set(contract_modules("pure")) == pure_rooms(), (
        f"pyproject.toml's pure contract names {sorted(contract_modules('pure'))}; the pure rooms of the tree "
        f"are {sorted(pure_rooms())}")


def test_every_io_module_of_the_operator_is_forbidden_to_the_pure_rooms_and_the_policy():
    """A new I/O module (say operator/tuner/alerting.py) fails here until the contracts forbid it."""
    pure = _forbidden_in_the_operator("pure")
    assert uncovered(io_modules(), pure) == set(), "add these to the pure contract's forbidden_modules"
    policy = _forbidden_in_the_operator("policy")
    rest = io_modules() | pure_rooms() - {"specinfer.runtime.contract"}
    assert uncovered(rest, policy) == set(), "add these to the policy contract's forbidden_modules"
    assert not [m for m in pure if _under(m, pure_rooms() | {POLICY})], "the pure rooms may import one another"


def test_the_room_checks_see_a_new_module_and_a_new_room(tmp_path: Path):
    for folder in ("operator/tuner/pure", "operator/tuner/policy", "operator/billing/pure"):
        (tmp_path / folder).mkdir(parents=True)
    for module in ("__init__", "tuner/__init__", "tuner/loop", "tuner/alerting", "tuner/pure/__init__",
                   "tuner/pure/observe", "tuner/policy/__init__", "billing/__init__", "billing/pure/__init__",
                   "billing/pure/invoice", "billing/reconciler"):
        (tmp_path / "operator" / f"{module}.py").write_text("")

    assert pure_rooms(tmp_path) == {"specinfer.operator.tuner.pure", "specinfer.operator.billing.pure",
                                    *PURE_THROUGHOUT}
    assert io_modules(tmp_path) == {"specinfer.operator.tuner.loop", "specinfer.operator.tuner.alerting",
                                    "specinfer.operator.billing.reconciler"}
    assert uncovered(io_modules(tmp_path), ["specinfer.operator.tuner.loop", "specinfer.operator.billing"]) \
        == {"specinfer.operator.tuner.alerting"}


def loose_modules(folder: Path) -> set[str]:
    return {path.name for path in folder.glob("*.py")}


def test_the_operators_top_holds_only_its_commands_and_its_wiring(tmp_path: Path):
    assert loose_modules(OPERATOR) - set(OPERATOR_TOP) == set(), (
        "give each of these a room (docs/architecture.md, Layers), or say in OPERATOR_TOP why it sits at the top")
    assert set(OPERATOR_TOP) <= loose_modules(OPERATOR), "OPERATOR_TOP names a module that is gone"
    for name in ("controller.py", "helpers.py"):
        (tmp_path / name).write_text("")
    assert loose_modules(tmp_path) - set(OPERATOR_TOP) == {"helpers.py"}


def test_runtime_holds_its_rooms_only():
    runtime = ROOT / "runtime"
    assert loose_modules(runtime) == {"__init__.py"}, "a module of runtime/ belongs in one of its rooms"
    assert {init.parent.name for init in runtime.glob("*/__init__.py")} == RUNTIME_ROOMS


def _folder_of_links(link: Path) -> None:
    """Replace a link to a folder by a folder of links to its entries, so what is written there stays in the view."""
    target = link.resolve()
    link.unlink()
    link.mkdir()
    for entry in target.iterdir():
        (link / entry.name).symlink_to(entry)


def _probe(view: Path, package: str, source: str) -> None:
    folder = view
    for part in package.split("."):
        folder = folder / part
        if folder.is_symlink():
            _folder_of_links(folder)
    (folder / "layer_probe.py").write_text(source)


def test_a_client_in_a_pure_room_and_the_api_in_the_pod_side_break_their_contracts(view: Path):
    """The contracts hold for a module no one listed: a new module in a pure room that imports a Kubernetes,
    HTTP or Prometheus client, and a pod-side module that imports the API beside the contract."""
    _probe(view, "specinfer.operator.selection.pure", "".join(f"import {name}\n" for name in CLIENT_LIBRARIES))
    _probe(view, "specinfer.runtime.pod.calibration", "import specinfer.api.spec\n")

    result = _lint_imports(view)

    assert result.returncode != 0, result.stdout
    broken = " ".join(result.stdout.split("Broken contracts")[-1].split())
    assert f"{CONTRACTS['pure']}: no Kubernetes, Prometheus or HTTP client, no I/O module" in broken, result.stdout
    for name in CLIENT_LIBRARIES:
        assert f"specinfer.operator.selection.pure.layer_probe -> {name}" in result.stdout
    assert "The pod side reaches the API only through the contract" in broken
    assert "specinfer.runtime.pod.calibration.layer_probe -> specinfer.api.spec" in result.stdout
