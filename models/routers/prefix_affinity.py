"""prefix_affinity: requests that share a prefix go to the same sidecar (a hash of the prefix key:
the first prefix block's hash, sim.routing.prefix_key: a Mooncake row's first hash_id, or an
engine.shared_prefix system prompt's), unless it has `max_imbalance` more outstanding requests
than the least loaded one, when the request goes there instead; requests with no key (no hashes) go
to the least loaded (SGLang's cache-aware router balances the same way). With prefix caches
(engine.prefix_cache) this keeps a prefix's blocks cached on one sidecar."""

from __future__ import annotations

from pydantic import Field

from wadiloco.models.routers.base import Params, Router, RouterView, least, register

MASK = (1 << 64) - 1


def mix(x: int) -> int:
    """splitmix64's finaliser: a fixed, seed-free hash of a prefix key."""
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


class AffinityParams(Params):
    max_imbalance: int = Field(8, ge=0, description="outstanding requests over the least loaded before it balances")


@register
class PrefixAffinity(Router):
    name = "prefix_affinity"
    summary = (
        "same prefix, same sidecar (hash of the first prefix block), unless it is max_imbalance busier; "
        "requests without block hashes (no trace hash_ids, no engine.shared_prefix) go to the least loaded"
    )
    Params = AffinityParams

    def route(self, view: RouterView, prompt: int, output: int, key: int) -> int:
        low = least(view, view.outstanding)
        if key < 0:
            return low
        s = mix(key) % view.n
        return s if view.outstanding(s) - view.outstanding(low) <= self.p.max_imbalance else low
