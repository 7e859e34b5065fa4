"""Every vLLM attribute the telemetry reads, and the checks that say clearly when one is missing.

vLLM calls SchedulerStats / IterationStats "not stable interfaces", so the plugin checks these
at start-up (and tests/contract/test_telemetry_contract.py checks them against the pinned
wheel); one list serves both, so the check and the code cannot drift apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from specinfer import VLLM_VERSION

ENTRY_POINT_GROUP = "vllm.stat_logger_plugins"   # vllm/plugins/__init__.py: STAT_LOGGER_PLUGINS_GROUP
ENTRY_POINT_NAME = "specinfer-telemetry"          # the name VLLM_PLUGINS allow-lists

# class -> (wheel file that defines it, attributes the accumulator reads)
READ_FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "SchedulerStats": ("vllm/v1/metrics/stats.py", ("num_running_reqs", "spec_decoding_stats")),
    "SpecDecodingStats": ("vllm/v1/spec_decode/metrics.py",
                          ("num_draft_tokens_per_pos", "num_accepted_tokens_per_pos")),
    "IterationStats": ("vllm/v1/metrics/stats.py", ("inter_token_latencies_iter", "time_to_first_tokens_iter")),
}

# Read once at start-up from the VllmConfig (missing ones fall back, with a warning).
CONFIG_FIELDS = {
    "model_config.served_model_name": "vllm/config/model.py",
    "speculative_config.num_speculative_tokens": "vllm/config/speculative.py",
}


def version_problem(version: str, pinned: str = VLLM_VERSION) -> str | None:
    """A warning when vLLM is not the minor release the plugin was contract-tested against."""
    if version.split(".")[:2] == pinned.split(".")[:2]:
        return None
    return (f"specinfer telemetry was contract-tested against vLLM {pinned} but is running on vLLM {version}; "
            "it checks the stats fields it reads and disables itself if any is missing")


def missing_fields(class_name: str, present: Iterable[str]) -> list[str]:
    """Fields of READ_FIELDS[class_name] that are not in `present`."""
    have = set(present)
    return [name for name in READ_FIELDS[class_name][1] if name not in have]


def present_fields(cls: type) -> set[str]:
    """Attribute names an instance of a vLLM stats class has: dataclass fields, else a fresh instance's."""
    if dataclasses.is_dataclass(cls):
        return {field.name for field in dataclasses.fields(cls)}
    return set(vars(cls()))


def field_problems(classes: dict[str, type]) -> list[str]:
    """One message per missing field, naming the class, its wheel file and the field."""
    problems = []
    for class_name, cls in classes.items():
        for name in missing_fields(class_name, present_fields(cls)):
            source = READ_FIELDS[class_name][0]
            problems.append(f"{class_name}.{name} (vLLM {VLLM_VERSION}: {source}) is missing")
    return problems
