"""Alerting rules for speculative decoding, as one Prometheus rules file (`groups:`).

`specinfer monitoring` writes it to charts/specinfer/files/prometheus-rules.yaml. That file is
both the plain rules file for a Prometheus without the Prometheus Operator (`rule_files:`) and
the `spec` of the chart's PrometheusRule, so the two cannot differ. tests/unit/promtool/ holds
`promtool test rules` cases for every alert.

The healthy acceptance band: each method's module names its band (`MethodSpec.alert_band`,
runtime/methods/alert_bands.py: the floor and where it comes from), and each band is one rule over
its methods. Token acceptance falls with K (later positions are accepted less often), so a rule on
all positions would fire whenever the tuner raises K; the rule reads positions 0-2 only, the
practitioners' K, from the stat-logger plugin's unbiased per-position counts.
"""

from __future__ import annotations

import yaml

from specinfer.monitoring.panels import DEFAULT_LABELS, Labels
from specinfer.runtime.contract.telemetry import series as si
from specinfer.runtime.contract.telemetry import vllm_metrics as vm
from specinfer.runtime.methods import all_methods
from specinfer.runtime.methods.alert_bands import AlertBand

GROUP = "specinfer"
METHOD_LABEL = "specinfer_io_method"  # the pod label specinfer.io/method (PodMonitor podTargetLabels)
BAND_POSITIONS = "0|1|2"
COLLAPSE_ACCEPTANCE = 0.05  # the tuner's default collapseAcceptance: first-position acceptance
MIN_DRAFTS_PER_SECOND = 1.0  # an idle engine's ratio says nothing
SLOWER_THAN_NONE = 0.98  # predicted speed-up below this: speculation costs more than 2% goodput


def acceptance_bands() -> dict[AlertBand, tuple[str, ...]]:
    """Each alert band the catalogue's methods name, in the order they first appear, with its methods."""
    bands: dict[AlertBand, tuple[str, ...]] = {}
    for method in all_methods():
        if method.alert_band is not None:
            bands[method.alert_band] = (*bands.get(method.alert_band, ()), method.name)
    return bands


def _rule(alert: str, expr: str, hold: str, severity: str, summary: str, description: str, **labels: str) -> dict:
    return {"alert": alert, "expr": expr, "for": hold, "labels": {"severity": severity, **labels},
            "annotations": {"summary": summary, "description": description}}


def _band_rule(band: AlertBand, methods: tuple[str, ...], labels: Labels) -> dict:
    by = f"{labels.namespace}, {labels.resource}, {METHOD_LABEL}"
    selector = f'{{{METHOD_LABEL}=~"{"|".join(methods)}", {si.LABEL_POSITION}=~"{BAND_POSITIONS}"}}'
    accepted = f"sum by ({by}) (rate({si.ACCEPTED_TOKENS_PER_POS.promql}{selector}[15m]))"
    drafted = f"sum by ({by}) (rate({si.DRAFT_TOKENS_PER_POS.promql}{selector}[15m]))"
    expr = f"({accepted}\n  /\n{drafted}) < {band.floor}\nand\n{drafted} > {MIN_DRAFTS_PER_SECOND}"
    resource = f"{{{{ $labels.{labels.namespace} }}}}/{{{{ $labels.{labels.resource} }}}}"
    return _rule(
        "SpecinferAcceptanceBelowHealthyBand", expr, "30m", "warning",
        f"{resource}: draft acceptance {{{{ $value | humanizePercentage }}}} is below the healthy band",
        f"Over the last 15 minutes {{{{ $value | humanizePercentage }}}} of the draft tokens at positions 0-2 of "
        f"{resource} ({{{{ $labels.{METHOD_LABEL} }}}}) were accepted; {band.floor:.0%} is the floor for "
        f"{band.name}-based drafters. Check that the draft matches the target model and its tokenizer, "
        "the workload, and the engine version.",
        drafting=band.name)


def build_rules(labels: Labels = DEFAULT_LABELS) -> dict:
    """The rules file as a dict."""
    by = f"{labels.namespace}, {labels.resource}"
    resource = f"{{{{ $labels.{labels.namespace} }}}}/{{{{ $labels.{labels.resource} }}}}"
    drafts = f"sum by ({by}) (rate({vm.SPEC_DECODE_NUM_DRAFTS.series}[2m]))"
    first = f'sum by ({by}) (rate({vm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS.series}{{{si.LABEL_POSITION}="0"}}[2m]))'
    operator_resource = "{{ $labels.namespace }}/{{ $labels.name }}"
    rules = [_band_rule(band, methods, labels) for band, methods in acceptance_bands().items()]
    rules += [
        _rule("SpecinferAcceptanceCollapsed",
              f"({first}\n  /\n{drafts}) < {COLLAPSE_ACCEPTANCE}\nand\n{drafts} > {MIN_DRAFTS_PER_SECOND}",
              "2m", "critical",
              f"{resource}: draft acceptance collapsed to {{{{ $value | humanizePercentage }}}}",
              f"Almost no first draft token of {resource} is accepted: every draft is wasted work. Typical causes: "
              "a draft whose tokenizer or architecture does not match the target, an attention backend bug after "
              "an upgrade (e.g. EAGLE-3 with ROCM_ATTN). In auto mode the tuner switches speculation off "
              "(TuningDegraded=AcceptanceCollapsed); otherwise set spec.speculation.method: none until fixed."),
        _rule("SpecinferTuningDegraded",
              "max by (namespace, name, reason) (specinfer_operator_tuning_degraded) == 1",
              "10m", "warning",
              f"{operator_resource}: the tuner is degraded ({{{{ $labels.reason }}}})",
              "The tuning loop holds the current configuration and cannot tune this resource: see the "
              "TuningDegraded condition's message (`kubectl describe si`) for the cause and the fix "
              "(Prometheus unreachable or refusing queries, series missing, acceptance collapsed, ...)."),
        _rule("SpecinferRestartBudgetExhausted",
              "max by (namespace, name) (specinfer_operator_tuning_restarts_last_hour)\n"
              "  >= max by (namespace, name) (specinfer_operator_tuning_restart_budget)\n"
              "and\nmax by (namespace, name) (specinfer_operator_tuning_restart_budget) > 0",
              "1m", "warning",
              f"{operator_resource}: the tuner used its whole restart budget",
              "The tuner restarted the pods spec.tuning.maxRestartsPerHour times in the past hour, the restart "
              "kept back for a rollback included: it can neither change nor roll back the configuration until "
              "the hour passes. Repeated changes mean a load or workload that keeps moving; raise "
              "spec.tuning.cooldownSeconds or narrow the K bounds."),
        _rule("SpecinferSpeculationSlowerThanNone",
              f"max by (namespace, name) (specinfer_operator_tuning_predicted_speedup) < {SLOWER_THAN_NONE}",
              "15m", "warning",
              f"{operator_resource}: speculation is slower than none at the current batch sizes",
              "The tuning policy predicts that the configuration in force generates {{ $value | humanizePercentage }} "
              "of the tokens per second that no speculation would at the observed batch sizes. In auto mode the "
              "tuner turns drafting off where it does not pay unless a guard holds it (Tuned condition: cooldown, "
              "restart budget) or spec.tuning.minNumSpeculativeTokens forbids K = 0; in observe mode apply "
              "status.tuning.recommendation."),
    ]
    return {"groups": [{"name": GROUP, "rules": rules}]}


class _Dumper(yaml.SafeDumper):
    """Multi-line PromQL as YAML literal blocks, readable as written."""


_Dumper.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))


def render_rules(labels: Labels = DEFAULT_LABELS) -> str:
    header = ("# Generated by `specinfer monitoring` (src/specinfer/monitoring/alerts.py); do not edit by hand.\n"
              "# A Prometheus rules file (rule_files:) and the spec of the chart's PrometheusRule.\n")
    return header + yaml.dump(build_rules(labels), Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)
