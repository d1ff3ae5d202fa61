"""Run one sidecar engine (sim/engine.py) on its own: a bare SimPy environment, a GPU link and a host
link that nothing else uses (each on its own fabric, as in sim/resources.py), no trainer, no monitor.
This is "the project's engine" that `heapq_ratio` compares with benchmarks/reference.py, and what
the tests use to compare the two on arbitrary inputs."""

from __future__ import annotations

import math

import simpy

from wadiloco.models.engine.batching import TODAYS_STEP, EngineStep
from wadiloco.sim.engine import Lookahead, Sidecar
from wadiloco.sim.fabric import Fabric


def run_engine(
    arrivals,
    lat,
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    host_s: float,
    fast_forward: bool = True,
    until: float | None = None,
    step: EngineStep = TODAYS_STEP,
    kv=None,
    prefix=None,
    lookahead: bool = False,
    limits: tuple = (False, 0, math.inf, False),
) -> tuple[Sidecar, simpy.Environment]:
    """Serve `arrivals` (models.workload.kinds.Arrivals) until every request is done (or `until`).
    `lookahead`: the engine books its steps without a SimPy event each, up to `until` (what a fleet's
    lookahead bound is for an engine nothing else reads or touches: sim/lookahead.py); else it yields
    at every step, as with the bound off. `limits`: vLLM V1's (async scheduling, max_model_len, the client's
    time-out, the prefix cache in the pool: sim.engine.Sidecar)."""
    env = simpy.Environment()
    gpu = Fabric(env, "bench/gpu0").link("gpu0", 1.0)
    cpu = Fabric(env, "bench/cpu").link("cpu", 1.0)
    front = Fabric(env, "bench/front").link("front", 1.0) if step.frontend else None
    sc = Sidecar(
        env,
        0,
        arrivals,
        lat,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        host_s=host_s,
        gpu=gpu,
        host=cpu,
        fast_forward=fast_forward,
        step=step,
        front=front,
        kv=kv,
        prefix=prefix,
        lookahead=_bound(math.inf if until is None else until) if lookahead else None,
        limits=limits,
    )
    env.run(until)
    return sc, env


def _bound(until: float) -> Lookahead:
    la = Lookahead()
    la.until = until
    return la
