# cython: wraparound=False
"""Weighted max-min fair rates by progressive filling, on plain arrays: the arithmetic of every
re-allocation of a shared resource (sim.fabric Fabric._reallocate), which setup.py compiles with the
serving core (models/engine/_fast/__init__.py picks the compiled or the pure module, as for the engine).

Jobs cross links (indices into `cap`); each has a weight and a cap on its rate. Each round, every
link splits what it has left among its unfrozen jobs in proportion to their weights, and the tightest
constraint freezes first: the link with the least level (capacity left per unit of weight), or a
job's own cap. The float operations, their order and the tie-breaks are those of the plain statement
(tests/network/test_fabric.py keeps the two bit-identical):
- a link's weight sum is summed afresh each round, over the unfrozen jobs in job order;
- the tightest link is the first whose level is least, in the order the unfrozen jobs first cross
  the links (job by job, link by link);
- the tightest cap is the first job's of least max_rate / weight, and it wins a tie with a link;
- a frozen job takes weight x level off each link it crosses, floored at 0, frozen jobs in job order.
"""

from __future__ import annotations

from array import array

INF = float("inf")


def fair_share(cap, lk, off, weight, max_rate, rate, peak) -> None:
    """Job j (of n = len(weight)) crosses links lk[off[j]:off[j + 1]]. Sets rate[j], and raises
    peak[l] to the load (allocated rate over capacity, the jobs' rates summed in job order) of each
    limited link l a job crosses."""
    n, m = len(weight), len(cap)
    left = array("d", cap)
    wsum = array("d", bytes(8 * m))
    stamp = array("q", bytes(8 * m))  # the last round whose weight sum includes link l
    order = array("q", bytes(8 * m))  # this round's links, in the order the pending jobs first cross them
    crossed = array("q", bytes(8 * m))  # the first round's: every link a job crosses
    pend = array("q", range(n))  # the unfrozen jobs, in job order
    n_pend, rnd, n_links = n, 0, 0
    while n_pend > 0:
        rnd += 1
        k = 0
        for i in range(n_pend):
            j = pend[i]
            w = weight[j]
            for t in range(off[j], off[j + 1]):
                x = lk[t]
                if stamp[x] != rnd:
                    stamp[x] = rnd
                    wsum[x] = 0.0 + w
                    order[k] = x
                    k += 1
                else:
                    wsum[x] = wsum[x] + w
        if rnd == 1:
            n_links = k
            for i in range(k):
                crossed[i] = order[i]
        best, best_link = INF, -1
        for i in range(k):
            x = order[i]
            lvl = left[x] / wsum[x]
            if lvl < best:
                best, best_link = lvl, x
        cap_at, cap_lvl = -1, INF
        for i in range(n_pend):
            j = pend[i]
            c = max_rate[j] / weight[j]
            if cap_at < 0 or c < cap_lvl:
                cap_at, cap_lvl = i, c
        kept = 0
        for i in range(n_pend):
            j = pend[i]
            if cap_lvl <= best:
                hit = i == cap_at
            else:
                hit = False
                for t in range(off[j], off[j + 1]):
                    if lk[t] == best_link:
                        hit = True
                        break
            if not hit:
                pend[kept] = j
                kept += 1
                continue
            r = weight[j] * (cap_lvl if cap_lvl <= best else best)
            rate[j] = r
            for t in range(off[j], off[j + 1]):
                x = lk[t]
                y = left[x] - r
                left[x] = y if y > 0.0 else 0.0
        n_pend = kept
    # each crossed link's load: its jobs' rates summed in job order (as sum() over the link's jobs)
    for i in range(n_links):
        wsum[crossed[i]] = 0.0
    for j in range(n):
        for t in range(off[j], off[j + 1]):
            x = lk[t]
            wsum[x] = wsum[x] + rate[j]
    for i in range(n_links):
        x = crossed[i]
        if cap[x] != INF:
            y = wsum[x] / cap[x]
            if y > peak[x]:
                peak[x] = y
