"""The kubernetes ApiClient: in-cluster service account, else $KUBECONFIG / ~/.kube/config."""

from __future__ import annotations

from typing import Any


def api_client(*, connections: int = 32) -> Any:
    """An ApiClient that keeps `connections` HTTP connections open to the API server.

    The client's default pool holds 5 x CPU count connections (10 on two cores); with more
    request threads than that, every surplus request opens a new TLS connection and then
    discards it ("Connection pool is full"), which costs more CPU than the request itself.
    """
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration)
