"""Start, identify and stop the background processes a local cluster owns.

Each process is recorded with its pid and executable path; `stop` signals a pid
only while /proc still shows that executable, so a recycled pid is never hit.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcessRecord:
    name: str
    pid: int
    executable: str
    argv: list[str]
    log: str

    def to_dict(self) -> dict:
        return asdict(self)


def free_port() -> int:
    """A currently free loopback port (the kernel picks; tiny race accepted for local use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(name: str, argv: list[str], *, log_dir: Path, env: dict | None = None) -> ProcessRecord:
    """Start `argv` detached from our session (it outlives `specinfer cluster up`)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env={**os.environ, **(env or {})}, start_new_session=True)
    record = ProcessRecord(name=name, pid=process.pid, executable=argv[0], argv=argv, log=str(log_path))
    # Between fork and exec /proc shows the Python parent's command line; wait for the exec so
    # that is_running() does not mistake a starting process for a dead one.
    deadline = time.monotonic() + 5
    while process.poll() is None and not is_running(record) and time.monotonic() < deadline:
        time.sleep(0.01)
    return record


def is_running(record: ProcessRecord) -> bool:
    """True while the pid is alive and still runs the executable we started."""
    try:
        cmdline = Path(f"/proc/{record.pid}/cmdline").read_bytes().split(b"\0")
        stat = Path(f"/proc/{record.pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":  # zombie: exited, not yet reaped
        return False
    return bool(cmdline) and cmdline[0].decode(errors="replace") == record.executable


def stop(record: ProcessRecord, *, timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after `timeout`; only if the pid is still ours."""
    if not is_running(record):
        return
    os.kill(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_running(record):
            _reap(record.pid)
            return
        time.sleep(0.1)
    if is_running(record):
        os.kill(record.pid, signal.SIGKILL)
        _reap(record.pid)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def log_tail(record: ProcessRecord, lines: int = 25) -> str:
    try:
        return "\n".join(Path(record.log).read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"
