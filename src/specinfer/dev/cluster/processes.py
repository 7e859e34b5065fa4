"""Start, identify and stop the background processes a local cluster owns.

Each process is recorded with its pid and its start time (from /proc/<pid>/stat);
a pid counts as ours only while both match, so `stop` never signals a recycled pid,
whatever the process exec'd into (a console script shows up as its interpreter).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

# Popen objects of the processes this process started: kept so that their exit codes can be read
# (a dropped Popen is reaped by the subprocess module's own clean-up, losing its exit code).
_children: dict[int, subprocess.Popen] = {}


@dataclass(frozen=True)
class ProcessRecord:
    name: str
    pid: int
    executable: str
    argv: list[str]
    log: str
    start_ticks: int | None = None  # /proc/<pid>/stat field 22: identifies this process, not just its pid
    log_offset: int = 0  # the log's size when this run started: what it wrote comes after

    def to_dict(self) -> dict:
        return asdict(self)


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (field 3, the state, comes first)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def _start_ticks(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def start(name: str, argv: list[str], *, log_dir: Path, env: dict | None = None,
          cwd: Path | None = None) -> ProcessRecord:
    """Start `argv` in a session of its own (it outlives `specinfer cluster up` and ignores our Ctrl-C)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    environment = {**os.environ, **(env or {})}
    executable = shutil.which(argv[0], path=environment.get("PATH")) or argv[0]
    with open(log_path, "ab") as log:
        offset = log.tell()
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=environment, start_new_session=True, cwd=cwd)
    _children[process.pid] = process
    return ProcessRecord(name=name, pid=process.pid, executable=executable, argv=argv, log=str(log_path),
                         start_ticks=_start_ticks(process.pid), log_offset=offset)


def is_running(record: ProcessRecord) -> bool:
    """True while the pid is alive (not a zombie) and is still the process we started."""
    fields = _stat_fields(record.pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return record.start_ticks is None or int(fields[19]) == record.start_ticks


def stop(record: ProcessRecord, *, timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after `timeout`; only if the pid is still ours. Then, as a kubelet ends a
    container, whatever is left of the session `start` made for it (a vLLM API server killed while
    starting left its engine-core and worker processes running)."""
    if not is_running(record):
        if record.pid in _children:  # started by this process, so the group is the one it made
            _kill_orphans(record.pid)
        _reap(record.pid)
        return
    os.kill(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and is_running(record):
        time.sleep(0.1)
    if is_running(record):
        os.kill(record.pid, signal.SIGKILL)
        for _ in range(50):
            if not is_running(record):
                break
            time.sleep(0.1)
    _kill_orphans(record.pid)  # it was ours a moment ago; reaping comes after
    _reap(record.pid)


def _kill_orphans(leader: int) -> None:
    """SIGKILL what is left of the process group `start` made for `leader`."""
    try:
        os.killpg(leader, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(pid: int) -> None:
    child = _children.pop(pid, None)
    if child is not None:
        child.poll()
        return
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def exit_code(record: ProcessRecord) -> int | None:
    """The exit code (negative: killed by that signal) of an ended process this process started;
    None while it runs or when it is not our child."""
    child = _children.get(record.pid)
    return None if child is None else child.poll()


def log_tail(record: ProcessRecord, lines: int = 25) -> str:
    try:
        return "\n".join(Path(record.log).read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def log_since_start(record: ProcessRecord) -> str:
    """What this run of the process wrote (its log is appended to across restarts)."""
    try:
        with open(record.log, "rb") as log:
            log.seek(record.log_offset)
            return log.read().decode(errors="replace")
    except FileNotFoundError:
        return ""
