"""Tick records: what the policy decided from, one JSON line per decision, and their replay.

With `tuning.recordFile` set in the operator configuration the loop appends, for every decision,
the policy's whole input -- the observation, the tuning input and the stored state, in the JSON
forms of docs/tuner.md -- and what it decided. `replay` runs the pure policy over those lines
again, so a decision seen on a live engine can be explained (and turned into a regression test)
offline, with the code of today. `specinfer tuner replay FILE` prints it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specinfer.operator.tuner.policy import Decision, Observation, PolicyState, TuningInput, decide_json
from specinfer.operator.tuner.policy.observation import observation_to_json

log = logging.getLogger("specinfer.operator.tuner")
RECORD_VERSION = 1


def tick_record(namespace: str, name: str, now: float, observation: Observation, tuning: TuningInput,
                state: PolicyState | None, decision: Decision) -> dict[str, Any]:
    """One decision and everything it was decided from, as JSON."""
    return {"version": RECORD_VERSION, "namespace": namespace, "name": name, "now": now,
            "observation": observation_to_json(observation),
            "tuning": tuning.model_dump(mode="json", by_alias=True),
            "state": state.to_json() if state is not None else None,
            "decision": decision.to_json()}


def append_record(path: str, record: dict[str, Any]) -> None:
    """Append one line; a recording that cannot be written is logged, never fails the tick."""
    try:
        with Path(path).open("a", encoding="utf-8") as out:
            out.write(json.dumps(record, separators=(",", ":")) + "\n")
    except OSError as error:
        log.warning("cannot record the tick in %s: %s", path, error)


def read_records(path: str | Path, resource: str | None = None) -> Iterator[dict[str, Any]]:
    """The records of a file, optionally of one resource ("namespace/name" or "name")."""
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as error:
            raise ValueError(f"{path}:{number}: not a JSON record: {error}") from error
        if not isinstance(record, dict) or record.get("version") != RECORD_VERSION:
            raise ValueError(f"{path}:{number}: not a version-{RECORD_VERSION} tick record")
        if resource and resource not in (record.get("name"), f"{record.get('namespace')}/{record.get('name')}"):
            continue
        yield record


@dataclass(frozen=True)
class Replayed:
    record: dict[str, Any]
    decision: dict[str, Any]  # what today's policy decides from the recorded input

    @property
    def recorded(self) -> dict[str, Any]:
        return dict(self.record["decision"])

    @property
    def same(self) -> bool:
        return (self.decision.get("action"), self.decision.get("config")) == \
            (self.recorded.get("action"), self.recorded.get("config"))


def replay(record: dict[str, Any]) -> Replayed:
    """Today's decision on a recorded tick's input (the recorded state, not a replayed one)."""
    decision, _ = decide_json(record["observation"], record["tuning"], record["state"], float(record["now"]))
    return Replayed(record, decision)
