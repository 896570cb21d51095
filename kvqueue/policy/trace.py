"""Allocation traces: the JSON Lines format, its reader and its writer (docs/design.md §12).

A trace replaces the synthetic workload of a policy run (``make policy TRACE=file``):
the events are replayed on a decode-side pool and, if the header names it, a
prefill-side pool, under every policy (:class:`kvqueue.policy.churn.Pools`).

Format (UTF-8, one JSON object per line, no blank lines):

Line 1, the header::

    {"format": "kvqueue-policy-trace", "version": 1, "pool": 4096, "sides": ["d", "p"]}

``pool``: blocks per side (64 to 10,000,000); ``sides``: ``["d"]`` (one pool) or
``["d", "p"]`` (decode and prefill side). Any other header key (e.g. ``"source"``) is
kept as a note.

Then the events, in order; ``req`` is a request id (an integer or a string), ``side`` is
``"d"`` (default) or ``"p"``:

``{"op": "touch", "req": R, "side": S, "keys": [K, ...]}``
    The request's next blocks hold the contents ``keys`` (strings, integers or lists of
    them: a prefix-cache hash chain). The still-cached prefix of the keys is reused at
    once; the misses are allocated with the request's next ``alloc`` and cached under
    their keys.
``{"op": "alloc", "req": R, "side": S, "n": N}``
    One allocation call: the pending misses of a ``touch`` plus ``N`` (>= 0) blocks. A
    request's blocks are its touched and allocated blocks, in order; its last block is
    the partially filled one (no hash).
``{"op": "free", "req": R, "side": S, "unpin": false}``
    Release every block of the request: vLLM's free path (reversed; the unhashed last
    block prepended, the rest appended), or with ``"unpin": true`` all to the tail as
    last-resort candidates of the contiguous policy.
``{"op": "read", "req": R, "n": K}``
    A transfer of the request's first ``K`` blocks from the prefill side to the decode
    side (needs both sides): its descriptor count is measured.

Engine age in a replay is the decode side's allocated blocks over ``pool``. A trace is
replayed whole: the age windows are cut at the run's edges, and the last window runs to
the end of the trace (``age_to`` records it). Before anything runs, the trace is played
once under ``lru`` (:func:`size`): a trace that needs more blocks at once than its pool
holds, or that ends before ``TURNOVERS`` (so before the measurement it asks for), is
refused in one line that names the turnovers it holds. For a trace whose keys are
prefix chains (vLLM's block hashes, the synthetic generator's keys) the blocks in use
do not depend on the policy, so the size found under ``lru`` holds under every policy.

Reading is bounded (:func:`open_checked`, :func:`lines`): the path must be a regular file
(a folder, a FIFO, ``/dev/zero`` are refused before anything is read from them) of at
most :data:`MAX_TRACE_BYTES`, each line at most :data:`MAX_LINE_BYTES`; a file that grows
past the bound while it is read is refused at the bound.

The synthetic generator writes its events in this form (:func:`write_synthetic`,
``make policy TRACE_OUT=file``): it never replaces an existing file
(:func:`out_problem`); ``data/traces/example.jsonl`` is a small example.

Standard library only: the worker reads traces in the measured interpreter.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import json
import os
import stat
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from kvqueue.params import value_checks
from kvqueue.policy import churn

FORMAT = "kvqueue-policy-trace"
VERSION = 1
OPS = ("touch", "alloc", "free", "read")
MAX_TRACE_POOL = 10_000_000
#: Largest trace read (bytes). A trace is held in memory whole, ~13 bytes per byte of
#: text (measured on a synthetic trace); the default run's (``REGIME=chat``, 400
#: turnovers) is ~190 MB. A bound on a mistake's cost, not a measured limit.
MAX_TRACE_BYTES = 512 * 2**20
#: Longest line read (bytes, newline excluded): a ``touch`` of 65,536 keys written as
#: 64-digit hashes is ~4.4 MB.
MAX_LINE_BYTES = 16 * 2**20


class TraceError(ValueError):
    """A trace that does not follow the format (one line naming the file and line)."""


def _key(value: Any, where: str) -> Hashable:
    if isinstance(value, bool):
        raise TraceError(f"{where}: a key must be a string, an integer or a list of them")
    if isinstance(value, (str, int)):
        return value
    if isinstance(value, list):
        return tuple(_key(v, where) for v in value)
    raise TraceError(f"{where}: a key must be a string, an integer or a list of them")


def _count(event: dict[str, Any], where: str) -> int:
    n = event.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise TraceError(f"{where}: n must be a whole number >= 0, got {n!r}")
    return n


def parse_event(line: str, sides: tuple[str, ...], where: str) -> dict[str, Any]:
    """One event line, checked and normalised (keys as tuples, ``side`` filled in)."""
    try:
        event = json.loads(line)
    except ValueError as exc:
        raise TraceError(f"{where}: not JSON ({exc.msg})") from None
    if not isinstance(event, dict):
        raise TraceError(f"{where}: an event is a JSON object")
    op = event.get("op")
    if op not in OPS:
        raise TraceError(f"{where}: op must be one of {', '.join(OPS)}, got {op!r}")
    rid = event.get("req")
    if isinstance(rid, bool) or not isinstance(rid, (int, str)):
        raise TraceError(f"{where}: req must be an integer or a string, got {rid!r}")
    out: dict[str, Any] = {"op": op, "req": rid}
    if op == "read":
        if churn.PREFILL not in sides:
            raise TraceError(f"{where}: a read needs the prefill side (header sides)")
        out["n"] = _count(event, where)
        return out
    side = event.get("side", churn.DECODE)
    if side not in sides:
        raise TraceError(f"{where}: side must be one of {', '.join(sides)}, got {side!r}")
    out["side"] = side
    if op == "touch":
        keys = event.get("keys")
        if not isinstance(keys, list):
            raise TraceError(f"{where}: keys must be a list")
        out["keys"] = [_key(k, where) for k in keys]
    elif op == "alloc":
        out["n"] = _count(event, where)
    else:
        unpin = event.get("unpin", False)
        if not isinstance(unpin, bool):
            raise TraceError(f"{where}: unpin must be true or false")
        out["unpin"] = unpin
    return out


def _mib(size: int) -> str:
    """``size`` bytes in MiB with one decimal (in bytes below 1 MiB)."""
    return f"{size / 2**20:,.1f} MiB" if size >= 2**20 else f"{size:,} bytes"


def _check_file(path: Path, info: os.stat_result) -> None:
    """Refuse the file that ``info`` describes unless it is a regular file of at most
    :data:`MAX_TRACE_BYTES` (one line)."""
    if stat.S_ISDIR(info.st_mode):
        raise TraceError(f"{path} is a folder, not a trace file")
    if not stat.S_ISREG(info.st_mode):
        raise TraceError(
            f"{path} is not a regular file (a FIFO, a device or a socket): a trace is a "
            "file, read whole"
        )
    if info.st_size > MAX_TRACE_BYTES:
        raise TraceError(
            f"{path} is {_mib(info.st_size)}, above the {_mib(MAX_TRACE_BYTES)} a trace may "
            "be (it is held in memory whole): replay a shorter trace"
        )


def _grew(path: Path | str) -> TraceError:
    """The refusal of a trace that grew past :data:`MAX_TRACE_BYTES` as it was read."""
    return TraceError(f"{path}: grew past {_mib(MAX_TRACE_BYTES)} while it was read")


def open_checked(path: Path | str) -> BinaryIO:
    """The trace at ``path`` opened for reading in binary, once it is known to be a
    regular file of at most :data:`MAX_TRACE_BYTES`.

    Opened without blocking and checked on the open file, so that a FIFO (whose open
    would wait for a writer), a device or a folder is refused before anything is read.

    Raises
    ------
    TraceError
        The path does not exist, cannot be opened, is not a regular file, or is too
        large (one line).
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise TraceError(f"{path} does not exist") from None
    except OSError as exc:
        with contextlib.suppress(OSError):  # a socket cannot be opened: say what it is
            _check_file(path, os.stat(path))
        raise TraceError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        _check_file(path, os.fstat(fd))
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def lines(fh: BinaryIO, path: Path | str) -> Iterator[tuple[int, str]]:
    """The lines of an open trace (:func:`open_checked`), numbered from 1, decoded,
    newline kept; never more than :data:`MAX_LINE_BYTES` per line nor
    :data:`MAX_TRACE_BYTES` in all are read.

    Raises
    ------
    TraceError
        A line too long, a file that grew past the bound, or a line that is not UTF-8
        (one line: file, line, what).
    """
    total = 0
    for number in itertools.count(1):
        raw = fh.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            raise TraceError(
                f"{path}:{number}: a line longer than {_mib(MAX_LINE_BYTES)}, the longest "
                "a trace may have"
            )
        total += len(raw)
        if total > MAX_TRACE_BYTES:
            raise _grew(path)
        try:
            yield number, raw.decode("utf-8")
        except UnicodeDecodeError:
            raise TraceError(f"{path}:{number}: not UTF-8") from None


def sha256(path: Path | str) -> str:
    """The sha256 of the trace at ``path``, read bounded as :func:`open_checked` allows.

    Raises
    ------
    TraceError
        As :func:`open_checked`, or the file grew past the bound.
    """
    digest = hashlib.sha256()
    with open_checked(path) as fh:
        while chunk := fh.read(2**20):
            digest.update(chunk)
            if fh.tell() > MAX_TRACE_BYTES:
                raise _grew(path)
    return digest.hexdigest()


def _check_header(path: Path, first: str) -> dict[str, Any]:
    """The header line ``first`` of the trace at ``path``, checked."""
    try:
        header = json.loads(first)
    except ValueError:
        raise TraceError(f"{path}:1: the header is not JSON") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise TraceError(f"{path}:1: the header must have format {FORMAT!r}")
    if header.get("version") != VERSION:
        raise TraceError(f"{path}:1: version {header.get('version')!r}, this reads {VERSION}")
    pool = header.get("pool")
    if isinstance(pool, bool) or not isinstance(pool, int) or not 64 <= pool <= MAX_TRACE_POOL:
        raise TraceError(f"{path}:1: pool must be a whole number from 64 to {MAX_TRACE_POOL:,}")
    sides = header.get("sides", [churn.DECODE])
    if sides not in ([churn.DECODE], [churn.DECODE, churn.PREFILL]):
        raise TraceError(f'{path}:1: sides must be ["d"] or ["d", "p"], got {sides!r}')
    return {**header, "sides": tuple(sides)}


def read_header(path: Path | str) -> dict[str, Any]:
    """The checked header of the trace at ``path`` (its first line; bounded as
    :func:`lines` reads).

    Raises
    ------
    TraceError
        The file (:func:`open_checked`) or its header is refused (one line).
    """
    path = Path(path)
    with open_checked(path) as fh:
        first = next(lines(fh, path), (1, ""))[1]
    return _check_header(path, first)


def read_trace(path: Path | str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and every event of the trace at ``path``, checked: the format, and
    that no request is freed without blocks or used on a side after its free.

    Raises
    ------
    TraceError
        The first problem (one line: file, line, what).
    """
    path = Path(path)
    events = []
    with open_checked(path) as fh:
        numbered = lines(fh, path)
        header = _check_header(path, next(numbered, (1, ""))[1])
        sides = header["sides"]
        live: dict[str, set[Hashable]] = {s: set() for s in sides}
        for number, line in numbered:
            where = f"{path}:{number}"
            if not line.strip():
                raise TraceError(f"{where}: blank line")
            event = parse_event(line, sides, where)
            op, rid = event["op"], event["req"]
            if op in ("touch", "alloc"):
                live[event["side"]].add(rid)
            elif op == "free":
                if rid not in live[event["side"]]:
                    raise TraceError(f"{where}: free of request {rid!r}, which holds nothing")
                live[event["side"]].discard(rid)
            elif rid not in live[churn.DECODE] or rid not in live[churn.PREFILL]:
                raise TraceError(f"{where}: read of request {rid!r}, not live on both sides")
            events.append(event)
    if not events:
        raise TraceError(f"{path}: no events after the header")
    return header, events


@dataclass(frozen=True)
class TraceSize:
    """What a trace asks of its pool, played once under ``lru`` (:func:`size`)."""

    #: Engine age at the end of the trace: the decode side's allocated blocks / pool.
    turnovers: float
    #: Most blocks in use at once, per side.
    peak: dict[str, int]


def size(
    path: Path | str,
    header: dict[str, Any],
    events: list[dict[str, Any]],
    queue_cls: type,
    block_cls: type,
    free_order: str = "vllm",
) -> TraceSize:
    """Play the events of a read trace once under ``lru`` (``popleft_n``) on
    ``queue_cls``: the turnovers it holds and the blocks it needs at once.

    Raises
    ------
    TraceError
        An allocation does not fit the header's pool (one line: file, line, request,
        blocks needed and the pool).
    """
    pool = int(header["pool"])
    sides = {}
    for side in header["sides"]:
        blocks = [block_cls(block_id=i) for i in range(pool)]
        queue = queue_cls(blocks)
        sides[side] = churn.Side(queue, blocks, queue.popleft_n, free_order)
    pools = churn.Pools(sides[churn.DECODE], sides.get(churn.PREFILL))
    peak = dict.fromkeys(sides, 0)
    for number, event in enumerate(events, start=2):
        op = event["op"]
        if op == "alloc":
            side = sides[event["side"]]
            free = side.queue.num_free_blocks
            want = len(side.pending.get(event["req"], ())) + event["n"]
            if want > free:
                raise TraceError(
                    f"{path}:{number}: request {event['req']!r} allocates {want} blocks "
                    f"with {pool - free:,} of the pool's {pool:,} in use (side {event['side']}, "
                    f"under lru): the trace needs a bigger pool than its header's"
                )
        pools.apply(event)
        if op in ("touch", "alloc"):
            side_name = event["side"]
            in_use = pool - sides[side_name].queue.num_free_blocks
            if in_use > peak[side_name]:
                peak[side_name] = in_use
    return TraceSize(sides[churn.DECODE].allocated / pool, peak)


def out_problem(path: Path | str) -> str | None:
    """Why a trace cannot be written to ``path`` (one line), or ``None``.

    A trace never replaces a file: an existing path is refused, as are a folder, a
    folder that does not exist and one that cannot be written
    (:func:`kvqueue.params.value_checks.out_file_problem`).
    """
    return value_checks.out_file_problem(path)


class TraceWriter:
    """Writes events to ``path`` (atomically: a temporary file beside it, linked to
    ``path`` on :meth:`close`; an existing ``path`` is never replaced).

    Raises
    ------
    TraceError
        ``path`` cannot be written (:func:`out_problem`), or the temporary file cannot
        be created (nothing is left behind).
    """

    def __init__(self, path: Path | str, pool: int, sides: tuple[str, ...], **note: Any) -> None:
        self.path = Path(path)
        problem = out_problem(self.path)
        if problem:
            raise TraceError(problem)
        self.tmp = self.path.with_name(f".{self.path.name}.tmp{os.getpid()}")
        try:
            self.fh = self.tmp.open("x", encoding="utf-8")
        except OSError as exc:
            raise TraceError(f"{self.path}: cannot be written ({exc.strerror})") from None
        header = {"format": FORMAT, "version": VERSION, "pool": pool, "sides": list(sides)}
        self.events = 0
        self._write(json.dumps({**header, **note}) + "\n")

    def _write(self, text: str) -> None:
        try:
            self.fh.write(text)
        except OSError as exc:
            self.discard()
            raise TraceError(f"{self.path}: cannot be written ({exc.strerror})") from None

    def __call__(self, event: dict[str, Any]) -> None:
        """Write one event (:attr:`kvqueue.policy.churn.Pools.record`)."""
        out = dict(event)
        if out.get("side") == churn.DECODE:
            del out["side"]  # the default
        self._write(json.dumps(out, separators=(",", ":")) + "\n")
        self.events += 1

    def close(self) -> None:
        """Finish: the trace appears at its path complete, or not at all (a file that
        appeared at the path meanwhile is kept, and this trace dropped).

        Raises
        ------
        TraceError
            The trace could not be finished; the temporary file is gone.
        """
        try:
            self.fh.close()
            self._publish()
        except FileExistsError:
            self.discard()
            raise TraceError(
                f"{self.path} appeared while the trace was written and is not overwritten"
            ) from None
        except OSError as exc:
            self.discard()
            raise TraceError(f"{self.path}: cannot be written ({exc.strerror})") from None
        self.tmp.unlink(missing_ok=True)

    def _publish(self) -> None:
        """Give the finished temporary file its name, never replacing a file.

        Raises
        ------
        FileExistsError
            A file is at :attr:`path`.
        """
        try:
            os.link(self.tmp, self.path)  # fails with EEXIST instead of replacing
        except FileExistsError:
            raise
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                raise
            # A file system without hard links: check, then rename.
            if self.path.exists():
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST)) from None
            os.replace(self.tmp, self.path)

    def discard(self) -> None:
        """Drop the partial trace (on an error or an interruption)."""
        with contextlib.suppress(OSError):  # a full disk fails the flush too
            self.fh.close()
        self.tmp.unlink(missing_ok=True)


def write_synthetic(
    path: Path | str,
    workload: churn.Workload,
    seed: int,
    turnovers: float,
    queue_cls: type,
    block_cls: type,
) -> int:
    """Write the synthetic workload's events under ``lru`` (two sides) until the engine
    age reaches ``turnovers``; return the number of events.

    Raises
    ------
    TraceError
        ``path`` exists, is a folder, or cannot be written (one line; checked before
        the first event, and nothing is left behind).

    The events of a synthetic run depend on the policy only through the prefix hits
    (which decide admission times); a trace fixes them as ``lru`` saw them.
    """
    sides = {}
    for side in (churn.DECODE, churn.PREFILL):
        blocks = [block_cls(block_id=i) for i in range(workload.pool)]
        queue = queue_cls(blocks)
        sides[side] = (queue, blocks, queue.popleft_n)
    sim = churn.Churn(workload, seed, *sides[churn.DECODE], prefill=sides[churn.PREFILL])
    writer = TraceWriter(
        path,
        workload.pool,
        (churn.DECODE, churn.PREFILL),
        source=f"synthetic churn, seed {seed}, lru, {turnovers} turnovers",
        workload=workload.record(),
    )
    try:
        sim.pools.record = writer
        sim.run_until(turnovers)
    except TraceError:
        raise  # the writer dropped its file
    except BaseException:
        writer.discard()
        raise
    writer.close()
    return writer.events
