# kvmesh node image: a KvStore node with its agent (Linux southbound in the container's own
# network namespace, which needs CAP_NET_ADMIN). Used by docker-compose.yml.
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends iproute2 graphviz \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/kvmesh
COPY setup.cfg pyproject.toml README.md ./
COPY if ./if
COPY kvstore ./kvstore
COPY scheduler ./scheduler
COPY southbound ./southbound
COPY kvmesh ./kvmesh
RUN pip install --no-cache-dir .

# KvStore PUB, KvStore commands, agent REST API
EXPOSE 60001 60002 8080
ENTRYPOINT ["kvmesh"]
CMD ["--help"]
