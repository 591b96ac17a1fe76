"""What counts as internal besides ``internal_cidrs``: the addresses of EndpointSlice
endpoints that belong to the cluster (a pod's, a host-network pod's node address) and
fall outside those ranges. An endpoint with neither a pod nor a node (a selector-less
Service pointing outside) is the internet. Kept as a count per address, so a slice
that changes touches only its own addresses."""

from __future__ import annotations

import ipaddress

from baton.proto.k8s import EndpointSlice
from baton.services.bandwidth.core.state import State


def update(state: State, eps: EndpointSlice, *, gone: bool) -> None:
    """Addresses of in-cluster endpoints (a pod's, a node's) outside ``internal_cidrs``."""
    found: tuple[str, ...] = ()
    if not gone:
        found = tuple(
            sorted(
                {
                    address
                    for e in eps.endpoints
                    if e.pod or e.node_name
                    for address in e.addresses
                    if not _internal(state, address)
                }
            )
        )
    before = state.slices.pop(eps.uid, ())
    if found:
        state.slices[eps.uid] = found
    if found == before:
        return
    state.outside.subtract(before)
    state.outside.update(found)
    for address in before:
        if state.outside[address] <= 0:
            del state.outside[address]
    state.extra_moved = state.moved = True


def _internal(state: State, address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return True  # not an address: nothing to exempt
    return any(ip in net for net in state.networks)


def networks(state: State) -> tuple[str, ...]:
    """The outside endpoint addresses as few networks, at most ``endpoint_addresses``."""
    v4 = sorted(ipaddress.IPv4Network(a) for a in state.outside if ":" not in a)
    v6 = sorted(ipaddress.IPv6Network(a) for a in state.outside if ":" in a)
    nets = [*ipaddress.collapse_addresses(v4), *ipaddress.collapse_addresses(v6)]
    return tuple(str(n) for n in nets[: state.policy.endpoint_addresses])
