"""CurveZMQ for the node and its clients: key files, the authorized-keys directory, ZAP.

Keys are ZeroMQ certificates as `zmq.auth.create_certificates` writes them: `NAME.key` (public)
and `NAME.key_secret` (public + secret). The authorized-keys directory gives each public key a
role by where it lies (docs/security.md):

    DIR/peer/<node>.key          another node; the file name is the node's name (its flood-path
                                 id and the name this node connects to it by)
    DIR/operator/<name>.key      may write (no status/<N>/, node/<N>/ keys)
    DIR/operator/<N>/<name>.key  an operator bound to node N (N's agent)
    DIR/reader/<name>.key        reads only (and DIR/reader/<N>/<name>.key, bound, same rights)

The directory is re-read when it changes (polled by the node's timer), so adding, removing or
replacing a key takes effect without a restart: new connections are checked by the ZAP handler
against the current table, and every message on an established connection is looked up again by
its key (the ZAP User-Id), so a removed key loses its rights at once.

Membership records (`kvstore.membership`, fed by the node as they merge: `set_members`) add the
keys of active members to the table and revoke the keys of removed ones, whatever the directory
says (a directory entry wins over a member record for the same key; the node's own key is never
revoked on itself).

Everything here is plumbing; the decisions are `kvstore.authz`.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth

from kvstore import safefs, stats
from kvstore.authz import OPERATOR, PEER, REVOKED, REVOKED_KEY, ROLES, Identity
from kvstore.envnames import KEY_FILE_ENV, SERVER_KEY_ENV
from kvstore.membership import (
    Z85_KEY_LEN,
    KeyTable,
    MemberView,
    is_z85_key,
    key_fingerprint,
    key_table,
)
from kvstore.zap import ZapThread

log = logging.getLogger("kvstore.curve")

ZAP_DOMAIN = "kvmesh"
# Seconds between two log lines about refused connections from the same key (a refused client
# reconnects every 100 ms; one line says it all).
REFUSAL_LOG_INTERVAL_S = 10.0


class CurveError(ValueError):
    """A key file or key directory that cannot be used; the message names the file."""


def fingerprint(public_key: bytes) -> str:
    """A short, stable name for a public key (z85 text) for logs and errors."""
    return key_fingerprint(public_key)


@dataclass(frozen=True)
class KeyPair:
    public: bytes  # z85
    secret: bytes  # z85
    path: str = ""

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public)


def load_key_pair(path: str | os.PathLike[str]) -> KeyPair:
    """A secret certificate (`NAME.key_secret`); CurveError with the file named otherwise."""
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise CurveError(f"{path}: cannot read key: {exc}") from exc
    if secret is None:
        raise CurveError(f"{path}: holds no secret key (use the .key_secret file)")
    _check_z85(path, public)
    _check_z85(path, secret)
    return KeyPair(public, secret, str(path))


def load_public_key(spec: str) -> bytes:
    """A public key given as its 40-character z85 text or as a certificate file."""
    if len(spec) == Z85_KEY_LEN and not os.path.exists(spec):
        _check_z85("public key", spec.encode())
        return spec.encode()
    try:
        public, _secret = zmq.auth.load_certificate(spec)
    except (OSError, ValueError) as exc:
        raise CurveError(f"{spec}: cannot read public key: {exc}") from exc
    _check_z85(spec, public)
    return public


def _check_z85(source: str | os.PathLike[str], key: bytes) -> None:
    if not is_z85_key(key):
        raise CurveError(f"{source}: not a CurveZMQ key (40 z85 characters)")


def generate(name: str, out_dir: str | os.PathLike[str]) -> tuple[Path, Path]:
    """`NAME.key` (0644) and `NAME.key_secret` (0600 from the moment it exists) in `out_dir`
    (made 0700 if missing; refused if another user owns it or can write to it)."""
    if not name or "/" in name or name.startswith("."):
        raise CurveError(f"invalid key name {name!r}")
    directory = safefs.private_dir(out_dir)
    public_path, secret_path = directory / f"{name}.key", directory / f"{name}.key_secret"
    for path in (public_path, secret_path):
        if os.path.lexists(path):
            raise CurveError(f"{path} exists: not overwriting a key")
    public, secret = zmq.curve_keypair()
    # ZeroMQ's certificate format (what zmq.auth.load_certificate reads), written by us so
    # the files are opened O_EXCL|O_NOFOLLOW with their final modes.
    safefs.write_new(secret_path, _certificate(name, public, secret), safefs.SECRET_MODE)
    safefs.write_new(public_path, _certificate(name, public, None), 0o644)
    return public_path, secret_path


def _certificate(name: str, public: bytes, secret: bytes | None) -> bytes:
    kind = "Public" if secret is None else "**Secret**"
    lines = [f"#   ZeroMQ CURVE {kind} Certificate of {name} (kvmesh keys generate)",
             "", "metadata", "curve", f'    public-key = "{public.decode()}"']
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode()}"')
    return ("\n".join(lines) + "\n").encode()


# ---------------------------------------------------------------------- authorized keys


@dataclass(frozen=True)
class AuthorizedKey:
    public: bytes
    identity: Identity
    path: str


def scan_authorized_keys(directory: Path) -> tuple[dict[bytes, AuthorizedKey], list[str]]:
    """Every public key under `directory` with its identity; plus one line per file skipped."""
    keys: dict[bytes, AuthorizedKey] = {}
    problems: list[str] = []
    for role in ROLES:
        role_dir = directory / role
        if not role_dir.is_dir():
            continue
        for path in sorted(role_dir.rglob("*.key")):
            relative = path.relative_to(role_dir).parts
            if len(relative) > 2:
                problems.append(f"{path}: too deep (use {role}/NAME.key or {role}/NODE/NAME.key)")
                continue
            node = path.stem if role == PEER else (relative[0] if len(relative) == 2 else None)
            if role == PEER and len(relative) != 1:
                problems.append(f"{path}: peer keys are {PEER}/<node>.key")
                continue
            try:
                public = load_public_key(str(path))
            except CurveError as exc:
                problems.append(str(exc))
                continue
            if public in keys:
                problems.append(f"{path}: same key as {keys[public].path}; first one kept")
                continue
            identity = Identity(role=role, node=node, fingerprint=fingerprint(public))
            keys[public] = AuthorizedKey(public, identity, str(path))
    return keys, problems


def _directory_state(directory: Path) -> tuple[tuple[str, int, int], ...]:
    """What changes when a key is added, removed or rewritten (cheap: a few stats)."""
    state: list[tuple[str, int, int]] = []
    try:
        for root, _dirs, files in os.walk(directory):
            for name in files:
                path = os.path.join(root, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                state.append((path, st.st_mtime_ns, st.st_size))
    except OSError:
        pass
    return tuple(sorted(state))


class NodeSecurity:
    """A secured node's keys: its own pair, the authorized keys (reloaded on change), the ZAP
    handler, and the refusals counted on the handler's thread."""

    def __init__(self, key_file: str, authorized_keys: str, node_name: str) -> None:
        self.key_pair = load_key_pair(key_file)
        self.directory = Path(authorized_keys)
        if not self.directory.is_dir():
            raise CurveError(f"{authorized_keys}: not a directory of authorized keys")
        self.node_name = node_name
        self._keys: dict[bytes, AuthorizedKey] = {}
        self._directory_keys: dict[bytes, AuthorizedKey] = {}
        self._members = MemberView({})
        self._table = KeyTable({}, frozenset())
        self._stranger = False  # set on the ZAP thread, taken on the node's loop
        self._state: tuple[tuple[str, int, int], ...] = ()
        self._counters = stats.StatCounter()
        self._lock = threading.Lock()
        self._last_logged: dict[str, float] = {}
        self._auth: _KeyTableAuthenticator | None = None
        self.reload_if_changed(force=True)

    # -- the table --------------------------------------------------------------------------

    def reload_if_changed(self, force: bool = False) -> bool:
        state = _directory_state(self.directory)
        if state == self._state and not force:
            return False
        keys, problems = scan_authorized_keys(self.directory)
        for problem in problems:
            log.warning("authorized keys: %s", problem)
        self._directory_keys = keys
        self._state = state
        self._compose()
        with self._lock:
            self._counters[stats.AUTH_KEY_RELOADS] += 1
        roles = Counter(k.identity.role for k in self._keys.values())
        log.info("authorized keys from %s and %d member record(s): %s", self.directory,
                 len(self._members.members),
                 ", ".join(f"{n} {r}" for r, n in sorted(roles.items())) or "none")
        return True

    def set_members(self, view: MemberView) -> bool:
        """Take the member records the node holds now; True when the key table changed."""
        before = self._table
        self._members = view
        self._compose()
        return self._table != before

    def _compose(self) -> None:
        """The table (`membership.key_table`): directory keys, then active members' keys, minus
        removed members' keys, plus the node's own key: its agent's (`node run --agent` hands
        the agent this key), an operator bound to this node whatever the directory or the
        records say."""
        own = self.key_pair.public
        table = key_table(
            {public: entry.identity for public, entry in self._directory_keys.items()},
            self._members,
            (own, Identity(OPERATOR, self.node_name, self.key_pair.fingerprint)))
        keys = {public: self._directory_keys.get(public) or AuthorizedKey(
                    public, identity,
                    self.key_pair.path if public == own else f"member/{identity.node or ''}")
                for public, identity in table.accepted.items()}
        self._table = table
        self._keys = keys  # one reference swap: the ZAP thread sees the old or the new table

    def authorized(self, user_id: str) -> bool:
        """Is the key of a connection (its ZAP User-Id) still accepted?"""
        return user_id.encode() in self._keys

    def identity(self, user_id: bytes | str | None) -> Identity | None:
        """The current identity of the key a message came with (None: unknown or revoked)."""
        if user_id is None:
            return None
        key = user_id.encode() if isinstance(user_id, str) else user_id
        entry = self._keys.get(key)
        if entry is None and key in self._table.revoked:
            return Identity(REVOKED, None, fingerprint(key))
        return entry.identity if entry is not None else None

    def peer_key(self, name: str) -> bytes | None:
        """The public key of peer node `name` (its `peer/<name>.key`, else its active member
        record's key; None if neither, or if that key was revoked)."""
        for entry in self._directory_keys.values():
            if entry.identity.role == PEER and entry.identity.node == name:
                return entry.public if entry.public not in self._table.revoked else None
        return self._members.peer_key(name)

    # -- sockets ----------------------------------------------------------------------------

    def start(self, context: zmq.Context[zmq.Socket[bytes]]) -> None:
        """Install the ZAP handler for `context` (before any server socket binds)."""
        auth = _KeyTableAuthenticator(context, logging.getLogger("kvstore.zap"))
        auth.start()
        auth.configure_curve_callback(domain=ZAP_DOMAIN, credentials_provider=self)
        self._auth = auth

    def stop(self) -> None:
        if self._auth is not None:
            self._auth.stop()
            self._auth = None

    def make_server(self, sock: zmq.Socket[bytes]) -> None:
        sock.curve_secretkey = self.key_pair.secret
        sock.curve_publickey = self.key_pair.public
        sock.curve_server = True
        sock.zap_domain = ZAP_DOMAIN.encode()

    def make_peer_client(self, sock: zmq.Socket[bytes], peer_name: str) -> None:
        """Configure a DEALER to peer `peer_name`; CurveError when its key is not known."""
        server_key = self.peer_key(peer_name)
        if server_key is None:
            raise CurveError(
                f"no key for peer {peer_name!r}: put its public key in "
                f"{self.directory / PEER / (peer_name + '.key')}, or admit it with "
                f"`kvmesh member add {peer_name}`"
            )
        apply_client(sock, self.key_pair, server_key)

    # -- ZAP (called on the authenticator's thread) -----------------------------------------

    def callback(self, domain: str, key: bytes) -> bool:
        refusal = self._table.admit(key)
        if refusal is None:
            return True
        if refusal == REVOKED_KEY:
            self.refused(REVOKED_KEY, fingerprint(key),
                         "connection refused: the key of a removed member")
            return False
        self.refused(refusal, fingerprint(key), "connection refused: key not authorized")
        # A key this node does not know may be a member it has not heard of yet: a hint that
        # the membership changed (`take_stranger`; kvstore/node_members.py).
        self._stranger = True
        return False

    def take_stranger(self) -> bool:
        """Did an unknown key knock since the last call?"""
        knocked, self._stranger = self._stranger, False
        return knocked

    def refused(self, reason: str, name: str, what: str) -> None:
        """Count a refusal (kvstore.auth.refused.<reason>) and log it, at most once per
        REFUSAL_LOG_INTERVAL_S per (reason, key fingerprint `name`)."""
        with self._lock:
            self._counters[stats.AUTH_REFUSED(reason)] += 1
        now = time.monotonic()
        tag = f"{reason}:{name}"
        if now - self._last_logged.get(tag, -1e9) >= REFUSAL_LOG_INTERVAL_S:
            self._last_logged[tag] = now
            if len(self._last_logged) > 4096:
                self._last_logged.clear()
            log.warning("%s (key fingerprint %s)", what, name)

    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counters)


class _KeyTableAuthenticator(ZapThread):
    """The ZAP handler, with the User-Id of a CURVE client set to its z85 public key (pyzmq's
    default) so that the node can look every message's identity up again."""

    def curve_user_id(self, client_public_key: bytes) -> str:
        return zmq.utils.z85.encode(client_public_key).decode()


# ---------------------------------------------------------------------- clients


@dataclass(frozen=True)
class ClientCurve:
    """What a client needs to talk to a secured node: its key pair and the node's public key."""

    key_pair: KeyPair
    server_key: bytes

    @property
    def fingerprint(self) -> str:
        return self.key_pair.fingerprint


def apply_client(sock: zmq.Socket[bytes], key_pair: KeyPair, server_key: bytes) -> None:
    sock.curve_secretkey = key_pair.secret
    sock.curve_publickey = key_pair.public
    sock.curve_serverkey = server_key


def client_curve(key_file: str | None = None, server_key: str | None = None) -> ClientCurve | None:
    """The client's keys from arguments, else the environment; None for plaintext.

    Plaintext only when neither a key file nor a server key is given anywhere; one without the
    other is an error that says what to set."""
    key_file = key_file or os.environ.get(KEY_FILE_ENV) or None
    server_spec = server_key or os.environ.get(SERVER_KEY_ENV) or None
    if key_file is None and server_spec is None:
        return None
    if key_file is None:
        raise CurveError(f"no key: set {KEY_FILE_ENV} (or --key-file) to your .key_secret file")
    if server_spec is None:
        raise CurveError(f"no server key: set {SERVER_KEY_ENV} (or --server-key) to the node's "
                         "public key file")
    return ClientCurve(load_key_pair(key_file), load_public_key(server_spec))


HANDSHAKE_EVENTS = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)


def handshake_failure(url: str, curve: ClientCurve | None, event: int) -> str:
    """The one-line error for a client whose handshake with `url` failed. A connection closed
    before the handshake ended (EVENT_HANDSHAKE_FAILED_NO_DETAIL) is also what a node at its
    connection cap does to a newcomer (kvstore/node_conns.py): the message says so."""
    at_cap = ("or the node is at its connection cap (max_subscribers for a subscription,"
              " max_clients for requests) and refused this connection")
    if curve is None:
        if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            # The missing key comes last, as in the other no-key message: which of the two a
            # client gets depends on libzmq's event, not on what the operator must do.
            return (f"connection refused by {url} during the handshake (the node requires "
                    f"CurveZMQ, {at_cap}); no key: set {KEY_FILE_ENV} and {SERVER_KEY_ENV}")
        return (f"authentication refused by {url}: the node requires CurveZMQ; "
                f"no key: set {KEY_FILE_ENV} and {SERVER_KEY_ENV}")
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return f"authentication refused by {url} (key fingerprint {curve.fingerprint})"
    return (f"authentication refused by {url} (key fingerprint {curve.fingerprint}): "
            f"handshake failed; is {SERVER_KEY_ENV} that node's public key, and is the node "
            f"secured? ({at_cap})")


def read_handshake_failures(monitor: zmq.Socket[bytes]) -> int | None:
    """Drain a monitor socket; the last handshake-failure event seen, if any."""
    # Loaded here: pyzmq's monitor module brings zmq.asyncio, which a node has no use for.
    from zmq.utils.monitor import parse_monitor_message

    failed: int | None = None
    while True:
        try:
            frames = monitor.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return failed
        event = parse_monitor_message(frames)["event"]
        if event & HANDSHAKE_EVENTS:
            failed = int(event)


def parse_host(url: str) -> str | None:
    """The host of a tcp:// URL (None for ipc:// and inproc://, which never leave the host)."""
    if not url.startswith("tcp://"):
        return None
    rest = url[len("tcp://"):]
    if ";" in rest:  # source;destination
        rest = rest.split(";", 1)[1]
    host, _sep, _port = rest.rpartition(":")
    return host.strip("[]")


def is_loopback_url(url: str) -> bool:
    host = parse_host(url)
    return host is None or is_loopback_host(host)


def is_loopback_host(host: str) -> bool:
    """localhost or a loopback IP address (a name that resolves elsewhere is not)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def non_loopback(urls: Iterable[str]) -> list[str]:
    return [url for url in urls if not is_loopback_url(url)]
