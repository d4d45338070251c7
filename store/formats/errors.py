"""The errors of value decoding."""

from __future__ import annotations

from store.exceptions import RebuildNeededError


class FormatError(Exception):
    """Root of the errors of decoding a store's values."""


class RegistryUnavailableError(FormatError):
    """The Schema Registry did not answer (or answered a server error): ingest waits and retries."""


class UnknownSchemaError(FormatError):
    """The registry does not know a schema id a record names."""


class ShapeChangedError(FormatError, RebuildNeededError):
    """The subject's latest version has other fields than the stored values were written in: the
    store is rebuilt from its topic in the new shape (reads go on from the last good copy)."""
