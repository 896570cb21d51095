"""The sections of one question's writeup (:mod:`kvqueue.report.writeup`), and its figures.

A writeup is a pull-request description of one question (:mod:`kvqueue.report.questions`)
and holds nothing else:

- **A/B comparison**: a one-sentence verdict over every measured case, what was compared
  (title and one paragraph), the answer (summary per case and host, forest plot, results
  per host × interpreter), the times behind it (folded), every other measured case
  (folded), validation, environment, methods and variants (folded), the reproduce
  commands, the runs used (folded);
- **release history**: the versions compared, each significant step with its change
  (range over the cells), the figure, per step a folded diff of the queue and block
  classes (:mod:`kvqueue.history.history_diffs`), the full step table and the method (folded),
  the reproduce commands;
- **policy study**: the policy section of the report, and the reproduce command;
- a pair or a history that only **instruction counts** measured: the verdict (changes of
  1 % or more), how to read counts (deterministic, not wall time), the cells or steps, the
  reproduce commands;
- a pair whose counts run wrote ``where.csv``: where the instructions moved, folded,
  under the diff of the code measured (:mod:`kvqueue.ab.where_tables`).

Every section is built from the question's scoped data; a part without data is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pandas as pd

from kvqueue import schema
from kvqueue.ab import ab_analysis, ab_tables, count_tables, where_tables
from kvqueue.ab.ab_tables import HEADLINE_CASES, case_cycle
from kvqueue.formatting import ci_header, fmt_signed_ci, fmt_signed_pct, is_na
from kvqueue.history import history_diffs, history_present
from kvqueue.policy import policy_present
from kvqueue.processed import store
from kvqueue.report import figures, frames, prose, provenance, questions, sections
from kvqueue.report.questions import Question
from kvqueue.report.sections import TIMES_NOTE, TIMES_TITLE, Section
from kvqueue.stats import count_figures, manager_layers, paired_stats

#: Figures of each kind of question (keys of :data:`kvqueue.report.figures.FIGURES`, or
#: ``forest`` drawn for the selected cases).
_FIGURES = {
    questions.AB: ("forest", "process_ratios"),
    questions.HISTORY: ("history",),
    questions.POLICY: ("policy",),
}


def cases_shown(data: store.Processed, cases: Sequence[str]) -> list[str]:
    """The selected cases that the question's runs measured (in the report's case order)."""
    present = ab_tables.present_cases(data, "main")
    return [c for c in present if c in cases]


def figure_names(question: Question, cases: Sequence[str] = HEADLINE_CASES) -> list[str]:
    """The figures the question's writeup links (none for an A/B question without cases)."""
    if question.kind == questions.AB and not cases_shown(question.data, cases):
        return []
    if question.kind == questions.HISTORY and question.data.history.empty:
        return []  # a history only counted: its steps are a list and a table
    names = _FIGURES[question.kind]
    if question.kind == questions.HISTORY:
        return [figures.HISTORY_FIGURES[question.subject]]
    return [forest_name(question) if n == "forest" else n for n in names]


def forest_name(question: Question) -> str:
    """The forest figure of an A/B question: its subject's (a pool's, a manager's)."""
    return figures.FOREST_FIGURES[question.subject]


def draw(question: Question, name: str, folder: Path, cases: Sequence[str]) -> Path:
    """Draw one figure of the question into ``folder`` (or copy it from the build cache:
    :func:`kvqueue.report.figures.cached`) and return the PNG's path."""
    if name in figures.FOREST_FIGURES.values():
        shown = cases_shown(question.data, cases)
        draw_forest = lambda: figures.forest(question.data, cases=shown)  # noqa: E731
        return figures.cached(
            question.data, name, ("summary",), folder, draw_forest, extra=repr(shown)
        )
    return figures.draw(question.data, name, folder)


def build(question: Question, cases: Sequence[str] = HEADLINE_CASES) -> list[Section]:
    """The sections of the question's writeup, in reading order.

    Parameters
    ----------
    question
        The question and its scoped data.
    cases
        Cases of the A/B tables.

    Returns
    -------
    list of Section
    """
    if question.kind == questions.AB:
        if question.data.summary.empty and len(question.data.count_pairs):
            return _counts_ab(question)
        return _ab(question, cases)
    if question.kind == questions.HISTORY:
        if question.data.history.empty:
            return _counts_history(question)
        return _history(question)
    return _policy(question)


# ---------------------------------------------------------------------------------------
# A/B comparison


def _drop_comparison(table: pd.DataFrame) -> pd.DataFrame:
    # One comparison per writeup: its name is the title, not a column.
    if table.empty or "Comparison" not in table.columns:
        return table
    out = table.drop(columns="Comparison")
    out.attrs = {
        k: [c for c in v if c != "Comparison"] if isinstance(v, list) else v
        for k, v in table.attrs.items()
    }
    return out


def _ab_intro(question: Question, shown: list[str], cases: Sequence[str]) -> str:
    data = question.data
    cand, base = question.pair or ("?", "?")
    heads = data.headline_runs()
    hosts, pythons = heads["host"].nunique(), heads["interpreter"].nunique()
    text = (
        f"Paired, order-randomized A/B timing of `{cand}` (candidate) against `{base}` "
        f"(baseline) on {hosts} host{'s' if hosts != 1 else ''} × {pythons} "
        f"interpreter{'s' if pythons != 1 else ''}: the newest run of each that compared "
        "them. *Reduction* = 1 − median over processes of the per-process time ratio "
        "candidate/baseline (> 0: the candidate is faster, < 0: slower)."
    )
    few = heads[heads["processes"].fillna(0).astype(float) < paired_stats.MIN_PROCESSES]
    if len(few):
        text += (
            f" {len(few)} of {len(heads)} runs have fewer than {paired_stats.MIN_PROCESSES} "
            "processes: their intervals read n/a (too few processes)."
        )
    missing = [c for c in cases if c not in shown]
    if missing:
        text += (
            f" Not measured in these runs: {', '.join(f'`{c}`' for c in missing)} "
            "(select cases with `make report CASES=...`)."
        )
    if shown:
        text += " " + "; ".join(f"{c}: {case_cycle(c)}" for c in shown) + "."
    return text


def _ab(question: Question, cases: Sequence[str]) -> list[Section]:
    data = question.data
    shown = cases_shown(data, cases)
    # Every measured case is in the writeup: the selected ones first, the rest folded.
    measured = ab_tables.present_cases(data, "main")
    others = [c for c in measured if c not in shown]
    ci = ci_header(data.settings.confidence)
    verdict = ab_tables.verdict_sentence(data, measured)
    intro = _ab_intro(question, shown, cases)
    stack = _stack_sections(question, data.count_pairs, data.summary)
    if verdict and stack:
        verdict = _with_saving(verdict, _savings(question))
    out = [
        Section(
            "title",
            question.title,
            level=1,
            note=f"**{verdict}**\n\n{intro}" if verdict else intro,
        )
    ]
    if shown:
        summary = _drop_comparison(ab_tables.summary_table(data, shown))
        grid = _drop_comparison(ab_tables.headline_grid(data, shown))
        times = _drop_comparison(ab_tables.ns_grid(data, shown))
        out += [
            Section(
                "summary",
                "Answer",
                note=(
                    "Per case and host: the lowest and the highest reduction over its "
                    f"interpreters and pools, each with its {ci}, and the verdicts."
                ),
                table=summary,
            ),
            Section(
                "forest",
                figures.FIGURES[forest_name(question)].title,
                level=3,
                figure=forest_name(question),
            ),
            Section(
                "results",
                "Results per host × interpreter",
                level=3,
                note=f"Reduction [{ci}] and verdict, pools (blocks) side by side.",
                table=grid,
            ),
            Section(
                "results-ns",
                TIMES_TITLE,
                level=3,
                note=TIMES_NOTE,
                table=times,
                detail=True,
            ),
        ]
    if others:
        out.append(
            Section(
                "results-other",
                f"The other measured cases ({', '.join(others)})",
                level=3,
                note=f"Reduction [{ci}] and verdict per host × interpreter, pools side by "
                "side, as above; `make report CASES=...` selects the cases shown first. "
                + "; ".join(f"{c}: {case_cycle(c)}" for c in others)
                + ".",
                table=_drop_comparison(ab_tables.headline_grid(data, others)),
                detail=True,
            )
        )
    # Instruction counts of the same pair, where a counts run measured it: the claims
    # above are time (paired processes); this table says what instructions back.
    pairs = data.count_pairs
    if len(pairs) and question.pair is not None:
        cand, base = question.pair
        pairs = pairs[(pairs["candidate"] == cand) & (pairs["baseline"] == base)]
    cells = count_tables.agreement(data.summary, pairs, measured) if len(pairs) else pairs
    if len(cells):
        out.append(
            Section(
                "counts",
                "Instruction counts beside time",
                level=3,
                note="Time reduction [95% CI] (the metric of the answer above) beside the "
                "instruction reduction per operation of a counts run of the same host × "
                "interpreter (`METRIC=instructions`, cachegrind, exact). "
                + count_tables.agreement_sentence(cells),
                table=count_tables.agreement_table(cells),
                detail=True,
            )
        )
    only = count_tables.counts_only(pairs, data.summary) if len(pairs) else pairs
    if len(only) and question.pair is not None:
        out.append(_counts_only_section(data, only, question.pair, level=3))
    out += _where_sections(question)
    out += _layer_sections(question)
    out += stack
    out += [
        Section("validation", "Validation", note=prose.validation_paragraph(data)),
        Section("environment", "Environment", note="\n".join(prose.environment_lines(data))),
        Section("methods", "Methods", note=prose.methods_paragraph(data), detail=True),
        Section(
            "variants",
            "Variants",
            note="sha256 prefixes of the class source and of the file it was cut from.",
            table=provenance.variants_table(_pair_variants(question)),
            detail=True,
        ),
    ]
    if shown:
        out.append(
            Section(
                "process-ratios",
                figures.FIGURES["process_ratios"].title,
                figure="process_ratios",
                detail=True,
            )
        )
    out += [
        Section("reproduce", "Reproduce", note=prose.reproduce_commands(data)),
        Section("runs", "Runs used", note=_runs_used(data), detail=True),
    ]
    return out


def _counts_only_section(
    data: store.Processed, rows: pd.DataFrame, pair: tuple[str, str], level: int
) -> Section:
    """The verdict, method and table of a pair's counts-only rows."""
    method = count_tables.counts_method(data.counts, sorted(set(rows["run_id"])))
    return Section(
        "counts-only",
        "Answer (instruction counts)" if level == 2 else "Instruction counts without a timed run",
        level=level,
        note=count_tables.counts_verdict(rows, *pair) + "\n\n" + method,
        table=count_tables.counts_table(rows).drop(columns="Comparison"),
        # Under a timed answer the counts are the witness: their table folds.
        table_label=f"Instructions per operation ({len(rows)} cells)",
        fold=level != 2,
    )


def _counts_ab(question: Question) -> list[Section]:
    """A pair only instruction counts measured: the verdict, the method, the cells, the
    reproduce commands and the runs used."""
    data = question.data
    cand, base = question.pair or ("?", "?")
    # A stack subject's scoped rows hold the other candidates of its runs against the
    # same baseline too (the swap shares read them): the pair's own are the answer.
    every = data.count_pairs
    rows = every[(every["candidate"] == cand) & (every["baseline"] == base)]
    runs = rows[["host", "interpreter", "run_id"]].drop_duplicates()
    intro = (
        f"Instructions executed per operation by `{cand}` (candidate) against `{base}` "
        f"(baseline), counted under cachegrind on {runs['host'].nunique()} host(s) × "
        f"{runs['interpreter'].nunique()} interpreter(s); no timed run compared them, so "
        "this says which executes fewer instructions, not how much faster or slower it is."
    )
    stack = _stack_sections(question, every, data.summary)
    if stack:
        verdict = _with_saving(
            count_tables.counts_verdict_sentence(rows, cand, base), _savings(question)
        )
        intro = f"**{verdict}**\n\n{intro}"
    used = "\n".join(f"- {r.host}/{r.run_id}: {r.interpreter}" for r in runs.itertuples())
    return [
        Section("title", question.title, level=1, note=intro),
        _counts_only_section(data, rows, (cand, base), level=2),
        *_where_sections(question),
        *_layer_sections(question),
        *stack,
        Section("reproduce", "Reproduce", note=_commands("bench", data, runs)),
        Section("runs", "Runs used", note=used, detail=True),
    ]


def _where_sections(question: Question) -> list[Section]:
    """Where the pair's instructions moved, folded: per counts run that wrote
    ``where.csv``, the diff of the code measured, the sentence and the tables of C
    functions, Python functions and lines (:mod:`kvqueue.ab.where_tables`); none
    without such a run."""
    data = question.data
    if question.pair is None or data.count_where.empty:
        return []
    note = where_tables.writeup_note(data.count_where, data.count_pairs, *question.pair)
    if not note:
        return []
    return [
        Section(
            "where",
            "Where the instructions moved: the diff measured, C functions and lines",
            level=3,
            note=note,
            detail=True,
        )
    ]


def _layer_sections(question: Question) -> list[Section]:
    """A manager pair's layers and per-call costs, from the ``func`` rows of its counts
    runs (CPython >= 3.12): where the scheduler's path spends its instructions, so that
    a queue change is read as its share of it. None without such rows."""
    data = question.data
    if question.subject != schema.SUBJECT_MANAGER or question.pair is None:
        return []
    where = data.count_where
    if where.empty or not (where["kind"] == schema.WHERE_FUNC).any():
        return []
    cand, base = question.pair
    parts = []
    funcs = where[where["kind"] == schema.WHERE_FUNC]
    for (host, python, run_id), rows in funcs.groupby(["host", "interpreter", "run_id"]):
        for case in sorted(rows["case"].unique(), key=schema.case_key):
            layers = manager_layers.layer_table(rows, [base, cand], case)
            if layers.empty:
                continue
            parts.append(
                f"**{case}** ({host}, {python}, run {run_id}):\n\n" + frames.to_markdown(layers)
            )
            calls = manager_layers.call_table(rows, [base, cand], case)
            if not calls.empty:
                parts.append(
                    f"Per scheduler call, {case} ({host}, {python}):\n\n"
                    + frames.to_markdown(calls)
                )
    if not parts:
        return []
    note = (
        "Exclusive instructions per operation of each layer of the scheduler's path, and "
        "its share of the path (the harness's own code left out): manager (manager, "
        "coordinator, single-type managers), pool (`BlockPool`, the block), queue, hashing "
        "(block hashers and hash functions), request (`Request`), generated (methods "
        "`dataclasses` generates, such as the block's `__eq__` that 0.9.x's queue calls), "
        "helpers (the release's other files). Counted once per cell under callgrind with "
        "the perf trampoline (`kvqueue.stats.manager_layers`), which makes CPython call "
        "every Python function through the C stack: these totals are higher than the counts"
        " above, so read the shares, and the counts for how much. Per call: the "
        "instructions of each of the stream's scheduler calls (inclusive, the named "
        "wrapper's own left out)." + "\n\n" + "\n\n".join(parts)
    )
    return [
        Section(
            "layers",
            "Where the scheduler's instructions go, by layer and per call",
            level=3,
            note=note,
            detail=True,
        )
    ]


def _savings(question: Question) -> pd.DataFrame:
    """The pair's saving per operation and per block
    (:func:`kvqueue.ab.count_tables.request_savings`)."""
    cand, base = question.pair or ("?", "?")
    data = question.data
    return count_tables.request_savings(data.count_pairs, data.summary, cand, base)


def _with_saving(verdict: str, savings: pd.DataFrame) -> str:
    """The verdict sentence with what the largest request saves (per request, per
    block) after it."""
    phrase = count_tables.largest_sweep_phrase(savings) if len(savings) else ""
    if not verdict or not phrase:
        return verdict
    return verdict.rstrip(".") + "; " + phrase + "."


#: The subjects whose writeup reads the saving per request and per block, the share a
#: swap explains and what a CPU-only measurement cannot show (the manager: what the
#: scheduler calls per request).
_PER_REQUEST_SUBJECTS = (schema.SUBJECT_MANAGER,)


def _stack_sections(
    question: Question, pairs: pd.DataFrame, summary: pd.DataFrame
) -> list[Section]:
    """A manager comparison's own sections: the saving per request and per block
    (instructions; time where a timed run measured it), the share of a whole candidate's
    saving a ``+queue=``/``+pool=`` swap explains
    (:func:`kvqueue.stats.count_figures.swap_shares`), and what a CPU-only measurement
    cannot show, with vLLM PR #21005's claim beside the matching sweeps. None for
    another subject."""
    if question.subject not in _PER_REQUEST_SUBJECTS or question.pair is None:
        return []
    cand, base = question.pair
    savings = count_tables.request_savings(pairs, summary, cand, base)
    if savings.empty:
        return []
    shares = count_tables.swap_shares_of(pairs, cand, base)
    note = (
        "What the candidate saves per operation (one request of `sweepN`: N blocks "
        "admitted and freed with no cache hit; one scheduler step of `stream`) and per "
        "block (`sweepN`: per request / N), positive = the candidate executes fewer "
        "instructions or takes less time. Instructions are the counts' (deterministic); a "
        "time column appears only where a paired timed run measured the cell (the "
        "baseline's median time × the paired reduction, with its interval)."
    )
    swap = count_tables.swap_sentence(shares, cand)
    if swap:
        note += "\n\n" + swap
    return [
        Section(
            "per-request",
            "Saving per request and per block",
            level=3,
            note=note,
            table=count_tables.request_savings_table(savings),
            # One row per host x interpreter x case: folded, the sentence above and the
            # verdict's largest request are what a reader sees first (a manager pair
            # over two hosts' timed and counted runs read 12,912 characters unfolded).
            table_label=f"Saving per request and per block ({len(savings)} rows)",
            fold=True,
        ),
        Section(
            "cpu-only",
            "What a CPU-only measurement cannot show",
            level=3,
            note=prose.cpu_only_note(savings),
        ),
    ]


def _counts_history(question: Question) -> list[Section]:
    """A release history only instruction counts measured: the versions and runs, the
    numbered steps whose counts moved, the table of every step, the reproduce commands."""
    data = question.data
    counts = data.count_steps
    runs = counts[["host", "interpreter", "run_id"]].drop_duplicates()
    labels = list(dict.fromkeys([*counts["from_version"], *counts["to_version"]]))
    intro = (
        f"Instructions per operation of {len(labels)} distinct versions of "
        f"{_HISTORY_WHAT[question.subject]}, from `{labels[0]}` to `{labels[-1]}`, "
        f"counted under cachegrind ("
        + ", ".join(f"{r.host}/{r.run_id}, {r.interpreter}" for r in runs.itertuples())
        + "). "
        + history_present.COUNTS_NOTE
    )
    lines = history_present.count_step_lines(counts)
    # What each version costs, not only how each step changed it.
    mine = data.counts[data.counts["run_id"].isin(set(runs["run_id"]))]
    blocks = {c: n for c in mine["case"].unique() if (n := count_figures.case_blocks(c))}
    cost = history_present.count_version_line(mine, blocks)
    answer = (
        (f"Cost, oldest → newest version: {cost}.\n\n" if cost else "")
        + "Release steps whose instructions per operation changed by "
        f"{history_present.CODE_COST_MIN:.0%} or more (lowest to highest change over the "
        "cells):\n\n" + "\n".join(lines)
    )
    return [
        Section("title", question.title, level=1, note=intro),
        Section("answer", "Answer", note=answer),
        Section(
            "versions",
            "Instructions per operation of each version",
            note=_VERSION_NOTE.get(question.subject, ""),
            table=history_present.count_version_table(mine, blocks),
            fold=True,
            detail=True,
        ),
        Section(
            "steps",
            "Every release step per host × interpreter",
            table=history_present.count_step_table(counts),
            detail=True,
        ),
        Section("reproduce", "Reproduce", note=_commands("history", data, runs), detail=True),
    ]


#: What an operation of each subject's history cases is, under the table of versions.
_VERSION_NOTE = {
    schema.SUBJECT_MANAGER: "An operation of `sweepN` is one request of N blocks "
    "(`Request()`, `get_computed_blocks`, `allocate_slots` of every token, `free`), with no "
    "cache hit; of `stream`, one scheduler step (admissions, one decode token per running "
    "request, preemptions, frees). Per block: the request's instructions / N.",
    schema.SUBJECT_POOL: "An operation of `loopN` is one round of vLLM's pool benchmark "
    "loop (N blocks allocated and freed); of `churn`, one request. Per block: / N.",
}

#: What each subject's release history holds (a version: one distinct text of these).
_HISTORY_WHAT = {
    schema.SUBJECT_QUEUE: "vLLM's `FreeKVCacheBlockQueue` and `KVCacheBlock`",
    schema.SUBJECT_POOL: "vLLM's `BlockPool` (with the queue and block it runs)",
    schema.SUBJECT_MANAGER: "vLLM's `KVCacheManager` stack (coordinator, single-type "
    "managers, `BlockPool`, queue and `Request`)",
}


def _pair_variants(question: Question) -> store.Processed:
    """The data with only the pair's variants and their A/A copies (the runs' other
    variants belong to other questions; the reproduce commands still name them all)."""
    v = question.data.variants
    pair = set(question.pair or ())
    own = v["label"].map(lambda x: str(x) in pair or ab_analysis.aa_original(str(x)) in pair)
    return replace(question.data, variants=v[own])


def _runs_used(data: store.Processed) -> str:
    heads = data.headline_runs()
    return "\n".join(
        f"- {r.host}/{r.run_id}: {r.interpreter}, {_int(r.processes)} processes, "
        f"protocol {r.protocol}, {r.integrity}, git state: {r.git_state}"
        for r in heads.itertuples()
    )


def _int(value: object) -> str:
    return "?" if is_na(value) else f"{int(value):,}"  # type: ignore[call-overload]


# ---------------------------------------------------------------------------------------
# release history


def _significant(steps: pd.DataFrame) -> pd.DataFrame:
    return steps[steps["significant"].astype(bool)] if not steps.empty else steps


def _step_lines(
    steps: pd.DataFrame, numbers: dict[str, int], counts: pd.DataFrame | None = None
) -> list[str]:
    """One bullet per significant release step, numbered as in the figure: the range of
    its changes over the cells, and what the instruction counts say of it."""
    sig = _significant(steps)
    kinds = history_present.step_kinds(steps, counts)
    instr = counts if counts is not None else pd.DataFrame()
    lines = []
    for rr, number in numbers.items():
        cells = steps[steps["release_range"] == rr]
        hits = sig[sig["release_range"] == rr]
        lo = hits.loc[hits["change"].idxmin()]
        hi = hits.loc[hits["change"].idxmax()]
        text = f"{fmt_signed_pct(lo['change'])} {fmt_signed_ci(lo['ci_low'], lo['ci_high'])}"
        text += f" ({lo['case']}, {lo['interpreter']}, {lo['host']})"
        if len(hits) > 1:
            text += (
                f" to {fmt_signed_pct(hi['change'])} {fmt_signed_ci(hi['ci_low'], hi['ci_high'])}"
                f" ({hi['case']}, {hi['interpreter']}, {hi['host']})"
            )
        kind = kinds.get(rr, history_present.NOT_COUNTED)
        if kind != history_present.NOT_COUNTED and len(instr):
            mine = instr[
                (instr["from_version"] == lo["from_version"])
                & (instr["to_version"] == lo["to_version"])
            ]["instr_change"]
            text += (
                f"; instructions {fmt_signed_pct(mine.min())} to {fmt_signed_pct(mine.max())}"
                if mine.min() != mine.max()
                else f"; instructions {fmt_signed_pct(mine.min())}"
            )
        lines.append(
            f"{number}. **{rr}**: {text}; significant in {len(hits)} of {len(cells)} cells"
            + (" (not counted)" if kind == history_present.NOT_COUNTED else "")
        )
    return lines


def _ordered_steps(steps: pd.DataFrame, versions: pd.DataFrame) -> pd.DataFrame:
    order = dict(zip(versions["version"], versions["order"], strict=False))
    return steps.assign(_o=steps["to_version"].map(order)).sort_values(["_o", "host"])


def _history(question: Question) -> list[Section]:
    data = question.data
    versions, steps = data.history, data.history_steps
    head = versions.drop_duplicates(["version"]).sort_values("order")
    runs = versions[["host", "interpreter", "run_id"]].drop_duplicates()
    steps = _ordered_steps(steps, versions) if not steps.empty else steps
    hosts, pythons = runs["host"].nunique(), runs["interpreter"].nunique()
    subject = schema.subject_of_label(head["version"].iloc[0])
    what = {
        schema.SUBJECT_POOL: "ns per operation (a round of vLLM's loop, or a request) of {n} "
        "distinct versions of vLLM's `BlockPool` as each release runs it (its "
        "`block_pool.py` and what it uses of `kv_cache_utils.py`: the queue and the block)",
        schema.SUBJECT_MANAGER: "ns per operation (a request of N blocks admitted and freed, "
        "or a scheduler step) of {n} distinct versions of vLLM's `KVCacheManager` stack as "
        "each release runs it (manager, coordinator, single-type managers, `BlockPool`, "
        "queue and `Request`)",
    }.get(
        subject,
        "ns per cycle of {n} distinct versions of vLLM's `FreeKVCacheBlockQueue` and "
        "`KVCacheBlock`",
    ).format(n=len(head))
    intro = (
        f"{what}, from `{head['version'].iloc[0]}` to `{head['version'].iloc[-1]}`, "
        f"on {hosts} host{'s' if hosts != 1 else ''} × {pythons} "
        f"interpreter{'s' if pythons != 1 else ''} ("
        + ", ".join(f"{r.host}/{r.run_id}" for r in runs.itertuples())
        + "). A step's change is the median over processes of the paired per-process "
        "ratio newer/older − 1 (+ = the newer release is slower); significant: its "
        f"{ci_header(data.settings.confidence)} excludes 0 and its sign test holds up under "
        "the Benjamini-Hochberg false-discovery control over every step × cell of this "
        f"answer at {1 - data.settings.confidence:.0%}."
    )
    counts = data.count_steps
    numbers = history_present.step_numbers(steps, versions, counts)
    kinds = history_present.step_kinds(steps, counts)
    code = {rr: n for rr, n in numbers.items() if kinds.get(rr) != history_present.TIME_ONLY}
    time_only = {rr: n for rr, n in numbers.items() if rr not in code}
    lines = _step_lines(steps, code, counts)
    answer = (
        "Steps that hold up under the false-discovery control, numbered as in the figure "
        "(lowest to highest change over the cells: case, interpreter, host), where the "
        "executed code's cost changed too (instructions per operation moved by "
        f"{history_present.CODE_COST_MIN:.0%} or more):\n\n" + "\n".join(lines)
        if lines
        else "No step whose instruction counts moved holds up under the false-discovery control."
    )
    if time_only:
        answer += (
            f"\n\n<details><summary>{len(time_only)} time-only "
            f"step{'s' if len(time_only) != 1 else ''}: the time moved, the executed "
            "instructions did not (by less than "
            f"{history_present.CODE_COST_MIN:.0%}): layout or noise, not attributable to "
            "the diff</summary>\n\n"
            + "\n".join(_step_lines(steps, time_only, counts))
            + "\n\n</details>"
        )
    out = [
        Section("title", question.title, level=1, note=intro),
        Section("answer", "Answer", note=answer, figure=figures.HISTORY_FIGURES[subject]),
    ]
    sig = _significant(steps).drop_duplicates("release_range")
    sig = sig.assign(number=sig["release_range"].map(numbers)).sort_values("number")
    if not sig.empty:
        out.append(
            Section(
                "diffs",
                "What changed at each significant step",
                note=(
                    f"Unified diff of {history_diffs.compared(subject)} between the two "
                    "versions, read from the local release cache when the report was "
                    "built (never committed).\n\n"
                    + "\n\n".join(
                        f"<details><summary>{r.number}. {r.release_range}</summary>\n\n"
                        + history_diffs.step_diff(
                            _releases(versions, r.from_version, "last_release"),
                            _releases(versions, r.to_version, "first_release"),
                            subject=subject,
                        )
                        + "\n\n</details>"
                        for r in sig.itertuples()
                    )
                ),
            )
        )
    table = history_present.step_table(steps, data.count_steps)
    if not table.empty:
        out.append(
            Section(
                "steps",
                "Every significant step per host × interpreter",
                table=table,
                detail=True,
            )
        )
    counted = history_present.counts_only_steps(data.count_steps, versions)
    if len(counted):
        out.append(sections.count_history_section(counted, explain=True))
        runs = pd.concat([runs, counted[["host", "interpreter", "run_id"]].drop_duplicates()])
    out += [
        Section("method", "Method", note=history_present.note(versions), detail=True),
        Section("reproduce", "Reproduce", note=_commands("history", data, runs), detail=True),
    ]
    return out


def _releases(versions: pd.DataFrame, version: str, first: str) -> list[str]:
    """Releases that shipped a history version, in the order to look them up in the
    cache: ``first`` (the step's own release: the older version's last, the newer's
    first, as the step label names them), then the others (``[]``: not a release)."""
    prefix = schema.SUBJECT_LABEL_PREFIX[schema.subject_of_label(version)]
    own = history_diffs.release_of(version.removeprefix(prefix))
    if own is None:
        return []
    rows = versions[versions["version"] == version]
    named = [str(x) for col in (first, "first_release", "last_release") for x in rows[col].head(1)]
    return list(dict.fromkeys([*named, own]))


def _commands(target: str, data: store.Processed, runs: pd.DataFrame) -> str:
    """The Reproduce block of a history or policy writeup: ``make <target>`` with the
    parameters each run recorded (:func:`kvqueue.report.prose.make_commands`), then
    ``make report``."""
    lines = prose.make_commands(target, prose.ledger_runs(data, runs))
    return "```sh\n" + "\n".join([*lines, "make report"]) + "\n```"


# ---------------------------------------------------------------------------------------
# policy study


def _policy(question: Question) -> list[Section]:
    data = question.data
    table = policy_present.display_table(data.policy)
    # The steady-state runs the table shows; the older protocol's are named in one line
    # of the method (policy_present.older_runs) and cannot be repeated by today's code.
    shown_runs = (
        data.policy[
            (data.policy["protocol"] == schema.POLICY_PROTOCOL)
            & data.policy["headline"].fillna(False).astype(bool)
        ]
        if len(data.policy)
        else data.policy
    )
    runs = shown_runs[["host", "interpreter", "run_id", "regime"]].drop_duplicates()
    runs = runs.assign(regime=runs["regime"].fillna(""))
    older = policy_present.older_runs(data.policy)
    # The note is the method (two paragraphs), then one reading per host × interpreter ×
    # regime (about 1,000 characters each); one per regime is visible (eight visible
    # readings took 10,591 characters of 1 host × 4 interpreters' 8,000).
    method, readings, older_line = policy_present.note_parts(data.policy, data.settings.confidence)
    if older_line:
        # The line naming the older protocol's runs belongs to the method, not the answer.
        method += "\n\n" + older_line
    replaced = prose.replaced_policy_runs(data.policy)
    hosts = sorted(runs["host"].unique())
    older_text = f"{len(older)} run{'s' if len(older) != 1 else ''} of the older protocol"
    if len(runs):
        intro = (
            f"Allocation policies on the churn workload: {len(runs)} steady-state run"
            f"{'s' if len(runs) != 1 else ''} on {len(hosts)} "
            f"host{'s' if len(hosts) != 1 else ''} ({', '.join(hosts)}), each listed under "
            "Reproduce" + (f"; {older_text}, named in the method." if older else ".")
        )
    else:
        intro = f"Allocation policies on the churn workload: no steady-state run; {older_text}."
    # One reading per regime is the answer (policy_present.split_readings); the shown
    # hosts' other readings are folded, every host's numbers are in the table.
    shown, rest = policy_present.split_readings(data.policy, readings)
    answer = "\n\n".join(shown)
    if rest:
        answer += (
            f"\n\n<details><summary>The other readings of "
            f"{', '.join(sorted({r.split(',', 1)[0].strip('*') for r in shown}))} "
            f"({len(rest)}: interpreter × regime)</summary>\n\n"
            + "\n\n".join(rest)
            + "\n\n</details>"
        )
    if len(hosts) > 1:
        answer += "\n\nEvery host's figures are in the table below."
    if replaced:
        answer += "\n\n" + replaced
    # Only the older protocol measured: its runs are named, and no empty answer, figure
    # or table stands in for a steady state that no run measured.
    steady = bool(len(table))
    if not steady:
        answer = method
    table_sections = (
        [
            Section(
                "table",
                "Policy × window per host × interpreter",
                table=table,
                detail=True,
            )
        ]
        if steady
        else []
    )
    return [
        Section("title", question.title, level=1, note=intro),
        Section("answer", "Answer", note=answer, figure="policy" if steady else None),
        *([Section("method", "Method", note=method, detail=True)] if steady else []),
        *table_sections,
        Section(
            "reproduce",
            "Reproduce",
            note=_commands("policy", data, runs)
            if len(runs)
            else "```sh\nmake policy HOST=<label> REGIME=chat   # a steady-state run (none yet)"
            "\nmake report\n```",
            detail=bool(len(runs)),
        ),
    ]
