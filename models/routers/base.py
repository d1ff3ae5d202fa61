"""What a router may see, and how routers are registered.

A router sits in front of the sidecars and picks one for each request as it arrives (sim/routing.py
runs it). It sees only a `RouterView`: the present state of each sidecar (requests outstanding,
free KV blocks, whether merge work presses on its host now) and the arriving request's own lengths
and prefix key. Nothing about later arrivals reaches it: the view is built from the engines' state
at the arrival instant (the oracle boundary, tests/policies/test_oracle_boundary.py).

`static` is the exception: it keeps the workload's own dealing (models.workload.kinds `spread`), decided
before the run, and no router process runs at all (off the hot path).
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict

from wadiloco.models.errors import InputError
from wadiloco.models.plugins import Registry
from wadiloco.models.spec.schema import validate


class Params(BaseModel):
    """Base of every router's parameter model: unknown fields are errors."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class RouterView(Protocol):
    """The present state of the sidecars (sim.routing.View)."""

    n: int  # sidecars

    def outstanding(self, s: int) -> int:
        """Requests waiting or running on sidecar s now."""

    def kv_free(self, s: int) -> float:
        """Free KV blocks of sidecar s now (inf: unlimited pool)."""

    def pressing(self, s: int) -> bool:
        """Whether merge work presses on sidecar s's GPU or host links now."""


class Router:
    """`route(view, prompt, output, key)` -> sidecar index, for a request arriving now; `key` is its
    prefix key (the first prefix block's hash of a Mooncake row; -1: none). `static` routers keep the
    workload's dealing and are never asked."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    static: ClassVar[bool] = False
    Params: ClassVar[type[Params]] = Params

    def __init__(self, params: Params, rng: Any = None):
        self.p = params
        self.rng = rng

    def route(self, view: RouterView, prompt: int, output: int, key: int) -> int:
        raise NotImplementedError


def least(view: RouterView, score, among=None) -> int:
    """The sidecar with the lowest score (the lowest index on ties: deterministic)."""
    best, best_s = None, -1
    for s in range(view.n) if among is None else among:
        v = score(s)
        if best is None or v < best:
            best, best_s = v, s
    return best_s


ROUTERS: Registry[str, type[Router]] = Registry("router")


def register(cls: type[Router]) -> type[Router]:
    if not cls.name:
        raise ValueError("a router needs a name")
    ROUTERS[cls.name] = cls
    return cls


def parse_router(name: str, params: dict | None, file: object = "<router>") -> tuple[type[Router], Params]:
    if name not in ROUTERS:
        raise InputError(file, "router.name", f"unknown router {name!r}; known: {', '.join(sorted(ROUTERS))}")
    cls = ROUTERS[name]
    return cls, validate(cls.Params, params or {}, file, "router.params")


def describe_routers() -> list[dict[str, Any]]:
    out = []
    for name in sorted(ROUTERS):
        cls = ROUTERS[name]
        fields = {k: f.get_default(call_default_factory=True) for k, f in cls.Params.model_fields.items()}
        out.append({"name": name, "summary": cls.summary, "params": fields})
    return out
