"""Errors raised by the ``service`` package.

Hierarchy::

    ServiceError
    └── ConfigError          the configuration file or environment is invalid

A request that cannot be answered raises ``wire.problems.ProblemError`` (made by calling an entry
of the problem catalogue, ``wire.problems``), rendered as RFC 9457 problem+json. Store errors
(``store.StoreError``) reaching the HTTP layer become problems in one place, the exception handlers
of ``service.problems``.
"""

from __future__ import annotations


class ServiceError(Exception):
    """Root of every error the service package raises."""


class ConfigError(ServiceError):
    """The configuration cannot be used; the message names the setting and how to fix it."""
