"""The questions present in the processed data, each with the tables that answer it.

A *question* is what one writeup answers (:mod:`kvqueue.report.writeup`):

- an **A/B comparison** ``candidate`` vs ``baseline`` (``mine`` vs ``base``): every host ×
  interpreter with an included run that compared the two, its newest such run (a
  full-protocol run before a reduced one, a reduced one before a quick one);
- a **release history**: the history runs whose newest point is the same source (the
  releases, or a user's own ``NEWEST=git:REPO@mine``), the headline run of each host ×
  interpreter;
- a **policy study**: the headline policy runs.

A pair or a history that only instruction counts measured (``METRIC=instructions`` runs,
no timed run of it) is a question too, its data the counts alone.

:func:`find` returns them newest first (by the newest run that answers each), each with a
:class:`~kvqueue.processed.store.Processed` scoped to it: only its rows, the ``headline``
columns recomputed so that every table and figure function of the report, given the
scoped data, shows that question and nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from kvqueue import schema
from kvqueue.ab import ab_analysis, count_tables
from kvqueue.history import history_present
from kvqueue.processed import store
from kvqueue.report import sections

AB = "ab"
HISTORY = "history"
POLICY = "policy"


@dataclass(frozen=True)
class Question:
    """One question of the data and the data scoped to it.

    Attributes
    ----------
    kind
        :data:`AB`, :data:`HISTORY` or :data:`POLICY`.
    slug
        File-name stem of its writeup (``mine-vs-base``).
    title
        What it asks, in Markdown (``\\`mine\\` vs \\`base\\```).
    newest
        Run id of the newest run that answers it (the sort key of :func:`find`).
    data
        The processed tables scoped to the question.
    pair
        ``(candidate, baseline)`` of an A/B question, else ``None``.
    """

    kind: str
    slug: str
    title: str
    newest: str
    data: store.Processed
    pair: tuple[str, str] | None = None

    @property
    def subject(self) -> str:
        """What it compares (:data:`kvqueue.schema.SUBJECTS`), by the label prefix of its
        variants (:data:`kvqueue.schema.SUBJECT_LABEL_PREFIX`): a pair's candidate, a
        history's versions; the policy study is the queue's."""
        if self.kind == HISTORY:
            labels = [*self.data.history["version"], *self.data.count_steps["from_version"]]
            return schema.subject_of_label(labels[0]) if labels else schema.SUBJECT_QUEUE
        if self.pair is None:
            return schema.SUBJECT_QUEUE
        return schema.subject_of_label(self.pair[0])


def slug(text: str) -> str:
    """A file-name stem: lower-case letters, digits, ``.`` and ``-`` (``vllm==0.32.0`` ->
    ``vllm-0.32.0``)."""
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")[:60] or "x"


def _empty(df: pd.DataFrame) -> pd.DataFrame:
    return df.iloc[0:0]


def _scoped(data: store.Processed, emptied: tuple[str, ...], **kept: Any) -> store.Processed:
    """``data`` with the tables named in ``emptied`` emptied (their columns kept) and the
    fields in ``kept`` replaced: what one question's writeup reads."""
    return replace(data, **{name: _empty(getattr(data, name)) for name in emptied}, **kept)


#: The tables only a timed A/B question reads.
_TIMED_AB = ("variants", "process_medians", "ratios", "order_effects", "floor_gap")


def _run_rank(runs: pd.DataFrame) -> pd.Series:
    """Sort key of each run as the answer of its host × interpreter: full protocol first,
    then reduced, then anything else (quick, too few processes), then the newest."""
    protocol = runs["protocol"].fillna("").astype(str)
    tier = protocol.map(lambda p: 2 if p == "full" else 1 if p.startswith("reduced") else 0)
    return tier.astype(str) + "|" + runs["run_id"].astype(str)


def _scope_ab(data: store.Processed, pair: tuple[str, str]) -> store.Processed | None:
    """The tables of one comparison (module docstring), or ``None`` if no run answers it."""
    s = data.summary
    rows = s[
        (s["kind"] == ab_analysis.PAIR) & (s["candidate"] == pair[0]) & (s["baseline"] == pair[1])
    ]
    keys = rows[["host", "run_id"]].drop_duplicates()
    runs = data.runs.merge(keys, on=["host", "run_id"])
    runs = runs[runs["included"].fillna(False).astype(bool)]
    if runs.empty:
        return None
    runs = runs.assign(_rank=_run_rank(runs)).sort_values("_rank")
    chosen = runs.groupby(["host", "interpreter"], sort=True).tail(1)[["host", "run_id"]]
    chosen_keys = set(zip(chosen["host"], chosen["run_id"], strict=True))

    def mark(df: pd.DataFrame) -> pd.DataFrame:
        if df.empty:
            return df
        on = [(h, r) in chosen_keys for h, r in zip(df["host"], df["run_id"], strict=True)]
        out = df[on].copy()
        if "headline" in out.columns:
            out["headline"] = True
        return out

    in_pair = set(pair)
    summary = mark(s)
    aa_of = summary["candidate"].map(lambda c: ab_analysis.aa_original(str(c)))
    summary = summary[
        ((summary["kind"] == ab_analysis.PAIR) & (summary["candidate"] == pair[0]))
        & (summary["baseline"] == pair[1])
        | ((summary["kind"] == ab_analysis.AA) & aa_of.isin(in_pair))
    ]
    gap = mark(data.floor_gap)
    if not gap.empty:
        gap = gap[(gap["candidate"] == pair[0]) & (gap["baseline"] == pair[1])]
    all_runs = data.runs.copy()
    all_runs["headline"] = [
        (h, r) in chosen_keys for h, r in zip(all_runs["host"], all_runs["run_id"], strict=True)
    ]
    ratios = mark(data.ratios)
    if not ratios.empty:
        shown = set(zip(summary["candidate"], summary["baseline"], strict=True))
        ratios = ratios[
            [(c, b) in shown for c, b in zip(ratios["candidate"], ratios["baseline"], strict=True)]
        ]
    variants = mark(data.variants)
    return _scoped(
        data,
        ("policy", "history", "history_steps"),
        settings=replace(data.settings, pairs=(pair,)),
        runs=all_runs[all_runs["headline"]],
        variants=variants,
        process_medians=mark(data.process_medians),
        ratios=ratios,
        summary=summary,
        order_effects=mark(data.order_effects),
        floor_gap=gap,
    )


def _ab_questions(data: store.Processed) -> list[Question]:
    s = data.summary
    if s.empty:
        return []
    main = s[(s["kind"] == ab_analysis.PAIR) & (s["phase"] == "main")]
    out = []
    for pair in dict.fromkeys(zip(main["candidate"], main["baseline"], strict=True)):
        scoped = _scope_ab(data, (str(pair[0]), str(pair[1])))
        if scoped is None:
            continue
        newest = str(scoped.runs["run_id"].max())
        out.append(
            Question(
                AB,
                f"{slug(pair[0])}-vs-{slug(pair[1])}",
                f"`{pair[0]}` vs `{pair[1]}`",
                newest,
                scoped,
                (str(pair[0]), str(pair[1])),
            )
        )
    return out


def _newest_source(history: pd.DataFrame) -> pd.Series:
    """The newest version (order max) of each history run, keyed by (host, run_id)."""
    last = history.sort_values("order").groupby(["host", "run_id"])["version"].last()
    return last


def _counted_sources(counts: pd.DataFrame) -> list[str]:
    """The newest version of each history counts run's row of ``count_steps`` (its last
    step's ``to_version``)."""
    if counts.empty:
        return []
    last = counts.groupby(["host", "run_id"], sort=False)["to_version"].last()
    return [str(last[(a, b)]) for a, b in zip(counts["host"], counts["run_id"], strict=True)]


#: What each stack subject's release history is called (its slug is ``history-<subject>``).
_HISTORY_NAMES = {schema.SUBJECT_POOL: "BlockPool", schema.SUBJECT_MANAGER: "KVCacheManager"}


def _history_title(source: str) -> tuple[str, str]:
    """(slug, title) of the release history up to ``source``: the releases of the queue
    (``history``), of a stack subject (``history-pool``, ``history-manager``), or a
    source of one's own."""
    if source.startswith("vllm=="):
        return "history", "Release history"
    subject = schema.subject_of_label(source)
    if subject in _HISTORY_NAMES and source.startswith(
        schema.SUBJECT_LABEL_PREFIX[subject] + "vllm=="
    ):
        return f"history-{subject}", f"{_HISTORY_NAMES[subject]} release history"
    return f"history-{slug(source)}", f"Release history up to `{source}`"


def _history_questions(data: store.Processed) -> list[Question]:
    h = data.history
    counts = data.count_steps
    counted = counts.assign(_newest=_counted_sources(counts)) if len(counts) else counts
    alone = history_present.counts_only_steps(counted, h)
    out = []
    timed_sources: set[str] = set()
    if not h.empty:
        newest = _newest_source(h)
        h = h.assign(_newest=[newest[(a, b)] for a, b in zip(h["host"], h["run_id"], strict=True)])
        timed_sources = set(h["_newest"].astype(str))
    for source, grp in alone.groupby("_newest", sort=True) if len(alone) else ():
        if source in timed_sources:
            continue  # shown in the timed history's writeup, beside its steps
        stem, title = _history_title(str(source))
        scoped = _scoped(
            data,
            ("runs", "summary", "policy", "history", "history_steps", "count_pairs"),
            count_steps=grp.drop(columns="_newest"),
        )
        out.append(Question(HISTORY, stem, title, str(grp["run_id"].max()), scoped))
    if h.empty:
        return out
    for source, grp in h.groupby("_newest", sort=True):
        # Per host × interpreter: the analysis's headline run where it belongs to this
        # history, else the newest run of it.
        runs = grp[["host", "interpreter", "run_id", "headline"]].drop_duplicates()
        runs = runs.assign(_k=runs["headline"].astype(bool).astype(str) + runs["run_id"])
        chosen = runs.sort_values("_k").groupby(["host", "interpreter"]).tail(1)
        keys = set(zip(chosen["host"], chosen["run_id"], strict=True))

        def pick(df: pd.DataFrame, keys: set[tuple[str, str]] = keys) -> pd.DataFrame:
            on = [(a, b) in keys for a, b in zip(df["host"], df["run_id"], strict=True)]
            return df[on].assign(headline=True)

        versions = pick(grp.drop(columns="_newest"))
        steps = pick(data.history_steps) if not data.history_steps.empty else data.history_steps
        scoped = _scoped(
            data,
            ("runs", "summary", "policy"),
            history=versions,
            history_steps=steps,
            count_steps=(
                counted[counted["_newest"] == source].drop(columns="_newest")
                if len(counted)
                else counts
            ),
        )
        stem, title = _history_title(str(source))
        out.append(Question(HISTORY, stem, title, str(versions["run_id"].max()), scoped))
    return out


def _counts_ab_questions(data: store.Processed, timed: set[tuple[str, str]]) -> list[Question]:
    """A question per pair only instruction counts answer (no timed run compared it):
    its ``count_pairs`` rows and the ``counts`` of their runs; no time table."""
    only = count_tables.counts_only(data.count_pairs, data.summary)
    out = []
    for pair in sections.counted_pairs(only, data):
        if pair in timed:
            continue  # the timed writeup shows these counts (question_sections)
        rows = only[(only["candidate"] == pair[0]) & (only["baseline"] == pair[1])]
        kept = rows
        if schema.subject_of_label(pair[0]) != schema.SUBJECT_QUEUE:
            # A stack subject's writeup sets a swap beside the whole candidates of its
            # runs (count_figures.swap_shares): their rows against the same baseline.
            kept = only[only["run_id"].isin(set(rows["run_id"])) & (only["baseline"] == pair[1])]
        scoped = _scoped(
            data,
            ("runs", "summary", *_TIMED_AB, "policy", "history", "history_steps", "count_steps"),
            settings=replace(data.settings, pairs=(pair,)),
            counts=data.counts[data.counts["run_id"].isin(set(rows["run_id"]))],
            count_pairs=kept,
        )
        stem = f"{slug(pair[0])}-vs-{slug(pair[1])}"
        out.append(
            Question(
                AB, stem, f"`{pair[0]}` vs `{pair[1]}`", str(rows["run_id"].max()), scoped, pair
            )
        )
    return out


def _policy_questions(data: store.Processed) -> list[Question]:
    p = data.policy
    if p.empty or not p["headline"].astype(bool).any():
        return []
    head = p[p["headline"].astype(bool)]
    # With the steady-state runs that a newer one replaces: the writeup names them
    # (kvqueue.report.prose.replaced_policy_runs); every table and figure reads the headline.
    replaced = p[~p["headline"].astype(bool) & (p["protocol"] == schema.POLICY_PROTOCOL)]
    scoped = _scoped(
        data,
        ("runs", "summary", "history", "history_steps"),
        policy=pd.concat([head, replaced]) if len(replaced) else head,
    )
    return [Question(POLICY, "policy", "Allocation policies", str(head["run_id"].max()), scoped)]


def find(data: store.Processed) -> list[Question]:
    """Every question of ``data``, newest first (module docstring).

    Parameters
    ----------
    data
        Processed tables (every run found).

    Returns
    -------
    list of Question
        Slugs are unique (a repeated one gets ``-2``, ``-3``, ...).
    """
    ab = _ab_questions(data)
    timed = {q.pair for q in ab if q.pair is not None}
    found = ab + _counts_ab_questions(data, timed) + _history_questions(data)
    found += _policy_questions(data)
    found.sort(key=lambda q: q.newest, reverse=True)
    seen: dict[str, int] = {}
    out = []
    for q in found:
        n = seen.get(q.slug, 0) + 1
        seen[q.slug] = n
        out.append(q if n == 1 else replace(q, slug=f"{q.slug}-{n}"))
    return out
