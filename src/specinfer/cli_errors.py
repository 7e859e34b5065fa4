"""One line for an error that means a server a command needs is not there (a cluster, an engine, any HTTP
server), so that no `specinfer` command ends in a library's traceback for it. The commands name what they
looked for themselves (`specinfer bench operator-scale`: the kubeconfig and `specinfer cluster up`); this is
the net under them. A library's exception types are looked up only when the library is already imported:
a command that never imported it cannot raise them, and `specinfer --help` stays fast."""

from __future__ import annotations

import sys

# What to run when there is no cluster (operator/plumbing/client.py's ClusterUnavailable says it too)
START_CLUSTER = ("start the local one with `specinfer cluster up` and `eval \"$(specinfer cluster env)\"`, or point "
                 "KUBECONFIG at a cluster")


def _type(module: str, name: str) -> type | None:
    loaded = sys.modules.get(module)
    return getattr(loaded, name, None) if loaded is not None else None


def flat(error: object) -> str:
    """An error's text on one line (a YAML error's is several)."""
    return " ".join(str(error).split())


def unreachable(error: BaseException) -> str | None:
    """The line to print for `error`, or None when it is not about a missing server."""
    unavailable = _type("specinfer.operator.plumbing.client", "ClusterUnavailable")
    if unavailable is not None and isinstance(error, unavailable):
        return flat(error)
    config_exception = _type("kubernetes.config.config_exception", "ConfigException")
    if config_exception is not None and isinstance(error, config_exception):
        return f"no Kubernetes cluster configured ({flat(error)}): {START_CLUSTER}"
    max_retries = _type("urllib3.exceptions", "MaxRetryError")
    if max_retries is not None and isinstance(error, max_retries):
        pool = error.pool  # type: ignore[attr-defined]
        where = f"{pool.scheme}://{pool.host}:{pool.port}" if pool is not None else "the server"
        reason = flat(error.reason or error).rsplit("new connection: ", 1)[-1]  # type: ignore[attr-defined]
        return f"nothing answers at {where} ({reason}): is it running? (the local cluster: `specinfer cluster status`)"
    connector = _type("aiohttp.client_exceptions", "ClientConnectorError")
    if connector is not None and isinstance(error, connector):
        return f"nothing answers at {error.host}:{error.port} ({flat(error)}): is it running?"  # type: ignore[attr-defined]
    if isinstance(error, ConnectionError):
        return f"a connection failed ({flat(error)}): is the server the command talks to running?"
    return None
