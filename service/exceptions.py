"""Errors raised by the ``service`` package.

Hierarchy::

    ServiceError
    ├── ConfigError          the configuration file or environment is invalid
    └── ProblemError         a request cannot be answered; rendered as RFC 9457 problem+json

Store errors (``store.StoreError``) reaching the HTTP layer become problems in one place, the
exception handlers of ``service.problems``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from service.catalogue import ProblemType


class ServiceError(Exception):
    """Root of every error the service package raises."""


class ConfigError(ServiceError):
    """The configuration cannot be used; the message names the setting and how to fix it."""


class ProblemError(ServiceError):
    """A request failed for a reason the client can act on; made by calling a catalogue entry.

    ``problem`` is its entry in ``service.catalogue`` (slug, status, title); ``extras`` are the
    problem-specific members listed in docs/reference/http-api.md.
    """

    def __init__(
        self,
        problem: ProblemType,
        detail: str,
        *,
        extras: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.problem = problem
        self.detail = detail
        self.extras = dict(extras or {})
        self.headers = dict(headers or {})

    @property
    def slug(self) -> str:
        return self.problem.slug

    @property
    def status(self) -> int:
        return self.problem.status

    @property
    def title(self) -> str:
        return self.problem.title
