"""KvStore: the replicated, eventually consistent key-value mesh (sans-I/O core + asyncio/ZeroMQ node)."""
