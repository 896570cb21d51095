"""The report's one cache: each bench run's analysis and each figure, stored under a key.

One home, ``<processed>/cache/`` (``data/processed/cache/``), and one key rule
(:func:`key`): the sha256 of the entry's name, of the content it is computed from (a
run's files, a figure's tables), of the report settings and of the package's code
(:func:`code_digest`). An entry is ``<name>-<key><suffix>``, written to a temp file and
renamed, so a build that stops (Ctrl-C, SIGTERM, a full disk) never leaves half an
entry; the :data:`KEEP` most recently used entries of a name are kept.

Why there is a cache at all (measured on the committed data, this VM): analysing the 28
bench runs is most of a build from scratch, and drawing the figures most of the rest;
after one new run only that run is analysed again, and only the figures whose tables it
changed are drawn.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kvqueue.kernel import remove_dead_entries
from kvqueue.params.report_params import SCOPE_FIELDS, ReportSettings

#: The cache's folder in the processed folder.
FOLDER = "cache"
#: Prefix of an entry being written: ``<PARTIAL><writer's pid>-<name>-*.tmp``.
PARTIAL = ".partial-"
#: Entries kept per name: a figure has one per question that draws it (forest: one per
#: A/B question), a run one per analysis settings and code version.
KEEP = 12


@functools.cache
def code_digest() -> str:
    """sha256 of every source file of the package: any change of code may change a
    number or a picture (and the manifest's ``code_sha256``)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def settings_part(settings: ReportSettings) -> str:
    """The report settings as a key part, the scope (``HOSTS``, ``RUNS``) left out: it
    decides which runs are read, and so what an entry is computed from, not how."""
    return repr(sorted((k, v) for k, v in settings.to_dict().items() if k not in SCOPE_FIELDS))


def key(name: str, parts: Iterable[str | bytes]) -> str:
    """The key rule: sha256 of ``name``, ``parts`` (what the entry is computed from, the
    settings) and :func:`code_digest`, as 24 hex digits."""
    h = hashlib.sha256()
    for part in (name, *parts, code_digest()):
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:24]


def stored(
    home: Path,
    name: str,
    key_: str,
    suffix: str,
    write: Callable[[Path], None],
    keep: int = KEEP,
) -> Path:
    """The entry ``<home>/<name>-<key><suffix>``, made by ``write(path)`` unless it is there
    (``keep``: entries of ``name`` kept).

    ``write`` writes a temp file that is then renamed: a stopped build leaves no half
    entry, and two builds writing one entry at once both succeed.
    """
    entry = home / f"{name}-{key_}{suffix}"
    if entry.is_file():
        os.utime(entry)  # recently used: the last to be evicted
        return entry
    home.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(
        dir=home, prefix=f"{PARTIAL}{os.getpid()}-{name}-", suffix=".tmp"
    )
    os.close(fd)
    try:
        write(Path(partial))
        os.replace(partial, entry)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    _evict(home, name, suffix, entry, keep)
    return entry


def remove_partials(home: Path) -> None:
    """Remove the temp files of entries whose writer is gone: a process killed while it
    wrote one (the report's kernel, stopped by the report mid-figure) runs no clean-up
    (:func:`kvqueue.kernel.remove_dead_entries`). A live writer's, or another user's, stay."""
    remove_dead_entries(PARTIAL, home)


def pickled(
    home: Path, name: str, key_: str, compute: Callable[[], Any], keep: int = 2
) -> tuple[Any, bool]:
    """``compute()`` through the cache as a pickle; the value and whether it was computed.

    An entry that does not load (truncated, from another Python) is computed again.
    """
    entry = home / f"{name}-{key_}.pkl"
    if entry.is_file():
        try:
            with entry.open("rb") as fh:
                value = pickle.load(fh)
            os.utime(entry)
            return value, False
        except Exception:  # damaged: recompute and replace
            entry.unlink(missing_ok=True)
    value = compute()

    def write(path: Path) -> None:
        with path.open("wb") as fh:
            pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)

    stored(home, name, key_, ".pkl", write, keep)
    return value, True


def _evict(home: Path, name: str, suffix: str, entry: Path, keep: int) -> None:
    """Remove all but the ``keep`` most recently used entries of ``name`` (``entry``, just
    written, stays)."""
    entries = []
    for other in home.glob(f"{name}-*{suffix}"):
        if len(other.name) != len(entry.name):  # another name that starts with this one
            continue
        try:
            entries.append((other.stat().st_mtime, other))
        except FileNotFoundError:  # removed by another build meanwhile
            continue
    entries.sort(reverse=True)
    for _, stale in entries[keep:]:
        if stale != entry:
            stale.unlink(missing_ok=True)
