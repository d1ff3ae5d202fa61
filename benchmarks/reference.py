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
4. The GPU part is g = a + b*prefill_tokens + c*sum(context of decoding requests) + d*batch
   (+ e*causal attention pairs of the chunks, each over its prompt's computed tokens),
   batch = decoding requests + requests with a chunk; the host part is
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

ARRIVAL, KICK, ITER_END = 0, 1, 2  # tie order at equal times


@dataclass
class ReferenceResult:
    admitted: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    iterations: int  # engine iterations run
    events: int  # heap events processed


def serve(
    t,
    prompt,
    output,
    lat,
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    host_s: float,
    until: float = float("inf"),
    check: bool = False,
    sequential: bool = False,
    h1: float = 0.0,
    h2: float = 0.0,
    fq: float = 0.0,
    ft: float = 0.0,
) -> ReferenceResult:
    """Serve requests (arrival times `t`, sorted; token counts `prompt`, `output` >= 1) on one
    sidecar with latency model `lat` (fields a, b, c, d). Like simpy's run(until=...), nothing at or
    after `until` happens; requests not done by then keep NaN times."""
    a, b, c, d, e = float(lat.a), float(lat.b), float(lat.c), float(lat.d), float(getattr(lat, "e", 0.0))
    h = float(host_s)
    t = np.asarray(t, dtype=float).tolist()
    prompt = [int(x) for x in np.asarray(prompt).tolist()]
    output = [int(x) for x in np.asarray(output).tolist()]
    n = len(t)
    if any(t[i] > t[i + 1] for i in range(n - 1)):
        raise ValueError("arrival times must be sorted")
    nan = float("nan")
    admitted = [nan] * n
    first_token = [nan] * n
    finish = [nan] * n

    waiting: deque[int] = deque()
    prefilling: list[int] = []  # admitted, prompt not fully computed, in admission order
    done_tokens: dict[int, int] = {}  # prompt tokens computed so far, per prefilling request
    decoders: set[int] = set()  # check=True only: who is decoding ...
    dec_since: dict[int, int] = {}  # ... and the iteration count when each began
    n_dec = 0
    sum_ctx = 0
    diter = 0  # iterations completed
    fin: list[tuple[int, int]] = []  # (iteration after which the request is done, rid)
    busy = False
    iterations = 0
    events = 0
    # the iteration in flight
    cur_chunks: list[tuple[int, int]] = []

    heap: list[tuple[float, int, int]] = []  # (time, kind, payload)
    if n:
        heap.append((t[0], ARRIVAL, 0))
    push, pop = heapq.heappush, heapq.heappop

    def start_iteration(now: float) -> None:
        nonlocal busy, cur_chunks, iterations
        budget = max_num_batched_tokens - n_dec
        chunks = []
        for rid in prefilling:
            if budget <= 0:
                break
            take = min(prompt[rid] - done_tokens[rid], budget)
            chunks.append((rid, take))
            budget -= take
        while waiting and budget > 0 and n_dec + len(prefilling) < max_num_seqs:
            rid = waiting.popleft()
            admitted[rid] = now
            prefilling.append(rid)
            done_tokens[rid] = 0
            take = min(prompt[rid], budget)
            chunks.append((rid, take))
            budget -= take
        pf = new = completing = pairs = 0
        for rid, take in chunks:
            pf += take
            pairs += take * done_tokens[rid] + take * (take + 1) // 2
            new += done_tokens[rid] == 0
            completing += done_tokens[rid] + take >= prompt[rid]
        if check:
            ctx = sum(prompt[r] + 1 + (diter - dec_since[r]) for r in decoders)
            assert ctx == sum_ctx and len(decoders) == n_dec, (ctx, sum_ctx, len(decoders), n_dec)
        g = a + b * pf + c * sum_ctx + d * (n_dec + len(chunks))
        if e:
            g += e * pairs
        hi = h + h1 * (n_dec + len(chunks)) + h2 * (n_dec + pf)
        f = fq * new + ft * (n_dec + completing)
        cur_chunks = chunks
        busy = True
        iterations += 1
        push(heap, (now + (hi + f + g if sequential else max(hi, f, g)), ITER_END, 0))

    while heap:
        now, kind, rid = pop(heap)
        if now >= until:  # like simpy run(until=...): nothing at or after `until`
            break
        events += 1
        if kind == ARRIVAL:
            waiting.append(rid)
            if rid + 1 < n:
                push(heap, (t[rid + 1], ARRIVAL, rid + 1))
            if not busy:
                busy = True  # claimed: start once every arrival at this instant is in
                push(heap, (now, KICK, 0))
            continue
        if kind == ITER_END:
            # decode step for every decoder
            diter += 1
            sum_ctx += n_dec
            # prefill chunks
            for r, take in cur_chunks:
                got = done_tokens[r] + take
                if got < prompt[r]:
                    done_tokens[r] = got
                    continue
                del done_tokens[r]
                prefilling.remove(r)
                first_token[r] = now
                if output[r] <= 1:
                    finish[r] = now
                    continue
                n_dec += 1
                sum_ctx += prompt[r] + 1
                push(fin, (diter + output[r] - 1, r))
                if check:
                    decoders.add(r)
                    dec_since[r] = diter
            # completions
            while fin and fin[0][0] <= diter:
                _, r = pop(fin)
                finish[r] = now
                n_dec -= 1
                sum_ctx -= prompt[r] + output[r]
                if check:
                    decoders.discard(r)
                    assert prompt[r] + 1 + (diter - dec_since.pop(r)) == prompt[r] + output[r]
            cur_chunks = []
        # ITER_END or KICK: run the next iteration if there is work
        if n_dec or prefilling or waiting:
            start_iteration(now)
        else:
            busy = False

    return ReferenceResult(np.asarray(admitted), np.asarray(first_token), np.asarray(finish), iterations, events)


def serve_arrivals(arrivals, lat, **kw) -> ReferenceResult:
    """`serve` on a models.workload.kinds.Arrivals."""
    return serve(arrivals.t, arrivals.prompt, arrivals.output, lat, **kw)
