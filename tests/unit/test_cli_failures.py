"""Every `specinfer` command that needs a cluster, Prometheus or an engine fails without one in one line that
says what it looked for and what to run, never a traceback (issue 44). Nothing here needs a cluster: each
test takes away what its command needs (an empty state folder and cache, a kubeconfig that is missing or
points at a closed port, a URL nothing listens on)."""

from __future__ import annotations

import socket
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from specinfer.cli import main

# A command that does not fail at once can run for good (the operator's kopf loop retries a failed
# startup every minute): a regression must fail within a minute, not at the suite's 600 s.
pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


@pytest.fixture
def nothing_here(tmp_path, monkeypatch):
    """No local cluster, no cached binaries or engine, no kubeconfig, not in a pod."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("SPECINFER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("SPECINFER_OFFLINE", raising=False)
    return tmp_path


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def kubeconfig_to(path: Path, server: str) -> Path:
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server}"}}}}]
contexts: [{{name: c, context: {{cluster: c, user: u}}}}]
current-context: c
users: [{{name: u, user: {{token: t}}}}]
""")
    return path


def one_line(*args: str) -> str:
    """The command's whole output: one line, exit status 1, no traceback."""
    result = CliRunner().invoke(main, list(args))
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), \
        f"{type(result.exception).__name__}: {result.exception}\n{result.output}"
    assert result.exit_code == 1, (result.exit_code, result.output)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


# -- a cluster -------------------------------------------------------------------------------------------------

def test_operator_without_a_kubeconfig_says_where_it_looked(nothing_here):
    line = one_line("operator", "--standalone", "-n", "x")
    assert f"the kubeconfig {nothing_here / 'no-kubeconfig'}: there is none" in line
    assert "specinfer cluster up" in line


def test_operator_with_a_cluster_that_does_not_answer_names_it(nothing_here, monkeypatch):
    port = closed_port()
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_to(nothing_here / "kubeconfig", f"https://127.0.0.1:{port}")))
    line = one_line("operator", "--standalone", "-n", "x")
    assert f"the Kubernetes API at https://127.0.0.1:{port} does not answer" in line
    assert "specinfer cluster status" in line


def test_operator_with_a_kubeconfig_that_is_not_one_says_so(nothing_here, monkeypatch):
    (nothing_here / "kubeconfig").write_text("clusters: [\n")
    monkeypatch.setenv("KUBECONFIG", str(nothing_here / "kubeconfig"))
    assert "is not usable (ParserError" in one_line("operator", "--standalone", "-n", "x")


def test_bench_operator_scale_without_a_cluster_names_the_local_one(nothing_here, monkeypatch):
    monkeypatch.delenv("KUBECONFIG")
    line = one_line("bench", "operator-scale", "--count", "1")
    assert "the local cluster 'pytest' is not running" in line
    assert str(nothing_here / "state" / "specinfer" / "clusters" / "pytest" / "kubeconfig") in line
    assert "specinfer cluster up --name pytest" in line


def test_bench_operator_scale_with_a_given_kubeconfig(nothing_here):
    missing = nothing_here / "elsewhere"
    assert f"the kubeconfig {missing}: there is none" in one_line(
        "bench", "operator-scale", "--kubeconfig", str(missing))
    port = closed_port()
    closed = kubeconfig_to(nothing_here / "kubeconfig", f"https://127.0.0.1:{port}")
    assert f"https://127.0.0.1:{port} does not answer" in one_line(
        "bench", "operator-scale", "--kubeconfig", str(closed))


@pytest.mark.parametrize("command", ["status", "env"])
def test_cluster_commands_on_a_cluster_never_started(nothing_here, command):
    line = one_line("cluster", command, "--name", "nope")
    assert "cluster 'nope' is not running" in line and "specinfer cluster up --name nope" in line


# -- an engine -------------------------------------------------------------------------------------------------

def test_calibrate_against_an_endpoint_nothing_serves(nothing_here):
    port = closed_port()
    line = one_line("calibrate", "-e", f"ngram=http://127.0.0.1:{port}", "--batch-sizes", "1", "--warmup", "0",
                    "--duration", "1")
    assert f"no engine answers at http://127.0.0.1:{port}" in line and "specinfer sim" in line


def test_bench_load_against_a_server_that_is_not_there(nothing_here):
    port = closed_port()
    line = one_line("bench", "load", "--url", f"http://127.0.0.1:{port}", "--duration", "1")
    assert f"no server answers at http://127.0.0.1:{port}" in line and "specinfer sim" in line


@pytest.mark.parametrize("args", [["engine", "path"], ["models", "make", "{tmp}"], ["models", "measure", "{tmp}"],
                                  ["bench", "engine-cpu", "--methods", "ngram", "--ks", "1", "--batch-sizes", "1"]],
                         ids=lambda args: " ".join(args[:2]))
def test_commands_that_run_the_cpu_engine_without_it_installed(nothing_here, args):
    line = one_line(*(arg.replace("{tmp}", str(nothing_here)) for arg in args))
    assert "the vLLM CPU engine environment is not installed" in line and str(nothing_here / "cache") in line
    assert "specinfer engine install" in line


# -- what the demo starts itself ---------------------------------------------------------------------------------

def test_demo_without_its_prerequisites_names_each_and_make_setup(nothing_here, monkeypatch):
    from specinfer.dev.demo import prerequisites

    class NoPrometheus:
        def __init__(self, workdir):
            self.binary = str(nothing_here / "no-prometheus")

    monkeypatch.setattr(prerequisites, "PrometheusServer", NoPrometheus)
    monkeypatch.setattr(prerequisites.shutil, "which", lambda name: None)  # no Go toolchain either
    line = one_line("demo", "--engine", "vllm")
    assert f"Prometheus (no `prometheus` on PATH, nor {nothing_here / 'no-prometheus'})" in line
    assert "etcd, k8s, kwok not built in" in line and "no Go toolchain" in line
    assert "the vLLM CPU engine environment" in line and line.endswith("run `make setup`")


# -- the net under every command ---------------------------------------------------------------------------------

@pytest.mark.parametrize("error", [
    ConnectionRefusedError(111, "Connection refused"),
    pytest.param("kubernetes", id="kubernetes-config"),
    pytest.param("urllib3", id="urllib3-retries"),
])
def test_a_command_that_meets_a_missing_server_anywhere_prints_one_line(nothing_here, error):
    if error == "kubernetes":
        from kubernetes.config import ConfigException
        error = ConfigException("Invalid kube-config file. No configuration found.")
    elif error == "urllib3":
        from urllib3 import HTTPConnectionPool
        from urllib3.exceptions import MaxRetryError, NewConnectionError
        pool = HTTPConnectionPool("127.0.0.1", 9)
        error = MaxRetryError(pool, "/", NewConnectionError(pool, "Failed to establish a new connection: refused"))

    @click.command("fails-for-the-test")
    def failing() -> None:
        raise error

    main.add_command(failing)
    try:
        line = one_line("fails-for-the-test")
    finally:
        main.commands.pop("fails-for-the-test")
    assert line.startswith("Error: ") and ("answers" in line or "cluster" in line or "connection" in line), line


def test_other_errors_are_not_swallowed(nothing_here):
    @click.command("fails-for-the-test")
    def failing() -> None:
        raise KeyError("a bug")

    main.add_command(failing)
    try:
        result = CliRunner().invoke(main, ["fails-for-the-test"])
    finally:
        main.commands.pop("fails-for-the-test")
    assert isinstance(result.exception, KeyError)
