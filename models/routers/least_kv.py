"""least_kv: the sidecar with the most free KV blocks now (fewest outstanding on ties); without KV
pools every sidecar has unlimited blocks, so it is least_outstanding."""

from __future__ import annotations

from wadiloco.models.routers.base import Router, RouterView, least, register


@register
class LeastKV(Router):
    name = "least_kv"
    summary = "most free KV blocks now (then fewest outstanding)"

    def route(self, view: RouterView, prompt: int, output: int, key: int) -> int:
        return least(view, lambda s: (-view.kv_free(s), view.outstanding(s)))
