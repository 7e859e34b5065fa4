"""A real Prometheus server (Debian's `prometheus` package) on a reserved loopback port (ports.py).

Targets are added through file-based service discovery: one JSON file per group
in `targets/`, picked up by Prometheus within a second, so tests and the demo can
register and drop scrape targets while it runs.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import yaml
from prometheus_api_client import PrometheusConnect

from specinfer.dev.cluster import ports, processes


class PrometheusServer:
    def __init__(self, workdir: Path, *, scrape_interval: str = "1s", binary: str | None = None, log=print):
        self.workdir = Path(workdir)
        self.scrape_interval = scrape_interval
        self.binary = binary or shutil.which("prometheus") or "/usr/bin/prometheus"
        self.port: int | None = None
        self.reservation: ports.Reservation | None = None  # held while this object serves on the port
        self.record: processes.ProcessRecord | None = None
        self.log = log

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("Prometheus is not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def targets_dir(self) -> Path:
        return self.workdir / "targets"

    def config(self) -> dict:
        return {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.scrape_interval,
                       "scrape_timeout": self.scrape_interval},
            "scrape_configs": [{
                "job_name": "specinfer",
                "file_sd_configs": [{"files": [str(self.targets_dir / "*.json")], "refresh_interval": "2s"}],
            }],
        }

    def start(self, *, timeout: float = 60) -> PrometheusServer:
        """Start it and wait until it is ready. A first start whose port was taken meanwhile is retried on
        a new port; a restart keeps the URL clients were given, and says so when that port is taken."""
        if not Path(self.binary).exists():
            raise FileNotFoundError(
                f"prometheus not found at {self.binary}; install Debian's package: "
                "apt-get install --no-install-recommends prometheus (make setup does this)")
        self.targets_dir.mkdir(parents=True, exist_ok=True)
        config_file = self.workdir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(self.config()))
        restart = self.port is not None
        for attempt in range(1, ports.ATTEMPTS + 1):
            if self.port is None:
                self.reservation = ports.reserve("prometheus")
                self.port = self.reservation.port
            elif self.reservation is None:
                self.reservation = ports.hold(self.port, "prometheus")
            try:
                return self._start_once(config_file, timeout)
            except ports.PortTaken as taken:
                if restart or attempt == ports.ATTEMPTS:
                    raise RuntimeError(f"{taken} ({attempt} attempt{'s' if attempt > 1 else ''}); last log lines "
                                       f"({self.workdir / 'prometheus.log'}):\n{taken.log_tail}") from None
                self.log(f"prometheus: port {taken.port} was taken by another process; starting it on a new port")
                taken_reservation = self.reservation
                self.reservation = ports.reserve("prometheus")  # before releasing: never the same port again
                self.port = self.reservation.port
                if taken_reservation is not None:
                    taken_reservation.release()
        raise AssertionError("unreachable")

    def _start_once(self, config_file: Path, timeout: float) -> PrometheusServer:
        argv = [self.binary, f"--config.file={config_file}", f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1d",
                "--web.enable-lifecycle", "--log.level=warn"]
        record = self.record = processes.start("prometheus", argv, log_dir=self.workdir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not processes.is_running(record):
                output = processes.log_since_start(record)
                self.record = None
                processes.stop(record)
                if ports.address_in_use(output):
                    raise ports.PortTaken("prometheus", self.port or 0, processes.log_tail(record, 5))
                raise RuntimeError(f"prometheus exited during startup:\n{processes.log_tail(record)}")
            if self.is_ready():
                return self
            time.sleep(0.2)
        raise TimeoutError(f"prometheus not ready after {timeout:.0f}s:\n{processes.log_tail(record)}")

    def is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.record is not None:
            processes.stop(self.record)
            self.record = None

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- targets ----------------------------------------------------------------------------
    def add_target(self, group: str, address: str, labels: dict[str, str] | None = None) -> None:
        """Scrape `address` (host:port) with extra `labels`; replaces any earlier target of `group`."""
        path = self.targets_dir / f"{group}.json"
        temporary = path.with_suffix(".tmp")  # write then rename: Prometheus never reads half a file
        temporary.write_text(json.dumps([{"targets": [address], "labels": labels or {}}]))
        temporary.rename(path)

    def remove_target(self, group: str) -> None:
        (self.targets_dir / f"{group}.json").unlink(missing_ok=True)

    # -- queries ----------------------------------------------------------------------------
    def client(self) -> PrometheusConnect:
        return PrometheusConnect(url=self.url, disable_ssl=True)

    def query(self, promql: str) -> list[dict]:
        return self.client().custom_query(query=promql)

    def wait_for(self, promql: str, predicate: Callable[[list[dict]], bool] | None = None,
                 timeout: float = 60) -> list[dict]:
        """Poll `promql` until it returns a non-empty result that satisfies `predicate`."""
        predicate = predicate or bool
        deadline = time.monotonic() + timeout
        result: list[dict] = []
        while time.monotonic() < deadline:
            result = self.query(promql)
            if result and predicate(result):
                return result
            time.sleep(0.5)
        raise TimeoutError(f"no satisfying result for {promql!r} within {timeout:.0f}s; last: {result}")
