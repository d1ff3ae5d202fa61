"""The network's plain arithmetic: fair shares of links (fairshare), and the socket ring all-reduce
fitted on a measured cluster (collective: the links' efficiency, the ring's latency, their fits)."""
