"""The serving engine's state and step rules (vLLM-like continuous batching), SimPy-free.

`EngineState` holds everything one sidecar engine knows: per-request inputs (arrival times,
prompt and output lengths, as compact typed arrays) and results (admission, first-token and
finish times, numpy), the queues (waiting, prefilling, a heap of decoders keyed by the iteration
after which each is done, one integer per decoder: `key`) and the counters. Requests are plain
integers indexing the arrays, so the hot path allocates no per-request objects.

The rules, one iteration at a time (vLLM v1 order; benchmarks/reference.py implements the same
rules independently, as the tests' oracle):

1. Every request that has arrived by the start of the iteration (t <= now) is waiting.
2. The token budget is `max_num_batched_tokens` minus one token per decoding request. Requests
   already prefilling get the next chunk of their prompt first (in order); then waiting requests
   are admitted FCFS while budget is left and fewer than `max_num_seqs` run (`admit`).
3. GPU work g is the engine's latency law's step time (`law`, models.engine.laws: e.g. the linear
   law a + b*prefill_tokens + c*sum_ctx + d*batch), host work
   h = h0 + h1*batch + h2*scheduled_tokens on the engine's CPU path and frontend work f (the API
   server: per admitted request and per output token, on its own CPU path; `host_work`); at
   speeds rg, rh, rf (1 alone) an overlapped iteration (vLLM V1) takes max(h/rh, f/rf, g/rg), a
   sequential one (vLLM V0) h/rh + g/rg + f/rf (models.engine.batching: EngineStep, compose).
4. At its end every decoder has one more token; a request whose prompt is now fully computed
   has its first token and decodes with context prompt + 1 (or finishes, if it wants one output
   token: `first_tokens`); a decoder with all its output tokens finishes.

With a KV-cache pool (models.engine.kv; `kv`, None: unlimited) rule 2 first gives every decoder crossing a
block boundary its block, preempting the most recently admitted running request while they do not
fit (`make_room`, `_preempt`; where a preempted decoder goes is the pool's preemption mode,
models.engine.preemption: recompute, or swap, its blocks copied over PCIe before the iteration,
`_shared_step`), and admits only while the
prompt's blocks fit above the watermark (`admit_kv`); a finished request's blocks go back
(`release`); fast-forward stops where the free blocks run out (`kv_run`). Cached prompt tokens
(given with a request, or a prefix cache's hit: models.engine.prefix; `skip`, `take_cached`) are not
prefilled. docs/engine.md.

`serve` runs these rules as a coroutine on a `Clock`, one *step* at a time: an iteration, a sleep
until the next arrival, or (with fast-forward, and a law with a line for decode runs) the pure-decode
iterations up to the next finish, or up to the first boundary at or after an arrival it could
admit, timed in closed form (models.engine.batching). A step that ends before the lookahead bound
(`bound.until`: nothing will look at the engine or change its speeds before then) is booked at
once, without a wait.

`serve` is the engine's simulation process itself (sim/engine.py hands it to SimPy). It calls
`Steps.advance` once per SimPy event, not once per step: advance books every step that needs no
event (the loop of the rules above: `_book` rule 4, `EngineState.arrive` rule 1, `_compose` rules 2
and 3, `_time` the step's length) and says what to wait for. The compiled core (setup.py,
serving.pxd) runs advance and the rules in C; a generator cannot have C locals.

A tape (models.engine.tape; `st.tape`, set before the run) is consulted only where a step starts at or after
its `mark` (a snapshot is recorded, or the engine jumps ahead along a baseline run's trajectory) and
at idle instants (recorded, or a baseline's busy period copied): what it restores replaces the
state in place, and the step reads the clock and the next arrival back from `st`.

Closed-loop clients (models.workload.clients): an engine may have a `client` that creates requests as others
finish (a batch starts when the previous one is done; a user sends again after thinking). It is
consulted only when a step finishes requests (`_book_slow`), and puts what it creates into the
not-yet-arrived tail of the arrays (`add`), kept sorted; so the engine's next arrival, its idle
waits and fast-forward's stop at an arrival are exact as for pre-drawn arrivals. Open-loop engines
(`client` None) take the original path, one test per step.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections.abc import Generator, Sized
from typing import NamedTuple, Protocol

import numpy as np

# (relative: the compiled core, built as another package of the same modules, imports its own: setup.py)
from .batching import TODAYS_STEP, EngineStep, before, compose, reach, rest, run_time, split
from .fifo import RingFifo
from .heap import KeyHeap
from .kv import KVPool, blocks
from .laws import law_of
from .prefix import PrefixCache

POOL = KVPool  # the block pool class this core takes (the compiled core: the compiled pool, whose name it cimports)
CACHE = PrefixCache  # and the prefix cache class (the same)
NAN = math.nan
INF = math.inf
FULL3 = (1.0, 1.0, 1.0)  # GPU, host and frontend speeds of an engine alone on its links
# A decoder's key in `fin_heap`: due << 32 | rid (the iteration after which it is done, the request), so
# the heap holds plain ints and orders them as the tuples (due, rid). The hot loop spells out the
# shift (32), and takes rid as x - (due << 32), so that the compiled core computes them in C.
RIDS = 1 << 32  # requests per engine at most (`_grow` checks); due < 2**31 (`first_tokens` checks)


def key(due: int, rid: int) -> int:
    """The heap key of request rid, done after iteration `due`."""
    return due << 32 | rid


class Clock(Protocol):
    """What the engine needs from the simulator it runs in (sim/engine.py: Sidecar, on SimPy)."""

    Cut: type[BaseException]  # thrown in at a wait that is cut short
    interruptible: bool  # the engine sets it while in a wait that may be cut short
    gpu_jobs: Sized  # other work on the engine's GPU and host: while both are empty it runs at
    host_jobs: Sized  # full speed without asking speeds()

    def wait(self, delay: float) -> object:
        """Something to yield that resumes the engine `delay` later."""

    def now(self) -> float: ...

    def speeds(self) -> tuple[float | None, float | None, float | None]:
        """The engine's speed on its GPU, its host and its frontend path (constant until the jobs
        there change; 1 for a frontend it does not have), or None for a link whose sharing is the
        fabric's to decide (then `shared` runs the step)."""

    def shared(self, g: float, h: float, f: float, sequential: bool) -> Generator:
        """Run GPU work g, host work h and frontend work f as jobs among the others, all at once
        or (sequential) one after the other in the order h, g, f; returns when all are done."""

    def copy(self, blocks: int) -> Generator:
        """Copy this many KV blocks between GPU and host memory (swap) over the host's copy path,
        among the jobs there; returns when done (at once when that path is unlimited)."""


class Bound(Protocol):
    """The lookahead bound (sim.engine.Lookahead)."""

    until: float  # before this instant nothing will look at the engine or touch its links


class _NoGate:
    """The gate of an engine no router feeds: nothing arrives but its own arrays."""

    __slots__ = ("until",)

    def __init__(self) -> None:
        self.until = INF


NO_GATE = _NoGate()


def delay_to(now: float, t: float) -> float:
    """A delay d with now + d == t in floating point, so that a wait set from the simulator's
    clock `now` ends at exactly the engine's own clock value t (t - now alone can miss by an ulp).
    When no d gives t exactly (now + d steps over it: round-half-even), the smallest d past it: a
    wait never ends before t (an engine woken an ulp early, idle until a router's instant t, would
    wait 0 s at that earlier instant for ever)."""
    d = t - now
    while now + d < t:
        d = math.nextafter(d, math.inf)
    while now + d > t:
        d = math.nextafter(d, -math.inf)
    if now + d < t:
        d = math.nextafter(d, math.inf)
    return d


class Counts(NamedTuple):
    """Where a sidecar's requests are at an instant; the fields sum to all its requests."""

    waiting: int  # arrived, not admitted
    prefilling: int  # admitted, prompt not fully computed
    decoding: int
    not_arrived: int
    finished: int
    rejected: int = 0  # too long ever to fit the KV pool (models.engine.kv) or max_model_len, or abandoned


def packed(x, code: str, dtype) -> array:
    """`x` as a compact typed array whose items read back as Python floats or ints."""
    a = array(code)
    a.frombytes(memoryview(np.ascontiguousarray(x, dtype=dtype)).cast("B"))
    return a


class EngineState:
    """One engine's state. While `serve` runs it keeps the counters in locals and publishes
    them here at every step, so whenever anything else runs this is the state as of `now`."""

    __slots__ = (
        # configuration: limits, latency law (models.engine.laws), host work per iteration (h + h1*batch +
        # h2*tokens), frontend work (fq per admitted request, ft per output token), sequential step or not
        ("max_seqs", "budget", "law", "h", "h1", "h2", "fq", "ft", "seq", "front")
        # per-request inputs and results
        + ("n", "t_arr", "prompt", "output", "admitted", "first_token", "finish")
        # queues
        + ("next_i", "waiting", "prefilling", "prefilled", "fin_heap")
        # counters, the clock, and the probe's (start, end) per step (None: off)
        + ("n_dec", "sum_ctx", "diter", "n_finished", "contended", "now", "log")
        # closed loop: the client (None: open loop) and each request's tag (its batch or user)
        + ("client", "tag")
        # the KV-cache block pool (models.engine.kv; None: unlimited, today's engine)
        + ("kv", "slow")
        # a router's next instant (sim.routing.RouterProc.until; inf: no router): an idle engine waits for it
        + ("gate",)
        # cached prompt tokens: each request's given count (`cached`: its KV arrives with it), the
        # prefix cache (`px`, models.engine.prefix; None: off) and each request's block hashes, the tokens a
        # request in prefill skipped at its admission (`skipped`) and the cache's blocks it pins
        # (`pinned`), and whether admission asks (`start`)
        + ("cached", "px", "hashes", "skipped", "pinned", "_skipped", "_pinned", "start")
        # busy periods recorded or replayed at idle instants (models.engine.tape; None: neither)
        + ("tape",)
        # the head of the queue that did not fit (admit_kv) and what admitting it would take, as of the
        # prefix cache's epoch: it asks again at every step, and the answer holds until the cache changes
        + ("_head", "_head_epoch", "_head_skip", "_head_nb")
        # when running requests went back to the queue (preempted) and came back (re-admitted, swapped
        # in), in engine time: with the request times they give the queue and batch sizes at any
        # instant (sim.monitor's lazy samples)
        + ("requeued", "resumed")
        # the result arrays again, as the engine writes them, and the input arrays as it reads them (the
        # compiled core's typed views: serving.pxd; `_views`); an input array grows only with its views dropped
        + ("_admitted", "_first_token", "_finish", "_t_arr", "_prompt", "_output", "_prefilled")
        # vLLM V1's limits (engine.async_scheduling, engine.max_model_len, the client's time-out): arrivals
        # reach the schedule one iteration late (`lag`), requests longer than `max_len` are refused, requests
        # sent `patience` ago or more are abandoned (waiting: at the queue's head; running: aborted), counted;
        # `live` marks the running requests, `alive` holds them by request id (= by arrival: a deadline heap)
        + ("lag", "limits", "watch", "max_len", "patience", "refused", "abandoned", "live", "_live", "alive")
        # the prefix cache in the pool's free blocks (vLLM V1, engine.prefix_caching): a computed prompt's blocks
        # become its entries, pinned while it runs, and stay cached when it goes until their blocks are taken
        + ("pooled",)
    )

    def __init__(
        self,
        t,
        prompt,
        output,
        lat,
        *,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        host_s: float,
        step: EngineStep = TODAYS_STEP,
        kv: KVPool | None = None,
        cached=None,
        prefix: PrefixCache | None = None,
        hashes=None,
        lag: bool = False,
        max_len: int = 0,
        patience: float = INF,
        pooled: bool = False,
    ):
        self.kv = kv
        # `serve` books steps with _book_slow (a KV pool, a prefix cache, a client, a log, a router)
        self.slow = kv is not None or prefix is not None
        self.gate = NO_GATE
        self.max_seqs, self.budget = max_num_seqs, max_num_batched_tokens
        self.law = law_of(lat)  # (a law of this core, or a fitted model's: models.engine.laws)
        self.h = host_s
        self.h1, self.h2, self.seq = step.host_per_seq_s, step.host_per_token_s, step.sequential
        self.fq, self.ft, self.front = step.front_per_request_s, step.front_per_token_s, step.frontend
        self.px = prefix
        self._requests(t, prompt, output, cached, hashes)
        self._v1(lag, max_len, patience, pooled)
        self.next_i = 0  # next arrival not yet pulled into `waiting`
        self.waiting = RingFifo()  # arrived, not admitted, in arrival order (a preempted request at the head)
        self.prefilling = RingFifo()  # admitted, prompt not fully computed, in admission order
        self.fin_heap = KeyHeap()  # key(iteration after which it is done, request)
        self.n_dec = 0  # decoding requests
        self.sum_ctx = 0  # sum over decoders of prompt + tokens generated
        self.diter = 0  # iterations run
        self.n_finished = 0
        self.contended = 0  # iterations run below full speed or shared with other jobs
        self.now = 0.0
        self.log: list[tuple[float, float]] | None = None
        self.client = None
        self.tag: array | None = None
        self.tape = None
        self._head, self._head_epoch, self._head_skip, self._head_nb = -1, -1, (0, 0, 0), 0
        self.requeued: list[float] = []
        self.resumed: list[float] = []

    def _requests(self, t, prompt, output, cached, hashes) -> None:
        """The per-request inputs (compact typed arrays: arrival, prompt and output lengths, cached prompt
        tokens, block hashes), results (NaN until known) and per-request engine state."""
        self.n = n = len(t)
        if n > RIDS:
            raise ValueError(f"an engine serves at most {RIDS} requests (fin_heap keys)")
        self.t_arr = packed(t, "d", np.float64)
        self.prompt = packed(prompt, "q", np.int64)
        self.output = packed(output, "q", np.int64)
        self.admitted = np.full(n, NAN)
        self.first_token = np.full(n, NAN)
        self.finish = np.full(n, NAN)
        # per request, while it is in `prefilling`: its prompt tokens computed so far (else stale); an
        # array of Python ints, as the dict it replaces held (numpy's int64 would change the pure core's types)
        self.prefilled = array("q", bytes(8 * n))
        # per request: the prompt tokens it skipped at its admission (cached), until its prefill is done
        # (0 after); the prefix cache's blocks it pins (0: none, and nothing for `px.release` to do)
        self.skipped = array("q", bytes(8 * n))
        self.pinned = array("q", bytes(8 * n))
        self.live = array("q", bytes(8 * n))  # 1 while it runs (admitted, not done, preempted or abandoned)
        self.cached = array("q", bytes(8 * n)) if cached is None else packed(cached, "q", np.int64)
        self.hashes = None if hashes is None else list(hashes)
        if len(self.cached) != n or (self.hashes is not None and len(self.hashes) != n):
            raise ValueError("one cached-token count and one hash tuple per request")
        c, p = np.asarray(self.cached, dtype=np.int64), np.asarray(prompt, dtype=np.int64)  # (vectorised)
        if n and ((c < 0).any() or (c > p).any()):
            raise ValueError("a request's cached prompt tokens are between 0 and its prompt")
        self.start = self.px is not None or bool(c.any())
        del c  # (a view of the array `cached`, which must not be held while it may grow: route_in)
        self._views()
        self._grow()  # (the input arrays' views)

    def _v1(self, lag: bool, max_len: int, patience: float, pooled: bool) -> None:
        """vLLM V1's limits (the slots' comment): none of them is the default engine's."""
        self.lag, self.max_len, self.patience = lag, (max_len if max_len > 0 else 1 << 62), patience
        self.refused = self.abandoned = 0
        self.watch = patience < INF  # (a C flag where the compiled core asks, not a float compared each time)
        self.limits = max_len > 0 or self.watch  # (admission asks `_gone` only then)
        self.alive = KeyHeap()
        self.pooled = pooled
        px, kv = self.px, self.kv
        if pooled and (px is None or kv is None or px.block_tokens != kv.bs):
            raise ValueError("a prefix cache in the pool's free blocks needs a pool and blocks of its size")
        if patience < INF and kv is not None and kv.mode.copies:
            raise ValueError("a client's time-out aborts requests the engine holds: preemption must recompute")

    # -- closed loop: requests created as the run goes --------------------------------------------
    def attach(self, client) -> None:
        """Serve `client`'s requests (models.workload.clients): it submits its first ones now, more as they finish."""
        self.client, self.tag, self.slow = client, array("q"), True
        if self.n:
            raise ValueError("a closed-loop engine starts with no pre-drawn arrivals")
        client.start(self)

    def route_in(self, t: float, prompt: int, output: int, cached: int = 0, hashes=None) -> None:
        """A request handed to this engine as it arrives at t (>= every arrival so far; a router, or a
        disaggregated prefill engine). `cached`: prompt tokens whose KV comes with it (0 to prompt; its
        prefill computes only the rest, its context is the whole prompt; a preempted request recomputes
        them); `hashes`: its prompt's block hashes, for the prefix cache."""
        if not 0 <= cached <= prompt:
            raise ValueError(f"cached prompt tokens {cached} outside [0, {prompt}]")
        self._unview()
        self.t_arr.append(t)
        self.prompt.append(prompt)
        self.output.append(output)
        self.cached.append(cached)
        if hashes is not None and self.hashes is None:
            self.hashes = [None] * self.n
        if self.hashes is not None:
            self.hashes.append(hashes)
        self.start = self.start or cached > 0
        self.n += 1
        self._grow()

    def _grow(self) -> None:
        if self.n > RIDS:
            raise ValueError(f"an engine serves at most {RIDS} requests (fin_heap keys)")
        if self.n > len(self.finish):  # unarrived requests have NaN results: growing is all it takes
            cap = max(2 * len(self.finish), self.n, 64)
            for name in ("admitted", "first_token", "finish"):
                old = getattr(self, name)
                new = np.full(cap, NAN)
                new[: len(old)] = old
                setattr(self, name, new)
            # (new arrays, never resized in place: the compiled core holds views of them)
            zeros = array("q", bytes(8 * (cap - len(self.prefilled))))
            self.prefilled, self.skipped = self.prefilled + zeros, self.skipped + zeros
            self.pinned, self.live = self.pinned + zeros, self.live + zeros
            self._views()
        self._t_arr, self._prompt, self._output = self.t_arr, self.prompt, self.output  # (`_unview` dropped them)

    def _views(self) -> None:
        self._admitted, self._first_token, self._finish = self.admitted, self.first_token, self.finish
        self._prefilled, self._skipped, self._pinned = self.prefilled, self.skipped, self.pinned
        self._live = self.live
        if self.kv is not None:
            self.kv.room(len(self.finish))  # (the pool's per-request arrays: as many as the results')

    def _unview(self) -> None:
        """Drop the typed views of the input arrays before they grow (an array.array with a view on
        its buffer cannot be resized); `_grow` takes them again."""
        self._t_arr = self._prompt = self._output = None

    def add(self, t: float, prompt, output, tag: int) -> None:
        """Requests arriving at t (>= now) with these token lengths: inserted into the not-yet-arrived
        tail, after any arriving at or before t, so the arrival order stays sorted. Only requests
        that have not arrived move, and only the client holds those (by tag, not by index)."""
        m = len(prompt)
        if not m:
            return
        pos = bisect_right(self.t_arr, t, self.next_i)
        self._unview()
        self.t_arr[pos:pos] = array("d", [t]) * m
        self.prompt[pos:pos] = array("q", prompt)
        self.output[pos:pos] = array("q", output)
        self.tag[pos:pos] = array("q", [tag]) * m
        self.cached[pos:pos] = array("q", bytes(8 * m))
        if self.hashes is not None:
            self.hashes[pos:pos] = [None] * m
        self.n += m
        self._grow()

    # -- queries (present state only) -------------------------------------------------------
    def queue_len(self, now: float) -> int:
        """Requests arrived by `now` and not yet admitted. (Everything before next_i arrived at
        or before an earlier instant, so the search can start there.)"""
        i, t, kv = self.next_i, self.t_arr, self.kv
        swapped = len(kv.mode.parked) if kv is not None else 0  # (swapped out: waiting to come back)
        return len(self.waiting) + swapped + (bisect_right(t, now, i + 1) - i if i < self.n and t[i] <= now else 0)

    def arrived(self, now: float) -> int:
        return bisect_right(self.t_arr, now)

    def running(self) -> int:
        return self.n_dec + len(self.prefilling)

    def counts(self, now: float) -> Counts:
        """The requests by where they are at `now` (>= self.now; arrivals since then wait)."""
        arrived = bisect_right(self.t_arr, now)
        waiting = len(self.waiting) + arrived - self.next_i + (len(self.kv.mode.parked) if self.kv is not None else 0)
        rejected = (self.kv.rejected if self.kv is not None else 0) + self.refused + self.abandoned
        return Counts(waiting, len(self.prefilling), self.n_dec, self.n - arrived, self.n_finished, rejected)

    def tally(self, t: float, seen: int, adm: int, fin: int) -> tuple[int, int, int, int]:
        """sim.monitor's lazy samples, from the request times: at t (the samples' instants ascend), from
        the last sample's cursors (requests arrived by then, admitted by then, and the first not
        finished by then), the cursors at t and the requests finished by t. Arrivals and admissions
        ascend (FCFS; a NaN tail not yet admitted), so two cursors move forward only; the finished
        after the third are counted one by one."""
        t_arr, admitted, finish, n = self._t_arr, self._admitted, self._finish, self.n
        while seen < n and t_arr[seen] <= t:
            seen += 1
        while adm < seen and admitted[adm] <= t:
            adm += 1
        while fin < adm and finish[fin] <= t:
            fin += 1
        done = fin
        for j in range(fin + 1, adm):  # (finish[fin] > t or NaN)
            if finish[j] <= t:
                done += 1
        return seen, adm, fin, done

    # -- rule 1 ---------------------------------------------------------------------------------
    def arrive(self, now: float, seen: float) -> int:
        """Every request that has arrived by `seen` (`now`; with async scheduling, when the step in flight
        began) waits. Publishes `now` and the next arrival's index, and returns that index."""
        i, n, waiting = self.next_i, self.n, self.waiting
        while i < n and self._t_arr[i] <= seen:
            waiting.push(i)
            i += 1
        self.now, self.next_i = now, i
        return i

    def idle(self) -> bool:
        """Nothing to run: no decoder, no prompt in prefill, none waiting (nor swapped out)."""
        kv = self.kv
        return not self.n_dec and not self.prefilling.n and not self.waiting.n and (kv is None or not kv.mode.parked)

    def next_at(self, i: int) -> float:
        """When an engine whose next request is i next has one to take: i's arrival, or else a router's
        next instant (`gate`; inf: none)."""
        if i < self.n:
            return self._t_arr[i]
        return self.gate.until

    # -- rules 2 and 4 --------------------------------------------------------------------------
    def continuing(self, budget: int) -> tuple[int, int, int]:
        """Rule 2's first part: the requests already in prefill get the next chunk of their prompt, in
        order, while the token budget lasts: (chunks, the last one's tokens, the budget left)."""
        prefilling = self.prefilling
        m = take = 0
        for j in range(prefilling.n):
            if budget <= 0:
                break
            rid = prefilling.at(j)
            take = self._prompt[rid] - self._prefilled[rid]
            take = take if take < budget else budget
            m += 1
            budget -= take
        return m, take, budget

    def admit(self, now: float, n_dec: int, sum_ctx: int) -> tuple[int, int, int]:
        """The prefill chunks of the iteration starting at `now`, admitting waiting requests as rule
        2 allows: (m, last, pf). The chunks go to the first m requests of `prefilling` (those already
        in prefill first, then the new admissions appended to it); each takes the rest of its prompt
        but the last, which takes `last` tokens (the token budget may cut it short); pf is the prefill
        tokens they add up to. No list of (request, tokens) pairs: a step needs only these three."""
        prefilling, waiting = self.prefilling, self.waiting
        budget0 = self.budget
        m, take, budget = self.continuing(budget0 - n_dec)
        room, start = self.max_seqs - n_dec - prefilling.n, self.start
        while waiting.n and budget > 0 and room > 0:
            rid = waiting.pop_front()
            if self.limits and self._gone(rid, now):
                continue
            self._admitted[rid] = now
            prefilling.push(rid)
            self._run(rid)
            if start:
                got, hit, tok = self.skip(rid)
                self.take_cached(rid, True, got, hit, tok)
            else:
                got = 0
            self._prefilled[rid] = got
            take = self._prompt[rid] - got
            take = take if take < budget else budget
            m += 1
            budget -= take
            room -= 1
        return m, take, budget0 - n_dec - budget

    def host_work(self, m: int, last: int, n_dec: int) -> tuple[float, float]:
        """An iteration's host time h0 + h1*batch + h2*scheduled tokens and the API server's time: fq per
        request admitted in it (a new admission has no prompt token computed yet) and ft per output token
        it produces (one per decoder, a first token per chunk that ends a prompt); m chunks (`admit`)."""
        if not m:
            return self.h + (self.h1 + self.h2) * n_dec, self.ft * n_dec
        prefilling = self.prefilling
        new = tokens = pf = 0
        for j in range(m):
            rid = prefilling.at(j)
            got = self._prefilled[rid]
            take = self._prompt[rid] - got if j < m - 1 else last
            new += got == self._skipped[rid]  # its first chunk: from the tokens it skipped
            tokens += got + take >= self._prompt[rid]
            pf += take
        h = self.h + self.h1 * (n_dec + m) + self.h2 * (n_dec + pf)
        return h, self.fq * new + self.ft * (n_dec + tokens)

    def chunks(self, m: int, last: int) -> tuple[int, int]:
        """The causal attention pairs of an iteration's m prefill chunks (`admit`), each over the prompt
        tokens already computed (models.engine.latency.attention_pairs), and those past tokens, summed."""
        prefilling = self.prefilling
        pairs = past = 0
        for j in range(m):
            rid = prefilling.at(j)
            got = self._prefilled[rid]
            take = self._prompt[rid] - got if j < m - 1 else last
            pairs += take * got + take * (take + 1) // 2
            past += got
        return pairs, past

    def first_tokens(self, m: int, last: int, end: float, diter: int, n_dec: int, sum_ctx: int) -> tuple[int, int]:
        """Rule 4 for the m prefill chunks (`admit`) of an iteration ending at `end` (the
        `diter`-th): first tokens, new decoders (and requests wanting one output token, finished).
        Returns the new (n_dec, sum_ctx)."""
        kv, start, prefilling = self.kv, self.start, self.prefilling
        # only the last chunk can fall short of its prompt: the requests whose prefill completes are
        # a prefix of `prefilling`
        completed = 0
        for j in range(m):
            rid = prefilling.at(j)
            got = self._prompt[rid] if j < m - 1 else self._prefilled[rid] + last
            if got < self._prompt[rid]:
                self._prefilled[rid] = got
                continue
            completed += 1
            if start:
                self.prefill_done(rid)
            # (a request recomputed after preemption has its first token)
            if kv is None or not kv.orig or rid not in kv.orig:
                self._first_token[rid] = end
            out = self._output[rid]
            if out <= 1:
                self._finish[rid] = end
                self.n_finished += 1
                self._live[rid] = 0
                if kv is not None:
                    self.release(rid, -1)
                elif self.px is not None:
                    self.unpin(rid)
                continue
            n_dec += 1
            if kv is not None:  # its phase: it needs a block at iterations t with (t - diter + prompt) % bs == 0
                kv.enter(diter - self._prompt[rid])
            sum_ctx += self._prompt[rid] + 1
            due = diter + out - 1
            if due >> 31:
                raise OverflowError(f"iteration {due} does not fit a fin_heap key")
            self.fin_heap.push(due << 32 | rid)
        if completed:
            prefilling.drop(completed)
        return n_dec, sum_ctx

    def finish_due(self, end: float, diter: int, n_dec: int, sum_ctx: int, done: list[int] | None) -> None:
        """Rule 4's completions at `end`, the end of iteration `diter`: the decoders due by then
        finish, their KV blocks and prefix cache entries go back, and a client's list `done` (None:
        no client) hears of them. Publishes the new n_dec and sum_ctx."""
        fin_heap = self.fin_heap
        kv, px = self.kv, self.px
        while True:
            x = fin_heap.pop_due(diter)  # a key: due << 32 | rid; -1: none is due
            if x < 0:
                break
            due = x >> 32
            rid = x - (due << 32)  # (x & 0xFFFFFFFF; the compiled core has no 64-bit literal in C)
            self._finish[rid], n_dec, sum_ctx = end, n_dec - 1, sum_ctx - self._prompt[rid] - self._output[rid]
            self.n_finished += 1
            self._live[rid] = 0
            if kv is not None:
                self.release(rid, due)
            elif px is not None:
                self.unpin(rid)
            if done is not None:
                done.append(rid)
        self.n_dec, self.sum_ctx = n_dec, sum_ctx

    # -- cached prompt tokens (given, or the prefix cache's: models.engine.prefix) ---------------------------
    def skip(self, rid: int) -> tuple[int, int, int]:
        """At admission: (prompt tokens request rid need not compute, the prefix cache's leading blocks
        it hits, the prompt tokens those hold). A hit covers at most the request's own prompt (a
        recomputed one's hashes cover its original prompt) less one token, whose logits vLLM
        recomputes; the given count may cover the whole prompt."""
        p, given, px = self._prompt[rid], self.cached[rid], self.px
        hs = self.hashes[rid] if px is not None and self.hashes is not None else None
        if not hs:
            return given, 0, 0
        k = px.lookup(hs)
        if not k:
            return given, 0, 0
        kv = self.kv
        o = kv.orig.get(rid) if kv is not None and kv.orig else None
        own = o[0] if o is not None else p
        tok = min(k * px.block_tokens, own, p - 1)
        if self.pooled:  # (the blocks it pins are the blocks it uses)
            k = tok // px.block_tokens
            tok = k * px.block_tokens
        return (given if given > tok else tok), k, tok

    def take_cached(self, rid: int, first: bool, got: int, k: int, tok: int) -> None:
        """Request rid is admitted skipping `got` prompt tokens: pin the prefix cache's k blocks it
        uses (their `tok` tokens' KV blocks are the cache's, not its own), count its first admission
        in the hit rate."""
        px = self.px
        if px is not None:
            if k:  # a request without block hashes (a workload that has none) hits nothing
                px.acquire(self.hashes[rid], k)
                self._pinned[rid] = k
            if first:
                px.hit_tokens += tok
                px.prompt_tokens += self._prompt[rid]
            kv = self.kv
            if kv is not None and tok >= kv.bs:
                kv.set_share(rid, tok // kv.bs)
        self._skipped[rid] = got

    def unpin(self, rid: int) -> None:
        """Request rid finished or was preempted: the prefix cache's blocks it pins are unpinned."""
        k = self._pinned[rid]
        if k:
            self._pinned[rid] = 0
            self.px.release(self.hashes[rid], k)

    def prefill_done(self, rid: int) -> None:
        """Request rid's prompt is computed: its blocks go into the prefix cache."""
        self._skipped[rid] = 0
        px = self.px
        if px is not None and self.hashes is not None:
            hs = self.hashes[rid]
            if hs and self.pooled:  # its own full prompt blocks become entries, pinned by it
                k = self._pinned[rid]
                full = min(len(hs), self._prompt[rid] // px.block_tokens)
                a = px.adopt(hs, k, full) if full > k else 0
                if a:
                    self._pinned[rid] = k + a
                    self.kv.adopt(rid, a)
            elif hs:
                px.insert(hs)

    # -- KV-cache blocks (models.engine.kv; only with a pool) -------------------------------------------
    def release(self, rid: int, due: int) -> None:
        """A request finished: its blocks go back (a decoder done after iteration `due` last wrote
        context prompt + output - 1; -1: one done at its first token), and a recomputed request has
        its own lengths again."""
        kv = self.kv
        total = self._prompt[rid] + self._output[rid]
        if due >= 0:
            kv.leave(due + 1 - total)
        kv.free(rid, blocks(total - 1, kv.bs))
        if self.px is not None:
            self.unpin(rid)
        kv.run_del(rid)
        o = kv.orig.pop(rid, None) if kv.orig else None
        if o is not None:
            self._prompt[rid], self._output[rid] = o

    def make_room(self, t: int, n_dec: int, sum_ctx: int) -> tuple[int, int]:
        """Before iteration t: the decoders crossing a block boundary take a block each; while they
        do not fit (or merge buffers took blocks back), preempt the most recently admitted running
        request, as vLLM V1's scheduler does. Publishes and returns the new (n_dec, sum_ctx)."""
        kv = self.kv
        need = kv.crossing(t) if n_dec else 0
        if kv.holding != kv.held:  # merge buffers take or give back their blocks (models.engine.kv apply_hold)
            kv.apply_hold()
        while kv.used + need + self._held() > kv.cap and kv.n_running:
            n_dec, sum_ctx, need = self._preempt(kv.last_running(), t, n_dec, sum_ctx, need)
        kv.need_now = need
        self.n_dec, self.sum_ctx = n_dec, sum_ctx
        return n_dec, sum_ctx

    def _preempt(self, rid: int, t: int, n_dec: int, sum_ctx: int, need: int) -> tuple[int, int, int]:
        """Preempt running request rid before iteration t: its blocks go back and it leaves the batch. A
        request still in prefill goes back to the head of the queue (recomputed); a decoder with ctx
        tokens so far goes where the pool's preemption mode puts it (models.engine.preemption: back to
        the queue as a prompt of ctx tokens, or swapped out to host memory). Returns the new (n_dec,
        sum_ctx) and the blocks the decoders take at iteration t (`need`)."""
        kv, prompt, output = self.kv, self.prompt, self.output
        kv.run_del(rid)
        kv.preemptions += 1
        self._live[rid] = 0
        self.requeued.append(self.now)
        if self.start:  # its KV is gone: what came with it is recomputed, the prefix cache's unpinned
            self.cached[rid] = 0
            self.skipped[rid] = 0
            if self.px is not None:
                self.unpin(rid)
        if rid in self.prefilling:
            self.prefilling.remove(rid)
            kv.free(rid, blocks(prompt[rid], kv.bs))
            self.waiting.push_front(rid)
            return n_dec, sum_ctx, need
        due = self.fin_heap.take(rid) >> 32
        total = prompt[rid] + output[rid]
        ctx = total - due + t  # its context at iteration t
        need -= kv.leave(due + 1 - total) == t % kv.bs
        kv.free(rid, blocks(ctx - 1, kv.bs))
        kv.mode.park(self, rid, ctx, due - t)
        return n_dec - 1, sum_ctx - ctx, need

    def admit_kv(self, now: float, n_dec: int, sum_ctx: int) -> tuple[int, int, int]:
        """`admit` with a block pool, after `make_room` made room for the decoders' blocks: admit
        FCFS while the prompt's blocks fit above the watermark (vLLM V0's `can_allocate`); a request
        too long ever to fit is rejected. Swapped-out decoders that come back change n_dec and
        sum_ctx: published (the pool's preemption mode, `resume`)."""
        if self.kv.mode.parked:  # swapped-out decoders come back before anything new is admitted (vLLM V0)
            n_dec, sum_ctx = self.kv.mode.resume(self, self.diter, n_dec, sum_ctx)
        prefilling, waiting, kv = self.prefilling, self.waiting, self.kv
        budget0 = self.budget
        m, take, budget = self.continuing(budget0 - n_dec)
        room, start = self.max_seqs - n_dec - prefilling.n, self.start
        free = kv.cap - kv.used - kv.need_now - kv.wm - self._held()
        epoch = self.px.epoch if self.px is not None else 0
        while waiting.n and budget > 0 and room > 0 and not kv.mode.parked:
            rid = waiting.at(0)
            if self.limits and self._gone(rid, now):
                waiting.pop_front()
                continue
            p = self._prompt[rid]
            nb = self.asks(rid, p, epoch)
            if nb < 0:  # too long ever to fit
                waiting.pop_front()
                kv.rejected += 1
                continue
            got, hit, tok = self._head_skip
            hf = self.px.unpinned(self.hashes[rid], hit) if self.pooled and hit else 0  # (cached blocks it takes)
            if nb + hf > free:
                break
            self._head = -1
            waiting.pop_front()
            free -= nb + hf
            kv.used += nb
            kv.run_add(rid)
            first = math.isnan(self._admitted[rid])  # its first admission (a recomputed one keeps its time)
            if first:
                self._admitted[rid] = now
            else:
                self.resumed.append(now)
            prefilling.push(rid)
            self._run(rid)
            if start:
                self.take_cached(rid, first, got, hit, tok)
            self._prefilled[rid] = got
            take = p - got
            take = take if take < budget else budget
            m += 1
            budget -= take
            room -= 1
        if self.pooled:
            self.trim()
        return m, take, budget0 - n_dec - budget

    def asks(self, rid: int, p: int, epoch: int) -> int:
        """What admitting request rid (prompt p, the head of the queue) takes from a KV pool: its blocks,
        those the prefix cache holds for it off (-1: too long ever to fit), and its cached tokens in
        `_head_skip` (`skip`). The answers hold while the prefix cache's epoch does: a head that does not
        fit asks again at every step (a request waiting keeps its prompt, its cached count and its
        original lengths: only the cache moves)."""
        if rid == self._head and epoch == self._head_epoch:
            return self._head_nb
        kv = self.kv
        if kv.too_long(p + self._output[rid], p):
            return -1
        got = hit = tok = 0
        if self.start:  # the prefix cache's blocks it uses are held once, by the cache
            got, hit, tok = self.skip(rid)
        self._head, self._head_epoch, self._head_skip = rid, epoch, (got, hit, tok)
        self._head_nb = blocks(p, kv.bs) - tok // kv.bs
        return self._head_nb

    # -- vLLM V1's limits: max_model_len, the client's time-out; the prefix cache in the pool ------------------
    def _run(self, rid: int) -> None:
        """Request rid is admitted: it runs (and, with a time-out, its deadline is watched)."""
        self._live[rid] = 1
        if self.watch:
            self.alive.push(rid)

    def _gone(self, rid: int, now: float) -> bool:
        """Whether waiting request rid, at the queue's head at `now`, never runs: longer than max_len
        (refused: vLLM's server answers it at once, so where it waited changes nothing) or sent `patience`
        ago or more (its client gave up: abandoned; a request back from preemption has its lengths again)."""
        if self._prompt[rid] + self._output[rid] > self.max_len:
            self.refused += 1
            return True
        if self._t_arr[rid] > now - self.patience:
            return False
        self.abandoned += 1
        kv = self.kv
        o = kv.orig.pop(rid, None) if kv is not None and kv.orig else None
        if o is not None:
            self._prompt[rid], self._output[rid] = o
        return True

    def expire(self, now: float) -> None:
        """At `now`, before an iteration: the running requests whose clients gave up are aborted, and
        the queue's head is dropped while it is refused or abandoned (`_gone`)."""
        if self.watch:
            self.give_up(now, self.diter, self.n_dec, self.sum_ctx)
        waiting = self.waiting
        while waiting.n and self._gone(waiting.at(0), now):
            waiting.pop_front()

    def give_up(self, now: float, t: int, n_dec: int, sum_ctx: int) -> tuple[int, int]:
        """Before iteration t, starting at `now`: the running requests sent `patience` ago or more are
        aborted, as vLLM aborts a request whose client disconnects (their slots and blocks go back),
        and counted abandoned. Publishes and returns the new (n_dec, sum_ctx)."""
        alive, limit = self.alive, now - self.patience
        while alive.n:
            rid = alive.top()
            if not self._live[rid]:  # (done, or back in the queue: the queue's head is checked there)
                alive.pop()
                continue
            if self._t_arr[rid] > limit:
                break
            alive.pop()
            n_dec, sum_ctx = self._abort(rid, t, n_dec, sum_ctx)
        self.n_dec, self.sum_ctx = n_dec, sum_ctx
        return n_dec, sum_ctx

    def _abort(self, rid: int, t: int, n_dec: int, sum_ctx: int) -> tuple[int, int]:
        """Running request rid leaves for good before iteration t: its KV blocks, its prefix cache pins and
        its slot go back (`_preempt` without the way back)."""
        kv, prompt, output = self.kv, self.prompt, self.output
        self._live[rid] = 0
        self.abandoned += 1
        if self.px is not None:
            self.unpin(rid)
        if rid in self.prefilling:
            self.prefilling.remove(rid)
            if kv is not None:
                kv.free(rid, blocks(prompt[rid], kv.bs))
        else:
            due = self.fin_heap.take(rid) >> 32
            total = prompt[rid] + output[rid]
            ctx = total - due + t  # its context at iteration t
            if kv is not None:
                kv.leave(due + 1 - total)
                kv.free(rid, blocks(ctx - 1, kv.bs))
            n_dec, sum_ctx = n_dec - 1, sum_ctx - ctx
        if kv is not None:
            kv.run_del(rid)
            o = kv.orig.pop(rid, None) if kv.orig else None
            if o is not None:
                prompt[rid], output[rid] = o
        return n_dec, sum_ctx

    def next_deadline(self) -> float:
        """When a time-out next changes what runs: the earliest running request's deadline, or the queue's
        head's (a head that does not fit the pool may make room for the next when it goes); inf: none."""
        alive, t = self.alive, INF
        while alive.n and not self._live[alive.top()]:
            alive.pop()
        if alive.n:
            t = self._t_arr[alive.top()] + self.patience
        if self.waiting.n:
            w = self._t_arr[self.waiting.at(0)] + self.patience
            t = w if w < t else t
        return t

    def _held(self) -> int:
        """Blocks of the pool the prefix cache holds for running requests (pooled: its pinned entries)."""
        return self.px.pinned if self.pooled else 0

    def trim(self) -> None:
        """After blocks were taken (pooled): the least recently used entries no request pins give up theirs."""
        over = self.kv.used + self.px.size - self.kv.cap
        if over > 0:
            self.px.evict(over)

    def kv_run(self, t: int, n_dec: int) -> int:
        """A pure-decode run's length from iteration t: to the next finish, or (with a KV pool) to the
        last iteration whose blocks fit (models.engine.kv.KVPool.safe_iters)."""
        x = self.fin_heap.top()  # a key: due << 32 | rid
        k = (x >> 32) - t
        if self.kv is not None:
            safe = self.kv.safe_iters(t, n_dec, self._held())
            return safe if safe < k else k
        return k


def _book_slow(
    st: EngineState, k: int, m: int, last: int, now: float, end: float, diter: int, n_dec: int, sum_ctx: int
):
    """Rule 4 (first tokens, completions) for k iterations ended at `end` of an engine with a KV
    pool (which books the iterations' blocks and takes back a finished request's), a prefix cache, a
    log or a client (which hears of every request finished at `end`, also one-token requests
    finished by `first_tokens`, and may submit new ones: `add`, which may grow the arrays).
    Publishes n_dec and sum_ctx."""
    kv, client = st.kv, st.client
    if st.log is not None:
        st.log.append((now, end))
    if kv is not None:
        kv.grow(k, diter - k, n_dec)
        if st.pooled:
            st.trim()
    if client is None:
        if m:
            n_dec, sum_ctx = st.first_tokens(m, last, end, diter, n_dec, sum_ctx)
        st.finish_due(end, diter, n_dec, sum_ctx, None)
        return
    rids = [st.prefilling.at(j) for j in range(m)]  # (first_tokens takes those whose prefill completes off)
    if m:
        n_dec, sum_ctx = st.first_tokens(m, last, end, diter, n_dec, sum_ctx)
    finish = st.finish
    done = [r for r in rids if finish[r] == end]
    st.finish_due(end, diter, n_dec, sum_ctx, done)
    if done:
        client.finished(st, done, end)


def _shared_step(st: EngineState, clock: Clock, work: tuple[float, float, float], t_sim: float, now: float):
    """One iteration (what is left of it: GPU, host and frontend `work`) as jobs among the others,
    from the engine's clock `now`, after the blocks swapped out or in cross PCIe (`kv.copy`, before
    the GPU step, as vLLM V0's cache engine swaps); returns the time it ends."""
    kv = st.kv
    copy = kv.copy if kv is not None else 0
    st.contended += 1 if not copy or clock.gpu_jobs or clock.host_jobs else 0
    if t_sim != now:  # (only for swap copies: work on the links clears the lookahead bound)
        yield clock.wait(delay_to(t_sim, now))
    if copy:
        kv.copy = 0
        kv.copied += copy
        yield from clock.copy(copy)
    yield from clock.shared(*work, st.seq)
    return clock.now()


def _cut(st: EngineState, clock: Clock, done: int, slowed: bool, end: float, e, g, h, f, sp, seq):
    """A run cut short at `end`, `done` iterations in: book those (they ran at the old speeds) and
    run the work left of the next one (models.engine.batching.rest; speeds `sp` if the run was slowed) as
    shared work; returns the time it ends."""
    if st.kv is not None:
        st.kv.grow(done, st.diter, st.n_dec)
        if st.pooled:
            st.trim()
    st.diter += done
    st.sum_ctx += st.n_dec * done
    st.contended += done if slowed else 0
    return (yield from _shared_step(st, clock, rest(e, g, h, f, sp if slowed else FULL3, seq), end, end))


IDLE, RUN, SHARED, DONE = 0, 1, 2, 3  # what `Steps.advance` hands `serve` to do before it is called again


class Steps:
    """`serve`'s registers between two of the simulator's events: the step in hand (k iterations
    ending at `end`, `span` long, its m prefill chunks, the last taking `last` tokens:
    `EngineState.admit`; `slowed`: run below full speed), the simulator's clock `t_sim`, what an
    interrupted step needs (its work g0, h, f, closed-form terms sg, sdg, sh, dg and speeds sp) and the
    next instant a tape is consulted (`mark`: models.engine.tape; inf: off tape). `ff`: fast-forward,
    with a law that has a line for decode runs (models.engine.laws); `extra`: host work that grows
    with the batch, a frontend path or a sequential step.
    `advance` runs steps until one needs the simulator; with the compiled core (serving.pxd) it runs
    in C, called once per SimPy event rather than once per step."""

    __slots__ = ("st", "clock", "bound", "ff", "k", "end", "m", "last", "slowed", "t_sim", "sp", "delay")
    __slots__ += ("g0", "h", "f", "sg", "sdg", "sh", "dg", "tape", "mark", "law", "extra", "span", "seen")

    def __init__(self, st: EngineState, clock: Clock, bound: Bound, ff: bool):
        self.st, self.clock, self.bound, self.law = st, clock, bound, st.law
        self.ff = ff and st.law.line  # (a law without a line steps one iteration at a time)
        self.extra = st.seq or st.front or st.h1 > 0 or st.h2 > 0
        self.k, self.end, self.m, self.last, self.slowed, self.t_sim, self.sp = 0, st.now, 0, 0, False, st.now, FULL3
        self.g0 = self.sg = self.sdg = self.sh = self.dg = self.f = self.delay = self.span = 0.0
        self.h = st.h  # (today's engine: host work h0 alone, frontend work none)
        self.seen = st.now  # (with async scheduling: when the step in flight began; its schedule saw arrivals to then)
        self.tape = None if st.lag else st.tape  # (a tape's snapshots know no schedule made a step early)
        self.mark = -INF if self.tape else INF

    def advance(self) -> int:
        """Book the step in hand and run the next ones until one needs the simulator: DONE (all served), IDLE
        or RUN (wait `delay`; RUN interruptibly), SHARED (run g0, h, f as jobs on the links). Publishes `st`."""
        st = self.st
        until = self.bound.until  # (only SimPy events move it: constant while this runs)
        busy = bool(self.clock.gpu_jobs or self.clock.host_jobs)  # other work on the engine's links (constant too)
        while True:
            if self.k:
                self._book()  # rule 4
            now = self.end
            i = st.arrive(now, self.seen if st.lag and self.k else now)  # rule 1
            if now >= self.mark:  # on a tape (models.engine.tape): record a snapshot, or jump ahead along the baseline
                self.mark = self.tape.mark(st, until, busy)
                now, i = st.now, st.next_i
            if st.limits:  # clients that gave up, requests refused
                st.expire(now)
            if st.idle():
                what = self._idle(now, until, busy)
                if what == DONE:
                    return DONE
                if what == IDLE:
                    break
                continue
            if self._compose(now, busy) == SHARED:  # rules 2 and 3
                self.seen = now
                what = SHARED
                break
            self._time(now, i)
            if self.end >= until:
                what = RUN
                break
        if what != SHARED:
            self.delay = self.span if self.t_sim == now else delay_to(self.t_sim, self.end)
        return what

    def _book(self) -> None:
        """Rule 4 for the step in hand, k iterations from st.now ended at `end`: first tokens, finishes.
        A KV pool, a prefix cache, a log or a client books it (`_book_slow`; a client may add requests)."""
        st, k, m, end = self.st, self.k, self.m, self.end
        n_dec = st.n_dec
        diter, sum_ctx = st.diter + k, st.sum_ctx + n_dec * k
        st.contended += k if self.slowed else 0
        if st.slow:
            _book_slow(st, k, m, self.last, st.now, end, diter, n_dec, sum_ctx)
        else:
            if m:
                n_dec, sum_ctx = st.first_tokens(m, self.last, end, diter, n_dec, sum_ctx)
            st.finish_due(end, diter, n_dec, sum_ctx, None)
        st.diter = diter

    def _time(self, now: float, i: int) -> None:
        """The step from `now`, composed: one iteration, or (fast-forward) the pure-decode iterations up to
        the next finish, or up to the first boundary at or after an arrival it could admit (i: the next
        request), timed in closed form (models.engine.batching)."""
        st, sg, sdg, sh = self.st, self.sg, self.sdg, self.sh
        n_dec = st.n_dec
        k, span = 1, (sh if sh > sg else sg)
        if self.ff and n_dec and not self.m:
            k = st.kv_run(st.diter, n_dec)  # >= 1: the finished were popped
            span = run_time(k, sg, sdg, sh)
            if k > 1 and (n_dec < st.max_seqs or i >= st.n) and span > (gap := st.next_at(i) - now):
                # stop for an arrival it could admit, or before the iteration in flight when a router looks
                k, span = reach(gap, sg, sdg, sh, k) if i < st.n else before(gap, sg, sdg, sh, k)
            if k > 1 and st.watch and span > (gap := st.next_deadline() - now):
                k, span = reach(gap, sg, sdg, sh, k)  # stop where a client gives up
        self.k, self.span, self.end = k, span, now + span
        self.seen = now + run_time(k - 1, sg, sdg, sh) if k > 1 and st.lag else now  # (read only with lag)

    def _idle(self, now: float, until: float, busy: bool) -> int:
        """Nothing to run at `now`: DONE when nothing will come; else wait for the next request (IDLE),
        or go on at once (-1) when that wait ends before the bound or a tape copied a busy period."""
        st = self.st
        i = st.next_i
        if i >= st.n and st.gate.until == INF:
            return DONE
        self.k, self.span = 0, st.next_at(i) - now
        if self.span < 0.0:  # (async scheduling: arrived in the last step, not yet seen; an idle engine sees it now)
            self.span = 0.0
        self.end = now + self.span
        tape = self.tape
        if tape:
            r = tape.idle(st, i, now, self.end, until, busy)
            if not math.isnan(r):  # copied a busy period: on tape
                self.end, self.mark = r, tape.after(r)
                return -1
        return IDLE if self.end >= until else -1

    def _compose(self, now: float, busy: bool) -> int:
        """Rules 2 and 3 for the iteration starting at `now`: the decoders' blocks (preempting if they do
        not fit), admissions, and the iteration's GPU, host and frontend work g0, h, f, with its growth dg
        over a pure-decode run (the law's line) and their times sg, sdg, sh at the speeds the jobs on
        the engine's links leave it (`clock.speeds`; `slowed`). SHARED when the fabric must share the
        links (or swap copies cross PCIe first), else RUN."""
        st, kv, law = self.st, self.st.kv, self.law
        if kv is not None:
            st.make_room(st.diter, st.n_dec, st.sum_ctx)
        m = pf = 0
        if kv is not None and (st.prefilling.n or st.waiting.n or kv.mode.parked):
            m, self.last, pf = st.admit_kv(now, st.n_dec, st.sum_ctx)
        elif kv is None and (st.prefilling.n or st.waiting.n):
            m, self.last, pf = st.admit(now, st.n_dec, st.sum_ctx)
        n_dec, sum_ctx, self.m, dg = st.n_dec, st.sum_ctx, m, 0.0  # (published: admit_kv's swap-ins change them)
        if m:
            pairs = past = 0
            if law.detail:
                pairs, past = st.chunks(m, self.last)
            g0 = law.step_time(pf, m, pairs, past, n_dec, sum_ctx)
        elif law.line:
            g0, dg = law.decode_line(n_dec, sum_ctx)
        else:
            g0 = law.step_time(0, 0, 0, 0, n_dec, sum_ctx)
        if self.extra:  # host work that grows with the batch, a frontend path, a sequential step
            self.h, self.f = st.host_work(m, self.last, n_dec)
        h, vf, sg, sdg = self.h, 1.0, g0, dg
        self.g0, self.dg, self.slowed, sh = g0, dg, False, h
        if busy or kv is not None and kv.copy:  # (merge work on front comes with host's)
            rg, rh, rf = sp = self.clock.speeds()
            if rg is None or rh is None or rf is None or kv is not None and kv.copy:  # shared (or swap copies)
                return SHARED
            vg, vh, vf = rg, rh, rf  # (C doubles in the compiled core)
            sg, sdg, sh, self.slowed, self.sp = g0 / vg, dg / vg, h / vh, vg < 1.0 or vh < 1.0 or vf < 1.0, sp
        if self.extra:  # what the closed forms take (g0, h) for the generation
            sg, sh = compose(sg, sh, self.f / vf if self.slowed else self.f, st.seq)
        self.sg, self.sdg, self.sh = sg, sdg, sh
        return RUN


def serve(st: EngineState, clock: Clock, bound: Bound, ff: bool) -> Generator:
    """Serve `st`'s requests on `clock`, publishing `st` at every step, until all are done (module
    docstring): the simulator's side of `Steps.advance`, which books every step that needs no event."""
    run = Steps(st, clock, bound, ff)
    wait, Cut = clock.wait, clock.Cut
    while True:
        what = run.advance()
        if what == RUN:
            clock.interruptible = True
            try:
                yield wait(run.delay)
                clock.interruptible = False
            except Cut:  # the jobs on our links changed: what is left of the iteration is shared work
                end, now, k = clock.now(), st.now, run.k
                done, e = split(end - now, run.sg, run.sdg, run.sh, k)  # the iterations done ran at the old speeds
                if done < k:
                    run.seen = now + run_time(done, run.sg, run.sdg, run.sh) if done else now
                    g = run.g0 + done * run.dg
                    end = yield from _cut(st, clock, done, run.slowed, end, e, g, run.h, run.f, run.sp, st.seq)
                    run.k, run.slowed = 1, False
                run.end = end
            run.t_sim = run.end
        elif what == IDLE:
            yield wait(run.delay)
            run.t_sim = run.end
        elif what == SHARED:
            run.end = run.t_sim = yield from _shared_step(st, clock, (run.g0, run.h, run.f), run.t_sim, st.now)
            run.k = 1
        else:
            return
