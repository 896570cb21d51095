"""The questions present in the processed data, each with the tables that answer it.

A *question* is what one writeup answers (:mod:`kvqueue.report.writeup`):

- an **A/B comparison** ``candidate`` vs ``baseline`` (``mine`` vs ``base``): every host ×
  interpreter with an included run that compared the two, its newest such run (a
  full-protocol run before a reduced one, a reduced one before a quick one);
- a **release history**: the history runs whose newest point is the same source (the
  releases, or a user's own ``NEWEST=git:REPO@mine``), the headline run of each host ×
  interpreter;
- a **policy study**: the headline policy runs.

:func:`find` returns them newest first (by the newest run that answers each), each with a
:class:`~kvqueue.processed.store.Processed` scoped to it: only its rows, the ``headline``
columns recomputed so that every table and figure function of the report, given the
scoped data, shows that question and nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import pandas as pd

from kvqueue.ab import ab_analysis
from kvqueue.processed import store

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
    def hosts(self) -> int:
        """Hosts whose runs answer the question (the writeup's size budget grows with them)."""
        if self.kind == AB:
            return int(self.data.headline_runs()["host"].nunique())
        table = self.data.history if self.kind == HISTORY else self.data.policy
        return int(table.loc[table["headline"].astype(bool), "host"].nunique())


def slug(text: str) -> str:
    """A file-name stem: lower-case letters, digits, ``.`` and ``-`` (``vllm==0.32.0`` ->
    ``vllm-0.32.0``)."""
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")[:60] or "x"


def _empty(df: pd.DataFrame) -> pd.DataFrame:
    return df.iloc[0:0]


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
    return replace(
        data,
        settings=replace(data.settings, pairs=(pair,)),
        runs=all_runs[all_runs["headline"]],
        variants=variants,
        process_medians=mark(data.process_medians),
        ratios=ratios,
        summary=summary,
        order_effects=mark(data.order_effects),
        floor_gap=gap,
        policy=_empty(data.policy),
        history=_empty(data.history),
        history_steps=_empty(data.history_steps),
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


def _history_questions(data: store.Processed) -> list[Question]:
    h = data.history
    if h.empty:
        return []
    newest = _newest_source(h)
    h = h.assign(_newest=[newest[(a, b)] for a, b in zip(h["host"], h["run_id"], strict=True)])
    out = []
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
        scoped = replace(
            data,
            runs=_empty(data.runs),
            summary=_empty(data.summary),
            policy=_empty(data.policy),
            history=versions,
            history_steps=steps,
        )
        is_release = str(source).startswith("vllm==")
        title = "Release history" + ("" if is_release else f" up to `{source}`")
        out.append(
            Question(
                HISTORY,
                "history" if is_release else f"history-{slug(str(source))}",
                title,
                str(versions["run_id"].max()),
                scoped,
            )
        )
    return out


def _policy_questions(data: store.Processed) -> list[Question]:
    p = data.policy
    if p.empty or not p["headline"].astype(bool).any():
        return []
    head = p[p["headline"].astype(bool)]
    scoped = replace(
        data,
        runs=_empty(data.runs),
        summary=_empty(data.summary),
        history=_empty(data.history),
        history_steps=_empty(data.history_steps),
        policy=head,
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
    found = _ab_questions(data) + _history_questions(data) + _policy_questions(data)
    found.sort(key=lambda q: q.newest, reverse=True)
    seen: dict[str, int] = {}
    out = []
    for q in found:
        n = seen.get(q.slug, 0) + 1
        seen[q.slug] = n
        out.append(q if n == 1 else replace(q, slug=f"{q.slug}-{n}"))
    return out
