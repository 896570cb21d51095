"""``make regress``: does a change (HEAD) execute more instructions per operation than the
code it starts from (BASE)? The check for a contributor's own change and for CI.

``make check-queue`` guards this project's queue against a stored reference; this
compares two sources of the same run instead, so there is no reference to record and
no interpreter build to match: both are counted in one run, by one valgrind, under one
interpreter. The route is ``make quick METRIC=instructions``'s: the checks of a bench
(:func:`kvqueue.measure.interpreter_checks.check`: values, interpreter, both sources
loaded), the validation gate, strict (:func:`kvqueue.measure.runner.run_gate`: a source
that breaks the queue's contract is refused before anything is counted), then every
(case, pool) cell of both sources under cachegrind (:func:`kvqueue.measure.cachegrind.count`)
and per operation (:func:`kvqueue.stats.count_figures.per_op`, ``table``).

A cell *regresses* when head's instructions per operation exceed base's by more than
its threshold (``THRESHOLD``, or ``THRESHOLDS`` per case; never below
:data:`~kvqueue.params.regression_params.RESOLUTION_FACTOR` times the run's own measured
resolution). The default, 1 %, is ~10x the largest spread measured here between two
counts of identical code at two commits (0.13 %; CPython 3.10 to 3.13:
:data:`~kvqueue.params.regression_params.DEFAULT_THRESHOLD_PCT`). The comparison is
written as Markdown ready to post on a pull request (standard output, and ``OUT``): a
first line with the verdict, a table per case and pool (base and head instructions per
operation, change, threshold, verdict), the sources with their commits and sha256, and
the command that repeats the check.

Exit status of ``python -m kvqueue regress``: 0 no cell regressed; 1 a cell regressed
beyond its threshold (or the gate refused a source: nothing was counted); 2 bad input,
in one line (a missing BASE, an unknown ref, a THRESHOLDS case that is not counted, no
valgrind). ``make regress`` exits 2 whenever its recipe fails (Make's own status; its
``Error 1`` line carries the command's).
"""

from __future__ import annotations

import math
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from kvqueue import hostinfo, schema
from kvqueue.errors import BenchInputError
from kvqueue.measure import cachegrind, counts_run, interpreter_checks
from kvqueue.params import regression_params
from kvqueue.params.regression_params import RESOLUTION_FACTOR, Regress
from kvqueue.sources import loader
from kvqueue.stats import count_figures

REGRESSED = "regressed"
IMPROVED = "improved"
OK = "ok"


@dataclass(frozen=True)
class CellVerdict:
    """One (case, pool) cell: base and head instructions per operation and the verdict.

    Attributes
    ----------
    change_pct
        ``100 * (head / base - 1)``: positive means head executes more instructions.
    threshold_pct
        The threshold the change was judged by (%).
    raised
        Whether the threshold given was raised to :data:`RESOLUTION_FACTOR` times the
        run's measured resolution (then ``threshold_pct`` is the raised one).
    """

    case: str
    pool: int
    base: float
    head: float
    change_pct: float
    threshold_pct: float
    raised: bool
    verdict: str


@dataclass(frozen=True)
class Comparison:
    """Everything the Markdown says: the cells, the sources and how they were counted."""

    cells: tuple[CellVerdict, ...]
    #: Instructions per operation by which two identical zero runs disagreed (nan: none).
    resolution: float
    #: The gate's result per source (base, head), provenance included.
    gate: tuple[Mapping[str, Any], ...]
    python: Mapping[str, Any]
    valgrind: cachegrind.Valgrind
    seconds: float

    @property
    def regressed(self) -> list[CellVerdict]:
        """The cells that regressed beyond their threshold."""
        return [c for c in self.cells if c.verdict == REGRESSED]

    def exit_status(self) -> int:
        """1 when any cell regressed, else 0."""
        return 1 if self.regressed else 0


def judge(
    rows: Sequence[Mapping[str, Any]],
    per_case: Mapping[str, float],
    base_label: str,
    head_label: str,
) -> tuple[list[CellVerdict], float]:
    """The verdict of every cell counted for both labels, in the bench's case order.

    Parameters
    ----------
    rows
        cachegrind's rows (:func:`kvqueue.measure.cachegrind.count`).
    per_case
        Case -> threshold in %.
    base_label, head_label
        The two variants' labels in ``rows``.

    Returns
    -------
    (list of CellVerdict, float)
        The cells, and the run's resolution in instructions per operation (nan if the
        run made no second zero run).
    """
    pairs = [(head_label, base_label)]
    table = count_figures.table(count_figures.per_op(rows), pairs)
    resolution = float(table[0]["spread"]) if table else math.nan
    cells = []
    for r in sorted(table, key=lambda r: (schema.case_rank(r["case"]), r["pool"])):
        base, head = float(r["baseline_instructions"]), float(r["candidate_instructions"])
        given = per_case[r["case"]]
        floor = RESOLUTION_FACTOR * 100.0 * resolution / base if resolution == resolution else 0.0
        threshold = max(given, floor)
        change = -float(r["reduction_pct"])
        verdict = REGRESSED if change > threshold else IMPROVED if change < -threshold else OK
        cells.append(
            CellVerdict(
                case=r["case"],
                pool=int(r["pool"]),
                base=base,
                head=head,
                change_pct=change,
                threshold_pct=threshold,
                raised=floor > given,
                verdict=verdict,
            )
        )
    return cells, resolution


# ------------------------------------------------------------------ Markdown


def _num(value: float) -> str:
    return f"{value:,.1f}"


def _cell_name(c: CellVerdict) -> str:
    return f"{c.case} (pool {c.pool:,})"


def verdict_line(cells: Sequence[CellVerdict]) -> str:
    """The first line of the Markdown: the verdict and what it rests on."""
    bad = [c for c in cells if c.verdict == REGRESSED]
    if bad:
        named = "; ".join(
            f"{_cell_name(c)} {_num(c.base)} → {_num(c.head)} instructions/op "
            f"({c.change_pct:+.2f} %, threshold {c.threshold_pct:g} %)"
            for c in bad
        )
        return (
            f"**Instruction-count regression check: FAILED**: {len(bad)} of {len(cells)} "
            f"cells regressed beyond their threshold: {named}."
        )
    if not cells:
        return "**Instruction-count regression check: nothing compared**."
    top = max(cells, key=lambda c: c.change_pct)
    better = [c for c in cells if c.verdict == IMPROVED]
    also = (
        f"; {len(better)} improved beyond their threshold ({', '.join(map(_cell_name, better))})"
        if better
        else ""
    )
    return (
        f"**Instruction-count regression check: passed**: no cell above its threshold "
        f"(largest change {top.change_pct:+.2f} %, {_cell_name(top)}){also}."
    )


def _verdict_cell(c: CellVerdict) -> str:
    return {REGRESSED: "**regressed**", IMPROVED: "improved"}.get(c.verdict, "ok")


def _source_arg(result: Mapping[str, Any], default_label: str) -> str:
    """The BASE or HEAD text that repeats the check from any folder: a git ref pinned to
    its commit (a branch names another commit tomorrow) in the repository's absolute
    path, a file by its absolute path, the label kept unless it was the default."""
    prov = result["provenance"]
    source, resolved = str(prov["source"]), str(prov["resolved_path"])
    _, cls = loader.split_class(source)
    suffix = f"::{cls}" if cls else ""
    commit = schema.git_commit_of(resolved)
    if commit:
        repo = resolved.split(f"@{commit}:", 1)[0]
        source = f"git:{repo}@{commit}{suffix}"
    elif not source.startswith(("git:", "vllm==", "kvqueue")):
        source = resolved + suffix
    return source if prov["label"] == default_label else f"{prov['label']}={source}"


def reproduce_command(r: Regress, comparison: Comparison, executable: str) -> list[str]:
    """The lines that repeat the check: the project commit, then ``make regress``."""
    base, head = comparison.gate
    words = [
        f"BASE={shlex.quote(_source_arg(base, regression_params.BASE_LABEL))}",
        f"HEAD={shlex.quote(_source_arg(head, regression_params.HEAD_LABEL))}",
    ]
    p, bench = r.params, r.bench
    if p.threshold != regression_params.DEFAULT_THRESHOLD_PCT:
        words.append(f"THRESHOLD={p.threshold:g}")
    if p.thresholds:
        words.append(f"THRESHOLDS={shlex.quote(' '.join(p.thresholds))}")
    if bench.cases != schema.CASES:
        words.append(f"CASES={shlex.quote(' '.join(bench.cases))}")
    if bench.pools != regression_params.REGRESS_DEFAULTS["pools"]:
        words.append(f"POOLS={shlex.quote(' '.join(map(str, bench.pools)))}")
    if bench.block_mode != "shared":
        words.append(f"BLOCK_MODE={bench.block_mode}")
    words.append(f"PYTHON={shlex.quote(executable)}")
    lines = []
    project = hostinfo.project_info()
    if project.get("commit"):
        # Changes not committed are not in the commit: say so, the command may differ.
        dirty = " (its work tree had changes)" if project.get("dirty") else ""
        lines.append(
            f"git -C kvqueue-bench checkout {project['commit']}   # kvqueue-bench commit{dirty}"
        )
    lines.append("make -C kvqueue-bench regress " + " \\\n    ".join(words))
    return lines


def markdown(r: Regress, comparison: Comparison) -> str:
    """The comparison as Markdown ready to post on a pull request."""
    py = comparison.python
    interpreter = f"{py.get('implementation', 'Python')} {py.get('version', '?')}"
    executable = str(py.get("executable") or r.bench.python)
    lines = [verdict_line(comparison.cells), ""]
    lines += [
        "| case | pool | base instr/op | head instr/op | change | threshold | verdict |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for c in comparison.cells:
        mark = "\\*" if c.raised else ""
        lines.append(
            f"| {c.case} | {c.pool:,} | {_num(c.base)} | {_num(c.head)} | "
            f"{c.change_pct:+.2f} % | {c.threshold_pct:g} %{mark} | {_verdict_cell(c)} |"
        )
    resolution = comparison.resolution
    res_text = (
        f"{resolution:.3f} instructions per operation"
        if resolution == resolution
        else "not measured"
    )
    lines += [
        "",
        f"Instructions per operation under valgrind's cachegrind "
        f"({comparison.valgrind.version}, `{' '.join(comparison.valgrind.options())}`) on "
        f"{interpreter} "
        f"(`{executable}`): {cachegrind.WARMUP_OPS:,} warm-up and at least "
        f"{cachegrind.TARGET_OPS:,} counted operations per cell, start-up and warm-up "
        "cancelled by a run without the counted loops. Change = head / base − 1 "
        "(positive: head executes more instructions). Two identical counts differ by "
        f"{res_text}; a threshold is never below {RESOLUTION_FACTOR:g}× that"
        + (" (\\*: raised to it)" if any(c.raised for c in comparison.cells) else "")
        + ". Both sources passed the validation gate before anything was counted. "
        "Instructions track time, not one to one: confirm a speed-up with `make bench`. "
        f"Counted in {comparison.seconds:.0f} s.",
        "",
        "| | label | source | read from | class sha256 |",
        "|---|---|---|---|---|",
    ]
    for role, result in zip(("base", "head"), comparison.gate, strict=True):
        prov = result["provenance"]
        lines.append(
            f"| {role} | {prov['label']} | `{prov['source']}` | `{prov['resolved_path']}` | "
            f"`{prov['class_sha256']}` |"
        )
    block = comparison.gate[0]["provenance"]
    shared = r.bench.block_mode == "shared"
    lines += [
        "",
        (
            f"Block class: `KVCacheBlock` of `{block['block_source']}` for both "
            f"(sha256 `{block['block_class_sha256']}`): the difference is the queue's code."
            if shared
            else "Block class: each source's own `KVCacheBlock` (BLOCK_MODE=own)."
        ),
        "",
        "Reproduce (kvqueue-bench cloned beside the sources; valgrind installed):",
        "",
        "```sh",
        *reproduce_command(r, comparison, executable),
        "```",
    ]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ the command


def _out_path(text: str) -> Path | None:
    """``OUT`` as a path ('' : none), refused before counting if it cannot be a file."""
    if not text:
        return None
    path = Path(text).expanduser()
    if path.is_dir():
        raise BenchInputError(f"OUT {text!r} is a folder; give a file, e.g. OUT=regress.md")
    return path


def run_regress(r: Regress, out: TextIO | None = None, announce: str = "") -> int:
    """Gate and count BASE and HEAD, judge every cell, print (and write) the Markdown.

    Parameters
    ----------
    r
        Checked parameters (:func:`kvqueue.params.regression_params.from_text`).
    out
        Where the Markdown goes (default: standard output); progress goes to stderr.
    announce
        The line printed once the input is checked (the parameters not at their defaults).

    Returns
    -------
    int
        0 no cell regressed, 1 a cell regressed beyond its threshold.

    Raises
    ------
    BenchInputError
        valgrind missing, a bad interpreter or source (one line); nothing counted.
    GateRefused
        A source failed the validation gate; nothing counted.
    """
    stream = out or sys.stdout
    start = time.monotonic()
    path = _out_path(r.params.out)
    valgrind = cachegrind.find_valgrind(cache_sim=False)
    checked = interpreter_checks.check(r.bench, announce)
    # The gate at the bench's pools too, as make quick: a queue broken only above 5,000
    # blocks passed a gate that stopped at 2,048.
    gate, rows = counts_run.count_rows(
        checked, sizes=schema.POOLS, valgrind=valgrind, what="make regress"
    )
    base_label, head_label = checked.params.labels
    cells, resolution = judge(rows, r.per_case, base_label, head_label)
    comparison = Comparison(
        cells=tuple(cells),
        resolution=resolution,
        gate=tuple(gate),
        python=checked.python,
        valgrind=valgrind,
        seconds=time.monotonic() - start,
    )
    text = markdown(r, comparison)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        print(f"regress: wrote {path}", file=sys.stderr)
    stream.write(text)
    stream.flush()
    return comparison.exit_status()
