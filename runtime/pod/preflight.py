"""Checks that fail fast, with the field to fix, before vLLM spends minutes loading weights."""

from __future__ import annotations

import importlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specinfer.runtime.contract.argv import tensor_parallel_size
from specinfer.runtime.contract.runtime_config import SpeculativeInferenceSpec
from specinfer.runtime.methods import get_accelerator, get_method
from specinfer.runtime.methods.accelerators import TorchDevices
from specinfer.runtime.pod.config import MisconfigurationError

DeviceCounter = Callable[[str], "int | None"]


def visible_devices(accelerator: str) -> int | None:
    """Devices torch sees for this accelerator family; None when torch (or its backend) is absent.

    vLLM images carry torch, so in a pod this is a real check; elsewhere it is skipped. The
    accelerator's `device_count` says where torch reports them (`TorchDevices`: ROCm builds report
    AMD GPUs through torch.cuda; Ascend's torch.npu comes with torch_npu), or that nothing is
    counted there (`NoDeviceCount`: the CPU). Registration refuses an accelerator that does not say.
    """
    check = get_accelerator(accelerator).device_count
    if not isinstance(check, TorchDevices):
        return None
    try:
        import torch

        if check.plugin is not None:
            importlib.import_module(check.plugin)
    except ImportError:
        return None
    backend = getattr(torch, check.backend, None)
    if backend is None:
        return None
    return int(backend.device_count())


def local_models(spec: SpeculativeInferenceSpec) -> list[tuple[str, str]]:
    """(field, path) of the target and draft models given as absolute paths, which vLLM loads from disk.

    vLLM treats a name that is an existing directory as a local model and anything else as a hub
    id, so a missing directory would otherwise surface as a confusing hub lookup failure."""
    named = [("spec.model.name", spec.model.name)]
    if spec.speculation.draft_model is not None:
        named.append(("spec.speculation.draftModel.name", spec.speculation.draft_model.name))
    return [(field, name) for field, name in named if name.startswith("/")]


def read_model_config(field: str, directory: str) -> dict[str, Any] | None:
    """A local model directory's config.json; None without one (a Mistral-format checkpoint has
    params.json instead: vLLM decides what it can load)."""
    path = Path(directory) / "config.json"
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise MisconfigurationError(field, f"{field}: {path} cannot be read as JSON ({error})") from None
    if not isinstance(config, dict):
        raise MisconfigurationError(field, f"{field}: {path} is not a JSON object")
    return config


def check_drafter_fit(spec: SpeculativeInferenceSpec) -> None:
    """The method's drafter-fit rule (its MethodSpec's) on the target's config and the drafter's, where
    they are local directories (a hub id is not fetched here)."""
    method = get_method(spec.speculation.method)
    local = dict(local_models(spec))
    target_field, draft_field = "spec.model.name", "spec.speculation.draftModel.name"
    if method.drafter_fit is None or target_field not in local:
        return
    target = read_model_config(target_field, local[target_field])
    draft_dir = local.get(draft_field) if method.accepts_draft_model else None
    drafter = read_model_config(draft_field, draft_dir) if draft_dir is not None else None
    if target is None or (draft_dir is not None and drafter is None):
        return
    misfit = method.drafter_fit(target, drafter)
    if misfit is None:
        return
    if drafter is not None:
        raise MisconfigurationError(draft_field, f"{draft_field}: the drafter {draft_dir} does not fit the "
                                    f"target {local[target_field]} (method {method.name}): {misfit}")
    raise MisconfigurationError(target_field, f"{target_field}: the target {local[target_field]} cannot serve "
                                f"method {method.name}: {misfit}")


def preflight(spec: SpeculativeInferenceSpec, *, engine_binary: bool = True,
              count_devices: DeviceCounter | None = None, which: Callable[[str], str | None] | None = None) -> None:
    """Raise MisconfigurationError for the first problem found."""
    count_devices = count_devices or visible_devices
    which = which or shutil.which
    speculation, hardware = spec.speculation, spec.hardware
    method = get_method(speculation.method)
    if not method.supports(hardware.accelerator):
        supported = ", ".join(sorted(method.accelerators))
        raise MisconfigurationError(
            "spec.speculation.method",
            f"spec.speculation.method {method.name} is not supported on {hardware.accelerator} "
            f"(supported: {supported}): choose another method or accelerator")
    if method.needs_draft_model and speculation.draft_model is None:
        raise MisconfigurationError(
            "spec.speculation.draftModel",
            f"spec.speculation.draftModel is required by method {method.name}: set draftModel.name")
    tp = tensor_parallel_size(spec)
    visible = count_devices(hardware.accelerator)
    if visible is not None and visible < tp:
        field = "spec.hardware.tensorParallelSize" if hardware.tensor_parallel_size else "spec.hardware.count"
        raise MisconfigurationError(
            field,
            f"{field} asks for tensor parallel size {tp} but only {visible} {hardware.accelerator} device(s) "
            "are visible in this container: lower it or request more devices")
    for field, name in local_models(spec):
        if not Path(name).is_dir():
            raise MisconfigurationError(
                field, f"{field}: the local model directory {name} does not exist in this container: "
                "mount it (e.g. a volume at that path) or give a Hugging Face model id")
    check_drafter_fit(spec)
    if engine_binary and which("vllm") is None:
        raise MisconfigurationError(
            "spec.runtime.image",
            "spec.runtime.image: `vllm` is not on PATH in this container: use a vLLM image "
            "(or spec.runtime.engine simulator)")
