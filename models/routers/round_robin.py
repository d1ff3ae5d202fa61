"""round_robin: each arrival to the next sidecar in turn, whatever their state."""

from __future__ import annotations

from wadiloco.models.routers.base import Router, RouterView, register


@register
class RoundRobin(Router):
    name = "round_robin"
    summary = "each arrival to the next sidecar in turn"

    def __init__(self, params, rng=None):
        super().__init__(params, rng)
        self.next = 0

    def route(self, view: RouterView, prompt: int, output: int, key: int) -> int:
        s = self.next % view.n
        self.next = s + 1
        return s
