"""A sidecar's trajectory, recorded in one run and replayed in another of the same workload and seed.

Why it is exact. Every run of a seed serves the same requests (common random numbers), and an
engine's step rules depend only on its state, its requests and the speeds it runs at. A baseline
run (no_sync, in which nothing but serving ever uses the engine's links) records its trajectory
(`Recorder`): a snapshot of the whole engine state every SNAP_S seconds, taken where `serve`
starts a step, and its idle instants. Another run is *on tape* while its engine is in the state
the baseline's was at the same instant: from the start, since both start empty. While on tape,
when the engine reaches a snapshot instant, its links carry no job and nothing will touch or read
it before the lookahead bound (sim.engine.Lookahead), it jumps to the baseline's last snapshot
before that bound instead of simulating up to it (`Replay.mark`). The first step it runs slowed or as
shared work (a merge on its links: a contended iteration, `EngineState.contended`) takes it off
tape; it is simulated from there (a step at full speed beside a merge's hold computes what a free
one does). It is on tape again from an
instant both it and the baseline are idle, waking for the same request at the same instant (bit
for bit): it then copies the baseline's busy period if that ends before the bound (`Replay.idle`).

Iteration counts enter the rules only as differences (a decoder is done `n` iterations after it
started), so they are stored relative to the snapshot's. Only open-loop engines without a KV pool,
prefix cache, router or iteration log take a tape (sim.fleet Fleet.share), and a baseline engine
that ever ran a contended iteration gives none. tests/engine/test_tape.py: runs with and without tapes
give identical results on every regime.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left

NAN = math.nan
INF = math.inf
SNAP_S = 4.0  # seconds of simulated time between a baseline's snapshots (a run simulates <= this before a merge)


def requests_bytes(st) -> tuple[bytes, bytes, bytes]:
    """What identifies an engine's requests: its arrival times and token lengths, byte for byte.
    (Kept whole, not hashed: comparing copies costs ~4 us an array where hashing cost ~170 us, and
    every run of a seed asks; the tape keeps 24 bytes a request more.)"""
    return st.t_arr.tobytes(), st.prompt.tobytes(), st.output.tobytes()


class Snapshot:
    """The engine's state where `serve` starts a step at `now` (models.engine.serving.EngineState)."""

    __slots__ = ("now", "next_i", "n_dec", "sum_ctx", "diter", "n_finished", "contended", "lo")
    __slots__ += ("waiting", "prefilling", "prefilled", "heap")

    def __init__(self, st) -> None:
        self.now, self.next_i, self.n_dec, self.sum_ctx = st.now, st.next_i, st.n_dec, st.sum_ctx
        self.diter, self.n_finished, self.contended = st.diter, st.n_finished, st.contended
        w = st.waiting  # FCFS without preemption: consecutive requests, kept as (first, count)
        self.waiting = (w.at(0), len(w)) if len(w) and w.at(-1) - w.at(0) + 1 == len(w) else array("q", w)
        self.prefilling = array("q", st.prefilling)
        pf = st.prefilled
        self.prefilled = array("q", (x for rid in st.prefilling for x in (rid, pf[rid])))  # rid, tokens, ...
        off = st.diter << 32  # keys due << 32 | rid (models.engine.serving.key), due relative to diter
        self.heap = array("q", (x - off for x in st.fin_heap))
        held = [*st.waiting, *st.prefilling, *(x & 0xFFFFFFFF for x in st.fin_heap)]
        self.lo = min(held) if held else st.next_i  # every request before it is done


class Recorder:
    """Records a baseline engine's trajectory: snapshots (`mark`) and idle instants (`idle`)."""

    __slots__ = ("snaps", "idx", "t", "wake", "diter", "cont")

    def __init__(self) -> None:
        self.snaps: list[Snapshot] = []
        self.idx, self.t, self.wake = array("q"), array("d"), array("d")
        self.diter, self.cont = array("q"), array("q")

    def mark(self, st, until: float, busy: object) -> float:
        self.snaps.append(Snapshot(st))
        return (math.floor(st.now / SNAP_S) + 1) * SNAP_S

    def idle(self, st, i: int, now: float, wake: float, until: float, busy: object) -> float:
        self.idx.append(i)
        self.t.append(now)
        self.wake.append(wake)
        self.diter.append(st.diter)
        self.cont.append(st.contended)
        return NAN  # nothing replayed: the engine goes on

    def tape(self, st) -> Tape | None:
        """The replayable record of this run (after it), or None if it ever ran contended. An engine
        that served all its requests ends idle: that instant closes its last busy period."""
        if st.contended:
            return None
        if st.n_finished == st.n and (not self.idx or self.idx[-1] < st.n):
            self.idle(st, st.n, st.now, INF, -INF, True)
        return Tape(self, st)


class Tape:
    """A baseline engine's trajectory, read-only (shared by the runs of its seed): snapshots at
    instants `at`, and busy periods (period p runs requests idx[p] .. idx[p+1]-1 from wake[p] to
    t[p+1]) with the per-request results."""

    __slots__ = ("snaps", "at", "idx", "t", "wake", "diter", "cont", "pos", "arrivals", "rows")

    def __init__(self, rec: Recorder, st) -> None:
        self.snaps, self.at = rec.snaps, array("d", (s.now for s in rec.snaps))
        self.idx, self.t, self.wake, self.diter, self.cont = rec.idx, rec.t, rec.wake, rec.diter, rec.cont
        self.pos = {i: p for p, i in enumerate(rec.idx)}  # the period that starts with request i
        n = st.n
        self.arrivals = requests_bytes(st)  # what it is valid for
        self.rows = (st.admitted[:n].copy(), st.first_token[:n].copy(), st.finish[:n].copy())

    def fits(self, st) -> bool:
        """Whether `st` serves the very requests this tape was recorded on."""
        return self.arrivals == requests_bytes(st)


class Replay:
    """One run's use of a `Tape`: what `serve` consults at snapshot instants (`mark`) and idle
    instants (`idle`); `jumps`, `periods` count what it skipped (diagnostics, not results)."""

    __slots__ = ("tape", "jumps", "periods", "sync")

    def __init__(self, tape: Tape) -> None:
        self.tape, self.jumps, self.periods = tape, 0, 0
        self.sync = 0  # the engine's contended iterations when it was last known on tape

    def after(self, t: float) -> float:
        """The first snapshot instant at or after t (an engine on tape from t reaches it)."""
        at = self.tape.at
        p = bisect_left(at, t)
        return at[p] if p < len(at) else INF

    def mark(self, st, until: float, busy: object) -> float:
        """Engine `st`, on tape, starts a step at a snapshot instant st.now; nothing touches or reads
        it before `until`, and its links carry jobs if `busy`. Jump to the last snapshot before
        `until` if that is later and not `busy` (`st` is then as of that instant). Returns the next
        snapshot instant."""
        tp = self.tape
        at = tp.at
        p = bisect_left(at, st.now)
        if st.contended != self.sync or p >= len(at) or at[p] != st.now:
            return INF  # it ran slowed or shared since: off tape (and not where the baseline was)
        q = p if busy else bisect_left(at, until) - 1  # the last snapshot strictly before the bound
        if q > p:
            self._restore(st, tp.snaps[p], tp.snaps[q])
            self.jumps += 1
            p = q
        return at[p + 1] if p + 1 < len(at) else INF

    def _restore(self, st, a: Snapshot, b: Snapshot) -> None:
        """Move `st` from the baseline's state `a` (its own now) to state `b`."""
        d = st.diter + (b.diter - a.diter)
        st.diter, st.n_finished = d, st.n_finished + (b.n_finished - a.n_finished)
        st.contended += b.contended - a.contended
        st.now, st.next_i, st.n_dec, st.sum_ctx = b.now, b.next_i, b.n_dec, b.sum_ctx
        w = b.waiting
        st.waiting.load(range(w[0], w[0] + w[1]) if isinstance(w, tuple) else w)
        st.prefilling.load(b.prefilling)
        pf, got = b.prefilled, st.prefilled
        for j in range(0, len(pf), 2):  # (only the requests in prefill have a count)
            got[pf[j]] = pf[j + 1]
        off = d << 32
        st.fin_heap.load([x + off for x in b.heap])  # (a constant added to every key: still a heap)
        # What the baseline booked between the two snapshots (NaN: not yet). A snapshot is taken
        # where a step starts: after the step that ended then was booked, before its admissions.
        lo, hi = a.lo, b.next_i
        adm, first, fin = self.tape.rows
        v = adm[lo:hi]
        m = (v >= a.now) & (v < b.now)
        st.admitted[lo:hi][m] = v[m]
        for mine, base in ((st.first_token, first), (st.finish, fin)):
            v = base[lo:hi]
            m = (v > a.now) & (v <= b.now)
            mine[lo:hi][m] = v[m]

    def idle(self, st, i: int, now: float, wake: float, until: float, busy: object) -> float:
        """Engine `st`, idle at `now`, wakes for request i at `wake`; nothing touches or reads it
        before `until`, and its links carry jobs if `busy`. Copy the baseline's busy period for it
        if the baseline woke for i at the same instant, that period ends before `until` and not
        `busy`, and return the instant it is idle again (it is then on tape: `after`); else NaN."""
        tp = self.tape
        p = tp.pos.get(i, -1)
        if busy or p < 0 or tp.wake[p] != wake or p + 1 >= len(tp.idx):
            return NAN
        q = p + 1
        done = tp.t[q]
        if not done < until or tp.cont[q] != tp.cont[p]:
            return NAN
        j = tp.idx[q]
        for mine, base in zip((st.admitted, st.first_token, st.finish), tp.rows):
            mine[i:j] = base[i:j]
        st.next_i = j
        st.diter += tp.diter[q] - tp.diter[p]
        st.n_finished += j - i
        st.now = done
        self.periods += 1
        self.sync = st.contended
        return done
