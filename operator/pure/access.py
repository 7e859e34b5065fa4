"""What a SpeculativeInference may make the operator do on its author's behalf (issue 15). Pure: no I/O.

The right to create a resource in a namespace must be worth nothing more than that. The operator
acts with its own rights and from its own network position, so whatever a spec points it at is
checked against the operator configuration, which only the cluster admin writes:

- Prometheus: the tuner queries only URLs the configuration lists (`prometheus.url` and
  `prometheus.allowedUrls`), and reads a Secret for them only when `prometheus.authSecrets` is on
  and the Secret itself opts in with the label `specinfer.io/prometheus-auth=true`.
- Engine pods: `spec.runtime.image` must be in `allowedImages` (default: the hardware profiles'
  images), and a Secret the pod takes a value from (`spec.model.hubTokenSecretRef`,
  `spec.runtime.env[].valueFrom.secretKeyRef`) must carry `specinfer.io/engine-secret=true` unless
  the configuration says `engineSecrets: Any`.

Why these choices (the Tenancy section of docs/reliability.md has the longer version): cert-manager
lends its controller's own ("ambient") credentials to a namespaced Issuer only behind the
`--issuer-ambient-credentials` flag, and trust-manager writes only the Secrets its Helm values
authorise; Prometheus Operator refuses monitors that would reach outside what the Prometheus
specification allows (`arbitraryFSAccessThroughSMs`) and reports them as rejected resources;
CloudNativePG refuses to reconcile a Service it does not own. Opt-in labels follow cert-manager's
`controller.cert-manager.io/fao` Secret label and sealed-secrets' key label: whoever may write the
Secret decides what it is for.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

OPT_IN_VALUE = "true"

URL_NOT_ALLOWED = "PrometheusUrlNotAllowed"
AUTH_NOT_ALLOWED = "PrometheusAuthNotAllowed"
IMAGE_NOT_ALLOWED = "ImageNotAllowed"
SECRET_NOT_ALLOWED = "EngineSecretNotAllowed"
CHILD_CONFLICT = "ChildConflict"

_DEFAULT_PORTS = {"http": 80, "https": 443}
_USERINFO = re.compile(r"(?<=://)[^/?#@\s]*@")


@dataclass(frozen=True)
class Refusal:
    """A condition reason and a message that names the rule and the fix."""

    reason: str
    message: str


def without_userinfo(text: str) -> str:
    """`http://user:pass@host` -> `http://<redacted>@host` anywhere in a text (status, Events, logs)."""
    return _USERINFO.sub("<redacted>@", text)


def base_url_parts(url: str) -> tuple[str, str, int, str] | None:
    """(scheme, host, port, path) of a base URL, None for anything else (userinfo, query, dot segments)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or "@" in parts.netloc or parts.query or parts.fragment:
        return None
    path = parts.path.rstrip("/")
    segments = path.split("/")
    if any(s in (".", "..") for s in segments) or "%" in path or "\\" in path:
        return None  # a proxy might resolve them past the allowed path
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme], path


def url_allowed(url: str, allowed: Iterable[str]) -> bool:
    """Same scheme, host and port as an allowed URL, and its path or a path below it."""
    wanted = base_url_parts(url)
    if wanted is None:
        return False
    for entry in allowed:
        base = base_url_parts(entry)
        if base is None or base[:3] != wanted[:3]:
            continue
        if wanted[3] == base[3] or wanted[3].startswith(base[3] + "/"):
            return True
    return False


@dataclass(frozen=True)
class PrometheusAccess:
    """Where the tuner may send queries and credentials (from the operator configuration)."""

    default_url: str | None = None
    allowed_urls: tuple[str, ...] = ()
    auth_secrets: bool = False

    def url_refusal(self, url: str) -> Refusal | None:
        allowed = tuple(filter(None, (self.default_url, *self.allowed_urls)))
        if url_allowed(url, allowed):
            return None
        listed = ", ".join(without_userinfo(u) for u in allowed) or "none"
        return Refusal(URL_NOT_ALLOWED, (
            f"spec.tuning.prometheus.url {without_userinfo(url)} is not in the operator configuration's "
            f"Prometheus allowlist (prometheus.url and prometheus.allowedUrls: {listed}): use one of those, "
            "remove the field to use the operator's default, or ask the cluster admin to allow it"))

    def auth_refusal(self, namespace: str, name: str) -> Refusal | None:
        if self.auth_secrets:
            return None
        return Refusal(AUTH_NOT_ALLOWED, (
            f"spec.tuning.prometheus.authSecretRef names Secret {namespace}/{name}, but the operator "
            "configuration does not let the tuner read Secrets (prometheus.authSecrets is false): remove "
            "authSecretRef, or ask the cluster admin to enable prometheus.authSecrets"))


def opted_in(metadata: dict[str, Any] | None, label: str) -> bool:
    return ((metadata or {}).get("labels") or {}).get(label) == OPT_IN_VALUE


def not_opted_in(kind: str, namespace: str, name: str, field: str, label: str, reason: str) -> Refusal:
    return Refusal(reason, (
        f"Secret {namespace}/{name} ({field}) does not carry the label {label}={OPT_IN_VALUE}, so the "
        f"operator will not use it for a {kind}: whoever manages the Secret opts it in with "
        f"`kubectl label secret -n {namespace} {name} {label}={OPT_IN_VALUE}`"))


def image_allowed(image: str, allowed: Iterable[str]) -> bool:
    """Exact references, or patterns with `*` (fnmatch: `registry.example/specinfer/*`)."""
    return any(image == entry or ("*" in entry and fnmatch.fnmatchcase(image, entry)) for entry in allowed)


def image_refusal(image: str, allowed: Iterable[str], *, configured: bool) -> Refusal | None:
    allowed = list(allowed)
    if image_allowed(image, allowed):
        return None
    source = "allowedImages" if configured else "the hardware profiles' images (allowedImages is unset)"
    return Refusal(IMAGE_NOT_ALLOWED, (
        f"spec.runtime.image {image} is not allowed by the operator configuration ({source}: "
        f"{', '.join(allowed) or 'none'}): remove spec.runtime.image to run the default image, or ask the "
        "cluster admin to add it to allowedImages"))


def engine_secret_refs(spec: Any) -> list[tuple[str, str]]:
    """(field path, Secret name) of every Secret an engine pod would take a value from."""
    refs: list[tuple[str, str]] = []
    token = spec.model.hub_token_secret_ref
    if token is not None:
        refs.append(("spec.model.hubTokenSecretRef", token.name))
    for index, var in enumerate(spec.runtime.env or []):
        source = var.value_from.secret_key_ref if var.value_from else None
        if source is not None:
            refs.append((f"spec.runtime.env[{index}].valueFrom.secretKeyRef", source.name))
    return refs


def child_conflict(manifest: dict[str, Any], live: dict[str, Any]) -> Refusal:
    """A child's name is taken by an object this resource does not control: leave it untouched (applying
    over it would overwrite its selector and ports, and the ownerReference would garbage-collect it with
    the resource), say so in status. CloudNativePG refuses the same way ("not owned by the cluster")."""
    meta = live.get("metadata") or {}
    controller = next((ref for ref in meta.get("ownerReferences") or [] if ref.get("controller")), None)
    owner = f"{controller.get('kind')} {controller.get('name')}" if controller else "no controller"
    where = f"{manifest['kind']} {meta.get('namespace', '')}/{meta.get('name', '')}"
    return Refusal(CHILD_CONFLICT, (
        f"{where} already exists and is not this resource's (owner: {owner}): the operator leaves it untouched "
        "and creates nothing; delete or rename that object, or give this SpeculativeInference another name"))
