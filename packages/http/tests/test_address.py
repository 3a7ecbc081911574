"""``is_public_address`` as a pure function: every non-public network, in every spelling and
wrapped in every IPv6 form, is refused; sampled public addresses pass. No socket is opened here."""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from ultimat3.http import embedded_ipv4, is_public_address

# The test's own list (from the issue), not the module's: the two must agree.
NON_PUBLIC_V4 = [
    "0.0.0.0/8",  # unspecified / this network
    "127.0.0.0/8",  # loopback
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",  # private
    "169.254.0.0/16",  # link-local (cloud metadata)
    "100.64.0.0/10",  # shared
    "224.0.0.0/4",  # multicast
    "240.0.0.0/4",  # reserved, broadcast
    "192.0.2.0/24",
    "198.51.100.0/24",
    "203.0.113.0/24",  # documentation
    "198.18.0.0/15",  # benchmarking
    "192.0.0.0/24",  # protocol assignments
]
NON_PUBLIC_V6 = [
    "::1/128",
    "::/128",
    "fc00::/7",  # unique local (fd00:ec2::254)
    "fe80::/10",  # link-local
    "ff00::/8",  # multicast
    "2001:db8::/32",  # documentation
    "100::/64",  # discard
    "fec0::/10",  # site-local
]
PUBLIC_V4_EIGHTS = [1, 8, 9, 23, 31, 45, 52, 77, 93, 104, 142, 151, 185, 212]
PUBLIC_V6 = ["2600::/12", "2a00::/12", "2400::/12", "2c00::/12"]


def in_network(cidr: str) -> st.SearchStrategy[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    net = ipaddress.ip_network(cidr)
    first, last = int(net.network_address), int(net.broadcast_address)
    return st.integers(first, last).map(ipaddress.ip_address)


non_public_v4 = st.sampled_from(NON_PUBLIC_V4).flatmap(in_network)
non_public_v6 = st.sampled_from(NON_PUBLIC_V6).flatmap(in_network)
public_v4 = st.builds(
    lambda a, rest: ipaddress.IPv4Address((a << 24) | rest),
    st.sampled_from(PUBLIC_V4_EIGHTS),
    st.integers(0, 2**24 - 1),
)
public_v6 = st.sampled_from(PUBLIC_V6).flatmap(in_network)


def v6_spellings(address: ipaddress.IPv6Address) -> list[str]:
    """Every textual form ``ipaddress`` accepts for one IPv6 address."""
    forms = [address.compressed, address.exploded, address.compressed.upper(), f"[{address}]"]
    forms.append(f"{address.compressed}%eth0")  # zone id (link-scoped: never public either)
    return forms


def v4_wrapped(v4: ipaddress.IPv4Address, salt: int) -> list[ipaddress.IPv6Address]:
    """``v4`` as IPv4-mapped, NAT64 (well-known and local-use) and 6to4 (any subnet and host)."""
    n = int(v4)
    return [
        ipaddress.IPv6Address((0xFFFF << 32) | n),  # ::ffff:a.b.c.d
        ipaddress.IPv6Address((0x0064FF9B << 96) | n),  # 64:ff9b::a.b.c.d
        ipaddress.IPv6Address((0x0064FF9B0001 << 80) | n),  # 64:ff9b:1::a.b.c.d
        ipaddress.IPv6Address((0x2002 << 112) | (n << 80) | (salt & (2**80 - 1))),  # 6to4
    ]


@given(non_public_v4, st.integers(0, 2**80 - 1))
def test_every_non_public_ipv4_address_is_refused_plain_and_wrapped(
    v4: ipaddress.IPv4Address, salt: int
) -> None:
    assert not is_public_address(str(v4))
    assert not is_public_address(v4)
    for wrapped in v4_wrapped(v4, salt):
        for text in [*v6_spellings(wrapped), f"::ffff:{v4}", f"64:ff9b::{v4}"]:
            assert not is_public_address(text), text


@given(non_public_v6)
def test_every_non_public_ipv6_address_is_refused_in_every_spelling(
    v6: ipaddress.IPv6Address,
) -> None:
    for text in v6_spellings(v6):
        assert not is_public_address(text), text


@given(public_v4, st.integers(0, 2**80 - 1))
def test_sampled_public_ipv4_addresses_pass_plain_and_wrapped(
    v4: ipaddress.IPv4Address, salt: int
) -> None:
    assert is_public_address(str(v4))
    for wrapped in v4_wrapped(v4, salt)[:2] + v4_wrapped(v4, salt)[3:]:
        assert is_public_address(wrapped.compressed), wrapped
        assert embedded_ipv4(wrapped) == v4


@given(public_v6)
def test_sampled_public_ipv6_addresses_pass(v6: ipaddress.IPv6Address) -> None:
    for text in v6_spellings(v6)[:4]:
        assert is_public_address(text), text


def test_the_cloud_metadata_addresses_are_refused() -> None:
    for text in ("169.254.169.254", "fd00:ec2::254", "::ffff:169.254.169.254", "[fd00:ec2::254]"):
        assert not is_public_address(text), text


def test_a_name_or_junk_is_not_a_public_address() -> None:
    for text in ("localhost", "example.com", "", "1.2.3", "999.1.1.1", "[::1", "0x7f000001"):
        assert not is_public_address(text), text


def test_ipv4_compatible_addresses_are_refused_even_around_a_public_one() -> None:
    assert not is_public_address("::8.8.8.8")
    assert not is_public_address("::127.0.0.1")
