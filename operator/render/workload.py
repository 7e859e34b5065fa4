"""`Workload`: everything the child builders need, resolved once from the resource and the config."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from specinfer.api import EffectiveSpeculation, SpeculativeInferenceSpec
from specinfer.operator.pure.config import ModelCache
from specinfer.operator.pure.hardware import HardwareProfile
from specinfer.operator.render.labels import digest
from specinfer.runtime.contract.live_schedule import SCHEDULE_KEY
from specinfer.runtime.contract.live_schedule.envelope import LiveEnvelope, Ranges
from specinfer.runtime.contract.runtime_config import RUNTIME_CONFIG_PATH

# Fields of the spec the engine never reads: editing them must not restart GPU pods.
NOT_FOR_RUNTIME = ("replicas", "tuning", "update_strategy")
# The schedule ConfigMap, mounted as a directory (never subPath), beside the runtime config, not inside
# its read-only volume: a mount point nested in a ConfigMap volume is the container runtime's to create.
LIVE_SCHEDULE_DIR = "/etc/specinfer-live"
LIVE_STATE_FILE = "/tmp/specinfer-live-schedule.json"  # in the pod's /tmp emptyDir


@dataclass(frozen=True)
class LivePlan:
    """An engine retuned in place: its envelope and the schedule published to it now."""

    envelope: LiveEnvelope
    ranges: Ranges  # what the engine should run: the tuner's choice (or the spec's own)
    config_map: str  # the ConfigMap that publishes it


@dataclass(frozen=True)
class Workload:
    name: str
    namespace: str
    owners: list[dict[str, Any]]
    spec: SpeculativeInferenceSpec          # effective: spec + status.tuning.applied, defaults explicit
    speculation: EffectiveSpeculation
    profile: HardwareProfile
    model_cache: ModelCache
    live: LivePlan | None = None  # set: `spec` is the startup spec, `live.ranges` the published schedule

    @property
    def runtime_config(self) -> dict[str, Any]:
        """The RuntimeConfig the pod reads at RUNTIME_CONFIG_PATH.

        Without spec.runtime.env: the container's environment carries it, and its literal values would
        otherwise be copied into a ConfigMap, which more people may read than the Deployment (issue 15)."""
        exclude: dict[str, Any] = dict.fromkeys(NOT_FOR_RUNTIME, True)
        exclude["runtime"] = {"env"}
        spec = self.spec.model_dump(by_alias=True, exclude_none=True, mode="json", exclude=exclude)
        config = {"apiVersion": "specinfer.io/v1alpha1", "kind": "RuntimeConfig",
                  "name": self.name, "namespace": self.namespace, "spec": spec}
        if self.live is not None:  # constant for the envelope: a retune in place leaves the hash alone
            config["liveSchedule"] = {"file": f"{LIVE_SCHEDULE_DIR}/{SCHEDULE_KEY}", "stateFile": LIVE_STATE_FILE,
                                      "maxNumSpeculativeTokens": self.live.envelope.max_k}
        return config

    @property
    def runtime_config_text(self) -> str:
        return json.dumps(self.runtime_config, sort_keys=True, indent=2) + "\n"

    @property
    def config_hash(self) -> str:
        """Changes exactly when the engine must restart: the runtime config, the image or the env."""
        inputs: dict[str, Any] = {"runtimeConfig": self.runtime_config, "image": self.image}
        if self.spec.runtime.env:  # only when set, so hashes of resources without env stay what they were
            inputs["env"] = [var.model_dump(by_alias=True, exclude_none=True, mode="json")
                             for var in self.spec.runtime.env]
        return digest(inputs)

    @property
    def image(self) -> str:
        return self.spec.runtime.image or self.profile.image

    @property
    def config_path(self) -> str:
        return RUNTIME_CONFIG_PATH
