"""Performance shortcuts change no result (speed itself lives in `python -m wadiloco.benchmarks`).

* sim/monitor.py lazy samples: a fleet whose engine columns are read back from the request times
  (`lazy_ok`) gives the same timeline, decisions and request table as one sampled eagerly, and its
  monitor is no lookahead source (fewer SimPy events).
* models/engine/_fast/__init__.py, the compiled serving core (setup.py): bit-identical per-request results, summary
  and timeline to the pure-Python modules on every shipped scenario (short horizons), with KV pools
  on and off, both engine generations, per-iteration stepping and a router; a stale or missing
  binary falls back to pure Python; setup.py and the loader digest the same sources.
"""

from __future__ import annotations

import ast
import os
from importlib import import_module
from pathlib import Path

import numpy as np
import pytest
from shipped import SCENARIOS, load_shipped

import wadiloco.models.engine._fast as core
import wadiloco.models.engine.serving as pure
import wadiloco.sim.build as build
import wadiloco.sim.engine as engine
import wadiloco.sim.monitor as monitor
from wadiloco.benchmarks.bursty import KV, event_mark, processed_events
from wadiloco.models.spec.load import load_scenario, with_overrides
from wadiloco.models.spec.resolve import resolve
from wadiloco.sim.fleet import Fleet

ROOT = Path(__file__).resolve().parents[2]
CORRIDOR = {"merge.h_min": 16, "merge.h_max": 32}


def _run(name: str, overrides: dict, lazy: bool, monkeypatch):
    if not lazy:
        monkeypatch.setattr(monitor, "lazy_ok", lambda sidecars: False)
    sc = load_shipped(ROOT / "scenarios" / f"{name}.yaml")
    sc = with_overrides(sc, {"horizon_s": 20.0, "drain_s": 5.0, **overrides})
    fleet = Fleet(resolve(sc), 3)
    mark = event_mark(fleet.env)
    res = fleet.run()
    monkeypatch.undo()
    return fleet, res, processed_events(fleet.env, mark)


@pytest.mark.parametrize(
    "name, overrides",
    [
        ("bursty", {"policy": {"name": "pressure_gated", "params": {"H": 24, "threshold": 0.3}}, **CORRIDOR}),
        ("azure_conv", {"policy": {"name": "wa_diloco", "params": {}}, **CORRIDOR}),
        ("normal", {"engine.step": "sequential", "engine.fast_forward": False, "monitor.sample_s": 0.5}),
        # a KV pool that preempts, and one with a prefix cache: the lazy rows read the
        # engines' logs of requests sent back to the queue and re-admitted
        ("bursty", {"engine.kv_blocks": 1500, "policy": {"name": "fixed", "params": {"H": 24}}, **CORRIDOR}),
        ("bursty", {**KV, "engine.kv_blocks": 2000, "policy": {"name": "wa_diloco", "params": {}}, **CORRIDOR}),
    ],
    ids=["bursty", "azure_conv", "normal", "bursty-kv", "bursty-kv-prefix"],
)
def test_lazy_monitor_matches_eager(name, overrides, monkeypatch):
    f_lazy, lazy, ev_lazy = _run(name, overrides, True, monkeypatch)
    f_eager, eager, ev_eager = _run(name, overrides, False, monkeypatch)
    assert f_lazy.monitor.lazy and not f_eager.monitor.lazy
    assert lazy.summary["merges"] >= 1 or name == "normal"
    assert lazy.timeline.keys() == eager.timeline.keys()
    for k in eager.timeline:
        assert np.array_equal(lazy.timeline[k], eager.timeline[k]), k
    assert max(eager.timeline["queue"]) > 0 and max(eager.timeline["running"]) > 0
    assert lazy.decisions == eager.decisions
    for k in eager.requests:
        assert np.array_equal(lazy.requests[k], eager.requests[k], equal_nan=True), k
    assert ev_lazy < ev_eager  # the engines no longer stop at every sample
    if "engine.kv_blocks" in overrides:
        assert eager.summary["preemptions"] > 0


@pytest.mark.parametrize(
    "overrides",
    [
        {"engine.kv_blocks": 120},  # (16-token blocks: some requests can never fit)
        {"engine.kv_blocks": 4000, "engine.preemption": "swap"},
        {"router.name": "least_outstanding"},
        {"workload": {"kind": "closed_loop", "concurrency": {"kind": "steady", "c": 4}}},
    ],
)
def test_lazy_monitor_only_where_exact(overrides):
    """A pool that may reject a request (never admitted: not in the FCFS admission times), swap
    preemption (monitor.lazy_ok), a router (arrivals handed over as they come) and a closed loop
    (requests created as others finish) keep the eager samples."""
    sc = load_scenario(ROOT / "scenarios" / "bursty.yaml")
    sc = with_overrides(sc, {"horizon_s": 5.0, **overrides})
    assert not Fleet(resolve(sc), 0).monitor.lazy


# ---- the compiled serving core ---------------------------------------------------------------------

# Each scenario runs one variant, in turn, so every variant meets several workloads.
VARIANTS = [
    {},
    {"engine.kv_blocks": 600},  # preempts in bursts
    {"engine.step": "sequential", "engine.host_per_seq_s": 1e-5, "engine.frontend_per_token_s": 2e-6},
    {"engine.kv_blocks": 900, "engine.step": "sequential"},
    {"engine.fast_forward": False},
    {"router.name": "least_outstanding", "engine.kv_blocks": 800},
]
PREFIX = {"engine.prefix_cache": 10**7}  # only where requests carry prefix keys (mooncake_synthetic)


def compiled_serving():
    """The compiled module, current with the sources; skips (fails under CI, where .ci/run builds it)."""
    mod, why = core.compiled_module()
    if mod is None:
        if os.environ.get("CI"):
            pytest.fail(f"the compiled serving core is {why} in CI (.ci/run installs it with pip install .)")
        pytest.skip(f"the compiled serving core is {why}: build it with pip install . (or -e .)")
    return mod


def _use_core(mod, monkeypatch, cache=None) -> None:
    """Build the fleet's engines on serving module `mod` (its pool, and its prefix cache or `cache`)."""
    monkeypatch.setattr(engine, "EngineState", mod.EngineState)
    monkeypatch.setattr(engine, "serve", mod.serve)
    monkeypatch.setattr(build, "KVPool", mod.POOL)
    monkeypatch.setattr(build, "PrefixCache", cache or mod.CACHE)


def _same_run(sc, mod_a, mod_b, monkeypatch, seed: int = 0) -> dict:
    out = []
    for mod in (mod_a, mod_b):
        _use_core(mod, monkeypatch)
        out.append(Fleet(resolve(sc), seed).run())
    a, b = out
    assert a.requests.keys() == b.requests.keys()
    for k in a.requests:
        assert np.array_equal(a.requests[k], b.requests[k], equal_nan=a.requests[k].dtype.kind == "f"), k
    for k in a.timeline:
        assert np.array_equal(a.timeline[k], b.timeline[k]), k
    sa, sb = dict(a.summary), dict(b.summary)
    sa.pop("wall_time_s"), sb.pop("wall_time_s")
    assert repr(sa) == repr(sb)
    return a.summary


def _variant_scenario(path: Path, i: int, horizon: float):
    sc = load_shipped(path)
    ov = dict(VARIANTS[i % len(VARIANTS)])
    if sc.workload["kind"] == "closed_loop":
        ov.pop("router.name", None)  # (a closed loop creates each sidecar's requests: static only)
        ov["workload.start_delay_s"] = 0.5  # (the profile's is longer than the window)
    if sc.engine.model is not None:  # an engine profile's model is the whole iteration: no host/frontend split
        ov = {k: v for k, v in ov.items() if not k.startswith(("engine.host_per", "engine.frontend"))}
    return with_overrides(sc, {"horizon_s": horizon, "drain_s": 2.0, **ov})


@pytest.mark.parametrize("i, path", list(enumerate(SCENARIOS)), ids=[p.stem for p in SCENARIOS])
def test_compiled_core_matches_pure(i, path, monkeypatch):
    mod = compiled_serving()
    s = _same_run(_variant_scenario(path, i, 4.0), mod, pure, monkeypatch)
    assert s["requests"] > 0 and s["engine_iterations"] > 0


def test_compiled_core_matches_pure_with_a_prefix_cache(monkeypatch):
    mod = compiled_serving()
    path = ROOT / "scenarios" / "mooncake_synthetic.yaml"
    sc = with_overrides(load_shipped(path), {"horizon_s": 8.0, "drain_s": 2.0, **PREFIX})
    s = _same_run(sc, mod, pure, monkeypatch)
    assert s["prefix_hit_rate"] > 0


class _FreshCache(pure.CACHE):
    """A prefix cache whose epoch moves at every read: the engine never reuses a blocked head's answers."""

    __slots__ = ("_reads",)

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._reads = 0

    @property
    def epoch(self):
        self._reads += 1
        return self._reads

    @epoch.setter
    def epoch(self, v):
        pass


def test_blocked_head_memo_changes_nothing(monkeypatch):
    """admit_kv keeps what admitting a head of the queue that did not fit would take, until the prefix
    cache's set of hashes changes (its epoch). The same run with the memo never used (an epoch that
    always moves) gives the same requests, and asks the cache more often."""
    sc = with_overrides(load_scenario(ROOT / "scenarios" / "bursty.yaml"), {"horizon_s": 90.0, "drain_s": 20.0})
    sc = with_overrides(sc, {**KV, "engine.kv_blocks": 2000})
    asked = []
    for cache in (pure.CACHE, _FreshCache):
        calls = [0]
        skip = pure.EngineState.skip

        def counted(self, rid, skip=skip, calls=calls):
            calls[0] += 1
            return skip(self, rid)

        monkeypatch.setattr(pure.EngineState, "skip", counted)
        _use_core(pure, monkeypatch, cache)
        res = Fleet(resolve(sc), 0).run()
        monkeypatch.undo()
        asked.append((calls[0], res))
    (n_memo, a), (n_fresh, b) = asked
    assert n_memo < n_fresh  # the memo was used
    for k in a.requests:
        assert np.array_equal(a.requests[k], b.requests[k], equal_nan=a.requests[k].dtype.kind == "f"), k
    assert a.summary["preemptions"] == b.summary["preemptions"] and a.summary["prefix_hit_rate"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
@pytest.mark.parametrize("v", range(len(VARIANTS)))
def test_compiled_core_matches_pure_every_variant(path, v, monkeypatch):
    mod = compiled_serving()
    _same_run(_variant_scenario(path, v, 60.0), mod, pure, monkeypatch, seed=v)


def test_stale_compiled_core_falls_back_to_pure(monkeypatch):
    """A binary built from other sources (a developer edited serving.py since) is never run."""

    class Stale:
        SOURCE_DIGEST = "0" * 64

    real = import_module
    monkeypatch.setattr(core, "import_module", lambda name: Stale if name == f"{core.PACKAGE}.serving" else real(name))
    monkeypatch.delenv(core.PURE_ENV, raising=False)
    with pytest.warns(UserWarning, match="stale"):
        kind = core.select()
    assert kind.startswith("pure: compiled core stale")
    monkeypatch.setattr(core, "KIND", kind)
    assert core.core("serving") is pure and core.core("kv") is import_module("wadiloco.models.engine.kv")
    monkeypatch.setenv(core.PURE_ENV, "1")
    assert core.select() == "pure"


def test_setup_and_loader_digest_the_same_sources():
    tree = ast.parse((ROOT / "setup.py").read_text())  # (not run: importing setuptools costs half a second)
    imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    keep = [n for n in imports if getattr(n, "module", None) != "setuptools"]
    keep += [n for n in tree.body if getattr(n, "name", None) == "source_digest"]
    names = ("ROOT", "MODELS", "FAST", "_MANIFEST")
    keep += [n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) in names]
    keep += [n for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Tuple)]
    ns: dict = {"__file__": str(ROOT / "setup.py")}
    exec(compile(ast.Module(keep, []), "setup.py", "exec"), ns)
    assert ns["SOURCES"] == core.SOURCES
    assert ns["source_digest"](ROOT / "models") == core.source_digest(ROOT / "models")
    built = core.compiled_module()[0]
    if built is not None:
        assert built.SOURCE_DIGEST == core.source_digest()


def test_fingerprints_repeat_and_tell_runs_apart(tmp_path, capsys):
    """benchmarks/fingerprints.py, the check that a speed change changed no result: a capture repeats
    byte for byte (tape sharing on and off alike), and its comparison names a run whose rows differ."""
    from wadiloco.benchmarks import fingerprints as fp

    grid = dict(scenarios=[ROOT / "scenarios" / "bursty.yaml"], variants={"kv": {"engine.kv_blocks": 1500}})
    a = fp.capture(6.0, policies=("no_sync", "fixed"), **grid)
    assert len(a) == 8 and a == fp.capture(6.0, policies=("no_sync", "fixed"), **grid)
    share_on, share_off = (a[f"bursty/kv/fixed/seed0/share{s}"] for s in (1, 0))
    assert share_on == share_off and a["bursty/kv/fixed/seed0/share1"] != a["bursty/kv/fixed/seed1/share1"]
    assert fp.compare(a, dict(a)) == 0
    b = dict(a)
    plain = fp._scenario(*grid["scenarios"], {}, 6.0)  # (no KV pool: other rows)
    b["bursty/kv/fixed/seed0/share1"] = fp.digest(fp.runner.run_one(plain, 0, "fixed"))
    assert fp.compare(a, b) == 1 and "bursty/kv/fixed/seed0/share1" in capsys.readouterr().out
