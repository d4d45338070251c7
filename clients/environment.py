"""Where a client finds its service and token when the caller does not say: the environment.

``STATESTORE_URL`` names the service (a URL, or a template holding ``{shard}``) and
``STATESTORE_TOKEN`` the bearer token, as for the ``statestore get`` and ``scan`` commands.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from clients.exceptions import ClientConfigError

URL_VARIABLE = "STATESTORE_URL"
TOKEN_VARIABLE = "STATESTORE_TOKEN"


def service_url(url: str | None, environ: Mapping[str, str] | None = None) -> str:
    """``url`` when given, else ``$STATESTORE_URL``; raises ``ClientConfigError`` when neither is set."""
    if url:
        return url
    found = (os.environ if environ is None else environ).get(URL_VARIABLE, "").strip()
    if not found:
        raise ClientConfigError(
            f"no statestore URL: pass one (e.g. http://127.0.0.1:8080) or set {URL_VARIABLE}"
        )
    return found


def service_token(token: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """``token`` when given, else ``$STATESTORE_TOKEN`` (``None`` when unset or empty)."""
    if token is not None:
        return token
    return (os.environ if environ is None else environ).get(TOKEN_VARIABLE, "").strip() or None
