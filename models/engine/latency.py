"""Serving step latency, fitted by OLS to the H200 measurements.

Two forms, fitted to the p50 of every decode row (batch B at context ctx: sum_ctx = B*ctx, batch = B)
and every prefill row (T tokens: prefill_tokens = T, batch = 1):

- `linear` (the design card's model, docs/sources.md, the default): t = a + b*prefill_tokens + c*sum_ctx + d*batch.
  R^2 0.960; it misses the 8192-token prefill by 20% (and the 512-token one by 21%), because
  prefill attention grows with chunk length x context, which a linear model lacks.
- `attention`: t = a + b*rows + c*sum_ctx + e*attention_pairs, where rows = prefill_tokens + batch
  (every token that goes through the model's GEMMs: each prefill token, and the one token each
  sequence samples, so d = b) and attention_pairs counts the causal pairs of the prefill chunks: a
  chunk of `take` tokens after `past` tokens already computed (chunked prefill attends to the cached
  context) adds take*past + take*(take+1)/2, so a whole prompt of T tokens adds T*(T+1)/2 however it
  is chunked. Decode attention is the KV read, c*sum_ctx, in both forms. R^2 0.997, max relative
  error 9.2% on the 19 rows (a free per-sequence d on top reaches 10.00003%: the tie is also the
  better fit). Pure-decode iterations have no attention pairs, so the decode closed forms
  (models.engine.batching) are the same for both forms.

Step times span 4 ms to 195 ms, so plain OLS would fit the long prefills and miss decode steps by
~45%; we fit OLS on the rows scaled by 1/y (relative error, i.e. WLS with weights 1/y^2) and report
R^2 of the unscaled predictions, so the short decode steps that dominate serving are fitted as well as
the prefills.

Two ways to compute the same fit: `statsmodels` (`sm.WLS`, what `wadiloco calibrate` reports) and
`exact` (the same weighted least squares, rows whitened by sqrt(weight), its normal equations solved
in rational arithmetic and each coefficient rounded once). Simulations use the exact one
(`default_latency`): importing statsmodels costs seconds per process, paid again by every sweep
worker, for a 19-row fit; and a solve through the BLAS (statsmodels, numpy's pinv) differs in the
last bits from one CPU to another (OpenBLAS picks its kernels by CPU), which moved every simulated
figure by ulps between machines. The exact fit is the same float on every machine.
tests/engine/test_latency_forms.py and tests/engine/test_hot_path.py check that both give the same coefficients.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

from wadiloco.models.engine.laws import AttentionLaw, LatencyLaw, LinearLaw, TableLaw
from wadiloco.models.errors import InputError
from wadiloco.models.spec.files import check_input
from wadiloco.models.spec.schema import check_finite, read_text

CALIBRATION_FILE = "h200_llama8b_interference.json"
FORMS = ("linear", "attention")  # the fitted laws (engine.latency; `table` interpolates the rows instead)


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
    check_finite(cal, path, booleans=False)  # measurements: numbers, never true/false
    return cal


def attention_pairs(past: int, take: int) -> int:
    """Causal attention pairs of a prefill chunk of `take` tokens after `past` computed ones."""
    return take * past + take * (take + 1) // 2


@dataclass(frozen=True)
class LatencyModel:
    a: float  # s, fixed cost of an iteration
    b: float  # s per prefill token
    c: float  # s per context token read by decoding requests
    d: float  # s per sequence in the batch
    r2: float
    n: int
    max_rel_err: float
    e: float = 0.0  # s per causal attention pair of prefill chunks (form `attention`)
    form: str = "linear"

    def gpu_time(self, prefill_tokens: float, sum_ctx: float, batch: int, pairs: float = 0.0) -> float:
        return self.a + self.b * prefill_tokens + self.c * sum_ctx + self.d * batch + self.e * pairs

    def law(self) -> LatencyLaw:
        """The fit as the engine's law (models.engine.laws): linear, or attention when it has an attention term."""
        if self.e:
            return AttentionLaw(self.a, self.b, self.c, self.d, self.e)
        return LinearLaw(self.a, self.b, self.c, self.d)

    def describe(self) -> str:
        attn = f"+ {self.e * 1e9:.4f} ns*attention_pairs " if self.form == "attention" else ""
        return (
            f"[{self.form}] t = {self.a * 1e3:.4f} ms + {self.b * 1e6:.4f} us*prefill_tokens "
            f"+ {self.c * 1e9:.4f} ns*sum_ctx + {self.d * 1e6:.4f} us*batch {attn}  "
            f"(relative-error OLS on {self.n} p50 rows, R^2 = {self.r2:.4f}, max |rel err| = {self.max_rel_err:.1%})"
        )


def design_rows(cal: dict, form: str = "linear") -> tuple[np.ndarray, np.ndarray]:
    """(X, y), y in seconds. linear: columns [1, prefill_tokens, sum_ctx, batch]; attention:
    [1, prefill_tokens + batch, sum_ctx, attention_pairs]."""
    if form not in FORMS:
        raise ValueError(f"unknown latency form {form!r} ({' or '.join(FORMS)})")
    X, y = [], []
    for r in cal["latency_model"]["decode"]:
        B = r["batch"]
        X.append([1.0, 0.0, B * r["ctx"], B] if form == "linear" else [1.0, B, B * r["ctx"], 0.0])
        y.append(r["p50_ms"] / 1e3)
    for r in cal["latency_model"]["prefill"]:
        T = r["tokens"]
        X.append([1.0, T, 0.0, 1.0] if form == "linear" else [1.0, T + 1, 0.0, attention_pairs(0, T)])
        y.append(r["p50_ms"] / 1e3)
    return np.asarray(X, float), np.asarray(y, float)


def wls_exact(X: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted least squares without statsmodels or the BLAS: OLS on the rows scaled by
    sqrt(weights) (IEEE operations, the same bits everywhere), its normal equations solved exactly
    in fractions, and each coefficient rounded to the nearest float. The design must have full
    column rank (every calibration form has)."""
    s = np.sqrt(weights)
    A = [[Fraction(float(v)) for v in row] for row in X * s[:, None]]
    b = [Fraction(float(v)) for v in y * s]
    n = len(A[0]) if A else 0
    cols = range(n)
    M = [[sum(r[i] * r[j] for r in A) for j in cols] + [sum(r[i] * v for r, v in zip(A, b))] for i in cols]
    for k in cols:  # Gauss-Jordan elimination (exact: any nonzero pivot)
        piv = next((i for i in range(k, n) if M[i][k] != 0), None)
        if piv is None:
            raise np.linalg.LinAlgError(f"the design's column {k} is a combination of the others")
        M[k], M[piv] = M[piv], M[k]
        for i in cols:
            if i != k and M[i][k] != 0:
                f = M[i][k] / M[k][k]
                M[i] = [a - f * c for a, c in zip(M[i], M[k])]
    return np.array([float(M[i][n] / M[i][i]) for i in cols])


def _predict(X: np.ndarray, params: np.ndarray) -> np.ndarray:
    """X @ params, row by row in a fixed order (a matrix product through the BLAS differs by CPU)."""
    p = [float(v) for v in params]
    return np.array([sum((float(x) * c for x, c in zip(row, p)), 0.0) for row in X])


def fit_latency(cal: dict | None = None, method: str = "statsmodels", form: str = "linear") -> LatencyModel:
    """Relative-error fit (WLS, weights 1/y^2) of the calibration's p50 rows in `form`, by `method`
    ("statsmodels" or "exact"); R^2 and the largest relative error are of the unscaled predictions."""
    cal = cal if cal is not None else load_calibration()
    X, y = design_rows(cal, form)
    w = 1.0 / y**2
    if method == "statsmodels":
        import statsmodels.api as sm

        params = np.asarray(sm.WLS(y, X, weights=w).fit().params, dtype=float)
    elif method == "exact":
        params = wls_exact(X, y, w)
    else:
        raise ValueError(f"unknown fit method {method!r} (statsmodels or exact)")
    pred = _predict(X, params)
    r2 = 1.0 - float(np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2))
    fit = dict(r2=r2, n=len(y), max_rel_err=float(np.max(np.abs(pred - y) / y)), form=form)
    p = [float(v) for v in params]
    if form == "linear":
        return LatencyModel(p[0], p[1], p[2], p[3], **fit)
    return LatencyModel(p[0], p[1], p[2], p[1], e=p[3], **fit)  # d = b: a sampled token is a row


def relative_errors(lat: LatencyModel, cal: dict | None = None) -> list[tuple[str, float, float]]:
    """(row, measured s, predicted s) for every p50 row, as `wadiloco calibrate` prints them."""
    cal = cal if cal is not None else load_calibration()
    out = []
    for r in cal["latency_model"]["decode"]:
        B = r["batch"]
        out.append((f"decode B={B} ctx={r['ctx']}", r["p50_ms"] / 1e3, lat.gpu_time(0, B * r["ctx"], B)))
    for r in cal["latency_model"]["prefill"]:
        T = r["tokens"]
        out.append((f"prefill T={T}", r["p50_ms"] / 1e3, lat.gpu_time(T, 0, 1, attention_pairs(0, T))))
    return out


@lru_cache(maxsize=2)
def default_latency(form: str = "linear") -> LatencyModel:
    """The simulator's latency model in `form` (engine.latency): the built-in calibration, fitted once
    per process (exact: the same on every machine)."""
    return fit_latency(method="exact", form=form)


def table_law(path: str | Path | None = None) -> TableLaw:
    """The table law (models.engine.laws.TableLaw) of a calibration file's p50 rows: `latency_model.decode`
    (batch, ctx, p50_ms) and `latency_model.prefill` (tokens, p50_ms), no fit. The packaged H200 rows
    (path None), or a user's measurements in the same shape (engine.latency_table); errors are
    InputErrors naming the file and the row's field."""
    if path is None:
        return _packaged_table()
    try:
        st = Path(path).stat()
    except OSError:  # (load_calibration names the problem)
        return _table_of(load_calibration(path), path)
    return _table(str(path), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=1)
def _packaged_table() -> TableLaw:
    return _table_of(load_calibration(), CALIBRATION_FILE)


@lru_cache(maxsize=8)
def _table(path: str, mtime_ns: int, size: int) -> TableLaw:
    """A file's table, read once per process and version of the file."""
    return _table_of(load_calibration(path), path)


def _table_of(cal: dict, src: object) -> TableLaw:
    lm = cal.get("latency_model")
    if not isinstance(lm, dict):
        raise InputError(src, "latency_model", "expected a mapping of decode and prefill rows")
    decode = _rows(lm, "decode", ("batch", "ctx"), src)
    prefill = _rows(lm, "prefill", ("tokens",), src)
    try:
        return TableLaw([(b, x, ms / 1e3) for b, x, ms in decode], [(t, ms / 1e3) for t, ms in prefill])
    except ValueError as e:
        raise InputError(src, "latency_model", str(e)) from None


LEAST = {"batch": 1.0, "ctx": 0.0, "tokens": 1.0}  # a table row's smallest value of each coordinate


def _rows(lm: dict, kind: str, keys: tuple[str, ...], src: object) -> list[tuple[float, ...]]:
    """The rows `latency_model.<kind>` as (coordinates..., p50_ms) of finite numbers (a time above 0)."""
    rows = lm.get(kind)
    if not isinstance(rows, list) or not rows:
        raise InputError(src, f"latency_model.{kind}", "expected a non-empty list of rows")
    out = []
    for i, r in enumerate(rows):
        where = f"latency_model.{kind}[{i}]"
        if not isinstance(r, dict):
            raise InputError(src, where, f"expected a mapping of {', '.join(keys)} and p50_ms")
        row = []
        for k in (*keys, "p50_ms"):
            v = r.get(k)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise InputError(src, f"{where}.{k}", f"expected a number (got {type(v).__name__})")
            least = LEAST.get(k, 0.0)
            if not (v > 0 if k == "p50_ms" else v >= least):
                bound = "above 0" if k == "p50_ms" else f"at least {least:g}"
                raise InputError(src, f"{where}.{k}", f"must be {bound}")
            row.append(float(v))
        out.append(tuple(row))
    return out


def table_file(name: str | None, base_dir: str, file: object) -> Path | None:
    """The file engine.latency_table names (relative to the scenario's folder), checked readable; None
    for the packaged H200 rows."""
    if name is None:
        return None
    p = Path(name)
    p = p if p.is_absolute() else Path(base_dir) / p
    check_input(p, file, "engine.latency_table", "latency table file")
    return p
