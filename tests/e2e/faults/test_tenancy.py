"""A tenant who may create a SpeculativeInference gets nothing more (issue 15), against the real operator
process and the real API server:

- a child name taken by someone else's object: ChildConflict, the object untouched, nothing created,
  and the resource converges once the object is gone;
- a Prometheus URL outside the operator's allowlist is never contacted;
- a Secret is read for the tuner only when the configuration allows it and the Secret opts in, and
  then it reaches only an allowed URL; no byte of that URL's answer reaches status;
- an image outside the allowlist and a Secret that has not opted in create no workload.
"""

from __future__ import annotations

import base64
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from faults_harness import Operator, condition, resource, wait_for

pytestmark = pytest.mark.e2e

BODY_MARKER = "INTERNAL-PAGE-CONTENT"


class RecordingServer:
    """Stands in for whatever a tenant points the tuner at: records every request, answers 401 with a body."""

    def __init__(self) -> None:
        self.requests: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                outer.requests.append({"path": self.path, "authorization": self.headers.get("Authorization") or ""})
                body = f"<html>{BODY_MARKER} {self.headers.get('Authorization')}</html>".encode()
                self.send_response(401)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def secret(name: str, token: str, labels: dict[str, str] | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "labels": labels or {}},
            "data": {"token": base64.b64encode(token.encode()).decode()}}


def tuning_degraded(ns, name: str, reason: str, operator: Operator, containing: str = "") -> dict:
    def found() -> dict | None:
        degraded = condition(ns.si(name), "TuningDegraded")
        return degraded if degraded.get("reason") == reason and containing in degraded.get("message", "") else None

    return wait_for(found, timeout=30, what=f"TuningDegraded {reason} {containing}", alive=operator.assert_alive,
                    why=lambda: str(condition(ns.si(name), "TuningDegraded")))


def ready_reason(ns, name: str, reason: str, operator: Operator, timeout: float = 30) -> dict:
    return wait_for(lambda: condition(ns.si(name), "Ready").get("reason") == reason and condition(ns.si(name), "Ready"),
                    timeout=timeout, what=f"Ready=False {reason}", alive=operator.assert_alive,
                    why=lambda: str(condition(ns.si(name), "Ready")))


def test_a_foreign_object_under_a_child_name_is_never_taken_over(ns, tmp_path):
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "taken", "labels": {"team": "billing"}},
               "spec": {"selector": {"app": "billing"}, "ports": [{"name": "https", "port": 443}]}}
    ns.apply(service)
    before = ns.get(f"/api/v1/namespaces/{ns.name}/services/taken")
    operator = Operator(ns.kubeconfig, ns.name, tmp_path).start()
    try:
        ns.apply(resource("taken"))
        conflict = ready_reason(ns, "taken", "ChildConflict", operator)
        print(f"ChildConflict: {conflict['message']}")
        assert "Service" in conflict["message"] and "taken" in conflict["message"]
        ns.event("ChildConflict", "Warning")
        time.sleep(6)  # a resync or two: still hands off
        after = ns.get(f"/api/v1/namespaces/{ns.name}/services/taken")
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], "the Service was written"
        assert not after["metadata"].get("ownerReferences")
        assert not ns.get(f"/apis/apps/v1/namespaces/{ns.name}/deployments/taken")
        assert not ns.get(f"/api/v1/namespaces/{ns.name}/configmaps/taken-runtime")

        ns.kubectl("-n", ns.name, "delete", "speculativeinference", "taken", "--wait=true")
        time.sleep(2)
        assert ns.get(f"/api/v1/namespaces/{ns.name}/services/taken"), "the foreign Service was garbage-collected"

        ns.apply(resource("taken"))
        ready_reason(ns, "taken", "ChildConflict", operator)
        ns.kubectl("-n", ns.name, "delete", "service", "taken")
        wait_for(lambda: ns.converged("taken"), timeout=60, what="Ready once the foreign Service is gone",
                 alive=operator.assert_alive, why=lambda: ns.why)
        ns.assert_no_duplicates_or_orphans("taken")
    finally:
        operator.stop()


def test_the_tuner_contacts_only_allowed_urls_and_reads_only_opted_in_secrets(ns, tmp_path):
    server = RecordingServer()
    operator = Operator(ns.kubeconfig, ns.name, tmp_path).start()
    try:
        tuning = {"mode": "observe", "intervalSeconds": 5,
                  "prometheus": {"url": server.url, "authSecretRef": {"name": "db-password"}}}
        ns.apply(secret("db-password", "hunter2-db"), resource("curious", tuning=tuning))
        degraded = tuning_degraded(ns, "curious", "PrometheusUrlNotAllowed", operator)
        assert "prometheus.allowedUrls" in degraded["message"]
        time.sleep(3)
        assert server.requests == [], "a URL outside the allowlist was contacted"
        operator.stop()

        # the admin allows the URL but not Secrets: still nothing read, nothing sent
        operator.configure(prometheus={"allowedUrls": [server.url]})
        operator.start()
        tuning_degraded(ns, "curious", "PrometheusAuthNotAllowed", operator, "prometheus.authSecrets is false")
        time.sleep(3)
        assert server.requests == []
        operator.stop()

        # Secrets allowed, but this one never opted in
        operator.configure(prometheus={"allowedUrls": [server.url], "authSecrets": True})
        operator.start()
        tuning_degraded(ns, "curious", "PrometheusAuthNotAllowed", operator, "specinfer.io/prometheus-auth=true")
        time.sleep(3)
        assert server.requests == []

        # its owner labels it: now, and only now, it goes to the allowed URL
        ns.kubectl("-n", ns.name, "label", "secret", "db-password", "specinfer.io/prometheus-auth=true")
        degraded = tuning_degraded(ns, "curious", "PrometheusAuthFailed", operator)
        assert server.requests and server.requests[0]["authorization"] == "Bearer hunter2-db"
        status = str(ns.si("curious").get("status"))
        assert BODY_MARKER not in status and "hunter2" not in status and "html" not in status
        assert "HTTP 401" in degraded["message"]
    finally:
        operator.stop()
        server.stop()


def test_no_workload_with_an_image_or_a_secret_the_configuration_does_not_allow(ns, tmp_path):
    operator = Operator(ns.kubeconfig, ns.name, tmp_path).start()
    try:
        imaged = resource("imaged")
        imaged["spec"]["runtime"]["image"] = "registry.evil.example/exfiltrate:latest"
        secretive = resource("hub-token")
        secretive["spec"]["model"]["hubTokenSecretRef"] = {"name": "other-teams-token"}
        ns.apply(secret("other-teams-token", "hf_NOT_FOR_YOU"), imaged, secretive)
        refused = ready_reason(ns, "imaged", "ImageNotAllowed", operator)
        assert "spec.runtime.image registry.evil.example/exfiltrate:latest is not allowed" in refused["message"]
        refused = ready_reason(ns, "hub-token", "EngineSecretNotAllowed", operator)
        assert "specinfer.io/engine-secret=true" in refused["message"]
        time.sleep(3)
        for name in ("imaged", "hub-token"):
            assert not ns.get(f"/apis/apps/v1/namespaces/{ns.name}/deployments/{name}"), name
        ns.kubectl("-n", ns.name, "label", "secret", "other-teams-token", "specinfer.io/engine-secret=true")
        wait_for(lambda: ns.converged("hub-token"), timeout=60, what="Ready once the Secret opted in",
                 alive=operator.assert_alive, why=lambda: ns.why)
    finally:
        operator.stop()
