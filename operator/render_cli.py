"""`specinfer render -f FILE`: print offline exactly the manifests the operator would apply.

One difference: with speculation off over an engine retuned in place, the operator keeps the schedule its
ConfigMap holds for the pods being replaced, which this offline command cannot read; it prints the spec's own.
"""

from __future__ import annotations

import sys
from typing import Any

import click
import yaml

from specinfer.api import InvalidSpecError
from specinfer.operator.pure.config import load_config
from specinfer.operator.pure.errors import ConfigError
from specinfer.runtime.methods import ACCELERATORS

EXIT_INVALID = 2


class _NoAliases(yaml.SafeDumper):
    """Plain YAML for reviews: no &anchors / *aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None  # runtime.json reads as a block, as in `kubectl get -o yaml`
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_NoAliases.add_representer(str, _str)


def dump_manifests(manifests: list[dict[str, Any]]) -> str:
    return yaml.dump_all(manifests, Dumper=_NoAliases, sort_keys=False, default_flow_style=False, width=120)


def _resources(text: str) -> list[dict[str, Any]]:
    docs = [doc for doc in yaml.safe_load_all(text) if doc]
    found = [doc for doc in docs if isinstance(doc, dict) and doc.get("kind") == "SpeculativeInference"]
    if not found:
        raise click.ClickException("no SpeculativeInference in the input")
    return found


@click.command("render")
@click.option("-f", "--filename", "filename", required=True, type=click.File("r"),
              help="file with one or more SpeculativeInference resources ('-' for stdin)")
@click.option("--accelerator", type=click.Choice(list(ACCELERATORS)), default=None,
              help="override spec.hardware.accelerator (preview the same resource on other hardware)")
@click.option("--config", "config_file", default=None, envvar="SPECINFER_OPERATOR_CONFIG",
              help="operator configuration YAML (images, hardware profile overrides), as the Helm chart mounts it")
@click.option("-n", "--namespace", default=None, help="namespace when the resource names none (default: default)")
@click.option("--podmonitor/--no-podmonitor", default=False,
              help="include the PodMonitor (the operator adds it when the Prometheus Operator's CRD exists)")
def render_command(filename, accelerator: str | None, config_file: str | None, namespace: str | None,
                   podmonitor: bool) -> None:
    """Print the ConfigMap, Deployment, Service (and PodMonitor) the operator would apply, as YAML.

    Uses the operator's own rendering function. Offline input has no uid, so ownerReferences
    are left out; the operator adds them.
    """
    from specinfer.operator.render import render

    try:
        config = load_config(config_file)
    except ConfigError as error:
        raise click.ClickException(str(error)) from None
    manifests: list[dict[str, Any]] = []
    for resource in _resources(filename.read()):
        if accelerator:
            resource.setdefault("spec", {}).setdefault("hardware", {})["accelerator"] = accelerator
        try:
            manifests += render(resource, config, podmonitor=podmonitor, namespace=namespace).manifests
        except InvalidSpecError as error:
            name = (resource.get("metadata") or {}).get("name", "?")
            click.echo(f"specinfer render: {name}: invalid spec:\n{error.describe_all()}", err=True)
            sys.exit(EXIT_INVALID)
    click.echo(dump_manifests(manifests), nl=False)
