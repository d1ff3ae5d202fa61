"""The vLLM on H100 experiments through the project's engine (`wadiloco validate vllm-h100`).

Each of the 16 experiments (docs/sources.md, vLLM on H100) becomes a scenario: one sidecar serving its
model on its GPUs (engine.latency physics, vLLM V1's limits as run), the load generator's workload as run
(workload kind loadgen: its shared_prefix data in constant stages, the client's time-out), no training
merges. The run's request table gives what the load generator reports, over the whole run: the means and
tails of E2E latency and TTFT over successful requests, ITL = (E2E mean - TTFT mean) / (mean output tokens
- 1), and the completed and failed counts. The 9 `fit` experiments print beside their measurements, the 7
`predict` ones alone (their measurements are not in the data).

Two figures of the load generator itself come from the fit experiments' own reports, never from a
predicted one: the tokens the server counts per prompt token asked for (`token_ratios`: it sends random
token ids as text, which the server tokenises again; per tokenizer family, 2 + r x (system + question)
tokens) and the output tokens the client counts per token generated (`output_ratios`: it counts the
streamed text's tokens; per model). docs/serving_validation.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

import numpy as np

from wadiloco.models.engine import catalog
from wadiloco.models.errors import InputError
from wadiloco.models.spec.files import json_text, read_text

DATA = "vllm_h100.json"  # models/data: a copy of the experiments file (docs/sources.md, vLLM on H100)
TIMEOUT_S = 300.0  # the client's: aiohttp's default total time-out (the experiments set none of their own)
PROMPT_EXTRA_TOKENS = 2  # the server's BOS and the separator between system prompt and question
SPREAD = 0.28  # a prompt's token-count spread / sqrt(its length), from the fit set's prompt_len quantiles
METRICS = ("e2e_mean_s", "ttft_mean_s", "itl_mean_s", "e2e_p90_s", "e2e_p99_s", "ttft_p90_s", "ttft_p99_s")
COUNTS = ("completed", "failed")


@dataclass(frozen=True)
class Experiment:
    """One experiment as run: its engine, its workload and (fit experiments) its measured whole-run report."""

    name: str
    role: str  # fit or predict
    model: str  # the catalogue's name
    gpu: str
    tp: int
    engine: dict  # max_model_len, max_num_batched_tokens, max_num_seqs
    data: dict  # shared_prefix as run: num_groups, num_prompts_per_group, system_prompt_len, question_len, output_len
    stages: tuple[tuple[float, float], ...]  # (rate, duration s)
    measured: dict | None  # the load generator's `summary` (fit only)

    @property
    def short(self) -> str:
        """The name without its timestamp (e.g. llama-2-70b-tp4-general)."""
        return self.name.split("-", 2)[-1]

    @property
    def overloaded(self) -> bool:
        return self.measured is not None and self.measured["failures"]["count"] > 0


def _get(obj, key: str, file, where: str, kind=dict):
    v = obj.get(key) if isinstance(obj, dict) else None
    ok = isinstance(v, kind) and not isinstance(v, bool)
    if not ok:
        raise InputError(file, f"{where}.{key}".lstrip("."), f"missing, or not a {getattr(kind, '__name__', kind)}")
    return v


def _experiment(e, file, where: str) -> Experiment:
    model = catalog.catalogue_name(_get(e, "model", file, where, str))
    if model is None:
        raise InputError(file, f"{where}.model", f"{e['model']!r} is not in the model catalogue")
    gpu = catalog.gpu(_get(e, "gpu", file, where, str), f"{where}.gpu", file).name
    eng = {k: _get(_get(e, "engine", file, where), k, file, f"{where}.engine", int) for k in ENGINE_KEYS}
    sp = _get(_get(e, "workload_as_run", file, where), "shared_prefix", file, f"{where}.workload_as_run")
    data = {k: _get(sp, k, file, f"{where}.workload_as_run.shared_prefix", int) for k in DATA_KEYS}
    stages = []
    for i, s in enumerate(_get(_get(e, "load_as_run", file, where), "stages", file, f"{where}.load_as_run", list)):
        at = f"{where}.load_as_run.stages[{i}]"
        stages.append(
            (float(_get(s, "rate", file, at, (int, float))), float(_get(s, "duration", file, at, (int, float))))
        )
    role = _get(e, "role", file, where, str)
    if role not in ("fit", "predict"):
        raise InputError(file, f"{where}.role", f"fit or predict (got {role!r})")
    measured = _get(_get(e, "measured", file, where), "summary", file, f"{where}.measured") if role == "fit" else None
    tp = _get(e, "tensor_parallelism", file, where, int)
    return Experiment(_get(e, "name", file, where, str), role, model, gpu, tp, eng, data, tuple(stages), measured)


ENGINE_KEYS = ("max_model_len", "max_num_batched_tokens", "max_num_seqs")
DATA_KEYS = ("num_groups", "num_prompts_per_group", "system_prompt_len", "question_len", "output_len")


def load(path: Path | str | None = None) -> list[Experiment]:
    """The experiments file (default: the packaged copy; a folder: its experiments.json), checked."""
    if path is None:
        file, text = DATA, resources.files("wadiloco.models.data").joinpath(DATA).read_text()
    else:
        file = Path(path) / "experiments.json" if Path(path).is_dir() else Path(path)
        text = read_text(file, "vLLM experiments file")
    doc = json_text(text, file)
    exps = [_experiment(e, file, f"experiments[{i}]") for i, e in enumerate(_get(doc, "experiments", file, "", list))]
    if not any(e.role == "fit" for e in exps):
        raise InputError(file, "experiments", "no `fit` experiment: nothing to take the load generator's figures from")
    return exps


# ---- the load generator's figures, from the fit experiments' reports ------------------------------------


def tokenizer(model: str) -> str:
    return str(catalog.models()[model].get("tokenizer", model))


def token_ratios(exps: list[Experiment]) -> dict[str, float]:
    """Server tokens per prompt token asked for, per tokenizer family, and `default` (all families): least
    squares through 0 of (measured mean prompt_len - 2) on system + question, over the fit experiments."""
    pts: dict[str, list[tuple[float, float]]] = {}
    for e in exps:
        if e.measured is not None:
            asked = e.data["system_prompt_len"] + e.data["question_len"]
            got = e.measured["successes"]["prompt_len"]["mean"] - PROMPT_EXTRA_TOKENS
            pts.setdefault(tokenizer(e.model), []).append((asked, got))
    pts["default"] = [p for v in list(pts.values()) for p in v]
    return {k: sum(a * g for a, g in v) / sum(a * a for a, _ in v) for k, v in pts.items()}


def output_ratios(exps: list[Experiment]) -> dict[str, float]:
    """Output tokens the client counts per token generated, per model: the mean over its fit experiments."""
    acc: dict[str, list[float]] = {}
    for e in exps:
        if e.measured is not None:
            acc.setdefault(e.model, []).append(e.measured["successes"]["output_len"]["mean"] / e.data["output_len"])
    return {m: sum(v) / len(v) for m, v in acc.items()}


# ---- one experiment as a scenario -------------------------------------------------------------------------


def scenario(e: Experiment, token_ratio: float) -> dict:
    """The experiment as a fleet of one sidecar (module docstring)."""
    gap = TIMEOUT_S + 2.0  # every request of a stage answered or abandoned: the next starts as if drained
    span = sum(d for _, d in e.stages) + gap * (len(e.stages) - 1)
    d = e.data
    return {
        "name": e.short,
        "description": "a vLLM on H100 experiment (wadiloco validate vllm-h100)",
        "horizon_s": span + 1.0,
        "drain_s": TIMEOUT_S + 5.0,
        "fleet": {"islands": 1, "hosts_per_island": 1, "learner_gpus_per_host": 1, "sidecars_per_host": 1},
        "engine": {"latency": "physics", "model": e.model, "gpu": e.gpu, "tensor_parallel": e.tp, **e.engine},
        "workload": {
            "kind": "loadgen",
            "data": {
                "groups": d["num_groups"],
                "prompts_per_group": d["num_prompts_per_group"],
                "system_prompt_tokens": d["system_prompt_len"],
                "question_tokens": d["question_len"],
                "output_tokens": d["output_len"],
                "token_ratio": token_ratio,
                "extra_tokens": PROMPT_EXTRA_TOKENS,
                "spread": SPREAD,
            },
            "stages": [{"rate": r, "duration_s": t} for r, t in e.stages],
            "stage_gap_s": gap,
            "timeout_s": TIMEOUT_S,
        },
        "policy": {"name": "no_sync"},
        "monitor": {"sample_s": 60.0},
    }


def figures(req: dict, output_tokens: float) -> dict:
    """What the load generator reports of a request table, whole run: latencies over the successful
    requests, ITL over `output_tokens` (the client's count), completed and failed."""
    ok = req["completed"]
    e2e, ttft = req["e2e"][ok], req["ttft"][ok]
    out = {"completed": int(ok.sum()), "failed": int(len(ok) - ok.sum())}
    if not len(e2e):
        return {**{k: math.nan for k in METRICS}, **out}
    e, t = float(e2e.mean()), float(ttft.mean())
    return {
        "e2e_mean_s": e,
        "ttft_mean_s": t,
        "itl_mean_s": (e - t) / (output_tokens - 1),
        "e2e_p90_s": float(np.percentile(e2e, 90)),
        "e2e_p99_s": float(np.percentile(e2e, 99)),
        "ttft_p90_s": float(np.percentile(ttft, 90)),
        "ttft_p99_s": float(np.percentile(ttft, 99)),
        **out,
    }


def measured(e: Experiment) -> dict:
    """A fit experiment's report in the same keys."""
    s = e.measured["successes"]
    lat = s["latency"]
    e2e, ttft = lat["request_latency"], lat["time_to_first_token"]
    return {
        "e2e_mean_s": e2e["mean"],
        "ttft_mean_s": ttft["mean"],
        "itl_mean_s": (e2e["mean"] - ttft["mean"]) / (s["output_len"]["mean"] - 1),
        "e2e_p90_s": e2e["p90"],
        "e2e_p99_s": e2e["p99"],
        "ttft_p90_s": ttft["p90"],
        "ttft_p99_s": ttft["p99"],
        "completed": s["count"],
        "failed": e.measured["failures"]["count"],
    }


def run(e: Experiment, token_ratio: float, output_ratio: float, seed: int = 0, coefficients=None) -> tuple[dict, dict]:
    """(the figures, the engine's own: KV blocks, peak use, preemptions, prefix hit rate) of one run, with
    the physics law's packaged coefficients or `coefficients` (models.engine.physics.Coefficients)."""
    from wadiloco.models.engine.physics import PhysicsLaw
    from wadiloco.models.spec.resolve import from_dict
    from wadiloco.sim.fleet import simulate

    spec = from_dict(scenario(e, token_ratio), f"<{e.short}>")
    if coefficients is not None:  # (the law, and the API path's time it brings: models.spec.resolve v1_limits)
        law, api = spec.engine.latency, coefficients.t_api
        law = PhysicsLaw(law.shape, law.gpu, law.tp, coefficients)
        spec = replace(spec, engine=replace(spec.engine, latency=law, api_s=api, patience_s=TIMEOUT_S - api))
    res = simulate(spec, seed)
    req = res.requests
    figs = figures(req, output_ratio * e.data["output_len"])
    s = res.summary
    engine = {k: s[k] for k in ENGINE_FIGURES if k in s}
    return figs, engine


ENGINE_FIGURES = ("preemptions", "kv_usage_peak", "kv_usage_mean", "prefix_hit_rate", "refused", "abandoned")


def mean_over(runs: list[dict]) -> dict:
    """The mean over seeds of each figure (counts rounded)."""
    out = {}
    for k in runs[0]:
        v = float(np.mean([r[k] for r in runs]))
        out[k] = int(round(v)) if k in COUNTS else v
    return out


# ---- all of them ------------------------------------------------------------------------------------------


def validate(path: Path | str | None = None, seeds: int = 1, coefficients=None, roles=("fit", "predict")) -> dict:
    """Every experiment run on `seeds` seeds (0, 1, ...; their mean): {"experiments": {name: {...}}} with
    the role, the figures (`predicted`), a fit experiment's `measured` ones and the engine's figures, and
    the load generator's figures taken from the fit set (`token_ratios`, `output_ratios`); `roles`: which to run."""
    exps = load(path)
    tok, outr = token_ratios(exps), output_ratios(exps)
    out = {}
    for e in (e for e in exps if e.role in roles):
        runs = [
            run(e, tok.get(tokenizer(e.model), tok["default"]), outr.get(e.model, 1.0), s, coefficients)
            for s in range(seeds)
        ]
        entry = {
            "role": e.role,
            "predicted": mean_over([f for f, _ in runs]),
            "engine": mean_over([g for _, g in runs]),
        }
        if e.measured is not None:
            entry["measured"] = measured(e)
        out[e.name] = entry
    return {"experiments": out, "seeds": seeds, "token_ratios": tok, "output_ratios": outr}


def validate_fit(exps: list[Experiment], coefficients, seed: int = 0) -> dict:
    """`validate`'s result for the fit experiments alone, with these coefficients (one seed)."""
    tok, outr = token_ratios(exps), output_ratios(exps)
    out = {}
    for e in exps:
        if e.measured is not None:
            ratio = tok.get(tokenizer(e.model), tok["default"])
            fig, eng = run(e, ratio, outr.get(e.model, 1.0), seed, coefficients)
            out[e.name] = {"role": e.role, "predicted": fig, "engine": eng, "measured": measured(e)}
    return {"experiments": out, "seeds": 1, "token_ratios": tok, "output_ratios": outr}


def errors(result: dict) -> dict[str, list[float]]:
    """Relative errors (predicted / measured - 1) of the fit experiments, by figure."""
    errs: dict[str, list[float]] = {k: [] for k in METRICS + COUNTS}
    for entry in result["experiments"].values():
        m = entry.get("measured")
        if m is None:
            continue
        for k in errs:
            if m[k]:
                errs[k].append(entry["predicted"][k] / m[k] - 1.0)
    return errs


def predictions_json(result: dict, held_out: bool = False) -> dict:
    """`--json`: {"experiments": {NAME: {figure: value}}}, every experiment's predicted figures (`held_out`: the
    predict experiments' only, docs/validation/vllm_h100_predictions.json)."""
    exps = result["experiments"]
    keep = [n for n, e in exps.items() if not held_out or e["role"] == "predict"]
    return {"experiments": {n: {k: exps[n]["predicted"][k] for k in METRICS + COUNTS} for n in keep}}


COLUMNS = (
    ("E2E mean", "e2e_mean_s", 1.0, "s"),
    ("TTFT mean", "ttft_mean_s", 1e3, "ms"),
    ("ITL mean", "itl_mean_s", 1e3, "ms"),
    ("E2E p90", "e2e_p90_s", 1.0, "s"),
    ("E2E p99", "e2e_p99_s", 1.0, "s"),
    ("TTFT p90", "ttft_p90_s", 1e3, "ms"),
    ("TTFT p99", "ttft_p99_s", 1e3, "ms"),
)


def _cells(fig: dict) -> str:
    vals = [f"{fig[k] * scale:9.4g}" for _, k, scale, _ in COLUMNS]
    return " ".join(vals) + f" {fig['completed']:9d} {fig['failed']:7d}"


def _head() -> str:
    return (
        f"  {'':36s} " + " ".join(f"{f'{n} {u}':>9s}" for n, _, _, u in COLUMNS) + f" {'completed':>9s} {'failed':>7s}"
    )


def text(result: dict) -> str:
    """The in-sample table (each fit experiment predicted, measured, and the error) and the predictions."""
    exps = result["experiments"]
    lines = [f"vLLM on H100 through the project's engine (engine.latency physics), {result['seeds']} seed(s)"]
    lines += ["In sample: the fit experiments, predicted / measured / error", _head()]
    for name, e in exps.items():
        if "measured" not in e:
            continue
        p, m = e["predicted"], e["measured"]
        lines += [f"  {name.split('-', 2)[-1]:36s} {_cells(p)}", f"  {'  measured':36s} {_cells(m)}"]
        errs = " ".join(f"{p[k] / m[k] - 1:+9.1%}" if m[k] else f"{'-':>9s}" for _, k, _, _ in COLUMNS)
        cnt = " ".join(
            f"{p[k] / m[k] - 1:+{w}.1%}" if m[k] else f"{'-':>{w}s}" for k, w in (("completed", 9), ("failed", 7))
        )
        lines.append(f"  {'  error':36s} {errs} {cnt}")
    med = {k: float(np.median(np.abs(v))) for k, v in errors(result).items() if v}
    lines.append(
        f"  median |error|: E2E mean {med['e2e_mean_s']:.1%}, TTFT mean {med['ttft_mean_s']:.1%}, "
        f"ITL mean {med['itl_mean_s']:.1%}"
    )
    lines += ["Predictions: the held-out experiments (measurements withheld)", _head()]
    for name, e in exps.items():
        if "measured" not in e:
            lines.append(f"  {name.split('-', 2)[-1]:36s} {_cells(e['predicted'])}")
    tok = ", ".join(f"{k} {v:.4f}" for k, v in result["token_ratios"].items())
    lines.append(
        f"Load generator, from the fit experiments: server tokens per prompt token {tok}; client output "
        "tokens per generated " + ", ".join(f"{k} {v:.3f}" for k, v in result["output_ratios"].items())
    )
    return "\n".join(lines) + "\n"


# ---- fitting the coefficients: simulation-based least squares ---------------------------------------------

W_COUNT = 0.5  # an overloaded run's completed and failed counts, beside the three means
W_H200 = 0.3  # an H200 row's relative error
MIN_FAILED = 50  # a run with fewer failures fits its completed count only (a handful is noise)
BOUNDS = {
    "eta_f": (0.2, 1.0),
    "eta_b": (0.2, 1.0),
    "eta_dattn": (0.01, 1.0),
    "eta_moe": (0.05, 1.0),
    "p": (1.0, 12.0),
    "t_step": (0.0, 5e-3),
    "t_layer": (0.0, 1e-4),
    "t_ar": (0.0, 2e-5),
    "t_api": (0.0, 3e-2),
}
SCALE = {"eta_dattn": 0.1, "t_step": 1e-3, "t_layer": 1e-5, "t_ar": 1e-6, "t_api": 1e-2}


def residuals(exps: list[Experiment], c, seed: int = 0, h200: bool = True) -> np.ndarray:
    """What the fit minimises: per fit experiment the logs of predicted over measured E2E, TTFT and ITL means
    (an overloaded run's completed and failed counts too, at W_COUNT), and the H200 rows' relative errors at
    W_H200. Common random numbers: one seed for every evaluation."""
    from wadiloco.models.engine.physics_fit import bench_rows

    tok, outr = token_ratios(exps), output_ratios(exps)
    r = []
    for e in exps:
        if e.measured is None:
            continue
        p, _ = run(e, tok.get(tokenizer(e.model), tok["default"]), outr.get(e.model, 1.0), seed, c)
        m = measured(e)
        r += [math.log(p[k] / m[k]) if p[k] > 0 else 3.0 for k in ("e2e_mean_s", "ttft_mean_s", "itl_mean_s")]
        if e.overloaded:
            r.append(W_COUNT * math.log(max(p["completed"], 1) / m["completed"]))
            if m["failed"] >= MIN_FAILED:
                r.append(W_COUNT * math.log(max(p["failed"], 1) / m["failed"]))
    if h200:
        r += [W_H200 * (t / y - 1.0) for _, y, t in bench_rows(c)[0]]
    return np.asarray(r)


def fit_coefficients(exps: list[Experiment], start, max_evals: int = 60, log=None):
    """Least squares (scipy, trust region within BOUNDS, 5% finite-difference steps: a simulation is piecewise
    constant at finer scales) from `start`; returns (coefficients, standard errors from the Jacobian)."""
    from dataclasses import asdict

    from scipy.optimize import least_squares

    from wadiloco.models.engine.physics_fit import Coefficients

    names = Coefficients.names()
    scale = np.array([SCALE.get(n, 1.0) for n in names])
    lo = np.array([BOUNDS[n][0] for n in names]) / scale
    hi = np.array([BOUNDS[n][1] for n in names]) / scale
    x0 = np.clip(np.array([asdict(start)[n] for n in names]) / scale, lo + 1e-9, hi - 1e-9)

    def f(x):
        c = Coefficients(**dict(zip(names, (x * scale).tolist())))
        r = residuals(exps, c)
        if log is not None:
            log(f"cost {0.5 * float(r @ r):.5f} " + " ".join(f"{n}={v:.4g}" for n, v in asdict(c).items()))
        return r

    res = least_squares(f, x0, bounds=(lo, hi), diff_step=0.05, max_nfev=max_evals, method="trf")
    c = Coefficients(**dict(zip(names, (res.x * scale).tolist())))
    dof = max(len(res.fun) - len(names), 1)
    cov = np.linalg.pinv(res.jac.T @ res.jac) * float(res.fun @ res.fun) / dof
    se = dict(zip(names, (np.sqrt(np.clip(np.diag(cov), 0, None)) * scale).tolist()))
    return c, se
