"""A model's random weights at the cost of their bytes: built without values, then drawn from the stream.

A library's own init of a model (transformers' `_init_weights`, `nn.Linear.reset_parameters`) is the slowest
part of building one with random weights on a CPU (36 s for a 3B model, and the values are overwritten anyway).
So a model is constructed with its large parameters on the meta device (`parameters_without_values`: buffers such
as rotary frequencies stay real, and so do small parameters, whose library init tells a constant norm gain from a
drawn one), and then either

- `materialize`: every such parameter made on the device and filled from the stream (values.py), for a build; or
- `JustInTime`: each module's own parameters made in float64 just before its forward and dropped after it, for the
  float64 reference, which then holds one module's weights at a time (a large output head or embedding is drawn in
  row blocks: `STREAM_CHUNK_ELEMENTS` at a time) instead of a float64 copy of the whole model. For a backward
  (`for_backward`: the LoRA training step's reference) each draw is a tensor of its own, which autograd keeps
  while it needs it, and the blocks are recomputed in the backward (training.py checkpoints them).

Both draw the same values, in the same order, under the same names, so their digests agree."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from . import values

# Parameters at least this large are built without values: below it, a library's init costs nothing and says
# which parameters it sets to one constant (a norm's ones).
STREAM_LEAST = 1 << 16
# A plain Linear or Embedding whose float64 weight is larger than this is drawn in row blocks of about this many
# elements (256 MiB in float64), never whole: an 8B model's output head is 4 GiB in float64.
STREAM_CHUNK_ELEMENTS = 1 << 25


@contextlib.contextmanager
def parameters_without_values(least: int | None = None) -> Iterator[None]:
    """While open, every parameter of `least` (default STREAM_LEAST) elements or more that a module registers is
    moved to the meta device as it is registered: the library's init of it then costs nothing, and buffers keep
    their values."""
    register = torch.nn.Module.register_parameter
    least = STREAM_LEAST if least is None else least

    def register_on_meta(self: torch.nn.Module, name: str, param: torch.nn.Parameter | None) -> None:
        if param is not None and param.numel() >= least and not param.is_meta:
            param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register(self, name, param)

    torch.nn.Module.register_parameter = register_on_meta  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register  # type: ignore[method-assign]


def _swap(module: torch.nn.Module, made: dict[int, torch.nn.Parameter], device: torch.device) -> None:
    """Every meta parameter of `module` replaced by an empty one on `device`; a shared one stays shared."""
    for sub in module.modules():
        for key, p in list(sub._parameters.items()):
            if p is None or not p.is_meta:
                continue
            new = made.get(id(p))
            if new is None:
                empty = torch.empty(p.shape, dtype=p.dtype, device=device)
                new = made[id(p)] = torch.nn.Parameter(empty, requires_grad=p.requires_grad)
            sub._parameters[key] = new


def materialize(module: torch.nn.Module, device: torch.device, value_dtype: torch.dtype) -> None:
    """A model built under `parameters_without_values`, given memory on `device` and its values from the stream,
    planned in the model's own order (the digest's)."""
    plans = values.plan_parameters(module, value_dtype)
    made: dict[int, torch.nn.Parameter] = {}
    _swap(module, made, device)
    for p, plan in plans:
        values.fill(made.get(id(p), p), plan)


def meta_bytes(module: torch.nn.Module, itemsize: int = 8) -> int:
    """The largest set of parameters `JustInTime` holds at once for one module: its own (a large Linear's or
    Embedding's in row blocks), at `itemsize` bytes an element."""
    largest = 0
    for sub in module.modules():
        own = [p for p in sub._parameters.values() if p is not None and p.is_meta]
        n = sum(p.numel() for p in own)
        if _chunked(sub) is not None:
            n = min(n, STREAM_CHUNK_ELEMENTS + sum(p.numel() for p in own if p.dim() == 1))
        largest = max(largest, n)
    return largest * itemsize


def _chunked(sub: torch.nn.Module) -> str | None:
    """ "linear" or "embedding" where the module is exactly that class (a subclass may compute more in its own
    forward) and its weight is too large to draw whole."""
    weight = sub._parameters.get("weight")
    if weight is None or weight.numel() <= STREAM_CHUNK_ELEMENTS or weight.dim() != 2:
        return None
    if type(sub) is torch.nn.Linear:
        return "linear"
    if type(sub) is torch.nn.Embedding and sub.max_norm is None and not sub.sparse:
        return "embedding"
    return None


class _Arena:
    """Float64 buffers reused from one module's forward to the next: a fresh allocation of a block's weights
    would page-fault (and zero) every byte again, which on a CPU costs more than drawing them."""

    def __init__(self) -> None:
        self.free: list[torch.Tensor] = []

    def take(self, n: int) -> torch.Tensor:
        fits = [i for i, b in enumerate(self.free) if b.numel() >= n]
        if fits:
            return self.free.pop(min(fits, key=lambda i: self.free[i].numel()))
        return torch.empty(n, dtype=torch.float64)

    def give(self, buffer: torch.Tensor) -> None:
        self.free.append(buffer)


class JustInTime:
    """The float64 reference's weights: each module's own meta parameters drawn just before its forward and gone
    after it (forward hooks), so only one module's weights are in memory at a time. Holds the plan: the digest was
    noted when it was made, in the model's own order, as a build's `materialize` notes it."""

    def __init__(
        self, model: torch.nn.Module, value_dtype: torch.dtype, *, widen: bool = False, for_backward: bool = False
    ) -> None:
        # widen: a loaded model (--real-weights), whose own values are widened to float64 a module at a time.
        # for_backward: no buffer is reused, since autograd may still hold a released one for its backward.
        plans = [] if widen else values.plan_parameters(model, value_dtype)
        self.plans = {id(p): plan for p, plan in plans}
        for p, plan in plans:
            if not p.is_meta:  # small parameters hold memory already: drawn now, as a build draws them
                values.fill(p, plan)
        self.arena = None if for_backward else _Arena()
        self.lent: dict[int, torch.Tensor] = {}  # by the data pointer of what was handed out: its whole buffer
        self.handles: list[Any] = []
        self.peak_elements = 0
        self.live_elements = 0

        def streamed(p: torch.nn.Parameter | None) -> bool:
            if p is None:
                return False
            return p.is_meta or (widen and p.is_floating_point() and p.dtype != torch.float64)

        for sub in model.modules():
            own = [(k, p) for k, p in sub._parameters.items() if p is not None and streamed(p)]
            if not own:
                continue
            how = _chunked(sub)
            if how is not None:
                sub.forward = self._chunked_forward(sub, how)  # type: ignore[method-assign]
            else:
                self.handles.append(sub.register_forward_pre_hook(self._before(own)))
                self.handles.append(sub.register_forward_hook(self._after(own)))

    def _made(self, p: torch.Tensor, start: int = 0, count: int | None = None) -> torch.Tensor:
        """Elements [start, start + count) of a parameter in float64, in an arena buffer (count: all of it)."""
        n = p.numel() - start if count is None else count
        buffer = self.arena.take(n) if self.arena is not None else torch.empty(n, dtype=torch.float64)
        out = buffer[:n]
        self.lent[out.data_ptr()] = buffer
        if not p.is_meta:
            out.copy_(p.detach().reshape(-1)[start : start + n])
        else:
            plan = self.plans.get(id(p))
            if plan is None or plan.draw is None:
                raise RuntimeError(f"no values planned for a parameter of shape {tuple(p.shape)}")
            plan.draw.fill(out, start)
        self.live_elements += buffer.numel()
        self.peak_elements = max(self.peak_elements, self.live_elements)
        return out

    def _release(self, t: torch.Tensor) -> None:
        buffer = self.lent.pop(t.data_ptr())
        self.live_elements -= buffer.numel()
        if self.arena is not None:
            self.arena.give(buffer)

    def _before(self, own: list[tuple[str, torch.nn.Parameter]]) -> Any:
        def hook(module: torch.nn.Module, _args: Any) -> None:
            for key, p in own:
                data = self._made(p).view(p.shape)
                module._parameters[key] = torch.nn.Parameter(data, requires_grad=False)

        return hook

    def _after(self, own: list[tuple[str, torch.nn.Parameter]]) -> Any:
        def hook(module: torch.nn.Module, _args: Any, _out: Any) -> None:
            for key, p in own:
                made = module._parameters[key]
                module._parameters[key] = p
                if made is not None and not made.is_meta:
                    self._release(made.data)

        return hook

    def _chunked_forward(self, sub: torch.nn.Module, how: str) -> Any:
        weight = sub._parameters["weight"]
        assert weight is not None
        rows, width = int(weight.shape[0]), int(weight.shape[1])
        step = max(1, STREAM_CHUNK_ELEMENTS // width)

        def linear(x: torch.Tensor) -> torch.Tensor:
            bias = sub._parameters.get("bias")
            out = x.new_empty(*x.shape[:-1], rows)
            for r0 in range(0, rows, step):
                r1 = min(rows, r0 + step)
                w = self._made(weight, r0 * width, (r1 - r0) * width).view(r1 - r0, width)
                out[..., r0:r1] = x @ w.T
                self._release(w)
            if bias is not None:
                out += self._bias(bias)
            return out

        def embedding(ids: torch.Tensor) -> torch.Tensor:
            wanted, where = torch.unique(ids, return_inverse=True)
            table = torch.empty(int(wanted.numel()), width, dtype=torch.float64)
            for i, row in enumerate(wanted.tolist()):
                piece = self._made(weight, int(row) * width, width)
                table[i] = piece
                self._release(piece)
            return table[where]

        return linear if how == "linear" else embedding

    def _bias(self, bias: torch.Tensor) -> torch.Tensor:
        if bias.dtype == torch.float64:
            return bias
        made = self._made(bias)
        kept = made.clone().view(bias.shape)
        self._release(made)
        return kept

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    @property
    def peak_bytes(self) -> int:
        return self.peak_elements * 8
