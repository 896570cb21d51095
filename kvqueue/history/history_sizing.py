"""What a release history's second stage is sized for: its consecutive steps, its cases.

The runner sizes a run after its pilot (:mod:`kvqueue.measure.process_sizing`) for the comparisons
its kind names (:attr:`kvqueue.measure.runner.RunKind.sizing_targets`); a history names
these (docs/design.md §11).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from kvqueue import schema
from kvqueue.measure import runner


def sizing_targets(record: Mapping[str, Any]) -> runner.SizingTargets:
    """The (candidate, baseline) pairs and cases a run is sized for.

    A release history (``kind: "history"``): each version against its predecessor
    (newer, older), the pairing of the report's step table, on every case it times; with
    the bench pairs it would fall back to each version against the newest. Any other
    record, or a history of fewer than two versions: the bench's targets
    (:func:`kvqueue.measure.runner.bench_sizing_targets`).

    Parameters
    ----------
    record
        The run's ``run.json`` object after the pilot.
    """
    versions = (record.get("history") or {}).get("versions") or []
    if record.get(schema.KIND_KEY) != schema.KIND_HISTORY or len(versions) < 2:
        return runner.bench_sizing_targets(record)
    labels = [v["label"] for v in versions]  # newest first
    pairs = tuple(itertools.pairwise(labels))
    return pairs, tuple(record["parameters"]["cases"])
