"""In-memory view of the world, fed by kopf's watch events (an informer cache).

Reconciles read from here, so a resource whose children already match costs no API
request at all: that is what makes steady state free of writes *and* reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specinfer.api import KIND
from specinfer.operator.render.labels import NAME_LABEL

Key = tuple[str, str]  # (namespace, name) of a SpeculativeInference


def _newer_or_same(incoming: Mapping[str, Any], cached: Mapping[str, Any] | None) -> bool:
    """Do not let a late watch event overwrite the response of our own newer write."""
    if cached is None:
        return True
    new, old = (incoming.get("metadata") or {}).get("resourceVersion"), (cached.get("metadata") or {}).get(
        "resourceVersion")
    if isinstance(new, str) and isinstance(old, str) and new.isdigit() and old.isdigit():
        return int(new) >= int(old)  # etcd revisions; opaque by contract, so only used to skip stale copies
    return True


class Cache(dict[Key, dict[str, Any]]):
    """Objects by (namespace, name), kept like the Store's: a watch event older than what is cached (our
    own write's answer, typically) never replaces it."""

    def put(self, body: Mapping[str, Any]) -> Key:
        meta = body.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if _newer_or_same(body, self.get(key)):
            self[key] = dict(body)
        return key


def controlled_by(obj: Mapping[str, Any], uid: str) -> bool:
    """The object's controller ownerReference is the resource with this uid (a name can be reused; a uid not)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("controller") and ref.get("uid") == uid for ref in refs)




def owner_key(child: Mapping[str, Any]) -> Key | None:
    meta = child.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == KIND and ref.get("controller"):
            return meta.get("namespace", ""), ref["name"]
    if child.get("kind") == "Pod" and (meta.get("labels") or {}).get(NAME_LABEL):
        return meta.get("namespace", ""), meta["labels"][NAME_LABEL]
    return None


class Store:
    def __init__(self) -> None:
        self.resources: dict[Key, dict[str, Any]] = {}
        self.children: dict[tuple[str, str, str], dict[str, Any]] = {}  # (kind, namespace, name)
        self.pods: dict[Key, dict[str, dict[str, Any]]] = {}  # resource -> pod name -> engine pod
        self.podmonitor_crd = False

    def put_resource(self, body: Mapping[str, Any]) -> None:
        meta = body["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        if _newer_or_same(body, self.resources.get(key)):
            self.resources[key] = dict(body)

    def drop_resource(self, key: Key) -> None:
        self.resources.pop(key, None)

    def put_child(self, body: Mapping[str, Any]) -> None:
        meta = body["metadata"]
        if body.get("kind") == "Pod":
            owner = owner_key(body)
            if owner is not None:
                pods = self.pods.setdefault(owner, {})
                if _newer_or_same(body, pods.get(meta["name"])):
                    pods[meta["name"]] = dict(body)
            return
        key = (body["kind"], meta.get("namespace", ""), meta["name"])
        if _newer_or_same(body, self.children.get(key)):
            self.children[key] = dict(body)

    def drop_child(self, kind: str, namespace: str, name: str) -> None:
        self.children.pop((kind, namespace, name), None)

    def drop_pod(self, body: Mapping[str, Any]) -> None:
        owner = owner_key(body)
        if owner is None or owner not in self.pods:
            return
        self.pods[owner].pop(body["metadata"]["name"], None)
        if not self.pods[owner]:
            del self.pods[owner]

    def child(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.children.get((kind, namespace, name))

    def pods_of(self, key: Key) -> list[dict[str, Any]]:
        """Engine pods of one resource (from the pod watch)."""
        return list((self.pods.get(key) or {}).values())
