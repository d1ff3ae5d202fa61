"""Per-run set-up cuts change no result (their cost is `python -m wadiloco.benchmarks`'s
setup keys): the windowed merge overlap, the request table's sort, the percentiles in one call and the
per-process arrivals cache give exactly what the plain computations give."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import wadiloco.models.results.metrics as M
import wadiloco.sim.build as build
from wadiloco.models.spec.load import load_scenario, with_overrides
from wadiloco.models.spec.resolve import resolve

ROOT = Path(__file__).resolve().parents[2]


def overlaps_every_row(arrival, end, merges):
    """The definition, one pass over every row per phase (the request table's code before the window)."""
    n = len(arrival)
    merge_id, phase, best = np.full(n, -1, dtype=np.int32), np.full(n, -1, dtype=np.int8), np.zeros(n)
    for m in merges:
        for pi, name in enumerate(M.PHASE_NAMES):
            if name not in m.phases:
                continue
            a, b = m.phases[name]
            ov = np.minimum(end, b) - np.maximum(arrival, a)
            hit = (arrival <= b) & (end >= a) & ((merge_id < 0) | (ov > best))
            merge_id[hit] = m.index
            phase[hit] = pi
            best[hit] = np.maximum(ov[hit], 0.0)
    return merge_id, phase


def random_table(rng, n: int, horizon: float = 100.0):
    """Arrivals with ties (rounded), lifetimes mixing short, long and unfinished, and merges whose
    phases start before, inside and after the requests, some phases skipped."""
    arrival = np.sort(np.round(rng.uniform(0, horizon, n), int(rng.integers(0, 3))))
    life = rng.exponential(rng.choice([0.3, 3.0, 30.0]), n) * np.where(rng.random(n) < 0.02, 50.0, 1.0)
    end = np.where(rng.random(n) < 0.05, np.inf, arrival + life)
    merges = []
    for i in range(int(rng.integers(1, 8))):
        x, phases = float(np.round(rng.uniform(-5, horizon + 5), 1)), {}
        for name in M.PHASE_NAMES:
            if rng.random() < 0.8:
                d = float(np.round(rng.exponential(3.0), 1))
                phases[name] = (x, x + d)
                x += d
        merges.append(SimpleNamespace(index=i, phases=phases, duration=x))
    return arrival, end, merges


@pytest.mark.parametrize("block", [1, 3, 16, M.OVERLAP_BLOCK])
def test_windowed_merge_overlap_is_the_pass_over_every_row(block, monkeypatch):
    monkeypatch.setattr(M, "OVERLAP_BLOCK", block)
    rng = np.random.default_rng(block)
    overlapping = 0
    for _ in range(150):
        arrival, end, merges = random_table(rng, int(rng.integers(1, 3000)))
        want = overlaps_every_row(arrival, end, merges)
        got = M.merge_overlaps(arrival, end, merges)
        assert all(g.dtype == w.dtype and np.array_equal(g, w) for g, w in zip(got, want))
        overlapping += int((want[0] >= 0).sum())
    assert overlapping > 10_000  # the tables do overlap merges


def test_windowed_merge_overlap_sees_long_lived_rows_before_the_window():
    """One early request lasting past a late merge: outside every short row's window, still found."""
    arrival = np.concatenate([[0.0], np.linspace(1.0, 99.0, 5000)])
    end = np.concatenate([[95.0], np.linspace(1.0, 99.0, 5000) + 0.5])
    merges = [SimpleNamespace(index=0, phases={"allreduce": (90.0, 91.0)})]
    got = M.merge_overlaps(arrival, end, merges)
    assert got[0][0] == 0 and got[1][0] == M.PHASE_NAMES.index("allreduce")
    assert all(np.array_equal(g, w) for g, w in zip(got, overlaps_every_row(arrival, end, merges)))


def test_request_table_rows_in_lexsort_order():
    """Sorted by arrival, ties by sidecar then each sidecar's own order, as np.lexsort((sidecar, arrival))."""
    rng = np.random.default_rng(7)
    per = []
    for _ in range(5):
        t = np.sort(np.round(rng.uniform(0, 10, 400)))  # whole seconds: many ties across sidecars
        per.append((t, rng.integers(1, 9, 400), rng.integers(1, 9, 400), t, t + 0.1, t + 0.2))
    r = M.request_table(per, None, None, [])
    sidecar = np.concatenate([np.full(len(p[0]), s) for s, p in enumerate(per)])
    order = np.lexsort((sidecar, np.concatenate([p[0] for p in per])))
    assert np.array_equal(r["sidecar"], sidecar[order])
    assert np.array_equal(r["prompt"], np.concatenate([p[1] for p in per])[order])


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # (inf - inf between two +inf order statistics)
def test_percentiles_in_one_call_equal_one_call_each():
    rng = np.random.default_rng(3)
    for n in (0, 1, 2, 3, 7, 100, 1001, 65536):
        x = rng.lognormal(0.0, 1.5, n)
        x[rng.random(n) < 0.1] = np.nan
        if n % 2:  # ties and infinities (a sorted copy puts NaN after +inf)
            x[rng.random(n) < 0.2] = 1.0
            x[rng.random(n) < 0.05] = np.inf
        x0 = x.copy()
        kept = x[~np.isnan(x)]
        for qs in ((50, 95, 99), (0.0, 100.0, float(rng.uniform(0, 100))), (100.0,)):
            got = M._pct(x, *qs)  # (its order statistics put in place by a partition, not a sort)
            want = [float(np.percentile(kept, q)) if len(kept) else math.nan for q in qs]
            assert [g if g == g else None for g in got] == [w if w == w else None for w in want]
            assert np.array_equal(x, x0, equal_nan=True)  # (the column is left as it was)
    assert all(math.isnan(v) for v in M._pct(np.array([np.nan]), 50, 95))


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # (np.percentile's own inf - inf)
def test_sorted_percentiles_are_numpys_bit_for_bit():
    """models.results.metrics.sorted_percentiles repeats np.percentile's arithmetic on a sorted array: the same
    bits (NaN from inf - inf included) for any q in [0, 100], on ties, infinities and tiny arrays. A
    numpy that changes its method fails here, not silently in a result."""
    rng = np.random.default_rng(11)
    for trial in range(4000):
        n = int(rng.integers(1, 40))
        x = [
            rng.random(n),
            rng.integers(0, 3, n).astype(float),  # ties
            np.where(rng.random(n) < 0.3, np.inf, rng.exponential(size=n)),
            np.where(rng.random(n) < 0.3, -np.inf, rng.normal(size=n)),
            np.full(n, -0.0),
        ][trial % 5]
        q = [50, 95, 99] if trial % 2 else [float(rng.uniform(0, 100)), 0.0, 100.0, float(rng.integers(0, 101))]
        xs = np.sort(x)
        want = np.percentile(xs, q)
        assert np.array(M.sorted_percentiles(xs, q)).tobytes() == want.tobytes(), (x, q)


def _resolved(**overrides):
    sc = with_overrides(load_scenario(ROOT / "scenarios" / "bursty.yaml"), {"horizon_s": 60.0, **overrides})
    return resolve(sc)


def _arrivals(r, seed):
    return build.make_arrivals(r, seed)


def test_arrivals_shared_only_between_runs_of_the_same_draw(monkeypatch):
    monkeypatch.setattr(build, "_ARRIVALS", {})
    r = _resolved()
    first, cap = _arrivals(r, 1)
    again, cap2 = _arrivals(_resolved(), 1)  # another object, same contents: the same draw, shared
    assert cap2 == cap and all(a is b for a, b in zip(again, first)) and again is not first
    build._ARRIVALS.clear()
    fresh, cap3 = _arrivals(r, 1)
    assert cap3 == cap and fresh[0] is not first[0]
    for a, b in zip(fresh, first):
        assert np.array_equal(a.t, b.t) and np.array_equal(a.prompt, b.prompt) and np.array_equal(a.output, b.output)
    for other in (
        _arrivals(r, 2)[0],
        _arrivals(_resolved(horizon_s=61.0), 1)[0],
        _arrivals(_resolved(**{"workload.load": 0.3}), 1)[0],
        _arrivals(_resolved(**{"engine.max_num_seqs": 64}), 1)[0],  # another capacity, another rate
    ):
        assert len(other) == len(first) and not all(len(a) == len(b) for a, b in zip(other, first))
    assert len(build._ARRIVALS) <= build.ARRIVALS_CACHE_SIZE
    with pytest.raises(ValueError):
        first[0].t[0] = 1.0  # shared between runs: read-only


def test_arrivals_hash_of_shared_arrivals_is_the_hash_of_their_contents(monkeypatch):
    from wadiloco.models.workload import kinds as W

    monkeypatch.setattr(W, "_HASHED", {})
    arrs, _ = _arrivals(_resolved(), 4)
    copies = [W.Arrivals(a.t.copy(), a.prompt.copy(), a.output.copy()) for a in arrs]
    first = W.arrivals_hash(arrs)
    assert W.arrivals_hash(arrs) == first == W.arrivals_hash(copies)  # remembered, and what it would compute
    shifted = [W.Arrivals(a.t + 1e-9, a.prompt, a.output) for a in copies]
    assert W.arrivals_hash(shifted) != first and len(W._HASHED) <= 4


def test_kept_placement_samplers_draw_what_a_new_one_draws():
    from wadiloco.models.policies.placement import UniformSampler, final_window, sample_placement

    lo, hi = final_window(1300, 512, 8)
    for seed in range(5):
        want = UniformSampler(5, 128, 512, lo, hi).sample(np.random.default_rng(seed))
        assert sample_placement(5, 128, 512, lo, hi, np.random.default_rng(seed)) == want
    assert sample_placement(5, 128, 512, lo, hi, np.random.default_rng(9)) != want  # draws differ by stream


def test_a_workers_baseline_latencies_unpacked_once_per_packed_bytes(monkeypatch):
    from wadiloco.experiments.sweep import worker

    monkeypatch.setattr(worker, "_BASELINES", {})
    e2e = np.random.default_rng(5).lognormal(0.0, 1.0, 5000)
    blob = worker.pack_e2e(e2e)
    got = worker._baseline_e2e(blob)
    assert np.array_equal(got, worker.unpack_e2e(blob)) and not got.flags.writeable
    assert worker._baseline_e2e(bytes(bytearray(blob))) is got  # equal bytes, another object (a new task)
    other = worker._baseline_e2e(worker.pack_e2e(e2e + 1.0))
    assert other is not got and np.array_equal(other, worker.unpack_e2e(worker.pack_e2e(e2e + 1.0)))


@pytest.mark.parametrize("name, policy", [("bursty", "fixed"), ("normal", "no_sync"), ("pressure_heavy", "no_sync")])
def test_lazy_timeline_filled_in_bulk_is_the_row_loop(name, policy, monkeypatch):
    """sim.monitor fills a planned run's pending timeline rows at once by sorted searches (_fill_bulk);
    the same columns row by row (BULK_ROWS out of reach), on runs whose timeline is filled lazily."""
    import wadiloco.sim.monitor as monitor
    from wadiloco.sim.fleet import Fleet

    sc = with_overrides(load_scenario(ROOT / "scenarios" / f"{name}.yaml"), {"horizon_s": 90.0, "drain_s": 10.0})

    def timeline(rows: int):
        monkeypatch.setattr(monitor, "BULK_ROWS", rows)
        calls, real = [], monitor.Monitor._fill_bulk
        monkeypatch.setattr(monitor.Monitor, "_fill_bulk", lambda m, lo, hi: calls.append(hi - lo) or real(m, lo, hi))
        fleet = Fleet(resolve(sc, policy, {"H": 128} if policy == "fixed" else None), 2)
        assert fleet.monitor.lazy
        tl = dict(fleet.run().timeline)  # (read here: a run's timeline is filled when first read)
        monkeypatch.undo()
        return tl, calls

    (bulk, used), (loop, unused) = timeline(32), timeline(10**9)
    assert used and not unused and sum(used) > 50  # the sorted searches filled most rows
    assert bulk.keys() == loop.keys()
    for k in bulk:
        assert np.asarray(bulk[k]).tobytes() == np.asarray(loop[k]).tobytes(), k


def test_a_runs_timeline_is_filled_when_first_read_and_pickles_as_a_dict():
    """Fleet.run hands back the timeline unfilled (a sweep reads few); read or pickled, it is the
    monitor's timeline as filled at the run's end, column for column."""
    import pickle

    from wadiloco.sim.fleet import Fleet

    sc = with_overrides(load_scenario(ROOT / "scenarios" / "bursty.yaml"), {"horizon_s": 60.0, "drain_s": 5.0})
    fleet = Fleet(resolve(sc), 1)
    res = fleet.run()
    assert res.timeline._cols is None  # nothing filled yet
    back = pickle.loads(pickle.dumps(res.timeline))
    assert type(back) is dict and res.timeline._monitor is None  # filled once, the monitor let go
    want = fleet.monitor.timeline()  # (filling again adds no rows)
    assert list(back) == list(want) == list(res.timeline) and len(want["t"]) > 50
    for k in want:
        assert back[k].tobytes() == want[k].tobytes() == res.timeline[k].tobytes(), k
