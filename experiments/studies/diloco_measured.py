"""A measured DiLoCo cluster simulated as a fleet: `wadiloco validate diloco-measured`.

The data (default: models/data/diloco_measured.json, a copy of the diloco-measured runs, Apache-2.0):
4 nodes of one L40S each, NCCL over TCP sockets, each node's egress shaped with tc. The fit set
(network profile, DDP runs, unshaped DiLoCo runs) fixes the collective's parameters
(models.network.collective) and the runs' own figures (compute per step, the outer step's GPU work,
the synchronisation's calls and first-call set-up). Each cell is then run by sim.fleet: one host per
island, so each island's uplink is that host's shaped egress at the ring's rate; an outer merge
every H steps by the `fixed` policy; training blocked for it. Its timed window (the steps after the
warmup) is read off the run's step ends and merges. docs/network.md gives the model and its limits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from wadiloco.models.errors import InputError
from wadiloco.models.network import collective as co
from wadiloco.models.spec.files import describe, json_text, read_text, strict_number

DATA = Path(__file__).resolve().parents[2] / "models" / "data" / "diloco_measured.json"
UNSHAPED_NIC_BPS = 20e9  # g6e.2xlarge: "up to 20 Gb/s", the nominal rate of an unshaped NIC
GRAD_BYTES = 4.0  # fp32 on the wire: the runs synchronise in the parameters' dtype (docs/network.md)
# LocalSGD's outer step on the GPU divides the averaged parameters (2 passes over them); DiLoCo's
# builds the pseudo-gradient, runs Nesterov and copies (~13 passes): its GPU work scaled by passes.
LOCALSGD_PASSES = 2 / 13
ALGORITHMS = ("ddp", "diloco", "localsgd")


@dataclass(frozen=True)
class Cell:
    """One measured configuration, its repeats pooled: what the runs were asked to do."""

    name: str
    algorithm: str  # ddp | diloco | localsgd
    H: int
    budget: int  # steps run
    warmup: int  # untimed steps first
    rate_bps: float | None  # shaped egress rate; None: unshaped
    goodputs: tuple[float, ...] = ()  # iperf3 on the shaped link, one per repeat that measured it
    measured: dict | None = None  # fit set only (the first repeat's)

    @property
    def goodput_bps(self) -> float | None:
        return sum(self.goodputs) / len(self.goodputs) if self.goodputs else None

    @property
    def timed(self) -> int:
        return self.budget - self.warmup

    @property
    def n_outer(self) -> int:
        """Outer steps after 1-based steps s, s % H == 0, in the timed window (s > warmup)."""
        return self.budget // self.H - self.warmup // self.H

    @property
    def first_in_window(self) -> bool:
        return self.warmup < self.H <= self.budget


@dataclass(frozen=True)
class ClusterFit:
    """What the fit set gives: the collective, and the runs' own per-step figures."""

    params: co.CollectiveParams
    ddp_overlap: float  # share of a DDP step's compute its all-reduce hides behind backward
    compute_s: float  # an inner step's GPU work (forward, backward, inner AdamW)
    spill_s: dict  # algorithm -> the outer step's GPU work, billed to the next step's compute
    other_step_s: float  # per step, neither compute nor sync (loader, bookkeeping)
    other_outer_s: float  # per outer step, the same
    sync_s: float  # one unshaped synchronisation, measured
    setup_s: float  # the first synchronisation's one-off extra
    calls: int  # ring calls per synchronisation (from sync_s)


# ---- reading the data ------------------------------------------------------------------------------


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _num(obj, key: str, file, where: str, *, none_ok: bool = False, zero_ok: bool = False) -> float | None:
    v = obj.get(key) if isinstance(obj, dict) else None
    if v is None and none_ok:
        return None
    x, why = strict_number(v)  # finite, not a boolean, not an integer too large for a float
    if why or not (x > 0 or (zero_ok and x == 0)):
        raise InputError(file, _at(where, key), f"must be a number {'>= 0' if zero_ok else '> 0'} (got {describe(v)})")
    return x


def _int(obj, key: str, file, where: str, lo: int) -> int:
    v = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        raise InputError(file, _at(where, key), f"must be an integer >= {lo} (got {describe(v)})")
    return v


def _list(obj, key: str, file, where: str = "") -> list:
    v = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(v, list) or not v:
        raise InputError(file, _at(where, key), "must be a non-empty list")
    return v


def _spec(run, file, where: str) -> tuple:
    """(algorithm, H, budget, warmup, rate, goodput, ranks) of one run's spec."""
    s = run.get("spec") if isinstance(run, dict) else None
    if not isinstance(s, dict):
        raise InputError(file, f"{where}.spec", "missing")
    where = f"{where}.spec"
    alg = s.get("algorithm")
    if alg not in ALGORITHMS:
        raise InputError(file, f"{where}.algorithm", f"must be one of {', '.join(ALGORITHMS)} (got {describe(alg)})")
    h, b, w = (
        _int(s, "H", file, where, 1),
        _int(s, "budget_value", file, where, 1),
        _int(s, "warmup_steps", file, where, 0),
    )
    if w >= b:
        raise InputError(file, f"{where}.warmup_steps", f"must be below budget_value ({b}) (got {w})")
    rate = _num(s, "bandwidth_requested_bps", file, where, none_ok=True)
    good = _num(s, "shaping_measured_bps", file, where, none_ok=True)
    return alg, h, b, w, rate, good, _int(s, "world_size", file, where, 2)


def _measured(run, file, where: str) -> dict:
    m, where = run.get("measured"), f"{where}.measured"
    out = {k: _num(m, k, file, where) for k in ("compute_s", "total_s")}
    out.update({k: _num(m, k, file, where, zero_ok=True) for k in ("sync_blocked_s", "cu_measured")})
    if out["compute_s"] + out["sync_blocked_s"] > out["total_s"] * (1 + 1e-9):
        raise InputError(file, f"{where}.total_s", "must be at least compute_s + sync_blocked_s")
    return out


def _cells(runs: list, file, part: str, measured: bool) -> tuple[list[Cell], int]:
    """The runs of one part pooled by cell name (repeats must agree on everything but goodput)."""
    groups: dict[str, list] = {}
    ranks = set()
    for i, run in enumerate(runs):
        where = f"{part}[{i}]"
        name = run.get("cell") if isinstance(run, dict) else None
        if not isinstance(name, str) or not name:
            raise InputError(file, f"{where}.cell", f"must be a cell name (got {describe(name)})")
        *spec, n = _spec(run, file, where)
        ranks.add(n)
        groups.setdefault(name, []).append((where, spec, _measured(run, file, where) if measured else None))
    cells = []
    for name, reps in groups.items():
        where, spec, got = reps[0]
        for w2, s2, _ in reps[1:]:
            if s2[:5] != spec[:5]:
                raise InputError(file, f"{w2}.spec", f"a repeat of {name} with other settings than {where}")
        goods = tuple(s[5] for _, s, _ in reps if s[5] is not None)
        cells.append(Cell(name, *spec[:5], goods, got))
    if len(ranks) > 1:
        raise InputError(file, f"{part}[*].spec.world_size", f"must be the same in every run (got {sorted(ranks)})")
    return cells, ranks.pop()


def load(path: Path | str | None = None) -> dict:
    """The data file read and checked: parameter count, ranks, network profile, fit and predict cells."""
    p = DATA if path is None else Path(path)
    doc = json_text(read_text(p, "diloco-measured runs file"), p)  # strict: no NaN, no 400-digit integer
    if not isinstance(doc, dict):
        raise InputError(p, "", "expected an object with n_params, network_profile, fit and predict")
    prof, at = doc.get("network_profile"), "network_profile"
    pairs = _list(prof, "iperf_pairs", p, at)
    iperf = [_num(x, "gbit_s", p, f"{at}.iperf_pairs[{i}]") * 1e9 for i, x in enumerate(pairs)]
    rows = _list(prof, "nccl_curve", p, at)
    curve = [
        tuple(_num(x, k, p, f"{at}.nccl_curve[{i}]") for k in ("msg_bytes", "achieved_bps")) for i, x in enumerate(rows)
    ]
    fit, n = _cells(_list(doc, "fit", p), p, "fit", True)
    predict, n2 = _cells(_list(doc, "predict", p), p, "predict", False)
    if n2 != n:
        raise InputError(p, "predict[*].spec.world_size", f"must equal the fit set's ({n}; got {n2})")
    shaped = [(c.rate_bps, g) for c in fit + predict if c.rate_bps is not None for g in c.goodputs]
    return dict(
        file=p,
        n_params=_int(doc, "n_params", p, "", 1),
        n_ranks=n,
        iperf_bps=iperf,
        nccl_curve=curve,
        shaped_iperf=shaped,
        fit=fit,
        predict=predict,
    )


# ---- the fit set -----------------------------------------------------------------------------------


def _ddp_run(c: Cell, n_params: int) -> co.DDPRun:
    m = c.measured
    return co.DDPRun(c.rate_bps, m["sync_blocked_s"] / c.timed, m["compute_s"] / c.timed, GRAD_BYTES * n_params)


def _lstsq(rows: list, ys: list, file, what: str, weights: list | None = None) -> list[float]:
    """Least squares of ys on rows; the data must determine every coefficient."""
    a, y = np.array(rows, dtype=float), np.array(ys, dtype=float)
    w = np.ones_like(y) if weights is None else np.array(weights, dtype=float)
    coef, _, rank, _ = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)
    if rank < a.shape[1]:
        raise InputError(file, "fit", f"the unshaped DiLoCo runs do not determine {what}")
    return [float(v) for v in coef]


def fit_cluster(data: dict) -> ClusterFit:
    """The collective from the network profile and the DDP runs (models.network.collective.fit); the
    runs' own figures from the unshaped DiLoCo runs: compute per step = c0 + spill / H, other time =
    steps x a + outer steps x b, sync = outer steps x s + [first sync timed] x setup."""
    file, P, n = data["file"], data["n_params"], data["n_ranks"]
    ddp = [_ddp_run(c, P) for c in data["fit"] if c.algorithm == "ddp"]
    params, rep = co.fit(n, data["iperf_bps"], data["nccl_curve"], "busbw", data["shaped_iperf"], ddp)
    dil = [c for c in data["fit"] if c.algorithm == "diloco" and c.rate_bps is None]
    if len(dil) < 2:
        raise InputError(file, "fit", "needs unshaped DiLoCo runs at two or more H")
    ms = [c.measured for c in dil]
    c0, spill = _lstsq(
        [[1.0, 1.0 / c.H] for c in dil], [m["compute_s"] / c.timed for c, m in zip(dil, ms)], file, "the spill"
    )
    other = [m["total_s"] - m["compute_s"] - m["sync_blocked_s"] for m in ms]
    o_step, o_outer = _lstsq([[c.timed, c.n_outer] for c in dil], other, file, "the other time")
    syncs = [m["sync_blocked_s"] for m in ms]
    rows = [[c.n_outer, 1.0 if c.first_in_window else 0.0] for c in dil]
    sync, setup = _lstsq(
        rows, syncs, file, "the first sync's set-up (time one in and one out of the window)", [1 / y for y in syncs]
    )
    if not (c0 > 0 and spill + o_outer > 0 and sync > 0 and setup >= 0):
        raise InputError(file, "fit", "the unshaped DiLoCo runs give a negative step, outer step, sync or set-up time")
    return ClusterFit(
        params=params,
        ddp_overlap=rep.get("ddp_overlap", co.DDPRun.overlap),
        compute_s=c0,
        spill_s={"diloco": spill, "localsgd": spill * LOCALSGD_PASSES, "ddp": 0.0},
        other_step_s=o_step,
        other_outer_s=o_outer,
        sync_s=sync,
        setup_s=setup,
        calls=co.fit_sync_calls(sync, GRAD_BYTES * P, n, params),
    )


# ---- a cell as a fleet -----------------------------------------------------------------------------


def _step_s(cell: Cell, fit: ClusterFit) -> float:
    """An inner step as the fleet runs it: compute plus the time that is neither compute nor sync
    (a DDP run's own measured figures: its optimizer step is in there)."""
    if cell.algorithm == "ddp":
        m = cell.measured
        return (m["total_s"] - m["sync_blocked_s"]) / cell.timed
    return fit.compute_s + fit.other_step_s


def scenario(cell: Cell, fit: ClusterFit, data: dict, horizon_s: float) -> dict:
    """The cell as a scenario: one host per island, its NIC and its island's uplink both the host's
    egress (the iperf3 rate where measured, else the shaped or the nominal unshaped rate); the uplink
    carries the ring at r(R) (fleet.wan_efficiency = r(R) / that rate); an outer merge every H steps
    (`fixed`): the all-reduce, then the outer step's GPU work and bookkeeping (not DDP's)."""
    p, ddp = fit.params, cell.algorithm == "ddp"
    link = cell.goodput_bps or cell.rate_bps or UNSHAPED_NIC_BPS
    ring = p.ring_rate_bps(cell.rate_bps, cell.goodput_bps)
    P = data["n_params"]
    merge = {
        "h_min": cell.H,
        "h_max": cell.H,
        "phases": ["allreduce"] if ddp else ["allreduce", "outer"],
        "pseudo_grad_bytes_per_param": GRAD_BYTES,
        "ring_step_latency_s": p.alpha_s,
        "allreduce_calls": _ddp_run(cell, P).calls() if ddp else fit.calls,
        "allreduce_setup_s": 0.0 if ddp else fit.setup_s,  # DDP builds its communicator before step 1
        "outer_elements_per_s": P / (fit.spill_s[cell.algorithm] + fit.other_outer_s),
    }
    return {
        "name": cell.name,
        "description": "a diloco-measured cell as a fleet (wadiloco validate diloco-measured)",
        "horizon_s": horizon_s,
        "drain_s": 0.0,
        "fleet": {
            "islands": data["n_ranks"],
            "hosts_per_island": 1,
            "learner_gpus_per_host": 1,
            "sidecars_per_host": 0,
            "nic_gbps": link / 1e9,
            "interisland_gbps": link / 1e9,
            "wan_efficiency": ring / link,
        },
        "training": {"step_time_s": _step_s(cell, fit), "step_jitter": 0.0, "params": float(P)},
        "merge": merge,
        "policy": {"name": "fixed", "params": {"H": cell.H}},
        "monitor": {"sample_s": 60.0},
    }


def _horizon(cell: Cell, fit: ClusterFit, data: dict) -> float:
    """A first guess at the run's length, to the budget's last step and its merge (closed form, 10%
    over); a run that falls short is run again with twice the horizon."""
    sync = co.allreduce_time(
        GRAD_BYTES * data["n_params"], data["n_ranks"], cell.rate_bps, fit.params, fit.calls, cell.goodput_bps
    )
    return 1.1 * (cell.budget * _step_s(cell, fit) + cell.budget // cell.H * sync + fit.setup_s) + 1.0


def run_cell(cell: Cell, fit: ClusterFit, data: dict):
    """The fleet's run of a cell, long enough to cover its budget (sim.fleet RunResult)."""
    from wadiloco.models.spec.resolve import from_dict
    from wadiloco.sim.fleet import simulate

    horizon = _horizon(cell, fit, data)
    for _ in range(20):
        res = simulate(from_dict(scenario(cell, fit, data, horizon), f"<{cell.name}>"), 0)
        done = {m.step for m in res.completed_merges}
        if any(k == cell.budget for k, _, _ in res.decisions) and (cell.budget % cell.H or cell.budget in done):
            return res
        horizon *= 2
    raise RuntimeError(f"{cell.name}: the run never reached step {cell.budget}")


def window(res, cell: Cell, fit: ClusterFit) -> dict:
    """The timed window of a run: from the end of step `warmup` (its sync, if it had one) to the end
    of step `budget` (likewise), as the runs' step timers counted. Compute: its steps' GPU work and the
    outer steps run in it (the outer step after the window's first sync lands on its first step, the
    one after its last on the step after the window); sync: the timed syncs, barrier to all-reduce end."""
    ends = {0: 0.0, **{k: t for k, t, _ in res.decisions}}
    merges = {m.step: m for m in res.completed_merges}

    def edge(k: int) -> float:
        return merges[k].phases["allreduce"][1] if k in merges else ends[k]

    timed = [m for s, m in merges.items() if cell.warmup < s <= cell.budget]
    sync = sum(m.phases["allreduce"][1] - m.decided_at for m in timed)
    outer = sum(1 for s in merges if cell.warmup <= s < cell.budget)
    wall = edge(cell.budget) - edge(cell.warmup)
    compute = cell.timed * fit.compute_s + outer * fit.spill_s[cell.algorithm]
    per = sync / len(timed) if timed else 0.0
    return {
        "cu": compute / wall,
        "sync_s_per_outer_step": per,
        "wall_s": wall,
        "compute_s": compute,
        "n_outer": len(timed),
    }


def ddp_window(res, cell: Cell, fit: ClusterFit, n_params: int) -> dict:
    """A DDP run: the fleet's all-reduce of a step, less what backward hides (the fleet blocks a step
    for all of it; DDP starts it during backward: that overlap is taken off here, beside the run)."""
    ars = [m.phases["allreduce"] for m in res.completed_merges if cell.warmup < m.step <= cell.budget]
    ar = sum(b - a for a, b in ars) / len(ars)
    run = _ddp_run(cell, n_params)
    blocked = co.DDPRun(run.nominal_bps, 0.0, run.compute_s, run.grad_bytes, fit.ddp_overlap).blocked(ar)
    other = _step_s(cell, fit) - run.compute_s
    return {"cu": run.compute_s / (run.compute_s + blocked + other), "sync_s_per_step": blocked, "allreduce_s": ar}


def analytic_cu(cell: Cell, fit: ClusterFit, data: dict) -> float:
    """The authors' model: compute / (compute + ring bytes / nominal link rate), per outer step."""
    tc = fit.compute_s + fit.spill_s[cell.algorithm] / cell.H
    t_ar = co.analytic_time(GRAD_BYTES * data["n_params"], data["n_ranks"], cell.rate_bps or UNSHAPED_NIC_BPS)
    return cell.H * tc / (cell.H * tc + t_ar)


# ---- the command -----------------------------------------------------------------------------------


def _order(c: Cell) -> tuple:
    return ALGORITHMS.index(c.algorithm), c.H, math.inf if c.rate_bps is None else c.rate_bps


def in_sample(data: dict, fit: ClusterFit) -> list[tuple[str, str, float, float]]:
    """(run, quantity, measured, simulated) for every run of the fit set."""
    rows = []
    for c in sorted(data["fit"], key=_order):
        res, m = run_cell(c, fit, data), c.measured
        if c.algorithm == "ddp":
            w = ddp_window(res, c, fit, data["n_params"])
            rows.append((c.name, "sync s per step", m["sync_blocked_s"] / c.timed, w["sync_s_per_step"]))
        else:
            w = window(res, c, fit)
            rows.append((c.name, "sync s per outer step", m["sync_blocked_s"] / c.n_outer, w["sync_s_per_outer_step"]))
        rows.append((c.name, "cu", m["cu_measured"], w["cu"]))
    return rows


def predict(data: dict, fit: ClusterFit) -> dict[str, dict]:
    """Every predict cell through the fleet, with the authors' analytic cu beside it."""
    out = {}
    for c in sorted(data["predict"], key=_order):
        if c.algorithm == "ddp":
            raise InputError(
                data["file"], f"predict: {c.name}", "DDP cells are fitted, not predicted (put them in fit)"
            )
        w = window(run_cell(c, fit, data), c, fit)
        out[c.name] = {**w, "analytic_cu": analytic_cu(c, fit, data), "timed_steps": c.timed}
    return out


def validate(path: Path | str | None = None) -> dict:
    data = load(path)
    fit = fit_cluster(data)
    return {"data": data, "fit": fit, "in_sample": in_sample(data, fit), "cells": predict(data, fit)}


def cells_json(result: dict) -> dict:
    """The predictions as the issue asks: {"cells": {name: {"cu", "sync_s_per_outer_step"}}}."""
    return {
        "cells": {
            k: {"cu": v["cu"], "sync_s_per_outer_step": v["sync_s_per_outer_step"]} for k, v in result["cells"].items()
        }
    }


def _fit_lines(result: dict) -> list[str]:
    d, f = result["data"], result["fit"]
    p, n = f.params, d["n_ranks"]
    ar = co.allreduce_time(GRAD_BYTES * d["n_params"], n, None, p)
    call_ms, spill = co.ring_latency_s(n, 1, p.alpha_s) * 1e3, f.spill_s
    return [
        f"The diloco-measured cluster as a fleet ({d['file']}): {n} hosts of one GPU, one per island, "
        f"{d['n_params']:,} parameters synchronised in fp32.",
        "Fitted on the fit set (network profile, DDP runs, unshaped DiLoCo runs):",
        f"  link: r(R) = g eta(R) R, g {p.goodput_factor:.4f}, eta(R) = {p.eta_max:.3f} - {p.eta_slope:.3f} "
        f"log10(max(1, {p.eta_knee_bps / 1e9:.3f} Gb/s / R)); unshaped ring {p.unshaped_ring_bps / 1e9:.2f} Gb/s "
        f"({p.parallel_gain():.2f}x one TCP flow, {p.flow_cap_bps / 1e9:.2f} Gb/s)",
        f"  collective: {p.alpha_s * 1e6:.1f} us per ring step ({call_ms:.2f} ms a call); "
        f"DDP hides {f.ddp_overlap:.3f} of a step's compute behind backward",
        f"  DiLoCo: compute {f.compute_s * 1e3:.2f} ms a step, outer step's GPU work {spill['diloco'] * 1e3:.2f} ms "
        f"(LocalSGD {spill['localsgd'] * 1e3:.2f} ms), other {f.other_step_s * 1e3:.3f} ms a step + "
        f"{f.other_outer_s * 1e3:.3f} ms an outer step",
        f"  sync unshaped {f.sync_s * 1e3:.1f} ms = all-reduce {ar * 1e3:.1f} ms + {f.calls - 1} more calls' latency "
        f"({f.calls} calls a sync); the first sync of a run {f.setup_s:.3f} s more (set-up)",
    ]


def text(result: dict) -> str:
    lines = _fit_lines(result) + ["", "Fit set, in sample (the fleet's run against the measurement):"]
    lines += ["| run | quantity | measured | simulated | error |", "|---|---|---|---|---|"]
    for run, q, meas, sim in result["in_sample"]:
        lines.append(f"| {run} | {q} | {meas:.5g} | {sim:.5g} | {sim / meas - 1:+.1%} |")
    lines += ["", "Predict set (measurements withheld): the fleet against the authors' analytic model"]
    lines += ["| cell | timed steps | syncs timed | sync s per outer step | cu | cu analytic | analytic / fleet |"]
    lines += ["|---|---|---|---|---|---|---|"]
    for name, v in result["cells"].items():
        lines.append(
            f"| {name} | {v['timed_steps']} | {v['n_outer']} | {v['sync_s_per_outer_step']:.4f} | {v['cu']:.5g} | "
            f"{v['analytic_cu']:.5g} | {v['analytic_cu'] / v['cu']:.2f} |"
        )
    lines += ["", *NOTES]
    return "\n".join(lines) + "\n"


NOTES = (
    "How the fleet runs a cell: one host an island, its uplink at the ring's rate r(R); a `fixed` merge every H",
    "steps: the all-reduce (its calls' latency, the set-up on the first), then the outer step as the `outer` phase.",
    "The runs' step timer billed the outer step's GPU work to the next step, so it counts as compute here. DDP's",
    "all-reduce starts during backward, which the fleet cannot express: the share it hides (fitted on the unshaped",
    "DDP run) is taken off beside the run. docs/network.md.",
)
