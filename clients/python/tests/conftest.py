"""Real raftq nodes for the client's tests.

The tests start ``raftq serve`` processes of the binary named by
``RAFTQ_BIN`` (``make python-test`` passes ./bin/raftq), or one built here
from the repository with ``go build`` when it is not set, on free
loopback ports, with data in pytest's temp dirs; every process is killed
when its fixture ends.
"""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import time
from typing import Callable, Iterator, Optional

import pytest

import raftq

REPO = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def raftq_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = os.environ.get("RAFTQ_BIN")
    if path:
        if not os.access(path, os.X_OK):
            pytest.fail(f"RAFTQ_BIN={path} is not an executable")
        return path
    out = tmp_path_factory.mktemp("bin") / "raftq"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/raftq"], cwd=REPO, check=True)
    return str(out)


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def wait_for(what: str, cond: Callable[[], object], timeout: float = 30.0, interval: float = 0.05) -> object:
    """Poll cond until it returns a true value (returned) or timeout."""
    deadline = time.monotonic() + timeout
    last: Optional[BaseException] = None
    while time.monotonic() < deadline:
        try:
            v = cond()
            if v:
                return v
        except Exception as e:  # not yet: keep the last reason for the failure
            last = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last})" if last else ""))


class Node:
    """One raftq serve process."""

    def __init__(self, bin: str, node_id: str, dir: pathlib.Path, extra: list[str]) -> None:
        self.bin, self.id, self.dir = bin, node_id, dir
        g, r, gs, h = free_ports(4)
        self.grpc, self.raft, self.gossip, self.http = (f"127.0.0.1:{p}" for p in (g, r, gs, h))
        self.extra = extra
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.log = dir / f"{node_id}.log"

    def args(self) -> list[str]:
        return [self.bin, "serve", "--node-id", self.id, "--data-dir", str(self.dir / "data"),
                "--grpc-addr", self.grpc, "--raft-addr", self.raft, "--gossip-addr", self.gossip,
                "--http-addr", self.http, "--log-level", "warn", *self.extra]

    def start(self) -> None:
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen(self.args(), stdout=logf, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        """kill -9."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


class Cluster:
    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes

    @property
    def addrs(self) -> list[str]:
        return [n.grpc for n in self.nodes]

    def client(self, **kw: object) -> raftq.Client:
        return raftq.Client([n.grpc for n in self.nodes if n.proc and n.proc.poll() is None], **kw)  # type: ignore[arg-type]

    def leader(self) -> Node:
        with self.client() as c:
            def known() -> Optional[Node]:
                st = c.cluster_status(local_only=True, timeout=5)
                return next((n for n in self.nodes if n.id == st.leader_id), None)
            return wait_for("a leader", known)  # type: ignore[return-value]

    def followers(self) -> list[Node]:
        lead = self.leader()
        return [n for n in self.nodes if n is not lead]

    def logs(self) -> str:
        return "\n".join(f"---- {n.id} ----\n" + n.log.read_text(errors="replace")[-20000:]
                         for n in self.nodes if n.log.exists())


def start_cluster(bin: str, base: pathlib.Path, size: int, extra: Optional[list[str]] = None) -> Cluster:
    nodes = [Node(bin, f"n{i + 1}", base / f"n{i + 1}", list(extra or [])) for i in range(size)]
    for n in nodes:
        n.dir.mkdir(parents=True, exist_ok=True)
        n.extra += ["--bootstrap-expect", str(size)]
        if size > 1:
            n.extra += ["--join", ",".join(m.gossip for m in nodes if m is not n)]
    for n in nodes:
        n.start()
    cluster = Cluster(nodes)
    with cluster.client(timeout=5) as c:
        def ready() -> bool:
            st = c.cluster_status(local_only=True, timeout=5)
            return bool(st.leader_id) and sum(1 for x in st.nodes if x.suffrage == "voter") == size
        try:
            wait_for("the cluster's leader and voters", ready, timeout=60)
            wait_for("a leader serving calls", lambda: c.list_queues(timeout=5) is not None, timeout=30)
        except AssertionError:
            for n in nodes:
                n.kill()
            raise AssertionError("cluster did not start:\n" + cluster.logs())
    return cluster


@pytest.fixture(scope="module")
def cluster(raftq_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A 3-node cluster shared by a module's tests."""
    c = start_cluster(raftq_bin, tmp_path_factory.mktemp("cluster"), 3)
    yield c
    for n in c.nodes:
        n.kill()


@pytest.fixture
def fresh_cluster(raftq_bin: str, tmp_path: pathlib.Path) -> Iterator[Cluster]:
    """A 3-node cluster of one test's own (it may kill nodes)."""
    c = start_cluster(raftq_bin, tmp_path, 3)
    yield c
    for n in c.nodes:
        n.kill()


@pytest.fixture
def client(cluster: Cluster) -> Iterator[raftq.Client]:
    with cluster.client() as c:
        yield c


_names = iter(range(1_000_000))


@pytest.fixture
def qname(request: pytest.FixtureRequest) -> str:
    """A queue name of the test's own."""
    return f"{request.node.name.replace('[', '-').replace(']', '')[:200]}-{next(_names)}"
