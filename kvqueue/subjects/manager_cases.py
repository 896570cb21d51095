"""The timed workloads of the manager subject: vLLM's ``KVCacheManager`` driven in the
scheduler's order of calls, one *operation* per case, and the loop that times it.

- ``sweepN`` (N in 10, 30, 100, 300, 1000; any N ≥ 1 is accepted, parsed by
  :func:`kvqueue.schema.case_size`): one request of N full
  blocks (``16 N`` tokens) that hits nothing, admitted and finished: the release's own
  ``Request`` built (from 0.10.1 on it hashes its blocks there), ``get_computed_blocks``
  (a miss; 0.9/0.10 hash here), ``allocate_slots`` of every token, ``free`` (and
  ``free_block_hashes`` where the manager has it, as the scheduler calls it). The sizes
  of vLLM PR #21005's claim and of vLLM's own pool benchmark. The prompts are a fixed
  cycle holding twice as many distinct blocks as the pool, so every block a request
  cached was evicted before its prompt comes round again: no hits, and from the first
  cycle on every allocation evicts a cached block, as a full serving cache does.
- ``stream``: one scheduler step of a serving-shaped stream (:func:`stream_script`):
  admission (``Request``, ``get_computed_blocks``, ``allocate_slots`` of the prompt
  less its hit) while fewer than :data:`MAX_RUNNING` run and allocation succeeds, then
  one ``allocate_slots`` of one token per running request (a decode step), preemption of
  the newest running request when it fails (``free``, back to the waiting queue's
  front), ``free`` when a request's output is complete. Prompts are 100-4,000 tokens;
  half share one of eight 1,024-token prefixes.

Each case builds, before any timing, a ``run(loops) -> ns`` function over one manager;
setup (the prompts) is never timed. Events and statistics are off.

Standard library only (runs inside the worker under the measured interpreter).
"""

from __future__ import annotations

import random
import sys
import types
from collections import deque
from time import perf_counter_ns
from typing import Any

from kvqueue import schema
from kvqueue.subjects.manager_api import BLOCK_SIZE, ManagerAPI
from kvqueue.subjects.queue_cases import Runner, private_code

#: The sweep sizes named by vLLM PR #21005 and vLLM's own pool benchmark.
SWEEP_SIZES = (10, 30, 100, 300, 1000)
CASES = (*(f"sweep{n}" for n in SWEEP_SIZES), "stream")
CONFIRM_CASES = ("sweep100", "stream")
#: Running requests at most (a small batch: the 2,048-block pool holds it).
MAX_RUNNING = 16
#: Prompt lengths of the stream, in tokens; its outputs are 16-256 tokens.
MIN_PROMPT, MAX_PROMPT = 100, 4000
MIN_OUTPUT, MAX_OUTPUT = 16, 256
#: Shared prefixes of the stream: this many, of this many tokens; half the prompts open
#: with one.
PREFIXES, PREFIX_TOKENS = 8, 1024
#: Requests in the stream's script, cycled.
STREAM_REQUESTS = 400
#: The scheduler's calls in a step of the stream, by purpose.
CALLS = schema.MANAGER_CALLS


def sweep_size(case: str) -> int | None:
    """N of ``sweepN`` (any N ≥ 1), or None for another case."""
    return schema.case_size(case, "sweep")


def is_case(case: str) -> bool:
    """Whether ``case`` is a manager case (``sweepN`` of any N ≥ 1, or ``stream``)."""
    return schema.is_case(schema.SUBJECT_MANAGER, case)


def ops_per_loop(case: str, pool: int) -> int:
    """Operations per loop iteration: one request of ``sweepN``, one step of ``stream``."""
    return 1


def warmup_ops(case: str) -> int:
    """Operations a counted cell is warmed up by: enough for CPython to specialize every
    call (at least 10 requests; 3.11 specializes after 8 executions) and for the counted
    2,048-block pool to turn over once (2,500 blocks), so the target run evicts a cached
    block with every allocation, as in steady state; the stream's first admissions."""
    n = sweep_size(case)
    return max(10, 2_500 // n) if n is not None else 100


def target_ops(case: str) -> int:
    """Operations a counted target run adds: about 10,000 blocks of ``sweepN`` (at least
    10 requests), 200 steps of ``stream``. Counts are exact: two identical runs agree to
    the instruction, so a bigger target buys no precision, only minutes (a 40,000-block
    target made ``make quick SUBJECT=manager`` 160 s here)."""
    n = sweep_size(case)
    return max(10, 10_000 // n) if n is not None else 200


def smallest_pool(case: str) -> int:
    """The fewest blocks ``case`` runs on: N plus the null block for ``sweepN``; the
    longest stream request plus the null block for ``stream`` (a smaller batch preempts)."""
    n = sweep_size(case)
    if n is not None:
        return n + 1
    return -(-(MAX_PROMPT + MAX_OUTPUT) // BLOCK_SIZE) + 1


def _sweep(api: ManagerAPI, manager: Any, n: int, pool: int) -> Runner:
    tokens = n * BLOCK_SIZE
    count = max(2, -(-2 * pool // n))
    prompts = [list(range(1 + k * tokens, 1 + (k + 1) * tokens)) for k in range(count)]
    new_request = api.new_request
    computed = manager.get_computed_blocks
    allocate = manager.allocate_slots
    free = manager.free
    free_hashes = getattr(manager, "free_block_hashes", None)
    position = [0]

    def one(k: int) -> None:
        request = new_request(f"s{k}", prompts[k], 1)
        found = computed(request)
        allocate(
            request,
            num_new_tokens=tokens - found[1],
            num_new_computed_tokens=found[1],
            new_computed_blocks=found[0],
            num_lookahead_tokens=0,
        )
        free(request)
        if free_hashes is not None:
            free_hashes(request)

    one = private_code(one)

    def run(loops: int) -> int:
        k = position[0]
        t0 = perf_counter_ns()
        for _ in range(loops):
            one(k)
            k += 1
            if k == count:
                k = 0
        elapsed = perf_counter_ns() - t0
        position[0] = k
        return elapsed

    return run


def stream_script(seed: int) -> list[tuple[list[int], int]]:
    """The stream's requests: ``(prompt tokens, output tokens)``, seeded."""
    rng = random.Random(seed)
    # Token ids fit 32 bits (0.33 on keeps them in an array of C ints).
    base = 1 << 30
    prefixes = [
        list(range(base + p * PREFIX_TOKENS, base + (p + 1) * PREFIX_TOKENS))
        for p in range(PREFIXES)
    ]
    out = []
    token = 1
    for _ in range(STREAM_REQUESTS):
        length = rng.randint(MIN_PROMPT, MAX_PROMPT)
        shared = prefixes[rng.randrange(PREFIXES)] if rng.random() < 0.5 else []
        shared = shared[: min(len(shared), length - 1)]
        own = list(range(token, token + length - len(shared)))
        token += len(own)
        out.append((shared + own, rng.randint(MIN_OUTPUT, MAX_OUTPUT)))
    return out


class Stream:
    """A scheduler over one manager: :meth:`step` is one step of the stream (see the
    module docstring). The gate replays it too, comparing managers step by step."""

    def __init__(self, api: ManagerAPI, manager: Any, seed: int, named_calls: bool = False) -> None:
        self.api = api
        self.manager = manager
        self.script = stream_script(seed)
        self.waiting: deque[int] = deque()
        self.running: list[tuple[Any, int]] = []
        self.next = 0
        self.serial = 0
        self.free_hashes = getattr(manager, "free_block_hashes", None)
        self.events: list[tuple[Any, ...]] = []
        self.record = False
        # The scheduler's calls, by what they are for (:data:`CALLS`): the callables
        # themselves, or with ``named_calls`` a function of each call's own name
        # around it, so that a per-function profile tells prefill from decode.
        self._request = api.new_request
        self._lookup = api.computed
        self._prefill = self._decode = manager.allocate_slots
        if named_calls:
            self._request = _named("request", api.new_request)
            self._lookup = _named("lookup", api.computed)
            self._prefill = _named("prefill", manager.allocate_slots)
            self._decode = _named("decode", manager.allocate_slots)
            self._finish = _named("free", self._finish)  # type: ignore[method-assign]

    def _finish(self, request: Any) -> None:
        self.manager.free(request)
        if self.free_hashes is not None:
            self.free_hashes(request)

    def step(self) -> None:
        """One scheduler step: admissions, then one decode token per running request."""
        manager = self.manager
        while len(self.running) < MAX_RUNNING:
            if not self.waiting:
                self.waiting.append(self.next)
                self.next = (self.next + 1) % len(self.script)
            k = self.waiting[0]
            prompt, output = self.script[k]
            self.serial += 1
            request = self._request(f"q{self.serial}", prompt, output)
            blocks, hit = self._lookup(manager, request)
            new = self._prefill(
                request,
                num_new_tokens=len(prompt) - hit,
                num_new_computed_tokens=hit,
                new_computed_blocks=blocks,
                num_lookahead_tokens=0,
            )
            if self.record:
                self.events.append(("admit", request.request_id, hit, new is not None))
            if new is None:
                self._finish(request)
                break
            self.waiting.popleft()
            # The step computes the prompt and samples the first output token.
            request.num_computed_tokens = len(prompt)
            request.append_output_token_ids(7)
            self.running.append((request, k))
        still: list[tuple[Any, int]] = []
        index = 0
        while index < len(self.running):
            request, k = self.running[index]
            new = self._decode(request, num_new_tokens=1, num_lookahead_tokens=0)
            if new is None:
                victim, vk = self.running.pop()
                self._finish(victim)
                self.waiting.appendleft(vk)
                if self.record:
                    self.events.append(("preempt", victim.request_id))
                continue
            request.num_computed_tokens += 1
            request.append_output_token_ids(7)
            if request.num_output_tokens >= self.script[k][1]:
                self._finish(request)
                if self.record:
                    self.events.append(("finish", request.request_id))
            else:
                still.append((request, k))
            index += 1
        self.running = still


def _named(name: str, fn: Any) -> Any:
    """``fn`` behind a function of its own code object named ``name`` (a profile
    attributes a code object's instructions; one shared wrapper would merge the calls)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    code = call.__code__.replace(co_name=name)
    if sys.version_info >= (3, 11):
        code = code.replace(co_qualname=f"Stream.{name}")
    return types.FunctionType(code, call.__globals__, name, None, call.__closure__)


#: Whether ``stream`` runners name their calls (:class:`Stream`'s ``named_calls``): set
#: by a profiled worker only, the timed and counted stream calls the manager directly.
NAMED_CALLS = [False]


def _stream(api: ManagerAPI, manager: Any, seed: int) -> Runner:
    stream = Stream(api, manager, seed, named_calls=NAMED_CALLS[0])
    step = stream.step

    def run(loops: int) -> int:
        t0 = perf_counter_ns()
        for _ in range(loops):
            step()
        return perf_counter_ns() - t0

    return run


def make_runner(case: str, api: ManagerAPI, manager: Any, seed: int, pool: int) -> Runner:
    """Build the timed function of ``case`` over ``manager`` (made by ``api.new_manager``).

    Raises
    ------
    ValueError
        An unknown case, or a pool too small for it.
    """
    if pool < smallest_pool(case):
        raise ValueError(f"case {case} needs a pool of at least {smallest_pool(case):,} blocks")
    n = sweep_size(case)
    if n is not None:
        run = _sweep(api, manager, n, pool)
    elif case == "stream":
        run = _stream(api, manager, seed)
    else:
        raise ValueError(f"unknown manager case {case!r}")
    return private_code(run)
