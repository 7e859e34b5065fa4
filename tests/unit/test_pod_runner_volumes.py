"""The pod runner keeps a running pod's ConfigMap and Secret volumes current, as the kubelet's sync does.

A fake CoreV1Api stands in for the API server; the pod's container is a real `sleep`, so a test also
sees that an update reaches the files without restarting the process.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import sys
import time

import pytest
from kubernetes import client
from kubernetes.client import (
    V1ConfigMap,
    V1ConfigMapVolumeSource,
    V1Container,
    V1KeyToPath,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1Secret,
    V1SecretVolumeSource,
    V1Volume,
    V1VolumeMount,
)

from specinfer.dev.cluster import atomic_volume, processes
from specinfer.dev.cluster.atomic_volume import DATA
from specinfer.dev.cluster.pod_runner import RUNTIME_LABEL, PodRunner

pytestmark = pytest.mark.unit

NAMESPACE = "ns"


class FakeCoreV1:
    """The calls the runner makes, answered from dicts; `failing` makes every read a 500."""

    def __init__(self):
        self.pods: list[V1Pod] = []
        self.config_maps: dict[str, dict[str, str]] = {}
        self.secrets: dict[str, dict[str, bytes]] = {}
        self.failing = False
        self.listed: list[str | None] = []  # the namespace of each pod list (None: every namespace)

    def list_pod_for_all_namespaces(self, label_selector):
        self.listed.append(None)
        return client.V1PodList(items=[pod for pod in self.pods if label_selector in (pod.metadata.labels or {})])

    def list_namespaced_pod(self, namespace, label_selector):
        self.listed.append(namespace)
        return client.V1PodList(items=[pod for pod in self.pods if label_selector in (pod.metadata.labels or {})
                                       and pod.metadata.namespace == namespace])

    def read_namespaced_config_map(self, name, namespace):
        return V1ConfigMap(data=dict(self._object(self.config_maps, name, namespace)))

    def read_namespaced_secret(self, name, namespace):
        data = self._object(self.secrets, name, namespace)
        return V1Secret(data={key: base64.b64encode(value).decode() for key, value in data.items()})

    def _object(self, store, name, namespace):
        if self.failing:
            raise client.ApiException(status=500, reason="Internal Server Error")
        if namespace != NAMESPACE or name not in store:
            raise client.ApiException(status=404, reason="Not Found")
        return store[name]


def runtime_json(port: int = 8000, k: int = 3) -> str:
    return json.dumps({"name": "demo", "spec": {"runtime": {"port": port}, "k": k}})


def engine_pod(volumes: list[V1Volume], mounts: list[V1VolumeMount]) -> V1Pod:
    return V1Pod(
        metadata=V1ObjectMeta(name="demo-0", namespace=NAMESPACE, uid="0123456789abcdef",
                              labels={RUNTIME_LABEL: "demo"}),
        spec=V1PodSpec(node_name="kwok-node-0", volumes=volumes, containers=[
            V1Container(name="engine", image="registry.invalid/runtime:test", command=["sleep", "60"],
                        volume_mounts=mounts)]))


def config_volume(*, items=None, optional=None) -> V1Volume:
    return V1Volume(name="runtime-config", config_map=V1ConfigMapVolumeSource(name="demo-runtime", items=items,
                                                                              optional=optional))


CONFIG_MOUNT = V1VolumeMount(name="runtime-config", mount_path="/etc/specinfer", read_only=True)


@pytest.fixture
def api():
    return FakeCoreV1()


@pytest.fixture
def runner(api, tmp_path):
    runner = PodRunner.__new__(PodRunner)  # no cluster: the fake answers the API calls
    runner.api, runner.workdir, runner.prometheus = api, tmp_path, None
    runner.label_selector, runner.job_selector, runner.namespaces = RUNTIME_LABEL, None, None
    runner.logged = []
    runner.log, runner.pods = runner.logged.append, {}
    yield runner
    runner.stop_all()


def only_pod(runner):
    [local] = runner.pods.values()
    return local


def test_a_configmap_update_is_swapped_into_the_running_pod_keeping_its_local_port(api, runner):
    api.config_maps["demo-runtime"] = {"runtime.json": runtime_json(), "schedule.json": "v1", "unlisted": "x"}
    items = [V1KeyToPath(key="runtime.json", path="runtime.json"),
             V1KeyToPath(key="schedule.json", path="dynamic/schedule.json")]
    api.pods = [engine_pod([config_volume(items=items)], [CONFIG_MOUNT])]
    runner.sync_once()
    local = only_pod(runner)
    volume = local.volumes[0].folder
    schedule = volume / "dynamic" / "schedule.json"
    record = local.record

    assert os.readlink(volume / "dynamic") == f"{DATA}/dynamic"  # the kubelet's layout, items' paths
    assert schedule.read_text() == "v1" and not (volume / "unlisted").exists()
    assert local.port not in (None, 8000)
    assert json.loads((volume / "runtime.json").read_text())["spec"]["runtime"]["port"] == local.port
    assert local.env["SPECINFER_CONFIG"] == str(volume / "runtime.json")
    data, inode = os.readlink(volume / DATA), schedule.stat().st_ino

    runner.sync_once()  # nothing changed: nothing written
    assert (os.readlink(volume / DATA), schedule.stat().st_ino) == (data, inode)
    assert not [line for line in runner.logged if "updated" in line]

    api.config_maps["demo-runtime"] = {"runtime.json": runtime_json(k=5), "schedule.json": "v2"}
    runner.sync_once()

    assert schedule.read_text() == "v2"
    runtime_config = json.loads((volume / "runtime.json").read_text())
    assert runtime_config["spec"]["k"] == 5 and runtime_config["spec"]["runtime"]["port"] == local.port
    assert os.readlink(volume / DATA) != data and not (volume / data).exists()  # swapped, the old folder gone
    assert local.record is record and processes.is_running(record) and local.restarts == 0
    assert any("volume runtime-config updated from configMap demo-runtime" in line for line in runner.logged)


def test_a_runner_of_some_namespaces_lists_only_their_pods(api, runner):
    api.config_maps["demo-runtime"] = {"runtime.json": runtime_json()}
    api.pods = [engine_pod([config_volume()], [CONFIG_MOUNT])]
    runner.namespaces = ("elsewhere",)
    runner.sync_once()
    assert runner.pods == {} and api.listed == ["elsewhere"]

    runner.namespaces = ("elsewhere", NAMESPACE)
    runner.sync_once()
    assert only_pod(runner).name == "demo-0" and api.listed[1:] == ["elsewhere", NAMESPACE]


def test_a_deleted_configmap_leaves_the_last_files(api, runner):
    api.config_maps["demo-runtime"] = {"runtime.json": runtime_json(), "schedule.json": "v1"}
    api.pods = [engine_pod([config_volume()], [CONFIG_MOUNT])]
    runner.sync_once()
    volume = only_pod(runner).volumes[0].folder
    before = os.readlink(volume / DATA)

    del api.config_maps["demo-runtime"]
    runner.sync_once()

    assert (volume / "schedule.json").read_text() == "v1"
    assert os.readlink(volume / DATA) == before


def test_a_deleted_optional_configmap_empties_the_volume(api, runner):
    api.config_maps["demo-runtime"] = {"schedule.json": "v1"}
    api.pods = [engine_pod([config_volume(optional=True)], [V1VolumeMount(name="runtime-config", mount_path="/s")])]
    runner.sync_once()
    volume = only_pod(runner).volumes[0].folder
    assert (volume / "schedule.json").read_text() == "v1"

    del api.config_maps["demo-runtime"]
    runner.sync_once()

    assert not os.path.lexists(volume / "schedule.json")


def test_a_missing_configmap_keeps_the_pod_from_starting_unless_optional(api, runner):
    api.pods = [engine_pod([config_volume()], [CONFIG_MOUNT])]
    runner.sync_once()
    assert not runner.pods
    assert any("configMap ns/demo-runtime not found" in line for line in runner.logged)

    api.pods = [engine_pod([config_volume(optional=True)], [CONFIG_MOUNT])]
    runner.sync_once()
    local = only_pod(runner)
    assert atomic_volume.projected(local.volumes[0].folder) == {}  # an empty volume: no runtime config, no port
    assert local.port is None and processes.is_running(local.record)


def test_a_secret_update_reaches_the_pod(api, runner):
    api.secrets["token"] = {"token": b"one"}
    api.pods = [engine_pod([V1Volume(name="token", secret=V1SecretVolumeSource(secret_name="token"))],
                           [V1VolumeMount(name="token", mount_path="/var/run/token")])]
    runner.sync_once()
    volume = only_pod(runner).volumes[0].folder
    assert (volume / "token").read_bytes() == b"one"

    api.secrets["token"] = {"token": b"two"}
    runner.sync_once()

    assert (volume / "token").read_bytes() == b"two"


def test_an_api_error_keeps_the_files_and_the_pod(api, runner):
    api.config_maps["demo-runtime"] = {"schedule.json": "v1"}
    api.pods = [engine_pod([config_volume()], [CONFIG_MOUNT])]
    runner.sync_once()
    local = only_pod(runner)

    api.failing = True
    runner.sync_once()

    assert (local.volumes[0].folder / "schedule.json").read_text() == "v1"
    assert processes.is_running(local.record)
    assert any("volumes not refreshed" in line for line in runner.logged)


SERVE_THE_CONFIGS_PORT = ("import json, os, socket, time\n"
                          "config = json.load(open(os.environ['SPECINFER_CONFIG']))\n"
                          "server = socket.socket()\n"
                          "server.bind(('127.0.0.1', config['spec']['runtime']['port']))\n"
                          "server.listen()\n"
                          "time.sleep(120)\n")


def test_a_pod_whose_port_another_process_took_is_started_again_on_a_new_port(api, runner, lose_reserved_ports):
    """The collision a busy machine makes: something binds the pod's port after the runner chose it."""
    stolen = lose_reserved_ports(1)
    api.config_maps["demo-runtime"] = {"runtime.json": runtime_json()}
    pod = engine_pod([config_volume()], [CONFIG_MOUNT])
    pod.spec.containers[0].command = [sys.executable, "-c", SERVE_THE_CONFIGS_PORT]
    api.pods = [pod]
    runner.sync_once()
    local = only_pod(runner)
    [taken] = stolen
    assert local.port == taken

    def serving() -> bool:
        runner.sync_once()
        if local.port == taken or not processes.is_running(local.record):
            return False
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", local.port)) == 0

    deadline = time.monotonic() + 60
    while not serving():
        assert time.monotonic() < deadline, runner.logged
        time.sleep(0.2)
    config = json.loads((local.volumes[0].folder / "runtime.json").read_text())
    assert config["spec"]["runtime"]["port"] == local.port != taken
    assert local.restarts == 0  # the machine's clash, not the container's failure
    assert any("an address was in use" in line and f"on port {local.port}" in line for line in runner.logged)
