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

from mpsup.errors import UserError
from mpsup.model.safetensors_header import MAX_NAME_CHARS, read_header
from tests.conftest import count_reads


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
    save_file(
        {"a.weight": torch.zeros(3, 4, dtype=torch.bfloat16), "b": torch.zeros(5, dtype=torch.float32)},
        str(p),
        metadata={"format": "pt"},
    )
    h = read_header(p)
    assert h.tensors["a.weight"].shape == (3, 4) and h.tensors["a.weight"].dtype == "BF16"
    assert h.tensors["b"].nbytes == 20 and h.metadata == {"format": "pt"}


def test_sparse_llama3_8b_sized_file_reads_only_the_header(tmp_path: Path):
    """A 16 GB Llama-3-8B-shaped checkpoint as header plus a hole: read in milliseconds, no weights touched."""
    hidden, inter, layers, vocab = 4096, 14336, 32, 128256
    header, offset = {}, 0
    shapes = {"model.embed_tokens.weight": [vocab, hidden], "lm_head.weight": [vocab, hidden]}
    for i in range(layers):
        for name, shape in (
            ("self_attn.q_proj", [hidden, hidden]),
            ("self_attn.k_proj", [1024, hidden]),
            ("self_attn.v_proj", [1024, hidden]),
            ("self_attn.o_proj", [hidden, hidden]),
            ("mlp.gate_proj", [inter, hidden]),
            ("mlp.up_proj", [inter, hidden]),
            ("mlp.down_proj", [hidden, inter]),
        ):
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
    print(
        f"header scan of a {p.stat().st_size / 1e9:.1f} GB sparse file: {elapsed * 1e3:.1f} ms, "
        f"peak RSS grew {(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024:.1f} MiB"
    )


def test_reads_nothing_but_the_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Count every byte read: the weights (here 1 GiB of hole) are never touched."""
    import mpsup.model.safetensors_header as sh

    header = {"w": {"dtype": "BF16", "shape": [32768, 16384], "data_offsets": [0, 32768 * 16384 * 2]}}
    p = _write(tmp_path / "big.safetensors", header, 32768 * 16384 * 2)
    reads = count_reads(monkeypatch, sh)
    h = read_header(p)
    assert h.tensors["w"].nbytes == 2**30
    assert sum(reads) == 8 + h.header_bytes


GOOD = {"w": {"dtype": "F16", "shape": [2, 3], "data_offsets": [0, 12]}}


def _raw(path: Path, header: bytes, data_bytes: int = 0) -> Path:
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * data_bytes)
    return path


def _f16(**offsets: list[int]) -> dict:
    """F16 vectors of (end - begin) / 2 elements at the given offsets."""
    return {n: {"dtype": "F16", "shape": [(e - b) // 2], "data_offsets": [b, e]} for n, (b, e) in offsets.items()}


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda p: p.write_bytes(b"\x01\x02"), "truncated"),
        (lambda p: p.write_bytes(struct.pack("<Q", 10**6) + b"{}"), "runs past the end"),
        (lambda p: p.write_bytes(struct.pack("<Q", 2**62) + b"{}"), "over the 100 MiB limit"),
        (lambda p: p.write_bytes(struct.pack("<Q", 5) + b"{nope"), "not valid JSON"),
        (lambda p: _write(p, {"w": {"dtype": "F16", "shape": [2, 3], "data_offsets": [0, 12]}}, 4), "outside"),
        (
            lambda p: _write(p, {"w": {"dtype": "F16", "shape": [2, -3], "data_offsets": [0, 12]}}, 12),
            "negative or absurd",
        ),
        (lambda p: _write(p, {"w": {"dtype": "F16", "shape": [2, 4], "data_offsets": [0, 12]}}, 12), "needs 16 bytes"),
        (lambda p: _write(p, {"w": {"dtype": "Q4_K", "shape": [2, 3], "data_offsets": [0, 12]}}, 12), "unknown dtype"),
        (
            lambda p: _write(p, {"w": {"dtype": [[[]]], "shape": [2, 3], "data_offsets": [0, 12]}}, 12),
            "unknown dtype <a JSON list>",
        ),
        (lambda p: _write(p, {"w": [1, 2]}, 12), "not an object"),
        # issue 10, item 8: every JSON failure is one line
        (lambda p: _raw(p, b'{"w": "\xff"}'), "not UTF-8"),
        (lambda p: _raw(p, b"[" * 100_000), "nested too deeply"),
        (
            lambda p: _raw(p, b'{"w": {"dtype": "F16", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 2]}}', 2),
            "4300 digits",
        ),
        (
            lambda p: _raw(p, b'{"w": {"dtype": "F16", "shape": [NaN], "data_offsets": [0, 2]}}', 2),
            "NaN is not valid JSON",
        ),
        # issue 10, item 9: the tensors must tile the data exactly, as the safetensors library requires
        (lambda p: _write(p, _f16(a=[0, 8], b=[0, 8]), 8), "'b': data_offsets \\[0, 8\\] overlaps"),
        (lambda p: _write(p, _f16(a=[0, 8], b=[4, 12]), 12), "overlaps the tensor before it"),
        (lambda p: _write(p, _f16(a=[4, 12]), 12), "leaves a gap of 4 bytes"),
        (lambda p: _write(p, _f16(a=[0, 4], b=[8, 12]), 12), "'b'.* leaves a gap of 4 bytes"),
        (lambda p: _write(p, _f16(a=[0, 4]), 12), "cover 4 data bytes but the file holds 12"),
        (lambda p: _write(p, {"a": {"dtype": "F16", "shape": [2], "data_offsets": [4, 0]}}, 4), "outside"),  # reversed
        # issue 10, item 7: a name long enough to make name matching costly is refused before any matching
        (
            lambda p: _write(p, {"a." * 20000 + "weight": {"dtype": "F16", "shape": [1], "data_offsets": [0, 2]}}, 2),
            f"tensor name of 40,006 characters \\(over {MAX_NAME_CHARS:,}\\)",
        ),
    ],
)
def test_bad_headers_are_one_clear_error(tmp_path: Path, mutate, needle: str):
    p = tmp_path / "bad.safetensors"
    mutate(p)
    with pytest.raises(UserError, match=needle) as exc:
        read_header(p)
    assert str(p) in str(exc.value) and "\n" not in str(exc.value) and len(str(exc.value)) < 400


def test_layout_in_any_header_order_with_empty_tensors(tmp_path: Path):
    """The safetensors library writes the header in name order but the data in its own order (by dtype,
    then name), and a zero-sized tensor shares its offset with a neighbour: all of that stays valid."""
    header = {
        "a": {"dtype": "F16", "shape": [2], "data_offsets": [8, 12]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "empty": {"dtype": "F32", "shape": [0, 3], "data_offsets": [8, 8]},
        "z": {"dtype": "BF16", "shape": [], "data_offsets": [12, 14]},
    }
    h = read_header(_write(tmp_path / "ok.safetensors", header, 14))
    assert [h.tensors[n].nbytes for n in ("a", "b", "empty", "z")] == [4, 8, 0, 2]


def test_no_file_bytes_in_messages(tmp_path: Path):
    """Issue 10, item 6: `/etc/shadow: header length 3619251681095544690 is absurd` gave away 8 bytes of
    the file. Whatever a non-safetensors file holds, the message says what is wrong, never what is there."""
    secrets = [
        b"root:$6$saltsalt$hashhash\n",
        b"SECRET\x00\x00" + b"x" * 100,
        b'\x10\x00\x00\x00\x00\x00\x00\x00{"k": 1, x',
    ]
    for i, content in enumerate(secrets):
        p = tmp_path / f"s{i}.safetensors"
        p.write_bytes(content)
        with pytest.raises(UserError) as exc:
            read_header(p)
        msg = str(exc.value).replace(str(p), "")
        (number,) = struct.unpack("<Q", content[:8])
        assert str(number) not in msg and "SECRET" not in msg and "root" not in msg and "salt" not in msg, msg


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
    except UserError as exc:
        assert str(p) in str(exc)
        return
    for t in h.tensors.values():  # whatever parsed is consistent with the file
        assert t.nbytes <= p.stat().st_size
