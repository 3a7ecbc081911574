"""Sealed columns: AES-256-GCM with a key ring. The newest key encrypts; every key in the ring
decrypts, so rotating is adding a key (old rows stay readable, rewrite them to re-seal).

Stored form (``bytea``): ``b"x1" | len(key_id) | key_id | nonce(12) | ciphertext+tag``; the
associated data binds a value to its ``entity.column``, so a ciphertext copied into another
column does not decrypt."""

from __future__ import annotations

import base64
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, NoReturn, final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ultimat3.core import XError

if TYPE_CHECKING:
    from ._entity import Entity

_MAGIC = b"x1"
_FIX = "KeyRing({'2026-12': base64_32_byte_key}) — generate one with KeyRing.generate_key()"


@dataclass(frozen=True, slots=True)
class KeyRing:
    """Named AES-256 keys (32 bytes, raw or base64); ``current`` (default: the last key given)
    encrypts, every key decrypts. ``KeyRing.parse("k1:<b64>,k2:<b64>")`` reads configuration."""

    keys: Mapping[str, bytes]
    current: str

    def __init__(self, keys: Mapping[str, bytes | str], current: str | None = None) -> None:
        if not isinstance(keys, Mapping) or not keys:
            raise XError("X_CONFIG_INVALID", "KeyRing: no keys", fix=_FIX)
        decoded: dict[str, bytes] = {}
        for key_id, raw in keys.items():
            if not isinstance(key_id, str) or not key_id or len(key_id.encode()) > 255:
                raise XError(
                    "X_CONFIG_INVALID", f"KeyRing: key id {key_id!r} is blank or too long", fix=_FIX
                )
            key = _decode(key_id, raw)
            decoded[key_id] = key
        chosen = current if current is not None else list(decoded)[-1]
        if chosen not in decoded:
            raise XError(
                "X_CONFIG_INVALID",
                f"KeyRing: current key {chosen!r} is not in the ring",
                fix=f"current= one of {sorted(decoded)}",
            )
        object.__setattr__(self, "keys", decoded)
        object.__setattr__(self, "current", chosen)

    def __repr__(self) -> str:  # never the key material
        return f"KeyRing(ids={list(self.keys)}, current={self.current!r})"

    @staticmethod
    def generate_key() -> str:
        """A fresh random key, base64 (put it in your secret store)."""
        return base64.b64encode(AESGCM.generate_key(bit_length=256)).decode()

    @classmethod
    def parse(cls, config: str) -> KeyRing:
        """``"id1:<base64>,id2:<base64>"`` (the last one encrypts)."""
        pairs: dict[str, bytes | str] = {}
        for part in (p.strip() for p in config.split(",")):
            key_id, sep, value = part.partition(":")
            if not sep:
                raise XError(
                    "X_CONFIG_INVALID",
                    "KeyRing.parse: an entry without 'id:key'",
                    fix="ENTITY_KEYS='2026-12:<base64>,2027-01:<base64>'",
                )
            pairs[key_id.strip()] = value.strip()
        return cls(pairs)

    def seal(self, plaintext: str, *, where: str) -> bytes:
        """Encrypt ``plaintext`` under the current key, bound to ``where`` (``entity.column``)."""
        key_id = self.current.encode()
        nonce = os.urandom(12)
        body = AESGCM(self.keys[self.current]).encrypt(nonce, plaintext.encode(), where.encode())
        return _MAGIC + bytes([len(key_id)]) + key_id + nonce + body

    def unseal(self, stored: bytes, *, where: str) -> str:
        """Decrypt a stored value with the key it names; ``X_SEALED_UNREADABLE`` otherwise."""
        data = bytes(stored)
        if not data.startswith(_MAGIC) or len(data) < 3:
            raise _unreadable(where, "not a sealed value")
        n = data[2]
        key_id = data[3 : 3 + n].decode(errors="replace")
        key = self.keys.get(key_id)
        if key is None:
            raise _unreadable(where, f"sealed with key {key_id!r}, which the ring lacks")
        nonce, body = data[3 + n : 15 + n], data[15 + n :]
        try:
            return AESGCM(key).decrypt(nonce, body, where.encode()).decode()
        except InvalidTag as exc:
            raise _unreadable(
                where, f"key {key_id!r} does not open it (tampered or moved)"
            ) from exc

    def key_id_of(self, stored: bytes) -> str:
        """The id of the key a stored value was sealed with (rotation tooling)."""
        data = bytes(stored)
        return data[3 : 3 + data[2]].decode(errors="replace")


def _decode(key_id: str, raw: bytes | str) -> bytes:
    key = raw
    if isinstance(raw, str):
        try:
            key = base64.b64decode(raw, validate=True)
        except ValueError as exc:
            raise XError(
                "X_CONFIG_INVALID", f"KeyRing: key {key_id!r} is not base64", fix=_FIX
            ) from exc
    if not isinstance(key, bytes) or len(key) != 32:
        raise XError(
            "X_CONFIG_INVALID", f"KeyRing: key {key_id!r} is not 32 bytes (AES-256)", fix=_FIX
        )
    return key


def _unreadable(where: str, why: str) -> XError:
    return XError(
        "X_SEALED_UNREADABLE",
        f"{where}: {why}",
        fix="add the key it was sealed with back to the KeyRing",
        meta={"column": where},
    )


REDACTED = "[redacted]"


@final
class Sealed:
    """A sealed column's value as a read answers it: ``reveal()`` is the plaintext; ``str``,
    ``repr`` and ``format`` are ``[redacted]`` (a log line or an f-string shows nothing); its
    JSON form is refused with ``X_SEALED_VALUE_EXPOSED`` (a step output, a job result or input
    would store it in plaintext, outside its column). Writes take it back as it is."""

    __slots__ = ("_text", "column")

    def __init__(self, text: str, *, column: str) -> None:
        self._text = text
        self.column: Final = column
        """``entity.column`` it was read from."""

    def reveal(self) -> str:
        """The plaintext: call it where plaintext is meant (sending it, comparing it)."""
        return self._text

    def __str__(self) -> str:
        return REDACTED

    def __repr__(self) -> str:
        return f"Sealed({self.column}, {REDACTED})"

    def __format__(self, spec: str) -> str:
        return REDACTED

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sealed):
            return NotImplemented
        return hmac.compare_digest(self._text.encode(), other._text.encode())

    def __hash__(self) -> int:
        return hash((Sealed, self._text))

    def __copy__(self) -> Sealed:
        return self  # immutable: copy and deepcopy keep it as it is

    def __deepcopy__(self, memo: object) -> Sealed:
        return self

    def __reduce__(self) -> NoReturn:  # pickle would write the plaintext into its bytes
        raise self.__x_json_refusal__("a pickle of it")

    def __x_json_refusal__(self, path: str) -> XError:
        """What core's ``to_json_form`` raises for it (a step checkpoint, a result, a payload)."""
        return XError(
            "X_SEALED_VALUE_EXPOSED",
            f"{path} holds the sealed value of {self.column}: stored as JSON it would be "
            "plaintext outside its column (a step checkpoint, a job result or input, a log)",
            fix=f"checkpoint the row's id and read {self.column} again where it is needed, or "
            "call .reveal() where you mean to store the plaintext",
            meta={"column": self.column, "path": path},
        )


def revealed(value: object) -> object:
    """A write's value: a ``Sealed`` read back is written as its plaintext."""
    return value.reveal() if isinstance(value, Sealed) else value


def redact(ent: Entity, row: Mapping[str, object]) -> dict[str, object]:
    """``row`` with every sealed column's value replaced by ``"[redacted]"`` (for logs)."""
    sealed = ent.sealed_columns
    return {k: (REDACTED if k in sealed and v is not None else v) for k, v in row.items()}


def exportable(ent: Entity, row: Mapping[str, object]) -> dict[str, object]:
    """``row`` without its sealed columns (what an export may carry)."""
    sealed = ent.sealed_columns
    return {k: v for k, v in row.items() if k not in sealed}
