"""Subcommands for single runs and for looking at the model: run, calibrate, policies, trace."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from wadiloco.models.errors import InputError


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run one scenario and print a summary")
    p.add_argument("scenario", help="scenario YAML (see scenarios/)")
    p.add_argument("--policy", help="policy name (default: the scenario's)")
    p.add_argument(
        "--param", action="append", default=[], metavar="KEY=VALUE", help="policy parameter (YAML value), repeatable"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--draw", type=int, default=0, help="draw index for randomised controls")
    p.add_argument("--out", help="folder for requests.csv, merges.csv, timeline.csv and summary.json")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the text summary")
    p.add_argument("--check", action="store_true", help="check invariants at the end of the run")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("calibrate", help="print the fitted latency model and interference weights, or a profile's fit")
    p.add_argument(
        "profile",
        nargs="?",
        help="an engine profile (packaged name or YAML path) to fit and print, e.g. b200_vllm0102_eager",
    )
    p.add_argument("--file", help="calibration JSON (default: the packaged H200 measurements)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("policies", help="list merge policies with their parameters and defaults")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_policies)

    p = sub.add_parser("trace", help="describe a request trace (Azure CSV or Mooncake JSONL)")
    p.add_argument("path")
    p.add_argument("--format", default="auto", choices=["auto", "azure", "mooncake"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_trace)


def parse_params(items: list[str]) -> dict:
    import yaml

    out = {}
    for it in items:
        if "=" not in it:
            raise InputError("<command line>", "--param", f"expected KEY=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        try:
            out[k.strip()] = yaml.safe_load(v)
        except yaml.YAMLError:
            raise InputError("<command line>", f"--param {k}", f"cannot parse value {v!r}") from None
    return out


def cmd_run(args) -> int:
    from wadiloco.experiments.output import dumps, prepare_dir, requests_csv, write_atomic
    from wadiloco.experiments.runner import run_one
    from wadiloco.models.config import load

    r = load(args.scenario)
    if args.policy or args.param:
        r = r.with_policy(args.policy, parse_params(args.param) if args.param else None, "<command line>", "--policy")
    out = prepare_dir(args.out) if args.out else None
    check = True if args.check else None
    res = run_one(r, args.seed, draw=args.draw, check=check)
    # what ran, exactly: the scenario's digest and the policy's params with defaults filled in
    s = {**res.summary, "scenario_digest": res.scenario_digest, "policy_params": res.policy_params}
    if out is not None:
        import pandas as pd

        write_atomic(out / "requests.csv", requests_csv(res.requests))
        rows = [
            {
                "index": m.index,
                "step": m.step,
                "decided_at": m.decided_at,
                "start": m.start,
                "end": m.end,
                **{f"{k}_start": v[0] for k, v in m.phases.items()},
                **{f"{k}_end": v[1] for k, v in m.phases.items()},
            }
            for m in res.merges
        ]
        write_atomic(out / "merges.csv", pd.DataFrame(rows).to_csv(index=False))
        write_atomic(out / "timeline.csv", pd.DataFrame(res.timeline).to_csv(index=False))
        write_atomic(out / "summary.json", dumps(s) + "\n")
    if args.json:
        sys.stdout.write(dumps(s) + "\n")
    else:
        sys.stdout.write(format_summary(s) + "\n")
    return 0


def format_summary(s: dict) -> str:
    ph = s["merge_phase_mean_s"]
    lines = [
        f"scenario {s['scenario']}  policy {s['policy']}  seed {s['seed']}  "
        f"({s['sim_time_s']:.0f} s simulated in {s['wall_time_s']:.2f} s wall)",
        f"requests            {s['requests']:>10,d}   completed {s['completed']:,d}  unfinished {s['unfinished']:,d}",
        f"SLO violation rate  {s['slo_violation_rate']:>10.2%}   "
        f"(TTFT <= {s['slo']['ttft_s']} s, TPOT <= {s['slo']['tpot_s']} s)",
        f"TTFT p50/p95/p99    {s['ttft_p50_s']:.3f} / {s['ttft_p95_s']:.3f} / {s['ttft_p99_s']:.3f} s",
        f"E2E  p50/p95/p99    {s['e2e_p50_s']:.3f} / {s['e2e_p95_s']:.3f} / {s['e2e_p99_s']:.3f} s",
        f"merges              {s['merges']:>10d}   at steps {s['merge_steps'][:12]}"
        f"{' ...' if len(s['merge_steps']) > 12 else ''}",
        f"merge duration      {s['merge_duration_mean_s']:>10.3f} s mean: "
        + ", ".join(f"{k} {v:.3f} s" for k, v in ph.items()),
        "violations by phase " + ", ".join(f"{k} {v}" for k, v in s["violations_by_phase"].items()),
        f"final modelled loss {s['final_loss']:>10.4f}   after {s['inner_steps']} inner steps",
    ]
    return "\n".join(lines)


def cmd_calibrate(args) -> int:
    from wadiloco.models.interference import fit_weights
    from wadiloco.models.latency import fit_latency, load_calibration

    if args.profile:
        return _calibrate_profile(args.profile, fit_weights().gpu_outer, args.json)
    if args.file:
        p = Path(args.file)
        if not p.exists():
            raise InputError(p, "--file", "file not found")
        try:
            cal = load_calibration(p)
            lat, w = fit_latency(cal), fit_weights(cal)
        except (ValueError, KeyError, TypeError) as e:
            raise InputError(p, "", f"not a calibration file of the expected shape ({type(e).__name__}: {e})") from None
    else:
        lat, w = fit_latency(), fit_weights()
    if args.json:
        from dataclasses import asdict

        sys.stdout.write(json.dumps({"latency": asdict(lat), "interference": asdict(w)}, indent=2) + "\n")
        return 0
    print("Serving step latency (GPU part), fitted to the H200 p50 rows:")
    print("  " + lat.describe())
    print("Interference weights (processor-sharing weight of merge work vs one serving iteration = 1):")
    print(f"  GPU  outer step  {w.gpu_outer:.4f}   (serving keeps 1/(1+w) = {1 / (1 + w.gpu_outer):.3f} of its GPU)")
    print(f"  GPU  staging     {w.gpu_stage:.4f}")
    print(f"  host checkpoint  {w.host_ckpt:.4f}")
    print(f"  host staging     {w.host_stage:.4f}")
    print(f"  eager decode CPU time per iteration {w.eager_host_s * 1e3:.3f} ms (launch-bound baseline)")
    from wadiloco.models.profiles import packaged_profiles

    print(f"Engine profiles (wadiloco calibrate PROFILE): {', '.join(packaged_profiles())}")
    return 0


def _calibrate_profile(name: str, h200_outer: float, as_json: bool) -> int:
    from wadiloco.experiments.output import dumps
    from wadiloco.experiments.profile_report import profile_dict, profile_lines
    from wadiloco.models.profiles import load_profile

    p = load_profile(name)
    if as_json:
        d = profile_dict(p)
        d["h200_outer_weight"] = h200_outer
        sys.stdout.write(dumps(d) + "\n")
    else:
        sys.stdout.write("\n".join(profile_lines(p, h200_outer)) + "\n")
    return 0


def cmd_policies(args) -> int:
    from wadiloco.models.policies import describe_policies

    rows = describe_policies()
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=2, default=str) + "\n")
        return 0
    for r in rows:
        tag = " [oracle]" if r["oracle"] else ""
        print(f"{r['name']}{tag}: {r['summary']}")
        for k, v in r["params"].items():
            print(f"    {k} = {v!r}")
    return 0


def cmd_trace(args) -> int:
    from wadiloco.models.traces import describe, load_trace

    d = describe(load_trace(args.path, args.format))
    if args.json:
        sys.stdout.write(json.dumps(d, indent=2, default=str) + "\n")
    else:
        for k, v in d.items():
            print(f"{k:>16}: {v}")
    return 0
