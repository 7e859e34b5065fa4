"""The operator's own Kubernetes API access, and the one place its writes are made: server-side apply,
create, annotate, delete (docs/architecture.md, "Who writes what"; tests/unit/test_architecture_claims.py
fails on a write anywhere else). Every write but a delete names its field manager where it is called.

Built on the official client's `param_serialize` + `call_api` (authentication from the
kubeconfig or the pod's service account, no model (de)serialisation of bodies), run in
a thread pool, behind a client-side token-bucket rate limit (kopf has none). Watches
stay with kopf.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from specinfer.operator.pure.errors import ApiError

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
# the object's metadata without its content (labels of a Secret, not its data)
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

# apiVersion/kind -> plural, for the kinds the operator writes
PLURALS = {
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "Service"): "services",
    ("v1", "Event"): "events",
    ("apps/v1", "Deployment"): "deployments",
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitors",
    ("specinfer.io/v1alpha1", "SpeculativeInference"): "speculativeinferences",
    ("specinfer.io/v1alpha1", "SpeculativeInferenceCalibration"): "speculativeinferencecalibrations",
    ("batch/v1", "Job"): "jobs",
    ("v1", "Pod"): "pods",  # annotated only (annotate)
    ("kopf.dev/v1", "KopfPeering"): "kopfpeerings",  # created once if missing (handlers/lifecycle.py)
    ("kopf.dev/v1", "ClusterKopfPeering"): "clusterkopfpeerings",
}


def collection_path(api_version: str, kind: str, namespace: str | None) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    plural = PLURALS[(api_version, kind)]
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


def object_path(manifest: Mapping[str, Any], subresource: str | None = None) -> str:
    meta = manifest["metadata"]
    path = f"{collection_path(manifest['apiVersion'], manifest['kind'], meta.get('namespace'))}/{meta['name']}"
    return f"{path}/{subresource}" if subresource else path


async def server_side_apply(client: Any, manifest: Mapping[str, Any], *, field_manager: str,
                            subresource: str | None = None) -> Any:
    """Server-side apply as `field_manager`, forced: each writer owns the fields it writes
    (docs/architecture.md, "Who writes what"). `client` is anything with Kube's `request`."""
    return await client.request(
        "PATCH", object_path(manifest, subresource), body=manifest, content_type=APPLY_PATCH,
        query=[("fieldManager", field_manager), ("force", "true")], verb="APPLY")


async def annotate(client: Any, obj: Mapping[str, Any], annotations: Mapping[str, str], *,
                   field_manager: str) -> Any:
    """Set `annotations` on an existing object (apiVersion, kind, metadata.name/namespace) by a JSON merge
    patch, as `field_manager`; a missing object is ApiError 404.

    Not server-side apply: an apply of a missing object is a create (k8s.io/apiserver v0.37.2,
    pkg/endpoints/handlers/patch.go:685 `forceAllowCreate`), so an engine pod deleted between the cache and
    the write would turn into a create of a Pod from one annotation -- through mutating admission as a create,
    then refused for want of containers, or for want of `create` on pods (a 403 that would read as a missing
    `patch` and switch the nudge off). Both record `field_manager` as the annotation's manager."""
    return await client.request("PATCH", object_path(obj), body={"metadata": {"annotations": dict(annotations)}},
                                content_type=MERGE_PATCH, query=[("fieldManager", field_manager)])


async def delete(client: Any, obj: Mapping[str, Any], *, propagation_policy: str = "Background") -> Any:
    """Delete an object (apiVersion, kind, metadata.name/namespace); a missing one is ApiError 404. A delete
    names no field manager: the API server records none."""
    return await client.request("DELETE", object_path(obj), query=[("propagationPolicy", propagation_policy)])


class TokenBucket:
    """`qps` requests per second on average, bursts of up to `burst`."""

    def __init__(self, qps: float, burst: int, clock=time.monotonic) -> None:
        self.qps, self.burst, self.clock = qps, burst, clock
        self.tokens, self.stamp = float(burst), clock()
        self.lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.qps)
        self.stamp = now

    def delay(self) -> float:
        """Take one token; how long the caller must wait for it (0 when one was available)."""
        self._refill()
        self.tokens -= 1
        return 0.0 if self.tokens >= 0 else -self.tokens / self.qps

    async def acquire(self) -> None:
        async with self.lock:
            wait = self.delay()
        if wait > 0:
            await asyncio.sleep(wait)


class Kube:
    def __init__(self, api_client: Any, *, qps: float, burst: int, threads: int = 8,
                 request_timeout: float = 30.0) -> None:
        self.api = api_client
        self.bucket = TokenBucket(qps, burst)
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kube")
        self.timeout = request_timeout
        self.requests: Counter[str] = Counter()  # by verb, for logs and the operator's metrics

    def _call(self, method: str, path: str, query: list[tuple[str, str]], body: Any,
              content_type: str | None, accept: str | None = None) -> tuple[int, Any]:
        headers = {"Accept": accept or "application/json", "Content-Type": content_type or "application/json"}
        method_, url, headers, _, post = self.api.param_serialize(
            method, path, query_params=query or None, header_params=headers, auth_settings=["BearerToken"])
        # the client serialises dict bodies itself (JSON, and JSON-as-YAML for apply patches)
        response = self.api.call_api(method_, url, headers, body, post, _request_timeout=self.timeout)
        response.read()
        text = response.data.decode() if isinstance(response.data, bytes) else response.data
        return response.status, (json.loads(text) if text else None)

    async def request(self, method: str, path: str, *, query: list[tuple[str, str]] | None = None,
                      body: Any = None, content_type: str | None = None, verb: str | None = None,
                      accept: str | None = None) -> Any:
        """One API call; raises ApiError for any non-2xx status (404 included)."""
        await self.bucket.acquire()
        self.requests[verb or method] += 1
        loop = asyncio.get_running_loop()
        status, payload = await loop.run_in_executor(self.pool, self._call, method, path, query or [], body,
                                                     content_type, accept)
        if status >= 400:
            message = payload.get("message", "") if isinstance(payload, dict) else ""
            raise ApiError(status, method, path, message)
        return payload

    async def get(self, path: str, *, accept: str | None = None, **query: str) -> Any | None:
        """The object, or None when it does not exist (`accept=METADATA_ONLY`: its metadata only)."""
        try:
            return await self.request("GET", path, query=list(query.items()), accept=accept)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    async def apply(self, manifest: Mapping[str, Any], *, field_manager: str,
                    subresource: str | None = None) -> dict[str, Any]:
        return await server_side_apply(self, manifest, field_manager=field_manager, subresource=subresource)

    async def create(self, manifest: Mapping[str, Any], *, field_manager: str) -> dict[str, Any]:
        """POST a new object (a Job, whose template cannot be applied over), owned by `field_manager`."""
        meta = manifest["metadata"]
        return await self.request("POST", collection_path(manifest["apiVersion"], manifest["kind"],
                                                          meta.get("namespace")),
                                  query=[("fieldManager", field_manager)], body=manifest)

    async def list(self, api_version: str, kind: str, *, namespace: str | None,
                   label_selector: str | None = None) -> list[dict[str, Any]]:
        query = [("labelSelector", label_selector)] if label_selector else []
        items: list[dict[str, Any]] = []
        cont = None
        while True:
            page = await self.request("GET", collection_path(api_version, kind, namespace),
                                      query=query + ([("continue", cont)] if cont else []) + [("limit", "500")])
            for item in page.get("items") or []:
                item.setdefault("apiVersion", api_version)
                item.setdefault("kind", kind)
                items.append(item)
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return items

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
