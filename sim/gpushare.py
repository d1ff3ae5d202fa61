"""Where training's own GPU work runs, and how hard it presses there (fleet.gpu_sharing).

The GPU a host's training work lands on is the learner GPU (`same_host`, or a MIG slice of its own)
or, under `same_gpu`, the sidecars' GPUs, where it time-slices with serving. What reaches it:

- merges (default): only merge work: the outer step (sim.merge) and staging copies;
- timeslice: also every inner step, as a hold of weight `gpu_inner` on each of the host's training
  GPUs from when its island starts stepping to when it reaches the merge barrier (or stops at the
  horizon): the GPU is busy with training all the time except at a barrier, which frees it; the
  all-reduce's NCCL kernels and checkpoint staging copies, as holds of the copy weight `gpu_stage`
  while they run; checkpoint staging also crosses the host's PCIe;
- mps: as timeslice, with every training job on a GPU capped at `mps_training_share` of it;
- mig: as merges, but training never touches the sidecar's slice, even under `same_gpu`.

Weights: models.training.interference (the H200 `outer` row for a saturating co-tenant, the `stage` row for
copies) unless the scenario's `interference:` sets them. Nothing here slows serving by a rule: a
hold is a fabric job, and a GPU in `fleet.unlimited` removes all of it.
"""

from __future__ import annotations

from wadiloco.models.spec.run import FleetSpec
from wadiloco.models.training.interference import InterferenceWeights
from wadiloco.sim.fabric import INF, Fabric, Job, Link
from wadiloco.sim.resources import HostRes


class GpuShare:
    def __init__(self, fc: FleetSpec, w: InterferenceWeights, hosts: list[HostRes]):
        self.mode = fc.gpu_sharing
        self.shared = fc.same_gpu and self.mode != "mig"
        self.steps_hold = self.mode in ("timeslice", "mps")  # inner steps, kernels and copies hold the GPU
        self.cap = fc.mps_training_share if self.mode == "mps" else 1.0
        self.w = w
        self.hosts = hosts
        self.per_island = fc.hosts_per_island
        self.learner_threads = fc.learner_threads_per_gpu * fc.learner_gpus_per_host
        self.threads_counted = fc.host_cores is not None
        self._inner: dict[int, list[Job]] = {}

    def training_gpus(self, hr: HostRes) -> list[Link]:
        """The GPUs a host's training work runs on: the sidecars' when it shares them, else its own."""
        return hr.gpus if self.shared and hr.gpus else [hr.learner_gpu]

    def outer_gpu(self, hr: HostRes) -> Link:
        """The GPU the host's outer-optimizer shard lives on (the outer step, the all-reduce kernels)."""
        return self.training_gpus(hr)[0]

    def holds(self, hr: HostRes, weight: float, name: str, gpus: list[Link] | None = None) -> list[Job]:
        """Training work pressing on the host's training GPUs (or `gpus`) until released."""
        if weight <= 0:
            return []
        links = self.training_gpus(hr) if gpus is None else gpus
        return [lk.fabric.start([lk], INF, weight, self.cap, ("hold", name)) for lk in links]

    def kernel_holds(self, hr: HostRes, name: str) -> list[Job]:
        """All-reduce kernels or staging copies on the outer shard's GPU (timeslice/mps only)."""
        return self.holds(hr, self.w.gpu_stage, name, [self.outer_gpu(hr)]) if self.steps_hold else []

    def computing(self, island: int, on: bool) -> None:
        """The trainer's callback: island `island` starts stepping (on) or stops at a barrier or the
        horizon (off). Its hosts' inner-step holds and learner threads follow."""
        hosts = self.hosts[island * self.per_island : (island + 1) * self.per_island]
        if self.steps_hold:
            if on and island not in self._inner:
                self._inner[island] = [j for hr in hosts for j in self.holds(hr, self.w.gpu_inner, "inner")]
            elif not on and island in self._inner:
                Fabric.release(self._inner.pop(island))
        if self.threads_counted:
            for hr in hosts:
                hr.cpu.learners(self.learner_threads if on else 0)

    @property
    def active(self) -> bool:
        """Whether the trainer needs to call `computing` at all."""
        return self.steps_hold or self.threads_counted
