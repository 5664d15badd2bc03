# kvmesh node image: a KvStore node with its agent (the Linux southbound configures the container's
# own network namespace, which needs CAP_NET_ADMIN). Built by tools/build-image.sh, whose build
# context is this file and a wheelhouse (wheels/): nothing is fetched from a package index.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}
ARG VERSION=unknown
LABEL org.opencontainers.image.title="kvmesh" \
      org.opencontainers.image.description="KvStore mesh node and network-configuration agent" \
      org.opencontainers.image.version="${VERSION}"

# What the node, the agent and every model need: ip (iproute2), nft (nftables: linux/nftables),
# dot (graphviz: `kvmesh graph`), a Python with venv. From Debian's packages, unless the base
# already has them (the debootstrap base of tools/build-image.sh does).
RUN set -e; missing=""; \
    command -v ip >/dev/null || missing="$missing iproute2"; \
    command -v nft >/dev/null || missing="$missing nftables"; \
    command -v dot >/dev/null || missing="$missing graphviz"; \
    python3 -c 'import venv, ensurepip' 2>/dev/null || missing="$missing python3-venv"; \
    if [ -n "$missing" ]; then \
      apt-get update && apt-get install -y --no-install-recommends $missing \
      && rm -rf /var/lib/apt/lists/*; \
    fi

COPY wheels /tmp/wheels
RUN python3 -m venv /opt/kvmesh \
    && /opt/kvmesh/bin/pip install -q --no-cache-dir --no-index --find-links /tmp/wheels kvmesh \
    && rm -rf /tmp/wheels \
    && useradd --system --home-dir /var/lib/kvmesh --no-create-home kvmesh
ENV PATH=/opt/kvmesh/bin:$PATH

# The image runs as an unprivileged user; the nodes of docker-compose.yml run as root with
# CAP_NET_ADMIN alone, which configuring their network needs.
USER kvmesh
# KvStore PUB, KvStore commands, agent REST API
EXPOSE 60001 60002 8080
ENTRYPOINT ["kvmesh"]
CMD ["--help"]
