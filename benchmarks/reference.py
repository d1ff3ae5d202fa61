"""A plain heapq reference of one serving sidecar: the same model as sim/engine.py, no SimPy.

It serves two purposes:

* the **correctness oracle** in tests: the engine must reproduce its per-request admission,
  first-token and finish times to 1e-9 s on a sidecar that has its GPU and host to itself;
* the **baseline** of `python -m wadiloco.benchmarks`: `heapq_ratio` is the engine's time over this
  loop's time on the same arrivals and latency model.

The model (docs/model.md, vLLM v1 scheduling order), one iteration at a time:

1. At the start of an iteration every request that has arrived (t <= now) is waiting.
2. The token budget is `max_num_batched_tokens` minus one token per decoding request.
3. Requests already prefilling get the next chunk of their prompt (admission order) while budget
   is left; then waiting requests are admitted FCFS while budget is left and fewer than
   `max_num_seqs` requests are running (decoding or prefilling). Admission time = now.
4. The GPU part is the latency law's step time (models.engine.laws `step_time`: for the linear law
   g = a + b*prefill_tokens + c*sum(context of decoding requests) + d*batch, batch = decoding
   requests + requests with a chunk; the chunks' causal attention pairs, each over its prompt's
   computed tokens, and those tokens, for a law that reads them), never a closed form; the host part is
   h = host_s + h1*batch + h2*(decode tokens + prefill tokens), the frontend part
   f = fq*(requests admitted in it) + ft*(output tokens it produces); with no contention the
   iteration takes max(h, f, g), or h + f + g for a `sequential` engine (vLLM V0 order).
5. At the end every decoding request has one more token; a request whose prompt is now fully
   computed has its first token (first_token = end) and joins the decoders with context
   prompt + 1 (or finishes at once if it wants one output token); a decoder that has produced all
   of its output tokens finishes (finish = end).

A decoder's context is prompt + tokens generated so far, so `sum_ctx` is kept as a running sum and
completions as a heap keyed by the iteration at which a request has generated its last token. Pass
`check=True` to recompute both from per-request state every iteration and assert they agree.

It is a discrete-event loop on one heap. Events at equal times run in the order
arrival < start-of-work < end-of-iteration, which is the engine's rule that an iteration sees every
request that arrived at or before its start, including one arriving exactly as the previous
iteration ends.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np

from wadiloco.models.engine.laws import law_of

ARRIVAL, KICK, ITER_END = 0, 1, 2  # tie order at equal times
NEEDED = {"max_num_seqs", "max_num_batched_tokens", "host_s"}  # serve's keyword arguments
OPTIONS = {"check", "sequential", "h1", "h2", "fq", "ft"}


@dataclass
class ReferenceResult:
    admitted: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    iterations: int  # engine iterations run
    events: int  # heap events processed


class Reference:
    """The loop's state: the queues, the running sums, the iteration in flight and the event heap."""

    def __init__(self, t, prompt, output, law, kw: dict) -> None:
        self.law, self.h = law, float(kw["host_s"])
        self.max_seqs, self.budget = kw["max_num_seqs"], kw["max_num_batched_tokens"]
        self.check, self.sequential = kw.get("check", False), kw.get("sequential", False)
        self.h1, self.h2, self.fq, self.ft = (kw.get(k, 0.0) for k in ("h1", "h2", "fq", "ft"))
        self.t = np.asarray(t, dtype=float).tolist()
        self.prompt = [int(x) for x in np.asarray(prompt).tolist()]
        self.output = [int(x) for x in np.asarray(output).tolist()]
        n = self.n = len(self.t)
        if any(self.t[i] > self.t[i + 1] for i in range(n - 1)):
            raise ValueError("arrival times must be sorted")
        nan = float("nan")
        self.admitted, self.first_token, self.finish = [nan] * n, [nan] * n, [nan] * n
        self.waiting: deque[int] = deque()
        self.prefilling: list[int] = []  # admitted, prompt not fully computed, in admission order
        self.done_tokens: dict[int, int] = {}  # prompt tokens computed so far, per prefilling request
        self.decoders: set[int] = set()  # check=True only: who is decoding ...
        self.dec_since: dict[int, int] = {}  # ... and the iteration count when each began
        self.n_dec = self.sum_ctx = self.diter = 0  # diter: iterations completed
        self.fin: list[tuple[int, int]] = []  # (iteration after which the request is done, rid)
        self.busy = False
        self.iterations = self.events = 0
        self.chunks: list[tuple[int, int]] = []  # the iteration in flight's (request, tokens)
        self.heap: list[tuple[float, int, int]] = [(self.t[0], ARRIVAL, 0)] if n else []  # (time, kind, payload)

    def admit(self, now: float) -> list[tuple[int, int]]:
        """Rules 2 and 3: the chunks of the iteration starting at `now`."""
        budget = self.budget - self.n_dec
        chunks = []
        for rid in self.prefilling:
            if budget <= 0:
                break
            take = min(self.prompt[rid] - self.done_tokens[rid], budget)
            chunks.append((rid, take))
            budget -= take
        while self.waiting and budget > 0 and self.n_dec + len(self.prefilling) < self.max_seqs:
            rid = self.waiting.popleft()
            self.admitted[rid] = now
            self.prefilling.append(rid)
            self.done_tokens[rid] = 0
            take = min(self.prompt[rid], budget)
            chunks.append((rid, take))
            budget -= take
        return chunks

    def start_iteration(self, now: float) -> None:
        """Rule 4: the iteration's GPU, host and frontend work, and its end on the heap."""
        chunks = self.admit(now)
        pf = new = completing = pairs = past = 0
        for rid, take in chunks:
            got = self.done_tokens[rid]
            pf, past = pf + take, past + got
            pairs += take * got + take * (take + 1) // 2
            new += got == 0
            completing += got + take >= self.prompt[rid]
        n_dec, m = self.n_dec, len(chunks)
        if self.check:
            ctx = sum(self.prompt[r] + 1 + (self.diter - self.dec_since[r]) for r in self.decoders)
            assert ctx == self.sum_ctx and len(self.decoders) == n_dec, (ctx, self.sum_ctx, len(self.decoders), n_dec)
        g = self.law.step_time(pf, m, pairs, past, n_dec, self.sum_ctx)
        hi = self.h + self.h1 * (n_dec + m) + self.h2 * (n_dec + pf)
        f = self.fq * new + self.ft * (n_dec + completing)
        self.chunks, self.busy = chunks, True
        self.iterations += 1
        heapq.heappush(self.heap, (now + (hi + f + g if self.sequential else max(hi, f, g)), ITER_END, 0))

    def end_iteration(self, now: float) -> None:
        """Rule 5: every decoder's token, the chunks' first tokens, the completions."""
        self.diter += 1
        self.sum_ctx += self.n_dec
        for r, take in self.chunks:
            got = self.done_tokens[r] + take
            if got < self.prompt[r]:
                self.done_tokens[r] = got
                continue
            del self.done_tokens[r]
            self.prefilling.remove(r)
            self.first_token[r] = now
            if self.output[r] <= 1:
                self.finish[r] = now
                continue
            self.n_dec += 1
            self.sum_ctx += self.prompt[r] + 1
            heapq.heappush(self.fin, (self.diter + self.output[r] - 1, r))
            if self.check:
                self.decoders.add(r)
                self.dec_since[r] = self.diter
        while self.fin and self.fin[0][0] <= self.diter:
            _, r = heapq.heappop(self.fin)
            self.finish[r] = now
            self.n_dec -= 1
            self.sum_ctx -= self.prompt[r] + self.output[r]
            if self.check:
                self.decoders.discard(r)
                assert self.prompt[r] + 1 + (self.diter - self.dec_since.pop(r)) == self.prompt[r] + self.output[r]
        self.chunks = []

    def run(self, until: float) -> ReferenceResult:
        heap = self.heap
        while heap:
            now, kind, rid = heapq.heappop(heap)
            if now >= until:  # like simpy run(until=...): nothing at or after `until`
                break
            self.events += 1
            if kind == ARRIVAL:
                self.waiting.append(rid)
                if rid + 1 < self.n:
                    heapq.heappush(heap, (self.t[rid + 1], ARRIVAL, rid + 1))
                if not self.busy:
                    self.busy = True  # claimed: start once every arrival at this instant is in
                    heapq.heappush(heap, (now, KICK, 0))
                continue
            if kind == ITER_END:
                self.end_iteration(now)
            # ITER_END or KICK: run the next iteration if there is work
            if self.n_dec or self.prefilling or self.waiting:
                self.start_iteration(now)
            else:
                self.busy = False
        arrays = (np.asarray(x) for x in (self.admitted, self.first_token, self.finish))
        return ReferenceResult(*arrays, self.iterations, self.events)


def serve(t, prompt, output, lat, *, until: float = float("inf"), **kw) -> ReferenceResult:
    """Serve requests (arrival times `t`, sorted; token counts `prompt`, `output` >= 1) on one
    sidecar with latency law `lat` (models.engine.laws, or a fitted model: its law), stepping one
    iteration at a time whatever the law. `kw`: max_num_seqs, max_num_batched_tokens, host_s (required);
    check, sequential, h1, h2, fq, ft. Like simpy's run(until=...), nothing at or after `until`
    happens; requests not done by then keep NaN times."""
    missing, unknown = NEEDED - set(kw), set(kw) - NEEDED - OPTIONS
    if missing or unknown:
        raise TypeError(f"serve(): missing keyword arguments {sorted(missing)}, unknown {sorted(unknown)}")
    return Reference(t, prompt, output, law_of(lat), kw).run(until)


def serve_arrivals(arrivals, lat, **kw) -> ReferenceResult:
    """`serve` on a models.workload.kinds.Arrivals."""
    return serve(arrivals.t, arrivals.prompt, arrivals.output, lat, **kw)
