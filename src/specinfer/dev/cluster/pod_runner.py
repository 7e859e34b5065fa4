"""Plays the kubelet for kwok's fake nodes: runs each runtime pod's container as a local process.

kwok marks scheduled pods Running and Ready but runs nothing. For the demo and the
end-to-end tests the pods must really serve, so this runner watches pods carrying the
`specinfer.io/name` label and, for each one bound to a node, runs exactly the container
command and args of its pod spec with the pod's environment, and registers it with
Prometheus as a PodMonitor would. What a real kubelet and pod network provide is
emulated and nothing else:

- volumes: ConfigMap and Secret volumes are projected into a per-pod folder as the kubelet's
  atomic writer does (dev/cluster/atomic_volume.py: the files behind a `..data` link to a
  timestamped folder), `items` giving the keys and their paths. Every sync round re-reads the
  objects of running pods' volumes, as the kubelet's periodic sync does: a change is swapped in
  with one atomic rename, an unchanged object writes nothing, a deleted one leaves the last files
  (an optional one empties the folder). Here an update lands within a round (~1 s); a real kubelet
  takes up to its sync period plus its cache delay (docs/live-schedule.md). Other volumes become
  empty folders; environment values and arguments under a mount path are rewritten to the local
  folder, and a config mounted at the runtime's default folder is passed through `SPECINFER_CONFIG`;
- image: a pod that runs the real vLLM on CPU (engine vllm, accelerator cpu) runs in the cached
  engine environment with this checkout's code on its path (dev/cluster/cpu_engine_pods.py), from
  its own folder as working directory; other pods run in this process's venv;
- network: every pod has its own IP in a cluster, locally they share loopback, so the
  serving port in the mounted runtime config is remapped to a port reserved for the pod (ports.py;
  in every projection of it, so an update keeps the pod's port), and a real engine's own internal
  ports (vLLM's `VLLM_PORT`, where its torch.distributed store listens) start at a block reserved
  for it; a process that exits because one of its addresses was in use is started again at once on
  new ones, as the port clash cannot happen between pods that have addresses of their own;
- restarts: a process that exits is restarted with a back-off (restartPolicy Always);
- readiness: the container's readinessProbe (httpGet) is probed every sync round, and only
  ready pods serve (`serving_pods`), as kube-proxy routes only to Ready endpoints. kwok still
  marks pods Ready in the API at once, so a Deployment may stop the old pod before the new one
  answers: a client then finds no pod serving for a moment instead of a refused connection;
- status: for pods that run the real engine the runner writes the pod status the kubelet would
  (dev/cluster/pod_status.py): Ready from the probe, restarts, CrashLoopBackOff with the last
  termination's exit code and message (the container's termination message file, or its log tail
  under FallbackToLogsOnError), and ErrImageNeverPull when the engine environment that stands in
  for the image is not installed. The operator reads these to explain a failing engine;
- run to completion: pods of the operator's calibration Jobs (label specinfer.io/calibration,
  restartPolicy Never) are run once; the runner reports them Succeeded or Failed with the
  container's exit code and termination message, which is how the Job controller learns the
  outcome and the operator reads the result (kwok's own completion stage skips the operator's
  pods, dev/cluster/kwok_stages.py). Only pods a PodMonitor would select (specinfer.io/name) are
  registered with Prometheus.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client, config
from kubernetes.client import V1Pod

from specinfer.dev.cluster import atomic_volume, ports, processes
from specinfer.dev.cluster.cpu_engine_pods import (
    THREADS_BIND,
    EngineNotInstalled,
    cpu_for_next_engine,
    cpu_image_env,
    runs_cpu_engine,
)
from specinfer.dev.cluster.http_probe import http_ok
from specinfer.dev.cluster.pod_status import Termination, container_state, pod_status, signature, termination_message
from specinfer.dev.cluster.prometheus import PrometheusServer
from specinfer.operator.render.labels import CALIBRATION_LABEL, NAME_LABEL

RUNTIME_LABEL = NAME_LABEL  # the pods of a resource's engines
RUNTIME_CONFIG_DIR = "/etc/specinfer"
RUNTIME_CONFIG_FILE = "runtime.json"
DEFAULT_TERMINATION_GRACE_SECONDS = 30.0  # the kubelet's, for a pod that does not say
TERMINATION_LOG = "termination-log"  # in the pod folder: the kubelet's /dev/termination-log
TERMINATION_LOG_ENV = "SPECINFER_TERMINATION_LOG"  # runtime/pod/entrypoint.py writes its failure there
PROBE_TIMEOUT_SECONDS = 0.5  # loopback: a healthy engine answers in milliseconds
ENGINE_PORT_ENV = "VLLM_PORT"  # vLLM's first port for its own servers; it counts up from there when one is taken
ENGINE_INTERNAL_PORTS = 8  # a block per engine pod: vLLM asks for at most a handful


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def prometheus_label_name(label: str) -> str:
    """Pod label key -> Prometheus label name, as the Prometheus Operator's podTargetLabels do."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


@dataclass(frozen=True)
class ProjectedVolume:
    """A pod's ConfigMap or Secret volume, which the kubelet keeps current while the pod runs."""
    folder: Path  # the local folder that stands for the volume at its mount path(s)
    kind: str  # "configMap" or "secret"
    name: str  # the object's name, in the pod's namespace
    items: tuple[tuple[str, str], ...] | None  # (key, path) pairs; None: every key under its own name
    optional: bool = False
    runtime_config: bool = False  # mounted at RUNTIME_CONFIG_DIR: its runtime config gets the local port


def local_payload(volume: ProjectedVolume, payload: dict[str, bytes], port: int | None) -> dict[str, bytes]:
    """The payload as projected here: the runtime config's serving port is the pod's local one."""
    if port is None or not volume.runtime_config or RUNTIME_CONFIG_FILE not in payload:
        return payload
    try:
        runtime_config = json.loads(payload[RUNTIME_CONFIG_FILE])
        runtime_config.setdefault("spec", {}).setdefault("runtime", {})["port"] = port
    except (ValueError, AttributeError):
        return payload  # not a runtime config: the engine reads it as the kubelet would project it
    return {**payload, RUNTIME_CONFIG_FILE: json.dumps(runtime_config).encode()}


@dataclass
class LocalPod:
    namespace: str
    name: str
    uid: str
    folder: Path
    argv: list[str]
    env: dict[str, str]
    port: int | None
    labels: dict[str, str]
    record: processes.ProcessRecord | None = None
    restarts: int = 0
    next_start: float = 0.0
    started: list[float] = field(default_factory=list)
    terminating_since: float | None = None
    prestop_seconds: float = 0.0  # the container's preStop sleep: SIGTERM waits for it, as the kubelet's does
    grace_seconds: float = DEFAULT_TERMINATION_GRACE_SECONDS  # the pod's terminationGracePeriodSeconds
    signalled: bool = False
    readiness_path: str | None = None  # the readinessProbe's httpGet path; None: ready once running
    failure_threshold: int = 3
    ready: bool = False
    probe_failures: int = 0
    cwd: Path | None = None  # the image's working directory; None: this process's
    owns_status: bool = False  # the runner writes this pod's status (pods of the real engine)
    container: str = "engine"
    image: str = ""
    termination_policy: str | None = None
    cannot_start: tuple[str, str] | None = None  # (waiting reason, message): the image is not available
    started_at: str | None = None
    last_termination: Termination | None = None
    restart_policy: str = "Always"
    finished: Termination | None = None  # a pod that never restarts ran to completion (Succeeded / Failed)
    cpu: int | None = None  # the CPU an engine pod's OpenMP threads are bound to (cpu_engine_pods.cpu_for_next_engine)
    volumes: list[ProjectedVolume] = field(default_factory=list)  # re-projected every sync round
    serving_ports: ports.Reservation | None = None  # `port`, held while the pod lives
    engine_ports: ports.Reservation | None = None  # the block VLLM_PORT starts, for pods of the real engine
    port_moves: int = 0  # starts on new ports after an address was in use (at most ports.ATTEMPTS)

    def release_ports(self) -> None:
        for reservation in (self.serving_ports, self.engine_ports):
            if reservation is not None:
                reservation.release()

    @property
    def key(self) -> str:
        return f"{self.namespace}_{self.name}"


def probe_readiness(pod: LocalPod) -> None:
    """The kubelet's readiness probe: ready after one success, unready after `failure_threshold`
    failures in a row (a restarted process starts unready)."""
    running = pod.record is not None and processes.is_running(pod.record)
    if not running or pod.port is None:
        pod.ready, pod.probe_failures = False, 0
        return
    if pod.readiness_path is None:
        pod.ready = True
        return
    if http_ok(f"http://127.0.0.1:{pod.port}{pod.readiness_path}", timeout=PROBE_TIMEOUT_SECONDS):
        pod.ready, pod.probe_failures = True, 0
    else:
        pod.probe_failures += 1
        if not pod.ready or pod.probe_failures >= pod.failure_threshold:
            pod.ready = False


class PodRunner:
    def __init__(self, kubeconfig: Path, workdir: Path, *, prometheus: PrometheusServer | None = None,
                 label_selector: str = RUNTIME_LABEL, namespaces: tuple[str, ...] | None = None, log=print,
                 job_selector: str | None = CALIBRATION_LABEL):
        self.api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        self.workdir = Path(workdir)
        self.prometheus = prometheus
        self.label_selector = label_selector
        self.job_selector = job_selector
        self.namespaces = namespaces  # None: every namespace
        self.log = log
        self.pods: dict[str, LocalPod] = {}

    # -- the loop ---------------------------------------------------------------------------
    def sync_once(self) -> None:
        """Converge local processes to the bound, not-terminating pods in the cluster."""
        wanted: dict[str, V1Pod] = {}
        for pod in self._listed():
            meta, spec, status = pod.metadata, pod.spec, pod.status
            if meta is None or spec is None or meta.uid is None:
                continue  # the API server always sends these; the client's model calls them optional
            if spec.node_name and meta.deletion_timestamp is None \
                    and (status is None or status.phase not in ("Succeeded", "Failed")):
                wanted[meta.uid] = pod
        for uid, local in list(self.pods.items()):
            if uid not in wanted and self._terminate(local):
                del self.pods[uid]  # forget the pod only once its process is gone
        for uid, pod in wanted.items():
            if uid not in self.pods:
                try:
                    self.pods[uid] = self._prepare(pod)
                except Exception as error:  # noqa: BLE001 -- a pod we cannot emulate must not stop the others
                    meta = pod.metadata
                    where = f"{meta.namespace}/{meta.name}" if meta is not None else uid
                    self.log(f"pod {where}: cannot run locally: {error}")
                    continue
            else:
                try:
                    self._refresh_volumes(self.pods[uid])
                except Exception as error:  # noqa: BLE001 -- an API hiccup: keep the last files, retry next round
                    self.log(f"pod {self.pods[uid].namespace}/{self.pods[uid].name}: volumes not refreshed: {error}")
            self._ensure_running(self.pods[uid])
            probe_readiness(self.pods[uid])
            if self.pods[uid].owns_status:
                self._write_status(self.pods[uid], pod)

    def _listed(self) -> list[V1Pod]:
        """The pods this runner may run: by label, in its namespaces only (a runner of one test's namespace
        does not decode every other test's pods each round, which a shared cluster holds many of)."""
        selectors = [self.label_selector] + ([self.job_selector] if self.job_selector else [])
        pods: list[V1Pod] = []
        for selector in selectors:
            if self.namespaces is None:
                pods.extend(self.api.list_pod_for_all_namespaces(label_selector=selector).items)
            else:
                for namespace in self.namespaces:
                    pods.extend(self.api.list_namespaced_pod(namespace, label_selector=selector).items)
        return pods

    def run(self, stop_event, *, interval: float = 1.0) -> None:
        try:
            while not stop_event.is_set():
                try:
                    self.sync_once()
                except Exception as error:  # noqa: BLE001 -- API server hiccup: keep the pods, retry next tick
                    self.log(f"pod runner: {error}")
                stop_event.wait(interval)
        finally:
            self.stop_all()

    def stop_all(self) -> None:
        # SIGTERM to every pod first, so that they shut down side by side, as a node's pods do, instead of
        # one after another (a vLLM engine takes several seconds to exit)
        for pod in self.pods.values():
            if pod.record is not None and processes.is_running(pod.record):
                os.kill(pod.record.pid, signal.SIGTERM)
        for pod in self.pods.values():
            self._stop(pod)
        self.pods.clear()

    def serving_pods(self) -> list[LocalPod]:
        """Pods a Service would route to: running, ready and not terminating."""
        return [pod for pod in list(self.pods.values())
                if pod.port and pod.ready and pod.terminating_since is None and pod.record
                and processes.is_running(pod.record)]

    def endpoints(self) -> dict[str, str]:
        """namespace/name -> local http base URL, for pods that serve."""
        return {f"{p.namespace}/{p.name}": f"http://127.0.0.1:{p.port}" for p in self.serving_pods()}

    # -- one pod ----------------------------------------------------------------------------
    def _prepare(self, pod) -> LocalPod:
        namespace, name = pod.metadata.namespace, pod.metadata.name
        container = pod.spec.containers[0]
        folder = self.workdir / f"{namespace}_{name}_{pod.metadata.uid[:8]}"
        mounts, volumes, serving = self._materialise_volumes(pod, container, folder)
        try:
            return self._local_pod(pod, container, folder, mounts, volumes, serving)
        except BaseException:
            if serving is not None:
                serving.release()
            raise

    def _local_pod(self, pod, container, folder: Path, mounts: dict[str, Path], volumes: list[ProjectedVolume],
                   serving: ports.Reservation | None) -> LocalPod:
        namespace, name = pod.metadata.namespace, pod.metadata.name

        def local(value: str) -> str:
            # the deepest mount that holds the path, as in the container's filesystem
            for mount_path, local_dir in sorted(mounts.items(), key=lambda item: -len(item[0])):
                if value == mount_path or value.startswith(mount_path.rstrip("/") + "/"):
                    return str(local_dir) + value[len(mount_path.rstrip("/")):]
            return value

        env = {"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
               "HOME": str(folder), "PYTHONUNBUFFERED": "1", TERMINATION_LOG_ENV: str(folder / TERMINATION_LOG)}
        for item in container.env or []:
            env[item.name] = local(self._env_value(pod, item))
        cwd = None
        owns_status, cannot_start = False, None
        if RUNTIME_CONFIG_DIR in mounts:
            config_file = mounts[RUNTIME_CONFIG_DIR] / RUNTIME_CONFIG_FILE
            env.setdefault("SPECINFER_CONFIG", str(config_file))
            if config_file.exists():
                if runs_cpu_engine(json.loads(config_file.read_text())):
                    owns_status, cwd = True, folder
                    try:
                        env = cpu_image_env(env)
                    except EngineNotInstalled as error:
                        cannot_start = ("ErrImageNeverPull", f"the CPU runtime image is modelled locally by the "
                                        f"cached vLLM CPU engine environment: {error}")
        cpu = None
        if owns_status and THREADS_BIND not in env:  # the pod's own setting wins
            resource = (pod.metadata.labels or {}).get(RUNTIME_LABEL)
            engines = [(p.cpu, p.labels.get(RUNTIME_LABEL)) for p in self.pods.values() if p.cpu is not None]
            cpu = cpu_for_next_engine([taken for taken, _ in engines],
                                      [taken for taken, owner in engines if owner == resource])
            env[THREADS_BIND] = str(cpu)
        argv = [local(arg) for arg in [*(container.command or []), *(container.args or [])]]
        if not argv:
            raise ValueError("container has no command: the image's entrypoint cannot be known locally")
        engine_ports = None
        if owns_status and cannot_start is None and ENGINE_PORT_ENV not in env:  # the pod's own setting wins
            engine_ports = ports.reserve(f"pod {namespace}/{name} engine", block=ENGINE_INTERNAL_PORTS)
            env[ENGINE_PORT_ENV] = str(engine_ports.port)
        probe = container.readiness_probe
        http_get = probe.http_get if probe is not None else None
        pre_stop = container.lifecycle.pre_stop if container.lifecycle is not None else None
        prestop = float(pre_stop.sleep.seconds) if pre_stop is not None and pre_stop.sleep is not None else 0.0
        restart_policy = pod.spec.restart_policy or "Always"
        return LocalPod(namespace=namespace, name=name, uid=pod.metadata.uid, folder=folder, argv=argv,
                        env=env, port=serving.port if serving is not None else None, serving_ports=serving,
                        engine_ports=engine_ports, labels=dict(pod.metadata.labels or {}), cwd=cwd,
                        owns_status=owns_status or restart_policy != "Always", cannot_start=cannot_start,
                        restart_policy=restart_policy, container=container.name,
                        image=container.image or "", termination_policy=container.termination_message_policy,
                        readiness_path=(http_get.path or "/") if http_get is not None else None, cpu=cpu,
                        failure_threshold=(probe.failure_threshold or 3) if probe is not None else 3,
                        prestop_seconds=prestop, volumes=volumes,
                        grace_seconds=float(pod.spec.termination_grace_period_seconds
                                            if pod.spec.termination_grace_period_seconds is not None
                                            else DEFAULT_TERMINATION_GRACE_SECONDS))

    def _materialise_volumes(self, pod, container, folder: Path
                             ) -> tuple[dict[str, Path], list[ProjectedVolume], ports.Reservation | None]:
        """Mount path -> local folder, the ConfigMap and Secret volumes projected there, and the
        pod's local serving port, reserved (None: no runtime config is mounted)."""
        volumes = {volume.name: volume for volume in pod.spec.volumes or []}
        mounts: dict[str, Path] = {}
        projected: dict[Path, ProjectedVolume] = {}
        for mount in container.volume_mounts or []:
            volume = volumes.get(mount.name)
            target = folder / "volumes" / mount.name
            target.mkdir(parents=True, exist_ok=True)
            mounts[mount.mount_path] = target
            ref = None
            if volume is not None and volume.config_map is not None:
                ref, kind, name = volume.config_map, "configMap", volume.config_map.name
            elif volume is not None and volume.secret is not None:
                ref, kind, name = volume.secret, "secret", volume.secret.secret_name
            if ref is not None:
                runtime_config = mount.mount_path == RUNTIME_CONFIG_DIR or (
                    target in projected and projected[target].runtime_config)  # one volume, two mounts
                projected[target] = ProjectedVolume(
                    folder=target, kind=kind, name=name, optional=bool(ref.optional), runtime_config=runtime_config,
                    items=tuple((item.key, item.path) for item in ref.items) if ref.items else None)
        payloads: dict[ProjectedVolume, dict[str, bytes]] = {}
        for source in projected.values():
            payload = self._payload(pod.metadata.namespace, source)
            if payload is None:  # the kubelet does not start a pod whose volume it cannot project
                raise ValueError(f"{source.kind} {pod.metadata.namespace}/{source.name} not found")
            payloads[source] = payload
        serves = any(source.runtime_config and RUNTIME_CONFIG_FILE in files for source, files in payloads.items())
        serving = ports.reserve(f"pod {pod.metadata.namespace}/{pod.metadata.name}") if serves else None
        for source, files in payloads.items():
            atomic_volume.write(source.folder, local_payload(source, files, serving.port if serving else None))
        return mounts, list(payloads), serving

    def _payload(self, namespace: str, volume: ProjectedVolume) -> dict[str, bytes] | None:
        """The files the kubelet projects for `volume` now (path -> content); None when its object is
        gone and the volume is not optional (the kubelet then keeps the files it projected last)."""
        try:
            if volume.kind == "configMap":
                config_map = self.api.read_namespaced_config_map(volume.name, namespace)
                files = {key: value.encode() for key, value in (config_map.data or {}).items()}
                files.update({key: base64.b64decode(value) for key, value in (config_map.binary_data or {}).items()})
            else:
                secret = self.api.read_namespaced_secret(volume.name, namespace)
                files = {key: base64.b64decode(value) for key, value in (secret.data or {}).items()}
        except client.ApiException as error:
            if error.status != 404:
                raise
            if not volume.optional:
                return None
            files = {}  # an optional object that does not exist: an empty volume
        if volume.items is not None:  # only the listed keys, each under its path
            files = {path: files[key] for key, path in volume.items if key in files}
        return files

    def _refresh_volumes(self, pod: LocalPod) -> None:
        """The kubelet's periodic volume sync: each changed ConfigMap or Secret is swapped in atomically."""
        for volume in pod.volumes:
            payload = self._payload(pod.namespace, volume)
            if payload is not None and atomic_volume.write(volume.folder, local_payload(volume, payload, pod.port)):
                self.log(f"pod {pod.namespace}/{pod.name}: volume {volume.folder.name} updated from "
                         f"{volume.kind} {volume.name}")

    def _env_value(self, pod, item) -> str:
        if item.value_from is None:
            return item.value or ""
        source = item.value_from
        if source.field_ref is not None:
            return {"metadata.name": pod.metadata.name, "metadata.namespace": pod.metadata.namespace,
                    "status.podIP": "127.0.0.1", "spec.nodeName": pod.spec.node_name or ""
                    }.get(source.field_ref.field_path, "")
        if source.config_map_key_ref is not None:
            ref = source.config_map_key_ref
            return (self.api.read_namespaced_config_map(ref.name, pod.metadata.namespace).data or {}).get(ref.key, "")
        if source.secret_key_ref is not None:
            ref = source.secret_key_ref
            data = self.api.read_namespaced_secret(ref.name, pod.metadata.namespace).data or {}
            return base64.b64decode(data[ref.key]).decode() if ref.key in data else ""
        return ""

    def _ensure_running(self, pod: LocalPod) -> None:
        if pod.record is not None and processes.is_running(pod.record):
            return
        if pod.cannot_start is not None:
            if pod.next_start == 0.0:
                pod.next_start = float("inf")  # say it once; a kubelet keeps retrying the pull, nothing changes here
                self.log(f"pod {pod.namespace}/{pod.name} cannot start: {pod.cannot_start[1]}")
            return
        now = time.monotonic()
        if pod.finished is not None:
            return
        moved = pod.record is not None and pod.next_start == 0.0 and self._moved_to_new_ports(pod)
        if pod.record is not None and not moved and pod.restart_policy != "Always":  # a Job's pod runs once
            self._record_termination(pod)
            code = pod.last_termination.exit_code if pod.last_termination else 1
            if pod.restart_policy == "Never" or code == 0:
                pod.finished, pod.last_termination = pod.last_termination, None
                self.log(f"pod {pod.namespace}/{pod.name} finished with exit code {code} (log: {pod.record.log})")
                return
        if moved:
            pass  # a port clash of this machine, not the container's failure: started again at once
        elif pod.record is not None:  # it exited: restart with a capped exponential back-off
            if pod.next_start == 0.0:
                self._record_termination(pod)
                pod.restarts += 1
                pod.next_start = now + min(30.0, 2.0 ** min(pod.restarts, 5))
                self.log(f"pod {pod.namespace}/{pod.name} exited; restart #{pod.restarts} in "
                         f"{pod.next_start - now:.0f}s (log: {pod.record.log})")
            if now < pod.next_start:
                return
        pod.next_start = 0.0
        pod.ready, pod.probe_failures = False, 0  # a new process must pass its readiness probe again
        if pod.record is not None:
            processes.stop(pod.record)  # reaps the exited process
        (pod.folder / TERMINATION_LOG).unlink(missing_ok=True)  # each container instance gets a fresh file
        pod.record = processes.start(pod.name, pod.argv, log_dir=pod.folder, env=pod.env, cwd=pod.cwd)
        pod.started.append(now)
        pod.started_at = _now()
        if self.prometheus is not None and pod.port is not None and RUNTIME_LABEL in pod.labels:
            labels = {"namespace": pod.namespace, "pod": pod.name, "container": "engine",
                      **{prometheus_label_name(k): v for k, v in pod.labels.items()}}
            self.prometheus.add_target(pod.key, f"127.0.0.1:{pod.port}", labels)

    def _moved_to_new_ports(self, pod: LocalPod) -> bool:
        """A process that exited because an address was in use gets new ports (pods of a cluster have an
        address each, so this is the local emulation's clash, never the pod's): True when moved."""
        assert pod.record is not None
        if (pod.serving_ports is None or pod.port_moves >= ports.ATTEMPTS
                or not ports.address_in_use(processes.log_since_start(pod.record))):
            return False
        pod.port_moves += 1
        old = (pod.serving_ports, pod.engine_ports)
        pod.serving_ports = ports.reserve(old[0].owner)
        pod.port = pod.serving_ports.port
        if old[1] is not None:
            pod.engine_ports = ports.reserve(old[1].owner, block=len(old[1].ports))
            pod.env[ENGINE_PORT_ENV] = str(pod.engine_ports.port)
        for reservation in old:  # after the new ones: never the same ports again
            if reservation is not None:
                reservation.release()
        self.log(f"pod {pod.namespace}/{pod.name}: an address was in use (log: {pod.record.log}); starting it "
                 f"again on port {pod.port}" + (f", engine ports from {pod.env[ENGINE_PORT_ENV]}"
                                                 if ENGINE_PORT_ENV in pod.env else ""))
        self._refresh_volumes(pod)  # the runtime config's port is the pod's new one
        return True

    def _record_termination(self, pod: LocalPod) -> None:
        assert pod.record is not None
        code = processes.exit_code(pod.record)
        code = 1 if code is None else code  # not our child (cannot happen for pods we start): say it failed
        message = termination_message(pod.folder / TERMINATION_LOG, Path(pod.record.log), exit_code=code,
                                      policy=pod.termination_policy)
        pod.last_termination = Termination(exit_code=code, message=message, finished_at=_now())

    def _write_status(self, pod: LocalPod, live) -> None:
        """Patch the pod's status when what it says differs from what runs here."""
        running = pod.record is not None and processes.is_running(pod.record)
        waiting = pod.cannot_start
        if waiting is None and not running and pod.record is not None and pod.finished is None:
            back_off = max(0.0, pod.next_start - time.monotonic())
            waiting = ("CrashLoopBackOff", f"back-off {back_off:.0f}s restarting failed container={pod.container} "
                                           f"pod={pod.name}_{pod.namespace}({pod.uid})")
        phase = "Running"
        if pod.finished is not None:
            phase = "Succeeded" if pod.finished.exit_code == 0 else "Failed"
        desired = pod_status(container=pod.container, image=pod.image, ready=pod.ready and running,
                             restarts=pod.restarts, state=container_state(running=running, started_at=pod.started_at,
                                                                          waiting=waiting, finished=pod.finished),
                             last=pod.last_termination, now=_now(), phase=phase)
        current = self.api.api_client.sanitize_for_serialization(live.status) if live.status else {}
        if signature(desired) == signature(current):
            return
        try:
            self.api.patch_namespaced_pod_status(pod.name, pod.namespace, {"status": desired})
        except client.ApiException as error:
            if error.status != 404:  # a pod deleted meanwhile is forgotten next round
                raise

    def _terminate(self, pod: LocalPod) -> bool:
        """Graceful termination without blocking the loop; True once the process is gone.

        Like the kubelet: the pod leaves the endpoints at once (serving_pods), runs its preStop
        sleep, gets SIGTERM to drain in-flight requests, and SIGKILL after the pod's
        terminationGracePeriodSeconds (which counts from the start, the preStop sleep included).
        """
        now = time.monotonic()
        if pod.terminating_since is None:
            pod.terminating_since = now
        if not pod.signalled and now - pod.terminating_since >= pod.prestop_seconds:
            pod.signalled = True
            if pod.record is not None and processes.is_running(pod.record):
                os.kill(pod.record.pid, signal.SIGTERM)
        running = pod.record is not None and processes.is_running(pod.record)
        if running and now - pod.terminating_since < pod.grace_seconds:
            return False
        self._stop(pod)  # SIGKILLs a process that outlived its grace period; removes target and folder
        return True

    def _stop(self, pod: LocalPod) -> None:
        if self.prometheus is not None:
            self.prometheus.remove_target(pod.key)
        if pod.record is not None:
            processes.stop(pod.record, timeout=10)
        pod.release_ports()
        shutil.rmtree(pod.folder, ignore_errors=True)
