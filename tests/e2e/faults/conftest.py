"""Fixtures of the fault matrix: a namespace on the shared cluster per module, and the measured
recovery times, printed at the end of the run (docs/reliability.md quotes them)."""

from __future__ import annotations

import pytest
from faults_harness import Namespace

RECOVERY: dict[str, float] = {}


@pytest.fixture(scope="module")
def ns(cluster):
    namespace = Namespace(cluster.kubeconfig).create()
    yield namespace
    namespace.delete()


@pytest.fixture(scope="session")
def recovery():
    yield RECOVERY
    if RECOVERY:
        print("\nmeasured recovery times:")
        for label, seconds in RECOVERY.items():
            print(f"  {label:60s} {seconds:6.2f}s")
