"""vLLM version numbers: which strings are one, and how they sort.

Shared by the release fetch (:mod:`kvqueue.sources`) and the report side
(:mod:`kvqueue.history.history_present`). Standard library only; imports nothing from kvqueue.
"""

from __future__ import annotations

import re
from typing import Any

_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*([a-z]+[0-9]*)?(\.post[0-9]+)?$")


def is_version(text: str) -> bool:
    """Whether ``text`` is a vLLM version number as
    :func:`kvqueue.sources.release_fetch.fetch_release` accepts it."""
    return bool(_VERSION_RE.fullmatch(text))


def version_key(version: str) -> tuple[Any, ...]:
    """Sort key of a vLLM version string: ``0.9.2 < 0.10.0 < 0.10.1.1 < 0.32.0``.

    Numeric parts compare as numbers; a pre-release tag (``rc1``) sorts before the
    release and ``.postN`` after it.
    """
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)*)([a-z]+)?([0-9]*)(?:\.post([0-9]+))?", version)
    if match is None:  # not a version number: sorts first, as a pre-release
        return ((), (0, version, 0), -1)
    nums = tuple(int(x) for x in match[1].split("."))
    while len(nums) > 1 and nums[-1] == 0:
        nums = nums[:-1]
    pre = (0, match[2], int(match[3] or 0)) if match[2] else (1, "", 0)
    return (nums, pre, int(match[4] or -1))
