"""Certificate authorities and the certificates they sign, made for a test and written as PEM files."""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclasses.dataclass(frozen=True)
class Issued:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class Authority:
    """A self-signed CA in ``directory`` (``<name>-ca.pem``) that issues certificates there."""

    def __init__(self, directory: Path, name: str = "test") -> None:
        self.directory = directory
        self.name = name
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name(f"{name} CA"))
            .issuer_name(_name(f"{name} CA"))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                    key_encipherment=False, data_encipherment=False, key_agreement=False,
                    encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )  # fmt: skip
        self.bundle = directory / f"{name}-ca.pem"
        self.bundle.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        file_name: str,
        common_name: str,
        *,
        dns_names: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
        client: bool = False,
    ) -> Issued:
        """A certificate for ``common_name`` (a server's, or a client's with ``client``), written to
        ``<file_name>.pem`` and ``<file_name>.key`` (replacing earlier ones, as a rotation does)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        alternatives: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
        alternatives += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]
                ),
                critical=False,
            )
        )
        if alternatives:
            builder = builder.add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        issued = Issued(cert=self.directory / f"{file_name}.pem", key=self.directory / f"{file_name}.key")
        issued.key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return issued

    def server(self, file_name: str = "server", common_name: str = "statestore") -> Issued:
        """A server certificate for ``127.0.0.1`` and ``localhost``."""
        return self.issue(file_name, common_name, dns_names=("localhost",), ips=("127.0.0.1",))

    def serial_of(self, issued: Issued) -> int:
        """The serial number of the certificate in ``issued.cert``, to tell certificates apart."""
        return x509.load_pem_x509_certificate(issued.cert.read_bytes()).serial_number
