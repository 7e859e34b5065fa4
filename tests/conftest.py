"""Session fixtures shared by integration and e2e tests: a real control plane and a real Prometheus.

The cluster: with SPECINFER_TEST_KUBECONFIG set, tests run against that cluster
(any conformant one, e.g. kind); otherwise the local control plane named
"pytest" (or $SPECINFER_TEST_CLUSTER, so several checkouts can test side by side) is
started (and stopped at the end unless it was already running or SPECINFER_KEEP_CLUSTER=1,
which keeps re-runs fast).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

# Property tests explore the same examples on every run (a CI failure reproduces at once); run with
# SPECINFER_HYPOTHESIS_PROFILE=explore to search new ones, and pin what it finds with @example.
hypothesis_settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
hypothesis_settings.register_profile("explore", derandomize=False, max_examples=500)
hypothesis_settings.load_profile(os.environ.get("SPECINFER_HYPOTHESIS_PROFILE", "ci"))

KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or "kubectl"
CHECKOUT = Path(__file__).resolve().parents[1]
CONTRACT_TESTS = CHECKOUT / "tests" / "contract"  # every test there reads the pinned vLLM wheels
# specinfer's import names and the folders of this checkout they come from (setuptools package-dir)
PACKAGE_FOLDERS: dict[str, str] = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["tool"]["setuptools"][
    "package-dir"]


def code_from_elsewhere(checkout: Path) -> list[str]:
    """The specinfer packages this interpreter imports from outside `checkout`: an editable install
    records the path of the clone it was made in, so tests run from a second clone with the first
    clone's environment would test the first clone's code in silence."""
    import importlib

    wrong = []
    for name, folder in PACKAGE_FOLDERS.items():
        where = Path(importlib.import_module(name).__file__ or "").resolve().parent
        if where != (checkout / folder).resolve():
            wrong.append(f"{name} from {where} (expected {checkout / folder})")
    return wrong


def catalogue_refusal() -> str | None:
    """Why the catalogue refused a method or accelerator module when it registered (None: it took them all).

    Registration runs when the catalogue is imported, so a refused module would fail every test module's
    collection with the same traceback; this says it once."""
    import importlib

    try:
        importlib.import_module("specinfer.runtime.methods")
    except ValueError as error:
        return str(error)
    return None


def pytest_configure(config):
    wrong = code_from_elsewhere(CHECKOUT)
    if wrong:
        pytest.exit("these tests would run another checkout's code: " + "; ".join(wrong)
                    + f". Run them with this checkout's environment (make setup here, then {CHECKOUT}/.venv/bin/"
                    "python -m pytest, or make test).", returncode=4)
    refused = catalogue_refusal()
    if refused:
        pytest.exit(f"the catalogue refused a module at registration -- {refused}. Say it in that module "
                    "(docs/architecture.md, \"One room for each thing\"), then run the tests again.", returncode=4)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Unit tests run first, in pytest-randomly's shuffled order (seed printed in the header; -p
    randomly -p "randomly_seed=N" replays it), so an order dependence among them fails the build.
    Integration and e2e tests then run in file order: their module-scoped stacks (a cluster, an
    operator, loads) are shared by design, and re-creating them per shuffled test would multiply
    the suite's minutes."""
    collected = {id(item): index for index, item in enumerate(items)}
    for item in items:  # what the offline `make test-unit` leaves out (markers `wheel` and `binaries`)
        if CONTRACT_TESTS in item.path.parents:
            item.add_marker(pytest.mark.wheel)
        if "helm" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.binaries)
    yield
    unit = [item for item in items if item.get_closest_marker("unit")]
    staged = sorted((item for item in items if not item.get_closest_marker("unit")), key=lambda i: collected[id(i)])
    items[:] = unit + staged


@dataclass
class ClusterHandle:
    kubeconfig: Path
    local: object | None = None  # the LocalCluster when tests own the control plane (fault tests use it)

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess:
        result = subprocess.run([KUBECTL, *args], input=input, capture_output=True, text=True,
                                env=self.env(), timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    def api_client(self):
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))


@pytest.fixture(scope="session")
def cluster() -> ClusterHandle:
    given = os.environ.get("SPECINFER_TEST_KUBECONFIG")
    if given:
        yield ClusterHandle(kubeconfig=Path(given))
        return
    from specinfer.dev.cluster.control_plane import LocalCluster

    local = LocalCluster(os.environ.get("SPECINFER_TEST_CLUSTER", "pytest"),
                         log=lambda message: print(message, file=sys.stderr))
    already_running = local.is_healthy()
    local.up()
    try:
        yield ClusterHandle(kubeconfig=local.kubeconfig, local=local)
    finally:
        if not already_running and os.environ.get("SPECINFER_KEEP_CLUSTER") != "1":
            local.down()


@pytest.fixture
def namespace(cluster: ClusterHandle) -> str:
    """A fresh namespace per test, deleted afterwards (without waiting)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory):
    from specinfer.dev.cluster.prometheus import PrometheusServer

    server = PrometheusServer(tmp_path_factory.mktemp("prometheus"), scrape_interval="1s")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def lose_reserved_ports(monkeypatch):
    """Something binds each of the next `count` ports reserved (`lose_reserved_ports(count)`), after they are
    reserved and before the server that should bind them starts: the race a busy machine runs, forced.
    Returns the stolen ports (port -> the socket that holds it, closed after the test)."""
    from specinfer.dev.cluster import ports as _ports

    stolen: dict[int, socket.socket] = {}
    reserve = _ports.reserve
    budget = {"count": 0}

    def reserve_then_lose_it(owner, **kwargs):
        reservation = reserve(owner, **kwargs)
        if budget["count"] > 0:
            budget["count"] -= 1
            thief = socket.socket()
            thief.bind(("127.0.0.1", reservation.port))
            thief.listen()
            stolen[reservation.port] = thief
        return reservation

    def arm(count: int) -> dict[int, socket.socket]:
        budget["count"] = count
        return stolen

    monkeypatch.setattr(_ports, "reserve", reserve_then_lose_it)
    yield arm
    for thief in stolen.values():
        thief.close()
