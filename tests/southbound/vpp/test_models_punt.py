"""The punt models: `vpp/punt/l4/<ipv4|ipv6>/udp/<port>` and `vpp/punt/exception/<reason>`
with VPP's limits."""

from __future__ import annotations

import pytest

from scheduler import InvalidValueError
from southbound.vpp.models.punt_exception import check_punt_exception
from southbound.vpp.models.punt_l4 import check_punt_l4


def test_validation_uses_vpps_limits():
    def problem(check, key: str, value: dict) -> str:
        with pytest.raises(InvalidValueError) as info:
            check(key, value)
        return str(info.value)

    ok = {"socket": "/run/a.sock"}
    assert check_punt_l4("vpp/punt/l4/ipv6/udp/65534", ok) == ok
    assert "TCP" in problem(check_punt_l4, "vpp/punt/l4/ipv4/tcp/80", ok)
    assert "0..65534" in problem(check_punt_l4, "vpp/punt/l4/ipv4/udp/65535", ok)
    assert "0..65534" in problem(check_punt_l4, "vpp/punt/l4/ipv4/udp/080", ok)
    assert "ipv4 or ipv6" in problem(check_punt_l4, "vpp/punt/l4/ip/udp/80", ok)
    assert "malformed" in problem(check_punt_l4, "vpp/punt/l4/ipv4/udp", ok)
    assert "107" in problem(check_punt_l4, "vpp/punt/l4/ipv4/udp/80",
                            {"socket": "/" + "s" * 107})
    assert "absolute" in problem(check_punt_l4, "vpp/punt/l4/ipv4/udp/80", {"socket": "a"})
    assert check_punt_l4("vpp/punt/l4/ipv4/udp/80", {"socket": "/" + "s" * 106})
    assert "reason" in problem(check_punt_exception, "vpp/punt/exception/a b", ok)
    assert "socket" in problem(check_punt_exception, "vpp/punt/exception/x", {})
