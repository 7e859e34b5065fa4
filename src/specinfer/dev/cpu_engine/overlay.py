"""Put this checkout's specinfer on the shared engine environment's path, as the runtime image has it.

The engine environment is large and shared by every checkout (worktrees, CI's fresh clone),
so specinfer is never installed into it. Instead each checkout has a small overlay folder
(`build/engine-overlay/`, rebuilt when stale):

    site/specinfer/                 symlinks to this checkout's package folders, laid out as
                                    pyproject.toml's package-dir maps them (so edits are live)
    site/specinfer-<v>.dist-info/   METADATA + entry_points.txt generated from pyproject.toml:
                                    the `vllm.stat_logger_plugins` entry point vLLM loads, and
                                    the `specinfer` console script
    bin/specinfer                   that console script, run by the engine's interpreter

A process gets it with `overlay_env()`: PYTHONPATH=site (importlib.metadata scans sys.path, so
vLLM finds the plugin's entry point there) and PATH=bin:<engine>/bin (so `specinfer runtime`
and the `vllm` it execs both run in the engine environment, as in the image).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tomllib
from collections.abc import Mapping
from pathlib import Path

from specinfer import __version__
from specinfer.dev.cluster.paths import REPO_ROOT

OVERLAY_DIR = REPO_ROOT / "build" / "engine-overlay"
PACKAGE = "specinfer"
STAMP = "overlay.json"


def package_folders(pyproject: Mapping, root: Path) -> dict[str, Path]:
    """Subpackage path inside `specinfer` ("" for the package itself) -> its source folder."""
    package_dir = pyproject["tool"]["setuptools"]["package-dir"]
    folders = {}
    for package, folder in package_dir.items():
        if package == PACKAGE:
            folders[""] = root / folder
        elif package.startswith(PACKAGE + ".") and package.count(".") == 1:
            folders[package.split(".", 1)[1]] = root / folder
    if "" not in folders:
        raise ValueError(f"pyproject.toml maps no folder to the {PACKAGE} package")
    return folders


def entry_points_text(pyproject: Mapping) -> str:
    """entry_points.txt for the console scripts and plugin groups pyproject.toml declares."""
    project = pyproject["project"]
    groups = {"console_scripts": project.get("scripts", {}), **project.get("entry-points", {})}
    sections = []
    for group, entries in groups.items():
        lines = [f"[{group}]", *(f"{name} = {target}" for name, target in entries.items())]
        sections.append("\n".join(lines))
    return "\n\n".join(sections) + "\n"


def console_script(python: Path) -> str:
    return f"#!{python}\nimport sys\nfrom specinfer.cli import main\nsys.exit(main())\n"


def _wanted(engine_dir: Path, root: Path) -> dict:
    pyproject_text = (root / "pyproject.toml").read_text()
    pyproject = tomllib.loads(pyproject_text)
    folders = package_folders(pyproject, root)
    top = sorted(p.name for p in folders[""].iterdir() if p.name != "__pycache__")
    return {"engine": str(engine_dir), "version": __version__, "top": top,
            "pyproject": hashlib.sha256(pyproject_text.encode()).hexdigest(),
            "folders": {k: str(v) for k, v in sorted(folders.items())}}


def ensure_overlay(engine_dir: Path, *, destination: Path = OVERLAY_DIR, root: Path = REPO_ROOT) -> Path:
    """Build (or confirm) the overlay for `engine_dir`; cheap when nothing changed."""
    wanted = _wanted(engine_dir, root)
    stamp = destination / STAMP
    if stamp.is_file() and json.loads(stamp.read_text()) == wanted:
        return destination
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    staging = destination.with_name(f"{destination.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    package = staging / "site" / PACKAGE
    package.mkdir(parents=True)
    folders = package_folders(pyproject, root)
    for name in wanted["top"]:
        (package / name).symlink_to(folders[""] / name)
    for subpackage, folder in folders.items():
        if subpackage:
            (package / subpackage).symlink_to(folder)
    dist_info = staging / "site" / f"{PACKAGE}-{__version__}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {__version__}\n")
    (dist_info / "entry_points.txt").write_text(entry_points_text(pyproject))
    (dist_info / "INSTALLER").write_text("specinfer-overlay\n")
    bin_dir = staging / "bin"
    bin_dir.mkdir()
    script = bin_dir / PACKAGE
    script.write_text(console_script(engine_dir / "bin" / "python"))
    script.chmod(0o755)
    (staging / STAMP).write_text(json.dumps(wanted))
    old = destination.with_name(f"{destination.name}.old-{os.getpid()}")
    if destination.exists():
        destination.rename(old)
    staging.rename(destination)
    shutil.rmtree(old, ignore_errors=True)
    return destination


def overlay_env(engine_dir: Path, overlay: Path, base_path: str) -> dict[str, str]:
    """Variables that make a process see the engine image's environment with this checkout's code."""
    return {"PATH": os.pathsep.join([str(overlay / "bin"), str(engine_dir / "bin"), base_path]),
            "PYTHONPATH": str(overlay / "site"),
            "VIRTUAL_ENV": str(engine_dir)}


def engine_process_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) as seen inside the engine environment.

    Raises EngineNotInstalled (naming the fix) when the environment is missing."""
    from specinfer.dev.cpu_engine.environment import require_installed

    base = dict(os.environ if base is None else base)
    engine_dir = require_installed()
    overlay = ensure_overlay(engine_dir)
    return {**base, **overlay_env(engine_dir, overlay, base.get("PATH", os.defpath))}
