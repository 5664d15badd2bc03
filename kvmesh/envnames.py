"""Environment variables a REST client of the agents reads (the CLI's --http-token-file and
--http-ca), named in a module that imports nothing so the CLI can declare its options cheaply."""

HTTP_TOKEN_ENV = "KVMESH_HTTP_TOKEN_FILE"  # the bearer token the REST commands send
HTTP_CA_ENV = "KVMESH_HTTP_CA"  # the certificate (or CA) that verifies an agent's TLS
