"""Which files a model may make mpsup open: only regular files inside the model's own folder.

A sharded index or a Diffusers `model_index.json` names other files. Downloaded from anywhere, it can
name `/etc/shadow`, `../../x`, `/dev/zero` or a FIFO; a folder can hold symlinks pointing anywhere.
Every referenced file is therefore resolved (symlinks included) and must lie inside the folder the
user named. The one exception is Hugging Face's cache, whose snapshot folders are symlinks into the
same repository's `blobs/` folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from mpsup.model.safetensors_header import ModelFormatError, shown


def resolved(path: Path) -> Path:
    """path with every symlink followed, or one line saying why that is impossible (a loop, a too-long name)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop, on Python < 3.13
        raise ModelFormatError(f"{path}: cannot resolve this path ({getattr(exc, 'strerror', None) or exc})") from None


def _hf_blobs(folder: Path) -> Path | None:
    """`<repo>/blobs` when folder lies in `<repo>/snapshots/<revision>`, Hugging Face's cache layout."""
    for parent in (folder, *folder.parents):
        if parent.parent.name == "snapshots" and parent.parent.parent.name.startswith(("models--", "datasets--")):
            return parent.parent.parent / "blobs"
    return None


@dataclass(frozen=True)
class ModelFolder:
    """A resolved folder and the roots its files may resolve into."""

    root: Path
    roots: tuple[Path, ...]

    @classmethod
    def of(cls, folder: Path) -> ModelFolder:
        root = resolved(folder)
        blobs = _hf_blobs(root)
        return cls(root, (root,) if blobs is None else (root, blobs))

    def contains(self, path: Path) -> bool:
        return any(path == r or path.is_relative_to(r) for r in self.roots)

    def named(self, name: object, source: Path, what: str, *, plain: bool = False) -> Path:
        """The file `name` as written inside `source`: a relative name in this folder (a single folder
        entry when plain), returned as written once its resolved target is known to lie inside."""
        if not isinstance(name, str) or not name:
            raise ModelFormatError(f"{source}: {what} {shown(name)} is not a file name")
        pure = PurePosixPath(name)
        if "\0" in name or "\\" in name or pure.is_absolute() or ".." in pure.parts or (plain and len(pure.parts) != 1):
            raise ModelFormatError(f"{source}: {what} {shown(name)} lies outside the model folder {self.root}; refused")
        return self.member(self.root / pure, what)

    def member(self, path: Path, what: str) -> Path:
        """A path in this folder (found by listing it, or built from a checked name), returned as given once
        its resolved target is known to lie inside. Opening it then follows the same links (a folder that
        changes between the check and the open is not a threat this guards against)."""
        target = resolved(path)
        if not self.contains(target):
            raise ModelFormatError(
                f"{path}: this {what} is a link to {target}, outside the model folder {self.root}; "
                "mpsup opens only files inside the folder it was given"
            )
        return path
