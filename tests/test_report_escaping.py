"""Record text is data in every renderer: no HTML injection, no Markdown cell break-out, no rich markup."""

from __future__ import annotations

import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from rich.console import Console

from mpsup.report.analysis import analyze
from mpsup.report.command import ReportRequest, run_report
from mpsup.report.render import md, render_html, render_markdown, render_multi_terminal, render_terminal
from mpsup.runs.store import save_record
from tests.conftest import run_cli
from tests.synthetic import paired_record

SCRIPT = "<script>alert(1)</script>"
ATTR = "\"' onmouseover=alert(2) x='"
MD_BREAKOUT = "w|x`y`*b*_i_ [link](e.example) <b>bold</b> & ~s~\n| injected | row |\\"
# The same with text GitHub links whatever escapes it (a URL, a mention): it goes in code spans instead.
MD_LINKED = MD_BREAKOUT.replace("(e.example)", "(http://e.example)") + " @everyone #12"
MARKUP = "models/[old] llama/[/x] [bold red]loud"


def _hostile(text: str, run_id: str = "20261202T100000Z-host00") -> dict[str, Any]:
    """A valid record with `text` in every string field the report shows."""
    smoke = [
        {"feature": "f" + text, "envs": {"baseline": {"status": "unsupported"}, "candidate": {"status": "pass" + text}}}
    ]
    rec = paired_record(
        1.3,
        seed=7,
        count=4,
        rounds=8,
        run_id=run_id,
        smoke=smoke,
        hygiene={"before": {}, "after": {}, "changed": ["cond" + text]},
    )
    rec["device"] = "mps" + text
    for env in rec["environments"]:
        env["device_name"] = "Mac" + text
        env["torch_version"] = env["torch_version"] + text
    for i, w in enumerate(rec["workloads"]):
        w["name"] = f"w{i}{text}"
    # one workload without figures, so its (record-given) status is shown instead of a speedup
    w = rec["workloads"][-1]
    w.pop("ratios")
    w["envs"]["candidate"] = {"status": "crash" + text}
    w["status"] = "crash" + text
    return rec


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attrs: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs |= {name for name, _ in attrs}


PAGE_TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "p",
    "ul",
    "li",
    "h2",
    "svg",
    "line",
    "text",
    "circle",
    "rect",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "div",
    "label",
    "input",
    "small",
    "wbr",
    "path",
    "span",
}  # input, label: the CSS-only sort; small: the candidate column's "(baseline ÷ speedup)"; wbr: names break at "/";
# path: the arrowhead of an interval that runs off the plot's axis; span: an interval kept whole when its cell wraps


def test_html_escapes_every_record_string():
    for text in (SCRIPT, ATTR, "<img src=x onerror=alert(3)>"):
        page = render_html(analyze(_hostile(text)))
        parser = _Tags()
        parser.feed(page)
        assert parser.tags <= PAGE_TAGS, parser.tags - PAGE_TAGS
        assert not {a for a in parser.attrs if a.startswith("on")}
        assert "<script" not in page.lower()  # before: the device field's <script> was in the page as is
    page = render_html(analyze(_hostile(SCRIPT)))
    assert "mps&lt;script&gt;alert(1)&lt;/script&gt;" in page


def _unescaped(line: str, char: str) -> int:
    """Occurrences of char not preceded by an odd run of backslashes."""
    return sum(
        1
        for m in re.finditer(re.escape(char), line)
        if (len(line[: m.start()]) - len(line[: m.start()].rstrip("\\"))) % 2 == 0
    )


def test_markdown_rows_keep_their_columns_and_inject_nothing():
    benign = render_markdown(analyze(_hostile("")))
    page = render_markdown(analyze(_hostile(MD_BREAKOUT)))
    assert len(page.splitlines()) == len(benign.splitlines())  # no line added by a newline in a name
    rows = [line for line in page.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 4  # the header and one row per workload
    assert all(_unescaped(row, "|") == 8 for row in rows)  # seven cells: none broken out of
    # The hostile text adds not one active character: what is left is the report's own (`**`, `->`, `|`).
    for char in "|<>[]`*_&~":
        assert _unescaped(page, char) == _unescaped(benign, char), char


def test_md_escape_round_trip_is_one_line():
    assert md("a\nb\r\nc") == "a b c"
    assert md("x|y") == "x\\|y" and md("\\") == "\\\\"


def test_terminal_shows_markup_literally():
    rec = _hostile(MARKUP)
    console = Console(file=io.StringIO(), width=300, color_system=None)
    render_terminal(analyze(rec), console)  # before: MarkupError traceback from [/x]
    render_multi_terminal([analyze(rec), analyze(rec)], console)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "models/[old] llama/[/x] [bold red]loud" in out
    assert "mps" + MARKUP in out


def test_list_shows_ids_devices_and_models_literally(mpsup_home: Path):
    rec = _hostile(MARKUP, run_id="20261202T100000Z-[b]x")
    rec["model"] = {"path": "models/[old] llama", "fingerprint": "ab"}
    # save_record gives such an id a fresh, file-safe one; a file put there by hand keeps it.
    (mpsup_home / "runs").mkdir(parents=True, exist_ok=True)
    (mpsup_home / "runs" / "20261202T100000Z-bx.json").write_text(json.dumps(rec))
    out = Console(file=io.StringIO(), width=400, color_system=None)
    run_report(ReportRequest(list_runs=True), out, Console(file=io.StringIO()))
    text = out.file.getvalue()  # type: ignore[attr-defined]
    assert "20261202T100000Z-bx (record id 20261202T100000Z-[b]x)" in text  # what --run takes, and the id inside
    assert "models/[old] llama" in text and "[bold red]loud" in text


def test_cli_html_report_from_a_hostile_record(mpsup_home: Path, tmp_path: Path):
    save_record(_hostile(SCRIPT), mpsup_home / "runs")
    res = run_cli("report", "--format", "html")
    assert res.returncode == 0, res.stderr
    assert "<script" not in res.stdout and "&lt;script&gt;" in res.stdout


# --- issue 26: terminal escapes and bidi overrides in record text and names -------------------------------------

# An OSC that retitles the window, a CSI that colours and one (8-bit) that clears the screen, a C0 backspace and
# carriage return, and a right-to-left override that shows `exe.txt` for `txt.exe`.
ESCAPES = "\x1b]0;PWNED\x07\x1b[31mRED\x1b[0m\x9b2J\x08\r\u202etxt.exe\u2066"
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_controls_and_bidi_overrides_are_shown_not_obeyed_in_every_format():
    rec = _hostile(ESCAPES)
    console = Console(file=io.StringIO(), width=300, color_system=None, force_terminal=False)
    render_terminal(analyze(rec), console)
    render_multi_terminal([analyze(rec), analyze(rec)], console)
    pages = {
        "terminal": console.file.getvalue(),  # type: ignore[attr-defined]
        "markdown": render_markdown(analyze(rec)),
        "html": render_html(analyze(rec)),
    }
    for fmt, page in pages.items():
        assert not CONTROLS.search(page), (fmt, CONTROLS.findall(page)[:5])  # before: every one reached the output
        shown = "\\\\x1b\\]0;PWNED" if fmt == "markdown" else "\\x1b]0;PWNED"  # Markdown escapes `\\` and `]`
        assert shown in page and "u202etxt.exe" in page, fmt


def test_bench_list_shows_a_hostile_tensor_and_component_name_escaped(tmp_path: Path):
    from tests.test_odd_inputs import _safetensors

    model = tmp_path / "m.safetensors"
    model.write_bytes(
        _safetensors({"evilNAME.weight": [8, 8, 3], "x.weight": [8, 8]}, {"NAME": json.dumps(ESCAPES)[1:-1]})
    )
    res = run_cli("bench", "--model", str(model), "--list")
    assert res.returncode == 0 and "not measured: evil\\x1b]0;PWNED" in res.stdout + res.stderr, res.stderr
    assert not CONTROLS.search(res.stdout + res.stderr)
    pipe = tmp_path / "pipe"  # a Diffusers pipeline whose component folder is named with the same sequences
    unet = pipe / ("unet" + ESCAPES.replace("/", "").replace("\x00", ""))
    unet.mkdir(parents=True)
    (pipe / "model_index.json").write_text(json.dumps({"_class_name": "X", unet.name: ["diffusers", "UNet"]}))
    (unet / "config.json").write_text("{}")
    (unet / "diffusion_pytorch_model.safetensors").write_bytes(_safetensors({"conv.weight": [8, 4, 3, 3]}))
    res = run_cli("bench", "--model", str(pipe), "--list")
    assert "Traceback" not in res.stderr and not CONTROLS.search(res.stdout + res.stderr), res.stdout + res.stderr


def test_the_count_of_rows_left_off_the_screen_shows_a_status_literally():
    """The terminal leaves most unchanged rows off one screen and counts them by status: a record's own
    status text is data there too (before the escape: a MarkupError from `[/x]`)."""
    rec = paired_record(1.0, seed=7, count=20, rounds=8)
    for w in rec["workloads"][:3]:  # the shortest, so the smallest shares: off the screen
        w.pop("ratios")
        w["envs"]["candidate"] = {"status": "crash" + MARKUP}
        w["status"] = "crash" + MARKUP
    console = Console(file=io.StringIO(), width=300, color_system=None)
    render_terminal(analyze(rec), console)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert f"3 crash{MARKUP}" in out and "more workloads" in out


def test_markdown_report_text_that_github_would_link_sits_in_a_code_span() -> None:
    """A backslash does not stop GitHub linking @mentions, #123 or bare URLs: such text goes in a code span."""
    for text in ("@pytorch-bot", "see #123", "www.evil.example", "https://evil.example/x", "a|b @everyone"):
        cell = md(text)
        assert cell.startswith("`") and cell.endswith("`"), cell
        assert "\n" not in cell and ("|" not in text or "\\|" in cell)
    assert md("linear/4096x4096/t16") == "linear/4096x4096/t16"  # plain names read as before
    markdown = render_markdown(analyze(_hostile(MD_LINKED)))
    rows = [line for line in markdown.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 4 and all(_unescaped(row, "|") == 8 for row in rows)
    for line in markdown.splitlines():
        if "@everyone" in line:
            assert re.search(r"`[^`]*@everyone[^`]*`", line), line
