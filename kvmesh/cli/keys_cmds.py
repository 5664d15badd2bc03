"""`kvmesh keys generate NAME --out DIR`: a CurveZMQ key pair in ZeroMQ's certificate format;
`kvmesh keys token NAME --out DIR`: a REST bearer token for a member (docs/security.md)."""

from __future__ import annotations

from pathlib import Path

import click

from kvmesh.cli.common import KvGroup, emit, fail
from kvstore import CurveError, fingerprint, generate, load_public_key


@click.group("keys", cls=KvGroup)
def keys_group() -> None:
    """CurveZMQ keys for nodes and clients (see docs/security.md)."""


@keys_group.command("generate")
@click.argument("name")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory for NAME.key (public) and NAME.key_secret (secret, mode 0600).")
def keys_generate(name: str, out_dir: Path) -> None:
    """Write a new key pair NAME.key / NAME.key_secret (never overwrites)."""
    try:
        public, secret = generate(name, out_dir)
        fp = fingerprint(load_public_key(str(public)))
    except (CurveError, OSError) as exc:
        fail(str(exc), code=2)
    emit({"public": str(public), "secret": str(secret), "fingerprint": fp},
         f"{public}\n{secret}\nfingerprint {fp}")


@keys_group.command("cluster")
@click.argument("nodes", nargs=-1, required=True)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="DIR/keys (key pairs) and DIR/authorized-keys (every node a peer, the "
              "operator an operator).")
def keys_cluster(nodes: tuple[str, ...], out_dir: Path) -> None:
    """Keys for a cluster of NODES and its operator (existing pairs are kept: idempotent)."""
    from kvmesh.cluster import make_keys

    try:
        auth, secrets = make_keys(out_dir, list(nodes))
    except (CurveError, OSError) as exc:
        fail(str(exc), code=2)
    emit({"authorized_keys": str(auth), "secrets": {k: str(v) for k, v in secrets.items()}},
         f"authorized keys in {auth}; key pairs in {out_dir / 'keys'}")


@keys_group.command("token")
@click.argument("name")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory for NAME.token (mode 0600): beside NAME.key_secret, the CLI "
              "finds it there.")
def keys_token(name: str, out_dir: Path) -> None:
    """Write a new REST bearer token NAME.token (never overwrites) and print its SHA-256: once
    `kvmesh member add ... --token-file NAME.token` has put the hash in NAME's member record,
    every agent accepts the token for NAME's role."""
    import hashlib

    from kvmesh.agent.http_token import new_token
    from kvstore import safefs

    if not name or "/" in name or name.startswith("."):
        fail(f"invalid name {name!r}", code=2)
    token = new_token()
    path = out_dir / f"{name}.token"
    try:
        safefs.private_dir(out_dir)
        safefs.write_new(path, (token + "\n").encode(), safefs.SECRET_MODE)
    except OSError as exc:  # an existing file included: never overwritten
        fail(str(exc), code=2)
    digest = hashlib.sha256(token.encode()).hexdigest()
    emit({"token_file": str(path), "token_sha256": digest},
         f"{path}\ntoken_sha256 {digest}\n(kvmesh member add {name} ... --token-file {path})")


def register(group: click.Group) -> None:
    group.add_command(keys_group)
