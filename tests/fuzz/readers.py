"""Feed generated hostile inputs to every reader of untrusted input; count exceptions that are not mpsup's own.

Bad input must end in one clear line (`UserError`, exit 2; or `OperationFailed`), never in a
traceback. Each reader below gets inputs from a hypothesis strategy: well-formed documents with hostile
values (wrong types, NaN, huge numbers, markup, `..`, absolute paths, devices), arbitrary JSON, deep
nesting, random bytes, and byte-level mutations of valid files. Any other exception is counted as
"foreign", with its first traceback kept; the target is 0. A reader that blocks for 10 s (a FIFO opened
without O_NONBLOCK) counts as foreign too.

    python -m tests.fuzz.readers                            # from the repository root: 1,500 inputs per reader
    python -m tests.fuzz.readers --examples 200 --reader sharded-index --seed 7

tests/fuzz/test_readers.py runs a small fixed share of it with the test suite.

Prints one row per reader (inputs, accepted, refused with a project error, foreign exceptions, slowest
input) and the first traceback of each foreign exception type. Exit 1 when anything foreign was seen.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import signal
import struct
import sys
import tempfile
import time
import traceback
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from mpsup.errors import OperationFailed, UserError
from mpsup.workloads import SAFETENSORS_ITEMSIZE

HANG_SECONDS = 10
PAGE_URL = "https://example.org/simple/torch/"
DTYPES = [
    "BOOL",
    "U8",
    "I8",
    "F8_E4M3",
    "F8_E5M2",
    "I16",
    "U16",
    "F16",
    "BF16",
    "I32",
    "U32",
    "F32",
    "I64",
    "U64",
    "F64",
]
ITEMSIZE = SAFETENSORS_ITEMSIZE
HOSTILE_TEXT = [
    "[/x]",
    "[bold]",
    "[old] llama",
    "../../etc/passwd",
    "/etc/passwd",
    "/dev/zero",
    "/proc/self/environ",
    "%2e%2e%2f%2e%2e%2fx",
    "a\x00b",
    "line\nbreak",
    "é",
    "٣",
    "",
    " ",
    ".",
    "..",
    "\\..\\x",
    "javascript:alert(1)",
    "<script>x</script>",
    "file:///etc/passwd",
    "http://10.0.0.1/x.whl",
    "a" * 300,
    "9" * 50,
]
NAME_PARTS = [
    "model",
    "layers",
    "0",
    "17",
    "mlp",
    "experts",
    "shared_experts",
    "block_sparse_moe",
    "w1",
    "up_proj",
    "q_proj",
    "embed_tokens",
    "lm_head",
    "weight",
    "bias",
    "down_blocks",
    "up_blocks",
    "1",
    "conv",
    "[/x]",
    "é",
]


# ---- generic strategies ----


def scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=20),
        st.sampled_from(HOSTILE_TEXT),
    )


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    keys = st.one_of(st.text(max_size=12), st.sampled_from(HOSTILE_TEXT))
    return st.recursive(
        scalars(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
        max_leaves=max_leaves,
    )


def tensor_names() -> st.SearchStrategy[str]:
    dotted = st.lists(st.sampled_from(NAME_PARTS), min_size=1, max_size=9).map(".".join)
    long = st.integers(500, 30_000).map(lambda n: "a." * n + "weight")
    return st.one_of(dotted, dotted, st.text(max_size=30), st.sampled_from(HOSTILE_TEXT), long)


@st.composite
def mutated(draw: st.DrawFn, base: bytes) -> bytes:
    """base with a few bytes flipped, deleted or inserted, or cut short."""
    blob = bytearray(base)
    for _ in range(draw(st.integers(0, 4))):
        if not blob:
            break
        op, pos = draw(st.sampled_from(["flip", "delete", "insert", "cut"])), draw(st.integers(0, len(blob) - 1))
        if op == "flip":
            blob[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "delete":
            del blob[pos]
        elif op == "insert":
            blob[pos:pos] = draw(st.binary(min_size=1, max_size=4))
        else:
            del blob[pos:]
    return bytes(blob)


@st.composite
def json_file(draw: st.DrawFn, documents: st.SearchStrategy[Any]) -> bytes:
    """A document as a file: serialized (NaN and Infinity included), then maybe mutated; or deep nesting, or noise."""
    kind = draw(st.sampled_from(["doc"] * 5 + ["mutated", "mutated", "nested", "bytes"]))
    if kind == "nested":
        return b"[" * draw(st.integers(900, 200_000))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    raw = json.dumps(draw(documents), ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
    return draw(mutated(raw)) if kind == "mutated" else raw


# ---- safetensors headers ----


@st.composite
def safetensors_files(draw: st.DrawFn) -> tuple[bytes, int]:
    """(the file's first bytes, how many data bytes follow as a hole)."""
    kind = draw(st.sampled_from(["layout", "layout", "layout", "json", "bytes"]))
    data = 0
    if kind == "layout":
        header: dict[str, Any] = {}
        for name in draw(st.lists(tensor_names(), max_size=5, unique=True)):
            dtype = draw(st.sampled_from(DTYPES))
            shape = draw(st.lists(st.integers(0, 64), max_size=4))
            n = ITEMSIZE[dtype]
            for d in shape:
                n *= d
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [data, data + n]}
            data += n
        if draw(st.booleans()) and header:  # one field gets a hostile value
            entry = header[draw(st.sampled_from(sorted(header)))]
            entry[draw(st.sampled_from(["dtype", "shape", "data_offsets"]))] = draw(
                json_values(4) | st.lists(st.integers(), max_size=3)
            )
        if draw(st.booleans()):
            header["__metadata__"] = draw(json_values(4))
        data = max(0, data + draw(st.sampled_from([0, 0, 0, -2, 2, 2**33])))
        raw = json.dumps(header).encode()
    elif kind == "json":
        raw = draw(json_file(json_values()))
    else:
        raw = draw(st.binary(max_size=200))
    length = draw(st.sampled_from([len(raw)] * 6 + [0, len(raw) + 1, len(raw) - 1, 2**62, 100 * 2**20 + 1]))
    blob = struct.pack("<Q", max(0, length)) + raw
    if draw(st.integers(0, 4)) == 0:
        blob = draw(mutated(blob))
    return blob, data


def feed_safetensors(value: tuple[bytes, int], work: Path) -> None:
    from mpsup.model.safetensors_header import read_header

    blob, data = value
    path = work / "fuzz.safetensors"
    with path.open("wb") as fh:
        fh.write(blob)
        fh.truncate(len(blob) + data)
    read_header(path)


# ---- model configs (Transformers folders and Diffusers pipelines) ----

CONFIG_KEYS = {
    "num_experts_per_tok": st.integers(0, 8),
    "moe_topk": st.integers(1, 8) | st.lists(st.integers(1, 8), min_size=1, max_size=4),
    "tie_word_embeddings": st.booleans(),
    "sample_size": st.integers(8, 256) | st.lists(st.integers(8, 256), min_size=1, max_size=2),
    "block_out_channels": st.lists(st.integers(1, 512), max_size=5),
    "dim_mult": st.lists(st.integers(1, 4), max_size=5),
    "mpsup_frames": st.integers(1, 16),
}


@st.composite
def config_docs(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 5)) == 0:
        return draw(json_values())
    doc: dict[str, Any] = {}
    for key in draw(st.lists(st.sampled_from(sorted(CONFIG_KEYS)), unique=True)):
        doc[key] = draw(json_values(4) if draw(st.integers(0, 3)) == 0 else CONFIG_KEYS[key])
    return doc


@st.composite
def model_configs(draw: st.DrawFn) -> tuple[str, bytes, bytes]:
    """(layout, config.json bytes, model_index.json bytes for a pipeline)."""
    layout = draw(st.sampled_from(["transformers", "diffusers"]))
    components = draw(
        st.dictionaries(
            st.sampled_from(["vae", "unet", "_class_name"]) | st.sampled_from(HOSTILE_TEXT) | st.text(max_size=8),
            json_values(3),
            max_size=4,
        )
    )
    return layout, draw(json_file(config_docs())), draw(json_file(st.just(components) | json_values()))


WEIGHTS = {
    "m.embed_tokens.weight": ("F16", [16, 8]),
    "m.layers.0.mlp.experts.0.up.weight": ("F16", [8, 8]),
    "m.layers.0.mlp.experts.1.up.weight": ("F16", [8, 8]),
    "m.layers.0.mlp.experts.gate_up.weight": ("F16", [4, 8, 8]),
    "decoder.up_blocks.1.conv.weight": ("F16", [4, 4, 3, 3]),
    "encoder.down_blocks.0.conv.weight": ("F16", [4, 4, 3, 3, 3]),
}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> Path:
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = ITEMSIZE[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + offset)
    return path


def feed_config(value: tuple[str, bytes, bytes], work: Path) -> None:
    from mpsup.model.extract import extract_model
    from mpsup.model.load import load_model

    layout, config, index = value
    if layout == "transformers":
        root = work / "transformers"
        if not (root / "model.safetensors").exists():
            write_safetensors(root / "model.safetensors", WEIGHTS)
        (root / "config.json").write_bytes(config)
    else:
        root = work / "pipeline"
        if not (root / "vae" / "diffusion_pytorch_model.safetensors").exists():
            write_safetensors(root / "vae" / "diffusion_pytorch_model.safetensors", WEIGHTS)
            write_safetensors(root / "unet" / "diffusion_pytorch_model.safetensors", WEIGHTS)
        (root / "model_index.json").write_bytes(index)
        (root / "vae" / "config.json").write_bytes(config)
    m = load_model(root)
    extract_model(m.tensors, m.config, tokens=(1, 4), components=m.components)


# ---- sharded indexes ----

SHARDS = [
    "a.safetensors",
    "b.safetensors",
    "missing.safetensors",
    "link-out.safetensors",
    "link-in.safetensors",
    "loop.safetensors",
    "fifo.safetensors",
    "folder.safetensors",
    "empty.safetensors",
    "sub/c.safetensors",
    "../outside/x.safetensors",
    "OUTSIDE",
    "/dev/zero",
    "/proc/self/environ",
    "/etc/passwd",
    "./a.safetensors",
    ".",
    "",
]
SHARD_TENSORS = {
    "a.safetensors": ["t.0.q_proj.weight", "t.0.mlp.up_proj.weight"],
    "b.safetensors": ["t.1.q_proj.weight"],
    "sub/c.safetensors": ["t.2.q_proj.weight"],
}


@st.composite
def sharded_indexes(draw: st.DrawFn) -> bytes:
    known = [n for names in SHARD_TENSORS.values() for n in names]
    weight_map = draw(
        st.dictionaries(
            st.sampled_from(known) | tensor_names(),
            st.sampled_from(SHARDS) | st.sampled_from(HOSTILE_TEXT) | json_values(2),
            max_size=5,
        )
    )
    doc = (
        {"metadata": draw(json_values(3)), "weight_map": weight_map} if draw(st.integers(0, 5)) else draw(json_values())
    )
    return draw(json_file(st.just(doc)))


def prepare_shard_folder(work: Path) -> Path:
    root = work / "sharded"
    if root.exists():
        return root
    for shard, names in SHARD_TENSORS.items():
        write_safetensors(root / shard, dict.fromkeys(names, ("F16", [8, 8])))
    outside = write_safetensors(work / "outside" / "x.safetensors", {"o.weight": ("F16", [8, 8])})
    (root / "link-out.safetensors").symlink_to(outside)
    (root / "link-in.safetensors").symlink_to("a.safetensors")
    (root / "loop.safetensors").symlink_to("loop.safetensors")
    os.mkfifo(root / "fifo.safetensors")
    (root / "folder.safetensors").mkdir()
    (root / "empty.safetensors").write_bytes(b"")
    return root


def feed_sharded(value: bytes, work: Path) -> None:
    from mpsup.model.load import load_model

    root = prepare_shard_folder(work)
    text = value.replace(b"OUTSIDE", str(work / "outside" / "x.safetensors").encode())
    (root / "model.safetensors.index.json").write_bytes(text)
    load_model(root / "model.safetensors.index.json")


# ---- torch.save state dicts ----

# Pickle opcodes torch's weights_only unpickler meets in damaged files: memo gets, stack ops, containers.
PICKLE_OPS = [
    b"}",
    b"]",
    b"(",
    b"K\x01",
    b"X\x01\x00\x00\x00a",
    b"h\x05",
    b"q\x00",
    b"s",
    b"u",
    b"e",
    b"a",
    b"0",
    b"t",
    b"R",
    b"N",
    b"\x88",
    b"c__builtin__\neval\n",
    b"ctorch._utils\n_rebuild_tensor_v2\n",
    b".",
]


@st.composite
def state_dicts(draw: st.DrawFn) -> tuple[str, Any]:
    """A recipe applied to a real torch.save archive (built once in feed_state_dict)."""
    kind = draw(st.sampled_from(["bytes", "members", "pickle"]))
    if kind == "bytes":
        return kind, draw(
            st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=4)
        )
    if kind == "members":
        return kind, draw(
            st.lists(
                st.tuples(st.sampled_from(["keep"] * 9 + ["drop", "flip", "empty"]), st.floats(0, 1, exclude_max=True)),
                min_size=8,
                max_size=8,
            )
        )
    return kind, draw(st.binary(max_size=40) | st.lists(st.sampled_from(PICKLE_OPS), max_size=12).map(b"".join))


_BASE_PT: dict[str, bytes] = {}


def _base_members() -> dict[str, bytes]:
    if not _BASE_PT:
        import torch

        buf = io.BytesIO()
        torch.save({"m.layers.0.q_proj.weight": torch.zeros(8, 8, dtype=torch.bfloat16), "b": torch.ones(3)}, buf)
        with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z:
            _BASE_PT.update({n: z.read(n) for n in z.namelist()})
        _BASE_PT["<whole>"] = buf.getvalue()
    return _BASE_PT


def feed_state_dict(value: tuple[str, Any], work: Path) -> None:
    from mpsup.model.load import load_model

    kind, recipe = value
    members = _base_members()
    path = work / "fuzz.pt"
    ops = recipe if kind == "members" else [("keep", 0.0)] * 8
    if kind == "bytes":
        blob = bytearray(members["<whole>"])
        for where, byte in recipe:
            blob[int(where * len(blob))] = byte
        path.write_bytes(bytes(blob))
    else:
        with zipfile.ZipFile(path, "w") as z:
            for (name, data), (op, where) in zip(
                [(n, d) for n, d in members.items() if n != "<whole>"], ops * 2, strict=False
            ):
                if kind == "pickle" and name.endswith("data.pkl"):
                    data = recipe
                elif op == "drop":
                    continue
                elif op == "empty":
                    data = b""
                elif op == "flip" and data:
                    data = bytes(b ^ 0xFF if i == int(where * len(data)) else b for i, b in enumerate(data))
                z.writestr(name, data)
    load_model(path)


# ---- run records ----


def base_record() -> dict[str, Any]:
    from tests.synthetic import paired_record

    return paired_record(
        1.1,
        rounds=5,
        count=2,
        smoke=[{"feature": "f", "envs": {"baseline": {"status": "ok"}, "candidate": {"status": "fail"}}}],
    )


@st.composite
def run_records(draw: st.DrawFn) -> bytes:
    """A valid record with a few values (anywhere in it) replaced or removed, or no record at all."""
    doc: Any = copy.deepcopy(base_record())
    for _ in range(draw(st.integers(0, 4))):
        parent, key = doc, None
        node = doc
        while isinstance(node, (dict, list)) and node and draw(st.integers(0, 3)):
            key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else list(range(len(node)))))
            parent, node = node, node[key]
        if key is None:
            continue
        if isinstance(parent, dict) and draw(st.integers(0, 3)) == 0:
            del parent[key]
        else:
            parent[key] = draw(json_values(6))
    if draw(st.integers(0, 6)) == 0:
        doc = draw(json_values())
    return draw(json_file(st.just(doc)))


def feed_record(value: bytes, work: Path) -> None:
    from mpsup.runs.store import load_record

    path = work / "record.json"
    path.write_bytes(value)
    load_record(path)


def feed_record_to_report(value: bytes, work: Path) -> None:
    """A record the loader accepts must not crash the analysis or any renderer either."""
    from rich.console import Console

    from mpsup.report.analysis import analyze
    from mpsup.report.render import render_html, render_markdown, render_terminal
    from mpsup.runs.store import load_record

    path = work / "record.json"
    path.write_bytes(value)
    analysis = analyze(load_record(path))
    render_markdown(analysis)
    render_html(analysis)
    render_terminal(analysis, Console(file=io.StringIO(), width=120))


# ---- package-index pages ----

HREFS = [
    "torch-2.6.0-cp312-none-macosx_11_0_arm64.whl",
    "../../x.whl",
    "%2e%2e/%2e%2e/evil.whl",
    "/abs/torch.whl",
    "http://10.0.0.1/torch.whl",
    "file:///etc/passwd",
    "torch.whl#sha256=" + "a" * 64,
    "torch.whl#sha256=zz",
    "#",
    "?",
    "",
]


@st.composite
def html_pages(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 4)) == 0:
        return draw(st.text(max_size=300))
    anchors = []
    for _ in range(draw(st.integers(0, 4))):
        attrs = {"href": draw(st.sampled_from(HREFS) | st.text(max_size=30))}
        for name in draw(
            st.lists(
                st.sampled_from(["data-yanked", "data-requires-python", "data-dist-info-metadata", "href"]), max_size=2
            )
        ):
            attrs[name] = draw(st.sampled_from(HOSTILE_TEXT) | st.text(max_size=10))
        quoted = " ".join(f'{k}="{v}"' for k, v in attrs.items())
        anchors.append(f"<a {quoted}>{draw(st.sampled_from(HOSTILE_TEXT) | st.text(max_size=20))}</a>")
    page = "<html><body>" + "\n".join(anchors) + "</body></html>"
    return draw(mutated(page.encode())).decode("utf-8", "replace") if draw(st.booleans()) else page


@st.composite
def json_pages(draw: st.DrawFn) -> str:
    entry = st.fixed_dictionaries(
        {},
        optional={
            "filename": st.sampled_from(HREFS) | json_values(2),
            "url": st.sampled_from(HREFS) | json_values(2),
            "hashes": st.fixed_dictionaries({}, optional={"sha256": st.sampled_from(["a" * 64, "zz"]) | json_values(2)})
            | json_values(2),
            "size": st.integers() | json_values(2),
            "yanked": json_values(2),
            "requires-python": json_values(2),
            "upload-time": json_values(2),
        },
    )
    doc = {"meta": {"api-version": "1.1"}, "name": "torch", "files": draw(st.lists(entry, max_size=4) | json_values(3))}
    raw = draw(json_file(st.just(doc) | json_values()))
    return raw.decode("utf-8", "replace")


def feed_html_page(value: str, work: Path) -> None:
    from mpsup.envs.index import parse_html_page

    parse_html_page(value, PAGE_URL)


def feed_json_page(value: str, work: Path) -> None:
    from mpsup.envs.index import parse_json_page

    parse_json_page(value, PAGE_URL)


# ---- the run ----


@dataclass(frozen=True)
class Reader:
    name: str
    what: str
    strategy: st.SearchStrategy[Any]
    feed: Callable[[Any, Path], None]
    warm_up: Callable[[], object] = lambda: None  # slow imports (torch) happen here, not under the hang deadline


READERS = [
    Reader("safetensors-header", "model.safetensors_header.read_header", safetensors_files(), feed_safetensors),
    Reader(
        "model-config",
        "model.load.load_model + extract_model (config.json, model_index.json)",
        model_configs(),
        feed_config,
    ),
    Reader("sharded-index", "model.load.load_model (*.safetensors.index.json)", sharded_indexes(), feed_sharded),
    Reader(
        "state-dict",
        "model.load.load_model (.pt: torch.load weights_only)",
        state_dicts(),
        feed_state_dict,
        _base_members,
    ),
    Reader("run-record", "runs.store.load_record", run_records(), feed_record),
    Reader("record-to-report", "load_record -> report analyze + renderers", run_records(), feed_record_to_report),
    Reader("index-page-html", "envs.index.parse_html_page", html_pages(), feed_html_page),
    Reader("index-page-json", "envs.index.parse_json_page", json_pages(), feed_json_page),
]


@dataclass
class Tally:
    reader: str
    inputs: int = 0
    accepted: int = 0
    refused: int = 0
    foreign: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    refusals: Counter[str] = field(default_factory=Counter)
    slowest_s: float = 0.0

    @property
    def foreign_total(self) -> int:
        return sum(self.foreign.values())


class Hang(Exception):
    """A reader blocked: counted as foreign (it would hang the command forever)."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    def expired(signum: int, frame: Any) -> None:
        raise Hang(f"blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)  # repeats: a raise that lands in a weakref callback is swallowed
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run_reader(reader: Reader, examples: int, seed: int | None, work: Path) -> Tally:
    tally = Tally(reader.name)
    work.mkdir(parents=True, exist_ok=True)
    reader.warm_up()

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        derandomize=seed is None,
        suppress_health_check=list(HealthCheck),
    )
    @given(reader.strategy)
    def body(value: Any) -> None:
        tally.inputs += 1
        t0 = time.perf_counter()
        try:
            with deadline(HANG_SECONDS):
                reader.feed(value, work)
        except (UserError, OperationFailed) as exc:
            tally.refused += 1
            tally.refusals[_gist(str(exc), work)] += 1
        except Exception as exc:  # the point of the exercise: anything else is a finding
            kind = f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins.")
            tally.foreign[kind] += 1
            if kind not in tally.examples:
                tally.examples[kind] = f"input: {value!r:.300}\n" + "".join(traceback.format_exception(exc, limit=-4))
        else:
            tally.accepted += 1
        finally:
            tally.slowest_s = max(tally.slowest_s, time.perf_counter() - t0)

    if seed is not None:
        body = hypothesis_seed(seed)(body)
    body()
    return tally


def run(readers: list[Reader], examples: int, seed: int | None) -> list[Tally]:
    with tempfile.TemporaryDirectory(prefix="mpsup-fuzz-") as tmp, _quiet_home(Path(tmp)):
        return [run_reader(r, examples, seed, Path(tmp) / r.name) for r in readers]


@contextlib.contextmanager
def _quiet_home(tmp: Path) -> Iterator[None]:
    """Readers never write, but should one, it lands here rather than in the user's data dir."""
    old = os.environ.get("MPSUP_HOME")
    os.environ["MPSUP_HOME"] = str(tmp / "home")
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MPSUP_HOME", None)
        else:
            os.environ["MPSUP_HOME"] = old


def _gist(message: str, work: Path) -> str:
    """A refusal without its path and values, to see which checks the inputs reach."""
    text = message.replace(str(work), "").split(": ", 1)[-1]
    return text.split("(")[0].split(",")[0][:60]


def table(tallies: list[Tally]) -> str:
    head = (
        f"{'reader':<20} {'inputs':>7} {'accepted':>9} {'refused':>8} {'foreign':>8} {'slowest':>8}  foreign "
        "exception types"
    )
    rows = [head, "-" * len(head)]
    for t in tallies:
        kinds = ", ".join(f"{k} x{n}" for k, n in t.foreign.most_common()) or "-"
        rows.append(
            f"{t.reader:<20} {t.inputs:>7} {t.accepted:>9} {t.refused:>8} {t.foreign_total:>8} "
            f"{t.slowest_s:>7.2f}s  {kinds}"
        )
    total = sum(t.inputs for t in tallies), sum(t.foreign_total for t in tallies)
    rows.append(f"{'all':<20} {total[0]:>7} {'':>9} {'':>8} {total[1]:>8}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=1500, help="inputs per reader (default 1500)")
    parser.add_argument("--reader", action="append", choices=[r.name for r in READERS], help="only these readers")
    parser.add_argument(
        "--seed", type=int, help="a seed, to repeat a run (default: hypothesis' fixed derandomized stream)"
    )
    parser.add_argument("--why", action="store_true", help="also show each reader's most common refusals")
    args = parser.parse_args(argv)
    readers = [r for r in READERS if not args.reader or r.name in args.reader]
    t0 = time.perf_counter()
    tallies = run(readers, args.examples, args.seed)
    print(table(tallies))
    print(f"\n{time.perf_counter() - t0:.0f} s")
    for t in tallies if args.why else []:
        print(f"\n{t.reader}: " + "; ".join(f"{n} x {gist!r}" for gist, n in t.refusals.most_common(6)))
    for t in tallies:
        for kind, example in t.examples.items():
            print(f"\n== {t.reader}: {kind}\n{example}")
    return 1 if any(t.foreign_total for t in tallies) else 0


if __name__ == "__main__":
    sys.exit(main())
