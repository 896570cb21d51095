"""The report's structure, defined once: an ordered list of :class:`Section` objects.

Each section holds a heading, a note (Markdown), a display table (from
:mod:`kvqueue.ab.ab_tables`, :mod:`kvqueue.ab.validation_tables`,
:mod:`kvqueue.report.provenance` or a question's report module) and/or the name of a
figure (from :mod:`kvqueue.report.figures`), plus how to show it. Two renderers read the same list:

- :mod:`kvqueue.report.html` displays it in ``notebooks/report.ipynb`` (the HTML report);
- :mod:`kvqueue.report.writeup` renders sections as Markdown (each question's writeup,
  built by :mod:`kvqueue.report.question_sections`).

The order is the reading order of both: the answer first (summary, forest plot, the
compact results table, validation), then the full tables, the environment, the methods,
the reproduce commands and the provenance of every run.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pandas as pd

from kvqueue import schema
from kvqueue.ab import ab_tables, count_tables, validation_tables
from kvqueue.ab.ab_tables import HEADLINE_CASES, case_cycle, case_title
from kvqueue.formatting import ci_header
from kvqueue.history import history_present
from kvqueue.policy import policy_present
from kvqueue.processed import store
from kvqueue.report import figures, prose, provenance
from kvqueue.stats import paired_stats
from kvqueue.stats.comparisons import PAIR

TITLE = "FreeKVCacheBlockQueue benchmark"
#: Heading and text of the "times behind the results": what the cells are, and why they
#: can disagree with the reduction (issue 18: mix · 2,048 read 771.6 -> 670.9 ns beside
#: +0.5 % [-1.0, 3.2]).
TIMES_TITLE = "Times behind the results (medians of times, not of paired ratios)"
TIMES_NOTE = (
    "Per cell: baseline ns → candidate ns per cycle, each the median over processes of the "
    "per-process median time, aggregated *independently* for the two variants · processes "
    "in which the candidate was faster. The reduction in the results is instead "
    "1 − the median over processes of the *paired* per-process ratio candidate/baseline, "
    "so the drift between processes (one process slower for both variants) cancels in it "
    "but not in these medians: the two can disagree, and the reduction is the answer."
)


@dataclass(frozen=True)
class Section:
    """One part of the report.

    Attributes
    ----------
    key
        Stable identifier (the HTML anchor; tests find sections by it).
    title
        Heading text.
    level
        Heading level: 1 the report's title, 2 a section, 3 a subsection.
    note
        Markdown shown under the heading (paragraphs, ``code``, **bold**, bullets,
        fenced code).
    table
        A display table (a DataFrame of formatted strings), or ``None``.
    table_label
        What the table holds, the line that opens it when it is folded.
    figure
        A key of :data:`kvqueue.report.figures.FIGURES`, or ``None``.
    fold
        The table is long: both renderings put it inside ``<details>``.
    summary
        Part of the answer that opens the report (the HTML sets it apart; never folded).
    detail
        Detail for the PR description: the writeup puts the whole section (heading,
        note, table) inside ``<details>``; the HTML shows it in place.
    writeup
        Carried by the writeup; ``False``: only in the HTML report (tables whose length
        grows with every host, interpreter and case, too long for a PR description).
    """

    key: str
    title: str
    level: int = 2
    note: str = ""
    table: pd.DataFrame | None = field(default=None, compare=False)
    table_label: str = ""
    figure: str | None = None
    fold: bool = False
    summary: bool = False
    detail: bool = False
    writeup: bool = True

    @property
    def rows(self) -> int:
        """Rows of the table (0 without one)."""
        return 0 if self.table is None else len(self.table)


def intro_note(data: store.Processed) -> str:
    """What is compared, and what the numbers mean (under the title)."""
    pairs = _and_list([f"`{c}` vs `{b}`" for c, b in compared_pairs(data)])
    heads = data.headline_runs()
    if heads.empty:
        return (
            f"Paired, order-randomized A/B comparison of {pairs}. No run qualifies for the "
            f"headline tables (quick runs and runs with fewer than {paired_stats.MIN_PROCESSES} "
            "processes never do): every run found is listed under Provenance."
            + (
                " Instruction counts (`METRIC=instructions`: which executes fewer "
                "instructions, not time) are shown below."
                if len(data.count_pairs) or len(data.count_steps)
                else ""
            )
        )
    hosts = heads["host"].nunique()
    pythons = heads["interpreter"].nunique()
    return (
        f"Paired, order-randomized A/B comparison of {pairs} on {hosts} "
        f"host{'s' if hosts != 1 else ''} × {pythons} interpreter{'s' if pythons != 1 else ''} "
        "(newest full-protocol run of each). *Reduction*: the share of time the candidate saves, "
        "1 − median per-process time ratio candidate/baseline (> 0: faster)."
    )


def compared_pairs(data: store.Processed) -> list[tuple[str, str]]:
    """The A/B pairs the headline runs compare (main phase), the settings' pairs first;
    the settings' pairs when no headline run compares any (a contributor's
    ``VARIANTS="base=... mine=..."`` pair is named although it is no default pair)."""
    s = data.summary
    if s.empty:
        return list(data.settings.pairs)
    main = s[(s["kind"] == PAIR) & (s["phase"] == "main") & s["headline"].fillna(False)]
    found = list(dict.fromkeys(zip(main["candidate"], main["baseline"], strict=True)))
    found = [(str(c), str(b)) for c, b in found]
    ordered = [p for p in data.settings.pairs if p in found]
    return [*ordered, *(p for p in found if p not in ordered)] or list(data.settings.pairs)


def summary_note(data: store.Processed) -> str:
    """How to read the summary table."""
    ci = ci_header(data.settings.confidence)
    return (
        "Per comparison, cycle and host: lowest and highest reduction over its interpreters "
        f"and pools, each with its {ci}; verdicts of those cells."
    )


def results_note(data: store.Processed) -> str:
    """What the compact results table shows, and what one cycle of each case is."""
    ci = ci_header(data.settings.confidence)
    present = ab_tables.present_cases(data, "main")
    cycles = "; ".join(f"{c}: {case_cycle(c)}" for c in HEADLINE_CASES if c in present)
    text = f"Reduction [{ci}] and verdict per host × interpreter, pools (blocks) side by side."
    return f"{text} {cycles}." if cycles else text


def _and_list(items: list[str]) -> str:
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + f" and {items[-1]}"


def _floor_gap_note(data: store.Processed) -> str:
    bounds = ", ".join(f"`{b}`" for b in sorted(data.floor_gap["bound"].dropna().unique()))
    ci = ci_header(data.settings.confidence)
    return (
        f"The lower bound ({bounds}: the same operations with every check removed) is a "
        "bound, not a candidate. Gap closed = (m_baseline − m_candidate) / "
        "(m_baseline − m_bound), computed as candidate reduction / bound reduction with a "
        f"{ci} from a bootstrap over processes (main phase); 100% would mean the candidate "
        "is as fast as the bound, a negative share that it is slower than the baseline. "
        "*Bound saves* is the size of the gap; where it is only a few percent, the share is "
        "imprecise (wide CI). n/a when the bound is not clearly faster than the baseline."
    )


def counted_pairs(rows: pd.DataFrame, data: store.Processed) -> list[tuple[str, str]]:
    """The pairs of counts-only rows (:func:`kvqueue.ab.count_tables.counts_only`) that
    get a verdict and a writeup: per run the report's configured pairs it counted, else
    every pair it counted (each variant against its baseline), as a timed run's are."""
    out: list[tuple[str, str]] = []
    if rows.empty:
        return out
    every = data.count_pairs
    for run, grp in rows.groupby("run_id", sort=True):
        mine = every[every["run_id"] == run]
        have = list(dict.fromkeys(zip(mine["candidate"], mine["baseline"], strict=True)))
        only = set(zip(grp["candidate"], grp["baseline"], strict=True))
        pairs = [p for p in data.settings.pairs if p in have] or have
        out += [(str(c), str(b)) for c, b in pairs if (c, b) in only and (c, b) not in out]
    return out


#: The heading of each subject's release history in the report.
HISTORY_TITLES = {
    schema.SUBJECT_QUEUE: "Release history",
    schema.SUBJECT_POOL: "BlockPool release history",
    schema.SUBJECT_MANAGER: "KVCacheManager release history",
}


#: The overview's section of each stack subject's timed comparisons: its key, and the
#: note's words before and after the cases (its default cases and any other it measured:
#: :func:`kvqueue.ab.ab_tables.subject_cases`).
_STACK_SECTIONS = (
    (
        schema.SUBJECT_POOL,
        "The allocation path as the KV-cache manager drives it: whole `BlockPool`s of each "
        "source (labels `pool:...`; `+queue=` runs a pool with another queue), gated call by "
        "call against the baseline pool. ",
        ".",
    ),
    (
        schema.SUBJECT_MANAGER,
        "What the scheduler calls: whole `KVCacheManager` stacks of each source (labels "
        "`manager:...`; `+queue=`/`+pool=` run a release with another queue or pool), gated "
        "by a scheduler trace against the baseline; its comparisons are never mixed with the "
        "queue's or the pool's. ",
        ". Each comparison's writeup gives the saving per request and per block, and what a "
        "CPU-only measurement cannot show.",
    ),
)
#: What each subject's comparisons are, in the heading of its counts-only section.
_SUBJECT_NAMES = {
    schema.SUBJECT_QUEUE: "",
    schema.SUBJECT_POOL: "vLLM's BlockPool",
    schema.SUBJECT_MANAGER: "vLLM's KVCacheManager",
}


def counts_only_sections(data: store.Processed) -> list[Section]:
    """The comparisons only instruction counts measured, one section per subject (the
    queue's, the pool's, the manager's: a subject's pairs are never in another's table)."""
    only = count_tables.counts_only(data.count_pairs, data.summary)
    shown = counted_pairs(only, data)
    out = []
    for subject in schema.SUBJECTS:
        mine = [p for p in shown if schema.subject_of_label(p[0]) == subject]
        if not mine:
            continue
        rows = only[[p in mine for p in zip(only["candidate"], only["baseline"], strict=True)]]
        table = count_tables.counts_table(rows)
        verdicts = [count_tables.counts_verdict(rows, c, b) for c, b in mine]
        stack = subject != schema.SUBJECT_QUEUE
        out.append(
            Section(
                f"counts-only-{subject}" if stack else "counts-only",
                "Instruction counts without a timed run"
                + (f": {_SUBJECT_NAMES[subject]}" if stack else ""),
                note="\n\n".join(
                    [
                        "Comparisons that a counts run (`make bench METRIC=instructions`) "
                        "measured on a host × interpreter where no headline time run did.",
                        *verdicts,
                        count_tables.counts_method(data.counts, sorted(set(rows["run_id"]))),
                    ]
                ),
                table=table,
                table_label=f"Instructions per operation per cell: {len(table)} rows",
                fold=len(table) > 16,
            )
        )
        if subject == schema.SUBJECT_MANAGER:
            out.append(_per_request_section(data, rows, mine))
    return out


def _per_request_section(
    data: store.Processed, rows: pd.DataFrame, pairs: list[tuple[str, str]]
) -> Section:
    """The manager's comparisons per request and per block (instructions), one table."""
    tables = []
    for cand, base in pairs:
        shown = count_tables.request_savings_table(
            count_tables.request_savings(rows, data.summary, cand, base)
        )
        if len(shown):
            shown.insert(2, "Comparison", f"{cand} vs {base}")
            tables.append(shown)
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    return Section(
        "manager-per-request",
        "KVCacheManager: saving per request and per block",
        level=3,
        note=(
            "Instructions each manager comparison saves per operation (a request of "
            "`sweepN`, a scheduler step of `stream`) and per block (`sweepN`: per request / "
            "N); the share a `+queue=`/`+pool=` swap explains of a whole release's saving, "
            "and what a CPU-only measurement cannot show, are in each comparison's writeup."
        ),
        table=table,
        table_label=f"Saving per request and per block: {len(table)} rows",
        fold=len(table) > 16,
        detail=True,
    )


def _history_sections(data: store.Processed, subject: str) -> list[Section]:
    """The release history of one subject (the queue's always: without a run it says
    how to make one; a stack subject's, ``BlockPool`` or ``KVCacheManager``, where its
    history was run or counted). Its key is its figure's name."""
    versions, steps, counts = (
        history_present.of_subject(t, subject)
        for t in (data.history, data.history_steps, data.count_steps)
    )
    stack = subject != schema.SUBJECT_QUEUE
    if stack and versions.empty and counts.empty:
        return []
    history_table = history_present.step_table(steps, counts)
    counted = history_present.counts_only_steps(counts, versions)
    timed = not versions.empty or counted.empty
    name = figures.HISTORY_FIGURES[subject]
    out = [
        Section(
            name,
            HISTORY_TITLES[subject],
            note=history_present.note(versions, counted),
            table=history_table if not history_table.empty else None,
            table_label=f"Release range → change in time "
            f"[{ci_header(data.settings.confidence)}] ({len(history_table)} rows)",
            # A placeholder that says how to make one when no run; none beside counts.
            figure=name if timed else None,
            fold=len(history_table) > 16,
            detail=True,
        )
    ]
    if len(counted):
        section = count_history_section(counted, explain=not versions.empty)
        if stack:  # one key per section of the report: the queue's keeps the bare one
            section = replace(section, key=f"{section.key}-{subject}")
        out.append(section)
    return out


def count_history_section(counted: pd.DataFrame, explain: bool) -> Section:
    """The release steps of the histories only counted: numbered code-cost steps and the
    table of every step (:func:`kvqueue.history.history_present.count_step_table`);
    ``explain``: open with how to read counts (a timed history's note is above it)."""
    table = history_present.count_step_table(counted)
    runs = counted[["host", "interpreter", "run_id"]].drop_duplicates()
    listed = ", ".join(f"{r.host}/{r.run_id} ({r.interpreter})" for r in runs.itertuples())
    lines = history_present.count_step_lines(counted)
    return Section(
        "history-counts",
        "Release steps by instruction counts",
        level=3,
        note=(
            (history_present.COUNTS_NOTE + "\n\n" if explain else "")
            + f"Counts runs: {listed}. Release steps that changed instructions per operation "
            f"by {history_present.CODE_COST_MIN:.0%} or more (lowest to highest change over "
            "the cells):\n\n" + "\n".join(lines)
        ),
        table=table,
        table_label=f"Release step → change in instructions per operation ({len(table)} rows)",
        fold=len(table) > 16,
        detail=True,
    )


def build(data: store.Processed) -> list[Section]:
    """The report's sections in reading order.

    Parameters
    ----------
    data
        Processed tables.

    Returns
    -------
    list of Section
    """
    out = [
        Section("title", TITLE, level=1, note=intro_note(data), summary=True),
        Section(
            "summary",
            "Summary",
            note=summary_note(data),
            table=ab_tables.summary_table(data),
            table_label="Summary",
            summary=True,
        ),
        Section("forest", figures.FIGURES["forest"].title, figure="forest", summary=True),
        Section(
            "results",
            "Singleton, two-block and mixed cycles",
            note=results_note(data),
            table=ab_tables.headline_grid(data),
            table_label="Results per host × interpreter",
        ),
        Section(
            "results-ns",
            TIMES_TITLE,
            level=3,
            note=TIMES_NOTE,
            table=ab_tables.ns_grid(data),
            table_label="ns per cycle per host × interpreter",
            fold=True,
            detail=True,
        ),
    ]
    for key, opening, closing in _STACK_SECTIONS:
        cases = ab_tables.subject_cases(data, key)
        table = ab_tables.summary_table(data, cases)
        if table.empty:
            continue
        title = _SUBJECT_NAMES[key]
        out.append(
            Section(
                key,
                title,
                note=opening + "; ".join(f"{c}: {case_cycle(c)}" for c in cases) + closing,
                table=table,
                table_label=title.removeprefix("vLLM's ") + " summary",
                figure=f"forest_{key}",
            )
        )
    out.append(Section("validation", "Validation", note=prose.validation_paragraph(data)))
    aa = validation_tables.aa_table(data)
    out.append(
        Section(
            "aa",
            "Noise floor (A/A)",
            level=3,
            note=(
                "The same source measured twice as two variants: any difference is noise, so "
                "the CI must contain 0. Its half-width is shown beside the real results "
                "(column A/A ±)."
                if not aa.empty
                else "No headline run has an A/A pair (collect one with `AA=1`)."
            ),
            table=aa if not aa.empty else None,
            table_label=f"A/A comparisons ({len(aa)} cells)",
            fold=True,
            detail=True,
            writeup=False,
        )
    )
    out.append(
        Section(
            "order",
            "Order effect",
            level=3,
            note=(
                "Per process: least-squares slope of log time against the variant's position "
                "in its round (variant levels removed), shown as the change from the first to "
                "the last position (median over processes) with its bootstrap CI. WARNING "
                "marks cells where the CI excludes 0 and the effect is larger than the "
                "tightest comparison CI half-width of the cell."
            ),
            table=validation_tables.order_table(data),
            table_label="Order effect per cell",
            fold=True,
            detail=True,
            writeup=False,
        )
    )
    out.append(
        Section(
            "precision",
            "Precision",
            level=3,
            note=validation_tables.precision_note(data),
            table=validation_tables.precision_table(data),
            table_label="Half-width of every headline cell against its target",
            fold=True,
            detail=True,
            writeup=False,
        )
    )
    out.append(
        Section(
            "full",
            "Full results (main phase)",
            note=ab_tables.headline_note(data),
            detail=True,
            writeup=False,
        )
    )
    for case in HEADLINE_CASES:
        table = ab_tables.results_table(data, [case])
        if table.empty:
            continue
        out.append(
            Section(
                f"case-{case}",
                case_title(case),
                level=3,
                note=ab_tables.case_note(case, data),
                table=table,
                table_label=f"{case_title(case)}: {len(table)} rows",
                fold=True,
                detail=True,
                writeup=False,
            )
        )
    gap = ab_tables.floor_gap_table(data)
    if not gap.empty:
        out.append(
            Section(
                "floor-gap",
                "Gap to the lower bound",
                note=_floor_gap_note(data),
                table=gap,
                table_label=f"Gap closed per cell: {len(gap)} rows",
                fold=True,
                detail=True,
                writeup=False,
            )
        )
    # The queue's other cases (a stack's are all in its own section above).
    others = [
        c
        for c in ab_tables.present_cases(data, "main")
        if c not in HEADLINE_CASES and schema.is_case(schema.SUBJECT_QUEUE, c)
    ]
    if others:
        table = ab_tables.results_table(data, others)
        out.append(
            Section(
                "other-cases",
                "Other cases",
                note="; ".join(f"{c}: {case_cycle(c)}" for c in others) + ".",
                table=table,
                table_label=f"Other cases: {len(table)} rows",
                figure="forest_all",
                fold=True,
                detail=True,
                writeup=False,
            )
        )
    queue = [c for c in data.summary["case"].unique() if schema.is_case(schema.SUBJECT_QUEUE, c)]
    cells = count_tables.agreement(data.summary, data.count_pairs, queue)
    if not cells.empty:
        table = count_tables.agreement_table(cells)
        out.append(
            Section(
                "counts",
                "Instruction counts beside time",
                note=(
                    "Each headline comparison's time reduction [95% CI] beside the reduction "
                    "in instructions per operation of the newest counts run of the same host "
                    "× interpreter (`make bench METRIC=instructions`: cachegrind, exact; "
                    "docs/design.md §13). " + count_tables.agreement_sentence(cells)
                ),
                table=table,
                table_label=f"Time vs instructions per cell: {len(table)} rows",
                fold=True,
            )
        )
    out += counts_only_sections(data)
    confirm = ab_tables.present_cases(data, "confirm")
    if confirm:
        table = ab_tables.results_table(data, confirm, phase="confirm")
        out.append(
            Section(
                "confirm",
                "Confirmation run",
                note=(
                    "A second set of fresh worker processes, run after the main phase, repeats "
                    "these cases; the statistics are computed the same way and independently "
                    "of the main phase."
                ),
                table=table,
                table_label=f"Confirmation run: {len(table)} rows",
                fold=True,
                detail=True,
                writeup=False,
            )
        )
    out.append(
        Section(
            "process-ratios",
            figures.FIGURES["process_ratios"].title,
            figure="process_ratios",
            detail=True,
        )
    )
    ns = ab_tables.ns_table(data)
    out.append(
        Section(
            "ns",
            figures.FIGURES["ns_per_variant"].title,
            table=ns,
            table_label=f"Median ns per cycle per variant (main phase): {len(ns)} rows",
            figure="ns_per_variant",
            fold=True,
            detail=True,
            writeup=False,
        )
    )
    policy_table = policy_present.display_table(data.policy)
    out.append(
        Section(
            "policy",
            "Allocation policies",
            note="\n\n".join(
                p
                for p in (
                    policy_present.note(data.policy, data.settings.confidence),
                    prose.replaced_policy_runs(data.policy),
                )
                if p
            ),
            table=policy_table if not policy_table.empty else None,
            table_label=(
                f"Steady state per policy, host × interpreter × regime ({len(policy_table)} rows)"
            ),
            figure="policy",  # drawn even without a policy run: it then says so
            fold=True,
            detail=True,
        )
    )
    for subject in schema.SUBJECTS:
        out += _history_sections(data, subject)
    out += [
        Section("environment", "Environment", note="\n".join(prose.environment_lines(data))),
        Section(
            "machines",
            "Machines and interpreters",
            level=3,
            table=provenance.environment_table(data),
            table_label="Machine and interpreter of every headline run",
            fold=True,
            detail=True,
            writeup=False,
        ),
        Section(
            "variants",
            "Variants",
            level=3,
            note=(
                "sha256 prefixes of the class source and of the file it was cut from; the "
                "full digests (one row per run and variant) are in "
                "`data/processed/variants.csv`."
            ),
            table=provenance.variants_table(data),
            table_label="Variants of the headline runs",
            fold=True,
            detail=True,
        ),
        Section("methods", "Methods", note=prose.methods_paragraph(data), detail=True),
        Section("reproduce", "Reproduce", note=prose.reproduce_commands(data)),
        Section(
            "runs",
            "Provenance: every run found",
            note=provenance.runs_note(data),
            table=(runs_table := provenance.runs_table(data)),
            table_label=f"Runs ({len(runs_table)})",
            fold=True,
            detail=True,
        ),
    ]
    return out
