"""The kubernetes ApiClient: in-cluster service account, else $KUBECONFIG / ~/.kube/config.

No cluster is one line saying where the client looked and what to run (ClusterUnavailable), never the
client library's traceback: `specinfer operator` and the commands beside it print it and exit 1.
"""

from __future__ import annotations

import os
from typing import Any

from specinfer.cli_errors import START_CLUSTER, flat


class ClusterUnavailable(Exception):
    """No Kubernetes API to talk to; the message says where the client looked and what to run."""


def kubeconfig_paths() -> str:
    """Where the kubernetes client looks outside a pod: $KUBECONFIG (a list), else ~/.kube/config."""
    return os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


def configuration(*, config_file: str | None = None) -> Any:
    """The client configuration: `config_file`, else in-cluster, else $KUBECONFIG / ~/.kube/config."""
    from kubernetes import client, config

    result = client.Configuration()
    if config_file is None:
        try:
            config.load_incluster_config(client_configuration=result)
            return result
        except config.ConfigException:
            pass
    where = config_file or kubeconfig_paths()
    try:  # named, not left to the client: it reads $KUBECONFIG once, when imported
        config.load_kube_config(config_file=where, client_configuration=result)
    except Exception as error:  # noqa: BLE001 -- missing, unreadable, not YAML, not a kubeconfig: all one line
        missing = not any(os.path.exists(path) for path in where.split(os.pathsep) if path)
        found = "there is none" if missing else f"it is not usable ({type(error).__name__}: {flat(error)})"
        raise ClusterUnavailable(f"no Kubernetes cluster: not in a pod, and the kubeconfig {where}: {found}; "
                                 + START_CLUSTER) from None
    return result


def check_reachable(settings: Any, *, timeout: float = 5.0) -> None:
    """One GET /version: ClusterUnavailable naming the API server when it does not answer."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        client.VersionApi(client.ApiClient(settings)).get_code(_request_timeout=timeout)
    except ApiException:
        return  # it answered (an error status is for the caller's requests to report)
    except (HTTPError, OSError) as error:
        reason = flat(getattr(error, "reason", None) or error).rsplit("new connection: ", 1)[-1]
        raise ClusterUnavailable(f"the Kubernetes API at {settings.host} does not answer ({reason}): is the "
                                 "cluster running? `specinfer cluster status` shows the local one; "
                                 + START_CLUSTER) from None


def api_client(*, connections: int = 32) -> Any:
    """An ApiClient that keeps `connections` HTTP connections open to the API server.

    The client's default pool holds 5 x CPU count connections (10 on two cores); with more
    request threads than that, every surplus request opens a new TLS connection and then
    discards it ("Connection pool is full"), which costs more CPU than the request itself.
    """
    from kubernetes import client

    settings = configuration()
    settings.connection_pool_maxsize = connections
    return client.ApiClient(settings)
