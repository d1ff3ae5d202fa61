"""What a scenario's fields rule out once combined, found when it is validated: a run would otherwise
fail only when its fleet is built. Blocks that exclude each other, the router and its params, and
the KV pool's sizes (a pool that cannot exist is refused naming the field that takes its room).

Validation (models.spec.load) calls `check_buildable`; resolution (models.spec.resolve) builds its
sub-specs from the same numbers (`kv_sizes`, `prefix_blocks`, `router`), so the two never disagree.
Nothing here is fitted or built, and nothing imports the validation or resolution modules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from wadiloco.models.engine.kv import bytes_per_token, pool_blocks
from wadiloco.models.engine.prefix import MOONCAKE_BLOCK_TOKENS
from wadiloco.models.errors import InputError
from wadiloco.models.routers import ROUTERS, parse_router
from wadiloco.models.spec.scenario import Scenario


def check_buildable(sc: Scenario, closed: bool, file: object) -> None:
    """Every check a fleet's build would fail at: blocks ruled out together, the router and its
    params (`static` takes none), a KV pool that cannot exist. `closed`: the workload is a closed loop."""
    check_combinations(sc, closed, file)
    router(sc, file)
    kv_sizes(sc, block_bytes(sc), file)


def block_bytes(sc: Scenario) -> int:
    e = sc.engine
    return e.kv_block_size * bytes_per_token(e.model_layers, e.model_kv_heads, e.model_head_dim, e.kv_dtype_bytes)


def prefix_blocks(sc: Scenario) -> tuple[int, int] | None:
    """(blocks, tokens per block) of a sidecar's prefix cache: engine.prefix_cache tokens in whole
    512-token blocks; None when off (no field, or fewer tokens than a block)."""
    tokens = sc.engine.prefix_cache
    if not tokens or tokens < MOONCAKE_BLOCK_TOKENS:
        return None
    return tokens // MOONCAKE_BLOCK_TOKENS, MOONCAKE_BLOCK_TOKENS


@dataclass(frozen=True)
class KVSizes:
    """A sidecar's pool in blocks, the blocks a prefix cache reserves in it, and the merge buffers'
    blocks on the sidecar that holds them (`always` held, or only while a merge runs; None: no such
    sidecar, merge_memory none or no same_gpu)."""

    pool: int
    reserved: int
    hold: int | None
    always: bool


def kv_sizes(sc: Scenario, bb: int, file: object) -> KVSizes | None:
    """The KV pool's sizes (None: unlimited, no pool given or fleet.unlimited names kv), or an input
    error when a request could never hold a block: the memory left after the weights, or a prefix
    cache and merge buffers that take the whole pool, naming the field that takes the room."""
    e = sc.engine
    if (e.kv_blocks is None and e.gpu_memory_gb is None) or "kv" in sc.fleet.unlimited:
        return None
    pool = e.kv_blocks if e.kv_blocks is not None else _memory_pool(sc, bb, file)
    what = (
        f"engine.kv_blocks ({pool:,})"
        if e.kv_blocks is not None
        else f"the {pool:,} blocks engine.gpu_memory_gb leaves"
    )
    px = prefix_blocks(sc)
    reserved = math.ceil(px[0] * px[1] / e.kv_block_size) if px else 0  # held once, whoever uses them
    if reserved >= pool:
        msg = f"the prefix cache takes {reserved:,} KV blocks, all of {what}: none is left for requests"
        raise InputError(file, "engine.prefix_cache", msg)
    if e.merge_memory == "none" or sc.fleet.colocation != "same_gpu":
        return KVSizes(pool, reserved, None, False)
    m = sc.merge
    shard = sc.training.params / sc.fleet.hosts_per_island
    hold = math.ceil(shard * (m.pseudo_grad_bytes_per_param + m.checkpoint_bytes_per_param) / bb)
    if reserved + hold >= pool:
        also = f" and the prefix cache's {reserved:,}" if reserved else ""
        msg = (
            f"the merge buffers (a host's shard of training.params: {hold:,} KV blocks){also} take all of {what}"
            f"{' while a merge runs' if e.merge_memory == 'merge' else ''}: none is left for requests"
        )
        raise InputError(file, "engine.merge_memory", msg)
    return KVSizes(pool, reserved, hold, e.merge_memory == "always")


def _memory_pool(sc: Scenario, bb: int, file: object) -> int:
    """The blocks vLLM's memory profiler leaves: engine.gpu_memory_gb x utilisation - weights - activations."""
    e, gb = sc.engine, 1e9
    free = e.gpu_memory_gb * e.gpu_memory_utilization - e.weights_gb - e.activation_gb
    if free * gb < bb:
        msg = (
            f"{e.gpu_memory_gb:g} GB x gpu_memory_utilization {e.gpu_memory_utilization:g} - engine.weights_gb "
            f"{e.weights_gb:g} - engine.activation_gb {e.activation_gb:g} leaves {free:.4g} GB, not one KV block "
            f"({bb:,} bytes): no KV pool can exist; raise engine.gpu_memory_gb or lower the weights"
        )
        raise InputError(file, "engine.gpu_memory_gb", msg)
    return pool_blocks(e.gpu_memory_gb * gb, e.gpu_memory_utilization, e.weights_gb * gb, e.activation_gb * gb, bb)


def router(sc: Scenario, file: object):
    """(router class, parsed params): an unknown name or params it does not take (`static`'s too) is
    an input error naming router.*."""
    return parse_router(sc.router.name, sc.router.params, file)


def routed(sc: Scenario) -> bool:
    """Whether a router process runs (an unknown name is one: `router` reports it)."""
    cls = ROUTERS.get(sc.router.name)
    return cls is None or not cls.static


def check_combinations(sc: Scenario, closed: bool, file: object) -> None:
    """What the blocks rule out together: each an input error naming the block it is about."""
    is_routed, px = routed(sc), prefix_blocks(sc) is not None
    if sc.disagg is not None:
        why = (
            "a closed-loop workload creates each sidecar's requests: not with disagg"
            if closed
            else "disaggregated serving deals requests to its prefill sidecars itself"
            if is_routed
            else "engine.prefix_cache is not modelled on prefill sidecars: leave it off"
            if px
            else None
        )
        if why:
            raise InputError(file, "disagg", why)
    if sc.remote_kv is not None:
        why = (
            "needs engine.prefix_cache (its caches are the pool)"
            if not px
            else "a closed-loop workload creates each sidecar's requests: not with remote_kv"
            if closed
            else "requests enter their workload's sidecar: use router.name static"
            if is_routed
            else None
        )
        if why:
            raise InputError(file, "remote_kv", why)
    if is_routed and closed:
        raise InputError(
            file,
            "router.name",
            f"{sc.router.name} routes arrivals, but a closed-loop workload has none to route: each sidecar's "
            "client sends its next requests when its own earlier ones finish there (models.workload.clients), so "
            "the requests are tied to that sidecar; use router.name: static",
        )
