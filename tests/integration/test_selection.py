"""Method auto on the real control plane, the real operator and simulator engines (docs/selection.md).

A resource with `method: auto` serves `initial` (no speculation) at once, gets a comparison -- a
SpeculativeInferenceCalibration it owns, run by the calibration controller in Jobs -- and, when
that succeeds, serves the candidate the comparison measured fastest: status.selection says which
and why, the pods roll out to it, an Event tells, and the spec is never written.
"""

from __future__ import annotations

import json

import pytest

from tests.integration.test_calibration import FAST_LOAD, SIMULATOR, apply, get
from tests.support import condition, namespaced_stack, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(cluster, prometheus, tmp_path_factory):
    folder = tmp_path_factory.mktemp("selection-stack")
    with namespaced_stack(cluster, prometheus, folder, "sel") as namespace_and_stack:
        yield namespace_and_stack


def auto_resource(namespace: str, name: str) -> dict:
    return {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"model": {"name": "tiny/model"}, "hardware": {"accelerator": "cpu"}, "runtime": SIMULATOR,
                     "speculation": {"method": "auto",
                                     "candidates": [{"method": "ngram", "numSpeculativeTokens": 3},
                                                    {"method": "draftModel", "draftModel": {"name": "tiny/draft"},
                                                     "numSpeculativeTokens": 2}],
                                     "comparison": {"batchSizes": [1, 4], "load": FAST_LOAD}},
                     "tuning": {"mode": "observe", "intervalSeconds": 5}}}


def test_auto_serves_initial_then_the_measured_winner(stack, cluster):
    namespace, _ = stack
    apply(cluster, auto_resource(namespace, "chooser"))
    wait_for(lambda: condition(get(cluster, namespace, "si", "chooser"), "Ready").get("status") == "True",
             timeout=60, what="initial (no speculation) Ready")
    first = get(cluster, namespace, "si", "chooser")
    assert first["status"]["effective"]["method"] == "none"
    generation = first["metadata"]["generation"]

    comparison = wait_for(lambda: get(cluster, namespace, "sical", "chooser-select-1"), timeout=60,
                          what="the comparison to be created")
    assert comparison["metadata"]["ownerReferences"][0]["name"] == "chooser"
    assert {c["name"] for c in comparison["spec"]["candidates"]} == {"ngram", "draftmodel"}

    chosen = wait_for(lambda: (r := get(cluster, namespace, "si", "chooser"))
                      and ((r.get("status") or {}).get("selection") or {}).get("phase") in ("Chosen", "Failed") and r,
                      timeout=300, interval=1, what="the comparison to choose",
                      why=lambda: cluster.kubectl("-n", namespace, "get", "si,sical,jobs,pods", "-o", "wide").stdout)
    selection = chosen["status"]["selection"]
    assert selection["phase"] == "Chosen", json.dumps(selection, indent=1)
    measured = get(cluster, namespace, "sical", "chooser-select-1")["status"]
    speedups = {c["name"]: c["speedupVsNone"] for c in measured["comparison"]}
    fastest = max(speedups, key=speedups.get)
    print(f"comparison: {speedups}; chose {selection['candidate']}: {selection['history'][0]['reason']}")
    # the winner, unless it beat what served (none) by less than the switch margin
    assert selection["candidate"] == fastest or speedups[fastest] < 1.03
    method = selection["method"]

    served = wait_for(lambda: (r := get(cluster, namespace, "si", "chooser"))
                      and (r["status"].get("effective") or {}).get("method") == method
                      and condition(r, "Ready").get("status") == "True" and r,
                      timeout=120, interval=1, what=f"the pods to serve {method}")
    assert served["metadata"]["generation"] == generation  # the spec was never written
    assert served["spec"]["speculation"]["method"] == "auto"
    columns = cluster.kubectl("-n", namespace, "get", "si", "chooser").stdout
    assert method in columns, columns
    events = json.loads(cluster.kubectl("-n", namespace, "get", "events", "-o", "json").stdout)["items"]
    reasons = {e["reason"] for e in events if e["involvedObject"]["name"] == "chooser"}
    assert "SelectionStarted" in reasons and reasons & {"MethodSelected", "MethodKept"}, reasons
    managed = json.loads(cluster.kubectl("-n", namespace, "get", "si", "chooser", "--show-managed-fields", "-o",
                                         "json").stdout)["metadata"]["managedFields"]
    selection_fields = [entry for entry in managed if entry["manager"] == "specinfer-selection"]
    assert selection_fields and all(entry.get("subresource") == "status" for entry in selection_fields)
