"""The node agent: KvStore desired state -> KVScheduler -> southbounds, plus reconciliation."""
