"""The fleet's observer: a timeline sampled every `monitor.sample_s`, and the policy's Observation.

Every sample adds one row: the fleet-wide arrivals in the bin, the queue and batch sizes now,
whether a merge runs, and the busiest network and storage links' utilisation over the bin. An
Observation is built from those rows (pressures over `monitor.pressure_window_s`), the sidecars'
present state and the training run's progress: past and present only, never the workload ahead.
It reads the sidecars through their public queries (`t_arr`, `queue_len`, `running`, `clock`).

Lazy samples: an engine's queue and batch at an instant t follow from its per-request
times when it is open-loop, unrouted and has no KV pool (admission is then FCFS, once per request):
queue = arrived by t - admitted by t, batch = admitted by t - finished by t. Such a fleet's samples
take those columns from the request arrays when they are read (`observe`, `timeline`), so the
monitor is no lookahead source and the engines run through its sample instants without yielding.
Rows still appear when the eager monitor would add them (its process runs as before) and hold the
same numbers: every time at or before an instant the engines have passed is final.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from wadiloco.models.engine import serving as pure_serving
from wadiloco.models.engine._fast import NO_GATE
from wadiloco.models.engine.kv import never_rejects
from wadiloco.models.policies.base import LearnerSignals, Observation
from wadiloco.models.results import invariants as inv
from wadiloco.models.spec.run import MonitorSpec
from wadiloco.models.training.progress import ProgressModel
from wadiloco.sim.engine import Sidecar
from wadiloco.sim.lookahead import unbound
from wadiloco.sim.resources import Resources
from wadiloco.sim.training import TrainingView

INF = float("inf")
KEYS = ("t", "arrivals", "queue", "running", "merging", "p_net", "p_ckpt")
BULK_ROWS = 32  # lazy rows filled at once by sorted searches rather than row by row (Monitor._fill_bulk)


def _utilisation(rows: list[list]) -> float:
    """The busiest link's share of capacity used since the last sample; each row is [its fabric's
    `usage`, the link's index there, capacity-seconds per bin, its `used` at the last sample],
    updated in place."""
    best = 0.0
    for row in rows:
        used = row[0][row[1]]
        x = (used - row[3]) / row[2]
        row[3] = used
        if x > best:
            best = x
    return best


def lazy_ok(sidecars: list[Sidecar]) -> bool:
    """Whether the engines' queue and batch sizes can be read back from their request times: each
    request first admitted FCFS and never rejected (a KV pool that can admit every request:
    models.engine.kv.never_rejects; its preemptions and re-admissions are logged, `requeued` and
    `resumed`), from arrivals fixed in advance (no closed loop, no router; a router's engines also
    report their arrivals differently). Not with swap preemption: a swap copy starts at the
    simulator's clock, which can lie an ulp past the engine's (serving.delay_to) depending on where
    the engine last waited, and eager samples make it wait at every one."""
    no_gate = (NO_GATE, pure_serving.NO_GATE)  # (the compiled core's and the pure one's: benchmarks run both)
    return all(
        s.client is None
        and any(s.core.gate is g for g in no_gate)
        and (s.core.kv is None or not s.core.kv.swap and never_rejects(s.core.kv, s.core.prompt, s.core.output))
        for s in sidecars
    )


class Monitor:
    def __init__(
        self,
        env,
        spec: MonitorSpec,
        sidecars: list[Sidecar],
        res: Resources,
        training: TrainingView,
        progress: ProgressModel,
        *,
        capacity_rps: float | None,
        merging: Callable[[], bool],
        check: bool,
    ):
        self.env, self.spec, self.sidecars, self.res = env, spec, sidecars, res
        self.training, self.progress = training, progress
        self.capacity_rps = capacity_rps  # per sidecar; None for a trace replayed without `load`
        self.merging, self.check = merging, check
        self.bound_changed = unbound
        self.bin_s = spec.sample_s
        self.end = spec.end_s
        self.tl: dict[str, list[float]] = {k: [] for k in KEYS}
        self.counts = np.zeros(int(self.end / self.bin_s) + 2)  # arrivals per bin, the first n_bins filled
        self.n_bins = 0
        self._next = -INF  # the next sample's instant (a lookahead source; inf when lazy)
        self.lazy = lazy_ok(sidecars)
        self._filled = 0  # rows whose engine columns (arrivals, queue, running) are in (lazy)
        self._cursors = [(0, 0, 0)] * len(sidecars)  # per sidecar (lazy): arrived, admitted, finished before it
        # observe(): figures that change only when the monitor adds a bin, or on a merge, are cached
        self._win_n = max(1, int(round(spec.pressure_window_s / self.bin_s)))
        self._press_key = -1  # number of monitor bins the cached pressures were computed from
        self._press: tuple[float, float, float] = (0.0, 0.0, 0.0)  # p_net, p_srv, p_ckpt
        self._sig_key: float | None = None  # progress.merged_tokens the cached learner signals assume
        self._sig_cache: dict[int, LearnerSignals] = {}  # staleness -> signals (frozen, shareable)
        self._dur_key: tuple = ()
        self._dur_mean = 0.0

    def start(self) -> None:
        self.env.process(self._run())

    def next_touch_at(self) -> float:
        """A lookahead source (sim.lookahead): when the monitor next reads the engines and the links."""
        return self._next

    def timeline(self) -> dict[str, np.ndarray]:
        self._fill()
        return {k: np.asarray(v, dtype=float) for k, v in self.tl.items()}

    def lazy_timeline(self) -> Timeline:
        """The timeline of a run that has ended, filled when first read (`Timeline`)."""
        return Timeline(self)

    # ---- sampling ------------------------------------------------------------------------------
    def _run(self):
        if self.lazy:
            return (yield from self._run_lazy())
        env, bin_s, end = self.env, self.bin_s, self.end
        net = self.res.net
        wan_u, store_u = self._link_rows()
        sidecars = self.sidecars
        seen_at = [0] * len(sidecars)  # each sidecar's arrivals up to the last sample
        counts, n_counts = self.counts, len(self.counts)
        t_, arr_, queue_, running_, merging_, net_, ckpt_ = (self.tl[k].append for k in KEYS)
        while env.now < end:
            self._next = env.now + bin_s
            self.bound_changed()
            yield env.timeout(bin_s)
            now = env.now
            if self.check:
                self._check_not_ahead(now)
            net.fabric.advance()
            arrived = queue = running = 0
            for k, s in enumerate(sidecars):
                seen = int(np.searchsorted(s.t_arr, now, "right"))  # arrivals so far
                arrived += seen - seen_at[k]
                seen_at[k] = seen
                queue += s.queue_len(now)
                running += s.running()
            t_(now)
            arr_(arrived)
            if self.n_bins < n_counts:
                counts[self.n_bins] = arrived
                self.n_bins += 1
            queue_(queue)
            running_(running)
            merging_(1.0 if self.merging() else 0.0)
            net_(_utilisation(wan_u))
            ckpt_(_utilisation(store_u))

    def _link_rows(self) -> tuple[list[list], list[list]]:
        """The rows `_utilisation` reads: only limited links count (an unlimited one is never busy)."""
        net, bin_s = self.res.net, self.bin_s
        use = net.fabric.usage  # (Link.used, without a property call per link and sample)
        wan_u = [[use, lk.idx, lk.capacity * bin_s, 0.0] for lk in net.edges_of_kind("wan", "nic") if not lk.unlimited]
        store_u = [[use, lk.idx, lk.capacity * bin_s, 0.0] for lk in net.edges_of_kind("storage") if not lk.unlimited]
        return wan_u, store_u

    def _run_lazy(self):
        """The samples of what the engines do not hold (merging, link utilisation), at the eager
        instants; the engine columns wait for `_fill`."""
        env, bin_s, end = self.env, self.bin_s, self.end
        net = self.res.net
        wan_u, store_u = self._link_rows()
        t_, merging_, net_, ckpt_ = (self.tl[k].append for k in ("t", "merging", "p_net", "p_ckpt"))
        self._next = INF
        while env.now < end:
            yield env.timeout(bin_s)
            net.fabric.advance()
            t_(env.now)
            merging_(1.0 if self.merging() else 0.0)
            net_(_utilisation(wan_u))
            ckpt_(_utilisation(store_u))

    def _fill(self) -> None:
        """The engine columns of the rows added since the last call (lazy), from the per-request
        times: every admission and finish at or before the rows' instants is booked by now.
        Per sidecar, three cursors move forward only: arrivals, admissions (FCFS: ascending) and
        the first request not finished by the last row (models.engine.serving EngineState.tally)."""
        tl, lo = self.tl, self._filled
        hi = len(tl["t"])
        if not self.lazy or hi <= lo:
            return
        if hi - lo >= BULK_ROWS:
            return self._fill_bulk(lo, hi)
        arr_, queue_, running_ = tl["arrivals"].append, tl["queue"].append, tl["running"].append
        cur, counts, n_counts = self._cursors, self.counts, len(self.counts)
        cores = [s.core for s in self.sidecars]
        for t in tl["t"][lo:hi]:
            arrived = queue = running = 0
            for k, c in enumerate(cores):
                seen, adm, fin = cur[k]
                seen2, adm, fin, done = c.tally(t, seen, adm, fin)
                cur[k] = (seen2, adm, fin)
                out = bisect_right(c.requeued, t) - bisect_right(c.resumed, t) if c.requeued else 0  # preempted
                arrived += seen2 - seen
                queue += seen2 - adm + out
                running += adm - done - out
            arr_(arrived)
            queue_(queue)
            running_(running)
            if self.n_bins < n_counts:
                counts[self.n_bins] = arrived
                self.n_bins += 1
        self._filled = hi

    def _fill_bulk(self, lo: int, hi: int) -> None:
        """`_fill` for many rows at once (a run's end, when no policy observed on the way), by sorted
        searches: arrivals and FCFS admissions are ascending per engine (a NaN tail not yet
        admitted), finishes are binned by sample. Same integer counts, same cursors."""
        tl, cur, counts = self.tl, self._cursors, self.counts
        ts = np.asarray(tl["t"][lo:hi], dtype=float)
        arrived, queue, running = (np.zeros(hi - lo, dtype=np.int64) for _ in range(3))
        for k, s in enumerate(self.sidecars):
            c = s.core
            n = c.n
            seen = np.searchsorted(np.frombuffer(c.t_arr, dtype=np.float64, count=n), ts, "right")
            adm = np.searchsorted(c.admitted[:n], ts, "right")
            fin = c.finish[:n]
            # finishes by each sample time: each finish counts from the first sample at or after it
            # (NaN, unfinished: past the last), so no sorted copy of the finish times is needed
            done = np.cumsum(np.bincount(np.searchsorted(ts, fin, "left"), minlength=len(ts) + 1)[: len(ts)])
            out = np.searchsorted(c.requeued, ts, "right") - np.searchsorted(c.resumed, ts, "right")  # preempted
            arrived += np.diff(seen, prepend=cur[k][0])
            queue += seen - adm + out
            running += adm - done - out
            a_last, t_last = int(adm[-1]), ts[-1]
            pending = np.flatnonzero(~(fin[:a_last] <= t_last))
            cur[k] = (int(seen[-1]), a_last, int(pending[0]) if len(pending) else a_last)
        tl["arrivals"].extend(arrived.tolist())
        tl["queue"].extend(queue.tolist())
        tl["running"].extend(running.tolist())
        m = min(hi - lo, len(counts) - self.n_bins)
        counts[self.n_bins : self.n_bins + m] = arrived[:m]
        self.n_bins += m
        self._filled = hi

    def _check_not_ahead(self, now: float) -> None:
        late = [s.idx for s in self.sidecars if s.clock > now]
        if late:
            raise inv.InvariantError(f"engines {late} ran past an observation at t={now!r}")

    # ---- observation ---------------------------------------------------------------------------
    def observe(self, step: int) -> Observation:
        """What the policy sees at the decision about inner step `step`, now."""
        now = self.env.now
        if self.check:
            self._check_not_ahead(now)
        self._fill()
        counts = self.counts[: self.n_bins].copy()  # a copy: the policy must not see later bins
        p_net, p_srv, p_ckpt = self._pressures()
        queue = sum(s.queue_len(now) for s in self.sidecars)
        running = sum(s.running() for s in self.sidecars)
        done = self.training.completed_merges()
        key = (len(done), done[-1].end) if done else ()
        if key != self._dur_key:
            self._dur_key = key
            self._dur_mean = float(np.mean([m.duration for m in done])) if done else 0.0
        spec = self.spec
        return Observation(
            now=now,
            step=step,
            last_merge_step=self.training.last_merge_step,
            merges=len(done),
            h_min=spec.h_min,
            h_max=spec.h_max,
            step_time_s=spec.step_time_s,
            learners=self._signals(),
            p_net=p_net,
            p_srv=p_srv,
            p_ckpt=p_ckpt,
            queue_len=queue,
            running=running,
            bin_s=self.bin_s,
            arrival_counts=counts,
            merge_duration_s=self._dur_mean,
        )

    def _window_mean(self, key: str) -> float:
        xs = self.tl[key][-self._win_n :]
        return float(sum(xs) / len(xs)) if xs else 0.0

    def _pressures(self) -> tuple[float, float, float]:
        """(p_net, p_srv, p_ckpt) over the pressure window. They depend only on the monitor's bins,
        so they are recomputed only when the monitor has added one since the last call."""
        tl = self.tl
        key = len(tl["t"])
        if key == self._press_key:
            return self._press
        n = self._win_n
        recent = self.counts[: self.n_bins][-n:]
        rate = float(recent.sum() / (len(recent) * self.bin_s)) if len(recent) else 0.0
        # p_srv: serving load relative to capacity over the pressure window, the larger of
        # (a) the arrival rate over the fleet's request capacity (unknown for a trace replayed
        # without `load`; then only (b) counts) and (b) the mean occupancy, (waiting + in batch)
        # over the fleet's batch slots (max_num_seqs per sidecar), sampled by the monitor.
        cap_total = (self.capacity_rps or 0.0) * len(self.sidecars)
        slots = max(1, self.spec.max_num_seqs * len(self.sidecars))
        occ = [(q + r) / slots for q, r in zip(tl["queue"][-n:], tl["running"][-n:])]
        p_srv = min(1.0, max(rate / cap_total if cap_total > 0 else 0.0, float(sum(occ) / len(occ)) if occ else 0.0))
        self._press = (min(1.0, self._window_mean("p_net")), p_srv, min(1.0, self._window_mean("p_ckpt")))
        self._press_key = key
        return self._press

    def _signals(self) -> tuple[LearnerSignals, ...]:
        """One LearnerSignals per island. They depend on staleness and on the tokens banked by
        merges, so they are cached per staleness until the next merge is recorded."""
        progress = self.progress
        if self._sig_key != progress.merged_tokens:
            self._sig_key = progress.merged_tokens
            self._sig_cache = {}
        cache = self._sig_cache
        last = self.training.last_merge_step
        steps = self.training.island_step
        n_isl = len(steps)
        signals = []
        for k in steps:
            stale = max(0, k - last)
            s = cache.get(stale)
            if s is None:
                s = cache[stale] = LearnerSignals(
                    progress.dloss_if_merged(stale) / n_isl, stale * self.spec.tokens_per_step, stale
                )
            signals.append(s)
        return tuple(signals)


class Timeline(Mapping):
    """A finished run's timeline (`Monitor.timeline`), built when first read: a sweep keeps the
    timelines of few runs (the timeline seed's), and filling the engine columns from the request
    times is ~5 ms of every run. Until then it holds the monitor (and so the fleet's engines, whose
    times it reads and which nothing changes once the run has ended); pickled, it is a dict."""

    def __init__(self, monitor: Monitor):
        self._monitor: Monitor | None = monitor
        self._cols: dict[str, np.ndarray] | None = None

    def _get(self) -> dict[str, np.ndarray]:
        if self._cols is None:
            self._cols, self._monitor = self._monitor.timeline(), None
        return self._cols

    def __getitem__(self, key: str) -> np.ndarray:
        return self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __reduce__(self):
        return dict, (self._get(),)
