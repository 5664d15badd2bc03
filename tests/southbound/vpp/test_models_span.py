"""The SPAN model: `vpp/span/<from>/<to>` with VPP's rules."""

from __future__ import annotations

import pytest

from scheduler import InvalidValueError
from southbound.vpp.models.span import check_span


def test_validation():
    assert check_span("vpp/span/a/b", {}) == {"state": "both", "l2": False}
    for key, value, field in [("vpp/span/a/a", {}, "(key)"), ("vpp/span/a", {}, "(key)"),
                              ("vpp/span/a/b/c", {}, "(key)"),
                              ("vpp/span/a/b", {"state": "in"}, "state"),
                              ("vpp/span/a/b", {"mirror": True}, "mirror")]:
        with pytest.raises(InvalidValueError) as info:
            check_span(key, value)
        assert field in info.value.fields, (key, info.value)
