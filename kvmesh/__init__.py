"""kvmesh: the top layer that wires the KvStore, the KVScheduler and the southbounds together.

`kvstore`, `scheduler` and `southbound` never import this package; only the CLI, the agent
process and the cluster launcher live here.
"""
