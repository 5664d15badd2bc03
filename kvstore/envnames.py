"""Environment variables a KvStore client reads (named here, in a module that imports nothing,
so that a command line can declare its options without loading the client)."""

KEY_FILE_ENV = "KVMESH_KEY_FILE"  # the client's CurveZMQ secret key file (NAME.key_secret)
SERVER_KEY_ENV = "KVMESH_SERVER_KEY"  # the node's public key: its .key file or z85 text
