"""Runs the demo: the whole product on the embedded default, with a live view and a summary."""

from __future__ import annotations

import json
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from specinfer.dev.cluster import processes
from specinfer.dev.cluster.control_plane import LocalCluster
from specinfer.dev.cluster.prometheus import PrometheusServer
from specinfer.dev.cpu_engine.acceptance import DEMO_OUTPUT_TOKENS, DEMO_PROMPT_WORDS
from specinfer.dev.demo import real_engine
from specinfer.dev.demo.load import DEFAULT_PHASES, QUICK_PHASES, PhasedLoad
from specinfer.dev.demo.plot import write_plot
from specinfer.dev.demo.stack import Stack
from specinfer.dev.demo.view import Snapshot, render
from specinfer.operator.render.labels import NAME_LABEL
from specinfer.runtime.pod.calibration.requests import percentile


@dataclass(frozen=True)
class DemoOptions:
    example: Path
    out: Path
    quick: bool = False
    keep: bool = False
    live: bool = True
    cluster_name: str = "demo"
    engine: str = "simulator"  # vllm: the real CPU engine on tiny local models (demo/real_engine.py)
    method: str = "draftModel"  # the real engine's drafter (real_engine.METHODS)


# The demo compresses time: production defaults (2-minute windows, 10-minute cooldowns) would
# show nothing in a few minutes. Same policy, shorter clocks.
DEMO_OPERATOR_CONFIG = {
    "tuning": {"windowSeconds": 30, "tickSeconds": 2,
               "policy": {"cooldownSeconds": 40, "confirmations": 1}},
}


def _raise_interrupt(signum, frame):  # SIGTERM cleans up like Ctrl-C
    raise KeyboardInterrupt


class Demo:
    def __init__(self, options: DemoOptions, *, log=print):
        self.options = options
        self.log = log
        self.real_engine = options.engine == "vllm"
        # the real engine's resource names the tiny models' folder: it is written once they exist
        self.resource = (real_engine.resource(Path("<models>"), method=options.method) if self.real_engine
                         else yaml.safe_load(options.example.read_text()))
        self.name = self.resource["metadata"]["name"]
        self.namespace = self.resource["metadata"].get("namespace", "default")
        self.snapshots: list[Snapshot] = []

    def run(self) -> int:
        signal.signal(signal.SIGTERM, _raise_interrupt)
        cluster = LocalCluster(self.options.cluster_name, log=self.log)
        prometheus = stack = None
        try:
            self.log("[1/5] local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok)")
            cluster.up()
            self.log("[2/5] Prometheus")
            prometheus = PrometheusServer(cluster.dir / "prometheus", scrape_interval="2s", log=self.log).start()
            self.log(f"      {prometheus.url}")
            self.log("[3/5] CRD, operator and pod runner")
            # Logs go under --out so they survive the clean-up.
            logs = self.options.out.resolve() / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            operator_config = logs / "operator.yaml"
            operator_config.write_text(yaml.safe_dump(real_engine.operator_config(self.options.method)
                                                      if self.real_engine else DEMO_OPERATOR_CONFIG))
            stack = Stack(cluster.kubeconfig, prometheus, logs, log=self.log,
                          operator_args=("--standalone", "--config", str(operator_config))).start()
            self.log(f"      operator log: {stack.operator.log if stack.operator else '-'}")
            example = self._real_engine_example(logs) if self.real_engine else self.options.example
            self.log(f"[4/5] kubectl apply -f {example}")
            stack.kubectl("apply", "-f", str(example))
            # a real engine loads torch and compiles its model: 1-3 minutes on two cores
            self._wait_serving(stack, timeout=600 if self.real_engine else 180)
            self.log("[5/5] load phases; the tuner adapts (Ctrl-C stops and cleans up)")
            load = PhasedLoad(lambda: self._endpoints(stack), self._served_model(), self._phases(),
                              holding=lambda: self._rolling_out(stack),
                              # what `specinfer models measure` measures the drafters on
                              **({"prompt_tokens": DEMO_PROMPT_WORDS, "output_tokens": DEMO_OUTPUT_TOKENS}
                                 if self.real_engine else {}))
            load.start()
            self._watch(stack, prometheus, load)
            load.stop()
            failed = self._summary(load)
            if self.options.keep:
                self._plot()
                self.log(f"\n--keep: everything stays up until Ctrl-C. In another terminal:\n"
                         f"  eval \"$(specinfer cluster env --name {self.options.cluster_name})\"\n"
                         f"  kubectl describe si {self.name} -n {self.namespace}")
                while True:
                    time.sleep(3600)
            if failed:  # the product's promise: a tuner's change, in place or by a rollout, loses no request
                self.log(f"\n{failed} request(s) failed: their causes are in the summary above")
                return 1
            return 0
        except KeyboardInterrupt:
            self.log("\ninterrupted; cleaning up")
            return 130
        finally:
            if stack is not None and self.snapshots:
                self._plot()
            if stack is not None:
                stack.stop()
            if prometheus is not None:
                prometheus.stop()
            cluster.down(keep_logs=True)

    # -- steps ------------------------------------------------------------------------------
    def _phases(self):
        if self.real_engine:
            return real_engine.QUICK_PHASES if self.options.quick else real_engine.PHASES
        return QUICK_PHASES if self.options.quick else DEFAULT_PHASES

    def _real_engine_example(self, logs: Path) -> Path:
        """The tiny models (made once into the cache) and the resource that serves them, as a file."""
        method = self.options.method
        models = real_engine.tiny_models(self.log, drafter=real_engine.METHODS[method])
        self.resource = real_engine.resource(models, method=method)
        example = logs / "real-engine.yaml"
        example.write_text(yaml.safe_dump(self.resource, sort_keys=False))
        return example

    def _served_model(self) -> str:
        model = self.resource["spec"]["model"]
        return model.get("servedModelName") or model["name"]

    def _endpoints(self, stack: Stack) -> list[str]:
        runner = stack.runner
        if runner is None:
            return []
        return [f"http://127.0.0.1:{pod.port}" for pod in runner.serving_pods()
                if pod.labels.get(NAME_LABEL) == self.name and pod.namespace == self.namespace]

    def _wait_serving(self, stack: Stack, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self._status(stack)
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
            if ready and self._endpoints(stack):
                self.log("      Ready, and the pod serves")
                return
            if stack.operator is not None and not processes.is_running(stack.operator):
                raise RuntimeError(f"the operator exited; see {stack.operator.log}")
            time.sleep(1)
        operator_log = stack.operator.log if stack.operator else "-"
        raise TimeoutError(f"{self.name} not Ready and serving after {timeout:.0f}s: "
                           f"kubectl describe si {self.name}; operator log {operator_log}")

    def _status(self, stack: Stack) -> dict:
        result = stack.kubectl("get", "speculativeinference", self.name, "-n", self.namespace, "-o", "json",
                               check=False)
        return json.loads(result.stdout).get("status", {}) if result.returncode == 0 else {}

    def _rolling_out(self, stack: Stack) -> bool:
        """Whether a rollout is in progress (what a phase with `hold_while` waits out)."""
        try:
            conditions = self._status(stack).get("conditions") or []
        except Exception:  # noqa: BLE001 -- a failed or slow read (kubectl's timeout) holds no phase
            return False
        return any(c.get("type") == "Progressing" and c.get("reason") == "RolloutInProgress" for c in conditions)

    def _prometheus_value(self, prometheus: PrometheusServer, promql: str) -> float | None:
        try:
            result = prometheus.query(promql)
        except Exception:  # noqa: BLE001 -- a failed query is a gap in the demo's figures, never the demo's end
            return None
        return float(result[0]["value"][1]) if result else None

    def _watch(self, stack: Stack, prometheus: PrometheusServer, load: PhasedLoad) -> None:
        selector = f'specinfer_io_name="{self.name}",namespace="{self.namespace}"'
        started = time.monotonic()
        while not load.finished:
            phase = load.current.phase if load.current else None
            snapshot = Snapshot(
                elapsed_s=time.monotonic() - started,
                phase=phase.name if phase else ("done" if load.done else "starting"),
                concurrency=phase.concurrency if phase else 0,
                status=self._status(stack),
                tokens_per_s=self._prometheus_value(
                    prometheus, f"sum(rate(vllm:generation_tokens_total{{{selector}}}[20s]))"),
                acceptance=self._prometheus_value(
                    prometheus, f"sum(rate(vllm:spec_decode_num_accepted_tokens_total{{{selector}}}[1m])) / "
                                f"sum(rate(vllm:spec_decode_num_draft_tokens_total{{{selector}}}[1m]))"),
                pods_serving=len(self._endpoints(stack)),
            )
            self.snapshots.append(snapshot)
            lines = render(snapshot, name=self.name, namespace=self.namespace)
            if self.options.live and sys.stdout.isatty():
                sys.stdout.write("\x1b[H\x1b[2J" + "\n".join(lines) + "\n")
                sys.stdout.flush()
            elif len(self.snapshots) % 10 == 1:
                self.log("\n".join(lines[:6]))
            if stack.operator is not None and not processes.is_running(stack.operator):
                raise RuntimeError(f"the operator exited; see {stack.operator.log}")
            time.sleep(2)

    def _summary(self, load: PhasedLoad) -> int:
        """Print the phases, the failures' causes and the tuner's decisions; return how many requests failed."""
        self.log("\nSummary")
        self.log(f"  {'phase':<18}{'seconds':>8}{'concurrency':>12}{'requests':>10}{'failed':>8}{'tokens/s':>10}"
                 f"{'per-token p50':>15}{'p99':>9}")
        for done in load.done:
            ok = [r for r in done.results if r.ok]
            seconds = max(done.ended - done.started, 1e-9)
            tokens = sum(r.output_tokens for r in ok)
            per_token = [r.per_token_s for r in ok]
            self.log(f"  {done.phase.name:<18}{seconds:>8.0f}{done.phase.concurrency:>12}{len(ok):>10}"
                     f"{len(done.results) - len(ok):>8}{tokens / seconds:>10.0f}"
                     f"{percentile(per_token, 50) * 1000:>12.1f} ms{percentile(per_token, 99) * 1000:>6.1f} ms")
            for error, count in done.errors():
                self.log(f"    failed x{count}: {error}")
        history = (self.snapshots[-1].status.get("tuning") or {}).get("history") or [] if self.snapshots else []
        self.log(f"  tuning decisions: {len(history)}")
        for decision in reversed(history):
            self.log(f"    {decision.get('time', '')}  {decision.get('action')}: {decision.get('reason', '')}")
        return sum(not r.ok for done in load.done for r in done.results)

    def _plot(self) -> None:
        path = self.options.out / "demo.png"
        try:
            write_plot(self.snapshots, path, title=f"specinfer demo: {self.namespace}/{self.name}")
            self.log(f"  plot: {path}")
        except Exception as error:  # noqa: BLE001 -- a missing plotting backend must not hide the summary
            self.log(f"  (no plot: {error})")
