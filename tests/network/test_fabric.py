"""The fabric's progressive filling (sim.fabric Fabric._reallocate) against its plain statement, and
the max-min fairness it must give: rates bit-identical to the reference on random job sets (ties
between links included), no link over capacity, and every job held back by its own cap or by a
saturated link on which no job gets more per unit of weight."""

from __future__ import annotations

import contextlib
import math
from functools import partial

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from wadiloco.sim.fabric import Fabric

INF = math.inf


def reference_rates(jobs) -> list[float]:
    """The algorithm as first written: every round re-sums each link's weights over the unfrozen jobs,
    the tightest constraint (a link's fair level, scanned job by job and link by link, or a job's own
    cap) freezes first."""
    rate = {id(j): -1.0 for j in jobs}
    left = {id(lk): lk.capacity for j in jobs for lk in j.links}
    pending = list(jobs)
    while pending:
        best, best_link = INF, None
        wsum: dict[int, float] = {}
        for j in pending:
            for lk in j.links:
                wsum[id(lk)] = wsum.get(id(lk), 0.0) + j.weight
        for j in pending:
            for lk in j.links:
                lvl = left[id(lk)] / wsum[id(lk)]
                if lvl < best:
                    best, best_link = lvl, lk
        cap_job = min(pending, key=lambda j: j.max_rate / j.weight)
        if cap_job.max_rate / cap_job.weight <= best:
            frozen = [cap_job]
            level = cap_job.max_rate / cap_job.weight
        else:
            frozen = [j for j in pending if best_link in j.links]
            level = best
        for j in frozen:
            rate[id(j)] = j.weight * level
            for lk in j.links:
                left[id(lk)] = max(0.0, left[id(lk)] - rate[id(j)])
        fz = set(map(id, frozen))
        pending = [j for j in pending if id(j) not in fz]
    return [rate[id(j)] for j in jobs]


# weights and capacities from a small set, so equal levels on different links (ties) are common
WEIGHTS = st.sampled_from([0.25, 0.5, 1.0, 1.0, 1.5, 2.0, 3.0, 0.7])
CAPS = st.sampled_from([1.0, 2.0, 3.0, 10.0, 0.3, INF])
JOB = st.tuples(
    st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True),  # the links it crosses
    WEIGHTS,
    st.sampled_from([INF, INF, 1.0, 0.5, 2.0, 0.1]),  # max_rate
    st.sampled_from([1.0, 5.0, 0.01, INF]),  # work (inf: a hold)
)


def build(link_caps, jobs):
    env = simpy.Environment()
    fab = Fabric(env)
    links = [fab.link(f"l{i}", c) for i, c in enumerate(link_caps)]
    started = [fab.start([links[i] for i in lks], work, w, cap) for lks, w, cap, work in jobs]
    return fab, links, started


@settings(max_examples=300, deadline=None)
@given(st.lists(CAPS, min_size=6, max_size=6), st.lists(JOB, min_size=1, max_size=9))
def test_rates_match_the_plain_statement_bit_for_bit(link_caps, jobs):
    # no job is both unlimited in rate and on unlimited links only (it would finish at once)
    jobs = [(lks, w, cap if any(link_caps[i] < INF for i in lks) else 1.0, work) for lks, w, cap, work in jobs]
    fab, links, started = build(link_caps, jobs)
    live = [j for j in started if j in fab.jobs]
    assert [j.rate for j in live] == reference_rates(live)
    # and after a job stops, for the jobs left
    if len(live) > 1:
        fab.stop(live[0])
        assert [j.rate for j in live[1:]] == reference_rates(live[1:])


@settings(max_examples=200, deadline=None)
@given(st.lists(CAPS.filter(lambda c: c < INF), min_size=6, max_size=6), st.lists(JOB, min_size=1, max_size=9))
def test_allocation_is_max_min_fair(link_caps, jobs):
    fab, links, started = build(link_caps, jobs)
    live = [j for j in started if j in fab.jobs]
    for lk in links:
        assert sum(j.rate for j in lk.jobs) <= lk.capacity * (1 + 1e-9)
    for j in live:
        assert j.rate > 0
        if j.rate >= j.max_rate * (1 - 1e-9):
            continue  # held by its own cap
        # else some link it crosses is full, and no job there gets more per unit of weight
        assert any(
            sum(x.rate for x in lk.jobs) >= lk.capacity * (1 - 1e-9)
            and all(x.rate / x.weight <= j.rate / j.weight * (1 + 1e-9) for x in lk.jobs)
            for lk in j.links
        ), (j.rate, j.weight, [(lk.capacity, [(x.rate, x.weight) for x in lk.jobs]) for lk in j.links])


def test_one_link_splits_by_weight():
    fab, links, (a, b) = build([3.0], [([0], 1.0, INF, 10.0), ([0], 2.0, INF, 10.0)])
    assert (a.rate, b.rate) == (1.0, 2.0)
    fab.stop(b)
    assert a.rate == 3.0


@settings(max_examples=200, deadline=None)
@given(st.lists(CAPS, min_size=6, max_size=6), st.lists(JOB, min_size=1, max_size=9))
def test_peak_load_is_the_largest_load_any_allocation_gave(link_caps, jobs):
    jobs = [(lks, w, cap if any(link_caps[i] < INF for i in lks) else 1.0, work) for lks, w, cap, work in jobs]
    env = simpy.Environment()
    fab = Fabric(env)
    links = [fab.link(f"l{i}", c) for i, c in enumerate(link_caps)]
    peak = [0.0] * len(links)
    for lks, w, cap, work in jobs:
        job = fab.start([links[i] for i in lks], work, w, cap)
        for k in set(i for j in fab.jobs for i in range(len(links)) if links[i] in j.links):
            if links[k].capacity < INF:  # as sum() adds the link's jobs' rates, in the order they started
                peak[k] = max(peak[k], sum(x.rate for x in links[k].jobs) / links[k].capacity)
        if job in fab.jobs and work == INF:
            fab.stop(job)  # (a stop re-allocates too: loads may rise elsewhere)
            for k in range(len(links)):
                if links[k].jobs and links[k].capacity < INF:
                    peak[k] = max(peak[k], sum(x.rate for x in links[k].jobs) / links[k].capacity)
    assert [lk.peak_load for lk in links] == peak


ARRAY_JOB = st.tuples(
    st.lists(st.integers(0, 4), min_size=0, max_size=4), WEIGHTS, st.sampled_from([INF, 1.0, 0.5, 0.1])
)


def shares(fns, caps, jobs) -> list[tuple[list, list]]:
    """(rates, peak loads) that each fair-share function gives ARRAY_JOB tuples on links of `caps`,
    from arrays as a fabric keeps them; each function's arrays grow after it ran (a view of them left
    behind would refuse)."""
    from array import array

    out = []
    for fs in fns:
        lk = array("q", [i for lks, _, _ in jobs for i in lks])
        off = array("q", [0])
        for lks, _, _ in jobs:
            off.append(off[-1] + len(lks))
        w, mr = array("d", [j[1] for j in jobs]), array("d", [j[2] for j in jobs])
        rate, peak, cap = array("d", [-1.0] * len(jobs)), array("d", [0.25] * len(caps)), array("d", caps)
        fs(cap, lk, off, w, mr, rate, peak)
        out.append((rate.tolist(), peak.tolist()))
        for a in (cap, lk, off, w, mr, rate, peak):
            a.append(0)
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(CAPS, min_size=5, max_size=5), st.lists(ARRAY_JOB, min_size=0, max_size=12))
def test_compiled_fair_share_is_the_pure_one(link_caps, jobs):
    """models.engine._fast's fair_share (compiled when the core is) against models/network/fairshare.py run as Python,
    on any input it accepts: a job may cross no link or one link twice."""
    from wadiloco.models.engine import _fast as core
    from wadiloco.models.network import fairshare

    compiled, pure = shares((core.fair_share, fairshare.fair_share), link_caps, jobs)
    assert compiled == pure


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.lists(CAPS, min_size=1, max_size=7), st.lists(ARRAY_JOB, max_size=12)), max_size=6))
def test_a_kept_filling_is_a_fresh_one(problems):
    """A fabric's one Filling, used call after call on fabrics of other sizes (its arrays grow and
    keep what the last call left), gives what a fresh one gives, and lets go of the caller's arrays."""
    from wadiloco.models.engine import _fast as core

    kept = core.fabric_core.Filling()
    for caps, jobs in problems:
        jobs = [(tuple(i % len(caps) for i in lks), w, mr) for lks, w, mr in jobs]
        got, fresh = shares((kept.share, core.fair_share), caps, jobs)
        assert got == fresh


def test_a_job_on_another_fabrics_link_is_refused():
    env = simpy.Environment()
    a, b = Fabric(env, "a"), Fabric(env, "b")
    la, lb = a.link("x", 1.0), b.link("y", 1.0)
    with pytest.raises(ValueError, match="not on fabric a"):
        a.start([la, lb], 1.0)
    assert a.jobs == [] and la.jobs == [] and lb.jobs == []


@settings(max_examples=150, deadline=None)
@given(st.lists(CAPS, min_size=6, max_size=6), st.lists(JOB, min_size=1, max_size=9), st.integers(0, 8))
def test_a_batch_is_the_same_allocation_reached_once(link_caps, jobs, stop_at):
    """Jobs started (and a hold stopped) inside `Fabric.batch` end at the very instants, with the same
    rates and the same occupants told in the same order, as started one by one; the batch
    re-allocates once, and only its allocation counts toward a peak load."""
    jobs = [(lks, w, cap if any(link_caps[i] < INF for i in lks) else 1.0, work) for lks, w, cap, work in jobs]
    out = [run_started(link_caps, jobs, stop_at, batched) for batched in (False, True)]
    assert out[0] == out[1]


def run_started(link_caps, jobs, stop_at: int, batched: bool):
    """(rates of the jobs left on the fabric, when each job ended, links whose occupant was told in
    first-call order) of starting `jobs` and stopping the `stop_at`-th hold, in a batch or not."""
    env = simpy.Environment()
    fab = Fabric(env)
    links = [fab.link(f"l{i}", c) for i, c in enumerate(link_caps)]
    told, ends = [], {}
    for i, lk in enumerate(links):
        lk.occupant = partial(told.append, i)
    gen = fab.generation
    with fab.batch() if batched else contextlib.nullcontext():
        started = [fab.start([links[i] for i in lks], work, w, cap) for lks, w, cap, work in jobs]
        holds = [j for j in started if j.remaining == INF]
        if stop_at < len(holds):
            fab.stop(holds[stop_at])
        if batched:
            assert fab.generation == gen  # (nothing re-allocated yet)
    if batched:
        assert fab.generation == gen + 1
        final = [sum(x.rate for x in lk.jobs) / lk.capacity if lk.capacity < INF else 0.0 for lk in links]
        assert [lk.peak_load for lk in links] == final
    rates = [j.rate for j in started if j in fab.jobs]  # (a stopped job's rate means nothing)
    for k, j in enumerate(started):
        j.done.callbacks.append(lambda _e, k=k: ends.__setitem__(k, env.now))
    env.run(until=1e6)
    return rates, ends, list(dict.fromkeys(told))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_many_flows_on_a_wide_fabric_match_the_plain_statement(seed):
    """Hundreds of flows over an island topology (NICs, backplanes, uplinks: many rounds, many ties,
    some capped), started in a batch, then a third of them stopped, then run to completion: the rates
    equal the plain statement's at each allocation (through the fabric's arrays, which follow the jobs
    as they start, stop and finish), every finite job ends and only the holds are left."""
    import random

    rng = random.Random(seed)
    env = simpy.Environment()
    fab = Fabric(env)
    islands, hosts = 8, 3
    nic = [[(fab.link(f"o{i}.{h}", 100.0), fab.link(f"i{i}.{h}", 100.0)) for h in range(hosts)] for i in range(islands)]
    bp = [fab.link(f"bp{i}", rng.choice([400.0, 3200.0])) for i in range(islands)]
    up = [(fab.link(f"up{i}", 15.0), fab.link(f"down{i}", 15.0)) for i in range(islands)]
    jobs = []
    with fab.batch():
        for _ in range(400):
            a, b, ha, hb = rng.randrange(islands), rng.randrange(islands), rng.randrange(hosts), rng.randrange(hosts)
            path = [nic[a][ha][0], bp[a], nic[b][hb][1]]
            if a != b:
                path[2:2] = [up[a][0], up[b][1], bp[b]]
            weight, cap = rng.choice([1.0, 1.0, 2.0, 0.5]), rng.choice([INF, INF, INF, 1.0, 0.25])
            jobs.append(fab.start(path, rng.choice([1.0, 5.0, 20.0, INF]), weight, cap))
    assert [j.rate for j in fab.jobs] == reference_rates(fab.jobs)
    with fab.batch():
        for j in rng.sample(jobs, len(jobs) // 3):
            fab.stop(j)
    live = list(fab.jobs)
    assert [j.rate for j in live] == reference_rates(live)
    holds = [j for j in live if j.work == INF]
    env.run(until=1e5)
    assert fab.jobs == holds and all(j.done.triggered for j in live if j.work < INF)
    assert [j.rate for j in holds] == reference_rates(holds)
