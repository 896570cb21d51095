"""``make regress``: does a change (HEAD) execute more instructions per operation than the
code it starts from (BASE)? The check for a contributor's own change and for CI.

``make check-queue`` guards this project's queue against a stored reference; this
compares two sources of the same run instead, so there is no reference to record and
no interpreter build to match: both are counted in one run, by one valgrind, under one
interpreter. The route is ``make quick METRIC=instructions``'s, for every subject
(``SUBJECT=queue``, ``pool``, ...: the bench parameters route by the subject's name): the
checks of a bench (:func:`kvqueue.measure.interpreter_checks.check`: values,
interpreter, both sources loaded), the validation gate, strict
(:func:`kvqueue.measure.runner.run_gate`: a source that breaks the contract is refused
before anything is counted), then every (case, pool) cell of both sources under
cachegrind (:func:`kvqueue.measure.counts_run.count_rows`) and per operation
(:func:`kvqueue.stats.count_figures.per_op`, ``table``). When the gate finds that base
and head run identical code (:func:`same_code`: the digests the workers check), nothing
is counted: the Markdown says so in one line, and where the change may be instead.

A cell *regresses* when head's instructions per operation exceed base's by more than
its threshold (``THRESHOLD``, or ``THRESHOLDS`` per case; never below
:data:`~kvqueue.params.regression_params.RESOLUTION_FACTOR` times the run's own measured
resolution). The default, 1 %, is ~10x the largest spread measured here between two
counts of identical code at two commits (0.13 %; CPython 3.10 to 3.13:
:data:`~kvqueue.params.regression_params.DEFAULT_THRESHOLD_PCT`). Every signed number is
a *reduction*, base to head, as everywhere in the project (docs/design.md §5): negative
means head executes more. The comparison is written as Markdown ready to post on a pull
request (standard output, and ``OUT``): a first line with the verdict, a table per case
and pool, the sources with their commits and sha256, the command that repeats the check
and the exit status. Once the command gets past its parameters, ``OUT`` is written
whatever happens (a refusal, a bad source, no valgrind: the first line says which), and
an existing ``OUT`` is replaced only when it is this command's own earlier output.

Exit status (:data:`kvqueue.params.regression_params.EXIT_STATUSES`): 0 passed (or
identical code), 1 regressed, 2 bad input, 3 refused by the gate, 4 not counted (a
counted process failed, the machine lock was held). ``make regress`` exits 2 for every
failure (Make's own status; its ``Error N`` line carries the command's N): CI that needs
the status runs ``.venv/bin/python -m kvqueue regress``.
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
from kvqueue.ab import where_text
from kvqueue.errors import BenchError, BenchInputError, GateRefused
from kvqueue.measure import cachegrind, counts_run, interpreter_checks, machine_lock, where_run
from kvqueue.params import regression_params, value_checks
from kvqueue.params.regression_params import (
    EXIT_PASSED,
    EXIT_REGRESSED,
    EXIT_STATUSES,
    RESOLUTION_FACTOR,
    Regress,
)
from kvqueue.sources import loader, pool_loader
from kvqueue.stats import cost_moves, count_figures

REGRESSED = "regressed"
IMPROVED = "improved"
OK = "ok"
#: The last line of every Markdown this command writes begins so: an existing ``OUT``
#: ending in it is an earlier output of the command, which may be replaced.
OUT_MARK = "<!-- kvqueue-bench make regress"


@dataclass(frozen=True)
class CellVerdict:
    """One (case, pool) cell: base and head instructions per operation and the verdict.

    Attributes
    ----------
    reduction_pct
        ``100 * (1 - head / base)``, the project's sign (docs/design.md §5): negative
        means head executes more instructions.
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
    reduction_pct: float
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
    #: Base and head run identical code (:func:`same_code`): nothing was counted.
    identical: bool = False
    #: Where the instructions moved in the cells that moved most (:func:`where_of`).
    where: tuple[cost_moves.CellMoves, ...] = ()
    #: Why ``where`` is empty though cells were counted ('' when it is not).
    where_note: str = ""

    @property
    def regressed(self) -> list[CellVerdict]:
        """The cells that regressed beyond their threshold."""
        return [c for c in self.cells if c.verdict == REGRESSED]

    def exit_status(self) -> int:
        """:data:`~kvqueue.params.regression_params.EXIT_REGRESSED` when any cell
        regressed, else :data:`~kvqueue.params.regression_params.EXIT_PASSED`."""
        return EXIT_REGRESSED if self.regressed else EXIT_PASSED


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
        reduction = float(r["reduction_pct"])
        verdict = REGRESSED if reduction < -threshold else IMPROVED if reduction > threshold else OK
        cells.append(
            CellVerdict(
                case=r["case"],
                pool=int(r["pool"]),
                base=base,
                head=head,
                reduction_pct=reduction,
                threshold_pct=threshold,
                raised=floor > given,
                verdict=verdict,
            )
        )
    return cells, resolution


#: Most cells whose instructions are traced to functions and lines (beyond their
#: threshold, largest change first; the largest change alone when none is).
WHERE_CELLS = 3


def where_cells(cells: Sequence[CellVerdict]) -> list[CellVerdict]:
    """The cells whose instructions ``make regress`` traces to functions and lines: those
    beyond their threshold (regressed or improved), at most :data:`WHERE_CELLS`, largest
    change first; when none is, the one that changed most."""
    moved = sorted(
        (c for c in cells if c.verdict != OK), key=lambda c: (-abs(c.reduction_pct), c.case)
    )
    if moved:
        return moved[:WHERE_CELLS]
    return [max(cells, key=lambda c: abs(c.reduction_pct))] if cells else []


def _code_identity(result: Mapping[str, Any]) -> tuple[Any, Any]:
    """What a worker runs of one gated source: the gate's digest (a queue's class text, a
    pool's every member and swapped queue) and, for a queue, its block class's."""
    return result["sha256"], result["provenance"].get("block_class_sha256")


def same_code(gate: Sequence[Mapping[str, Any]]) -> bool:
    """Whether base and head, as the gate found them, run identical code (then no cell
    can differ but by the count's own noise, and nothing is counted)."""
    base, head = gate
    return _code_identity(base) == _code_identity(head)


# ------------------------------------------------------------------ Markdown


def _num(value: float) -> str:
    return f"{value:,.1f}"


def _cell_name(c: CellVerdict) -> str:
    return f"{c.case} (pool {c.pool:,})"


def _title(subject: str, outcome: str) -> str:
    """The bold start of the Markdown's first line: the check, its subject, the outcome."""
    return f"**Instruction-count regression check, SUBJECT={subject}: {outcome}**"


def _reduction(c: CellVerdict) -> str:
    more = "more" if c.reduction_pct < 0 else "fewer"
    return f"reduction {c.reduction_pct:+.2f} %: {abs(c.reduction_pct):.2f} % {more} instructions"


def verdict_line(cells: Sequence[CellVerdict], subject: str = schema.SUBJECT_QUEUE) -> str:
    """The first line of the Markdown: the verdict and what it rests on."""
    bad = [c for c in cells if c.verdict == REGRESSED]
    if bad:
        named = "; ".join(
            f"{_cell_name(c)} {_num(c.base)} → {_num(c.head)} instructions/op "
            f"({_reduction(c)}, threshold {c.threshold_pct:g} %)"
            for c in bad
        )
        return (
            f"{_title(subject, 'FAILED')}: {len(bad)} of {len(cells)} cells regressed "
            f"beyond their threshold: {named}."
        )
    if not cells:
        return f"{_title(subject, 'nothing compared')}."
    top = min(cells, key=lambda c: c.reduction_pct)
    better = [c for c in cells if c.verdict == IMPROVED]
    also = (
        f"; {len(better)} improved beyond their threshold ({', '.join(map(_cell_name, better))})"
        if better
        else ""
    )
    return (
        f"{_title(subject, 'passed')}: no cell above its threshold (lowest reduction "
        f"{top.reduction_pct:+.2f} %, {_cell_name(top)}){also}."
    )


def _read_from(prov: Mapping[str, Any]) -> str:
    """Where a source's code was read (a queue's class file, a pool's block_pool.py)."""
    return str(prov.get("resolved_path") or prov.get("pool_path") or "")


def identical_line(gate: Sequence[Mapping[str, Any]], subject: str) -> str:
    """The first line of the Markdown when base and head run identical code: what that
    means, and where the change may be instead."""
    base, head = (r["provenance"] for r in gate)
    commits = [schema.git_commit_of(_read_from(p)) for p in (base, head)]
    others = [s for s in schema.SUBJECTS if s != subject]
    elsewhere = (
        f"HEAD and BASE resolved to one commit ({commits[0]}): check the refs"
        if commits[0] and commits[0] == commits[1]
        else "the change, if any, is outside it: in another file (e.g. "
        + ", ".join(f"SUBJECT={s} counts {regression_params.subject_reads(s)}" for s in others)
        + ") or outside what any subject counts, or HEAD names the base's code by mistake"
    )
    return (
        f"{_title(subject, 'identical code, nothing counted')}: base and head run the same "
        f"code (sha256 `{str(gate[0]['sha256'])[:16]}`), so no cell can regress: what "
        f"SUBJECT={subject} counts, {regression_params.subject_reads(subject)}, did not "
        f"change; {elsewhere}."
    )


def _verdict_cell(c: CellVerdict) -> str:
    return {REGRESSED: "**regressed**", IMPROVED: "improved"}.get(c.verdict, "ok")


def _source_arg(result: Mapping[str, Any], given: str, default_name: str) -> str:
    """The BASE or HEAD text that repeats the check from any folder: a git ref pinned to
    its commit (a branch names another commit tomorrow) in the repository's absolute
    path, a file by its absolute path, the name kept unless it was the default (a
    pool's swapped queue, ``+queue=QUEUE``, as given).

    Parameters
    ----------
    result
        The source's gate result (its provenance).
    given
        The source as the check labelled it (``NAME=SOURCE``).
    default_name
        The name an unnamed source was given (:data:`~kvqueue.params.regression_params.BASE_LABEL`).
    """
    prov = result["provenance"]
    source, resolved = str(prov["source"]), _read_from(prov)
    source, sep, queue = source.partition(pool_loader.QUEUE_SEPARATOR)
    _, cls = loader.split_class(source)
    suffix = f"::{cls}" if cls else ""
    commit = schema.git_commit_of(resolved)
    if commit:
        repo = resolved.split(f"@{commit}:", 1)[0]
        source = f"git:{repo}@{commit}{suffix}"
    elif not source.startswith(("git:", "vllm==", "kvqueue")):
        source = resolved + suffix
    source += sep + queue
    name, _ = schema.split_name(given)
    return source if name in ("", default_name) else f"{name}={source}"


def reproduce_command(r: Regress, sources: tuple[str, str], executable: str) -> list[str]:
    """The lines that repeat the check: the project commit, then ``make regress`` with
    ``sources`` (BASE, HEAD), the subject and every parameter not at its subject's
    default."""
    base, head = sources
    words = [f"BASE={shlex.quote(base)}", f"HEAD={shlex.quote(head)}"]
    p, bench = r.params, r.bench
    default = regression_params.subject_defaults(bench.subject)
    # The subject always: a CI job posts one check per subject.
    words.append(f"SUBJECT={bench.subject}")
    if p.threshold != regression_params.DEFAULT_THRESHOLD_PCT:
        words.append(f"THRESHOLD={p.threshold:g}")
    if p.thresholds:
        words.append(f"THRESHOLDS={shlex.quote(' '.join(p.thresholds))}")
    if bench.cases != default.cases:
        words.append(f"CASES={shlex.quote(' '.join(bench.cases))}")
    if bench.pools != default.pools:
        words.append(f"POOLS={shlex.quote(' '.join(map(str, bench.pools)))}")
    if bench.block_mode != default.block_mode:
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


def _reproduce_block(lines: list[str]) -> list[str]:
    return [
        "Reproduce (kvqueue-bench cloned beside the sources; valgrind installed):",
        "",
        "```sh",
        *lines,
        "```",
    ]


def status_line(status: int) -> str:
    """The Markdown's last line: the exit status and its meaning, hidden in an HTML
    comment that also marks the file as this command's output (:data:`OUT_MARK`)."""
    return f"{OUT_MARK}: exit status {status}, {EXIT_STATUSES[status].split(':')[0]} -->"


def _sources_table(gate: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["| | label | source | read from | sha256 |", "|---|---|---|---|---|"]
    for role, result in zip(("base", "head"), gate, strict=True):
        prov = result["provenance"]
        lines.append(
            f"| {role} | {prov['label']} | `{prov['source']}` | `{_read_from(prov)}` | "
            f"`{result['sha256']}` |"
        )
    return lines


def _block_line(r: Regress, gate: Sequence[Mapping[str, Any]]) -> str:
    block = gate[0]["provenance"]
    if "block_source" not in block:
        return (
            f"Code counted: {regression_params.subject_reads(r.bench.subject)}, each source's own."
        )
    if r.bench.block_mode == "shared":
        return (
            f"Block class: `KVCacheBlock` of `{block['block_source']}` for both "
            f"(sha256 `{block['block_class_sha256']}`): the difference is the queue's code."
        )
    return "Block class: each source's own `KVCacheBlock` (BLOCK_MODE=own)."


def markdown(r: Regress, comparison: Comparison) -> str:
    """The comparison as Markdown ready to post on a pull request."""
    py = comparison.python
    interpreter = f"{py.get('implementation', 'Python')} {py.get('version', '?')}"
    executable = str(py.get("executable") or r.bench.python)
    subject = r.bench.subject
    if comparison.identical:
        lines = [
            identical_line(comparison.gate, subject),
            "",
            f"Both sources passed the validation gate on {interpreter} (`{executable}`); "
            f"nothing was counted (the count of identical code measures only its own "
            f"noise). Checked in {comparison.seconds:.0f} s.",
            "",
        ]
    else:
        lines = [verdict_line(comparison.cells, subject), ""]
        lines += [
            "| case | pool | base instr/op | head instr/op | reduction | threshold | verdict |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for c in comparison.cells:
            mark = "\\*" if c.raised else ""
            lines.append(
                f"| {c.case} | {c.pool:,} | {_num(c.base)} | {_num(c.head)} | "
                f"{c.reduction_pct:+.2f} % | {c.threshold_pct:g} %{mark} | {_verdict_cell(c)} |"
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
            f"(`{executable}`): each cell warmed up, then counted over its case's operations "
            f"(a queue case {cachegrind.WARMUP_OPS:,} and {cachegrind.TARGET_OPS:,}, fewer "
            "above 32 blocks per operation; a pool's or manager's its own), start-up and "
            "warm-up cancelled by a run without the counted loops. Reduction = 1 − head / base, "
            "as everywhere in kvqueue-bench (negative: head executes more instructions); a "
            "cell regresses when its reduction is below minus its threshold. Two identical "
            f"counts differ by {res_text}; a threshold is never below "
            f"{RESOLUTION_FACTOR:g}× that"
            + (" (\\*: raised to it)" if any(c.raised for c in comparison.cells) else "")
            + ". Both sources passed the validation gate before anything was counted. "
            "Instructions track time, not one to one: confirm a change in speed with "
            f"`make bench`. Counted in {comparison.seconds:.0f} s.",
            "",
        ]
        if comparison.where:
            lines += [where_text.markdown(comparison.where)]
        elif comparison.where_note:
            lines += [comparison.where_note, ""]
    lines += [*_sources_table(comparison.gate), "", _block_line(r, comparison.gate), ""]
    base, head = r.bench.variants
    sources = (
        _source_arg(comparison.gate[0], base, regression_params.BASE_LABEL),
        _source_arg(comparison.gate[1], head, regression_params.HEAD_LABEL),
    )
    lines += _reproduce_block(reproduce_command(r, sources, executable))
    lines += ["", status_line(comparison.exit_status())]
    return "\n".join(lines) + "\n"


#: The outcome word of each error's first line, by its exit status.
_FAILED_AS = {
    regression_params.EXIT_BAD_INPUT: "not run, bad input",
    regression_params.EXIT_REFUSED: "REFUSED by the validation gate",
    regression_params.EXIT_NOT_COUNTED: "not counted",
}


def failure_markdown(r: Regress, exc: BenchInputError | GateRefused | BenchError) -> str:
    """The Markdown of a check that stopped once the sources were being read: what
    stopped it in the first line (a gate refusal names the source and the first
    divergence), the gate's whole report when it refused, the sources as given, the
    command and the exit status."""
    status = regression_params.exit_status_of(exc)
    subject = r.bench.subject
    if isinstance(exc, GateRefused):
        first = exc.failure or str(exc).splitlines()[0]
        why = f"a source breaks the contract, so nothing was counted: {first}"
    else:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    lines = [f"{_title(subject, _FAILED_AS[status])}: {why}", ""]
    if isinstance(exc, GateRefused) and len(str(exc).splitlines()) > 1:
        lines += ["The validation gate's report:", "", "```text", str(exc), "```", ""]
    lines += [
        f"BASE `{r.params.base.strip()}`, HEAD `{r.params.head.strip()}`, SUBJECT={subject}, "
        f"PYTHON `{r.bench.python}`.",
        "",
    ]
    sources = (r.params.base.strip(), r.params.head.strip())
    lines += _reproduce_block(reproduce_command(r, sources, r.bench.python))
    lines += ["", status_line(status)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ the command


def is_earlier_output(path: Path) -> bool:
    """Whether the regular file ``path`` is an earlier Markdown of this command: its last
    line begins with :data:`OUT_MARK` (only the file's last bytes are read)."""
    with path.open("rb") as fh:
        size = fh.seek(0, 2)
        fh.seek(max(0, size - 1024))
        tail = fh.read().decode("utf-8", "replace").rstrip().splitlines()
    return bool(tail) and tail[-1].startswith(OUT_MARK)


def out_path(text: str) -> Path | None:
    """``OUT`` as a path ('' : none), refused before anything runs if it cannot be
    written or is an existing file other than this command's earlier output (the rule
    of ``TRACE_OUT``: :func:`kvqueue.params.value_checks.out_file_problem`).

    Raises
    ------
    BenchInputError
        Why ``OUT`` cannot be written, in one line.
    """
    if not text:
        return None
    path = Path(text).expanduser()
    problem = value_checks.out_file_problem(
        path, is_earlier_output, "an earlier make regress output"
    )
    if problem:
        raise BenchInputError(f"OUT: {problem}")
    return path


def _publish(path: Path | None, text: str) -> None:
    """Write ``text`` to ``path`` at once (a temporary file beside it, renamed)."""
    if path is None:
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    print(f"regress: wrote {path}", file=sys.stderr)


def compare(r: Regress, announce: str = "") -> Comparison:
    """Check, gate and (unless base and head run identical code) count BASE and HEAD,
    and judge every cell.

    Raises
    ------
    BenchInputError
        valgrind missing, a bad interpreter or source (one line); nothing counted.
    GateRefused
        A source failed the validation gate; nothing counted.
    BenchError
        A counted process failed, or the machine lock is held.
    """
    start = time.monotonic()
    valgrind = cachegrind.find_valgrind(cache_sim=False)
    checked = interpreter_checks.check(r.bench, announce)
    # The gate at the bench's pools too, as make quick: a queue broken only above 5,000
    # blocks passed a gate that stopped at 2,048 (a pool's gate runs at the pools counted).
    sizes = schema.POOLS if r.bench.subject == schema.SUBJECT_QUEUE else ()
    base_label, head_label = checked.params.labels
    totals = where_run.FunctionTotals()
    where: list[cost_moves.CellMoves] = []
    note: list[str] = []

    def trace(gate: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
        # Under the machine lock still: one more process per variant and cell shown.
        cells, _ = judge(rows, r.per_case, base_label, head_label)
        chosen = [(c.case, c.pool, base_label, head_label) for c in where_cells(cells)]
        try:
            where.extend(
                where_run.cell_moves(
                    checked.params.python,
                    counts_run.base_spec(checked.params, gate),
                    rows,
                    totals,
                    chosen,
                    valgrind=valgrind,
                )
            )
        except BenchError as exc:
            note.append(f"where the instructions moved was not traced: {exc}")

    gate, rows = counts_run.count_rows(
        checked,
        sizes=sizes,
        valgrind=valgrind,
        what="make regress",
        counted_if=lambda results: not same_code(results),
        on_functions=totals,
        then=trace,
    )
    cells, resolution = judge(rows, r.per_case, base_label, head_label) if rows else ([], math.nan)
    return Comparison(
        cells=tuple(cells),
        resolution=resolution,
        gate=tuple(gate),
        python=checked.python,
        valgrind=valgrind,
        seconds=time.monotonic() - start - machine_lock.waited_seconds(),
        identical=not rows,
        where=tuple(where),
        where_note=" ".join(note),
    )


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
        0 no cell regressed (or identical code), 1 a cell regressed beyond its threshold.

    Raises
    ------
    BenchInputError
        ``OUT`` cannot be written (nothing written); valgrind missing, a bad interpreter
        or source (``OUT`` says so).
    GateRefused
        A source failed the validation gate; nothing counted (``OUT`` holds the report).
    BenchError
        A counted process failed or the machine lock is held (``OUT`` says so).
    """
    stream = out or sys.stdout
    path = out_path(r.params.out)
    try:
        comparison = compare(r, announce)
    except (BenchInputError, GateRefused, BenchError) as exc:
        _publish(path, failure_markdown(r, exc))
        raise
    text = markdown(r, comparison)
    _publish(path, text)
    stream.write(text)
    stream.flush()
    return comparison.exit_status()
