"""The tuning loop: every tick, one query set per Prometheus for all due resources -> observe ->
decide -> record in status (and, in auto mode, status.tuning.applied, which the reconciler
renders from and rolls out one pod at a time).

It never writes spec or metadata: only the status subresource, by server-side apply with
its own field manager (`specinfer-tuner`), so Argo CD / Flux see no drift. When Prometheus is
unreachable, a query fails or a resource's series are missing, it holds the current config
and says why in TuningDegraded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specinfer.api import API_VERSION, KIND
from specinfer.api.timestamps import parse_rfc3339
from specinfer.operator.plumbing import metrics
from specinfer.operator.plumbing.kube import server_side_apply
from specinfer.operator.plumbing.secrets import read_opted_in_secret
from specinfer.operator.pure.access import AUTH_NOT_ALLOWED, PrometheusAccess, Refusal
from specinfer.operator.pure.config import CostConfig
from specinfer.operator.render.labels import PROMETHEUS_AUTH_LABEL
from specinfer.operator.tuner import prometheus as prom
from specinfer.operator.tuner.policy import PolicyState, decide, guards
from specinfer.operator.tuner.pure.calibrated import forget_step_cost, same_prior
from specinfer.operator.tuner.pure.exports import cost_of, resource_export, with_cost
from specinfer.operator.tuner.pure.in_force import live_in_force, not_in_force
from specinfer.operator.tuner.pure.observe import Samples, Target, index_results, observe
from specinfer.operator.tuner.pure.queries import build_queries
from specinfer.operator.tuner.pure.record import Tick, off_status, same_hold, tick_status
from specinfer.operator.tuner.pure.settings import TunerSettings
from specinfer.operator.tuner.pure.target import (
    ResourceTarget,
    TargetError,
    applied_problem,
    calibrated_tuning_input,
    observed_applied,
    read_target,
    rollout_in_progress,
    switched_method,
    tuning_input,
    with_engine_envelope,
)
from specinfer.operator.tuner.recording import append_record, tick_record

log = logging.getLogger("specinfer.operator.tuner")
FIELD_MANAGER = "specinfer-tuner"
# The policy's holds on data it cannot trust: like Prometheus being away, they repeat every tick until
# the data recover, so a status that already says so is not rewritten (no churn, no flapping).
DATA_FAULTS = (guards.INVALID_DATA, guards.STALE_DATA)
# policy-state fields that record a change; in observe mode nothing was applied, so they are not advanced
CHANGE_BOOKKEEPING = ("pending", "changes", "last_change_at", "collapsed_at", "collapsed_config", "rejected",
                      "confirmations", "switched", "probed", "probe_from")


@dataclass
class TickReport:
    """What one tick did (tests and the queries-per-tick benchmark read it)."""

    resources: int = 0
    queries: int = 0
    sources: int = 0
    actions: dict[str, str] = field(default_factory=dict)  # "ns/name" -> action
    failures: list[str] = field(default_factory=list)


def stored_state(target: ResourceTarget) -> PolicyState | None:
    """The policy state kept in status.tuning.policyState; unreadable starts afresh (guards make a
    fresh state cautious)."""
    text = target.tuning_status.policy_state
    if not text:
        return None
    try:
        return PolicyState.from_json(json.loads(text))
    except ValueError:
        return None


def observe_mode_state(previous: PolicyState | None, new: PolicyState) -> PolicyState:
    """Observe mode applies nothing: keep what the policy learnt, not its record of a change."""
    base = previous or PolicyState()
    return new.model_copy(update={key: getattr(base, key) for key in CHANGE_BOOKKEEPING})


class TuningLoop:
    def __init__(self, *, kube: Any, resources: Callable[[], Iterable[Mapping[str, Any]]],
                 settings: TunerSettings, default_url: str | None,
                 on_written: Callable[[dict[str, Any]], None] | None = None,
                 events: Any = None, clock: Callable[[], float] = time.time,
                 active: Callable[[], bool] = lambda: True, access: PrometheusAccess | None = None,
                 prices: CostConfig | None = None) -> None:
        self.kube = kube
        self.resources = resources
        self.settings = settings
        self.default_url = default_url
        self.access = access or PrometheusAccess(default_url=default_url)  # allowlist and Secret policy
        self.on_written = on_written
        self.events = events
        self.clock = clock
        self.active = active  # False while another operator replica is active (peering standby)
        self.prices = prices or CostConfig()  # operator configuration `cost`: status.cost when a price applies
        self._acting = True   # last state logged by tick
        self.last_run: dict[tuple[str, str], float] = {}
        self.queries = build_queries(settings.labels.mapping(), settings.window_seconds)

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the loop must outlive any one bad tick
                metrics.record_error("tuning", type(error).__name__)
                log.exception("tuning tick failed: %s", error)
            await asyncio.sleep(self.settings.tick_seconds)

    # ---- one tick ------------------------------------------------------------------------
    def _due(self, target: ResourceTarget, now: float) -> bool:
        last = self.last_run.get(target.key)
        if last is None:
            decided = target.tuning_status.last_decision
            last = parse_rfc3339(decided.time) if decided and target.tuning_status.mode == target.mode else None
        # due times sit on a grid of the interval, so resources sharing an interval share a tick (and its queries)
        return last is None or int(now // target.interval_seconds) > int(last // target.interval_seconds)

    async def tick(self) -> TickReport:
        now = self.clock()
        report = TickReport()
        # a standby replica's cache is stale: deciding from it would fight the active replica's tuner
        if not self.active():
            if self._acting:
                log.info("standby: not tuning while another replica is active")
                self._acting = False
                metrics.keep_resources(set())  # issue 17: the active replica's series are the true ones
            return report
        if not self._acting:
            log.info("active again: tuning")
            self._acting = True
        groups: dict[tuple[str | None, Any], list[tuple[ResourceTarget, Mapping[str, Any]]]] = defaultdict(list)
        counts: dict[str, int] = defaultdict(int)
        present: set[tuple[str, str]] = set()
        tuned: set[tuple[str, str]] = set()
        for resource in list(self.resources()):
            if (resource.get("metadata") or {}).get("deletionTimestamp"):
                continue
            target = read_target(resource)
            present.add(target.key)
            counts[target.mode] += 1
            if target.mode == "off":
                cleared = off_status(target, now)
                if cleared is not None:
                    await self._apply(target, cleared.to_json())
                continue
            tuned.add(target.key)
            if (target.spec is not None and target.spec.tuning.paused) or not self._due(target, now):
                continue
            prometheus_ref = target.spec.tuning.prometheus if target.spec is not None else None
            url = (prometheus_ref.url if prometheus_ref and prometheus_ref.url else None) or self.default_url
            secret = prometheus_ref.auth_secret_ref if prometheus_ref else None
            secret_key = (target.namespace, secret.name, secret.key) if secret else None
            groups[(url, secret_key)].append((target, resource))
        for mode in ("off", "observe", "auto"):
            metrics.TUNED_RESOURCES.labels(mode).set(counts.get(mode, 0))
        metrics.keep_resources(tuned)  # issue 17: per-resource series go with the resource (or its tuning)
        if groups:
            metrics.TUNING_TICKS.inc()  # before querying: a scrape mid-tick never sees queries of an uncounted tick
        for (url, secret_key), members in groups.items():
            try:
                await self._tick_source(url, secret_key, members, now, report)
            except Exception as error:  # one Prometheus (or its answers) costs only its own resources
                metrics.record_error("tuning", type(error).__name__)
                report.failures.append(f"{type(error).__name__}: {error}")
                log.exception("tuning of %d resource(s) sharing a Prometheus failed: %s", len(members), error)
        self._forget_gone(present)
        if groups:
            metrics.QUERIES_PER_TICK.set(report.queries)
        return report

    async def _source(self, url: str | None, secret_key) -> prom.Source | prom.QueryFailure:
        """Where to query, or why not: only allowed URLs, and a Secret only when the configuration allows
        it and the Secret opts in by label (issue 15); the operator's rights are never lent to a spec."""
        if not url:
            return prom.QueryFailure(prom.NOT_CONFIGURED, "no Prometheus URL: set spec.tuning.prometheus.url or the "
                                                          "operator's prometheus.url (--prometheus-url)")
        refused = self.access.url_refusal(url)
        if secret_key is not None and refused is None:
            refused = self.access.auth_refusal(secret_key[0], secret_key[1])
        if refused is not None:
            return prom.QueryFailure(refused.reason, refused.message)
        if secret_key is None:
            return prom.Source(url, timeout_seconds=self.settings.query_timeout_seconds,
                               max_response_bytes=self.settings.max_response_bytes)
        namespace, name, key = secret_key
        try:
            secret = await read_opted_in_secret(self.kube, namespace, name, label=PROMETHEUS_AUTH_LABEL,
                                                field="spec.tuning.prometheus.authSecretRef", use="Prometheus query",
                                                reason=AUTH_NOT_ALLOWED, missing_reason=prom.AUTH_FAILED)
        except Exception as error:  # noqa: BLE001 -- API server away: this source holds, the tick goes on
            return prom.QueryFailure(prom.AUTH_FAILED, f"cannot read Secret {namespace}/{name}: {type(error).__name__}")
        if isinstance(secret, Refusal):
            return prom.QueryFailure(secret.reason, secret.message)
        try:
            credentials = prom.credentials_from_secret(secret.get("data"), key)
        except prom.SecretError as error:
            return prom.QueryFailure(prom.AUTH_FAILED, f"Secret {namespace}/{name}: {error}")
        return prom.Source(url, timeout_seconds=self.settings.query_timeout_seconds,
                           max_response_bytes=self.settings.max_response_bytes, **credentials)

    async def _tick_source(self, url, secret_key, members, now: float, report: TickReport) -> None:
        source = await self._source(url, secret_key)
        run = None
        if isinstance(source, prom.Source):
            run = await asyncio.to_thread(prom.run_queries, source, self.queries, at=now,
                                          on_latency=metrics.observe_query)
            report.queries += run.queries
            report.sources += 1
            failure = run.failure
        else:
            failure = source
        if failure is not None:
            metrics.record_error("tuning", failure.reason)
            report.failures.append(f"{failure.reason}: {failure.message}")
            log.warning("tuning holds %d resource(s): %s", len(members), failure.message)
        indexed = index_results(run.results, self.settings.labels.mapping()) if run and not failure else {}
        for target, resource in members:
            report.resources += 1
            self.last_run[target.key] = now
            try:
                tick = await self._decide(target, indexed.get(target.key), failure, now)
                outcome = tick_status(target, tick)
            except Exception as error:  # one resource's failure must not stop the others
                log.exception("tuning %s/%s failed: %s", target.namespace, target.name, error)
                metrics.record_error("tuning", "TuningFailed")
                tick = Tick(target.mode, now, degraded=("TuningFailed", f"{type(error).__name__}: {error}"[:1000]),
                            hold_reason="holding the current config: the tuner failed on this resource (see "
                                        "TuningDegraded)")
                outcome = tick_status(target, tick)
            metrics.TUNING_DECISIONS.labels(outcome.action, target.mode).inc()
            # issue 17 (exports.py): status.cost when a price applies, and the per-resource series
            outcome = with_cost(outcome, cost_of(self.prices, target, outcome.status))
            metrics.publish_resource(target.namespace, target.name, resource_export(target, tick, outcome))
            report.actions[f"{target.namespace}/{target.name}"] = outcome.action
            if (tick.decision is None or tick.decision.guard in DATA_FAULTS) and same_hold(target, outcome):
                continue  # still holding for the same reason: no status churn while the data stay bad
            await self._apply(target, outcome.patch())
            if outcome.event is not None and self.events is not None:
                kind, reason, message = outcome.event
                await self.events.record(resource, type_=kind, reason=reason, message=message)

    async def _decide(self, target: ResourceTarget, series: Mapping[str, Samples] | None,
                      failure: prom.QueryFailure | None, now: float) -> Tick:
        mode = target.mode
        if failure is not None:
            return Tick(mode, now, degraded=(failure.reason, failure.message),
                        hold_reason=f"holding the current config: {failure.message}")
        if target.status_problem is not None:
            return Tick(mode, now, degraded=("StatusUnreadable", target.status_problem[:1000]),
                        hold_reason="holding: the stored status cannot be read")
        if target.spec is None:
            return Tick(mode, now, degraded=("InvalidSpec", "the spec is invalid (see the Ready condition)"),
                        hold_reason="holding: the spec is invalid")
        try:
            tuning = with_engine_envelope(tuning_input(target.spec, self.settings.policy), target)
        except TargetError as error:
            return Tick(mode, now, degraded=(error.reason, str(error)), hold_reason=f"not tuning: {error}")
        # issue 17; the fit of a new table takes ~0.5 s (cached after): off the event loop, like decide
        tuning, step_cost = await asyncio.to_thread(calibrated_tuning_input, target, tuning, self.settings.policy)
        # A hold writes no policy state, so it keeps reporting the prior that state was learnt with: the
        # next decision must still see the change of prior and forget what the old one taught.
        held_cost = target.tuning_status.step_cost if stored_state(target) is not None else step_cost
        switched = switched_method(target)
        if switched is not None:
            return Tick(mode, now, drop_applied=True, hold_reason=f"{switched}: tuning it from its own config",
                        step_cost=held_cost)
        problem = applied_problem(target, tuning)
        if problem is not None:
            return Tick(mode, now, drop_applied=True, degraded=("AppliedConfigDropped", f"{problem}: dropped"),
                        hold_reason=f"{problem}: dropped, the spec's config renders until the next decision",
                        step_cost=held_cost)
        applied = observed_applied(target)
        rolling = rollout_in_progress(target, applied.config)
        in_force = live_in_force(series)
        if in_force is not None and in_force.since:  # windows start when the last engine took the schedule
            applied = dataclasses.replace(applied, since=max(applied.since, parse_rfc3339(in_force.since) or 0.0))
        observed = observe(Target(target.namespace, target.name, applied, rolling),
                           series, labels=self.settings.labels.mapping(), now=now,
                           window_seconds=self.settings.window_seconds)
        if observed.observation is None:  # missing or malformed series first: they say what is wrong
            return Tick(mode, now, degraded=(observed.reason, observed.missing or "no observation"),
                        hold_reason=f"holding the current config: {observed.missing}", step_cost=held_cost,
                        in_force=in_force)
        live = target.status.effective.live_schedule if target.status.effective is not None else None
        waiting = not_in_force(live.digest, in_force, max(1, target.spec.replicas)) if live and not rolling else None
        if waiting:  # retuned in place: judge only what the engines really run
            return Tick(mode, now, hold_reason=f"holding: {waiting}", step_cost=held_cost, in_force=in_force)
        previous = stored_state(target)
        if not same_prior(target.tuning_status.step_cost, step_cost):  # a calibration landed or went stale
            previous = forget_step_cost(previous)
        decision, state = await asyncio.to_thread(decide, observed.observation, tuning, previous, now)
        if self.settings.record_file:
            append_record(self.settings.record_file, tick_record(target.namespace, target.name, now,
                                                                 observed.observation, tuning, previous, decision))
        # In place only: the policy holds every rollout itself (guards.budget_guard); should one come out all the
        # same, it is recommended, never rolled out.
        no_apply = ("spec.tuning.maxRestartsPerHour is 0 (in place only)"
                    if target.spec.tuning.max_restarts_per_hour == 0 and decision.path == "rollout" else None)
        if decision.is_change and (mode != "auto" or no_apply):
            state = observe_mode_state(previous, state)
        untrusted = decision.guard in DATA_FAULTS  # numbers the policy refused: not for status.metrics either
        return Tick(mode, now, decision=decision, state=state, metrics=None if untrusted else observed.metrics,
                    signals=decision.signals or observed.signals, no_apply_reason=no_apply, step_cost=step_cost,
                    in_force=in_force)

    def _forget_gone(self, present: set[tuple[str, str]]) -> None:
        """Deleted resources leave no memory behind (the loop runs for months)."""
        for key in [key for key in self.last_run if key not in present]:
            del self.last_run[key]

    async def _apply(self, target: ResourceTarget, status: dict[str, Any]) -> None:
        """Server-side apply of the status parts the tuning loop owns (`status` is their JSON)."""
        body = {"apiVersion": API_VERSION, "kind": KIND,
                "metadata": {"name": target.name, "namespace": target.namespace}, "status": status}
        try:
            result = await server_side_apply(self.kube, body, field_manager=FIELD_MANAGER, subresource="status")
        except Exception as error:  # noqa: BLE001 -- next tick tries again
            metrics.record_error("tuning", "StatusWriteFailed")
            log.warning("cannot write tuning status of %s/%s: %s", target.namespace, target.name, error)
            return
        if self.on_written is not None and result:
            result.setdefault("apiVersion", API_VERSION)
            result.setdefault("kind", KIND)
            self.on_written(result)
