"""`vpp/span/<from>/<to>` through the scheduler, the VPP southbound and vpp_papi, against the
emulator."""

from __future__ import annotations

import pytest

from scheduler import ValueState
from tests.southbound.vpp.plugin_helpers import calls

pytestmark = pytest.mark.process

CONFIGURED, PENDING, OBTAINED = ValueState.CONFIGURED, ValueState.PENDING, ValueState.OBTAINED
LOOP = {"type": "loopback"}
RX, TX, BOTH = 1, 2, 3
SPAN = "sw_interface_span_enable_disable"


def mirrors(vpp, is_l2=False):
    return [(d.sw_if_index_from, d.sw_if_index_to, int(d.state))
            for d in vpp.papi.api.sw_interface_span_dump(is_l2=is_l2)]


def test_a_mirror_applied_changed_read_back_and_removed(vpp):
    vpp.commit({"vpp/interface/up": LOOP, "vpp/interface/mon": LOOP,
                "vpp/span/up/mon": {"state": "rx"}})
    assert vpp.state("vpp/span/up/mon") is CONFIGURED
    up, mon = vpp.sw_if_index("up"), vpp.sw_if_index("mon")
    assert mirrors(vpp) == [(up, mon, RX)]
    # A new state: in place.
    before = vpp.control.counters()
    vpp.commit({"vpp/span/up/mon": {}})  # both, the default
    assert calls(vpp, before, SPAN) == {SPAN: 1}
    assert mirrors(vpp) == [(up, mon, BOTH)]
    # L2 instead of the device level: the device mirror goes, an L2 one comes.
    vpp.commit({"vpp/span/up/mon": {"state": "tx", "l2": True}})
    assert (mirrors(vpp), mirrors(vpp, is_l2=True)) == ([], [(up, mon, TX)])
    # Read back exactly: a downstream resync changes nothing.
    before = vpp.control.counters()
    vpp.scheduler.resync({}, kind="downstream")
    assert calls(vpp, before, SPAN) == {SPAN: 0}
    assert vpp.state("vpp/span/up/mon") is CONFIGURED
    # Removed before its interfaces (VPP would keep a mirror of a deleted interface).
    vpp.commit({"vpp/span/up/mon": None, "vpp/interface/up": None, "vpp/interface/mon": None})
    assert vpp.control.state()["span"] == []


def test_a_mirror_waits_for_both_interfaces(vpp):
    vpp.commit({"vpp/span/up/mon": {"state": "both"}, "vpp/interface/up": LOOP})
    assert vpp.state("vpp/span/up/mon") is PENDING
    assert mirrors(vpp) == []
    vpp.commit({"vpp/interface/mon": LOOP})
    assert vpp.state("vpp/span/up/mon") is CONFIGURED
    assert mirrors(vpp) == [(vpp.sw_if_index("up"), vpp.sw_if_index("mon"), BOTH)]
    # Its interface going takes the mirror back to pending, and out of VPP.
    vpp.commit({"vpp/interface/mon": None})
    assert vpp.state("vpp/span/up/mon") is PENDING
    assert mirrors(vpp) == []


def test_mirrors_kvmesh_did_not_make_are_obtained_and_kept(vpp):
    vpp.commit({"vpp/interface/up": LOOP, "vpp/interface/mon": LOOP})
    up, mon = vpp.sw_if_index("up"), vpp.sw_if_index("mon")
    foreign = vpp.papi.api.create_loopback().sw_if_index
    vpp.papi.api.sw_interface_span_enable_disable(sw_if_index_from=up, sw_if_index_to=mon,
                                                  state=TX, is_l2=False)
    vpp.papi.api.sw_interface_span_enable_disable(sw_if_index_from=foreign, sw_if_index_to=mon,
                                                  state=RX, is_l2=False)
    desired = {"vpp/interface/up": LOOP, "vpp/interface/mon": LOOP}
    vpp.scheduler.resync(desired, kind="full")
    assert vpp.state("vpp/span/up/mon") is OBTAINED
    vpp.scheduler.resync(desired, kind="full")
    assert mirrors(vpp) == [(up, mon, TX), (foreign, mon, RX)]


def test_of_a_device_and_an_l2_mirror_the_desired_one_is_read_back(vpp):
    """One key, two VPP mirrors of the pair (device level and L2): the one the desired state
    names is compared, so the other one (not kvmesh's) changes nothing."""
    state = {"vpp/interface/up": LOOP, "vpp/interface/mon": LOOP,
             "vpp/span/up/mon": {"state": "rx", "l2": True}}
    vpp.commit(state)
    up, mon = vpp.sw_if_index("up"), vpp.sw_if_index("mon")
    vpp.papi.api.sw_interface_span_enable_disable(sw_if_index_from=up, sw_if_index_to=mon,
                                                  state=BOTH, is_l2=False)
    before = vpp.control.counters()
    vpp.scheduler.resync(state, kind="full")
    assert calls(vpp, before, SPAN) == {SPAN: 0}
    assert (mirrors(vpp), mirrors(vpp, is_l2=True)) == ([(up, mon, BOTH)], [(up, mon, RX)])
