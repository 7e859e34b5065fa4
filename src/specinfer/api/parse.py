"""`parse_spec`: the one entry point that turns a resource's spec into typed models or a precise error.

It applies every admission rule (the same predicates as the CRD's CEL) plus the checks
CEL cannot express (values inside `speculation.advanced`, cross-field rules of vLLM's
SpeculativeConfig). The operator reports an `InvalidSpecError` as condition
Ready=False, reason InvalidSpec, with `str(error)` as the message, and creates nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from specinfer.api.auto import candidate_raw_spec, default_candidates, is_auto
from specinfer.api.errors import InvalidSpecError as InvalidSpecError  # re-exported: parse_spec's error
from specinfer.api.resource import SpeculativeInference
from specinfer.api.spec import SpeculativeInferenceSpec
from specinfer.api.speculation import AutoCandidate
from specinfer.runtime.methods import get_accelerator, get_method, methods_without_drafts
from specinfer.runtime.methods.engine_truth import k_problems, schedule_support


def _path(root: str, loc: tuple[Any, ...]) -> str:
    path = root
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def invalid_spec_error(error: ValidationError, root: str) -> InvalidSpecError:
    problems = []
    for item in error.errors():
        path = _path(root, tuple(item["loc"]))
        if item["type"] == "specinfer_rule":
            ctx = item.get("ctx") or {}
            field = ctx.get("field")
            problems.append((f"{path}.{field}" if field else path, item["msg"]))
            for other_field, other_message in ctx.get("others", []):
                problems.append((f"{path}.{other_field}" if other_field else path, other_message))
        elif item["type"] == "missing":
            problems.append((path, f"{path} is required: add it"))
        elif item["type"] == "extra_forbidden" and ".advanced." in path:
            problems.append((path, f"{path} is not a vLLM 0.33 SpeculativeConfig field that spec.speculation.advanced "
                             "offers: check the spelling (vLLM's snake_case names) or see docs/api.md"))
        elif item["type"] == "extra_forbidden":
            problems.append((path, f"{path} is not a field of this API: remove it or check its spelling"))
        else:
            problems.append((path, f"{path}: {item['msg']}"))
    first_path, first_message = problems[0]
    return InvalidSpecError(first_path, first_message, problems)


def data_parallel_size(extra_args: list[str] | None) -> int:
    """`--data-parallel-size N` / `-dp N` among the user's extra vLLM arguments (1 when absent)."""
    args = list(extra_args or [])
    for index, arg in enumerate(args):
        name, _, value = arg.partition("=")
        if name in ("--data-parallel-size", "--data_parallel_size", "-dp"):
            if not value and index + 1 < len(args):
                value = args[index + 1]
            try:
                return int(value)
            except ValueError:
                return 1  # vLLM refuses a non-integer itself, naming the flag
    return 1


def _candidate_problems(spec: SpeculativeInferenceSpec) -> list[tuple[str, str]]:
    """Method auto: each candidate that may serve must pass every check a fixed method passes, reported at its
    index (the defaults, when none are listed, under spec.speculation.candidates). No speculation is the
    baseline whatever is listed: it is checked as the tuner would meet it (it has nothing to tune)."""
    problems: list[tuple[str, str]] = []
    listed = spec.speculation.candidates
    candidates: list[tuple[int | None, AutoCandidate]] = list(enumerate(listed)) if listed else \
        [(None, c) for c in default_candidates(spec.hardware.accelerator)]
    for index, candidate in candidates:
        if candidate.method in methods_without_drafts():
            continue
        here = f"spec.speculation.candidates[{index}]" if index is not None else \
            f"spec.speculation.candidates (the default candidate {candidate.method})"

        def moved(path: str, message: str, here: str = here) -> tuple[str, str]:
            return path.replace("spec.speculation", here, 1), message.replace("spec.speculation", here)

        try:
            fixed = SpeculativeInferenceSpec.model_validate(candidate_raw_spec(spec, candidate))
        except ValidationError as error:
            problems += [moved(path, message) for path, message in invalid_spec_error(error, "spec").problems]
            continue
        problems += [moved(path, message) for path, message in semantic_problems(fixed)]
    return problems


def semantic_problems(spec: SpeculativeInferenceSpec) -> list[tuple[str, str]]:
    """Checks CEL cannot express; empty when the spec is sound."""
    if is_auto(spec):
        return _candidate_problems(spec)
    problems: list[tuple[str, str]] = []
    speculation, accelerator = spec.speculation, spec.hardware.accelerator
    method = get_method(speculation.method)
    release = get_accelerator(accelerator).engine
    advanced: dict[str, Any] = speculation.advanced.model_dump(exclude_none=True) if speculation.advanced else {}
    base = "spec.speculation.advanced"
    tp = spec.hardware.tensor_parallel()
    draft_tp = advanced.get("draft_tensor_parallel_size")
    if isinstance(draft_tp, int) and draft_tp not in (1, tp):
        problems.append((f"{base}.draft_tensor_parallel_size",
                         f"{base}.draft_tensor_parallel_size must be 1 or the target's tensor parallel size {tp}"
                         + (f" (spec.hardware.accelerator {accelerator} runs tensor parallel size 1 unless "
                            "spec.hardware.tensorParallelSize says otherwise)" if tp != spec.hardware.count else "")))
    synthetic = advanced.get("rejection_sample_method") == "synthetic"
    if ("synthetic_acceptance_rates" in advanced or "synthetic_acceptance_length" in advanced) and not synthetic:
        problems.append((base, f"{base}: synthetic_acceptance_* needs rejection_sample_method synthetic"))
    if method.speculates:
        k = speculation.num_speculative_tokens or method.default_k(accelerator)
        default = "" if speculation.num_speculative_tokens else f"; K {k} is the default of method {method.name}"
        for problem in k_problems(accelerator, k, advanced):
            problems.append((f"{base}.{problem.field}",
                             f"{base}.{problem.field} {problem.message}{default if problem.depends_on_k else ''} "
                             f"({release.label} refuses it when it starts: {problem.source})"))
    if advanced.get("use_heterogeneous_vocab") and advanced.get("draft_sample_method", "greedy") != "greedy":
        problems.append((f"{base}.use_heterogeneous_vocab",
                         f"{base}.use_heterogeneous_vocab needs draft_sample_method greedy"))
    if speculation.schedule and method.speculates:
        data_parallel = data_parallel_size(spec.runtime.extra_args)
        verdict = schedule_support(method.name, accelerator, advanced=advanced, data_parallel_size=data_parallel)
        if not verdict.honoured:
            problems.append(("spec.speculation.schedule",
                             f"spec.speculation.schedule would not be in force: {verdict.reason} ({verdict.source}): "
                             "remove the schedule or the setting that disables it"))
    tuning = spec.tuning
    k_max = method.k_max_on(accelerator)
    if tuning.min_num_speculative_tokens is not None and tuning.min_num_speculative_tokens > k_max:
        problems.append(("spec.tuning.minNumSpeculativeTokens",
                         f"spec.tuning.minNumSpeculativeTokens must be <= {k_max}, the largest K of method "
                         f"{method.name} on {accelerator}"))
    return problems


def parse_spec(obj: Mapping[str, Any]) -> SpeculativeInferenceSpec:
    """Validate a resource's `spec` (camelCase dict) into typed models, or raise InvalidSpecError."""
    if not isinstance(obj, Mapping):
        raise InvalidSpecError("spec", "spec must be an object")
    try:
        spec = SpeculativeInferenceSpec.model_validate(dict(obj))
    except ValidationError as error:
        raise invalid_spec_error(error, "spec") from None
    problems = semantic_problems(spec)
    if problems:
        raise InvalidSpecError(problems[0][0], problems[0][1], problems)
    return spec


def parse_resource(obj: Mapping[str, Any]) -> SpeculativeInference:
    """Validate a whole resource (apiVersion, kind, metadata, spec, status)."""
    spec = parse_spec(obj.get("spec") or {})
    try:
        resource = SpeculativeInference.model_validate({**obj, "spec": spec})
    except ValidationError as error:
        raise invalid_spec_error(error, "") from None
    return resource

