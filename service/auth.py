"""Who a request is from, and which stores it may read: bearer tokens, known by their SHA-256.

The configuration holds only the hex SHA-256 of each token, so the service never keeps a token.
A presented token is hashed and looked up by its digest: the lookup's timing can tell an attacker
at most how a digest of their own guess compares with the stored digests, which says nothing
about any token.
"""

from __future__ import annotations

import hashlib

from starlette.requests import Request
from starlette.types import Scope

from service.settings import AuthSettings, TokenSettings
from wire.problems import FORBIDDEN, UNAUTHORIZED

_NO_TOKEN = object()


def bearer_token(scope: Scope) -> str | None:
    """The token of the first ``Authorization: Bearer <token>`` header of the request, if any."""
    for header, value in scope.get("headers") or ():
        if header == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


class Auth:
    """Bearer-token checks for ``auth`` settings; in ``open`` mode every request may read everything."""

    def __init__(self, auth: AuthSettings) -> None:
        self.open = auth.mode == "open"
        # Tokens identify nobody in open mode: each client is its address there.
        self._by_digest = {} if self.open else {t.sha256: t for t in auth.tokens}
        # The scope entry caching a request's matched token: one per instance, as settings may differ.
        self._cache_key = f"statestore.token.{id(self)}"

    def token(self, scope: Scope) -> TokenSettings | None:
        """The configured token the request sends, if any (looked up once per request)."""
        found = scope.get(self._cache_key, _NO_TOKEN)
        if found is _NO_TOKEN:
            sent = bearer_token(scope) if self._by_digest else None
            found = None if sent is None else self._by_digest.get(hashlib.sha256(sent.encode()).hexdigest())
            scope[self._cache_key] = found
        assert found is None or isinstance(found, TokenSettings)
        return found

    def client(self, scope: Scope) -> str:
        """``token "<name>"`` for a request with a configured token, else ``address <ip>``.

        Only configured tokens count, so a client cannot pass for many by making tokens up.
        """
        token = self.token(scope)
        if token is not None:
            return f'token "{token.name}"'
        peer = scope.get("client")
        return f"address {peer[0]}" if peer else "address unknown"

    def allowed_stores(self, request: Request) -> frozenset[str] | None:
        """The stores the caller may read (``None``: all); ``401 unauthorized`` without a valid token."""
        if self.open:
            return None
        token = self.token(request.scope)
        if token is None:
            raise UNAUTHORIZED(
                "send a valid token as 'Authorization: Bearer <token>'",
                headers={"WWW-Authenticate": 'Bearer realm="statestore"'},
            )
        return None if token.reads_every_store else frozenset(token.stores)

    def check(self, request: Request, store: str) -> None:
        """``401`` without a valid token, ``403 forbidden`` when the token may not read ``store``."""
        allowed = self.allowed_stores(request)
        if allowed is not None and store not in allowed:
            raise FORBIDDEN(f'this token may not read store "{store}"', extras={"store": store})
