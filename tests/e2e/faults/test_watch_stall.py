"""A watch that stalls silently (kopf#585): the connection stays open, no bytes arrive, no error.

The operator talks to the API server through a TCP proxy that, on `freeze()`, stops forwarding on
every connection open at that moment while new connections work normally -- what a half-dead
load balancer or NAT entry does. An edit made during the stall must still be reconciled: kopf's
inactivity timeout (75 s) notices the silent watch and reconnects; the operator's own requests
on frozen pooled connections time out (30 s) and are retried.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
import yaml
from faults_harness import Operator, resource, timed, wait_for

pytestmark = pytest.mark.e2e

STALL_DEADLINE = 150  # how long to wait at most
NOTICED_WITHIN = 85   # kopf's inactivity timeout (75 s) + reconcile; the client timeout (90 s) alone would fail this


class FreezingProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.generation = 0           # connections of an older generation are frozen
        self.frozen_before = -1
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        self.frozen_before = self.generation
        self.generation += 1

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            born = self.generation
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, target, born), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, born: int) -> None:
        try:
            while not self.closed:
                data = source.recv(65536)
                while born <= self.frozen_before and not self.closed:
                    time.sleep(0.5)  # stalled: hold the bytes, keep the connection open, say nothing
                if not data:
                    break
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                try:
                    sock.close()
                except OSError:
                    pass

    def close(self) -> None:
        self.closed = True
        self.listener.close()


def test_silently_stalled_watch_is_noticed_and_an_edit_still_lands(ns, tmp_path, recovery):
    config = yaml.safe_load(ns.kubeconfig.read_text())
    server = config["clusters"][0]["cluster"]["server"]
    host, port = server.split("://")[1].rsplit(":", 1)
    proxy = FreezingProxy((host, int(port)))
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    proxied = tmp_path / "kubeconfig"
    proxied.write_text(yaml.safe_dump(config))
    operator = Operator(proxied, ns.name, tmp_path, name="stalled").start()
    try:
        ns.apply(resource("stalled"))
        wait_for(lambda: ns.converged("stalled"), timeout=60, what="Ready", alive=operator.assert_alive,
                 why=lambda: ns.why)
        time.sleep(2)
        proxy.freeze()
        frozen = time.monotonic()
        ns.apply(resource("stalled", k=5))  # through the direct connection: the API itself is fine

        def landed():
            status = (ns.si("stalled") or {}).get("status") or {}
            return status.get("effective", {}).get("numSpeculativeTokens") == 5

        wait_for(landed, timeout=STALL_DEADLINE, what="the edit to land despite the stalled watch",
                 alive=operator.assert_alive, interval=1)
        seconds = timed("silent watch stall -> edit reconciled", frozen, recovery)
        operator.assert_alive()
        ns.assert_no_duplicates_or_orphans("stalled")
        assert seconds < NOTICED_WITHIN, "the stall was not noticed by the inactivity timeout"
    finally:
        operator.stop()
        proxy.close()
