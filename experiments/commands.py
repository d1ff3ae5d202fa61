"""Subcommands for single runs and for looking at the model: run, show, calibrate, policies, routers, trace."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from wadiloco.experiments.network_cli import add_network_args, cmd_calibrate_network, network_flags_given
from wadiloco.experiments.overrides import add_set_argument, load_with_sets, parse_sets
from wadiloco.experiments.serving_cli import add_physics_args
from wadiloco.models.errors import InputError
from wadiloco.models.spec.schema import MAX_INT

# timeline.csv's columns with their units (sim.monitor's keys; docs/data_dictionary.md)
TIMELINE_CSV_COLUMNS = {"t": "t_s", "p_net": "net_busy_frac", "p_ckpt": "ckpt_busy_frac"}
SEED_HELP = "random seed: every policy run on one seed sees the same requests"


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run one scenario and print a summary")
    _scenario_args(p)
    p.add_argument("--seed", type=seed_arg, default=0, help=SEED_HELP + " (0 to 2^63 - 1)")
    p.add_argument("--draw", type=seed_arg, default=0, help="draw index for randomised controls (matched_random)")
    p.add_argument(
        "--out",
        help="new or empty folder for requests.csv, merges.csv, timeline.csv, summary.json (docs/data_dictionary.md)",
    )
    p.add_argument("--force", action="store_true", help="overwrite the result of an earlier run in --out")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the text summary")
    p.add_argument("--check", action="store_true", help="check invariants at the end of the run")
    p.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip the paired run without merges (no_sync on the same seed) that the sync-excess is measured against",
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("show", help="print a scenario as it runs: every field, defaults filled in, after --set")
    _scenario_args(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    p.set_defaults(func=cmd_show)

    help_ = "print the fitted latency laws and interference weights, or a profile's fit; `calibrate network`: fit "
    help_ += "the all-reduce to iperf3 and NCCL measurements; `calibrate physics`: the physics law to vLLM runs"
    p = sub.add_parser("calibrate", help=help_)
    p.add_argument(
        "profile",
        nargs="?",
        help="an engine profile (packaged name or YAML path; ./network for a file of that name) to fit and print, "
        "e.g. b200_vllm0102_eager; or `network`; or `physics`",
    )
    p.add_argument(
        "--file",
        help="calibration JSON (default: the packaged H200 measurements); `calibrate physics`: a vLLM experiments "
        "file in the vLLM on H100 form (default: the packaged one)",
    )
    p.add_argument("--json", action="store_true", help="print the fit as one JSON object")
    add_network_args(p)
    add_physics_args(p)
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("policies", help="list merge policies with their parameters and defaults")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(func=cmd_policies)

    p = sub.add_parser("routers", help="list routers (router.name) with their parameters and defaults")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(func=cmd_routers)

    p = sub.add_parser("trace", help="describe a request trace (Azure CSV or Mooncake JSONL)")
    p.add_argument("path", help="trace file")
    p.add_argument(
        "--format", default="auto", choices=["auto", "azure", "mooncake"], help="auto: by extension, else sniffed"
    )
    p.add_argument("--json", action="store_true", help="print the description as JSON")
    p.set_defaults(func=cmd_trace)


def _scenario_args(p) -> None:
    """A scenario, the policy that runs it, and field overrides: what run, show, capacity and whatif take."""
    p.add_argument("scenario", help="scenario YAML (see scenarios/; `wadiloco show` prints one resolved)")
    p.add_argument("--policy", help="merge policy (default: the scenario's; `wadiloco policies` lists them)")
    p.add_argument(
        "--param", action="append", default=[], metavar="KEY=VALUE", help="policy parameter (YAML value), repeatable"
    )
    add_set_argument(p)


def load_run(args):
    """(the scenario of a command's arguments with its overrides applied, validated; its run's spec
    with the policy chosen: models.spec.run.RunSpec)."""
    from wadiloco.models.spec.resolve import resolve

    sc = load_with_sets(args.scenario, parse_sets(args.sets))
    r = resolve(sc)
    if args.policy or args.param:
        r = r.with_policy(args.policy, parse_params(args.param) if args.param else None, "<command line>", "--policy")
    return sc, r


def seed_arg(v: str) -> int:
    """A seed or draw index: a whole number from 0 to 2^63 - 1 (numpy's SeedSequence takes no
    negative seed)."""
    import argparse

    if not (v.isascii() and v.isdigit()) or len(v) > 19 or int(v) > MAX_INT:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to 2^63 - 1, got {_shown(v)}")
    return int(v)


def _shown(v: str) -> str:
    return repr(v) if len(v) <= 40 else f"{v[:20]!r}... ({len(v)} characters)"


def parse_params(items: list[str]) -> dict:
    """--param KEY=VALUE items; values are YAML read as scenario files are (strict types, no
    duplicate keys, bounded size and depth)."""
    from wadiloco.models.spec.schema import check_finite, load_yaml_text

    out = {}
    for it in items:
        if "=" not in it:
            raise InputError("<command line>", "--param", f"expected KEY=VALUE, got {_shown(it)}")
        k, v = (s.strip() for s in it.split("=", 1))
        if not k:
            raise InputError("<command line>", "--param", f"no key before '=' in {_shown(it)}")
        value = load_yaml_text(v, "<command line>", f"--param {k}")
        check_finite(value, "<command line>", f"--param {k}")
        out[k] = value
    return out


def cmd_run(args) -> int:
    from wadiloco.experiments import provenance
    from wadiloco.experiments.output import ResultDir, dumps
    from wadiloco.experiments.runner import run_one
    from wadiloco.models.results.counterfactual import BASELINE_POLICY
    from wadiloco.models.results.counterfactual import paired as counterfactual
    from wadiloco.models.spec.limits import check_run, notes

    sc, r = load_run(args)
    check_run(r)  # before anything is built or created
    out = ResultDir(args.out, "run", args.force) if args.out else None
    for note in notes(sc, r.policy_name):
        sys.stderr.write(f"note: {note}\n")
    check = True if args.check else None
    paired = not args.no_baseline and r.policy_name != BASELINE_POLICY and r.training.enabled
    # the twin without merges runs first: the run with merges then replays what it shares with it
    # (experiments.runner: the same results, less work)
    base = run_one(r, args.seed, BASELINE_POLICY, {}, check=check, share=True) if paired else None
    res = run_one(r, args.seed, draw=args.draw, check=check, share=paired)
    s = res.record()  # what ran, exactly: the scenario's digest and the policy's params with defaults filled in
    if base is not None:
        s.update(counterfactual(res.summary, res.requests, base.summary, base.requests))
        s["no_sync_wall_time_s"] = base.summary["wall_time_s"]
    s["provenance"] = provenance.of_run(sc, r, args.seed, args.draw, parse_sets(args.sets))
    if out is not None:
        out.open()
        try:
            _write_run(out, res, s, base)
        except BaseException:
            out.discard()  # what this run created, and only that
            raise
    if args.json:
        sys.stdout.write(dumps(s) + "\n")
    else:
        sys.stdout.write(format_summary(s, r.horizon_s, r.drain_s) + "\n")
    return 0


def _write_run(out, res, s: dict, base=None) -> None:
    """requests.csv (with `slo_violated_no_sync` where the paired run served the same requests),
    merges.csv, timeline.csv and summary.json."""
    import pandas as pd

    from wadiloco.experiments.output import dumps, requests_csv
    from wadiloco.models.results.run import merge_rows

    req = res.requests
    if base is not None and s.get("by_request") is not None:
        req = {**req, "violated_no_sync": base.requests["violated"]}
    out.write("requests.csv", requests_csv(req))
    out.write("merges.csv", pd.DataFrame(merge_rows(res.merges)).to_csv(index=False))
    timeline = {TIMELINE_CSV_COLUMNS.get(k, k): v for k, v in res.timeline.items()}
    out.write("timeline.csv", pd.DataFrame(timeline).to_csv(index=False))
    out.write("summary.json", dumps(s) + "\n")


def cmd_show(args) -> int:
    import yaml

    from wadiloco.experiments.output import to_jsonable
    from wadiloco.experiments.provenance import resolved_scenario

    sc, r = load_run(args)
    data = to_jsonable(resolved_scenario(sc, r))
    if args.json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return 0
    head = [
        f"# {sc.source}, resolved: every field with its value, defaults filled in, --set applied",
        f"# requests arrive for horizon_s = {sc.horizon_s:g} s, then drain_s = {sc.drain_s:g} s lets those in flight"
        f" finish: a run simulates {sc.horizon_s + sc.drain_s:g} s",
    ]
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    sys.stdout.write("\n".join(head) + "\n" + body)
    return 0


def format_summary(s: dict, horizon_s: float | None = None, drain_s: float | None = None) -> str:
    """The text summary, led by what the merges did when `run` measured it (the sync-excess against
    no_sync on the same seed): latencies in ms below a second, shares in percent, counts with
    separators."""
    span = f"{s['sim_time_s']:.0f} s simulated"
    if horizon_s is not None and drain_s is not None:
        span = f"{horizon_s:g} s of arrivals + {drain_s:g} s drain = {span}"
    twin = f"; its no_sync twin {s['no_sync_wall_time_s']:.2f} s" if "no_sync_wall_time_s" in s else ""
    lines = [
        f"scenario {s['scenario']}  policy {s['policy']}  seed {s['seed']}  ({span} in {s['wall_time_s']:.2f} s wall"
        f"{twin})",
        *_excess_lines(s),
        f"requests            {s['requests']:>10,d}   completed {s['completed']:,d}  unfinished {s['unfinished']:,d}"
        + ("  (unfinished count as violations)" if s["unfinished"] else ""),
        _slo_line(s),
        "TTFT p50/p95/p99    " + _latencies(s, "ttft"),
        "TPOT p50/p95        " + _latencies(s, "tpot", (50, 95)),
        "E2E  p50/p95/p99    " + _latencies(s, "e2e"),
        *_merge_lines(s),
        f"final modelled loss {s['final_loss']:>10.4f}   after {s['inner_steps']:,d} inner steps",
    ]
    return "\n".join(lines)


def _excess_lines(s: dict) -> list[str]:
    """What the merges did: the sync-excess and extra violations against no_sync on the same seed, the
    merges' share of the violations, and the requests that violate only with merges or only without."""
    if "sync_excess" not in s:
        return []
    b, extra, share = s["baseline"], s["extra_violations"], s["merges_violation_share"]
    same = ", same requests" if s["by_request"] is not None else ""
    if extra > 0:
        what = f"the merges add {share:.1%} of this run's violations"
    else:
        what = "the merges add none" if extra == 0 else "the merges relieve serving"
    lines = [
        f"sync-excess         {100 * s['sync_excess']:>+10.2f} pp   {extra:+,d} violations: "
        f"{s['slo_violations']:,d} with merges vs {b['slo_violations']:,d} under no_sync "
        f"({b['slo_violation_rate']:.2%}; same seed{same}): {what}"
    ]
    br = s["by_request"]
    if br is not None:
        lines.append(
            f"  paired by request {br['only_with_merges']:>10,d} violate only with merges (overlapping "
            f"{_counts(br['only_with_merges_by_phase'])}), {br['only_without_merges']:,d} only without"
        )
    return lines


def _merge_lines(s: dict) -> list[str]:
    """The merges, one still running at the end (unfinished), their phases, and the violations that
    overlapped each phase (overlap, not cause: the sync-excess says what the merges did)."""
    steps, late = s["merge_steps"], s.get("unfinished_merge_step")
    lines = [
        f"merges              {s['merges']:>10d}   at steps {steps[:12]}{' ...' if len(steps) > 12 else ''}"
        + (f"; 1 more, at step {late:,d}, still running at the end (unfinished)" if late is not None else "")
    ]
    if s["merges"]:
        ph = s["merge_phase_mean_s"]
        lines.append(
            f"merge duration      {s['merge_duration_mean_s']:>10.2f} s mean: "
            + ", ".join(f"{k} {_dur(v)}" for k, v in ph.items())
        )
    if s["merges"] or late is not None:
        lines.append(
            "violations overlapping phase " + _counts(s["violations_by_phase"]) + " (overlap is not cause: "
            "see the sync-excess)"
        )
    elif s["policy"] != "no_sync" and s["inner_steps"] == 0:
        lines.append("training is off (training.enabled: false): no inner step, no merge")
    elif s["policy"] != "no_sync":
        lines.append(
            f"warning: no merge in this run ({s['inner_steps']} inner steps), so it says nothing about merges; "
            "lengthen horizon_s (--set horizon_s=...) or shorten the policy's interval"
        )
    return lines


def _counts(d: dict) -> str:
    return ", ".join(f"{k} {v:,d}" for k, v in d.items())


def _slo_line(s: dict) -> str:
    """The violation rate and the bounds it is of; a scenario may set some bounds or none (the testbed
    twins set none: their figures are latency percentiles)."""
    slo = s.get("slo") or {}
    bounds = [
        f"{name} <= {v * scale:g} {unit}"
        for name, key, scale, unit in (
            ("TTFT", "ttft_s", 1, "s"),
            ("TPOT", "tpot_s", 1e3, "ms"),
            ("E2E", "e2e_s", 1, "s"),
        )
        if (v := slo.get(key)) is not None
    ]
    rate = s.get("slo_violation_rate")
    if not s.get("requests"):
        return f"SLO violation rate  {'n/a':>10}   (no requests arrived: nothing to rate)"
    if rate is None or not bounds:
        return f"SLO violation rate  {'n/a':>10}   (no SLO set: slo.ttft_s, slo.tpot_s, slo.e2e_s)"
    return f"SLO violation rate  {rate:>10.2%}   ({' and '.join(bounds)})"


def _dur(v: float | None) -> str:
    if v is None or math.isnan(v):
        return "n/a"
    return f"{v * 1e3:.0f} ms" if v < 1 else f"{v:.2f} s"


def _latencies(s: dict, name: str, qs=(50, 95, 99)) -> str:
    vals = [s.get(f"{name}_p{q}_s") for q in qs]
    return " / ".join(_dur(v) for v in vals)


def _calibration_fits(file: str | None) -> tuple:
    """(calibration, linear fit, attention fit, interference weights) of `--file`, or of the packaged rows
    (calibration None); a file of another shape is an InputError naming it."""
    import numpy as np

    from wadiloco.models.engine.latency import fit_latency, load_calibration
    from wadiloco.models.spec.schema import check_input
    from wadiloco.models.training.interference import fit_weights

    if not file:
        return None, fit_latency(), fit_latency(form="attention"), fit_weights()
    p = Path(file)
    check_input(p, p, "--file", "calibration JSON file")
    cal = load_calibration(p)  # a bounded read; errors name the file
    try:
        lat, w = fit_latency(cal), fit_weights(cal)
        lat_attn = fit_latency(cal, form="attention")
    except (ValueError, KeyError, TypeError, IndexError, ZeroDivisionError, np.linalg.LinAlgError) as e:
        # the exception's own text may quote the file (numpy: "could not convert string to float:
        # '...'"): only a missing key, which is the schema's, is named
        what = f"missing {e}" if isinstance(e, KeyError) else "a value the fit reads as a number is not one"
        why = f"not a calibration file of the expected shape ({what})"
        raise InputError(p, "", why) from None
    if not all(np.isfinite([lat.a, lat.b, lat.c, lat.d, w.gpu_outer, w.gpu_stage, w.host_ckpt, w.host_stage])):
        raise InputError(p, "", "its measurements do not determine a latency model (the fit is not finite)")
    return cal, lat, lat_attn, w


def cmd_calibrate(args) -> int:
    from wadiloco.models.engine.latency import relative_errors
    from wadiloco.models.training.interference import fit_weights

    if args.profile == "network":
        return cmd_calibrate_network(args)
    if args.profile == "physics":
        from wadiloco.experiments.serving_cli import cmd_calibrate_physics

        return cmd_calibrate_physics(args)
    if args.out is not None or args.evals != 40:
        raise InputError("--out" if args.out is not None else "--evals", "", "belongs to `wadiloco calibrate physics`")
    if network_flags_given(args):
        flags = ", ".join(network_flags_given(args))
        raise InputError(flags, "", "these flags belong to `wadiloco calibrate network`")
    if args.profile:
        return _calibrate_profile(args.profile, fit_weights().gpu_outer, args.json)
    cal, lat, lat_attn, w = _calibration_fits(args.file)
    from wadiloco.experiments import serving_cli

    if args.json:
        from dataclasses import asdict

        out = {"latency": asdict(lat), "latency_attention": asdict(lat_attn), "interference": asdict(w)}
        if cal is None:
            out["physics"] = serving_cli.physics_dict()
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return 0
    print("Serving step latency (GPU part), fitted to the H200 p50 rows (engine.latency: linear | attention):")
    print("  " + lat.describe())
    print("  " + lat_attn.describe())
    phys, r2 = serving_cli.physics_rows() if cal is None else ([], None)  # (physics: the packaged rows' setup)
    print(f"  {'row':24s} {'measured':>9s} {'linear':>18s} {'attention':>18s}" + (f" {'physics':>18s}" if phys else ""))
    for k, ((row, y, p1), (_, _, p2)) in enumerate(zip(relative_errors(lat, cal), relative_errors(lat_attn, cal))):
        cells = " ".join(f"{p * 1e3:9.3f} ({p / y - 1:+6.1%})" for p in (p1, p2, *phys[k : k + 1]))
        print(f"  {row:24s} {y * 1e3:9.3f} {cells}")
    if phys:
        print(f"  physics: R^2 = {r2:.4f} with the shared coefficients below")
        print("\n".join(serving_cli.physics_lines()))
    print("Interference weights (processor-sharing weight of merge work vs one serving iteration = 1):")
    print(f"  GPU  outer step  {w.gpu_outer:.4f}   (serving keeps 1/(1+w) = {1 / (1 + w.gpu_outer):.3f} of its GPU)")
    print(f"  GPU  staging     {w.gpu_stage:.4f}")
    print(f"  host checkpoint  {w.host_ckpt:.4f}")
    print(f"  host staging     {w.host_stage:.4f}")
    print(f"  eager decode CPU time per iteration {w.eager_host_s * 1e3:.3f} ms (launch-bound baseline)")
    print(f"  GPU  inner step  {w.gpu_inner:.4f}   (fleet.gpu_sharing: timeslice | mps; the outer step's fit)")
    from wadiloco.models.training.host import fit_oversubscription

    try:
        o = fit_oversubscription(cal)
        law = f"mean wait {o.wait_s * 1e3:.2f} ms, kappa {o.kappa:.3f}"
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        law = "not fitted (no eager `cpu` row in this file)"
    print(f"Host oversubscription (fleet.host_cores; `cpu` row): {law}")
    from wadiloco.models.engine.profiles import packaged_profiles

    print(f"Engine profiles (wadiloco calibrate PROFILE): {', '.join(packaged_profiles())}")
    return 0


def _calibrate_profile(name: str, h200_outer: float, as_json: bool) -> int:
    from wadiloco.experiments.output import dumps
    from wadiloco.experiments.studies.profile_report import profile_dict, profile_lines
    from wadiloco.models.engine.profiles import load_profile

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


def cmd_routers(args) -> int:
    from wadiloco.models.routers import describe_routers

    rows = describe_routers()
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=2, default=str) + "\n")
        return 0
    for r in rows:
        print(f"{r['name']}: {r['summary']}")
        for k, v in r["params"].items():
            print(f"    {k} = {v!r}")
    return 0


def cmd_trace(args) -> int:
    from wadiloco.models.workload.traces import describe, load_trace

    d = describe(load_trace(args.path, args.format))
    if args.json:
        sys.stdout.write(json.dumps(trace_json(d), indent=2, default=str) + "\n")
    else:
        sys.stdout.write("\n".join(trace_lines(d)) + "\n")
    return 0


def trace_json(d: dict) -> dict:
    """describe()'s keys with their units: `mean_rate_rps`, `requests`, token counts as `_tokens`."""
    units = {"rows": "requests", "mean_rate": "mean_rate_rps"}
    return {units.get(k, f"{k}_tokens" if k.startswith(("prompt_", "output_")) else k): v for k, v in d.items()}


def trace_lines(d: dict) -> list[str]:
    """`wadiloco trace`'s description with units, rounded to what the numbers support."""

    def num(v, fmt: str, unit: str = "") -> str:
        return "n/a (needs two or more requests)" if v is None else f"{v:{fmt}}{unit}"

    lines = [
        f"{'source':>16}: {d['source']}",
        f"{'requests':>16}: {d['rows']:,d}",
        f"{'span':>16}: {num(d['span_s'], ',.1f', ' s')} (first to last arrival)",
        f"{'mean rate':>16}: {num(d['mean_rate'], '.3g', ' req/s')}",
        f"{'arrival CV':>16}: {num(d['arrival_cv'], '.2f')} (1 for Poisson, above 1 for bursty)",
        f"{'zero gaps':>16}: {d['zero_gaps']:,d} (requests arriving at the same instant as the previous one)",
    ]
    for name in ("prompt", "output"):
        stats = ", ".join(f"{k} {num(d[f'{name}_{k}'], ',.0f')}" for k in ("mean", "median", "p99", "max"))
        lines.append(f"{name + ' tokens':>16}: {stats}")
    return lines
