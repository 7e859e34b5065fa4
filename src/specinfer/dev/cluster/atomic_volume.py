"""ConfigMap and Secret volumes laid out and updated as the kubelet's atomic writer does.

The kubelet (pkg/volume/util/atomic_writer.go) never rewrites a file a container may have open.
A volume folder holds the files in a hidden timestamped folder, a `..data` link to it, and one link
per top-level name of the payload:

    <folder>/..2026_12_01_18_00_00.123456789/runtime.json   the content (nested paths as folders)
    <folder>/..data -> ..2026_12_01_18_00_00.123456789
    <folder>/runtime.json -> ..data/runtime.json

An update writes a new timestamped folder, points `..data_tmp` at it and renames that over `..data`
(the one atomic step), then adds links for new names, removes the links of names gone and deletes
the old folder. Whoever opens `<folder>/K` gets the old or the new content, never a mix; a file held
open keeps its old content (its inode outlives the deleted folder) until it is opened again. A payload
equal to what is on disk writes nothing, so inodes and mtimes stay. Pure file logic: no cluster.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import time
from collections.abc import Mapping
from pathlib import Path

DATA = "..data"
DATA_TMP = "..data_tmp"
FILE_MODE = 0o644  # the volume's defaultMode when the pod sets none


def clean_path(path: str) -> str:
    """A payload path as the kubelet accepts it: relative, no `..` element, not starting with `..`."""
    cleaned = posixpath.normpath(path) if path else "."
    if cleaned in (".", "/") or path.startswith("/") or ".." in path.split("/") or cleaned.startswith(".."):
        raise ValueError(f"invalid volume path {path!r}: relative, without '..', not starting with '..'")
    return cleaned


def projected(folder: Path) -> dict[str, bytes] | None:
    """The payload `folder` shows now (path -> content); None when nothing was projected there yet."""
    data = folder / DATA
    if not data.is_symlink():
        return None
    root = folder / os.readlink(data)
    return {file.relative_to(root).as_posix(): file.read_bytes() for file in root.rglob("*") if file.is_file()}


def write(folder: Path, payload: Mapping[str, bytes]) -> bool:
    """Project `payload` (path -> content) into `folder`; True when it wrote, False when it was current."""
    files = {clean_path(path): content for path, content in payload.items()}
    folder.mkdir(parents=True, exist_ok=True)
    old = os.readlink(folder / DATA) if (folder / DATA).is_symlink() else None
    if old is not None and projected(folder) == files:
        return False
    new = _timestamped_folder(folder)
    for path, content in files.items():
        file = new / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(content)
        file.chmod(FILE_MODE)
    (folder / DATA_TMP).unlink(missing_ok=True)  # left by a write that died halfway
    os.symlink(new.name, folder / DATA_TMP)
    os.replace(folder / DATA_TMP, folder / DATA)  # readers switch here, all files at once
    names = {path.split("/")[0] for path in files}
    for name in names:
        if not (folder / name).is_symlink():
            os.symlink(f"{DATA}/{name}", folder / name)
    for entry in folder.iterdir():
        if not entry.name.startswith("..") and entry.name not in names and entry.is_symlink():
            entry.unlink()  # a key no longer projected
    if old is not None:
        shutil.rmtree(folder / old, ignore_errors=True)
    return True


def _timestamped_folder(folder: Path) -> Path:
    while True:
        now = time.time_ns()
        candidate = folder / (time.strftime("..%Y_%m_%d_%H_%M_%S", time.gmtime(now // 10**9)) + f".{now % 10**9:09d}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        candidate.chmod(0o755)
        return candidate
