"""``python -m kvqueue report``: processed data, executed notebook, HTML report, writeup.

Steps (``docs/design.md`` §7):

1. rebuild ``data/processed/`` from every run under ``data/raw/``
   (:mod:`kvqueue.report.processed_build`);
2. execute ``notebooks/report.ipynb`` with papermill into ``reports/report.ipynb`` (it
   shows the sections of :mod:`kvqueue.report.sections` and draws the figures into
   ``reports/figures/``);
3. render ``reports/report.html`` with nbconvert, code cells hidden, byte-identical on a
   rebuild from the same raw data (:func:`normalize_executed`);
4. write one writeup per question, ``reports/writeups/<question>.md``
   (:func:`kvqueue.report.writeup.write_writeups`), and print their paths, newest first.

Every run folder is accounted for: each one left out (unreadable, altered, interrupted,
failed) is printed as one line with its reason (the ``ledger`` table) and the rest still
renders. Only a raw folder without any usable run (exit status 2, each left-out run
named), a missing raw folder or a copied run (one line naming the files, exit status 2)
stop the report; a failing notebook names the executed notebook to look at (exit
status 1). Each stage prints its time.
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from kvqueue.kernel import managed_kernels, stop_signals
from kvqueue.params.report_params import ReportSettings
from kvqueue.params.spec import resolve_in_repo
from kvqueue.processed import store
from kvqueue.rawdata import raw_reader, run_ledger
from kvqueue.report import processed_build, writeup

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
NOTEBOOK = REPO_ROOT / "notebooks" / "report.ipynb"
HTML_TITLE = "kvqueue-bench report"
# The lab template loads require.js, MathJax and mermaid from a CDN; the report has no
# widgets, math or diagrams, so dropping them keeps the HTML self-contained and offline.
_TEMPLATE_NAME = "kvqueue_report.html.j2"
# The lab template drops an image's alt text; this one keeps it (figures carry one).
_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block data_png scoped -%}
<div class="jp-RenderedImage jp-OutputArea-output {{ extra_class }}">
<img src="data:image/png;base64,{{ output.data['image/png'] | escape_html }}"
{%- set alt = output | get_metadata('alt', 'image/png') -%}
{%- if alt is not none %} alt="{{ alt | escape_html }}"{%- endif %} class="">
</div>
{%- endblock data_png -%}
"""
#: Metadata that papermill and the kernel write and that changes on every run.
_VOLATILE_METADATA = ("papermill", "execution")


def execute_notebook(
    notebook: Path, executed: Path, parameters: dict[str, object], *, cwd: Path | None = None
) -> None:
    """Run the report notebook with papermill (outputs saved in ``executed``).

    Parameters
    ----------
    notebook
        The committed, output-free notebook.
    executed
        Where the executed copy is written.
    parameters
        Values for the ``parameters`` cell.
    cwd
        Working directory of the kernel (default: the notebook's folder).
    """
    # jsonschema (under papermill's nbformat) imports rfc3987_syntax when it is
    # installed (jupyterlab's jupyter_events brings it), and that module builds a parser
    # at import: 1.8 s of every report, before the kernel starts. It only checks the
    # "iri" string format, which nbformat never validates; without it jsonschema skips
    # that check.
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
    import papermill

    # papermill's parameter-cell parser warns about every "==" in a value (the version
    # pins in `pairs`) although the parameters are injected correctly. Its errors are
    # raised too, and the report prints them in one line: logged, a Ctrl-C to the
    # process group (the kernel dies first) printed "Kernel died while waiting for
    # execute reply." and, from the cell's unawaited asyncio task, a 6-line
    # DeadKernelError traceback ("Task exception was never retrieved") around it.
    logging.getLogger("papermill").setLevel(logging.CRITICAL)
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    # Ctrl-C, SIGTERM or SIGHUP: the kernel is killed and its temp files removed.
    with managed_kernels() as kernel_manager_class:
        papermill.execute_notebook(
            str(notebook),
            str(executed),
            parameters=parameters,
            kernel_name="python3",
            kernel_manager_class=kernel_manager_class,
            progress_bar=False,
            log_output=False,
            cwd=str(cwd or notebook.parent),
        )


def normalize_executed(executed: Path) -> None:
    """Make the executed notebook depend on its inputs only, so the HTML does too.

    papermill gives the injected parameters cell a random id (nbconvert writes cell ids
    into the HTML) and records start/end times per cell and for the notebook. Here
    every cell gets an id from its position and the timing metadata goes; the executed
    notebook is rewritten in place.

    Parameters
    ----------
    executed
        The executed notebook.
    """
    import nbformat

    nb = nbformat.read(str(executed), as_version=4)
    for key in _VOLATILE_METADATA:
        nb.metadata.pop(key, None)
    for index, cell in enumerate(nb.cells):
        cell.id = f"cell-{index:02d}"
        for key in _VOLATILE_METADATA:
            cell.metadata.pop(key, None)
    nbformat.write(nb, str(executed))


def render_html(executed: Path, html_path: Path) -> Path:
    """Convert an executed notebook to standalone HTML without code cells.

    Parameters
    ----------
    executed
        The executed notebook.
    html_path
        Output file.

    Returns
    -------
    pathlib.Path
        ``html_path``.
    """
    import jinja2
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(
        template_name="lab",
        template_file=_TEMPLATE_NAME,
        extra_loaders=[jinja2.DictLoader({_TEMPLATE_NAME: _TEMPLATE})],
        exclude_input=True,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
    )
    nb = nbformat.read(str(executed), as_version=4)
    # Code cells without outputs (parameters, imports) would only add blank space.
    nb.cells = [c for c in nb.cells if c.cell_type != "code" or c.outputs]
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": HTML_TITLE}})
    html_path.write_text(body, encoding="utf-8")
    return html_path


def report(
    raw_dir: Path,
    processed_dir: Path,
    out: Path,
    settings: ReportSettings,
    notebook: Path | None = None,
    cases: Sequence[str] = writeup.HEADLINE_CASES,
) -> int:
    """``python -m kvqueue report``: processed tables, executed notebook, HTML, writeup.

    Parameters
    ----------
    raw_dir, processed_dir, out
        Raw-data root, processed-table folder, report folder.
    settings
        Analysis settings.
    notebook
        Report notebook to run (default: ``notebooks/report.ipynb``).
    cases
        Cases of the writeups' A/B tables (``CASES``).

    Returns
    -------
    int
        0 on success, 1 if the notebook failed, 2 on malformed or missing raw data.

    Raises
    ------
    KeyboardInterrupt
        Ctrl-C, SIGTERM or SIGHUP (:class:`kvqueue.kernel.Stopped`): the kernel is
        stopped, its temp files and the half-executed notebook removed; once the
        processed tables were rewritten, the previous build's ``report.html``, writeups
        and ``report.ipynb`` are removed too (one line says so): they showed other runs.
    """
    # SIGTERM and SIGHUP take Ctrl-C's path: without it they left the kernel's files
    # and a half-executed report.ipynb behind.
    with stop_signals():
        return _report(raw_dir, processed_dir, out, settings, notebook or NOTEBOOK, cases)


def _report(
    raw_dir: Path,
    processed_dir: Path,
    out: Path,
    settings: ReportSettings,
    notebook: Path,
    cases: Sequence[str],
) -> int:
    """:func:`report`, its stop signals taken as Ctrl-C."""
    raw_dir, processed_dir, out = (
        resolve_in_repo(p).resolve() for p in (raw_dir, processed_dir, out)
    )
    started = time.perf_counter()

    def stage(name: str, since: float) -> float:
        now = time.perf_counter()
        print(f"report: {name} ({now - since:.1f} s)", flush=True)
        return now

    try:
        data = processed_build.build(
            raw_dir, processed_dir, settings, progress=lambda line: print(line, flush=True)
        )
    except raw_reader.RawDataError as exc:
        print(f"kvqueue report: {exc}", file=sys.stderr)
        return 2
    left = run_ledger.left_out_lines(data.ledger)
    for line in left:
        print(f"report: {line}", flush=True)
    scope = _scope_text(settings)
    if not (data.ledger["use"] != run_ledger.LEFT_OUT).any():
        print(
            f"kvqueue report: {raw_dir}{scope}: no usable run"
            + (f" ({len(left)} left out, named above)" if left else " (no run folder found)"),
            file=sys.stderr,
        )
        _drop_stale(out, notebook=True)  # nothing of this build's to show: all of it goes
        return 2
    now = stage(f"processed tables of {len(data.ledger)} run folders{scope}", started)
    status, stopped = 1, True
    try:
        status = _render(processed_dir, out, settings, notebook, cases, raw_dir, stage, now)
        stopped = False
    finally:
        if status:
            # A failed notebook is this build's, and its line names it: it stays.
            _drop_stale(out, notebook=stopped)
    print(f"report: done in {time.perf_counter() - started:.1f} s")
    return status


def _drop_stale(out: Path, notebook: bool = False) -> None:
    """Remove the previous build's report.html and writeups (and, with ``notebook``, its
    report.ipynb and figures) once the processed tables were rewritten and this build
    did not finish: they showed other runs. A failed report left them beside tables
    they no longer matched, with nothing to say so."""
    kept = [out / "report.html", out / writeup.WRITEUPS]
    shown = [out / "report.ipynb", out / "figures"] if notebook else []
    stale = [p for p in (*kept, *shown) if p.exists()]
    for path in stale:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    if stale:
        names = ", ".join(p.name for p in stale[:-1]) + (" and " if len(stale) > 1 else "")
        names += stale[-1].name
        print(
            f"kvqueue report: removed the previous {names}: data/processed now holds "
            "this build's tables, which they do not show",
            file=sys.stderr,
        )


def _render(
    processed_dir: Path,
    out: Path,
    settings: ReportSettings,
    notebook: Path,
    cases: Sequence[str],
    raw_dir: Path,
    stage: Callable[[str, float], float],
    now: float,
) -> int:
    """Steps 2-4 of :func:`report` from the processed tables; 0, or 1 if the notebook
    failed."""

    out.mkdir(parents=True, exist_ok=True)
    figures_dir = out / "figures"
    figures_dir.mkdir(exist_ok=True)
    for stale in figures_dir.glob("*.png"):  # only figures of this build remain
        stale.unlink()
    # What builds before the one build cache kept here (the figure cache, 25 MB on the
    # committed data, and the writeups' index and cases stamp for the Makefile).
    shutil.rmtree(out / ".figure-cache", ignore_errors=True)
    for name in (".scope", ".just-built", "writeups/index.txt", "writeups/.cases"):
        (out / name).unlink(missing_ok=True)
    executed = out / "report.ipynb"
    parameters = {
        "raw_dir": str(raw_dir),
        "processed_dir": str(processed_dir),
        "figures_dir": str(figures_dir),
        **settings.to_dict(),
    }
    try:
        _execute_into(notebook.resolve(), executed, parameters)
    except Exception as exc:  # papermill wraps kernel errors: one line, keep the file
        first = str(exc).strip().splitlines()
        reason = next((ln for ln in reversed(first) if ln.strip()), type(exc).__name__)
        print(
            f"kvqueue report: {notebook} failed: {reason[:300]} (executed copy: {executed})",
            file=sys.stderr,
        )
        return 1
    now = stage("notebook executed", now)
    # The writeups read the tables as the kernel did (the CSVs), so that a figure they
    # share with the report has the same cache key and is not drawn again.
    paths = writeup.write_writeups(store.load(processed_dir), out, cases)  # newest first
    now = stage("writeups written", now)
    normalize_executed(executed)
    html_path = render_html(executed, out / "report.html")
    stage("HTML rendered", now)
    print(f"report: {html_path}")
    for path in paths:
        print(f"writeup: {path}")
    return 0


def _execute_into(notebook: Path, executed: Path, parameters: dict[str, object]) -> None:
    """:func:`execute_notebook` into a partial file beside ``executed``, renamed to it
    when the notebook ends, failed or not (a failure names it); on Ctrl-C, SIGTERM or
    SIGHUP the partial file is removed (and :func:`_drop_stale` the previous build's).

    papermill rewrites its output after every cell, so an interruption left a
    half-executed ``report.ipynb`` beside the previous build's HTML.
    """
    partial = executed.with_name(f".{executed.stem}.partial{executed.suffix}")
    try:
        execute_notebook(notebook, partial, parameters)
    except Exception:
        if partial.exists():
            partial.replace(executed)
        raise
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(executed)


def _scope_text(settings: ReportSettings) -> str:
    """`` (hosts a b; runs x)`` for a scoped report, else empty."""
    parts = [
        f"{name} {' '.join(values)}"
        for name, values in (("hosts", settings.hosts), ("runs", settings.runs))
        if values
    ]
    return f" ({'; '.join(parts)})" if parts else ""
