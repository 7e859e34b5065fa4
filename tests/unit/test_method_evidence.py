"""Each (method, accelerator) cell of the catalogue says what it rests on (issue 23), and an `engine`
cell is held to it: the tests it names exist, run the real engine, and serve that method there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specinfer.runtime.methods import ACCELERATORS, all_methods
from specinfer.runtime.methods.accelerators.model import read_from

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CELLS = [(method, accelerator, support) for method in all_methods()
         for accelerator, support in method.accelerators.items()]


def serves(text: str, method: str) -> bool:
    """The test file asks for `method` (in a spec) or checks that it runs (in status)."""
    return bool(re.search(rf'"method"\]?\s*(?::|==)\s*"{re.escape(method)}"', text))


@pytest.mark.parametrize(("method", "accelerator", "support"), CELLS,
                         ids=[f"{m.name}-{a}" for m, a, _ in CELLS])
def test_every_cell_rests_on_something_checkable(method, accelerator, support):
    evidence = support.evidence
    if evidence.kind == "engine":
        assert ACCELERATORS[accelerator].device_resource is None, "only the CPU engine runs here"
        for test in evidence.where:
            path = ROOT / test
            assert path.is_file() and path.parent == ROOT / "tests" / "engine", test
            text = path.read_text()
            assert "pytest.mark.engine" in text, f"{test} does not run the real engine"
            assert serves(text, method.name), f"{test} never serves {method.name}"
    elif evidence.kind == "source":
        assert evidence == read_from(ACCELERATORS[accelerator].engine)
    else:
        assert all(page.startswith("https://") for page in evidence.where), evidence


def test_serves_reads_a_spec_and_a_status_check():
    assert serves('{"method": "ngram", "numSpeculativeTokens": 2}', "ngram")
    assert serves('assert x["status"]["effective"]["method"] == "none"', "none")
    assert not serves('{"method": "ngram"}', "none")
