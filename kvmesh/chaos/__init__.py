"""The chaos harness: a workload, a fault schedule and a checker for a running cluster
(`tools/chaos.py`), and a deterministic simulation of the store core (`kvmesh.chaos.sim`)."""
