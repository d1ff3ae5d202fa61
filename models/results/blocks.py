"""Scenario blocks a plug-in resolves into an extra of a run's result (models.results.run `Extra`).

The block's schema is a field of models.spec.scenario.Scenario, listed in its PLUGIN_BLOCKS; the
plug-in registers how to check and resolve it here (the testbed's `testbed_labels:`:
models/testbed/plugin.py). Validation (models.spec.load) runs `check`, resolution (models.spec.resolve)
runs `extra` and puts what it returns in the RunSpec, and the fleet (sim.fleet) adds it to the run's
extras: its columns, summary keys and invariants.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wadiloco.models.plugins import Registry


@dataclass(frozen=True)
class ResultBlock:
    """How a block is checked and resolved. Both take the block's config, the horizon (s), the folder
    its relative paths start from and the file errors name: `check` raises its input errors, `extra`
    returns the run's `Extra`."""

    check: Callable[[Any, float, str, object], None]
    extra: Callable[[Any, float, str, object], Any]


RESULT_BLOCKS: Registry[str, ResultBlock] = Registry("result block")


def register_block(name: str, check: Callable, extra: Callable) -> None:
    """Resolve the scenario block `name` (a Scenario field) with `extra`, checked by `check`."""
    RESULT_BLOCKS[name] = ResultBlock(check, extra)
