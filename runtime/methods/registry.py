"""The method catalogue: one `MethodSpec` per speculative-decoding method, registered by name.

Follows the registry pattern of vLLM's ReasoningParserManager: each method lives in its own
module (runtime/methods/catalogue/) and registers itself; a duplicate name is a programming
error; an unknown name is answered with the list of known ones, so a typo in a resource explains
itself. A method module is the one room for that method: vLLM name, draft-model rule and its
hint texts, K bounds, what drafts (a model or a lookup), how its cost grows with K, its alert
band, whether method `auto` tries it unasked, each accelerator it supports with its pins, the
`advanced` fields only it takes, its engine facts (what each release's Model Runner V1 does with
its schedule) and its simulator profile. `register` refuses an incomplete or inconsistent one,
naming the field, so nothing downstream (CRD rules, rendering, the simulator, the alert rules,
method auto) meets a gap at run time or infers a fact from another field. The CRD's CEL rules,
`parse_spec`, the operator's rendering, the simulator and `specinfer methods` all read this one
table.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from specinfer.runtime.methods.accelerators import ACCELERATORS, AcceleratorSupport, ModelRunner, get_accelerator
from specinfer.runtime.methods.accelerators.model import read_from
from specinfer.runtime.methods.accelerators.registry import plain_decoding_cells
from specinfer.runtime.methods.advanced import ADVANCED_FIELDS
from specinfer.runtime.methods.alert_bands import AlertBand
from specinfer.runtime.methods.cost_presets import CostShape
from specinfer.runtime.methods.drafter_fit import DrafterFit
from specinfer.runtime.methods.drafting import Drafting, drafting_key
from specinfer.runtime.methods.engines import RELEASES, EngineRelease, ScheduleOnV1, SourceLine
from specinfer.runtime.methods.workloads import SimulatorProfile

if TYPE_CHECKING:
    from specinfer.runtime.methods.config_builder import SpeculationLike

DraftModelRule = Literal["required", "optional", "forbidden"]
# What proposes the drafts: a model's forward passes (an EAGLE head, a draft model, the target's MTP
# layers, a block drafter) or a lookup in tokens already seen (n-gram, suffix tree), which runs no model.
Drafter = Literal["model", "lookup"]


class UnknownMethodError(KeyError):
    """A method name the catalogue does not know."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


@dataclass(frozen=True)
class MethodSpec:
    """What the project knows about one method."""

    name: str                         # spec name, e.g. "draftModel"
    vllm_method: str | None           # SpeculativeConfig.method, None for "none"
    draft_model: DraftModelRule       # whether speculation.draftModel is required/optional/forbidden
    drafter: Drafter | None           # what proposes the drafts (None: the method does not draft)
    cost_shape: CostShape | None      # how a step's draft cost grows with K (None: no drafts); what every
                                      # price of a drafted token or pass reads (cost_presets.py, the tuner)
    k_min: int
    k_max: int
    k_default: int
    summary: str
    simulator: SimulatorProfile       # how runtime/sim plays it (acceptance per workload, draft cost)
    # every accelerator the method is offered on, each declared in the method's module (none is
    # inherited: a new accelerator supports a method once its module says so), with how it runs there
    accelerators: Mapping[str, AcceleratorSupport] = field(default_factory=dict)
    # what admission says about the draft model: for required/optional methods, what to set
    # spec.speculation.draftModel.name to; for forbidden ones, why there is none (for optional
    # ones, when it may go without)
    draft_hint: str | None = None
    no_draft_reason: str | None = None
    # spec.speculation.promptLookup (the n-gram window: vLLM prompt_lookup_min/max) applies
    takes_prompt_lookup: bool = False
    # spec.speculation.mtpModules (the checkpoint's MTP module count: how many layers vLLM reads) applies
    takes_mtp_modules: bool = False
    # Python packages the stock vLLM images lack (the method fails to start without them)
    needs_packages: tuple[str, ...] = ()
    # method-specific `speculation.advanced` fields (advanced.py marks them) this method takes
    advanced_fields: tuple[str, ...] = ()
    # vLLM model runners that can run it: V2 lacks suffix, V1 lacks dspark (tests/contract/ checks both)
    runs_on: tuple[ModelRunner, ...] = ("v2", "v1")
    # engine release label -> its model runners that can run it, where a release differs from runs_on (a
    # platform plugin's own runner: vllm-ascend runs dspark on its Model Runner V1)
    runs_on_by_release: Mapping[str, tuple[ModelRunner, ...]] = field(default_factory=dict)
    # drafting.drafting_key(release, runner) -> what the drafter serving it there does with the per-step K
    # (drafters.py); required for every release and runner an accelerator may run it on
    drafting: Mapping[str, Drafting] = field(default_factory=dict)
    # the same keys -> what the drafter does instead where the target checkpoint has one MTP module and the
    # spec says so (spec.speculation.mtpModules: 1); `drafting` is then the worst case, several modules
    single_module_drafting: Mapping[str, Drafting] = field(default_factory=dict)
    # engine release label -> vLLM method name, where a release spells it differently from vllm_method
    vllm_method_by_release: Mapping[str, str] = field(default_factory=dict)
    # vLLM's Model Runner V2 drafts every position of this method in one pass natively (its own
    # speculator), so advanced.parallel_drafting does not send it to V1 (EngineRelease.v1_only_fields)
    native_parallel_drafting: bool = False
    # engine release label -> what its Model Runner V1 does with a Dynamic SD schedule for this method,
    # with the line it follows; required for every release that may run the method on V1
    schedule_on_v1: Mapping[str, ScheduleOnV1] = field(default_factory=dict)
    # engine release label -> the line where that release's Model Runner V1 refuses the method (a method
    # that runs on V2 only cites it for every release that knows the method): admission quotes it
    v1_refusal: Mapping[str, SourceLine] = field(default_factory=dict)
    # extra SpeculativeConfig keys this method always sets (e.g. defaults we pin)
    fixed_config: Mapping[str, Any] = field(default_factory=dict)
    # how preflight checks a local drafter (or, for MTP, the target itself) against the target's
    # config.json before vLLM loads a weight (drafter_fit.py); None: nothing to check
    drafter_fit: DrafterFit | None = None
    # Said by every method that drafts (registration refuses one that does not say), left None by one
    # that does not:
    # the healthy acceptance band its alert holds it to (alert_bands.py; the chart's alert rules)
    alert_band: AlertBand | None = None
    # method `auto` measures it when a resource lists no candidates: only a method that serves any target
    # from a stock image (no draft weights to match, no extra package) may say True
    auto_candidate: bool | None = None

    @property
    def needs_draft_model(self) -> bool:
        return self.draft_model == "required"

    @property
    def accepts_draft_model(self) -> bool:
        return self.draft_model != "forbidden"

    @property
    def speculates(self) -> bool:
        return self.vllm_method is not None

    def vllm_method_on(self, release: EngineRelease) -> str | None:
        """The SpeculativeConfig.method string in this engine release."""
        if self.vllm_method is None:
            return None
        return self.vllm_method_by_release.get(release.label, self.vllm_method)

    def runs_on_in(self, release: EngineRelease) -> tuple[ModelRunner, ...]:
        """The model runners of `release` that can run this method."""
        return self.runs_on_by_release.get(release.label, self.runs_on)

    def drafting_on(self, release: EngineRelease, runner: ModelRunner, *,
                    mtp_modules: int | None = None) -> Drafting | None:
        """What this method's drafter does with the per-step K on `release`'s `runner` (None: no drafter);
        `mtp_modules`: the target checkpoint's MTP module count where the spec states it (None: unknown)."""
        key = drafting_key(release, runner)
        if mtp_modules == 1 and key in self.single_module_drafting:
            return self.single_module_drafting[key]
        return self.drafting.get(key)

    def schedule_on_v1_in(self, release: EngineRelease) -> ScheduleOnV1 | None:
        """What `release`'s Model Runner V1 does with a Dynamic SD schedule for this method."""
        return self.schedule_on_v1.get(release.label)

    def v1_refusal_in(self, release: EngineRelease) -> tuple[str, SourceLine] | None:
        """vLLM's own message when `release`'s Model Runner V1 refuses this method, and its line."""
        line = self.v1_refusal.get(release.label)
        if line is None:
            return None
        feature = re.search(r'append\((f?)"([^"]+)"\)', line.text)
        return f"Model Runner V1 does not support: {feature.group(2) if feature else line.text}", line

    def supports(self, accelerator: str) -> bool:
        return accelerator in self.accelerators

    def k_max_on(self, accelerator: str) -> int:
        """Largest K this method may use on `accelerator` (capped where the platform caps K)."""
        return get_accelerator(accelerator).cap_k(self.k_max)

    def default_k(self, accelerator: str) -> int:
        return min(self.k_default, self.k_max_on(accelerator))

    def speculative_config(self, speculation: SpeculationLike, accelerator: str) -> dict[str, Any] | None:
        """The exact JSON object for vLLM's `--speculative-config` (None: run without speculation).

        K defaults to the catalogue default (capped for the accelerator). An effective K of 0
        also yields None: vLLM requires num_speculative_tokens > 0, so "off" means no config.
        """
        from specinfer.runtime.methods.config_builder import build_speculative_config

        return build_speculative_config(self, speculation, accelerator)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of `specinfer methods --json`."""
        return {
            "name": self.name,
            "vllm_method": self.vllm_method,
            "needs_draft_model": self.needs_draft_model,
            "draft_model": self.draft_model,
            "drafter": self.drafter,
            "cost_shape": self.cost_shape,
            "k_min": self.k_min,
            "k_max": self.k_max,
            "k_default": self.k_default,
            "summary": self.summary,
            "advanced_fields": list(self.advanced_fields),
            "model_runners": list(self.runs_on),
            "accelerators": {
                name: {**support.to_dict(), "engine": get_accelerator(name).engine.label}
                for name, support in self.accelerators.items()
            },
        }


def method_problems(spec: MethodSpec) -> list[str]:
    """Every reason `spec` is incomplete or contradicts the accelerators and engine facts."""
    found: list[str] = []
    unknown = set(spec.accelerators) - set(ACCELERATORS)
    if unknown:
        found.append(f"names unknown accelerators {sorted(unknown)}; known: {list(ACCELERATORS)}")
    if not spec.k_min <= spec.k_default <= spec.k_max:
        found.append(f"k_default {spec.k_default} outside [{spec.k_min}, {spec.k_max}]")
    if spec.speculates == (spec.k_max == 0):
        found.append("a method with a vLLM method drafts (k_max >= 1); one without does not (k_max 0)")
    if (spec.drafter is None) == spec.speculates or (spec.cost_shape is None) == spec.speculates:
        found.append("a method that drafts names its drafter (model or lookup) and cost_shape; one that does not, "
                     "neither")
    elif spec.speculates and (spec.drafter == "lookup") != (spec.cost_shape == "lookup"):
        found.append(f"a {spec.drafter} drafter cannot have cost_shape {spec.cost_shape}: a lookup costs per drafted "
                     "token (lookup), a model drafter sequential or parallel passes")
    found += _declarations(spec)
    if spec.native_parallel_drafting and spec.cost_shape != "parallel":
        found.append("native_parallel_drafting: vLLM drafts it in one pass, so its cost_shape is parallel")
    if spec.draft_model == "required" and not spec.draft_hint:
        found.append("a method that requires a draft model needs draft_hint (what to set draftModel.name to)")
    if spec.draft_model == "forbidden" and not spec.no_draft_reason:
        found.append("a method that forbids a draft model needs no_draft_reason (why it has none)")
    if spec.draft_model == "optional" and not spec.no_draft_reason:
        found.append("a method whose draft model is optional needs no_draft_reason (when it may go without)")
    if spec.takes_prompt_lookup and spec.drafter != "lookup":
        found.append("takes_prompt_lookup: a prompt-lookup window belongs to a lookup drafter")
    for key in spec.advanced_fields:
        if key not in ADVANCED_FIELDS:
            found.append(f"advanced field {key!r} is not offered (runtime/methods/advanced.py)")
        elif not ADVANCED_FIELDS[key].method_specific:
            found.append(f"advanced field {key!r} applies to every method: do not list it")
    if not spec.runs_on:
        found.append("runs_on names no model runner")
    found += [f"simulator profile: {problem}" for problem in spec.simulator.problems(drafts=spec.speculates)]
    labels = [release.label for release in RELEASES]
    for field_name, by_release in (("vllm_method_by_release", spec.vllm_method_by_release),
                                   ("schedule_on_v1", spec.schedule_on_v1), ("v1_refusal", spec.v1_refusal),
                                   ("runs_on_by_release", spec.runs_on_by_release)):
        found += [f"{field_name} names unknown engine release {label!r}; known: {labels}"
                  for label in by_release if label not in labels]
    if not spec.speculates and (spec.schedule_on_v1 or spec.drafting):
        found.append("a method that does not draft has no schedule and no drafter: leave schedule_on_v1 and drafting "
                     "empty")
    keys = {drafting_key(release, runner) for release in RELEASES for runner in ("v1", "v2")}
    found += [f"drafting names unknown release/runner {key!r}" for key in spec.drafting if key not in keys]
    found += [f"single_module_drafting[{key!r}] has no worst case in drafting[{key!r}]"
              for key in spec.single_module_drafting if key not in spec.drafting]
    for release in RELEASES:
        knows = (vllm_name := spec.vllm_method_on(release)) is not None and release.has_method(vllm_name)
        runs_on = spec.runs_on_in(release)
        if runs_on == ("v2",) and knows and release.label not in spec.v1_refusal and release.plugin is None:
            found.append(f"runs on Model Runner V2 only: cite where {release.label}'s V1 refuses it "
                         f"(v1_refusal[{release.label!r}])")
        if "v1" in runs_on and release.label in spec.v1_refusal:
            found.append(f"v1_refusal[{release.label!r}] is for a method Model Runner V1 refuses: this one runs on "
                         f"{release.label}'s V1")
    for name in spec.accelerators:
        if name not in ACCELERATORS:
            continue
        accelerator = ACCELERATORS[name]
        release = accelerator.engine
        vllm_name = spec.vllm_method_on(release)
        if vllm_name is not None and not release.has_method(vllm_name):
            found.append(f"claims accelerator {name}, whose engine {release.label} has no method {vllm_name!r}")
        evidence = spec.accelerators[name].evidence
        if evidence.kind == "source" and evidence != read_from(release):
            found.append(f"the {name} cell rests on {evidence}, but {name} runs {release.label}: "
                         f"read_from({release.label})")
        runs_on = spec.runs_on_in(release)
        if not set(runs_on) & set(accelerator.model_runners):
            found.append(f"claims accelerator {name}, which runs model runner {'/'.join(accelerator.model_runners)} "
                         f"only, but the method runs on {'/'.join(runs_on)}")
        elif (spec.speculates and "v1" in runs_on and "v1" in accelerator.model_runners
              and spec.schedule_on_v1_in(release) is None):
            found.append(f"claims accelerator {name}, where {release.label} may run it on Model Runner V1: say what "
                         f"that release does with a Dynamic SD schedule for it (schedule_on_v1[{release.label!r}], "
                         "citing the line it follows)")
        if spec.speculates:
            found += [f"claims accelerator {name}, where {release.label} may run it on Model Runner {runner.upper()}: "
                      f"say what its drafter does with the per-step K (drafting[{drafting_key(release, runner)!r}], "
                      "drafters.py)" for runner in accelerator.model_runners
                      if runner in runs_on and spec.drafting_on(release, runner) is None]
    return found


def _declarations(spec: MethodSpec) -> list[str]:
    """What a method must say rather than have inferred from its other fields: its alert band, whether
    `auto` tries it, and -- for the method that does not draft -- that it runs where each accelerator says."""
    found = []
    if spec.speculates:
        if spec.alert_band is None:
            found.append("alert_band: say which healthy acceptance band its alert holds it to "
                         "(runtime/methods/alert_bands.py: MODEL_DRAFTER, LOOKUP_DRAFTER, or a new AlertBand)")
        else:
            found += spec.alert_band.problems()
            found += [f"alert_band {spec.alert_band.name!r} differs from method {other.name}'s band of that name"
                      for other in _REGISTRY.values() if other.alert_band is not None and other.name != spec.name
                      and other.alert_band.name == spec.alert_band.name and other.alert_band != spec.alert_band]
        if spec.auto_candidate is None:
            found.append("auto_candidate: say whether method auto measures it when a resource lists no candidates "
                         "(True only for a method that serves any target from a stock image)")
        elif spec.auto_candidate and (spec.drafter != "lookup" or spec.needs_packages):
            found.append("auto_candidate: method auto tries unasked only a method that serves any target from a "
                         "stock image: a model drafter must match its target, and needs_packages are not in the image")
    else:
        if spec.alert_band is not None or spec.auto_candidate is not None:
            found.append("a method that does not draft has no acceptance to alert on and is no candidate of auto "
                         "(which always measures no speculation): leave alert_band and auto_candidate unset")
        cells = plain_decoding_cells()
        if dict(spec.accelerators) != cells:
            found.append(f"a method that does not draft runs where each accelerator's plain_decoding says it does "
                         f"({sorted(cells)}), with that cell: accelerators=plain_decoding_cells()")
    return found


_REGISTRY: dict[str, MethodSpec] = {}


def register(spec: MethodSpec) -> MethodSpec:
    """Add a method to the catalogue; a duplicate or incomplete method is refused."""
    if spec.name in _REGISTRY:
        raise ValueError(f"method {spec.name!r} is already registered")
    problems = method_problems(spec)
    if problems:
        raise ValueError(f"method {spec.name!r}: " + "; ".join(problems))
    # the accelerators in the registry's order (the CRD enum's), whatever order the module wrote them in
    spec = dataclasses.replace(spec, accelerators={name: spec.accelerators[name] for name in ACCELERATORS
                                                   if name in spec.accelerators})
    _REGISTRY[spec.name] = spec
    return spec


def get_method(name: str) -> MethodSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownMethodError(
            f"unknown speculative-decoding method {name!r}; known methods: {', '.join(_REGISTRY)}"
        ) from None


def all_methods() -> list[MethodSpec]:
    """Every registered method, in registration order (the order of the spec enum)."""
    return list(_REGISTRY.values())


def methods_taking(advanced_field: str) -> tuple[str, ...]:
    """Spec names of the methods a method-specific advanced field applies to."""
    return tuple(method.name for method in _REGISTRY.values() if advanced_field in method.advanced_fields)


def methods_without_drafts() -> tuple[str, ...]:
    """Spec names of the methods that do not draft (speculation off): a schedule, advanced fields or
    automatic tuning have nothing to act on with them."""
    return tuple(method.name for method in _REGISTRY.values() if not method.speculates)


def draft_scale(name: str) -> float:
    """How much heavier than an EAGLE head one draft pass of this method is (simulator profile)."""
    return get_method(name).simulator.draft_scale

