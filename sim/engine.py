"""One vLLM-like serving sidecar: a single SimPy process doing continuous batching.

Each iteration the scheduler (vLLM v1 order) gives every decoding request one token, then spends
what is left of `max_num_batched_tokens` on prefill chunks: first for requests already
prefilling, then for waiting requests admitted FCFS while fewer than `max_num_seqs` run.
An iteration needs GPU work g (the fitted latency model) and host work h (scheduler, sampling,
launches) at the same time; it ends when both are done. Requests are plain integers indexing
this sidecar's arrival arrays, so the hot path allocates nothing per iteration.

Fast path: when the engine's GPU and host links carry no other job, an iteration takes exactly
max(h, g) and needs no fabric work. With `fast_forward`, a whole run of pure-decode iterations
(until the next completion, or the next arrival that could be admitted) is one timeout, timed in
closed form (models.batching). If merge work lands on the GPU or host link mid-run, the fabric
interrupts the engine at that instant; it books the iterations already finished and submits the
rest of the current one as fabric jobs, which then share the link with the merge.
"""
from __future__ import annotations

import heapq
from collections import deque

import numpy as np
import simpy

from models.batching import iters_to_reach, iters_within, run_time
from models.latency import LatencyModel
from sim.fabric import Fabric, Link

hold_share = Fabric.hold_share

NAN = float("nan")


class Sidecar:
    def __init__(self, env: simpy.Environment, idx: int, arrivals, lat: LatencyModel, *,
                 max_num_seqs: int, max_num_batched_tokens: int, host_s: float,
                 gpu: Link, host: Link, fast_forward: bool = True):
        self.env = env
        self.idx = idx
        self.t_arr = arrivals.t
        self.prompt = arrivals.prompt.tolist()
        self.output = arrivals.output.tolist()
        self.n = len(arrivals.t)
        self._t_list = arrivals.t.tolist()
        self.lat = lat
        self.max_seqs = max_num_seqs
        self.budget = max_num_batched_tokens
        self.h = host_s
        self.gpu = gpu
        self.host = host
        self.ff = fast_forward
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
        self.iterations = 0
        self.busy_time = 0.0
        self.contended_iterations = 0
        self._interruptible = False
        self.iter_log: list[tuple[float, float]] | None = None  # (start, end) per step, when probing
        self.proc = env.process(self.run())

    # -- observation helpers (present state only) ---------------------------------------------
    def queue_len(self, now: float) -> int:
        arrived = int(np.searchsorted(self.t_arr, now, side="right"))
        return len(self.waiting) + (arrived - self.next_i)

    def running(self) -> int:
        return self.n_dec + len(self.prefilling)

    # -- the process ---------------------------------------------------------------------------
    def _pull(self, now: float) -> None:
        t = self._t_list
        i = self.next_i
        n = self.n
        while i < n and t[i] <= now:
            self.waiting.append(i)
            i += 1
        self.next_i = i

    def _wake(self) -> None:
        if self._interruptible:
            self._interruptible = False
            self.gpu.occupant = None
            self.host.occupant = None
            self.proc.interrupt()

    def run(self):
        env = self.env
        lat = self.lat
        a, b, c, d = lat.a, lat.b, lat.c, lat.d
        h = self.h
        while True:
            now = env.now
            self._pull(now)
            if not self.n_dec and not self.prefilling and not self.waiting:
                if self.next_i >= self.n:
                    return
                yield env.timeout(self._t_list[self.next_i] - now)
                continue
            # ---- schedule one iteration ----
            budget = self.budget - self.n_dec
            chunks: list[tuple[int, int]] = []
            for rid in self.prefilling:
                if budget <= 0:
                    break
                take = min(self.prompt[rid] - self.prefilled[rid], budget)
                chunks.append((rid, take))
                budget -= take
            while self.waiting and budget > 0 and self.n_dec + len(self.prefilling) < self.max_seqs:
                rid = self.waiting.popleft()
                self.admitted[rid] = now
                self.prefilling.append(rid)
                self.prefilled[rid] = 0
                take = min(self.prompt[rid], budget)
                chunks.append((rid, take))
                budget -= take
            prefill_tokens = sum(t for _, t in chunks)
            batch = self.n_dec + len(chunks)
            g0 = a + b * prefill_tokens + c * self.sum_ctx + d * batch
            # ---- how many iterations can run as one closed-form step ----
            k = 1
            dg = c * self.n_dec
            # Speeds on our GPU and host: 1 when alone, a constant share when only merge holds
            # press on them, None when finite jobs share them (then the fabric must decide).
            rg = 1.0 if not self.gpu.jobs else hold_share(self.gpu)
            rh = 1.0 if not self.host.jobs else hold_share(self.host)
            free = rg is not None and rh is not None
            if free:
                sg, sdg, sh = (g0, dg, h) if rg == 1.0 and rh == 1.0 else (g0 / rg, dg / rg, h / rh)
                if self.ff and not chunks and self.n_dec:
                    k = self.fin_heap[0][0] - self.diter
                    span = run_time(k, sg, sdg, sh)
                    if k > 1 and self.n_dec < self.max_seqs and self.next_i < self.n:
                        # stop at the first boundary at or after the next admissible arrival
                        wait = self._t_list[self.next_i] - now
                        if span > wait:
                            k = iters_to_reach(wait, sg, sdg, sh, k)
                            span = run_time(k, sg, sdg, sh)
                else:
                    span = sh if sh > sg else sg
            # ---- run them ----
            to_book = k
            if free:
                # Exact: our rates cannot change before the occupant callback wakes us.
                slowed = rg < 1.0 or rh < 1.0
                self._interruptible = True
                self.gpu.occupant = self._wake
                self.host.occupant = self._wake
                try:
                    yield env.timeout(span)
                    self._interruptible = False
                    self.gpu.occupant = None
                    self.host.occupant = None
                except simpy.Interrupt:
                    # The jobs on our GPU/host changed: finish the current iteration in the fabric.
                    el = env.now - now
                    done = iters_within(el, sg, sdg, sh, k)
                    if done < k:
                        e = el - run_time(done, sg, sdg, sh)
                        self._advance_decode(done)
                        # the finished iterations ran at the old rates, the partial one is shared
                        self.contended_iterations += (done if slowed else 0) + 1
                        k = done + 1
                        to_book = 1
                        slowed = False
                        yield from self._shared_iteration(g0 + done * dg - e * rg, h - e * rh)
                if slowed:
                    self.contended_iterations += k
            else:
                self.contended_iterations += 1
                yield from self._shared_iteration(g0, h)
            end = env.now
            if self.iter_log is not None:
                self.iter_log.append((now, end))
            self.busy_time += end - now
            self.iterations += k
            # ---- book the results ----
            self._advance_decode(to_book)
            if chunks:
                self._finish_prefills(chunks, end)
            if self.fin_heap and self.fin_heap[0][0] <= self.diter:
                self._complete(end)

    def _shared_iteration(self, g: float, h: float):
        gpu, host = self.gpu, self.host
        jg = gpu.fabric.start([gpu], g, 1.0, 1.0, ("serve", self.idx)) if g > 0 else None
        jh = host.fabric.start([host], h, 1.0, 1.0, ("serve", self.idx)) if h > 0 else None
        if jg is not None:
            yield jg.done
        if jh is not None:
            yield jh.done

    def _advance_decode(self, k: int) -> None:
        if k > 0:
            self.diter += k
            self.sum_ctx += self.n_dec * k

    def _finish_prefills(self, chunks, end: float) -> None:
        for rid, take in chunks:
            got = self.prefilled[rid] + take
            if got < self.prompt[rid]:
                self.prefilled[rid] = got
                continue
            del self.prefilled[rid]
            self.prefilling.remove(rid)
            self.first_token[rid] = end
            out = self.output[rid]
            if out <= 1:
                self.finish[rid] = end
                continue
            self.n_dec += 1
            self.sum_ctx += self.prompt[rid] + 1
            heapq.heappush(self.fin_heap, (self.diter + out - 1, rid))

    def _complete(self, end: float) -> None:
        heap = self.fin_heap
        while heap and heap[0][0] <= self.diter:
            _, rid = heapq.heappop(heap)
            self.finish[rid] = end
            self.n_dec -= 1
            self.sum_ctx -= self.prompt[rid] + self.output[rid]
