"""Loopback ports for what the local stack starts, chosen so that nothing else takes them first.

Asking the kernel for a free port, closing it and handing the number to a server that binds it
seconds later loses on a busy machine: the kernel hands out the same range
(/proc/sys/net/ipv4/ip_local_port_range) to every outgoing connection, and a test run makes
thousands (engines, scrapes, watches) while its next server starts. So a port here is

1. chosen outside that ephemeral range, which no outgoing connection is given;
2. reserved across processes by an exclusive lock on a file named after it, so two specinfer
   processes (two clusters, the engine tests beside the rest) never choose the same one -- the
   lock lasts while the reservation is held, which covers the moment the server binds;
3. bound once to check that nothing listens there now.

What can still take it is a foreign server binding that very port in between; starters therefore
retry with a new port when a component's log says its address was in use (`address_in_use`), and
say which component and port when they give up.
"""

from __future__ import annotations

import fcntl
import os
import random
import re
import socket
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL = (32768, 60999)  # Linux's default, used when the file cannot be read
LOWEST = 10000  # below: the ports services are configured on by convention
TRIES = 200  # candidates looked at before giving up (each one is a lock and a bind)
ATTEMPTS = 4  # starts of one component before its port trouble is reported
_IN_USE = re.compile(r"address already in use|errno 98\b|eaddrinuse", re.IGNORECASE)


class NoFreePort(RuntimeError):
    """No port could be reserved (every candidate locked or bound)."""


class PortTaken(RuntimeError):
    """A component could not bind its port: another process took it."""

    def __init__(self, component: str, port: int, log_tail: str = "") -> None:
        self.component, self.port, self.log_tail = component, port, log_tail
        super().__init__(f"{component} could not bind 127.0.0.1:{port}: another process took the port")


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (inclusive)."""
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL
    return (low, high) if 0 < low <= high <= 65535 else DEFAULT_EPHEMERAL


def candidate_ranges(ephemeral: tuple[int, int], *, block: int = 1, lowest: int = LOWEST) -> list[range]:
    """Ranges of first ports of `block` consecutive ports that lie outside the ephemeral range;
    empty when it leaves no room (then the kernel's own choice is the fallback)."""
    low, high = ephemeral
    ranges = [range(lowest, low - block + 1), range(max(lowest, high + 1), 65535 - block + 2)]
    return [r for r in ranges if len(r) > 0]


def lock_dir() -> Path:
    """Shared by every process of this user on the machine: that is what makes the locks a reservation."""
    folder = Path(tempfile.gettempdir()) / f"specinfer-ports-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


@dataclass
class Reservation:
    """Ports held for one owner: while held, no other specinfer process chooses them."""

    ports: tuple[int, ...]
    owner: str
    _files: list[int] = field(default_factory=list, repr=False)

    @property
    def port(self) -> int:
        return self.ports[0]

    def release(self) -> None:
        """Let other processes choose these ports again (once the owner has bound them or is gone)."""
        with _lock:
            for fd in self._files:
                os.close(fd)  # closing the file drops its lock
            self._files.clear()
            for port in self.ports:
                if _held.get(port) is self:
                    del _held[port]

    @property
    def held(self) -> bool:
        return bool(self._files)


_lock = threading.Lock()
_held: dict[int, Reservation] = {}


def _lock_port(port: int) -> int | None:
    fd = os.open(lock_dir() / f"{port}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _kernel_choice() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _try(first: int, block: int, owner: str) -> Reservation | None:
    files: list[int] = []
    for port in range(first, first + block):
        fd = _lock_port(port) if port not in _held else None
        if fd is None or not _bindable(port):
            if fd is not None:
                os.close(fd)
            for taken in files:
                os.close(taken)
            return None
        files.append(fd)
    reservation = Reservation(tuple(range(first, first + block)), owner, files)
    for port in reservation.ports:
        _held[port] = reservation
    return reservation


def reserve(owner: str = "", *, block: int = 1, rng: random.Random | None = None,
            ephemeral: tuple[int, int] | None = None, lowest: int = LOWEST) -> Reservation:
    """Reserve `block` consecutive loopback ports for `owner` (named in errors); release() when done."""
    rng = rng or random.SystemRandom()
    ranges = candidate_ranges(ephemeral or ephemeral_range(), block=block, lowest=lowest)
    with _lock:
        for _ in range(TRIES):
            if ranges:
                chosen = rng.choice(ranges)  # a range, then a port in it: both sides of the ephemeral range
                first = chosen[rng.randrange(len(chosen))]
            else:  # the ephemeral range covers everything: only the lock and the bind protect the port
                first = _kernel_choice()
                if first + block - 1 > 65535:
                    continue
            reservation = _try(first, block, owner)
            if reservation is not None:
                return reservation
    raise NoFreePort(f"no free loopback port for {owner or 'a local server'} after {TRIES} tries "
                     f"(locks in {lock_dir()})")


def hold(port: int, owner: str = "") -> Reservation | None:
    """Lock a port that is already promised to clients (a server restarted on its old address) so that
    no other specinfer process chooses it meanwhile; None when another process holds it."""
    with _lock:
        if port in _held:
            return _held[port]
        fd = _lock_port(port)
        if fd is None:
            return None
        reservation = Reservation((port,), owner, [fd])
        _held[port] = reservation
        return reservation


def free_port(owner: str = "") -> int:
    """A port reserved for the rest of this process's life (tests, short-lived tools)."""
    return reserve(owner).port


def release(port: int) -> None:
    """Release the reservation that holds `port`, if this process holds one."""
    with _lock:
        reservation = _held.get(port)
    if reservation is not None:
        reservation.release()


def address_in_use(text: str) -> bool:
    """Whether a server's output says it could not bind its address."""
    return bool(_IN_USE.search(text))


def taken_port(text: str, candidates: list[int]) -> int:
    """Which of a component's ports its output names on the line that says the address was in use."""
    for line in text.splitlines():
        if _IN_USE.search(line):
            for port in candidates:
                if re.search(rf":{port}\b|\b{port}\)", line):
                    return port
    return candidates[0]
