"""Admission for `spec.speculation.advanced.enable_adaptive_verification`: offered wherever vLLM runs it.

vLLM 0.33.0 runs adaptive verification for every drafter on Model Runner V2 (runtime/methods/adaptive.py),
so it is offered for every speculative method and refused, with vLLM's own words and line, where vLLM
would refuse it when it starts: on Model Runner V1 (the CPU platform; suffix, and the advanced fields
that send a config to V1, on GPUs), with use_local_argmax_reduction (but for DSpark), and with the
`vllm serve` flags it conflicts with in spec.runtime.extraArgs (no full CUDA graphs, LoRA, pipeline
parallelism, routed-experts capture, sampling distribution replay). vllm-ascend 0.26.0rc1's vLLM has no
such field: catalogue_rules.engine_release_rules refuses it there. A flag spelled another way (an
abbreviation, a config file) or a CUDA-graph mode set through --compilation-config is not seen here:
vLLM refuses it at start, and the pod's termination message says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from specinfer.api.base import Rule
from specinfer.api.catalogue_rules import _cel_list, _engines, _names, _on
from specinfer.runtime.methods import ACCELERATORS, all_methods
from specinfer.runtime.methods.adaptive import CONFLICTS, LOCAL_ARGMAX, LOCAL_ARGMAX_EXEMPT, Conflict
from specinfer.runtime.methods.engines import VLLM_0_33_0

if TYPE_CHECKING:
    from specinfer.api.spec import SpeculativeInferenceSpec

KEY = "enable_adaptive_verification"
FIELD = f"spec.speculation.advanced.{KEY}"
ON = (f"has(self.speculation.advanced) && has(self.speculation.advanced.{KEY}) && "
      f"self.speculation.advanced.{KEY}")
V1_REFUSAL = "Model Runner V1 does not support: adaptive draft verification"
SpecCheck = Callable[["SpeculativeInferenceSpec"], bool]


def adaptive_on(spec: SpeculativeInferenceSpec) -> bool:
    advanced = spec.speculation.advanced
    return bool(advanced is not None and getattr(advanced, KEY))


def _holds(refused: Callable[[SpeculativeInferenceSpec], bool]) -> SpecCheck:
    return lambda s: not adaptive_on(s) or not refused(s)


def _offered_where() -> list[str]:
    """The accelerators whose engine runs it (Model Runner V2 by default, the field in their release)."""
    return [name for name, a in ACCELERATORS.items() if a.engine.has_field(KEY) and "v2" in a.model_runners]


def v1_platform_rules() -> list[Rule]:
    """A platform whose engine runs Model Runner V1 only (the CPU) refuses it."""
    rules = []
    for name, accelerator in ACCELERATORS.items():
        release = accelerator.engine
        if not release.has_field(KEY) or "v2" in accelerator.model_runners or release.v1_refuses_adaptive is None:
            continue
        rules.append(Rule(
            cel=f"!({ON}) || self.hardware.accelerator != '{name}'",
            message=f"{FIELD} cannot be used on spec.hardware.accelerator {name}: {release.label} runs Model Runner "
            f'V1 there, which refuses it ("{V1_REFUSAL}", {release.v1_refuses_adaptive}): remove it, or run on '
            f"accelerator {_engines(_offered_where())}",
            check=_holds(lambda s, name=name: s.hardware.accelerator == name),  # type: ignore[misc]
            field=f"speculation.advanced.{KEY}",
        ))
    return rules


def v1_method_rules() -> list[Rule]:
    """A method the accelerator's engine runs on Model Runner V1 only (suffix on GPUs) refuses it."""
    rules = []
    offered = _offered_where()
    for method in all_methods():
        if not method.speculates:
            continue
        on = [name for name in offered if method.supports(name)
              and "v2" not in method.runs_on_in(ACCELERATORS[name].engine)]
        if not on:
            continue
        line = ACCELERATORS[on[0]].engine.v1_refuses_adaptive
        rules.append(Rule(
            cel=f"!({ON}) || self.speculation.method != '{method.name}' || !({_on(on)})",
            message=f"{FIELD} cannot be used with method {method.name} on spec.hardware.accelerator {_names(on)}: "
            f'vLLM runs {method.name} on Model Runner V1, which refuses it ("{V1_REFUSAL}", {line}): remove it',
            check=_holds(lambda s, m=method.name, o=tuple(on): s.speculation.method == m  # type: ignore[misc]
                         and s.hardware.accelerator in o),
            field=f"speculation.advanced.{KEY}",
        ))
    return rules


def v1_field_rules() -> list[Rule]:
    """An advanced field that sends the config to Model Runner V1 (V2 lacks it) refuses it."""
    rules = []
    offered = _offered_where()
    natively = [m.name for m in all_methods() if m.native_parallel_drafting]
    for key, source in VLLM_0_33_0.v1_only_fields.items():
        on = [name for name in offered if ACCELERATORS[name].engine is VLLM_0_33_0]
        exempt = natively if key == "parallel_drafting" else []
        spared = f" || self.speculation.method in {_cel_list(exempt)}" if exempt else ""
        rules.append(Rule(
            cel=f"!({ON}) || !has(self.speculation.advanced.{key}) || !self.speculation.advanced.{key}{spared} "
            f"|| !({_on(on)})",
            message=f"{FIELD} cannot be used with spec.speculation.advanced.{key}: it sends the config to Model "
            f"Runner V1 ({source}), which refuses adaptive verification "
            f'("{V1_REFUSAL}", {VLLM_0_33_0.v1_refuses_adaptive}): remove one of them',
            check=_holds(lambda s, k=key, e=tuple(exempt), o=tuple(on): bool(  # type: ignore[misc]
                getattr(s.speculation.advanced, k)) and s.speculation.method not in e and s.hardware.accelerator in o),
            field=f"speculation.advanced.{KEY}",
        ))
    return rules


def local_argmax_rule() -> Rule:
    exempt = list(LOCAL_ARGMAX_EXEMPT)
    return Rule(
        cel=f"!({ON}) || !has(self.speculation.advanced.use_local_argmax_reduction) || "
        f"!self.speculation.advanced.use_local_argmax_reduction || self.speculation.method in {_cel_list(exempt)}",
        message=f"{FIELD} cannot be used with spec.speculation.advanced.use_local_argmax_reduction but for method "
        f'{_names(exempt)}: vLLM refuses it, "{LOCAL_ARGMAX.reason}" ({LOCAL_ARGMAX.source}): remove one of them',
        check=_holds(lambda s: bool(s.speculation.advanced.use_local_argmax_reduction)  # type: ignore[union-attr]
                     and s.speculation.method not in exempt),
        field=f"speculation.advanced.{KEY}",
    )


def _cel_flag(conflict: Conflict) -> str:
    """CEL over one extraArgs item `a`: it sets the conflicting flag (one item: `--flag`, `--flag=true`, or a
    number above 1 after `=`)."""
    parts = []
    for flag in conflict.flags:
        if conflict.needs_value_above_one:
            parts.append(f"(a.startsWith('{flag}=') && a != '{flag}=1')")
        else:
            parts.append(f"a == '{flag}' || a == '{flag}=true' || a == '{flag}=True'")
    return " || ".join(parts)


def conflicting_flag(conflict: Conflict, args: Sequence[str]) -> bool:
    """Python twin of `_cel_flag` over the whole list, which also reads a number in the next item."""
    for index, arg in enumerate(args):
        for flag in conflict.flags:
            if not conflict.needs_value_above_one:
                if arg in (flag, f"{flag}=true", f"{flag}=True"):
                    return True
                continue
            if arg.startswith(f"{flag}=") and arg != f"{flag}=1":
                return True
            if arg == flag and index + 1 < len(args) and args[index + 1] != "1":
                return True
    return False


def flag_rules() -> list[Rule]:
    """The `vllm serve` flags in spec.runtime.extraArgs vLLM 0.33.0 refuses it with."""
    on = [name for name in _offered_where() if ACCELERATORS[name].engine is VLLM_0_33_0]
    rules = []
    for conflict in CONFLICTS:
        rules.append(Rule(
            cel=f"!({ON}) || !has(self.runtime.extraArgs) || !({_on(on)}) || "
            f"!self.runtime.extraArgs.exists(a, {_cel_flag(conflict)})",
            message=f"{FIELD} cannot be used with {conflict.setting} in spec.runtime.extraArgs: vLLM refuses it, "
            f'"{conflict.reason}" ({conflict.source}): remove one of them',
            check=_holds(lambda s, c=conflict, o=tuple(on): s.hardware.accelerator in o  # type: ignore[misc]
                         and conflicting_flag(c, s.runtime.extra_args or [])),
            field="runtime.extraArgs",
        ))
    return rules


def adaptive_verification_rules() -> list[Rule]:
    """Every place vLLM refuses adaptive verification, as admission rules (spec level)."""
    return [*v1_platform_rules(), *v1_method_rules(), *v1_field_rules(), local_argmax_rule(), *flag_rules()]
