"""The report page's screenshots in docs/evidence/figures (report-wide.png, report-phone.png), made from a fixture:
the synthetic paired record of tests/synthetic.py (labelled as a Mac run of torch 2.14.1 -> 2.15.0; no Mac
measured it), with a banner inside each image that says so.

    python benchmarks/report_screenshots.py [OUT_DIR]          (default docs/evidence/figures; needs chromium)
    python benchmarks/report_screenshots.py --html PAGE.html   (the page only, to look at in a browser)

Expected duration: a few seconds per image."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

BANNER = (
    '<div style="background:#ffd33d;color:#5a1e02;font:700 1.6em system-ui,sans-serif;padding:0.4em 0.6em;'
    'margin:0 0 1em">FIXTURE: made from a synthetic test record (tests/synthetic.py), not measured on any '
    "Mac</div>"
)
SIZES = {"report-wide.png": (1400, 950), "report-phone.png": (390, 1600)}


def page() -> str:
    from mpsup.report.analysis import analyze
    from mpsup.report.render import render_html
    from tests.synthetic import paired_record

    fast, slow = "linear/4096x4096/t1", "linear/4096x1024/t1"
    rec = paired_record({fast: 1.35, slow: 0.82}, seed=11, run_id="20261202T100000Z-aaaaaa")
    for w in rec["workloads"]:
        if w["name"] == slow:
            w["part"] = "moe"  # two parts, so the plot shows its colours and legend
        for env in w["envs"].values():
            env["memory"]["peak_allocated"] *= 2**20  # MiB-sized peaks: under 1 MiB is allocator noise
    return render_html(analyze(rec)).replace("<body>", "<body>" + BANNER, 1)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "out", nargs="?", type=Path, default=ROOT / "docs" / "evidence" / "figures", help="folder for the PNG files"
    )
    p.add_argument("--html", type=Path, help="write the page's HTML here instead of taking screenshots")
    args = p.parse_args(argv)
    if args.html:
        args.html.write_text(page())
        print(args.html)
        return
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium is not installed (apt-get install chromium)")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        html = Path(tmp) / "report.html"
        html.write_text(page())
        for name, (width, height) in SIZES.items():
            out = args.out / name
            subprocess.run(
                [
                    chromium,
                    *("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"),
                    f"--user-data-dir={Path(tmp) / 'profile'}",
                    f"--window-size={width},{height}",
                    f"--screenshot={out}",
                    html.as_uri(),
                ],
                check=True,
                capture_output=True,
                timeout=120,
            )
            print(f"{out}: {width}x{height}")


if __name__ == "__main__":
    main()
