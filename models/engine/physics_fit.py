"""The physics latency law's coefficients (models.engine.physics): the packaged fit, and the law on the H200
micro-benchmark's rows (how `wadiloco calibrate` and the tests see its fit there). docs/serving_validation.md."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from functools import lru_cache
from importlib import resources

from wadiloco.models.engine.physics import PhysicsLaw

COEFFICIENTS_FILE = "physics_law.json"


@dataclass(frozen=True)
class Coefficients:
    """The law's shared coefficients (module docstring): efficiencies are fractions of the GPU's peak."""

    eta_f: float  # GEMMs and prefill attention, of peak dense bf16 FLOP/s
    eta_b: float  # streamed reads (weights, KV), of peak HBM bandwidth
    eta_dattn: float  # decode attention's QK and PV, of peak dense bf16 FLOP/s
    eta_moe: float  # fused-MoE expert reads, of peak HBM bandwidth
    p: float  # the dense roofline's smoothness: 1 adds compute and memory, large p takes the larger
    t_step: float  # s per step (sampling, input preparation: the engine work async scheduling leaves)
    t_layer: float  # s per layer per step (norms, rotary, activation, residual kernels)
    t_ar: float  # s per ring hop of an all-reduce (tp > 1)
    t_api: float  # s per request on the client's and API server's path (added to TTFT and E2E)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


@lru_cache(maxsize=1)
def fitted() -> dict:
    """The packaged fit (models/data/physics_law.json): coefficients, their standard errors, the rows that
    pin each, how they were fitted and how well."""
    return json.loads(resources.files("wadiloco.models.data").joinpath(COEFFICIENTS_FILE).read_text())


def default_coefficients() -> Coefficients:
    c = fitted()["coefficients"]
    return Coefficients(**{n: float(c[n]["value"]) for n in Coefficients.names()})


def bench_law(c: Coefficients) -> PhysicsLaw:
    """The law on the H200 micro-benchmark's steps (docs/sources.md, H200 calibration): a Llama-3-8B's
    layer GEMMs alone (no LM head, no KV written, no engine around them: t_step out), a decode step's KV
    one streamed read (a GEMV: at eta_b, no attention FLOPs), a prefill step causal attention."""
    from wadiloco.models.engine.catalog import gpu, model

    return PhysicsLaw(model("Llama-3-8B"), gpu("H200"), 1, c, bench=True)


def bench_rows(c: Coefficients, cal: dict | None = None) -> tuple[list[tuple[str, float, float]], float]:
    """(row, measured s, law s) for the H200 calibration's 19 p50 rows, and R^2 of the law on them."""
    from wadiloco.models.engine.latency import load_calibration

    cal = cal if cal is not None else load_calibration()
    law, rows = bench_law(c), []
    for r in cal["latency_model"]["decode"]:
        B = r["batch"]
        rows.append((f"decode B={B} ctx={r['ctx']}", r["p50_ms"] / 1e3, law.step_time(0, 0, 0, 0, B, B * r["ctx"])))
    for r in cal["latency_model"]["prefill"]:
        T = r["tokens"]
        rows.append((f"prefill T={T}", r["p50_ms"] / 1e3, law.step_time(T, 1, T * (T + 1) // 2, 0, 0, 0)))
    ys = [y for _, y, _ in rows]
    mean = sum(ys) / len(ys)
    ss_res = sum((y - t) ** 2 for _, y, t in rows)
    return rows, 1.0 - ss_res / sum((y - mean) ** 2 for y in ys)


def load_coefficients(path, file: object = None, field: str = "engine.physics_coefficients") -> Coefficients:
    """A coefficients file in the packaged fit's form (`wadiloco calibrate physics --out` writes one), read
    within the input limits; errors name `file` and `field` (or the file and the coefficient)."""
    from pathlib import Path

    from wadiloco.models.errors import InputError
    from wadiloco.models.spec.files import describe, json_text, read_text, strict_number

    path = Path(path)
    try:
        text = read_text(path, "physics coefficients file")
    except InputError as e:
        raise InputError(file if file is not None else path, field, f"{path}: {e.message}") from None
    doc = json_text(text, path)
    got = doc.get("coefficients") if isinstance(doc, dict) else None
    if not isinstance(got, dict):
        raise InputError(path, "coefficients", "expected an object of coefficients, as the packaged fit's")
    values = {}
    for name in Coefficients.names():
        v = got.get(name, {}).get("value") if isinstance(got.get(name), dict) else got.get(name)
        x, why = strict_number(v, 0.0)
        if why:
            raise InputError(path, f"coefficients.{name}", f"{why} (a coefficient: {describe(v)})" if v else why)
        values[name] = x
    for name in ("eta_f", "eta_b", "eta_dattn", "eta_moe", "p"):
        if values[name] <= 0:
            raise InputError(path, f"coefficients.{name}", "must be > 0")
    return Coefficients(**values)


def coefficients_doc(c: Coefficients, se: dict[str, float], fit: dict) -> dict:
    """A coefficients file's content: each coefficient's value and standard error, and how they were fitted."""
    return {
        "_doc": "The physics latency law's coefficients (models/engine/physics.py), from wadiloco calibrate physics.",
        "coefficients": {n: {"value": getattr(c, n), "se": se.get(n), "rows": ""} for n in Coefficients.names()},
        "fit": fit,
    }
