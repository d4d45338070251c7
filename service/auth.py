"""Who a request is from, and which stores it may read: bearer tokens, known by their SHA-256, or
verified client certificates, known by their names.

The configuration holds only the hex SHA-256 of each token, so the service never keeps a token.
A presented token is hashed and looked up by its digest: the lookup's timing can tell an attacker
at most how a digest of their own guess compares with the stored digests, which says nothing
about any token. Tokens listed in ``auth.tokens_file`` are read again when the file changes.

A request sending a bearer token is judged by the token alone (a wrong one is not rescued by a
certificate); one without is judged by its connection's client certificate, verified in the TLS
handshake against ``http.tls.client_ca`` and matched by its subject CN or a DNS alternative name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from starlette.requests import Request
from starlette.types import Scope

from service.auth_settings import AuthSettings, CertificateSettings, TokenSettings, load_tokens_file
from service.exceptions import ConfigError
from service.reloading import Reloading
from service.tls import PEER_SCOPE_KEY, PeerCertificate
from wire.problems import FORBIDDEN, UNAUTHORIZED

Identity = TokenSettings | CertificateSettings

_UNKNOWN = object()
_NO_TOKEN = object()  # an Authorization header that is no bearer token

CONNECTION_SCOPE_KEY = "statestore.connection"
"""The scope entry holding a dict of what the connection's requests share (``service.connections``
puts one in each request's scope): here, the last ``Authorization`` header it sent and whom it
identified, so a client reusing its connection is looked up once, not once per request."""


def _authorization(scope: Scope) -> bytes | None:
    """The value of the request's first ``Authorization`` header, as sent."""
    for header, value in scope.get("headers") or ():
        if header == b"authorization":
            return bytes(value)
    return None


def _token_digests(
    auth: AuthSettings, stores: Sequence[str] | None
) -> Callable[[], dict[str, TokenSettings]]:
    """The configured tokens by digest: ``auth.tokens``, and ``auth.tokens_file``'s as it is now."""
    inline = {t.sha256: t for t in auth.tokens}
    path = auth.tokens_file
    if path is None:
        return lambda: inline

    def build() -> dict[str, TokenSettings]:
        listed = load_tokens_file(path, None if stores is None else list(stores))
        both = sorted({t.name for t in listed if t.sha256 in inline})
        if both:
            raise ConfigError(
                f"auth.tokens_file: {path} lists token(s) {', '.join(both)} with the digest of a token in"
                " auth.tokens: one token must mean one set of stores"
            )
        return {**{t.sha256: t for t in listed}, **inline}

    return Reloading("token list (auth.tokens_file)", [path], build, auth.reload_interval_seconds).current


class Auth:
    """Token and client-certificate checks for ``auth`` settings; in ``open`` mode every request may
    read everything. ``stores`` are the configured store names (tokens read from a file may name
    only those); ``None`` leaves them unchecked."""

    def __init__(self, auth: AuthSettings, stores: Sequence[str] | None = None) -> None:
        self.open = auth.mode == "open"
        # Tokens and certificates identify nobody in open mode: each client is its address there.
        self._digests: Callable[[], dict[str, TokenSettings]] = (
            (lambda: {}) if self.open else _token_digests(auth, stores)
        )
        self._by_name = {} if self.open else {c.common_name: c for c in auth.certificates}
        # The scope entry caching a request's identity: one per instance, as settings may differ.
        self._cache_key = f"statestore.identity.{id(self)}"

    def identity(self, scope: Scope) -> Identity | None:
        """The configured token the request sends, else the configured certificate its connection
        presented, if any (looked up once per request)."""
        found = scope.get(self._cache_key, _UNKNOWN)
        if found is _UNKNOWN:
            found = self._identify(scope)
            scope[self._cache_key] = found
        assert found is None or isinstance(found, TokenSettings | CertificateSettings)
        return found

    def _identify(self, scope: Scope) -> Identity | None:
        if self.open:
            return None
        found = self._token_identity(scope)
        if found is not _NO_TOKEN:
            assert found is None or isinstance(found, TokenSettings)
            return found
        peer = scope.get(PEER_SCOPE_KEY)
        if not isinstance(peer, PeerCertificate):
            return None
        return next((self._by_name[n] for n in peer.names() if n in self._by_name), None)

    def _token_identity(self, scope: Scope) -> object:
        """The configured token the request's bearer token is (``None``: none is), or ``_NO_TOKEN``;
        kept for the connection while its requests send the same header and the tokens are the same."""
        sent = _authorization(scope)
        if sent is None:
            return _NO_TOKEN
        digests = self._digests()
        connection = scope.get(CONNECTION_SCOPE_KEY)
        if isinstance(connection, dict):
            known = connection.get(self._cache_key)
            if known is not None and known[0] == sent and known[1] is digests:
                return known[2]
        scheme, _, token = sent.decode("latin-1").partition(" ")
        found: object = (
            digests.get(hashlib.sha256(token.strip().encode()).hexdigest())
            if scheme.lower() == "bearer"
            else _NO_TOKEN
        )
        if isinstance(connection, dict):
            connection[self._cache_key] = (sent, digests, found)
        return found

    def token(self, scope: Scope) -> TokenSettings | None:
        """The configured token the request sends, if any."""
        found = self.identity(scope)
        return found if isinstance(found, TokenSettings) else None

    def client(self, scope: Scope) -> str:
        """``token "<name>"`` or ``certificate "<name>"`` for a request so identified, else
        ``address <ip>``.

        Only configured tokens and certificates count, so a client cannot pass for many by making
        tokens up.
        """
        found = self.identity(scope)
        if found is not None:
            return f'{"token" if isinstance(found, TokenSettings) else "certificate"} "{found.name}"'
        peer = scope.get("client")
        return f"address {peer[0]}" if peer else "address unknown"

    def allowed_stores(self, request: Request) -> frozenset[str] | None:
        """The stores the caller may read (``None``: all); ``401 unauthorized`` without a valid token
        or certificate."""
        if self.open:
            return None
        found = self.identity(request.scope)
        if found is None:
            raise UNAUTHORIZED(
                "send a valid token as 'Authorization: Bearer <token>'"
                + (", or connect with a client certificate the service knows" if self._by_name else ""),
                headers={"WWW-Authenticate": 'Bearer realm="statestore"'},
            )
        return None if found.reads_every_store else frozenset(found.stores)

    def check(self, request: Request, store: str) -> None:
        """``401`` without a valid token or certificate, ``403 forbidden`` when it may not read ``store``."""
        allowed = self.allowed_stores(request)
        if allowed is not None and store not in allowed:
            found = self.identity(request.scope)
            what = "certificate" if isinstance(found, CertificateSettings) else "token"
            raise FORBIDDEN(f'this {what} may not read store "{store}"', extras={"store": store})
