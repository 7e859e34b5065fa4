"""Golden files: the exact manifests for every method x accelerator pair the catalogue supports.

Each file under golden/render/ was read by a person once; a diff here is a change in
what the operator applies to every cluster. Regenerate deliberately with
SPECINFER_UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specinfer.operator.pure.config import OperatorConfig
from specinfer.operator.render import render
from specinfer.operator.render_cli import dump_manifests
from specinfer.runtime.methods import all_methods

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden" / "render"
PAIRS = [(m.name, accelerator) for m in all_methods() for accelerator in m.accelerators]


def resource_for(method_name: str, accelerator: str) -> dict:
    method = next(m for m in all_methods() if m.name == method_name)
    speculation: dict = {"method": method_name}
    if method.needs_draft_model:
        speculation["draftModel"] = {"name": "example-org/draft-head"}
    return {
        "apiVersion": "specinfer.io/v1alpha1",
        "kind": "SpeculativeInference",
        "metadata": {"name": f"golden-{method_name.lower()}", "namespace": "serving",
                     "uid": "00000000-0000-4000-8000-000000000001", "generation": 1},
        "spec": {
            "model": {"name": "example-org/target-model", "servedModelName": "target"},
            "speculation": speculation,
            "hardware": {"accelerator": accelerator, "count": 1 if accelerator == "cpu" else 2},
        },
    }


def test_every_golden_file_is_a_supported_pair_and_every_pair_has_one():
    """A method or accelerator support added without its reviewed golden file, or one dropped while its
    file stays behind, fails here (the per-pair test below only sees the pairs the catalogue lists)."""
    files = {path.stem for path in GOLDEN.glob("*.yaml")}
    pairs = {f"{method}-{accelerator}" for method, accelerator in PAIRS}
    assert files - pairs == set(), f"golden files for pairs the catalogue does not support: {sorted(files - pairs)}"
    assert pairs - files == set(), f"supported pairs without a reviewed golden file: {sorted(pairs - files)}"


@pytest.mark.parametrize(("method", "accelerator"), PAIRS)
def test_render_matches_golden(method: str, accelerator: str):
    text = dump_manifests(render(resource_for(method, accelerator), OperatorConfig(), podmonitor=True).manifests)
    path = GOLDEN / f"{method}-{accelerator}.yaml"
    if os.environ.get("SPECINFER_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}: run with SPECINFER_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(), f"rendering of {method} on {accelerator} changed: review, then update {path}"
