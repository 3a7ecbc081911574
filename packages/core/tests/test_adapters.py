from typing import Protocol

import pytest

from ultimat3.core import (
    Port,
    XError,
    adapter,
    install_adapter,
    installed_adapter,
    swap_adapter,
    uninstall_adapter,
)


class Mailer(Protocol):
    def send(self, to: str) -> str: ...


class Real:
    def send(self, to: str) -> str:
        return f"real:{to}"


class Fake:
    def send(self, to: str) -> str:
        return f"fake:{to}"


def make_port() -> Port[Mailer]:
    return Port("mailer", fix="install_adapter(MAILER, smtp_mailer())")


def test_missing_adapter_names_the_port_and_carries_its_fix() -> None:
    port = make_port()
    with pytest.raises(XError) as info:
        adapter(port)
    assert info.value.code == "X_ADAPTER_MISSING"
    assert "'mailer'" in info.value.message
    assert info.value.fix == "install_adapter(MAILER, smtp_mailer())"
    assert installed_adapter(port) is None


def test_install_and_uninstall() -> None:
    port = make_port()
    install_adapter(port, Real())
    assert adapter(port).send("a") == "real:a"
    uninstall_adapter(port)
    assert installed_adapter(port) is None


def test_swap_restores_the_previous_adapter() -> None:
    port = make_port()
    real = Real()
    install_adapter(port, real)
    with swap_adapter(port, Fake()) as fake:
        assert adapter(port) is fake
    assert adapter(port) is real
    uninstall_adapter(port)


async def test_swap_over_nothing_restores_nothing() -> None:
    port = make_port()
    async with swap_adapter(port, Fake()):
        assert adapter(port).send("b") == "fake:b"
    assert installed_adapter(port) is None


def test_port_refuses_an_empty_name() -> None:
    with pytest.raises(XError) as info:
        Port("", fix="x")
    assert info.value.code == "X_INVARIANT"
    assert "''" in info.value.message


def test_adapter_refuses_a_non_port() -> None:
    with pytest.raises(XError) as info:
        adapter("mailer")  # type: ignore[arg-type]
    assert info.value.code == "X_INVARIANT"
    assert "'mailer'" in info.value.message
