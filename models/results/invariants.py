"""Invariants every run must satisfy; tests run them after every simulation, and
`monitor.check_invariants: true` (or `wadiloco run --check`) runs them in normal use."""

from __future__ import annotations

import numpy as np


class InvariantError(AssertionError):
    pass


def check_requests(r: dict[str, np.ndarray], n_arrived: int) -> None:
    if len(r["arrival"]) != n_arrived:
        raise InvariantError(f"request conservation: {len(r['arrival'])} recorded vs {n_arrived} arrived")
    done = r["completed"]
    fin, ft, adm, arr = r["finish"], r["first_token"], r["admitted"], r["arrival"]
    if np.any(done & np.isnan(ft)):
        raise InvariantError("a completed request has no first-token time")
    with np.errstate(invalid="ignore"):
        if np.any(adm < arr - 1e-9):
            raise InvariantError("a request was admitted before it arrived")
        if np.any(ft < adm - 1e-9):
            raise InvariantError("a first token came before admission")
        if np.any(fin < ft - 1e-9):
            raise InvariantError("a request finished before its first token")
        if np.any(~np.isnan(ft) & np.isnan(adm)):
            raise InvariantError("a request produced a token without being admitted")


def check_conservation(sidecar: int, counts, arrivals: int, completed: int) -> None:
    """INV-1, from the engine's own state (`counts`: models.engine.serving.Counts, where each request is
    now): waiting + prefilling + decoding + not yet arrived + finished = the sidecar's arrivals, and
    the engine's finished count = the completed rows of the request table. A request an engine drops
    from its queues, or books twice, breaks the first sum; a table that disagrees breaks the second."""
    where = ", ".join(f"{k} {v}" for k, v in counts._asdict().items())
    if sum(counts) != arrivals:
        raise InvariantError(
            f"request conservation, sidecar {sidecar}: {where} sum to {sum(counts)}, not {arrivals} arrivals"
        )
    if counts.finished != completed:
        raise InvariantError(
            f"request conservation, sidecar {sidecar}: the engine finished {counts.finished}, "
            f"the request table completed {completed}"
        )


def check_corridor(merge_steps: list[int], h_min: int, h_max: int, final_step: int) -> None:
    prev = 0
    for s in merge_steps:
        gap = s - prev
        if not (h_min <= gap <= h_max):
            raise InvariantError(f"merge at step {s}: gap {gap} outside corridor [{h_min}, {h_max}]")
        prev = s
    # The tail before the horizon may be shorter than h_min but never longer than h_max (+1 for
    # the step in flight when the horizon fell).
    if final_step - prev > h_max + 1:
        raise InvariantError(f"no merge for {final_step - prev} steps before the horizon (h_max {h_max})")


def check_merges(merges) -> None:
    for m in merges:
        if not (m.decided_at <= m.start <= m.end):
            raise InvariantError(f"merge {m.index}: times out of order")
        t = m.start
        for name, (a, b) in m.phases.items():
            if a < t - 1e-12 or b < a:
                raise InvariantError(f"merge {m.index}: phase {name} out of order")
            t = b


def check_peak_load(peak: float) -> None:
    if peak > 1.0 + 1e-9:
        raise InvariantError(f"a link was allocated {peak:.6f} x its capacity")


def check_kv(sidecar: int, st) -> None:
    """INV-23, KV conservation (models.engine.kv): the blocks the engine's running requests hold, recounted
    from its queues (a prefilling request its prompt's blocks, a decoder ceil((ctx - 1)/block) at
    context ctx), plus the merge buffers' and the free blocks, make the pool; and the decoders by
    block phase are the counts fast-forward's closed form uses; a prefix cache in the pool (`pooled`) keeps its
    entries beside the requests' blocks, each pin a running request's. `st`: models.engine.serving.EngineState."""
    kv = st.kv
    if kv is None:
        return
    bs, held, cnt = kv.bs, 0, [0] * kv.bs
    shared = kv.shared  # blocks a prefix cache holds for a request (models.engine.prefix): counted once, reserved
    for rid in st.prefilling:
        held += -(-st.prompt[rid] // bs) - shared.get(rid, 0)
    for x in st.fin_heap:  # keys due << 32 | rid (models.engine.serving.key)
        due, rid = x >> 32, x & 0xFFFFFFFF
        total = st.prompt[rid] + st.output[rid]
        held += -(-(total - due + st.diter - 1) // bs) - shared.get(rid, 0)
        cnt[(due + 1 - total) % bs] += 1
    free = kv.cap - kv.used
    merging = kv.hold if kv.held else 0  # merge buffers taken while a merge runs (engine.merge_memory: merge)
    if held != kv.used or free < 0 or held + kv.reserved + merging + free != kv.pool:
        raise InvariantError(
            f"KV conservation, sidecar {sidecar}: requests hold {held} blocks, the pool counts {kv.used} "
            f"in use, {kv.reserved} reserved, {merging} taken by a merge and {free} free of {kv.pool}"
        )
    if not shared.keys() <= kv.running.keys():
        raise InvariantError(f"KV conservation, sidecar {sidecar}: shared blocks of requests not running")
    if st.pooled:  # the prefix cache in the pool's free blocks: its entries fit beside the requests' own
        pins, px = st.px.pins, st.px
        held = sum(st.pinned[rid] for rid in kv.running)
        if kv.used + px.size > kv.cap or len(pins) != px.pinned or sum(pins.values()) != held:
            raise InvariantError(
                f"KV conservation, sidecar {sidecar}: {kv.used} blocks in use and {px.size} cached of {kv.cap}, "
                f"{len(pins)} entries pinned ({px.pinned} counted), {sum(pins.values())} pins for {held} held"
            )
    if cnt != list(kv.cnt) or len(kv.running) != len(st.prefilling) + len(st.fin_heap):
        raise InvariantError(f"KV conservation, sidecar {sidecar}: the decoders' block phases {cnt} != {list(kv.cnt)}")
