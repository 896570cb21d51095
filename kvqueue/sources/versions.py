"""vLLM version numbers: which strings are one, and how they sort.

Shared by the release fetch (:mod:`kvqueue.sources`) and the report side (the history's
step labels, in time and in counts). Standard library only; imports nothing from kvqueue.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
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


def below_floor(source: str, floor: str) -> bool:
    """Whether ``source`` is a release (``vllm==X``) older than ``floor``, the oldest a
    subject's loader drives (a source that is not a release never is)."""
    version = source[len("vllm==") :] if source.startswith("vllm==") else ""
    return is_version(version) and version_key(version) < version_key(floor)


def step_range(older: Mapping[str, Any], newer: Mapping[str, Any]) -> str:
    """A release step's one label, in every table of time and of counts: ``"last of
    older → first of newer after it"``, and the newer's earlier releases (``older`` and
    ``newer``: two versions of a history's ``run.json``, with their ``releases``).

    A version whose releases are not consecutive (A, B, A) also shipped before the older
    one: the step is from the older's last release to the newer's next one.
    """
    last = older["releases"][-1]
    if not newer["releases"]:  # a user's own source (NEWEST) after the releases
        return f"{last} → {newer['label']}"
    after = [r for r in newer["releases"] if version_key(r) > version_key(last)]
    earlier = [r for r in newer["releases"] if version_key(r) < version_key(last)]
    text = f"{last} → {(after or newer['releases'])[0]}"
    return text + (f" (also in {', '.join(earlier)})" if earlier else "")
