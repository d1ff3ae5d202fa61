"""`wadiloco capacity` and `wadiloco whatif`: capacity questions a planner asks."""

from __future__ import annotations

import json
import sys

from wadiloco.models.errors import InputError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "capacity", help="largest request rate per sidecar at an SLO attainment, with and without training"
    )
    _common(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_capacity)

    p = sub.add_parser("whatif", help="vary one scenario field and redo the capacity search for each value")
    _common(p)
    p.add_argument(
        "--vary",
        required=True,
        metavar="PATH=V1,V2,...",
        help="dotted YAML path and values, e.g. fleet.interisland_gbps=10,25,100",
    )
    p.add_argument("--out", required=True, help="folder for whatif.csv, whatif.md and whatif.png")
    p.set_defaults(func=cmd_whatif)


def _common(p) -> None:
    p.add_argument("scenario")
    p.add_argument("--policy", help="merge policy (default: the scenario's)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--attainment", type=float, default=0.9, help="share of requests that must meet the SLO")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--horizon", type=float, help="override horizon_s (shorter is faster)")
    p.add_argument("--tol", type=float, default=0.01, help="bisection stops when the load bracket is this narrow")
    p.add_argument("--workers", type=int, default=1)


def _setup(args):
    from wadiloco.experiments.capacity import SearchSpec
    from wadiloco.experiments.commands import parse_params
    from wadiloco.models.config import check_policy, load_scenario, policy_choice

    sc = load_scenario(args.scenario)
    policy, params = policy_choice(sc, args.policy, parse_params(args.param) if args.param else None)
    check_policy(sc, policy, params, "<command line>", "--policy")
    if args.horizon is not None and not args.horizon > 0:
        raise InputError("<command line>", "--horizon", "must be > 0")
    if not args.tol > 0:
        raise InputError("<command line>", "--tol", "must be > 0")
    if args.workers < 1:
        raise InputError("<command line>", "--workers", "must be at least 1")
    spec = SearchSpec(attainment=args.attainment, tol=args.tol, horizon_s=args.horizon)
    return sc, policy, params, spec


def _fmt(r: dict) -> str:
    return (
        f"{r['scenario']} / {r['policy']}: {r['max_rate_rps_per_sidecar']:.2f} req/s per sidecar "
        f"[{r['max_rate_ci_low']:.2f}, {r['max_rate_ci_high']:.2f}] at {r['attainment_target']:.0%} SLO attainment; "
        f"without merges {r['no_sync_max_rate_rps_per_sidecar']:.2f} "
        f"[{r['no_sync_max_rate_ci_low']:.2f}, {r['no_sync_max_rate_ci_high']:.2f}]; "
        f"training costs {r['capacity_cost_fraction']:.1%} "
        f"[{r['capacity_cost_ci_low']:.1%}, {r['capacity_cost_ci_high']:.1%}] of serving capacity ({r['seeds']} seeds)"
    )


def cmd_capacity(args) -> int:
    from wadiloco.experiments.capacity import capacity
    from wadiloco.experiments.output import dumps

    sc, policy, params, spec = _setup(args)
    r = capacity(sc, policy, params, seeds=args.seeds, spec=spec, workers=args.workers)
    sys.stdout.write((dumps(r) if args.json else _fmt(r)) + "\n")
    return 0


def parse_vary(text: str) -> tuple[str, list]:
    import yaml

    if "=" not in text:
        raise InputError("<command line>", "--vary", f"expected PATH=V1,V2,..., got {text!r}")
    path, vals = text.split("=", 1)
    values = [yaml.safe_load(v) for v in vals.split(",") if v.strip()]
    if not path.strip() or not values:
        raise InputError("<command line>", "--vary", "needs a field path and at least one value")
    return path.strip(), values


def cmd_whatif(args) -> int:
    import pandas as pd

    from wadiloco.experiments.capacity import capacity
    from wadiloco.experiments.output import prepare_dir, write_atomic
    from wadiloco.models.config import with_overrides

    sc, policy, params, spec = _setup(args)
    path, values = parse_vary(args.vary)
    variants = [(v, with_overrides(sc, {path: v})) for v in values]  # validate all before running any
    out = prepare_dir(args.out)
    rows = []
    for v, scv in variants:
        r = capacity(scv, policy, params, seeds=args.seeds, spec=spec, workers=args.workers)
        rows.append({path: v, **{k: r[k] for k in r if not k.startswith(("per_seed", "no_sync_per_seed"))}})
        print(f"{path}={v}: " + _fmt(r), file=sys.stderr)
    df = pd.DataFrame(rows)
    write_atomic(out / "whatif.csv", df.to_csv(index=False))
    cols = [
        path,
        "max_rate_rps_per_sidecar",
        "max_rate_ci_low",
        "max_rate_ci_high",
        "no_sync_max_rate_rps_per_sidecar",
        "capacity_cost_fraction",
    ]
    write_atomic(
        out / "whatif.md", df[cols].to_markdown(index=False) if _has_tabulate() else df[cols].to_string(index=False)
    )
    write_atomic(out / "whatif.png", _figure(df, path, policy))
    print(json.dumps({"out": str(out), "rows": len(rows)}))
    return 0


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401

        return True
    except ImportError:
        return False


def _figure(df, path: str, policy: str) -> bytes:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(6, 4))
    x = list(range(len(df)))
    for col, lo, hi, label in (
        ("max_rate_rps_per_sidecar", "max_rate_ci_low", "max_rate_ci_high", policy),
        (
            "no_sync_max_rate_rps_per_sidecar",
            "no_sync_max_rate_ci_low",
            "no_sync_max_rate_ci_high",
            "no_sync (no training)",
        ),
    ):
        y = df[col].to_numpy()
        ax.errorbar(x, y, yerr=[y - df[lo].to_numpy(), df[hi].to_numpy() - y], marker="o", capsize=4, label=label)
    ax.set_xticks(x, [str(v) for v in df[path]])
    ax.set_xlabel(path)
    ax.set_ylabel("max request rate per sidecar (req/s)")
    ax.set_title(f"Serving capacity at {df['attainment_target'].iloc[0]:.0%} SLO attainment")
    ax.legend()
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    return buf.getvalue()
