"""Two operator replicas (kopf peering): exactly one acts; the active one killed -> the other takes over.

Also the hand-over the other way: a replica started with a higher priority takes over from a
running one, which must then stop acting -- a paused replica that kept reconciling from its (now
stale) cache would roll pods back and forth between the old and the new spec, and one whose tuning
loop kept running would be a second tuner on the same resource (kopf pauses only its own watches;
operator/plumbing/leadership.py stops our resync and tuning loop).
"""

from __future__ import annotations

import time

import pytest
from faults_harness import SPECINFER, Operator, resource, timed, wait_for

pytestmark = pytest.mark.e2e

TAKEOVER_SECONDS = 90  # kopf peering lifetime is 30 s: a dead peer is replaced after it expires


@pytest.fixture
def replicas(ns, tmp_path):
    started: list[Operator] = []

    def start(name: str, *extra: str) -> Operator:
        operator = Operator(ns.kubeconfig, ns.name, tmp_path, peering=True, name=name,
                            argv=[SPECINFER, "operator", *extra])
        started.append(operator.start())
        return operator

    yield start
    for operator in started:
        operator.stop()


def _edit_reconciled(ns, name: str, k: int):
    obj = ns.si(name) or {}
    status = obj.get("status") or {}
    return status.get("observedGeneration") == obj.get("metadata", {}).get("generation") and \
        status.get("effective", {}).get("numSpeculativeTokens") == k


def _applies(operator: Operator, name: str) -> int:
    return sum(f"/{name} " in line for line in operator.applies())


def _tuning_ticks(operator: Operator) -> int:
    """Each due tick against the harness's unreachable Prometheus logs one hold (operator/tuner/loop.py)."""
    return operator.log().count("tuning holds")


def test_exactly_one_replica_acts_and_the_other_takes_over(ns, replicas, recovery):
    first = replicas("first")
    second = replicas("second")  # lower priority: starts paused (kopf logs nothing until it resumes)
    ns.apply(resource("peer", replicas=1))
    wait_for(lambda: ns.converged("peer"), timeout=60, what="Ready", alive=first.assert_alive, why=lambda: ns.why)
    ns.apply(resource("peer", k=5))
    wait_for(lambda: _edit_reconciled(ns, "peer", 5), timeout=30, what="edit reconciled")
    assert _applies(first, "peer") >= 2 and _applies(second, "peer") == 0, "both replicas acted"

    first.kill()
    killed = time.monotonic()
    ns.apply(resource("peer", k=6))
    wait_for(lambda: _edit_reconciled(ns, "peer", 6), timeout=TAKEOVER_SECONDS,
             what="the standby replica to take over", alive=second.assert_alive)
    timed("active replica killed -> standby reconciles an edit", killed, recovery)
    assert _applies(second, "peer") >= 1
    wait_for(lambda: ns.converged("peer"), timeout=30, what="Ready under the new leader", why=lambda: ns.why)
    ns.assert_no_duplicates_or_orphans("peer")
    # our resync and tuning loop follow kopf out of standby (one leadership refresh later, 5-10 s)
    second.wait_for_log("active again: tuning", timeout=60)
    second.wait_for_log("active again: resyncing", timeout=60)


def test_a_replica_that_hands_over_stops_acting(ns, replicas):
    tuning = {"mode": "observe", "intervalSeconds": 5}  # the tuning loop ticks every 5 s and logs each hold
    old = replicas("old-leader")
    ns.apply(resource("handover", replicas=1, tuning=tuning))
    wait_for(lambda: ns.converged("handover"), timeout=60, what="Ready", alive=old.assert_alive,
             why=lambda: ns.why)
    wait_for(lambda: _tuning_ticks(old) >= 1, timeout=60, what="the leader's tuning loop to tick",
             alive=old.assert_alive)
    new = replicas("new-leader", "--priority", str(2**62))  # higher priority: takes over at once
    old.wait_for_log("Pausing operations", timeout=30)
    # our own background tasks follow within one leadership refresh (5 s) and one tick (1 s)
    old.wait_for_log("standby: not tuning", timeout=60)
    ticks_by_old = _tuning_ticks(old)
    ns.apply(resource("handover", k=5, tuning=tuning))
    wait_for(lambda: _edit_reconciled(ns, "handover", 5), timeout=30, what="the new leader to reconcile the edit",
             alive=new.assert_alive)
    wait_for(lambda: _tuning_ticks(new) >= 1, timeout=60, what="the new leader's tuning loop to tick",
             alive=new.assert_alive)
    applied_by_old = _applies(old, "handover")
    time.sleep(12)  # two resyncs and two tuning intervals of the paused replica
    hashes = ns.snapshot("handover").template_hashes
    assert _applies(old, "handover") == applied_by_old, "the paused replica kept applying from its stale cache"
    assert _tuning_ticks(old) == ticks_by_old, "the paused replica's tuning loop kept running"
    assert _tuning_ticks(new) >= 2, "the new leader stopped tuning"
    assert "standby: not resyncing" in old.log()
    assert ns.si("handover")["status"]["effective"]["numSpeculativeTokens"] == 5
    assert len(hashes) == 1, f"pods flip between configs: {hashes}"
