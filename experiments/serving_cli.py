"""The serving model's commands: what `wadiloco calibrate` prints of the physics latency law (its shared
coefficients, the rows that pin them, its fit to the H200 rows, the model and GPU catalogues).
docs/serving_validation.md."""

from __future__ import annotations

from wadiloco.models.engine import catalog
from wadiloco.models.engine.physics_fit import Coefficients, bench_rows, default_coefficients, fitted

UNITS = {"t_step": ("ms", 1e3), "t_layer": ("us", 1e6), "t_ar": ("us", 1e6), "t_api": ("ms", 1e3)}


def _value(name: str, v: float) -> str:
    unit, scale = UNITS.get(name, ("", 1.0))
    return f"{v * scale:.4g} {unit}".strip()


def physics_lines() -> list[str]:
    """The coefficients with their standard errors and source rows, the fit's figures, the catalogues."""
    fit = fitted()
    lines = ["Physics latency law (engine.latency: physics), coefficients shared by every model and GPU:"]
    for name in Coefficients.names():
        c = fit["coefficients"][name]
        lines.append(f"  {name:9s} {_value(name, c['value']):>11s}  s.e. {_value(name, c['se']):>9s}  {c['rows']}")
    how = fit["fit"]
    lines.append(f"  fitted on: {how['on']}")
    ins = how.get("in_sample")
    if ins:
        lines.append(
            f"  in sample ({how['seeds']} seed(s)): median |error| E2E mean {ins['e2e_mean_s']:.1%}, TTFT mean "
            f"{ins['ttft_mean_s']:.1%}, ITL mean {ins['itl_mean_s']:.1%} (wadiloco validate vllm-h100 for the table)"
        )
    lines.append(f"Models (engine.model, or a config.json path): {', '.join(catalog.models())}")
    lines.append(f"GPUs (engine.gpu): {', '.join(catalog.gpus())}")
    return lines


def physics_rows() -> tuple[list[float], float]:
    """The physics law's time for each packaged H200 row (s), in `relative_errors`' order, and its R^2."""
    rows, r2 = bench_rows(default_coefficients())
    return [t for _, _, t in rows], r2


def physics_dict() -> dict:
    """`wadiloco calibrate --json`'s `physics` block."""
    fit = fitted()
    rows, r2 = bench_rows(default_coefficients())
    return {
        "coefficients": {n: fit["coefficients"][n] for n in Coefficients.names()},
        "fit": fit["fit"],
        "h200_rows": [{"row": r, "measured_s": y, "physics_s": t} for r, y, t in rows],
        "h200_r2": r2,
        "models": list(catalog.models()),
        "gpus": list(catalog.gpus()),
    }


def cmd_validate_vllm(args) -> int:
    """`wadiloco validate vllm-h100`: the 16 experiments through the project's engine."""
    import sys

    from wadiloco.experiments.output import dumps, prepare_dir, write_atomic
    from wadiloco.experiments.studies import vllm_h100 as v
    from wadiloco.models.errors import InputError

    if not 1 <= args.seeds <= 100:
        raise InputError("--seeds", "", f"between 1 and 100 (got {args.seeds})")
    result = v.validate(args.data, args.seeds)  # (before --out is made: a bad input leaves no folder)
    report = v.text(result)
    out = prepare_dir(args.out) if args.out else None
    if out is not None:
        write_atomic(out / "validation.json", dumps(result) + "\n")
        write_atomic(out / "predictions.json", dumps(v.predictions_json(result, held_out=True)) + "\n")
        write_atomic(out / "report.txt", report)
    sys.stdout.write(dumps(v.predictions_json(result)) + "\n" if args.json else report)
    return 0


def add_physics_args(p) -> None:
    """`calibrate physics`'s flags, on the calibrate parser."""
    g = p.add_argument_group("physics (`wadiloco calibrate physics`: fit the physics law, docs/serving_validation.md)")
    g.add_argument("--out", help="write the fitted coefficients to this JSON file (engine.physics_coefficients)")
    g.add_argument("--evals", type=int, default=40, help="simulations of the fit set the least squares may run")


def cmd_calibrate_physics(args) -> int:
    """`wadiloco calibrate physics`: the shared coefficients fitted again, by simulation, to an experiments
    file's fit experiments and the H200 rows, from the packaged ones (experiments.studies.vllm_h100)."""
    import json
    import sys
    from dataclasses import asdict
    from pathlib import Path

    import numpy as np

    from wadiloco.experiments.output import dumps, write_atomic, write_target
    from wadiloco.experiments.studies import vllm_h100 as v
    from wadiloco.models.engine.physics_fit import coefficients_doc
    from wadiloco.models.errors import InputError

    if not 1 <= args.evals <= 10_000:
        raise InputError("--evals", "", f"between 1 and 10000 (got {args.evals})")
    target = write_target(args.out, "--out") if args.out else None
    exps = v.load(args.file)
    c, se = v.fit_coefficients(exps, default_coefficients(), args.evals, log=lambda s: print(s, file=sys.stderr))
    errs = v.errors(v.validate_fit(exps, c))
    med = {k: float(np.median(np.abs(errs[k]))) for k in ("e2e_mean_s", "ttft_mean_s", "itl_mean_s")}
    fit = {"on": f"the fit experiments of {args.file or 'vLLM on H100'} and the H200 rows", "in_sample": med}
    doc = coefficients_doc(c, se, fit)
    if target is not None:
        write_atomic(Path(target), json.dumps(doc, indent=1) + "\n")
    if args.json:
        sys.stdout.write(dumps(doc) + "\n")
        return 0
    for name, value in asdict(c).items():
        print(f"  {name:9s} {_value(name, value):>11s}  s.e. {_value(name, se[name]):>9s}")
    print(
        f"  in sample: median |error| E2E mean {med['e2e_mean_s']:.1%}, TTFT mean {med['ttft_mean_s']:.1%}, "
        f"ITL mean {med['itl_mean_s']:.1%}"
    )
    return 0
