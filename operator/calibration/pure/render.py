"""A calibration + its target -> the engines to measure and their Jobs. Pure.

Every candidate (the target's own method as `configured`, the named candidates, and no
speculation as `none`) is measured at every draft length it lists: one engine, one Job each. An
engine's spec is the target's spec with the candidate's speculation at that K, validated with
`parse_spec` like any SpeculativeInference -- so a method the catalogue refuses on the target's
accelerator, a missing draft model or a K out of the method's bounds is reported against the
calibration's own field, before anything runs.

A Job's pod is the target's engine pod as the Deployment renderer builds it (image, device
request, placement, env, security context, model cache), with three differences: it runs
`specinfer calibrate --engine-config` (which starts `specinfer runtime` itself and drives it),
it restarts never (one attempt: a failure is a result), and its labels are the calibration's,
not the target's: no Service, PodMonitor or Deployment ever selects it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specinfer.api import InvalidSpecError, SpeculativeInferenceSpec, parse_spec, speculation_of
from specinfer.api.calibration import (
    BASELINE,
    CONFIGURED,
    Candidate,
    SpeculativeInferenceCalibrationSpec,
)
from specinfer.operator.pure.config import OperatorConfig
from specinfer.operator.render.deployment import build_deployment
from specinfer.operator.render.labels import (
    ENGINE_COMMAND_ANNOTATION,
    calibration_labels,
    calibration_owner_references,
    child_metadata,
    digest,
)
from specinfer.operator.render.workload import Workload
from specinfer.runtime.contract.calibration.analysis import target_fingerprint
from specinfer.runtime.methods import get_method

ENGINES_KEY_SUFFIX = ".json"
PROMPTS_DIR = "/etc/specinfer-prompts"
PROMPTS_FILE = "prompts"
DEFAULT_KS = (1, 2, 3, 4)
JOB_TTL_SECONDS = 86400  # the operator reads the result as soon as the Job ends; a day for `kubectl logs`
JOB_SLACK_SECONDS = 300
POINT_SLACK_SECONDS = 60  # per batch size: scrapes, cancelled requests, the next batch filling up
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class PlannedCandidate:
    name: str
    method: str
    draft_model: str | None
    ks: tuple[int, ...]


@dataclass(frozen=True)
class Engine:
    """One engine to start and measure: a candidate at one K."""

    candidate: str
    method: str
    k: int
    spec: SpeculativeInferenceSpec  # the target's, with the candidate's speculation at K (validated)

    @property
    def key(self) -> str:
        return f"{self.candidate}-k{self.k}"

    def describe(self) -> str:
        return f"{self.candidate} K={self.k}" if self.k else self.candidate


@dataclass(frozen=True)
class Plan:
    candidates: tuple[PlannedCandidate, ...]
    engines: tuple[Engine, ...]
    fingerprint: str
    configured_method: str


def check_name(name: str) -> None:
    if not DNS_LABEL.match(name or ""):
        raise InvalidSpecError("metadata.name", f"metadata.name {name!r} must be a DNS label (lowercase letters, "
                                                "digits and '-', starting with a letter, at most 63 characters): "
                                                "Jobs and labels take this name")


def _k_values(explicit: tuple[int, ...] | None, field: str, method: str, accelerator: str) -> tuple[int, ...]:
    spec = get_method(method)
    low, high = spec.k_min, spec.k_max_on(accelerator)
    if explicit is None:
        ks = tuple(k for k in DEFAULT_KS if low <= k <= high)
        return ks or (low,)
    outside = [k for k in explicit if not low <= k <= high]
    if outside:
        raise InvalidSpecError(field, f"{field}: K {', '.join(map(str, outside))} outside {low}..{high}, the draft "
                                      f"lengths method {method} runs on {accelerator}")
    return tuple(sorted(explicit))


def _engine_spec(target: SpeculativeInferenceSpec, speculation: Mapping[str, Any], k: int, field: str,
                 target_field: bool) -> SpeculativeInferenceSpec:
    raw = target.model_dump(by_alias=True, exclude_none=True, mode="json")
    chosen = {"method": "none"} if k == 0 else {**speculation, "numSpeculativeTokens": k}
    chosen.pop("schedule", None)
    raw["speculation"] = chosen
    raw["tuning"] = {"mode": "off"}  # the engine never reads it; its rules are about the target's tuning
    raw["replicas"] = 1
    try:
        return parse_spec(raw)
    except InvalidSpecError as error:
        problem = error.describe_all()
        where = "the target's spec.speculation" if target_field else field
        message = problem.replace("spec.speculation", where)
        raise InvalidSpecError(field, f"{field}: {message} (on the target's accelerator "
                                      f"{target.hardware.accelerator})") from None


def plan(spec: SpeculativeInferenceCalibrationSpec, target: SpeculativeInferenceSpec) -> Plan:
    """The candidates and engines, or InvalidSpecError naming the calibration's field that cannot run."""
    accelerator = target.hardware.accelerator
    candidates: list[tuple[str, Candidate | None, str, bool]] = []  # name, candidate, field, is the target's
    configured_method = target.speculation.method
    if get_method(configured_method).speculates:
        candidates.append((CONFIGURED, None, "spec.targetRef", True))
    for index, listed in enumerate(spec.candidates):
        if not get_method(listed.speculation.method).speculates:
            continue  # listed or not, no speculation is measured once, as the baseline
        candidates.append((listed.display_name(), listed, f"spec.candidates[{index}]", False))
    planned, engines = [], []
    for name, candidate, field, is_target in candidates:
        speculation = (target.speculation if candidate is None else candidate.speculation).model_dump(
            by_alias=True, exclude_none=True, mode="json")
        method = speculation["method"]
        explicit = candidate.num_speculative_tokens if candidate is not None and candidate.num_speculative_tokens \
            else spec.num_speculative_tokens
        k_field = f"{field}.numSpeculativeTokens" if candidate is not None and candidate.num_speculative_tokens \
            else "spec.numSpeculativeTokens"
        ks = _k_values(tuple(explicit) if explicit else None, k_field, method, accelerator)
        speculation_field = f"{field}.speculation" if not is_target else field
        for k in ks:
            engines.append(Engine(name, method, k, _engine_spec(target, speculation, k, speculation_field, is_target)))
        draft = (speculation.get("draftModel") or {}).get("name")
        planned.append(PlannedCandidate(name, method, draft[:128] if draft else None, ks))
    engines.append(Engine(BASELINE, "none", 0, _engine_spec(target, {"method": "none"}, 0, "spec", False)))
    planned.append(PlannedCandidate(BASELINE, "none", None, (0,)))
    return Plan(candidates=tuple(planned), engines=tuple(engines), fingerprint=target_fingerprint(target),
                configured_method=configured_method)


# -- manifests ----------------------------------------------------------------------------------


def _bounded(name: str, limit: int = 63) -> str:
    if len(name) <= limit:
        return name
    return f"{name[:limit - 9].rstrip('-')}-{digest(name, 8)}"


def engines_configmap_name(calibration: str) -> str:
    return _bounded(f"{calibration}-engines", 253)


def job_name(calibration: str, engine: Engine) -> str:
    return _bounded(f"{calibration}-{engine.key}")


def workload(meta: Mapping[str, Any], target_name: str, engine: Engine, config: OperatorConfig) -> Workload:
    return Workload(name=target_name, namespace=meta.get("namespace") or "default",
                    owners=calibration_owner_references(meta), spec=engine.spec,
                    speculation=speculation_of(engine.spec),
                    profile=config.profile(engine.spec.hardware.accelerator), model_cache=config.model_cache)


def build_engines_configmap(meta: Mapping[str, Any], target_name: str, the_plan: Plan,
                            config: OperatorConfig) -> dict[str, Any]:
    """Each engine's RuntimeConfig, as the target's pods get theirs."""
    data = {engine.key + ENGINES_KEY_SUFFIX: workload(meta, target_name, engine, config).runtime_config_text
            for engine in the_plan.engines}
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": child_metadata(target_name, meta.get("namespace"), calibration_owner_references(meta),
                                   child_name=engines_configmap_name(meta["name"]),
                                   labels=calibration_labels(meta["name"], target_name)),
        "data": dict(sorted(data.items())),
    }


def calibrate_args(spec: SpeculativeInferenceCalibrationSpec, startup_seconds: int) -> list[str]:
    load = spec.load
    args = ["--engine-config", "/etc/specinfer/runtime.json",
            "--batch-sizes", ",".join(map(str, spec.batch_sizes)),
            "--warmup", str(load.warmup_seconds), "--duration", str(load.duration_seconds),
            "--output-tokens", str(load.output_tokens), "--prompt-tokens", str(load.prompt_tokens),
            "--temperature", f"{load.temperature:g}", "--startup-timeout", str(startup_seconds),
            "--termination-message"]
    if spec.prompts is not None:
        args += ["--prompts", f"{PROMPTS_DIR}/{PROMPTS_FILE}"]
    return args


def active_deadline(spec: SpeculativeInferenceCalibrationSpec, startup_seconds: int) -> int:
    per_point = spec.load.warmup_seconds + spec.load.duration_seconds + POINT_SLACK_SECONDS
    return startup_seconds + len(spec.batch_sizes) * per_point + JOB_SLACK_SECONDS


def build_job(meta: Mapping[str, Any], spec: SpeculativeInferenceCalibrationSpec, target_name: str, engine: Engine,
              config: OperatorConfig) -> dict[str, Any]:
    the_workload = workload(meta, target_name, engine, config)
    template = build_deployment(the_workload)["spec"]["template"]
    pod = dict(template["spec"])
    container = dict(pod["containers"][0])
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        container.pop(probe, None)  # run to completion: the driver waits for /health itself, with a deadline
    container.pop("ports", None)  # nothing connects to it from outside the pod
    container["command"] = ["specinfer", "calibrate"]
    container["args"] = calibrate_args(spec, the_workload.profile.startup_seconds)
    volumes = []
    for volume in pod["volumes"]:
        if volume["name"] == "runtime-config":
            volume = {"name": "runtime-config", "configMap": {
                "name": engines_configmap_name(meta["name"]),
                "items": [{"key": engine.key + ENGINES_KEY_SUFFIX, "path": "runtime.json"}]}}
        volumes.append(volume)
    mounts = list(container["volumeMounts"])
    if spec.prompts is not None:
        ref = spec.prompts.config_map_ref
        volumes.append({"name": "prompts", "configMap": {"name": ref.name,
                                                         "items": [{"key": ref.key, "path": PROMPTS_FILE}]}})
        mounts.append({"name": "prompts", "mountPath": PROMPTS_DIR, "readOnly": True})
    container["volumeMounts"] = mounts
    pod.update(containers=[container], volumes=volumes, restartPolicy="Never")
    pod_labels = calibration_labels(meta["name"], target_name, engine)
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": child_metadata(target_name, meta.get("namespace"), calibration_owner_references(meta),
                                   child_name=job_name(meta["name"], engine), labels=pod_labels),
        "spec": {
            "backoffLimit": 0,  # one attempt: an engine that cannot start is the answer, not a retry
            "activeDeadlineSeconds": active_deadline(spec, the_workload.profile.startup_seconds),
            "ttlSecondsAfterFinished": JOB_TTL_SECONDS,
            "template": {"metadata": {"labels": pod_labels, "annotations": {
                ENGINE_COMMAND_ANNOTATION: template["metadata"]["annotations"][ENGINE_COMMAND_ANNOTATION]}},
                "spec": pod},
        },
    }
