"""Where the release cache keeps each vLLM release's ``kv_cache_utils.py`` (and the other
members a pool needs): the path rule, defined once.

``${XDG_CACHE_HOME:-~/.cache}/kvqueue/vllm-<version>/kv_cache_utils.py``, with its digest
record ``record.json`` beside it; other members of ``vllm/v1/core/`` (``block_pool.py``,
``kv_cache_metrics.py``) beside it with ``<stem>.record.json``.
:mod:`kvqueue.sources.release_cache` fetches, records and verifies the files (the
measuring side); the history writeup
(:mod:`kvqueue.history.history_diffs`) only reads them, by this rule, to show what changed
between two releases, without importing the measuring side. The cached texts are vLLM
source: they live only in this git-ignored cache, never in the repository.

Standard library only (the measured side imports it under a bare interpreter).
"""

from __future__ import annotations

import os
from pathlib import Path

#: File name of a cached release's module.
MODULE_NAME = "kv_cache_utils.py"
#: The folder of the wheel whose members are cached flat, by file name.
CORE_FOLDER = "vllm/v1/core"
#: File name of the digest record kept beside each cached release file.
RECORD_NAME = "record.json"


def cache_dir() -> Path:
    """Return the cache folder: ``${XDG_CACHE_HOME:-~/.cache}/kvqueue``.

    Returns
    -------
    Path
        The folder (not created here).
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kvqueue"


def cached_path(version: str) -> Path:
    """Return where the cached ``kv_cache_utils.py`` of ``version`` lives (may not exist)."""
    return cache_dir() / f"vllm-{version}" / MODULE_NAME


def record_path(version: str) -> Path:
    """Return where the digest record of ``version``'s cached file lives (may not exist)."""
    return cached_path(version).with_name(RECORD_NAME)


def member_cached_path(version: str, member: str) -> Path:
    """Return where member ``member`` (a path inside the wheel) of ``version`` is cached.

    One rule, the member's path: ``kv_cache_utils.py`` keeps the path of
    :func:`cached_path`, and every other member of ``vllm/v1/core/`` lives beside it
    under its own file name (``vllm-0.33.0/block_pool.py``), so caches written before
    other members were fetched stay valid; a member outside ``vllm/v1/core/`` keeps its
    whole path (``vllm-0.9.2/vllm/v1/utils.py``: ``vllm/utils.py`` and
    ``vllm/v1/utils.py`` are two files).

    Parameters
    ----------
    version
        A release number such as ``"0.33.0"``.
    member
        The member's path inside the wheel, e.g. ``"vllm/v1/core/block_pool.py"``.

    Returns
    -------
    Path
        The cached file (may not exist).
    """
    folder, _, name = member.rpartition("/")
    if folder != CORE_FOLDER:
        return cached_path(version).parent / member
    if name == MODULE_NAME:
        return cached_path(version)
    return cached_path(version).with_name(name)


def member_record_path(version: str, member: str) -> Path:
    """Return where the digest record of a cached member lives (may not exist).

    ``kv_cache_utils.py``'s is :func:`record_path` (``record.json``); any other member's
    is ``<stem>.record.json`` beside it (``block_pool.record.json``).
    """
    path = member_cached_path(version, member)
    if path.name == MODULE_NAME:
        return record_path(version)
    return path.with_name(f"{path.stem}.{RECORD_NAME}")


def member_absence_path(version: str, member: str) -> Path:
    """Return where the note that a release's wheel lacks ``member`` is kept.

    ``<stem>.absent.json`` beside the other members: written when the wheel was read and
    had no such member (0.10.0 has no ``kv_cache_metrics.py``), so a later offline use
    knows the member is absent rather than not yet fetched.
    """
    path = member_cached_path(version, member)
    return path.with_name(f"{path.stem}.absent.json")
