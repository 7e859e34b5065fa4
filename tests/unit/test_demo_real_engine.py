"""The real-engine demo's resource and operator configuration, per --method."""

from __future__ import annotations

from pathlib import Path

import pytest

from specinfer.api import parse_spec
from specinfer.dev.demo import real_engine

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("method, folder", [("draftModel", "draft-same"), ("eagle3", "eagle3-bigram")])
def test_each_method_drafts_with_its_models_make_folder_and_passes_admission(method, folder):
    body = real_engine.resource(Path("/models"), method=method)
    spec = parse_spec(body["spec"])
    assert spec.speculation.method == method
    assert spec.speculation.draft_model.name == f"/models/{folder}"
    assert spec.tuning.mode == "auto" and spec.hardware.accelerator == "cpu"


def test_the_cost_prior_is_the_methods_own():
    draft, eagle3 = (real_engine.operator_config(method)["tuning"]["policy"]["costPrior"]
                     for method in ("draftModel", "eagle3"))
    assert eagle3["draftPassSeconds"] < draft["draftPassSeconds"]  # a one-layer head, a two-layer draft
    assert real_engine.OPERATOR_CONFIG == real_engine.operator_config("draftModel")
