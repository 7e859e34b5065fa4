"""Run the test suite as `make test` does: the real-engine tests and the rest side by side.

    python tools/run_tests.py [PYTEST ARGS ...]

The `engine` tests (real vLLM CPU engines, ~30 minutes) and the rest (unit, contract, integration
and e2e, ~23 minutes, mostly waiting on the local control plane) share no state but the caches, so
they run as two pytest processes at once: the engine tests (and the `measures_speed` ones) at
normal priority, because their verdicts rest on speeds measured here, the rest at a lower one
(`nice`), with a control plane of their own (`XDG_STATE_HOME` under build/test-state/, the only
state two local clusters would share). The suite's wall time is
then the longer of the two instead of their sum (docs/development.md has the figures).

Arguments are pytest's and go to both processes. Arguments that choose tests (`-m`, `-k`, a path
or a test id) run one pytest process with exactly those arguments, as do SPECINFER_TEST_SERIAL=1
and a cluster of your own (SPECINFER_TEST_KUBECONFIG: both processes would install into it).
Each output line is prefixed with its process's name; the exit status is non-zero when either
process fails, and Ctrl-C or SIGTERM stops both.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Tests whose verdict rests on speeds measured on this machine: the engine tests, and the few others
# that assert a measured verdict (`measures_speed`: a change's realised gain), which the lower
# priority would starve in bursts (a simulator's step times stretched in one window and not in the
# next rolled a good change back).
ENGINE = "engine or measures_speed"
REST = f"not ({ENGINE})"
# The rest gets what the engine tests leave: at nice 10 a CPU-bound process gets about a tenth of
# a core that a nice-0 one also wants, and all of an idle one.
REST_NICENESS = 10
STOP_GRACE_SECONDS = 60
# The engine tests are few and long (minutes each): one more level of verbosity prints a line as each
# ends (as each module ends under `-q`), where plain dots would fill no line until the last of them.
ENGINE_PROGRESS = "-v"


def selects_tests(args: list[str]) -> bool:
    """Whether the arguments already say which tests to run (then the split would change them)."""
    for arg in args:
        if arg.startswith(("-m", "-k")):  # `-m engine`, `-mengine`, `-k name`
            return True
        if not arg.startswith("-") and ("::" in arg or (ROOT / arg).exists() or Path(arg).exists()):
            return True
    return False


def pytest(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "tests", *args]


def stream(name: str, process: subprocess.Popen, width: int) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        sys.stdout.write(f"[{name:<{width}}] {line}")
        sys.stdout.flush()


def suites(args: list[str], state: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The two pytest processes: name -> (command, environment)."""
    return {
        "engine": (pytest("-m", ENGINE, ENGINE_PROGRESS, *args), dict(os.environ)),
        "rest": (["nice", "-n", str(REST_NICENESS), *pytest("-m", REST, *args)],
                 {**os.environ, "XDG_STATE_HOME": str(state)}),
    }


def run_side_by_side(args: list[str]) -> int:
    state = ROOT / "build" / "test-state" / "rest"
    state.mkdir(parents=True, exist_ok=True)
    halves = suites(args, state)
    width = max(map(len, halves))
    processes: dict[str, subprocess.Popen] = {}

    def stop(signum, _frame):
        # as Ctrl-C would: pytest tears its fixtures down (clusters, operators, engines), then the rest goes
        for process in processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for process in processes.values():
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        print(f"running the tests marked {ENGINE!r} and the rest ({REST!r}, nice {REST_NICENESS}, its own "
              f"control plane under {state}) side by side", flush=True)
        return supervise(halves, processes, width)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def supervise(suites: dict[str, tuple[list[str], dict[str, str]]], processes: dict[str, subprocess.Popen],
              width: int) -> int:
    """Start each suite, relay its output, wait for all; 0 only when every one passed."""
    started = time.monotonic()
    readers = []
    for name, (command, env) in suites.items():
        # a session of its own: stopping one stops the clusters, operators and engines it started
        processes[name] = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True, bufsize=1,
                                           start_new_session=True)
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
    return 0 if all(process.returncode == 0 for process in processes.values()) else 1


def main(args: list[str]) -> int:
    # one given cluster (SPECINFER_TEST_KUBECONFIG) is not two: its CRDs and webhooks are shared
    serial = os.environ.get("SPECINFER_TEST_SERIAL") == "1" or os.environ.get("SPECINFER_TEST_KUBECONFIG")
    if serial or selects_tests(args):
        return subprocess.call(pytest(*args), cwd=ROOT)
    return run_side_by_side(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
