"""The local control plane: etcd + kube-apiserver + controller-manager + scheduler + kwok.

`LocalCluster(name).up()` is idempotent: a healthy cluster is left alone, a
half-dead one is stopped (only the processes it recorded) and started afresh.
Every process binds loopback on a port reserved for it (dev/cluster/ports.py: outside the kernel's
ephemeral range, locked against other specinfer processes), so several clusters (the demo and a test
run) coexist on a busy machine; a component whose port was taken anyway is started again on new ones.
"""

from __future__ import annotations

import json
import shutil
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from specinfer.dev.cluster import binaries, kwok_stages, ports, processes
from specinfer.dev.cluster.binaries import ETCD, K8S, KWOK
from specinfer.dev.cluster.fake_nodes import create_fake_nodes, wait_nodes_ready
from specinfer.dev.cluster.paths import cluster_dir
from specinfer.dev.cluster.pki import Pki, create_pki

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
POD_CIDR = "10.244.0.0/16"  # kwok's pod IPs; must not overlap the service range
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# The ports each component listens on (state.json keys); the others serve none here.
COMPONENT_PORTS = {"etcd": ("etcd", "etcd_peer"), "kube-apiserver": ("apiserver",)}


class ClusterError(RuntimeError):
    """The local control plane could not be started; the message says which part and why."""


@dataclass
class ClusterState:
    ports: dict[str, int] = field(default_factory=dict)
    processes: dict[str, processes.ProcessRecord] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> ClusterState:
        if not path.exists():
            return cls()
        raw = json.loads(path.read_text())
        return cls(ports=raw.get("ports", {}),
                   processes={k: processes.ProcessRecord(**v) for k, v in raw.get("processes", {}).items()})

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"ports": self.ports,
                                    "processes": {k: v.to_dict() for k, v in self.processes.items()}}, indent=2))


class LocalCluster:
    def __init__(self, name: str = "default", *, log=print):
        self.name = name
        self.dir = cluster_dir(name)
        self.log = log
        self._started_at: dict[str, float] = {}
        self._reservations: dict[str, ports.Reservation] = {}  # held while this object runs the cluster

    # -- paths ------------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def pki(self) -> Pki:
        return Pki(self.dir / "pki")

    def state(self) -> ClusterState:
        return ClusterState.load(self.state_file)

    @property
    def server_url(self) -> str:
        return f"https://127.0.0.1:{self.state().ports['apiserver']}"

    # -- queries ----------------------------------------------------------------------------
    def running_components(self) -> dict[str, bool]:
        state = self.state()
        return {name: name in state.processes and processes.is_running(state.processes[name])
                for name in COMPONENTS}

    def is_healthy(self) -> bool:
        if not self.state_file.exists() or not all(self.running_components().values()):
            return False
        return self._apiserver_ready(self.state().ports["apiserver"])

    def status(self) -> dict:
        state = self.state()
        return {"name": self.name, "kubeconfig": str(self.kubeconfig), "healthy": self.is_healthy(),
                "ports": state.ports,
                "components": {name: {"running": running,
                                      "pid": state.processes[name].pid if name in state.processes else None}
                               for name, running in self.running_components().items()}}

    # -- lifecycle --------------------------------------------------------------------------
    def up(self, *, nodes: int = 1) -> None:
        if self.is_healthy():
            self.log(f"cluster '{self.name}' is already running")
            return
        if self.state_file.exists():
            self.log(f"cluster '{self.name}' is partly down; restarting it from scratch")
            self.down()
        for binary in binaries.CONTROL_PLANE:
            binaries.ensure_built(binary, log=self.log)
        self.dir.mkdir(parents=True, exist_ok=True)
        state = ClusterState(ports={key: self._reserve(key) for keys in COMPONENT_PORTS.values() for key in keys})
        state.save(self.state_file)
        create_pki(self.pki.folder, service_ip=SERVICE_IP)
        self._write_kubeconfig(state.ports["apiserver"])
        try:
            for component in COMPONENTS:
                self.start_component(component, new_ports=True)
            self.log("registering fake nodes (kwok) ...")
            create_fake_nodes(self.kubeconfig, count=nodes)
            wait_nodes_ready(self.kubeconfig, count=nodes, timeout=60)
        except Exception:
            self.log("startup failed; stopping what was started (logs kept in "
                     f"{self.dir / 'logs'})")
            self.stop_all()
            raise
        self.log(f"cluster '{self.name}' is up: {self.server_url}")

    def down(self, *, keep_logs: bool = False) -> None:
        """Stop exactly the processes this cluster recorded, then remove its state."""
        self.stop_all()
        if self.dir.exists():
            for child in self.dir.iterdir():
                if keep_logs and child.name == "logs":
                    continue
                shutil.rmtree(child) if child.is_dir() else child.unlink()
            if not keep_logs:
                self.dir.rmdir()

    def stop_all(self) -> None:
        for component in reversed(COMPONENTS):
            self.stop_component(component)
        for reservation in self._reservations.values():
            reservation.release()
        self._reservations.clear()

    def stop_component(self, component: str) -> None:
        state = self.state()
        record = state.processes.pop(component, None)
        if record is not None:
            processes.stop(record)
            state.save(self.state_file)

    def start_component(self, component: str, *, new_ports: bool = False) -> None:
        """(Re)start one component and wait until it is ready; fault tests use this too.

        A component that finds its port taken is started again: on new ports with `new_ports` (while
        `up` starts the cluster, before any client has its address), else on the same ones (a restart
        keeps the address the kubeconfig and the clients hold), at most `ports.ATTEMPTS` times."""
        state = self.state()
        if component in state.processes and processes.is_running(state.processes[component]):
            return
        for key in COMPONENT_PORTS.get(component, ()):  # a restart: hold the port against other processes
            self._hold(key, state.ports[key])
        for attempt in range(1, ports.ATTEMPTS + 1):
            argv = self._argv(component, state.ports)
            self.log(f"starting {component} ...")
            record = processes.start(component, argv, log_dir=self.dir / "logs")
            self._started_at[component] = time.monotonic()
            state.processes[component] = record
            state.save(self.state_file)
            try:
                self._wait_ready(component, record, state.ports)
                return
            except ports.PortTaken as taken:
                processes.stop(record)
                del state.processes[component]
                if attempt == ports.ATTEMPTS:
                    raise ClusterError(f"{taken} ({attempt} attempts{', each on new ports' if new_ports else ''}); "
                                       f"last log lines ({record.log}):\n{taken.log_tail}") from None
                if new_ports:
                    for key in COMPONENT_PORTS[component]:
                        old = self._reservations.pop(key, None)
                        state.ports[key] = self._reserve(key)  # before releasing: never the same port again
                        if old is not None:
                            old.release()
                    if component == "kube-apiserver":
                        self._write_kubeconfig(state.ports["apiserver"])
                self.log(f"{taken.component}: port {taken.port} was taken by another process; starting it again"
                         + (f" on port(s) {', '.join(str(state.ports[k]) for k in COMPONENT_PORTS[component])}"
                            if new_ports else " in a moment"))
                state.save(self.state_file)
                if not new_ports:
                    time.sleep(2.0 * attempt)

    def _reserve(self, key: str) -> int:
        reservation = ports.reserve(f"{self.name} {key}")
        self._reservations[key] = reservation
        return reservation.port

    def _hold(self, key: str, port: int) -> None:
        """Hold `port` (known to clients already) against other specinfer processes while we run it."""
        held = self._reservations.get(key)
        if held is None or held.port != port:
            reservation = ports.hold(port, f"{self.name} {key}")
            if reservation is not None:
                self._reservations[key] = reservation

    # -- internals --------------------------------------------------------------------------
    def _argv(self, component: str, addresses: dict[str, int]) -> list[str]:
        pki = self.pki
        k8s_bin = K8S.bin_dir()
        if component == "etcd":
            return [str(ETCD.bin_dir() / "etcd"), "--name", "specinfer", "--data-dir", str(self.dir / "etcd"),
                    "--listen-client-urls", f"http://127.0.0.1:{addresses['etcd']}",
                    "--advertise-client-urls", f"http://127.0.0.1:{addresses['etcd']}",
                    "--listen-peer-urls", f"http://127.0.0.1:{addresses['etcd_peer']}",
                    "--initial-advertise-peer-urls", f"http://127.0.0.1:{addresses['etcd_peer']}",
                    "--initial-cluster", f"specinfer=http://127.0.0.1:{addresses['etcd_peer']}",
                    "--unsafe-no-fsync", "--quota-backend-bytes", str(2 * 1024**3),
                    "--log-level", "warn"]
        if component == "kube-apiserver":
            return [str(k8s_bin / "kube-apiserver"),
                    "--etcd-servers", f"http://127.0.0.1:{addresses['etcd']}",
                    "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
                    "--secure-port", str(addresses["apiserver"]),
                    "--tls-cert-file", str(pki.serving_cert), "--tls-private-key-file", str(pki.serving_key),
                    "--client-ca-file", str(pki.ca_cert),
                    "--authorization-mode", "RBAC",
                    "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
                    "--service-account-key-file", str(pki.sa_pub),
                    "--service-account-signing-key-file", str(pki.sa_key),
                    "--service-cluster-ip-range", SERVICE_CIDR,
                    "--allow-privileged=true", "--profiling=false", "--v=1",
                    # the endpoint reconciler refuses loopback addresses; nothing here needs the
                    # `kubernetes` Service to have endpoints.
                    "--endpoint-reconciler-type=none"]
        kubeconfig = str(self.kubeconfig)
        if component == "kube-controller-manager":
            return [str(k8s_bin / "kube-controller-manager"), "--kubeconfig", kubeconfig,
                    "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
                    "--bind-address", "127.0.0.1", "--secure-port", "0", "--leader-elect=false",
                    "--service-account-private-key-file", str(pki.sa_key), "--root-ca-file", str(pki.ca_cert),
                    "--use-service-account-credentials=false", "--cluster-cidr", POD_CIDR,
                    "--service-cluster-ip-range", SERVICE_CIDR, "--allocate-node-cidrs=false",
                    "--controllers", "*,-nodeipam",
                    # The default client limit (20 requests/s) makes a 500-resource burst take
                    # 100 s in the Deployment controller alone; production clusters raise it too.
                    "--kube-api-qps", "200", "--kube-api-burst", "400",
                    # kwok's nodes cannot fail, but with no lease renewed while the API server is away
                    # (the fault tests stop it for 60 s) the node controller would call every node
                    # NotReady, taint it and mark its pods NotReady -- and kwok's stages make only
                    # Pending pods Ready, so those pods would never be Ready again, where a kubelet
                    # would report them Ready at its next status update.
                    "--node-monitor-grace-period", "10m",
                    "--v=1"]
        if component == "kube-scheduler":
            return [str(k8s_bin / "kube-scheduler"), "--kubeconfig", kubeconfig,
                    "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
                    "--bind-address", "127.0.0.1", "--secure-port", "0", "--leader-elect=false", "--v=1"]
        if component == "kwok":
            config = kwok_stages.write_config(self.dir / "kwok.yaml")
            return [str(KWOK.bin_dir() / "kwok"), "--kubeconfig", kubeconfig, "--config", str(config),
                    "--manage-all-nodes=false",
                    "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                    "--cidr", POD_CIDR, "--node-ip", "127.0.0.1", "--v=INFO"]
        raise ValueError(f"unknown component {component!r}; known: {', '.join(COMPONENTS)}")

    def _wait_ready(self, component: str, record: processes.ProcessRecord, addresses: dict[str, int]) -> None:
        deadline = time.monotonic() + (120 if component == "kube-apiserver" else 60)
        while time.monotonic() < deadline:
            if not processes.is_running(record):
                output = processes.log_since_start(record)
                if ports.address_in_use(output) and component in COMPONENT_PORTS:
                    candidates = [addresses[key] for key in COMPONENT_PORTS[component]]
                    raise ports.PortTaken(component, ports.taken_port(output, candidates),
                                          processes.log_tail(record, 5))
                raise ClusterError(f"{component} exited during startup; last log lines "
                                   f"({record.log}):\n{processes.log_tail(record)}")
            if self._component_ready(component, addresses):
                return
            time.sleep(0.25)
        raise ClusterError(f"{component} did not become ready in time; last log lines "
                           f"({record.log}):\n{processes.log_tail(record)}")

    def _component_ready(self, component: str, addresses: dict[str, int]) -> bool:
        if component == "etcd":
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{addresses['etcd']}/health", timeout=2) as response:
                    return json.load(response).get("health") == "true"
            except (urllib.error.URLError, OSError, ValueError):
                return False
        if component == "kube-apiserver":
            return self._apiserver_ready(addresses["apiserver"])
        # The others serve no port here: ready once they have stayed up for a moment (a bad flag
        # makes them exit at once, which _wait_ready reports with the log).
        return time.monotonic() - self._started_at.get(component, 0) > 2.0

    def _apiserver_ready(self, port: int) -> bool:
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=context, timeout=3) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def _write_kubeconfig(self, apiserver_port: int) -> None:
        context = f"specinfer-{self.name}"
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": context,
            "clusters": [{"name": context, "cluster": {"server": f"https://127.0.0.1:{apiserver_port}",
                                                      "certificate-authority": str(self.pki.ca_cert)}}],
            "users": [{"name": "specinfer-admin", "user": {"client-certificate": str(self.pki.admin_cert),
                                                           "client-key": str(self.pki.admin_key)}}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": "specinfer-admin"}}],
        }
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
        self.kubeconfig.chmod(0o600)
