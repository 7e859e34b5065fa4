"""The dashboard's panels as data: title, unit and PromQL, in one place.

The Grafana dashboard (dashboard.py), the picture in the README (picture.py) and the integration
test that evaluates every query against a real Prometheus all read this list, so the three cannot
drift apart. Queries use Grafana's variables: `$namespace`, `$resource` (a regex: several
resources may be selected) and `$__rate_interval`; `resolve()` fills them in for a plain
Prometheus query.

Engine series carry the pod's namespace and resource name under the labels the tuning loop uses
(`tuning.labels` of the operator configuration; the default PodMonitor gives `namespace` and
`specinfer_io_name`); the operator's own per-resource series carry `namespace` and `name`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specinfer.runtime.contract.telemetry import series as si
from specinfer.runtime.contract.telemetry import vllm_metrics as vm


@dataclass(frozen=True)
class Labels:
    """Label names of the engine series (the operator's per-resource series always use namespace/name)."""

    namespace: str = "namespace"
    resource: str = "specinfer_io_name"


DEFAULT_LABELS = Labels()


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    unit: str
    queries: tuple[Query, ...]
    row: str
    kind: str = "timeseries"  # or "statetimeline"
    thresholds: tuple[tuple[float, str], ...] = field(default=())  # (value, colour) lines


OPERATOR = '{namespace="$namespace", name=~"$resource"}'


def _engine(labels: Labels, extra: str = "") -> str:
    return f'{{{labels.namespace}="$namespace", {labels.resource}=~"$resource"{extra}}}'


def _rate(series: str, selector: str, by: str) -> str:
    return f"sum by ({by}) (rate({series}{selector}[$__rate_interval]))"


def panels(labels: Labels = DEFAULT_LABELS) -> tuple[Panel, ...]:
    engine = _engine(labels)
    per_resource = labels.resource
    by_position = f"{per_resource}, {si.LABEL_POSITION}"
    return (
        Panel("Acceptance per draft position",
              "P(draft positions 0..i all accepted | position i drafted), from the stat-logger plugin's per-position "
              "denominators: unbiased under a Dynamic SD schedule. Healthy EAGLE-class drafts run 55-75% over the "
              "first positions.",
              "percentunit",
              (Query(f"{_rate(si.ACCEPTED_TOKENS_PER_POS.promql, engine, by_position)}\n  /\n"
                     f"{_rate(si.DRAFT_TOKENS_PER_POS.promql, engine, by_position)}",
                     f"{{{{{per_resource}}}}} position {{{{{si.LABEL_POSITION}}}}}"),),
              row="Speculation", thresholds=((0.55, "green"),)),
        Panel("Tokens per step",
              "Tokens each request gains per verification step, the bonus token included (vLLM's mean acceptance "
              "length): 1 + accepted / drafts.",
              "none",
              (Query(f"1 + {_rate(vm.SPEC_DECODE_NUM_ACCEPTED_TOKENS.series, engine, per_resource)}\n  /\n"
                     f"{_rate(vm.SPEC_DECODE_NUM_DRAFTS.series, engine, per_resource)}",
                     f"{{{{{per_resource}}}}}"),),
              row="Speculation"),
        Panel("K in force by batch size",
              "Draft length the pods run in each batch-size range of the effective config (a Dynamic SD schedule "
              "gives several ranges; 0: no drafting there).",
              "none",
              (Query(f"max by (name, batch_size) (specinfer_operator_k_in_force{OPERATOR})",
                     "{{name}} batch {{batch_size}}"),),
              row="Speculation"),
        Panel("Goodput",
              "Generated tokens per second, all replicas.",
              "short",
              (Query(_rate(vm.GENERATION_TOKENS.series, engine, per_resource), f"{{{{{per_resource}}}}}"),),
              row="Serving"),
        Panel("p99 per-token latency",
              "99th percentile of vLLM's time per output token (the tuner's latency SLO signal).",
              "s",
              (Query(f"histogram_quantile(0.99, sum by ({per_resource}, le) "
                     f"(rate({vm.REQUEST_TIME_PER_OUTPUT_TOKEN.bucket}{engine}[$__rate_interval])))",
                     f"{{{{{per_resource}}}}} p99"),),
              row="Serving"),
        Panel("Speed-up over no speculation (predicted)",
              "The tuning policy's predicted goodput of the config in force over that of no speculation at the "
              "observed batch sizes. Below 1 speculation slows the engine down (alert "
              "SpecinferSpeculationSlowerThanNone).",
              "none",
              (Query(f"max by (name) (specinfer_operator_tuning_predicted_speedup{OPERATOR})", "{{name}}"),),
              row="Serving", thresholds=((1.0, "red"),)),
        Panel("Tuner changes",
              "Changes the tuner applied in the past hour, by action (auto mode; in observe mode the "
              "recommendation is in status.tuning.recommendation).",
              "short",
              (Query(f"sum by (name, action) (increase(specinfer_operator_tuning_changes_total{OPERATOR}[1h]))",
                     "{{name}} {{action}}"),),
              row="Tuner"),
        Panel("Restarts in the past hour and the budget",
              "Rollouts the tuner triggered in the past hour against spec.tuning.maxRestartsPerHour (ordinary "
              "changes keep one restart back for a rollback).",
              "short",
              (Query(f"max by (name) (specinfer_operator_tuning_restarts_last_hour{OPERATOR})", "{{name}} restarts"),
               Query(f"max by (name) (specinfer_operator_tuning_restart_budget{OPERATOR})", "{{name}} budget")),
              row="Tuner"),
        Panel("TuningDegraded by reason",
              "1 while the TuningDegraded condition is True (Prometheus unreachable, series missing, acceptance "
              "collapsed, ...), by the condition's reason.",
              "none",
              (Query(f"max by (name, reason) (specinfer_operator_tuning_degraded{OPERATOR})", "{{name}} {{reason}}"),),
              row="Tuner", kind="statetimeline"),
        Panel("Cost per million tokens",
              "What the replicas cost per hour over the tokens they generated in it (status.cost; only with prices "
              "in the operator configuration), and what the tuner's last change saves per million tokens.",
              "none",
              (Query(f"max by (name, currency) (specinfer_operator_cost_per_million_tokens{OPERATOR})",
                     "{{name}} ({{currency}})"),
               Query("max by (name, currency) "
                     f"(specinfer_operator_cost_last_change_saving_per_million_tokens{OPERATOR})",
                     "{{name}} last change saves ({{currency}})")),
              row="Cost"),
    )


def resolve(expr: str, *, namespace: str, resource: str, rate_interval: str = "1m") -> str:
    """The query as Prometheus takes it, with Grafana's variables filled in."""
    return (expr.replace("$__rate_interval", rate_interval).replace("$namespace", namespace)
            .replace("$resource", resource))
