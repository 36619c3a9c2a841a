"""Pieces that need no node."""

from __future__ import annotations

import grpc
import pytest

import raftq
from raftq import errors
from raftq._proto.google.rpc import error_details_pb2, status_pb2
from raftq.client import _ms


@pytest.mark.parametrize("reason,limit,want", [
    ("short", 1024, "short"),
    ("a" * 1030, 1024, "a" * 1024),
    ("é" * 600, 1024, "é" * 512),           # 2-byte characters: an even cut
    ("a" + "é" * 600, 1024, "a" + "é" * 511),  # the 1,024th byte starts a character: cut before it
    ("€" * 400, 1024, "€" * 341),          # 3-byte characters: 1,023 bytes
    ("😀" * 300, 1024, "😀" * 256),
    ("ab😀", 4, "ab"),
])
def test_truncate_reason_cuts_at_a_character_boundary(reason: str, limit: int, want: str) -> None:
    got = raftq.truncate_reason(reason, limit)
    assert got == want and len(got.encode()) <= limit


def test_durations_are_whole_milliseconds_rounded_up() -> None:
    assert [_ms(0), _ms(0.0001), _ms(1.5), _ms(60), _ms(-1)] == [0, 1, 1500, 60000, -1000]
    m = raftq.Message(payload="p", delay=0.0004).to_proto()
    assert m.delay_ms == 1 and m.payload == b"p" and len(m.dedup_id) == 32


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str, trailers: tuple = ()) -> None:
        self._code, self._details, self._trailers = code, details, trailers

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple:
        return self._trailers


def not_leader(addr: str) -> FakeRpcError:
    info = error_details_pb2.ErrorInfo(reason="NOT_LEADER", domain="raftq", metadata={"leader_id": "n2", "leader_addr": addr})
    st = status_pb2.Status(code=14, message="not the leader")
    st.details.add().Pack(info)
    return FakeRpcError(grpc.StatusCode.UNAVAILABLE, "not the leader",
                        (("grpc-status-details-bin", st.SerializeToString()),))


@pytest.mark.parametrize("code,cls", [
    (grpc.StatusCode.NOT_FOUND, raftq.NotFound),
    (grpc.StatusCode.PERMISSION_DENIED, raftq.PermissionDenied),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, raftq.ResourceExhausted),
    (grpc.StatusCode.UNAUTHENTICATED, raftq.Unauthenticated),
    (grpc.StatusCode.FAILED_PRECONDITION, raftq.FailedPrecondition),
    (grpc.StatusCode.INVALID_ARGUMENT, raftq.InvalidArgument),
    (grpc.StatusCode.ALREADY_EXISTS, raftq.AlreadyExists),
])
def test_typed_errors(code: grpc.StatusCode, cls: type) -> None:
    e = errors.from_rpc_error(FakeRpcError(code, "queue jobs: nope"), "GetQueue")
    assert type(e) is cls and isinstance(e, raftq.RaftqError) and e.code == code
    assert "queue jobs: nope" in str(e)


def test_not_leader_detail_is_read() -> None:
    e = errors.from_rpc_error(not_leader("10.0.0.2:7400"))
    assert isinstance(e, raftq.Unavailable) and e.reason == "NOT_LEADER" and e.leader_addr == "10.0.0.2:7400"


def test_redirect_is_remembered_per_queue() -> None:
    c = raftq.Client("127.0.0.1:1")
    try:
        assert c._classify("127.0.0.1:1", "jobs", not_leader("127.0.0.1:2"), deadline=1e18) == 1  # redirect
        assert c.leader_of("jobs") == "127.0.0.1:2" and c._nodes.target("jobs") == "127.0.0.1:2"
        assert c.leader_of("other") == ""
        # The leader goes away: the hint is dropped, the seeds remain.
        c._classify("127.0.0.1:2", "jobs", FakeRpcError(grpc.StatusCode.UNAVAILABLE, "connection refused"), 1e18)
        assert c.leader_of("jobs") == "" and c._nodes.target("jobs") in ("127.0.0.1:1", "127.0.0.1:2")
    finally:
        c.close()


def test_committed_stubs_match_the_proto(tmp_path: "pathlib.Path") -> None:
    """make python-proto was run after the last change of the .proto files."""
    import filecmp
    import pathlib
    import shutil
    import subprocess
    import sys

    repo = pathlib.Path(__file__).resolve().parents[3]
    plugin = shutil.which("grpc_python_plugin")
    assert plugin and shutil.which("protoc"), "protoc and grpc_python_plugin are needed (make python-tools)"
    out = tmp_path / "_proto"
    out.mkdir()
    subprocess.run(["protoc", "-I", "proto", "-I", "/usr/include", f"--python_out={out}", f"--pyi_out={out}",
                    f"--grpc_python_out={out}", f"--plugin=protoc-gen-grpc_python={plugin}",
                    "proto/raftq/v1/raftq.proto", "proto/google/rpc/status.proto",
                    "proto/google/rpc/error_details.proto"], cwd=repo, check=True)
    for f in (out / "google" / "rpc").glob("*_grpc.py"):
        f.unlink()
    subprocess.run([sys.executable, str(repo / "clients/python/genfix.py"), str(out)], check=True)
    committed = repo / "clients/python/src/raftq/_proto"
    for f in out.rglob("*.py*"):
        rel = f.relative_to(out)
        assert filecmp.cmp(f, committed / rel, shallow=False), f"{rel} differs: run make python-proto"
