"""Build Kubernetes components from Go modules, once, into a cache outside the repo.

Each component has a wrapper Go module under tools/ (go.mod + go.sum committed).
The cache key is the wrapper's go.sum checksum, so changing a version rebuilds
and an unchanged tree never does. The first build takes many minutes on two
cores; progress is printed as Go compiles packages.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from specinfer.dev.cluster.paths import TOOLS_DIR, bin_cache_dir
from specinfer.dev.vllm_wheels import OFFLINE_ENV


@dataclass(frozen=True)
class Component:
    """One wrapper module and the binaries it produces."""

    name: str                # folder under tools/
    module: str              # the Go module whose version names the build
    packages: tuple[str, ...]
    binaries: tuple[str, ...]
    rename: str | None = None  # output name when building a single package whose name is unhelpful

    @property
    def tools_dir(self) -> Path:
        return TOOLS_DIR / self.name

    def version(self) -> str:
        gomod = (self.tools_dir / "go.mod").read_text()
        match = re.search(rf"^\s*(?:require\s+)?{re.escape(self.module)}\s+(v\S+)", gomod, re.M)
        if not match:
            raise RuntimeError(f"{self.tools_dir}/go.mod does not require {self.module}")
        return match.group(1)

    def cache_key(self) -> str:
        digest = hashlib.sha256((self.tools_dir / "go.sum").read_bytes()).hexdigest()[:10]
        return f"{self.name}-{self.version()}-{digest}"

    def bin_dir(self) -> Path:
        return bin_cache_dir() / self.cache_key()

    def ldflags(self) -> str:
        if self.name != "k8s":
            return "-s -w"
        # Without these, /version reports v0.0.0-master and kubectl warns about skew.
        version = self.version()
        major, minor = version.lstrip("v").split(".")[:2]
        stamps = []
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            stamps += [f"-X {pkg}.gitVersion={version}", f"-X {pkg}.gitMajor={major}",
                       f"-X {pkg}.gitMinor={minor}", f"-X {pkg}.gitTreeState=clean"]
        return " ".join(["-s -w", *stamps])


K8S = Component(
    name="k8s",
    module="k8s.io/kubernetes",
    packages=("k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-controller-manager",
              "k8s.io/kubernetes/cmd/kube-scheduler"),
    binaries=("kube-apiserver", "kube-controller-manager", "kube-scheduler"),
)
ETCD = Component(name="etcd", module="go.etcd.io/etcd/server/v3", packages=("go.etcd.io/etcd/server/v3",),
                 binaries=("etcd",), rename="etcd")
KWOK = Component(name="kwok", module="sigs.k8s.io/kwok", packages=("sigs.k8s.io/kwok/cmd/kwok",),
                 binaries=("kwok",))
HELM = Component(name="helm", module="helm.sh/helm/v3", packages=("helm.sh/helm/v3/cmd/helm",),
                 binaries=("helm",))

CONTROL_PLANE = (ETCD, K8S, KWOK)


def is_built(component: Component) -> bool:
    return all((component.bin_dir() / binary).is_file() for binary in component.binaries)


def binary_path(component: Component, binary: str) -> Path:
    return component.bin_dir() / binary


def ensure_built(component: Component, *, log=print) -> Path:
    """Build `component` unless its cache entry exists; return the folder holding its binaries."""
    if is_built(component):
        return component.bin_dir()
    if os.environ.get(OFFLINE_ENV):
        raise RuntimeError(f"{', '.join(component.binaries)} {component.version()} is not built and "
                           f"${OFFLINE_ENV} is set (make test-unit): a test that runs it is marked `binaries` "
                           "(make binaries builds it)")
    if shutil.which("go") is None:
        raise RuntimeError("the Go toolchain is required to build the local control plane (go >= 1.26)")
    staging = component.bin_dir().with_name(component.bin_dir().name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    output = staging / component.rename if component.rename else str(staging) + "/"
    argv = ["go", "build", "-v", "-trimpath", "-buildvcs=false", "-tags", "selinux,notest",
            "-ldflags", component.ldflags(), "-o", str(output), *component.packages]
    env = {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"}
    log(f"building {', '.join(component.binaries)} {component.version()} from Go modules "
        f"(first time only; can take 10-25 minutes on 2 cores) ...")
    _run_with_progress(argv, cwd=component.tools_dir, env=env, label=component.name, log=log)
    staging.rename(component.bin_dir())
    return component.bin_dir()


def _run_with_progress(argv: list[str], *, cwd: Path, env: dict, label: str, log) -> None:
    """Run `go build -v`, printing a progress line every 20 s instead of every package."""
    started = time.monotonic()
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    compiled = 0
    last_lines: list[str] = []
    done = threading.Event()

    def ticker() -> None:
        while not done.wait(20):
            elapsed = int(time.monotonic() - started)
            log(f"  [{label}] {elapsed // 60}m{elapsed % 60:02d}s: {compiled} packages compiled")

    threading.Thread(target=ticker, daemon=True).start()
    assert process.stdout is not None
    for line in process.stdout:
        compiled += 1
        last_lines = (last_lines + [line.rstrip()])[-40:]
    done.set()
    if process.wait() != 0:
        tail = "\n".join(last_lines)
        raise RuntimeError(f"go build for {label} failed (exit {process.returncode}):\n{tail}")
    elapsed = int(time.monotonic() - started)
    log(f"  [{label}] built in {elapsed // 60}m{elapsed % 60:02d}s ({compiled} packages)")


def main() -> None:
    """`python -m specinfer.dev.cluster.binaries [helm]`: build (or confirm) the cached binaries."""
    wanted = {c.name: c for c in (*CONTROL_PLANE, HELM)}
    names = sys.argv[1:] or [c.name for c in CONTROL_PLANE]
    for name in names:
        print(ensure_built(wanted[name]))


if __name__ == "__main__":
    main()
