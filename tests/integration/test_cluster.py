"""The local control plane works as a whole: etcd + apiserver + scheduler + controller-manager + kwok."""

from __future__ import annotations

import json
import textwrap

import pytest

pytestmark = pytest.mark.integration


def test_node_is_ready(cluster):
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    assert nodes, "no nodes registered"
    ready = [n["metadata"]["name"] for n in nodes
             if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])]
    assert ready, f"no Ready node among {[n['metadata']['name'] for n in nodes]}"


def test_server_version_matches_kubectl_skew(cluster):
    versions = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    server_minor = int(versions["serverVersion"]["minor"].rstrip("+"))
    client_minor = int(versions["clientVersion"]["minor"].rstrip("+"))
    assert abs(server_minor - client_minor) <= 1, versions


def test_deployment_becomes_available(cluster, namespace):
    manifest = textwrap.dedent(f"""
        apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: web, namespace: {namespace}}}
        spec:
          replicas: 2
          selector: {{matchLabels: {{app: web}}}}
          template:
            metadata: {{labels: {{app: web}}}}
            spec:
              containers:
              - name: web
                image: registry.invalid/web:1
                resources: {{limits: {{nvidia.com/gpu: "1"}}}}
        """)
    cluster.kubectl("apply", "-f", "-", input=manifest)
    # Available needs: the Deployment controller (controller-manager) to create a ReplicaSet and pods,
    # the scheduler to bind them to the kwok node, and kwok to mark them Ready.
    cluster.kubectl("-n", namespace, "wait", "deployment/web", "--for=condition=Available", "--timeout=90s",
                    timeout=120)
    pods = json.loads(cluster.kubectl("-n", namespace, "get", "pods", "-o", "json").stdout)["items"]
    assert len(pods) == 2
    assert all(p["spec"].get("nodeName", "").startswith("kwok-node-") for p in pods)
