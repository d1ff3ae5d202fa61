"""A ring all-reduce over TCP sockets (NCCL's socket transport) as a property of the links and of the
collective, and the fits that turn a cluster's own measurements into its parameters. Plain Python:
the fleet (sim.topology, sim.merge) and `wadiloco validate diloco-measured` call it.

One all-reduce of M bytes over a ring of n ranks, each rank's egress at nominal rate R:

    t(M) = 2(n-1)/n * 8M / r(R)  +  calls * 2(n-1) * alpha  (+ a one-off set-up on the first call)
    r(R) = g * eta(R) * R            eta(R) = eta_max - eta_slope * log10(max(1, knee / R))

- 2(n-1)/n * M: the bytes each rank sends over its own egress (the textbook ring).
- 2(n-1) ring steps per call, each a message hop of latency alpha; a sync made of several
  collectives (DDP buckets, per-tensor all-reduces) pays it per call.
- g: TCP goodput per bit the link carries (iperf3 on a shaped link over the shaped rate).
- eta(R): the share of that goodput a multi-socket ring sustains: flat above the knee, falling per
  decade below it (a fitted shape; the mechanism at low rates is not measured).
- unshaped, NCCL spreads a ring over several sockets and beats one TCP flow (iperf3): its per-link
  rate is the NCCL curve's bus bandwidth on the plateau.

Defaults: fitted on the diloco-measured cluster (4 x one L40S, NCCL 2.29 over sockets, egress
shaped with tc to 50 Mb/s .. 5 Gb/s); docs/network.md gives the runs, the fit and its limits.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from wadiloco.models.errors import InputError
from wadiloco.models.spec.files import describe, json_text, strict_number

MIB = 2**20
DDP_BUCKET_BYTES = 25 * MIB  # torch DDP's bucket_cap_mb default
DDP_FIRST_BUCKET_BYTES = 1 * MIB  # and its small first bucket


@dataclass(frozen=True)
class CollectiveParams:
    """How much of a link a socket ring all-reduce gets, and what each of its calls costs."""

    goodput_factor: float = 0.9925  # g: iperf3 goodput / shaped rate (9001-byte MTU)
    eta_max: float = 0.758  # the ring's share of the goodput above the knee
    eta_slope: float = 0.165  # share lost per decade of rate below the knee
    eta_knee_bps: float = 8.06e8  # below this rate the share falls
    eta_floor: float = 0.05  # never below it (a guard for extrapolation)
    flow_cap_bps: float = 9.53e9  # one TCP flow unshaped (iperf3 point to point)
    unshaped_ring_bps: float = 14.97e9  # NCCL's per-link ring rate unshaped (busbw, large messages)
    alpha_s: float = 1.06e-4  # latency per ring step (socket hop and NCCL proxy)

    def efficiency(self, nominal_bps: float) -> float:
        """eta(R): the ring's share of the link's TCP goodput at nominal rate R."""
        if not nominal_bps > 0:
            raise ValueError("a link's rate must be > 0")
        drop = self.eta_slope * math.log10(max(1.0, self.eta_knee_bps / nominal_bps))
        return max(self.eta_floor, self.eta_max - drop)

    def rate_factor(self, nominal_bps: float) -> float:
        """g * eta(R): the ring's rate over the link's nominal rate (what `wan_efficiency: auto` is)."""
        return self.goodput_factor * self.efficiency(nominal_bps)

    def ring_rate_bps(self, nominal_bps: float | None, goodput_bps: float | None = None) -> float:
        """r(R) per link: eta(R) times the goodput (measured, or g * R); None: the unshaped ring."""
        if nominal_bps is None:
            return self.unshaped_ring_bps
        goodput = self.goodput_factor * nominal_bps if goodput_bps is None else goodput_bps
        return self.efficiency(nominal_bps) * goodput

    def parallel_gain(self) -> float:
        """How far the unshaped multi-socket ring beats one TCP flow."""
        return self.unshaped_ring_bps / self.flow_cap_bps


DEFAULT = CollectiveParams()


def link_efficiency(setting: float | str, nominal_gbps: float, params: CollectiveParams = DEFAULT) -> float:
    """A link's efficiency for its traffic: a number as given, or `auto`: g * eta(R) of the law."""
    if setting == "auto":
        return params.rate_factor(nominal_gbps * 1e9)
    return float(setting)


def ring_steps(n_ranks: int) -> int:
    return 2 * (n_ranks - 1)


def ring_bytes_per_rank(msg_bytes: float, n_ranks: int) -> float:
    """Bytes each rank sends (and receives) in a ring all-reduce of msg_bytes."""
    return 2 * (n_ranks - 1) / n_ranks * msg_bytes


def ring_latency_s(n_ranks: int, calls: int, alpha_s: float) -> float:
    """The fixed time of `calls` ring all-reduces over n ranks: their ring steps' hop latency."""
    return calls * ring_steps(n_ranks) * alpha_s if n_ranks > 1 else 0.0


def allreduce_time(
    msg_bytes: float,
    n_ranks: int,
    link_bps: float | None,
    params: CollectiveParams = DEFAULT,
    calls: int = 1,
    goodput_bps: float | None = None,
) -> float:
    """Seconds for a ring all-reduce of msg_bytes split into `calls` collectives, every rank's egress
    at nominal rate link_bps (None: unshaped), nothing else on the links."""
    if n_ranks < 2 or msg_bytes <= 0:
        return 0.0
    bits = 8.0 * ring_bytes_per_rank(msg_bytes, n_ranks)
    return bits / params.ring_rate_bps(link_bps, goodput_bps) + ring_latency_s(n_ranks, calls, params.alpha_s)


def analytic_time(msg_bytes: float, n_ranks: int, link_bps: float) -> float:
    """Ring bytes over the nominal link rate: the bytes-over-rate estimate the model replaces."""
    return 8.0 * ring_bytes_per_rank(msg_bytes, n_ranks) / link_bps


# ---- a user's measurement files --------------------------------------------------------------------


def parse_iperf3(text: str, file: object) -> float:
    """bps of one `iperf3 -J` result: the receiver's average (end.sum_received, else end.sum)."""
    doc = json_text(text, file)  # strict: no NaN, no integer of hundreds of digits
    end = doc.get("end") if isinstance(doc, dict) else None
    if not isinstance(end, dict):
        raise InputError(file, "end", "missing: give the output of `iperf3 -J`")
    key = "sum_received" if "sum_received" in end else "sum"
    bps = end.get(key, {}).get("bits_per_second") if isinstance(end.get(key), dict) else None
    if not _positive(bps):
        raise InputError(file, f"end.{key}.bits_per_second", f"must be a number > 0 (got {describe(bps)})")
    return float(bps)


def parse_nccl(text: str, file: object, column: str = "busbw") -> list[tuple[float, float]]:
    """(message bytes, bps) of an all-reduce curve: nccl-tests' `all_reduce_perf` output (its
    out-of-place `column`, GB/s), or JSON `[{"msg_bytes": B, "bps": X}, ...]`."""
    if text.lstrip().startswith(("[", "{")):
        return _nccl_json(text, file)
    idx = {"algbw": 6, "busbw": 7}[column]
    pts = []
    for line in text.splitlines():
        f = line.split()
        if len(f) < 8 or line.lstrip().startswith("#"):
            continue
        try:
            size, bw = float(f[0]), float(f[idx])
        except ValueError:
            continue
        if size > 0 and bw > 0 and math.isfinite(size * bw):
            pts.append((size, bw * 8e9))
    if not pts:
        raise InputError(file, "", "no all_reduce_perf rows (size count type redop root time algbw busbw ...)")
    return pts


def _nccl_json(text: str, file: object) -> list[tuple[float, float]]:
    doc = json_text(text, file)
    rows = doc.get("nccl_curve") if isinstance(doc, dict) else doc
    if not isinstance(rows, list) or not rows:
        raise InputError(file, "nccl_curve", "must be a non-empty list of {msg_bytes, bps}")
    out = []
    for i, r in enumerate(rows):
        r = r if isinstance(r, dict) else {}
        bps = r.get("bps", r.get("achieved_bps"))
        for key, v in (("msg_bytes", r.get("msg_bytes")), ("bps", bps)):
            if not _positive(v):
                raise InputError(file, f"[{i}].{key}", f"must be a number > 0 (got {describe(v)})")
        out.append((float(r["msg_bytes"]), float(bps)))
    return out


def _positive(v) -> bool:
    x, why = strict_number(v)  # finite, not a boolean, not an integer too large for a float
    return not why and x > 0


# ---- fits ------------------------------------------------------------------------------------------


def fit_flow_cap(bps: list[float]) -> float:
    """One TCP flow's rate from unshaped iperf3 results (one per node pair): their median."""
    xs = sorted(bps)
    if not xs:
        raise ValueError("no iperf3 result")
    k = len(xs)
    return xs[k // 2] if k % 2 else 0.5 * (xs[k // 2 - 1] + xs[k // 2])


def fit_goodput_factor(shaped: list[tuple[float, float]]) -> float:
    """g from (shaped rate, iperf3 rate) pairs: the mean ratio."""
    return sum(m / r for r, m in shaped) / len(shaped) if shaped else DEFAULT.goodput_factor


def nccl_times(curve: list[tuple[float, float]], n_ranks: int, convention: str) -> list[tuple[float, float]]:
    """(bytes, seconds) of a curve of (bytes, bandwidth): algbw = M / t, busbw = 2(n-1)/n * M / t."""
    f = {"algbw": 1.0, "busbw": 2 * (n_ranks - 1) / n_ranks}[convention]
    return [(m, f * 8.0 * m / bw) for m, bw in curve]


def fit_nccl_curve(
    curve: list[tuple[float, float]], n_ranks: int, convention: str = "busbw", plateau_bytes: float = 16 * MIB
) -> tuple[float, float]:
    """(unshaped ring rate, alpha) from an unshaped all-reduce curve, t(M) = ring bytes / rate +
    2(n-1) alpha: the rate from the messages on the plateau (>= plateau_bytes) less their latency,
    alpha from the smallest message's excess over its bytes (0 without one below the plateau),
    solved together. Sizes in between are not used (a protocol switch, not the ring)."""
    pts = nccl_times(curve, n_ranks, convention)
    big = [(m, t) for m, t in pts if m >= plateau_bytes]
    if not big:
        raise ValueError(f"no message of {plateau_bytes / MIB:.0f} MiB or more (the bandwidth plateau)")
    small = [(m, t) for m, t in pts if m < plateau_bytes]
    lat, rate = 0.0, 0.0
    for _ in range(50):
        rate = sum(8.0 * ring_bytes_per_rank(m, n_ranks) / max(t - lat, 1e-12) for m, t in big) / len(big)
        if not small:
            break
        m0, t0 = min(small)
        lat = min(max(0.0, t0 - 8.0 * ring_bytes_per_rank(m0, n_ranks) / rate), 0.5 * min(t for _, t in big))
    return rate, lat / ring_steps(n_ranks)


@dataclass(frozen=True)
class DDPRun:
    """One DDP run's per-step figures: a bucketed gradient all-reduce every step, partly hidden
    behind backward (`overlap` of forward + backward)."""

    nominal_bps: float | None  # the shaped egress rate; None: unshaped
    sync_blocked_s: float  # exposed all-reduce per step: step time less compute and optimizer
    compute_s: float  # forward + backward per step
    grad_bytes: float  # parameters x bytes per gradient element
    overlap: float = 0.22  # share of compute the all-reduce hides (fit_ddp_overlap)

    def calls(self) -> int:
        """DDP's buckets: a small first one, then bucket_cap_mb each."""
        return 1 + math.ceil(max(0.0, self.grad_bytes - DDP_FIRST_BUCKET_BYTES) / DDP_BUCKET_BYTES)

    def blocked(self, allreduce_s: float) -> float:
        """The exposed part of an all-reduce of allreduce_s seconds."""
        return max(0.0, allreduce_s - self.overlap * self.compute_s)


def eta_from_ddp(run: DDPRun, n_ranks: int, params: CollectiveParams) -> float:
    """The efficiency a shaped DDP run implies: ring bits over goodput x bandwidth time."""
    lat = ring_latency_s(n_ranks, run.calls(), params.alpha_s)
    bw_time = run.sync_blocked_s + run.overlap * run.compute_s - lat
    bits = 8.0 * ring_bytes_per_rank(run.grad_bytes, n_ranks)
    return bits / (params.goodput_factor * run.nominal_bps * bw_time)


def fit_ddp_overlap(run: DDPRun, n_ranks: int, params: CollectiveParams, hi: float = 2 / 3) -> float:
    """The share of compute an unshaped DDP run's all-reduce hides behind backward: the all-reduce
    the NCCL curve predicts less the exposed time, over compute, within [0, hi] (backward is about
    2/3 of forward + backward)."""
    t = allreduce_time(run.grad_bytes, n_ranks, None, params, run.calls())
    return min(hi, max(0.0, (t - run.sync_blocked_s) / run.compute_s))


def fit_eta_curve(points: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(eta_max, eta_slope, knee) of least squares over (rate, eta) points: the knee on a log grid
    from the lowest rate to a decade above the highest (no plateau), linear in the other two."""
    if not points:
        return DEFAULT.eta_max, DEFAULT.eta_slope, DEFAULT.eta_knee_bps
    if len(points) == 1:
        return points[0][1], 0.0, points[0][0]
    lo, hi = math.log10(min(r for r, _ in points)), math.log10(max(r for r, _ in points)) + 1.0
    best = None
    for i in range(2001):
        knee = 10 ** (lo + (hi - lo) * i / 2000)
        fit = _line([(-math.log10(max(1.0, knee / r)), e) for r, e in points])
        if best is None or fit[0] < best[0] - 1e-15:
            best = (*fit, knee)
    _, emax, slope, knee = best
    return emax, slope, (knee if slope > 0 else min(r for r, _ in points))


def _line(xy: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(squared error, intercept, slope >= 0) of least squares y = a + b x."""
    n = len(xy)
    mx, my = sum(x for x, _ in xy) / n, sum(y for _, y in xy) / n
    sxx = sum((x - mx) ** 2 for x, _ in xy)
    b = sum((x - mx) * (y - my) for x, y in xy) / sxx if sxx else 0.0
    if b < 0:  # the share may not rise as the rate falls
        b = 0.0
    a = my - b * mx
    return sum((a + b * x - y) ** 2 for x, y in xy), a, b


def fit(
    n_ranks: int,
    iperf_bps: list[float] | None = None,
    nccl_curve: list[tuple[float, float]] | None = None,
    convention: str = "busbw",
    shaped_iperf: list[tuple[float, float]] | None = None,
    ddp_runs: list[DDPRun] | None = None,
    base: CollectiveParams = DEFAULT,
) -> tuple[CollectiveParams, dict]:
    """The parameters a cluster's measurements give; what is not measured keeps `base`'s value.
    iperf_bps (unshaped, per node pair) -> flow_cap_bps; shaped_iperf (rate, iperf3) -> g; the NCCL
    curve -> unshaped_ring_bps, alpha_s; with it, an unshaped DDP run -> the overlap with backward;
    shaped DDP runs -> eta points -> (eta_max, eta_slope, knee). Returns (params, report)."""
    p, rep = base, {}
    if iperf_bps:
        p = replace(p, flow_cap_bps=fit_flow_cap(iperf_bps))
    if shaped_iperf:
        p = replace(p, goodput_factor=fit_goodput_factor(shaped_iperf))
    if nccl_curve:
        rate, alpha = fit_nccl_curve(nccl_curve, n_ranks, convention)
        p = replace(p, unshaped_ring_bps=rate, alpha_s=alpha)
    shaped = [r for r in ddp_runs or () if r.nominal_bps is not None]
    unshaped = [r for r in ddp_runs or () if r.nominal_bps is None]
    if unshaped and nccl_curve:
        f = sum(fit_ddp_overlap(r, n_ranks, p) for r in unshaped) / len(unshaped)
        shaped = [replace(r, overlap=f) for r in shaped]
        rep["ddp_overlap"] = f
    if shaped:
        pts = [(r.nominal_bps, eta_from_ddp(r, n_ranks, p)) for r in shaped]
        emax, slope, knee = fit_eta_curve(pts)
        p = replace(p, eta_max=emax, eta_slope=slope, eta_knee_bps=knee)
        rep["eta_points"] = pts
    rep["params"] = asdict(p)
    return p, rep


def fit_sync_calls(sync_s: float, msg_bytes: float, n_ranks: int, params: CollectiveParams) -> int:
    """How many ring calls an unshaped synchronisation of sync_s seconds makes: one, plus its time
    beyond one all-reduce of msg_bytes over the ring steps' latency (rounded, at least 1)."""
    extra = sync_s - allreduce_time(msg_bytes, n_ranks, None, params)
    return max(1, 1 + round(extra / (ring_steps(n_ranks) * params.alpha_s)))
