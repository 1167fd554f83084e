"""`--model org/name`: the snapshot of a Hugging Face model in the local cache, found without the network.

The cache is `HF_HUB_CACHE`, else `HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else
`~/.cache/huggingface/hub` (huggingface_hub's own order). A model lives in `models--<org>--<name>/`;
`refs/main` holds the commit whose `snapshots/<commit>/` folder is the model as downloaded (its files
are symlinks into the same repository's `blobs/`, which the model-folder confinement allows)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from mpsup.model.safetensors_header import ModelFormatError
from mpsup.safe_files import read_bytes_bounded

# Hugging Face's repo id rules: letters, digits, '-', '_', '.'; no '--' or '..'; up to 96 characters each part.
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
REVISION = re.compile(r"^[0-9a-f]{40}$")


def looks_like_repo_id(text: str) -> bool:
    return bool(REPO_ID.match(text)) and "--" not in text and ".." not in text and not text.endswith((".", "-"))


def hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "huggingface" / "hub"


# huggingface_hub 1.0 replaced `huggingface-cli` with `hf`; older installs have only the first.
DOWNLOAD_HINT = "hf download {0}, or huggingface-cli download {0} with huggingface_hub before 1.0"


def resolve(repo_id: str) -> Path:
    """The snapshot folder `refs/main` names, or one line saying where mpsup looked."""
    cache = hub_cache()
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    ref = repo / "refs" / "main"
    if not os.path.lexists(ref):
        raise ModelFormatError(
            f"{repo_id}: no such file or folder, and not in the Hugging Face cache (looked for {ref}); "
            f"mpsup reads models offline: download it first ({DOWNLOAD_HINT.format(repo_id)})"
        )
    # huggingface_hub writes refs/main as a plain file in the repository's own folder. A link, or a file that
    # resolves elsewhere (a linked refs/ folder), would have mpsup read (and quote) a file outside the cache.
    inside = os.path.realpath(ref).startswith(os.path.join(os.path.realpath(repo), ""))
    if os.path.islink(ref) or not inside or not os.path.isfile(ref):
        raise ModelFormatError(
            f"{ref}: not a plain file inside {repo.name}/ (a link, or a folder); refusing to read it as the "
            f"cache's ref: download the model again ({DOWNLOAD_HINT.format(repo_id)})"
        )
    commit = read_bytes_bounded(ref, "Hugging Face cache ref", 256).decode("ascii", "replace").strip()
    if not REVISION.match(commit):
        raise ModelFormatError(f"{ref}: not a commit hash (40 hex digits expected)")
    snapshot = repo / "snapshots" / commit
    if not os.path.isdir(snapshot):
        raise ModelFormatError(
            f"{repo_id}: refs/main points at {commit}, but {snapshot} is missing (an interrupted download?)"
        )
    return snapshot
