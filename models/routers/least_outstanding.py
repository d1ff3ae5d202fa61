"""least_outstanding: join the shortest queue (waiting + running now), as vLLM's production-stack
router and llm-d's queue scorer do; ties to the lowest index."""

from __future__ import annotations

from wadiloco.models.routers.base import Router, RouterView, least, register


@register
class LeastOutstanding(Router):
    name = "least_outstanding"
    summary = "join the shortest queue: fewest requests waiting or running now"

    def route(self, view: RouterView, prompt: int, output: int, key: int) -> int:
        return least(view, view.outstanding)
