"""One Markdown writeup per question: ``reports/writeups/<question>.md``.

:func:`write_writeups` finds the questions of the data (:mod:`kvqueue.report.questions`:
each A/B comparison, each release history, the policy study) and writes one writeup for
each, shaped like a pull-request description and about that question only: what was
compared, the answer with its intervals, how it was measured, how to reproduce it. The
answer, the validation, the environment and the reproduce commands are visible; full
tables, methods and diffs sit inside ``<details>``; figures (drawn for the question
alone into ``reports/writeups/<question>/``) are image links with alt text (the PR author
uploads the PNGs). The sections come from :mod:`kvqueue.report.question_sections`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from kvqueue import schema
from kvqueue.ab import ab_tables
from kvqueue.ab.ab_tables import HEADLINE_CASES
from kvqueue.processed import store
from kvqueue.report import figures, frames, question_sections, questions
from kvqueue.report.questions import Question
from kvqueue.report.sections import Section

__all__ = ["question_writeup", "section_markdown", "write_writeups"]

#: Folder of the writeups inside the report folder.
WRITEUPS = "writeups"
#: Figures of a question that, when it is the only one of its kind, are the report's own
#: figure of the same name (drawn from the same headline runs).
_WHOLE_DATA_FIGURES = (*figures.HISTORY_FIGURES.values(), "policy")
_KINDS = (questions.AB, questions.HISTORY, questions.POLICY)


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
    if not (section.note or table or figure):
        return ""  # a figure not drawn, and nothing else: no empty heading
    if section.detail:
        label = f"<b>{section.title}</b>"
        if section.table is not None and section.rows:
            label += f" ({section.rows} row{'s' if section.rows != 1 else ''})"
        body = [p for p in (section.note, table, figure) if p]
        return "\n\n".join([f"<details><summary>{label}</summary>", *body, "</details>"])
    if table and section.fold:
        label = section.table_label or section.title
        table = f"<details><summary>{label}</summary>\n\n{table}\n\n</details>"
    parts = [_heading(section), section.note, table, figure]
    return "\n\n".join(p for p in parts if p)


def question_writeup(
    question: Question,
    cases: Sequence[str] = HEADLINE_CASES,
    files: Mapping[str, Path] | None = None,
    figures_rel: str = "figures",
) -> str:
    """The writeup of one question (GitHub-flavoured Markdown).

    Parameters
    ----------
    question
        The question and its scoped data (:func:`kvqueue.report.questions.find`).
    cases
        Cases of the A/B tables (``CASES`` of ``make report``).
    files
        name -> PNG of the figures drawn for this question.
    figures_rel
        Folder of the figures relative to the writeup.

    Returns
    -------
    str
    """
    files = dict(files or {})
    out = []
    if files:
        out.append(
            f"<!-- Figures are linked from {figures_rel}/: drag the PNGs from there into "
            "the PR description to replace the links. -->"
        )
    out += [
        section_markdown(s, files, figures_rel)
        for s in question_sections.build(question, cases)
        if s.writeup
    ]
    return "\n\n".join(p for p in out if p) + "\n"


def write_writeups(
    data: store.Processed,
    out_dir: Path | str,
    cases: Sequence[str] = HEADLINE_CASES,
    *,
    draw: bool = True,
) -> list[Path]:
    """Write one writeup per question of ``data`` into ``out_dir/writeups/``.

    Writeups of an earlier build that no longer have a question are removed with their
    figure folders (the PNGs, and the folder once empty), so the folder holds exactly
    this build's questions.

    Parameters
    ----------
    data
        Processed tables (every run found).
    out_dir
        The report folder (``reports``).
    cases
        Cases of the A/B tables (``CASES``; default alloc1 alloc2 mix).
    draw
        Draw each question's figures (``False``: text only, for fast tests).

    Returns
    -------
    list of pathlib.Path
        The writeups, newest question first.
    """
    folder = Path(out_dir) / WRITEUPS
    folder.mkdir(parents=True, exist_ok=True)
    found = questions.find(data)
    keep = {q.slug for q in found}
    for stale in folder.glob("*.md"):
        if stale.stem not in keep:
            stale.unlink()
    for stale in folder.iterdir():
        if stale.name not in keep and stale.is_dir() and not stale.is_symlink():
            # The figures of a writeup just removed (a build from another RAW_DIR).
            _remove_figures(stale)
            with contextlib.suppress(OSError):  # a file not ours keeps its folder
                stale.rmdir()
    # A kind with one question: its figure is the report's own, drawn from the whole
    # data, so the build cache (the report's notebook drew it before) holds it once.
    only = {kind: sum(q.kind == kind for q in found) == 1 for kind in _KINDS}
    paths = []
    asked = cases
    for q in found:
        cases = question_cases(q, asked)
        files: dict[str, Path] = {}
        if draw:
            fig_dir = folder / q.slug
            _remove_figures(fig_dir)
            for name in question_sections.figure_names(q, cases):
                if only[q.kind] and name in _WHOLE_DATA_FIGURES:
                    # The report's very figure (the history figure takes ~5 s to draw
                    # on the committed data): from the cache, or drawn once.
                    files[name] = figures.draw(data, name, fig_dir)
                else:
                    files[name] = question_sections.draw(q, name, fig_dir, cases)
        path = folder / f"{q.slug}.md"
        path.write_text(question_writeup(q, cases, files, q.slug), encoding="utf-8")
        paths.append(path)
    return paths


def _remove_figures(fig_dir: Path) -> None:
    """Remove the PNGs of a writeup's figure folder (drawn by an earlier build)."""
    for png in fig_dir.glob("*.png"):
        png.unlink()


def question_cases(question: Question, cases: Sequence[str]) -> tuple[str, ...]:
    """The cases of a question's A/B tables: the queue's among ``cases`` (``CASES`` of the
    report; none: the headline cases), or for a comparison of a stack subject (pools:
    labels ``pool:``, managers: ``manager:``, :data:`kvqueue.schema.SUBJECT_LABEL_PREFIX`)
    that subject's cases among them, every case of it by default: its defaults and any
    other N measured (a reader sets vLLM's loop at all five sizes beside upstream's
    numbers, a manager's sweeps beside vLLM PR #21005's claim)."""
    subject = question.subject
    chosen = tuple(c for c in cases if schema.is_case(subject, c))
    if subject == schema.SUBJECT_QUEUE:
        return chosen or HEADLINE_CASES
    return chosen or tuple(ab_tables.subject_cases(question.data, subject))
