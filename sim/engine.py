"""One vLLM-like serving sidecar: a single SimPy process doing continuous batching.

Each iteration the scheduler (vLLM v1 order) gives every decoding request one token, then spends
what is left of `max_num_batched_tokens` on prefill chunks: first for requests already
prefilling, then for waiting requests admitted FCFS while fewer than `max_num_seqs` run.
An iteration needs GPU work g (the fitted latency model) and host work h (scheduler, sampling,
launches) at the same time; it ends when both are done. Requests are plain integers indexing
this sidecar's arrival arrays, so the hot path allocates no per-request objects.

Fast path: when the engine's GPU and host links carry no other job, an iteration takes exactly
max(h, g) and needs no fabric work. With `fast_forward`, a whole run of pure-decode iterations
(until the next completion, or the next arrival that could be admitted) is one timeout, timed in
closed form (models.batching). If merge work lands on the GPU or host link mid-run, the fabric
interrupts the engine at that instant; it books the iterations already finished and submits the
rest of the current one as fabric jobs, which then share the link with the merge.

Lookahead: between merges nothing else touches the engine's links, and nothing reads its state
except at known instants (the policy's next decision, the monitor's next sample: `Lookahead`).
Iterations that end before then are booked without a SimPy event; the engine keeps its own clock
and yields only for the iteration that crosses that instant. Results are bit-identical either way.
"""

from __future__ import annotations

import heapq
import math
from array import array
from bisect import bisect_right
from collections import deque
from math import ceil

import numpy as np
import simpy

from wadiloco.models.batching import gpu_iters_to_reach, iters_to_reach, iters_within, run_time
from wadiloco.models.latency import LatencyModel
from wadiloco.sim.fabric import Fabric, Link

hold_share = Fabric.hold_share

NAN = float("nan")


def delay_to(now: float, t: float) -> float:
    """A delay d with now + d == t in floating point, so that a timeout set from the SimPy clock
    `now` fires at exactly the engine's own clock value t (t - now alone can miss by an ulp)."""
    d = t - now
    while now + d < t:
        d = math.nextafter(d, math.inf)
    while now + d > t:
        d = math.nextafter(d, -math.inf)
    return d


class Lookahead:
    """The instant before which nothing outside the engines will look at them or put work on their
    links (the fleet keeps it: sim.fleet.Fleet.bound_changed). An iteration that ends before it is
    booked at once, without a SimPy event: every later event sees the same state at the same
    instant as if the engine had yielded. -inf (the default) turns this off."""

    __slots__ = ("until",)

    def __init__(self) -> None:
        self.until = -math.inf


def _packed(x, code: str, dtype) -> array:
    a = array(code)
    a.frombytes(memoryview(np.ascontiguousarray(x, dtype=dtype)).cast("B"))
    return a


class Sidecar:
    def __init__(
        self,
        env: simpy.Environment,
        idx: int,
        arrivals,
        lat: LatencyModel,
        *,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        host_s: float,
        gpu: Link,
        host: Link,
        fast_forward: bool = True,
        lookahead: Lookahead | None = None,
    ):
        self.env = env
        self.idx = idx
        self.t_arr = arrivals.t
        # The hot loop reads these one element at a time: compact typed arrays (8 bytes a request;
        # a list of Python objects takes 5x that) whose items come out as Python floats and ints.
        self.prompt = _packed(arrivals.prompt, "q", np.int64)
        self.output = _packed(arrivals.output, "q", np.int64)
        self.n = len(arrivals.t)
        self._t_list = _packed(arrivals.t, "d", np.float64)
        self.lat = lat
        self.max_seqs = max_num_seqs
        self.budget = max_num_batched_tokens
        self.h = host_s
        self.gpu = gpu
        self.host = host
        self.ff = fast_forward
        self.la = lookahead or Lookahead()
        # per-request results
        self.first_token = np.full(self.n, NAN)
        self.finish = np.full(self.n, NAN)
        self.admitted = np.full(self.n, NAN)
        # engine state
        self.next_i = 0  # next arrival not yet pulled into `waiting`
        self.waiting: deque[int] = deque()
        self.prefilling: list[int] = []  # admitted, prompt not fully computed
        self.prefilled: dict[int, int] = {}  # rid -> prompt tokens computed so far
        self.n_dec = 0  # decoding requests
        self.sum_ctx = 0  # sum over decoding requests of prompt + tokens generated
        self.diter = 0  # iterations run so far
        self.fin_heap: list[tuple[int, int]] = []  # (iteration at which it finishes, rid)
        self.contended_iterations = 0
        # The engine stays its links' occupant for good; `_interruptible` says whether a call
        # from the fabric finds it in a timeout it can cut short.
        self._interruptible = False
        gpu.occupant = host.occupant = self._wake
        # The instant the engine's state is as of, whenever it is suspended; never after env.now
        # (the lookahead invariant the fleet checks at every observation).
        self.clock = 0.0
        self.iter_log: list[tuple[float, float]] | None = None  # (start, end) per step, when probing
        self.proc = env.process(self.run())

    @property
    def iterations(self) -> int:
        """Iterations finished so far (every booked iteration advances `diter` by one)."""
        return self.diter

    # -- observation helpers (present state only) ---------------------------------------------
    def queue_len(self, now: float) -> int:
        """Requests arrived by `now` and not yet admitted. (Everything before next_i arrived at
        or before an earlier instant, so the search can start there.)"""
        i, t = self.next_i, self._t_list
        return len(self.waiting) + (bisect_right(t, now, i + 1) - i if i < self.n and t[i] <= now else 0)

    def running(self) -> int:
        return self.n_dec + len(self.prefilling)

    # -- the process ---------------------------------------------------------------------------
    def _wake(self) -> None:
        if self._interruptible:
            self._interruptible = False
            self.proc.interrupt()

    def run(self):
        # The hot loop keeps everything it touches in locals. The engine's counters (n_dec, sum_ctx,
        # diter, next_i) are written back to `self` before every yield, because observers
        # (queue_len, running) read them while the engine is suspended.
        env = self.env
        lat = self.lat
        a, b, c, d = lat.a, lat.b, lat.c, lat.d
        h = self.h
        t_list = self._t_list
        n = self.n
        prompt, output = self.prompt, self.output
        waiting, prefilling, prefilled = self.waiting, self.prefilling, self.prefilled
        fin_heap = self.fin_heap
        admitted, first_token, finish = self.admitted, self.first_token, self.finish
        gpu, host = self.gpu, self.host
        gpu_jobs, host_jobs = gpu.jobs, host.jobs  # mutated in place by the fabric, never replaced
        max_seqs, budget0, ff = self.max_seqs, self.budget, self.ff
        timeout = env.timeout
        log = self.iter_log  # set by the probe before the run starts
        la = self.la
        push, pop = heapq.heappush, heapq.heappop
        n_dec, sum_ctx, diter, i = self.n_dec, self.sum_ctx, self.diter, self.next_i
        now = env.now  # the engine's clock: env.now after a yield, ahead of it between yields
        ahead = False  # now > env.now: steps were booked without yielding
        while True:
            # pull every request that has arrived by now
            if i < n and t_list[i] <= now:
                waiting.append(i)
                i += 1
                while i < n and t_list[i] <= now:
                    waiting.append(i)
                    i += 1
                self.next_i = i
            if not n_dec and not prefilling and not waiting:
                if i >= n:
                    return
                nxt = now + (t_list[i] - now)  # what env.now would become
                if nxt < la.until:
                    ahead = True
                else:
                    self.clock = now
                    yield timeout(delay_to(env.now, nxt) if ahead else t_list[i] - now)
                    ahead = False
                now = nxt
                continue
            # ---- schedule one iteration ----
            if prefilling or waiting:
                budget = budget0 - n_dec
                chunks: list[tuple[int, int]] | None = []
                for rid in prefilling:
                    if budget <= 0:
                        break
                    take = min(prompt[rid] - prefilled[rid], budget)
                    chunks.append((rid, take))
                    budget -= take
                while waiting and budget > 0 and n_dec + len(prefilling) < max_seqs:
                    rid = waiting.popleft()
                    admitted[rid] = now
                    prefilling.append(rid)
                    prefilled[rid] = 0
                    take = min(prompt[rid], budget)
                    chunks.append((rid, take))
                    budget -= take
                prefill_tokens = budget0 - n_dec - budget
                g0 = a + b * prefill_tokens + c * sum_ctx + d * (n_dec + len(chunks))
            else:
                chunks = None
                g0 = a + c * sum_ctx + d * n_dec  # the same value: a + b*0 == a exactly
            dg = c * n_dec
            # ---- speeds on our GPU and host ----
            # 1 when alone (the common case: no fabric work at all), a constant share when only
            # merge holds press on them, None when finite jobs share them (the fabric decides).
            shared = False
            if gpu_jobs or host_jobs:
                rg = 1.0 if not gpu_jobs else hold_share(gpu)
                rh = 1.0 if not host_jobs else hold_share(host)
                if rg is None or rh is None:
                    shared = True
                elif rg == 1.0 and rh == 1.0:
                    sg, sdg, sh = g0, dg, h
                else:
                    sg, sdg, sh = g0 / rg, dg / rg, h / rh
            else:
                rg = rh = 1.0
                sg, sdg, sh = g0, dg, h
            if shared:
                self.clock = now
                if ahead:  # (cannot happen: merge work never meets an engine that ran ahead)
                    yield timeout(delay_to(env.now, now))
                    ahead = False
                k = to_book = 1
                self.contended_iterations += 1
                yield from self._shared_iteration(g0, h)
                end = env.now
            else:
                # ---- how many iterations can run as one closed-form step ----
                if ff and not chunks and n_dec:
                    k = fin_heap[0][0] - diter  # >= 1: finished requests were popped
                    # span = run_time(k, sg, sdg, sh), inlined (models.batching, same expressions)
                    gpu_bound = sh <= sg  # no host-bound iteration: an arithmetic series
                    if gpu_bound:
                        span = k * sg + sdg * (k * (k - 1) / 2)
                    else:  # the first m iterations are host-bound
                        if sdg <= 0:
                            m = k
                        else:
                            m = ceil((sh - sg) / sdg)
                            if m > k:
                                m = k
                        if m and sh <= sg + (m - 1) * sdg:
                            m -= 1
                        span = m * sh + (k - m) * sg + sdg * (k * (k - 1) / 2 - m * (m - 1) / 2)
                    if k > 1 and n_dec < max_seqs and i < n:
                        # stop at the first boundary at or after the next admissible arrival
                        wait = t_list[i] - now
                        if span > wait:
                            if gpu_bound:
                                k = gpu_iters_to_reach(wait, sg, sdg, k)
                                span = k * sg + sdg * (k * (k - 1) / 2)
                            else:
                                k = iters_to_reach(wait, sg, sdg, sh, k)
                                span = run_time(k, sg, sdg, sh)
                else:
                    k = 1
                    span = sh if sh > sg else sg
                # ---- run them ----
                # Exact: our rates cannot change before the occupant callback wakes us.
                to_book = k
                slowed = rg < 1.0 or rh < 1.0
                end = now + span  # what env.now would become: SimPy adds the delay to the same float
                if end < la.until:
                    ahead = True  # nothing will interrupt or observe us before `end`
                else:
                    self.clock = now
                    self._interruptible = True
                    try:
                        yield timeout(delay_to(env.now, end) if ahead else span)
                        self._interruptible = False
                        ahead = False
                    except simpy.Interrupt:
                        # The jobs on our GPU/host changed: finish the current iteration in the fabric.
                        ahead = False
                        el = env.now - now
                        done = iters_within(el, sg, sdg, sh, k)
                        if done < k:
                            e = el - run_time(done, sg, sdg, sh)
                            if done > 0:
                                diter += done
                                sum_ctx += n_dec * done
                                self.sum_ctx, self.diter = sum_ctx, diter
                            # the finished iterations ran at the old rates, the partial one is shared
                            self.contended_iterations += (done if slowed else 0) + 1
                            k = done + 1
                            to_book = 1
                            slowed = False
                            yield from self._shared_iteration(g0 + done * dg - e * rg, h - e * rh)
                        end = env.now
                if slowed:
                    self.contended_iterations += k
            if log is not None:
                log.append((now, end))
            # ---- book the results ----
            diter += to_book
            sum_ctx += n_dec * to_book
            if chunks:
                # chunks[j][0] == prefilling[j] (chunks go to prefilling requests in order, then to
                # the new admissions appended to it), and only the last chunk can fall short of
                # its prompt: the requests whose prefill completes are a prefix of `prefilling`.
                completed = 0
                for rid, take in chunks:
                    got = prefilled[rid] + take
                    if got < prompt[rid]:
                        prefilled[rid] = got
                        continue
                    del prefilled[rid]
                    completed += 1
                    first_token[rid] = end
                    out = output[rid]
                    if out <= 1:
                        finish[rid] = end
                        continue
                    n_dec += 1
                    sum_ctx += prompt[rid] + 1
                    push(fin_heap, (diter + out - 1, rid))
                del prefilling[:completed]
            while fin_heap and fin_heap[0][0] <= diter:
                rid = pop(fin_heap)[1]
                finish[rid] = end
                n_dec -= 1
                sum_ctx -= prompt[rid] + output[rid]
            self.n_dec, self.sum_ctx, self.diter = n_dec, sum_ctx, diter
            now = end

    def _shared_iteration(self, g: float, h: float):
        gpu, host = self.gpu, self.host
        jg = gpu.fabric.start([gpu], g, 1.0, 1.0, ("serve", self.idx)) if g > 0 else None
        jh = host.fabric.start([host], h, 1.0, 1.0, ("serve", self.idx)) if h > 0 else None
        if jg is not None:
            yield jg.done
        if jh is not None:
            yield jh.done
