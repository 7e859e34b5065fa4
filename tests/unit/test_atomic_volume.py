"""ConfigMap volumes laid out and updated as the kubelet's atomic writer does (dev/cluster/atomic_volume.py)."""

from __future__ import annotations

import os
import re
import threading

import pytest

from specinfer.dev.cluster import atomic_volume
from specinfer.dev.cluster.atomic_volume import DATA, DATA_TMP

pytestmark = pytest.mark.unit

TIMESTAMPED = re.compile(r"^\.\.\d{4}_\d{2}_\d{2}_\d{2}_\d{2}_\d{2}\.\d{9}$")


def timestamped_folders(folder):
    return sorted(entry.name for entry in folder.iterdir() if TIMESTAMPED.match(entry.name))


def test_layout_is_the_kubelets_timestamped_folder_behind_data(tmp_path):
    volume = tmp_path / "config"
    assert atomic_volume.write(volume, {"runtime.json": b'{"k": 3}', "schedule.json": b"[]"})

    [stamped] = timestamped_folders(volume)
    assert os.readlink(volume / DATA) == stamped  # relative, as the kubelet's
    for key in ("runtime.json", "schedule.json"):
        assert os.readlink(volume / key) == f"{DATA}/{key}"
        assert (volume / stamped / key).is_file() and not (volume / stamped / key).is_symlink()
        assert (volume / stamped / key).stat().st_mode & 0o777 == 0o644
    assert (volume / "runtime.json").read_bytes() == b'{"k": 3}'
    assert sorted(entry.name for entry in volume.iterdir()) == sorted([DATA, stamped, "runtime.json", "schedule.json"])
    assert not os.path.lexists(volume / DATA_TMP)
    assert atomic_volume.projected(volume) == {"runtime.json": b'{"k": 3}', "schedule.json": b"[]"}


def test_an_update_swaps_data_and_a_reader_keeps_the_old_file_until_it_reopens(tmp_path):
    volume = tmp_path / "config"
    atomic_volume.write(volume, {"schedule.json": b"old", "runtime.json": b"r"})
    old_folder = os.readlink(volume / DATA)
    old_inode = (volume / "schedule.json").stat().st_ino
    link_inode = os.lstat(volume / "schedule.json").st_ino
    with open(volume / "schedule.json", "rb") as held:
        assert atomic_volume.write(volume, {"schedule.json": b"new", "runtime.json": b"r"})

        assert os.readlink(volume / DATA) != old_folder
        assert not (volume / old_folder).exists()  # the old folder is gone ...
        assert held.read() == b"old"  # ... but the open file still reads what it opened
    assert os.lstat(volume / "schedule.json").st_ino == link_inode  # the key's link was not touched: ..data moved
    assert (volume / "schedule.json").stat().st_ino != old_inode  # a new file, never one rewritten in place
    assert (volume / "schedule.json").read_bytes() == b"new"  # reopening sees the update
    assert timestamped_folders(volume) == [os.readlink(volume / DATA)]


def test_readers_switch_at_one_rename_of_data_tmp_over_data(tmp_path, monkeypatch):
    """Up to the rename every reader gets the old payload, right after it the new one: nothing else moves."""
    volume = tmp_path / "config"
    atomic_volume.write(volume, {"schedule.json": b"old", "runtime.json": b"r1"})
    renames = []
    replace = os.replace

    def watched(source, destination):
        visible = {key: (volume / key).read_bytes() for key in ("schedule.json", "runtime.json")}
        replace(source, destination)
        renames.append((os.path.basename(source), os.path.basename(destination), visible,
                        {key: (volume / key).read_bytes() for key in ("schedule.json", "runtime.json")}))

    monkeypatch.setattr(atomic_volume.os, "replace", watched)
    atomic_volume.write(volume, {"schedule.json": b"new", "runtime.json": b"r2"})

    assert renames == [(DATA_TMP, DATA, {"schedule.json": b"old", "runtime.json": b"r1"},
                        {"schedule.json": b"new", "runtime.json": b"r2"})]


def test_unchanged_data_is_not_rewritten(tmp_path):
    volume = tmp_path / "config"
    atomic_volume.write(volume, {"schedule.json": b"same"})
    before = (volume / "schedule.json").stat()
    data = os.readlink(volume / DATA)

    assert not atomic_volume.write(volume, {"schedule.json": b"same"})

    after = (volume / "schedule.json").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert os.readlink(volume / DATA) == data


def test_nested_paths_link_their_top_folder(tmp_path):
    """items may put a key under a path with folders: the visible link is the top folder's, as the kubelet's."""
    volume = tmp_path / "config"
    atomic_volume.write(volume, {"engine/runtime.json": b"r", "engine/extra/x": b"x", "top": b"t"})

    assert os.readlink(volume / "engine") == f"{DATA}/engine"
    assert (volume / "engine" / "runtime.json").read_bytes() == b"r"
    assert (volume / "engine" / "extra" / "x").read_bytes() == b"x"
    assert atomic_volume.projected(volume) == {"engine/runtime.json": b"r", "engine/extra/x": b"x", "top": b"t"}


def test_a_key_removed_from_the_payload_disappears(tmp_path):
    volume = tmp_path / "config"
    atomic_volume.write(volume, {"runtime.json": b"r", "schedule.json": b"s", "old/x": b"x"})

    assert atomic_volume.write(volume, {"runtime.json": b"r"})

    assert not os.path.lexists(volume / "schedule.json")  # no dangling link left either
    assert not os.path.lexists(volume / "old")
    assert (volume / "runtime.json").read_bytes() == b"r"
    assert atomic_volume.projected(volume) == {"runtime.json": b"r"}


def test_a_new_key_gets_its_link(tmp_path):
    volume = tmp_path / "config"
    atomic_volume.write(volume, {"runtime.json": b"r"})

    assert atomic_volume.write(volume, {"runtime.json": b"r", "schedule.json": b"s"})

    assert os.readlink(volume / "schedule.json") == f"{DATA}/schedule.json"
    assert (volume / "schedule.json").read_bytes() == b"s"


def test_an_empty_payload_projects_an_empty_volume(tmp_path):
    volume = tmp_path / "config"
    atomic_volume.write(volume, {"runtime.json": b"r"})

    assert atomic_volume.write(volume, {})

    assert sorted(entry.name for entry in volume.iterdir()) == sorted([DATA, os.readlink(volume / DATA)])
    assert atomic_volume.projected(volume) == {}
    assert not atomic_volume.write(volume, {})


@pytest.mark.parametrize("path", ["", "/etc/passwd", "../escape", "a/../../b", "..data", "..hidden/x", ".", "a/.."])
def test_paths_the_kubelet_refuses(tmp_path, path):
    with pytest.raises(ValueError):
        atomic_volume.write(tmp_path / "config", {path: b"x"})
    assert not os.path.lexists(tmp_path / "config" / DATA)


def test_readers_see_the_old_or_the_new_payload_never_a_mix(tmp_path):
    """A reader that opens the file during updates reads one whole version, whatever the timing.

    It may find no file at all for an instant: its path walk can resolve `..data` to the old folder just
    before the rename and look the key up there just after the old folder is deleted. The kubelet's writer
    deletes the old folder right after the rename too, so a reader on a cluster must retry as well."""
    volume = tmp_path / "config"
    versions = [bytes([65 + n]) * 200_000 for n in range(4)]
    atomic_volume.write(volume, {"schedule.json": versions[0]})
    seen: list[bytes] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                seen.append((volume / "schedule.json").read_bytes())
            except FileNotFoundError:
                pass

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for round_ in range(60):
            atomic_volume.write(volume, {"schedule.json": versions[(round_ + 1) % len(versions)]})
    finally:
        stop.set()
        reader.join()
    assert seen and set(seen) <= set(versions), "a reader saw a partial file during an update"
