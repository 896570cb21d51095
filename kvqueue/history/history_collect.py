"""The queue's cost across vLLM's release history (``make history``; docs/design.md §11).

A history run IS a bench run: the same gate, runner, worker processes, run folder and
integrity records, with ``kind: "history"`` in ``run.json`` and a ``history`` record. What
differs is how the variants are chosen:

1. **Releases**: every release the package index lists, newest first, down to the first
   that predates ``vllm/v1/core/kv_cache_utils.py`` or its ``FreeKVCacheBlockQueue``
   (older ones are not probed: the module appeared once and never left), or the list
   given in ``RELEASES``. Each is fetched into the release cache (one range read of the
   member per release, see :mod:`kvqueue.sources.release_fetch`).
2. **Distinct versions**: releases whose queue class AND block class texts are
   byte-identical (same sha256 of both) are one *version*; it is timed once, under the
   newest release that has it, and the record lists every release that shares it.
3. **The run**: the representative releases are the variants, newest first, so the
   newest version is the baseline and every process times every version (the paired
   protocol): each version is paired with the newest, and any two versions (the steps
   between consecutive versions) with each other, inside each process. Block mode is
   ``own`` (each release's own ``KVCacheBlock``: 0.9.x's dataclass ``__eq__`` is part of
   what it cost); releases without ``popleft_n``/``append_n`` get the ``popleft-loop``
   adapter (:mod:`kvqueue.sources.loader`). Defaults
   (:data:`kvqueue.params.history_params.HISTORY_DEFAULTS`): cases alloc1, alloc8, mix and
   remove on a pool of 100,000 blocks, no confirmation phase, and the precision target's
   pilot/size/time caps bounding the run to ~20 minutes.

Standard library only (runs in the bench route before the notebook would).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kvqueue import schema
from kvqueue.errors import BenchInputError
from kvqueue.history import history_diffs, history_sizing
from kvqueue.measure import counts_run, interpreter_checks, runner, stack_layout
from kvqueue.params.bench_params import BenchParams
from kvqueue.rawdata import raw_reader
from kvqueue.sources import cache_paths, loader
from kvqueue.sources.fetch_errors import FetchError, ModuleMissing, NoReadableWheel
from kvqueue.sources.package_index import IndexFile, list_releases
from kvqueue.sources.release_cache import MEMBER, POOL_MEMBER
from kvqueue.sources.release_fetch import fetch_members, fetch_release
from kvqueue.sources.versions import is_version, version_key

#: The pairing the report's step table uses (stated in run.json and the report).
PAIRING = (
    "every version against the newest (the baseline) and each version against its "
    "predecessor, both as per-process ratios (every process times every version)"
)


@dataclass
class Version:
    """One distinct (queue class, block class) text pair and the releases that have it."""

    key: str
    queue_sha256: str
    block_sha256: str
    releases: list[str] = field(default_factory=list)
    adapter: str | None = None
    missing: tuple[str, ...] = ()
    structure: str = loader.STRUCTURE_SENTINELS
    #: Its releases are not consecutive among the probed ones (A, B, A: a change that
    #: was reverted); the report's step labels then name the other releases too.
    non_consecutive: bool = False
    #: The label prefix of its subject (:data:`kvqueue.schema.POOL_LABEL_PREFIX` for a
    #: ``BlockPool`` history, whose key is the pool's code: ``PoolVariant.code_sha256``).
    prefix: str = ""

    @property
    def newest(self) -> str:
        """The newest release of the version: the one that is timed."""
        return max(self.releases, key=version_key)

    @property
    def oldest(self) -> str:
        """The first release that shipped this version."""
        return min(self.releases, key=version_key)

    @property
    def source(self) -> str:
        """The variant source string of the version."""
        return f"vllm=={self.newest}"

    @property
    def label(self) -> str:
        """The variant label the run gives it (``pool:vllm==X`` in a pool history)."""
        return self.prefix + self.source

    def record(self) -> dict[str, Any]:
        """JSON-ready entry of ``run.json["history"]["versions"]``."""
        return {
            "label": self.label,
            "key": self.key,
            "queue_class_sha256": self.queue_sha256,
            "block_class_sha256": self.block_sha256,
            "releases": sorted(self.releases, key=version_key),
            "first_release": self.oldest,
            "adapter": self.adapter,
            "missing_methods": list(self.missing),
            "structure": self.structure,
            "non_consecutive": self.non_consecutive,
        }


@dataclass
class Plan:
    """What a history run times, and why every other release is not timed."""

    listed: list[str]
    probed: list[str]
    versions: list[Version]
    skipped: list[dict[str, str]]
    given: bool

    def record(self) -> dict[str, Any]:
        """The ``history`` record of ``run.json``."""
        return {
            "releases_listed": self.listed,
            "releases_given": self.given,
            "releases_probed": self.probed,
            "skipped": self.skipped,
            "versions": [v.record() for v in self.versions],
            "pairing": PAIRING,
        }


def version_key_of(queue_text: str, block_text: str) -> str:
    """sha256 identifying a (queue class, block class) text pair."""
    return hashlib.sha256(f"{queue_text}\0{block_text}".encode()).hexdigest()


def _probe(release: str, files: list[IndexFile] | None) -> loader.Variant:
    """Fetch one release and load its queue on its own block class (no timing)."""
    fetch_release(release, files=files)
    (variant,) = loader.load_variants([f"vllm=={release}"], block_mode="own")
    return variant


def _queue_version(variant: loader.Variant) -> Version:
    """The version of a loaded queue (its releases not filled in)."""
    return Version(
        key=version_key_of(variant.queue_src.text, variant.block_src.text),
        queue_sha256=variant.queue_src.sha256,
        block_sha256=variant.block_src.sha256,
        adapter=variant.adapter,
        missing=variant.missing,
        structure=variant.structure,
    )


def _probe_stack(release: str, files: list[IndexFile] | None, subject: str) -> Version:
    """Load one release's stack (its ``BlockPool`` or ``KVCacheManager``, no timing); its
    version, keyed by the code the stack runs (``code_sha256``: releases that differ only
    where the stack does not run are one version)."""
    kind = stack_layout.KINDS[subject]
    if subject == schema.SUBJECT_POOL:
        fetch_members(release, files=files)
    try:
        variant = kind.load(f"vllm=={release}", f"vllm=={release}")
        api = kind.api(variant)
    except kind.errors as exc:
        raise loader.SourceError(str(exc)) from None
    return Version(
        key=variant.code_sha256,
        queue_sha256=variant.code_sha256,
        block_sha256="",
        adapter=", ".join(getattr(api, "adaptations", ())) or None,
        structure=loader.STRUCTURE_SENTINELS,
        prefix=schema.SUBJECT_LABEL_PREFIX[subject],
    )


def plan(
    releases: Sequence[str] | None = None,
    listing: Mapping[str, list[IndexFile]] | None = None,
    progress: Any = None,
    subject: str = schema.SUBJECT_QUEUE,
) -> Plan:
    """Find the releases to time and group them into distinct versions.

    Parameters
    ----------
    releases
        Release numbers to time; None: every release from the newest down to the first
        that predates the queue.
    listing
        ``list_releases()`` (read here by default).
    progress
        A file for one line per release (default: stderr).
    subject
        :data:`kvqueue.schema.SUBJECT_QUEUE` (the queue and block classes) or
        :data:`~kvqueue.schema.SUBJECT_POOL` (the ``BlockPool`` and what it runs of its
        release, from :data:`kvqueue.sources.pool_loader.FIRST_POOL_RELEASE` on).

    Returns
    -------
    Plan

    Raises
    ------
    BenchInputError
        A given release does not exist or its class fails to load, the index cannot be
        read (and a release is not cached), or fewer than two distinct versions remain.
    """
    out = progress or sys.stderr
    try:
        listing = dict(listing) if listing is not None else list_releases()
    except FetchError as exc:
        if releases is None:
            raise BenchInputError(f"cannot list the vLLM releases: {exc}") from None
        listing = {}
    given = releases is not None
    if releases is None:
        order = sorted(listing, key=version_key, reverse=True)
        order = [v for v in order if not _is_prerelease(v)]
    else:
        order = sorted(dict.fromkeys(releases), key=version_key, reverse=True)
    stack = subject in stack_layout.KINDS
    first_release = stack_layout.KINDS[subject].first_release if stack else ""
    versions: dict[str, Version] = {}
    skipped: list[dict[str, str]] = []
    probed: list[str] = []
    last_key: str | None = None  # the version of the previous release that loaded
    for index, release in enumerate(order):
        if stack and version_key(release) < version_key(first_release):
            if given:
                raise BenchInputError(
                    f"vllm=={release}: the {subject} loader reads releases from {first_release} on"
                )
            skipped.append(
                {
                    "release": f"{order[-1]} .. {release}",
                    "reason": f"not probed: older than {first_release}, the first "
                    f"release the {subject} loader reads",
                }
            )
            break
        probed.append(release)
        try:
            files = listing.get(release)
            found = (
                _probe_stack(release, files, subject)
                if stack
                else _queue_version(_probe(release, files))
            )
        except (ModuleMissing, loader.SourceError, NoReadableWheel) as exc:
            reason = str(exc)
            # Given releases are the user's choice: a class that fails to load stops the
            # run. In the default history one broken release is skipped with its reason.
            if given and isinstance(exc, loader.SourceError) and "not found" not in reason:
                raise BenchInputError(f"vllm=={release}: {reason}") from None
            skipped.append({"release": release, "reason": reason})
            print(f"history: {release}: skipped ({reason})", file=out, flush=True)
            if not given and versions and isinstance(exc, (ModuleMissing,)):
                rest = order[index + 1 :]
                if rest:
                    skipped.append(
                        {
                            "release": f"{rest[-1]} .. {rest[0]}",
                            "reason": f"not probed: older than {release}, which predates {MEMBER}",
                        }
                    )
                break
            continue
        except FetchError as exc:
            raise BenchInputError(f"vllm=={release}: {exc}") from None
        key = found.key
        versions.setdefault(key, found)
        if versions[key].releases and last_key != key:
            versions[key].non_consecutive = True  # A, B, A: came back after another version
        versions[key].releases.append(release)
        last_key = key
    ordered = sorted(versions.values(), key=lambda v: version_key(v.newest), reverse=True)
    if len(ordered) < 2:
        raise BenchInputError(
            f"a history needs at least two distinct versions of the {subject}; found {len(ordered)}"
        )
    for number, version in enumerate(ordered, start=1):
        shared = ", ".join(sorted(version.releases, key=version_key))
        notes = [f"adapter {version.adapter}"] if version.adapter else []
        notes += [f"no {'/'.join(version.missing)}"] if version.missing else []
        notes += [version.structure] if version.structure != loader.STRUCTURE_SENTINELS else []
        digests = (
            f"{subject} code {version.queue_sha256[:8]}"
            if stack
            else f"queue {version.queue_sha256[:8]}, block {version.block_sha256[:8]}"
        )
        print(
            f"history: version {number}/{len(ordered)}: {version.label} "
            f"(releases {shared}; {digests}{'; ' + ', '.join(notes) if notes else ''})",
            file=out,
            flush=True,
        )
        if version.non_consecutive:
            print(
                f"history: warning: {version.source}'s releases are not consecutive "
                f"({shared}): another version came between them; it is timed once",
                file=out,
                flush=True,
            )
    return Plan(
        listed=sorted(listing, key=version_key),
        probed=probed,
        versions=ordered,
        skipped=skipped,
        given=given,
    )


def _is_prerelease(version: str) -> bool:
    return version_key(version)[1][0] == 0


def releases_from_text(text: str | None) -> list[str] | None:
    """``RELEASES`` text -> release numbers (``vllm==`` prefixes allowed); None if empty."""
    if text is None or not text.strip():
        return None
    out = []
    for word in text.split():
        release = word[len("vllm==") :] if word.startswith("vllm==") else word
        if not is_version(release):
            raise BenchInputError(f"RELEASES: {word!r} is not a vLLM version number")
        out.append(release)
    return out


def own_version_record(variant: loader.Variant) -> dict[str, Any]:
    """The ``run.json`` history entry of a user's own source (``NEWEST``): no releases
    (the report labels its step ``<last release> → <label>``), its digests and adapter."""
    return _own_record(_queue_version(variant), variant.label, variant.source)


def _own_record(version: Version, label: str, source: str) -> dict[str, Any]:
    """The history entry of ``NEWEST``'s ``version`` (its releases: none)."""
    return {
        "label": label,
        "source": source,
        "key": version.key,
        "queue_class_sha256": version.queue_sha256,
        "block_class_sha256": version.block_sha256,
        "releases": [],
        "first_release": None,
        "adapter": version.adapter,
        "missing_methods": list(version.missing),
        "structure": version.structure,
        "non_consecutive": False,
    }


def _own_version(newest: str, subject: str) -> dict[str, Any]:
    """``NEWEST``'s version record (:func:`own_version_record`; a pool's keyed by its
    code), or one line naming what cannot be read."""
    kind = stack_layout.KINDS.get(subject)
    if kind is None:
        try:
            (variant,) = loader.load_variants([newest], block_mode="own")
        except loader.SourceError as exc:
            raise BenchInputError(f"NEWEST: {exc}") from None
        return own_version_record(variant)
    try:
        stack = kind.load(newest, newest)
    except kind.errors as exc:
        raise BenchInputError(f"NEWEST: {exc}") from None
    label = schema.variant_labels([newest], schema.SUBJECT_LABEL_PREFIX[subject])[0]
    code = Version(key=stack.code_sha256, queue_sha256=stack.code_sha256, block_sha256="")
    return _own_record(code, label, stack.source)


def run_history(
    bench: BenchParams,
    releases: Sequence[str] | None,
    raw_dir: Path,
    run_id: str | None = None,
    newest: str | None = None,
    announce: str = "",
) -> Path:
    """Plan the versions, check everything, and run the paired protocol on them
    (``announce``: the line printed once the input is checked).

    ``newest`` (``NEWEST``) is a source of the user's, timed as the newest point after
    the releases (:func:`own_version_record`).

    The run is a bench run of kind ``history``: its ``history`` record in ``run.json``,
    differences on invalid use recorded (releases whose contracts on invalid use differ
    by design are compared, not refused: docs/design.md §11), and its second stage sized
    for the steps between consecutive versions (:mod:`kvqueue.history.history_sizing`).

    Returns
    -------
    Path
        The run folder.
    """
    own: dict[str, Any] | None = None
    if newest is not None:
        # Read before the plan (which lists and fetches releases): a source that cannot
        # be read is bad input, one line, nothing fetched or written.
        own = _own_version(newest, bench.subject)
    found = plan(releases, subject=bench.subject)
    sources = tuple(v.source for v in found.versions)
    record = found.record()
    if newest is not None and own is not None:
        # The user's source is the newest point: first (the baseline every version is
        # paired with) and the last step of the history. Its gate is the bench's.
        record["versions"].insert(0, own)
        sources = (newest, *sources)
    bench = replace(bench, variants=sources)
    checked = interpreter_checks.check(bench, announce)
    if bench.metric == "instructions":
        # Every distinct version counted once per case and pool: minutes, not the ~17 of
        # a timed history, and exact.
        return counts_run.run_counts(
            checked,
            raw_dir,
            run_id,
            launcher_pid=os.getpid(),
            question="history",
            record={schema.HISTORY_KEY: record},  # NEWEST's version included
            invalid="record",
        )
    kind = runner.RunKind(
        kind=schema.KIND_HISTORY,
        record={schema.HISTORY_KEY: record},
        invalid_ops="record",
        sizing_targets=history_sizing.sizing_targets,
    )
    return runner.run_bench(checked, raw_dir, run_id, kind=kind)


# ------------------------------------------------------------------ make diffs
def _first_releases(raw_dir: Path | str) -> dict[str, str]:
    """Version label -> its first release, over every history run (timed or counted)
    under ``raw_dir``.

    Raises
    ------
    kvqueue.rawdata.raw_reader.RawDataError
        The raw folder is missing.
    """
    # Only run.json is needed (the versions a run timed or counted): no samples are
    # parsed, and a run of any status names its releases.
    first: dict[str, str] = {}
    for run_dir in raw_reader.run_dirs(raw_dir):
        try:
            meta = raw_reader.read_run_json(run_dir / schema.RUN_JSON)
        except raw_reader.RawDataError:
            continue  # the report names it; it has no diff to show
        for version in (meta.get(schema.HISTORY_KEY) or {}).get("versions", []):
            if version.get("releases"):
                first.setdefault(str(version["label"]), str(version["releases"][0]))
    return first


def history_releases(raw_dir: Path | str, pool: bool = False) -> list[str]:
    """One release per distinct version of every history run (timed or counted) under
    ``raw_dir``, oldest first: the releases whose text the step diffs show (the
    releases of one version share it). ``pool``: of the ``BlockPool`` histories only.

    Raises
    ------
    kvqueue.rawdata.raw_reader.RawDataError
        The raw folder is missing.
    """
    first = _first_releases(raw_dir)
    chosen = {r for label, r in first.items() if not pool or schema.is_pool_label(label)}
    return sorted(chosen, key=version_key)


def fetch_history_releases(
    raw_dir: Path | str, say: Callable[[str], None] = print, summary: bool = True
) -> int:
    """Fetch into the release cache every release :func:`history_releases` names that is
    not cached yet (each checked against its wheel's RECORD; a ``BlockPool`` history's
    with its ``block_pool.py``, a ``KVCacheManager`` history's with the files its step
    diffs show: :data:`kvqueue.history.history_diffs.STACK_FILES`); return how many were
    fetched. ``say`` gets a line per
    release fetched and, with ``summary``, one line of the whole (``make diffs``).

    Raises
    ------
    kvqueue.sources.fetch_errors.FetchError
        A release could not be read (offline: the index pip is configured with is
        unreachable), with its one-line reason.
    """
    first = _first_releases(raw_dir)
    releases = sorted(set(first.values()), key=version_key)
    pools = {r for label, r in first.items() if schema.is_pool_label(label)}
    # A manager history's diffs show the files its stack runs whole (history_diffs).
    managers = {
        r for label, r in first.items() if schema.subject_of_label(label) == schema.SUBJECT_MANAGER
    }
    manager_files = (MEMBER, *history_diffs.STACK_FILES[schema.SUBJECT_MANAGER])
    # A stack file a release does not have yet (0.9.0 has no kv_cache_coordinator.py) is
    # no diff of it, not a failed fetch: before, 0.9.0 stopped the fetch of every release.
    optional = frozenset(manager_files) - {MEMBER, "vllm/v1/core/kv_cache_manager.py"}

    def known(release: str, member: str) -> bool:
        return (
            cache_paths.member_cached_path(release, member).is_file()
            or cache_paths.member_absence_path(release, member).is_file()
        )

    def cached(release: str) -> bool:
        wanted = [*((POOL_MEMBER,) if release in pools else ())]
        wanted += [*(manager_files if release in managers else ())]
        return cache_paths.cached_path(release).is_file() and all(known(release, m) for m in wanted)

    missing = [r for r in releases if not cached(r)]
    started = time.perf_counter()
    for k, release in enumerate(missing, 1):
        if release in pools:
            fetch_members(release)
        if release in managers:
            fetch_members(release, manager_files, optional)
        if release not in pools and release not in managers:
            fetch_release(release)
        say(f"diffs: {release} cached ({k}/{len(missing)})")
    if not summary:
        return len(missing)
    say(
        f"diffs: {len(releases)} releases of the history runs in {raw_dir} are cached "
        f"({len(missing)} fetched, {time.perf_counter() - started:.1f} s); `make report` "
        "shows their diffs"
    )
    return len(missing)
