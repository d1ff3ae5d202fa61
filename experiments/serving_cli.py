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
            f"  in sample ({how['seeds']} seed(s)): median |error| E2E mean {ins['e2e_mean']:.1%}, TTFT mean "
            f"{ins['ttft_mean']:.1%}, ITL mean {ins['itl_mean']:.1%} (wadiloco validate vllm-h100 for the table)"
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
    out = prepare_dir(args.out) if args.out else None
    result = v.validate(args.data, args.seeds)
    report = v.text(result)
    if out is not None:
        write_atomic(out / "validation.json", dumps(result) + "\n")
        write_atomic(out / "report.txt", report)
    sys.stdout.write(dumps(v.predictions_json(result)) + "\n" if args.json else report)
    return 0
