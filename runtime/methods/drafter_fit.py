"""Does a drafter fit its target? Read from the two config.json files, before vLLM loads a weight. Pure.

Each method's module names its rule (`MethodSpec.drafter_fit`); preflight applies it to local
model directories.

vLLM 0.32/0.33 checks a drafter against its target only for DSpark on Qwen3-Omni
(vllm/config/speculative.py); for the others a mismatch surfaces minutes later as a shape error
deep in a forward pass, or as garbage drafts. The rules below follow how vLLM builds each drafter:

- eagle (model_executor/models/llama_eagle.py): `fc` takes the draft's embedding and the target's
  hidden state concatenated (`hidden_size * 2`), and the head is the target's: hidden size and
  vocabulary must be the target's.
- eagle3 (llama_eagle3.py): `fc` takes `target_hidden_size` (default: its own `hidden_size`) times
  the number of auxiliary states; the states are collected where the target's layer index is in
  the id list (models/interfaces.py `_maybe_add_hidden_state`: id 0 the embedding output, id k the
  output of layer k-1, a set, so duplicates collapse); an id outside [0, layers] is silently never
  collected. `draft_vocab_size` may be smaller than the target's vocabulary (a d2t map), never larger.
- dflash: its `dflash_config.target_layer_ids` are used as id + 1 (v1/worker/gpu_model_runner.py),
  its `fc` takes the target's hidden states.
- draftModel: the draft proposes token ids the target verifies: the same vocabulary.
- mtp: the MTP layers live in the target's own checkpoint; a config that declares zero has none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

Config = Mapping[str, Any]


def _text(config: Config) -> Config:
    """The language model's part of a (possibly multimodal) config."""
    text = config.get("text_config")
    return text if isinstance(text, Mapping) else config


def _int(config: Config, key: str) -> int | None:
    value = _text(config).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def eagle3_aux_layer_ids(drafter: Config) -> Sequence[Any] | None:
    """The auxiliary layer ids as vLLM reads them (gpu_model_runner.py): top-level, else eagle_config's."""
    ids = drafter.get("eagle_aux_hidden_state_layer_ids")
    if not ids:
        eagle_config = drafter.get("eagle_config")
        if isinstance(eagle_config, Mapping):
            ids = eagle_config.get("eagle_aux_hidden_state_layer_ids")
    return ids if ids else None


def _layer_id_problem(ids: Sequence[Any], layers: int, what: str, expected: int | None) -> str | None:
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return f"{what} {list(ids)} are not all integers"
    outside = [i for i in ids if not 0 <= i <= layers]
    if outside:
        return (f"{what} {list(ids)} name {outside}, outside the target's 0..{layers} (0: the embedding "
                f"output, k: the output of layer k-1 of its {layers}); vLLM never collects those states")
    if len(set(ids)) != len(ids):
        return f"{what} {list(ids)} repeat an id; vLLM collects each layer once, so fewer states reach fc"
    if expected is not None and len(ids) != expected:
        return f"{what} {list(ids)} are {len(ids)} states but num_aux_hidden_states is {expected}"
    return None


def _same(drafter: Config, target: Config, key: str, label: str, *, drafter_key: str | None = None) -> str | None:
    mine, theirs = _int(drafter, drafter_key or key), _int(target, key)
    if mine is not None and theirs is not None and mine != theirs:
        return f"{drafter_key or key} {mine} does not match the target's {key} {theirs} ({label})"
    return None


# One rule per method, hung on its MethodSpec (`drafter_fit`): (target config, drafter config or
# None) -> why they do not fit, or None when they fit or the configs do not say.
DrafterFit = Callable[[Config, "Config | None"], "str | None"]


def eagle_fit(target: Config, drafter: Config | None) -> str | None:
    if drafter is None:
        return None
    return (_same(drafter, target, "hidden_size", "fc concatenates the target's hidden states")
            or _same(drafter, target, "vocab_size", "the head is the target's"))


def eagle3_fit(target: Config, drafter: Config | None) -> str | None:
    if drafter is None:
        return None
    hidden = _int(drafter, "target_hidden_size") is not None
    problem = (_same(drafter, target, "hidden_size", "fc reads the target's hidden states",
                     drafter_key="target_hidden_size" if hidden else "hidden_size")
               or _same(drafter, target, "vocab_size", "it embeds the target's token ids"))
    if problem:
        return problem
    draft_vocab, vocab = _int(drafter, "draft_vocab_size"), _int(target, "vocab_size")
    if draft_vocab is not None and vocab is not None and not 0 < draft_vocab <= vocab:
        return f"draft_vocab_size {draft_vocab} must be between 1 and the target's vocab_size {vocab}"
    layers = _int(target, "num_hidden_layers")
    if layers is None:
        return None
    ids = eagle3_aux_layer_ids(drafter)
    if ids is None:  # vLLM's default (models/interfaces.py get_eagle3_default_aux_hidden_state_layers)
        default = (2, layers // 2, layers - 3)
        problem = _layer_id_problem(default, layers, "vLLM's default auxiliary layer ids", None)
        return problem and (problem + "; set eagle_aux_hidden_state_layer_ids in the drafter's config")
    return _layer_id_problem(ids, layers, "eagle_aux_hidden_state_layer_ids", _int(drafter, "num_aux_hidden_states"))


def dflash_fit(target: Config, drafter: Config | None) -> str | None:
    if drafter is None:
        return None
    problem = (_same(drafter, target, "hidden_size", "fc reads the target's hidden states")
               or _same(drafter, target, "vocab_size", "the head is the target's"))
    layers = _int(target, "num_hidden_layers")
    dflash = drafter.get("dflash_config")
    ids = dflash.get("target_layer_ids") if isinstance(dflash, Mapping) else None
    if problem or layers is None or not isinstance(ids, list) or not ids:
        return problem
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return f"dflash_config.target_layer_ids {ids} are not all integers"
    return _layer_id_problem([i + 1 for i in ids], layers, "dflash_config.target_layer_ids (+1)", None)


def draft_model_fit(target: Config, drafter: Config | None) -> str | None:
    if drafter is None:
        return None
    return _same(drafter, target, "vocab_size", "the target verifies the draft's token ids")


def mtp_target_fit(target: Config, drafter: Config | None) -> str | None:
    """MTP drafts with layers of the target's own checkpoint: the target is what is checked."""
    for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers"):
        declared = _int(target, key)
        if declared is not None and declared <= 0:
            return f"the target's config declares {key} {declared}: it carries no MTP layer"
    return None
