"""`specinfer bench tuning-loop`: cost of one tuning tick as resources are added.

The loop runs against an in-process fake Prometheus (answers shaped like the real one's, with
the `specinfer:` series) and a fake API client, so what is measured is the loop itself: PromQL
round trips per tick (constant by design), wall and CPU time per tick, and the size of the
status patch each resource gets. The real-component version of the constant-queries check is
tests/integration/test_tuning_loop.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter

import click

from specinfer.operator.tuner import prometheus as prom
from specinfer.operator.tuner.loop import TuningLoop
from specinfer.operator.tuner.pure.queries import BATCH_QUANTILES, Query, build_queries
from specinfer.operator.tuner.pure.settings import TunerSettings

NOW = 1_800_000_000.0


def _sample(name: str, value: float, **labels: str) -> dict:
    return {"metric": {"namespace": "bench", "specinfer_io_name": name, **labels}, "value": [NOW, str(value)]}


def answers_for(names: list[str], queries: list[Query]) -> dict[str, list[dict]]:
    """One engine per resource at K=3, batch ~4, chat-like acceptance, with the plugin's series. Every query
    of the tick gets an answer (an empty one where the engine exports nothing, as for an engine not retuned
    in place): the loop refuses a Prometheus that answers a query with anything but a query response."""
    out: dict[str, list[dict]] = {q.name: [] for q in queries}
    prefix = (0.8, 0.6, 0.42)
    for name in names:
        drafts = 20000.0
        out["scrapeTime"].append(_sample(name, NOW - 1))
        out["drafts"].append(_sample(name, drafts))
        out["draftTokens"].append(_sample(name, drafts * 3))
        for i, p in enumerate(prefix):
            out["acceptedPerPosition"].append(_sample(name, drafts * p, position=str(i)))
            out["pluginAcceptedPerPosition"].append(_sample(name, drafts * p, position=str(i)))
            out["draftsPerPosition"].append(_sample(name, drafts, position=str(i)))
        out["requestSteps"].append(_sample(name, drafts))
        out["requestStepSeconds"].append(_sample(name, drafts * 0.0097))
        out["generatedTokens"].append(_sample(name, drafts * (1 + sum(prefix))))
        out["stepCount"].append(_sample(name, drafts / 4, batch_size="4", k="3"))
        out["stepSeconds"].append(_sample(name, drafts / 4 * 0.0097, batch_size="4", k="3"))
        out["stepRequests"].append(_sample(name, drafts, batch_size="4", k="3"))
        for q in BATCH_QUANTILES:
            out["batchQuantiles"].append(_sample(name, 4, pod=f"{name}-0", quantile=str(q)))
        out["perTokenP99"].append(_sample(name, 0.004))
        out["ttftP99"].append(_sample(name, 0.05))
    return out


def resource(name: str) -> dict:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - 3600))
    return {
        "apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
        "metadata": {"name": name, "namespace": "bench", "generation": 1, "uid": name},
        "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                 "speculation": {"method": "eagle3", "draftModel": {"name": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"},
                                 "numSpeculativeTokens": 3},
                 "runtime": {"engine": "simulator", "simulator": {"maxNumSeqs": 256}},
                 "tuning": {"mode": "observe", "intervalSeconds": 30}},
        "status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "Available", "message": "", "lastTransitionTime": stamp},
            {"type": "Progressing", "status": "False", "reason": "RolloutComplete", "message": "",
             "lastTransitionTime": stamp}],
            "effective": {"method": "eagle3", "numSpeculativeTokens": 3}},
    }


class _FakeApi:
    def __init__(self) -> None:
        self.bytes: list[int] = []
        self.reasons: list[str] = []  # each status patch's lastDecision.reason: what the policy (or a hold) said

    async def request(self, method, path, *, query=None, body=None, content_type=None, verb=None):
        self.bytes.append(len(json.dumps(body)))
        decision = (((body or {}).get("status") or {}).get("tuning") or {}).get("lastDecision") or {}
        if "reason" in decision:
            self.reasons.append(decision["reason"])
        return None

    async def get(self, path, **query):
        return None


class _FakePrometheus:
    def __init__(self, names: list[str], settings: TunerSettings) -> None:
        queries = build_queries(settings.labels.mapping(), settings.window_seconds)
        self.names = {q.promql: q.name for q in queries}
        self.answers, self.calls = answers_for(names, queries), 0

    def custom_query(self, query, params=None):
        self.calls += 1
        return self.answers[self.names[query]]


def measure(count: int) -> dict:
    settings = TunerSettings(window_seconds=60)
    names = [f"r{i:04d}" for i in range(count)]
    server = _FakePrometheus(names, settings)
    original = prom._client
    prom._client = lambda source: server
    try:
        api = _FakeApi()
        loop = TuningLoop(kube=api, resources=lambda: [resource(n) for n in names], settings=settings,
                          default_url="http://prometheus.invalid", clock=lambda: NOW)
        wall, cpu = time.perf_counter(), time.process_time()
        report = asyncio.run(loop.tick())
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        prom._client = original
    return {"resources": count, "queries": report.queries, "roundTrips": server.calls,
            "tickSeconds": round(wall, 3), "cpuSeconds": round(cpu, 3),
            "msPerResource": round(1000 * wall / count, 2),
            "statusPatchBytes": max(api.bytes) if api.bytes else 0,
            "actions": dict(sorted(Counter(report.actions.values()).items())),
            # resources the loop held before the policy ran (a query it refused, series missing)
            "heldBeforePolicy": len(report.failures) + sum(r.startswith("holding") for r in api.reasons)}


@click.command("tuning-loop")
@click.option("--resources", "counts", default="1,10,100", show_default=True,
              help="comma-separated resource counts to measure")
@click.option("--json", "as_json", is_flag=True, help="print the figures as JSON")
def tuning_loop_command(counts: str, as_json: bool) -> None:
    """Cost of one tuning tick (PromQL round trips, time, status size) as resources are added."""
    rows = [measure(int(n)) for n in counts.split(",") if n.strip()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(f"{'resources':>9} {'queries':>7} {'tick s':>7} {'cpu s':>6} {'ms/resource':>11} "
               f"{'status bytes':>12} {'held':>5}  actions")
    for row in rows:
        click.echo(f"{row['resources']:>9} {row['queries']:>7} {row['tickSeconds']:>7.3f} {row['cpuSeconds']:>6.3f} "
                   f"{row['msPerResource']:>11.2f} {row['statusPatchBytes']:>12} {row['heldBeforePolicy']:>5}  "
                   f"{row['actions']}")
