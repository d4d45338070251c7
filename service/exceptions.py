"""Errors raised by the ``service`` package.

Hierarchy::

    ServiceError
    ├── ConfigError          the configuration file or environment is invalid
    └── ProblemError         a request cannot be answered; rendered as RFC 9457 problem+json

Store errors (``store.StoreError``) are converted at the HTTP boundary with ``raise ... from exc``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ServiceError(Exception):
    """Root of every error the service package raises."""


class ConfigError(ServiceError):
    """The configuration cannot be used; the message names the setting and how to fix it."""


class ProblemError(ServiceError):
    """A request failed for a reason the client can act on.

    ``slug`` is the stable part of the problem ``type`` (``urn:statestore:problem:<slug>``);
    ``extras`` are the problem-specific members listed in docs/http-api.md.
    """

    def __init__(
        self,
        status: int,
        slug: str,
        title: str,
        detail: str,
        *,
        extras: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.slug = slug
        self.title = title
        self.detail = detail
        self.extras = dict(extras or {})
        self.headers = dict(headers or {})
