"""The only way the operator touches a tenant's Secret: when the Secret opts in by label (issue 15).

A metadata-only GET (PartialObjectMetadata: labels, no data) comes first; the data is fetched only for
a Secret that carries the label, so the operator never even receives a Secret not meant for it. Both
are GETs by name: the chart grants `get` on Secrets, never list or watch.
"""

from __future__ import annotations

from typing import Any

from specinfer.operator.plumbing.kube import METADATA_ONLY
from specinfer.operator.pure.access import Refusal, not_opted_in, opted_in
from specinfer.operator.pure.errors import ApiError


def _path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/secrets/{name}"


async def opt_in_refusal(kube: Any, namespace: str, name: str, *, field: str, label: str, use: str,
                         reason: str, missing_reason: str | None = None) -> Refusal | None:
    """None when Secret namespace/name exists and carries `label`; else why it may not be used."""
    try:
        metadata = await kube.get(_path(namespace, name), accept=METADATA_ONLY)
    except ApiError as error:
        hint = (" (the operator's RBAC lacks get on Secrets: the chart's rbac.readSecrets)"
                if error.status == 403 else "")
        return Refusal(missing_reason or reason, f"cannot check Secret {namespace}/{name} ({field}): "
                                                 f"HTTP {error.status}{hint}")
    if metadata is None:
        return Refusal(missing_reason or reason, f"Secret {namespace}/{name} ({field}) does not exist")
    if not opted_in(metadata.get("metadata"), label):
        return not_opted_in(use, namespace, name, field, label, reason)
    return None


async def read_opted_in_secret(kube: Any, namespace: str, name: str, *, field: str, label: str, use: str,
                               reason: str, missing_reason: str | None = None) -> dict[str, Any] | Refusal:
    """The Secret, read only after its metadata showed the opt-in label; a Refusal otherwise."""
    refused = await opt_in_refusal(kube, namespace, name, field=field, label=label, use=use, reason=reason,
                                   missing_reason=missing_reason)
    if refused is not None:
        return refused
    try:
        secret = await kube.get(_path(namespace, name))
    except ApiError as error:
        return Refusal(missing_reason or reason,
                       f"cannot read Secret {namespace}/{name} ({field}): HTTP {error.status}")
    if secret is None or not opted_in(secret.get("metadata"), label):  # replaced between the two reads
        return not_opted_in(use, namespace, name, field, label, reason)
    return secret
