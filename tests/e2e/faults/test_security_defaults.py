"""Security defaults the chart tests (tests/integration/test_helm_install.py, test_gitops.py) leave open:

- credentials only by Secret reference: a planted hub token and a planted Prometheus token never
  appear in status, Events, the operator's log, the rendered children or the pods -- even when
  the Prometheus in front of the tuner echoes the Authorization header in its error body;
- runtime pods get no service-account token;
- the operator's own client-side rate limit holds under a burst (kopf has none).
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from faults_harness import Operator, condition, resource, wait_for

pytestmark = pytest.mark.e2e


class EchoingPrometheus:
    """Refuses every query with 401 and echoes the request's Authorization header in the body."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                body = f"unauthorized: got Authorization: {self.headers.get('Authorization')}".encode()
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


def secret(name: str, data: dict[str, str], labels: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "labels": labels},
            "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()}}


def test_planted_secrets_never_leak(ns, tmp_path):
    hub_token, prom_token = f"hf_PLANTED{uuid.uuid4().hex}", f"PLANTED{uuid.uuid4().hex}"
    prometheus = EchoingPrometheus()
    operator = Operator(ns.kubeconfig, ns.name, tmp_path)
    # issue 15: the Secrets opt in by label, the admin allows this Prometheus and auth Secrets
    operator.configure(prometheus={"allowedUrls": [prometheus.url], "authSecrets": True})
    operator.start()
    try:
        body = resource("secretive", tuning={"mode": "auto", "intervalSeconds": 5, "prometheus": {
            "url": prometheus.url, "authSecretRef": {"name": "prom-auth", "key": "token"}}})
        body["spec"]["model"]["hubTokenSecretRef"] = {"name": "hf-token", "key": "token"}
        ns.apply(secret("hf-token", {"token": hub_token}, {"specinfer.io/engine-secret": "true"}),
                 secret("prom-auth", {"token": prom_token}, {"specinfer.io/prometheus-auth": "true"}), body)
        wait_for(lambda: ns.converged("secretive"), timeout=60, what="Ready", alive=operator.assert_alive,
                 why=lambda: ns.why)
        degraded = wait_for(lambda: condition(ns.si("secretive"), "TuningDegraded").get("reason") and
                            condition(ns.si("secretive"), "TuningDegraded"), timeout=30,
                            what="the tuner to report the refused credentials", alive=operator.assert_alive)
        print(f"TuningDegraded: {degraded['reason']}: {degraded['message']}")
        time.sleep(6)  # one more tick: more chances to leak
        places = {
            "status": json.dumps(ns.si("secretive")),
            "events": json.dumps(ns.items(f"/api/v1/namespaces/{ns.name}/events")),
            "operator log": operator.log(),
            "children": json.dumps(ns.children("secretive")),
            "pods": json.dumps(ns.items(f"/api/v1/namespaces/{ns.name}/pods", "specinfer.io/name=secretive")),
            "replicasets": json.dumps(ns.items(f"/apis/apps/v1/namespaces/{ns.name}/replicasets")),
        }
        for place, text in places.items():
            for token in (hub_token, prom_token):
                assert token not in text, f"a planted secret leaked into the {place}"
        assert "got Authorization" not in places["status"], "the answer's body reached status (issue 15)"
        assert degraded["reason"] == "PrometheusAuthFailed" and "HTTP 401" in degraded["message"]
        env = ns.deployment("secretive")["spec"]["template"]["spec"]["containers"][0]["env"]
        hf = next(e for e in env if e["name"] == "HF_TOKEN")
        assert hf == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}
    finally:
        operator.stop()
        prometheus.stop()


def test_runtime_pods_get_no_service_account_token(ns, tmp_path):
    operator = Operator(ns.kubeconfig, ns.name, tmp_path).start()
    try:
        ns.apply(resource("tokenless", replicas=2))
        wait_for(lambda: ns.converged("tokenless"), timeout=60, what="Ready", alive=operator.assert_alive,
                 why=lambda: ns.why)
    finally:
        operator.stop()
    pods = ns.items(f"/api/v1/namespaces/{ns.name}/pods", "specinfer.io/name=tokenless")
    assert len(pods) == 2
    for pod in pods:
        spec = pod["spec"]
        assert spec.get("automountServiceAccountToken") is False
        volumes = [v["name"] for v in spec.get("volumes") or []]
        assert not [v for v in volumes if v.startswith("kube-api-access")], volumes
        mounts = [m["mountPath"] for c in spec["containers"] for m in c.get("volumeMounts") or []]
        assert "/var/run/secrets/kubernetes.io/serviceaccount" not in mounts, mounts


def test_client_side_rate_limit_holds_under_a_burst(ns, tmp_path):
    qps, burst, count = 5, 5, 12
    operator = Operator(ns.kubeconfig, ns.name, tmp_path, env={"SPECINFER_STATS_SECONDS": "1"})
    operator.configure(rateLimit={"qps": qps, "burst": burst})
    operator.start()
    try:
        started = time.monotonic()
        ns.apply(*[resource(f"burst-{index}") for index in range(count)])
        for index in range(count):
            wait_for(lambda index=index: ns.converged(f"burst-{index}"), timeout=120, what=f"burst-{index} Ready",
                     alive=operator.assert_alive, why=lambda: ns.why)
        elapsed = time.monotonic() - started
        time.sleep(1.5)
        stats = [line for line in operator.log().splitlines() if "stats: requests=" in line]
    finally:
        operator.stop()
    # "stats: requests={'APPLY': n, 'GET': m, ...}" once a second: total requests over time
    totals = [sum(json.loads(line.split("requests=")[1].split(" reconciles")[0].replace("'", '"')).values())
              for line in stats]
    assert totals, operator.log()[-2000:]
    made = totals[-1]
    rate = made / elapsed
    print(f"RATE LIMIT qps={qps} burst={burst}: {made} requests for {count} new resources in {elapsed:.1f}s "
          f"= {rate:.1f}/s; worst 5 s window {max_window(totals, 5) / 5:.1f}/s")
    assert made > burst, "the burst did not exceed the bucket: the test measures nothing"
    # five 1-s stats intervals can span up to ~6 s on a loaded machine; without the limit all 65 go in ~2 s
    assert max_window(totals, 5) <= burst + qps * 6, f"more than burst + qps*6 requests in 5 stats intervals: {totals}"


def max_window(cumulative: list[int], width: int) -> int:
    """Most requests in any `width` consecutive one-second stats intervals."""
    padded = [0] + cumulative
    return max((padded[i + width] - padded[i] for i in range(max(1, len(padded) - width))), default=0)
