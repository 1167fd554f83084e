"""Small wheels built by the tests, and a PEP 503 index serving them on 127.0.0.1."""

from __future__ import annotations

import base64
import hashlib
import http.server
import sys
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def fake_torch_files(version: str, mps: bool = False, git_version: str | None = None) -> dict[str, str]:
    """Just enough of torch for mpsup's interpreter probe: a version, backends.mps and cuda (and, given one,
    the git revision torch.version reports)."""
    files = {
        "torch/__init__.py": f'__version__ = "{version}"\nfrom . import backends, cuda  # noqa\n',
        "torch/backends/__init__.py": "from . import mps  # noqa\n",
        "torch/backends/mps.py": f"def is_built():\n    return {mps}\n\n\ndef is_available():\n    return {mps}\n",
        "torch/cuda.py": "def is_available():\n    return False\n",
    }
    if git_version is not None:
        files["torch/__init__.py"] += "from . import version  # noqa\n"
        files["torch/version.py"] = f"git_version = {git_version!r}\n"
    return files


def slow_linear(torch_name: str = "torch") -> str:
    """Python source that makes `torch_name`.nn.functional.linear compute its product twice and return the second:
    the same answer at twice the work, on any CPU and any GPU. What the tests' "bad" builds run (an interpreter
    wrapper's sitecustomize, a shim wheel's torch/__init__.py): the bench workload calls F.linear at each call."""
    return (
        f"_F = {torch_name}.nn.functional\n"
        "_once = _F.linear\n"
        "\n"
        "\n"
        "def _twice(*args, **kwargs):\n"
        "    _once(*args, **kwargs)\n"
        "    return _once(*args, **kwargs)\n"
        "\n"
        "\n"
        "_F.linear = _twice\n"
    )


def shim_torch_files(version: str, *, slow: bool = False, git_version: str | None = None) -> dict[str, str]:
    """A torch that is this interpreter's real one under another version: its __init__ loads the real package
    (found now, its path baked in) and then says it is `version`. `slow` then makes every
    torch.nn.functional.linear compute its product twice (SLOW_LINEAR): a real slowdown on any CPU or GPU. An
    instruction-set switch would not do (ATEN_CPU_CAPABILITY leaves oneDNN's bf16 linear alone on CPUs with
    avx512_bf16), nor would a thread count: bench pins and sizes its workers' threads itself."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.origin is not None, "the shim needs a real torch in this interpreter"
    real = Path(spec.origin).parent
    lines = [
        "import importlib.util as _util",
        "import os as _os",
        "import sys as _sys",
        "",
        f"_REAL = {str(real)!r}",
        "# torch's own dependencies (typing_extensions, sympy, numpy...) live beside it, not in this venv",
        f"if {str(real.parent)!r} not in _sys.path:",
        f"    _sys.path.append({str(real.parent)!r})",
    ]
    lines += [
        '_spec = _util.spec_from_file_location("torch", _os.path.join(_REAL, "__init__.py"),'
        " submodule_search_locations=[_REAL])",
        "_torch = _util.module_from_spec(_spec)",
        '_sys.modules["torch"] = _torch  # what `import torch` returns once this file has run',
        "_spec.loader.exec_module(_torch)",
        f"_torch.__version__ = {version!r}",
    ]
    if slow:
        lines.append(slow_linear("_torch"))
    if git_version is not None:
        lines.append(f"_torch.version.git_version = {git_version!r}")
    return {"torch/__init__.py": "\n".join(lines) + "\n"}


def build_wheel(
    out: Path,
    name: str,
    version: str,
    tag: str = "py3-none-any",
    files: dict[str, str] | None = None,
    requires: tuple[str, ...] = (),
) -> Path:
    dist = f"{name.replace('-', '_')}-{version}"
    entries = {k: v.encode() for k, v in (files or {}).items()}
    entries[f"{dist}.dist-info/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires)
    ).encode()
    entries[f"{dist}.dist-info/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: mpsup-tests\nRoot-Is-Purelib: true\nTag: {tag}\n".encode()
    )
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in entries.items())
    entries[f"{dist}.dist-info/RECORD"] = (record + f"{dist}.dist-info/RECORD,,\n").encode()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{dist}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for arc, data in entries.items():
            zf.writestr(arc, data)
    return path


def write_index(root: Path, wheels: list[Path], *, sha_override: dict[str, str] | None = None) -> None:
    """root/simple/<project>/index.html with anchors to root/files, each with a #sha256= fragment."""
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    by_project: dict[str, list[Path]] = {}
    for w in wheels:
        target = files / w.name
        target.write_bytes(w.read_bytes())
        by_project.setdefault(w.name.split("-")[0].replace("_", "-").lower(), []).append(target)
    for project, paths in by_project.items():
        page = root / "simple" / project / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        anchors = []
        for p in paths:
            sha = (sha_override or {}).get(p.name) or hashlib.sha256(p.read_bytes()).hexdigest()
            anchors.append(
                f'<a href="../../files/{p.name}#sha256={sha}" data-requires-python="&gt;=3.9">{p.name}</a><br/>'
            )
        page.write_text("<!DOCTYPE html><html><body>\n" + "\n".join(anchors) + "\n</body></html>\n")


@dataclass
class Gate:
    """A download the test holds open: `arrived` is set when a path containing `marker` is asked for, and the
    answer waits until the test sets `release`, so the client is mid-download for exactly as long as the test wants."""

    marker: str
    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    most_s: float = 120.0  # a test that never releases still lets the server shut down

    def hold(self, path: str) -> None:
        if self.marker in path:
            self.arrived.set()
            self.release.wait(self.most_s)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    gate: Gate | None = None

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.gate is not None:
            self.gate.hold(self.path)
        super().do_GET()


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        # A client that hung up (an interrupted download, released later) is what these tests do on purpose.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


@contextmanager
def _serving(handler) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A threaded server on 127.0.0.1 (an ephemeral port) for the duration; yields the base URL."""
    server = _QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def serve(root: Path, gate: Gate | None = None) -> Iterator[str]:
    """Serve `root` on 127.0.0.1 (an ephemeral port) for the duration; yields the base URL. A `gate` holds the
    downloads it names until the test releases them."""

    class Handler(_QuietHandler):
        pass

    Handler.gate = gate

    def handler(*args, **kwargs):  # type: ignore[no-untyped-def]
        return Handler(*args, directory=str(root), **kwargs)

    with _serving(handler) as url:
        yield url


class Routes:
    """What a scripted server answers: path -> (status, headers, body); every request's Host and path are kept in `hits`."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, dict[str, str], bytes]] = {}
        self.hits: list[tuple[str, str]] = []

    def page(self, path: str, body: bytes | str, content_type: str = "text/html") -> None:
        data = body.encode() if isinstance(body, str) else body
        self.answers[path] = (200, {"Content-Type": content_type, "Content-Length": str(len(data))}, data)

    def redirect(self, path: str, location: str, status: int = 302) -> None:
        self.answers[path] = (status, {"Location": location, "Content-Length": "0"}, b"")

    def stream(self, path: str, chunk: bytes, count: int) -> None:
        """A body sent without Content-Length (HTTP/1.0, closed at the end): only reading it tells its size."""
        self.answers[path] = (200, {"Content-Type": "text/html", "X-Stream": str(count)}, chunk)


@contextmanager
def serve_routes(routes: Routes) -> Iterator[str]:
    """A scripted server on 127.0.0.1; yields its base URL. Unknown paths are 404."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _answer(self, with_body: bool) -> None:
            routes.hits.append((self.headers.get("Host", ""), self.path))
            status, headers, body = routes.answers.get(self.path, (404, {"Content-Length": "0"}, b""))
            repeat = int(headers.get("X-Stream", "1"))
            self.send_response(status)
            for key, value in headers.items():
                if key != "X-Stream":
                    self.send_header(key, value)
            self.end_headers()
            if with_body:
                try:
                    for _ in range(repeat):
                        self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading: what a capped reader does

        def do_GET(self) -> None:
            self._answer(True)

        def do_HEAD(self) -> None:
            self._answer(False)

    with _serving(Handler) as url:
        yield url


# What the interpreter probe reports for a Linux CPython 3.11 with torch 2.15.0: the target of most plans.
LINUX_PROBE = {
    "version": "3.11.7",
    "implementation": "cpython",
    "platform": "linux",
    "machine": "x86_64",
    "libc": "glibc 2.36",
    "pip": False,
    "torch": {"version": "2.15.0"},
}
