"""The report: committed notebook hygiene, a papermill smoke run, HTML in headless Chromium.

The rendered report comes from tiny synthetic raw data (tests/synthetic.py) so the
whole pipeline (processed data -> papermill -> nbconvert -> writeup) runs in seconds;
the first-screen check renders one host x four interpreters of the full protocol, the
shape of the committed data. Chromium is required when the environment variable CI is
set (the test fails without it); elsewhere the Chromium tests are skipped when it is not
installed. Everything that runs papermill or Chromium is marked ``slow``.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from synthetic import write_fixture, write_hosts

from kvqueue import __main__ as cli
from kvqueue.ab import ab_tables
from kvqueue.report import figures, sections

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "report.ipynb"
PARAMETERS = {"raw_dir", "processed_dir", "figures_dir", "pairs", "confidence"} | {
    "resamples",
    "seed",
    "delta",
    "method",
    "kv_regions",
    "hosts",
    "runs",
}
HEADINGS = [
    sections.TITLE,
    "Summary",
    figures.FIGURES["forest"].title,
    "Validation",
    *(ab_tables.case_title(c) for c in ab_tables.HEADLINE_CASES),
    "Provenance: every run found",
]


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
    # The structure is not hard-coded: the notebook loops over kvqueue.report.sections.
    source = "\n".join(c.source for c in code)
    assert "for section in sections.build(data):" in source
    assert "html.show(section" in source
    assert not [c for c in nb.cells if c.cell_type == "markdown"]


# ---------------------------------------------------------------------------------------
# rendering (once per module)


def _report(raw: Path, root: Path, *extra: str) -> Path:
    args = ["--processed-dir", str(root / "processed"), "--out", str(root / "reports")]
    assert cli.main(["report", "--raw-dir", str(raw), *args, *extra]) == 0
    return root / "reports"


#: The figures the fixture's report shows: every one but the stack subjects' forests and
#: release histories (the fixture holds queue runs only; tests/test_pool_subject.py
#: renders a pool report; a pool or manager history section appears only with its history).
SHOWN = {
    name: spec
    for name, spec in figures.FIGURES.items()
    if name not in ("forest_pool", "history_pool", "forest_manager", "history_manager")
}


@pytest.fixture(scope="module")
def fixture_raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    raw = tmp_path_factory.mktemp("raw")
    write_fixture(raw, tiny=True)
    return raw


@pytest.fixture(scope="module")
def rendered(fixture_raw: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _report(fixture_raw, tmp_path_factory.mktemp("report"))


@pytest.fixture(scope="module")
def rendered_one_host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One host x four interpreters of the full protocol: the committed data's shape."""
    root = tmp_path_factory.mktemp("one-host")
    write_hosts(root / "raw", hosts=1)
    return _report(root / "raw", root, "--resamples", "500")


@pytest.mark.slow
def test_a_failing_notebook_is_one_line_and_writes_no_writeup(
    fixture_raw: Path, tmp_path: Path
) -> None:
    """The notebook fails: one line naming it and the executed copy, exit status 1, no
    writeup is written and no half-written figure is left in the build cache."""
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    nb["cells"][-1]["source"] = ["raise RuntimeError('broken on purpose')\n"]
    broken = tmp_path / "broken.ipynb"
    broken.write_text(json.dumps(nb), encoding="utf-8")
    out = tmp_path / "reports"
    # A previous build's outputs (issue 28.7: they were left beside the new tables).
    (out / "writeups").mkdir(parents=True)
    (out / "report.html").write_text("<p>the previous build</p>\n")
    (out / "writeups" / "history.md").write_text("the previous build\n")
    proc = subprocess.run(
        [sys.executable, "-m", "kvqueue", "report", "--raw-dir", str(fixture_raw),
         "--processed-dir", str(tmp_path / "processed"), "--out", str(out),
         "--notebook", str(broken)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    failed, removed = proc.stderr.strip().splitlines()[-2:]
    assert failed.startswith(f"kvqueue report: {broken} failed: "), failed
    assert "broken on purpose" in failed
    assert f"(executed copy: {out / 'report.ipynb'})" in failed
    assert removed.startswith("kvqueue report: removed the previous report.html and writeups")
    assert (tmp_path / "processed" / "manifest.json").is_file()
    assert not (out / "report.html").exists() and not (out / "writeups").exists()
    assert not list((tmp_path / "processed" / "cache").glob(".*.tmp"))


@pytest.mark.slow
def test_papermill_executed_notebook_without_errors(rendered: Path) -> None:
    nb = nbformat.read(str(rendered / "report.ipynb"), as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert not [o for o in outputs if o.output_type == "stream" and o.name == "stderr"]
    assert any("injected-parameters" in c.metadata.get("tags", []) for c in nb.cells)
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) == len(SHOWN)
    # Normalized: ids from positions, no timestamps.
    assert [c.id for c in nb.cells] == [f"cell-{i:02d}" for i in range(len(nb.cells))]
    assert "papermill" not in nb.metadata
    assert not [c for c in nb.cells if "papermill" in c.metadata or "execution" in c.metadata]


@pytest.mark.slow
def test_html_has_tables_figures_and_no_code(rendered: Path) -> None:
    html = (rendered / "report.html").read_text(encoding="utf-8")
    for heading in [*HEADINGS, "Confirmation run", "Other cases", "Gap to the lower bound"]:
        assert heading in html
    assert "Noise floor (A/A)" in html and "Order effect" in html
    assert html.count('src="data:image/png;base64,') == len(SHOWN)
    assert 'id="pool"' not in html  # no BlockPool section without a pool run
    for spec in SHOWN.values():  # every figure carries its alt text
        assert f'alt="{spec.alt}"' in html
    # Code cells are hidden, and nothing is loaded from the network.
    assert "processed_build.ensure(" not in html and "import " not in html
    assert "<script src=" not in html
    # The answer comes first: summary, forest plot, then the tables; runs last.
    order = [html.index(f'id="{key}"') for key in ("summary", "forest", "results", "runs")]
    assert order == sorted(order)
    assert html.index('id="summary"') < html.index("<img")
    # Long tables fold.
    assert html.count("<details>") >= 10
    # The methods paragraph carries the real parameters of the tiny fixture runs.
    assert "7 fresh worker processes" in html and "10,000 resamples" in html
    assert "order-statistic confidence interval of the median" in html
    # The interrupted run is named; the older run is listed.
    assert "20261129T120000Z-cp312-cccc (status interrupted)" in html
    assert "20261128T090000Z-cp312-aaaa" in html
    for name in SHOWN:
        assert (rendered / "figures" / f"{name}.png").stat().st_size > 10_000


@pytest.mark.slow
def test_html_byte_identical_on_rebuild(rendered: Path, fixture_raw: Path, tmp_path: Path) -> None:
    again = _report(fixture_raw, tmp_path)
    assert (again / "report.html").read_bytes() == (rendered / "report.html").read_bytes()
    for md in sorted((rendered / "writeups").glob("*.md")):
        assert (again / "writeups" / md.name).read_bytes() == md.read_bytes(), md.name
    for png in sorted((rendered / "writeups").glob("*/*.png")):
        rel = png.relative_to(rendered)
        assert (again / rel).read_bytes() == png.read_bytes(), rel
    for name in SHOWN:
        png = f"figures/{name}.png"
        assert (again / png).read_bytes() == (rendered / png).read_bytes(), png


@pytest.mark.slow
def test_one_writeup_per_question(rendered: Path) -> None:
    found = sorted(p.name for p in (rendered / "writeups").glob("*.md"))
    assert found == ["kvqueue-vs-vllm-0.32.0.md", "vllm-0.32.0-vs-vllm-0.31.0.md"]
    assert not (rendered / "pr-writeup.md").exists()
    md = (rendered / "writeups" / "vllm-0.32.0-vs-vllm-0.31.0.md").read_text(encoding="utf-8")
    assert md.startswith("<!--") and "\n## `vllm==0.32.0` vs `vllm==0.31.0`\n" in md
    for heading in ("Answer", "Validation", "Environment", "Reproduce"):
        assert f"\n### {heading}\n" in md
    assert "<summary><b>Methods</b></summary>" in md
    assert re.search(r"\| synth-a \| CPython 3\.12\.1 \|", md)
    assert "make bench HOST=synth-a" in md and "AA=1" in md
    alt = figures.FIGURES["forest"].alt
    assert f"![{alt}](vllm-0.32.0-vs-vllm-0.31.0/forest.png)" in md
    assert (rendered / "writeups" / "vllm-0.32.0-vs-vllm-0.31.0" / "forest.png").stat().st_size
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
  var summary = document.getElementById("summary");
  var table = summary ? summary.parentNode.querySelector("table") : null;
  var forest = imgs.length ? imgs[0].getBoundingClientRect() : null;
  out.textContent = JSON.stringify({
    widths: imgs.map(function (i) { return i.complete ? i.naturalWidth : -1; }),
    headings: Array.prototype.map.call(
      document.querySelectorAll("h1, h2, h3"), function (h) { return h.textContent.trim(); }),
    viewport: {width: window.innerWidth, height: window.innerHeight},
    scroll_width: document.documentElement.scrollWidth,
    // Output areas that scroll sideways (a table too wide for the page).
    overflowing: Array.prototype.filter.call(
      document.querySelectorAll(".jp-OutputArea-output"),
      function (e) { return e.scrollWidth > e.clientWidth + 1; }).length,
    first: {
      summary_table_bottom: table ? table.getBoundingClientRect().bottom : -1,
      forest_alt: imgs.length ? imgs[0].alt : "",
      forest_top: forest ? forest.top : -1,
      forest_bottom: forest ? forest.bottom : -1,
      forest_width: forest ? forest.width : -1
    }
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


def _probe(exe: str, report: Path, tmp_path: Path) -> dict:
    page = tmp_path / "probe.html"
    html = (report / "report.html").read_text(encoding="utf-8")
    page.write_text(html.replace("</body>", _PROBE + "\n</body>", 1), encoding="utf-8")
    proc = _run_chromium(
        exe,
        tmp_path / "profile",
        "--window-size=1280,900",
        "--run-all-compositor-stages-before-draw",
        "--virtual-time-budget=5000",
        "--dump-dom",
        page.as_uri(),
    )
    match = re.search(r'<pre id="kvq-probe">(.*?)</pre>', proc.stdout, re.S)
    assert match, proc.stderr[-2000:]
    return json.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&"))


@pytest.mark.slow
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


@pytest.mark.slow
def test_chromium_images_load_and_headings_present(
    chromium: str, rendered: Path, tmp_path: Path
) -> None:
    probe = _probe(chromium, rendered, tmp_path)
    assert len(probe["widths"]) == len(SHOWN)
    assert all(w > 0 for w in probe["widths"]), probe["widths"]
    for heading in HEADINGS:
        assert heading in probe["headings"]


@pytest.mark.slow
def test_chromium_first_screen_shows_summary_and_forest_plot(
    chromium: str, rendered_one_host: Path, tmp_path: Path
) -> None:
    """At 1280 x 900, the first screen holds the summary table and the whole forest plot."""
    width, height = 1280, 900
    probe = _probe(chromium, rendered_one_host, tmp_path)
    # Positions are page coordinates at load (scrolled to the top); the layout depends on
    # the width only (--dump-dom reports a shorter window than --screenshot draws).
    assert probe["viewport"]["width"] == width, probe["viewport"]
    first = probe["first"]
    assert 0 < first["summary_table_bottom"] <= height, first
    assert first["forest_alt"] == figures.FIGURES["forest"].alt
    assert first["summary_table_bottom"] < first["forest_top"], first
    assert first["forest_bottom"] <= height, first
    assert first["forest_width"] > 1000, first  # shown large, not shrunk to fit
    # Nothing sticks out sideways at 1280 px, nor scrolls sideways inside the page.
    assert probe["scroll_width"] <= width, probe["scroll_width"]
    assert probe["overflowing"] == 0
    shot = tmp_path / "first-screen.png"
    _run_chromium(
        chromium,
        tmp_path / "profile2",
        f"--screenshot={shot}",
        f"--window-size={width},{height}",
        (rendered_one_host / "report.html").as_uri(),
    )
    assert shot.stat().st_size > 50_000
