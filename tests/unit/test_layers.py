"""The layer contracts (pyproject.toml [tool.importlinter]) hold, checked by `lint-imports` on a fresh
import view (tools/import_view.py), so `make test` catches a layering regression without `make lint`.

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
             "policy": "The tuner policy is pure", "pure": "Rendering, status and the tuner's adapters are pure"}
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
