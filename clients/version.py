"""The version of the installed statestore distribution (``pyproject.toml`` is its one source)."""

from __future__ import annotations

import importlib.metadata


def installed_version() -> str:
    """The version in the installed package's metadata; ``0+unknown`` when run from a bare source tree."""
    try:
        return importlib.metadata.version("statestore")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


__version__ = installed_version()
USER_AGENT = f"statestore-client/{__version__}"
