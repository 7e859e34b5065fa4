"""`speculation.method: auto`: its candidates, and the fixed spec each of them serves (docs/selection.md).

A resource with method auto never renders as written: what serves is one candidate at a time --
`initial` until a comparison has a winner, then the candidate named in `status.selection`. Every
consumer that needs a method (rendering, the tuner, a calibration of the resource) reads
`serving_spec(...)`, a plain fixed-method spec, so nothing downstream knows about auto.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from specinfer.api.errors import InvalidSpecError
from specinfer.api.spec import SpeculativeInferenceSpec
from specinfer.api.speculation import AUTO, BASELINE, AutoCandidate
from specinfer.runtime.methods import all_methods, methods_without_drafts

NO_SPECULATION = AutoCandidate(method="none", name=BASELINE)


def is_auto(spec: SpeculativeInferenceSpec) -> bool:
    return spec.speculation.method == AUTO


def default_candidates(accelerator: str) -> tuple[AutoCandidate, ...]:
    """The methods whose module says auto may try them unasked (`auto_candidate`: they serve any target
    from a stock vLLM image) and that run on the accelerator. A model drafter must match the target,
    which only its owner knows, so none says so."""
    return tuple(AutoCandidate(method=method.name) for method in all_methods()
                 if method.auto_candidate and method.supports(accelerator))


def candidates_of(spec: SpeculativeInferenceSpec) -> tuple[AutoCandidate, ...]:
    """The candidates a comparison measures, no speculation always among them (as `none`)."""
    listed = spec.speculation.candidates
    chosen = tuple(listed) if listed else default_candidates(spec.hardware.accelerator)
    silent = methods_without_drafts()
    return (*(c for c in chosen if c.method not in silent), NO_SPECULATION)


def initial_candidate(spec: SpeculativeInferenceSpec) -> AutoCandidate:
    if spec.speculation.initial == "first":
        return candidates_of(spec)[0]
    return NO_SPECULATION


def find_candidate(spec: SpeculativeInferenceSpec, name: str | None) -> AutoCandidate | None:
    return next((c for c in candidates_of(spec) if c.display_name() == name), None) if name else None


def candidate_raw_spec(spec: SpeculativeInferenceSpec, candidate: AutoCandidate) -> dict[str, Any]:
    """The resource's spec (camelCase JSON) with `candidate` as its fixed speculation."""
    raw = spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    raw["speculation"] = candidate.model_dump(by_alias=True, exclude_none=True, mode="json", exclude={"name"})
    if candidate.method in methods_without_drafts() and raw.get("tuning", {}).get("mode") == "auto":
        # "tuning auto needs a speculative method" is about what the user wrote; while no speculation
        # serves there is no draft length to tune, and the tuner says so (NoSpeculation)
        raw["tuning"] = {**raw["tuning"], "mode": "observe"}
    return raw


def serving_spec(spec: SpeculativeInferenceSpec, selected: str | None) -> SpeculativeInferenceSpec:
    """The fixed spec that serves: `spec` itself for a fixed method; for auto the candidate named `selected`
    (status.selection.candidate), or `initial` while none is selected or the name is no longer listed."""
    if not is_auto(spec):
        return spec
    candidate = find_candidate(spec, selected) or initial_candidate(spec)
    try:
        return SpeculativeInferenceSpec.model_validate(candidate_raw_spec(spec, candidate))
    except ValidationError as error:  # parse_spec checks every candidate: only a spec it never saw gets here
        raise InvalidSpecError("spec.speculation.candidates",
                               f"spec.speculation.candidates: candidate {candidate.display_name()} cannot serve: "
                               f"{error.errors()[0]['msg']}") from None


def selected_candidate(status: Mapping[str, Any] | None) -> str | None:
    """status.selection.candidate of a stored resource (anything but a string reads as unset)."""
    selection = (status or {}).get("selection")
    name = selection.get("candidate") if isinstance(selection, Mapping) else None
    return name if isinstance(name, str) else None


def applied_for(serving: SpeculativeInferenceSpec, applied: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """status.tuning.applied when it tunes the method that serves; a choice the tuner made for another
    candidate (before a new method was selected) no longer applies."""
    method = applied.get("method") if applied else None
    return applied if method in (None, serving.speculation.method) else None
