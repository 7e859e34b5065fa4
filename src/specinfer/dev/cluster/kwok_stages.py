"""kwok's lifecycle stages, read from its Go module at start-up (never vendored into this repo).

kwok fakes a node's and its pods' lifecycle by applying Stage objects. Run bare
(without kwokctl) it has none, so we hand it the upstream "fast" stages from the
module the build already downloaded: nodes become Ready (heartbeats renew a
Lease), scheduled pods become Running/Ready, deleted pods go away. Pods of Jobs
complete at once -- except the operator's own (its calibration Jobs), which the pod
runner really runs and reports Succeeded or Failed itself.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from specinfer.dev.cluster.binaries import KWOK
from specinfer.operator.render.labels import ENGINE_COMMAND_ANNOTATION, MANAGED_BY, MANAGED_BY_LABEL

STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)


# The pod runner runs the operator's Job pods and reports their completion (dev/cluster/pod_runner.py).
OPERATOR_PODS_RUN_LOCALLY = {"key": f'.metadata.labels["{MANAGED_BY_LABEL}"]', "operator": "NotIn",
                             "values": [MANAGED_BY]}


# Pods that exec the real vLLM and request no accelerator device (extended resources are
# domain-prefixed: nvidia.com/gpu, ...): hardware.accelerator cpu, which the pod runner runs in the
# engine environment and whose status it owns, as a kubelet would (Ready once vLLM answers its
# probe). kwok's pod-ready stage would mark them Ready at once, and a Surge rollout would stop the
# old engine before the new one serves: minutes without service on CPU. That stage skips them.
# Simulator pods ("simulated: vllm serve ...") and GPU pods keep kwok's instant Ready.
RUNNER_OWNED_POD = (
    f'(.metadata.annotations["{ENGINE_COMMAND_ANNOTATION}"] // "" | startswith("vllm serve ")) and '
    '([.spec.containers[].resources.limits // {} | keys[] | select(contains("/"))] | length == 0)'
)


def pod_ready_stage_skipping_runner_pods(stage: dict) -> dict:
    """kwok's pod-ready stage with one more selector term: not for pods the runner owns."""
    expressions = stage["spec"]["selector"].setdefault("matchExpressions", [])
    expressions.append({"key": RUNNER_OWNED_POD, "operator": "NotIn", "values": ["true"]})
    return stage


def kwok_module_dir() -> Path:
    result = subprocess.run(["go", "mod", "download", "-json", f"{KWOK.module}@{KWOK.version()}"],
                            cwd=KWOK.tools_dir, capture_output=True, text=True, check=True,
                            env={**os.environ, "GOTOOLCHAIN": "local"})
    return Path(json.loads(result.stdout)["Dir"])


def write_config(path: Path) -> Path:
    """Write a kwok --config file: a KwokConfiguration followed by the stages."""
    stage_root = kwok_module_dir() / "kustomize" / "stage"
    documents: list[dict[str, Any]] = [{"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
                  "options": {
                      # A config file replaces kwok's defaults wholesale, so restate the ones it needs.
                      "nodeLeaseDurationSeconds": 40, "nodeLeaseParallelism": 4,
                      "podPlayStageParallelism": 4, "nodePlayStageParallelism": 4,
                      "podsOnNodeSyncParallelism": 1, "enablePodsOnNodeSyncListPager": True,
                      "enablePodsOnNodeSyncStreamWatch": False}}]
    for relative in STAGE_FILES:
        documents.extend(doc for doc in yaml.safe_load_all((stage_root / relative).read_text()) if doc)
    for stage in documents:
        name = (stage.get("metadata") or {}).get("name")
        if stage.get("kind") == "Stage" and name == "pod-complete":
            stage["spec"]["selector"]["matchExpressions"].append(OPERATOR_PODS_RUN_LOCALLY)
        if stage.get("kind") == "Stage" and name == "pod-ready":
            pod_ready_stage_skipping_runner_pods(stage)
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path
