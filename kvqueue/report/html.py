"""Render the report's sections (:mod:`kvqueue.report.sections`) as HTML in the report notebook.

``notebooks/report.ipynb`` loops over :func:`kvqueue.report.sections.build` and calls
:func:`show` for each section: one HTML output (heading, note, table; a long table
folded in ``<details>``) and, for a section with a figure, the PNG drawn into the
figures folder. The summary sections sit in one box at the top. The notes are Markdown,
converted with mistune (the parser under nbconvert's renderer; raw HTML kept, tables).
"""

from __future__ import annotations

import functools
import html
from collections.abc import Callable
from pathlib import Path

from kvqueue.processed import store
from kvqueue.report import figures, frames
from kvqueue.report.sections import Section

#: Style of the report (shown once, before the first section).
CSS = """<style>
table.kvq-table { border-collapse: collapse; font-size: 12.5px; margin: 0.3em 0 0.8em 0; }
table.kvq-table th, table.kvq-table td { white-space: nowrap; padding: 2px 6px; }
table.kvq-table td.kvq-wrap { white-space: normal; overflow-wrap: anywhere; min-width: 8em; }
.kvq-note { max-width: 75em; }
.kvq-note p { margin: 0.3em 0; }
div.kvq-section h1 { margin: 0.2em 0 0.3em 0; font-size: 1.8em; }
div.kvq-section h2 { margin: 0.9em 0 0.3em 0; }
div.kvq-section h3 { margin: 0.7em 0 0.3em 0; }
div.kvq-summary { border-left: 4px solid #4c72b0; padding: 0 0 0 12px; }
div.kvq-summary h2 { margin-top: 0.4em; }
details > summary { cursor: pointer; color: #2a5d9f; margin: 0.2em 0 0.4em 0; }
.kvq-note pre { font-family: monospace; font-size: 12.5px; background: #f6f8fa;
  padding: 6px 10px; overflow-x: auto; }
</style>"""


@functools.cache
def _renderer() -> Callable[[str], str]:
    # mistune itself, not nbconvert's wrapper of it: importing nbconvert took 2.0 s of
    # the notebook's 17.8 s, and the notes need no math and no code highlighting.
    import mistune

    return mistune.create_markdown(escape=False, plugins=["table", "strikethrough"])


def _markdown(text: str) -> str:
    return str(_renderer()(text))


def details(body: str, *, summary: str) -> str:
    """Wrap HTML in a collapsible ``<details>`` (works without JavaScript)."""
    return f"<details><summary>{html.escape(summary)}</summary>\n{body}\n</details>"


def section_html(section: Section) -> str:
    """Heading, note and table of one section as HTML (the figure is shown apart)."""
    level = section.level
    parts = [f'<h{level} id="{html.escape(section.key)}">{html.escape(section.title)}</h{level}>']
    if section.note:
        parts.append(f'<div class="kvq-note">{_markdown(section.note)}</div>')
    if section.table is not None:
        table = frames.to_html(section.table)
        if section.fold:
            label = section.table_label or section.title
            table = details(table, summary=f"Table: {label} (click to open)")
        parts.append(table)
    css = "kvq-section kvq-summary" if section.summary and level > 1 else "kvq-section"
    return f'<div class="{css}">\n' + "\n".join(parts) + "\n</div>"


def show(section: Section, data: store.Processed, figures_dir: Path | str) -> None:
    """Display one section in the notebook; draw its figure into ``figures_dir``.

    Parameters
    ----------
    section
        The section.
    data
        Processed tables (for the figure).
    figures_dir
        Where the PNG is written (``reports/figures``).
    """
    from IPython.display import HTML, Image, display

    if section.level == 1:  # the report's title: the style goes first
        display(HTML(CSS))
    display(HTML(section_html(section)))
    if section.figure:
        path = figures.draw(data, section.figure, figures_dir)
        display(Image(filename=str(path), alt=figures.FIGURES[section.figure].alt))
