"""The typed run record: the ``run.json`` a run of any kind starts with, and its text.

One record for every kind (bench, history, policy, counts), built in one place
(:func:`kvqueue.measure.run_folder.start_record`); its keys are :mod:`kvqueue.schema`'s.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvqueue.schema import (
    KIND_BENCH,
    KIND_COUNTS,
    KIND_HISTORY,
    KIND_KEY,
    KIND_POLICY,
    PHASES,
    RUN_KINDS,
    SCHEMA_VERSION,
)

#: Where each kind's ``run.json`` holds its ``kind`` key and its own keys (the ``extra``
#: of :class:`RunRecord`): ``(kind_at, extra_after)``. ``kind_at`` is ``None`` (not
#: written: a run without it is a bench run), ``"first"`` (the first key) or ``"extra"``
#: (just before the kind's own keys); those follow the key ``extra_after``. It is the
#: order each kind's writer has always used, so a run.json reads byte for byte as before.
RUN_LAYOUT: dict[str, tuple[str | None, str]] = {
    KIND_BENCH: (None, "process_info"),
    KIND_HISTORY: ("extra", "process_info"),
    KIND_POLICY: ("first", "parameters"),
    KIND_COUNTS: ("first", "parameters"),
}


def run_json_text(record: Mapping[str, Any]) -> str:
    """``run.json`` as text: the record as indented JSON, one final newline."""
    return json.dumps(record, indent=2) + "\n"


@dataclass(frozen=True)
class RunRecord:
    """The ``run.json`` a run of any kind (:data:`RUN_KINDS`) starts with.

    The run folder's writer (:class:`kvqueue.measure.run_folder.RunWriter`) then keeps the
    dict of :meth:`as_dict` up to date: ``processes_completed``, ``process_info``,
    ``files``, ``status`` and ``ended_at``, ``sizing`` and ``error`` when they arise.

    Every attribute but ``kind`` and ``extra`` is the :data:`RUN_KEYS` entry of the same
    name, as the run starts.

    Attributes
    ----------
    kind
        What the run measures; it decides where ``kind`` and ``extra`` go
        (:data:`RUN_LAYOUT`).
    extra
        The kind's own keys: ``history`` for a release history; ``workload`` and
        ``policies`` for a policy run; none for a bench run.
    """

    kind: str
    run_id: str
    host: str
    started_at: str
    machine: Mapping[str, Any]
    python: Mapping[str, Any]
    baseline: str
    variants: Sequence[Mapping[str, Any]]
    parameters: Mapping[str, Any]
    launcher: Mapping[str, Any]
    seeds: Mapping[str, Any]
    project: Mapping[str, Any]
    processes_planned: Mapping[str, int]
    extra: Mapping[str, Any] = field(default_factory=dict)
    status: str = "running"
    ended_at: str | None = None
    schema_version: int = SCHEMA_VERSION

    def as_dict(self) -> dict[str, Any]:
        """The ``run.json`` object, keys in the order of :data:`RUN_LAYOUT` (a deep copy,
        so the writer may update it in place).

        Raises
        ------
        ValueError
            An ``extra`` key is one of the common keys, or the kind is unknown.
        """
        if self.kind not in RUN_LAYOUT:
            raise ValueError(f"unknown run kind {self.kind!r} (known: {', '.join(RUN_KINDS)})")
        kind_at, extra_after = RUN_LAYOUT[self.kind]
        common: dict[str, Any] = {
            "schema_version": self.schema_version,
            "run_id": self.run_id,
            "host": self.host,
            "status": self.status,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "machine": self.machine,
            "python": self.python,
            "baseline": self.baseline,
            "variants": self.variants,
            "parameters": self.parameters,
            "launcher": self.launcher,
            "seeds": self.seeds,
            "project": self.project,
            "processes_planned": self.processes_planned,
            "processes_completed": {phase: 0 for phase in PHASES},
            "process_info": [],
        }
        clash = sorted(set(self.extra) & {KIND_KEY, *common})
        if clash:
            raise ValueError(f"run.json keys of the kind clash with common keys: {clash}")
        own = {KIND_KEY: self.kind} if kind_at == "extra" else {}
        own.update(self.extra)
        out: dict[str, Any] = {KIND_KEY: self.kind} if kind_at == "first" else {}
        for key, value in common.items():
            out[key] = value
            if key == extra_after:
                out.update(own)
        return copy.deepcopy(out)

    def to_json(self) -> str:
        """The ``run.json`` text of :meth:`as_dict` (:func:`run_json_text`)."""
        return run_json_text(self.as_dict())
