"""The fleet's shared resources as fabric links (sim.fabric): per host, and the network.

Each host's GPUs, CPU paths and PCIe are their own fabrics (no job crosses two of them); the
network is one fabric over the topology graph (sim.topology) plus checkpoint serialisation.
A resource the scenario names in `fleet.unlimited` has infinite capacity (models.spec.run.FleetSpec).

CPU work (serialisation, compression) goes through `HostRes.cpu.work(core_s, threads, press)`
(sim.host): core-seconds over threads on the host's cores, pressing on the engines' CPU paths.
"""

from __future__ import annotations

from wadiloco.models.spec.run import FleetSpec
from wadiloco.sim.fabric import INF, Fabric, Link
from wadiloco.sim.host import HostCpu
from wadiloco.sim.topology import build_graph, host_node


class HostRes:
    """One host's shared resources. No job crosses two of them, so each is its own fabric and a
    change on one (a serving iteration on the GPU) never re-allocates another. Each sidecar has
    its own GPU and its own CPU path (its engine thread's core, launch queue and memory path), and
    with frontend work one more for its API server; host-wide merge work (staging, checkpoint
    serialisation) presses on every one of these CPU paths."""

    def __init__(self, env, name: str, n_sidecars: int, fleet: FleetSpec, check: bool, seed: int = 0):
        self.name = name

        def own(res: str, cap: float):
            return Fabric(env, f"{name}/{res}", check).link(res, cap)

        gpu, cpu = fleet.gpu_capacity, fleet.cpu_capacity
        self.gpus = [own(f"gpu{j}", gpu) for j in range(n_sidecars)]
        self.learner_gpu = own("learner_gpu", gpu)
        self.cpus = [own(f"cpu{j}", cpu) for j in range(n_sidecars)]
        # The API server's CPU path per sidecar, only for an engine that has frontend work.
        self.fronts = [own(f"front{j}", cpu) for j in range(n_sidecars)] if fleet.frontends else []
        self.pcie = own("pcie", fleet.pcie_gbps)
        self.cpu = HostCpu(env, name, fleet, self.cpu_paths(), n_sidecars, check, seed)

    def cpu_paths(self) -> list[Link]:
        """Every CPU path host-wide merge work presses on: the engines' and the frontends'."""
        return [*self.cpus, *self.fronts]

    def links(self) -> list[Link]:
        return [*self.gpus, *self.cpus, *self.fronts, self.learner_gpu, self.pcie, self.cpu.cores]


class Network:
    """One link per directed topology edge (NICs, island uplinks, the store's write path), one per
    switch backplane, and one per host for checkpoint serialisation, all in one fabric."""

    def __init__(self, env, fleet: FleetSpec, hosts: list[HostRes], check: bool):
        self.fabric = net = Fabric(env, "net", check)
        self.graph = build_graph(fleet)
        self.edge_links = {(u, v): net.link(f"{u}->{v}", d["capacity"]) for u, v, d in self.graph.edges(data=True)}
        self.backplanes = {
            n: net.link(f"{n}/backplane", d["backplane_gbps"])
            for n, d in self.graph.nodes(data=True)
            if d.get("kind") == "switch"
        }
        # a host's serialisers: threads x the per-thread rate (sim.checkpoint)
        self.serialize = [net.link(f"{hr.name}/serialize", fleet.serialize_gbps) for hr in hosts]

    def edges_of_kind(self, *kinds: str) -> list[Link]:
        """The links of the topology edges of these kinds ("nic", "wan", "storage")."""
        return [lk for (u, v), lk in self.edge_links.items() if self.graph.edges[u, v]["kind"] in kinds]


class Resources:
    def __init__(self, env, fleet: FleetSpec, check: bool, seed: int = 0):
        self.hosts = [
            HostRes(env, host_node(i, h), fleet.sidecars_per_host, fleet, check, seed)
            for i in range(fleet.islands)
            for h in range(fleet.hosts_per_island)
        ]
        self.net = Network(env, fleet, self.hosts, check)
        self.links = [lk for hr in self.hosts for lk in hr.links()] + list(self.net.fabric.links.values())
        self.fabrics = list({id(lk.fabric): lk.fabric for lk in self.links}.values())

    def next_timer_at(self) -> float:
        """The next instant any fabric's job completes (its timer fires): before it, no job on any
        link ends by itself."""
        t = INF
        for f in self.fabrics:
            if f.next_at < t:
                t = f.next_at
        return t

    def next_touch_at(self) -> float:
        """A lookahead source (sim.lookahead; with fleet.host_cores): the next preemption switch on any host."""
        return min((hr.cpu.next_switch_at() for hr in self.hosts), default=INF)

    @property
    def bound_changed(self):
        return self.hosts[0].cpu.bound_changed if self.hosts else None

    @bound_changed.setter
    def bound_changed(self, changed) -> None:
        """The hosts' preempters tell the bound when their next switch moves."""
        for hr in self.hosts:
            hr.cpu.bound_changed = changed

    def peak_load(self) -> float:
        """The largest allocated rate over capacity any link has seen (at most 1: an invariant)."""
        return max((lk.peak_load for lk in self.links), default=0.0)
