"""The tuner against the real vLLM CPU engine (issue 18): decisions from the engine's own counters,
rolled out by restarting real engines.

Real control plane, `specinfer operator` with the tuning loop on the demo's short clocks, Debian's
Prometheus, and the pod runner running `specinfer runtime` -> `vllm serve` in the engine
environment. Two resources, started together, serve every test of the module (engine starts are
the slow part: ~1-3 minutes each on two shared cores):

  collapse   draftModel with the draft of other weights (acceptance ~0), tuning auto: the tuner must
             switch speculation off (TuningDegraded=True AcceptanceCollapsed), the Deployment roll
             to a config without --speculative-config, and completions keep being served;
             afterwards it is the no-speculation reference engine for the crossover figures;
  crossover  draftModel with the target as its own draft (always right), K=2, tuning off at first
             (the static config is measured at batch 1 and 64), then auto under low load: the
             tuner programs a schedule (drafting at small batch sizes, not at large ones), the
             rollout restarts the engine and the change is verified with a realised gain; then
             high load: the tuner decides from what it measures there, and goodput at high load is
             at least no speculation's.

Goodput is vLLM's own `vllm:generation_tokens_total` per second, read from the pod, with one
engine loaded at a time (the other idles), alternating rounds so that drift in the shared
machine's speed hits both sides.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path

import pytest
import yaml

from specinfer.api.timestamps import parse_rfc3339
from specinfer.dev.demo.real_engine import MAX_BATCH, OPERATOR_CONFIG
from specinfer.dev.demo.stack import Stack
from specinfer.runtime.methods.schedule import effective_k
from tests.engine.engine_client import ClosedLoop, Metrics
from tests.support import condition, wait_for

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1200)]  # engine starts: minutes each on shared cores

# The demo's operator configuration on the real engine (src/specinfer/dev/demo/real_engine.py): short
# clocks (15 s windows, 20 s cooldown, one confirmation), the engine's batch limit (64) and the
# step-cost prior for a tiny model on CPU -- the simulator's `cpu-tiny` preset, calibrated to this
# engine (docs/simulator.md).
STARTUP_TIMEOUT = 420
ROLLOUT_TIMEOUT = 420  # a new engine starts while the old one serves
PROMPT = "the quick brown fox jumps over the lazy dog " * 2
LOW, HIGH = 1, MAX_BATCH
MEASURE_SECONDS = 12.0
THINK = 0.5  # seconds between a client's requests while a new engine may be starting beside the old
SETTLING = {"ChangeApplied", "Settling", "Verifying"}  # Tuned reasons while a change is judged
# Tuned reasons (the guard that held) that say the policy has not judged this load yet: it waits for
# a steady window of it, for a window that measured its batch sizes, or for the rollout to settle
NOT_YET_DECIDED = {"LoadMoving", "Unmeasured", "InsufficientSamples", "Settling", "RolloutInProgress",
                   "NoAcceptanceData"}
# The always-right draft starts at K=2, where it pays little (bench engine-cpu, docs/simulator.md:
# 1.16x at batch 1 against 1.48x at K=4, 0.65x at batch 64): the tuner has a real gain to find at
# low load and a real loss to avoid at high load. kMax 4: longer K were never measured on this
# engine and a tuned K=7 ran 15% slower than K=4 in one run (the prior then extrapolates).
STATIC_K = 2
K_MAX = 4
STATIC, TUNED, NONE = f"always-right draft, static K={STATIC_K}", "always-right draft, tuned", "no speculation"


def resource(namespace: str, name: str, models: Path, draft: str, *, k: int, mode: str, k_max: int) -> dict:
    return {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"model": {"name": str(models / "target"), "servedModelName": "tiny"},
                     "speculation": {"method": "draftModel", "draftModel": {"name": str(models / draft)},
                                     "numSpeculativeTokens": k},
                     "hardware": {"accelerator": "cpu"},
                     # vLLM aborts in-flight requests on SIGTERM unless --shutdown-timeout lets it drain
                     # them: a rollout then keeps serving through the old engine's exit
                     "runtime": {"engine": "vllm", "extraArgs": ["--max-num-seqs", str(MAX_BATCH),
                                                                 "--shutdown-timeout", "20"],
                                 "env": [{"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"},
                                         {"name": "VLLM_LOG_STATS_INTERVAL", "value": "1"}]},
                     "tuning": {"mode": mode, "intervalSeconds": 5, "minSamples": 200, "minNumSpeculativeTokens": 0,
                                "maxNumSpeculativeTokens": k_max, "maxRestartsPerHour": 10}}}


def once(step):
    """A step of the module's story, run once whichever test needs it first (so each test also runs
    alone); a failure is kept and raised again to every test that needs the step."""
    def run(self):
        if step.__name__ not in self.done:
            try:
                self.done[step.__name__] = (step(self), None)
            except BaseException as error:  # noqa: BLE001 -- re-raised here and to every later caller
                self.done[step.__name__] = (None, error)
        value, error = self.done[step.__name__]
        if error is not None:
            raise error
        return value
    return run


class Setup:
    def __init__(self, cluster, namespace: str, stack: Stack):
        self.cluster, self.namespace, self.stack = cluster, namespace, stack
        self.figures: dict[tuple[str, int], list[float]] = {}  # (config, concurrency) -> tokens/s per round
        self.done: dict[str, tuple] = {}

    def si(self, name: str) -> dict:
        result = self.cluster.kubectl("-n", self.namespace, "get", "speculativeinference", name, "-o", "json",
                                      check=False)
        return json.loads(result.stdout) if result.returncode == 0 else {}

    def pods(self, name: str) -> list:
        runner = self.stack.runner
        return [pod for pod in (runner.serving_pods() if runner else []) if pod.labels.get("specinfer.io/name") == name]

    def endpoints(self, name: str):
        return lambda: [f"http://127.0.0.1:{pod.port}" for pod in self.pods(name)]

    def engine_command(self, name: str) -> str:
        deployment = json.loads(self.cluster.kubectl("-n", self.namespace, "get", "deployment", name, "-o", "json")
                                .stdout)
        return deployment["spec"]["template"]["metadata"]["annotations"]["specinfer.io/engine-command"]

    def pod_logs(self) -> str:
        runner = self.stack.runner
        return "\n".join(f"--- {pod.name}:\n" + (Path(pod.record.log).read_text()[-2500:] if pod.record else "")
                         for pod in (runner.pods.values() if runner else []))

    def measure(self, name: str, concurrency: int, label: str) -> float:
        """Generated tokens/s of `name`'s engine under closed-loop load, from vLLM's counter."""
        url = self.endpoints(name)()[0]
        with ClosedLoop(lambda: [url], PROMPT, concurrency=concurrency, max_tokens=128) as load:
            time.sleep(3)  # ramp: every worker has a request running
            before, started = Metrics.scrape(url).total("vllm:generation_tokens_total"), time.monotonic()
            time.sleep(MEASURE_SECONDS)
            after, ended = Metrics.scrape(url).total("vllm:generation_tokens_total"), time.monotonic()
        assert not load.failed, load.failed[:3]
        rate = (after - before) / (ended - started)
        self.figures.setdefault((label, concurrency), []).append(rate)
        print(f"  {label:<34} concurrency {concurrency:>2}: {rate:7.0f} tokens/s")
        return rate

    def mean(self, label: str, concurrency: int) -> float:
        rates = self.figures[(label, concurrency)]
        return sum(rates) / len(rates)


def tuning(resource: dict) -> dict:
    return (resource.get("status") or {}).get("tuning") or {}


def applied_k_at(resource: dict, batch_size: int) -> int | None:
    applied = tuning(resource).get("applied")
    if not applied:
        return None
    schedule = [(e["minBatchSize"], e["maxBatchSize"], e["numSpeculativeTokens"])
                for e in applied.get("schedule") or []]
    return effective_k(batch_size, applied["numSpeculativeTokens"], schedule or None)


def rolled_out(resource: dict) -> bool:
    """The pods run what the tuner applied, and no rollout is under way."""
    applied, effective = tuning(resource).get("applied"), (resource.get("status") or {}).get("effective") or {}
    return (applied is not None and condition(resource, "Ready").get("status") == "True"
            and condition(resource, "Progressing").get("status") != "True"
            and effective.get("numSpeculativeTokens") == applied["numSpeculativeTokens"]
            and (effective.get("schedule") or None) == (applied.get("schedule") or None))


@pytest.fixture(scope="module")
def setup(cluster, prometheus, tmp_path_factory, engine_env, tiny_models):
    namespace = f"tune-engine-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    workdir = tmp_path_factory.mktemp("tuning-engine")
    config = workdir / "operator.yaml"
    # every decision's input, for `specinfer tuner replay` when a decision here needs explaining
    ticks = workdir / "ticks.jsonl"
    config.write_text(yaml.safe_dump({**OPERATOR_CONFIG,
                                      "tuning": {**OPERATOR_CONFIG["tuning"], "recordFile": str(ticks)}}))
    print(f"tick records: {ticks}")
    stack = Stack(cluster.kubeconfig, prometheus, workdir, namespaces=(namespace,),
                  operator_args=("--standalone", "-n", namespace, "--config", str(config)), log=print)
    stack.start()
    state = Setup(cluster, namespace, stack)
    try:
        started = time.monotonic()
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
            resource(namespace, "collapse", tiny_models, "draft-other", k=2, mode="auto", k_max=4),
            resource(namespace, "crossover", tiny_models, "draft-same", k=STATIC_K, mode="off", k_max=K_MAX)]))
        wait_for(lambda: state.pods("collapse") and state.pods("crossover"), timeout=STARTUP_TIMEOUT, interval=2,
                 what="both engines serving", why=state.pod_logs)
        print(f"both engines ready {time.monotonic() - started:.0f} s after apply")
        yield state
    finally:
        operator_log = Path(stack.operator.log).read_text()[-4000:] if stack.operator else ""
        stack.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        print(f"--- operator log tail ---\n{operator_log}")


def decisions(resource: dict) -> str:
    """The tuner's recent decisions, oldest first, one line each."""
    return "\n".join(f"  {d.get('time')} {d.get('action')}: {d.get('reason')}"
                     for d in reversed(tuning(resource).get("history") or []))


def wait_for_resource(setup: Setup, name: str, predicate, *, timeout: float, what: str) -> dict:
    """The resource once `predicate(resource)` holds; on timeout, its decisions and the pod logs."""
    def why() -> str:
        return f"decisions of {name}:\n{decisions(setup.si(name))}\n{setup.pod_logs()}"
    return wait_for(lambda: (r := setup.si(name)) and predicate(r) and r, timeout=timeout, interval=1, what=what,
                    why=why)


@once
def collapse_story(setup: Setup) -> dict:
    """Load on the other-weights draft until the tuner has switched speculation off and the new
    engine serves; the load runs throughout the rollout."""
    started = time.monotonic()
    first = {pod.name for pod in setup.pods("collapse")}
    command_before = setup.engine_command("collapse")
    with ClosedLoop(setup.endpoints("collapse"), PROMPT, concurrency=2, max_tokens=64, think_seconds=THINK) as load:
        collapsed = wait_for_resource(setup, "collapse", lambda r: condition(r, "TuningDegraded").get("reason")
                                      == "AcceptanceCollapsed", timeout=180, what="TuningDegraded AcceptanceCollapsed")
        detected = time.monotonic() - started
        wait_for(lambda: "--speculative-config" not in setup.engine_command("collapse"), timeout=60,
                 what="the Deployment without --speculative-config")
        new = wait_for(lambda: [p for p in setup.pods("collapse") if p.name not in first], timeout=ROLLOUT_TIMEOUT,
                       interval=2, what="the engine without speculation serving", why=setup.pod_logs)[0]
        url = f"http://127.0.0.1:{new.port}"
        wait_for(lambda: load.served_by[url] >= 3 and not any(p.name in first for p in setup.pods("collapse")),
                 timeout=120, interval=1, what="completions from the new engine, the old one gone")
    return {"collapsed": collapsed, "detected_s": detected, "rolled_s": time.monotonic() - started,
            "command_before": command_before, "new_log": Path(new.record.log).read_text(),
            "after": setup.si("collapse"), "ok": load.ok, "failed": list(load.failed)}


@once
def static_figures(setup: Setup) -> None:
    """The always-right draft at its static K (tuning off): batch 64, then batch 1."""
    print(f"static K={STATIC_K} (tuning off):")
    setup.measure("crossover", HIGH, STATIC)
    setup.measure("crossover", LOW, STATIC)


@once
def tuned_at_low_load(setup: Setup) -> dict:
    """Tuning on under low load: the first change, its rollout (a new engine) and its verification."""
    static_figures(setup)
    first = {pod.name for pod in setup.pods("crossover")}
    started = time.monotonic()
    with ClosedLoop(setup.endpoints("crossover"), PROMPT, concurrency=LOW, max_tokens=128,
                    think_seconds=THINK) as load:
        setup.cluster.kubectl("-n", setup.namespace, "patch", "speculativeinference", "crossover", "--type=merge",
                              "-p", json.dumps({"spec": {"tuning": {"mode": "auto"}}}))
        changed = wait_for_resource(setup, "crossover", lambda r: tuning(r).get("applied"), timeout=180,
                                    what="a tuned config applied under low load")
        decision = next(d for d in tuning(changed)["history"] if d["action"] not in ("keep", "recommend"))
        print(f"change {time.monotonic() - started:.0f} s after tuning on: {decision['action']}: {decision['reason']}")
        rolled = wait_for_resource(setup, "crossover", rolled_out, timeout=ROLLOUT_TIMEOUT,
                                   what="the tuned config rolled out")
        new = [pod for pod in setup.pods("crossover") if pod.name not in first]
        print(f"rolled out {time.monotonic() - started:.0f} s after tuning on: {rolled['status']['effective']}")

        def verified(r: dict) -> bool:
            # judged, and what that left applied runs (a rollback is a rollout too: the high-load
            # story must not start while it still starts an engine)
            state = json.loads(tuning(r).get("policyState") or "{}")
            return (tuning(r).get("realisedGain") is not None and state.get("pending") is None
                    and condition(r, "Tuned").get("reason") not in SETTLING and rolled_out(r))

        checked = wait_for_resource(setup, "crossover", verified, timeout=180 + ROLLOUT_TIMEOUT,
                                    what="the change verified (and a rollback rolled out)")
    print(f"verified {time.monotonic() - started:.0f} s after tuning on: predicted {decision['predictedGain']:+.1%}, "
          f"realised {tuning(checked)['realisedGain']:+.1%} (status.tuning.realisedGain)")
    return {"changed": changed, "decision": decision, "new": new, "checked": checked, "failed": list(load.failed),
            "new_log": Path(new[0].record.log).read_text() if new else ""}



def test_acceptance_collapse_switches_speculation_off_and_keeps_serving(setup):
    story = collapse_story(setup)
    degraded = condition(story["collapsed"], "TuningDegraded")
    print(f"collapse detected {story['detected_s']:.0f} s after load started: {degraded['message']}")
    assert degraded["status"] == "True"
    assert tuning(story["collapsed"])["lastDecision"]["action"] == "disable"
    metrics = story["collapsed"]["status"].get("metrics") or {}
    print(f"acceptance per position {metrics.get('perPositionAcceptance')}, overall {metrics.get('acceptanceRate')}")
    assert (metrics.get("perPositionAcceptance") or [1.0])[0] < 0.05  # from vLLM's own counters
    assert "--speculative-config" in story["command_before"]
    assert "specinfer runtime: exec vllm serve" in story["new_log"] and "--speculative-config" not in story["new_log"]
    assert story["after"]["status"]["effective"]["method"] == "none"
    assert condition(story["after"], "Ready").get("status") == "True"
    print(f"rolled to no speculation {story['rolled_s']:.0f} s after load started; completions served "
          f"{story['ok']}, failed {len(story['failed'])}: {story['failed'][:2]}")
    assert not story["failed"]  # Surge: the old engine served until the new one answered


def test_the_tuner_changes_the_draft_length_and_verifies_the_gain(setup):
    story = tuned_at_low_load(setup)
    assert story["decision"]["action"] in ("setK", "setSchedule")
    assert applied_k_at(story["changed"], LOW) != STATIC_K, "K changed at today's batch size"
    assert story["new"], "the rollout restarts the engine in a new pod"
    assert "specinfer runtime: exec vllm serve" in story["new_log"] and "num_speculative_tokens" in story["new_log"]
    # Verified: a realised gain in status. Whether it confirms the change is the engine's to say: on
    # these two shared cores the same K=2 -> K=4 change at batch 1 realised -17.9% to +1.9% over runs
    # (two engines with one config differ by up to 20%), and a rollback is the verification working.
    assert isinstance(tuning(story["checked"])["realisedGain"], float)
    assert tuning(story["checked"])["lastDecision"]["action"] in ("keep", "rollback")
    assert not story["failed"], story["failed"][:3]


@once
def high_load_story(setup: Setup) -> dict:
    """After the low-load change: high load until the tuner has decided under it and what it applied
    runs; then goodput of that config against no speculation, alternating engines."""
    collapse_story(setup)  # its engine, now without speculation, is the reference
    tuned_at_low_load(setup)
    print("tuned config at low load:")
    setup.measure("crossover", LOW, TUNED)
    started, since = time.monotonic(), time.time()
    with ClosedLoop(setup.endpoints("crossover"), PROMPT, concurrency=HIGH, max_tokens=128) as load:
        def decided_at_high_load(r: dict) -> bool:
            # a decision taken under this load (keep or change), and what it applied rolled out
            batch = ((r.get("status") or {}).get("metrics") or {}).get("meanBatchSize") or 0
            last = tuning(r).get("lastDecision") or {}
            taken = (parse_rfc3339(last.get("time")) or 0) > since + OPERATOR_CONFIG["tuning"]["windowSeconds"]
            return (batch >= HIGH / 2 and taken and rolled_out(r)
                    and condition(r, "Tuned").get("reason") not in SETTLING | NOT_YET_DECIDED)

        tuned = wait_for_resource(setup, "crossover", decided_at_high_load, timeout=ROLLOUT_TIMEOUT,
                                  what="a decision under high load, rolled out")
    print(f"high load (mean batch {tuned['status']['metrics']['meanBatchSize']}) after "
          f"{time.monotonic() - started:.0f} s: applied {tuning(tuned)['applied']}; the tuner's decisions:\n"
          f"{decisions(tuned)}")
    print("high load, alternating engines (the idle one waits):")
    for _ in range(3):
        setup.measure("crossover", HIGH, TUNED)
        setup.measure("collapse", HIGH, NONE)
    setup.measure("collapse", LOW, NONE)
    print("\nreal vLLM CPU engine, tiny models, generated tokens/s (vllm:generation_tokens_total):")
    for concurrency in (LOW, HIGH):
        base = setup.mean(NONE, concurrency)
        for label in (NONE, STATIC, TUNED):
            rate = setup.mean(label, concurrency)
            print(f"  batch {concurrency:>2}  {label:<32} {rate:7.0f}  {rate / base:.2f}x")
    return {"tuned": tuned, "failed": list(load.failed), "since": since}


def test_the_crossover_live(setup):
    """Under low load the tuner programs a schedule that drafts at small batch sizes and less at large
    ones; under high load it decides again from what it measures there, stops drafting at the
    high-load batch size, and keeps serving.

    Why not K = 0 ranges at low load: in vLLM a schedule's K = 0 step still runs the drafter's first
    pass (llm_base_proposer.py), and with the target as its own draft that pass is as long as a
    plain step, so inside a schedule a short K earns more than K = 0 for an always-right draft. Not
    drafting at all means speculation off, which pays only once the load is high.

    What each config earns is printed, not asserted here: on these two shared cores two engines with
    the same config differ by up to 15% between rounds, as much as the always-right draft's gain at
    batch 1 or its loss at batch 64 on the live engine (0.88x-1.7x and 0.71x-0.96x over four runs).
    The offline step times, where the crossover is clear, are in docs/simulator.md (bench engine-cpu)."""
    schedule = tuned_at_low_load(setup)["changed"]
    print(f"schedule programmed under low load: {tuning(schedule)['applied']}")
    at_low = applied_k_at(schedule, LOW) or 0
    assert at_low > 0, "drafts at small batch sizes"
    assert (applied_k_at(schedule, HIGH) or 0) < at_low, "drafts less at the high-load batch size"
    story = high_load_story(setup)
    assert not story["failed"], story["failed"][:3]
    assert condition(story["tuned"], "Ready").get("status") == "True"
    assert (applied_k_at(story["tuned"], HIGH) or 0) == 0, \
        f"still drafting at batch {HIGH} after deciding under high load:\n{decisions(story['tuned'])}"
    # Issue 25: no change on a window that straddles the ramp from 1 to 64 requests (a mean batch in
    # between): the policy waits for a window of the new load, and acts on what it measured there.
    means = [float(m.group(1)) for d in tuning(story["tuned"]).get("history") or []
             if d["action"] not in ("keep", "recommend") and (parse_rfc3339(d.get("time")) or 0) > story["since"]
             and (m := re.search(r"\(mean ([0-9.]+)\)", d.get("reason") or ""))]
    assert all(mean >= HIGH / 2 for mean in means), f"a change decided mid-ramp:\n{decisions(story['tuned'])}"


def test_goodput_at_high_load_is_at_least_no_speculations(setup):
    high_load_story(setup)
    # within the spread of two engines with the same config (15%)
    assert setup.mean(TUNED, HIGH) >= 0.85 * setup.mean(NONE, HIGH)
