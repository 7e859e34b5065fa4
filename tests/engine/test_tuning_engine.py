"""The tuner against the real vLLM CPU engine (issues 18, 22): decisions from the engine's own counters,
applied in place to the running engine where the engine allows it, rolled out by restarting it where not.

Real control plane, `specinfer operator` with the tuning loop on the demo's short clocks, Debian's
Prometheus, and the pod runner running `specinfer runtime` -> `vllm serve` in the engine
environment. Two resources, started together, serve every test of the module (engine starts are
the slow part: ~1-3 minutes each on two shared cores):

  collapse   dflash with the random DFlash drafter of `specinfer models make` (dflash-random:
             acceptance 0), tuning auto: the tuner must switch speculation off (TuningDegraded=True
             AcceptanceCollapsed), the Deployment roll to a config without --speculative-config, and
             completions keep being served -- a seed method's collapse on the real engine (issue 23);
             afterwards it is the no-speculation reference engine for the crossover figures;
  crossover  draftModel with the target as its own draft (always right), K=2, tuning auto from the
             start -- so its engine is retuned in place: started with K up to 4, following the
             schedule the operator publishes -- but paused (spec.tuning.paused) while the
             static config is measured at batch 1 and 64 and while 20 schedules published by hand
             measure how long a change takes to be in force in the engine. Then tuning resumes
             under low load: the tuner programs a schedule (drafting at small batch sizes, not at
             large ones), the same engine process takes it (no new pod, no restart), and the change
             is verified with a realised gain; then high load: the tuner decides from what it
             measures there, and goodput at high load is at least no speculation's.

Goodput is vLLM's own `vllm:generation_tokens_total` per second, read from the pod, with one
engine loaded at a time (the other idles), alternating rounds so that drift in the shared
machine's speed hits both sides.
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes.client import CustomObjectsApi

from specinfer.api import parse_spec
from specinfer.api.resource import GROUP, PLURAL, VERSION
from specinfer.api.timestamps import parse_rfc3339, rfc3339
from specinfer.dev.cluster.atomic_volume import DATA
from specinfer.dev.demo.real_engine import MAX_BATCH, OPERATOR_CONFIG
from specinfer.dev.demo.stack import Stack
from specinfer.operator.tuner.policy import PolicyState, decide_json
from specinfer.operator.tuner.policy.forecast import measured_speed, window_forecast_json
from specinfer.operator.tuner.policy.observation import parse_observation
from specinfer.operator.tuner.policy.support import DRAFTING_UNMEASURED
from specinfer.operator.tuner.policy.verification import CALIBRATION_WEIGHT, measured_noise
from specinfer.operator.tuner.recording import read_records
from specinfer.runtime.contract.live_schedule.envelope import live_envelope, own_ranges, ranges_of
from specinfer.runtime.contract.live_schedule.published import schedule_digest
from specinfer.runtime.methods.schedule import effective_k
from tests.engine.engine_client import ROLLOUT_THINK, ClosedLoop, Metrics, minus, per_position
from tests.engine.machine_speed import MachineSpeed
from tests.support import condition, wait_for

# measures_speed: what it asserts are the tuner's decisions on speeds measured here, so `make test` runs it
# alone (beside other work the tuner chose configs the story does not expect, 2026-12-04)
pytestmark = [pytest.mark.engine, pytest.mark.measures_speed, pytest.mark.timeout(1200)]  # engine starts: minutes

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
# A hold whose predicted gain is inside the step times' measured noise (guards.required_gain): the policy
# has not judged the load yet, it waits for windows that narrow the noise (Tuned says WithinThreshold for
# it as for the hysteresis, so the reason's words tell them apart)
NOISE_HOLD = "below the measurement noise"
# A change that programs only the batch sizes not served now (decide.py's schedule published ahead, the look-ahead)
LOOK_AHEAD = "nothing changes at today's batch sizes"
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
PROPAGATION_CHANGES = 20
# Goodput at high load against no speculation (median of paired rounds): a config that still drafts must
# earn it within two same-config engines' spread; a switched-off one is that config, so the bound is only
# that it serves: two engines of one config measured a median of 0.66x on a quiet machine (2026-12-02:
# rounds 0.66, 1.10, 0.65; the tuned one 6.1k, 9.3k, 5.5k tokens/s from round to round)
SPECULATING_BOUND, SAME_CONFIG_BOUND = 0.85, 0.5
IN_FORCE_TIMEOUT = 30  # seconds from a published schedule to the engine running it (measured: ~1-3 s)
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
# Schedules published by hand, in turn (consecutive ones differ), within the engine's K_MAX
HAND_SCHEDULES = (
    {"numSpeculativeTokens": 1},
    {"numSpeculativeTokens": K_MAX},
    {"numSpeculativeTokens": 3, "schedule": [{"minBatchSize": 1, "maxBatchSize": 1, "numSpeculativeTokens": 3},
                                             {"minBatchSize": 2, "maxBatchSize": 64, "numSpeculativeTokens": 1}]},
    {"numSpeculativeTokens": 2},
)


def pace_while_an_engine_starts(setup: Setup, name: str, load: ClosedLoop, think: float) -> None:
    """The clients every ROLLOUT_THINK seconds while a new engine of `name` starts, at `think` otherwise."""
    starting = any(pod.labels.get("specinfer.io/name") == name and not pod.ready and pod.terminating_since is None
                   for pod in (setup.stack.runner.pods.values() if setup.stack.runner else ()))
    load.think_seconds = ROLLOUT_THINK if starting else think


def resource(namespace: str, name: str, models: Path, speculation: dict, *, mode: str, k_max: int,
             paused: bool = False) -> dict:
    return {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"model": {"name": str(models / "target"), "servedModelName": "tiny"},
                     "speculation": speculation,
                     "hardware": {"accelerator": "cpu"},
                     # no --shutdown-timeout: the operator renders vLLM's drain, and a rollout must lose
                     # no request with it alone
                     "runtime": {"engine": "vllm", "extraArgs": ["--max-num-seqs", str(MAX_BATCH)],
                                 "env": [{"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"},
                                         {"name": "VLLM_LOG_STATS_INTERVAL", "value": "1"}]},
                     "tuning": {"mode": mode, "paused": paused, "intervalSeconds": 5, "minSamples": 200,
                                "minNumSpeculativeTokens": 0,
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
    def __init__(self, cluster, namespace: str, stack: Stack, ticks: Path, machine: MachineSpeed):
        self.cluster, self.namespace, self.stack = cluster, namespace, stack
        self.ticks = ticks  # the operator's tick records: every decision's input (tuning.recordFile)
        self.machine = machine  # how fast the shared cores ran a fixed piece of work, throughout
        self.custom_objects = CustomObjectsApi(cluster.api_client())
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
    """The pods run what the tuner applied, and no rollout is under way: rendered (status.effective)
    and, for an engine retuned in place, running in every engine (status.tuning.inForce, the engines'
    own word)."""
    applied, effective = tuning(resource).get("applied"), (resource.get("status") or {}).get("effective") or {}
    live = effective.get("liveSchedule")
    in_force = live is None or (tuning(resource).get("inForce") or {}).get("digest") == live["digest"]
    return (applied is not None and condition(resource, "Ready").get("status") == "True"
            and condition(resource, "Progressing").get("status") != "True"
            and effective.get("numSpeculativeTokens") == applied["numSpeculativeTokens"]
            and (effective.get("schedule") or None) == (applied.get("schedule") or None) and in_force)


def digest_of(choice: dict) -> str:
    """The digest the operator publishes for a K or a schedule (what the engine reports running)."""
    schedule = [(e["minBatchSize"], e["maxBatchSize"], e["numSpeculativeTokens"]) for e in choice.get("schedule") or []]
    return schedule_digest(ranges_of(choice["numSpeculativeTokens"], schedule or None))


def live_schedule(url: str) -> tuple[str | None, float]:
    """The digest the engine reports running and when it took it (its specinfer:live_schedule_* series)."""
    metrics = Metrics.scrape(url)
    digests = [d for d, v in metrics.by("specinfer:live_schedule_info", "digest").items() if v == 1]
    taken = metrics.total("specinfer:live_schedule_applied_timestamp_seconds")
    return (digests[0] if len(digests) == 1 else None), taken


def engine_process(setup: Setup, name: str) -> tuple[str, int, int]:
    """(pod, engine process id, restartCount): what an in-place change must leave alone."""
    pods = setup.pods(name)
    assert len(pods) == 1, [p.name for p in pods]
    pod = json.loads(setup.cluster.kubectl("-n", setup.namespace, "get", "pod", pods[0].name, "-o", "json").stdout)
    restarts = sum(s.get("restartCount", 0) for s in (pod.get("status") or {}).get("containerStatuses") or [])
    return pods[0].name, pods[0].record.pid, restarts


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
    with MachineSpeed() as machine:  # the story's machine speed, read by the forecast check
        state = Setup(cluster, namespace, stack, ticks, machine)
        try:
            started = time.monotonic()
            cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
                resource(namespace, "collapse", tiny_models, {
                    "method": "dflash", "draftModel": {"name": str(tiny_models / "dflash-random")},
                    "numSpeculativeTokens": 3}, mode="auto", k_max=4),
                resource(namespace, "crossover", tiny_models, {
                    "method": "draftModel", "draftModel": {"name": str(tiny_models / "draft-same")},
                    "numSpeculativeTokens": STATIC_K}, mode="auto", k_max=K_MAX, paused=True)]))
            wait_for(lambda: state.pods("collapse") and state.pods("crossover"), timeout=STARTUP_TIMEOUT,
                     interval=2, what="both engines serving", why=state.pod_logs)
            print(f"both engines ready {time.monotonic() - started:.0f} s after apply")
            yield state
        finally:
            operator_log = Path(stack.operator.log).read_text()[-4000:] if stack.operator else ""
            stack.stop()
            cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
            print(f"--- operator log tail ---\n{operator_log}")


def verification_verdicts(ticks: Path, name: str, until: float) -> dict[float, tuple[float, float, bool]]:
    """Every verification of a change decided by `until`, from the operator's tick records, by the time the
    change was decided: (realised gain, the threshold verification judged it against, whether it rolled the
    change back). A change accepted may be followed in the same tick by the next change (its own pending).

    The threshold is the error verification.py states for a realised gain: a change is rolled back when
    it realised less than -(rollbackTolerance + margin), margin = 2 sigma sqrt(1/windows + w/(2 - w)),
    sigma the step times' measured window-to-window noise after that window, `windows` the windows
    verified, w the calibration's smoothing weight. The verdict's tick is replayed through the pure
    policy (the operator's own code) to read sigma and the windows exactly as it judged."""
    verdicts: dict[float, tuple[float, float, bool]] = {}
    for record in read_records(ticks, name):
        before = record["state"] or {}
        if not before.get("pending") or float(record["now"]) > until + 1:
            continue
        decision, after = decide_json(record["observation"], record["tuning"], before, float(record["now"]))
        assert (decision["action"], decision.get("config")) == (record["decision"]["action"],
                                                               record["decision"].get("config")), record["now"]
        rolled_back = decision["action"] == "rollback" or "rolling back" in decision["reason"]
        judged = before["pending"]
        still = after.get("pending") is not None and after["pending"]["at"] == judged["at"]
        if still or not (rolled_back or after.get("realised_gain") != before.get("realised_gain")):
            continue  # still verifying, or the change was dropped unjudged (the load moved, never applied)
        sigma = measured_noise(PolicyState.from_json(after))
        windows = judged["windows"] + 1
        margin = 2 * sigma * math.sqrt(1 / windows + CALIBRATION_WEIGHT / (2 - CALIBRATION_WEIGHT))
        verdicts[float(judged["at"])] = (float(after["realised_gain"]),
                                         -(record["tuning"]["rollbackTolerance"] + margin), rolled_back)
    assert verdicts, f"no verification of a change in {ticks} for {name}"
    return verdicts


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
    """Load on the random DFlash drafter until the tuner has switched speculation off and the new
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
        load.think_seconds = ROLLOUT_THINK
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
    """The always-right draft at its static K (the tuner paused): batch 64, then batch 1."""
    print(f"static K={STATIC_K} (tuning paused):")
    setup.measure("crossover", HIGH, STATIC)
    setup.measure("crossover", LOW, STATIC)


def publish_by_hand(setup: Setup, choice: dict | None) -> None:
    """Write status.tuning.applied as the tuner does, through an API client as it does (None: remove it,
    the spec's own config renders). Not kubectl: a process start is no part of the path, and took up
    to 8 s of it on this machine under load (2026-12-03)."""
    # a merge patch keeps keys it does not name: say `schedule: null` where a choice has none
    applied = None if choice is None else {"method": "draftModel", "since": rfc3339(time.time()), "path": "inPlace",
                                           "schedule": None, **choice}
    setup.custom_objects.patch_namespaced_custom_object_status(
        GROUP, VERSION, setup.namespace, PLURAL, "crossover", {"status": {"tuning": {"applied": applied}}},
        field_manager="specinfer-engine-test", _content_type="application/merge-patch+json", _request_timeout=60)


def configmap_writes(setup: Setup, name: str) -> list[float]:
    """When the operator applied the ConfigMap `name` (its log lines, kopf's local-time stamps)."""
    log = Path(setup.stack.operator.log).read_text() if setup.stack.operator else ""
    pattern = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\].*applied ConfigMap "
                         + re.escape(f"{setup.namespace}/{name} ") + r"\(updated\)", re.MULTILINE)
    return [time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(ms) / 1000
            for stamp, ms in pattern.findall(log)]


def volume_swapped(setup: Setup, name: str, volume: str) -> float | None:
    """When the pod runner last swapped the volume `volume` of `name`'s pod (its `..data` link, renamed
    over by each update as the kubelet's atomic writer does)."""
    for pod in setup.pods(name):
        for projected in pod.volumes:
            if projected.folder.name == volume:
                try:
                    return (projected.folder / DATA).lstat().st_mtime
                except OSError:
                    return None
    return None


def stages(written: float, patched: float, configmap: list[float], swapped: float | None, taken: float) -> dict:
    """One change's way, seconds after its status write began: the write returned, the operator applied the
    ConfigMap (sometimes before the write's answer arrived), the pod runner swapped the volume (a kubelet,
    on a cluster), the engine took it at its next check between steps."""
    applied = min((t for t in configmap if t >= written - 0.002), default=None)  # the log's stamps: whole ms
    return {"write returned": patched - written,
            "ConfigMap applied": None if applied is None else applied - written,
            "volume swapped": None if swapped is None else swapped - written,
            "in force": taken - written}


@once
def propagation(setup: Setup) -> dict:
    """20 schedules published by hand to the paused tuner's engine, each timed from the write of
    status.tuning.applied to the engine's scheduler running it (its own timestamp), under load."""
    static_figures(setup)
    assert "--scheduler-cls" in setup.engine_command("crossover")
    process = engine_process(setup, "crossover")
    url = setup.endpoints("crossover")()[0]
    delays: list[float] = []
    breakdown: list[dict] = []
    counts: dict[str, list[float]] = {}
    with ClosedLoop(setup.endpoints("crossover"), PROMPT, concurrency=2, max_tokens=32) as load:
        for index in range(PROPAGATION_CHANGES):
            choice = HAND_SCHEDULES[index % len(HAND_SCHEDULES)]
            digest, written = digest_of(choice), time.time()
            publish_by_hand(setup, choice)
            patched = time.time()
            _, taken = wait_for(lambda digest=digest: (running := live_schedule(url))[0] == digest and running,
                                interval=0.2,
                                timeout=IN_FORCE_TIMEOUT, what=f"the engine running schedule {digest} ({choice})",
                                why=setup.pod_logs)
            delays.append(taken - written)
            breakdown.append(stages(written, patched, configmap_writes(setup, "crossover-schedule"),
                                    volume_swapped(setup, "crossover", "live-schedule"), taken))
            if index >= PROPAGATION_CHANGES - len(HAND_SCHEDULES):  # the last round: what each schedule drafts
                before = per_position(Metrics.scrape(url), "vllm:spec_decode_num_accepted_tokens_per_pos_total")
                time.sleep(4)
                after = per_position(Metrics.scrape(url), "vllm:spec_decode_num_accepted_tokens_per_pos_total")
                counts[json.dumps(choice)] = minus(after, before)
        publish_by_hand(setup, None)  # back to the spec's own choice for the tuner's story
        spec = parse_spec(setup.si("crossover")["spec"])
        own = schedule_digest(own_ranges(spec, live_envelope(spec)))  # what the operator publishes before tuning
        wait_for(lambda: live_schedule(url)[0] == own, interval=0.5, timeout=IN_FORCE_TIMEOUT,
                 what="the spec's own schedule in force again")
    ordered = sorted(delays)
    p50, p95 = ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    print(f"published -> in force in the engine, {len(delays)} changes: p50 {p50:.2f} s, p95 {p95:.2f} s, "
          f"max {ordered[-1]:.2f} s")
    for index, parts in enumerate(breakdown):
        print(f"  change {index + 1:>2}: " + ", ".join(
            f"{stage} +{'?' if seconds is None else f'{seconds:.2f}'} s" for stage, seconds in parts.items()))
    for choice, accepted in counts.items():
        print(f"  accepted per position in 4 s under {choice}: {[round(a) for a in accepted]}")
    return {"delays": delays, "breakdown": breakdown, "p50": p50, "p95": p95, "counts": counts, "before": process,
            "after": engine_process(setup, "crossover"), "failed": list(load.failed)}


def _read_from(log: Path, offset: int) -> str:
    """What `log` gained past `offset` bytes."""
    with log.open("rb") as handle:
        handle.seek(offset)
        return handle.read().decode(errors="replace")


def _gained(logs: dict[Path, int], line: str, *, timeout: float) -> str:
    """What `logs` gained past their offsets, as soon as that holds `line` (at most `timeout` seconds: the
    engine logs a swap just after it reports it)."""
    deadline = time.monotonic() + timeout
    while True:
        text = "\n".join(_read_from(log, offset) for log, offset in logs.items() if log.exists())
        if line in text or time.monotonic() > deadline:
            return text
        time.sleep(0.5)


@once
def tuned_at_low_load(setup: Setup) -> dict:
    """Tuning resumed under low load: the first change, applied in place, and its verification."""
    propagation(setup)
    first = {pod.name for pod in setup.pods("crossover")}
    # the log of the engine that takes the change, kept by path (a rollback that rolls out may replace its pod)
    # and by size: propagation's swaps logged "live schedule: now" already, the tuner's change must log its own
    first_logs = {Path(pod.record.log): Path(pod.record.log).stat().st_size for pod in setup.pods("crossover")}
    process = engine_process(setup, "crossover")
    started, tuning_on = time.monotonic(), time.time()
    with ClosedLoop(setup.endpoints("crossover"), PROMPT, concurrency=LOW, max_tokens=128,
                    think_seconds=THINK) as load:
        setup.cluster.kubectl("-n", setup.namespace, "patch", "speculativeinference", "crossover", "--type=merge",
                              "-p", json.dumps({"spec": {"tuning": {"paused": False}}}))
        changed = wait_for_resource(setup, "crossover", lambda r: tuning(r).get("applied"), timeout=180,
                                    what="a tuned config applied under low load")
        decision = next(d for d in tuning(changed)["history"] if d["action"] not in ("keep", "recommend"))
        print(f"change {time.monotonic() - started:.0f} s after tuning on: {decision['action']}: {decision['reason']}")
        rolled = wait_for_resource(setup, "crossover", rolled_out, timeout=ROLLOUT_TIMEOUT,
                                   what="the tuned config in force")
        new = [pod for pod in setup.pods("crossover") if pod.name not in first]
        in_place = engine_process(setup, "crossover") if not new else None
        print(f"in force {time.monotonic() - started:.0f} s after tuning resumed: {rolled['status']['effective']}")
        # Read now, while the engine that took the change serves: a later decision that rolls out (a
        # rollback, or speculation off when this shared machine makes drafting slow) replaces its pod,
        # and the pod's log goes with it. The swap looked for is of the schedule in force, by its digest:
        # propagation's last swap may reach the log after its size was taken.
        digest = ((rolled["status"].get("effective") or {}).get("liveSchedule") or {}).get("digest")
        log = _gained(first_logs, f"(digest {digest})", timeout=15)
        pods_in_force = sorted(pod.name for pod in setup.pods("crossover"))

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
            "process": process, "in_place": in_place, "tuning_on": tuning_on,
            # the engine that took the change, read while it served (its pods listed too, for a failure's message)
            "log": log, "digest": digest, "pods_in_force": pods_in_force, "pods_before": sorted(first)}



def test_acceptance_collapse_switches_speculation_off_and_keeps_serving(setup):
    story = collapse_story(setup)
    degraded = condition(story["collapsed"], "TuningDegraded")
    print(f"collapse detected {story['detected_s']:.0f} s after load started: {degraded['message']}")
    assert degraded["status"] == "True"
    assert tuning(story["collapsed"])["lastDecision"]["action"] == "disable"
    metrics = story["collapsed"]["status"].get("metrics") or {}
    print(f"acceptance per position {metrics.get('perPositionAcceptance')}, overall {metrics.get('acceptanceRate')}")
    assert (metrics.get("perPositionAcceptance") or [1.0])[0] < 0.05  # from vLLM's own counters
    assert "--speculative-config" in story["command_before"] and '"method":"dflash"' in story["command_before"]
    assert "specinfer runtime: exec vllm serve" in story["new_log"] and "--speculative-config" not in story["new_log"]
    assert story["after"]["status"]["effective"]["method"] == "none"
    assert condition(story["after"], "Ready").get("status") == "True"
    print(f"rolled to no speculation {story['rolled_s']:.0f} s after load started; completions served "
          f"{story['ok']}, failed {len(story['failed'])}: {story['failed'][:2]}")
    assert not story["failed"]  # Surge: the old engine served until the new one answered


def test_a_published_schedule_is_in_force_within_seconds_without_a_restart(setup):
    story = propagation(setup)
    assert len(story["delays"]) >= PROPAGATION_CHANGES
    assert story["after"] == story["before"], "same pod, same engine process, no container restart"
    assert all(0 <= delay < IN_FORCE_TIMEOUT for delay in story["delays"]), story["breakdown"]
    # vLLM's own per-position counters follow each schedule: K=1 accepts nothing past position 0, the
    # engine's maximum K drafts (and, the draft being the target, accepts) at its last position
    k1 = story["counts"][json.dumps({"numSpeculativeTokens": 1})]
    top = story["counts"][json.dumps({"numSpeculativeTokens": K_MAX})]
    assert k1[0] > 0 and not any(k1[1:]), k1
    assert len(top) == K_MAX and top[K_MAX - 1] > 0, top
    assert not story["failed"], story["failed"][:3]


def test_the_tuner_changes_the_draft_length_in_place_and_verifies_the_gain(setup):
    story = tuned_at_low_load(setup)
    assert story["decision"]["action"] in ("setK", "setSchedule")
    assert story["decision"]["path"] == "inPlace", story["decision"]
    assert applied_k_at(story["changed"], LOW) != STATIC_K, "K changed at today's batch size"
    assert not story["new"] and story["in_place"] == story["process"], "the same engine process took the change"
    swaps = [line for line in story["log"].splitlines() if "live schedule: now" in line]
    assert any(f"(digest {story['digest']})" in line for line in swaps), \
        (story["digest"], story["pods_before"], story["pods_in_force"], story["log"][-4000:])
    # Verified: a realised gain in status, judged against the error the verification states for it.
    # Whether it confirms the change is the engine's to say: on these two shared cores the same K=2 -> K=4
    # change at batch 1 realised -17.9% to +1.9% over runs (two engines with one config differ by up to
    # 20%), so the realised gain is not held to the prediction; what must hold is the verdict: kept
    # when the realised gain is within the stated error of no loss, rolled back (in place) when below it,
    # and status shows the figure the verification judged. A change accepted may be followed in the same
    # tick by the next (seen in CI, 2026-12-06: speculation off, +4.8% predicted at batch 1 on these shared
    # cores, rolled back at -9.2%): status then shows the last verification's figure.
    checked = tuning(story["checked"])
    verdicts = verification_verdicts(setup.ticks, "crossover",
                                     parse_rfc3339(checked["lastDecision"]["time"]) or time.time())
    decided = parse_rfc3339(story["decision"]["time"])
    assert decided is not None, story["decision"]
    ours = [at for at in verdicts if abs(at - decided) <= 1.0]
    assert len(ours) == 1, (decided, verdicts, decisions(story["checked"]))
    realised, threshold, rolled_back = verdicts[ours[0]]
    print(f"realised {realised:+.1%} against a predicted {story['decision']['predictedGain']:+.1%}; rolled back "
          f"below {threshold:+.1%}: {'rolled back' if rolled_back else 'kept'}"
          f"{'' if len(verdicts) == 1 else f'; then {len(verdicts) - 1} more change(s) verified'}")
    assert checked["realisedGain"] == pytest.approx(verdicts[max(verdicts)][0], abs=1e-4)
    assert math.isfinite(realised) and -1 < realised and threshold < 0
    assert rolled_back == (realised < threshold), (realised, threshold, rolled_back)
    assert checked["lastDecision"]["action"] in ("keep", "rollback")
    if rolled_back:
        assert any(d["action"] == "rollback" and d.get("path") == "inPlace" for d in checked["history"]), \
            decisions(story["checked"])
    assert not story["failed"], story["failed"][:3]


def changes_since(resource: dict, since: float, *, mix_dependent_only: bool = False,
                  at_todays_sizes: bool = False) -> list[float]:
    """The mean batch size each change (not a hold) decided after `since` was decided at. With
    mix_dependent_only, only the changes whose worth depends on the load's mix: every change but a
    per-batch-size schedule published in place (issue 43: that one is right at every batch size, so it
    need not wait for a window of one load). With at_todays_sizes, only the changes of what today's
    batch sizes run: not a schedule published for the others ("nothing changes at today's batch sizes")."""
    def mix_dependent(d: dict) -> bool:
        return not (d["action"] == "setSchedule" and "(in place)" in (d.get("reason") or ""))

    def at_today(d: dict) -> bool:
        return LOOK_AHEAD not in (d.get("reason") or "")
    return [float(m.group(1)) for d in tuning(resource).get("history") or []
            if d["action"] not in ("keep", "recommend") and (parse_rfc3339(d.get("time")) or 0) > since
            and (not mix_dependent_only or mix_dependent(d)) and (not at_todays_sizes or at_today(d))
            and (m := re.search(r"\(mean ([0-9.]+)\)", d.get("reason") or ""))]


def undone_since(resource: dict, since: float) -> bool:
    """The latest change of today's batch sizes decided after `since` was rolled back by its verification (a loss
    measured): the load's decision is still to come. The history holds the newest entry first."""
    entries = [d for d in tuning(resource).get("history") or [] if (parse_rfc3339(d.get("time")) or 0) > since
               and d["action"] not in ("keep", "recommend")
               and (d["action"] == "rollback" or LOOK_AHEAD not in (d.get("reason") or ""))]
    return bool(entries) and entries[0]["action"] == "rollback"


@once
def high_load_story(setup: Setup) -> dict:
    """After the low-load change: high load until the tuner has decided under it and what it applied
    runs; then goodput of that config against no speculation, alternating engines."""
    collapse_story(setup)  # its engine, now without speculation, is the reference
    tuned_at_low_load(setup)
    print("tuned config at low load:")
    setup.measure("crossover", LOW, TUNED)
    # The low load's last change runs before the high load begins: one the tuner decided while the tuned config
    # was measured may still be rolling out (seen 2026-12-05: `disable` decided at low load, and the old engine
    # still drafting K=2 in the high load's first window)
    settled = wait_for_resource(setup, "crossover", lambda r: not tuning(r).get("applied") or rolled_out(r),
                                timeout=ROLLOUT_TIMEOUT, what="the low load's last change in force")
    # ... and no tick decides on a window of the low load once the high load has begun: an idle window first
    window = OPERATOR_CONFIG["tuning"]["windowSeconds"]
    time.sleep(window + 5)
    # A tick early in that idle window still sees the low load in its window and may decide: a rollout it takes
    # runs before the high load begins (CI run 56: `disable` decided then, and the old engine drafting K=4 through
    # the high load's first window while the test read speculation off). Not a change in place: an idle engine
    # takes a schedule at its next step, so it never reports one in force before the load comes
    settled = wait_for_resource(setup, "crossover",
                                lambda r: (tuning(r).get("applied") or {}).get("path") != "rollout" or rolled_out(r),
                                timeout=ROLLOUT_TIMEOUT, what="a rollout decided in the idle window in force")
    started, since = time.monotonic(), time.time()
    # what the tuner had applied when the high load began: low load may have ended with speculation off
    applied_before = tuning(settled).get("applied") or {}
    process = engine_process(setup, "crossover")
    url = setup.endpoints("crossover")()[0]
    with ClosedLoop(setup.endpoints("crossover"), PROMPT, concurrency=HIGH, max_tokens=128) as load:
        # The high load's first window, before the tuner has decided on it: what the schedule published at low
        # load drafts here, from the engine's own counters (the always-right draft accepts what it drafts)
        time.sleep(3)  # every client has a request running
        names = ("vllm:generation_tokens_total", ACCEPTED_PER_POSITION)
        before = Metrics.scrape(url)
        time.sleep(window)
        after = Metrics.scrape(url)
        first_window = {"generated": after.total(names[0]) - before.total(names[0]),
                        "accepted": minus(per_position(after, names[1]), per_position(before, names[1])),
                        "same_engine": engine_process(setup, "crossover") == process,
                        # what the tuner had applied by the window's end: a schedule in place may change on the ramp
                        "applied_after": tuning(setup.si("crossover")).get("applied") or {},
                        "ended": time.time()}

        def decided_at_high_load(r: dict) -> bool:
            # a decision taken under this load, and what it applied rolled out. A hold below the
            # measurement noise is not one yet: the first windows of a new load carry the ramp's spread,
            # and the estimate narrows window by window (seen: 14.7% -> 8.7% in four, then `disable`
            # +9.8% -- the test had measured the config before it, 0.78x of no speculation). Once a
            # change taken under this load has rolled out and been judged, any hold is the decision
            # (after a switch off the clients' own pace moves the batch mean: seen 20-47 at 64 clients)
            pace_while_an_engine_starts(setup, "crossover", load, 0.0)
            batch = ((r.get("status") or {}).get("metrics") or {}).get("meanBatchSize") or 0
            last = tuning(r).get("lastDecision") or {}
            reason = condition(r, "Tuned").get("reason")
            if not rolled_out(r) or reason in SETTLING:
                return False
            # nothing pending: the change was judged, or its verification ended (the load moved) or
            # had nothing to judge (a look-ahead change)
            not_verifying = json.loads(tuning(r).get("policyState") or "{}").get("pending") is None
            # a schedule published for the other batch sizes is no decision on this load (seen beside heavy
            # work: one ended the wait while the policy still held K=4 at batch 64 for the noise, 0.41x)
            # ... nor one its verification rolled back (CI run 49: K=1 at batch 64 measured -10% and undone, the
            # wait ended on it while the policy held K=4 there for the noise and the test measured 0.47x; the
            # operator rolled a change out five seconds later)
            if not_verifying and changes_since(r, since + window, at_todays_sizes=True) \
                    and not undone_since(r, since + window):
                return True
            taken = (parse_rfc3339(last.get("time")) or 0) > since + window
            if batch >= HIGH / 2 and taken and DRAFTING_UNMEASURED in (last.get("reason") or ""):
                return True  # low load ended with speculation off, and it stays off: no window here measures drafting
            return (batch >= HIGH / 2 and taken and NOISE_HOLD not in (last.get("reason") or "")
                    and reason not in NOT_YET_DECIDED)

        # up to two rollouts: a switch-off measured worse than K=4 is rolled back (seen: realised -22%)
        tuned = wait_for_resource(setup, "crossover", decided_at_high_load, timeout=2 * ROLLOUT_TIMEOUT,
                                  what="a decision under high load, rolled out")
        # ... and until the tuner has observed a whole window of one config in it, the forecast check's: a hold
        # that keeps speculation off (low load ended with it off) is the decision within the first window
        wait_for(lambda: observed_one_config(setup.ticks, "crossover", since, window), timeout=ROLLOUT_TIMEOUT,
                 interval=1, what="a window of one config observed in the high load")
        high_ended = time.time()
    print(f"high load (mean batch {tuned['status']['metrics']['meanBatchSize']}) after "
          f"{time.monotonic() - started:.0f} s: applied {tuning(tuned)['applied']}; the tuner's decisions:\n"
          f"{decisions(tuned)}")
    print("high load, alternating engines (the idle one waits):")
    # each round's ratio is of two measurements seconds apart: the median of the rounds' ratios is not
    # moved by one round that other work on the shared cores slowed
    ratios = [setup.measure("crossover", HIGH, TUNED) / setup.measure("collapse", HIGH, NONE) for _ in range(3)]
    setup.measure("collapse", LOW, NONE)
    print("\nreal vLLM CPU engine, tiny models, generated tokens/s (vllm:generation_tokens_total):")
    for concurrency in (LOW, HIGH):
        base = setup.mean(NONE, concurrency)
        for label in (NONE, STATIC, TUNED):
            rate = setup.mean(label, concurrency)
            print(f"  batch {concurrency:>2}  {label:<32} {rate:7.0f}  {rate / base:.2f}x")
    print(f"  batch {HIGH} tuned / no speculation per round: {', '.join(f'{r:.2f}' for r in ratios)}")
    return {"tuned": tuned, "failed": list(load.failed), "since": since, "ratios": ratios,
            "applied_before": applied_before, "first_window": first_window, "high_ended": high_ended,
            "tuning_on": tuned_at_low_load(setup)["tuning_on"]}


def test_the_crossover_live(setup):
    """Under low load the tuner programs a schedule that drafts at small batch sizes and less at large
    ones; under high load it decides again from what it measures there -- a change at the high-load
    batch size, on a window of that load -- and keeps serving.

    Which config it lands on at batch 64 is the engine's to say, not the test's: the low-load schedule's
    K=2 there earns 0.64x of no speculation, while K=4 (one drafter pass amortised over more tokens)
    and speculation off are within each other's noise on these cores (K=4 measured 0.98x in one run;
    the policy then kept it, in another it switched off). That it earns at least about what no
    speculation does is test_goodput_at_high_load_is_at_least_no_speculations.

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
    # Issue 25: no change whose worth depends on the load's mix (one K for all batch sizes, speculation
    # off, any rollout) on a window that straddles the ramp from 1 to 64 requests (a mean batch in
    # between): the policy waits for a window of the new load, and acts on what it measured there.
    # A per-batch-size schedule in place is the exception (issue 43: the ramp does not change what is best
    # at each batch size; seen 2026-12-05: setSchedule in place at mean 30.0, then `disable` at 63.4).
    # A tick in the load's first seconds still decides on a window of the low load before it (mean ~1: seen
    # 2026-12-04, `disable` at mean 1.0 one second in, the low-load story's K=2 measured 0.87x of none): that
    # is no window of the ramp
    mixed = changes_since(story["tuned"], story["since"], mix_dependent_only=True)
    assert all(mean >= HIGH / 2 or mean < LOW + 0.5 for mean in mixed), \
        f"a change that depends on the load's mix decided mid-ramp:\n{decisions(story['tuned'])}"
    means = changes_since(story["tuned"], story["since"])
    # ... and it does act there: what the low-load schedule drafts at batch 64 (K=2: 0.64x of no
    # speculation) is changed, on a window of the high load -- unless the low load's own later decisions
    # already changed it, and the high load's window (the story waits for a decision taken on one) keeps
    # that: low load ending with speculation off (measured slower than none at batch 1 beside other work:
    # static K=2 0.78x on 2026-12-04), or a schedule published in place for the other batch sizes (seen
    # 2026-12-06 beside bench runs: K=4 at every batch size decided at mean 1.0 -- this drafter drafts the
    # engine's startup K=4 on every step whatever it verifies -- then `keep: K=4 is already the best config`
    # at mean 59, 1.04x of no speculation)
    before_at_high = applied_k_at({"status": {"tuning": {"applied": story["applied_before"]}}}, HIGH)
    changed_before = before_at_high != applied_k_at(schedule, HIGH)
    assert means or changed_before, f"no change under high load:\n{decisions(story['tuned'])}"


def startup_applied(spec) -> dict:
    """The startup schedule the operator publishes for an engine retuned in place, as status.tuning.applied."""
    ranges = own_ranges(spec, live_envelope(spec))
    return {"numSpeculativeTokens": max(k for _, _, k in ranges),
            "schedule": [{"minBatchSize": s, "maxBatchSize": e, "numSpeculativeTokens": k} for s, e, k in ranges]}


def one_config_window(ticks: Path, name: str, since: float, until: float, window: float) -> dict | None:
    """The first tick record whose window lies wholly inside the high load (the ramp's seconds excluded) and
    ran one config (seen: a schedule published in place 10 s into a 15 s window, which ran both), or None."""
    return next((r for r in read_records(ticks, name) if since + window + 3 <= float(r["now"]) <= until
                 and not r["observation"].get("rolloutInProgress")
                 and float(r["observation"]["applied"].get("since") or 0) <= float(r["now"]) - window), None)


def observed_one_config(ticks: Path, name: str, since: float, window: float) -> bool:
    """`one_config_window` up to now, while the operator still appends (a line half written is not yet one)."""
    try:
        return one_config_window(ticks, name, since, time.time(), window) is not None
    except ValueError:
        return False


def first_high_window(ticks: Path, name: str, since: float, until: float, window: float) -> tuple[dict, dict]:
    """From the operator's tick records: the state the tuner held when the high load began (what the low load
    taught it) and the first window of one config it observed inside the high load."""
    held = next(r for r in read_records(ticks, name) if float(r["now"]) >= since)["state"]
    observed = one_config_window(ticks, name, since, until, window)
    assert observed is not None, "the tuner observed no window of one config, without a rollout, in the high load"
    return held, observed


def learnt_windows(ticks: Path, name: str, since: float, until: float, window: float) -> list[tuple[float, float]]:
    """The windows the tuner learnt from between two unix times: each tick's window that served steps and
    no rollout (an engine starting beside the old one is another machine)."""
    return [(float(r["now"]) - window, float(r["now"])) for r in read_records(ticks, name)
            if since <= float(r["now"]) <= until and not r["observation"].get("rolloutInProgress")
            and parse_observation(r["observation"]).sequence_steps > 0]


def test_the_schedule_published_at_low_load_drafts_less_at_high_load_as_the_tuner_expected(setup):
    """Issue 43: the schedule in force when the high load comes drafts at the high load's batch sizes what the
    tuner published for them -- less than at low load where its model put the crossover below them -- as the
    engine's own per-position counters say in the high load's first window, before any rollout; and what the
    engine served in the first window the tuner observed under one config is within the range the tuner stated
    for it from what it knew before the load came (policy/forecast.py: within its noise where measured, within
    its doubted fits where not)."""
    story = high_load_story(setup)
    # what the engine ran when the high load came: the tuner's last change, or -- none at low load -- the startup
    # schedule the operator published for the spec; and what it had applied by the first window's end (a
    # per-batch-size schedule in place may change on the ramp: the window may run either)
    spec = parse_spec(setup.si("crossover")["spec"])
    schedules = [{"status": {"tuning": {"applied": applied or startup_applied(spec)}}}
                 for applied in (story["applied_before"], story["first_window"]["applied_after"])]
    at_low = applied_k_at(schedules[0], LOW)
    assert at_low is not None, "a schedule was in force at low load"
    high_sizes = range(HIGH // 2, HIGH + 1)  # 64 clients: a batch of ~HIGH, less while one refills
    at_high = max(applied_k_at(one, b) or 0 for one in schedules for b in high_sizes)
    at_high_least = min(applied_k_at(one, b) or 0 for one in schedules for b in high_sizes)
    print(f"published at the end of the low load: {story['applied_before']} (K={at_low} at batch {LOW}, "
          f"K={at_high_least}-{at_high} at {HIGH // 2}-{HIGH}); by the first window's end: "
          f"{story['first_window']['applied_after']}")
    # Where the tuner's model put the crossover below the high load's batch sizes, the schedule drafts less there.
    # Its model may put none there: on this engine, with the target as its own draft, K=4 at batch 64 measured
    # 0.98x of no speculation where the K=2 of an earlier low-load schedule measured 0.64x, and the policy then
    # publishes K=4 for every batch size (seen in CI, 2026-12-05). The engine must draft what was published.
    if at_high >= at_low > 0:
        print(f"the tuner's schedule drafts K={at_high} up to batch {HIGH}: no crossover below it in its model")
    window = story["first_window"]
    assert window["same_engine"], "no rollout in the high load's first window"
    # the always-right draft: position i accepts in every request-step that drafted past i
    accepted = window["accepted"]
    steps = window["generated"] - sum(accepted)  # each request-step gains 1 + its accepted tokens
    drafted = sum(accepted) / steps if steps > 0 else 0.0
    print(f"first high-load window: {window['generated']:.0f} tokens in {steps:.0f} request-steps, accepted per "
          f"position {[round(a) for a in accepted]}: {drafted:.2f} drafted a request-step")
    assert steps > 0
    # at most the schedule's K at the high batch sizes, and a little for the clients' first requests and for the
    # two counters' skew within one scrape (seen: 2,880 accepted at every position over 2,749 request-steps, 4.19
    # drafted a step at K=4) ...
    assert drafted <= 1.1 * at_high + 0.25, (drafted, at_high, at_low)
    assert all(a <= 0.1 * steps for a in accepted[at_high:]), accepted
    # ... and at least its least K there, for most request-steps (a batch dips while clients refill)
    if at_high_least > 0:
        assert len(accepted) >= at_high_least and accepted[at_high_least - 1] >= 0.5 * steps, accepted
    held, observed = first_high_window(setup.ticks, "crossover", story["since"], story["high_ended"],
                                       OPERATOR_CONFIG["tuning"]["windowSeconds"])
    expected = window_forecast_json(observed["observation"], observed["tuning"], held)
    served = measured_speed(observed["observation"])
    assert expected is not None, "the tuner had a model when the high load came"
    # The forecast is of the machine the low load's windows measured. Beside heavy other work the engine served
    # 14.0 where 15.2-61.2 was stated (issue 41): what it served is brought back to that machine by how much
    # slower the probe's fixed work ran in this window than in those -- one-sided, as the probe reads the whole
    # machine (the high load's own clients too), not the engine's core
    window_seconds = OPERATOR_CONFIG["tuning"]["windowSeconds"]
    ended = float(observed["now"])
    slowdown = setup.machine.slowdown(
        learnt_windows(setup.ticks, "crossover", story["tuning_on"], story["since"], window_seconds),
        [(ended - window_seconds, ended)])
    excused = served * max(1.0, slowdown.factor)
    print(f"window ending {ended}: the tuner expected {expected.describe()}; the engine served {served:.1f} "
          f"tokens per request-second, on a machine {slowdown.describe()} than in the low load's windows: "
          f"{excused:.1f} on the machine the tuner measured")
    assert expected.low <= excused and served <= expected.high, (expected, served, slowdown)


def test_goodput_at_high_load_is_at_least_no_speculations(setup):
    """What the tuner runs under high load earns at least about what no speculation does.

    Where it switched speculation off, the tuned engine runs the reference's own config, and the ratio
    measures two engines of one config: on these two shared cores they differ by up to 16% in most runs
    (21% beside other work, 34% once on a quiet machine; docs/development.md), so the bound is only that
    the tuned engine serves. Where it still
    drafts (K > 0 at this batch size, or a schedule whose K = 0 range still runs the drafter's first
    pass), what it earns is the product's claim, within that spread."""
    story = high_load_story(setup)
    median = sorted(story["ratios"])[len(story["ratios"]) // 2]
    effective = story["tuned"]["status"].get("effective") or {}
    switched_off = effective.get("method") == "none"  # what the collapse story's reference runs
    bound = SAME_CONFIG_BOUND if switched_off else SPECULATING_BOUND
    if switched_off:  # the claim rests on the config: the engine really runs without a drafter
        assert "--speculative-config" not in setup.engine_command("crossover")
    config = "speculation off" if switched_off else tuning(story["tuned"])["applied"]
    assert median >= bound, (f"tuned at batch {HIGH} ({config}): {median:.2f}x of no speculation (median of "
                             f"{story['ratios']}), bound {bound}\n{decisions(story['tuned'])}")
