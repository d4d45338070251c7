"""Connection options shared by the sync and async clients: base URL, TLS, token, timeouts, retries."""

from __future__ import annotations

import dataclasses
import logging
import os
import ssl
from typing import Any

import httpx

from clients.retry import RetryPolicy
from clients.sharding import is_template, shard_url
from clients.version import USER_AGENT

log = logging.getLogger("clients")

DEFAULT_BATCH_SIZE = 5_000
"""Keys per batch-get request: well under the service's default limit of 10,000."""

Verify = bool | str | os.PathLike[str] | ssl.SSLContext
PathLike = str | os.PathLike[str]
Cert = PathLike | tuple[PathLike, PathLike]
"""A client certificate: one PEM file holding the certificate chain and its key, or the pair
``(certfile, keyfile)``."""


@dataclasses.dataclass(frozen=True, slots=True)
class ClientOptions:
    """Everything that configures a client; picklable, so Spark tasks rebuild the same client.

    ``url`` is the service's base URL, or a template holding ``{shard}`` for a sharded deployment
    (``http://statestore-{shard}.statestore:8080``: shard ``0`` is ``statestore-0``, ...).
    ``token`` is sent as ``Authorization: Bearer <token>`` and never appears in ``repr`` or logs.
    ``verify`` is ``True`` (system CAs), ``False``, a CA bundle path, or an ``ssl.SSLContext``.
    ``cert`` is a client certificate for a service that takes them (mTLS): ``(certfile, keyfile)``
    or one PEM file holding both; with an ``ssl.SSLContext`` as ``verify``, load it into the context.
    ``timeout`` bounds one HTTP attempt; ``deadline`` bounds a whole call including its retries.
    """

    url: str
    token: str | None = dataclasses.field(default=None, repr=False)
    verify: Verify = True
    cert: Cert | None = None
    timeout: float = 10.0
    deadline: float = 30.0
    retry: RetryPolicy = dataclasses.field(default_factory=RetryPolicy)
    batch_size: int = DEFAULT_BATCH_SIZE
    max_connections: int = 16
    headers: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"the service URL must start with http:// or https://, got {self.url!r}")
        if self.timeout <= 0 or self.deadline <= 0:
            raise ValueError("timeout and deadline must be positive seconds")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")
        if self.cert is not None and isinstance(self.verify, ssl.SSLContext):
            raise ValueError(
                "cert= with an ssl.SSLContext as verify=: load the certificate into the context"
                " (context.load_cert_chain(certfile, keyfile)), or give verify= a CA bundle path"
            )

    @property
    def sharded(self) -> bool:
        """Whether ``url`` is a template naming each shard (it holds ``{shard}``)."""
        return is_template(self.url)

    def url_of(self, shard: int | None) -> str:
        """The base URL of ``shard`` (``None``: the URL as given, for a service that is one shard)."""
        return shard_url(self.url, shard)

    def httpx_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``httpx.Client`` / ``httpx.AsyncClient``."""
        headers = {"User-Agent": USER_AGENT, **dict(self.headers)}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        # Requests carry absolute URLs (a template has no single base URL).
        return {
            "headers": headers,
            # Plain HTTP has nothing to verify; skipping it spares loading the CA bundle per client.
            "verify": ssl_verify(self.verify, self.cert) if self.url.startswith("https://") else False,
            "timeout": httpx.Timeout(self.timeout),
            "limits": httpx.Limits(
                max_connections=self.max_connections, max_keepalive_connections=self.max_connections
            ),
            "follow_redirects": False,
        }


def ssl_verify(verify: Verify, cert: Cert | None = None) -> bool | ssl.SSLContext:
    """httpx's ``verify``: a CA bundle path, or a client certificate, makes an SSL context."""
    if isinstance(verify, ssl.SSLContext) or (isinstance(verify, bool) and cert is None):
        return verify
    context = ssl.create_default_context(cafile=None if isinstance(verify, bool) else os.fspath(verify))
    if verify is False:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert is not None:
        certfile, keyfile = cert if isinstance(cert, tuple) else (cert, None)
        try:
            context.load_cert_chain(certfile, keyfile)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                f"cannot use client certificate {os.fspath(certfile)}"
                f"{f' with key {os.fspath(keyfile)}' if keyfile else ''}: {exc}; give a PEM certificate"
                " chain and its private key"
            ) from exc
    return context
