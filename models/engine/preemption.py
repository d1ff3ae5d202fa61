"""Preemption modes: what an engine does with a running decoder when its KV pool runs short.

The engine (models.engine.serving `make_room`, `_preempt`) picks the victim, the most recently admitted
running request as vLLM's schedulers do, frees its blocks and takes it out of the batch; a request
still in prefill is recomputed whatever the mode. Where a decoder goes then, and how it comes back, is
its pool's mode (`KVPool.mode`, engine.preemption):

- `recompute` (vLLM V1): back to the head of the queue as a prompt of its context so far (its prefill
  recomputes them and yields its next token), wanting the rest of its output; admission brings it back.
- `swap` (vLLM V0's preemption_mode swap): its context's blocks are copied to host memory (`kv.copy`:
  blocks that cross the host's PCIe link before the next iteration) and it waits, `parked`, until they fit
  again; then they are copied back and it decodes on, before anything new is admitted.

A mode holds the requests it keeps out of the queues in `parked` (request -> (context, iterations left),
in the order they left) and says whether its copies need the PCIe link (`copies`). docs/extending.md adds one.
"""

from __future__ import annotations


class Preemption:
    """A preemption mode (module docstring): `park` a preempted decoder, `resume` parked ones."""

    __slots__ = ("parked", "copies")

    def __init__(self) -> None:
        self.parked: dict[int, tuple[int, int]] = {}
        self.copies = False

    def park(self, st, rid: int, ctx: int, left: int) -> None:
        """Decoder rid of engine `st` was preempted with ctx tokens of context and `left` iterations to
        go; its blocks are free and it is out of the batch: keep it, or hand it back to the engine."""
        raise NotImplementedError

    def resume(self, st, t: int, n_dec: int, sum_ctx: int) -> tuple[int, int]:
        """Before iteration t's admissions (only while some are parked): the parked requests that come
        back. Publishes and returns the engine's new (n_dec, sum_ctx)."""
        return n_dec, sum_ctx


class Recompute(Preemption):
    """vLLM V1: the decoder goes back to the head of the queue as a prompt of its context so far."""

    __slots__ = ()

    def park(self, st, rid: int, ctx: int, left: int) -> None:
        prompt, output = st.prompt, st.output
        st.kv.orig.setdefault(rid, (prompt[rid], output[rid]))  # (its own lengths, back when it finishes)
        prompt[rid], output[rid] = ctx, left
        st.waiting.push_front(rid)


class Swap(Preemption):
    """vLLM V0's swap: the decoder's blocks go to host memory and come back before it decodes on."""

    __slots__ = ()

    def __init__(self) -> None:
        Preemption.__init__(self)
        self.copies = True

    def park(self, st, rid: int, ctx: int, left: int) -> None:
        kv = st.kv
        self.parked[rid] = (ctx, left)
        kv.copy += kv.blocks(ctx - 1)  # (the cache's copy of shared blocks may go: the whole context moves)

    def resume(self, st, t: int, n_dec: int, sum_ctx: int) -> tuple[int, int]:
        """Swapped-out decoders come back FCFS while their context's blocks (and the block the iteration
        may write) fit above the watermark (none kept when nothing else runs), batch and token budget
        allowing; their blocks cross PCIe in again (`kv.copy`) and they decode in iteration t."""
        kv, prompt, output, parked = st.kv, st.prompt, st.output, self.parked
        room = min(st.max_seqs - len(st.prefilling), st.budget) - n_dec
        while parked and room > 0:
            rid = next(iter(parked))
            ctx, left = parked[rid]
            nb, phase = kv.blocks(ctx - 1), (t + left + 1 - prompt[rid] - output[rid]) % kv.bs
            cross = phase == t % kv.bs
            keep = kv.wm if n_dec or len(st.prefilling) else 0
            if kv.used + kv.need_now + nb + cross + keep > kv.cap:
                break
            del parked[rid]
            st.resumed.append(st.now)
            kv.used += nb
            kv.need_now += cross
            kv.enter(phase)
            kv.run_add(rid)
            kv.copy += nb
            st.fin_heap.push((t + left) << 32 | rid)  # its key (models.engine.serving `key`)
            n_dec, sum_ctx, room = n_dec + 1, sum_ctx + ctx, room - 1
        st.n_dec, st.sum_ctx = n_dec, sum_ctx
        return n_dec, sum_ctx


MODES = {"recompute": Recompute, "swap": Swap}  # engine.preemption's names (models.spec.scenario)
