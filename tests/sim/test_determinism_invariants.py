"""Same scenario + seed => identical results (in-process and across processes); invariants hold
on every regime; the invariant checks themselves catch broken runs."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from shipped import load_shipped

from wadiloco.models.results import invariants as inv
from wadiloco.models.spec.load import with_overrides
from wadiloco.models.workload.kinds import Arrivals, arrivals_hash
from wadiloco.sim.fleet import simulate

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))


def _short(path, horizon=120.0, **more):
    sc = load_shipped(path)
    return with_overrides(
        sc,
        {
            "horizon_s": horizon,
            "drain_s": 60.0,
            "merge.h_min": 32,
            "merge.h_max": 96,
            "policy.params": {"H": 64},
            **more,
        },
    )


def _table_arrivals_hash(r: dict[str, np.ndarray], n_sidecars: int) -> str:
    per = [r["sidecar"] == s for s in range(n_sidecars)]
    return arrivals_hash([Arrivals(r["arrival"][m], r["prompt"][m], r["output"][m]) for m in per])


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_invariants_hold_on_every_regime(path):
    sc = _short(path)
    res = simulate(sc, 7, check=True)
    s = res.summary
    assert s["requests"] > 0 and s["merges"] >= 1
    assert s["peak_link_load"] <= 1 + 1e-9
    r = res.requests
    done = r["completed"]
    # the table holds exactly the arrivals the fleet drew (each once, on its own sidecar, with its
    # own token lengths): rebuilt from the table, they hash to the summary's hash of the inputs
    assert _table_arrivals_hash(r, sc.fleet.n_sidecars) == s["arrivals_hash"]
    assert s["completed"] == int(np.sum(np.isfinite(r["finish"]))) and s["requests"] == len(r["arrival"])
    assert np.all(r["finish"][done] <= s["sim_time_s"] + 1e-9)  # a finish is within the simulated time
    # time is monotone within each request
    assert np.all(r["admitted"][done] >= r["arrival"][done])
    assert np.all(r["finish"][done] >= r["first_token"][done])


def test_same_seed_identical_requests():
    sc = _short(ROOT / "scenarios" / "bursty.yaml")
    a, b = simulate(sc, 11), simulate(sc, 11)
    for k in a.requests:
        np.testing.assert_array_equal(a.requests[k], b.requests[k])
    sa = {k: v for k, v in a.summary.items() if k != "wall_time_s"}
    sb = {k: v for k, v in b.summary.items() if k != "wall_time_s"}
    assert json.dumps(sa, sort_keys=True, default=str) == json.dumps(sb, sort_keys=True, default=str)
    c = simulate(sc, 12)
    assert a.summary["arrivals_hash"] != c.summary["arrivals_hash"]


def test_policies_share_arrivals_on_a_seed():
    sc = _short(ROOT / "scenarios" / "bursty.yaml")
    a = simulate(sc, 5, "no_sync", {})
    b = simulate(sc, 5, "fixed", {"H": 48})
    assert a.summary["arrivals_hash"] == b.summary["arrivals_hash"]


def test_identical_across_processes(tmp_path, derive_scenario):
    normal = derive_scenario(ROOT / "scenarios" / "normal.yaml", tmp_path, {"horizon_s": 200, "drain_s": 30})
    outs = []
    for i in range(2):
        d = tmp_path / f"o{i}"
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "wadiloco.experiments.cli",
                "run",
                str(normal),
                "--seed",
                "3",
                "--out",
                str(d),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env={**__import__("os").environ, "PYTHONHASHSEED": str(i + 1)},
        )
        assert r.returncode == 0, r.stderr
        outs.append(d)
    assert json.loads((outs[0] / "summary.json").read_text())["merges"] >= 1  # 400 steps, fixed H=256
    assert (outs[0] / "requests.csv").read_bytes() == (outs[1] / "requests.csv").read_bytes()
    assert (outs[0] / "merges.csv").read_bytes() == (outs[1] / "merges.csv").read_bytes()


def _openblas_dynamic() -> bool:
    """numpy's BLAS is an OpenBLAS that picks its kernels by CPU (OPENBLAS_CORETYPE forces one), on an
    x86-64 CPU with AVX2 (so both kernels below can run)."""
    try:
        cfg = str(np.show_config(mode="dicts"))
        flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    except Exception:
        return False
    return "DYNAMIC_ARCH" in cfg and "openblas" in cfg.lower() and " avx2" in flags


@pytest.mark.skipif(not _openblas_dynamic(), reason="needs numpy on an OpenBLAS with DYNAMIC_ARCH, on x86-64 with AVX2")
def test_identical_across_blas_kernels(tmp_path, derive_scenario):
    """Results must not depend on the machine: OpenBLAS's Haswell and Sandybridge kernels round
    differently (a latency fit or a correlation through the BLAS moved every golden figure by ulps on
    another CPU), so the same runs under each must write the same bytes. The online forecaster and
    a testbed scenario cover the policy's autocorrelation and the testbed's pressure correlation."""
    runs = {
        "bursty": ("bursty.yaml", ["--policy", "online_forecast"]),
        "testbed": ("testbed/stage10_1p5b_highcon.yaml", []),
    }
    for name, (rel, args) in runs.items():
        sc = derive_scenario(ROOT / "scenarios" / rel, tmp_path / name, {"horizon_s": 120, "drain_s": 20})
        outs = []
        for core in ("Haswell", "Sandybridge"):
            d = tmp_path / f"{name}-{core}"
            r = subprocess.run(
                [sys.executable, "-m", "wadiloco.experiments.cli", "run", str(sc), *args, "--out", str(d)],
                capture_output=True,
                text=True,
                timeout=300,
                env={**__import__("os").environ, "OPENBLAS_CORETYPE": core},
            )
            assert r.returncode == 0, r.stderr
            outs.append(d)
        for f in ("requests.csv", "merges.csv"):
            assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes(), (name, f)
        a, b = (
            {k: v for k, v in json.loads((d / "summary.json").read_text()).items() if "wall" not in k} for d in outs
        )
        assert a == b, name
    # and the numerics themselves, on inputs where the two kernels' dot products differ
    probe = (
        "import numpy as np; from wadiloco.models.engine.latency import fit_latency; "
        "from wadiloco.models.testbed.metrics import _corr; "
        "from wadiloco.models.policies.forecast import detect_season; "
        "r = np.random.default_rng(0); x, y = r.random(801), r.random(801); "
        "print([fit_latency(method='exact', form=f).a.hex() for f in ('linear', 'attention')], "
        "_corr(x, y).hex(), detect_season(np.sin(np.arange(400) / 7.0) + x[:400], 4))"
    )
    env = __import__("os").environ
    got = [
        subprocess.run(
            [sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            timeout=120,
            env={**env, "OPENBLAS_CORETYPE": c},
        ).stdout
        for c in ("Haswell", "Sandybridge")
    ]
    assert got[0] and got[0] == got[1]


# ---- the checks catch what they claim to catch ------------------------------------------------
def test_corridor_check_catches_violations():
    inv.check_corridor([128, 256, 384], 128, 512, 400)
    with pytest.raises(inv.InvariantError):
        inv.check_corridor([100], 128, 512, 300)
    with pytest.raises(inv.InvariantError):
        inv.check_corridor([128, 700], 128, 512, 800)
    with pytest.raises(inv.InvariantError):
        inv.check_corridor([128], 128, 512, 800)  # tail longer than h_max


def test_request_checks_catch_violations():
    sc = _short(ROOT / "scenarios" / "normal.yaml", horizon=60.0)
    res = simulate(sc, 1)
    n = len(res.requests["arrival"])
    inv.check_requests(res.requests, n)
    with pytest.raises(inv.InvariantError):
        inv.check_requests(res.requests, n + 1)
    broken = dict(res.requests)
    broken["finish"] = broken["finish"].copy()
    i = int(np.flatnonzero(res.requests["completed"])[0])
    broken["finish"][i] = broken["first_token"][i] - 1.0
    with pytest.raises(inv.InvariantError):
        inv.check_requests(broken, n)
    with pytest.raises(inv.InvariantError):
        inv.check_peak_load(1.01)
    assert res.merges
    m = res.merges[0]
    inv.check_merges([m])
    with pytest.raises(inv.InvariantError):
        inv.check_merges([replace(m, end=m.start - 1)])


def test_conservation_check_fires_when_an_engine_drops_a_request(monkeypatch):
    """The engine silently loses one admitted request: the request table still has a row per
    arrival (check_requests passes), but the engine's own counts no longer sum to its arrivals."""
    # pure: a compiled EngineState (an extension type) cannot be patched
    import wadiloco.models.engine.serving as serving
    import wadiloco.sim.build as build
    import wadiloco.sim.engine as engine

    sc = _short(ROOT / "scenarios" / "normal.yaml", horizon=60.0)
    simulate(sc, 1, check=True)  # intact: passes
    admit = serving.EngineState.admit
    dropped = []

    def lossy(self, now, n_dec, sum_ctx):
        if not dropped and len(self.waiting) > 1:
            dropped.append(self.waiting.pop_front())  # gone from every queue, never booked
        return admit(self, now, n_dec, sum_ctx)

    monkeypatch.setattr(engine, "EngineState", serving.EngineState)
    monkeypatch.setattr(engine, "serve", serving.serve)
    monkeypatch.setattr(build, "KVPool", serving.POOL)
    monkeypatch.setattr(serving.EngineState, "admit", lossy)
    with pytest.raises(inv.InvariantError, match="request conservation, sidecar"):
        simulate(sc, 1, check=True)
    assert dropped


def test_conservation_check_compares_with_the_table():
    from wadiloco.models.engine.serving import Counts

    inv.check_conservation(0, Counts(1, 2, 3, 4, 5), 15, 5)
    with pytest.raises(inv.InvariantError, match="sum to 14, not 15"):
        inv.check_conservation(0, Counts(1, 2, 3, 3, 5), 15, 5)
    with pytest.raises(inv.InvariantError, match="table completed 4"):
        inv.check_conservation(0, Counts(1, 2, 3, 4, 5), 15, 4)
