"""Start the engine a RuntimeConfig describes, as the serving pods do, and stop it again. I/O.

What a calibration Job's pod runs around the measurement: `specinfer runtime --config FILE`
(the pods' own entrypoint: preflight, then exec `vllm serve` with exactly the argv the serving
pods get -- or the simulator), waited on until /health answers, stopped with SIGTERM to its
process group (vLLM's engine-core processes included). An engine that exits before it serves
is reported with its own words: the runtime's one-line misconfiguration, else its log tail.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import aiohttp

from specinfer.runtime.methods import methods_without_drafts

TERMINATION_LOG_ENV = "SPECINFER_TERMINATION_LOG"  # runtime/pod/entrypoint.py writes its failure there
STOP_GRACE_SECONDS = 20.0  # within the pod's grace period (60 s; the local pod runner's 30 s)
LOG_TAIL_BYTES = 32 * 1024
CAUSE_LIMIT = 1500
# A raised exception as Python prints it, maybe behind vLLM's process prefix: "(EngineCore pid=7) ValueError: ..."
ERROR_LINE = re.compile(r"^(\([^)]*\)\s*)?[A-Za-z_][\w.]*(Error|Exception):")


class EngineFailed(RuntimeError):
    """The engine did not come up; the message is the cause."""


@dataclass(frozen=True)
class EngineConfig:
    """What the measurement needs to know of a RuntimeConfig."""

    path: Path
    port: int
    k: int  # draft length (0: no speculation)
    method: str
    time_scale: float  # the simulator's timeScale (1 for vLLM)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def read_engine_config(path: Path) -> EngineConfig:
    """Port, K and method of a RuntimeConfig file; the runtime validates the rest when it starts."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise EngineFailed(f"cannot read the runtime config {path}: {error}") from None
    spec: dict[str, Any] = (data.get("spec") or {}) if isinstance(data, dict) else {}
    runtime, speculation = spec.get("runtime") or {}, spec.get("speculation") or {}
    simulator = runtime.get("simulator") or {}
    method = str(speculation.get("method", "none"))
    k = speculation.get("numSpeculativeTokens")
    return EngineConfig(path=path, port=int(runtime.get("port", 8000)),
                        k=0 if method in methods_without_drafts() else int(k or 0), method=method,
                        time_scale=float(simulator.get("timeScale", 1.0)) if runtime.get("engine") == "simulator"
                        else 1.0)


def log_cause(tail: str) -> str:
    """The lines of a log tail that say what went wrong: the exceptions raised (a Python traceback ends with a
    generic re-raise, the root cause is further up), else the last lines."""
    lines = [" ".join(line.split()) for line in tail.splitlines() if line.strip()]
    errors = list(dict.fromkeys(line for line in lines if ERROR_LINE.search(line)))
    text = " | ".join(errors[-4:]) if errors else " ".join(lines[-10:])
    return text if len(text) <= CAUSE_LIMIT else "..." + text[-CAUSE_LIMIT:]


def specinfer_command() -> list[str]:
    found = shutil.which("specinfer")
    return [found] if found else [sys.executable, "-c", "from specinfer.cli import main; main()"]


@dataclass
class LocalEngine:
    config: EngineConfig
    workdir: Path
    startup_timeout: float = 1800.0
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = field(default=None, repr=False)

    def exited(self) -> int | None:
        """The engine's exit code once it has stopped on its own, else None."""
        return self.process.poll() if self.process is not None else None

    @property
    def log_path(self) -> Path:
        return self.workdir / "engine.log"

    @property
    def termination_log(self) -> Path:
        return self.workdir / "engine-termination-log"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.termination_log.unlink(missing_ok=True)
        self.log = open(self.log_path, "ab")  # kept open for the child's lifetime
        env = {**os.environ, TERMINATION_LOG_ENV: str(self.termination_log), "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen([*specinfer_command(), "runtime", "--config", str(self.config.path)],
                                        stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def cause(self) -> str:
        """Why the engine stopped, in its own words."""
        try:
            written = self.termination_log.read_text(errors="replace").strip()
        except OSError:
            written = ""
        if written:
            return written
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - LOG_TAIL_BYTES))
                return log_cause(handle.read().decode(errors="replace"))
        except OSError:
            return "no log"

    async def wait_ready(self) -> float:
        """Seconds until /health answered; raises EngineFailed when it exits or the startup time runs out."""
        assert self.process is not None
        started = time.monotonic()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise EngineFailed(f"the engine exited with code {code} before it served: {self.cause()}")
                try:
                    async with session.get(f"{self.config.url}/health") as answer:
                        if answer.status == 200:
                            return time.monotonic() - started
                except (aiohttp.ClientError, TimeoutError):
                    pass
                if time.monotonic() - started > self.startup_timeout:
                    raise EngineFailed(f"the engine did not answer /health within {self.startup_timeout:.0f} s: "
                                       f"{self.cause()}")
                await asyncio.sleep(1.0)

    def stop(self) -> None:
        """SIGTERM to the engine's process group, SIGKILL after the grace period."""
        if self.process is None:
            return
        try:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGTERM)
                try:
                    self.process.wait(timeout=STOP_GRACE_SECONDS)
                except subprocess.TimeoutExpired:
                    os.killpg(self.process.pid, signal.SIGKILL)
                    self.process.wait(timeout=10)
            os.killpg(self.process.pid, signal.SIGKILL)  # children the engine left behind
        except ProcessLookupError:
            pass
        finally:
            if self.log is not None:
                self.log.close()
            self.process = None
