"""The parameters of ``make check-queue``: which interpreters, which queue, and whether
to record the reference instead of comparing with it (:mod:`kvqueue.ab.queue_check`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from kvqueue.params import spec
from kvqueue.params.spec import param

#: The committed reference (relative to the project folder).
DEFAULT_REFERENCE = "data/reference/queue-instructions.json"


@dataclass(frozen=True)
class CheckQueueParams:
    """What ``make check-queue`` compares."""

    pythons: tuple[str, ...] = param(
        ("python3",), "PYTHONS", "interpreters to count the queue under", "words"
    )
    queue: str = param("kvqueue", "QUEUE", "the queue source to check (a variant source)")
    update: bool = param(
        False, "UPDATE", "record the reference for these interpreters instead of comparing", "bool"
    )
    reference: str = param(DEFAULT_REFERENCE, "REFERENCE", "the reference file (JSON)")


def check_queue_fields() -> list[Any]:
    """The fields, in declaration order."""
    return list(fields(CheckQueueParams))


def from_text(given: Mapping[str, str | bool | None]) -> CheckQueueParams:
    """Parse the texts of the fields (``None``: the default).

    Raises
    ------
    BenchInputError
        A text that is not of its field's kind (one line).
    """
    return CheckQueueParams(**spec.parse_texts(check_queue_fields(), given))
