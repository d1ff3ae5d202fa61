"""Sweeps: regimes x policies x seeds, run with the calibration protocol. A reading guide:

- `spec`: the sweep YAML's schema (pydantic; errors name the file and the field);
- `plan`: the one plan type (`Plan`: regimes, arms, tasks), built from a spec by `load_sweep`,
  kept in the store as `Plan.to_dict()` and read back with `Plan.from_dict()`;
- `plugins`: extra policy modules from $WADILOCO_PLUGINS, loaded in every process;
- `scheduling`: `execute_plan`, dependencies first, each result stored as it arrives;
- `backends`: local worker processes or Dask; `worker`: what a worker does with one task;
- `folder`: the output folder's lock, store and leftovers; `kill_points`: recorded crash points
  for the crash tests;
- `export`: the tidy one-row-per-run table; `cli`: the `sweep`, `report` and `export` commands.

The analysis of a finished sweep is experiments/protocol.py, rendered by experiments/report.py.
"""

from wadiloco.experiments.sweep.plan import Plan, build_plan, load_sweep
from wadiloco.experiments.sweep.scheduling import Outcome, execute_plan

__all__ = ["Plan", "Outcome", "build_plan", "execute_plan", "load_sweep"]
