"""Where the instructions moved, in a comparison's writeup: the processed ``count_where``
rows of a counts run (``make bench METRIC=instructions``) turned into base against head
(:mod:`kvqueue.stats.cost_moves`), under the diff of the code that was measured.

A counts run's ``where.csv`` holds numbers and names only (C functions, lines, and each
part of a variant's code by its file and the sha256 of its text); the texts are read
here, when the report is built, from the file the run read (a cached release file, a
file, ``REPO@COMMIT:PATH`` through git), or from this machine's release cache, and used
only when their sha256 matches. They go into the git-ignored ``reports/`` folder, never
into ``data/``. Without a text, a part's lines are listed by number, unaligned.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from kvqueue import schema
from kvqueue.ab import where_text
from kvqueue.sources import cache_paths, loader
from kvqueue.stats import cost_moves

#: Most diff lines shown per comparison (the rest counted).
MAX_DIFF_LINES = 40
_GIT_WHERE = re.compile(r"^(?P<repo>.+)@(?P<commit>[0-9a-f]{40}):(?P<member>\S+)")
_RELEASE_FILE = re.compile(r"(?:^|/)vllm-(?P<version>[^/]+)/(?P<file>[^/]+)$")


def _whole_text(where: str) -> str | None:
    """The text of the file a part was read from: a git ``REPO@COMMIT:PATH``, a path, or
    the same release file in this machine's cache (None: none found)."""
    found = _GIT_WHERE.match(where)
    if found:
        raw, _reason = loader.git_show(found["repo"], found["commit"], found["member"])
        return None if raw is None else raw.decode("utf-8", "replace")
    candidates = [Path(where)]
    release = _RELEASE_FILE.search(where)
    if release:
        candidates.append(cache_paths.cache_dir() / f"vllm-{release['version']}" / release["file"])
    for path in candidates:
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return None


def part_text(where: str, first_line: int, lines: int, sha256: str) -> str | None:
    """A part's text as the run measured it, or None when no copy here has its sha256.

    Parameters
    ----------
    where
        The file the run read (``name`` of a part row).
    first_line, lines
        Where the part starts in it and how many lines it has (0: the whole file).
    sha256
        The sha256 the run recorded of the part's text.
    """
    whole = _whole_text(where)
    if whole is None or not sha256:
        return None
    if lines:
        kept = whole.splitlines(keepends=True)[first_line - 1 : first_line - 1 + lines]
        text = "".join(kept)
        candidates = [text, text.rstrip("\n"), text.rstrip("\n") + "\n"]
    else:
        candidates = [whole]
    return next((t for t in candidates if schema.text_sha256(t) == sha256), None)


def variant_where(
    rows: pd.DataFrame, instructions: float, texts: Mapping[tuple[str, str], str | None]
) -> cost_moves.VariantWhere:
    """One variant's figures in one cell from its ``count_where`` rows.

    ``texts``: ``(where, sha256)`` -> the part's text (None: not found), shared between
    variants so that a file is read once.
    """
    c = {
        str(r.name): float(r.per_op)
        for r in rows[rows["kind"] == schema.WHERE_C].itertuples()
        if str(r.name) != schema.WHERE_REST
    }
    lines_rows = rows[rows["kind"] == schema.WHERE_LINE]
    lines = {
        (str(r.part), str(r.name), int(r.line)): float(r.per_op) for r in lines_rows.itertuples()
    }
    special = {
        (str(r.part), int(r.line)): tuple(str(r.detail).split())
        for r in lines_rows.itertuples()
        if isinstance(r.detail, str) and r.detail
    }
    parts = []
    for r in rows[rows["kind"] == schema.WHERE_PART].itertuples():
        key = (str(r.name), str(r.detail) if isinstance(r.detail, str) else "")
        if key not in texts:
            texts[key] = part_text(key[0], int(r.line), int(r.value), key[1])  # type: ignore[index]
        parts.append(cost_moves.Part(str(r.part), int(r.line), texts[key]))  # type: ignore[index]
    return cost_moves.VariantWhere(instructions, c, lines, special, parts)


def pair_cells(
    where: pd.DataFrame, pairs: pd.DataFrame, candidate: str, baseline: str
) -> list[tuple[pd.Series, cost_moves.CellMoves, cost_moves.VariantWhere, cost_moves.VariantWhere]]:
    """Per host × interpreter × run of a pair's counts, the cell whose instructions per
    operation moved most, base against head, where the run wrote ``where.csv``.

    Parameters
    ----------
    where
        The processed ``count_where`` table.
    pairs
        The processed ``count_pairs`` table.
    candidate, baseline
        The pair.

    Returns
    -------
    list
        ``(count_pairs row, moves, base figures, head figures)`` per run.
    """
    if where.empty or pairs.empty:
        return []
    mine = pairs[(pairs["candidate"] == candidate) & (pairs["baseline"] == baseline)]
    out = []
    texts: dict[tuple[str, str], str | None] = {}
    for (_h, _i, run_id), grp in mine.groupby(["host", "interpreter", "run_id"], sort=True):
        in_run = where[where["run_id"] == run_id]
        ordered = grp.assign(_m=grp["instr_reduction"].astype(float).abs()).sort_values(
            ["_m", "case"], ascending=[False, True]
        )
        for _, r in ordered.iterrows():
            cell = in_run[(in_run["case"] == r["case"]) & (in_run["pool"] == int(r["pool"]))]
            b, h = (cell[cell["label"] == label] for label in (baseline, candidate))
            if b.empty or h.empty:
                continue
            base = variant_where(b, float(r["baseline_instructions"]), texts)
            head = variant_where(h, float(r["candidate_instructions"]), texts)
            out.append(
                (r, cost_moves.compare(str(r["case"]), int(r["pool"]), base, head), base, head)
            )
            break
    return out


def code_diff(base: cost_moves.VariantWhere, head: cost_moves.VariantWhere) -> str:
    """The unified diff of the parts' texts, base to head, as a fenced block (cut to
    :data:`MAX_DIFF_LINES`), or one sentence saying why there is none."""
    diff: list[str] = []
    missing = []
    for part in dict.fromkeys([p.part for p in base.parts] + [p.part for p in head.parts]):
        b, h = base.text_of(part), head.text_of(part)
        if b is None or h is None or b.text is None or h.text is None:
            missing.append(part)
            continue
        diff += [
            line.rstrip("\n")
            for line in difflib.unified_diff(
                b.text.splitlines(keepends=True),
                h.text.splitlines(keepends=True),
                f"base: {part}",
                f"head: {part}",
                n=1,
            )
        ]
    note = (
        " Not found here (their texts are read from the files the run read, or this "
        "machine's release cache, and used only when their sha256 matches): "
        + ", ".join(f"`{p}`" for p in missing)
        + "."
        if missing
        else ""
    )
    if not diff:
        return (
            "No difference in the texts found." if not missing else "No text to compare."
        ) + note
    shown = diff[:MAX_DIFF_LINES]
    more = len(diff) - len(shown)
    tail = f"\n\n… {more} more diff lines" if more else ""
    return "```diff\n" + "\n".join(shown) + "\n```" + tail + ("\n\n" + note.strip() if note else "")


def writeup_note(where: pd.DataFrame, pairs: pd.DataFrame, candidate: str, baseline: str) -> str:
    """The body of a writeup's folded section: per run, the diff measured, then the
    sentence and the tables of where the instructions moved ('' without where.csv)."""
    found = pair_cells(where, pairs, candidate, baseline)
    if not found:
        return ""
    out = []
    for r, moves, base, head in found:
        out += [
            f"**{r['host']}, {r['interpreter']}** (counts run `{r['run_id']}`): the code "
            "measured, base to head (read where the report was built, never committed):",
            "",
            code_diff(base, head),
            "",
            where_text.sentence(moves),
            "",
            where_text.details(moves),
            "",
        ]
    out.append("How to read the tables: " + where_text.method_note([f[1] for f in found]))
    return "\n".join(out).rstrip()
