"""`mpsup install-rc --mlx`: an MLX environment beside the user's, for `bench --candidate mlx` (by its recorded name).

A fresh venv from the user's Python, `mlx` (`mlx[cpu]` off macOS, where only the CPU wheels exist) and `mlx-lm`
from the index pip is configured for (or --index-url), verified by building a tiny Llama with mlx_lm and running
one prefill in it, then moved into place and recorded with `"stack": "mlx"`. Nothing is left at the final name
unless every step passed."""

from __future__ import annotations

import json
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpsup.clock import iso_now
from mpsup.envs.records import ENV_RECORD, ENV_SCHEMA
from mpsup.envs.venvs import commit_move, create_venv, mark_as_ours, point_at, remove_tree, venv_python
from mpsup.errors import OperationFailed, UserError
from mpsup.paths import envs_dir
from mpsup.safe_files import atomic_write_json
from mpsup.syscmd import run_command

NAME = "mlx"
INSTALL_TIMEOUT_S = 1800.0
# One tiny Llama built from a config with random weights, one prefill: what bench's MLX worker does, in small.
VERIFY = """
import json, mlx.core as mx, mlx_lm
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.utils import _get_classes
cfg = {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 1, "intermediate_size": 64,
       "num_attention_heads": 2, "num_key_value_heads": 1, "rms_norm_eps": 1e-5, "vocab_size": 64}
model_cls, args_cls = _get_classes(cfg)
model = model_cls(args_cls.from_dict(cfg))
out = model(mx.array([[1, 2, 3]]), cache=make_prompt_cache(model))
mx.eval(out)
assert out.shape == (1, 3, 64), out.shape
metal = bool(getattr(mx, "metal", None) and mx.metal.is_available())
print(json.dumps({"mlx_version": mx.__version__, "mlx_lm_version": getattr(mlx_lm, "__version__", "?"),
                  "device": str(mx.default_device()), "metal": metal}))
"""


def packages(platform: str = sys.platform) -> list[str]:
    """What pip installs: MLX's Metal build on macOS; elsewhere only its CPU wheels exist (`mlx[cpu]`)."""
    return ["mlx" if platform == "darwin" else "mlx[cpu]", "mlx-lm"]


@dataclass(frozen=True)
class MlxEnvResult:
    name: str
    prefix: Path
    python: Path
    facts: dict[str, Any]
    exit_code: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "prefix": str(self.prefix), "python": str(self.python), "stack": "mlx", **self.facts}


def verify(python: Path) -> dict[str, Any]:
    """Build a tiny Llama with mlx_lm in `python` and run it once: its versions and device, or OperationFailed."""
    res = run_command([python, "-c", VERIFY], timeout=300)
    lines = [ln for ln in (res.stdout or "").splitlines() if ln.strip()]
    try:
        facts = json.loads(lines[-1]) if res.ok and lines else None
    except ValueError:
        facts = None
    if not isinstance(facts, dict):
        detail = [ln for ln in (res.stderr or res.stdout or "").splitlines() if ln.strip()]
        why = detail[-1][:300] if detail else f"exit {res.returncode}"
        raise OperationFailed(f"{python}: mlx_lm could not build and run a tiny model ({why})")
    return facts


def install_mlx(base_python: Path, *, index_url: str | None = None, name: str = NAME) -> MlxEnvResult:
    base = envs_dir()
    final = base / name
    if final.exists() or final.is_symlink():
        raise UserError(f"{final} exists already: `mpsup install-rc --remove {name}` first, or use it as it is")
    base.mkdir(parents=True, exist_ok=True)
    building = base / f".{name}.building-{secrets.token_hex(3)}"
    try:
        create_venv(base_python, building, with_pip=True)
        mark_as_ours(building)
        py = venv_python(building)
        argv: list[str | Path] = [py, "-m", "pip", "install", "-q", *packages()]
        if index_url:
            argv += ["--index-url", index_url]
        res = run_command(argv, timeout=INSTALL_TIMEOUT_S)
        if not res.ok:
            detail = [ln for ln in (res.stderr or res.stdout).splitlines() if ln.strip()]
            raise OperationFailed(f"pip could not install mlx and mlx-lm: {detail[-1][:300] if detail else res}")
        facts = verify(py)
        point_at(building, final)
        commit_move(building, final)
    except BaseException:
        remove_tree(building)
        raise
    python = venv_python(final)
    record = {
        "name": name,
        "mode": "side-by-side",
        "prefix": str(final),
        "python": str(python),
        "stack": "mlx",
        "mlx_version": str(facts.get("mlx_version")),
        "mlx_lm_version": str(facts.get("mlx_lm_version")),
        "packages": packages(),
        "index_url": index_url,
        "created_at": iso_now(),
        "baseline_python": str(base_python),
        "schema": ENV_SCHEMA,
    }
    atomic_write_json(final / ENV_RECORD, record)
    return MlxEnvResult(name, final, python, facts)
