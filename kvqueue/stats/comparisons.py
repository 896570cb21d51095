"""Which comparisons a run makes: configured pairs, else candidates vs the baseline, plus A/A.

One definition for the report (:mod:`kvqueue.ab.ab_analysis`) and for the precision target
(:mod:`kvqueue.measure.process_sizing`), so that a run sizes itself for exactly the intervals the
report will show. Standard library only (the runner and the bare worker side use it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

#: ``kind`` of a comparison of two different sources.
PAIR = "pair"
#: ``kind`` of a comparison of a source with its own copy (``X#2`` vs ``X``).
AA = "aa"


def comparisons_for_run(
    labels: Sequence[str],
    baseline: str,
    bound_labels: Iterable[str],
    pairs: Sequence[tuple[str, str]],
) -> list[tuple[str, str, str]]:
    """Return the ``(candidate, baseline, kind)`` comparisons made within one run.

    Parameters
    ----------
    labels
        The run's variant labels.
    baseline
        The run's baseline label.
    bound_labels
        Labels of lower bounds (never a candidate of a fallback comparison).
    pairs
        Configured pairs; those whose two labels are in the run are used.

    Returns
    -------
    list of tuple
        Configured pairs present in the run; when none is present, every candidate
        (not an A/A copy, not a bound) against the run's baseline, so any run still
        gets compared. Plus one ``"aa"`` comparison ``X#k`` vs ``X`` per A/A copy.
    """
    present = set(labels)
    bounds = set(bound_labels)
    out = [(c, b, PAIR) for c, b in pairs if c in present and b in present and c != b]
    if not out:
        out = [
            (lab, baseline, PAIR)
            for lab in labels
            if lab != baseline and lab not in bounds and aa_original(lab) is None
        ]
    out.extend((lab, orig, AA) for lab in labels if (orig := aa_original(lab)) in present)
    return out


def aa_original(label: str) -> str | None:
    """Return ``X`` for an A/A copy label ``X#2`` (``X#3``, ...), else ``None``."""
    base, sep, num = label.rpartition("#")
    return base if sep and base and num.isdigit() and int(num) >= 2 else None
