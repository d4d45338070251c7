"""TLS of the HTTP listener: the server's context from ``http.tls``, and who a client certificate names.

TLS 1.2 is the least version served. With ``client_ca`` the server asks every client for a
certificate and verifies one presented against that bundle, refusing in the handshake a certificate
the bundle does not vouch for; a client that presents none still connects (``CERT_OPTIONAL``, as
most servers that take tokens as well) and must then send a bearer token. The context is rebuilt
when a file changes (``service.reloading``): new connections use the new certificate, open ones keep
theirs.
"""

from __future__ import annotations

import dataclasses
import ssl
from typing import Any

from service.exceptions import ConfigError
from service.reloading import Reloading
from service.settings import TlsSettings

PEER_SCOPE_KEY = "statestore.peer_certificate"
"""The ASGI scope entry holding the request's verified :class:`PeerCertificate`, when it has one."""


def server_context(tls: TlsSettings) -> ssl.SSLContext:
    """The listener's context for ``tls``; ``ConfigError`` naming the file that cannot be used."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(tls.certfile, tls.keyfile)
    except FileNotFoundError as exc:
        setting, path = (
            ("http.tls.certfile", tls.certfile)
            if not tls.certfile.is_file()
            else ("http.tls.keyfile", tls.keyfile)
        )
        raise ConfigError(f"{setting}: {path} does not exist") from exc
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"http.tls: cannot use certificate {tls.certfile} with key {tls.keyfile}: {exc};"
            " give a PEM certificate chain and the private key of its first certificate"
        ) from exc
    if tls.client_ca is not None:
        try:
            context.load_verify_locations(cafile=tls.client_ca)
        except FileNotFoundError as exc:
            raise ConfigError(f"http.tls.client_ca: {tls.client_ca} does not exist") from exc
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"http.tls.client_ca: cannot use {tls.client_ca}: {exc}; give a PEM bundle of the CA"
                " certificates that sign the clients' certificates"
            ) from exc
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def reloading_context(tls: TlsSettings) -> Reloading[ssl.SSLContext]:
    """The listener's context, rebuilt when the certificate, key or CA bundle changes on disk."""
    paths = [tls.certfile, tls.keyfile, *([tls.client_ca] if tls.client_ca else [])]
    return Reloading(
        "TLS certificate (http.tls)", paths, lambda: server_context(tls), tls.reload_interval_seconds
    )


@dataclasses.dataclass(frozen=True, slots=True)
class PeerCertificate:
    """The names of a verified client certificate: its subject's CN and its DNS alternative names."""

    common_name: str | None
    dns_names: tuple[str, ...]

    def names(self) -> tuple[str, ...]:
        return (*((self.common_name,) if self.common_name else ()), *self.dns_names)


def peer_certificate(ssl_object: Any) -> PeerCertificate | None:
    """The verified certificate the client of ``ssl_object`` presented, if it presented one.

    ``getpeercert()`` gives the parsed certificate only when it was verified, which a context
    with a client CA bundle does in the handshake.
    """
    if not isinstance(ssl_object, ssl.SSLObject | ssl.SSLSocket):
        return None
    found: dict[str, Any] = dict(ssl_object.getpeercert() or {})
    if not found:
        return None
    subject: tuple[tuple[tuple[str, str], ...], ...] = found.get("subject", ())
    common_name = next((value for rdn in subject for key, value in rdn if key == "commonName"), None)
    alternatives: tuple[tuple[str, str], ...] = found.get("subjectAltName", ())
    dns_names = tuple(value for kind, value in alternatives if kind == "DNS")
    return PeerCertificate(common_name=common_name, dns_names=dns_names)
