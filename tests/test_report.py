"""The report: committed notebook hygiene, a papermill smoke run, HTML in headless Chromium.

The rendered report comes from tiny synthetic raw data (tests/synthetic.py) so the
whole pipeline (processed data -> papermill -> nbconvert -> writeup) runs in seconds.
Chromium is required when the environment variable CI is set (the test fails without
it); elsewhere the Chromium tests are skipped when it is not installed.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
from synthetic import write_fixture

from kvqueue import __main__ as cli
from kvqueue import tables

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "report.ipynb"
PARAMETERS = {"raw_dir", "processed_dir", "figures_dir", "pairs", "confidence"} | {
    "resamples",
    "seed",
    "delta",
    "method",
}
HEADINGS = [tables.CASE_TITLES[c] for c in tables.HEADLINE_CASES]


# ---------------------------------------------------------------------------------------
# the committed notebook


def test_committed_notebook_is_thin_and_has_no_outputs() -> None:
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    # The parameters cell: typed assignments of literals only, each with a # help.
    names = set()
    lines = tagged[0].source.splitlines()
    for stmt in ast.parse(tagged[0].source).body:
        assert isinstance(stmt, ast.AnnAssign), ast.dump(stmt)
        assert stmt.value is not None
        ast.literal_eval(stmt.value)  # raises on anything but a literal
        assert isinstance(stmt.target, ast.Name)
        names.add(stmt.target.id)
        assert "  # " in lines[stmt.lineno - 1], f"no help for {stmt.target.id}"
    assert names == PARAMETERS
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None
        for node in ast.walk(ast.parse(cell.source)):
            assert not isinstance(
                node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda
            ), "the notebook must only call into kvqueue"


# ---------------------------------------------------------------------------------------
# rendering (once per module)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("report")
    write_fixture(root / "raw", tiny=True)
    code = cli.main(
        [
            "report",
            "--raw-dir",
            str(root / "raw"),
            "--processed-dir",
            str(root / "processed"),
            "--out",
            str(root / "reports"),
        ]
    )
    assert code == 0
    return root / "reports"


def test_papermill_executed_notebook_without_errors(rendered: Path) -> None:
    nb = nbformat.read(str(rendered / "report.ipynb"), as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert not [o for o in outputs if o.output_type == "stream" and o.name == "stderr"]
    assert any("injected-parameters" in c.metadata.get("tags", []) for c in nb.cells)
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) == 3


def test_html_has_tables_figures_and_no_code(rendered: Path) -> None:
    html = (rendered / "report.html").read_text(encoding="utf-8")
    for heading in [*HEADINGS, "Confirmation run", "Other cases", "Gap to the lower bound"]:
        assert heading in html
    assert "Noise floor (A/A)" in html and "Order effect" in html
    assert html.count('src="data:image/png;base64,') == 3
    # Code cells are hidden, and nothing is loaded from the network.
    assert "processed.ensure(" not in html and "import " not in html
    assert "<script src=" not in html
    # The methods paragraph carries the real parameters of the tiny fixture runs.
    assert "7 fresh worker processes" in html and "10,000 resamples" in html
    assert "percentile method" in html
    # The interrupted run is named; the older run is listed.
    assert "20261129T120000Z-cp312-cccc (status interrupted)" in html
    assert "20261128T090000Z-cp312-aaaa" in html
    for name in ("forest", "process_ratios", "ns_per_variant"):
        assert (rendered / "figures" / f"{name}.png").stat().st_size > 10_000


def test_pr_writeup(rendered: Path) -> None:
    md = (rendered / "pr-writeup.md").read_text(encoding="utf-8")
    for heading in HEADINGS:
        assert f"### {heading}" in md
    assert "### Methods" in md and "### Reproduce" in md
    assert md.count("| Host ") >= 3
    assert re.search(r"\| synth-a \| CPython 3\.12\.1 \| +2,048 \| vllm==0\.32\.0 vs", md)
    assert "make bench HOST=synth-a" in md and "AA=1" in md
    assert "](figures/forest.png)" in md
    assert "10,000 resamples" in md


# ---------------------------------------------------------------------------------------
# headless Chromium

_CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
_PROBE = """<script>
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var out = document.createElement("pre");
  out.id = "kvq-probe";
  out.textContent = JSON.stringify({
    widths: imgs.map(function (i) { return i.complete ? i.naturalWidth : -1; }),
    headings: Array.prototype.map.call(
      document.querySelectorAll("h1, h2, h3"), function (h) { return h.textContent.trim(); })
  });
  document.body.appendChild(out);
});
</script>"""


@pytest.fixture(scope="module")
def chromium() -> str:
    exe = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None)
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (required when CI is set)")
        pytest.skip("chromium is not installed")
    return exe


def _run_chromium(exe: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [exe, *_CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_chromium_screenshot(chromium: str, rendered: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    proc = _run_chromium(
        chromium,
        tmp_path / "profile",
        f"--screenshot={shot}",
        "--window-size=1400,4000",
        (rendered / "report.html").as_uri(),
    )
    assert shot.is_file(), proc.stderr[-2000:]
    assert shot.stat().st_size > 50_000  # a rendered page, not a blank one


def test_chromium_images_load_and_headings_present(
    chromium: str, rendered: Path, tmp_path: Path
) -> None:
    page = tmp_path / "probe.html"
    html = (rendered / "report.html").read_text(encoding="utf-8")
    page.write_text(html.replace("</body>", _PROBE + "\n</body>", 1), encoding="utf-8")
    proc = _run_chromium(
        chromium,
        tmp_path / "profile",
        "--run-all-compositor-stages-before-draw",
        "--virtual-time-budget=5000",
        "--dump-dom",
        page.as_uri(),
    )
    match = re.search(r'<pre id="kvq-probe">(.*?)</pre>', proc.stdout, re.S)
    assert match, proc.stderr[-2000:]
    probe = json.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert len(probe["widths"]) == 3
    assert all(w > 0 for w in probe["widths"]), probe["widths"]
    for heading in HEADINGS:
        assert heading in probe["headings"]
