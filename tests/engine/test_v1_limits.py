"""vLLM V1's limits in the engine (models/engine/serving.py): async scheduling delays an arrival by the step in
flight and the next, requests past max_model_len are refused and counted, a client's time-out abandons queued
and aborts running requests (their blocks go back), and the prefix cache in the pool's free blocks hits, pins
and gives blocks up as the pool needs them. Every case keeps the engine's invariants, and stepping one
iteration at a time gives the same times as fast-forward (tests/sim/test_queueing.py runs them in a fleet)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wadiloco.benchmarks.harness import run_engine
from wadiloco.models.engine._fast import KVPool, PrefixCache  # the running core's classes
from wadiloco.models.engine.laws import LinearLaw
from wadiloco.models.results import invariants as inv
from wadiloco.models.rng import stream
from wadiloco.models.workload.kinds import Arrivals

G = 2.0**-7  # a step's time, dyadic: sums are exact
LAW = LinearLaw(G, 0.0, 0.0, 0.0)
ENGINE = dict(max_num_seqs=8, max_num_batched_tokens=4096, host_s=0.0)


def arrivals(t, prompt, output, hashes=None) -> Arrivals:
    n = len(t)
    p = np.broadcast_to(np.asarray(prompt, dtype=np.int64), n).copy()
    o = np.broadcast_to(np.asarray(output, dtype=np.int64), n).copy()
    return Arrivals(np.asarray(t, dtype=np.float64), p, o, hashes)


def serve(a, lag=False, max_len=0, patience=math.inf, kv=None, prefix=None, ff=True, **engine):
    sc, _ = run_engine(
        a,
        LAW,
        **{**ENGINE, **engine},
        fast_forward=ff,
        kv=kv,
        prefix=prefix,
        limits=(lag, max_len, patience, prefix is not None and kv is not None),
    )
    inv.check_conservation(0, sc.core.counts(math.inf), len(a), int((~np.isnan(sc.finish)).sum()))
    inv.check_kv(0, sc.core)
    return sc


def test_async_scheduling_delays_an_arrival_by_the_step_in_flight_and_the_next():
    # request 0 runs from 0 (step 0: its prefill); request 1 arrives inside step 1 [G, 2G)
    a = arrivals([0.0, 1.5 * G], 16, 40)
    sync, lag = serve(a), serve(a, lag=True)
    assert sync.admitted[1] == 2 * G  # the next step
    assert lag.admitted[1] == 3 * G  # step 2 was scheduled when step 1 began, without it
    alone = arrivals([5.0], 16, 4)
    assert serve(alone, lag=True).admitted[0] == 5.0  # an idle engine schedules at once


def test_requests_past_max_model_len_are_refused_and_counted():
    a = arrivals(np.arange(6) * 0.5, [100, 3000, 100, 3500, 100, 100], 100)
    sc = serve(a, max_len=3000)
    assert sc.core.refused == 2 and sc.core.counts(math.inf).rejected == 2
    assert np.isnan(sc.finish[[1, 3]]).all() and not np.isnan(sc.finish[[0, 2, 4, 5]]).any()


def test_a_clients_time_out_abandons_queued_and_aborts_running_requests():
    # one slot, outputs of 100 steps: the first runs 101 steps; the second waits past its patience
    a = arrivals([0.0, 0.01, 0.02], 16, 100)
    kv = KVPool(64, 16)
    sc = serve(a, patience=60 * G, kv=kv, max_num_seqs=1)
    assert sc.core.abandoned == 3  # the first aborted running at its deadline, the others never ran
    assert np.isnan(sc.finish).all() and not np.isnan(sc.first_token[0])
    assert kv.used == 0 and not kv.running  # its blocks went back
    patient = serve(a, patience=1e9, kv=KVPool(64, 16), max_num_seqs=1)
    assert patient.core.abandoned == 0 and not np.isnan(patient.finish).any()


def _mixed(n=300, seed=3):
    rng = stream(seed, "arrivals", 0)
    t = np.sort(rng.uniform(0, 3.0, n))
    groups = rng.integers(0, 6, n)
    prompt = 300 + 16 * groups + rng.integers(0, 40, n)
    hashes = tuple(
        tuple(int(g) << 20 | b if b < 10 else (i + 7) << 20 | b for b in range(p // 16))
        for i, (g, p) in enumerate(zip(groups, prompt))
    )
    out = rng.integers(5, 120, n)
    return Arrivals(t, prompt.astype(np.int64), out.astype(np.int64), hashes)


@pytest.mark.parametrize("blocks", [400, 4000], ids=["short-pool", "ample-pool"])
def test_the_prefix_cache_lives_in_the_pools_free_blocks(blocks):
    a = _mixed()
    kv, px = KVPool(blocks, 16), PrefixCache(blocks, 16)
    sc = serve(a, kv=kv, prefix=px, max_num_seqs=32)
    assert px.hit_tokens > 0.2 * px.prompt_tokens  # groups share their first 10 blocks
    assert kv.used + px.size <= kv.cap and px.pinned == 0  # cached blocks are free ones, none pinned at the end
    assert not np.isnan(sc.finish).any()
    if blocks == 400:
        assert kv.preemptions > 0  # a pool that runs short takes cached blocks back, then preempts


@pytest.mark.parametrize("limits", [dict(lag=True), dict(lag=True, patience=0.35, max_len=420), dict(patience=0.2)])
def test_fast_forward_equals_stepping(limits):
    a = _mixed()
    runs = []
    for ff in (True, False):
        kv, px = KVPool(500, 16), PrefixCache(500, 16)
        sc = serve(a, ff=ff, kv=kv, prefix=px, max_num_seqs=24, **limits)
        runs.append((sc.admitted.copy(), sc.first_token.copy(), sc.finish.copy(), sc.core.abandoned, px.hit_tokens))
    for x, y in zip(*runs):
        np.testing.assert_array_equal(x, y)
    if "patience" in limits:
        assert runs[0][3] > 0  # some clients gave up: not vacuous


def test_the_pooled_cache_check_fires():
    a = _mixed(n=60)
    kv, px = KVPool(4000, 16), PrefixCache(4000, 16)
    sc = serve(a, kv=kv, prefix=px, max_num_seqs=32)
    assert px.size > 0
    hs = next(h for h in a.hashes if px.lookup(h))
    px.acquire(hs, 1)  # a pin that no running request holds
    with pytest.raises(inv.InvariantError, match="pinned"):
        inv.check_kv(0, sc.core)
