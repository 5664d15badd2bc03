"""KvStore: the replicated, eventually consistent key-value mesh (a sans-I/O core plus an
asyncio/ZeroMQ node)."""
