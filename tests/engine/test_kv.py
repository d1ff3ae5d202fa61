"""KV-cache blocks (models/engine/kv.py, engine.kv_blocks): a hand-computed preemption, conservation at
every step, the closed forms against brute force, and that an unlimited pool is today's engine.
Fast-forward vs per-iteration and lookahead on/off with a pool that preempts are cases of
tests/sim/test_queueing.py (bursty-kv)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import simpy

from wadiloco.benchmarks.harness import run_engine
from wadiloco.models.engine._fast import KVPool  # the pool class the running core takes (compiled or pure)
from wadiloco.models.engine.kv import bytes_per_token, pool_blocks
from wadiloco.models.engine.latency import LatencyModel
from wadiloco.models.results import invariants as inv
from wadiloco.models.spec.load import load_scenario, with_overrides
from wadiloco.models.spec.resolve import resolve
from wadiloco.models.workload.kinds import Arrivals
from wadiloco.sim.build import kv_pool
from wadiloco.sim.engine import Sidecar
from wadiloco.sim.fabric import Fabric
from wadiloco.sim.fleet import simulate

ROOT = Path(__file__).resolve().parents[2]
A, B, C, D = 2.0**-8, 2.0**-12, 2.0**-16, 2.0**-10  # dyadic: every sum below is exact
LAT = LatencyModel(A, B, C, D, r2=1.0, n=0, max_rel_err=0.0)


def three(ff: bool, kv: KVPool | None):
    arr = Arrivals(np.zeros(3), np.array([4, 4, 4]), np.array([6, 6, 6]))
    sc, _ = run_engine(arr, LAT, max_num_seqs=8, max_num_batched_tokens=512, host_s=0.0, fast_forward=ff, kv=kv)
    return sc


@pytest.mark.parametrize("ff", [True, False], ids=["fast-forward", "per-iteration"])
def test_hand_computed_preemption(ff):
    """Blocks of 4 tokens, a pool of 6, three 4-token prompts wanting 6 tokens each. The prefill
    takes 3 blocks; at iteration 1 every context reaches 5 tokens (3 more blocks: full); at
    iteration 5 they reach 9 and need 3 more: the last admitted (request 2, context 9, holding 2
    blocks) is preempted, the others finish, and request 2 recomputes its 9 tokens in one prefill
    that yields its last token."""
    kv = KVPool(6, 4)
    s = three(ff, kv)
    t0 = A + B * 12 + D * 3  # the prefill of all three
    ends = [t0]
    for t in range(1, 5):  # four decode iterations of three requests, contexts 5..8
        ends.append(ends[-1] + A + C * 3 * (4 + t) + D * 3)
    ends.append(ends[-1] + A + C * 2 * 9 + D * 2)  # iteration 5: two left, context 9
    ends.append(ends[-1] + A + B * 9 + D)  # iteration 6: request 2's recompute
    adm, ft, fin = s.results()
    assert list(adm) == [0.0, 0.0, 0.0]
    assert list(ft) == [t0, t0, t0]  # the recompute keeps request 2's first token
    assert list(fin) == [ends[5], ends[5], ends[6]]
    assert (kv.preemptions, kv.rejected, kv.used, kv.peak) == (1, 0, 0, 1.0)
    assert (kv.sum_used, kv.sum_cap) == (3 + 6 * 5 + 3, 6 * 7)  # mean usage 6/7
    assert list(s.core.prompt) == [4, 4, 4] and list(s.core.output) == [6, 6, 6]  # lengths restored
    plain = three(ff, None)
    assert list(plain.results()[2]) == [ends[4] + A + C * 27 + D * 3] * 3  # no pool: no preemption


def test_a_request_that_can_never_fit_is_rejected():
    arr = Arrivals(np.array([0.0, 0.0]), np.array([4, 30]), np.array([2, 3]))
    kv = KVPool(6, 4)  # 32 tokens of context at most: request 1 needs ceil(32/4) = 8 blocks
    s, _ = run_engine(arr, LAT, max_num_seqs=8, max_num_batched_tokens=512, host_s=0.0, kv=kv)
    adm, ft, fin = s.results()
    assert kv.rejected == 1 and np.isnan(adm[1]) and np.isnan(fin[1]) and fin[0] > 0
    assert s.counts(np.inf) == (0, 0, 0, 0, 1, 1)


def test_conservation_holds_at_every_step_and_the_check_fires():
    """Random requests through a small pool (preempting often), checked after every step."""
    rnd = random.Random(7)
    n = 60
    t = np.cumsum([rnd.randint(0, 4) / 256 for _ in range(n)])
    arr = Arrivals(
        t, np.array([rnd.randint(1, 90) for _ in range(n)]), np.array([rnd.randint(1, 60) for _ in range(n)])
    )
    kv = KVPool(40, 8, watermark=0.05)
    s, env = run_engine(arr, LAT, max_num_seqs=16, max_num_batched_tokens=64, host_s=0.0, kv=kv, until=1e-9)
    checked = 0
    while env.peek() < np.inf:
        env.step()
        inv.check_kv(0, s.core)
        checked += 1
    assert kv.preemptions > 5 and checked > 50 and s.counts(np.inf).finished == n
    kv.used += 1  # a leaked block
    with pytest.raises(inv.InvariantError, match="KV conservation, sidecar 0"):
        inv.check_kv(0, s.core)


def test_closed_forms_against_brute_force():
    rnd = random.Random(3)
    grown = [0, 0, 0]
    for _ in range(600):
        bs = rnd.randint(1, 6) if rnd.random() < 0.5 else rnd.randint(7, 24)  # (engine.kv_block_size: 16)
        kv = KVPool(50, bs)
        n = rnd.randint(1, 5)
        for _ in range(n):
            kv.enter(rnd.randrange(bs))  # a decoder of that phase
        kv.used = rnd.randint(0, 50)
        t0, k = rnd.randint(0, 60), rnd.randint(1, 80)
        cnt = kv.cnt
        takes = [cnt[(t0 + j) % bs] for j in range(2000)]
        assert [kv.need(m, t0, n) for m in range(25)] == [sum(takes[:m]) for m in range(25)]
        m = 0
        while sum(takes[: m + 1]) <= 50 - kv.used:
            m += 1
        assert kv.safe_iters(t0, n) == m
        used, total = kv.used, 0
        for j in range(k):
            used += takes[j]
            total += used
        if used <= 50:
            kv.grow(k, t0, n)
            assert (kv.used, kv.sum_used, kv.sum_cap) == (used, total, 50 * k)
            grown[min(k // bs, 2)] += 1
    assert min(grown) > 50  # runs within one cycle of phases, of one, and of several


def test_pool_from_memory():
    """Llama-3-8B, bf16: 2 x 32 layers x 8 KV heads x 128 x 2 B = 128 KiB per token; an H200
    (141 GB) at 0.9 minus 16.06 GB of weights holds 52,852 blocks of 16 tokens (845,632 tokens)."""
    per_token = bytes_per_token(32, 8, 128, 2)
    assert per_token == 131072
    assert pool_blocks(141e9, 0.9, 16.06e9, 0.0, 16 * per_token) == 52852
    with pytest.raises(ValueError, match="no room for a KV block"):
        pool_blocks(16e9, 0.9, 16.06e9, 0.0, 16 * per_token)
    sc = load_scenario(ROOT / "scenarios" / "bursty.yaml")

    def engine_kv(sc, s):
        return kv_pool(resolve(sc).engine.pool(s))

    assert engine_kv(sc, 0) is None  # the default: unlimited
    assert engine_kv(with_overrides(sc, {"engine.gpu_memory_gb": 141.0}), 0).pool == 52852
    gpu = with_overrides(
        sc, {"engine.kv_blocks": 30000, "engine.merge_memory": "always", "fleet.colocation": "same_gpu"}
    )
    # 1e9 parameters over 2 hosts x (2 + 8) bytes = 5 GB of merge buffers: 2,385 blocks of 2 MiB
    assert engine_kv(gpu, 0).cap == 30000 - 2385
    assert engine_kv(with_overrides(gpu, {"fleet.unlimited": ["kv"]}), 0) is None


def _short(extra: dict):
    sc = load_scenario(ROOT / "scenarios" / "bursty.yaml")
    return with_overrides(sc, {"horizon_s": 60.0, "drain_s": 30.0, **extra})


def _same(a, b):
    for k in a.requests:
        np.testing.assert_array_equal(a.requests[k], b.requests[k], err_msg=k)
    assert a.timeline.keys() == b.timeline.keys()
    for k in a.timeline:
        np.testing.assert_array_equal(a.timeline[k], b.timeline[k], err_msg=k)


def test_an_unlimited_pool_is_todays_engine():
    plain = simulate(_short({}), seed=1)
    big = simulate(_short({"engine.kv_blocks": 10**8}), seed=1)
    _same(plain, big)
    assert big.summary["preemptions"] == 0 and big.summary["kv_usage_peak"] > 0
    assert "preemptions" not in plain.summary
    drop = ("preemptions", "rejected_too_long", "kv_usage_peak", "kv_usage_mean", "wall_time_s")
    assert json.dumps({k: v for k, v in big.summary.items() if k not in drop}, default=str) == json.dumps(
        {k: v for k, v in plain.summary.items() if k != "wall_time_s"}, default=str
    )


def test_merge_memory_preempts_and_unlimited_kv_removes_it():
    """Emergence: merge buffers held on a same_gpu sidecar's GPU shrink its pool, so bursts preempt
    there; `fleet.unlimited: [kv]` gives today's engine back exactly."""
    base = {"fleet.colocation": "same_gpu", "engine.kv_blocks": 6000}
    free = simulate(_short(base), seed=1).summary
    held = simulate(_short({**base, "engine.merge_memory": "always"}), seed=1).summary
    # 2,385 of the 6,000 blocks held: the pool fills more and prompts wait for blocks
    assert held["kv_usage_mean"] > 1.3 * free["kv_usage_mean"] and held["kv_usage_peak"] <= 1.0
    assert held["ttft_p95_s"] > 1.3 * free["ttft_p95_s"]
    unlimited = simulate(_short({**base, "engine.merge_memory": "always", "fleet.unlimited": ["kv"]}), seed=1)
    _same(unlimited, simulate(_short({"fleet.colocation": "same_gpu"}), seed=1))


def _three_swap(ff: bool, pcie_gbps: float, block_bytes: int = 4096):
    """`three` with swap preemption, on a PCIe link of pcie_gbps."""
    env = simpy.Environment()
    gpu, cpu = Fabric(env, "t/gpu").link("gpu0", 1.0), Fabric(env, "t/cpu").link("cpu", 1.0)
    pcie = Fabric(env, "t/pcie").link("pcie", pcie_gbps)
    arr = Arrivals(np.zeros(3), np.array([4, 4, 4]), np.array([6, 6, 6]))
    kv = KVPool(6, 4, preemption="swap")
    s = Sidecar(
        env, 0, arr, LAT, max_num_seqs=8, max_num_batched_tokens=512, host_s=0.0, gpu=gpu, host=cpu,
        fast_forward=ff, kv=kv, pcie=pcie, block_bytes=block_bytes,
    )  # fmt: skip
    env.run()
    return s, kv


@pytest.mark.parametrize("ff", [True, False], ids=["fast-forward", "per-iteration"])
def test_hand_computed_swap(ff):
    """The case of test_hand_computed_preemption with swap: at iteration 5 request 2's 2 blocks
    (context 9) go to host memory over PCIe before the GPU step; at iteration 6 they come back
    (2 blocks again, and the block its next token needs) and it decodes its last token instead of
    recomputing 9 tokens. With the copy path unlimited the copies take no time."""
    t0 = A + B * 12 + D * 3
    ends = [t0]
    for t in range(1, 5):
        ends.append(ends[-1] + A + C * 3 * (4 + t) + D * 3)
    for gbps, copy in ((math.inf, 0.0), (8.0, 2 * 4096 * 8 / 1e9 / 8.0)):  # 2 blocks of 4 KiB at 8 Gb/s
        s, kv = _three_swap(ff, gbps)
        e5 = ends[4] + copy + A + C * 2 * 9 + D * 2  # swap-out, then two decoders at context 9
        e6 = e5 + copy + A + C * 9 + D  # swap-in, then request 2 decodes at context 9
        adm, ft, fin = s.results()
        assert list(ft) == [t0] * 3
        assert fin[0] == fin[1] == pytest.approx(e5, abs=1e-15) and fin[2] == pytest.approx(e6, abs=1e-15)
        if gbps == math.inf:
            assert (fin[0], fin[2]) == (e5, e6)  # exactly: no transfer time at all
        assert (kv.preemptions, kv.copied, kv.used, len(kv.mode.parked)) == (1, 4, 0, 0)
        assert list(s.core.prompt) == [4, 4, 4] and list(s.core.output) == [6, 6, 6]


def test_merge_buffers_held_during_merges_preempt_only_then():
    """Emergence (engine.merge_memory: merge): while a merge runs, its buffers take 2,385 of the same_gpu
    sidecar's 6,000 blocks, so requests running then are preempted; without merges (no_sync) the
    run is the plain pool's byte for byte, and fleet.unlimited: [kv] gives today's engine back."""
    mergy = {"fleet.colocation": "same_gpu", "policy.name": "fixed", "policy.params": {"H": 32}, "merge.h_min": 32}
    base = {**mergy, "engine.kv_blocks": 6000}
    plain = simulate(_short(base), seed=1)
    held = simulate(_short({**base, "engine.merge_memory": "merge"}), seed=1)
    assert held.summary["merges"] >= 2 and held.summary["kv_usage_peak"] <= 1.0
    assert held.summary["preemptions"] > 10 * max(1, plain.summary["preemptions"])
    no_merge = {"policy.name": "no_sync", "policy.params": {}}
    _same(
        simulate(_short({**base, **no_merge, "engine.merge_memory": "merge"}), seed=1),
        simulate(_short({**base, **no_merge}), seed=1),
    )
    unlimited = simulate(_short({**base, "engine.merge_memory": "merge", "fleet.unlimited": ["kv"]}), seed=1)
    _same(unlimited, simulate(_short(mergy), seed=1))
