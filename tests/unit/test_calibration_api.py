"""The SpeculativeInferenceCalibration API: the generated CRD and the admission rules' Python twins."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from specinfer.api.calibration import SpeculativeInferenceCalibrationSpec
from specinfer.api.crd import CALIBRATION_CRD_FILE, build_calibration_crd, render_calibration_crd
from tests.unit.test_api_crd import walk

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]


def schema():
    return build_calibration_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_committed_crd_and_chart_copy_match_the_models():
    committed = (ROOT / CALIBRATION_CRD_FILE).read_text()
    assert committed == render_calibration_crd(), "crds/ is stale: run `specinfer crd`"
    assert (ROOT / "charts" / "specinfer" / "crds" / CALIBRATION_CRD_FILE.name).read_text() == committed


def test_spec_is_bounded_described_and_immutable():
    for path, node in walk(schema()):
        if not path.startswith(".spec"):
            continue
        if node.get("type") == "string":
            assert "maxLength" in node or "enum" in node, path
        if node.get("type") == "array":
            assert "maxItems" in node, path
        if not path.endswith("[]"):
            assert node.get("description"), path
    rules = schema()["properties"]["spec"]["x-kubernetes-validations"]
    assert {"rule": "self == oldSelf", "message": rules[-1]["message"]} in rules
    assert "spec is immutable" in rules[-1]["message"]


def test_printer_columns_show_progress_and_the_recommendation():
    version = build_calibration_crd()["spec"]["versions"][0]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Target"] == ".spec.targetRef.name"
    assert columns["Phase"] == ".status.phase" and columns["Progress"] == ".status.progress"
    assert columns["Recommendation"] == ".status.recommendation.summary"
    assert version["subresources"] == {"status": {}}


def parse(**spec):
    return SpeculativeInferenceCalibrationSpec.model_validate({"targetRef": {"name": "t"}, **spec})


def test_defaults():
    spec = parse()
    assert spec.batch_sizes == [1, 4, 16] and spec.candidates == [] and spec.parallelism == 1
    assert spec.load.duration_seconds == 30 and spec.num_speculative_tokens is None
    assert parse(candidates=[{"speculation": {"method": "draftModel", "draftModel": {"name": "d"}}}]) \
        .candidates[0].display_name() == "draftmodel"


@pytest.mark.parametrize(("spec", "message"), [
    ({"batchSizes": [4, 1]}, "spec.batchSizes must be ascending"),
    ({"batchSizes": [1, 1]}, "spec.batchSizes must be ascending"),
    ({"numSpeculativeTokens": [2, 2]}, "spec.numSpeculativeTokens must not list a draft length twice"),
    ({"candidates": [{"speculation": {"method": "ngram"}}, {"speculation": {"method": "ngram"}}]},
     "two candidates have the same name"),
    ({"candidates": [{"name": "configured", "speculation": {"method": "ngram"}}]}, "configured is reserved"),
    ({"candidates": [{"name": "none", "speculation": {"method": "ngram"}}]}, "none is reserved"),
    ({"candidates": [{"speculation": {"method": "ngram", "numSpeculativeTokens": 4,
                                      "schedule": [{"minBatchSize": 1, "maxBatchSize": 8,
                                                    "numSpeculativeTokens": 2}]}}]},
     "a calibration measures fixed draft lengths"),
    ({"candidates": [{"speculation": {"method": "draftModel"}}]}, "spec.speculation.draftModel is required"),
    ({"batchSizes": [0]}, "greater than or equal to 1"),
    ({"load": {"durationSeconds": 0}}, "greater than or equal to 1"),
    ({"parallelism": 17}, "less than or equal to 16"),
])
def test_refused(spec, message):
    with pytest.raises(ValidationError) as caught:
        parse(**spec)
    assert message in str(caught.value)


def test_two_candidates_of_one_method_with_names_are_fine():
    spec = parse(candidates=[{"name": "small", "speculation": {"method": "draftModel", "draftModel": {"name": "a"}}},
                             {"name": "big", "speculation": {"method": "draftModel", "draftModel": {"name": "b"}}}])
    assert [c.display_name() for c in spec.candidates] == ["small", "big"]
