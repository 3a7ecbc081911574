"""``is_public_address``: the classifier behind the outbound guard, a pure function.

An address is public when it is globally routable unicast and no wrapping hides a non-public one:
IPv4-mapped (``::ffff:a.b.c.d``), IPv4-compatible (``::a.b.c.d``), NAT64 (``64:ff9b::/96`` and the
local-use ``64:ff9b:1::/48``) and 6to4 (``2002::/16``) are unwrapped and the inner IPv4 address is
judged too. Python's ``ipaddress`` tables shift between versions, so the non-public networks are
also listed here (``NON_PUBLIC_NETWORKS``) and both must agree that an address is public.
"""

from __future__ import annotations

import ipaddress
from typing import Final

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

NON_PUBLIC_NETWORKS: Final[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]] = tuple(
    ipaddress.ip_network(n)
    for n in (
        # IPv4 (RFC 6890 and the IANA special-purpose registry)
        "0.0.0.0/8",  # "this network", unspecified
        "10.0.0.0/8",  # private
        "100.64.0.0/10",  # shared address space (carrier-grade NAT)
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local, 169.254.169.254 the cloud metadata service
        "172.16.0.0/12",  # private
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # documentation (TEST-NET-1)
        "192.88.99.0/24",  # 6to4 relay anycast (deprecated)
        "192.168.0.0/16",  # private
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation (TEST-NET-2)
        "203.0.113.0/24",  # documentation (TEST-NET-3)
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, 255.255.255.255 broadcast
        # IPv6
        "::/128",  # unspecified
        "::1/128",  # loopback
        "::/96",  # IPv4-compatible (deprecated; unwrapped too)
        "::ffff:0:0/96",  # IPv4-mapped (unwrapped: this entry only catches a bad inner address)
        "64:ff9b:1::/48",  # local-use NAT64
        "100::/64",  # discard-only
        "2001::/23",  # IETF protocol assignments (Teredo, ORCHID, benchmarking, ...)
        "2001:db8::/32",  # documentation
        "3fff::/20",  # documentation (RFC 9637)
        "5f00::/16",  # SRv6 SIDs
        "fc00::/7",  # unique local (fd00:ec2::254 the AWS metadata service)
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated)
        "ff00::/8",  # multicast
    )
)

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_COMPAT = ipaddress.IPv6Network("::/96")


def parse_address(address: str) -> IPAddress | None:
    """The address ``address`` spells (brackets and an IPv6 zone id allowed), else ``None``."""
    text = address.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one wraps (mapped, compatible, NAT64 or 6to4), else ``None``."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64 or (address in _COMPAT and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _plain_public(address: IPAddress) -> bool:
    if not address.is_global or address.is_multicast or address.is_unspecified:
        return False
    if address.is_loopback or address.is_link_local or address.is_reserved:
        return False
    return not any(address.version == n.version and address in n for n in NON_PUBLIC_NETWORKS)


def is_public_address(address: str | IPAddress) -> bool:
    """True only for a globally routable unicast address hiding no non-public IPv4 address.

    ``address`` is a literal (``"93.184.215.14"``, ``"2606:2800::1"``, ``"[::1]"``); anything that
    is not an address literal is not public (a host name must be resolved first)."""
    parsed = parse_address(address) if isinstance(address, str) else address
    if parsed is None:
        return False
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.scope_id is not None:  # a zone id names a link: never public
            return False
        if parsed in _COMPAT:  # ::a.b.c.d is deprecated and routes nowhere: never public
            return False
        inner = embedded_ipv4(parsed)
        if inner is not None:
            if not _plain_public(inner):
                return False
            if parsed.ipv4_mapped is not None or parsed in _NAT64:
                # a spelling of the inner address (the well-known NAT64 prefix is what DNS64
                # answers for a public IPv4 host on an IPv6-only network)
                return True
    return _plain_public(parsed)
