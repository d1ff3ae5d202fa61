"""`wadiloco capacity` and `wadiloco whatif`: capacity questions a planner asks."""

from __future__ import annotations

import contextlib
import math
import sys

from wadiloco.models.errors import InputError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "capacity", help="largest request rate per sidecar at an SLO attainment, with and without training"
    )
    _common(p)
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.set_defaults(func=cmd_capacity)

    p = sub.add_parser("whatif", help="vary one scenario field and redo the capacity search for each value")
    _common(p)
    p.add_argument(
        "--vary",
        required=True,
        metavar="PATH=V1,V2,...",
        help="dotted YAML path and values, e.g. fleet.interisland_gbps=10,25,100",
    )
    p.add_argument(
        "--out", required=True, help="new or empty folder for whatif.csv, whatif.md, whatif.png and whatif.json"
    )
    p.add_argument("--force", action="store_true", help="overwrite the result of an earlier whatif in --out")
    p.set_defaults(func=cmd_whatif)


def _common(p) -> None:
    import os

    from wadiloco.experiments.commands import _scenario_args

    _scenario_args(p)
    p.add_argument("--attainment", type=float, default=0.9, help="share of requests that must meet the SLO, in (0, 1)")
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1, each searched on its own (mean and CI)")
    p.add_argument(
        "--horizon",
        type=float,
        metavar="SECONDS",
        help="override horizon_s: shorter is faster, but a run needs merges to say what training costs "
        "(each run also drains for drain_s)",
    )
    p.add_argument(
        "--tol", type=float, default=0.01, help="bisection stops when the load bracket is this narrow (load units)"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="worker processes, one search per seed at a time (default: the number of cores)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _setup(args):
    from wadiloco.experiments.capacity import SearchSpec, check_search
    from wadiloco.experiments.commands import load_run, parse_params
    from wadiloco.models.spec.load import policy_choice

    sc, _ = load_run(args)  # the scenario with --set applied, and the policy checked against it
    policy, params = policy_choice(sc, args.policy, parse_params(args.param) if args.param else None)
    if args.horizon is not None and not (math.isfinite(args.horizon) and args.horizon > 0):
        raise InputError("<command line>", "--horizon", "must be a finite number > 0")
    if not (math.isfinite(args.tol) and args.tol > 0):
        raise InputError("<command line>", "--tol", "must be a finite number > 0")
    if args.workers < 1:
        raise InputError("<command line>", "--workers", "must be at least 1")
    spec = SearchSpec(attainment=args.attainment, tol=args.tol, horizon_s=args.horizon)
    check_search(sc, policy, args.seeds, spec, args.workers, params)
    return sc, policy, params, spec


def _fmt(r: dict) -> str:
    """One capacity answer in words: the three rates (without training, training without merges,
    training with the policy) with intervals that hold the bisection's resolution, what training
    and the merges cost, and the warnings (too few merges, attainment that did not fall with load)."""
    own = "" if r["policy"] == "no_sync" else f"; training with {r['policy']} {_rate(r, '')}"
    text = (
        f"{r['scenario']} / {r['policy']}: the largest rate per sidecar at {r['attainment_target']:.0%} SLO "
        f"attainment is {_rate(r, 'no_training_')} req/s without training, {_rate(r, 'no_sync_')} training without "
        f"merges (no_sync){own} (bisection resolution {r['resolution_rps_per_sidecar']:.2f} req/s, inside the "
        f"intervals; {r['seeds']} seeds)\ntraining costs {_cost(r, 'training_cost')} of the serving capacity "
        "without training"
    )
    notes = [r["training_cost_note"]]
    if r["policy"] != "no_sync":  # (no_sync's merges cost is NaN by construction: its note says why)
        text += (
            f", merges cost {_cost(r, 'merges_cost')} (together {_cost(r, 'total_cost')}; {r['merges_mean']:.1f} "
            f"merges per run at the answer, fewest {r['merges_min']})"
        )
        notes.append(r["merges_cost_note"])
    for w in (*notes, r["merge_warning"], r["monotone_warning"]):
        text += f"\nwarning: {w}" if w else ""
    return text


def _rate(r: dict, prefix: str) -> str:
    return (
        f"{r[prefix + 'max_rate_rps_per_sidecar']:.2f} "
        f"{_interval(r[prefix + 'max_rate_ci_low'], r[prefix + 'max_rate_ci_high'])}"
    )


def _cost(r: dict, name: str) -> str:
    return f"{_pct(r[name + '_fraction'])} {_interval(r[name + '_ci_low'], r[name + '_ci_high'], _pct)}"


def _interval(lo: float, hi: float, fmt=lambda x: f"{x:.2f}") -> str:
    """[lo, hi]; an open end reads as such (an interval of data without variance is the bracket)."""
    if math.isnan(lo) or math.isnan(hi):
        return "(no interval)"
    return f"[{fmt(lo) if math.isfinite(lo) else '-inf'}, {fmt(hi) if math.isfinite(hi) else 'unbounded'}]"


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.1%}"


def _bar(total: int, desc: str, args):
    from tqdm import tqdm

    return tqdm(
        total=total,
        unit="run",
        desc=desc,
        file=sys.stderr,
        disable=args.no_progress,
        dynamic_ncols=True,
        mininterval=0.5,
    )


def cmd_capacity(args) -> int:
    from wadiloco.experiments.capacity import capacity, search_runs
    from wadiloco.experiments.output import dumps

    sc, policy, params, spec = _setup(args)
    with _bar(search_runs(spec, policy, args.seeds), "capacity", args) as bar:
        r = capacity(sc, policy, params, seeds=args.seeds, spec=spec, workers=args.workers, bar=bar)
    if args.json:
        sys.stdout.write(dumps({**r, "provenance": _provenance(args, sc, policy, params, spec)}) + "\n")
    else:
        sys.stdout.write(_fmt(r) + "\n")
    return 0


def _provenance(args, sc, policy: str, params: dict, spec) -> dict:
    from dataclasses import asdict

    from wadiloco.experiments import provenance
    from wadiloco.experiments.overrides import parse_sets

    return {
        **provenance.software(),
        "scenario_file": sc.source,
        "overrides": dict(parse_sets(args.sets)),
        "policy": policy,
        "policy_params": params,
        "seeds": list(range(args.seeds)),
        "search": asdict(spec),
        "scenario": sc.model_dump(mode="json"),
    }


def parse_vary(text: str) -> tuple[str, list]:
    """PATH=V1,V2,...: each value is YAML, read as scenario files are (strict types, bounded)."""
    from wadiloco.models.spec.schema import check_finite, load_yaml_text

    if "=" not in text:
        raise InputError("<command line>", "--vary", f"expected PATH=V1,V2,..., got {text[:60]!r}")
    path, vals = (s.strip() for s in text.split("=", 1))
    values = []
    for i, v in enumerate(x for x in vals.split(",") if x.strip()):
        where = f"--vary {path} (value {i + 1})"
        value = load_yaml_text(v, "<command line>", where)
        check_finite(value, "<command line>", where)
        values.append(value)
    if not path or not values:
        raise InputError("<command line>", "--vary", "needs a field path and at least one value")
    return path, values


def cmd_whatif(args) -> int:
    from wadiloco.experiments.capacity import check_search
    from wadiloco.experiments.output import ResultDir
    from wadiloco.models.spec.load import with_overrides

    sc, policy, params, spec = _setup(args)
    path, values = parse_vary(args.vary)
    searched = {"workload.load": "the search varies it itself", "horizon_s": "--horizon sets it for every run"}
    if path in searched and (path != "horizon_s" or args.horizon is not None):
        raise InputError("<command line>", f"--vary {path}", f"cannot be varied here: {searched[path]}")
    variants = []
    for v in values:  # every value checked (validation, each search's runs) before any search runs
        with _at_value(path, v):
            variants.append((v, with_overrides(sc, {path: v})))
            check_search(variants[-1][1], policy, args.seeds * len(values), spec, args.workers, params)
    out = ResultDir(args.out, "whatif", args.force)  # nothing is created before every value is checked
    try:
        rows = _whatif(out, variants, path, (sc, policy, params, spec), args)
    except BaseException:
        out.discard()  # what this command created, and only that
        raise
    warned = [r[path] for r in rows if r["merge_warning"]]
    print(f"{len(rows)} values of {path}: whatif.csv, whatif.md, whatif.png, whatif.json in {out.path}")
    if warned:
        print(f"warning: at {path} = {', '.join(map(str, warned))} the runs made too few merges (see above)")
    return 0


@contextlib.contextmanager
def _at_value(path: str, value):
    """An error of one --vary value says which value it is."""
    try:
        yield
    except InputError as e:
        raise InputError(e.file, e.where, f"{e.message} (at --vary {path}={value})") from None


def _whatif(out, variants, path: str, search, args) -> list[dict]:
    import pandas as pd

    from wadiloco.experiments.capacity import capacity, search_runs
    from wadiloco.experiments.output import dumps

    sc, policy, params, spec = search
    rows, lines = [], []
    with _bar(len(variants) * search_runs(spec, policy, args.seeds), "whatif", args) as bar:
        for v, scv in variants:
            r = capacity(scv, policy, params, seeds=args.seeds, spec=spec, workers=args.workers, bar=bar)
            rows.append({path: v, **{k: r[k] for k in r if not k.endswith("per_seed")}})
            lines.append(f"{path}={v}: " + _fmt(r))
            bar.write(lines[-1], file=sys.stderr)
    df = pd.DataFrame(rows)
    out.open()
    out.write("whatif.csv", df.to_csv(index=False))
    out.write("whatif.md", _markdown(df, path))
    out.write("whatif.png", _figure(df, path, policy))
    out.write("whatif.json", dumps({"provenance": _provenance(args, sc, policy, params, spec), "vary": path}))
    return rows


def _markdown(df, path: str) -> str:
    """The table a reader sees: rates in req/s, the cost in percent, merges per run beside it."""
    t = df[[path]].copy()
    t["max rate (req/s/sidecar) [interval]"] = [
        f"{m:.2f} {_interval(lo, hi)}"
        for m, lo, hi in zip(df["max_rate_rps_per_sidecar"], df["max_rate_ci_low"], df["max_rate_ci_high"])
    ]
    t["no_sync max rate (req/s/sidecar)"] = [f"{x:.2f}" for x in df["no_sync_max_rate_rps_per_sidecar"]]
    t["without training (req/s/sidecar)"] = [f"{x:.2f}" for x in df["no_training_max_rate_rps_per_sidecar"]]
    for name, label in (("training_cost", "training cost"), ("merges_cost", "merges cost")):
        t[f"{label} (% of capacity without training) [interval]"] = [
            f"{_pct(m)} {_interval(lo, hi, _pct)}"
            for m, lo, hi in zip(df[f"{name}_fraction"], df[f"{name}_ci_low"], df[f"{name}_ci_high"])
        ]
    t["merges per run (mean, min)"] = [f"{m:.1f}, {n}" for m, n in zip(df["merges_mean"], df["merges_min"])]
    t["warning"] = ["; ".join(w for w in ws if w) for ws in zip(df["merge_warning"], df["monotone_warning"])]
    return t.to_markdown(index=False) + "\n"


def _figure(df, path: str, policy: str) -> bytes:
    """Capacity against the varied field: points joined by lines, on a log axis at the values
    themselves, when they are positive numbers (10, 25, 100 Gb/s are not evenly spaced); bars side by
    side per value when they are categories (a mode, an engine, a list), which no line may join."""
    from wadiloco.experiments.figures import Figure, png_bytes, style

    with style():
        fig = Figure(figsize=(6, 4))
        ax = fig.add_subplot()
        vals = list(df[path])
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in vals)
        series = [
            (f"{p}max_rate_rps_per_sidecar", f"{p}max_rate_ci_low", f"{p}max_rate_ci_high", label)
            for p, label in (
                ("", policy),
                ("no_sync_", "no_sync (training without merges)"),
                ("no_training_", "without training"),
            )
        ]
        series = series[1:] if policy == "no_sync" else series
        (_lines if numeric else _bars)(ax, df, [float(v) for v in vals] if numeric else vals, series)
        ax.set_xlabel(path)
        ax.set_ylabel("max request rate per sidecar (req/s)")
        ax.set_title(f"Serving capacity at {df['attainment_target'].iloc[0]:.0%} SLO attainment")
        ax.legend(loc="best", fontsize=8)
        fig.tight_layout()
        return png_bytes(fig, dpi=120)


def _yerr(df, col: str, lo: str, hi: str):
    """A series, and its interval as error-bar lengths (an open upper end: no bar up)."""
    import numpy as np

    y = df[col].to_numpy()
    top = np.where(np.isfinite(df[hi].to_numpy()), df[hi].to_numpy(), y)
    return y, [y - df[lo].to_numpy(), top - y]


def _lines(ax, df, x: list[float], series) -> None:
    for col, lo, hi, label in series:
        y, err = _yerr(df, col, lo, hi)
        ax.errorbar(x, y, yerr=err, marker="o", capsize=4, label=label)
    if len(set(x)) > 1 and max(x) / min(x) >= 4:
        ax.set_xscale("log")
    ax.set_xticks(x, [f"{v:g}" for v in x])
    ax.minorticks_off()


def _bars(ax, df, vals: list, series) -> None:
    import numpy as np

    width = 0.8 / len(series)
    pos = np.arange(len(vals))
    for k, (col, lo, hi, label) in enumerate(series):
        y, err = _yerr(df, col, lo, hi)
        ax.bar(pos + (k - (len(series) - 1) / 2) * width, y, width, yerr=err, capsize=4, label=label)
    ax.set_xticks(pos, [str(v) for v in vals])
