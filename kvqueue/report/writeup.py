"""``reports/pr-writeup.md``: the report's sections (:mod:`kvqueue.report.sections`) as Markdown.

Shaped like a pull-request description: the summary, the compact results table, the
validation paragraph, one line of environment per host and the reproduce commands are
visible; every full table and the methods sit inside ``<details>``; figures are image
links with alt text (the PR author uploads the PNGs). Sections too long for a PR
description (``Section.writeup`` false) are only named, as being in ``report.html``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from kvqueue.report import figures, frames, processed, sections
from kvqueue.report.prose import methods_paragraph, reproduce_commands
from kvqueue.report.sections import Section

__all__ = [
    "methods_paragraph",  # the prose lives in kvqueue.report.prose; kept here for callers
    "pr_writeup",
    "reproduce_commands",
    "section_markdown",
    "visible_part",
    "write_pr_writeup",
]

#: ``<details>`` blocks of the writeup (as written by :func:`section_markdown`).
_DETAILS = re.compile(r"<details>.*?</details>", re.S)


def _heading(section: Section) -> str:
    # A PR description's own title is the PR's: the report title is a level-2 heading.
    return "#" * (section.level + 1) + " " + section.title


def _figure(section: Section, files: Mapping[str, Path], rel: str) -> str:
    if not section.figure or section.figure not in files:
        return ""
    spec = figures.FIGURES[section.figure]
    return f"![{spec.alt}]({rel}/{Path(files[section.figure]).name})"


def section_markdown(
    section: Section, files: Mapping[str, Path] | None = None, rel: str = "figures"
) -> str:
    """One section as Markdown.

    Parameters
    ----------
    section
        The section.
    files
        name -> PNG of the figures drawn (a figure not in it is left out).
    rel
        Folder of the figures relative to the writeup.

    Returns
    -------
    str
        A heading, the note, the table and the figure link; a ``detail`` section is one
        ``<details>`` block whose summary line is the heading, a folded table of another
        section a ``<details>`` block of its own.
    """
    table = "" if section.table is None else frames.to_markdown(section.table)
    figure = _figure(section, files or {}, rel)
    if section.detail:
        label = f"<b>{section.title}</b>"
        if section.table is not None and section.rows:
            label += f" ({section.rows} rows)"
        body = [p for p in (section.note, table, figure) if p]
        return "\n\n".join([f"<details><summary>{label}</summary>", *body, "</details>"])
    if table and section.fold:
        label = section.table_label or section.title
        table = f"<details><summary>{label}</summary>\n\n{table}\n\n</details>"
    parts = [_heading(section), section.note, table, figure]
    return "\n\n".join(p for p in parts if p)


def pr_writeup(
    data: processed.Processed,
    figures: Mapping[str, Path] | None = None,
    figures_rel: str = "figures",
) -> str:
    """The pull-request writeup (GitHub-flavoured Markdown).

    Parameters
    ----------
    data
        Processed tables.
    figures
        name -> PNG path of the figures to link (relative to ``figures_rel``).
    figures_rel
        Folder of the figures relative to the writeup.

    Returns
    -------
    str
    """
    files = dict(figures or {})
    all_sections = sections.build(data)
    out = []
    if files:
        out.append(
            f"<!-- Figures are linked from {figures_rel}/: drag the PNGs from "
            f"reports/{figures_rel}/ into the PR description to replace the links. -->"
        )
    out += [section_markdown(s, files, figures_rel) for s in all_sections if s.writeup]
    left = [s for s in all_sections if not s.writeup]
    if left:
        names = "; ".join(s.title + (f" ({s.rows} rows)" if s.rows else "") for s in left)
        out.append(
            f"Only in `reports/report.html` (too long for a PR description): {names}; "
            "every number is also in `data/processed/`."
        )
    return "\n\n".join(out) + "\n"


def visible_part(markdown: str) -> str:
    """The writeup without its ``<details>`` blocks: what a reader sees unfolded."""
    return _DETAILS.sub("", markdown)


def write_pr_writeup(
    data: processed.Processed, path: Path | str, figures: Mapping[str, Path] | None = None
) -> Path:
    """Write :func:`pr_writeup` to ``path`` (figures linked relative to it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rel = "figures"
    if figures:
        first = Path(next(iter(figures.values()))).resolve().parent
        try:
            rel = first.relative_to(path.resolve().parent).as_posix()
        except ValueError:
            rel = first.as_posix()
    path.write_text(pr_writeup(data, figures, rel), encoding="utf-8")
    return path
