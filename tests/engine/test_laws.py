"""Latency laws and preemption modes are the engine's seams (models/engine/laws.py, preemption.py).

* A table law (measured step times, interpolated) of a linear law's own values is that linear law: the
  same step times, the same capacity, and the same request times in a run, although the table steps
  one iteration at a time and the linear law fast-forwards in closed form.
* A law without a line for decode runs steps one iteration at a time, and its runs are the
  reference loop's (benchmarks/reference.py, which computes every iteration from the law) bit for bit.
* The table law is reachable from a scenario (engine.latency: table, engine.latency_table), and a
  bad table is an input error naming the file and the row.
* A law written elsewhere runs in either core (law_of: the compiled core calls it through Delegate),
  and laws pickle and compare by their arguments.
* A preemption mode added to models.engine.preemption.MODES is taken by name.
"""

from __future__ import annotations

import json
import pickle
from importlib import import_module
from pathlib import Path

import numpy as np
import pytest

from wadiloco.benchmarks.harness import run_engine
from wadiloco.benchmarks.reference import serve
from wadiloco.models.engine import _fast
from wadiloco.models.engine.capacity import sidecar_capacity_rps
from wadiloco.models.engine.latency import default_latency, load_calibration, table_law
from wadiloco.models.engine.laws import AttentionLaw, LatencyLaw, LinearLaw, TableLaw, law_of
from wadiloco.models.errors import InputError
from wadiloco.models.spec.load import load_scenario, with_overrides
from wadiloco.models.spec.resolve import resolve
from wadiloco.models.workload.kinds import Arrivals

ROOT = Path(__file__).resolve().parents[2]
TIMES = ("admitted", "first_token", "finish")
LINEAR = LinearLaw(4.0e-3, 2.2e-5, 1.3e-8, 2.1e-5)
BATCHES, CONTEXTS, TOKENS = (1, 8, 64, 256), (0, 512, 4096), (16, 512, 8192)


def table_of(law: LinearLaw) -> TableLaw:
    """A table of `law`'s own values: decode steps at every (batch, context) of the grid, lone prefills."""
    decode = [(b, x, law.step_time(0, 0, 0, 0, b, b * x)) for b in BATCHES for x in CONTEXTS]
    return TableLaw(decode, [(t, law.step_time(t, 1, 0, 0, 0, 0)) for t in TOKENS])


def workload(seed: int = 3, n: int = 400) -> Arrivals:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(0.03, n))
    return Arrivals(t, rng.integers(1, 2000, n), rng.integers(1, 300, n))


ENGINE = dict(max_num_seqs=32, max_num_batched_tokens=1024, host_s=0.002)


def test_a_table_of_a_linear_laws_values_gives_its_step_times_and_capacity():
    table = table_of(LINEAR)
    rng = np.random.default_rng(0)
    for _ in range(2000):  # inside the grid and beyond it (a straight line on)
        n_dec, m = int(rng.integers(0, 400)), int(rng.integers(0, 4))
        pf = int(rng.integers(1, 10_000)) * (m > 0)
        sum_ctx = int(rng.integers(0, 8000)) * n_dec
        if n_dec + m:
            want = LINEAR.step_time(pf, m, 0, 0, n_dec, sum_ctx)
            assert table.step_time(pf, m, 0, 0, n_dec, sum_ctx) == pytest.approx(want, rel=1e-12)
    for prompt, output in ((100, 50), (3000, 200), (20, 1)):
        cap = [sidecar_capacity_rps(law, 128, 0.001, prompt, output, 4096) for law in (LINEAR, table)]
        assert cap[1] == pytest.approx(cap[0], rel=1e-12)


def test_a_table_of_a_linear_laws_values_serves_as_the_linear_law():
    """The table steps every iteration; the linear law fast-forwards in closed form: the same times."""
    arr = workload()
    lin, _ = run_engine(arr, LINEAR, fast_forward=True, **ENGINE)
    tab, _ = run_engine(arr, table_of(LINEAR), fast_forward=True, **ENGINE)
    for k in TIMES:
        np.testing.assert_allclose(getattr(tab, k), getattr(lin, k), rtol=0, atol=1e-9)
    assert tab.iterations == lin.iterations and np.isfinite(tab.finish).all()


def test_a_law_without_a_line_steps_per_iteration_as_the_reference_loop_computes():
    law = table_law()  # the H200 rows
    for mod in cores().values():
        st = mod.EngineState(np.zeros(1), [5], [3], law, max_num_seqs=2, max_num_batched_tokens=8, host_s=0.0)
        assert not mod.Steps(st, None, mod.NO_GATE, True).ff  # fast-forward asked for, not taken
    arr = workload(7)
    for kw in (ENGINE, dict(max_num_seqs=8, max_num_batched_tokens=256, host_s=0.0)):
        got, _ = run_engine(arr, law, fast_forward=True, **kw)
        ref = serve(arr.t, arr.prompt, arr.output, law, check=True, **kw)
        for k in TIMES:
            assert np.array_equal(getattr(got, k), getattr(ref, k), equal_nan=True), k
        assert got.iterations == ref.iterations


def test_a_table_takes_its_measured_points_and_interpolates_between_them():
    cal = load_calibration()["latency_model"]
    law = table_law()
    for r in cal["decode"]:
        b, x = r["batch"], r["ctx"]
        assert law.decode_time(b, x) == pytest.approx(r["p50_ms"] / 1e3, rel=1e-12)
        assert law.step_time(0, 0, 0, 0, b, b * x) == pytest.approx(r["p50_ms"] / 1e3, rel=1e-12)
    for r in cal["prefill"]:
        assert law.step_time(r["tokens"], 1, 0, 0, 0, 0) == pytest.approx(r["p50_ms"] / 1e3, rel=1e-12)
    # between batch 8 and 16 at context 512: halfway; between contexts 512 and 2048 at batch 8: a quarter
    d = {(r["batch"], r["ctx"]): r["p50_ms"] / 1e3 for r in cal["decode"]}
    assert law.decode_time(12, 512) == pytest.approx((d[8, 512] + d[16, 512]) / 2, rel=1e-12)
    assert law.decode_time(8, 896) == pytest.approx(0.75 * d[8, 512] + 0.25 * d[8, 2048], rel=1e-12)
    # batch 256 was measured at context 512 only: the 2048 column goes straight on from 64 and 128
    slope = (d[128, 2048] - d[64, 2048]) / 64
    assert law.decode_time(256, 2048) == pytest.approx(d[128, 2048] + 128 * slope, rel=1e-12)
    assert not law.line and not law.detail


def test_laws_compare_pickle_and_cross_cores_by_their_arguments():
    laws = [LINEAR, AttentionLaw(1.0, 2.0, 3.0, 4.0, 5.0), table_law()]
    for law in laws:
        assert pickle.loads(pickle.dumps(law)) == law and hash(law_of(law)) == hash(law)
        assert law_of(law) is law
    assert default_latency().law() == LinearLaw(*(getattr(default_latency(), k) for k in "abcd"))
    assert law_of(default_latency("attention")) == default_latency("attention").law()
    if _fast.KIND == "compiled":  # the compiled core's twins: rebuilt from the arguments, both ways
        for law in laws:
            twin = _fast.core("laws").law_of(law)
            assert type(twin) is not type(law) and twin.args() == law.args()
            assert law_of(twin) == law and pickle.loads(pickle.dumps(twin)).args() == law.args()


class Quadratic(LatencyLaw):
    """A law written outside models.engine.laws: a quadratic in the batch, no line."""

    __slots__ = ("a", "q")

    def __init__(self, a: float, q: float) -> None:
        self.a, self.q = a, q
        self.line = self.detail = False

    def step_time(self, pf, m, pairs, past, n_dec, sum_ctx):
        rows = n_dec + m
        return self.a + self.q * rows * rows + 1e-6 * pf

    def saturated(self, batch, prompt, output, prefill):
        return self.a + self.q * batch * batch + 1e-6 * prefill

    def args(self):
        return self.a, self.q


def cores() -> dict:
    """The serving modules of the pure core and, when it is built and current, the compiled one."""
    out = {"pure": import_module(_fast.PURE["serving"])}
    if _fast.KIND == "compiled":
        out["compiled"] = _fast.serving
    return out


def test_a_law_written_elsewhere_runs_in_either_core_as_the_reference_computes():
    law = Quadratic(0.003, 2e-7)
    arr = workload(11, 200)
    ref = serve(arr.t, arr.prompt, arr.output, law, **ENGINE)
    for name, mod in cores().items():
        st = mod.EngineState(arr.t, arr.prompt, arr.output, law, **ENGINE)
        assert (type(st.law).__name__ == "Delegate") == (name == "compiled")
        env_run(mod, st)
        for k in TIMES:
            assert np.array_equal(getattr(st, k), getattr(ref, k), equal_nan=True), (name, k)


def test_the_table_law_is_a_scenarios_engine_latency(tmp_path):
    sc = load_scenario(ROOT / "scenarios" / "normal.yaml")
    spec = resolve(with_overrides(sc, {"engine.latency": "table"}))
    assert spec.engine.latency == table_law()
    rows = {"decode": [{"batch": 1, "ctx": 0, "p50_ms": 4.0}, {"batch": 64, "ctx": 0, "p50_ms": 6.0}],
            "prefill": [{"tokens": 1, "p50_ms": 4.0}, {"tokens": 1000, "p50_ms": 24.0}]}  # fmt: skip
    (tmp_path / "steps.json").write_text(json.dumps({"latency_model": rows}))
    (tmp_path / "s.yaml").write_text("engine: {latency: table, latency_table: steps.json}\nhorizon_s: 20\n")
    spec = resolve(load_scenario(tmp_path / "s.yaml"))
    law = spec.engine.latency
    assert isinstance(law, TableLaw) and law.decode_time(32.5, 100) == pytest.approx(5e-3)
    assert law.prefill_time(500.5) == pytest.approx(14e-3) and law.step_time(0, 0, 0, 0, 2, 0) == law.decode_time(2, 0)


@pytest.mark.parametrize(
    "yaml, table, needles",
    [
        ("latency: table, latency_table: none.json", None, ["s.yaml", "engine.latency_table", "none.json"]),
        ("latency_table: t.json", "{}", ["engine", "latency_table", "latency: table"]),
        ("latency: table, latency_table: t.json", '{"latency_model": {"decode": []}}', ["latency_model.decode"]),
        ("latency: table, latency_table: t.json", "[1]", ["t.json", "top level"]),
    ],
)
def test_a_bad_latency_table_names_the_file_and_the_field(tmp_path, yaml, table, needles):
    if table is not None:
        (tmp_path / "t.json").write_text(table)
    (tmp_path / "s.yaml").write_text(f"engine: {{{yaml}}}\n")
    with pytest.raises(InputError) as e:
        load_scenario(tmp_path / "s.yaml")
    assert all(n in str(e.value) for n in needles), str(e.value)


def test_a_bad_row_names_its_field(tmp_path):
    rows = {"decode": [{"batch": 1, "ctx": 0, "p50_ms": 4.0}, {"batch": 8, "ctx": 0, "p50_ms": -1}],
            "prefill": [{"tokens": 1, "p50_ms": 4.0}]}  # fmt: skip
    (tmp_path / "t.json").write_text(json.dumps({"latency_model": rows}))
    with pytest.raises(InputError, match=r"t\.json: latency_model\.decode\[1\]\.p50_ms: must be above 0"):
        table_law(tmp_path / "t.json")
    rows["decode"][1] = {"batch": 1, "ctx": 0, "p50_ms": 5.0}
    (tmp_path / "t.json").write_text(json.dumps({"latency_model": rows}))
    with pytest.raises(InputError, match="one time per"):
        table_law(tmp_path / "t.json")


def test_a_preemption_mode_added_to_the_registry_is_taken_by_name(monkeypatch):
    """A mode that counts what it parks and otherwise recomputes (pure core: the compiled one takes the
    modes compiled with it) serves exactly as recompute does."""
    pre = import_module("wadiloco.models.engine.preemption")
    kv_mod = import_module("wadiloco.models.engine.kv")

    class Counting(pre.Recompute):
        __slots__ = ("parks",)

        def __init__(self) -> None:
            pre.Recompute.__init__(self)
            self.parks = 0

        def park(self, st, rid, ctx, left):
            self.parks += 1
            pre.Recompute.park(self, st, rid, ctx, left)

    monkeypatch.setitem(pre.MODES, "counting", Counting)
    serving = import_module(_fast.PURE["serving"])
    arr = workload(5, 300)
    runs = {}
    for mode in ("recompute", "counting"):
        kv = kv_mod.KVPool(400, 16, preemption=mode)
        st = serving.EngineState(arr.t, arr.prompt, arr.output, LINEAR, kv=kv, **{**ENGINE, "max_num_seqs": 16})
        env_run(serving, st)
        runs[mode] = (st, kv)
    (a, ka), (b, kb) = runs["recompute"], runs["counting"]
    assert ka.preemptions == kb.preemptions > 0 and 0 < kb.mode.parks <= kb.preemptions
    for k in TIMES:
        assert np.array_equal(getattr(a, k), getattr(b, k), equal_nan=True)


def env_run(serving, st) -> None:
    """Run an engine alone on a clock of its own (no SimPy): every wait simply passes."""

    class Alone:
        Cut = RuntimeError
        interruptible = False
        gpu_jobs = host_jobs = ()

        def __init__(self) -> None:
            self.t = 0.0

        def wait(self, delay):
            return delay

        def now(self):
            return self.t

    clock = Alone()
    for delay in serving.serve(st, clock, serving.NO_GATE, True):
        clock.t += delay
