"""Ports the local stack reserves: outside the kernel's ephemeral range, never handed out twice."""

from __future__ import annotations

import random
import socket
import subprocess
import sys

import pytest

from specinfer.dev.cluster import ports

pytestmark = pytest.mark.unit


def test_the_ephemeral_range_is_read_from_the_kernel_and_defaults_when_unreadable(tmp_path):
    given = tmp_path / "range"
    given.write_text("40000\t50000\n")
    assert ports.ephemeral_range(given) == (40000, 50000)
    given.write_text("garbage")
    assert ports.ephemeral_range(given) == ports.DEFAULT_EPHEMERAL
    assert ports.ephemeral_range(tmp_path / "missing") == ports.DEFAULT_EPHEMERAL


@pytest.mark.parametrize("ephemeral", [(32768, 60999), (1024, 30000), (40000, 65535), (20000, 65000)])
def test_reserved_ports_lie_outside_the_ephemeral_range(ephemeral):
    rng = random.Random(7)
    held = [ports.reserve("test", rng=rng, ephemeral=ephemeral, block=3) for _ in range(20)]
    try:
        for reservation in held:
            assert len(reservation.ports) == 3
            for port in reservation.ports:
                assert not ephemeral[0] <= port <= ephemeral[1], (port, ephemeral)
                assert ports.LOWEST <= port <= 65535
    finally:
        for reservation in held:
            reservation.release()


def test_the_kernels_choice_is_the_fallback_when_the_ephemeral_range_covers_everything():
    reservation = ports.reserve("test", ephemeral=(1024, 65535))
    try:
        assert reservation.held and 1024 <= reservation.port <= 65535
    finally:
        reservation.release()


def only(port: int) -> dict:
    """reserve()'s arguments that leave exactly one candidate: `port`."""
    return {"lowest": port, "ephemeral": (port + 1, 65535)}


def test_a_held_port_is_never_handed_out_again_until_released():
    first = ports.reserve("first")
    try:
        with pytest.raises(ports.NoFreePort):
            ports.reserve("second", **only(first.port))
    finally:
        first.release()
    again = ports.reserve("third", **only(first.port))
    try:
        assert again.port == first.port
    finally:
        again.release()


def test_another_process_cannot_reserve_a_port_this_one_holds():
    held = ports.reserve("parent")
    try:
        child = subprocess.run(
            [sys.executable, "-c", "import sys; from specinfer.dev.cluster import ports\n"
             f"try: print(ports.reserve('child', lowest={held.port}, ephemeral=({held.port + 1}, 65535)).port)\n"
             "except ports.NoFreePort as error: print(error)"],
            capture_output=True, text=True, timeout=60, check=True)
        assert "no free loopback port for child" in child.stdout, child.stdout + child.stderr
    finally:
        held.release()
    child = subprocess.run(  # the same child gets it once it is released: the lock was what refused it
        [sys.executable, "-c", "from specinfer.dev.cluster import ports\n"
         f"print(ports.reserve('child', lowest={held.port}, ephemeral=({held.port + 1}, 65535)).port)"],
        capture_output=True, text=True, timeout=60, check=True)
    assert child.stdout.strip() == str(held.port)


def test_a_port_something_listens_on_is_skipped():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        with pytest.raises(ports.NoFreePort):
            ports.reserve("test", **only(listener.getsockname()[1]))


def test_hold_locks_a_known_port_and_a_second_holder_is_told_no():
    reservation = ports.reserve("server")
    port = reservation.port
    reservation.release()
    held = ports.hold(port, "restart")
    try:
        assert held is not None and held.port == port
        assert ports.hold(port, "again") is held  # this process holds it already
    finally:
        held.release()


@pytest.mark.parametrize("output, expected", [
    ('E1205 run.go:72] "command failed" err="failed to create listener: failed to listen on 127.0.0.1:51085: '
     'listen tcp 127.0.0.1:51085: bind: address already in use"', True),
    ("OSError: [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000): address already in use",
     True),
    ("torch.distributed.DistNetworkError: EADDRINUSE", True),
    ("INFO Port 29500 is already in use, trying port 29501", False),  # vLLM found another one by itself
    ("ready", False),
])
def test_address_in_use_is_read_from_a_servers_output(output, expected):
    assert ports.address_in_use(output) is expected


def test_the_taken_port_is_the_one_named_on_the_failing_line():
    output = ("starting\nlisten tcp 127.0.0.1:40002: bind: address already in use\n")
    assert ports.taken_port(output, [40001, 40002]) == 40002
    assert ports.taken_port("bind: address already in use", [40001, 40002]) == 40001
