"""Contract: what the catalogue says about Ascend is what vllm-ascend 0.26.0rc1 and its vLLM 0.26.0 do.

The Ascend accelerator runs the vllm-ascend platform plugin (runtime/methods/accelerators/ascend.py,
engines.VLLM_ASCEND_0_26_0RC1): the wheel pinned here is the plugin's own, read together with the vLLM
it pairs with. Its cited lines are checked with every other release's (test_vllm_engine_rules.py,
test_vllm_drafting.py); this module reads back what the lines stand for: the pairing, the model runner,
the K cap, the methods its proposers build, what its runner does with a schedule, and the scheduler it
puts in place of vLLM's. None of it has run on an NPU.
"""

from __future__ import annotations

import ast
import re

import pytest

from specinfer.dev.vllm_wheels import read_source
from specinfer.runtime.methods import ACCELERATORS, all_methods
from specinfer.runtime.methods.engines import VLLM_ASCEND_0_26_0RC1

pytestmark = pytest.mark.unit

ASCEND = ACCELERATORS["ascend"]
RELEASE = VLLM_ASCEND_0_26_0RC1
METADATA = f"vllm_ascend-{RELEASE.plugin.version}.dist-info/METADATA" if RELEASE.plugin else ""


def test_the_accelerator_runs_the_plugin_release_and_the_wheel_is_that_version():
    assert ASCEND.engine is RELEASE and RELEASE.plugin is not None
    version = read_source("vllm_ascend/_version.py", RELEASE)
    assert f"__version__ = version = '{RELEASE.plugin.version}'" in version
    assert RELEASE.image_tag == f"v{RELEASE.plugin.version}"


def test_it_pairs_with_the_vllm_it_is_read_with():
    """vllm-ascend runs on "vLLM (the same version as vllm-ascend)"; its main branch, where 0.26.0rc1 was
    cut, is tested against vLLM's v0.26.0 tag."""
    metadata = read_source(METADATA, RELEASE)
    assert "vLLM (the same version as vllm-ascend)" in metadata
    assert f"CI commitment for vLLM main branch and vLLM v{RELEASE.version} tag" in metadata


def test_it_runs_its_model_runner_v1_unless_the_environment_asks_for_v2():
    patch = read_source("vllm_ascend/patch/platform/patch_use_v2_model_runner.py", RELEASE)
    assert "VllmConfig.use_v2_model_runner = property(_patched_use_v2_model_runner)" in patch
    body = patch[patch.index("def _patched_use_v2_model_runner"):]
    assert "use_v2 = envs.VLLM_USE_V2_MODEL_RUNNER" in body and body.split("return False")[0].count("return") == 1
    assert "import vllm_ascend.patch.platform.patch_use_v2_model_runner" in read_source(
        "vllm_ascend/patch/platform/__init__.py", RELEASE)
    worker = read_source("vllm_ascend/worker/worker.py", RELEASE)
    assert "from vllm_ascend.worker.model_runner_v1 import NPUModelRunner" in worker
    assert ASCEND.model_runners == ("v1",)


def test_its_attention_caps_a_decode_query_at_16_tokens():
    attention = read_source("vllm_ascend/attention/attention_v1.py", RELEASE)
    assert "self.decode_threshold = 1" in attention and "self.decode_threshold += spec_token_num" in attention
    cap = re.search(r"assert self\.decode_threshold <= (\d+)", attention)
    assert cap and ASCEND.max_k == int(cap.group(1)) - 1


def test_its_proposers_build_every_method_the_catalogue_offers_on_ascend():
    factory = read_source("vllm_ascend/spec_decode/__init__.py", RELEASE)
    function = next(node for node in ast.walk(ast.parse(factory))
                    if isinstance(node, ast.FunctionDef) and node.name == "get_spec_decode_method")
    handled: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Compare) and ast.unparse(node.left) == "method":
            for comparator in node.comparators:
                value = ast.literal_eval(comparator)
                handled |= {value} if isinstance(value, str) else set(value)
    offered = {method.vllm_method_on(RELEASE) for method in all_methods() if method.speculates
               and method.supports("ascend")}
    assert offered <= handled, offered - handled


def test_what_its_runner_does_with_a_schedule():
    """A schedule's K reaches the n-gram and suffix proposers; the model drafters draft the startup K, and
    verification follows the schedule only where vLLM keeps async scheduling, whose placeholders trim the
    drafts (EAGLE-style methods incl. MTP and DFlash, and DSpark; not draft models)."""
    config = read_source("vllm/config/vllm.py", RELEASE)
    keeps_async = config[config.index("elif self.scheduler_config.async_scheduling is None:"):]
    keeps_async = keeps_async[:keeps_async.index("logger.warning_once")]
    assert "self.speculative_config.method not in get_args(EagleModelTypes)" in keeps_async
    assert 'self.speculative_config.method != "dspark"' in keeps_async
    types = read_source("vllm/config/speculative.py", RELEASE)
    eagle_types = types[types.index("EagleModelTypes = Literal["):]
    eagle_types = eagle_types[:eagle_types.index("]")]
    assert "MTPModelTypes" in eagle_types and "DFlashModelTypes" in eagle_types and "draft_model" not in eagle_types
    scheduler = read_source("vllm/v1/core/sched/scheduler.py", RELEASE)
    assert "del spec_token_ids[orig_num_spec_tokens:]" in scheduler  # drafts trimmed to the placeholders
    outcomes = {method.vllm_method_on(RELEASE): method.schedule_on_v1_in(RELEASE) for method in all_methods()
                if method.supports("ascend") and method.speculates}
    assert {name: rule.outcome for name, rule in outcomes.items() if rule} == {
        "ngram": "honoured", "suffix": "crash", "draft_model": "dropped", "eagle": "honoured",
        "eagle3": "honoured", "mtp": "honoured", "dflash": "honoured", "dspark": "honoured"}


def test_it_puts_its_own_scheduler_in_place_of_vllms():
    """Why an Ascend engine is not retuned in place: vllm-ascend swaps vLLM's Scheduler for its own at import,
    and sets scheduler_cls itself when one of its scheduler extensions is on; specinfer's scheduler class
    has not been checked against either."""
    line = RELEASE.plugin_replaces_scheduler
    assert line is not None
    assert "import vllm_ascend.patch.platform.patch_balance_schedule" in read_source(
        "vllm_ascend/patch/platform/__init__.py", RELEASE)
    platform = read_source("vllm_ascend/platform.py", RELEASE)
    assert platform.count("vllm_config.scheduler_config.scheduler_cls = (") >= 3
