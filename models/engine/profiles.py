"""Engine profiles: an engine on a GPU serving a model, as a data file with a schema.

A profile (YAML, `models/data/profiles/<name>.yaml` or any path) names its measurements and which
runs set which number; the numbers are fitted when it is loaded and printed by
`wadiloco calibrate PROFILE`. A user adds their own engine and GPU by writing such a file next to a
measurements file of the same shape as `models/data/testbed/stage10.yaml`.

What a profile gives the simulator, per model: the GPU time of one engine iteration,
`a + d * batch` seconds (no host part: the GPU-bound twin), and the serving start delay (engine init);
per co-tenant setting: its weight against a serving job on the GPU link.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from pydantic import Field

from wadiloco.models.engine.latency import LatencyModel
from wadiloco.models.errors import InputError
from wadiloco.models.spec.schema import Strict, read_yaml, validate

PACKAGED = "profiles"


class RunsRef(Strict):
    runs: list[str] = Field(min_length=1, description="measurement runs this number is fitted from")


class ProfileSpec(Strict):
    name: str
    description: str = ""
    gpu: str = ""
    engine: str = ""
    measurements: str = Field(description="measurements file: a packaged name under models/data or a path")
    models: dict[str, RunsRef] = Field(min_length=1)
    batch_slope: RunsRef | None = Field(
        None, description="two runs of one model at different batch sizes; null: no growth with the batch"
    )
    batch_slope_scale: float = Field(1.0, ge=0, le=100, description="times the fitted slope (sensitivity rows)")
    cotenants: dict[str, RunsRef] = {}


@dataclass(frozen=True)
class ModelFit:
    """One model's engine iteration: GPU time a + d * batch (s), and its start delay (s)."""

    a: float
    d: float
    start_delay_s: float
    reference_batch: int
    runs: tuple[str, ...]

    def iteration_s(self, batch: int) -> float:
        return self.a + self.d * batch

    def latency(self) -> LatencyModel:
        return LatencyModel(self.a, 0.0, 0.0, self.d, r2=math.nan, n=len(self.runs), max_rel_err=math.nan)


@dataclass(frozen=True)
class Profile:
    spec: ProfileSpec
    source: str
    relative_slope: float  # d / (a + d * c_ref): growth of an iteration per extra sequence
    models: dict[str, ModelFit]
    cotenants: dict[str, float]

    def model(self, name: str, file: object = "<scenario>", field: str = "engine.model") -> ModelFit:
        if name not in self.models:
            raise InputError(
                file,
                field,
                f"profile {self.spec.name!r} has no model {name!r}; known: {', '.join(sorted(self.models))}",
            )
        return self.models[name]

    def cotenant(self, name: str, file: object = "<scenario>", field: str = "cotenant.profile_entry") -> float:
        if name not in self.cotenants:
            raise InputError(
                file,
                field,
                f"profile {self.spec.name!r} has no co-tenant {name!r}; known: {', '.join(sorted(self.cotenants))}",
            )
        return self.cotenants[name]


def profile_path(name_or_path: str | Path) -> Path | None:
    """A path as given if it is a file; else the packaged profile of that name (None if neither)."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    packaged = resources.files("wadiloco.models.data").joinpath(PACKAGED, f"{name_or_path}.yaml")
    return Path(str(packaged)) if packaged.is_file() else None


def packaged_profiles() -> list[str]:
    folder = resources.files("wadiloco.models.data").joinpath(PACKAGED)
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


@lru_cache(maxsize=16)
def load_profile(name_or_path: str) -> Profile:
    path = profile_path(name_or_path)
    if path is None:
        raise InputError(
            name_or_path,
            "",
            f"no such profile file, and no packaged profile of that name (packaged: {', '.join(packaged_profiles())})",
        )
    spec = validate(ProfileSpec, read_yaml(path), path)
    return fit_profile(spec, str(path))


def fit_profile(spec: ProfileSpec, source: str) -> Profile:
    from wadiloco.models.testbed import fit

    if spec.measurements != fit.STAGE10:
        raise InputError(source, "measurements", f"only the Stage 10 format is fitted so far ({fit.STAGE10})")
    known = {r["name"] for r in fit.stage10()["runs"]}
    for where, refs in (
        [("batch_slope", spec.batch_slope)]
        + [(f"models.{k}", v) for k, v in spec.models.items()]
        + [(f"cotenants.{k}", v) for k, v in spec.cotenants.items()]
    ):
        for run in refs.runs if refs else []:
            if run not in known:
                raise InputError(source, f"{where}.runs", f"no run {run!r} in {spec.measurements}")
    slope = _slope(spec)
    models = {name: _model_fit(ref.runs, slope) for name, ref in spec.models.items()}
    cot = {name: _mean([fit.fit_run(r).weight for r in ref.runs]) for name, ref in spec.cotenants.items()}
    return Profile(spec, source, slope, models, cot)


def _slope(spec: ProfileSpec) -> float:
    """The batch growth per sequence both fit paths use (fit_profile, model_fit): one rule, so they cannot drift."""
    return spec.batch_slope_scale * _relative_slope(spec.batch_slope.runs) if spec.batch_slope else 0.0


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


def _iteration(run: str) -> tuple[float, int]:
    """(GPU time of one iteration, batch size) of a run: L_u over its iterations per batch."""
    from wadiloco.models.testbed import fit

    s = fit.run_spec(run)["settings"]
    outs = fit.outputs_of(s)
    o = outs if isinstance(outs, int) else max(outs)
    return fit.fit_run(run).l_u / o, int(s["concurrency"])


def _relative_slope(runs: list[str]) -> float:
    if len(runs) != 2:
        raise InputError("<profile>", "batch_slope.runs", "needs exactly two runs (two batch sizes)")
    (t1, c1), (t2, c2) = sorted(_iteration(r) for r in runs)
    if c1 == c2:
        raise InputError("<profile>", "batch_slope.runs", "the two runs have the same batch size")
    return (t2 - t1) / (c2 - c1) / (t2 if c2 > c1 else t1)


def _model_fit(runs: list[str], slope: float) -> ModelFit:
    from wadiloco.models.testbed import fit

    its = [_iteration(r) for r in runs]
    c_ref = its[0][1]
    if any(c != c_ref for _, c in its):
        raise InputError("<profile>", "models.runs", "a model's runs must share one batch size")
    t_ref = _mean(t for t, _ in its)
    d = slope * t_ref
    delay = _mean(fit.fit_run(r).start_delay for r in runs)
    return ModelFit(t_ref - d * c_ref, d, delay, c_ref, tuple(runs))


# ---- a scenario's engine profile: `engine.profile` and `engine.model` ------------------------------


def check_model(path: Path, model: str, file: object) -> None:
    """That the profile at `path` has `model` (reads the spec only; the fit comes when a run needs it)."""
    spec = validate(ProfileSpec, read_yaml(path), path)
    if model not in spec.models:
        known = ", ".join(sorted(spec.models))
        raise InputError(file, "engine.model", f"profile {spec.name!r} has no model {model!r}; known: {known}")


@lru_cache(maxsize=32)
def model_fit(path: str, model: str) -> ModelFit:
    """One model of a profile, fitted as `fit_profile` fits it (its runs and the batch slope) without
    fitting the rest (the co-tenant entries' `both` runs)."""
    spec = validate(ProfileSpec, read_yaml(Path(path)), path)
    if model not in spec.models:
        raise InputError(path, "models", f"profile {spec.name!r} has no model {model!r}")
    slope = _slope(spec)
    return _model_fit(spec.models[model].runs, slope)
