"""``safe_client()`` end to end, on loopback only: every refusal happens before any connect (the
inner transport records each dial and the loopback servers count connections), the request goes
to the very address that was checked, and every redirect hop is checked the same way."""

from __future__ import annotations

from collections.abc import Sequence

import httpx
import pytest

from ultimat3.core import XError
from ultimat3.http import GuardedTransport, safe_client
from ultimat3.http.testing import (
    ReceivedRequest,
    RecordingTransport,
    Reply,
    loopback_server,
    stub_resolver,
)


def ok(request: ReceivedRequest) -> Reply:
    return 200, {}, b"ok"


class NoDialTransport(httpx.AsyncBaseTransport):
    """Records what it is handed and never opens a socket."""

    def __init__(self) -> None:
        self.dialled: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.dialled.append(str(request.url))
        return httpx.Response(599)


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.1", "0x7f000001", "2130706433", "017700000001", "localhost"],
)
async def test_a_loopback_target_is_refused_before_any_connect(host: str) -> None:
    async with loopback_server(ok) as server:
        recorder = RecordingTransport()
        async with safe_client(transport=recorder) as client:
            with pytest.raises(XError) as info:
                await client.post(f"http://{host}:{server.port}/hook", content=b"{}")
        assert info.value.code == "X_WEBHOOK_ENDPOINT_INVALID"
        assert recorder.dialled == []
        assert server.connections == 0


@pytest.mark.parametrize("host", ["[::1]", "[::ffff:127.0.0.1]", "[0:0:0:0:0:0:0:1]"])
async def test_an_ipv6_loopback_target_is_refused_before_any_connect(host: str) -> None:
    async with loopback_server(ok, host="::1") as server:
        recorder = RecordingTransport()
        async with safe_client(transport=recorder) as client:
            with pytest.raises(XError) as info:
                await client.get(f"http://{host}:{server.port}/")
        assert info.value.code == "X_WEBHOOK_ENDPOINT_INVALID"
        assert recorder.dialled == []
        assert server.connections == 0


@pytest.mark.parametrize(
    "answers",
    [
        ["10.1.2.3"],
        ["192.168.7.7"],
        ["172.20.0.1"],
        ["169.254.169.254"],
        ["fd00:ec2::254"],
        ["::ffff:10.0.0.1"],
        ["64:ff9b::a9fe:a9fe"],  # NAT64 around 169.254.169.254
        ["2002:c0a8:0101::1"],  # 6to4 around 192.168.1.1
        ["93.184.215.14", "10.0.0.1"],  # one bad answer among good ones is enough
    ],
)
async def test_a_name_resolving_to_a_non_public_address_is_refused_without_a_request(
    answers: list[str],
) -> None:
    """The stub resolver answers for a made-up name; the inner transport never dials."""
    never = NoDialTransport()
    resolver = stub_resolver({"hooks.partner.test": answers})
    async with safe_client(transport=never, resolver=resolver) as client:
        with pytest.raises(XError) as info:
            await client.post("https://hooks.partner.test/in", content=b"{}")
    assert info.value.code == "X_WEBHOOK_ENDPOINT_INVALID"
    assert info.value.meta["host"] == "hooks.partner.test"
    assert info.value.meta["address"] in answers
    assert "/in" not in info.value.message  # the refusal names the host, not the path
    assert never.dialled == []


async def test_a_name_resolving_to_nothing_is_refused_and_an_unknown_name_fails() -> None:
    never = NoDialTransport()
    resolver = stub_resolver({"empty.test": []})
    async with safe_client(transport=never, resolver=resolver) as client:
        with pytest.raises(XError) as info:
            await client.get("https://empty.test/")
        assert info.value.code == "X_WEBHOOK_ENDPOINT_INVALID"
        with pytest.raises(XError) as info:
            await client.get("https://nowhere.test/")
        assert info.value.code == "X_WEBHOOK_DELIVERY_FAILED"  # NXDOMAIN: retried later
    assert never.dialled == []


async def test_the_request_goes_to_the_address_checked_with_the_name_as_host() -> None:
    """DNS rebinding: the resolver is asked once per request and the dial is the checked answer,
    whatever a second lookup would say."""
    calls: list[str] = []
    answers = iter([["127.0.0.1"], ["127.0.0.2"]])

    async def rebinding(host: str, port: int) -> Sequence[str]:
        calls.append(host)
        return next(answers)

    async with loopback_server(ok) as server:
        recorder = RecordingTransport()
        async with safe_client(
            transport=recorder,
            resolver=rebinding,
            allow_address=lambda a: a == "127.0.0.1",  # the test's stand-in for "public"
        ) as client:
            response = await client.post(
                f"http://hooks.partner.test:{server.port}/in", content=b"x"
            )
        assert response.status_code == 200
        assert calls == ["hooks.partner.test"]
        assert recorder.dialled == [f"http://127.0.0.1:{server.port}/in"]
        assert server.requests[0].headers["host"] == f"hooks.partner.test:{server.port}"
        assert server.requests[0].body == b"x"


async def test_every_redirect_hop_is_checked_before_it_connects() -> None:
    async with loopback_server(ok, host="127.0.0.2") as second:

        def redirect(request: ReceivedRequest) -> Reply:
            return 302, {"location": second.url("/elsewhere")}, b""

        async with loopback_server(redirect) as first:
            recorder = RecordingTransport()
            async with safe_client(
                transport=recorder,
                follow_redirects=True,
                allow_address=lambda a: a == "127.0.0.1",
            ) as client:
                with pytest.raises(XError) as info:
                    await client.get(first.url("/start"))
            assert info.value.code == "X_WEBHOOK_ENDPOINT_INVALID"
            assert info.value.meta["address"] == "127.0.0.2"
            assert first.connections == 1
            assert second.connections == 0
            assert recorder.dialled == [first.url("/start")]


async def test_redirects_are_not_followed_by_default() -> None:
    async with loopback_server(lambda r: (302, {"location": "/next"}, b"")) as server:
        async with safe_client(allow_private=True) as client:
            response = await client.get(server.url("/"))
        assert response.status_code == 302
        assert len(server.requests) == 1


async def test_allow_private_sends_to_loopback() -> None:
    async with loopback_server(ok) as server:
        async with safe_client(allow_private=True) as client:
            response = await client.post(server.url("/hook"), content=b"{}")
        assert response.status_code == 200
        assert server.requests[0].path == "/hook"


async def test_a_scheme_other_than_http_is_refused() -> None:
    never = NoDialTransport()
    transport = GuardedTransport(allow_private=True, inner=never)
    with pytest.raises(XError) as info:
        await transport.handle_async_request(httpx.Request("GET", "ftp://127.0.0.1/"))
    assert info.value.code == "X_WEBHOOK_ENDPOINT_INVALID"
    assert never.dialled == []


async def test_the_loopback_server_refuses_a_non_loopback_host() -> None:
    with pytest.raises(XError) as info:
        async with loopback_server(ok, host="0.0.0.0"):
            pass
    assert info.value.code == "X_CONFIG_INVALID"
