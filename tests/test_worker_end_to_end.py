"""A .pt2 exported on the CPU, moved to the measured device with torch's move_to_device_pass: the devices its graph
baked in while tracing move too, where `ep.module().to(device)` moves only the weights. Shown on the meta device,
which a CPU-only torch has: the old way leaves a CPU constant in the graph, the pass leaves none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from mpsup.worker import end_to_end
from mpsup.worker.core import Unsupported
from mpsup.worker.end_to_end import build_end_to_end
from mpsup.worker.whole_model import MetaDevice


class Baked(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Traced on the CPU, both devices become constants of the graph.
        return x * self.scale + torch.arange(4, device=x.device) + torch.zeros(4, device="cpu")


@pytest.fixture(scope="module")
def pt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Exported once for the module: tracing takes seconds here."""
    ep = torch.export.export(Baked(), (torch.randn(2, 4),))
    path = tmp_path_factory.mktemp("export") / "baked.pt2"
    torch.export.save(ep, path)
    return path


def _graph_devices(module: Any) -> set[str]:
    # torch.export writes a traced device as a torch.device, the pass as its name: both read the same here.
    return {
        torch.device(node.kwargs["device"]).type
        for node in module.graph.nodes
        if node.op == "call_function" and isinstance(node.kwargs.get("device"), (torch.device, str))
    }


def test_a_cpu_export_moves_with_the_devices_its_graph_baked_in(pt2: Path) -> None:
    path = pt2
    old = torch.export.load(path).module().to("meta")
    assert "cpu" in _graph_devices(old)  # the old way: the weights moved, the graph still makes CPU tensors
    built = build_end_to_end({"source": "pt2", "path": str(path)}, MetaDevice())
    module = built.keep[0]
    assert _graph_devices(module) == {"meta"}
    out = built.fn()
    assert out.device.type == "meta" and tuple(out.shape) == (2, 4)


def test_without_the_pass_only_the_weights_move(pt2: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.export.passes as passes

    monkeypatch.delattr(passes, "move_to_device_pass")
    module = end_to_end._program_on(torch.export.load(pt2), torch.device("meta"))
    assert next(module.parameters()).device.type == "meta"
    assert "cpu" in _graph_devices(module)


def test_a_program_that_cannot_move_is_unsupported_in_one_line(pt2: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(_ep: Any, dev: Any) -> Any:
        raise RuntimeError(f"no {dev} here\nsecond line")

    monkeypatch.setattr(end_to_end, "_program_on", refuse)
    with pytest.raises(Unsupported, match=r"cannot move to meta: no meta here second line$"):
        build_end_to_end({"source": "pt2", "path": str(pt2)}, MetaDevice())
