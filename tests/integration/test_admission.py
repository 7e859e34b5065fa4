"""Admission against the real API server: the generated CRD's OpenAPI schema and CEL rules.

Every invalid case of test_admission_cases.yaml must be refused with its message; every
example in examples/ and every supported method x accelerator pair must be accepted.
Server-side dry-run: nothing is stored, so the tests need no cleanup.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from specinfer.api import API_VERSION, CRD_NAME, GROUP, KIND, PLURAL, VERSION
from specinfer.runtime.methods import ACCELERATORS, all_methods
from tests.support import wait_for_crds_established
from tests.unit.test_api_rules import BASE, CASES

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
CRD_FILE = ROOT / "crds" / "specinfer.io_speculativeinferences.yaml"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
NAMESPACE = "default"


@pytest.fixture(scope="module")
def custom_objects(cluster):
    from kubernetes import client

    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    wait_for_crds_established(cluster.kubectl, CRD_NAME)
    return client.CustomObjectsApi(cluster.api_client())


def dry_run_create(api, spec: dict, name: str) -> None:
    body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec}
    api.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body, dry_run="All",
                                        field_validation="Strict")


def rejection_message(api, spec: dict, name: str) -> str:
    from kubernetes.client.exceptions import ApiException

    try:
        dry_run_create(api, spec, name)
    except ApiException as error:
        assert error.status in (400, 422), error.body
        return json.loads(error.body)["message"]
    raise AssertionError(f"the API server accepted invalid resource {name}")


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_invalid_resource_is_rejected_with_its_message(custom_objects, case):
    message = rejection_message(custom_objects, case["spec"], case["name"])
    expected = case.get("server") or case["message"]
    assert expected in message, f"expected {expected!r} in:\n{message}"


def test_base_of_the_invalid_cases_is_accepted(custom_objects):
    dry_run_create(custom_objects, BASE, "base")


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_every_example_is_accepted(custom_objects, path):
    documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert documents, f"{path} holds no resource"
    for document in documents:
        assert document["kind"] == KIND
        dry_run_create(custom_objects, document["spec"], document["metadata"]["name"])


def supported_pairs():
    for method in all_methods():
        for accelerator in ACCELERATORS:
            if method.supports(accelerator):
                yield method, accelerator


def minimal_spec(method, accelerator: str) -> dict:
    speculation: dict = {"method": method.name}
    if method.needs_draft_model:
        speculation["draftModel"] = {"name": "example/draft"}
    if method.k_max:
        speculation["numSpeculativeTokens"] = method.k_max_on(accelerator)  # the largest allowed value
    return {"model": {"name": "example/target"}, "speculation": speculation, "hardware": {"accelerator": accelerator}}


PAIRS = list(supported_pairs())


@pytest.mark.parametrize(("method", "accelerator"), PAIRS, ids=[f"{m.name}-{a}" for m, a in PAIRS])
def test_every_supported_method_accelerator_pair_is_accepted(custom_objects, method, accelerator):
    dry_run_create(custom_objects, minimal_spec(method, accelerator), f"{method.name.lower()}-{accelerator}")


def test_defaults_are_applied_by_the_api_server(custom_objects):
    spec = {"model": {"name": "example/target"}, "speculation": {"method": "ngram"}}
    body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "defaults"}, "spec": spec}
    created = custom_objects.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body, dry_run="All")
    assert created["spec"]["hardware"]["accelerator"] == "nvidia"
    assert created["spec"]["tuning"]["mode"] == "observe"
    assert created["spec"]["runtime"]["engine"] == "vllm"


SEMANTIC_ONLY = [
    ({"speculation": {"advanced": {"draft_tensor_parallel_size": 3}}, "hardware": {"count": 4}},
     "spec.speculation.advanced.draft_tensor_parallel_size must be 1 or the target's tensor parallel size 4"),
    ({"speculation": {"advanced": {"rejection_sample_method": "synthetic"}}},
     "spec.speculation.advanced.rejection_sample_method synthetic needs exactly one of"),
    ({"speculation": {"method": "mtp", "draftModel": None, "numSpeculativeTokens": 1},
      "tuning": {"minNumSpeculativeTokens": 9}},
     "spec.tuning.minNumSpeculativeTokens must be <= 8, the largest K of method mtp on nvidia"),
    # argparse's abbreviations of owned flags: the prefix regex is over the API server's CEL cost budget
    ({"runtime": {"extraArgs": ["--speculative-conf={}"]}},
     "spec.runtime.extraArgs[0]: '--speculative-conf={}' sets vLLM's --speculative-config"),
    ({"runtime": {"extraArgs": ["-s", "{}"]}}, "spec.runtime.extraArgs[0]: '-s' sets vLLM's --speculative-config"),
    ({"runtime": {"extraArgs": ["--scheduler-c", "my.pkg.Scheduler"]}},
     "spec.runtime.extraArgs[0]: '--scheduler-c' sets vLLM's --scheduler-cls, which the spec owns"),
    # a numeric flag's value in the next item, or none: a rule on the list, which CEL cannot make (engine_flags.py)
    ({"runtime": {"extraArgs": ["--max-num-seqs", "abc"]}},
     "spec.runtime.extraArgs[1]: vLLM's --max-num-seqs (spec.runtime.extraArgs[0]) takes an integer, not 'abc'"),
    ({"runtime": {"extraArgs": ["--enforce-eager", "--max-num-seqs"]}},
     "spec.runtime.extraArgs[1]: '--max-num-seqs' needs a value, but it is the last item"),
    # vLLM on CPU runs tensor parallel size 1 whatever count says (the accelerator's rule)
    ({"speculation": {"advanced": {"draft_tensor_parallel_size": 2}}, "hardware": {"accelerator": "cpu", "count": 2}},
     "spec.speculation.advanced.draft_tensor_parallel_size must be 1 or the target's tensor parallel size 1"),
    # K unset: FLy's window is checked against the method's default K
    ({"speculation": {"numSpeculativeTokens": None,
                      "advanced": {"rejection_sample_method": "fly", "fly_window_size": 3}}},
     "spec.speculation.advanced.fly_window_size must be smaller than the draft length K (3), got 3; "
     "K 3 is the default"),
    ({"speculation": {"schedule": [{"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 4}]},
      "runtime": {"extraArgs": ["--data-parallel-size", "2"]}},
     "spec.speculation.schedule would not be in force: vLLM 0.33.0 drops the schedule with data parallelism > 1"),
]


@pytest.mark.parametrize(("patch", "message"), SEMANTIC_ONLY,
                         ids=["draft-tp", "synthetic", "tuning-min", "extra-args-abbreviation",
                              "extra-args-short-prefix", "extra-args-engine-class-abbreviation",
                              "extra-args-value-in-the-next-item", "extra-args-missing-value", "cpu-draft-tp",
                              "fly-default-k", "schedule-dp"])
def test_what_cel_cannot_express_passes_admission_and_fails_parse_spec(custom_objects, patch, message):
    """These reach the operator, which reports Ready=False/InvalidSpec with parse_spec's message."""
    from specinfer.api import InvalidSpecError, parse_spec
    from tests.unit.test_api_rules import deep_merge

    spec = deep_merge(BASE, patch)
    dry_run_create(custom_objects, spec, "semantic")
    with pytest.raises(InvalidSpecError) as caught:
        parse_spec(spec)
    assert message in caught.value.describe_all()


def test_status_subresource_accepts_the_typed_status_and_printer_columns_show_it(custom_objects, cluster, namespace):
    from specinfer.api import SpeculativeInferenceStatus

    body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "status"}, "spec": BASE}
    custom_objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    status = SpeculativeInferenceStatus.model_validate({
        "observedGeneration": 1,
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Available", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Tuned", "status": "True", "reason": "Applied"},
        ],
        "replicas": 1,
        "readyReplicas": 1,
        "effective": {"method": "eagle3", "numSpeculativeTokens": 3, "configHash": "abc123",
                      "schedule": [{"minBatchSize": 1, "maxBatchSize": 32, "numSpeculativeTokens": 3},
                                   {"minBatchSize": 33, "maxBatchSize": 33, "numSpeculativeTokens": 0}]},
        "tuning": {"mode": "auto", "applied": {"numSpeculativeTokens": 3, "since": "2026-01-01T00:00:00Z"},
                   "history": [{"action": "setK", "reason": "higher goodput", "predictedGain": 0.12}]},
        "metrics": {"acceptanceRate": 0.71, "perPositionAcceptance": [0.8, 0.6, 0.4]},
    })
    custom_objects.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, "status", {"status": status.to_json()})
    stored = custom_objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "status")
    assert SpeculativeInferenceStatus.model_validate(stored["status"]) == status
    table = cluster.kubectl("get", "si", "status", "-n", namespace, "-o", "wide").stdout
    header, row = table.splitlines()[:2]
    assert header.split()[:6] == ["NAME", "MODEL", "METHOD", "K", "ACCEPTANCE", "READY"]
    assert row.split()[1:6] == ["meta-llama/Llama-3.1-8B-Instruct", "eagle3", "3", "0.71", "True"]
