"""In-cluster access: with no kubeconfig, the connector and the node lifecycle use the pod's
ServiceAccount, as every controller does. The stateful fake API server answers over HTTPS on
loopback with a certificate made here; the real ``kubernetes`` client reads the service host and
port from the environment and the token and CA from files in a temporary directory (the client's
own module constants point there instead of /var/run/secrets/kubernetes.io/serviceaccount)."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path
from urllib.parse import urlsplit

import kubernetes.config.incluster_config as incluster
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from clusterman.cluster.connector import ConnectorError
from clusterman.cluster.kubernetes import KubernetesConnector
from clusterman.cluster.kubernetes import KubernetesPool
from clusterman.cluster.kubernetes_lifecycle import KubernetesLifecycle
from clusterman.cluster.lifecycle import Outcome
from itests.recorded_api import kubeconfig
from itests.recorded_api import load
from itests.stateful_api import FakeKubernetes
from itests.stateful_api import serving

N = "ip-10-0-1-{}.us-west-2.compute.internal"
NOW = 1714650000.0
TOKEN = "service-account-token"
POOL = KubernetesPool("default")


def self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that is its own CA, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.fixture
def api(tmp_path):
    cert, key = self_signed(tmp_path, "apiserver")
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    fake = FakeKubernetes(load("kubernetes/nodes.json")["items"], load("kubernetes/pods.json")["items"], token=TOKEN)
    with serving(fake, tls) as server:
        yield server


def in_a_pod(monkeypatch, api, tmp_path: Path, ca: Path | None = None) -> None:
    """What the kubelet gives a pod: the service's address in the environment, the token and the CA."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(TOKEN)
    (account / "ca.crt").write_bytes((ca or tmp_path / "apiserver.crt").read_bytes())
    url = urlsplit(api.url)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", url.hostname)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(url.port))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setattr(incluster, "SERVICE_TOKEN_FILENAME", str(account / "token"))
    monkeypatch.setattr(incluster, "SERVICE_CERT_FILENAME", str(account / "ca.crt"))


def test_without_a_kubeconfig_a_pod_reads_and_acts_with_its_service_account(api, tmp_path, monkeypatch):
    in_a_pod(monkeypatch, api, tmp_path)
    connector = KubernetesConnector(POOL, None)
    lifecycle = KubernetesLifecycle(None)
    try:
        snapshot = connector.snapshot(NOW)
        assert N.format(10) in {n.id for n in snapshot.nodes}
        assert lifecycle.taint([N.format(10)], NOW)[N.format(10)].outcome is Outcome.CHANGED
    finally:
        connector.close()
        lifecycle.close()
    # Every call went over TLS to the service address and carried the ServiceAccount's token (the
    # fake answers 401 otherwise); the patch is the one the kubeconfig path sends.
    assert {r.method for r in api.requests} == {"GET", "PATCH"}
    assert all(r.headers["authorization"].lower() == f"bearer {TOKEN}" for r in api.requests)


def test_the_api_server_s_certificate_is_checked_against_the_pod_s_ca(api, tmp_path, monkeypatch):
    other, _ = self_signed(tmp_path, "another-ca")
    in_a_pod(monkeypatch, api, tmp_path, ca=other)
    connector = KubernetesConnector(POOL, None)
    with pytest.raises(ConnectorError, match="CERTIFICATE_VERIFY_FAILED"):
        connector.snapshot(NOW)
    connector.close()
    assert api.requests == []


def test_a_kubeconfig_wins_and_outside_a_pod_without_one_the_error_says_what_to_set(api, tmp_path, monkeypatch):
    in_a_pod(monkeypatch, api, tmp_path)
    monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9"))
    with pytest.raises(ConnectorError, match=r"127\.0\.0\.1:9"):  # the operator's file, not the pod's account
        KubernetesConnector(POOL, None).snapshot(NOW)
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(ConnectorError, match=r"no kubeconfig: set the cluster's kubeconfig_path .* or run in a pod"):
        KubernetesConnector(POOL, None).snapshot(NOW)
