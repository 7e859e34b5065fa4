"""Run the test suite as `make test` does: unit tests first, then the real-engine, integration and e2e
tests side by side, then the timed tests alone.

    python tools/run_tests.py [PYTEST ARGS ...]

Three phases, every test in exactly one process (tests/unit/test_run_tests.py):

1. `unit`: everything that starts no process of its own (unit and contract tests, ~2 minutes of both
   cores), alone, so that a mistake fails in minutes and the CPU-bound tests do not crawl at a low
   priority beside the engines.
2. side by side: `engine` (real vLLM CPU engines, at normal priority) beside `integration` and `e2e`
   (at `nice` 10: they mostly wait on their control plane, its timeouts and the tuner's ticks), each
   process with a control plane of its own (`XDG_STATE_HOME` = build/test-state/<process>, the only
   state two local clusters would share -- so two checkouts testing side by side share none either).
   The integration and e2e tests take about as long each; one process for both took twice as long.
3. `timed`: the tests whose verdict is a decision the product takes by timing this machine (marker
   `measures_speed`: the real-engine tuning story, the newcomer's raised K) run alone: beside other
   work the tuner decided differently from what they assert (two of three clean-clone runs on
   2026-12-04, docs/development.md).

Arguments are pytest's and go to every process. Arguments that choose tests (`-m`, `-k`, a path
or a test id, `--lf` and its kin) or name one output file or folder (`--basetemp`, `--junitxml`)
make this one pytest process with exactly those arguments (the runner becomes it), as do
SPECINFER_TEST_SERIAL=1 and a cluster of your own (SPECINFER_TEST_KUBECONFIG: the processes
would install into it). Each output line is prefixed with its process's name; the exit status is
the first failing process's (0 when all pass), and every phase runs whatever failed before it. Ctrl-C
or SIGTERM stops what runs: each pytest tears its clusters, operators and engines down (up to
STOP_GRACE_SECONDS), a second signal kills them. `-x` and `--maxfail` stop only their own process.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Five selections, every test in exactly one (tests/unit/test_run_tests.py), taken in this order of
# precedence: `measures_speed` tests assert decisions taken on speeds measured here (beside other work a
# simulator starved in bursts rolled a good change back, and the real engine's tuner chose other configs
# than the story asserts), then the real engines, then what needs a control plane.
TIMED = "measures_speed"
ENGINE = "engine and not measures_speed"
E2E = "e2e and not (engine or measures_speed)"
INTEGRATION = "integration and not (e2e or engine or measures_speed)"
UNIT = "not (integration or e2e or engine or measures_speed)"
# The waiting ones get what the engine tests leave: at nice 10 a CPU-bound process gets about a tenth
# of a core that a nice-0 one also wants, and all of an idle one.
WAITING_NICENESS = 10
# Tearing a pytest process down stops its engines (vLLM drains for up to --shutdown-timeout), operators and
# cluster: minutes on two busy cores
STOP_GRACE_SECONDS = 300
# The engine and timed tests are few and long (minutes each): one more level of verbosity prints a line as each
# ends (as each module ends under `-q`), where plain dots would fill no line until the last of them.
PER_TEST_LINES = "-v"


# `-m engine`, `-mengine`, `-k name`, and bundles of single-letter flags ending in one (`-vm unit`)
CHOOSING_FLAG = re.compile(r"-[a-zA-Z]*[mk]")
VALUE_FLAGS = ("-p", "-o", "-c", "-W", "-r")  # single-letter options whose value follows: `-pno:x` is not `-m`
# options that choose tests from the last run (another process would select none and fail), stop in a
# debugger (no terminal behind the pipes), or name one file or folder both halves would write
ONE_PROCESS_OPTIONS = ("--lf", "--last-failed", "--ff", "--failed-first", "--nf", "--new-first", "--sw",
                       "--stepwise", "--pdb", "--trace", "--basetemp", "--junitxml", "--junit-xml", "--html")


def selects_tests(args: list[str]) -> bool:
    """Whether the arguments must run as one process: they say which tests to run (the split would
    change them), or what they ask for does not divide in two."""
    for arg in args:
        if arg.startswith(ONE_PROCESS_OPTIONS):
            return True
        if CHOOSING_FLAG.match(arg) and not arg.startswith(VALUE_FLAGS):
            return True
        if not arg.startswith("-") and ("::" in arg or (ROOT / arg).exists() or Path(arg).exists()):
            return True
    return False


def pytest(*args: str) -> list[str]:
    # no path of its own: pyproject's testpaths when the arguments name none, exactly theirs when they do
    return [sys.executable, "-m", "pytest", *args]


def stream(name: str, process: subprocess.Popen, width: int) -> None:
    """Relay a pytest process's output, each line prefixed; never stop reading (a full pipe would block it)."""
    assert process.stdout is not None
    for line in process.stdout:
        try:
            sys.stdout.write(f"[{name:<{width}}] {line}")
            sys.stdout.flush()
        except (BrokenPipeError, OSError):  # nobody reads our output any more (`make test | head`)
            pass


Suite = dict[str, tuple[list[str], dict[str, str]]]  # name -> (command, environment) of pytest processes


def phases(args: list[str], states: Path) -> list[Suite]:
    """The pytest processes, phase by phase: the unit tests alone, the engine tests beside the integration and
    e2e ones, then the timed ones alone; each keeps its clusters' state in a folder of its own under `states`."""
    def env(name: str) -> dict[str, str]:
        return {**os.environ, "XDG_STATE_HOME": str(states / name)}

    def waiting(name: str, marks: str) -> tuple[list[str], dict[str, str]]:
        return ["nice", "-n", str(WAITING_NICENESS), *pytest("-m", marks, *args)], env(name)

    return [
        {"unit": (pytest("-m", UNIT, *args), env("unit"))},
        {"engine": (pytest("-m", ENGINE, PER_TEST_LINES, *args), env("engine")),
         "integration": waiting("integration", INTEGRATION), "e2e": waiting("e2e", E2E)},
        {"timed": (pytest("-m", TIMED, PER_TEST_LINES, *args), env("timed"))},
    ]


def run_in_phases(args: list[str]) -> int:
    states = ROOT / "build" / "test-state"
    steps = phases(args, states)
    for suite in steps:
        for _, env in suite.values():
            Path(env["XDG_STATE_HOME"]).mkdir(parents=True, exist_ok=True)
    width = max(len(name) for suite in steps for name in suite)
    processes: dict[str, subprocess.Popen] = {}
    stopping: list[int] = []

    def stop(signum, _frame):
        if stopping:  # a second signal: no more waiting for teardowns
            for process in processes.values():
                kill(process, signal.SIGKILL)
            raise SystemExit(128 + signum)
        stopping.append(signum)
        print(f"stopping the tests: waiting up to {STOP_GRACE_SECONDS} s for their teardowns "
              "(clusters, operators, engines); signal again to kill them", flush=True)
        # as Ctrl-C would: each pytest tears its fixtures down, which stops what they started (each in a
        # session of its own, out of reach of a signal to pytest's group)
        for process in processes.values():
            kill(process, signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for process in processes.values():
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                kill(process, signal.SIGKILL)
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        print(f"running the unit tests alone, then the engine tests beside the integration and e2e ones (nice "
              f"{WAITING_NICENESS}), then the timed ones alone; each process with its own control plane under "
              f"{states}", flush=True)
        codes = []
        for suite in steps:
            processes.clear()
            codes.append(supervise(suite, processes, width))
        return next((code for code in codes if code != 0), 0)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def kill(process: subprocess.Popen, sig: int) -> None:
    """Signal a pytest process's group (pytest and what runs in its session), if it still runs."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass


def supervise(suites: Suite, processes: dict[str, subprocess.Popen], width: int) -> int:
    """Start each suite, relay its output, wait for all; 0 when every one passed, else the first failure's code."""
    started = time.monotonic()
    readers = []
    for name, (command, env) in suites.items():
        try:
            # a session of its own: a signal to it reaches pytest, not the terminal's other jobs
            processes[name] = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                               stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1,
                                               start_new_session=True)
        except OSError:  # a process that cannot start: stop those that did, as Ctrl-C would
            for process in processes.values():
                kill(process, signal.SIGINT)
                process.wait()
            raise
        reader = threading.Thread(target=stream, args=(name, processes[name], width), daemon=True)
        reader.start()
        readers.append(reader)
    finished: dict[str, float] = {}
    while len(finished) < len(processes):
        for name, process in processes.items():
            if name not in finished and process.poll() is not None:
                finished[name] = time.monotonic() - started
        time.sleep(0.5)
    for reader in readers:
        reader.join()
    for name, process in processes.items():
        verdict = "passed" if process.returncode == 0 else f"FAILED (exit {process.returncode})"
        print(f"[{name:<{width}}] {verdict} after {finished[name]:.0f} s", flush=True)
    return next((process.returncode for process in processes.values() if process.returncode != 0), 0)


def main(args: list[str]) -> int:
    # one given cluster (SPECINFER_TEST_KUBECONFIG) is not two: its CRDs and webhooks are shared
    serial = os.environ.get("SPECINFER_TEST_SERIAL") == "1" or os.environ.get("SPECINFER_TEST_KUBECONFIG")
    if serial or selects_tests(args):
        # pytest in the runner's place: Ctrl-C and SIGTERM reach it as they would without the runner
        os.chdir(ROOT)
        command = pytest(*args)
        os.execv(command[0], command)
    return run_in_phases(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
