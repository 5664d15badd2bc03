"""Southbound plugins: descriptors that apply scheduler values to Linux (pyroute2) and VPP
(vpp_papi)."""
