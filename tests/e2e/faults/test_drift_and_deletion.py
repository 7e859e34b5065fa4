"""A competing writer fighting over the Deployment, and resources changed while the operator is down.

Competing writer (an HPA-like client, or a person with kubectl) sets the Deployment's replicas
every 0.25 s for 10 s: the operator puts its own value back (drift correction) at most once per
edit -- no hot loop -- and the Deployment is back to the spec within seconds of the writer
stopping. (The operator writes by server-side apply with force, so it never sees a 409 itself;
the conflicts of such a storm land on the other writer.)

Operator down: a resource deleted, a child deleted, a spec edited and a resource created while no
operator runs -- nothing is stuck (no finalizers: deletion never waits for the operator) and
the restarted operator converges all of it.

Refused child: a ResourceQuota forbids Deployments -> Ready=False ApplyRejected with the API
server's message and a Warning Event, then a retry every 30 s until the quota is lifted.
"""

from __future__ import annotations

import threading
import time

import pytest
from faults_harness import Operator, condition, resource, timed, wait_for

pytestmark = pytest.mark.e2e

STORM_SECONDS = 10
EDIT_INTERVAL = 0.25


@pytest.fixture(scope="module")
def operator(ns, tmp_path_factory):
    process = Operator(ns.kubeconfig, ns.name, tmp_path_factory.mktemp("drift")).start()
    yield process
    process.stop()


def test_competing_writer_does_not_make_the_operator_hot_loop(ns, operator, recovery):
    name = "contested"
    ns.apply(resource(name, replicas=1))
    wait_for(lambda: ns.converged(name), timeout=60, what="Ready", alive=operator.assert_alive,
             why=lambda: ns.why)
    path = f"/apis/apps/v1/namespaces/{ns.name}/deployments/{name}"
    edits, errors = [], []
    before = len(operator.applies("Deployment"))
    stop = threading.Event()

    def intruder():
        replicas = 2
        while not stop.is_set():
            replicas = 5 - replicas  # 2, 3, 2, 3, ...: every write is a real change
            status, body = ns.request("PATCH", path, body={"spec": {"replicas": replicas}},
                                      content_type="application/merge-patch+json",
                                      query=[("fieldManager", "intruder")])
            (edits if status == 200 else errors).append(status)
            stop.wait(EDIT_INTERVAL)

    thread = threading.Thread(target=intruder, daemon=True)
    thread.start()
    time.sleep(STORM_SECONDS)
    stop.set()
    thread.join()
    stopped = time.monotonic()
    wait_for(lambda: (ns.deployment(name) or {}).get("spec", {}).get("replicas") == 1, timeout=30,
             what="the Deployment back at the spec's replicas", alive=operator.assert_alive)
    timed("competing writer stops -> Deployment back to spec", stopped, recovery)
    wait_for(lambda: ns.converged(name), timeout=60, what="Ready after the storm", alive=operator.assert_alive,
             why=lambda: ns.why)
    time.sleep(2)  # quiet period: a hot loop would keep applying now
    applies = len(operator.applies("Deployment")) - before
    print(f"STORM {len(edits)} competing edits ({len(errors)} refused) -> {applies} operator applies")
    assert edits, f"the competing writer never got through: {errors}"
    assert 1 <= applies <= len(edits) + 1, f"{applies} applies for {len(edits)} competing edits (hot loop?)"
    ns.assert_no_duplicates_or_orphans(name)
    operator.assert_alive()


def test_changes_while_the_operator_is_down_converge_and_nothing_is_stuck(ns, operator, recovery):
    names = {"gone": resource("gone"), "orphaned": resource("orphaned"), "edited": resource("edited")}
    ns.apply(*names.values())
    for name in names:
        wait_for(lambda name=name: ns.converged(name), timeout=60, what=f"{name} Ready",
                 alive=operator.assert_alive, why=lambda: ns.why)
    operator.stop()

    ns.kubectl("-n", ns.name, "delete", "speculativeinference", "gone", "--timeout=20s")  # no finalizer to wait for
    ns.kubectl("-n", ns.name, "delete", "deployment", "orphaned", "--timeout=20s")
    ns.apply(resource("edited", k=5))
    ns.apply(resource("created-while-down"))
    wait_for(lambda: not any(ns.children("gone").values()), timeout=60,
             what="the garbage collector to remove the deleted resource's children (operator down)")

    launched = time.monotonic()
    operator.start()
    for name in ("orphaned", "edited", "created-while-down"):
        wait_for(lambda name=name: ns.converged(name), timeout=30, what=f"{name} converged after the restart",
                 alive=operator.assert_alive, why=lambda: ns.why)
        ns.assert_no_duplicates_or_orphans(name)
    timed("changes made while down -> all converged after the restart", launched, recovery)
    assert ns.si("edited")["status"]["effective"]["numSpeculativeTokens"] == 5
    assert ns.si("gone") is None and not any(ns.children("gone").values())


def test_child_refused_by_the_api_server_is_reported_and_retried(ns, operator, recovery):
    """A quota that forbids Deployments: the resource says so (not silence), and the operator retries
    by itself -- without hot-looping -- once the quota is lifted."""
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-deployments"},
             "spec": {"hard": {"count/deployments.apps": "0"}}}
    ns.apply(quota)
    time.sleep(1)  # the quota controller computes the usage before admission enforces it
    ns.apply(resource("refused"))
    rejected = wait_for(lambda: condition(ns.si("refused"), "Ready").get("reason") == "ApplyRejected"
                        and ns.si("refused"), timeout=20, what="Ready=False ApplyRejected",
                        alive=operator.assert_alive)
    message = condition(rejected, "Ready")["message"]
    print(f"REJECTED {message}")
    assert "Deployment" in message and "quota" in message, message
    ns.event("ApplyRejected")
    attempts = len([line for line in operator.log().splitlines() if "refused Deployment" in line])
    ns.kubectl("-n", ns.name, "delete", "resourcequota", "no-deployments")
    lifted = time.monotonic()
    wait_for(lambda: ns.converged("refused"), timeout=60, what="Ready after the quota is lifted",
             alive=operator.assert_alive, why=lambda: ns.why)
    timed("quota lifted -> refused Deployment created, Ready", lifted, recovery)
    assert attempts <= 3, f"{attempts} refused applies in a few seconds: hot loop"


def test_operator_never_restarted_outside_injected_faults(operator):
    operator.assert_alive()
    assert operator.starts == 2  # the initial start and the restart after the planned stop
