"""Watch events of the children the operator manages -> their owner is reconciled (drift, deletion, rollout)."""

from __future__ import annotations

from typing import Any

import kopf

from specinfer.operator.render.labels import MANAGED_BY, MANAGED_BY_LABEL

# (group/version, plural); the label selector is applied server-side (settings.watching.label_selectors).
# Engine pods are not the operator's children (their ReplicaSet owns them) but carry the same label:
# watched read-only, so a crash-looping engine shows in the resource's conditions
# (operator/inference/pure/engine_failures.py).
# Jobs are the calibration controller's (operator/calibration/): one per engine it measures.
CHILD_RESOURCES = (("v1", "configmaps"), ("apps/v1", "deployments"), ("v1", "services"),
                   ("monitoring.coreos.com/v1", "podmonitors"), ("v1", "pods"), ("batch/v1", "jobs"))


def register(registry: kopf.OperatorRegistry) -> None:
    def child_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
        memo.controller.on_child_event(event)

    for group_version, plural in CHILD_RESOURCES:
        group, _, version = group_version.rpartition("/")  # "v1": the core group, named ""
        kopf.on.event(group=group, version=version, plural=plural, labels={MANAGED_BY_LABEL: MANAGED_BY},
                      id=f"child-{plural}", registry=registry)(child_event)
