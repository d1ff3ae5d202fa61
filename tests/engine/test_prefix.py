"""Prefix caching (models/engine/prefix.py, engine.prefix_cache): a hand-counted hit count on a tiny trace,
LRU eviction and pinning by hand, cached tokens skipping prefill (the engine API coloc reuses), KV
conservation with shared blocks, a 0-capacity cache equal to none, and the Mooncake trace's hit rate
against the paper's. Fast-forward and lookahead bit-identity with the cache on are cases of
tests/sim/test_queueing.py (bursty-kv-prefix)."""

from __future__ import annotations

import json
import random
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shipped import load_shipped

from wadiloco.benchmarks.harness import run_engine
from wadiloco.models.engine._fast import KVPool, PrefixCache  # the classes the running core takes (compiled or pure)
from wadiloco.models.engine.latency import LatencyModel
from wadiloco.models.engine.prefix import shared_prefix_hashes
from wadiloco.models.results import invariants as inv
from wadiloco.models.rng import stream
from wadiloco.models.spec.load import load_scenario, with_overrides
from wadiloco.models.workload.kinds import Arrivals
from wadiloco.models.workload.traces import load_trace
from wadiloco.sim.engine import Sidecar
from wadiloco.sim.fabric import Fabric
from wadiloco.sim.fleet import simulate

ROOT = Path(__file__).resolve().parents[2]
MOONCAKE = ROOT.parent.parent / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"
if not MOONCAKE.is_file():
    MOONCAKE = ROOT.parent / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"
A, B, C, D = 2.0**-8, 2.0**-12, 2.0**-16, 2.0**-10  # dyadic: every sum below is exact
LAT = LatencyModel(A, B, C, D, r2=1.0, n=0, max_rel_err=0.0)
ENGINE = dict(max_num_seqs=8, max_num_batched_tokens=8192, host_s=0.0)

# (prompt, hash_ids) 10 s apart: each is done before the next arrives
TINY = [(1024, [1, 2]), (1536, [1, 2, 3]), (600, [1, 9]), (1024, [1, 2]), (512, [4])]


def _tiny_trace(tmp_path: Path):
    lines = [
        json.dumps({"timestamp": 10_000 * i, "input_length": p, "output_length": 2, "hash_ids": h})
        for i, (p, h) in enumerate(TINY)
    ]
    path = tmp_path / "tiny.jsonl"
    path.write_text("\n".join(lines) + "\n")
    tr = load_trace(path)
    return Arrivals(tr.t, tr.prompt, tr.output, tr.hashes)


@pytest.mark.parametrize("ff", [True, False], ids=["fast-forward", "per-iteration"])
def test_tiny_trace_hit_count_by_hand(tmp_path, ff):
    """Request 0 misses; 1 hits blocks 1, 2 (1,024 tokens); 2 hits block 1 (512); 3 hits both of its
    blocks but recomputes its last token (1,023); 4 misses: 2,559 of 4,696 prompt tokens. Request 1's
    first token comes after a prefill of its 512 uncached tokens over a context of 1,536."""
    arr = _tiny_trace(tmp_path)
    assert arr.hashes == tuple(tuple(h) for _, h in TINY)
    px = PrefixCache(100)
    s, _ = run_engine(arr, LAT, fast_forward=ff, prefix=px, **ENGINE)
    assert (px.hit_tokens, px.prompt_tokens) == (0 + 1024 + 512 + 1023 + 0, 4696)
    adm, ft, fin = s.results()
    assert ft[1] == 10.0 + A + B * 512 + D  # only the uncached tokens are prefilled
    assert fin[1] == ft[1] + A + C * 1537 + D  # its decode reads the whole context
    assert ft[3] == 30.0 + A + B * 1 + D
    assert list(px.entries) == [3, 9, 1, 2, 4] and not px.pins  # LRU order, all unpinned


def test_lru_eviction_and_pins_by_hand():
    px = PrefixCache(2)
    px.insert([10])
    px.insert([20])
    assert px.lookup([10, 20]) == 2 and px.lookup([20, 10]) == 2 and px.lookup([30, 10]) == 0
    px.acquire((10,), 1)  # 10 becomes the most recently used, pinned by request 0
    px.insert([30])  # full: evicts the least recently used unpinned entry, 20
    assert list(px.entries) == [10, 30]
    px.acquire((30,), 1)
    px.insert([40])  # every entry pinned: not cached
    assert list(px.entries) == [10, 30] and px.pins == {10: 1, 30: 1}
    px.release((10,), 1)
    px.insert([40, 50])  # 10 unpinned: evicted for 40; 50 finds only 30 (pinned) and 40 (unpinned): evicts 40
    assert list(px.entries) == [30, 50]
    px.release((30,), 1)
    assert not px.pins


def test_cached_tokens_api_skips_prefill():
    """Engine API (coloc's disaggregated decode, a remote KV store): a request handed in with its
    whole prompt cached computes no prompt token, one with half of it the other half; both count
    their whole prompt as context."""
    env = simpy.Environment()
    gpu, cpu = Fabric(env, "t/gpu").link("gpu0", 1.0), Fabric(env, "t/cpu").link("cpu", 1.0)
    empty = Arrivals(np.empty(0), np.empty(0, np.int64), np.empty(0, np.int64))
    s = Sidecar(env, 0, empty, LAT, gpu=gpu, host=cpu, **ENGINE)
    s.core.route_in(0.0, 1000, 2, 1000)  # (before the run starts, as a router hands requests over)
    s.core.route_in(0.0, 1000, 2, 500)
    with pytest.raises(ValueError, match="cached prompt tokens"):
        s.core.route_in(0.0, 10, 2, 11)
    env.run()
    adm, ft, fin = s.results()
    assert list(ft) == [A + B * 500 + D * 2] * 2  # one iteration: 0 + 500 prompt tokens
    assert list(fin) == [ft[0] + A + C * 2002 + D * 2] * 2 and not any(s.core.skipped)


def _random_requests(seed: int, n: int):
    rnd = random.Random(seed)
    t = np.cumsum([rnd.randint(0, 4) / 64 for _ in range(n)])
    prompt = np.array([rnd.randint(1, 1500) for _ in range(n)])
    hashes = shared_prefix_hashes(prompt, 0, stream(seed, "test"), 0.7, 3, 1024)
    return Arrivals(t, prompt, np.array([rnd.randint(1, 400) for _ in range(n)]), hashes)


def test_kv_conservation_with_shared_blocks_and_the_check_fires():
    """Random requests sharing three 1,024-token system prompts through a small pool (preempting
    often) and a small cache (evicting): blocks the cache holds for a request are held once."""
    arr = _random_requests(5, 80)
    px = PrefixCache(6)
    kv = KVPool(350, 16, watermark=0.01, reserved=6 * 512 // 16)
    s, env = run_engine(arr, LAT, max_num_seqs=16, max_num_batched_tokens=512, host_s=0.0, kv=kv, prefix=px, until=1e-9)
    checked = shared_seen = 0
    while env.peek() < np.inf:
        env.step()
        inv.check_kv(0, s.core)
        checked += 1
        shared_seen += bool(kv.shared)
    assert kv.preemptions > 10 and shared_seen > 100 and px.hit_tokens > 5000 and s.counts(np.inf).finished == 80
    assert kv.used == 0 and not kv.shared and not px.pins
    kv.set_share(0, 1)  # blocks counted shared for a request that is not running
    with pytest.raises(inv.InvariantError, match="KV conservation, sidecar 0"):
        inv.check_kv(0, s.core)


def _mooncake(extra: dict):
    sc = load_shipped(ROOT / "scenarios" / "mooncake_synthetic.yaml")  # skips without the trace
    base = {
        "horizon_s": 30.0,
        "drain_s": 30.0,
        "fleet.islands": 2,
        "fleet.hosts_per_island": 1,
        "workload.path": str(MOONCAKE),
    }
    return with_overrides(sc, {**base, **extra})


def test_a_zero_capacity_cache_is_no_cache():
    plain = simulate(_mooncake({}), seed=1)
    for cap in (0, 511):  # 0, and less than one 512-token block
        zero = simulate(_mooncake({"engine.prefix_cache": cap}), seed=1)
        for k in plain.requests:
            np.testing.assert_array_equal(plain.requests[k], zero.requests[k], err_msg=k)
        drop = ("wall_time_s", "scenario_digest", "provenance")
        same = {k: v for k, v in zero.summary.items() if k not in drop}
        assert json.dumps(same, default=str) == json.dumps(
            {k: v for k, v in plain.summary.items() if k not in drop}, default=str
        )
    on = simulate(_mooncake({"engine.prefix_cache": 10**7}), seed=1)
    assert "prefix_hit_rate" not in plain.summary and 0 < on.summary["prefix_hit_rate"] < 1


def test_a_workload_without_block_hashes_hits_nothing_and_is_told_so():
    """normal.yaml's requests carry no block hashes: with a prefix cache on, every prompt is unique, so
    the run hits nothing (it used to crash in take_cached) and the run's notes say why."""
    from wadiloco.models.spec.limits import notes

    sc = with_overrides(
        load_scenario(ROOT / "scenarios" / "normal.yaml"),
        {"horizon_s": 10, "drain_s": 5, "fleet.islands": 1, "fleet.hosts_per_island": 1, "engine.prefix_cache": 10**6},
    )
    res = simulate(sc, seed=0)
    assert res.summary["requests"] > 0 and res.summary["prefix_hit_rate"] == 0
    assert any("nothing will hit" in n for n in notes(sc, "no_sync"))
    assert not any("nothing will hit" in n for n in notes(_mooncake({"engine.prefix_cache": 10**6}), "no_sync"))


def test_mooncake_trace_hit_rate_against_the_paper():
    """Every request of the shipped synthetic trace in order through one unlimited cache: 65.1% of
    prompt tokens hit, the paper's Table 2 cache ratio for this trace is 66% (docs/engine.md)."""
    if not MOONCAKE.is_file():
        pytest.skip("the Mooncake trace is not next to the checkout")
    tr = load_trace(MOONCAKE)
    px = PrefixCache(10**6)
    for p, hs in zip(tr.prompt.tolist(), tr.hashes):
        k = px.lookup(hs)
        px.hit_tokens += min(k * 512, p - 1)
        px.prompt_tokens += p
        px.insert(hs)
    assert round(px.hit_rate(), 4) == 0.6512


def test_prefix_affinity_keeps_prefixes_cached_better_than_round_robin():
    """Four sidecars on a slice of the Mooncake trace, unlimited caches: requests that share their
    first block go to one sidecar, so they hit there (round robin scatters them)."""
    extra = {"fleet.islands": 2, "fleet.hosts_per_island": 2, "engine.prefix_cache": 10**8, "horizon_s": 60.0}
    rr = simulate(_mooncake({**extra, "router.name": "round_robin"}), seed=1).summary
    pa = simulate(_mooncake({**extra, "router.name": "prefix_affinity"}), seed=1).summary
    assert rr["requests"] == pa["requests"] > 100
    assert pa["prefix_hit_rate"] > 2 * rr["prefix_hit_rate"] > 0, (pa["prefix_hit_rate"], rr["prefix_hit_rate"])


class _ReferenceCache:
    """The prefix cache as it was first written (an OrderedDict LRU, dict pins): the model the
    slotted cache with its own hash table must match call for call."""

    def __init__(self, capacity: int):
        self.capacity, self.entries, self.pins = capacity, OrderedDict(), {}

    def lookup(self, hashes) -> int:
        k = 0
        for h in hashes:
            if h not in self.entries:
                break
            k += 1
        return k

    def acquire(self, hashes, k) -> None:
        for h in hashes[:k]:
            self.entries.move_to_end(h)
            self.pins[h] = self.pins.get(h, 0) + 1

    def release(self, hashes, k) -> None:
        for h in hashes[:k]:
            self.pins[h] -= 1
            if not self.pins[h]:
                del self.pins[h]

    def insert(self, hashes) -> None:
        for h in hashes:
            if h in self.entries:
                self.entries.move_to_end(h)
                continue
            if len(self.entries) >= self.capacity:
                victim = next((e for e in self.entries if e not in self.pins), None)
                if victim is None:
                    return
                del self.entries[victim]
            self.entries[h] = None


class _Requests:
    """Which blocks each request pins (the engine's part: EngineState.pinned and the request's
    hashes), driving both caches: a request holds one set of pins at a time."""

    def __init__(self, *caches):
        self.caches, self.held = caches, {}

    def release(self, rid) -> None:
        hashes = self.held.pop(rid, ())
        for c in self.caches:
            c.release(hashes, len(hashes))

    def acquire(self, rid, hashes, k) -> None:
        assert rid not in self.held  # (released first)
        if k:
            self.held[rid] = tuple(hashes[:k])
        for c in self.caches:
            c.acquire(hashes, k)


# hashes from a few values (hits, collisions in the table) and the 64-bit extremes
HASHES = st.lists(
    st.sampled_from([0, 1, 2, 3, 5, 8, 13, 1 << 16, 3 << 16, (1 << 48) | 7, 2**63 - 1, -(2**63)])
    | st.integers(-(2**63), 2**63 - 1),
    max_size=6,
)
OPS = st.lists(st.tuples(st.sampled_from(["admit", "insert", "release"]), st.integers(0, 5), HASHES), max_size=120)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(capacity=st.integers(1, 150), ops=OPS)
def test_cache_matches_the_reference_lru(capacity, ops):
    """Random admissions (lookup, then acquire), inserts and releases on the running core's cache and
    on the reference: the same hits, the same entries in the same LRU order, the same pins."""
    px, ref = PrefixCache(capacity), _ReferenceCache(capacity)
    reqs = _Requests(px, ref)
    for op, rid, hashes in ops:
        if op == "admit":
            reqs.release(rid)  # (its pins go before it looks again)
            k = px.lookup(hashes)
            assert k == ref.lookup(hashes)
            reqs.acquire(rid, tuple(hashes), k)
        elif op == "insert":
            px.insert(tuple(hashes))
            ref.insert(tuple(hashes))
        else:
            reqs.release(rid)
        assert px.entries == list(ref.entries) and px.pins == ref.pins
    assert len(px.entries) <= capacity


@pytest.mark.parametrize("capacity", [1, 7, 63, 64, 200])
def test_cache_matches_the_reference_under_churn(capacity):
    """A long random run at the table's fullest (63 entries in 128 cells) and across its growth:
    evictions delete from clustered probe runs, which must stay searchable."""
    rnd = random.Random(capacity)
    keys = [rnd.randrange(-(2**63), 2**63) for _ in range(3 * capacity + 20)]
    px, ref = PrefixCache(capacity), _ReferenceCache(capacity)
    reqs = _Requests(px, ref)
    for _ in range(4000):
        hashes = tuple(rnd.choice(keys) for _ in range(rnd.randint(0, 4)))
        rid = rnd.randrange(8)
        if rnd.random() < 0.5:
            px.insert(hashes)
            ref.insert(hashes)
        else:
            reqs.release(rid)
            k = px.lookup(hashes)
            assert k == ref.lookup(hashes)
            reqs.acquire(rid, hashes, k)
    assert px.entries == list(ref.entries) and px.pins == ref.pins
    assert all(px.lookup((h,)) == (h in ref.entries) for h in keys)
