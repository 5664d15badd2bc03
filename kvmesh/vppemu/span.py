"""SPAN (port mirroring), as VPP 24.06 keeps it (src/vnet/span/span.c, span_api.c); no I/O.

Per mirrored interface and feature (device level, or L2 with `is_l2`), the set of interfaces its
received and its transmitted frames are copied to. `sw_interface_span_enable_disable`:
- `state` is taken as a byte (VPP's u8 parameter): above 3 (both) is UNIMPLEMENTED;
- a source of ~0, a destination of ~0 with a state other than disabled, or the source as its
  own destination is INVALID_INTERFACE;
- otherwise the destination's rx and tx bits are set as the state says (disabled clears them;
  disabled with destination ~0 clears every destination of the source). VPP checks no more: an
  interface index nobody has is accepted, and a mirror outlives a deleted interface.
`sw_interface_span_dump` lists, per source in index order, each destination with its state
(rx = 1, tx = 2, both = 3) for the asked feature.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvmesh.vppemu import errors as E
from kvmesh.vppemu.errors import ApiError

DISABLED, RX, TX, BOTH = range(4)
INVALID_INDEX = 0xFFFFFFFF


@dataclass
class Mirrors:
    rx: set[int] = field(default_factory=set)
    tx: set[int] = field(default_factory=set)


class Span:
    def __init__(self) -> None:
        self.mirrors: dict[tuple[bool, int], Mirrors] = {}  # (is_l2, source) -> destinations

    def enable_disable(self, src: int, dst: int, state: int, is_l2: bool) -> None:
        state &= 0xFF
        if state > BOTH:
            raise ApiError(E.UNIMPLEMENTED, f"span state {state}")
        if src in (INVALID_INDEX, dst) or (dst == INVALID_INDEX and state):
            raise ApiError(E.INVALID_INTERFACE, f"span from {src} to {dst}")
        mirrors = self.mirrors.setdefault((is_l2, src), Mirrors())
        for wanted, ports in ((state & RX, mirrors.rx), (state & TX, mirrors.tx)):
            if dst == INVALID_INDEX:
                ports.clear()
            elif wanted:
                ports.add(dst)
            else:
                ports.discard(dst)
        if not mirrors.rx and not mirrors.tx:
            del self.mirrors[(is_l2, src)]

    def dump(self, is_l2: bool) -> list[tuple[int, int, int]]:
        """(source, destination, state) of one feature."""
        result = []
        for (l2, src), m in sorted(self.mirrors.items(), key=lambda item: item[0][1]):
            if l2 != is_l2:
                continue
            for dst in sorted(m.rx | m.tx):
                result.append((src, dst, (RX if dst in m.rx else 0) | (TX if dst in m.tx else 0)))
        return result

    def snapshot(self) -> list[dict[str, object]]:
        return [{"from": src, "to": dst, "state": state, "is_l2": is_l2}
                for is_l2 in (False, True) for src, dst, state in self.dump(is_l2)]
