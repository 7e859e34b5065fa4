"""Operator upgrade: the last released operator -> this one, with unchanged specs -> zero pod restarts.

The last release is recorded in last_release.yaml (checked against the newest `v*` tag where a clone has
tags), or SPECINFER_UPGRADE_FROM=<rev>. It is checked out with `git worktree` into a temporary folder and run
from its own sources (PYTHONPATH ahead of this checkout's editable install). Then it is stopped and
the current operator takes over the same resources: it must not replace any pod or ReplicaSet (a
changed rendering of an unchanged spec would roll every GPU pod of every workload) -- unless the
release is listed in upgrade_rollouts.yaml, the reviewed record of deliberate rollouts; then the pod
template may differ only at the paths listed there, and each workload rolls exactly once.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from faults_harness import REPO, Operator, resource, wait_for

pytestmark = pytest.mark.e2e

# import name -> folder of the tree (pyproject.toml's package-dir)
PACKAGE_DIRS = {"operator": "operator", "runtime": "runtime", "bench": "bench"}


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout.strip()


DELIBERATE = yaml.safe_load((Path(__file__).parent / "upgrade_rollouts.yaml").read_text()) or {}


RECORDED_RELEASE = yaml.safe_load((Path(__file__).parent / "last_release.yaml").read_text())


def last_release() -> tuple[str, str]:
    """(name, commit) of the release to upgrade from: last_release.yaml, or SPECINFER_UPGRADE_FROM=<rev>.

    Tags are optional in a clone; where they are present they must agree with the record, so a new
    release cannot be cut without the upgrade test moving to it.
    """
    chosen = os.environ.get("SPECINFER_UPGRADE_FROM")
    if chosen:
        return chosen, git("rev-parse", f"{chosen}^{{commit}}")
    name, commit = RECORDED_RELEASE["name"], RECORDED_RELEASE["commit"]
    if subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{commit}^{{commit}}"]).returncode != 0:
        pytest.fail(f"the last release {name} ({commit}) is not in this clone's history: a shallow clone? "
                    "(git fetch --unshallow, or set SPECINFER_UPGRADE_FROM)")
    newest = subprocess.run(["git", "-C", str(REPO), "describe", "--tags", "--abbrev=0", "--match", "v[0-9]*", "HEAD"],
                            capture_output=True, text=True)
    if newest.returncode == 0:
        tag = newest.stdout.strip()
        assert (tag, git("rev-parse", f"{tag}^{{commit}}")) == (name, commit), (
            f"the newest release tag is {tag}, but tests/e2e/faults/last_release.yaml records {name} ({commit})")
    return name, commit


def leaf_paths(value: Any, prefix: str = "") -> dict[str, Any]:
    """{"spec.containers[].env[].name": [...values...]}-style leaves; list indices read as []."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(leaf_paths(item, f"{prefix}.{key}" if prefix else key))
        return out
    if isinstance(value, list):
        out = {}
        for index, item in enumerate(value):
            out.update(leaf_paths(item, f"{prefix}[{index}]"))
        return out
    return {prefix: value}


def changed_paths(before: dict, after: dict) -> set[str]:
    old, new = leaf_paths(before), leaf_paths(after)
    return {re.sub(r"\[\d+\]", "[]", path) for path in old.keys() | new.keys() if old.get(path) != new.get(path)}


@pytest.fixture(scope="module")
def old_build(tmp_path_factory):
    """A worktree of the last release whose `specinfer` package maps like the installed one."""
    release, revision = last_release()
    tree = tmp_path_factory.mktemp("last-release") / "tree"
    git("worktree", "add", "--detach", str(tree), revision)
    try:
        package = tree / "src" / "specinfer"
        for name, folder in PACKAGE_DIRS.items():
            if (tree / folder).is_dir() and not (package / name).exists():
                (package / name).symlink_to(tree / folder, target_is_directory=True)
        yield release, revision, tree
    finally:
        git("worktree", "remove", "--force", str(tree))


def test_the_last_release_really_is_imported(old_build):
    _, _, tree = old_build
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    where = subprocess.run([sys.executable, "-c", "import specinfer.operator.render as r; print(r.__file__)"],
                           env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(str(tree)), where


def test_upgrade_with_unchanged_specs_restarts_no_pod(ns, old_build, tmp_path_factory):
    release, revision, tree = old_build
    workdir = tmp_path_factory.mktemp("upgrade")
    old = Operator(ns.kubeconfig, ns.name, workdir, name="release",
                   argv=[sys.executable, "-c", "from specinfer.cli import main; main()", "operator"],
                   env={"PYTHONPATH": str(tree / "src")})
    old.start()
    names = ["plain", "scaled", "tuned"]
    try:
        ns.apply(resource("plain"), resource("scaled", k=4, replicas=2),
                 resource("tuned", replicas=2, tuning={"mode": "auto", "intervalSeconds": 5}))
        for name in names:
            wait_for(lambda name=name: ns.converged(name), timeout=60, what=f"{name} Ready under the last release",
                     alive=old.assert_alive, why=lambda: ns.why)
        ns.write_tuner_applied_to_stay(
            "tuned", {"numSpeculativeTokens": 6, "since": "2026-01-01T00:00:00Z"}, alive=old.assert_alive,
            in_force=lambda r: r["status"].get("effective", {}).get("numSpeculativeTokens") == 6,
            what="tuned K=6 rolled out by the last release")
        before = {name: ns.snapshot(name) for name in names}
        templates = {name: ns.deployment(name)["spec"]["template"] for name in names}
    finally:
        old.stop()
    deliberate = DELIBERATE.get(release)

    new = Operator(ns.kubeconfig, ns.name, workdir, name="current").start()
    try:
        time.sleep(7)  # past one resync (5 s): every resource reconciled by the new build
        new.assert_alive()
        for name in names:
            wait_for(lambda name=name: ns.converged(name), timeout=30, what=f"{name} Ready under this build",
                     alive=new.assert_alive, why=lambda: ns.why)
        after = {name: ns.snapshot(name) for name in names}
        print(f"UPGRADE {release} ({revision[:7]}) -> working tree: applies by the new build: "
              f"{new.applies() or 'none'}")
        if deliberate is None:
            assert not new.applies("Deployment"), \
                f"the upgrade re-applied Deployments of unchanged specs: {new.applies('Deployment')} (if this is " \
                f"on purpose, record it in upgrade_rollouts.yaml under {release})"
            for name in names:
                assert after[name].pods == before[name].pods, f"{name}: pods restarted by the upgrade"
                assert after[name].replicasets == before[name].replicasets, f"{name}: new ReplicaSet after the upgrade"
            return
        allowed = tuple(deliberate["paths"])
        for name in names:
            changed = changed_paths(templates[name], ns.deployment(name)["spec"]["template"])
            print(f"  {name}: pod template changed at {sorted(changed)}")
            outside = sorted(path for path in changed if not path.startswith(allowed))
            assert not outside, f"{name}: the upgrade from {release} changed the pod template outside the " \
                                f"deliberate paths of upgrade_rollouts.yaml: {outside}"
        assert len(new.applies("Deployment")) == len(names), new.applies("Deployment")  # one rollout each
        time.sleep(7)  # another resync: the rolled-out workloads are left alone
        assert len(new.applies("Deployment")) == len(names), f"applied again after converging: {new.applies()}"
    finally:
        new.stop()

