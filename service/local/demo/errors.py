"""The demo's error: something the demo needs is missing or failed; the message says what to do."""

from __future__ import annotations

from service.exceptions import ServiceError


class DemoError(ServiceError):
    """The demo cannot go on (no Java, broker unreachable, service not ready, ...)."""
