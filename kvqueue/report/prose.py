"""Generated prose of the report: paragraphs, sentences and commands, in Markdown.

The methods paragraph, the validation paragraph, one line of environment per host and
the commands that reproduce the runs. Every number in the text comes from the
processed tables (run parameters recorded in ``run.json`` and the analysis settings);
nothing is typed in by hand. :mod:`kvqueue.report.sections` places these texts in the report.
"""

from __future__ import annotations

import json
import shlex
from typing import Any, NamedTuple

import pandas as pd

from kvqueue import schema
from kvqueue.ab import ab_analysis, validation_tables
from kvqueue.formatting import fmt_pct, is_na
from kvqueue.processed import store
from kvqueue.stats import paired_stats


def _num(value: object) -> str:
    if is_na(value):
        return "?"
    f = float(value)  # type: ignore[arg-type]
    return f"{int(f):,}" if f.is_integer() else f"{f:g}"


def _words(value: object) -> list[str]:
    return [] if is_na(value) else str(value).split()


def _and(items: list[str]) -> str:
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + f" and {items[-1]}"


def _design_sentence(group: pd.DataFrame) -> str:
    """Describe the timing design of runs that share their parameters."""
    r = group.iloc[0]
    ids = _and([f"`{x}`" for x in group["run_id"]])
    pools = _and([f"{int(p):,}" for p in _words(r["pools"])])
    cases = ", ".join(f"`{c}`" for c in _words(r["cases"]))
    confirm = ", ".join(f"`{c}`" for c in _words(r["confirm_cases"]))
    planned = 0
    for col in ("processes_planned_main", "processes_planned_confirm"):
        planned += sum(0 if is_na(v) else int(v) for v in group[col])
    pinned = sum(0 if is_na(v) else int(v) for v in group["pinned_processes"])
    seeds = list(dict.fromkeys(str(x) for x in group["run_seed"]))
    text = (
        f"Run{'s' if len(group) > 1 else ''} {ids}: {_num(r['processes'])} fresh worker "
        f"processes timed the cases {cases} on pools of {pools} blocks"
    )
    if not is_na(r["confirm_processes"]) and int(r["confirm_processes"]) > 0 and confirm:
        text += (
            f", and a confirmation run of {_num(r['confirm_processes'])} further processes "
            f"repeated {confirm}"
        )
    text += (
        f". Every process took {_num(r['samples'])} samples per case, pool and variant, each "
        f"a calibrated number of complete cycles lasting about {_num(r['sample_ms'])} ms "
        "(`time.perf_counter_ns()` around the loop; one loop count per case and pool, "
        "shared by all variants), with the order of the variants shuffled in every sample "
        "round"
    )
    if not is_na(r["warmup_ms"]):
        text += f", after a {_num(r['warmup_ms'])} ms warm-up"
    text += (
        f"; pools were built before timing; garbage collection during timing: {r['gc']}; "
        f"CPU choice `{r['cpu']}` ({pinned} of {planned} processes pinned to one CPU); "
        f"run seed{'s' if len(seeds) > 1 else ''} {_and(seeds)}."
    )
    if not is_na(r["quick"]) and bool(r["quick"]):
        text += " This was a QUICK smoke run."
    return text


#: What each subject's gate checks (the methods' and validation's words).
_GATE_TEXT = {
    schema.SUBJECT_QUEUE: "a seeded differential check against a list model plus an "
    "invalid-operation comparison with the baseline",
    schema.SUBJECT_POOL: "a seeded script of allocations, cache hits with touch, frees in "
    "eviction order, eviction by exhaustion and resets run on every pool and the baseline "
    "pool in lockstep, every call's result and the whole pool state compared, with the "
    "pool's invariants checked after every call",
    schema.SUBJECT_MANAGER: "a seeded trace of scheduler steps (admissions, decode "
    "allocations, preemptions, frees) replayed on every manager and the baseline manager "
    "in lockstep, every admission's hits, every running request's block ids, the free "
    "count and the cached blocks compared after every step, with the manager's "
    "invariants (free + held = the pool, reference counts = holders) checked",
}
#: How a subject's gate is introduced when another subject's comes first.
_GATE_FOR = {
    schema.SUBJECT_QUEUE: "for the queues, ",
    schema.SUBJECT_POOL: "for the pools, ",
    schema.SUBJECT_MANAGER: "for the managers, ",
}


def _gate_sentence(data: store.Processed, heads: pd.DataFrame) -> str:
    """State the validation-gate outcome as recorded in run.json, never assume it."""
    v = data.variants.merge(heads[["host", "run_id"]], on=["host", "run_id"])
    passed = v["gate_ok"].fillna(False).astype(bool)
    if len(v) and passed.all():
        present = set(v["label"].map(schema.subject_of_label))
        ops = v["gate_ops_checked"].dropna()
        ops_text = f" ({int(ops.min()):,} or more checked operations each)" if len(ops) else ""
        what = []
        for subject in (s for s in schema.SUBJECTS if s in present):
            # Each subject's gate in its own words; after the first, named.
            what.append(("" if not what else _GATE_FOR[subject]) + _GATE_TEXT[subject])
        return (
            f"Every variant of every headline run ({len(v)} in all) passed the validation "
            f"gate{ops_text}: {'; '.join(what)}, run before anything was timed."
        )
    missing = ", ".join(sorted(set(v.loc[~passed, "label"])))
    return f"The run metadata records no passed validation gate for: {missing}."


def _block_sentence(heads: pd.DataFrame, blocks: str) -> str:
    """What the variants of the headline runs shared: one block class (the queue
    subject), or nothing (each pool is its release's whole allocation path)."""
    subjects = heads["baseline"].map(schema.subject_of_label)
    out = []
    if (subjects == schema.SUBJECT_QUEUE).any():
        out.append(
            f"All variants of a {'queue ' if not subjects.eq(schema.SUBJECT_QUEUE).all() else ''}"
            f"run shared one `KVCacheBlock` class (from {blocks}), so only the queue code "
            "differs."
        )
    if (subjects == schema.SUBJECT_POOL).any():
        out.append(
            "Each pool variant is vLLM's whole `BlockPool` of its source with that source's "
            "own `KVCacheBlock` and `FreeKVCacheBlockQueue` (a `+queue=` variant: the queue "
            "named), loaded without torch; events off, no metrics collector."
        )
    if (subjects == schema.SUBJECT_MANAGER).any():
        out.append(
            "Each manager variant is vLLM's whole `KVCacheManager` stack of its source "
            "(coordinator, single-type manager, `BlockPool`, queue, block and `Request` of "
            "that source; a `+queue=` or `+pool=` variant: the part named), loaded without "
            "torch; events and statistics off."
        )
    return " ".join(out)


def methods_paragraph(data: store.Processed) -> str:
    """The methods paragraph (Markdown) with the real parameters of the headline runs.

    Parameters
    ----------
    data
        Processed tables.

    Returns
    -------
    str
    """
    s = data.settings
    heads = data.headline_runs()
    if heads.empty:
        return "No complete run was found, so there are no results to describe."
    design_cols = [
        "processes",
        "confirm_processes",
        "samples",
        "sample_ms",
        "warmup_ms",
        "pools",
        "cases",
        "confirm_cases",
        "cpu",
        "gc",
        "quick",
    ]
    # Runs with the same design share one sentence (missing values compare equal).
    key = heads[design_cols].map(lambda v: "" if is_na(v) else str(v)).agg("|".join, axis=1)
    designs = [_design_sentence(g) for _, g in heads.groupby(key, sort=False)]
    blocks = _and(sorted({f"`{b}`" for b in heads["block_source"].dropna()}))
    ci = f"{s.confidence * 100:g}%"
    parts = [
        (
            f"Each host × interpreter is represented by its newest full-protocol run "
            f"({len(heads)} run{'s' if len(heads) > 1 else ''}; all runs found are listed "
            "with the data). "
        )
        + " ".join(designs),
        _block_sentence(heads, blocks) + " " + _gate_sentence(data, heads),
        (
            "For each process p we take the median ns per cycle m(p) of its samples and the "
            "paired ratio r(p) = m_candidate(p) / m_baseline(p). The reduction is "
            f"1 − median_p r(p), with {_ci_method_sentence(s, ci)} (no interval with fewer "
            f"than {paired_stats.MIN_PROCESSES} processes, where no interval for a median "
            "can reach "
            "95% coverage). Baseline and "
            "candidate ns per cycle are medians "
            "over processes of m(p), aggregated independently; noise is the median sample "
            "coefficient of variation within a process. The verdict uses only the CI: "
            f'"{paired_stats.no_change_label(s.delta)}" when the CI lies within '
            f"±{s.delta * 100:g}%, "
            '"faster" when it lies above 0, "slower" when below 0, otherwise '
            '"inconclusive". An order-effect check estimates, per process, the slope of log '
            "time against the variant's position in its round (variant levels removed) and "
            "reports the implied last-versus-first change with its CI; an A/A pair (the same "
            "source measured twice) gives the noise floor, whose CI must contain 0."
        ),
    ]
    return "\n\n".join(parts)


def _variants_arg(data: store.Processed, run: pd.Series) -> tuple[list[str], bool]:
    v = data.variants[
        (data.variants["host"] == run["host"]) & (data.variants["run_id"] == run["run_id"])
    ]
    v = v.sort_values("position")
    aa = not is_na(run["aa"]) and bool(run["aa"])
    sources = [
        _variant_arg(r.label, r.source, getattr(r, "commit", ""))
        for r in v.itertuples(index=False)
        if not (aa and ab_analysis.aa_original(r.label) is not None)
    ]
    return sources, aa


def _variant_arg(label: str, source: str, commit: object) -> str:
    """One ``VARIANTS`` word as the run recorded it: ``label=source`` when the label was
    given (``mine=git:REPO@mine``), and a git ref pinned to the commit it resolved to
    (a branch names another commit tomorrow)."""
    source = schema.pin_git_ref(source, None if is_na(commit) else str(commit))
    return source if label == source else f"{label}={source}"


#: Make assignments per line of a reproduce command (keeps lines under ~90 characters).
_ARGS_PER_LINE = 5


def _bench_args(data: store.Processed, r: pd.Series) -> tuple[tuple[str, ...], ...]:
    """The ``make bench`` arguments of one run but ``HOST`` and ``PYTHON``, a few to a
    line: the variants, then every other parameter as the run recorded it
    (:func:`kvqueue.params.bench_params.make_assignments`), so the command still repeats the run
    after a default changes."""
    sources, _ = _variants_arg(data, r)
    assigned = [f"{var}={shlex.quote(text)}" for var, text in json.loads(str(r["make_args"]))]
    return (f"VARIANTS={shlex.quote(' '.join(sources))}",), *_lines(assigned)


def _lines(words: list[str]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(words[i : i + _ARGS_PER_LINE]) for i in range(0, len(words), _ARGS_PER_LINE))


class CommandRun(NamedTuple):
    """One run as a reproduce command sees it (:func:`make_commands`)."""

    host: str
    run_id: str
    interpreter: str
    executable: str
    commit: str  # the project commit of the run ('' unknown)
    args: tuple[tuple[str, ...], ...]  # every assignment but HOST and PYTHON, per line


def ledger_runs(data: store.Processed, runs: pd.DataFrame) -> list[CommandRun]:
    """The :class:`CommandRun` of each ``host``/``run_id`` row of ``runs``, from the
    ``ledger`` (what each run's ``run.json`` recorded); a run the ledger does not know
    gets no arguments. ``host`` may be a host key (``label#2``: another CPU under that
    label); the command takes the label the run was made with, as the ledger has it."""
    known = data.ledger.drop_duplicates("run_id").set_index("run_id") if len(data.ledger) else None
    out = []
    for r in runs.itertuples(index=False):
        row = None
        host = str(r.host)
        if known is not None and r.run_id in known.index:
            row = known.loc[r.run_id]
        args: tuple[tuple[str, ...], ...] = ()
        executable = commit = ""
        if row is not None:
            host = str(row["host"])
            commit = "" if is_na(row["commit"]) else str(row["commit"])
            executable = "" if is_na(row["python_executable"]) else str(row["python_executable"])
            if not is_na(row["make_args"]):
                pairs = json.loads(str(row["make_args"]))
                args = _lines([f"{var}={shlex.quote(text)}" for var, text in pairs])
        out.append(CommandRun(host, str(r.run_id), str(r.interpreter), executable, commit, args))
    return out


def make_commands(target: str, runs: list[CommandRun]) -> list[str]:
    """Shell lines that repeat ``runs`` with ``make <target>``: the project commit to
    check out when the runs were made at more than one, then one command per run, a
    few assignments to a line; runs of one host whose arguments (and commit) agree
    except for ``PYTHON`` share one command in a loop over the interpreters."""
    lines: list[str] = []
    commits = sorted({r.commit for r in runs if r.commit})
    if len(commits) == 1:
        lines.append(f"git checkout {commits[0]}   # project commit of the runs")
    groups: dict[tuple[str, ...], list[CommandRun]] = {}
    for r in runs:
        # A run whose parameters are unknown (no ledger row) shares no loop.
        alone = () if r.args else (r.run_id,)
        key = (r.host, r.commit, *alone, *(" ".join(g) for g in r.args))
        groups.setdefault(key, []).append(r)
    for members in groups.values():
        first = members[0]
        if len(commits) > 1 and first.commit:
            lines.append(f"git checkout {first.commit}")
        ids = ", ".join(r.run_id for r in members)
        pythons = ", ".join(r.interpreter for r in members)
        lines.append(f"# {first.host}, {pythons} (run{'s' if len(members) > 1 else ''} {ids})")
        rest = [list(g) for g in first.args]
        host = f"HOST={shlex.quote(first.host)}"
        if len(members) == 1:
            head = host
            if first.executable:
                head += f" PYTHON={shlex.quote(first.executable)}"
            # What is unknown goes in a comment: "<...>" would be a shell redirection.
            unknown = []
            if not first.executable:
                unknown.append(f"{first.interpreter}: PYTHON=<that interpreter>")
            if not first.args:
                unknown.append("parameters not recorded, see its run.json")
            if unknown:  # its own line: a comment would swallow a line continuation
                lines.append("# " + "; ".join(unknown))
            lines.append(f"make {target} " + " \\\n    ".join(" ".join(g) for g in [[head], *rest]))
            continue
        executables = [shlex.quote(r.executable or "python3") for r in members]
        lines.append("for py in " + " \\\n    ".join(executables) + "; do")
        head = f'{host} "PYTHON=$py"'
        lines.append(f"  make {target} " + " \\\n      ".join(" ".join(g) for g in [[head], *rest]))
        lines.append("done")
    return lines


def reproduce_commands(data: store.Processed) -> str:
    """Shell commands that re-collect each headline run and rebuild the report.

    Runs of one host that differ only in the interpreter share one command in a loop
    over the interpreters (in the order of the headline runs).

    Parameters
    ----------
    data
        Processed tables.

    Returns
    -------
    str
        A fenced ``sh`` code block (Markdown).
    """
    heads = data.headline_runs()
    runs = []
    for _, r in heads.iterrows():
        commit = "" if is_na(r["commit"]) else str(r["commit"])
        runs.append(
            CommandRun(
                str(r["host"]),
                str(r["run_id"]),
                str(r["interpreter"]),
                str(r["python_executable"]),
                commit,
                _bench_args(data, r),
            )
        )
    lines = make_commands("bench", runs)
    if heads["dirty"].fillna(False).astype(bool).any():
        lines.insert(0, "# note: some runs were made from a tree with uncommitted changes (dirty)")
    lines.append("make report   # rebuilds data/processed, reports/report.html, reports/writeups/")
    return "```sh\n" + "\n".join(lines) + "\n```"


def validation_paragraph(data: store.Processed) -> str:
    """One paragraph (Markdown): the validation gate, the A/A noise floor, the order effect.

    Parameters
    ----------
    data
        Processed tables.

    Returns
    -------
    str
    """
    heads = data.headline_runs()
    if heads.empty:
        return "No complete run was found, so nothing was validated."
    parts = [f"**Gate.** {_gate_sentence(data, heads)}"]
    aa = data.summary[
        (data.summary["kind"] == ab_analysis.AA) & data.summary["headline"].fillna(False)
    ]
    n_aa_runs = aa[["host", "run_id"]].drop_duplicates().shape[0]
    if aa.empty:
        parts.append(
            "**Noise floor.** No headline run has an A/A pair (collect one with `AA=1`), "
            "so the noise floor was not measured."
        )
    else:
        half = ((aa["ci_high"] - aa["ci_low"]) / 2).dropna()
        text = (
            f"**Noise floor.** {n_aa_runs} of {len(heads)} headline runs measured the "
            "baseline twice (an A/A pair, whose CI must contain 0)"
        )
        if len(half):
            text += (
                f"; the A/A CI half-widths are {fmt_pct(half.min(), 2)} to "
                f"{fmt_pct(half.max(), 2)} (median {fmt_pct(half.median(), 2)})"
            )
        parts.append(f"{text}. {validation_tables.aa_summary(data)}".rstrip())
    parts.append(f"**Order effect.** {validation_tables.order_summary(data)}")
    return " ".join(parts)


def _unique(values: pd.Series) -> str:
    seen = list(dict.fromkeys(str(v) for v in values if not is_na(v)))
    return " / ".join(seen) if seen else "not recorded"


def environment_lines(data: store.Processed) -> list[str]:
    """One Markdown bullet per host: machine, interpreters and project state of its runs.

    Parameters
    ----------
    data
        Processed tables (headline runs).

    Returns
    -------
    list of str
    """
    out = []
    heads = data.headline_runs()
    for host, g in heads.groupby("host", sort=True):
        planned = sum(
            0 if is_na(v) else int(v)
            for col in ("processes_planned_main", "processes_planned_confirm")
            for v in g[col]
        )
        pinned = sum(0 if is_na(v) else int(v) for v in g["pinned_processes"])
        dirty = int(g["dirty"].fillna(False).astype(bool).sum())
        commits = _unique(g["commit"].map(lambda c: str(c)[:12] if not is_na(c) else c))
        state = f"{dirty} of {len(g)} runs from a dirty tree" if dirty else "clean tree"
        text = (
            f"- **{host}**: {_unique(g['cpu_model'])}, {_unique(g['cpu_count'])} CPUs, "
            f"{_unique(g['platform'])}"
        )
        governor = _unique(g["governor"])
        if governor != "not recorded":
            text += f", governor {governor}"
        text += (
            f"; {_and(list(dict.fromkeys(g['interpreter'])))} ({_unique(g['python_compiler'])}); "
            f"{pinned} of {planned} processes pinned to one CPU; GC while timing "
            f"{_unique(g['gc'])}; project commit {commits} ({state})."
        )
        out.append(text)
    return out


def _ci_method_sentence(s: Any, ci: str) -> str:
    """How the reduction's interval is computed, with its measured coverage."""
    if s.method == paired_stats.ORDER_STATISTIC:
        return (
            f"the {ci} order-statistic confidence interval of the median, interpolated "
            "between adjacent order statistics (Hettmansperger & Sheather 1986; no "
            "resampling). Chosen by measured coverage (`methods/coverage.py`): over "
            "n = 6-31 processes and Gaussian, Student-t3, contaminated, skewed and "
            "outlying process effects it covered 94.1-95.7% in simulation (the percentile "
            "bootstrap used before: 92-94% at n >= 11), and 302 of the 320 A/A intervals "
            "of the runs committed on 2026-11-29 (94.4%) contain 0. Order-effect and "
            f"floor-gap intervals are percentile bootstraps ({s.resamples:,} resamples, seed "
            f"{s.seed})"
        )
    return (
        f"a {ci} bootstrap confidence interval that resamples processes "
        f"(`scipy.stats.bootstrap`, {s.method} method, {s.resamples:,} resamples, seed "
        f"{s.seed})"
    )


def replaced_policy_runs(policy: pd.DataFrame) -> str:
    """The line naming each steady-state policy run that a newer run of the same host ×
    interpreter × variant × regime replaces, beside the run shown ('' when none): the
    report shows the newest of each (:mod:`kvqueue.policy.policy_analysis`)."""
    if policy.empty:
        return ""
    steady = policy[policy["protocol"] == schema.POLICY_PROTOCOL]
    key = ["host", "interpreter", "variant", "regime"]

    def what(rows: pd.DataFrame) -> str:
        windows = sorted({str(w) for w in rows["window"].dropna() if str(w)}, key=_window_rank)
        n = rows["n_processes"].max()
        return f"windows {' '.join(windows) or 'none'}, {'?' if is_na(n) else int(n)} processes"

    parts = []
    for (host, interp, variant, regime), grp in steady.groupby(key, sort=True):
        shown = grp[grp["headline"].fillna(False).astype(bool)]
        older = grp[~grp["run_id"].isin(shown["run_id"])]
        if shown.empty or older.empty:
            continue
        new_id = str(shown["run_id"].iloc[0])
        olds = "; ".join(
            f"{host}/{rid} ({what(rows)})" for rid, rows in older.groupby("run_id", sort=True)
        )
        parts.append(
            f"{host}, {interp}, `{variant}`, {regime or 'no regime'}: shown {new_id} "
            f"({what(shown)}); not shown {olds}"
        )
    if not parts:
        return ""
    return (
        "Several runs of one host × interpreter × variant × regime: the newest is shown and "
        "replaces the older (their figures are not combined; `make report RUNS=...` shows "
        "an older one). " + " · ".join(parts) + "."
    )


def _window_rank(window: str) -> float:
    try:
        return float(window)
    except ValueError:
        return float("inf")


#: vLLM PR #21005's claim for the manager: the sizes it names (blocks per request) and
#: its words, quoted beside the measured saving of the matching ``sweepN``.
PR_21005_CLAIM = '"up to ~1 ms TTFT savings"'
PR_21005_BLOCKS = (10, 1000)


def _claim_cell(r: Any) -> str:
    """One sweep's measured saving per request: instructions, and time where timed."""
    text = f"{r.case} {r.saving_instr:+,.0f} instructions" if not is_na(r.saving_instr) else r.case
    if not is_na(r.saving_ns):
        text += f" / {r.saving_ns / 1000:+,.1f} µs"
        if not is_na(r.saving_ns_low) and not is_na(r.saving_ns_high):
            text += f" [{r.saving_ns_low / 1000:+,.1f}, {r.saving_ns_high / 1000:+,.1f}]"
    return text


def cpu_only_note(savings: pd.DataFrame) -> str:
    """What a CPU-only measurement of the manager cannot show, and vLLM PR #21005's TTFT
    claim beside the measured saving per request of the sweeps of its sizes
    (:func:`kvqueue.ab.count_tables.request_savings`: instructions; time only where a
    timed run measured the cell, never converted from instructions). Markdown."""
    text = (
        "These figures are the scheduler's CPU work in vLLM's KV-cache manager, measured "
        "without a GPU: they cannot show GPU time, the model, how requests are batched on "
        "the GPU, or how the scheduler's step overlaps the GPU's. They are not "
        "extrapolated to time to first token (TTFT): a saving per request bounds its "
        "effect on TTFT only where the scheduler's step is on the critical path."
    )
    lo, hi = PR_21005_BLOCKS
    sweeps = savings[savings["blocks"].between(lo, hi)] if len(savings) else savings
    if sweeps.empty:
        return text
    timed = sweeps["saving_ns"].notna().any()
    lines = []
    for (host, interp), grp in sweeps.groupby(["host", "interpreter"], sort=True):
        lines.append(f"- {host}, {interp}: " + "; ".join(_claim_cell(r) for r in grp.itertuples()))
    unit = (
        "instructions per request, and where a timed run measured the cell the time it "
        "saved per request (paired, 95% CI)"
        if timed
        else "instructions per request; no timed run measured these cells, so these are "
        "instructions, not time: a count is never converted to time"
    )
    return (
        text + f"\n\nvLLM PR #21005 claims {PR_21005_CLAIM} for requests of {lo:,} to {hi:,} "
        f"blocks. Measured here, the saving per request of the sweeps of those sizes ({unit}):"
        + "\n\n"
        + "\n".join(lines)
    )
