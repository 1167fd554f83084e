"""End-to-end forwards: a torch.export program (.pt2) with its example inputs, or a user's
`module:function` returning (module, inputs). The user's code runs here, by their explicit request."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import torch

from .core import Built, Unsupported
from .device import Device


def _to(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    return obj


def _program_on(ep: Any, dev: torch.device) -> Any:
    """The exported program as a module on `dev`: torch's pass moves its weights and the devices its graph baked
    in when it was traced (a `torch.arange(n, device=x.device)` on the CPU); moving the module moves only the
    weights, so where a torch lacks the pass that is all that moves."""
    try:
        from torch.export.passes import move_to_device_pass
    except ImportError:
        return ep.module().to(dev)
    return move_to_device_pass(ep, dev).module()


def build_end_to_end(params: dict[str, Any], device: Device) -> Built:
    dev = device.torch_device
    if params["source"] == "pt2":
        export = getattr(torch, "export", None)
        if export is None or not hasattr(export, "load"):
            raise Unsupported("torch.export.load does not exist in this torch")
        ep = export.load(params["path"])
        example = getattr(ep, "example_inputs", None)
        if example is None:
            raise Unsupported("this .pt2 carries no example inputs")
        args, kwargs = example
        try:
            module = _program_on(ep, dev)
        except Exception as exc:
            raise Unsupported(
                f"the exported program cannot move to {dev}: {' '.join(str(exc).split())[:300]}"
            ) from None
    else:
        module_name, _, func_name = params["target"].partition(":")
        if params.get("cwd") and params["cwd"] not in sys.path:
            sys.path.insert(0, params["cwd"])
        factory = getattr(importlib.import_module(module_name), func_name)
        made = factory()
        if not (isinstance(made, tuple) and len(made) == 2):
            raise TypeError(f"{params['target']} must return (module, inputs), got {type(made).__name__}")
        module, inputs = made
        args, kwargs = (
            (inputs, {}) if isinstance(inputs, tuple) else ((), inputs) if isinstance(inputs, dict) else ((inputs,), {})
        )
        try:
            module = module.to(dev)
        except Exception as exc:
            raise Unsupported(f"the module cannot move to {dev}: {exc}") from None
    args, kwargs = _to(args, dev), _to(kwargs, dev)
    if params.get("compile"):
        module = torch.compile(module)

    def forward() -> Any:
        with torch.no_grad():
            return module(*args, **kwargs)

    return Built(forward, None, None, None, (module, args, kwargs))
