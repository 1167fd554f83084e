"""`mpsup bisect --nightlies GOOD BAD`: the torch builds a nightly index publishes between two, and the throwaway
environments the bisect installs them into, one at a time, only for the builds it probes.

The builds are listed once, when a bisect starts, and kept in its journal: a resumed bisect measures the same
list even if the index has since pruned or added nightlies. Each build is installed by install-rc's machinery
(plan_install + install_side_by_side: a hash-checked wheel, a venv built under a temporary name and moved into
place, its record written last) into the bisect's own folder under the data dir's bisect-envs/, named as its
journal. What is installed is recorded in the journal and recognised again by its install record, so a resumed
bisect reuses it; the folder goes at the bisect's end unless --keep-envs, and stays when it is interrupted."""

from __future__ import annotations

import contextlib
import re
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from mpsup.bisect.events import Installed, Installing, Released, Reused
from mpsup.envs import index as simple_index
from mpsup.envs.discover import pick_wheel, wheels_of
from mpsup.envs.records import ENV_RECORD, now_iso, read_env_record
from mpsup.envs.tags import Target, target_from_probe
from mpsup.envs.venvs import remove_tree, venv_python
from mpsup.errors import OperationFailed, UserError
from mpsup.paths import bisect_envs_dir
from mpsup.progress import Progress

MAX_BUILDS = 1024  # as many as a bisect over named environments takes
_DATE = re.compile(r"(\d{4})-?(\d{2})-?(\d{2})")
_MAX_TYPED = 100
WHEELS = ".wheels"  # inside a bisect's folder: a downloaded wheel until its environment holds it


# -- what the user typed -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """GOOD or BAD: a nightly's date (its version's dev number, 20261101) or a version (2.16.0.dev20261101)."""

    text: str
    day: int | None = None
    version: Version | None = None

    @property
    def key(self) -> str:
        """The same build however it was typed (2026-11-01 and 20261101; 2.16.0.dev20261101 and 2.16.0dev20261101)."""
        return str(self.day) if self.day is not None else str(self.version)

    def matches(self, v: Version) -> bool:
        if self.day is not None:
            return v.dev == self.day
        assert self.version is not None
        return v == self.version or v.public == self.version.public


def parse_endpoint(text: str, which: str) -> Endpoint:
    """One line naming what is wrong, before anything is read or installed."""
    typed = text.strip()
    expected = "expected a nightly version (e.g. 2.16.0.dev20261101) or its date (20261101 or 2026-11-01)"
    if not typed or len(typed) > _MAX_TYPED:
        raise UserError(f"{which} {text[:_MAX_TYPED]!r}: {expected}")
    match = _DATE.fullmatch(typed)
    if match:
        try:
            day = date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
        except ValueError:
            raise UserError(f"{which} {typed}: not a date; {expected}") from None
        return Endpoint(typed, day=int(day.strftime("%Y%m%d")))
    try:
        return Endpoint(typed, version=Version(typed))
    except InvalidVersion:
        raise UserError(f"{which} {typed!r}: {expected}") from None


# -- which builds ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    versions: tuple[str, ...]  # oldest first, GOOD and BAD at the ends, each with a wheel for the interpreter
    skipped: tuple[str, ...]  # dev builds in the range without one


def _describe(versions: list[Version]) -> str:
    devs = [v for v in versions if v.is_devrelease] or versions
    if not devs:
        return "it lists no torch builds"
    return f"it lists {len(devs)} torch build(s), {devs[0]} to {devs[-1]}"


def select_builds(
    files: list[simple_index.IndexFile], target: Target, good: Endpoint, bad: Endpoint, where: str
) -> Selection:
    """The dev builds from GOOD to BAD, in version order, that have a wheel for `target`; the ends must be listed.

    A version is a build whatever its local part (`+cpu`, the Linux wheels of PyTorch's CPU index): versions
    are grouped by their public part and install-rc's wheel choice (pick_wheel) picks within each."""
    groups: dict[Version, list[simple_index.IndexFile]] = defaultdict(list)
    for w in wheels_of(files, "torch"):
        groups[Version(w.version.public)].append(w.file)
    listed = sorted(groups)

    def resolve(end: Endpoint, which: str) -> Version:
        found = [v for v in listed if end.matches(v)]
        if not found:
            what = f"no nightly dated {end.key}" if end.day is not None else f"torch {end.text} is not listed"
            raise UserError(f"{which} {end.text}: {what} on {where} ({_describe(listed)})")
        if len(found) > 1:
            raise UserError(f"{which} {end.text}: several builds match ({', '.join(map(str, found))}); name one")
        return found[0]

    low, high = resolve(good, "GOOD"), resolve(bad, "BAD")
    if low >= high:
        raise UserError(
            f"GOOD {good.text} ({low}) is not older than BAD {bad.text} ({high}): no range to bisect "
            "(the good build comes first)"
        )
    chosen: list[str] = []
    skipped: list[str] = []
    for v in (v for v in listed if low <= v <= high):
        end = v in (low, high)
        if not (end or v.is_devrelease):
            continue  # a release listed among the nightlies is not a nightly between them
        # A yanked nightly is left out of the range; an end the user named is taken as named.
        candidates = [f for f in groups[v] if end or not f.yanked]
        pick = pick_wheel(candidates, target, version=str(v), where=where)
        if pick.wheel is None:
            if end:
                raise UserError(f"{'GOOD' if v == low else 'BAD'} {v}: {pick.message}")
            skipped.append(str(v))
            continue
        # A page may link a wheel over plain http, or a remote page a local file: refused before any install.
        simple_index.check_link(pick.wheel.file.url, where)
        chosen.append(str(pick.wheel.version))
    if len(chosen) > MAX_BUILDS:
        raise UserError(f"{len(chosen)} builds from {low} to {high}: at most {MAX_BUILDS}; name a narrower range")
    return Selection(tuple(chosen), tuple(skipped))


# -- the index and the user's interpreter, read when needed ----------------------------------------------------


class IndexSession:
    """The interpreter the environments are made from, probed once, and the index's torch page, read once: a
    bisect installs up to log2(N)+2 builds, and the nightly page is megabytes. Neither is read until needed, so
    a resumed bisect whose builds are all installed works offline."""

    def __init__(self, python: Path, index_url: str) -> None:
        simple_index.check_index_url(index_url)
        self.python, self.index_url = python, index_url
        self._facts: dict[str, Any] | None = None
        self._fetch: Callable[[str], simple_index.Fetched] | None = None
        self._pages: dict[str, simple_index.Fetched] = {}

    def facts(self) -> dict[str, Any]:
        if self._facts is None:
            from mpsup.envs.plan import probe_baseline
            from mpsup.probe import run_interpreter_probe

            self._facts = probe_baseline(self.python, run_interpreter_probe)
        return self._facts

    def probe(self, python: Path) -> dict[str, Any] | None:
        """plan_install's probe: the interpreter's facts from memory, any other interpreter run."""
        if python == self.python:
            return self.facts()
        from mpsup.probe import run_interpreter_probe

        return run_interpreter_probe(python)

    def target(self) -> Target:
        from mpsup.envs.plan import read_host_macos

        facts = self.facts()
        # As install-rc reads it: a macOS compatibility alias (10.16) is replaced by the host's real version.
        return target_from_probe(facts, read_host_macos() if facts.get("platform") == "darwin" else None)

    def fetch(self, url: str) -> simple_index.Fetched:
        if url not in self._pages:
            if self._fetch is None:
                from mpsup.envs import installer as inst

                # The user's pip `cert` (a corporate CA bundle), as install-rc reads the index with it.
                settings = inst.pip_settings(self.python) if self.facts().get("pip") else {}
                self._fetch = simple_index.default_fetcher(settings.get("cert"))
            self._pages[url] = self._fetch(url)
        return self._pages[url]

    def torch_files(self) -> list[simple_index.IndexFile]:
        try:
            files = simple_index.list_project_files(self.index_url, "torch", self.fetch)
        except simple_index.IndexUnreachable as exc:
            raise UserError(f"cannot read the index ({exc}); nothing was installed") from None
        if not files:
            raise UserError(f"{self.index_url} lists no torch (is it a package index's simple/ URL?)")
        return files


# -- the throwaway environments --------------------------------------------------------------------------------


def folder_for(key: str) -> Path:
    return bisect_envs_dir() / key


def remove_folder(folder: Path) -> bool:
    """Remove a bisect's folder, and bisect-envs/ when that leaves it empty; whether there was anything."""
    had = folder.exists() or folder.is_symlink()
    if folder.is_symlink():
        folder.unlink()
    else:
        remove_tree(folder)
    with contextlib.suppress(OSError):  # other bisects' folders are there, or it never existed
        folder.parent.rmdir()
    return had


def leftover_folders() -> list[tuple[Path, str]]:
    """Every bisect's folder under bisect-envs/, with what it holds and whose it is (its journal, by name)."""
    from mpsup.bisect.journal import KEY, load_journal
    from mpsup.paths import bisect_dir

    root = bisect_envs_dir()
    if not root.is_dir():
        return []
    found = []
    for folder in sorted(root.iterdir()):
        if folder.is_symlink() or not folder.is_dir():
            continue
        held = len(list(folder.glob(f"*/{ENV_RECORD}")))
        what = f"{held} nightly build(s) installed"
        journal = bisect_dir() / f"{folder.name}.json"
        if not (KEY.fullmatch(folder.name) and journal.is_file()):
            what += " by a bisect whose journal is gone"
        else:
            try:
                doc = load_journal(journal)
            except UserError:
                what += " by a bisect whose journal cannot be read"
            else:
                names = doc["environments"]
                span = f"{names[0]} to {names[-1]}"
                if doc["status"] == "done":
                    what += f" by a finished bisect of {span} (--keep-envs)"
                else:
                    what += f" by an interrupted bisect of {span} ({len(doc['steps'])} step(s) done)"
        found.append((folder, what))
    return found


def new_entry(index_url: str, python: Path, folder: Path, selection: Selection) -> dict[str, Any]:
    """The journal's `nightlies` object."""
    return {
        "index_url": index_url,
        "python": str(python),
        "folder": str(folder),
        "skipped": list(selection.skipped),
        "installs": [],
    }


def journal_entry(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """The journal's `nightlies` object, checked; one line naming the file otherwise."""
    entry = doc.get("nightlies")
    names = doc.get("environments")
    ok = (
        isinstance(entry, dict)
        and isinstance(entry.get("installs"), list)
        and all(isinstance(e, dict) for e in entry["installs"])
        and isinstance(entry.get("skipped", []), list)
        and isinstance(names, list)
        and len(names) >= 2
        and all(isinstance(n, str) and _is_version(n) for n in names)
    )
    if not ok:
        raise UserError(f"{path}: a bisect journal with damaged nightly builds; rerun with --fresh to start over")
    assert isinstance(entry, dict)
    return entry


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


@dataclass(frozen=True)
class Throwaway:
    """What a bisect over nightlies installed, and what became of it."""

    index_url: str
    folder: Path
    builds: int
    skipped: tuple[str, ...]
    installed: tuple[str, ...]  # every install this bisect made (all sessions), in order
    reused: tuple[str, ...]  # builds this session found installed by an earlier one
    state: str  # removed, kept (--keep-envs), kept-for-resume (interrupted), none (nothing was installed)
    left: tuple[str, ...]  # the environments still on disk (their folders)

    def to_json(self) -> dict[str, Any]:
        return {
            "index_url": self.index_url,
            "folder": str(self.folder),
            "builds": self.builds,
            "skipped": list(self.skipped),
            "installed": list(self.installed),
            "reused": list(self.reused),
            "state": self.state,
            "left": list(self.left),
        }


class Throwaways:
    """The bisect's builds as interpreters: each installed the first time the bisect asks for it."""

    def __init__(
        self,
        doc: dict[str, Any],
        entry: dict[str, Any],
        folder: Path,
        index: IndexSession,
        progress: Progress,
        save: Callable[[], None],
    ) -> None:
        self.doc, self.entry, self.folder, self.index = doc, entry, folder, index
        self.progress, self.save = progress, save
        self.versions = [str(v) for v in doc["environments"]]
        self.pythons: dict[int, Path] = {}
        self.reused: list[str] = []
        self._probes: dict[Path, dict[str, Any]] = {}

    @property
    def n(self) -> int:
        return len(self.versions)

    def known(self, i: int) -> Path | None:
        return self.pythons.get(i)

    def probed(self, i: int) -> dict[str, Any] | None:
        python = self.pythons.get(i)
        return self._probes.get(python) if python else None

    def _probe(self, python: Path) -> dict[str, Any] | None:
        """install-rc's probe of a new environment, kept: its last one, in place, is what the bisect would
        probe next (importing a torch takes seconds)."""
        from mpsup.probe import run_interpreter_probe

        doc = run_interpreter_probe(python)
        if doc is not None:
            self._probes[python] = doc
        return doc

    def python(self, i: int) -> Path:
        if i not in self.pythons:
            found = self._installed(self.versions[i])
            if found is not None:
                self.reused.append(self.versions[i])
                self.progress(Reused(self.versions[i], str(found)))
                self.pythons[i] = venv_python(found)
            else:
                self.pythons[i] = self._install(i)
        return self.pythons[i]

    def _installed(self, version: str) -> Path | None:
        """The environment of `version` in this bisect's folder: one with its install record, which is written
        last (a folder without one is an interrupted install, replaced when the build is installed)."""
        if not self.folder.is_dir():
            return None
        wanted = Version(version)
        for rec in sorted(self.folder.glob(f"*/{ENV_RECORD}")):
            try:
                doc = read_env_record(rec)
                held = Version(str(doc.get("torch_version")))
            except (UserError, InvalidVersion):
                continue
            if held.public == wanted.public and venv_python(rec.parent).exists():
                return rec.parent
        return None

    def _install(self, i: int) -> Path:
        from mpsup.envs.execute import Seams, install_side_by_side
        from mpsup.envs.plan import InstallRequest, NothingToDo, plan_install

        version = self.versions[i]
        request = InstallRequest(
            python=self.index.python, channel="nightly", index_url=self.index.index_url, version=version, yes=True
        )
        self.folder.mkdir(parents=True, exist_ok=True)
        plan = plan_install(request, fetch=self.index.fetch, probe=self.index.probe, envs_root=self.folder)
        if isinstance(plan, NothingToDo):  # recorded meanwhile (another mpsup on the same bisect): use it
            found = self._installed(version)
            if found is None:
                raise OperationFailed(f"torch {version}: {plan.message}")
            return venv_python(found)
        if simple_index.local_path(plan.wheel.url) is None:
            # Downloaded beside the environments, not into install-rc's downloads/: it goes with them.
            plan = replace(plan, wheel_path=self.folder / WHEELS / plan.wheel.filename)
        self.progress(Installing(version, str(plan.prefix), plan.wheel.size, plan.installer))
        t0 = time.monotonic()
        # No install progress: the bisect says one line per install instead (the event above).
        result = install_side_by_side(plan, Seams(probe=self._probe))
        if simple_index.local_path(plan.wheel.url) is None:
            plan.wheel_path.unlink(missing_ok=True)  # the environment holds its contents
        seconds = time.monotonic() - t0
        self.entry["installs"].append(
            {
                "index": i,
                "version": version,
                "prefix": str(plan.prefix),
                "python": str(result.record.python),
                "sha256": result.record.wheel.get("sha256"),
                "installed": now_iso(),
                "seconds": round(seconds, 1),
            }
        )
        self.save()
        self.progress(Installed(version, str(plan.prefix), seconds))
        return Path(result.record.python)

    def release(self, keep: set[int]) -> None:
        """Remove every installed build but `keep` (the good one, and what the bisect measures next): a build
        leaves the range still open once its step is called, and the bisect never asks for it again."""
        if not self.folder.is_dir():
            return
        wanted = {Version(v).public: i for i, v in enumerate(self.versions)}
        for rec in sorted(self.folder.glob(f"*/{ENV_RECORD}")):
            try:
                held = Version(str(read_env_record(rec).get("torch_version"))).public
            except (UserError, InvalidVersion):
                continue  # not one of this bisect's builds as far as can be told: left for remove_all
            i = wanted.get(held)
            if i is None or i in keep:
                continue
            remove_tree(rec.parent)
            self.pythons.pop(i, None)
            self.entry.setdefault("released", []).append({"index": i, "version": self.versions[i], "at": now_iso()})
            self.save()
            self.progress(Released(self.versions[i], str(rec.parent)))

    def present(self) -> list[Path]:
        if not self.folder.is_dir():
            return []
        return sorted(p.parent for p in self.folder.glob(f"*/{ENV_RECORD}"))

    def tidy(self) -> None:
        """Before keeping the environments for good: only they stay (no downloaded wheel, no interrupted build)."""
        if self.folder.is_dir():
            for child in self.folder.iterdir():
                if not (child / ENV_RECORD).is_file():
                    if child.is_symlink() or child.is_file():
                        child.unlink()
                    else:
                        remove_tree(child)

    def remove_all(self) -> list[Path]:
        """Every environment of this bisect, and its folder (downloads and interrupted builds included)."""
        gone = self.present()
        remove_folder(self.folder)
        self.pythons.clear()
        if gone or self.entry["installs"]:
            self.entry["removed"] = now_iso()
            self.save()
        return gone

    def summary(self, state: str) -> Throwaway:
        left = tuple(str(p) for p in self.present())
        installed = tuple(str(e.get("version")) for e in self.entry["installs"])
        if state == "removed" and not installed and not self.reused:
            state = "none"
        return Throwaway(
            index_url=str(self.entry.get("index_url")),
            folder=self.folder,
            builds=self.n,
            skipped=tuple(str(s) for s in self.entry.get("skipped", [])),
            installed=installed,
            reused=tuple(self.reused),
            state=state,
            left=left,
        )
