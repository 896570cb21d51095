"""The machine lock's parameter of every command that holds it (``make bench``,
``quick``, ``history``, ``policy``, ``regress``): ``WAIT=1`` queues behind a running
measurement instead of refusing (:mod:`kvqueue.measure.machine_lock`).

The command hands the value to the lock through :data:`WAIT_ENV` (set or cleared by
``python -m kvqueue`` for each command, whatever the caller's environment held), so that
the process that takes the lock, the bench notebook's kernel included, reads it.

Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from kvqueue.params import spec
from kvqueue.params.spec import ENV_PREFIX, param


@dataclass(frozen=True)
class LockParams:
    """How a measuring command treats a machine lock held by another measurement."""

    wait: bool = param(
        False,
        "WAIT",
        "wait for a measurement running on this machine (one line says which, and since "
        "when) instead of refusing; Ctrl-C while waiting writes nothing",
        "bool",
    )


def lock_fields() -> list[Any]:
    """The fields of :class:`LockParams`, in order."""
    return list(fields(LockParams))


#: The variable that carries ``WAIT`` to the process that takes the lock.
WAIT_ENV = ENV_PREFIX + spec.spec_of(lock_fields()[0]).make
