"""span.api in the emulator, as VPP 24.06's SPAN code answers (src/vnet/span), spoken by a
vpp_papi client that knows only VPP 24.06's definitions."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.process

ANY = 0xFFFFFFFF
RX, TX, BOTH = 1, 2, 3


def spans(papi, is_l2=False):
    return [(d.sw_if_index_from, d.sw_if_index_to, int(d.state), d.is_l2)
            for d in papi.api.sw_interface_span_dump(is_l2=is_l2)]


def test_mirrors_set_changed_and_cleared(ref_papi):
    a, b, c = (ref_papi.api.create_loopback().sw_if_index for _ in range(3))
    span = ref_papi.api.sw_interface_span_enable_disable
    assert span(sw_if_index_from=a, sw_if_index_to=b, state=BOTH, is_l2=False).retval == 0
    assert span(sw_if_index_from=a, sw_if_index_to=c, state=RX, is_l2=False).retval == 0
    assert span(sw_if_index_from=b, sw_if_index_to=c, state=TX, is_l2=True).retval == 0
    assert spans(ref_papi) == [(a, b, BOTH, False), (a, c, RX, False)]
    assert spans(ref_papi, is_l2=True) == [(b, c, TX, True)]
    # A new state replaces the old one in place.
    assert span(sw_if_index_from=a, sw_if_index_to=b, state=TX, is_l2=False).retval == 0
    assert spans(ref_papi)[0] == (a, b, TX, False)
    assert span(sw_if_index_from=a, sw_if_index_to=b, state=0, is_l2=False).retval == 0
    assert spans(ref_papi) == [(a, c, RX, False)]
    # Disabled towards ~0: every destination of the source goes.
    assert span(sw_if_index_from=a, sw_if_index_to=ANY, state=0, is_l2=False).retval == 0
    assert spans(ref_papi) == []
    assert spans(ref_papi, is_l2=True) == [(b, c, TX, True)]


def test_refusals_and_what_vpp_does_not_check(ref_papi):
    a, b = (ref_papi.api.create_loopback().sw_if_index for _ in range(2))
    span = ref_papi.api.sw_interface_span_enable_disable
    assert span(sw_if_index_from=a, sw_if_index_to=a, state=BOTH).retval == -71
    assert span(sw_if_index_from=ANY, sw_if_index_to=b, state=BOTH).retval == -71
    assert span(sw_if_index_from=a, sw_if_index_to=ANY, state=RX).retval == -71
    assert span(sw_if_index_from=a, sw_if_index_to=b, state=4).retval == -9  # UNIMPLEMENTED
    assert spans(ref_papi) == []
    # VPP validates no interface index, and keeps a mirror of a deleted interface.
    assert span(sw_if_index_from=a, sw_if_index_to=77, state=RX).retval == 0
    assert span(sw_if_index_from=b, sw_if_index_to=a, state=RX).retval == 0
    assert ref_papi.api.delete_loopback(sw_if_index=b).retval == 0
    assert spans(ref_papi) == [(a, 77, RX, False), (b, a, RX, False)]
