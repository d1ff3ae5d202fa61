"""The serving core (models/engine/serving.py) and its closed forms (models/engine/batching.py), without SimPy.

A `FakeClock` stands in for the simulator: a wait is a plain delay the driver adds to its time,
shared work takes max(g, h) (alone on the links, both at rate 1), and a wait can be cut short by
throwing `Cut` in. Latencies are dyadic, so every sum is exact and the hand-computed times are
compared with ==. The engine against the independent heapq reference, on SimPy and on random
workloads, is tests/sim/test_queueing.py.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from types import SimpleNamespace

import numpy as np
import pytest

from wadiloco.models.engine import batching
from wadiloco.models.engine.latency import LatencyModel
from wadiloco.models.engine.serving import EngineState, delay_to, serve

A, B, C, D = 2.0**-8, 2.0**-12, 2.0**-16, 2.0**-10  # s; s per prefill token; s per context token; s per sequence
H = 2.0**-7  # host work per iteration


class Cut(Exception):
    pass


class FakeClock:
    Cut = Cut

    def __init__(self, speeds=None):
        self.t = 0.0
        self.interruptible = False
        # a "job" on the GPU makes the engine ask speeds()
        self.gpu_jobs, self.host_jobs = ([object()] if speeds else []), []
        self._speeds = speeds
        self.shared_work: list[tuple[float, float]] = []

    def wait(self, delay):
        return delay

    def now(self):
        return self.t

    def speeds(self):
        return (*self._speeds, 1.0) if len(self._speeds) == 2 else self._speeds

    def shared(self, g, h, f, sequential):
        self.shared_work.append((g, h) if f == 0 else (g, h, f))
        yield g + h + f if sequential else max(g, h, f)


def state(t, prompt, output, *, max_num_seqs=8, max_num_batched_tokens=512, h=H, lat=(A, B, C, D)):
    return EngineState(
        np.asarray(t, float),
        np.asarray(prompt),
        np.asarray(output),
        LatencyModel(*lat, r2=1.0, n=0, max_rel_err=0.0),
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        host_s=h,
    )


def drive(st, *, ff=True, until=-math.inf, clock=None, each=None):
    """Run the core to the end; `each(st, clock, delay)` before every wait. Returns the clock and
    the number of waits."""
    clock = clock or FakeClock()
    core = serve(st, clock, SimpleNamespace(until=until), ff)
    waits = 0
    try:
        delay = next(core)
        while True:
            waits += 1
            if each is not None:
                each(st, clock, delay)
            clock.t += delay
            delay = core.send(None)
    except StopIteration:
        pass
    return clock, waits


def g(prefill, sum_ctx, batch):
    return A + B * prefill + C * sum_ctx + D * batch


# ---- the rules, by hand -----------------------------------------------------------------------


@pytest.mark.parametrize("ff", [True, False])
def test_one_request_alone(ff):
    """Prefill in one iteration, then one decode iteration per further output token."""
    st = state([1.0], [64], [3])
    _, waits = drive(st, ff=ff)
    ttft = max(H, g(64, 0, 1))  # GPU-bound: the whole prompt
    assert ttft == g(64, 0, 1) > H
    assert st.admitted[0] == 1.0 and st.first_token[0] == 1.0 + ttft
    # two decode iterations at context 65 and 66, both host-bound
    assert g(0, 65, 1) < H and g(0, 66, 1) < H
    assert st.finish[0] == 1.0 + ttft + H + H
    assert st.diter == 3 and st.n_finished == 1 and st.n_dec == 0 and not st.fin_heap
    assert waits == (3 if ff else 4)  # a sleep until the arrival, then one wait per step


def test_prompt_chunked_across_two_iterations():
    """A 64-token prompt under a 48-token budget: 48 tokens, then 16, then its first token."""
    st = state([0.0], [64], [2], max_num_batched_tokens=48)
    seen = []

    def each(s, c, _d):
        seen.append((c.t, list(s.prefilling), {r: s.prefilled[r] for r in s.prefilling}, s.n_dec))

    drive(st, ff=False, each=each)
    it1, it2 = max(H, g(48, 0, 1)), max(H, g(16, 0, 1))
    assert seen[0] == (0.0, [0], {0: 0}, 0)  # admitted, first chunk under way
    assert seen[1] == (it1, [0], {0: 48}, 0)  # second chunk under way
    assert seen[2][1:] == ([], {}, 1)  # decoding
    assert st.first_token[0] == it1 + it2
    assert st.finish[0] == it1 + it2 + max(H, g(0, 65, 1))


def test_admission_limited_by_max_num_seqs():
    """Three requests at once, room for two: the third is admitted when the first finishes."""
    st = state([0.0, 0.0, 0.0], [8, 8, 8], [2, 4, 3], max_num_seqs=2)
    drive(st)
    it1 = max(H, g(16, 0, 2))
    assert list(st.admitted[:2]) == [0.0, 0.0]
    assert st.first_token[0] == st.first_token[1] == it1
    assert st.finish[0] == it1 + max(H, g(0, 18, 2))  # one decode iteration for both
    assert st.admitted[2] == st.finish[0]  # not before: two were running
    assert st.first_token[2] == st.admitted[2] + max(H, g(8, 10, 2))  # r1 decodes alongside


def test_finish_order_follows_the_heap():
    st = state([0.0] * 4, [16] * 4, [5, 2, 4, 3])
    drive(st)
    assert list(np.argsort(st.finish, kind="stable")) == [1, 3, 2, 0]
    assert np.all(st.first_token == st.first_token[0])
    # each finishes output - 1 decode iterations after its first token, the batch shrinking as
    # the others finish: 4 decoders (ctx 68) -> r1 done; 3 (ctx 69 each: 3*17 + 3*1) ...
    ft = st.first_token[0]
    d1 = max(H, g(0, 4 * 17, 4))
    assert st.finish[1] == ft + d1
    d2 = max(H, g(0, 3 * 18, 3))
    assert st.finish[3] == st.finish[1] + d2


@pytest.mark.parametrize("seed", range(6))
def test_booking_k_iterations_at_once_equals_k_single_ones(seed):
    """Fast-forward books a run of k decode iterations as one step; stepping one iteration at a
    time must give the same results, bit for bit, in fewer waits."""
    rnd = random.Random(seed)
    n = 30
    t = np.cumsum([rnd.randint(0, 12) / 64 for _ in range(n)])
    prompt = [rnd.randint(1, 300) for _ in range(n)]
    output = [rnd.randint(1, 60) for _ in range(n)]
    kw = dict(max_num_seqs=rnd.randint(1, 8), max_num_batched_tokens=rnd.randint(16, 400))
    one, many = state(t, prompt, output, **kw), state(t, prompt, output, **kw)
    _, w_ff = drive(many, ff=True)
    _, w_it = drive(one, ff=False)
    for k in ("admitted", "first_token", "finish"):
        assert np.array_equal(getattr(one, k), getattr(many, k)), k
    assert one.diter == many.diter and not np.isnan(one.finish).any()
    assert w_ff < w_it


def test_counts_sum_to_the_requests_at_every_step():
    rnd = random.Random(3)
    n = 40
    t = np.cumsum([rnd.randint(0, 8) / 64 for _ in range(n)])
    st = state(t, [rnd.randint(1, 200) for _ in range(n)], [rnd.randint(1, 30) for _ in range(n)], max_num_seqs=4)
    checked = []

    def each(s, clock, delay):
        for now in (clock.t, clock.t + delay / 2):  # at the step's start and inside it
            c = s.counts(now)
            assert sum(c) == n
            assert c.waiting == s.queue_len(now) and c.prefilling + c.decoding == s.running()
            assert c.finished == int(np.sum(s.finish <= now))
            assert c.not_arrived == int(np.sum(t > now))
            checked.append(c)

    drive(st, ff=True, each=each)
    assert st.counts(math.inf) == (0, 0, 0, 0, n, 0)
    assert any(c.waiting for c in checked) and any(c.decoding > 1 for c in checked)


# ---- the lookahead bound and the clock ----------------------------------------------------------


def test_steps_before_the_bound_are_booked_without_a_wait():
    args = ([0.0, 0.5, 0.5, 2.0], [40, 8, 300, 16], [30, 3, 12, 7])
    free, bounded, never = state(*args), state(*args), state(*args)
    _, w_free = drive(free, until=-math.inf)
    stops = []
    _, w_bounded = drive(bounded, until=1.0, each=lambda s, c, d: stops.append((s.now, c.t + d)))
    _, w_never = drive(never, until=math.inf)
    assert w_never == 0 and w_bounded < w_free
    assert stops[0][1] >= 1.0  # the first wait crosses the bound (then nothing bounds the rest)
    for st in (bounded, never):
        for k in ("admitted", "first_token", "finish"):
            assert np.array_equal(getattr(free, k), getattr(st, k)), k


def test_slowed_links_stretch_the_iteration():
    st = state([0.0], [64], [1])
    clock, _ = drive(st, clock=FakeClock(speeds=(0.5, 1.0)))
    assert st.finish[0] == st.first_token[0] == max(H, g(64, 0, 1) / 0.5)
    assert st.contended == 1 and not clock.shared_work


def test_shared_links_hand_each_iteration_to_the_fabric():
    st = state([0.0], [64], [3])
    clock, _ = drive(st, clock=FakeClock(speeds=(None, 1.0)))
    assert clock.shared_work == [(g(64, 0, 1), H), (g(0, 65, 1), H), (g(0, 66, 1), H)]
    assert st.contended == 3 and st.diter == 3


def test_a_cut_run_books_the_iterations_done_and_shares_the_rest():
    """Cut a run of decode iterations part-way: the whole iterations are booked, what is left of
    the one under way goes to the fabric as GPU work g0 + done*dg - e and host work h - e."""
    h = 2.0**-9
    st = state([0.0], [8], [40], h=h)  # host-bound prefill, then GPU-bound decode iterations
    clock = FakeClock()
    core = serve(st, clock, SimpleNamespace(until=-math.inf), True)
    clock.t += next(core)  # the prefill
    run = core.send(None)  # a run of 39 decode iterations
    g0, dg = g(0, 9, 1), C
    assert g0 > h and run == batching.run_time(39, g0, dg, h) == sum(g0 + i * dg for i in range(39))
    el = sum(g0 + i * dg for i in range(5)) + 2.0**-12  # 5 done, 2^-12 s into the 6th
    clock.t += el
    first = clock.t - el
    rest = core.throw(Cut())  # the wait for what is left of the 6th iteration, in the fabric
    assert clock.shared_work == [(g0 + 5 * dg - 2.0**-12, h - 2.0**-12)]
    assert rest == g0 + 5 * dg - 2.0**-12 and st.diter == 1 + 5 and st.contended == 1
    clock.t += rest
    for delay in core:
        clock.t += delay
    assert st.diter == 40 and st.finish[0] == clock.t
    assert st.finish[0] == first + el + rest + sum(g(0, 9 + i, 1) for i in range(6, 39))


# ---- closed forms -------------------------------------------------------------------------------


def test_closed_forms_equal_the_explicit_sums():
    """run_time equals the sum of max(h, g0 + i*dg); reach and split equal a linear scan (dyadic
    values: the sums are exact)."""
    rnd = random.Random(11)
    for _ in range(3000):
        g0, dg, h = rnd.randint(0, 16) / 256, rnd.randint(0, 16) / 2**16, rnd.randint(0, 16) / 256
        if g0 == dg == h == 0:
            continue
        k = rnd.randint(0, 150)
        ends = [0.0]
        for i in range(k):
            ends.append(ends[-1] + max(h, g0 + i * dg))
        assert [batching.run_time(j, g0, dg, h) for j in range(k + 1)] == ends
        if k:
            t = rnd.choice([rnd.uniform(1e-9, ends[-1] * 1.1), ends[rnd.randint(1, k)]])
            done = max(j for j in range(k + 1) if ends[j] <= t)
            assert batching.split(t, g0, dg, h, k) == (done, t - ends[done])
            first = next((j for j in range(1, k + 1) if ends[j] >= t), k)
            assert batching.reach(t, g0, dg, h, k) == (first, ends[first])


def test_delay_to_never_ends_a_wait_early():
    """From 0.028749778580818522 no delay lands on 0.19909221667216828 exactly (the sums step over
    it); the wait must end after it, not an ulp before: an idle engine woken early waited 0 s for a
    router's instant for ever (prefix_affinity on the Mooncake trace, tests/engine/test_prefix.py)."""
    now, t = 0.028749778580818522, 0.19909221667216828
    d = delay_to(now, t)
    assert now + d > t and now + math.nextafter(d, 0.0) < t
    rnd = random.Random(1)
    for _ in range(2000):
        a, b = sorted(rnd.uniform(0, 100) for _ in range(2))
        d = delay_to(a, b)
        assert a + d >= b and (a + d == b or a + math.nextafter(d, 0.0) < b)


# ---- models/engine/heap.py and fifo.py: the cores' finish heap and request queues -------------------------------


def _twins(name: str) -> list:
    """The module NAME of models/engine/_fast/manifest.py run as Python, and its compiled twin
    (`_fast.NAME`) when setup.py built it."""
    from importlib import import_module

    from wadiloco.models.engine import _fast

    mods = [import_module(_fast.PURE[name])]
    try:
        mods.append(import_module(f"{_fast.PACKAGE}.{name}"))  # (built by setup.py with the serving core)
    except ImportError:
        pass
    return mods


class ListHeap:
    """The oracle of KeyHeap: a list and the standard library's heapq, under KeyHeap's method names."""

    def __init__(self) -> None:
        self.a: list[int] = []

    def __len__(self) -> int:
        return len(self.a)

    def __iter__(self):
        return iter(self.a)

    def push(self, x: int) -> None:
        heapq.heappush(self.a, x)

    def pop(self) -> int:
        return heapq.heappop(self.a)

    def top(self) -> int:
        return self.a[0]

    def pop_due(self, t: int) -> int:
        return heapq.heappop(self.a) if self.a and self.a[0] >> 32 <= t else -1

    def load(self, keys) -> None:
        self.a[:] = keys

    def take(self, rid: int) -> int:
        a = self.a
        j = next((j for j, x in enumerate(a) if x & 0xFFFFFFFF == rid), None)
        if j is None:
            raise ValueError(f"request {rid} is not decoding")
        x = a[j]
        a[j] = a[-1]
        a.pop()
        heapq.heapify(a)
        return x


class ListFifo(deque):
    """The oracle of RingFifo: a deque under RingFifo's method names."""

    n = property(deque.__len__)
    push = deque.append
    push_front = deque.appendleft
    pop_front = deque.popleft
    at = deque.__getitem__

    def drop(self, k: int) -> None:
        if k > len(self):
            raise IndexError(f"drop {k} of {len(self)}")
        for _ in range(k):
            self.popleft()

    def load(self, ids) -> None:
        self.clear()
        self.extend(ids)


@pytest.mark.parametrize("mod", _twins("heap"), ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_key_heap_is_the_list_heap_item_for_item(mod):
    """The cores' KeyHeap (models/engine/heap.py, CPython's heapq algorithms on an array; compiled, on C
    integers) holds every key where a list and heapq (ListHeap) hold it and
    returns the same keys, on random pushes, pops (due or not), removals (preemption's `take`, which
    heapifies) and loads (a tape's copy), with keys shaped as the engine's (due << 32 | rid), past its first growth."""
    from wadiloco.models.engine.heap import MASK

    rnd = random.Random(3)
    ours, theirs, big = mod.KeyHeap(), ListHeap(), 0
    for i in range(20_000):
        r = rnd.random()
        grow = 0.55 if i < 4_000 else 0.47  # large heaps, then small ones (where removals reach the root)
        if r < grow or not len(theirs):
            x = rnd.randrange(1 << 31) << 32 | rnd.randrange(1 << 32)
            ours.push(x)
            theirs.push(x)
        elif r < 0.75:
            assert ours.top() == theirs.top()
            assert ours.pop() == theirs.pop()
        elif r < 0.85:  # finish_due's pop: the least key if due by t (else -1), t around it
            t = (theirs.top() >> 32) + rnd.randrange(-2, 3)
            assert ours.pop_due(t) == theirs.pop_due(t)
        elif r < 0.995:
            rid = rnd.choice(list(theirs)) & MASK
            assert ours.take(rid) == theirs.take(rid)
        else:
            keys = [x + (5 << 32) for x in theirs]
            ours.load(keys)
            theirs.load(keys)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)
        big = max(big, len(theirs))
    assert big > 64  # (the array grew)
    while len(theirs):
        assert ours.pop() == theirs.pop()
    for h in (ours, theirs):
        assert h.pop_due(1 << 40) == -1
        with pytest.raises(IndexError):
            h.pop()
        with pytest.raises(IndexError):
            h.top()
        with pytest.raises(ValueError):
            h.take(7)


@pytest.mark.parametrize("mod", _twins("fifo"), ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_ring_fifo_is_the_list_fifo_item_for_item(mod):
    """The cores' RingFifo (models/engine/fifo.py, an array ring; compiled, C integers) holds the ids a
    deque (ListFifo) holds, in the same order, and gives the same answers, on random pushes at either
    end, pops, looks at any position, drops, removals (preemption) and loads (a tape's copy), past its
    growth and with the ring wrapped."""
    rnd = random.Random(5)
    ours, theirs, big, nxt = mod.RingFifo(), ListFifo(), 0, 0
    for i in range(20_000):
        r = rnd.random()
        grow = 0.52 if i < 5_000 else 0.45
        if r < grow or not len(theirs):
            x, nxt = nxt, nxt + 1
            if rnd.random() < 0.1:
                ours.push_front(x)
                theirs.push_front(x)
            else:
                ours.push(x)
                theirs.push(x)
        elif r < 0.75:
            assert ours.pop_front() == theirs.pop_front()
        elif r < 0.85:
            j = rnd.randrange(-len(theirs), len(theirs))
            assert ours.at(j) == theirs.at(j)
        elif r < 0.93:
            k = rnd.randrange(min(len(theirs), 4) + 1)
            ours.drop(k)
            theirs.drop(k)
        elif r < 0.995:
            x = rnd.choice(list(theirs))
            assert (x in ours) and (nxt in ours) is False
            ours.remove(x)
            theirs.remove(x)
        else:
            ids = [rnd.randrange(1 << 40) for _ in range(rnd.randrange(200))]
            ours.load(ids)
            theirs.load(ids)
        assert list(ours) == list(theirs) and len(ours) == len(theirs) == ours.n == theirs.n
        big = max(big, len(theirs))
    assert big > 64  # (the ring grew)
    for q in (ours, theirs):
        q.load([])
        with pytest.raises(IndexError):
            q.pop_front()
        with pytest.raises(IndexError):
            q.at(0)
        with pytest.raises(IndexError):
            q.drop(1)
        with pytest.raises(ValueError):
            q.remove(7)
