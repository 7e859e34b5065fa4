"""A sample of fuzzed specs through the real API server (issue 9, item 2).

The offline fuzzing (tests/unit/test_fuzz_specs.py) proves render never crashes; this proves
what it renders is accepted: every child manifest of 50 fuzzed specs that render passes the API
server's server-side dry-run. (A spec that passes admission but renders a Deployment the API server
refuses would leave the resource without any status -- the first run of this test found four such
holes: tolerations, node selectors, Secret names and resource quantities.)
"""

from __future__ import annotations

import json
import random

import pytest

from specinfer.api import InvalidSpecError
from specinfer.operator.render import render
from tests.unit.test_fuzz_specs import CONFIG, build

pytestmark = pytest.mark.integration

SAMPLE = 50


def renderable_sample(namespace: str, count: int, seed: int = 9) -> list[tuple[dict, list[dict]]]:
    rng = random.Random(seed)
    sample = []
    while len(sample) < count:
        resource = build(rng)
        resource.pop("status", None)  # a resource is created without status
        resource["metadata"] = {"name": f"fuzz-{len(sample)}", "namespace": namespace,
                                "uid": "00000000-0000-0000-0000-000000000000"}
        try:
            rendering = render(resource, CONFIG)
        except InvalidSpecError:
            continue
        sample.append((resource, rendering.manifests))
    return sample


def dry_run(cluster, documents: list[dict]) -> str:
    # JSON, not YAML: PyYAML writes the string "1e3" unquoted and the API server's YAML 1.2 reads a number
    result = cluster.kubectl("apply", "--server-side", "--dry-run=server", "--field-manager=fuzz", "-f", "-",
                             input=json.dumps({"apiVersion": "v1", "kind": "List", "items": documents}),
                             check=False, timeout=120)
    return "" if result.returncode == 0 else result.stderr


def test_rendered_manifests_of_fuzzed_specs_pass_server_side_dry_run(cluster, namespace):
    sample = renderable_sample(namespace, SAMPLE)
    children = [manifest for _, manifests in sample for manifest in manifests]
    live = sum(1 for _, manifests in sample for m in manifests if m["metadata"]["name"].endswith("-schedule"))
    assert len(children) == 3 * SAMPLE + live  # an engine retuned in place has its schedule ConfigMap too
    errors = dry_run(cluster, children)
    assert not errors, f"the API server refused rendered manifests:\n{errors[:4000]}"
