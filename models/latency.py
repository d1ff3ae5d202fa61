"""Serving step latency, fitted by OLS to the H200 measurements.

The model is the one SPEC.md names: t = a + b*prefill_tokens + c*sum(decode context) + d*batch,
fitted to the p50 of every decode row (batch B at context ctx: sum_ctx = B*ctx, batch = B) and every
prefill row (T tokens: prefill_tokens = T, batch = 1). Step times span 4 ms to 195 ms, so plain OLS
would fit the long prefills and miss decode steps by ~45%; we fit OLS on the rows scaled by 1/y
(relative error, i.e. WLS with weights 1/y^2) and report R^2 of the unscaled predictions, so the
short decode steps that dominate serving are fitted as well as the prefills.

Two ways to compute the same fit: `statsmodels` (`sm.WLS`, what `wadiloco calibrate` reports) and
`numpy` (the same weighted least squares, rows whitened by sqrt(weight) and solved with the
Moore-Penrose pseudo-inverse). Simulations use the numpy one (`default_latency`): importing
statsmodels costs seconds per process, paid again by every sweep worker, for a 19-row, 4-column
fit. tests/test_latency_fit.py checks that both give the same coefficients.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

from wadiloco.models.errors import InputError
from wadiloco.models.schema import check_finite, read_text

CALIBRATION_FILE = "h200_llama8b_interference.json"


def load_calibration(path: str | Path | None = None) -> dict:
    """The packaged measurements, or a user's file: a regular JSON file within the input size
    limit, every number finite (errors are InputErrors naming the file)."""
    if path is None:
        return json.loads(resources.files("wadiloco.models.data").joinpath(CALIBRATION_FILE).read_text())
    text = read_text(path, "calibration JSON file")
    try:
        cal = json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        where = f"line {e.lineno}" if hasattr(e, "lineno") else ""
        raise InputError(path, where, f"not valid JSON ({getattr(e, 'msg', None) or type(e).__name__})") from None
    if not isinstance(cal, dict):
        raise InputError(path, "", f"expected a JSON object at the top level (got {type(cal).__name__})")
    check_finite(cal, path)
    return cal


@dataclass(frozen=True)
class LatencyModel:
    a: float  # s, fixed cost of an iteration
    b: float  # s per prefill token
    c: float  # s per context token read by decoding requests
    d: float  # s per sequence in the batch
    r2: float
    n: int
    max_rel_err: float

    def gpu_time(self, prefill_tokens: float, sum_ctx: float, batch: int) -> float:
        return self.a + self.b * prefill_tokens + self.c * sum_ctx + self.d * batch

    def describe(self) -> str:
        return (
            f"t = {self.a * 1e3:.4f} ms + {self.b * 1e6:.4f} us*prefill_tokens "
            f"+ {self.c * 1e9:.4f} ns*sum_ctx + {self.d * 1e6:.4f} us*batch   "
            f"(relative-error OLS on {self.n} p50 rows, R^2 = {self.r2:.4f}, max |rel err| = {self.max_rel_err:.1%})"
        )


def design_rows(cal: dict) -> tuple[np.ndarray, np.ndarray]:
    """(X, y) with X columns [1, prefill_tokens, sum_ctx, batch] and y in seconds."""
    X, y = [], []
    for r in cal["latency_model"]["decode"]:
        X.append([1.0, 0.0, r["batch"] * r["ctx"], r["batch"]])
        y.append(r["p50_ms"] / 1e3)
    for r in cal["latency_model"]["prefill"]:
        X.append([1.0, r["tokens"], 0.0, 1.0])
        y.append(r["p50_ms"] / 1e3)
    return np.asarray(X, float), np.asarray(y, float)


def wls_numpy(X: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted least squares without statsmodels: OLS on the rows scaled by sqrt(weights)."""
    s = np.sqrt(weights)
    return np.linalg.pinv(X * s[:, None]) @ (y * s)


def fit_latency(cal: dict | None = None, method: str = "statsmodels") -> LatencyModel:
    """Relative-error fit (WLS, weights 1/y^2) of the calibration's p50 rows, by `method`
    ("statsmodels" or "numpy"); R^2 and the largest relative error are of the unscaled predictions."""
    cal = cal if cal is not None else load_calibration()
    X, y = design_rows(cal)
    w = 1.0 / y**2
    if method == "statsmodels":
        import statsmodels.api as sm

        params = np.asarray(sm.WLS(y, X, weights=w).fit().params, dtype=float)
    elif method == "numpy":
        params = wls_numpy(X, y, w)
    else:
        raise ValueError(f"unknown fit method {method!r} (statsmodels or numpy)")
    a, b, c, d = (float(v) for v in params)
    pred = X @ params
    r2 = 1.0 - float(np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2))
    return LatencyModel(a, b, c, d, r2=r2, n=len(y), max_rel_err=float(np.max(np.abs(pred - y) / y)))


@lru_cache(maxsize=1)
def default_latency() -> LatencyModel:
    """The simulator's latency model: the built-in calibration, fitted once per process (numpy)."""
    return fit_latency(method="numpy")
