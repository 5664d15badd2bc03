"""`vpp/nat44/global`: the NAT44 endpoint-dependent plugin, enabled or not.

    {"enabled": true, "sessions": 10000}

`nat44_ed_plugin_enable_disable`; read back by `nat44_show_running_config` (its `sessions` is 0
while the plugin is disabled). Any change re-creates: VPP can only disable and enable again,
which removes every NAT value first (they depend on `vpp/nat44/global/enabled`, derived from
this value while it is enabled) and restores them after. A plugin enabled by someone else is
OBTAINED (never disabled) unless kvmesh is asked for `vpp/nat44/global`.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field

from scheduler import Descriptor, InvalidValueError, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, StrictModel, validate
from southbound.vpp.context import Context
from southbound.vpp.errors import VppApiError
from southbound.vpp.models import memoized, model_descriptor
from southbound.vpp.nat44_api import ENABLED_KEY, GLOBAL_KEY, PLUGIN_ALREADY_THERE, Nat44Api

GLOBAL_DESCRIPTOR = "vpp-nat44-global"
ENABLED_DESCRIPTOR = "vpp-nat44-enabled"


class VppNat44Global(StrictModel):
    """`vpp/nat44/global`: the NAT44 (endpoint-dependent) plugin. Every other NAT44 value waits
    for it to be enabled."""

    enabled: bool = Field(True, description="the plugin is enabled")
    sessions: int | None = Field(None, ge=1, le=0xFFFFFFFF,
                                 description="sessions per thread (unset: VPP's, 64512)")


@memoized
def check_global(key: str, value: Any) -> dict[str, Any]:
    problems = {} if key == GLOBAL_KEY else {KEY_FIELD: f"the key is {GLOBAL_KEY}"}
    return validate(VppNat44Global, key, value, key_problems=problems).model_dump()


def agree(x: dict[str, Any], y: dict[str, Any]) -> bool:
    """Unset `sessions` (VPP's default) matches whatever VPP reports; a disabled plugin has
    none to compare."""
    sessions_agree = None in (x["sessions"], y["sessions"]) or x["sessions"] == y["sessions"]
    return bool(x["enabled"] == y["enabled"] and (not x["enabled"] or sessions_agree))


def descriptors(ctx: Context) -> list[Descriptor]:
    api = Nat44Api(ctx.api.conn)

    def create(key: str, value: Any) -> None:
        v = check_global(key, value)
        if v["enabled"]:
            try:
                api.enable(v["sessions"] or 0)
            except VppApiError as exc:
                if exc.retval != PLUGIN_ALREADY_THERE:
                    raise

    def delete(key: str, value: Any, metadata: Any) -> None:
        if check_global(key, value)["enabled"]:
            try:
                api.disable()
            except VppApiError as exc:
                if exc.retval != PLUGIN_ALREADY_THERE:
                    raise

    def derived_values(key: str, value: Any) -> list[tuple[str, Any]]:
        try:
            enabled = check_global(key, value)["enabled"]
        except InvalidValueError:
            return []
        return [(ENABLED_KEY, {"enabled": True})] if enabled else []

    def retrieve(correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        wanted = {key: value for key, value, _meta in correlate}
        sessions = api.sessions()
        origin = ValueOrigin.FROM_NB if GLOBAL_KEY in wanted else ValueOrigin.FROM_SB
        if sessions:
            return [(GLOBAL_KEY, {"enabled": True, "sessions": sessions}, None, origin)]
        # Disabled: that is the desired value when it says so; otherwise there is nothing.
        try:
            disabled_wanted = GLOBAL_KEY in wanted and \
                not check_global(GLOBAL_KEY, wanted[GLOBAL_KEY])["enabled"]
        except InvalidValueError:
            disabled_wanted = False
        return [(GLOBAL_KEY, {"enabled": False, "sessions": None}, None, origin)] \
            if disabled_wanted else []

    return [
        model_descriptor(
            GLOBAL_DESCRIPTOR, check_global, lambda key: key == GLOBAL_KEY,
            agree=agree,
            create=create,
            delete=delete,
            retrieve=retrieve,
            derived_values=derived_values,
        ),
        # The marker NAT values depend on: it only exists while the plugin is enabled.
        Descriptor(
            name=ENABLED_DESCRIPTOR,
            key_selector=lambda key: key == ENABLED_KEY,
            create=lambda key, value: None,
            delete=lambda key, value, metadata: None,
        ),
    ]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/nat44/global", "vpp/nat44/global", re.compile(re.escape(GLOBAL_KEY)), VppNat44Global,
    check_global, descriptors, examples=((GLOBAL_KEY, {"enabled": True}),),
)
