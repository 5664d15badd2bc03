"""The emulator's nat44-ed plugin through the unmodified vpp_papi client, refusals included."""

from __future__ import annotations

ANY = 0xFFFFFFFF
INSIDE, OUTSIDE, ADDR_ONLY, TWICE_NAT = 32, 16, 8, 1


def enable(papi, enable=True, sessions=0, flags=0):
    return papi.api.nat44_ed_plugin_enable_disable(
        enable=enable, sessions=sessions, inside_vrf=0, outside_vrf=0, flags=flags).retval


def pool(papi, first, last=None, is_add=True, vrf=ANY, flags=0):
    return papi.api.nat44_add_del_address_range(
        first_ip_address=first, last_ip_address=last or first, vrf_id=vrf, is_add=is_add,
        flags=flags).retval


def mapping(papi, is_add=True, local="10.0.0.5", external="198.51.100.1", proto=6,
            local_port=80, external_port=8080, ext_if=0, flags=0, tag="m"):
    return papi.api.nat44_add_del_static_mapping_v2(
        is_add=is_add, match_pool=False, flags=flags, pool_ip_address="0.0.0.0",
        local_ip_address=local, external_ip_address=external, protocol=proto,
        local_port=local_port, external_port=external_port, external_sw_if_index=ext_if,
        vrf_id=0, tag=tag).retval


def test_everything_refuses_while_the_plugin_is_disabled(papi):
    lo = papi.api.create_loopback().sw_if_index
    assert papi.api.nat44_show_running_config().sessions == 0
    assert pool(papi, "198.51.100.1") == -126  # UNSUPPORTED
    assert papi.api.nat44_interface_add_del_feature(
        is_add=True, flags=INSIDE, sw_if_index=lo).retval == -126
    assert mapping(papi) == -126
    assert enable(papi, enable=False) == 1  # fail_if_disabled
    assert enable(papi, flags=2) == -126  # static-mapping-only


def test_enable_defaults_and_disable_clears_everything(papi):
    assert enable(papi) == 0
    config = papi.api.nat44_show_running_config()
    assert (config.sessions, int(config.flags)) == (63 * 1024, 1)
    assert enable(papi, sessions=1000) == 1  # fail_if_enabled
    lo = papi.api.create_loopback().sw_if_index
    assert pool(papi, "198.51.100.1", "198.51.100.3") == 0
    assert papi.api.nat44_interface_add_del_feature(
        is_add=True, flags=INSIDE, sw_if_index=lo).retval == 0
    assert mapping(papi) == 0
    assert enable(papi, enable=False) == 0
    assert papi.api.nat44_address_dump() == []
    assert papi.api.nat44_interface_dump() == []
    assert papi.api.nat44_static_mapping_dump() == []
    assert papi.api.nat44_show_running_config().sessions == 0


def test_pool_ranges_duplicates_and_missing(papi):
    enable(papi)
    assert pool(papi, "198.51.100.1", "198.51.100.2", vrf=5) == 0
    assert pool(papi, "198.51.100.9", flags=TWICE_NAT) == 0
    details = [(str(d.ip_address), d.vrf_id, int(d.flags)) for d in papi.api.nat44_address_dump()]
    assert details == [("198.51.100.1", 5, 0), ("198.51.100.2", 5, 0), ("198.51.100.9", ANY, 1)]
    # a range running into an existing address stops there (the first ones stay, as in VPP)
    assert pool(papi, "198.51.100.0", "198.51.100.1") == -81  # VALUE_EXIST
    assert len(papi.api.nat44_address_dump()) == 4
    assert pool(papi, "198.51.100.7", is_add=False) == -6
    assert pool(papi, "198.51.100.0", "198.51.100.2", is_add=False) == 0
    assert len(papi.api.nat44_address_dump()) == 1


def test_interface_roles(papi):
    enable(papi)
    lo = papi.api.create_loopback().sw_if_index
    feature = papi.api.nat44_interface_add_del_feature
    assert feature(is_add=True, flags=INSIDE, sw_if_index=99).retval == -2
    assert feature(is_add=True, flags=INSIDE, sw_if_index=lo).retval == 0
    assert feature(is_add=True, flags=INSIDE, sw_if_index=lo).retval == 0  # accepted again
    assert feature(is_add=True, flags=OUTSIDE, sw_if_index=lo).retval == 0
    (details,) = papi.api.nat44_interface_dump()
    assert (details.sw_if_index, int(details.flags)) == (lo, INSIDE | OUTSIDE)
    assert feature(is_add=False, flags=OUTSIDE, sw_if_index=lo).retval == 0
    assert int(papi.api.nat44_interface_dump()[0].flags) == INSIDE
    assert feature(is_add=False, flags=INSIDE, sw_if_index=lo).retval == 0
    assert feature(is_add=False, flags=INSIDE, sw_if_index=lo).retval == -6


def test_static_mappings_duplicates_and_interface_resolution(papi):
    enable(papi)
    assert mapping(papi, tag="web") == 0
    assert mapping(papi, local="10.0.0.6", tag="dup-external") == -81
    assert mapping(papi, external="198.51.100.2", tag="dup-local") == -81
    assert mapping(papi, local="10.0.0.7", external="198.51.100.7", proto=0, local_port=0,
                   external_port=0, flags=ADDR_ONLY | TWICE_NAT) == -126
    lo = papi.api.create_loopback().sw_if_index
    papi.api.sw_interface_add_del_address(sw_if_index=lo, is_add=True, prefix="203.0.113.1/24")
    assert mapping(papi, local="10.0.0.8", external="0.0.0.0", ext_if=lo, tag="on-if") == 0
    dumped = [(d.tag, str(d.external_ip_address), d.external_sw_if_index, d.external_port)
              for d in papi.api.nat44_static_mapping_dump()]
    assert dumped == [("web", "198.51.100.1", ANY, 8080), ("on-if", "203.0.113.1", ANY, 8080),
                      ("on-if", "0.0.0.0", lo, 8080)]
    assert mapping(papi, is_add=False, local="10.0.0.8", external="0.0.0.0", ext_if=lo) == 0
    assert mapping(papi, is_add=False) == 0
    assert mapping(papi, is_add=False) == -6
    assert papi.api.nat44_static_mapping_dump() == []
