"""Derived values of an interface: `vpp/interface/<name>/address/<cidr>` and
`vpp/interface/<name>/unnumbered`.

An address lives and dies with its interface. The unnumbered binding borrows the addresses of
another interface and depends on any address key of that interface (an AnyOf dependency): it is
PENDING until one exists, and when the last borrowed address goes, only the binding is removed
(the interface stays, back in L2 mode).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler import Dependency, Descriptor
from southbound.vpp import keys
from southbound.vpp.context import ADDRESS_DESCRIPTOR, UNNUMBERED_DESCRIPTOR, Context
from southbound.vpp.errors import (
    ADDRESS_NOT_FOUND_FOR_INTERFACE,
    INVALID_SW_IF_INDEX,
    MissingInterfaceError,
    VppApiError,
    is_retriable,
)

ALREADY_GONE = (ADDRESS_NOT_FOUND_FOR_INTERFACE, INVALID_SW_IF_INDEX, -10)


def address_descriptor(ctx: Context) -> Descriptor:
    def create(key: str, value: Any) -> None:
        name, cidr = _address(key)
        ctx.api.add_del_address(ctx.sw_if_index(name), cidr, True)

    def delete(key: str, value: Any, metadata: Any) -> None:
        name, cidr = _address(key)
        try:
            ctx.api.add_del_address(ctx.sw_if_index(name), cidr, False)
        except MissingInterfaceError:
            return  # the interface is gone, and its addresses with it
        except VppApiError as exc:
            if exc.retval not in ALREADY_GONE:
                raise

    return Descriptor(
        name=ADDRESS_DESCRIPTOR,
        key_selector=keys.is_address_key,
        create=create,
        delete=delete,
        is_retriable_failure=is_retriable,
    )


def _address(key: str) -> tuple[str, str]:
    parsed = keys.parse_address_key(key)
    assert parsed is not None, key
    return parsed


def unnumbered_descriptor(ctx: Context) -> Descriptor:
    def create(key: str, value: Any) -> None:
        name = _unnumbered(key)
        ip_index = ctx.sw_if_index(value["interface_with_ip"])
        ctx.api.set_unnumbered(ip_index, ctx.sw_if_index(name), True)

    def delete(key: str, value: Any, metadata: Any) -> None:
        name = _unnumbered(key)
        try:
            ip_index = ctx.sw_if_index(value["interface_with_ip"])
            ctx.api.set_unnumbered(ip_index, ctx.sw_if_index(name), False)
        except MissingInterfaceError:
            return
        except VppApiError as exc:
            if exc.retval not in ALREADY_GONE:
                raise

    def dependencies(key: str, value: Any) -> Sequence[Dependency]:
        prefix = keys.address_prefix(value["interface_with_ip"])
        return (
            Dependency(
                label=f"an address of {value['interface_with_ip']}",
                any_of=lambda k: k.startswith(prefix),
                key_prefixes=(prefix,),
            ),
        )

    return Descriptor(
        name=UNNUMBERED_DESCRIPTOR,
        key_selector=lambda key: keys.unnumbered_interface(key) is not None,
        create=create,
        delete=delete,
        dependencies=dependencies,
        is_retriable_failure=is_retriable,
    )


def _unnumbered(key: str) -> str:
    name = keys.unnumbered_interface(key)
    assert name is not None, key
    return name
