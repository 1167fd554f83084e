"""The safetensors header reader: real files from the safetensors library, sparse files of real size,
and fuzzed corruptions that must all end in one clear error."""

from __future__ import annotations

import json
import resource
import struct
import time
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpsup.model.safetensors_header import ModelFormatError, read_header


def _write(path: Path, header: dict, data_bytes: int) -> Path:
    raw = json.dumps(header).encode()
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        fh.truncate(8 + len(raw) + data_bytes)  # a hole: no weight bytes are ever written
    return path


def test_reads_a_file_written_by_the_safetensors_library(tmp_path: Path):
    pytest.importorskip("numpy", reason="safetensors' writer needs numpy")
    save_file = pytest.importorskip("safetensors.torch", reason="the safetensors library is not installed").save_file
    p = tmp_path / "m.safetensors"
    save_file({"a.weight": torch.zeros(3, 4, dtype=torch.bfloat16), "b": torch.zeros(5, dtype=torch.float32)}, str(p),
              metadata={"format": "pt"})
    h = read_header(p)
    assert h.tensors["a.weight"].shape == (3, 4) and h.tensors["a.weight"].dtype == "BF16"
    assert h.tensors["b"].nbytes == 20 and h.metadata == {"format": "pt"}


def test_sparse_llama3_8b_sized_file_reads_only_the_header(tmp_path: Path):
    """A 16 GB Llama-3-8B-shaped checkpoint as header plus a hole: read in milliseconds, no weights touched."""
    hidden, inter, layers, vocab = 4096, 14336, 32, 128256
    header, offset = {}, 0
    shapes = {"model.embed_tokens.weight": [vocab, hidden], "lm_head.weight": [vocab, hidden]}
    for i in range(layers):
        for name, shape in (("self_attn.q_proj", [hidden, hidden]), ("self_attn.k_proj", [1024, hidden]),
                            ("self_attn.v_proj", [1024, hidden]), ("self_attn.o_proj", [hidden, hidden]),
                            ("mlp.gate_proj", [inter, hidden]), ("mlp.up_proj", [inter, hidden]),
                            ("mlp.down_proj", [hidden, inter])):
            shapes[f"model.layers.{i}.{name}.weight"] = shape
    for name, shape in shapes.items():
        n = shape[0] * shape[1] * 2
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    p = _write(tmp_path / "llama.safetensors", header, offset)
    assert p.stat().st_size > 15 * 10**9
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    h = read_header(p)
    elapsed = time.perf_counter() - t0
    assert len(h.tensors) == 2 + 7 * layers
    assert sum(t.nbytes for t in h.tensors.values()) == offset
    assert p.stat().st_blocks * 512 < 10 * 2**20  # the hole stayed a hole: nothing was read into it
    print(f"header scan of a {p.stat().st_size / 1e9:.1f} GB sparse file: {elapsed * 1e3:.1f} ms, "
          f"peak RSS grew {(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024:.1f} MiB")


def test_reads_nothing_but_the_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Count every byte read: the weights (here 1 GiB of hole) are never touched."""
    header = {"w": {"dtype": "BF16", "shape": [32768, 16384], "data_offsets": [0, 32768 * 16384 * 2]}}
    p = _write(tmp_path / "big.safetensors", header, 32768 * 16384 * 2)
    reads: list[int] = []
    real_open = Path.open

    def counting_open(self, *args, **kwargs):
        fh = real_open(self, *args, **kwargs)
        real_read = fh.read

        def read(n=-1):
            data = real_read(n)
            reads.append(len(data))
            return data

        fh.read = read
        return fh

    monkeypatch.setattr(Path, "open", counting_open)
    h = read_header(p)
    assert h.tensors["w"].nbytes == 2**30
    assert sum(reads) == 8 + h.header_bytes


GOOD = {"w": {"dtype": "F16", "shape": [2, 3], "data_offsets": [0, 12]}}


@pytest.mark.parametrize(("mutate", "needle"), [
    (lambda p: p.write_bytes(b"\x01\x02"), "truncated"),
    (lambda p: p.write_bytes(struct.pack("<Q", 10**6) + b"{}"), "past the end"),
    (lambda p: p.write_bytes(struct.pack("<Q", 2**62) + b"{}"), "absurd"),
    (lambda p: p.write_bytes(struct.pack("<Q", 5) + b"{nope"), "not valid JSON"),
    (lambda p: _write(p, {"w": {"dtype": "F16", "shape": [2, 3], "data_offsets": [0, 12]}}, 4), "outside"),
    (lambda p: _write(p, {"w": {"dtype": "F16", "shape": [2, -3], "data_offsets": [0, 12]}}, 12), "negative or absurd"),
    (lambda p: _write(p, {"w": {"dtype": "F16", "shape": [2, 4], "data_offsets": [0, 12]}}, 12), "needs 16 bytes"),
    (lambda p: _write(p, {"w": {"dtype": "Q4_K", "shape": [2, 3], "data_offsets": [0, 12]}}, 12), "unknown dtype"),
    (lambda p: _write(p, {"w": [1, 2]}, 12), "not an object"),
])
def test_bad_headers_are_one_clear_error(tmp_path: Path, mutate, needle: str):
    p = tmp_path / "bad.safetensors"
    mutate(p)
    with pytest.raises(ModelFormatError, match=needle) as exc:
        read_header(p)
    assert str(p) in str(exc.value) and "\n" not in str(exc.value)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200), cut=st.integers(0, 400), flip=st.integers(0, 399), bit=st.integers(0, 7))
def test_fuzzed_headers_only_raise_clear_errors(tmp_path: Path, data: bytes, cut: int, flip: int, bit: int):
    raw = json.dumps(GOOD).encode()
    blob = bytearray(struct.pack("<Q", len(raw)) + raw + b"\0" * 12)
    if flip < len(blob):
        blob[flip] ^= 1 << bit
    blob = blob[: max(cut, 0)] + data if cut < len(blob) else blob
    p = tmp_path / "fuzz.safetensors"
    p.write_bytes(bytes(blob))
    try:
        h = read_header(p)
    except ModelFormatError as exc:
        assert str(p) in str(exc)
        return
    for t in h.tensors.values():  # whatever parsed is consistent with the file
        assert t.nbytes <= p.stat().st_size
