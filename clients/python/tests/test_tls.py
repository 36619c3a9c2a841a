"""TLS and bearer tokens: the client's credentials and typed refusals."""

from __future__ import annotations

import pathlib
import subprocess
from typing import Iterator

import pytest

import raftq
from conftest import Cluster, start_cluster

BOOT = "rqt_python-client-bootstrap-token-0123456789"


@pytest.fixture(scope="module")
def tls_node(raftq_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, pathlib.Path]]:
    d = tmp_path_factory.mktemp("tls")
    subprocess.run([raftq_bin, "cert", "init", "--dir", str(d)], check=True, capture_output=True)
    subprocess.run([raftq_bin, "cert", "node", "--dir", str(d), "--name", "n1", "--host", "127.0.0.1"],
                   check=True, capture_output=True)
    (d / "boot").write_text(BOOT + "\n")
    extra = ["--tls-cert", str(d / "n1.pem"), "--tls-key", str(d / "n1-key.pem"), "--tls-ca", str(d / "ca.pem"),
             "--bootstrap-token-file", str(d / "boot")]
    import conftest
    real = conftest.Cluster.client

    def client(self: Cluster, **kw: object) -> raftq.Client:
        kw.setdefault("tls", raftq.TLS(ca_file=str(d / "ca.pem")))
        kw.setdefault("token", BOOT)
        return real(self, **kw)
    conftest.Cluster.client = client  # type: ignore[method-assign]
    try:
        c = start_cluster(raftq_bin, d, 1, extra)
    finally:
        conftest.Cluster.client = real  # type: ignore[method-assign]
    yield c, d
    for n in c.nodes:
        n.kill()


def test_tls_with_token(tls_node: tuple[Cluster, pathlib.Path], raftq_bin: str) -> None:
    cluster, d = tls_node
    addr = cluster.nodes[0].grpc
    ca = raftq.TLS(ca_file=str(d / "ca.pem"))
    with raftq.Client(addr, tls=ca, token=BOOT) as admin:
        admin.create_queue("secure")
        mid = admin.enqueue("secure", b"over TLS")
        assert [m.id for m in admin.peek("secure")] == [mid]
        tok = subprocess.run([raftq_bin, "auth", "token", "create", "bob", "--addr", addr, "--tls-ca",
                              str(d / "ca.pem"), "--token", BOOT], check=True, capture_output=True,
                             text=True).stdout.strip()
    with raftq.Client(addr, tls=ca) as anonymous:
        with pytest.raises(raftq.Unauthenticated):
            anonymous.get_queue("secure")
    with raftq.Client(addr, tls=ca, token="rqt_not-a-token") as wrong:
        with pytest.raises(raftq.Unauthenticated):
            wrong.enqueue("secure", b"x")
    with raftq.Client(addr, tls=ca, token=tok) as bob:
        with pytest.raises(raftq.PermissionDenied) as e:
            bob.enqueue("secure", b"x")
        assert "produce" in e.value.message
        with pytest.raises(raftq.PermissionDenied):
            bob.consume("secure", lambda m: None, handle_sigterm=False)
    with raftq.Client(addr, timeout=3) as plaintext:  # a TLS node refuses it
        with pytest.raises((raftq.Unavailable, raftq.DeadlineExceeded)):
            plaintext.get_queue("secure")
