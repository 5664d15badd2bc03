"""Rendering of KvStore data for the CLI: the `--json` shapes and the readable tables.

The JSON shapes are a public interface (scripts and tests outside this repo parse them):
a key maps to {"version", "originator", "value" | "value_b64", "ttl_ms", "ttl_version", "hash"},
`value` as text when it is UTF-8, otherwise `value_b64`; `ttl_ms` is null for an infinite TTL.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kvstore import TTL_INFINITY, PeerSpec, PeerState, Publication, Value


def ttl_json(ttl_ms: int) -> int | None:
    return None if ttl_ms == TTL_INFINITY else ttl_ms


def ttl_text(ttl_ms: int) -> str:
    return "inf" if ttl_ms == TTL_INFINITY else f"{ttl_ms}ms"


def value_json(value: Value, *, with_value: bool = True,
               decode_maps: bool = False) -> dict[str, Any]:
    """A key-value as JSON: the value as text when it is UTF-8, else base64 (`value_b64`); with
    `decode_maps`, a msgpack map (the mesh's configuration and status records) as a JSON
    object under `value`."""
    out: dict[str, Any] = {
        "version": value.version,
        "originator": value.originator_id,
    }
    if with_value and value.value is not None:
        try:
            out["value"] = value.value.decode("utf-8")
        except UnicodeDecodeError:
            decoded = msgpack_map(value.value) if decode_maps else None
            if decoded is not None:
                out["value"] = decoded
            else:
                out["value_b64"] = base64.b64encode(value.value).decode("ascii")
    out["ttl_ms"] = ttl_json(value.ttl_ms)
    out["ttl_version"] = value.ttl_version
    out["hash"] = value.hash
    return out


def msgpack_map(raw: bytes) -> dict[str, Any] | None:
    """`raw` decoded as one msgpack map, JSON-ready (bytes inside as text or {"b64": ...});
    None when it is not exactly that."""
    import msgpack

    from kvmesh.agent.jsonable import to_jsonable

    try:
        decoded = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        return None
    if not isinstance(decoded, dict):
        return None
    jsonable: dict[str, Any] = to_jsonable(decoded)
    return jsonable


def key_vals_json(key_vals: Mapping[str, Value], *, with_value: bool = True,
                  decode_maps: bool = False) -> dict[str, Any]:
    return {key: value_json(key_vals[key], with_value=with_value, decode_maps=decode_maps)
            for key in sorted(key_vals)}


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=False, ensure_ascii=False)


def value_text(raw: bytes | None, limit: int = 60) -> str:
    if raw is None:
        return "-"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = "b64:" + base64.b64encode(raw).decode("ascii")
    if not text.isprintable():
        text = repr(text)[1:-1]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A plain left-aligned text table."""
    materialised = [[str(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in materialised:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = ["  ".join(h.ljust(widths[i]) for i, h in enumerate(headers)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in materialised:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    return "\n".join(lines)


def key_vals_table(key_vals: Mapping[str, Value], *, with_value: bool = True) -> str:
    headers = ["Key", "Version", "Originator", "TTL", "TTL-Ver", "Hash"]
    if with_value:
        headers.append("Value")
    rows = []
    for key in sorted(key_vals):
        v = key_vals[key]
        row = [
            key,
            str(v.version),
            v.originator_id,
            ttl_text(v.ttl_ms),
            str(v.ttl_version),
            f"{(v.hash or 0) & 0xFFFFFFFFFFFFFFFF:016x}",
        ]
        if with_value:
            row.append(value_text(v.value))
        rows.append(row)
    total = sum(len(v.value or b"") for v in key_vals.values())
    caption = f"{len(key_vals)} key(s)" + (f", {total} value bytes" if with_value else "")
    return table(headers, rows) + "\n" + caption


def state_name(state: int | None) -> str:
    return PeerState._VALUES_TO_NAMES.get(state if state is not None else -1, str(state))


def peers_json(peers: Mapping[str, PeerSpec]) -> dict[str, Any]:
    return {
        name: {
            "cmd_url": spec.cmd_url,
            "pub_url": spec.pub_url or "",
            "state": state_name(spec.state),
            "state_since_ms": spec.state_since_ms,
            "flaps": spec.flaps,
            "protocol": spec.protocol,
            "version": spec.version,
            "refused": spec.refused,
        }
        for name, spec in sorted(peers.items())
    }


def peer_version(spec: PeerSpec) -> str:
    """The peer's version as its last sync said: "0.4.0?" for a peer that said none (protocol
    1 and no version), "-" before any sync."""
    if spec.protocol is None:
        return "-"
    return spec.version or "0.4.0?"


def peers_table(peers: Mapping[str, PeerSpec]) -> str:
    now_ms = int(time.time() * 1000)
    rows = []
    for name, spec in sorted(peers.items()):
        since = spec.state_since_ms or 0
        elapsed = f"{max(0, now_ms - since) / 1000:.1f}s" if since else "-"
        rows.append([name, state_name(spec.state), elapsed, str(spec.flaps), peer_version(spec),
                     spec.cmd_url, spec.pub_url])
    text = table(["Peer", "State", "In state", "Flaps", "Version", "Cmd URL", "Pub URL"], rows)
    # A refused peering says why (docs/compatibility.md, "Protocol versions").
    refusals = [f"{name} REFUSED: {spec.refused}" for name, spec in sorted(peers.items())
                if spec.refused]
    return "\n".join([text, *refusals])


def publication_json(publication: Publication) -> dict[str, Any]:
    return {
        "key_vals": key_vals_json(publication.key_vals or {}, decode_maps=True),
        "expired_keys": sorted(publication.expired_keys or []),
        "node_ids": list(publication.node_ids or []),
    }


def publication_lines(publication: Publication) -> list[str]:
    """One line per key: `+` for a new or changed value, `~` for a TTL refresh, `-` expired."""
    path = " > ".join(publication.node_ids or [])
    via = f"  via {path}" if path else ""
    lines = []
    for key in sorted(publication.key_vals or {}):
        v = publication.key_vals[key]
        if v.value is None:
            lines.append(
                f"~ {key}  v{v.version} {v.originator_id}  ttl={ttl_text(v.ttl_ms)}"
                f" ttl_version={v.ttl_version}{via}"
            )
        else:
            lines.append(
                f"+ {key}  v{v.version} {v.originator_id}  ttl={ttl_text(v.ttl_ms)}"
                f"  {value_text(v.value)}{via}"
            )
    for key in sorted(publication.expired_keys or []):
        lines.append(f"- {key}  expired")
    return lines


def counters_table(counters: Mapping[str, int]) -> str:
    return table(["Counter", "Value"], [[k, str(counters[k])] for k in sorted(counters)])
