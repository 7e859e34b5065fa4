"""The kubernetes ApiClient: in-cluster service account, else $KUBECONFIG / ~/.kube/config."""

from __future__ import annotations

from typing import Any


def api_client() -> Any:
    from kubernetes import client, config

    try:
        config.load_incluster_config()
        return client.ApiClient()
    except config.ConfigException:
        return config.new_client_from_config()
