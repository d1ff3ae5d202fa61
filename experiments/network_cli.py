"""The network's commands: `wadiloco calibrate network` fits a socket ring all-reduce to a cluster's
own measurements (models.network.collective); `wadiloco validate diloco-measured` simulates the
measured cluster as a fleet (experiments.studies.diloco_measured). docs/network.md."""

from __future__ import annotations

import math
import sys
from dataclasses import asdict
from pathlib import Path

from wadiloco.models.errors import InputError
from wadiloco.models.spec.files import describe, json_text, strict_number


def add_parser(sub) -> None:
    p = sub.add_parser(
        "validate",
        help="simulate a measured cluster as a fleet and compare with its measurements (diloco-measured)",
    )
    p.add_argument("target", choices=["diloco-measured"], help="the measured study to simulate")
    p.add_argument("--data", help="its runs file (default: the packaged copy of the diloco-measured runs)")
    p.add_argument("--json", action="store_true", help='print {"cells": {CELL: {"cu", "sync_s_per_outer_step"}}} only')
    p.set_defaults(func=cmd_validate)


def add_network_args(p) -> None:
    """`calibrate network`'s flags, on the calibrate parser (its positional is a profile or `network`)."""
    g = p.add_argument_group("network (`wadiloco calibrate network`: fit a socket ring all-reduce, docs/network.md)")
    g.add_argument("--nccl", metavar="FILE", help="nccl-tests all_reduce_perf output, or JSON [{msg_bytes, bps}]")
    g.add_argument("--nccl-column", choices=["busbw", "algbw"], default="busbw", help="which bandwidth to read")
    g.add_argument(
        "--iperf",
        action="append",
        default=[],
        metavar="FILE|BPS",
        help="unshaped `iperf3 -J` result or bits/s, per pair",
    )
    g.add_argument(
        "--shaped",
        action="append",
        default=[],
        metavar="RATE=FILE|BPS",
        help="iperf3 on a link shaped to RATE bits/s (gives the goodput factor g)",
    )
    g.add_argument("--ddp", metavar="FILE", help="DDP step times, JSON (docs/network.md): shaped runs give eta(R)")
    g.add_argument("--ranks", type=int, help="ranks of the NCCL test (default: counted in its output)")
    g.add_argument(
        "--link-gbps",
        action="append",
        type=float,
        default=[],
        metavar="G",
        help="rates to give wan_efficiency for (25)",
    )


NETWORK_FLAGS = ("nccl", "iperf", "shaped", "ddp", "ranks", "link_gbps")


def network_flags_given(args) -> list[str]:
    return [f"--{k.replace('_', '-')}" for k in NETWORK_FLAGS if getattr(args, k) not in (None, [])]


def cmd_validate(args) -> int:
    from wadiloco.experiments.output import dumps
    from wadiloco.experiments.studies import diloco_measured as dm

    result = dm.validate(args.data)
    sys.stdout.write(dumps(dm.cells_json(result)) + "\n" if args.json else dm.text(result))
    return 0


# ---- calibrate network -----------------------------------------------------------------------------


def _read(path: str) -> str:
    from wadiloco.models.spec.files import read_text

    return read_text(Path(path), "measurement file")


def _rate(value: str, flag: str) -> float:
    """Bits/s given as a number, or read from an `iperf3 -J` file."""
    from wadiloco.models.network.collective import parse_iperf3

    try:
        v = float(value)
    except ValueError:
        return parse_iperf3(_read(value), value)
    if not (math.isfinite(v) and v > 0):
        raise InputError(flag, "", f"{value}: a rate must be a number of bits/s > 0")
    return v


def _shaped(items: list[str]) -> list[tuple[float, float]]:
    out = []
    for item in items:
        rate, sep, got = item.partition("=")
        if not sep:
            raise InputError("--shaped", "", f"{item}: give RATE=FILE|BPS (the shaped rate in bits/s, then iperf3's)")
        out.append((_rate(rate, "--shaped"), _rate(got, "--shaped")))
    return out


def _ranks(args, text: str) -> int:
    """--ranks, else the JSON curve's `ranks`, else nccl-tests' own `#  Rank  N ...` lines."""
    n = args.ranks
    if n is None and text.lstrip().startswith("{"):
        doc = json_text(text, args.nccl)
        n = doc.get("ranks") if isinstance(doc.get("ranks"), int) and not isinstance(doc.get("ranks"), bool) else 0
    if n is None:
        n = sum(1 for line in text.splitlines() if line.lstrip("# ").startswith("Rank "))
    if n < 2:
        raise InputError("--ranks", "", "give the number of ranks the NCCL test ran on (2 or more)")
    return n


def _ddp_runs(path: str) -> list:
    from wadiloco.models.network.collective import DDPRun

    doc = json_text(_read(path), path)  # strict: no NaN, no integer of hundreds of digits
    runs = doc.get("runs") if isinstance(doc, dict) else doc
    if not isinstance(runs, list) or not runs:
        raise InputError(path, "runs", "must be a non-empty list of DDP runs")
    out = []
    for i, r in enumerate(runs):
        r = r if isinstance(r, dict) else {}
        vals = {}
        for key in ("sync_blocked_per_step_s", "compute_per_step_s", "grad_bytes", "rate_bps"):
            v = r.get(key)
            if key == "rate_bps" and v is None:
                vals[key] = None
                continue
            x, why = strict_number(v)
            if why or not (x > 0 or (x == 0 and key == "sync_blocked_per_step_s")):
                raise InputError(path, f"runs[{i}].{key}", f"must be a number > 0 (got {describe(v)})")
            vals[key] = float(v)
        out.append(
            DDPRun(vals["rate_bps"], vals["sync_blocked_per_step_s"], vals["compute_per_step_s"], vals["grad_bytes"])
        )
    return out


def fit_network(args) -> dict:
    """The parameters the given measurements fit, with what a scenario takes from them."""
    from wadiloco.models.network import collective as co

    if not args.nccl:
        raise InputError("--nccl", "", "calibrate network needs an NCCL all-reduce curve (nccl-tests all_reduce_perf)")
    text = _read(args.nccl)
    curve = co.parse_nccl(text, args.nccl, args.nccl_column)
    n = _ranks(args, text)
    iperf = [_rate(v, "--iperf") for v in args.iperf]
    ddp = _ddp_runs(args.ddp) if args.ddp else []
    try:
        params, rep = co.fit(n, iperf, curve, args.nccl_column, _shaped(args.shaped), ddp)
    except (ValueError, ZeroDivisionError) as e:
        raise InputError(args.nccl, "", f"the measurements do not determine the model: {e}") from None
    rates = args.link_gbps or [25.0]
    if any(not (math.isfinite(g) and g > 0) for g in rates):
        raise InputError("--link-gbps", "", "a rate must be > 0")
    return {
        "ranks": n,
        "params": asdict(params),
        "ddp_overlap": rep.get("ddp_overlap"),
        "eta_points": [{"rate_bps": r, "eta": e} for r, e in rep.get("eta_points", [])],
        "eta_fitted": bool(rep.get("eta_points")),
        "scenario": {
            "merge.ring_step_latency_s": params.alpha_s,
            "fleet.wan_efficiency": {f"{g:g}": min(1.0, params.rate_factor(g * 1e9)) for g in rates},
        },
    }


def network_lines(fit: dict) -> list[str]:
    p, n = fit["params"], fit["ranks"]
    law = "fitted on the shaped DDP runs" if fit["eta_fitted"] else "the shipped law (no shaped DDP runs given)"
    lines = [
        f"Socket ring all-reduce over {n} ranks (models.network.collective):",
        f"  unshaped ring rate {p['unshaped_ring_bps'] / 1e9:.3f} Gb/s per link "
        f"({p['unshaped_ring_bps'] / p['flow_cap_bps']:.2f}x one TCP flow of {p['flow_cap_bps'] / 1e9:.3f} Gb/s)",
        f"  latency {p['alpha_s'] * 1e6:.1f} us per ring step ({p['alpha_s'] * 2 * (n - 1) * 1e3:.3f} ms a call)",
        f"  goodput factor g {p['goodput_factor']:.4f}",
        f"  eta(R) = {p['eta_max']:.3f} - {p['eta_slope']:.3f} log10(max(1, {p['eta_knee_bps'] / 1e9:.3f} Gb/s / R)):",
        f"    {law}",
    ]
    if fit["ddp_overlap"] is not None:
        lines.append(f"  DDP hides {fit['ddp_overlap']:.3f} of a step's compute behind backward (unshaped run)")
    for pt in fit["eta_points"]:
        lines.append(f"    eta at {pt['rate_bps'] / 1e9:g} Gb/s: {pt['eta']:.4f}")
    lines.append("For a scenario:")
    lines.append(f"  merge.ring_step_latency_s: {p['alpha_s']:.4g}")
    for g, eff in fit["scenario"]["fleet.wan_efficiency"].items():
        lines.append(f"  fleet.wan_efficiency: {eff:.4f}   # g * eta(R) of an uplink at {g} Gb/s")
    return lines


def cmd_calibrate_network(args) -> int:
    fit = fit_network(args)
    if args.json:
        from wadiloco.experiments.output import dumps

        sys.stdout.write(dumps(fit) + "\n")
    else:
        sys.stdout.write("\n".join(network_lines(fit)) + "\n")
    return 0
