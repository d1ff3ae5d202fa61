import nbformat as nbf
nb = nbf.v4.new_notebook()
md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
nb.cells = [
md("""# 03 · Capacity planning: how much serving can this fleet carry while it trains?

A capacity planner's question: at **90% SLO attainment**, what is the largest request rate each
sidecar can take while the fleet trains with a given merge policy, and how much less is that than
if the fleet did not train at all?

`experiments.capacity.capacity` answers it by bisection over the load, one search per seed, with
common random numbers (the same seed draws the same arrivals at every load, scaled), and a bootstrap
CI across seeds. The CLI equivalent is `wadiloco capacity SCENARIO --policy fixed --attainment 0.9`,
and `wadiloco whatif SCENARIO --vary PATH=V1,V2 --out DIR` sweeps one field."""),
code("""import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from experiments.capacity import SearchSpec, capacity
from models.config import load_scenario, with_overrides

sns.set_theme(style="whitegrid")
# Teaching sizes: a few seconds per search. For planning, use >= 10 seeds, the full horizon, tol 0.01.
SEEDS, SPEC, WORKERS = 2, SearchSpec(attainment=0.9, horizon_s=60.0, tol=0.06, lo=0.4, hi=1.2), 1"""),
md("""We take the bursty regime on a 2-island fleet whose serving engine is CPU-launch bound (eager) and
whose outer step runs on the serving GPU, and merge every 48 inner steps, so several merges fall into
the short window."""),
code("""sc = with_overrides(load_scenario("../scenarios/bursty.yaml"), {
    "fleet.islands": 2, "fleet.colocation": "same_gpu", "engine.cuda_graphs": False,
    "merge.h_min": 32, "merge.h_max": 64, "policy.params": {"H": 48}})
rows = []
for field, values in {"merge.serialize_gbps": [0.7, 44.8], "fleet.interisland_gbps": [5, 100]}.items():
    for v in values:
        r = capacity(with_overrides(sc, {field: v}), "fixed", {"H": 48}, seeds=SEEDS, spec=SPEC, workers=WORKERS)
        rows.append({"field": field, "value": v, "policy": r["max_rate_rps_per_sidecar"],
                     "lo": r["max_rate_ci_low"], "hi": r["max_rate_ci_high"],
                     "no_sync": r["no_sync_max_rate_rps_per_sidecar"], "cost": r["capacity_cost_fraction"]})
df = pd.DataFrame(rows)
df.round(3)"""),
code("""fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
for ax, (field, d) in zip(axes, df.groupby("field", sort=False)):
    x = range(len(d))
    ax.errorbar(x, d["policy"], yerr=[d["policy"] - d["lo"], d["hi"] - d["policy"]], marker="o", capsize=4,
                label="training with fixed H=48")
    ax.plot(x, d["no_sync"], "k--", label="no training (no_sync)")
    ax.set_xticks(list(x), [str(v) for v in d["value"]])
    ax.set_xlabel(field + " (Gb/s)")
axes[0].set_ylabel("max req/s per sidecar at 90% SLO")
axes[0].legend(loc="lower right")
fig.tight_layout()
plt.show()"""),
md("""**Reading it.** In this configuration neither knob moves the safe capacity by more than the
search resolution (`tol x capacity`, about 1 req/s here), and that is the lesson, not a failure:

* A faster WAN shortens the all-reduce, which holds NICs and inter-island links. Serving uses
  neither, so serving capacity cannot move; what moves is merge duration, i.e. training throughput.
* Slower checkpoint serialisation makes the checkpoint phase longer, and while it lasts it presses on
  the engines' CPU path (weight 0.49, fitted from the eager H200 measurement). But the capacity limit
  sits at high load, where iterations carry ~256 sequences and are GPU-bound: the CPU part runs
  beside the GPU part and is hidden. CPU pressure hurts only lightly loaded, CPU-bound engines,
  which have slack anyway.
* What does cost capacity is work that takes the serving **GPU** at high load: the outer step when
  it runs on the sidecar's GPU (`fleet.colocation: same_gpu`) time-slices with serving (2.3x slower
  steps in the calibration). With a ~1B model it lasts ~10-20 ms per merge; try `training.params`
  or `merge.outer_elements_per_s` to see when it starts to matter.

At teaching sizes the CIs are wide; rerun anything you want to rely on at planning sizes."""),
]
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, "notebooks/03_capacity_planning.ipynb")
