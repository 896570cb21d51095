"""What changed at a history step: a short unified diff of the queue and block classes of
two releases (of a stack subject's history, the files it runs whole first: a
``BlockPool`` history's ``block_pool.py``, a ``KVCacheManager`` history's manager,
coordinator, single-type managers and pool: :data:`STACK_FILES`), read from the local
release cache at report time.

The cached files are vLLM source (:mod:`kvqueue.sources.cache_paths` gives their path rule); the
diff is computed when the report is built and written only into the git-ignored
``reports/`` folder, never into ``data/`` or any committed file. Without a cached file
the step says so, and how to get it: ``make diffs``
(:func:`kvqueue.history.history_collect.fetch_history_releases`) reads every release the
history runs under ``RAW_DIR`` name, by the verified range reads of the release fetch, in
seconds (17 releases in 3.6 s here), where ``make history`` is a 17-minute timing job.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Sequence
from pathlib import Path

from kvqueue import schema
from kvqueue.sources import cache_paths
from kvqueue.sources.release_cache import POOL_MEMBER

#: The classes whose text a history step compares: the queue and the block it links.
CLASSES = ("KVCacheBlock", "FreeKVCacheBlockQueue")
#: Most diff lines shown per step: a rewrite (0.9.2 -> 0.10.0 replaces the queue) would
#: otherwise fill the writeup; the rest is counted.
MAX_LINES = 40
#: What a step without a cached release says.
NOT_CACHED = "release not cached here; `make diffs` fetches it in seconds, then `make report`"


def release_of(version: str) -> str | None:
    """The release of a history version label (``vllm==0.18.0`` -> ``0.18.0``), else ``None``
    (a user's own source, which the cache does not hold)."""
    return version.removeprefix("vllm==") if version.startswith("vllm==") else None


def class_texts(text: str) -> dict[str, str]:
    """The source of each class of :data:`CLASSES` in a module's text (decorators included).

    Parameters
    ----------
    text
        A ``kv_cache_utils.py``.

    Returns
    -------
    dict
        name -> class text; a class the module lacks is absent.
    """
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    lines = text.splitlines(keepends=True)
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in CLASSES:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            out[node.name] = "".join(lines[first - 1 : node.end_lineno])
    return out


#: The files a stack subject's history step diffs whole, before the two classes (a queue
#: history: none), in the order the stack calls them.
STACK_FILES: dict[str, tuple[str, ...]] = {
    schema.SUBJECT_QUEUE: (),
    schema.SUBJECT_POOL: (POOL_MEMBER,),
    schema.SUBJECT_MANAGER: (
        "vllm/v1/core/kv_cache_manager.py",
        "vllm/v1/core/kv_cache_coordinator.py",
        "vllm/v1/core/single_type_kv_cache_manager.py",
        POOL_MEMBER,
    ),
}


def compared(subject: str) -> str:
    """What a step's diff of ``subject``'s history compares, in Markdown."""
    classes = " and ".join(f"`{c}`" for c in CLASSES)
    files = [f"`{m.rsplit('/', 1)[-1]}`" for m in STACK_FILES.get(subject, ())]
    return ", ".join([*files, classes])


def _read(release: str, cache: Path | None, member: str = cache_paths.MODULE_NAME) -> str | None:
    if cache is None:
        path = cache_paths.member_cached_path(release, member)
    else:
        path = cache / f"vllm-{release}" / member.rsplit("/", 1)[-1]
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def _first_cached(releases: Sequence[str], cache: Path | None) -> tuple[str, str | None]:
    """The first of ``releases`` whose file is cached, with its text (else the first
    release and ``None``). The releases of one version share the class text, so any
    cached one will do."""
    for release in releases:
        text = _read(release, cache)
        if text is not None:
            return release, text
    return releases[0], None


def step_diff(
    older: Sequence[str],
    newer: Sequence[str],
    *,
    cache: Path | None = None,
    max_lines: int = MAX_LINES,
    subject: str = schema.SUBJECT_QUEUE,
) -> str:
    """The diff of :data:`CLASSES` (a stack ``subject``: its :data:`STACK_FILES` first)
    between two history versions, as Markdown.

    Parameters
    ----------
    older, newer
        Releases of each version, in the order to try (any release of a version has its
        class text; ``[]`` for a source that is not a release).
    cache
        Cache folder (default: :func:`kvqueue.sources.cache_paths.cache_dir`).
    max_lines
        Most diff lines shown.

    Returns
    -------
    str
        A fenced ``diff`` block (cut to ``max_lines`` with the rest counted), or one
        sentence saying why there is none.
    """
    texts, names = [], []
    for releases in (older, newer):
        if not releases:
            return "One side is not a vLLM release: no cached text to compare."
        release, text = _first_cached(releases, cache)
        if text is None:
            return f"`{release}`: {NOT_CACHED}."
        texts.append(class_texts(text))
        names.append(release)
    diff: list[str] = []
    for member in STACK_FILES.get(subject, ()):
        file = member.rsplit("/", 1)[-1]
        whole = [_read(name, cache, member) for name in names]
        if None in whole:
            missing = names[whole.index(None)]
            return f"`{missing}`: {file} {NOT_CACHED}."
        diff += [
            line.rstrip("\n")
            for line in difflib.unified_diff(
                str(whole[0]).splitlines(keepends=True),
                str(whole[1]).splitlines(keepends=True),
                f"{names[0]}: {file}",
                f"{names[1]}: {file}",
                n=1,
            )
        ]
    for name in CLASSES:
        a, b = texts[0].get(name, ""), texts[1].get(name, "")
        diff += [
            line.rstrip("\n")
            for line in difflib.unified_diff(
                a.splitlines(keepends=True),
                b.splitlines(keepends=True),
                f"{names[0]}: {name}",
                f"{names[1]}: {name}",
                n=1,
            )
        ]
    if not diff:
        files = "these files" if STACK_FILES.get(subject) else "these two classes"
        return f"No difference in the text of {files}."
    shown = diff[:max_lines]
    more = len(diff) - len(shown)
    tail = f"\n\n… {more} more diff lines" if more else ""
    return "```diff\n" + "\n".join(shown) + "\n```" + tail
