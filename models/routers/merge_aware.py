"""merge_aware: join the shortest queue among the sidecars no merge work presses on now (present
time only: the router sees where merge jobs are, not when the next merge will start); all of them
if every one is pressed."""

from __future__ import annotations

from wadiloco.models.routers.base import Router, RouterView, least, register


@register
class MergeAware(Router):
    name = "merge_aware"
    summary = "shortest queue among sidecars with no merge work on their GPU or host now"

    def route(self, view: RouterView, prompt: int, output: int, key: int) -> int:
        free = [s for s in range(view.n) if not view.pressing(s)]
        return least(view, view.outstanding, free or None)
