"""A host's cores and what happens when more threads are runnable than it has: the oversubscription law.

The H200 host of the calibration runs (docs/sources.md, H200 calibration) has 16 cores (`cpus`). Its
`cpu` row ran one zlib compressor thread per core beside the eager decode loop (17 runnable threads on
16 cores): the step's median did not move (p50 ratio 0.98) but its tail did (p95 1.87x; p99 23.9 ms
against 7.5 ms alone, 3.2x, or 3.5x the alone median). A fluid share (16/17 of a core) cannot give that
shape: it would slow every step by 6% and none by 2x. What the scheduler does instead is preempt: now
and then the thread is taken off its core and waits a while for another slice.

The law (one latency-critical thread, e.g. an engine's scheduler/launch thread): while n runnable
threads share C < n cores, the thread is preempted at rate
    lambda = kappa * (n - C) / n / tau       (per second)
and each preemption costs a wait drawn exponentially with mean tau. (n - C) / n is the share of time a
thread would wait under a fluid fair share; kappa says how many times that share the critical thread
actually loses (a thread that never sleeps is preempted more than its fair share); tau is the mean
length of a wait. With n <= C nothing is preempted. Both numbers are fitted to the `cpu` row's p95 and
p99 (`fit_oversubscription`); its p50 and mean are then predictions (tests/training/test_host.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from wadiloco.models.engine.latency import load_calibration

EAGER = "decode_eager_b64_ctx1024"
MEASURED_THREADS = 1  # the serving loop's own thread, beside one compressor thread per core


@dataclass(frozen=True)
class Oversubscription:
    kappa: float  # critical thread's lost share over the fluid share (n - C) / n
    wait_s: float  # mean wait per preemption (tau)
    cores: int  # the measured host's cores (`cpus`)

    def rate(self, runnable: int, cores: int) -> float:
        """Preemptions per second of one latency-critical thread with `runnable` threads on `cores`."""
        if runnable <= cores:
            return 0.0
        return self.kappa * (runnable - cores) / runnable / self.wait_s


def wait_sf(x: float, mu: float, tau: float, kmax: int = 40) -> float:
    """P(W > x) for W = the sum of N ~ Poisson(mu) exponential waits of mean tau: the extra time of a
    step whose thread runs mu / lambda seconds (N preemptions, each a wait)."""
    if x < 0:
        return 1.0
    z = x / tau
    total, pk = 0.0, math.exp(-mu)
    gamma_sf, term = 0.0, math.exp(-z)  # P(Gamma(k, 1) > z) = sum_{j<k} e^-z z^j / j!
    for k in range(1, kmax + 1):
        pk *= mu / k
        gamma_sf += term
        term *= z / k
        total += pk * gamma_sf
    return total


def _bisect(f, lo: float, hi: float, n: int = 100) -> float:
    """The root of an increasing f on [lo, hi]."""
    for _ in range(n):
        mid = 0.5 * (lo + hi)
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def fit_oversubscription(cal: dict | None = None) -> Oversubscription:
    """kappa and tau from the `cpu` row of the eager (CPU-launch-bound) decode step: the step alone
    takes h (its baseline p50); under the compressors it takes h + W. tau and mu = lambda*h are the
    pair for which P(W > (r95 - 1) h) = 5% and P(W > (r99 - 1) h) = 1%, where r95 is the row's
    p95_ratio and r99 its p99 over the baseline's p99 (the file's own convention)."""
    cal = cal if cal is not None else load_calibration()
    row = cal["interference"][EAGER]
    base, hit = row["baseline"], row["cpu"]
    h = base["p50_ms"] / 1e3
    x95 = (float(hit["p95_ratio"]) - 1.0) * h
    x99 = (hit["p99_ms"] / base["p99_ms"] - 1.0) * h

    def mu_for(tau: float) -> float:  # the preemption count that puts 5% of steps past x95
        return _bisect(lambda mu: wait_sf(x95, mu, tau) - 0.05, 1e-9, 50.0)

    # A longer mean wait fattens the tail: P(W > x99) grows with tau along the p95 curve.
    tau = _bisect(lambda t: wait_sf(x99, mu_for(t), t) - 0.01, 1e-5, 1.0)
    mu = mu_for(tau)
    cores = int(cal["cpus"])
    n = cores + MEASURED_THREADS
    kappa = (mu / h) * tau * n / (n - cores)
    return Oversubscription(kappa=kappa, wait_s=tau, cores=cores)


@lru_cache(maxsize=1)
def default_oversubscription() -> Oversubscription:
    return fit_oversubscription()
