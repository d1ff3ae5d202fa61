"""The fleet's network as a networkx graph, and all-reduce flows routed over it.

Nodes: `host:i.h` (one NIC each), `switch:i` (an island's switch), `wan` (the inter-island core),
`store` (checkpoint storage, reached from the WAN core), or with `merge.checkpoint_store:
per_island` a `store:i` per island, reached from its switch (each host node names its store in
its `store` attribute). Edges are directed (links are full
duplex) and carry a capacity in Gb/s: NIC = nic_gbps, switch backplane, island uplink =
interisland_gbps * wan_efficiency (`auto`: the share a socket ring all-reduce gets of a link at
that rate, models.network.collective). Each edge becomes one `Link` in the network fabric, so flows
that share an edge share its bandwidth.

All-reduce of the pseudo-gradient across islands is a ring: host h of island i sends its shard's
ring traffic, 2(n-1)/n of its shard (the standard ring all-reduce volume), to host h of island
i+1. With n islands of k hosts, k*n flows run at once and each island uplink carries k of them.
"""

from __future__ import annotations

import networkx as nx

from wadiloco.models.spec.run import FleetSpec


def host_node(island: int, h: int) -> str:
    return f"host:{island}.{h}"


def build_graph(fleet: FleetSpec) -> nx.DiGraph:
    """The topology with its capacities (already +inf where fleet.unlimited names them: models.spec.run)."""
    g = nx.DiGraph()
    nic, sw, wan = fleet.nic_gbps, fleet.switch_gbps, fleet.wan_gbps
    per_island = fleet.checkpoint_store == "per_island"
    g.add_node("wan", kind="core")
    if not per_island:
        g.add_node("store", kind="storage")
        g.add_edge("wan", "store", capacity=fleet.store_gbps, kind="storage")
    for i in range(fleet.islands):
        s = f"switch:{i}"
        g.add_node(s, kind="switch", island=i)
        g.add_edge(s, "wan", capacity=wan, kind="wan")
        g.add_edge("wan", s, capacity=wan, kind="wan")
        if per_island:
            g.add_node(f"store:{i}", kind="storage", island=i)
            g.add_edge(s, f"store:{i}", capacity=fleet.island_store_gbps, kind="storage")
        for h in range(fleet.hosts_per_island):
            n = host_node(i, h)
            g.add_node(n, kind="host", island=i, store=f"store:{i}" if per_island else "store")
            g.add_edge(n, s, capacity=nic, kind="nic")
            g.add_edge(s, n, capacity=nic, kind="nic")
    # The switch backplane: one self-describing edge per island, crossed by every intra-island hop.
    for i in range(fleet.islands):
        g.nodes[f"switch:{i}"]["backplane_gbps"] = sw
    return g


def route(g: nx.DiGraph, src: str, dst: str) -> list[tuple[str, str]]:
    """Edges of the fewest-hop path (deterministic: networkx's BFS on insertion order)."""
    path = nx.shortest_path(g, src, dst)
    return list(zip(path[:-1], path[1:]))


def ring_allreduce_flows(fleet: FleetSpec, shard_bytes: float) -> list[tuple[str, str, float]]:
    """(src, dst, gigabits) for every flow of one ring all-reduce across islands."""
    n = fleet.islands
    if n < 2:
        return []
    gbits = 2 * (n - 1) / n * shard_bytes * 8 / 1e9
    flows = []
    for i in range(n):
        for h in range(fleet.hosts_per_island):
            flows.append((host_node(i, h), host_node((i + 1) % n, h), gbits))
    return flows
