"""What every fault test needs: the real `specinfer operator` process, a namespace, fast reads, and
snapshots of the children that tell "unchanged" from "restarted".

Pods are made Ready by the control plane's kwok (no engine process is needed to tell whether the
operator restarted a pod: its uid and ReplicaSet say so). Each operator watches only its test's
namespace, so fault tests never disturb other engineers' tests on the shared cluster; faults that
stop the API server or etcd run on a cluster of their own (see test_control_plane_faults.py).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support import condition, wait_for_crds_established
from tests.support import wait_for as _wait_for

# These tests time recoveries to a tenth of a second, so they poll faster than the default.
wait_for = functools.partial(_wait_for, interval=0.1)

REPO = Path(__file__).resolve().parents[3]
SPECINFER = str(Path(sys.executable).parent / "specinfer")
KUBECTL = str(Path(sys.executable).parent / "kubectl")
CRDS = [REPO / "crds" / "specinfer.io_speculativeinferences.yaml", REPO / "crds" / "kopf.dev_peerings.yaml"]
GROUP_PATH = "/apis/specinfer.io/v1alpha1"
TUNER_MANAGER = "specinfer-tuner"  # the tuning loop's field manager (operator/tuner/loop.py)
POLL_TIMEOUT_SECONDS = 3  # a poll that hangs longer is retried by the poll loop (see Namespace.__init__)

# Short clocks so a fault and its recovery fit in seconds: resync 5 s (the floor), tuning ticks 1 s.
OPERATOR_CONFIG = {"resyncSeconds": 5, "tuning": {"tickSeconds": 1, "queryTimeoutSeconds": 2}}


def resource(name: str, *, k: int = 3, replicas: int = 1, tuning: dict | None = None) -> dict:
    """A CPU simulator workload (no GPU to compete for on the shared fake node)."""
    return {
        "apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference", "metadata": {"name": name},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "servedModelName": "llama"},
            "speculation": {"method": "ngram", "numSpeculativeTokens": k},
            "hardware": {"accelerator": "cpu"},
            "runtime": {"engine": "simulator", "simulator": {"timeScale": 10}},
            "replicas": replicas,
            "tuning": tuning or {"mode": "off"},
        },
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (spinning shows up here, sleeping does not)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Operator:
    """One `specinfer operator` process with its own log; `starts` counts every start, injected or not."""

    def __init__(self, kubeconfig: Path, namespace: str, workdir: Path, *, argv: list[str] | None = None,
                 env: dict[str, str] | None = None, peering: bool = False, name: str = "operator") -> None:
        self.kubeconfig, self.namespace, self.workdir, self.name = kubeconfig, namespace, workdir, name
        self.config = workdir / f"{name}.yaml"
        self.configure()
        self.argv = argv or [SPECINFER, "operator"]
        self.extra_env = env or {}
        self.peering = peering
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.log_path: Path | None = None
        self.prometheus_url = "http://127.0.0.1:9"  # discard port: nothing listens (tests override)

    def configure(self, **overrides: Any) -> None:
        """The operator configuration of the next start (e.g. rateLimit to slow a reconcile down)."""
        self.config.write_text(yaml.safe_dump({**OPERATOR_CONFIG, **overrides}))

    def start(self, *, wait: bool = True) -> Operator:
        self.starts += 1
        self.log_path = self.workdir / f"{self.name}-{self.starts}.log"
        args = [*self.argv, "-n", self.namespace, "--config", str(self.config), "--prometheus-url",
                self.prometheus_url]
        args += ["--peering", f"faults-{self.namespace}"] if self.peering else ["--standalone"]
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1", **self.extra_env}
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_for_log("controller started", timeout=60)
        return self

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path else ""

    def wait_for_log(self, text: str, timeout: float = 30) -> None:
        wait_for(lambda: text in self.log(), timeout=timeout, what=f"operator log line {text!r}", interval=0.1,
                 alive=self.assert_alive)

    def assert_alive(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, \
            f"the operator exited outside an injected fault ({self.proc and self.proc.returncode}):\n" \
            f"{self.log()[-3000:]}"

    def kill(self) -> None:
        """The injected fault: SIGKILL, no cleanup."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self) -> float:
        """Kill and start again; returns the monotonic time the new process was launched."""
        self.kill()
        launched = time.monotonic()
        self.start()
        return launched

    def applies(self, kind: str = "") -> list[str]:
        return [line for line in self.log().splitlines() if f"applied {kind}" in line]


@dataclass
class Snapshot:
    """Identity of everything a restart would replace."""

    children: dict[str, str] = field(default_factory=dict)      # "Kind/name" -> uid
    replicasets: dict[str, int] = field(default_factory=dict)   # name -> spec.replicas
    pods: dict[str, str] = field(default_factory=dict)          # name -> uid
    template_hashes: set[str] = field(default_factory=set)


class Namespace:
    """A namespace on one cluster plus fast JSON reads through the kubernetes client."""

    def __init__(self, kubeconfig: Path, name: str | None = None) -> None:
        from kubernetes import client, config

        self.kubeconfig = Path(kubeconfig)
        self.name = name or f"faults-{uuid.uuid4().hex[:6]}"
        settings = client.Configuration()
        config.load_kube_config(config_file=str(self.kubeconfig), client_configuration=settings)
        # The tests time recovery by polling: a read that hangs (the API server rebuilding its watch
        # cache after an etcd restart) must fail fast and be polled again, not retried for 10 s+.
        settings.retries = 0
        self.api = client.ApiClient(settings)
        self.why = ""

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess:
        result = subprocess.run([KUBECTL, *args], input=input, capture_output=True, text=True, timeout=timeout,
                                env={**os.environ, "KUBECONFIG": str(self.kubeconfig)})
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result

    def create(self) -> Namespace:
        for crd in CRDS:
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
        wait_for_crds_established(self.kubectl, "speculativeinferences.specinfer.io", "kopfpeerings.kopf.dev")
        self.kubectl("create", "namespace", self.name)
        return self

    def delete(self) -> None:
        self.kubectl("delete", "namespace", self.name, "--wait=false", check=False)

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                query: list | None = None, timeout: float = 10) -> tuple[int, Any]:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        method_, url, headers, body_, post = self.api.param_serialize(
            method, path, query_params=query or None, header_params=headers, body=body,
            auth_settings=["BearerToken"])
        response = self.api.call_api(method_, url, headers, body_, post, _request_timeout=timeout)
        response.read()
        data = response.data.decode() if isinstance(response.data, bytes) else response.data
        return response.status, (json.loads(data) if data else None)

    def get(self, path: str) -> dict | None:
        try:
            status, body = self.request("GET", path, timeout=POLL_TIMEOUT_SECONDS)
        except Exception:  # noqa: BLE001 -- API server away (fault tests): the caller polls again
            return None
        return body if status == 200 else None

    def items(self, path: str, selector: str = "") -> list[dict]:
        body = self.get(f"{path}?labelSelector={selector}" if selector else path) or {}
        return body.get("items") or []

    def si(self, name: str) -> dict | None:
        return self.get(f"{GROUP_PATH}/namespaces/{self.name}/speculativeinferences/{name}")

    def apply(self, *objects: dict) -> None:
        self.kubectl("apply", "-n", self.name, "-f", "-", input=yaml.safe_dump_all(objects))

    def write_tuner_applied(self, name: str, applied: dict) -> None:
        """Write status.tuning.applied as the tuning loop does (its field manager), e.g. a tuned K."""
        body = {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
                "metadata": {"name": name, "namespace": self.name},
                "status": {"tuning": {"mode": "auto", "applied": applied}}}
        status, answer = self.request(
            "PATCH", f"{GROUP_PATH}/namespaces/{self.name}/speculativeinferences/{name}/status", body=body,
            content_type="application/apply-patch+yaml", query=[("fieldManager", TUNER_MANAGER), ("force", "true")])
        assert status == 200, answer

    def event(self, reason: str, type_: str | None = None, timeout: float = 60.0) -> dict:
        """The first Event of this namespace with `reason` (and `type_`), waited for: the operator posts a
        condition's Event after the status write that shows the condition, so a reader who saw the
        condition can look a moment too early (seen once beside other work, 2026-12-04)."""
        def found() -> dict | None:
            return next((e for e in self.items(f"/api/v1/namespaces/{self.name}/events")
                         if e["reason"] == reason and type_ in (None, e["type"])), None)

        return wait_for(found, timeout=timeout, what=f"an Event {type_ or ''} {reason}".replace("  ", " "),
                        why=lambda: str([e["reason"] for e in self.items(f"/api/v1/namespaces/{self.name}/events")]))

    def tuner_applied(self, name: str) -> dict | None:
        return (((self.si(name) or {}).get("status") or {}).get("tuning") or {}).get("applied")

    def write_tuner_applied_to_stay(self, name: str, applied: dict, *, in_force: Callable[[dict], bool], what: str,
                                    alive: Callable[[], None], settle_seconds: float = 9.0) -> None:
        """write_tuner_applied while the operator's tuning loop runs, until the write outlives a tick.

        The write stands in for the tuner's, as its field manager. A tick already in flight read the
        resource before it, and its apply (the same manager, no `applied` in what it read) takes the
        field away again: seen beside other work (2026-12-04, the Prometheus faults' module and the kill
        during a tuning rollout). So: written, in force (`in_force` of the converged resource), and still
        there `settle_seconds` later (more than a tuning interval and a tick that times out)."""
        def stands() -> bool:  # what was written is still status.tuning.applied (a tick may take or replace it)
            now = self.tuner_applied(name) or {}
            return all(now.get(key) == value for key, value in applied.items() if key != "since")

        for _ in range(3):
            self.write_tuner_applied(name, applied)
            # in force -- or taken away before it was (seen in CI 2026-12-05: the wait for "in force" then ran out)
            wait_for(lambda: not stands() or ((r := self.converged(name)) and in_force(r)), timeout=60, what=what,
                     alive=alive, why=lambda: f"{self.why}; status.tuning.applied={self.tuner_applied(name)}")
            if stands():
                time.sleep(settle_seconds)
                if stands():
                    return
            print(f"a tuning tick in flight took {name}'s written config away: writing it again")
        raise AssertionError(f"status.tuning.applied of {name} does not outlive a tuning tick: "
                             f"{json.dumps((self.si(name) or {}).get('status'))[-2000:]}")

    def deployment(self, name: str) -> dict | None:
        return self.get(f"/apis/apps/v1/namespaces/{self.name}/deployments/{name}")

    def children(self, name: str) -> dict[str, list[dict]]:
        selector = f"specinfer.io/name={name}"
        return {
            "ConfigMap": self.items(f"/api/v1/namespaces/{self.name}/configmaps", selector),
            "Deployment": self.items(f"/apis/apps/v1/namespaces/{self.name}/deployments", selector),
            "Service": self.items(f"/api/v1/namespaces/{self.name}/services", selector),
        }

    def snapshot(self, name: str) -> Snapshot:
        snap = Snapshot()
        for kind, objects in self.children(name).items():
            for obj in objects:
                snap.children[f"{kind}/{obj['metadata']['name']}"] = obj["metadata"]["uid"]
        selector = f"specinfer.io/name={name}"
        for rs in self.items(f"/apis/apps/v1/namespaces/{self.name}/replicasets", selector):
            snap.replicasets[rs["metadata"]["name"]] = rs["spec"].get("replicas", 0)
        for pod in self.items(f"/api/v1/namespaces/{self.name}/pods", selector):
            if not pod["metadata"].get("deletionTimestamp"):
                snap.pods[pod["metadata"]["name"]] = pod["metadata"]["uid"]
                snap.template_hashes.add(pod["metadata"]["labels"].get("pod-template-hash", ""))
        return snap

    def converged(self, name: str, *, generation: int | None = None, replicas: int | None = None) -> dict | None:
        """Ready for the current generation, exactly one of each child (two ConfigMaps for an engine retuned in
        place: its published schedule), every pod on one template.

        When not, `self.why` says what is missing (timeouts print it)."""
        obj = self.si(name)
        status = (obj or {}).get("status") or {}
        snap = self.snapshot(name)
        children = {kind: len(found) for kind, found in self.children(name).items()}
        want = (obj or {}).get("spec", {}).get("replicas", 1) if replicas is None else replicas
        active = [rs for rs, count in snap.replicasets.items() if count]
        self.why = (f"Ready={condition(obj, 'Ready').get('status')} ({condition(obj, 'Ready').get('reason')}), "
                    f"observedGeneration={status.get('observedGeneration')}/"
                    f"{generation or (obj or {}).get('metadata', {}).get('generation')}, children={children}, "
                    f"pods={len(snap.pods)}/{want}, templates={len(snap.template_hashes)}, active RS={active}, "
                    f"Deployment status={(self.deployment(name) or {}).get('status')}")
        if obj is None or condition(obj, "Ready").get("status") != "True":
            return None
        if status.get("observedGeneration") != (generation or obj["metadata"]["generation"]):
            return None
        if any(count != (self._configmaps(name) if kind == "ConfigMap" else 1) for kind, count in children.items()):
            return None
        if len(snap.pods) != want or len(snap.template_hashes) > 1 or len(active) > 1:
            return None
        return obj

    def _configmaps(self, name: str) -> int:
        """The runtime config, and the published schedule of a resource retuned in place (tuning auto on an
        engine that follows one: docs/live-schedule.md)."""
        names = {c["metadata"]["name"] for c in self.children(name)["ConfigMap"]}
        return 2 if f"{name}-schedule" in names else 1

    def assert_no_duplicates_or_orphans(self, name: str) -> None:
        obj = self.si(name)
        for kind, found in self.children(name).items():
            expected = self._configmaps(name) if kind == "ConfigMap" else 1
            assert len(found) == expected, f"{len(found)} {kind}s for {name}: {[o['metadata']['name'] for o in found]}"
            for child in found:
                refs = child["metadata"].get("ownerReferences") or []
                assert [r["uid"] for r in refs if r.get("controller")] == [obj["metadata"]["uid"]], \
                    f"{kind} {child['metadata']['name']} is not owned by {name}: {refs}"


def timed(label: str, started: float, results: dict[str, float]) -> float:
    """Record and print one measured recovery time (docs/reliability.md quotes these lines)."""
    seconds = time.monotonic() - started
    results[label] = seconds
    print(f"RECOVERY {label}: {seconds:.2f}s")
    return seconds
