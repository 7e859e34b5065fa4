"""README.md is what a newcomer reads first: short, true now, and every path it names exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_it_is_short_and_holds_no_dated_runs():
    assert len(README.splitlines()) <= 150
    # measured figures live in docs/performance.md and docs/development.md with their date and command
    assert not re.findall(r"\b20\d\d-\d\d-\d\d\b", README)


def test_the_two_commands_are_make_targets():
    assert "make demo" in README and "make test" in README
    makefile = (ROOT / "Makefile").read_text()
    for target in ("demo", "test", "setup", "test-unit", "test-contract", "test-integration", "test-e2e"):
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), target
        assert f"make {target}" in README, target


def test_every_linked_file_and_named_folder_exists():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert links
    for link in links:
        assert (ROOT / link).exists(), link
    for folder in re.findall(r"^\| `([^`]+/)`", README, re.M):
        assert (ROOT / folder).is_dir(), folder
