"""Generate the CustomResourceDefinitions from the pydantic models.

    specinfer crd                 # write crds/specinfer.io_speculativeinferences.yaml and
                                  # crds/specinfer.io_speculativeinferencecalibrations.yaml (+ the chart's copies)
    specinfer crd --check         # exit 1 if a committed file differs (CI)
    python -m specinfer.api.crd   # same as `specinfer crd`
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import yaml

from specinfer.api.calibration import (
    CALIBRATION_KIND,
    CALIBRATION_PLURAL,
    CALIBRATION_SHORT_NAMES,
    CALIBRATION_SINGULAR,
    SpeculativeInferenceCalibrationSpec,
    SpeculativeInferenceCalibrationStatus,
)
from specinfer.api.openapi import model_schema
from specinfer.api.resource import CRD_NAME, GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION
from specinfer.api.spec import SpeculativeInferenceSpec
from specinfer.api.status import SpeculativeInferenceStatus

CRD_FILE = Path("crds") / f"{GROUP}_{PLURAL}.yaml"
CALIBRATION_CRD_FILE = Path("crds") / f"{GROUP}_{CALIBRATION_PLURAL}.yaml"
CALIBRATION_CRD_NAME = f"{CALIBRATION_PLURAL}.{GROUP}"
# Helm installs CRDs from the chart's own crds/ folder; it must carry identical copies.
CHART_CRD_DIR = Path("charts") / "specinfer" / "crds"


def chart_copies_out_of_date(crd_dir: Path = CRD_FILE.parent, chart_dir: Path = CHART_CRD_DIR) -> list[str]:
    """Names of crds/*.yaml whose copy in the chart is missing or different."""
    return [source.name for source in sorted(crd_dir.glob("*.yaml"))
            if not (chart_dir / source.name).exists() or (chart_dir / source.name).read_bytes() != source.read_bytes()]


def sync_chart_copies(crd_dir: Path = CRD_FILE.parent, chart_dir: Path = CHART_CRD_DIR) -> list[str]:
    stale = chart_copies_out_of_date(crd_dir, chart_dir)
    chart_dir.mkdir(parents=True, exist_ok=True)
    for name in stale:
        (chart_dir / name).write_bytes((crd_dir / name).read_bytes())
    return stale

PRINTER_COLUMNS = [
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.name", "description": "Target model"},
    {"name": "Method", "type": "string", "jsonPath": ".status.effective.method",
     "description": "Speculative-decoding method the pods run"},
    {"name": "K", "type": "integer", "jsonPath": ".status.effective.numSpeculativeTokens",
     "description": "Effective draft length (maximum when a schedule is set)"},
    {"name": "Acceptance", "type": "number", "jsonPath": ".status.metrics.acceptanceRate",
     "description": "Accepted / drafted tokens"},
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
     "description": "Ready condition"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Accelerator", "type": "string", "jsonPath": ".spec.hardware.accelerator", "priority": 1,
     "description": "Accelerator family"},
    {"name": "Engine", "type": "string", "jsonPath": ".spec.runtime.engine", "priority": 1,
     "description": "vllm or simulator"},
    {"name": "Tuning", "type": "string", "jsonPath": ".spec.tuning.mode", "priority": 1,
     "description": "Tuning mode"},
    {"name": "Reason", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].reason', "priority": 1,
     "description": "Reason of the Ready condition"},
    {"name": "Cost/MTok", "type": "number", "jsonPath": ".status.cost.perMillionTokens", "priority": 1,
     "description": "Cost per million generated tokens in status.cost.currency (only with prices configured)"},
]


def openapi_schema() -> dict[str, Any]:
    spec = model_schema(SpeculativeInferenceSpec)
    status = model_schema(SpeculativeInferenceStatus, path="status")
    return {
        "type": "object",
        "description": "A vLLM deployment with speculative decoding whose draft length specinfer tunes from live "
        "metrics. Tuned values appear in status only; the spec is never written by the operator.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "specinfer.io/v1alpha1"},
            "kind": {"type": "string", "description": "SpeculativeInference"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }


def build_crd() -> dict[str, Any]:
    """The CRD as a dict, ready for `kubectl apply` or the Kubernetes client."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "annotations": {"specinfer.io/generated-by": "specinfer crd (src/specinfer/api); do not edit"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": ["specinfer"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


CALIBRATION_PRINTER_COLUMNS = [
    {"name": "Target", "type": "string", "jsonPath": ".spec.targetRef.name",
     "description": "The SpeculativeInference calibrated"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase",
     "description": "Pending, Running, Succeeded or Failed"},
    {"name": "Progress", "type": "string", "jsonPath": ".status.progress",
     "description": "Engines measured / to measure (one per candidate and K)"},
    {"name": "Recommendation", "type": "string", "jsonPath": ".status.recommendation.summary",
     "description": "The fastest candidate and its gain over the target's method (never applied automatically)"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Running", "type": "string", "jsonPath": ".status.running", "priority": 1,
     "description": "Engines whose Job runs now"},
    {"name": "Reason", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Progressing")].reason',
     "priority": 1, "description": "Reason of the Progressing condition"},
]
IMMUTABLE_SPEC = {"rule": "self == oldSelf",
                  "message": "spec is immutable: a calibration is one run; create a new "
                             f"{CALIBRATION_KIND} to measure again"}


def calibration_openapi_schema() -> dict[str, Any]:
    spec = model_schema(SpeculativeInferenceCalibrationSpec)
    spec.setdefault("x-kubernetes-validations", []).append(IMMUTABLE_SPEC)
    status = model_schema(SpeculativeInferenceCalibrationStatus, path="status")
    return {
        "type": "object",
        "description": "One measurement run against a SpeculativeInference: step time by batch size and draft "
        "length and acceptance per position, for its method, candidate methods and no speculation, on its own "
        "hardware and prompts (docs/calibration.md). The target's pods are never touched.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "specinfer.io/v1alpha1"},
            "kind": {"type": "string", "description": CALIBRATION_KIND},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }


def build_calibration_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CALIBRATION_CRD_NAME,
            "annotations": {"specinfer.io/generated-by": "specinfer crd (src/specinfer/api); do not edit"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": CALIBRATION_KIND,
                "listKind": f"{CALIBRATION_KIND}List",
                "plural": CALIBRATION_PLURAL,
                "singular": CALIBRATION_SINGULAR,
                "shortNames": list(CALIBRATION_SHORT_NAMES),
                "categories": ["specinfer"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": calibration_openapi_schema()},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": CALIBRATION_PRINTER_COLUMNS,
                }
            ],
        },
    }


HEADER = "# Generated from src/specinfer/api by `specinfer crd`; do not edit by hand.\n"


def _render(crd: dict[str, Any]) -> str:
    return HEADER + yaml.safe_dump(crd, sort_keys=False, width=100, allow_unicode=True)


def render_crd() -> str:
    return _render(build_crd())


def render_calibration_crd() -> str:
    return _render(build_calibration_crd())


def rendered_files() -> dict[Path, str]:
    """Every generated CRD file and its content."""
    return {CRD_FILE: render_crd(), CALIBRATION_CRD_FILE: render_calibration_crd()}


@click.command("crd")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=CRD_FILE, show_default=True,
              help="Where to write the CRD ('-' for stdout).")
@click.option("--check", is_flag=True, help="Do not write; exit 1 if the file differs from the models.")
def crd_command(output: Path, check: bool) -> None:
    """Generate the CRDs (SpeculativeInference, SpeculativeInferenceCalibration) from the API models.

    With --output FILE (or '-') only the SpeculativeInference CRD is written there."""
    if str(output) == "-":
        click.echo(render_crd(), nl=False)
        return
    in_repo = output == CRD_FILE  # the default target: every CRD, and the Helm chart's copies in step too
    files = rendered_files() if in_repo else {output: render_crd()}
    if check:
        stale_files = [str(path) for path, text in files.items()
                       if (path.read_text() if path.exists() else "") != text]
        stale = chart_copies_out_of_date() if in_repo else []
        if stale_files or stale:
            click.echo(f"{', '.join(stale_files) or 'crds/'} or the chart copies ({', '.join(stale) or 'none stale'}) "
                       "are out of date: run `specinfer crd`", err=True)
            sys.exit(1)
        click.echo(f"{', '.join(str(path) for path in files)} up to date")
        return
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        click.echo(f"wrote {path}")
    if in_repo:
        for name in sync_chart_copies():
            click.echo(f"copied {name} into {CHART_CRD_DIR}")


if __name__ == "__main__":
    crd_command()
