"""examples/: every resource parses, each method has an example, and the demo resource is what the demo needs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from specinfer.api import effective_speculation, parse_resource
from specinfer.api.speculation import AUTO
from specinfer.runtime.methods import METHOD_NAMES

pytestmark = pytest.mark.unit

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))


def resources(path: Path):
    return [parse_resource(document) for document in yaml.safe_load_all(path.read_text()) if document]


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_example_parses_and_is_commented(path):
    assert resources(path)
    assert path.read_text().lstrip().startswith("#"), f"{path.name} should open with a comment explaining it"


def test_every_method_has_an_example():
    known = {*METHOD_NAMES, AUTO}
    methods = {resource.spec.speculation.method for path in EXAMPLES for resource in resources(path)}
    assert methods == known, f"examples/: no resource uses method {', '.join(sorted(known - methods))}: add one"


def test_demo_resource():
    (demo,) = resources(EXAMPLES[0].parent / "specinference.yaml")
    assert demo.spec.runtime.engine == "simulator"
    assert demo.spec.tuning.mode == "auto"
    assert demo.spec.hardware.accelerator == "nvidia"
    assert demo.spec.speculation.method == "eagle3"
    assert "Llama-3.1-8B" in demo.spec.model.name
    assert effective_speculation(demo.spec).speculative_config["model"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
