"""random: each arrival to a sidecar drawn uniformly (the router's own seeded stream)."""

from __future__ import annotations

from wadiloco.models.routers.base import Router, RouterView, register


@register
class Uniform(Router):
    name = "random"
    summary = "each arrival to a sidecar drawn uniformly at random (seeded)"

    def route(self, view: RouterView, prompt: int, output: int, key: int) -> int:
        return int(self.rng.integers(0, view.n))
