"""Jobs on shared links and their weighted max-min fair rates by progressive filling: the data and
the arithmetic of every re-allocation of a shared resource (sim.fabric Fabric), which setup.py
compiles with the serving core (models/engine/_fast/__init__.py picks the compiled or the pure
module, as for the engine), so that a fabric with thousands of jobs re-allocates at C speed.

Jobs cross links (indices into `cap`); each has a weight and a cap on its rate. Each round, every
link splits what it has left among its unfrozen jobs in proportion to their weights, and the tightest
constraint freezes first: the link with the least level (capacity left per unit of weight), or a
job's own cap. The float operations, their order and the tie-breaks are those of the plain statement
(tests/network/test_fabric.py keeps the two bit-identical):
- a link's weight sum is the sum of its unfrozen jobs' weights, in job order, from 0.0;
- the tightest link is the first whose level is least, in the order the unfrozen jobs first cross
  the links (job by job, link by link);
- the tightest cap is the first job's of least max_rate / weight, and it wins a tie with a link;
- a frozen job takes weight x level off each link it crosses, floored at 0, frozen jobs in job order.

The plain statement sums every link's weights again each round over every unfrozen job: rounds x
jobs, and a fabric with thousands of flows has hundreds of rounds (one per island uplink that binds).
Here a call costs the crossings (job, link) once, plus, per round, the crossings of the jobs it
freezes (times log links), because:
- each link's crossings are listed once, in job order, and a link's level changes only when one of
  its jobs freezes;
- the links wait in a heap by (level, first unfrozen crossing); a link whose jobs froze waits with a
  lower bound of its level, its capacity left over its previous weight sum (a sum of fewer positive
  weights in the same order is never larger, and rounding is monotone), and is summed again only
  when that bound reaches the top, so a link far from binding (a switch backplane) is not summed
  round after round;
- the capped jobs wait in a heap by (max_rate / weight, job), the others in job order behind them.
"""

from __future__ import annotations

from array import array

INF = float("inf")


class Link:
    """A shared resource with a capacity (fixed once it exists: its fabric keeps a copy), the jobs on
    it in the order they started and, for a serving engine that runs on it alone, its `occupant`
    (sim.fabric). `used` (capacity-units x s allocated so far) is kept in its fabric's arrays."""

    __slots__ = ("name", "capacity", "jobs", "occupant", "fabric", "idx")

    def __init__(self, name: str, capacity: float):
        if not capacity > 0:
            raise ValueError(f"link {name}: capacity must be > 0")
        self.name = name
        self.capacity = capacity
        self.jobs: list = []
        self.occupant = None
        self.fabric = None
        self.idx = -1  # its index in its fabric's arrays (sim.fabric Fabric.link)

    @property
    def unlimited(self) -> bool:
        return self.capacity == INF

    @property
    def used(self) -> float:
        """The integral of the rate allocated on it over time (capacity-units x s)."""
        return self.fabric._used[self.idx] if self.fabric is not None else 0.0

    @property
    def peak_load(self) -> float:
        """The largest allocated rate / capacity seen."""
        return self.fabric._peak[self.idx] if self.fabric is not None else 0.0

    def idle(self) -> bool:
        return not self.jobs


class Job:
    """Work on one or more links: how much (`work`; inf: a hold, until stopped), its weight and cap,
    and the event `done` fires. While it is on its fabric (`fabric` set), its work left, rate and
    finish instant live in the fabric's arrays, in job order (sim.fabric), where a re-allocation
    reads and writes them; when it leaves, they come back here."""

    __slots__ = ("links", "lidx", "work", "weight", "max_rate", "done", "tag", "started", "fabric", "kept")

    def __init__(self, links, work, weight, max_rate, done, tag, now):
        self.links = links
        self.lidx = [lk.idx for lk in links]  # the links' indices in their fabric
        self.work = work
        self.weight = weight
        self.max_rate = max_rate
        self.done = done
        self.tag = tag
        self.started = now
        self.fabric = None
        self.kept = (work, 0.0, INF)  # (work left, rate, finish) while off a fabric

    def state(self) -> tuple:
        """(work left, rate, finish): its fabric's (sim.fabric Fabric.state), or its own once it left."""
        return self.fabric.state(self) if self.fabric is not None else self.kept

    def leave(self, left: float, rate: float, finish: float) -> None:
        """It is off its fabric, with these last values."""
        self.fabric = None
        self.kept = (left, rate, finish)

    @property
    def remaining(self) -> float:
        return self.state()[0]

    @property
    def rate(self) -> float:
        return self.state()[1]

    @property
    def finish(self) -> float:
        return self.state()[2]


def due(rate: float, remaining: float, now: float) -> float:
    """When a job with `remaining` work ends at `rate`: now for an infinite rate, never (inf) for a
    hold or a stalled job."""
    if rate == INF:
        return now
    if rate > 0 and remaining != INF:
        return now + remaining / rate
    return INF


# ---- a fabric's jobs as arrays in job order: work left, rate, finish; link crossings lk[off[j]:off[j + 1]]


def advance(rem, rate, lk, off, used, dt: float) -> None:
    """`dt` seconds at the current rates: each job's work left, each link's `used` (jobs in order)."""
    for j in range(len(rem)):
        r = rate[j]
        if rem[j] != INF:
            rem[j] -= r * dt
        for t in range(off[j], off[j + 1]):
            x = lk[t]
            used[x] += r * dt


def finishes(rate, rem, fin, now: float) -> float:
    """Every job's finish at its rate (`due`); the earliest."""
    nxt = INF
    for j in range(len(rate)):
        f = due(rate[j], rem[j], now)
        fin[j] = f
        if f < nxt:
            nxt = f
    return nxt


def due_by(fin, until: float) -> list:
    """The jobs (their places in job order) that finish by `until`."""
    out = []
    for j in range(len(fin)):
        if fin[j] <= until:
            out.append(j)
    return out


def shift(off, i: int, d: int) -> None:
    """off[i:] += d (a job's crossings were cut from the middle)."""
    for j in range(i, len(off)):
        off[j] += d


def fair_share(cap, lk, off, weight, max_rate, rate, peak) -> None:
    """Job j (of n = len(weight)) crosses links lk[off[j]:off[j + 1]]. Sets rate[j], and raises
    peak[l] to the load (allocated rate over capacity, the jobs' rates summed in job order) of each
    limited link l a job crosses."""
    Filling().share(cap, lk, off, weight, max_rate, rate, peak)


def _zeros(code: str, size: int) -> array:
    return array(code, bytes(array(code).itemsize * size))


class Filling:
    """One progressive filling at a time, its working arrays kept from one to the next (a fabric keeps
    one: a re-allocation allocates nothing). Per link (by index): its capacity left, weight sum (exact,
    or an upper bound), the level it waits at in the heap (exact, or a lower bound), its first unfrozen
    crossing and next free slot in the crossing lists (job `cj[e]` at `lk[ct[e]]`, grouped by link in
    job order), its place in the heap. The link heap holds each link with unfrozen jobs once, by (level,
    first unfrozen crossing); the cap heap the capped jobs by (max_rate / weight, job)."""

    __slots__ = ("cap", "lk", "off", "weight", "max_rate", "rate", "n", "k", "crossed", "head", "tail", "cj", "ct")
    __slots__ += ("left", "wsum", "lvl", "exact", "mark", "touched", "frozen", "heap", "at", "hn", "cv", "cjob")
    __slots__ += ("cn", "nd", "rnd")

    def __init__(self) -> None:
        self.room(1, 1, 1, True)

    def room(self, m: int, nt: int, n: int, fresh: bool = False) -> None:
        """Arrays for m links, nt crossings and n jobs (grown to twice what is asked when short)."""
        if fresh or len(self.head) < m:
            m *= 2
            self.head, self.tail, self.crossed = _zeros("q", m), _zeros("q", m), _zeros("q", m)
            self.mark = _zeros("q", m)  # the last round a job of the link froze in
            self.touched = _zeros("q", m)  # this round's such links
            self.heap, self.at = _zeros("q", m), _zeros("q", m)
            self.left, self.wsum, self.lvl = _zeros("d", m), _zeros("d", m), _zeros("d", m)
            self.exact = _zeros("b", m)  # whether wsum[x] is its unfrozen jobs' sum (else an upper bound)
        if fresh or len(self.cj) < nt:
            nt *= 2
            self.cj, self.ct = _zeros("q", nt), _zeros("q", nt)
        if fresh or len(self.cjob) < n:
            n *= 2
            self.cjob, self.cv, self.frozen = _zeros("q", n), _zeros("d", n), _zeros("b", n)

    def share(self, cap, lk, off, weight, max_rate, rate, peak) -> None:
        """fair_share's work, in this filling's arrays. It lets go of the caller's arrays when done
        (a fabric's grow between re-allocations, and an array seen through a view cannot)."""
        self.setup(cap, lk, off, weight, max_rate, rate)
        self.run()
        self.peaks(peak)
        self.cap = self.weight = self.max_rate = self.rate = None
        self.lk = self.off = None

    def setup(self, cap, lk, off, weight, max_rate, rate) -> None:
        n, m = len(weight), len(cap)
        self.room(m, off[n] - off[0], n)
        self.cap, self.lk, self.off, self.weight, self.max_rate, self.rate = cap, lk, off, weight, max_rate, rate
        self.n = n
        for x in range(m):
            self.left[x] = cap[x]
            self.mark[x] = 0
        for j in range(n):
            self.frozen[j] = 0
        self.hn = self.cn = self.nd = self.rnd = 0
        self.group()
        self.heaps()

    def group(self) -> None:
        """The links crossed, in first-crossing order (`crossed[:k]`), their crossings by link, and
        their weight sums (each link's jobs' weights added in job order, from 0.0)."""
        lk, off, head, tail, wsum = self.lk, self.off, self.head, self.tail, self.wsum
        cnt = self.mark  # (zero until the first round)
        k = 0
        for t in range(off[0], off[self.n]):
            x = lk[t]
            if cnt[x] == 0:
                self.crossed[k] = x
                k += 1
            cnt[x] += 1
        pos = 0
        for i in range(k):
            x = self.crossed[i]
            head[x] = tail[x] = pos
            pos += cnt[x]
            cnt[x] = 0
            wsum[x] = 0.0
        self.k = k
        for j in range(self.n):
            w = self.weight[j]
            for t in range(off[j], off[j + 1]):
                x = lk[t]
                e = tail[x]
                self.cj[e] = j
                self.ct[e] = t
                tail[x] = e + 1
                wsum[x] = wsum[x] + w

    def heaps(self) -> None:
        """Every crossed link at its level, every capped job at max_rate / weight."""
        for i in range(self.k):
            x = self.crossed[i]
            self.exact[x] = 1
            self.lvl[x] = self.left[x] / self.wsum[x]
            self.heap[i], self.at[x] = x, i
        self.hn = self.k
        for i in range(self.hn // 2 - 1, -1, -1):
            self.down(i)
        cn = 0
        for j in range(self.n):
            c = self.max_rate[j] / self.weight[j]
            if c != INF:
                self.cv[cn], self.cjob[cn] = c, j
                cn += 1
        self.cn = cn
        for i in range(cn // 2 - 1, -1, -1):
            self.cdown(i)

    def run(self) -> None:
        """The rounds: freeze the tightest cap or link until every job has its rate."""
        n_pend, first = self.n, 0  # first: the first job not frozen, in job order
        while n_pend > 0:
            self.rnd += 1
            self.nd = 0
            best, best_link = INF, -1
            if self.tightest() and self.lvl[self.heap[0]] < INF:
                best_link = self.heap[0]
                best = self.lvl[best_link]
            while self.cn > 0 and self.frozen[self.cjob[0]]:
                self.cn -= 1
                self.cv[0], self.cjob[0] = self.cv[self.cn], self.cjob[self.cn]
                self.cdown(0)
            while self.frozen[first]:
                first += 1
            cap_at, cap_lvl = first, INF
            if self.cn > 0:
                cap_at, cap_lvl = self.cjob[0], self.cv[0]
            if cap_lvl <= best:
                self.freeze(cap_at, cap_lvl)
                n_pend -= 1
            else:
                for e in range(self.head[best_link], self.tail[best_link]):
                    j = self.cj[e]
                    if not self.frozen[j]:
                        self.freeze(j, best)
                        n_pend -= 1
            self.rebound()

    def tightest(self) -> bool:
        """Makes the heap's top the tightest link at its exact level (a link whose lower bound comes
        to the top is summed again, and sinks if it is not the tightest); False if no link is left."""
        while self.hn > 0:
            x = self.heap[0]
            if self.exact[x]:
                return True
            s, w, h = 0.0, self.head[x], self.head[x]
            for e in range(h, self.tail[x]):
                j = self.cj[e]
                if not self.frozen[j]:
                    self.cj[w] = j
                    self.ct[w] = self.ct[e]
                    w += 1
                    s = s + self.weight[j]
            self.tail[x] = w
            if w == h:  # (no unfrozen job left on it)
                self.remove(x)
                continue
            self.wsum[x] = s
            self.exact[x] = 1
            self.lvl[x] = self.left[x] / s
            self.down(0)
        return False

    def freeze(self, j, level) -> None:
        """Job j's rate is weight x level, taken off each link it crosses (floored at 0)."""
        r = self.weight[j] * level
        self.rate[j] = r
        self.frozen[j] = 1
        for t in range(self.off[j], self.off[j + 1]):
            x = self.lk[t]
            y = self.left[x] - r
            self.left[x] = y if y > 0.0 else 0.0
            if self.mark[x] != self.rnd:
                self.mark[x] = self.rnd
                self.touched[self.nd] = x
                self.nd += 1

    def rebound(self) -> None:
        """Each link a job froze on this round waits with a lower bound of its new level: its capacity
        left over its previous weight sum (and its first unfrozen crossing), or leaves the heap."""
        for i in range(self.nd):
            x = self.touched[i]
            h = self.head[x]
            while h < self.tail[x] and self.frozen[self.cj[h]]:
                h += 1
            self.head[x] = h
            if h == self.tail[x]:
                self.remove(x)
            else:
                self.exact[x] = 0
                self.lvl[x] = self.left[x] / self.wsum[x]
                self.up(self.at[x])
                self.down(self.at[x])

    def peaks(self, peak) -> None:
        """Each crossed link's load: its jobs' rates summed in job order (as sum() over the link's
        jobs); a limited link's peak rises to it."""
        load, lk, off = self.wsum, self.lk, self.off
        for i in range(self.k):
            load[self.crossed[i]] = 0.0
        for j in range(self.n):
            for t in range(off[j], off[j + 1]):
                x = lk[t]
                load[x] = load[x] + self.rate[j]
        for i in range(self.k):
            x = self.crossed[i]
            if self.cap[x] != INF:
                y = load[x] / self.cap[x]
                if y > peak[x]:
                    peak[x] = y

    # -- the heaps: links by (level, first unfrozen crossing), capped jobs by (max_rate / weight, job) --
    def less(self, a, b) -> bool:
        """Heap slot a's link before slot b's."""
        x, y = self.heap[a], self.heap[b]
        if self.lvl[x] != self.lvl[y]:
            return self.lvl[x] < self.lvl[y]
        return self.ct[self.head[x]] < self.ct[self.head[y]]

    def swap(self, a, b) -> None:
        x, y = self.heap[a], self.heap[b]
        self.heap[a], self.heap[b] = y, x
        self.at[x], self.at[y] = b, a

    def down(self, i) -> None:
        while True:
            c = 2 * i + 1
            if c >= self.hn:
                return
            if c + 1 < self.hn and self.less(c + 1, c):
                c += 1
            if not self.less(c, i):
                return
            self.swap(i, c)
            i = c

    def up(self, i) -> None:
        while i > 0:
            p = (i - 1) // 2
            if not self.less(i, p):
                return
            self.swap(i, p)
            i = p

    def remove(self, x) -> None:
        """Link x leaves the heap (no unfrozen job crosses it)."""
        i = self.at[x]
        self.hn -= 1
        if i != self.hn:
            self.swap(i, self.hn)
            y = self.heap[i]
            self.up(i)
            self.down(self.at[y])

    def cdown(self, i) -> None:
        cv, cj, cn = self.cv, self.cjob, self.cn
        while True:
            c = 2 * i + 1
            if c >= cn:
                return
            if c + 1 < cn and (cv[c + 1] < cv[c] or (cv[c + 1] == cv[c] and cj[c + 1] < cj[c])):
                c += 1
            if not (cv[c] < cv[i] or (cv[c] == cv[i] and cj[c] < cj[i])):
                return
            cv[i], cv[c] = cv[c], cv[i]
            cj[i], cj[c] = cj[c], cj[i]
            i = c
