"""One HOST label = one CPU (issue 26.3): the host key of every run folder.

A label whose runs (of any kind: bench, history, policy, counts) carry two CPU
identities (:func:`cpu_identity`) holds two machines as far as the report can tell.
:func:`host_cpus` numbers a label's CPUs once, over all its runs: runs on the first
keep the label as their *host key*, runs on the *n*-th get ``label#n``. Every question
keys its tables on the host key, so a run on one CPU never supersedes (hides) a run on
another, and the label is named with a warning. Pure computation on run metadata.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kvqueue import hostinfo
from kvqueue.rawdata import raw_reader

#: ``{(host, run_id): host key}`` (:func:`host_cpus`).
HostKeys = Mapping[tuple[str, str], str]


def _recency(run: raw_reader.Run) -> tuple[float, str]:
    # Oldest first by start time; the run id (a UTC stamp first) breaks ties.
    return (run.started.timestamp() if run.started else float("-inf"), run.run_id)


def host_key(keys: HostKeys | None, host: str, run_id: str) -> str:
    """The host key of run ``host``/``run_id`` in ``keys`` (the label when not split)."""
    return (keys or {}).get((host, run_id), host)


#: What a run's ``note`` ends with when its host label holds runs on several CPUs: the
#: host key of its CPU (:func:`host_cpus`), e.g. ``"headline; CPU xeon-vm-2core#2"``.
CPU_TAG = "; CPU "


def cpu_identity(machine: Mapping[str, Any]) -> tuple[tuple[str, str], ...] | None:
    """What says which CPU a run's ``machine`` record was measured on, as a comparable key.

    Parameters
    ----------
    machine
        ``run.json`` ``machine``.

    Returns
    -------
    tuple or None
        ``(field, value as JSON)`` pairs: the model name and every field of
        :data:`kvqueue.hostinfo.CPU_IDENTITY_FIELDS` that ``machine.cpu`` holds; the
        model name alone for a run recorded before ``machine.cpu`` existed (or where
        nothing of it was readable); ``None`` when not even the model name is known.
    """
    name = machine.get("cpu_model")
    cpu = machine.get("cpu") if isinstance(machine.get("cpu"), dict) else {}
    found = [f for f in hostinfo.CPU_IDENTITY_FIELDS if cpu.get(f) is not None]
    if name is None and not found:
        return None
    # JSON (keys sorted) makes a dict of caches and an int comparable and hashable.
    pairs = [
        ("cpu_model", json.dumps(name)),
        *((f, json.dumps(cpu[f], sort_keys=True)) for f in found),
    ]
    return tuple(pairs)


def _describe_cpu(machine: Mapping[str, Any]) -> str:
    """One line naming a CPU identity: ``Xeon [GenuineIntel family 6 model 207 ...]``."""
    cpu = machine.get("cpu") if isinstance(machine.get("cpu"), dict) else {}
    name = str(machine.get("cpu_model") or "unnamed CPU")
    parts = []
    ids = [
        f"{label} {cpu[f]}"
        for f, label in (("family", "family"), ("model", "model"), ("stepping", "stepping"))
        if cpu.get(f) is not None
    ]
    if cpu.get("vendor") is not None or ids:
        parts.append(" ".join([str(cpu.get("vendor", "")), *ids]).strip())
    if cpu.get("processor") is not None:
        parts.append(f"processor {cpu['processor']}")
    if cpu.get("flags_sha256") is not None:
        parts.append(f"flags {str(cpu['flags_sha256'])[:12]}")
    if isinstance(cpu.get("caches"), dict):
        parts.append("caches " + " ".join(f"{k} {v}" for k, v in sorted(cpu["caches"].items())))
    if cpu.get("cache_size") is not None:
        parts.append(f"cache size {cpu['cache_size']}")
    # A run without machine.cpu is compared on its model name only: say so, since two
    # CPUs under that name cannot be told apart.
    return f"{name} [{' · '.join(parts) or 'model name only'}]"


def host_cpus(
    raw: raw_reader.RawData | Iterable[raw_reader.Run],
) -> tuple[dict[tuple[str, str], str], dict[str, str]]:
    """Split each host label by the CPUs its runs were measured on.

    A label's CPUs are the distinct :func:`cpu_identity` keys of its runs, numbered by
    first appearance (oldest run first): runs of the first keep the label as their host
    key, runs of the *n*-th get ``label#n``. A run with no identity at all (no model name)
    cannot be placed and keeps the label. Runs recorded before ``machine.cpu`` existed
    are compared on the model name alone, so a label whose old runs lack it and whose new
    runs carry it is split too: the report cannot tell that they are one CPU.

    Parameters
    ----------
    raw
        The runs to group: every run of the raw data, of any kind (one numbering of a
        label's CPUs for every question).

    Returns
    -------
    keys
        ``{(host, run_id): host key}`` for every run of ``raw``.
    warnings
        ``{host: warning}`` for every label holding runs on more than one CPU; the
        wording of :func:`_host_warning`.
    """
    runs = raw.runs if isinstance(raw, raw_reader.RawData) else tuple(raw)
    by_host: dict[str, list[raw_reader.Run]] = {}
    for run in sorted(runs, key=_recency):
        by_host.setdefault(run.host, []).append(run)
    keys: dict[tuple[str, str], str] = {}
    warnings: dict[str, str] = {}
    for host, runs in by_host.items():
        number: dict[tuple[tuple[str, str], ...], int] = {}
        members: dict[int, list[raw_reader.Run]] = {}
        for run in runs:
            ident = cpu_identity(run.meta.get("machine") or {})
            n = 1 if ident is None else number.setdefault(ident, len(number) + 1)
            keys[run.host, run.run_id] = host if n == 1 else f"{host}#{n}"
            if ident is not None:
                members.setdefault(n, []).append(run)
        if len(number) > 1:
            warnings[host] = _host_warning(host, members)
    return keys, warnings


def _host_warning(host: str, members: Mapping[int, Sequence[raw_reader.Run]]) -> str:
    """The warning of a label on several CPUs (``members``: CPU number -> its runs)."""

    def count(n: int) -> str:
        return f"{n} run{'s' if n > 1 else ''}"

    machines = {n: runs[0].meta.get("machine") or {} for n, runs in members.items()}
    if not any(isinstance(m.get("cpu"), dict) and m["cpu"] for m in machines.values()):
        # Only model names to compare (runs recorded before machine.cpu): the wording
        # the report has always used for them.
        listed = ", ".join(
            f"{m.get('cpu_model')} ({count(len(members[n]))})"
            for n, m in sorted(machines.items(), key=lambda item: str(item[1].get("cpu_model")))
        )
        return f"host label {host} has runs on {len(members)} CPU models: {listed}"
    listed = ", ".join(
        f"{host if n == 1 else f'{host}#{n}'} = {_describe_cpu(machines[n])} in "
        f"{count(len(members[n]))}"
        for n in sorted(members)
    )
    return f"host label {host} holds runs on {len(members)} CPUs, kept apart: {listed}"


def host_key_of(host: str, note: object) -> str:
    """The host key of a ``runs`` row: its CPU's (:data:`CPU_TAG` in ``note``) or ``host``.

    Parameters
    ----------
    host, note
        The row's ``host`` and ``note``.

    Returns
    -------
    str
        ``host`` or ``host#n``.
    """
    if isinstance(note, str) and CPU_TAG in note:
        tag = note.rpartition(CPU_TAG)[2]
        if tag == host or tag.startswith(f"{host}#"):
            return tag
    return host
