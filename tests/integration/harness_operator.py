"""Fixtures that run the REAL operator (`specinfer operator`) as a subprocess against the test cluster.

Import the fixtures into a test module (`from harness_operator import operator, ...`).
Each operator watches only the test's namespace, so tests (and other engineers'
operators on the same cluster) do not see each other's resources.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.support import condition, wait_for, wait_for_crds_established

REPO = Path(__file__).resolve().parents[2]
SPECINFER = str(Path(sys.executable).parent / "specinfer")
CRDS = [REPO / "crds" / "specinfer.io_speculativeinferences.yaml", REPO / "crds" / "kopf.dev_peerings.yaml"]


class OperatorProcess:
    def __init__(self, cluster, namespace: str, log_path: Path, *args: str) -> None:
        self.log_path = log_path
        self.log_file = open(log_path, "w")
        self.proc = subprocess.Popen([SPECINFER, "operator", "-n", namespace, *args], env=cluster.env(),
                                     stdout=self.log_file, stderr=subprocess.STDOUT)

    def log(self) -> str:
        self.log_file.flush()
        return self.log_path.read_text()

    def count(self, text: str) -> int:
        return self.log().count(text)

    def wait_for_log(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log():
                return
            assert self.proc.poll() is None, f"operator exited ({self.proc.returncode}):\n{self.log()[-3000:]}"
            time.sleep(0.2)
        raise AssertionError(f"operator never logged {text!r}:\n{self.log()[-3000:]}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log_file.close()


@pytest.fixture(scope="session")
def operator_crds(cluster):
    for crd in CRDS:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    wait_for_crds_established(cluster.kubectl, "speculativeinferences.specinfer.io", "kopfpeerings.kopf.dev")
    return CRDS


@pytest.fixture
def start_operator(cluster, namespace, operator_crds, tmp_path) -> Callable[..., OperatorProcess]:
    """Factory: start_operator(*extra_args) -> a running operator that has finished starting up."""
    started: list[OperatorProcess] = []

    def start(*args: str, wait: bool = True) -> OperatorProcess:
        process = OperatorProcess(cluster, namespace, tmp_path / f"operator-{len(started)}.log", *args)
        started.append(process)
        if wait:
            process.wait_for_log("controller started")
        return process

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def operator(start_operator) -> OperatorProcess:
    return start_operator()


def simulator_resource(name: str, *, k: int = 3, replicas: int = 1) -> dict:
    return {
        "apiVersion": "specinfer.io/v1alpha1",
        "kind": "SpeculativeInference",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "servedModelName": "llama"},
            "speculation": {"method": "eagle3", "draftModel": {"name": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"},
                            "numSpeculativeTokens": k},
            "hardware": {"accelerator": "nvidia"},
            "runtime": {"engine": "simulator", "simulator": {"timeScale": 10}},
            "replicas": replicas,
            # the tuning loop (issue 7) has its own tests; here only the reconciler writes
            "tuning": {"mode": "off"},
        },
    }


def apply(cluster, namespace: str, *resources: dict) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(resources))


def get(cluster, namespace: str, kind: str, name: str | None = None, check: bool = True) -> dict | None:
    args = ["get", "-n", namespace, kind] + ([name] if name else []) + ["-o", "json"]
    result = cluster.kubectl(*args, check=False)
    if result.returncode != 0:
        if check and "NotFound" not in result.stderr:
            raise AssertionError(result.stderr)
        return None
    return json.loads(result.stdout)


def wait_until(predicate: Callable[[], object], timeout: float = 30, interval: float = 0.3, what: str = "") -> object:
    return wait_for(predicate, timeout=timeout, interval=interval, what=what or repr(predicate))


def wait_ready(cluster, namespace: str, name: str, *, generation: int | None = None, timeout: float = 30) -> dict:
    def ready():
        resource = get(cluster, namespace, "speculativeinference", name)
        ok = condition(resource, "Ready").get("status") == "True"
        if generation is not None:
            ok = ok and resource["status"].get("observedGeneration") == generation
        return resource if ok else None

    return wait_until(ready, timeout, what=f"{name} Ready")


