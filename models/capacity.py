"""A sidecar's serving capacity from the latency model, so load can be stated as utilisation.

At saturation the batch holds `max_num_seqs` requests. Each request costs its prefill (b per
prompt token, plus one batch slot d) and its share of the decode iterations it sits in: output
tokens x (fixed iteration cost / batch + c x mean context + d). An iteration's fixed cost is
max(a, host time) because the host part runs beside the GPU part. Regimes then mean the same
thing when the latency model or engine settings change; tests check that a simulated sidecar
is stable just below this rate and saturates above it.
"""
from __future__ import annotations

from models.latency import LatencyModel


def sidecar_capacity_rps(lat: LatencyModel, max_num_seqs: int, host_s: float,
                         mean_prompt: float, mean_output: float) -> float:
    B = max_num_seqs
    fixed = max(lat.a, host_s)
    per_req = lat.b * mean_prompt + lat.d + mean_output * (fixed / B + lat.c * (mean_prompt + mean_output / 2) + lat.d)
    return 1.0 / per_req
