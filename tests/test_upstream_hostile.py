"""report --upstream and report under hostile record text and hostile phase fields.

The issue body is rendered as GitHub would (CommonMark with tables and raw HTML on, by markdown-it, which rich
already brings) and the HTML it gives is read back: no live mention, reference, tag, link, heading or comment
end may come from a record. Paths and the user's name stay out unless --with-paths, and the repro script is
never rewritten. A record whose phase fields are of the wrong type is one line naming the field, exit 2.
"""

from __future__ import annotations

import copy
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from mpsup.errors import UserError
from mpsup.report import upstream as upstream_mod
from mpsup.report.analysis import analyze
from mpsup.report.command import ReportRequest, run_report
from mpsup.report.render import render_html, render_markdown
from mpsup.report.upstream import build_upstream, census_repro, scrub
from mpsup.runs.schema import RunRecord, as_record
from mpsup.runs.store import load_record
from tests.conftest import run_cli
from tests.rendered_page import github
from tests.test_upstream import _slow_record

# The issue's own strings first, then their neighbours.
HOSTILE = [
    "vae --> @pytorch-bot #1 <img src=x onerror=alert(1)>",
    "cpu\n# heading",
    "@everyone",
    "[x](javascript:alert(1))",
    "```\n# fenced\n```",
    "abc](http://evil)",
    "a`b``c```d ````",
    "--!> <script>alert(1)</script> <!-- x",
    "x | y | z",
    "![i](http://e.example/x.png)",
    "<details><summary>x</summary>",
    "www.evil.example",
    "*b* _i_ ~~s~~ \\",
    "x\u2028# heading2\r# heading3",
    "GH-1 pytorch/pytorch#2 foo@bar.com",
    "`",
    "",
    "<https://evil.example>",
    "&#64;everyone &lt;b&gt;",
]
OURS = {"h3", "h4", "p", "table", "thead", "tbody", "tr", "th", "td", "code", "pre", "ul", "li"}


def _hostile_record(text: str) -> dict[str, Any]:
    rec = _slow_record()
    rec["workloads"][0]["name"] = f"model/{text}/vae_decode"
    rec["device"] = f"cpu{text}"
    rec["id"] = f"20261204T000000Z-{text}"
    for env in rec["environments"]:
        env["torch_version"] += text
        env["device_name"] = f"Mac{text}"
        env["platform"] = f"macOS{text}"
    rec["hygiene"] = {"before": {"power": f"ac{text}"}, "after": {}, "changed": []}
    return rec


def _hostile_bisect(text: str) -> dict[str, Any]:
    return {
        "environments": [f"/envs/a{text}", f"/envs/b{text}", f"/envs/c{text}"],
        "elapsed_s": 120.0,
        "facts": {
            "0": {"torch": f"2.14.1{text}", "git_version": "abc](http://evil)"},
            "1": {"torch": f"2.15.0.dev{text}", "git_version": f"{'b' * 40}{text}"},
            "2": {"torch": f"2.15.0{text}", "git_version": "c" * 40},
        },
        "steps": [
            {
                "index": 1,
                "verdict": f"bad{text}",
                "figures": [{"change": f"slower{text}", "speedup": 0.5, "low": 0.45, "high": 0.55}],
            }
        ],
        "result": {"status": "found", "last_good": 0, "first_bad": 1},
        "targets": [],
    }


def _assert_inert(markdown: str) -> None:
    page = github(markdown)
    assert set(page.tags) <= OURS, set(page.tags) - OURS  # no img, a, script, details, h1/h2
    assert len(page.comments) == 1 and page.comments[0].startswith(" Suggested title:"), page.comments
    first = markdown.splitlines()[0]
    assert first.startswith("<!-- Suggested title: ") and first.endswith(" -->") and first.count("-->") == 1
    assert "--!>" not in first and first.count("<") == 1 and first.count(">") == 1
    live = "\n".join(page.live)
    assert not re.search(r"@\w", live), re.findall(r".{0,20}@\w+", live)
    assert not re.search(r"#\d", live), re.findall(r".{0,20}#\d", live)
    assert "<" not in live and "](" not in live and "www.evil" not in live
    for line in markdown.splitlines():  # a revision that is no hex is left out of the URL, not escaped into it
        assert "compare/" not in line or re.fullmatch(r".*/compare/[0-9a-f]{40}\.\.\.[0-9a-f]{40}", line), line
    assert page.tags.count("h3") == 2 and page.tags.count("pre") == 2  # the template's headings and blocks only


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
@pytest.mark.parametrize("keep_paths", [False, True], ids=["scrubbed", "with-paths"])
def test_no_record_field_makes_live_markdown_in_the_body(text: str, keep_paths: bool) -> None:
    record = as_record(_hostile_record(text))
    up = build_upstream(analyze(record), record, _hostile_bisect(text), keep_paths=keep_paths)
    _assert_inert(up.markdown)
    assert "#### Bisect" in up.markdown and "first bad: build 2 of 3" in up.markdown
    assert up.script is not None
    if text.strip():
        assert text.strip() not in up.script  # the script is made of numbers and fixed names only


def test_the_issue_s_component_folder_stays_inside_the_comment_and_a_code_span() -> None:
    text = HOSTILE[0]
    record = as_record(_hostile_record(text))
    md = build_upstream(analyze(record), record).markdown
    title = md.splitlines()[0]
    # Before: `<!-- Suggested title: [CPU] model/vae --> @pytorch-bot #1 <img ...` closed the comment.
    assert "`model/vae --\u203a @pytorch-bot #1 \u2039img src=x onerror=alert(1)\u203a/vae_decode`" in title
    assert f"`model/{text}/vae_decode` takes" in md
    assert "git c" not in md and "compare/" not in md  # build 1's revision is no hex: no compare URL


def test_a_hex_revision_gives_the_compare_url() -> None:
    record = as_record(_slow_record())
    doc = _hostile_bisect("")
    doc["facts"]["0"]["git_version"] = "A" * 40  # hex in capitals: accepted, written as git prints it
    md = build_upstream(analyze(record), record, doc).markdown
    assert f"https://github.com/pytorch/pytorch/compare/{'a' * 40}...{'b' * 40}" in md


def test_the_html_and_markdown_reports_stay_inert_for_the_same_fields() -> None:
    """The escaping of the other formats is render.py's own; the new phase checks must not open a hole there."""
    for text in HOSTILE[:8]:
        analysis = analyze(as_record(_hostile_record(text)))
        page = render_html(analysis)
        assert "<img" not in page and "<script" not in page and "<details" not in page
        page_md = github(render_markdown(analysis))
        assert not {"img", "script", "details", "a", "h2"} & set(page_md.tags) and page_md.tags.count("h1") == 1


# --- item 2: nothing private, and the script never rewritten -----------------------------------------------------


def test_scrub_finds_the_home_and_the_user_in_every_spelling() -> None:
    home, user = "/Users/alice", "alice"
    assert scrub("/Users/alice/models/x", home, user) == "~/models/x"
    assert scrub("/USERS/ALICE/models", home, user) == "~/models"  # a Mac's disk ignores case
    assert scrub("file%3A%2F%2F%2FUsers%2Falice%2Fm", home, user) == "file://~/m"
    assert scrub("%252FUsers%252Falice", home, user) == "~"
    assert scrub("/Volumes/alice_ssd/private-models", home, user) == "/Volumes/<user>_ssd/private-models"
    assert scrub("/Volumes/Alice2/x alice-models", home, user) == "/Volumes/<user>2/x <user>-models"
    assert scrub("conv/channels", "/home/ann", "ann") == "conv/channels"  # inside a word of letters: left


def _compile_variant(path: str) -> dict[str, Any]:
    """A regressed `--compile` phase: no census, so the body shows the workload's parameters."""
    rec = _slow_record()
    w = rec["workloads"][0]
    w.update(
        name="model/prefill/compiled",
        part="phase",
        kind="model_phase",
        phase="prefill",
        compile=True,
        library="transformers",
        path=path,
        source=path,
        reason=f"cannot open {path}/tokenizer.json: gone",
        cwd="/Users/alice/private-work",  # an end-to-end forward's params: text under no known key is left out
        target="private_pkg.models:build",
        config={
            "_name_or_path": path,
            "_commit_hash": "0123abc",
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": 64,
            "tokenizer_file": path + "/tokenizer.json",
            "custom_name": "alice_private",
        },
    )
    return rec


def test_the_parameter_dump_holds_no_path_or_config_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upstream_mod, "_user_name", lambda: "alice")
    path = "/Volumes/alice_ssd/private-models/llama"
    record = as_record(_compile_variant(path))
    md = build_upstream(analyze(record), record).markdown
    assert "No standalone script for a `model_phase` workload" in md
    dump = md.split("```json")[1].split("```")[0]
    params = json.loads(dump)
    assert params["config"] == {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64}
    assert params["phase"] == "prefill" and params["compile"] is True
    assert params["reason"] == "cannot open <path>: gone"  # free text keeps its words, not its paths
    for secret in ("private", "alice", "_name_or_path", "_commit_hash", "tokenizer", '"path"'):
        assert secret not in md.lower(), secret
    kept = build_upstream(analyze(record), record, keep_paths=True).markdown
    assert path in kept and "_name_or_path" in kept  # --with-paths: as the record has it


@pytest.mark.parametrize("user", ["main", "torch", "device", "build", "time"])
def test_a_user_named_like_the_script_s_code_still_gets_a_script_that_compiles(
    user: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upstream_mod, "_user_name", lambda: user)
    rec = _slow_record()
    rec["workloads"][0]["name"] = f"linear/{user}/x"  # the user's name in record text: scrubbed there
    record = as_record(rec)
    up = build_upstream(analyze(record), record)
    assert up.script is not None
    compile(up.script, "repro.py", "exec")  # before: `def <user>():` for a user named main
    assert up.script.rstrip("\n") in up.markdown  # the body's copy is the same script
    assert "`linear/<user>/x`" in up.markdown and f"linear/{user}/x" not in up.markdown
    assert f"def {user}(" in up.script or user not in ("main", "build")


def test_the_script_holds_no_record_text() -> None:
    rec = _slow_record()
    rec["workloads"][0]["name"] = "linear/SECRET-NAME/x"
    rec["workloads"][0]["dtype"] = "SECRET"
    record = as_record(rec)
    up = build_upstream(analyze(record), record)
    assert up.script is not None and "SECRET" not in up.script and "float32" in up.script


# --- item 3 and item 9: phase fields checked on read --------------------------------------------------------------

CENSUS = {
    "ops": {"addmm": 8, "add": 30},
    "calls": 38,
    "entries": [
        {"op": "addmm", "shapes": "32 8x16 16x32", "dtypes": "bfloat16", "count": 8},
        {"op": "add", "shapes": "1x8x16 scalar", "dtypes": "bfloat16", "count": 30},
    ],
}


def _phase_record() -> dict[str, Any]:
    rec = _slow_record()
    w = rec["workloads"][0]
    w.update(name="model/decode", part="phase", kind="model_phase", phase="decode", library="transformers")
    w.update(tokens=8, cache=8, depth=None, compile=False, resolution=None, config={"model_type": "llama"})
    for label in ("baseline", "candidate"):
        w["envs"][label].update(ci_low=1e-5, ci_high=2e-5, items_per_call=1)
        w["envs"][label]["phase"] = {
            "library": "transformers",
            "layers": 32,
            "depth": 8,
            "tokens": 8,
            "logits_kept": 1,
            "compiled": False,
            "fallback_ops": ["aten::foo"],
            "census": copy.deepcopy(CENSUS),
        }
    return rec


def _at(*path: Any) -> Any:
    def apply(value: Any) -> Any:
        def mutate(rec: dict[str, Any]) -> None:
            node: Any = rec["workloads"][0]
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value

        return mutate

    return apply


ENV = ("envs", "baseline")
INFO = (*ENV, "phase")
BAD_PHASE = {
    # the issue's cases
    "phase info as text": (_at(*INFO)("decode"), "workloads[0].envs.baseline.phase"),
    "phase info as a list": (_at(*INFO)(["decode"]), "workloads[0].envs.baseline.phase"),
    "phase name as a list": (_at("phase")(["decode"]), "workloads[0].phase"),
    "fallback_ops an int": (_at(*INFO, "fallback_ops")(3), "workloads[0].envs.baseline.phase.fallback_ops"),
    "fallback_ops of objects": (
        _at(*INFO, "fallback_ops")([{"op": "x"}]),
        "workloads[0].envs.baseline.phase.fallback_ops[0]",
    ),
    "layers 10^400": (_at(*INFO, "layers")(10**400), "workloads[0].envs.baseline.phase.layers"),
    "census a list": (_at(*INFO, "census")([1, 2]), "workloads[0].envs.baseline.phase.census"),
    "census of 2^31 x 2^31": (
        _at(*INFO, "census", "entries")([{"op": "mm", "shapes": "2147483648x2147483648", "count": 1}]),
        "workloads[0].envs.baseline.phase.census.entries[0].shapes",
    ),
    # their neighbours
    "depth as text": (_at(*INFO, "depth")("8"), "workloads[0].envs.baseline.phase.depth"),
    "layers negative": (_at(*INFO, "layers")(-1), "workloads[0].envs.baseline.phase.layers"),
    "census entries an int": (_at(*INFO, "census", "entries")(5), "workloads[0].envs.baseline.phase.census.entries"),
    "census ops a list": (_at(*INFO, "census", "ops")([]), "workloads[0].envs.baseline.phase.census.ops"),
    "census op count an object": (
        _at(*INFO, "census", "ops")({"add\n# x": {}}),
        "workloads[0].envs.baseline.phase.census.ops['add\\n# x']",
    ),
    "census shape not a shape": (
        _at(*INFO, "census", "entries", 0, "shapes")("8x16 ab"),
        "workloads[0].envs.baseline.phase.census.entries[0].shapes",
    ),
    "census shape of 2^49 elements": (
        _at(*INFO, "census", "entries", 0, "shapes")("8x16 131072x131072x32768"),
        "workloads[0].envs.baseline.phase.census.entries[0].shapes",
    ),
    "census count as text": (
        _at(*INFO, "census", "entries", 0, "count")("8"),
        "workloads[0].envs.baseline.phase.census.entries[0].count",
    ),
    "census op an int": (
        _at(*INFO, "census", "entries", 0, "op")(7),
        "workloads[0].envs.baseline.phase.census.entries[0].op",
    ),
    "compiled as text": (_at(*INFO, "compiled")("no"), "workloads[0].envs.baseline.phase.compiled"),
    "library as a list": (_at(*INFO, "library")(["x"]), "workloads[0].envs.baseline.phase.library"),
    "items per call as text": (_at(*ENV, "items_per_call")("8"), "workloads[0].envs.baseline.items_per_call"),
    "items per call 10^400": (_at(*ENV, "items_per_call")(10**400), "workloads[0].envs.baseline.items_per_call"),
    "ci_low as text": (_at(*ENV, "ci_low")("x"), "workloads[0].envs.baseline.ci_low"),
    "ci_high as a list": (_at(*ENV, "ci_high")([1]), "workloads[0].envs.baseline.ci_high"),
    "component as a list": (_at("component")([{}]), "workloads[0].component"),
    "tokens 10^400": (_at("tokens")(10**400), "workloads[0].tokens"),
    "cache as text": (_at("cache")("8"), "workloads[0].cache"),
    "compile as text": (_at("compile")("yes"), "workloads[0].compile"),
    "resolution as text": (_at("resolution")("1024"), "workloads[0].resolution"),
    "resolution of lists": (_at("resolution")([[1]]), "workloads[0].resolution[0]"),
    "config as a list": (_at("config")([]), "workloads[0].config"),
}


def test_a_well_formed_phase_record_reads_and_reports() -> None:
    record = RunRecord.from_json(_phase_record(), "ok.json")
    analysis = analyze(record)
    assert [p.phase for p in analysis.model_phases] == ["decode"]
    assert analysis.model_phases[0].scaled_from == "8 of 32" and analysis.model_phases[0].fallback == ("aten::foo",)
    assert "Op census, decode" in render_html(analysis)
    md = build_upstream(analysis, record).markdown
    # No op was replayed, so the repro times the phase itself, built from the config the user passes.
    assert "the whole decode phase" in md and "--config" in md


@pytest.mark.parametrize("case", sorted(BAD_PHASE))
def test_a_bad_phase_field_is_one_line_naming_it(tmp_path: Path, case: str) -> None:
    mutate, where = BAD_PHASE[case]
    rec = _phase_record()
    mutate(rec)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(rec))
    with pytest.raises(UserError) as exc:
        load_record(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: corrupt run record (") and where in msg and "\n" not in msg, msg


def _report_all_formats(path: Path) -> list[str]:
    """Every report of one record file, in process: the message of each UserError (any other exception fails)."""
    said = []
    for req in (
        *(ReportRequest(paths=[path], fmt=fmt) for fmt in ("terminal", "markdown", "json", "html")),
        ReportRequest(paths=[path], upstream=True),
    ):
        try:
            run_report(req, Console(file=io.StringIO(), width=200), Console(file=io.StringIO(), width=400))
        except UserError as exc:
            said.append(str(exc))
    return said


def test_every_report_format_refuses_every_bad_phase_field(tmp_path: Path, mpsup_home: Path) -> None:
    """The campaign's 26 tracebacks in 95 report runs, as a loop: each bad field, each format, one UserError."""
    runs = 0
    for case, (mutate, where) in BAD_PHASE.items():
        rec = _phase_record()
        mutate(rec)
        path = tmp_path / f"{len(case)}-{runs}.json"
        path.write_text(json.dumps(rec))
        said = _report_all_formats(path)
        runs += 5
        assert len(said) == 5 and all(where in s for s in said), (case, said)
    assert runs == 5 * len(BAD_PHASE)


def test_cli_exit_2_for_a_census_beyond_any_storage(tmp_path: Path, mpsup_home: Path) -> None:
    rec = _phase_record()
    BAD_PHASE["census of 2^31 x 2^31"][0](rec)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(rec))
    res = run_cli("report", "--upstream", str(path))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "2147483648x2147483648 is larger than any tensor" in res.stderr and len(res.stderr.splitlines()) == 1


def test_a_census_matmul_whose_result_no_storage_holds_is_left_out_of_the_repro() -> None:
    """Each operand within the bound read accepts, the result (2^30 x 2^30) not: said, never scripted."""
    big = {"op": "mm", "shapes": "1073741824x2 2x1073741824", "dtypes": "float32", "count": 1}
    small = {"op": "mm", "shapes": "8x16 16x4", "dtypes": "float32", "count": 1}
    assert census_repro("decode", {"entries": [big]}, "cpu") is None
    repro = census_repro("decode", {"entries": [big, small]}, "cpu")
    assert repro is not None and "aten.mm 8x16 @ 16x4" in repro.what
    rec = _phase_record()
    for env in rec["workloads"][0]["envs"].values():
        env["phase"]["census"]["entries"] = [big]
    record = as_record(rec)
    md = build_upstream(analyze(record), record).markdown
    assert "1 matmul(s) of its census left out" in md and "the whole decode phase" in md


def test_a_workload_repro_no_storage_could_hold_is_not_written() -> None:
    from mpsup.report.upstream import workload_repro

    big = 2**31 - 1
    assert workload_repro({"kind": "linear", "tokens": big, "in_features": 2, "out_features": big}, "cpu") is None
    assert workload_repro({"kind": "matmul", "n": 2**25}, "cpu") is None
    huge_conv = {"kind": "conv", "weight_shape": [2**24, 1, 1, 1], "input_shape": [1, 1, 2**24, 2**10]}
    assert workload_repro(huge_conv, "cpu") is None  # each tensor fits; the 2^58-element output does not
    small = workload_repro({"kind": "linear", "tokens": 2, "in_features": 16, "out_features": 8}, "cpu")
    assert small is not None and "input 2x16, weight 8x16" in small.what


def test_a_bisect_s_figures_and_targets_of_the_wrong_type_are_passed_over() -> None:
    record = as_record(_slow_record())
    doc = _hostile_bisect("")
    doc["steps"][0]["figures"] = 5
    doc["targets"] = 7
    md = build_upstream(analyze(record), record, doc).markdown
    assert "#### Bisect" in md and "| 1 |" not in md
