"""`specinfer operator`: run the kopf operator."""

from __future__ import annotations

import datetime
import getpass
import logging
import os
import random
import socket
import string
import time

import click

from specinfer.operator.pure.config import CONFIG_ENV, load_config, parse_config
from specinfer.operator.pure.errors import ConfigError


def default_priority() -> int:
    """Earlier start = higher priority: a replica that starts later waits passively (kopf peering).

    kopf pauses *every* replica when priorities tie, so they must differ; start time in
    milliseconds keeps the running replica in charge when a new one joins.
    """
    return -int(time.time() * 1000)


def own_identity() -> str:
    """Our kopf peering identity, as kopf's detect_own_id(manual=False) makes it: the POD_ID env var (the
    pod's name, from the downward API; the chart sets POD_NAME, read next) else user@host/start-time/random.
    We make it ourselves, not kopf, so the leadership check (operator/plumbing/leadership.py) can find our own
    entry in the peering object."""
    pod = os.environ.get("POD_ID") or os.environ.get("POD_NAME")
    if pod:
        return pod
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for the uid (containers)
        user = str(os.getuid())
    started = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d%H%M%S")
    suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=3))
    return f"{user}@{socket.gethostname()}/{started}/{suffix}"


@click.command("operator")
@click.option("-n", "--namespace", "namespaces", multiple=True, envvar="SPECINFER_NAMESPACES",
              help="watch only this namespace (repeatable); default: all namespaces")
@click.option("--config", "config_file", default=None, envvar=CONFIG_ENV,
              help="operator configuration YAML (images, hardware profiles, Prometheus, rate limit)")
@click.option("--peering", default="specinfer", show_default=True,
              help="kopf peering object name: replicas sharing it run one at a time")
@click.option("--standalone", is_flag=True, help="run without peering (a single replica only)")
@click.option("--priority", type=int, default=None, help="peering priority (default: earlier start wins)")
@click.option("--liveness", default=None, help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
@click.option("--prometheus-url", default=None, envvar="SPECINFER_PROMETHEUS_URL",
              help="Prometheus for the tuning loop (overrides prometheus.url of the configuration)")
@click.option("--metrics-port", type=int, default=None, help="serve the operator's own /metrics on this port")
@click.option("-v", "--verbose", is_flag=True)
def operator_command(namespaces: tuple[str, ...], config_file: str | None, peering: str, standalone: bool,
                     priority: int | None, liveness: str | None, prometheus_url: str | None,
                     metrics_port: int | None, verbose: bool) -> None:
    """Reconcile SpeculativeInference resources into vLLM workloads (ConfigMap, Deployment, Service, PodMonitor)."""
    import kopf

    from specinfer.operator.controller import Options
    from specinfer.operator.handlers import build_registry

    try:
        config = load_config(config_file)
        if prometheus_url:  # validated like the file's (no credentials in a URL that ends up in messages)
            prometheus = {**config.prometheus.model_dump(by_alias=True), "url": prometheus_url}
            config = config.model_copy(update={"prometheus": parse_config({"prometheus": prometheus},
                                                                          source="--prometheus-url").prometheus})
    except ConfigError as error:
        raise click.ClickException(str(error)) from None
    from specinfer.operator.plumbing.client import ClusterUnavailable, check_reachable, configuration

    try:  # one line now, rather than kopf retrying a startup handler's traceback every minute
        check_reachable(configuration())
    except ClusterUnavailable as error:
        raise click.ClickException(str(error)) from None
    namespaces = tuple(ns for item in namespaces for ns in item.split(",") if ns)
    kopf.configure(verbose=verbose)
    if not verbose:  # one "Handler succeeded" line per watch event drowns what matters
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    priority = default_priority() if priority is None else priority
    identity = own_identity()
    options = Options(config=config, namespaces=namespaces, peering=None if standalone else peering,
                      identity=identity, priority=priority)
    kopf.run(
        registry=build_registry(),
        clusterwide=not namespaces,
        namespaces=namespaces,
        standalone=standalone,
        peering_name=None if standalone else peering,
        priority=priority,
        identity=identity,  # type: ignore[arg-type]  # kopf types it as a NewType it does not export
        liveness_endpoint=liveness,
        memo=kopf.Memo(options=options, metrics_port=metrics_port),
    )
