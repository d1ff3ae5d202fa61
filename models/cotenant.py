"""A scenario's GPU co-tenant and its timetable, resolved once into plain numbers and exact timetables.

`cotenant:` (models.spec.scenario.CotenantConfig) becomes a `CotenantPlan`: the hold weight (given, or the
engine profile's fitted co-tenant entry), the sidecars it presses on, and when it is on: the fixed
windows of its timetable moved to the process's poll grid (models.timetables.poll_intervals) plus,
for a `merges` timetable, a window after each merge of the run's own trainer (known only as the run
goes: sim.cotenant asks `merge_window`). Both are SimPy-free; models.spec.resolve builds them, and
validation (models.spec.load, `check_timetable`) finds a bad windows file or a timetable of too many
windows when the scenario loads, before anything runs.

A timetable's kind is built by the `TIMETABLES` registry (`periodic` and `bursty` here; a plug-in
registers its own with `register_timetable`, as the testbed does its pressure schedule); `windows`
(a file or a list), `merges`, `none` and `union` are the structural kinds, built here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from wadiloco.models import timetables as tt
from wadiloco.models.errors import InputError
from wadiloco.models.plugins import Registry
from wadiloco.models.spec.files import beside, check_input, named_by
from wadiloco.models.spec.scenario import CotenantConfig, MergesTimetable, UnionTimetable, WindowsTimetable

CLOCK_EPS_S = 1e-6
MAX_WINDOWS = 2_000_000  # past this a timetable would not fit in memory: a typo (a period, repeat_s)


@dataclass(frozen=True, eq=False)
class TimetablePlan:
    """A timetable as a run uses it: its fixed part (None if it has none) and the length of the
    window after each merge end (None if it has no `merges` part)."""

    fixed: tt.Timetable | None
    merge_window_s: float | None

    def active(self, t: np.ndarray, merge_ends: np.ndarray) -> np.ndarray:
        """Membership at each t: the fixed part's own rule, or within [end, end + window] of a merge."""
        t = np.asarray(t, dtype=np.float64)
        on = self.fixed.active(t) if self.fixed is not None else np.zeros(t.shape, dtype=bool)
        if self.merge_window_s is not None and len(merge_ends):
            ends = np.sort(np.asarray(merge_ends, dtype=np.float64))
            i = np.searchsorted(ends, t, side="right") - 1  # the latest end <= t: equal windows nest
            on = on | ((i >= 0) & (t <= ends[np.maximum(i, 0)] + self.merge_window_s))
        return on


@dataclass(frozen=True, eq=False)
class CotenantPlan:
    weight: float
    sidecars: tuple[int, ...]
    timetable: TimetablePlan
    poll_s: float
    horizon_s: float

    def fixed_windows(self) -> list[tuple[float, float]]:
        """(on, off) of the fixed part: on at the first poll tick at or after a window opens."""
        fixed = self.timetable.fixed
        if fixed is None:
            return []
        return [(a, b) for a, b in tt.poll_intervals(fixed.intervals, self.poll_s) if a < b]

    def merge_window(self, end: float) -> tuple[float, float] | None:
        """(on, off) of the window after a merge that ended at `end`, or None (no `merges` part, or
        nothing of it before the horizon). On at the first poll tick at or after `end`, where a tick
        within CLOCK_EPS_S before it counts (a trainer clock summed from 0.05-s steps drifts by
        ~1e-10 s, more than poll_intervals' relative tolerance), and never before `end`."""
        w = self.timetable.merge_window_s
        if w is None:
            return None
        off = min(end + w, self.horizon_s)
        on = end if self.poll_s <= 0 else max(end, math.ceil((end - CLOCK_EPS_S) / self.poll_s) * self.poll_s)
        return (on, off) if on < off else None


# ---- timetable kinds in closed form, by name -----------------------------------------------------------


def _per_period(spec, horizon: float) -> float:
    return horizon / spec.period_s


@dataclass(frozen=True)
class TimetableKind:
    """A kind in closed form: `build(spec, horizon)`, its exact timetable over [0, horizon], and
    `windows(spec, horizon)`, about how many windows that has, which validation holds to MAX_WINDOWS
    (naming `count_field`, the field that sets the count)."""

    build: Callable[[object, float], tt.Timetable]
    windows: Callable[[object, float], float] = _per_period
    count_field: str = "period_s"


TIMETABLES: Registry[str, TimetableKind] = Registry("timetable kind")


def register_timetable(kind: str, build, windows=_per_period, count_field: str = "period_s") -> None:
    """Build the timetable kind `kind` (its schema in models.spec.scenario) with `build(spec, horizon)`."""
    TIMETABLES[kind] = TimetableKind(build, windows, count_field)


register_timetable(
    "periodic", lambda s, h: tt.periodic(s.period_s, s.window_s, s.inclusive, horizon=h, phase=s.phase_s)
)
register_timetable("bursty", lambda s, h: tt.bursty(s.period_s, s.window_s, s.phase_s, horizon=h))


# ---- building plans from a scenario's blocks (models.spec.resolve) ----------------------------------


def cotenant_plan(
    c: CotenantConfig, weight: float, sidecars: tuple[int, ...], horizon: float, base_dir: str, file: object
) -> CotenantPlan:
    table = timetable_plan(c.timetable, horizon, base_dir, file, "cotenant.timetable")
    return CotenantPlan(weight, sidecars, table, c.poll_s, horizon)


def timetable_plan(spec, horizon: float, base_dir: str, file: object, where: str) -> TimetablePlan:
    parts = spec.of if isinstance(spec, UnionTimetable) else [spec]
    fixed: tt.Timetable | None = None
    window: float | None = None
    for k, part in enumerate(parts):
        at = f"{where}.of.{k}" if isinstance(spec, UnionTimetable) else where
        if isinstance(part, UnionTimetable):
            sub = timetable_plan(part, horizon, base_dir, file, at)
            table, w = sub.fixed, sub.merge_window_s
        elif isinstance(part, MergesTimetable):
            table, w = None, part.window_s
        else:
            table, w = _fixed(part, horizon, base_dir, file, at), None
        if table is not None:
            fixed = table if fixed is None else fixed | table
        if w is not None:
            window = w if window is None else max(window, w)
    return TimetablePlan(fixed, window)


def _check_count(n: float, file: object, where: str) -> None:
    if n > MAX_WINDOWS:
        msg = f"about {n:.3g} windows over the horizon (at most {MAX_WINDOWS}); check the times"
        raise InputError(file, where, msg)


def check_timetable(spec, horizon: float, base_dir: str, file: object, where: str) -> float:
    """The input errors `timetable_plan` raises (too many windows, a missing or malformed windows file),
    without building the timetable: validation (models.spec.load), before any run is resolved. Returns
    about how many windows it has over the horizon; a union's parts together are held to the same cap
    as one timetable (twenty timetables of a million windows each are twenty million)."""
    parts = spec.of if isinstance(spec, UnionTimetable) else [spec]
    total = 0.0
    for k, part in enumerate(parts):
        at = f"{where}.of.{k}" if isinstance(spec, UnionTimetable) else where
        if isinstance(part, UnionTimetable):
            total += check_timetable(part, horizon, base_dir, file, at)
        else:
            total += _fixed(part, horizon, base_dir, file, at, build=False) or 0.0
    if isinstance(spec, UnionTimetable):
        _check_count(total, file, f"{where}.of")
    return total


def _fixed(spec, horizon: float, base_dir: str, file: object, where: str, build: bool = True):
    """The exact timetable of one fixed kind; None for `none` and `merges` (or, not `build`, its checks
    only, and about how many windows it has)."""
    if isinstance(spec, WindowsTimetable):
        return _windows(spec, horizon, base_dir, file, where, build)
    if spec.kind in ("none", "merges"):
        return None if build else 0.0
    kind = TIMETABLES.get(spec.kind)
    if kind is None:
        raise InputError(
            file, f"{where}.kind", f"no timetable kind {spec.kind!r} is registered; known: {TIMETABLES.known()}"
        )
    n = kind.windows(spec, horizon)
    _check_count(n, file, f"{where}.{kind.count_field}")
    return kind.build(spec, horizon) if build else n


def _windows(
    spec: WindowsTimetable, horizon: float, base_dir: str, file: object, where: str, build: bool = True
) -> tt.Timetable | float:
    if spec.file is not None:
        path = beside(spec.file, base_dir)
        check_input(path, file, f"{where}.file", "windows file")
        with named_by(file, f"{where}.file"):
            trace = tt.load_trace(path, spec.window_s)
    else:
        trace = tt.WindowTrace(tuple(spec.starts or ()), tt.trace_duration(spec.starts or (), spec.window_s))
    d = spec.repeat_s if spec.repeat_s is not None else trace.duration
    count = float(len(trace.starts))
    if spec.repeat and d > spec.window_s:
        count = math.ceil(horizon / d) * max(1.0, count)
        _check_count(count, file, f"{where}.repeat_s")
    if not build:
        return count
    return tt.windows(trace.starts, spec.window_s, duration=d, repeat=spec.repeat, horizon=horizon)
