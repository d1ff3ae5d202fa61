"""Workload kinds: per-sidecar request arrivals and token lengths, from a scenario's `workload:`.

A kind is one function plus one decorator. Synthetic kinds (`@synthetic`) only describe *when* the
fleet is busy, as a piecewise-constant relative rate profile with long-run mean 1; the shared code
turns it into exact non-homogeneous Poisson arrivals at `load` x one sidecar's capacity and draws
lognormal token lengths. Other kinds (`@workload`, e.g. `trace`) build the arrivals themselves.

Load is utilisation relative to a sidecar's measured capacity (the `capacity_rps` callback, from
the latency model) rather than requests/s, so a regime keeps its meaning when the latency model
changes. Randomness comes from named streams (models.rng): sidecar i's arrival times from
("arrivals", i), its token lengths from ("tokens", i), burst timing shared by the whole fleet from
("bursts",), so every policy run on a seed sees identical arrivals (common random numbers).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field, PrivateAttr, field_validator, model_validator

from wadiloco.models.errors import InputError
from wadiloco.models.plugins import Registry
from wadiloco.models.rng import stream
from wadiloco.models.spec.schema import Strict, check_input, validate
from wadiloco.models.workload import clients
from wadiloco.models.workload.prompt_sets import PROMPT_SETS, output_batch
from wadiloco.models.workload.traces import MAX_TOKENS, Trace, load_trace_cached

# Sanity guards: past these a run would not fit in memory; it is a typo (load, horizon, period).
MAX_REQUESTS_PER_SIDECAR = 20_000_000
MAX_SEGMENTS = 5_000_000


@dataclass(frozen=True, eq=False)
class Arrivals:
    """One sidecar's requests: arrival times (s, sorted) and token lengths. Read-only arrays. `hashes`:
    each request's prompt block hashes (a trace's `hash_ids`, models.engine.prefix), or None."""

    t: np.ndarray  # float64, sorted, 0 <= t < horizon
    prompt: np.ndarray  # int64 >= 1
    output: np.ndarray  # int64 >= 1
    hashes: tuple | None = None

    def __post_init__(self):
        for a in (self.t, self.prompt, self.output):
            a.setflags(write=False)  # shared by every policy run on a seed: nobody may edit it

    def __len__(self) -> int:
        return len(self.t)


@dataclass(frozen=True)
class Context:
    """What a kind's builder may use besides its own params."""

    n_sidecars: int
    horizon_s: float
    capacity_rps: Callable[[float, float], float]
    seed: int
    file: str

    def rate_for(self, load: float, mean_prompt: float, mean_output: float) -> float:
        """Requests/s per sidecar for a utilisation `load` at these mean token lengths."""
        cap = float(self.capacity_rps(float(mean_prompt), float(mean_output)))
        if not math.isfinite(cap) or cap <= 0:
            raise ValueError(
                f"capacity_rps({mean_prompt:.1f}, {mean_output:.1f}) returned {cap}; "
                "expected a positive number of requests/s"
            )
        return load * cap


@dataclass(frozen=True)
class ClientContext:
    """What a closed-loop kind's client builder may use besides its own params."""

    n_sidecars: int
    horizon_s: float
    seed: int
    profile_start_delay_s: float | None  # the engine profile's fitted start delay (None: no profile)


@dataclass(frozen=True)
class WorkloadKind:
    """A registry entry: the kind's name, its params model and how to build arrivals; a closed-loop
    kind also builds each sidecar's client (models.workload.clients), which creates the requests as it goes."""

    name: str
    params: type[BaseModel]
    build: Callable[[Any, Context], list[Arrivals]]
    doc: str
    clients: Callable[[Any, ClientContext], list] | None = None


WORKLOADS: Registry[str, WorkloadKind] = Registry("workload kind")


def _clean_doc(doc: str | None) -> str:
    return " ".join((doc or "").split())


def workload(name: str, params: type[BaseModel]):
    """Register `fn(params, ctx) -> list[Arrivals]` as workload kind `name`."""

    def deco(fn):
        _register(WorkloadKind(name, params, fn, _clean_doc(fn.__doc__)))
        return fn

    return deco


def _register(entry: WorkloadKind) -> None:
    WORKLOADS.add(entry.name, entry)


def synthetic(name: str, params: type[BaseModel]):
    """Register `profile(params, ctx) -> (edges, level)` as a synthetic kind; `params` subclasses
    `SyntheticParams` (so it has `load` and `tokens`).

    `edges` (K+1 sorted times from 0 to the horizon) and `level` (K relative rates, long-run
    mean 1) describe the fleet-wide rate; each sidecar gets exact Poisson arrivals at
    level x load x capacity within each segment, and lognormal token lengths.
    """

    def deco(profile):
        def build(p, ctx: Context) -> list[Arrivals]:
            rate = ctx.rate_for(p.load, p.tokens.prompt.clipped_mean(), p.tokens.output.clipped_mean())
            _check_volume(rate * ctx.horizon_s, ctx.file, "workload.load")
            edges, level = profile(p, ctx)
            out = []
            for i in range(ctx.n_sidecars):
                t = _poisson_piecewise(stream(ctx.seed, "arrivals", i), edges, rate * level)
                rng = stream(ctx.seed, "tokens", i)
                out.append(Arrivals(t, p.tokens.prompt.sample(rng, len(t)), p.tokens.output.sample(rng, len(t))))
            return out

        _register(WorkloadKind(name, params, build, _clean_doc(profile.__doc__)))
        return profile

    return deco


# ---------------------------------------------------------------------------------------------
# token lengths


class _Lengths(Strict):
    """Lognormal length from its mean and median, rounded to whole tokens and clipped to [min, max].

    A lognormal matches the long right tail of real prompts and outputs with two intuitive numbers;
    median == mean gives fixed lengths.
    """

    mean: float
    median: float
    min: int = Field(1, ge=1, description="shortest length (tokens)")
    max: int

    @model_validator(mode="after")
    def _order(self):
        if self.median > self.mean:
            raise ValueError(
                f"median ({self.median:g}) must not exceed mean ({self.mean:g}): a lognormal's "
                "mean is above its median (equal means fixed lengths)"
            )
        if not self.min <= self.median <= self.max:
            raise ValueError(f"median ({self.median:g}) must lie within [min, max] = [{self.min}, {self.max}]")
        if self.mean > self.max:
            raise ValueError(f"mean ({self.mean:g}) must not exceed max ({self.max})")
        return self

    @property
    def mu(self) -> float:
        return math.log(self.median)

    @property
    def sigma(self) -> float:
        return math.sqrt(2.0 * math.log(self.mean / self.median))

    def clipped_mean(self) -> float:
        """Mean after clipping to [min, max], analytically (the capacity needs the real mean)."""
        mu, s, a, b = self.mu, self.sigma, float(self.min), float(self.max)
        if s == 0.0:
            return min(max(self.median, a), b)
        za, zb = (math.log(a) - mu) / s, (math.log(b) - mu) / s
        body = math.exp(mu + s * s / 2) * (_phi(zb - s) - _phi(za - s))
        return a * _phi(za) + b * (1.0 - _phi(zb)) + body

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        x = rng.lognormal(self.mu, self.sigma, n)
        return np.clip(np.rint(x), self.min, self.max).astype(np.int64)


def _phi(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


# Defaults: Azure LLM inference trace 2023, conversation (mean/median from the file).
class PromptLengths(_Lengths):
    mean: float = Field(1155.0, gt=0, le=MAX_TOKENS, description="mean prompt tokens (Azure conv)")
    median: float = Field(1020.0, gt=0, le=MAX_TOKENS, description="median prompt tokens (Azure conv)")
    max: int = Field(16384, ge=1, le=MAX_TOKENS, description="longest prompt (context window)")


class OutputLengths(_Lengths):
    mean: float = Field(211.0, gt=0, le=MAX_TOKENS, description="mean output tokens (Azure conv)")
    median: float = Field(129.0, gt=0, le=MAX_TOKENS, description="median output tokens (Azure conv)")
    max: int = Field(4096, ge=1, le=MAX_TOKENS, description="longest output")


class Tokens(Strict):
    prompt: PromptLengths = PromptLengths()
    output: OutputLengths = OutputLengths()


# ---------------------------------------------------------------------------------------------
# arrival-process helpers


def _poisson_piecewise(rng: np.random.Generator, edges: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """Exact Poisson arrivals with a piecewise-constant rate: a Poisson count per segment, then
    uniform times inside it (the order statistics of a Poisson process)."""
    widths = np.diff(edges)
    counts = rng.poisson(rates * widths)
    seg = np.repeat(np.arange(len(widths)), counts)
    t = edges[seg] + rng.random(seg.size) * widths[seg]
    t.sort()
    return t[t < edges[-1]]  # float rounding may land exactly on the horizon


def _flat(horizon_s: float) -> tuple[np.ndarray, np.ndarray]:
    return np.array([0.0, horizon_s]), np.array([1.0])


def _on_off_levels(on_fraction: float, off_rate_ratio: float) -> tuple[float, float]:
    """(on, off) relative rates with time-average 1 when on for `on_fraction` of the time."""
    on = 1.0 / (on_fraction + off_rate_ratio * (1.0 - on_fraction))
    return on, off_rate_ratio * on


def _check_volume(expected: float, file: str, field: str) -> None:
    if expected > MAX_REQUESTS_PER_SIDECAR:
        raise InputError(
            file,
            field,
            f"would generate about {expected:,.0f} requests per sidecar (limit "
            f"{MAX_REQUESTS_PER_SIDECAR:,}); lower the load or the horizon",
        )


def _check_segments(n: float, file: str, field: str) -> None:
    if n > MAX_SEGMENTS:
        raise InputError(
            file,
            field,
            f"would need about {n:,.0f} on/off phases over the horizon "
            f"(limit {MAX_SEGMENTS:,}); use longer phases or a shorter horizon",
        )


# ---------------------------------------------------------------------------------------------
# synthetic kinds

_LOAD_HELP = "utilisation: mean arrival rate over one sidecar's capacity (1 = saturation)"


class SyntheticParams(Strict):
    """Fields every synthetic kind has; a kind adds `kind: Literal[...]`, `load` with its default
    and its own shape parameters."""

    kind: str
    tokens: Tokens = Field(
        Tokens(), description="prompt/output lengths: lognormal from mean and median, rounded, clipped to [min, max]"
    )


class NormalParams(SyntheticParams):
    kind: Literal["normal"] = "normal"
    load: float = Field(0.5, gt=0, le=100, description=_LOAD_HELP)


class PressureHeavyParams(SyntheticParams):
    kind: Literal["pressure_heavy"] = "pressure_heavy"
    load: float = Field(1.0, gt=0, le=100, description=_LOAD_HELP)


class SustainedSyncHeavyParams(SyntheticParams):
    kind: Literal["sustained_sync_heavy"] = "sustained_sync_heavy"
    load: float = Field(0.8, gt=0, le=100, description=_LOAD_HELP)


class BurstyParams(SyntheticParams):
    kind: Literal["bursty"] = "bursty"
    load: float = Field(0.6, gt=0, le=100, description=_LOAD_HELP + ", averaged over a period")
    period_s: float = Field(120.0, gt=0, description="one on phase plus one off phase (s)")
    on_fraction: float = Field(0.25, gt=0, lt=1, description="share of each period in the burst")
    off_rate_ratio: float = Field(0.2, ge=0, le=1, description="off-phase rate over on-phase rate")
    phase_s: float | None = Field(None, ge=0, description="start of the first burst (s); null: random per seed")


class AperiodicParams(SyntheticParams):
    kind: Literal["aperiodic"] = "aperiodic"
    load: float = Field(0.6, gt=0, le=100, description=_LOAD_HELP + ", in expectation")
    gap_mean_s: float = Field(120.0, gt=0, description="mean time from one burst's start to the next (s)")
    gap_shape: float = Field(
        1.5,
        gt=1,
        le=100,
        description="Pareto tail index of the quiet part of a gap "
        "(smaller = heavier tail; must exceed 1 for a finite mean)",
    )
    burst_mean_s: float = Field(30.0, gt=0, description="mean burst duration (s), exponential")
    off_rate_ratio: float = Field(0.2, ge=0, le=1, description="off-phase rate over in-burst rate")

    @model_validator(mode="after")
    def _burst_fits(self):
        if self.burst_mean_s >= self.gap_mean_s:
            raise ValueError(
                f"burst_mean_s ({self.burst_mean_s:g}) must be below gap_mean_s "
                f"({self.gap_mean_s:g}): a gap is a burst plus a quiet spell"
            )
        return self


@synthetic("normal", NormalParams)
def normal(p: NormalParams, ctx: Context):
    """Poisson at moderate load (0.5): the regime where merges should barely matter, the
    paper's check that synthetic pressure does not automatically become real latency."""
    return _flat(ctx.horizon_s)


@synthetic("pressure_heavy", PressureHeavyParams)
def pressure_heavy(p: PressureHeavyParams, ctx: Context):
    """Poisson at or above saturation (1.0): queues grow whatever the merges do, so no
    placement policy should separate from another."""
    return _flat(ctx.horizon_s)


@synthetic("sustained_sync_heavy", SustainedSyncHeavyParams)
def sustained_sync_heavy(p: SustainedSyncHeavyParams, ctx: Context):
    """Steady high Poisson load (0.8), paired in its scenario with frequent/expensive merges:
    every merge hurts but there are no quiet windows to hide in, so smart placement should tie
    matched-random."""
    return _flat(ctx.horizon_s)


@synthetic("bursty", BurstyParams)
def bursty(p: BurstyParams, ctx: Context):
    """Periodic on/off bursts with one phase for the whole fleet (a two-state MMPP with fixed
    sojourns): quiet windows exist and recur, the case where placement can beat matched-random.
    On and off rates are set so the mean over a period is exactly `load`."""
    period, on_len, horizon = p.period_s, p.on_fraction * p.period_s, ctx.horizon_s
    _check_segments(2 * horizon / period, ctx.file, "workload.period_s")
    phase = p.phase_s if p.phase_s is not None else stream(ctx.seed, "bursts").uniform(0.0, period)
    phase %= period
    starts = phase + period * np.arange(-1, math.ceil(horizon / period) + 1)
    cuts = np.concatenate(([0.0, horizon], starts, starts + on_len))
    edges = np.unique(cuts[(cuts >= 0) & (cuts <= horizon)])
    mid = (edges[:-1] + edges[1:]) / 2
    on_lvl, off_lvl = _on_off_levels(p.on_fraction, p.off_rate_ratio)
    return edges, np.where((mid - phase) % period < on_len, on_lvl, off_lvl)


@synthetic("aperiodic", AperiodicParams)
def aperiodic(p: AperiodicParams, ctx: Context):
    """Bursts at irregular, heavy-tailed gaps (an alternating renewal process): each gap is an
    exponential burst (`burst_mean_s`) plus a Pareto quiet spell, so burst starts are on average
    `gap_mean_s` apart but sometimes very far. No period to learn: a forecaster must react.
    The process starts in its stationary state (inside a burst with probability
    f = burst_mean_s / gap_mean_s, else partway through a quiet spell), so the expected rate is
    exactly `load` at every instant, whatever the horizon."""
    horizon, f = ctx.horizon_s, p.burst_mean_s / p.gap_mean_s
    _check_segments(2 * horizon / p.gap_mean_s, ctx.file, "workload.gap_mean_s")
    alpha = p.gap_shape
    x_m = (p.gap_mean_s - p.burst_mean_s) * (alpha - 1.0) / alpha  # Pareto scale for that mean
    rng = stream(ctx.seed, "bursts")
    in_burst = bool(rng.random() < f)
    # Time left in the phase that t = 0 falls in: exponential bursts are memoryless; a quiet
    # spell's remainder follows the Pareto's equilibrium (residual-life) distribution.
    first = rng.exponential(p.burst_mean_s) if in_burst else _pareto_residual(rng, x_m, alpha)
    pieces, t = [np.array([first])], first
    chunk = max(16, int(horizon / p.gap_mean_s) + 1)
    while t < horizon:
        quiet = x_m * (1.0 + rng.pareto(alpha, chunk))
        burst = rng.exponential(p.burst_mean_s, chunk)
        pair = (quiet, burst) if in_burst else (burst, quiet)  # phases alternate after `first`
        ends = t + np.cumsum(np.column_stack(pair).ravel())
        pieces.append(ends)
        t = float(ends[-1])
    cuts = np.concatenate(pieces)
    edges = np.concatenate(([0.0], cuts[cuts < horizon], [horizon]))
    on_lvl, off_lvl = _on_off_levels(f, p.off_rate_ratio)
    seg_on = (np.arange(len(edges) - 1) % 2 == 0) == in_burst
    level = np.where(seg_on, on_lvl, off_lvl)
    keep = np.diff(edges) > 0
    return edges[np.concatenate((keep, [True]))], level[keep]


def _pareto_residual(rng: np.random.Generator, x_m: float, alpha: float) -> float:
    """A draw from the equilibrium distribution F_e(x) = P(Q > u) integrated to x over E[Q], for a
    classic Pareto Q (scale x_m, index alpha), by inversion: uniform on [0, x_m] with probability
    (alpha - 1) / alpha, else a Pareto tail."""
    u = rng.random()
    mean = x_m * alpha / (alpha - 1.0)
    if u < (alpha - 1.0) / alpha:
        return u * mean
    return x_m * (alpha * (1.0 - u)) ** (-1.0 / (alpha - 1.0))


# ---------------------------------------------------------------------------------------------
# a daily curve


class DiurnalBursts(Strict):
    """Bursts on top of the curve: an alternating renewal of exponential bursts and quiet spells that
    the whole fleet shares, its own stream ("diurnal_bursts"), started in its stationary state; rates
    in and out of a burst are set so the bursts keep the curve's mean at every instant."""

    gap_mean_s: float = Field(
        3600.0, gt=0, description="Mean time from one burst's start to the next. Unit: s. Source: assumption."
    )
    burst_mean_s: float = Field(300.0, gt=0, description="Mean burst duration. Unit: s. Source: assumption.")
    ratio: float = Field(
        3.0, ge=1, le=1000, description="Rate in a burst over the rate outside one. Unit: ratio. Source: assumption."
    )

    @model_validator(mode="after")
    def _burst_fits(self):
        if self.burst_mean_s >= self.gap_mean_s:
            raise ValueError(
                f"burst_mean_s ({self.burst_mean_s:g}) must be below gap_mean_s ({self.gap_mean_s:g}): "
                "a gap is a burst plus a quiet spell"
            )
        return self


class DiurnalParams(SyntheticParams):
    kind: Literal["diurnal"] = "diurnal"
    load: float = Field(
        0.5, gt=0, le=100, description=f"{_LOAD_HELP}, averaged over a period. Unit: fraction. Source: assumption."
    )
    period_s: float = Field(
        86400.0, gt=0, description="One day: the curve repeats with this period. Unit: s. Source: definition (a day)."
    )
    start_hour: float = Field(
        0.0,
        ge=0,
        lt=24,
        description="Time of day at t = 0, in hours of the period (a period is 24 of them). Unit: h. Source: the "
        "scenario.",
    )
    peak_hour: float = Field(
        14.0, ge=0, lt=24, description="Sine curve: the hour of the day's peak. Unit: h. Source: assumption."
    )
    peak_to_trough: float = Field(
        3.0,
        ge=1,
        le=1000,
        description="Sine curve: the peak rate over the trough rate (1: flat). Unit: ratio. Source: assumption.",
    )
    step_s: float | None = Field(
        None,
        gt=0,
        description="Sine curve: piecewise-constant steps of this length, each at the curve's exact mean over it; "
        "null: period_s / 288 (5 minutes of a day). Unit: s. Source: project choice.",
    )
    hourly: list[float] | None = Field(
        None,
        min_length=1,
        max_length=100_000,
        description="Relative rates of the period's equal slices (24: hourly), from midnight, e.g. a fleet's own "
        "hourly request counts; replaces the sine. Unit: relative rate. Source: the scenario.",
    )
    trace: str | None = Field(
        None,
        min_length=1,
        description="An Azure CSV or Mooncake JSONL (relative to the scenario file) whose arrival counts in "
        "`trace_bins` equal slices of its span give the curve, stretched over one period; replaces the sine. "
        "Source: the scenario.",
    )
    trace_bins: int = Field(
        24, ge=1, le=100_000, description="Trace curve: slices of the trace's span. Unit: slices. Source: the scenario."
    )
    bursts: DiurnalBursts | None = Field(
        None, description="Bursts on top of the curve; null: none. Source: the scenario."
    )
    _curve: np.ndarray | None = PrivateAttr(None)  # a trace's slices' relative rates (parse_workload)

    @model_validator(mode="after")
    def _one_curve(self):
        if self.hourly is not None and self.trace is not None:
            raise ValueError("give `hourly` or `trace`, not both")
        if self.hourly is not None and (min(self.hourly) < 0 or sum(self.hourly) <= 0):
            raise ValueError("hourly rates must be >= 0 with a positive sum")
        return self

    def slices(self) -> np.ndarray | None:
        """The relative rates of the period's equal slices (mean 1), or None for the sine."""
        raw = self._curve if self.trace is not None else self.hourly
        if raw is None:
            if self.trace is not None:
                raise RuntimeError("DiurnalParams not loaded; use parse_workload()")
            return None
        x = np.asarray(raw, dtype=float)
        return x / x.mean()


@synthetic("diurnal", DiurnalParams)
def diurnal(p: DiurnalParams, ctx: Context):
    """A daily rate curve with bursts on top: a sine between trough and peak (`peak_to_trough`, at
    `peak_hour`), or the relative rates of the day's slices (`hourly`), or a trace's arrival counts
    stretched over the day (`trace`); the run starts at `start_hour`. Each step of the curve is at the
    curve's exact mean over it, so a whole period averages `load`; optional bursts (`bursts`) multiply
    it, their mean 1 at every instant."""
    offset = p.start_hour / 24.0 * p.period_s
    edges, level = _day_curve(p, ctx, offset)
    if p.bursts is not None:
        return _with_bursts(edges, level, p.bursts, stream(ctx.seed, "diurnal_bursts"), ctx)
    return edges, level


def _day_curve(p: DiurnalParams, ctx: Context, offset: float) -> tuple[np.ndarray, np.ndarray]:
    """The curve's steps over [0, horizon): slice or sine-step boundaries in time of day, shifted by
    the run's start."""
    horizon, period, sl = ctx.horizon_s, p.period_s, p.slices()
    width = period / len(sl) if sl is not None else min(p.step_s or period / 288, period)
    _check_segments(horizon / width, ctx.file, "workload.step_s" if sl is None else "workload.hourly")
    k0, k1 = math.floor(offset / width), math.ceil((offset + horizon) / width)
    cuts = np.arange(k0, k1 + 1) * width - offset
    edges = np.unique(np.clip(cuts, 0.0, horizon))
    lo, hi = edges[:-1] + offset, edges[1:] + offset  # in time since midnight of the first day
    if sl is not None:
        idx = np.floor(((lo + hi) / 2 % period) / width).astype(np.int64) % len(sl)
        return edges, sl[idx]
    a = (p.peak_to_trough - 1.0) / (p.peak_to_trough + 1.0)  # 1 + a cos: peak / trough = (1 + a) / (1 - a)
    w, peak = 2 * math.pi / period, p.peak_hour / 24.0 * period
    mean_cos = (np.sin(w * (hi - peak)) - np.sin(w * (lo - peak))) / (w * (hi - lo))  # exact over each step
    return edges, 1.0 + a * mean_cos


def _with_bursts(edges, level, b: DiurnalBursts, rng: np.random.Generator, ctx: Context):
    """The curve times the bursts' on/off multipliers (mean 1 at every instant)."""
    horizon, f = ctx.horizon_s, b.burst_mean_s / b.gap_mean_s
    _check_segments(2 * horizon / b.gap_mean_s, ctx.file, "workload.bursts.gap_mean_s")
    quiet_mean = b.gap_mean_s - b.burst_mean_s
    on = bool(rng.random() < f)  # stationary start; both phases are memoryless
    cuts, t, state = [], 0.0, on
    while t < horizon:
        t += rng.exponential(b.burst_mean_s if state else quiet_mean)
        cuts.append(t)
        state = not state
    cuts = np.asarray(cuts)
    all_edges = np.unique(np.concatenate((edges, cuts[cuts < horizon])))
    mid = (all_edges[:-1] + all_edges[1:]) / 2
    in_burst = (np.searchsorted(cuts, mid, side="right") % 2 == 0) == on
    hi_lvl, lo_lvl = _on_off_levels(f, 1.0 / b.ratio)
    base = level[np.searchsorted(edges, mid, side="right") - 1]
    return all_edges, base * np.where(in_burst, hi_lvl, lo_lvl)


def _trace_curve(p: DiurnalParams, file: object, base_dir: str | Path) -> None:
    """A trace's arrival counts in `trace_bins` equal slices of its span, for `DiurnalParams.slices`."""
    path = Path(p.trace).expanduser()
    path = path if path.is_absolute() else Path(base_dir) / path
    check_input(path, file, "workload.trace", "trace file")
    tr = load_trace_cached(path)
    span = float(tr.t[-1])
    if len(tr.t) < 2 or span <= 0:
        raise InputError(file, "workload.trace", "the trace needs at least two distinct timestamps to give a curve")
    counts = np.bincount(np.minimum((tr.t / span * p.trace_bins).astype(np.int64), p.trace_bins - 1),
                         minlength=p.trace_bins)  # fmt: skip
    p._curve = counts.astype(float)


# ---------------------------------------------------------------------------------------------
# trace replay


class TraceParams(Strict):
    kind: Literal["trace"] = "trace"
    path: str = Field(description="trace file, relative to the scenario file's folder")
    format: Literal["auto", "azure", "mooncake"] = Field("auto", description="auto: by extension, else sniffed")
    time_offset_s: float = Field(0.0, ge=0, description="skip this many seconds of the trace")
    rate_scale: float = Field(1.0, gt=0, le=1e6, description="time-compress the trace by this factor")
    load: float | None = Field(
        None,
        gt=0,
        le=100,
        description="if set: rescale time so the mean per-sidecar rate is load x capacity (overrides rate_scale)",
    )
    spread: Literal["round_robin", "random", "hash"] = Field(
        "round_robin",
        description="how requests are dealt to sidecars: in turn, at random (seeded), "
        "or by a hash of the trace row (the same row always on the same sidecar)",
    )
    loop: bool = Field(False, description="repeat the trace if the horizon outlasts it")
    _trace: Trace | None = PrivateAttr(None)

    @property
    def trace(self) -> Trace:
        if self._trace is None:
            raise RuntimeError("TraceParams not loaded; use parse_workload()")
        return self._trace

    def cycle_s(self) -> float:
        """Length of the replayed part before it repeats: from the offset to one mean gap past
        the last request, so a looped trace keeps its own mean rate across the seam."""
        t = self.trace.t
        gap = t[-1] / (len(t) - 1) if len(t) > 1 else 0.0
        return float(t[-1] + gap - self.time_offset_s)


@workload("trace", TraceParams)
def replay_trace(p: TraceParams, ctx: Context) -> list[Arrivals]:
    """Replay a real trace (Azure CSV or Mooncake JSONL): real burstiness and real token lengths.
    The fleet shares one trace, dealt over sidecars by `spread`; `time_offset_s` picks the window,
    `rate_scale` (or `load`, relative to capacity at the trace's own token means) sets the pace,
    and `loop` repeats the trace with one mean gap at the seam."""
    tr = p.trace
    rows = np.flatnonzero(tr.t >= p.time_offset_s)
    t = tr.t[rows] - p.time_offset_s
    scale = p.rate_scale
    cycle = p.cycle_s()
    if p.load is not None:
        fleet_rate = len(rows) / cycle
        target = ctx.n_sidecars * ctx.rate_for(p.load, tr.prompt[rows].mean(), tr.output[rows].mean())
        scale = target / fleet_rate
    if p.loop:
        copies = max(1, math.ceil(ctx.horizon_s * scale / cycle))
        _check_volume(copies * len(rows) / ctx.n_sidecars, ctx.file, "workload.loop")
        t = (t[None, :] + cycle * np.arange(copies)[:, None]).ravel()
        rows = np.tile(rows, copies)
    t = t / scale
    keep = t < ctx.horizon_s
    t, rows = t[keep], rows[keep]

    n = ctx.n_sidecars
    if p.spread == "round_robin":
        who = np.arange(len(t)) % n
    elif p.spread == "random":
        who = stream(ctx.seed, "spread").integers(0, n, size=len(t))
    else:
        who = (_mix64(rows) % np.uint64(n)).astype(np.int64)
    order = np.argsort(who, kind="stable")  # stable: each sidecar's share stays time-sorted
    parts = np.split(order, np.cumsum(np.bincount(who, minlength=n))[:-1])
    hs = tr.hashes
    return [
        Arrivals(t[k], tr.prompt[rows[k]], tr.output[rows[k]], None if hs is None else tuple(hs[r] for r in rows[k]))
        for k in parts
    ]


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: a fixed, seed-free hash of a row index (uint64 arithmetic wraps)."""
    z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


# ---------------------------------------------------------------------------------------------
# closed loop (models.workload.clients)


class SteadyConcurrency(Strict):
    kind: Literal["steady"] = "steady"
    c: int = Field(8, ge=1, le=4096, description="requests per batch")


class BurstyConcurrency(Strict):
    """Busy batches while (t + phase_s) mod period_s < window_s at batch start (docs/sources.md, testbed 2.4)."""

    kind: Literal["bursty"] = "bursty"
    quiet: int = Field(4, ge=1, le=4096)
    busy: int = Field(12, ge=1, le=4096)
    period_s: float = Field(120.0, gt=0)
    window_s: float = Field(30.0, ge=0)
    phase_s: float = Field(0.0, ge=0)


class ConstantThink(Strict):
    kind: Literal["constant"] = "constant"
    s: float = Field(0.0, ge=0, le=86400)


class ExponentialThink(Strict):
    kind: Literal["exponential"] = "exponential"
    mean_s: float = Field(gt=0, le=86400)


_BATCH_ONLY, _USERS_ONLY = ("concurrency", "client_gap_s"), ("users", "think_s")


class ClosedLoopParams(Strict):
    kind: Literal["closed_loop"] = "closed_loop"
    mode: Literal["batch", "users"] = Field("batch", description="whole batches (the testbed) or N users")
    concurrency: SteadyConcurrency | BurstyConcurrency = Field(
        SteadyConcurrency(), discriminator="kind", description="batch mode: c(t), decided at batch start"
    )
    client_gap_s: float = Field(0.0, ge=0, le=3600, description="batch mode: from a batch's end to the next start")
    users: int = Field(16, ge=1, le=100_000, description="users mode: users, each with one request out at most")
    think_s: float | ConstantThink | ExponentialThink = Field(
        0.0, description="users mode: think time from an answer to the next request (s, or a distribution)"
    )
    prompts: str | PromptLengths = Field(
        "mixed",
        description="a registered prompt set by name, cycled by the global request index (the testbed's: short, "
        "mixed, long), or a length distribution",
    )
    output_tokens: int | list[int] | OutputLengths = Field(
        128, description="fixed output tokens, one per prompt slot (cycled as the prompts), or a length distribution"
    )
    start_delay_s: float | Literal["profile"] | None = Field(
        None, description="serving starts then (s); profile (or null under engine.profile): the fitted delay"
    )

    @field_validator("prompts")
    @classmethod
    def _known_set(cls, v: str | PromptLengths) -> str | PromptLengths:
        if isinstance(v, str) and v not in PROMPT_SETS:
            raise ValueError(f"unknown prompt set {v!r}; known: {PROMPT_SETS.known()}")
        return v

    @model_validator(mode="after")
    def _one_mode(self):
        wrong = _USERS_ONLY if self.mode == "batch" else _BATCH_ONLY
        given = [f for f in wrong if f in self.model_fields_set]
        if given:
            raise ValueError(f"{', '.join(given)} only apply to mode {'users' if self.mode == 'batch' else 'batch'}")
        out = self.output_tokens
        if isinstance(out, int) and not 1 <= out <= MAX_TOKENS:
            raise ValueError(f"output_tokens must be in [1, {MAX_TOKENS}] (got {out})")
        if isinstance(out, list) and (len(out) != self._slots() or not all(1 <= o <= MAX_TOKENS for o in out)):
            raise ValueError(f"a per-slot output_tokens list needs {self._slots()} values in [1, {MAX_TOKENS}]")
        if isinstance(self.start_delay_s, float) and self.start_delay_s < 0:
            raise ValueError("start_delay_s must be >= 0")
        if isinstance(self.think_s, float) and not 0 <= self.think_s <= 86400:
            raise ValueError("think_s must be in [0, 86400] s")
        return self

    def _slots(self) -> int:
        """Prompt slots a per-slot list cycles over: the named set's, else the list's own."""
        if isinstance(self.prompts, str):
            return PROMPT_SETS[self.prompts].n_slots
        return len(self.output_tokens) if isinstance(self.output_tokens, list) else 1


def _no_arrivals(p: ClosedLoopParams, ctx: Context) -> list[Arrivals]:
    empty = np.empty(0)
    return [Arrivals(empty, empty.astype(np.int64), empty.astype(np.int64)) for _ in range(ctx.n_sidecars)]


def _closed_lengths(p: ClosedLoopParams, seed: int, sidecar: int) -> clients.Lengths:
    """Prompt and output tokens of `size` requests from global index `index` on; distributions draw
    from the sidecar's ("tokens", i) stream in creation order."""
    rng = stream(seed, "tokens", sidecar)
    pset = PROMPT_SETS[p.prompts] if isinstance(p.prompts, str) else None
    out = p.output_tokens

    def lengths(index: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        prompt = pset.batch(index, size) if pset is not None else p.prompts.sample(rng, size)
        output = out.sample(rng, size) if isinstance(out, OutputLengths) else output_batch(out, index, size)
        return prompt, output

    return lengths


def closed_start_delay(p: ClosedLoopParams, profile_delay: float | None) -> float:
    """The serving start: given, or the profile's fitted delay (`profile`, or null under a profile), else 0."""
    if isinstance(p.start_delay_s, float):
        return p.start_delay_s
    if profile_delay is None:
        if p.start_delay_s == "profile":
            raise ValueError("start_delay_s: profile needs engine.profile")
        return 0.0
    return profile_delay


def _closed_clients(p: ClosedLoopParams, ctx: ClientContext) -> list:
    start = closed_start_delay(p, ctx.profile_start_delay_s)
    out = []
    for i in range(ctx.n_sidecars):
        lengths = _closed_lengths(p, ctx.seed, i)
        if p.mode == "batch":
            cc = p.concurrency
            conc = (
                clients.Concurrency.steady(cc.c)
                if isinstance(cc, SteadyConcurrency)
                else clients.Concurrency(cc.quiet, cc.busy, cc.period_s, cc.window_s, cc.phase_s)
            )
            out.append(clients.BatchLoop(conc, lengths, start, ctx.horizon_s, p.client_gap_s))
        else:
            th = p.think_s
            if isinstance(th, ExponentialThink):
                kind, value = "exponential", th.mean_s
            else:
                kind, value = "constant", th.s if isinstance(th, ConstantThink) else float(th)
            think = clients.ThinkTimes(kind, value, lambda u, i=i: stream(ctx.seed, "arrivals", i, "user", u), p.users)
            out.append(clients.UsersLoop(p.users, think, lengths, start, ctx.horizon_s))
    return out


_register(
    WorkloadKind(
        "closed_loop",
        ClosedLoopParams,
        _no_arrivals,
        "Closed-loop clients: requests are created as earlier ones finish, not drawn in advance. "
        "mode batch is the paper testbed's loop (a batch of c(t) requests at once, the next when the whole "
        "batch is done plus client_gap_s; every request records the batch's latency; c(t) steady or bursty, "
        "decided at batch start); mode users is N users who send, wait for the answer, think, and send again. "
        "Batches and requests start while t < horizon_s, serving from start_delay_s on.",
        _closed_clients,
    )
)


def make_clients(
    spec: BaseModel, *, n_sidecars: int, horizon_s: float, seed: int, profile_start_delay_s: float | None
) -> list | None:
    """Each sidecar's closed-loop client (models.workload.clients), or None for an open-loop kind."""
    entry = WORKLOADS[spec.kind]
    if entry.clients is None:
        return None
    return entry.clients(spec, ClientContext(int(n_sidecars), float(horizon_s), int(seed), profile_start_delay_s))


# ---------------------------------------------------------------------------------------------
# public API


def parse_workload(spec: dict, file: object = "<scenario>", base_dir: str | Path = ".") -> BaseModel:
    """Validate a `workload:` mapping with its kind's params model; errors name `workload.<field>`.

    A `trace` is loaded here, so a missing or malformed trace is reported when the scenario loads,
    not minutes into a sweep.
    """
    if not isinstance(spec, dict):
        raise InputError(file, "workload", f"expected a mapping with a `kind` (got {type(spec).__name__})")
    known = ", ".join(sorted(WORKLOADS))
    if "kind" not in spec:
        raise InputError(file, "workload.kind", f"missing; known kinds: {known}")
    kind = spec["kind"]
    if not isinstance(kind, str) or kind not in WORKLOADS:
        raise InputError(file, "workload.kind", f"unknown workload kind {kind!r}; known kinds: {known}")
    params = validate(WORKLOADS[kind].params, spec, file, prefix="workload")
    if isinstance(params, TraceParams):
        _load_trace_params(params, file, base_dir)
    if isinstance(params, DiurnalParams) and params.trace is not None:
        _trace_curve(params, file, base_dir)
    return params


def _load_trace_params(p: TraceParams, file: object, base_dir: str | Path) -> None:
    path = Path(p.path).expanduser()
    if not path.is_absolute():
        path = Path(base_dir) / path
    check_input(path, file, "workload.path", "trace file")  # a regular file within the size limit
    p._trace = load_trace_cached(path, p.format)
    end = float(p._trace.t[-1])
    if p.time_offset_s > end:
        raise InputError(
            file,
            "workload.time_offset_s",
            f"{p.time_offset_s:g} s is past the end of the trace ({end:g} s after its first request)",
        )
    if (p.loop or p.load is not None) and p.cycle_s() <= 0:
        field = "workload.loop" if p.loop else "workload.load"
        raise InputError(
            file,
            field,
            "the trace (after time_offset_s) has no duration, so it cannot be "
            "looped or rescaled to a load; it needs at least two distinct timestamps",
        )


def generate_arrivals(
    spec: dict | BaseModel,
    *,
    n_sidecars: int,
    horizon_s: float,
    capacity_rps: Callable[[float, float], float],
    seed: int,
    base_dir: str | Path = ".",
    file: object = "<scenario>",
) -> list[Arrivals]:
    """Every sidecar's arrivals in [0, horizon_s), deterministic in (spec, fleet, capacity, seed).

    `spec` is the `workload:` mapping (or what `parse_workload` returned, to skip re-validation);
    `capacity_rps(mean_prompt, mean_output)` is one sidecar's capacity in requests/s.
    """
    if not isinstance(spec, BaseModel):
        spec = parse_workload(spec, file, base_dir)
    if n_sidecars < 0:
        raise ValueError(f"n_sidecars must be >= 0 (got {n_sidecars})")
    if not (math.isfinite(horizon_s) and horizon_s > 0):
        raise ValueError(f"horizon_s must be a positive number (got {horizon_s})")
    if n_sidecars == 0:
        return []
    ctx = Context(int(n_sidecars), float(horizon_s), capacity_rps, int(seed), str(file))
    return WORKLOADS[spec.kind].build(spec, ctx)


_HASHED: dict[tuple[int, ...], tuple[str, list[Arrivals]]] = {}  # the last few, by the arrivals' identity


def arrivals_hash(arrs: list[Arrivals]) -> str:
    """sha256 of every sidecar's arrays, to check two runs saw the same load. Arrivals are read-only,
    so the hash of the same objects (one draw shared by a seed's runs: sim.build.make_arrivals) is
    computed once; the entry holds them, so their ids stay theirs."""
    key = tuple(map(id, arrs))
    hit = _HASHED.get(key)
    if hit is not None:
        return hit[0]
    h = hashlib.sha256()
    for a in arrs:
        h.update(np.int64(len(a.t)).tobytes())
        for arr, dt in ((a.t, "<f8"), (a.prompt, "<i8"), (a.output, "<i8")):
            h.update(np.ascontiguousarray(arr, dtype=dt).tobytes())
    if len(_HASHED) >= 4:
        del _HASHED[next(iter(_HASHED))]
    _HASHED[key] = (h.hexdigest(), list(arrs))
    return h.hexdigest()


def describe_workloads() -> list[dict]:
    """The kinds, their purpose and their params with defaults (for the CLI and the docs)."""
    out = []
    for name in sorted(WORKLOADS):
        entry = WORKLOADS[name]
        params = []
        for field, info in entry.params.model_fields.items():
            if field == "kind":
                continue
            default = None if info.is_required() else info.get_default(call_default_factory=True)
            if isinstance(default, BaseModel):
                default = default.model_dump()
            params.append(
                {
                    "name": field,
                    "default": default,
                    "required": info.is_required(),
                    "type": _type_name(info.annotation),
                    "description": info.description or "",
                }
            )
        summary = re.split(r"(?<=\.)\s", entry.doc, maxsplit=1)[0]
        out.append({"kind": name, "summary": summary, "doc": entry.doc, "params": params})
    return out


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")
