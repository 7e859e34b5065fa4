"""Build `build/import-view/specinfer`: the package as Python imports it, made of relative symlinks.

The repository maps folders outside src/ into the package (pyproject.toml's package-dir:
operator/ -> specinfer.operator, runtime/ -> specinfer.runtime, bench/ -> specinfer.bench), which
an editable install resolves with an import hook that static tools cannot follow. import-linter
(grimp) and mypy read this view instead; its paths name the real files once the link is followed.

    python tools/import_view.py        # prints the folder to put on PYTHONPATH / MYPYPATH
"""

from __future__ import annotations

import os
import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VIEW = ROOT / "build" / "import-view"


def build(view: Path = VIEW) -> Path:
    """(Re)build the view in `view` (default build/import-view) and return it."""
    package_dir: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"]
    if view.exists():
        shutil.rmtree(view)
    mapped = {tuple(package.split(".")): ROOT / folder for package, folder in package_dir.items()}
    for parts, folder in sorted(mapped.items()):
        target = view.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        if any(other[:len(parts)] == parts and other != parts for other in mapped):
            # a package with mapped subpackages: a real folder of links to its entries (never write into it)
            target.mkdir(exist_ok=True)
            for entry in folder.iterdir():
                if entry.name != "__pycache__" and (target / entry.name).exists() is False:
                    (target / entry.name).symlink_to(os.path.relpath(entry, target))
        else:
            target.symlink_to(os.path.relpath(folder, target.parent), target_is_directory=True)
    return view


if __name__ == "__main__":
    print(build())
    sys.exit(0)
