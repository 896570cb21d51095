"""Generated prose: the methods paragraph, the reproduce commands and ``pr-writeup.md``.

Every number in the text comes from the processed tables (run parameters recorded in
``run.json`` and the analysis settings); nothing is typed in by hand.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from kvqueue import analysis, processed, stats, tables

TITLE = "FreeKVCacheBlockQueue benchmark"


def _na(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value))


def _num(value: object) -> str:
    if _na(value):
        return "?"
    f = float(value)  # type: ignore[arg-type]
    return f"{int(f):,}" if f.is_integer() else f"{f:g}"


def _words(value: object) -> list[str]:
    return [] if _na(value) else str(value).split()


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
        planned += sum(0 if _na(v) else int(v) for v in group[col])
    pinned = sum(0 if _na(v) else int(v) for v in group["pinned_processes"])
    seeds = list(dict.fromkeys(str(x) for x in group["run_seed"]))
    text = (
        f"Run{'s' if len(group) > 1 else ''} {ids}: {_num(r['processes'])} fresh worker "
        f"processes timed the cases {cases} on pools of {pools} blocks"
    )
    if not _na(r["confirm_processes"]) and int(r["confirm_processes"]) > 0 and confirm:
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
    if not _na(r["warmup_ms"]):
        text += f", after a {_num(r['warmup_ms'])} ms warm-up"
    text += (
        f"; pools were built before timing; garbage collection during timing: {r['gc']}; "
        f"CPU choice `{r['cpu']}` ({pinned} of {planned} processes pinned to one CPU); "
        f"run seed{'s' if len(seeds) > 1 else ''} {_and(seeds)}."
    )
    if not _na(r["quick"]) and bool(r["quick"]):
        text += " This was a QUICK smoke run."
    return text


def _gate_sentence(data: processed.Processed, heads: pd.DataFrame) -> str:
    """State the validation-gate outcome as recorded in run.json, never assume it."""
    v = data.variants.merge(heads[["host", "run_id"]], on=["host", "run_id"])
    passed = v["gate_ok"].fillna(False).astype(bool)
    if len(v) and passed.all():
        ops = v["gate_ops_checked"].dropna()
        ops_text = f" ({int(ops.min()):,} or more checked operations each)" if len(ops) else ""
        return (
            f"Every variant of every headline run ({len(v)} in all) passed the validation "
            f"gate{ops_text}: a seeded "
            "differential check against a list model plus an invalid-operation comparison "
            "with the baseline, run before anything was timed."
        )
    missing = ", ".join(sorted(set(v.loc[~passed, "label"])))
    return f"The run metadata records no passed validation gate for: {missing}."


def methods_paragraph(data: processed.Processed) -> str:
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
    key = heads[design_cols].map(lambda v: "" if _na(v) else str(v)).agg("|".join, axis=1)
    designs = [_design_sentence(g) for _, g in heads.groupby(key, sort=False)]
    blocks = _and(sorted({f"`{b}`" for b in heads["block_source"].dropna()}))
    ci = f"{s.confidence * 100:g}%"
    parts = [
        (
            f"Each host × interpreter is represented by its newest complete run "
            f"({len(heads)} run{'s' if len(heads) > 1 else ''}; all runs found are listed "
            "with the data). "
        )
        + " ".join(designs),
        f"All variants of a run shared one `KVCacheBlock` class (from {blocks}), so only "
        f"the queue code differs. {_gate_sentence(data, heads)}",
        (
            "For each process p we take the median ns per cycle m(p) of its samples and the "
            "paired ratio r(p) = m_candidate(p) / m_baseline(p). The reduction is "
            f"1 − median_p r(p), with a {ci} bootstrap confidence interval that resamples "
            f"processes (`scipy.stats.bootstrap`, {s.method} method, {s.resamples:,} "
            f"resamples, seed {s.seed}; no interval with fewer than {stats.MIN_PROCESSES} "
            "processes, where no interval for a median can reach 95% coverage). Baseline and "
            "candidate ns per cycle are medians "
            "over processes of m(p), aggregated independently; noise is the median sample "
            "coefficient of variation within a process. The verdict uses only the CI: "
            f'"{stats.no_change_label(s.delta)}" when the CI lies within ±{s.delta * 100:g}%, '
            '"faster" when it lies above 0, "slower" when below 0, otherwise '
            '"inconclusive". An order-effect check estimates, per process, the slope of log '
            "time against the variant's position in its round (variant levels removed) and "
            "reports the implied last-versus-first change with its CI; an A/A pair (the same "
            "source measured twice) gives the noise floor, whose CI must contain 0."
        ),
    ]
    return "\n\n".join(parts)


def _variants_arg(data: processed.Processed, run: pd.Series) -> tuple[list[str], bool]:
    v = data.variants[
        (data.variants["host"] == run["host"]) & (data.variants["run_id"] == run["run_id"])
    ]
    v = v.sort_values("position")
    aa = not _na(run["aa"]) and bool(run["aa"])
    sources = [
        r.source
        for r in v.itertuples(index=False)
        if not (aa and analysis.aa_original(r.label) is not None)
    ]
    return sources, aa


def reproduce_commands(data: processed.Processed) -> str:
    """Shell commands that re-collect each headline run and rebuild the report.

    Parameters
    ----------
    data
        Processed tables.

    Returns
    -------
    str
        A fenced ``sh`` code block (Markdown).
    """
    lines = []
    heads = data.headline_runs()
    commits = sorted({str(c) for c in heads["commit"].dropna()})
    if len(commits) == 1:
        lines.append(f"git checkout {commits[0]}   # project commit of the runs")
    if heads["dirty"].fillna(False).astype(bool).any():
        lines.append("# note: some runs were made from a tree with uncommitted changes (dirty)")
    for _, r in heads.iterrows():
        sources, aa = _variants_arg(data, r)
        args = [
            f"HOST={shlex.quote(str(r['host']))}",
            f"PYTHON={shlex.quote(str(r['python_executable']))}",
            f"VARIANTS={shlex.quote(' '.join(sources))}",
            f"PROCESSES={_num(r['processes']).replace(',', '')}",
            f"CONFIRM_PROCESSES={_num(r['confirm_processes']).replace(',', '')}",
            f"SAMPLES={_num(r['samples']).replace(',', '')}",
            f"SAMPLE_MS={_num(r['sample_ms']).replace(',', '')}",
            f"SEED={r['run_seed']}",
            f"CASES={shlex.quote(str(r['cases']))}",
            f"POOLS={shlex.quote(str(r['pools']))}",
            f"CPU={shlex.quote(str(r['cpu']))}",
        ]
        if aa:
            args.append("AA=1")
        if not _na(r["quick"]) and bool(r["quick"]):
            args.append("QUICK=1")
        if len(commits) > 1 and not _na(r["commit"]):
            lines.append(f"git checkout {r['commit']}")
        lines.append(f"# {r['host']}, {r['interpreter']} (run {r['run_id']})")
        # host/interpreter, variants, design numbers, case selection: one line each
        groups = [args[0:2], args[2:3], args[3:8], args[8:]]
        lines.append("make bench " + " \\\n    ".join(" ".join(g) for g in groups if g))
    lines.append("make report   # rebuilds data/processed, reports/report.html, this writeup")
    return "```sh\n" + "\n".join(lines) + "\n```"


def claims(data: processed.Processed, case: str = "alloc1") -> list[str]:
    """One-sentence claims (Markdown bullets) for a headline case, one per table row.

    Parameters
    ----------
    data
        Processed tables.
    case
        The case (default: the singleton cycle).

    Returns
    -------
    list of str
    """
    s = data.summary
    rows = s[
        (s["phase"] == "main")
        & (s["kind"] == analysis.PAIR)
        & (s["case"] == case)
        & s["headline"].fillna(False)
    ]
    order = {p: i for i, p in enumerate(data.settings.pairs)}
    rows = rows.assign(
        _pair=[order.get(k, 99) for k in zip(rows["candidate"], rows["baseline"], strict=True)]
    ).sort_values(["_pair", "host", "interpreter", "pool"])
    ci = tables.ci_header(data.settings.confidence)
    out = []
    for r in rows.itertuples(index=False):
        more_less = "less" if r.reduction >= 0 else "more"
        out.append(
            f"- `{r.candidate}` vs `{r.baseline}`, {r.host}, {r.interpreter}, pool "
            f"{tables.fmt_pool(r.pool)}: {case} cycles take "
            f"{abs(r.reduction) * 100:.1f}% {more_less} time [{ci} "
            f"{r.ci_low * 100:.1f}, {r.ci_high * 100:.1f}]; "
            f"{r.baseline_ns:,.1f} → {r.candidate_ns:,.1f} ns; faster in "
            f"{round(r.share_faster * r.n_processes)}/{r.n_processes} processes "
            f"(**{r.verdict}**)"
        )
    return out


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
    s = data.settings
    pairs = _and([f"`{c}` vs `{b}`" for c, b in s.pairs])
    out = [
        f"## {TITLE}",
        "",
        f"Paired, order-randomized A/B comparison of {pairs} (when a run has both). "
        "Positive reduction = the candidate takes less time.",
        "",
    ]
    bullets = claims(data, "alloc1")
    if bullets:
        out += ["**Singleton cycles (alloc1):**", "", *bullets, ""]
    out += [f"_{tables.headline_note(data)}_", ""]
    for case in tables.HEADLINE_CASES:
        out += [
            f"### {tables.CASE_TITLES[case]}",
            "",
            f"_{tables.case_note(case, data)}_",
            "",
            tables.to_markdown(tables.results_table(data, [case])),
            "",
        ]
    gap = tables.floor_gap_table(data)
    if not gap.empty:
        out += [
            "### Gap to the lower bound",
            "",
            "_Share of the time gap between the baseline and the check-free lower bound "
            "(a bound, not a candidate) that the candidate closes: "
            "(m_baseline − m_candidate) / (m_baseline − m_bound)._",
            "",
            tables.to_markdown(gap),
            "",
        ]
    aa = tables.aa_table(data)
    if not aa.empty:
        out += [
            "### Noise floor (A/A)",
            "",
            tables.aa_summary(data),
            "",
            tables.to_markdown(aa),
            "",
        ]
    out += [
        "### Methods",
        "",
        methods_paragraph(data),
        "",
        tables.order_summary(data),
        "",
        "### Reproduce",
        "",
        reproduce_commands(data),
        "",
    ]
    if figures:
        links = ", ".join(f"[{name}]({figures_rel}/{Path(p).name})" for name, p in figures.items())
        out += [f"Figures (in `reports/{figures_rel}/`): {links}.", ""]
    out += [
        "<details><summary>Environment and provenance</summary>",
        "",
        tables.to_markdown(tables.environment_table(data)),
        "",
        tables.to_markdown(tables.variants_table(data)),
        "",
        tables.to_markdown(tables.runs_table(data)),
        "",
        "</details>",
        "",
    ]
    return "\n".join(out)


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
