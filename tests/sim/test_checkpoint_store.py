"""Checkpoint stores per island (`merge.checkpoint_store: per_island`): each island's writes go to a
store in the island, never across the WAN core; contention between writers emerges from the stores'
queues (one global store is shared by every island, an island's by its hosts only); an unlimited
store takes its bandwidth out of the checkpoint's time, and the writes still never cross the WAN."""

from __future__ import annotations

import pytest

from wadiloco.models.network.collective import link_efficiency
from wadiloco.models.spec.load import scenario_from_dict
from wadiloco.models.spec.resolve import resolve
from wadiloco.sim.fleet import Fleet, simulate

WAN = 25 * link_efficiency("auto", 25)  # an island's uplink, Gb/s
CKPT_GB = 64.0  # a host's checkpoint shard: 1e9 params x 8 bytes, in Gb


def _sc(merge=None, unlimited=(), hosts=1, phases=None):
    m = {"h_min": 32, "h_max": 64, **(merge or {})}
    if phases is not None:
        m["phases"] = phases
    return scenario_from_dict(
        {
            "name": "stores",
            "horizon_s": 150,
            "drain_s": 90,
            "fleet": {"islands": 2, "hosts_per_island": hosts, "unlimited": list(unlimited)},
            "training": {"params": hosts * 1.0e9},  # a 1e9-parameter shard per host whatever the island's size
            "merge": m,
            "workload": {"kind": "normal", "load": 0.3},
            "policy": {"name": "fixed", "params": {"H": 48}},
        }
    )


@pytest.mark.parametrize(
    "merge,unlimited,hosts,expected_s",
    [
        ({"checkpoint_store": "per_island"}, (), 1, CKPT_GB / 5.6),  # serialisation bounds it, as with one store
        ({}, ("storage",), 1, CKPT_GB / WAN),  # one store: the write crosses the island's uplink
        ({"checkpoint_store": "per_island"}, ("storage",), 1, CKPT_GB / 100),  # its own store: only the NIC
        ({"checkpoint_gbps": 2.0}, (), 1, 2 * CKPT_GB / 2.0),  # both islands queue at the one store
        ({"checkpoint_store": "per_island", "island_store_gbps": 2.0}, (), 1, CKPT_GB / 2.0),  # each at its own
        ({"checkpoint_store": "per_island", "island_store_gbps": 2.0}, (), 2, 2 * CKPT_GB / 2.0),  # an island's hosts
    ],
)
def test_the_store_a_write_queues_at_sets_the_checkpoints_time(merge, unlimited, hosts, expected_s):
    got = simulate(_sc(merge, unlimited, hosts), 1).summary["merge_phase_mean_s"]["ckpt"]
    assert got == pytest.approx(expected_s, rel=1e-9)


def _link_use(merge, unlimited=()) -> tuple[dict[str, float], int]:
    """Gigabits each kind of network link carried in a run whose merges only checkpoint, and the merges."""
    fleet = Fleet(resolve(_sc(merge, unlimited, phases=["ckpt"])), 1)
    res = fleet.run()
    net = fleet.res.net
    used = {}
    for kind in ("wan", "storage", "nic"):
        used[kind] = sum(lk.used for lk in net.edges_of_kind(kind))
    return used, res.summary["merges"]


@pytest.mark.parametrize("unlimited", [(), ("storage",)])
def test_per_island_stores_take_checkpoints_off_the_wan(unlimited):
    glob, n = _link_use({}, unlimited)
    local, n_local = _link_use({"checkpoint_store": "per_island"}, unlimited)
    assert min(n, n_local) >= 2
    written, written_local = n * 2 * CKPT_GB, n_local * 2 * CKPT_GB  # every merge, each island's replica
    assert glob["wan"] == pytest.approx(written, rel=1e-9)  # to the core, over each island's uplink
    assert local["wan"] == 0.0  # not one bit leaves an island
    if not unlimited:  # an unlimited link counts nothing; a limited store takes every bit
        assert glob["storage"] == pytest.approx(written, rel=1e-9)
        assert local["storage"] == pytest.approx(written_local, rel=1e-9)
    assert local["nic"] == pytest.approx(written_local, rel=1e-9)  # each host's NIC, to its switch


def test_per_island_store_is_opt_in_and_named_in_errors():
    from wadiloco.models.errors import InputError

    assert _sc().digest() == _sc({"island_store_gbps": 80.0}).digest()  # defaults leave hashes as they were
    assert _sc().digest() != _sc({"checkpoint_store": "per_island"}).digest()
    with pytest.raises(InputError) as e:
        _sc({"checkpoint_store": "regional"})
    assert e.value.where == "merge.checkpoint_store"
    with pytest.raises(InputError) as e:
        _sc({"island_store_gbps": 0})
    assert e.value.where == "merge.island_store_gbps"
