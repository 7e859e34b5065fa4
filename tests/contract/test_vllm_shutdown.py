"""What vLLM does with its connections and in-flight requests when a pod goes away, which the rendered
`--shutdown-timeout` and the loads' connection pool rely on.

Without the flag vLLM aborts every request it holds when the kubelet stops a pod (a rollout's old engine),
and the clients see dropped connections; runtime/contract/argv.py renders a drain the pod's grace period covers.
"""

from __future__ import annotations

import re

import pytest

from specinfer.api.workload import DRAIN_SECONDS, PRESTOP_SLEEP_SECONDS, TERMINATION_GRACE_SECONDS
from specinfer.dev.vllm_wheels import read_source
from specinfer.runtime.methods import RELEASES
from specinfer.runtime.pod.calibration.requests import CLIENT_KEEPALIVE_SECONDS

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("release", RELEASES, ids=lambda r: r.label)
def test_vllm_aborts_in_flight_requests_unless_a_shutdown_timeout_is_set(release):
    config = read_source("vllm/config/vllm.py", release)
    assert re.search(r"^\s+shutdown_timeout: int = Field\(default=0, ge=0\)", config, re.M)
    core = read_source("vllm/v1/engine/core.py", release)
    assert 'mode = "abort" if shutdown_timeout == 0 else "drain"' in core
    # the drain is the engine core's: requests finish, then it tears down
    assert "draining in-flight requests" in core
    args = read_source("vllm/engine/arg_utils.py", release)
    assert re.search(r"^\s+shutdown_timeout: int = 0$", args, re.M)


def test_the_pods_grace_period_covers_the_prestop_sleep_and_the_drain():
    assert TERMINATION_GRACE_SECONDS > PRESTOP_SLEEP_SECONDS + DRAIN_SECONDS


@pytest.mark.parametrize("release", RELEASES, ids=lambda r: r.label)
def test_loads_drop_idle_connections_before_vllm_closes_them(release):
    envs = read_source("vllm/envs.py", release)
    match = re.search(r'"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": lambda: int\(\s*os\.environ\.get\('
                      r'"VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "(\d+)"\)', envs)
    assert match, "vLLM's HTTP keep-alive setting moved"
    assert CLIENT_KEEPALIVE_SECONDS < int(match.group(1))
