"""Raw history runs -> the processed ``history`` and ``history_steps`` tables.

A history run (``run.json`` ``kind: "history"``, :mod:`kvqueue.history.history_collect`) times one
representative release per distinct queue version, newest first, in every process. Per
run, case and pool:

- **per version**: ns per cycle = the median over processes of the per-process medians,
  with the interpolated order-statistic interval of that median
  (:func:`kvqueue.stats.paired_stats.order_statistic_interval`, the report's interval), and the
  paired ratio to the newest version (median over processes of the per-process ratio,
  same interval);
- **per step** between consecutive versions in release order: the paired change in
  time, ``median_p(m(p, newer) / m(p, older)) - 1``, with its interval, and the exact
  two-sided sign test of "the newer is as often faster as slower" (``p_value``, the test
  the order-statistic interval inverts). A release history makes many tests at once
  (16 steps x 4 cases x 4 interpreters = 256 in the committed answer: about 13 false
  cells at 95 % when nothing changed), so a cell is *significant* only when its interval
  excludes 0 **and** it holds up under the Benjamini-Hochberg false-discovery control
  at ``1 - confidence`` over every step x cell test of its answer (the headline runs
  together; any other run alone). A step is labelled with the release range it spans
  (the last release of the older version -> the first of the newer, plus "also in" the
  newer's earlier releases when its releases are not consecutive).

Tables ``history`` and ``history_steps`` (schema.PROCESSED_TABLES). The ``headline`` run
per host x interpreter, which the report shows (:mod:`kvqueue.history.history_present`), is the
newest *full* history (releases not given, the default cases and pools): a later
``RELEASES="0.31.0 0.32.0"`` or ``CASES=alloc1`` run does not replace it. Without a full
one, the newest reduced run is shown, and the text says what it left out. A *host* is
one CPU under one label (:mod:`kvqueue.rawdata.host_keys`): the ``host`` column holds the
run's host key (``label``, or ``label#2`` for runs on the label's second CPU), so a
history on one CPU never supersedes one on another.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from kvqueue import schema
from kvqueue.params.history_params import history_defaults
from kvqueue.rawdata import host_keys, raw_reader
from kvqueue.sources.versions import step_range
from kvqueue.stats import paired_stats


def _versions(meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run's versions, oldest first (run.json lists them newest first)."""
    return list(reversed((meta.get(schema.HISTORY_KEY) or {}).get("versions") or []))


def _span(version: Mapping[str, Any]) -> str:
    releases = version["releases"]
    if not releases:  # a user's own source (NEWEST): no release shipped it
        return str(version["label"])
    if version.get("non_consecutive"):
        return ", ".join(releases)  # a range would claim the releases in between
    return releases[0] if len(releases) == 1 else f"{releases[0]}–{releases[-1]}"


def reduced(meta: Mapping[str, Any]) -> str:
    """What a history run left out of the full history ('' for a full one)."""
    hist = meta.get(schema.HISTORY_KEY) or {}
    given = meta.get("parameters") or {}
    defaults = history_defaults(given.get("subject"))
    out = ["releases given"] if hist.get("releases_given") else []
    for name in ("cases", "pools"):
        have = [str(x) for x in given.get(name) or ()]
        if not {str(x) for x in defaults[name]} <= set(have):
            out.append(f"{name} {' '.join(have)}")
    return "; ".join(out)


def _headline_ids(runs: list[raw_reader.Run], keys: host_keys.HostKeys | None = None) -> set[str]:
    """Per host key x interpreter x subject (the queue's history and the pool's are two
    answers): the newest full history, else the newest reduced one."""
    best: dict[tuple[str, str, str], tuple[bool, str, str]] = {}
    for run in runs:
        subject = str((run.meta.get("parameters") or {}).get("subject") or schema.SUBJECT_QUEUE)
        key = (host_keys.host_key(keys, run.host, run.run_id), run.interpreter, subject)
        rank = (not reduced(run.meta), str(run.meta.get("started_at")), run.run_id)
        if key not in best or rank > best[key]:
            best[key] = rank
    return {rank[2] for rank in best.values()}


def analyze(
    raw: raw_reader.RawData,
    confidence: float = paired_stats.DEFAULT_CONFIDENCE,
    keys: host_keys.HostKeys | None = None,
) -> dict[str, pd.DataFrame]:
    """Compute ``history`` and ``history_steps`` from the included history runs.

    ``keys``: the host key of every run (:func:`kvqueue.rawdata.host_keys.host_cpus` of
    every run of the raw data; default: of ``raw``'s runs, any kind).
    """
    if keys is None:
        keys = host_keys.host_cpus(raw)[0]
    runs = [r for r in raw.of_kind(schema.KIND_HISTORY).included if _versions(r.meta)]
    headline = _headline_ids(runs, keys)
    rows: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    for run in runs:
        versions = _versions(run.meta)
        labels = [v["label"] for v in versions]
        base = run.meta["baseline"]
        samples = run.samples
        assert samples is not None
        main = samples[samples["phase"] == "main"]
        medians = paired_stats.process_medians(main, by=["case", "pool"])
        run_reduced = reduced(run.meta)
        ident = {
            "host": host_keys.host_key(keys, run.host, run.run_id),
            "interpreter": run.interpreter,
            "run_id": run.run_id,
            "headline": run.run_id in headline,
        }
        for (case, pool), cell in medians.groupby(["case", "pool"], sort=False):
            wide = cell.pivot(index="process", columns="variant", values="median_ns")
            for order, version in enumerate(versions):
                label = version["label"]
                if label not in wide:
                    continue
                ns = paired_stats.order_statistic_interval(
                    wide[label].dropna(), confidence=confidence
                )
                ratio = paired_stats.order_statistic_interval(
                    (wide[label] / wide[base]).dropna(), confidence=confidence
                )
                rows.append(
                    {
                        **ident,
                        "case": case,
                        "pool": int(pool),
                        "version": label,
                        "order": order,
                        "reduced": run_reduced,
                        "releases": _span(version),
                        "first_release": (version["releases"] or [label])[0],
                        "last_release": (version["releases"] or [label])[-1],
                        "adapter": version.get("adapter") or "",
                        "n_processes": ns.n,
                        "ns": ns.estimate,
                        "ns_low": ns.low,
                        "ns_high": ns.high,
                        "ratio_to_newest": ratio.estimate,
                        "ratio_low": ratio.low,
                        "ratio_high": ratio.high,
                    }
                )
            for older, newer in itertools.pairwise(versions):
                a, b = older["label"], newer["label"]
                if a not in wide or b not in wide or a not in labels:
                    continue
                r = paired_stats.order_statistic_interval(
                    (wide[b] / wide[a]).dropna(), confidence=confidence
                )
                low, high = r.low - 1.0, r.high - 1.0
                ratios = (wide[b] / wide[a]).dropna().to_numpy()
                steps.append(
                    {
                        **ident,
                        "case": case,
                        "pool": int(pool),
                        "from_version": a,
                        "to_version": b,
                        "release_range": step_range(older, newer),
                        "n_processes": r.n,
                        "change": r.estimate - 1.0,
                        "ci_low": low,
                        "ci_high": high,
                        "p_value": sign_test(ratios),
                        "excludes_0": bool(
                            math.isfinite(low) and math.isfinite(high) and (low > 0 or high < 0)
                        ),
                    }
                )
    return {
        "history": _frame(rows, "history"),
        "history_steps": _frame(discoveries(steps, 1.0 - confidence), "history_steps"),
    }


def sign_test(ratios: np.ndarray) -> float:
    """Exact two-sided sign test of ``median(ratios) == 1``: ties dropped, NaN with no
    untied process. The order-statistic interval of the median is its inversion."""
    above, below = int((ratios > 1.0).sum()), int((ratios < 1.0).sum())
    n = above + below
    if n == 0:
        return math.nan
    tail = paired_stats.scipy_stats().binom.cdf(min(above, below), n, 0.5)
    return float(min(1.0, 2.0 * tail))


def benjamini_hochberg(p_values: Sequence[float], q: float) -> list[bool]:
    """Which of ``p_values`` the Benjamini-Hochberg procedure rejects at level ``q``
    (NaN: never rejected, and not counted as a test)."""
    ranked = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    m, cut = len(ranked), -1
    for k, (p, _) in enumerate(ranked, start=1):
        if p <= q * k / m:
            cut = k
    rejected = [False] * len(p_values)
    for _, i in ranked[: max(cut, 0)]:
        rejected[i] = True
    return rejected


def discoveries(steps: list[dict[str, Any]], q: float) -> list[dict[str, Any]]:
    """``steps`` with ``significant``: the interval excludes 0 and the cell holds up under
    :func:`benjamini_hochberg` over its answer's tests (the headline runs of a subject
    together, any other run alone)."""
    families: dict[str, list[int]] = {}
    for i, s in enumerate(steps):
        # Each subject's history (queue, pool, manager) answers its own question: one
        # family per subject.
        answer = schema.subject_of_label(s.get("from_version", ""))
        families.setdefault(answer if s["headline"] else s["run_id"], []).append(i)
    significant = [False] * len(steps)
    for members in families.values():
        kept = benjamini_hochberg([steps[i]["p_value"] for i in members], q)
        for i, k in zip(members, kept, strict=True):
            significant[i] = k and steps[i]["excludes_0"]
    return [
        {**{k: v for k, v in s.items() if k != "excludes_0"}, "significant": sig}
        for s, sig in zip(steps, significant, strict=True)
    ]


def _frame(rows: list[dict[str, Any]], name: str) -> pd.DataFrame:
    spec = schema.PROCESSED_TABLES[name]
    df = pd.DataFrame(rows, columns=list(spec))
    df = df.astype(spec)
    keys = ["host", "interpreter", "run_id", "case", "pool"]
    keys += ["order"] if name == "history" else ["release_range"]
    return df.sort_values(keys, kind="stable").reset_index(drop=True)
