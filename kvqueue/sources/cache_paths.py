"""Where the release cache keeps each vLLM release's ``kv_cache_utils.py``: the path rule,
defined once.

``${XDG_CACHE_HOME:-~/.cache}/kvqueue/vllm-<version>/kv_cache_utils.py``, with its digest
record ``record.json`` beside it. :mod:`kvqueue.sources.release_cache` fetches, records and
verifies the files (the measuring side); the history writeup
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
