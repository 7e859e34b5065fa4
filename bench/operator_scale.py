"""`specinfer bench operator-scale`: a burst of resources against the real operator; prints figures.

Starts `specinfer operator` (a subprocess, watching one fresh namespace), creates N
SpeculativeInference resources as fast as the API server takes them, and reports:

  * time from the first create until every Deployment exists / every status caught up
    (observedGeneration == generation and Ready=True);
  * p50 / p99 latency from a resource's create to its Deployment's first watch event;
  * the operator's peak RSS (VmHWM of its process);
  * API write requests per minute once converged, from the kube-apiserver's own /metrics
    (apiserver_request_total, write verbs, on the kinds the operator writes) and from the
    operator's own request counter.

Resources run the simulator on accelerator cpu with replicas 0 by default, so the figures
measure the operator, not the scheduler or kwok (`--replicas 1` includes the pods).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click

REPO = Path(__file__).resolve().parents[1]
WRITE_VERBS = ("APPLY", "PATCH", "POST", "PUT", "DELETE")
OPERATOR_KINDS = ("speculativeinferences", "deployments", "services", "configmaps", "events")
METRIC = re.compile(r'^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$')


def _resource(name: str, replicas: int) -> dict:
    return {
        "apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference", "metadata": {"name": name},
        "spec": {"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}, "speculation": {"method": "ngram"},
                 "hardware": {"accelerator": "cpu"}, "runtime": {"engine": "simulator"}, "replicas": replicas,
                 "tuning": {"mode": "off"}},
    }


def apiserver_writes(api) -> dict[str, float]:
    """Write requests the API server has served on the operator's kinds (all clients), by (verb, resource)."""
    text = api.call_api(*api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"]))
    text.read()
    total: dict[str, float] = defaultdict(float)
    for line in text.data.decode().splitlines():
        match = METRIC.match(line)
        if not match:
            continue
        labels = dict(item.split("=", 1) for item in re.findall(r'(\w+="[^"]*")', match["labels"]))
        labels = {k: v.strip('"') for k, v in labels.items()}
        if labels.get("dry_run"):
            continue  # server-side dry runs (e.g. someone's fuzzing through the API server) change nothing
        if labels.get("verb") in WRITE_VERBS and labels.get("resource") in OPERATOR_KINDS:
            total[f"{labels['verb']} {labels['resource']}"] += float(match["value"])
    return total


def operator_writes(log_text: str) -> tuple[float, int] | None:
    """(time, write requests) from the operator's last stats line."""
    lines = [line for line in log_text.splitlines() if "stats: requests=" in line]
    if not lines:
        return None
    stamp = time.mktime(time.strptime(lines[-1][1:20], "%Y-%m-%d %H:%M:%S"))
    counts = eval(lines[-1].split("requests=", 1)[1].split(" reconciles")[0], {})  # our own dict repr
    return stamp, sum(v for k, v in counts.items() if k in WRITE_VERBS)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Watcher(threading.Thread):
    """Records when each object first appears (or first satisfies `done`) in a namespace."""

    def __init__(self, api, path: str, done, namespace: str) -> None:
        super().__init__(daemon=True)
        self.api, self.path, self.done, self.namespace = api, path, done, namespace
        self.seen: dict[str, float] = {}
        self.stop = False

    def run(self) -> None:
        from kubernetes import watch
        from kubernetes.client import CustomObjectsApi

        group, version, plural = self.path.split("/")
        custom = CustomObjectsApi(self.api)
        while not self.stop:
            stream = watch.Watch().stream(custom.list_namespaced_custom_object, group, version, self.namespace, plural,
                                          timeout_seconds=30)
            for event in stream:
                obj = event["object"]
                name = obj["metadata"]["name"]
                if name not in self.seen and self.done(obj):
                    self.seen[name] = time.time()
                if self.stop:
                    return


def _caught_up(obj: dict) -> bool:
    status = obj.get("status") or {}
    ready = [c for c in status.get("conditions") or [] if c["type"] == "Ready" and c["status"] == "True"]
    return bool(ready) and status.get("observedGeneration") == obj["metadata"].get("generation")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


LOCAL_CLUSTER = "pytest"  # the local control plane the tests start (specinfer cluster up --name pytest)


@click.command("operator-scale")
@click.option("--count", default=500, show_default=True, help="resources in the burst")
@click.option("--replicas", default=0, show_default=True, help="engine pods per resource")
@click.option("--steady-seconds", default=60, show_default=True, help="window for the steady-state write rate")
@click.option("--timeout", default=300, show_default=True, help="give up converging after this long")
@click.option("--kubeconfig", default=None, help=f"default: $KUBECONFIG, else the local cluster '{LOCAL_CLUSTER}'")
@click.option("--operator-config", default=None, help="operator configuration YAML (e.g. another rate limit)")
@click.option("--keep", is_flag=True, help="leave the namespace in place")
def operator_scale_command(count: int, replicas: int, steady_seconds: int, timeout: int, kubeconfig: str | None,
                           operator_config: str | None, keep: bool) -> None:
    """Apply COUNT resources in a burst; report convergence time, p50/p99 latency, RSS, steady-state writes."""
    from kubernetes.client import ApiClient, CustomObjectsApi

    from specinfer.dev.cluster.paths import cluster_dir
    from specinfer.operator.plumbing.client import ClusterUnavailable, check_reachable, configuration

    given = kubeconfig or os.environ.get("KUBECONFIG")
    kubeconfig = given or str(cluster_dir(LOCAL_CLUSTER) / "kubeconfig")
    if not given and not Path(kubeconfig).exists():
        raise click.ClickException(f"no cluster: no --kubeconfig, no $KUBECONFIG, and the local cluster "
                                   f"'{LOCAL_CLUSTER}' is not running ({kubeconfig} does not exist): start it with "
                                   f"`specinfer cluster up --name {LOCAL_CLUSTER}`")
    try:
        settings = configuration(config_file=kubeconfig)
        check_reachable(settings)
    except ClusterUnavailable as error:
        raise click.ClickException(str(error)) from None
    env = {**os.environ, "KUBECONFIG": kubeconfig, "SPECINFER_STATS_SECONDS": "5"}
    kubectl = [str(Path(sys.executable).parent / "kubectl")]
    settings.connection_pool_maxsize = 32
    api = ApiClient(settings)
    for crd in ("specinfer.io_speculativeinferences.yaml", "kopf.dev_peerings.yaml"):
        subprocess.run(kubectl + ["apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds" / crd)],
                       env=env, check=True, capture_output=True)
    namespace = f"bench-scale-{uuid.uuid4().hex[:6]}"
    subprocess.run(kubectl + ["create", "namespace", namespace], env=env, check=True, capture_output=True)
    log_path = Path(f"/tmp/{namespace}-operator.log")
    argv = [str(Path(sys.executable).parent / "specinfer"), "operator", "-n", namespace]
    argv += ["--config", operator_config] if operator_config else []
    operator = subprocess.Popen(argv,
                                env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    watchers: list[Watcher] = []
    try:
        deadline = time.time() + 60
        while "controller started" not in log_path.read_text():
            if operator.poll() is not None or time.time() > deadline:
                raise click.ClickException(f"operator did not start:\n{log_path.read_text()[-2000:]}")
            time.sleep(0.2)
        deployments = Watcher(api, "apps/v1/deployments", lambda obj: True, namespace)
        observed = Watcher(api, "apps/v1/deployments", lambda obj: (obj.get("status") or {}).get(
            "observedGeneration", 0) >= obj["metadata"].get("generation", 1), namespace)
        statuses = Watcher(api, "specinfer.io/v1alpha1/speculativeinferences", _caught_up, namespace)
        watchers += [deployments, observed, statuses]
        for watcher in watchers:
            watcher.start()
        time.sleep(1)

        custom = CustomObjectsApi(api)
        created: dict[str, float] = {}

        def create(i: int) -> None:
            name = f"r{i:04d}"
            custom.create_namespaced_custom_object("specinfer.io", "v1alpha1", namespace, "speculativeinferences",
                                                   _resource(name, replicas))
            created[name] = time.time()

        start = time.time()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(create, range(count)))
        burst_done = time.time()
        while time.time() - start < timeout and (len(deployments.seen) < count or len(statuses.seen) < count):
            time.sleep(0.2)
        if len(deployments.seen) < count or len(statuses.seen) < count:
            click.echo(f"NOT CONVERGED after {timeout}s: {len(deployments.seen)} deployments, "
                       f"{len(statuses.seen)} statuses caught up", err=True)
        all_deployments = max(deployments.seen.values()) - start
        all_status = max(statuses.seen.values()) - start
        all_observed = max(observed.seen.values()) - start
        # the operator's own share of status latency: from the Deployment controller's first status to ours
        status_lag = [statuses.seen[n] - observed.seen[n] for n in statuses.seen if n in observed.seen]
        latencies = [deployments.seen[n] - created[n] for n in created if n in deployments.seen]
        converge_cpu = cpu_seconds(operator.pid)

        time.sleep(10)  # let the last status writes and Events settle
        api_before, own_before = apiserver_writes(api), operator_writes(log_path.read_text())
        time.sleep(steady_seconds)
        api_after = apiserver_writes(api)
        time.sleep(6)  # one more stats line
        own_after = operator_writes(log_path.read_text())
        delta = {key: value - api_before.get(key, 0) for key, value in api_after.items()
                 if value - api_before.get(key, 0) > 0}
        apiserver_per_min = sum(delta.values()) * 60 / steady_seconds
        own_per_min = ((own_after[1] - own_before[1]) * 60 / max(1.0, own_after[0] - own_before[0])
                       if own_before and own_after else float("nan"))
        figures = {
            "resources": count,
            "replicas": replicas,
            "burst_create_seconds": round(burst_done - start, 2),
            "all_deployments_exist_seconds": round(all_deployments, 2),
            "all_deployments_observed_by_their_controller_seconds": round(all_observed, 2),
            "all_status_caught_up_seconds": round(all_status, 2),
            "deployment_status_to_resource_status_p99_seconds": round(_pct(status_lag, 0.99), 3),
            "apply_to_deployment_p50_seconds": round(statistics.median(latencies), 3),
            "apply_to_deployment_p99_seconds": round(_pct(latencies, 0.99), 3),
            "operator_peak_rss_mb": round(peak_rss_mb(operator.pid), 1),
            "operator_cpu_seconds_to_converge": round(converge_cpu, 1),
            "steady_apiserver_writes_per_minute": round(apiserver_per_min, 1),
            "steady_apiserver_writes_by_verb_and_kind": {k: int(v) for k, v in sorted(delta.items())},
            "steady_operator_writes_per_minute": round(own_per_min, 1),
            "operator_log": str(log_path),
        }
        width = max(map(len, figures))
        for key, value in figures.items():
            click.echo(f"{key:<{width}}  {value}")
        click.echo(json.dumps(figures))
    finally:
        for watcher in watchers:
            watcher.stop = True
        operator.terminate()
        try:
            operator.wait(15)
        except subprocess.TimeoutExpired:
            operator.kill()
        if not keep:
            # wait, so that garbage collection of this run does not count as writes in the next one
            subprocess.run(kubectl + ["delete", "namespace", namespace, "--timeout=180s"], env=env, capture_output=True)
