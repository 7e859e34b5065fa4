"""A throwaway certificate authority for the local control plane.

The API server serves TLS and authenticates its clients by certificate; the
admin identity is in `system:masters`. Everything lives in the cluster's state
folder and dies with it.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class Pki:
    folder: Path

    @property
    def ca_cert(self) -> Path: return self.folder / "ca.crt"
    @property
    def ca_key(self) -> Path: return self.folder / "ca.key"
    @property
    def serving_cert(self) -> Path: return self.folder / "apiserver.crt"
    @property
    def serving_key(self) -> Path: return self.folder / "apiserver.key"
    @property
    def admin_cert(self) -> Path: return self.folder / "admin.crt"
    @property
    def admin_key(self) -> Path: return self.folder / "admin.key"
    @property
    def sa_key(self) -> Path: return self.folder / "sa.key"
    @property
    def sa_pub(self) -> Path: return self.folder / "sa.pub"


def _write_key(path: Path, key) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _certificate(subject: x509.Name, public_key, issuer: x509.Name, signing_key, *, ca: bool,
                 usages: list, sans: list | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False), critical=True)
    return builder.sign(signing_key, hashes.SHA256())


def create_pki(folder: Path, *, service_ip: str) -> Pki:
    """Create a CA, the API server's serving cert, an admin client cert and service-account keys."""
    folder.mkdir(parents=True, exist_ok=True)
    pki = Pki(folder)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "specinfer-local-ca")])
    ca = _certificate(ca_name, ca_key.public_key(), ca_name, ca_key, ca=True, usages=[])
    _write_key(pki.ca_key, ca_key)
    pki.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))

    serving_key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in ("localhost", "kubernetes", "kubernetes.default",
                                            "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", service_ip)]
    serving = _certificate(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
                           serving_key.public_key(), ca_name, ca_key, ca=False,
                           usages=[ExtendedKeyUsageOID.SERVER_AUTH], sans=sans)
    _write_key(pki.serving_key, serving_key)
    pki.serving_cert.write_bytes(serving.public_bytes(serialization.Encoding.PEM))

    admin_key = ec.generate_private_key(ec.SECP256R1())
    admin_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                            x509.NameAttribute(NameOID.COMMON_NAME, "specinfer-admin")])
    admin = _certificate(admin_name, admin_key.public_key(), ca_name, ca_key, ca=False,
                         usages=[ExtendedKeyUsageOID.CLIENT_AUTH])
    _write_key(pki.admin_key, admin_key)
    pki.admin_cert.write_bytes(admin.public_bytes(serialization.Encoding.PEM))

    # Service-account tokens are signed with RSA (the API server's default expectation).
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(pki.sa_key, sa_key)
    pki.sa_pub.write_bytes(sa_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                           serialization.PublicFormat.SubjectPublicKeyInfo))
    return pki
