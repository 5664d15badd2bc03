"""A local cluster's state file `<run dir>/cluster.json` (`ClusterState`, one `NodeInfo` per
node) and where it is kept by default: what `kvmesh.cluster` writes and reads, and what the REST
client reads to find a cluster's agent credentials (`kvmesh.rest_client`). A module of its own so
that the REST client does not import the launcher (which imports the REST client)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kvmesh import netlab, rundirs
from kvstore import ClientCurve, KvStoreClient, load_key_pair, load_public_key, safefs

RUN_DIR_ENV = "KVMESH_RUN_DIR"


def default_run_dir(purpose: str = "cluster") -> Path:
    """Where `purpose` (cluster, chaos) keeps its state, logs and keys unless told: the user's
    runtime base (`kvmesh.rundirs`: /run/kvmesh for root) / `purpose`."""
    return rundirs.default_dir(purpose)


DEFAULT_RUN_DIR = Path(os.environ[RUN_DIR_ENV]) if os.environ.get(RUN_DIR_ENV) \
    else default_run_dir()
STATE_FILE = "cluster.json"


@dataclass
class NodeInfo:
    cmd_url: str
    pub_url: str
    netns: str | None
    http: str | None
    vpp_socket: str | None = None
    data_dir: str | None = None  # the node's durable store (kept by `down`, see `purge`)
    pids: dict[str, int] = field(default_factory=dict)
    peers: list[str] = field(default_factory=list)
    # How each process was started (role -> argv), so a fault injector can restart it.
    commands: dict[str, list[str]] = field(default_factory=dict)
    key_file: str | None = None  # the node's secret key (None: an insecure cluster)
    public_key: str | None = None
    leaf: bool = False  # a KvStore leaf (`node run --leaf`): one peer, a core node


@dataclass
class ClusterState:
    run_dir: str
    topology: str
    nodes: dict[str, NodeInfo]
    namespaces_made: list[str] = field(default_factory=list)
    lab: dict[str, object] | None = None  # netlab.Lab.to_json() of an isolated cluster
    operator_key: str | None = None  # the operator's secret key file
    # The agents' REST credentials of an isolated cluster (its agents listen off loopback):
    # a self-signed certificate for every node address, its key, a bearer token file.
    http_cert: str | None = None
    http_key: str | None = None
    http_token_file: str | None = None
    core: int | None = None  # how many full nodes, the others leaves (None: all full)

    def save(self) -> None:
        safefs.write_replace(Path(self.run_dir) / STATE_FILE,
                             json.dumps(asdict(self), indent=2, sort_keys=True).encode())

    @classmethod
    def load(cls, run_dir: Path) -> ClusterState | None:
        """The state in `run_dir`; None if there is none. The run dir must be the invoking
        user's (safefs.UnsafePathError otherwise): its pids are killed by `down`."""
        path = run_dir / STATE_FILE
        if not os.path.lexists(run_dir):
            return None
        safefs.check_private_dir(run_dir)
        if not os.path.lexists(path):
            return None
        raw = json.loads(safefs.read_owned(path))
        nodes = {name: NodeInfo(**info) for name, info in raw["nodes"].items()}
        return cls(raw["run_dir"], raw["topology"], nodes, raw.get("namespaces_made", []),
                   lab=raw.get("lab"), operator_key=raw.get("operator_key"),
                   http_cert=raw.get("http_cert"), http_key=raw.get("http_key"),
                   http_token_file=raw.get("http_token_file"), core=raw.get("core"))

    def isolated_lab(self) -> netlab.Lab | None:
        return None if self.lab is None else netlab.Lab.from_json(dict(self.lab))

    def node_at(self, cmd_url: str) -> str:
        """The node whose command socket is `cmd_url`."""
        return next(name for name, info in self.nodes.items() if info.cmd_url == cmd_url)

    def client(self, node: str, timeout_s: float = 5.0) -> KvStoreClient:
        """A client of `node` with the operator's keys (plaintext for an insecure cluster)."""
        return KvStoreClient(self.nodes[node].cmd_url, timeout_s=timeout_s, curve=self.curve(node))

    def rest_url(self, node: str) -> str | None:
        """`node`'s agent REST endpoint with its scheme (https when the cluster has a REST
        certificate: isolated clusters), or None without an agent."""
        http = self.nodes[node].http
        if not http:
            return None
        return f"{'https' if self.http_cert else 'http'}://{http}"

    def curve(self, node: str) -> ClientCurve | None:
        """The operator's keys for talking to `node` (None: insecure cluster)."""
        info = self.nodes[node]
        if self.operator_key is None or info.public_key is None:
            return None
        return ClientCurve(load_key_pair(self.operator_key), load_public_key(info.public_key))
