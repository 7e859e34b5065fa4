"""The local product stack: control plane + Prometheus + CRDs + the operator process + the pod runner.

The demo and the end-to-end tests run exactly this. Every piece is a real process:
the operator is `specinfer operator` started as a subprocess against the cluster's
kubeconfig, and runtime pods are executed by the pod runner from their pod specs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from specinfer.dev.cluster import processes
from specinfer.dev.cluster.paths import REPO_ROOT
from specinfer.dev.cluster.pod_runner import PodRunner
from specinfer.dev.cluster.prometheus import PrometheusServer

CRD_DIR = REPO_ROOT / "crds"


def specinfer_executable() -> str:
    """The console script of this installation (next to the interpreter in a venv)."""
    candidate = Path(sys.executable).parent / "specinfer"
    return str(candidate) if candidate.exists() else "specinfer"


def kubectl_executable() -> str:
    candidate = Path(sys.executable).parent / "kubectl"
    return str(candidate) if candidate.exists() else "kubectl"


class Stack:
    """Operator + pod runner on top of a running cluster and Prometheus; start/stop each part."""

    def __init__(self, kubeconfig: Path, prometheus: PrometheusServer, workdir: Path, *, log=print,
                 operator_args: tuple[str, ...] = (), namespaces: tuple[str, ...] | None = None):
        self.kubeconfig = Path(kubeconfig)
        self.prometheus = prometheus
        self.workdir = Path(workdir)
        self.log = log
        self.operator_args = operator_args
        self.namespaces = namespaces  # pods to run locally; None: every namespace
        self.operator: processes.ProcessRecord | None = None
        self.runner: PodRunner | None = None
        self._runner_stop = threading.Event()
        self._runner_thread: threading.Thread | None = None

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run([kubectl_executable(), *args], input=input, capture_output=True, text=True,
                                env=self.env(), timeout=120)
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result

    def install_crds(self) -> None:
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_DIR))
        # A CRD just created has no status.conditions yet, and `kubectl wait` then fails at once
        # (".status.conditions accessor error: <nil>") instead of waiting: ask again until it can wait.
        deadline = time.monotonic() + 60
        while True:
            result = self.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                                  "crd/speculativeinferences.specinfer.io",
                                  "crd/speculativeinferencecalibrations.specinfer.io", check=False)
            if result.returncode == 0:
                return
            if "accessor error" not in result.stderr or time.monotonic() > deadline:
                raise RuntimeError(f"kubectl wait for the CRDs: {result.stderr.strip()}")
            time.sleep(0.5)

    # -- operator ---------------------------------------------------------------------------
    def operator_argv(self) -> list[str]:
        return [specinfer_executable(), "operator", "--prometheus-url", self.prometheus.url, *self.operator_args]

    def start_operator(self) -> processes.ProcessRecord:
        if self.operator is not None and processes.is_running(self.operator):
            return self.operator
        self.operator = processes.start("operator", self.operator_argv(), log_dir=self.workdir,
                                        env={"KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"})
        return self.operator

    def stop_operator(self, *, kill: bool = False) -> None:
        if self.operator is None:
            return
        if kill and processes.is_running(self.operator):
            os.kill(self.operator.pid, 9)
            os.waitpid(self.operator.pid, 0)
        processes.stop(self.operator)
        self.operator = None

    # -- pods -------------------------------------------------------------------------------
    def start_runner(self) -> PodRunner:
        if self.runner is None:
            self.runner = PodRunner(self.kubeconfig, self.workdir / "pods", prometheus=self.prometheus,
                                    namespaces=self.namespaces, log=self.log)
            self._runner_stop.clear()
            self._runner_thread = threading.Thread(target=self.runner.run, args=(self._runner_stop,),
                                                   kwargs={"interval": 0.5}, daemon=True, name="pod-runner")
            self._runner_thread.start()
        return self.runner

    def stop_runner(self) -> None:
        if self.runner is not None:
            self._runner_stop.set()
            if self._runner_thread is not None:
                self._runner_thread.join(timeout=60)
            self.runner = None

    def start(self) -> Stack:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.install_crds()
        self.start_runner()
        self.start_operator()
        return self

    def stop(self) -> None:
        self.stop_operator()
        self.stop_runner()
