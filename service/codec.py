"""Keys between HTTP and the store's raw bytes (docs/http-api.md, "Conventions"); values: service.values."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Literal
from urllib.parse import unquote_to_bytes

from wire.problems import BAD_KEY_ENCODING, ProblemError

KeyEncoding = Literal["utf8", "base64"]

BYTES_MEDIA_TYPE = "application/octet-stream"
VALUE_MEDIA_TYPES = {
    "json": "application/json",
    "string": "text/plain; charset=utf-8",
    "bytes": BYTES_MEDIA_TYPE,
}

_BASE64_TEXT = re.compile(r"^[A-Za-z0-9+/_-]*={0,2}$")


def bad_key_encoding(detail: str) -> ProblemError:
    return BAD_KEY_ENCODING(detail)


def key_encoding(name: str | None) -> KeyEncoding:
    """Validate a ``key_encoding`` parameter (default ``utf8``)."""
    if name is None or name == "utf8":
        return "utf8"
    if name == "base64":
        return "base64"
    raise bad_key_encoding(f"key_encoding {name!r} is unknown; use utf8 or base64")


def decode_key_text(text: str, encoding: KeyEncoding) -> bytes:
    """Key bytes from a JSON string or query parameter in ``encoding``."""
    if encoding == "utf8":
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise bad_key_encoding(
                "key is not valid UTF-8 text; send raw bytes with key_encoding=base64"
            ) from exc
    return decode_base64(text)


def decode_base64(text: str | bytes) -> bytes:
    """Standard or URL-safe base64, padding optional."""
    if isinstance(text, bytes):
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError as exc:
            raise bad_key_encoding("base64 key holds non-ASCII characters") from exc
    if not _BASE64_TEXT.match(text):
        raise bad_key_encoding(f"key {text[:64]!r} is not base64 (standard or URL-safe alphabet)")
    normalized = text.replace("-", "+").replace("_", "/").rstrip("=")
    try:
        return base64.b64decode(normalized + "=" * (-len(normalized) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise bad_key_encoding(f"key {text[:64]!r} is not valid base64: {exc}") from exc


def decode_path_key(raw_segment: bytes, encoding: KeyEncoding) -> bytes:
    """Key bytes from the raw (still percent-encoded) path segment."""
    decoded = unquote_to_bytes(raw_segment)
    if encoding == "base64":
        return decode_base64(decoded)
    try:
        decoded.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad_key_encoding(
            "the key in the path is not valid UTF-8 once percent-decoded;"
            " send raw bytes with key_encoding=base64"
        ) from exc
    return decoded


def encode_key(key: bytes, encoding: KeyEncoding) -> str:
    """A key for a JSON answer in ``encoding``."""
    if encoding == "base64":
        return base64.b64encode(key).decode("ascii")
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad_key_encoding(
            f"the store holds key {base64.b64encode(key[:48]).decode()!r} (base64) that is not UTF-8;"
            " ask again with key_encoding=base64"
        ) from exc
