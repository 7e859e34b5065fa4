"""The seed methods on the real vLLM CPU engine, through the operator: EAGLE, EAGLE-3 and MTP (issue 23),
and ngram beside them.

Everything is real: the local control plane, `specinfer operator` (the demo's short tuning clocks, with a 30 s window),
Debian's Prometheus (file-based discovery), and the pod runner running the rendered pod's own command
(`specinfer runtime`: config -> preflight -> argv -> exec `vllm serve`) inside the cached engine
environment that models the CPU runtime image, with the tiny drafters of `specinfer models make`
(docs/development.md, "Seed-method drafters"): toys that run vLLM's real loaders and drafting code,
not quality drafters. Four resources start side by side, one engine each, and every test of the
module shares them:

  tiny-eagle3  eagle3 with the hand-set EAGLE-3 head (eagle3-bigram), K=3 and a Dynamic SD schedule
               (K=3 alone, K=1 from two requests on), tuning observe;
  tiny-eagle   eagle with the hand-set EAGLE head (eagle-bigram), K=2, tuning observe;
  tiny-mtp     mtp on a MiMo target carrying its own MTP layer (mtp-target-bigram), K=1, tuning observe;
  tiny-ngram   ngram (prompt lookup 2-4), K=3, tuning observe.

DFlash runs in the tuning story (test_tuning_engine.py): its random drafter (dflash-random,
acceptance 0) is the collapse the tuner answers by switching speculation off, and that engine then
serves as the no-speculation reference -- one engine start fewer than a collapse of its own here.
draftModel serves in the tuning story too (the always-right draft, its schedules in force in vLLM's
counters) and in method `auto`'s comparison (test_calibration_engine.py); until 2026-12-04 a module of
its own served ngram and draftModel with the same checks as here, two engines more.

What each shows: it serves completions through the runner's serving endpoints with the method in
vLLM's own argv, the runtime exec'd the engine, which loaded the plugin through its entry point;
vLLM's spec-decode counters and the plugin's series are scraped by Prometheus and agree;
status.metrics reports the acceptance per position the engine measured; the schedule in the spec is
in force in the engine's own counters (EAGLE-3).
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
import yaml

from specinfer.api.timestamps import parse_rfc3339, rfc3339
from specinfer.dev.demo.real_engine import OPERATOR_CONFIG
from specinfer.dev.demo.stack import Stack
from specinfer.runtime.pod.calibration.requests import synthetic_prompt
from tests.engine.engine_client import Metrics, complete, minus, per_position, rounds, settled
from tests.support import condition, namespaced_stack, wait_for

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1200)]

STARTUP_TIMEOUT = 600  # four engines starting at once on two shared cores
# The tuner's window here: the demo's 15 s would leave about one 5 s tick whose window holds all of a
# burst of requests (it must end after the last one's counters reach Prometheus and begin before the
# first's); 30 s leaves several
WINDOW_SECONDS = 30
SEED_OPERATOR_CONFIG = {**OPERATOR_CONFIG, "tuning": {**OPERATOR_CONFIG["tuning"], "windowSeconds": WINDOW_SECONDS}}
# A window must begin this long before the first request: a scrape (1 s) before its first counts
# reach /metrics, and sampledAt's whole seconds
BEFORE_FIRST = 3.0
# prompts of the demo's kind (the load generator's synthetic prompts), not the ones the drafters' tables were
# built on (until 2026-12-04 each was one word 24 times: a new generator drew every word)
PROMPTS = [synthetic_prompt(random.Random(seed), 24) for seed in range(100, 108)]
# a prompt that repeats itself, for the n-gram drafter to copy from
REPETITIVE = "one two three four five one two three four five one two three four five one two three"
SCHEDULE = [{"minBatchSize": 1, "maxBatchSize": 1, "numSpeculativeTokens": 3},
            {"minBatchSize": 2, "maxBatchSize": 64, "numSpeculativeTokens": 1}]
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
PLUGIN_DRAFTS = "specinfer:spec_decode_num_draft_tokens_per_pos_total"
PLUGIN_ACCEPTED = "specinfer:spec_decode_num_accepted_tokens_per_pos_total"
PLUGIN_LOADED = "specinfer-telemetry -> specinfer.runtime.pod.telemetry.vllm_plugin:SpecinferStatLogger"
# the heads' first test, which reads each engine's acceptance: (resource, method, K)
HEADS = (("tiny-eagle3", "eagle3", 3), ("tiny-eagle", "eagle", 2), ("tiny-mtp", "mtp", 1))


def resource(namespace: str, name: str, models: Path, speculation: dict, *, target: str = "target") -> dict:
    return {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"model": {"name": str(models / target), "servedModelName": "tiny"},
                     "speculation": speculation, "hardware": {"accelerator": "cpu"},
                     "runtime": {"engine": "vllm",
                                 "env": [{"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"},
                                         {"name": "VLLM_LOG_STATS_INTERVAL", "value": "1"}]},
                     # observe: the tuner measures and reports (status.metrics), changes nothing
                     "tuning": {"mode": "observe", "intervalSeconds": 5, "minSamples": 100}}}


def wanted(namespace: str, models: Path) -> dict[str, dict]:
    return {
        "tiny-eagle3": resource(namespace, "tiny-eagle3", models, {
            "method": "eagle3", "draftModel": {"name": str(models / "eagle3-bigram")}, "numSpeculativeTokens": 3,
            "schedule": SCHEDULE}),
        "tiny-eagle": resource(namespace, "tiny-eagle", models, {
            "method": "eagle", "draftModel": {"name": str(models / "eagle-bigram")}, "numSpeculativeTokens": 2}),
        "tiny-mtp": resource(namespace, "tiny-mtp", models, {"method": "mtp", "numSpeculativeTokens": 1},
                             target="mtp-target-bigram"),
        "tiny-ngram": resource(namespace, "tiny-ngram", models, {
            "method": "ngram", "numSpeculativeTokens": 3, "promptLookup": {"min": 2, "max": 4}}),
    }


class Seeds:
    def __init__(self, cluster, namespace: str, stack: Stack, prometheus):
        self.cluster, self.namespace, self.stack, self.prometheus = cluster, namespace, stack, prometheus
        self.methods: dict[str, str] = {}  # resource -> its method

    def si(self, name: str) -> dict:
        result = self.cluster.kubectl("-n", self.namespace, "get", "si", name, "-o", "json", check=False)
        return json.loads(result.stdout) if result.returncode == 0 else {}

    def pods(self, name: str) -> list:
        return [p for p in self.stack.runner.serving_pods() if p.labels.get("specinfer.io/name") == name]

    def log(self, name: str) -> str:
        (pod,) = self.pods(name)
        return Path(pod.record.log).read_text()

    def url(self, name: str) -> str:
        (pod,) = self.pods(name)
        return f"http://127.0.0.1:{pod.port}"

    def pod_logs(self) -> str:
        return "\n".join(f"--- {pod.name}:\n" + (Path(pod.record.log).read_text()[-2500:] if pod.record else "")
                         for pod in self.stack.runner.pods.values())


@pytest.fixture(scope="module")
def seeds(cluster, prometheus, tmp_path_factory, engine_env, tiny_models):
    workdir = tmp_path_factory.mktemp("seed-methods")
    with namespaced_stack(cluster, prometheus, workdir, "seeds", SEED_OPERATOR_CONFIG) as (namespace, stack):
        state = Seeds(cluster, namespace, stack, prometheus)
        started = time.monotonic()
        resources = wanted(namespace, tiny_models)
        state.methods = {name: document["spec"]["speculation"]["method"] for name, document in resources.items()}
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(list(resources.values())))
        wait_for(lambda: all(state.pods(name) for name in resources), timeout=STARTUP_TIMEOUT, interval=2,
                 what="the four engines serving", why=state.pod_logs)
        print(f"eagle3, eagle, mtp and ngram engines ready {time.monotonic() - started:.0f} s after apply")
        yield state


def exec_line(log: str) -> str:
    """The runtime's last word before it became `vllm serve`: the engine's argv."""
    return next((line for line in log.splitlines() if line.startswith("specinfer runtime: exec vllm serve")), "")


def test_every_engine_is_the_runtimes_exec_with_the_plugin_and_ready_from_its_probe(seeds):
    """The pod's own command ran: `specinfer runtime` exec'd `vllm serve` with the method in its argv, the
    live engine loaded the stat-logger plugin through its entry point, and Ready follows the engine's
    readiness probe (the runner owns these pods' status, not kwok)."""
    for name, method in seeds.methods.items():
        log = seeds.log(name)
        assert f'"method":"{method}"' in exec_line(log), log[-2000:]
        assert PLUGIN_LOADED in log, log[-2000:]
        wait_for(lambda name=name: condition(seeds.si(name), "Ready").get("status") == "True", timeout=60,
                 interval=1, what=f"{name}: Ready=True")


def test_ngram_serves_and_both_series_reach_prometheus(seeds):
    """ngram, which drafts from the prompt itself: a prompt that repeats is drafted from, vLLM's counters
    and the plugin's per-position series reach Prometheus, and they agree."""
    url = seeds.url("tiny-ngram")
    names = (ACCEPTED, DRAFTS, PLUGIN_DRAFTS, PLUGIN_ACCEPTED)
    before = settled(url, names)
    answer = complete(url, REPETITIVE)
    assert answer["model"] == "tiny" and answer["usage"]["completion_tokens"] == 48, answer
    assert answer["choices"][0]["text"], answer
    after = settled(url, names)
    drafted = after.total(DRAFT_TOKENS) - before.total(DRAFT_TOKENS)
    plugin_drafts = minus(per_position(after, PLUGIN_DRAFTS), per_position(before, PLUGIN_DRAFTS))
    accepted = minus(per_position(after, ACCEPTED), per_position(before, ACCEPTED))
    plugin_accepted = minus(per_position(after, PLUGIN_ACCEPTED), per_position(before, PLUGIN_ACCEPTED))
    print(f"ngram: {drafted:.0f} draft tokens, plugin drafts per position {plugin_drafts}, accepted {accepted}")
    assert drafted > 0 and sum(plugin_drafts) == drafted and plugin_accepted == accepted
    both_series_in_prometheus(seeds, "tiny-ngram")


def both_series_in_prometheus(seeds: Seeds, name: str) -> None:
    """vLLM's own draft counter and the plugin's per-position one, scraped by Prometheus for `name`."""
    selector = f'namespace="{seeds.namespace}",specinfer_io_name="{name}"'
    for series in (DRAFT_TOKENS, PLUGIN_DRAFTS):
        seeds.prometheus.wait_for(f"sum({series}{{{selector}}})", lambda r: r and float(r[0]["value"][1]) > 0,
                                  timeout=60)


def test_each_seed_method_serves_and_reports_the_acceptance_the_engine_measured(seeds):
    first_position: dict[str, float] = {}
    for name, method, k in HEADS:
        url = seeds.url(name)
        log = seeds.log(name)
        assert f'"method":"{method}"' in exec_line(log), log[-2000:]  # the method in vLLM's own argv
        before = settled(url, (ACCEPTED, DRAFTS))
        started = time.time()
        for prompt in PROMPTS:
            answer = complete(url, prompt, max_tokens=32)
            assert answer["model"] == "tiny" and answer["usage"]["completion_tokens"] == 32, answer
        after = settled(url, (ACCEPTED, DRAFTS))
        # every count is on /metrics now, quiet for 2.5 s: any later scrape holds them
        counted = time.time()
        assert counted <= started + WINDOW_SECONDS - BEFORE_FIRST, \
            f"{name}: the requests took {counted - started:.0f} s: no {WINDOW_SECONDS} s window holds them all"
        drafts = after.total(DRAFTS) - before.total(DRAFTS)
        accepted = minus(per_position(after, ACCEPTED), per_position(before, ACCEPTED))
        print(f"{name}: {drafts:.0f} drafts, accepted per position {accepted} (vLLM's counters)")
        assert drafts > 0 and len(accepted) == k
        first_position[name] = accepted[0] / drafts
        # status.metrics: the tuner's window of the same counters, read back from Prometheus -- the first
        # window that holds every one of these requests (an earlier one may hold a few: 2026-12-03's CI
        # compared 0 from a window of ~2.5 requests with 0.12 over all eight)
        metrics = wait_for(lambda name=name, k=k, s=started, c=counted: _reported(seeds, name, k, s, c),
                           timeout=120, interval=1,
                           what=f"{name}: status.metrics over a window from before {rfc3339(started)} to after "
                                f"{rfc3339(counted)}",
                           why=lambda name=name: json.dumps((seeds.si(name).get("status") or {}).get("metrics")))
        print(f"{name}: status.metrics {metrics}")
        assert seeds.si(name)["status"]["effective"]["method"] == method
        # what status reports is what the engine counted over the same requests
        assert abs(metrics["perPositionAcceptance"][0] - first_position[name]) <= 0.1, (metrics, first_position)
        both_series_in_prometheus(seeds, name)
    # On these prompts of the demo's kind the hand-set heads are right on most first drafts (eagle3 0.65,
    # eagle 0.62, mtp 0.54 in four runs of 2026-12-04: the drafters' bytes and the greedy paths are
    # reproducible); issue 23's goal for the EAGLE-3 head is 0.5. (While each prompt here was one word
    # repeated, they accepted 0.12, 0.05 and 0.01-0.26: the target's answers to those are loops its
    # tables never saw.) Held loosely, as the toys they are: right on some drafts, not on all.
    print(f"first-position acceptance on the engine: {first_position}")
    assert first_position["tiny-eagle3"] >= 0.5, first_position
    assert all(0.2 < rate < 0.95 for rate in first_position.values()), first_position


def _reported(seeds: Seeds, name: str, k: int, started: float, counted: float) -> dict | None:
    """status.metrics once its window holds every request sent from `started` on, all counted by `counted`."""
    metrics = (seeds.si(name).get("status") or {}).get("metrics") or {}
    rates = metrics.get("perPositionAcceptance")
    sampled = parse_rfc3339(metrics.get("sampledAt"))  # whole seconds, never after the query's time
    if sampled is None or not counted <= sampled <= started + WINDOW_SECONDS - BEFORE_FIRST:
        return None
    # a window that counted drafts (a toy head may accept none of them on some prompts: 0 is a measurement)
    return metrics if rates and len(rates) == k and metrics.get("meanAcceptedLength") else None


def test_the_eagle3_schedule_in_the_spec_is_in_force_in_the_engines_counters(seeds):
    url = seeds.url("tiny-eagle3")
    names = (ACCEPTED, DRAFTS, PLUGIN_DRAFTS)
    before = settled(url, names)
    rounds(url, PROMPTS[0], concurrency=1, count=3, max_tokens=32)
    alone = settled(url, names)
    # long requests: a request runs alone (K=3) until the round's second one reaches the engine and after the
    # others finished, and the longer the requests the smaller those steps' share. With 32 tokens the batch-8
    # rounds once drafted 1.63 tokens per request-step (2026-12-04; 1.01 in every other run, not reproduced:
    # most likely a client slow to send a round's eight requests, each starting alone)
    rounds(url, PROMPTS[1], concurrency=8, count=2, max_tokens=128)
    busy = settled(url, names)

    def k_per_step(after: Metrics, then: Metrics) -> float:
        return (after.total(DRAFT_TOKENS) - then.total(DRAFT_TOKENS)) / (after.total(DRAFTS) - then.total(DRAFTS))

    print(f"eagle3 draft tokens per request-step: batch 1 {k_per_step(alone, before):.2f} "
          f"({alone.total(DRAFTS) - before.total(DRAFTS):.0f} request-steps), batch 8 {k_per_step(busy, alone):.2f} "
          f"({busy.total(DRAFTS) - alone.total(DRAFTS):.0f})")
    assert k_per_step(alone, before) == pytest.approx(3.0, rel=0.05)  # K=3 alone
    assert k_per_step(busy, alone) < 1.3  # K=1 from two requests on (a request alone at a round's tail: K=3)
    # the plugin's per-position series over the same window: its draft tokens sum to vLLM's, its
    # accepted tokens equal vLLM's
    plugin = minus(per_position(busy, PLUGIN_DRAFTS), per_position(before, PLUGIN_DRAFTS))
    vllm_accepted = minus(per_position(busy, ACCEPTED), per_position(before, ACCEPTED))
    plugin_accepted = minus(per_position(busy, PLUGIN_ACCEPTED), per_position(before, PLUGIN_ACCEPTED))
    print(f"plugin drafts per position {plugin}, accepted {plugin_accepted}; vLLM accepted {vllm_accepted}")
    assert sum(plugin) == busy.total(DRAFT_TOKENS) - before.total(DRAFT_TOKENS)
    assert plugin_accepted == vllm_accepted
    assert plugin[0] > plugin[1]  # the schedule drafted fewer positions at batch 8

