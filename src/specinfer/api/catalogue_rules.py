"""CEL + Python rules generated from the catalogue, so admission follows it.

Every fact comes from runtime/methods/: draft-model rules and their hints from each method's
module, K caps from each accelerator's `max_k`, what an engine release lacks from
runtime/methods/engines.py, and what vLLM would drop or refuse from
runtime/methods/engine_truth.py. Adding a method, an accelerator or an engine difference changes
these rules and therefore the generated CRD; tests/unit/test_api_crd.py fails until crds/ is
regenerated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from specinfer.api.base import Rule
from specinfer.runtime.methods import (
    ACCELERATORS,
    MethodSpec,
    all_methods,
    methods_without_drafts,
)
from specinfer.runtime.methods.advanced import ADVANCED_FIELDS
from specinfer.runtime.methods.engine_truth import mtp_k_accepted, schedule_support, why_not_offered
from specinfer.runtime.methods.engines import RELEASES, EngineRelease

if TYPE_CHECKING:  # the models import these rules
    from specinfer.api.spec import SpeculativeInferenceSpec
    from specinfer.api.speculation import FixedSpeculation

# The Python twins of the CEL rules below, one factory per kind of rule (a loop's values bound as arguments).
SpeculationCheck = Callable[["FixedSpeculation"], bool]
SpecCheck = Callable[["SpeculativeInferenceSpec"], bool]


def _draft_model_set_as(method: str, required: bool) -> SpeculationCheck:
    return lambda s: s.method != method or (s.draft_model is not None) is required


def _k_within(method: str, low: int, high: int) -> SpeculationCheck:
    return lambda s: s.method != method or s.num_speculative_tokens is None or low <= s.num_speculative_tokens <= high


def _method_not_on(method: str, accelerators: tuple[str, ...]) -> SpecCheck:
    return lambda s: s.speculation.method != method or s.hardware.accelerator not in accelerators


def _capped_on(accelerator: str, section: str, field: str, cap: int) -> SpecCheck:
    def check(s: SpeculativeInferenceSpec) -> bool:
        value = getattr(getattr(s, section), field)
        return s.hardware.accelerator != accelerator or value is None or value <= cap

    return check


def _max_k_within(method: str, high: int) -> SpecCheck:
    return lambda s: s.speculation.method != method or s.tuning.max_num_speculative_tokens is None \
        or s.tuning.max_num_speculative_tokens <= high


def _advanced_unset_on(accelerators: tuple[str, ...], key: str) -> SpecCheck:
    return lambda s: s.hardware.accelerator not in accelerators or s.speculation.advanced is None \
        or getattr(s.speculation.advanced, key) is None


def _advanced_not_on(accelerators: tuple[str, ...], key: str, value: str) -> SpecCheck:
    return lambda s: s.hardware.accelerator not in accelerators or s.speculation.advanced is None \
        or getattr(s.speculation.advanced, key) != value


def _no_schedule_on(method: str, accelerators: tuple[str, ...]) -> SpecCheck:
    return lambda s: s.speculation.method != method or s.speculation.schedule is None \
        or s.hardware.accelerator not in accelerators


def _cel_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(f"'{value}'" for value in values) + "]"


def _names(values: Sequence[str]) -> str:
    """'a', 'a or b', 'a, b or c'."""
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"


def cel_method_is(names: Sequence[str], field: str = "self.method") -> str:
    """CEL: the method at `field` is one of `names` (a method's property, named from the catalogue)."""
    return f"{field} == '{names[0]}'" if len(names) == 1 else f"{field} in {_cel_list(names)}"


def cel_method_is_not(names: Sequence[str], field: str = "self.method") -> str:
    return f"{field} != '{names[0]}'" if len(names) == 1 else f"!({field} in {_cel_list(names)})"


def only_with_drafts_rule(key: str) -> Rule:
    """spec.speculation.<key> (a schedule, advanced fields) has no effect with a method that does not draft."""
    silent = methods_without_drafts()
    return Rule(
        cel=f"!has(self.{key}) || {cel_method_is_not(silent)}",
        message=f"spec.speculation.{key} has no effect with method {_names(silent)}: remove it or choose a "
        "speculative method",
        check=lambda s: getattr(s, key) is None or s.method not in silent,  # names, as CEL: `auto` passes
        field=key,
    )


def mtp_modules_rules() -> list[Rule]:
    """spec.speculation.mtpModules: the MTP methods only, and vLLM's rule for a K above the module count."""
    takers = [method.name for method in all_methods() if method.takes_mtp_modules]
    return [
        Rule(
            cel=f"!has(self.mtpModules) || {cel_method_is(takers)}",
            message=f"spec.speculation.mtpModules is the target checkpoint's MTP module count: it applies only to "
            f"method {_names(takers)}; remove it",
            check=lambda s: s.mtp_modules is None or s.method in takers,
            field="mtpModules",
        ),
        Rule(
            cel="!has(self.mtpModules) || !has(self.numSpeculativeTokens) || "
            "self.numSpeculativeTokens <= self.mtpModules || self.numSpeculativeTokens % self.mtpModules == 0",
            message="spec.speculation.numSpeculativeTokens above spec.speculation.mtpModules must be a multiple of "
            "it: vLLM reuses the MTP modules in turn and refuses any other K when it starts (\"must be divisible "
            "by n_predict\"); lower it to the module count or raise it to a multiple",
            check=lambda s: mtp_k_accepted(s.num_speculative_tokens or 1, s.mtp_modules),
            field="numSpeculativeTokens",
        ),
    ]


def prompt_lookup_rule() -> Rule:
    """spec.speculation.promptLookup applies to the methods whose modules take it."""
    takers = [method.name for method in all_methods() if method.takes_prompt_lookup]
    return Rule(
        cel=f"!has(self.promptLookup) || {cel_method_is(takers)}",
        message=f"spec.speculation.promptLookup applies only to method {_names(takers)}: remove it",
        check=lambda s: s.prompt_lookup is None or s.method in takers,
        field="promptLookup",
    )


def _on(accelerators: Sequence[str]) -> str:
    """CEL: the spec's accelerator is one of these."""
    if len(accelerators) == 1:
        return f"self.hardware.accelerator == '{accelerators[0]}'"
    return f"self.hardware.accelerator in {_cel_list(accelerators)}"


def _running(release: EngineRelease) -> list[str]:
    return [name for name, accelerator in ACCELERATORS.items() if accelerator.engine == release]


def _engines(accelerators: Iterable[str]) -> str:
    """'nvidia, amd or ascend (vllm 0.33.0)' grouped by release."""
    groups: dict[str, list[str]] = {}
    for name in accelerators:
        groups.setdefault(ACCELERATORS[name].engine.label, []).append(name)
    return "; ".join(f"{_names(names)} ({label})" for label, names in groups.items())


def _all_of(values: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} and {values[-1]}"


def draft_model_description() -> str:
    """spec.speculation.draftModel's description: which methods require, allow or refuse a draft model."""
    clauses = []
    for rule, words in (("required", "Required for"), ("optional", "optional for"), ("forbidden", "not allowed for")):
        methods = [m for m in all_methods() if m.draft_model == rule]
        if methods:
            names = [f"{m.name} ({m.no_draft_reason})" if rule == "optional" else m.name for m in methods]
            clauses.append(f"{words} {_all_of(names)}")
    return "Draft weights. " + "; ".join(clauses) + "."


def draft_model_rules() -> list[Rule]:
    rules = []
    for method in all_methods():
        name = method.name
        if method.draft_model == "required":
            rules.append(Rule(
                cel=f"self.method != '{name}' || has(self.draftModel)",
                message=f"spec.speculation.draftModel is required for method {name}: "
                f"set spec.speculation.draftModel.name to {method.draft_hint}",
                check=_draft_model_set_as(name, required=True),
                field="draftModel",
            ))
        elif method.draft_model == "forbidden":
            rules.append(Rule(
                cel=f"self.method != '{name}' || !has(self.draftModel)",
                message=f"spec.speculation.draftModel must not be set for method {name} "
                f"({method.no_draft_reason}): remove spec.speculation.draftModel",
                check=_draft_model_set_as(name, required=False),
                field="draftModel",
            ))
    return rules


def num_speculative_tokens_rules() -> list[Rule]:
    rules = []
    for method in all_methods():
        name, low, high = method.name, method.k_min, method.k_max
        if high == 0:
            message = (f"spec.speculation.numSpeculativeTokens must be 0 or unset for method {name}: "
                       "choose a speculative method to draft tokens")
        else:
            message = (f"spec.speculation.numSpeculativeTokens must be between {low} and {high} for method {name}: "
                       f"omit it to use the default {method.k_default}")
        rules.append(Rule(
            cel=f"self.method != '{name}' || !has(self.numSpeculativeTokens) || "
            f"(self.numSpeculativeTokens >= {low} && self.numSpeculativeTokens <= {high})",
            message=message,
            check=_k_within(name, low, high),
            field="numSpeculativeTokens",
        ))
    return rules


def advanced_key_rules() -> list[Rule]:
    from specinfer.api.advanced import method_restriction_rules

    return [only_with_drafts_rule("advanced"), *method_restriction_rules()]


def _fly_source() -> str:
    cited = [f"{release.label}: {release.fly_needs_two_tokens}" for release in RELEASES if release.fly_needs_two_tokens]
    return "; ".join(cited)


def fly_rules() -> list[Rule]:
    """FLy verification bounds on an explicit K (parse_spec checks the default K too)."""
    fly = ("has(self.advanced) && has(self.advanced.rejection_sample_method) && "
           "self.advanced.rejection_sample_method == 'fly'")
    return [
        Rule(
            cel=f"!({fly}) || !has(self.numSpeculativeTokens) || self.numSpeculativeTokens >= 2",
            message="spec.speculation.advanced.rejection_sample_method fly needs spec.speculation.numSpeculativeTokens "
            f">= 2 (vLLM refuses FLy with one draft token, {_fly_source()}): raise numSpeculativeTokens or choose "
            "another rejection_sample_method",
            check=lambda s: s.advanced is None or s.advanced.rejection_sample_method != "fly"
            or s.num_speculative_tokens is None or s.num_speculative_tokens >= 2,
            field="advanced.rejection_sample_method",
        ),
        Rule(
            cel=f"!({fly}) || !has(self.advanced.fly_window_size) || !has(self.numSpeculativeTokens) || "
            "self.advanced.fly_window_size < self.numSpeculativeTokens",
            message="spec.speculation.advanced.fly_window_size must be smaller than "
            "spec.speculation.numSpeculativeTokens (vLLM refuses a FLy window of K or more): lower fly_window_size "
            "or raise numSpeculativeTokens",
            check=lambda s: s.advanced is None or s.advanced.rejection_sample_method != "fly"
            or s.advanced.fly_window_size is None or s.num_speculative_tokens is None
            or s.advanced.fly_window_size < s.num_speculative_tokens,
            field="advanced.fly_window_size",
        ),
    ]


def _not_offered() -> list[tuple[MethodSpec, list[str], str]]:
    """Each method some accelerator does not run: those accelerators, and why (from the engine's facts)."""
    found = []
    for method in all_methods():
        unsupported = [name for name in ACCELERATORS if not method.supports(name)]
        if unsupported:
            why = "; ".join(f"{name}: {why_not_offered(method, ACCELERATORS[name])}" for name in unsupported)
            found.append((method, unsupported, why))
    return found


def method_support_rules() -> list[Rule]:
    rules = []
    for method, unsupported, why in _not_offered():
        supported = ", ".join(name for name in ACCELERATORS if method.supports(name))
        rules.append(Rule(
            cel=f"self.speculation.method != '{method.name}' || !({_on(unsupported)})",
            message=f"spec.speculation.method {method.name} is not supported on spec.hardware.accelerator "
            f"{_names(unsupported)} ({why}): choose accelerator {supported} or another method "
            "(specinfer methods lists them)",
            check=_method_not_on(method.name, tuple(unsupported)),
            field="hardware.accelerator",
        ))
    return rules


def _no_candidate_of(method: str, accelerators: tuple[str, ...]) -> SpecCheck:
    return lambda s: s.speculation.candidates is None or s.hardware.accelerator not in accelerators \
        or all(c.method != method for c in s.speculation.candidates)


def candidate_support_rules() -> list[Rule]:
    """`method: auto` may only choose between methods the accelerator runs: each candidate is refused by name."""
    rules = []
    for method, unsupported, why in _not_offered():
        rules.append(Rule(
            cel=f"!has(self.speculation.candidates) || !({_on(unsupported)}) || "
            f"self.speculation.candidates.all(c, c.method != '{method.name}')",
            message=f"spec.speculation.candidates: method {method.name} is not supported on spec.hardware.accelerator "
            f"{_names(unsupported)} ({why}): remove that candidate (specinfer methods lists what runs where)",
            check=_no_candidate_of(method.name, tuple(unsupported)),
            field="speculation.candidates",
        ))
    return rules


def k_cap_rules() -> list[Rule]:
    """Every accelerator that caps K (its `max_k`) caps the spec's K and the tuner's maximum."""
    rules = []
    for accelerator in ACCELERATORS.values():
        cap, name = accelerator.max_k, accelerator.name
        if cap is None:
            continue
        for path, (section, field), cel_path in (
            ("spec.speculation.numSpeculativeTokens", ("speculation", "num_speculative_tokens"),
             "self.speculation.numSpeculativeTokens"),
            ("spec.tuning.maxNumSpeculativeTokens", ("tuning", "max_num_speculative_tokens"),
             "self.tuning.maxNumSpeculativeTokens"),
        ):
            has = cel_path.rsplit(".", 1)
            rules.append(Rule(
                cel=f"self.hardware.accelerator != '{name}' || !has({has[0]}.{has[1]}) || {cel_path} <= {cap}",
                message=f"{path} must be at most {cap} on spec.hardware.accelerator {name} "
                f"({accelerator.max_k_reason}): lower it",
                check=_capped_on(name, section, field, cap),
                field=path.removeprefix("spec."),
            ))
    return rules


def tuning_bound_rules() -> list[Rule]:
    rules = []
    for method in all_methods():
        if method.k_max == 0:
            continue
        rules.append(Rule(
            cel=f"self.speculation.method != '{method.name}' || !has(self.tuning.maxNumSpeculativeTokens) || "
            f"self.tuning.maxNumSpeculativeTokens <= {method.k_max}",
            message=f"spec.tuning.maxNumSpeculativeTokens must be at most {method.k_max} for method {method.name}: "
            "lower it",
            check=_max_k_within(method.name, method.k_max),
            field="tuning.maxNumSpeculativeTokens",
        ))
    return rules


def engine_release_rules() -> list[Rule]:
    """An `advanced` field or value that an accelerator's engine release lacks is refused there, naming
    the release, instead of crashing the engine at start."""
    rules = []
    for release in RELEASES:
        on = _running(release)
        if not on:
            continue
        for key in sorted(release.absent_fields & set(ADVANCED_FIELDS)):
            elsewhere = [name for name, a in ACCELERATORS.items() if a.engine.has_field(key)
                         and (not ADVANCED_FIELDS[key].needs_v2 or "v2" in a.model_runners)]
            fix = f"remove it, or run on accelerator {_engines(elsewhere)}" if elsewhere else "remove it"
            rules.append(Rule(
                cel=f"!({_on(on)}) || !has(self.speculation.advanced) || !has(self.speculation.advanced.{key})",
                message=f"spec.speculation.advanced.{key} is not a field of {release.label}, the engine of "
                f"spec.hardware.accelerator {_names(on)}: {fix}",
                check=_advanced_unset_on(tuple(on), key),
                field=f"speculation.advanced.{key}",
            ))
        for key, values in sorted(release.absent_choices.items()):
            for value in sorted(values):
                elsewhere = [name for name, a in ACCELERATORS.items() if value not in a.engine.absent_values(key)]
                fix = (f"choose another {key}, or run on accelerator {_engines(elsewhere)}" if elsewhere
                       else f"choose another {key}")
                rules.append(Rule(
                    cel=f"!({_on(on)}) || !has(self.speculation.advanced) || "
                    f"!has(self.speculation.advanced.{key}) || self.speculation.advanced.{key} != '{value}'",
                    message=f"spec.speculation.advanced.{key} {value} is not in {release.label}, the engine of "
                    f"spec.hardware.accelerator {_names(on)}: {fix}",
                    check=_advanced_not_on(tuple(on), key, value),
                    field=f"speculation.advanced.{key}",
                ))
    return rules


def refused_value_rules() -> list[Rule]:
    """Values an accelerator's engine accepts in its config but cannot run (e.g. synthetic acceptance on CPU)."""
    rules = []
    for accelerator in ACCELERATORS.values():
        for refused in accelerator.refused_values:
            key, value, name = refused.field, refused.value, accelerator.name
            rules.append(Rule(
                cel=f"self.hardware.accelerator != '{name}' || !has(self.speculation.advanced) || "
                f"!has(self.speculation.advanced.{key}) || self.speculation.advanced.{key} != '{value}'",
                message=f"spec.speculation.advanced.{key} {value} cannot run on spec.hardware.accelerator {name}: "
                f"{refused.reason} ({accelerator.engine.label}, {refused.source}): choose another {key}",
                check=_advanced_not_on((name,), key, value),
                field=f"speculation.advanced.{key}",
            ))
    return rules


def schedule_rules() -> list[Rule]:
    """A schedule vLLM would drop (or crash on) for this method on this accelerator is refused."""
    rules = []
    for method in all_methods():
        if not method.speculates:
            continue  # SCHEDULE_RULES refuse a schedule with method none
        verdicts = {name: schedule_support(method.name, name) for name in method.accelerators}
        refused = [name for name, verdict in verdicts.items() if not verdict.honoured]
        if not refused:
            continue
        effects = list(dict.fromkeys(
            f"{ACCELERATORS[name].engine.label} {verdicts[name].effect}, {verdicts[name].source}" for name in refused))
        runners = {verdicts[name].model_runner.upper() for name in refused}
        where = "" if set(refused) == set(ACCELERATORS) else f" || !({_on(refused)})"
        rules.append(Rule(
            cel=f"self.speculation.method != '{method.name}' || !has(self.speculation.schedule){where}",
            message=f"spec.speculation.schedule cannot be used with method {method.name} on spec.hardware.accelerator "
            f"{_names(refused)}: {method.name} runs on vLLM's Model Runner {'/'.join(sorted(runners))}, whose "
            f"{method.name} drafter cannot follow a schedule ({'; '.join(effects)}): remove the schedule "
            "(numSpeculativeTokens alone is in force) or choose a method whose drafter follows it",
            check=_no_schedule_on(method.name, tuple(refused)),
            field="speculation.schedule",
        ))
    return rules


def accelerator_rules() -> list[Rule]:
    """Spec-level rules: method x accelerator support, K caps, engine releases, engine truth."""
    return [
        *method_support_rules(),
        *candidate_support_rules(),
        *k_cap_rules(),
        *tuning_bound_rules(),
        *engine_release_rules(),
        *refused_value_rules(),
        *schedule_rules(),
    ]
