"""Typed errors of the raftq client.

Every failed call raises a subclass of :class:`RaftqError` named after its
gRPC status code (``NotFound``, ``PermissionDenied``, ...), carrying the
broker's message and, for redirects, the ``google.rpc.ErrorInfo`` detail.
"""

from __future__ import annotations

from typing import Optional

import grpc

from raftq._proto.google.rpc import error_details_pb2, status_pb2

#: ErrorInfo reasons a node gives when it must not serve a call
#: (docs/api.md, Redirect).
REASON_NOT_LEADER = "NOT_LEADER"
REASON_NO_LEADER = "NO_LEADER"


class RaftqError(Exception):
    """A call to raftq failed.

    Attributes:
        code: the gRPC status code.
        message: the broker's message (names the field, queue or limit).
        error_info: the ``google.rpc.ErrorInfo`` detail, if the status had one.
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, *, code: Optional[grpc.StatusCode] = None,
                 error_info: Optional[error_details_pb2.ErrorInfo] = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.error_info = error_info

    @property
    def reason(self) -> str:
        """The ErrorInfo reason (``NOT_LEADER``, ``NO_LEADER``) or ``""``."""
        return self.error_info.reason if self.error_info is not None else ""

    @property
    def leader_addr(self) -> str:
        """For ``NOT_LEADER``: the leader's gRPC address, if the node knew it."""
        if self.error_info is None:
            return ""
        return self.error_info.metadata.get("leader_addr", "")

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"


class Cancelled(RaftqError):
    code = grpc.StatusCode.CANCELLED


class Unknown(RaftqError):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(RaftqError):
    """Bad input: a name, size or range the broker refuses (nothing changed)."""
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(RaftqError):
    """The call's timeout passed (retries included); its outcome is unknown."""
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(RaftqError):
    """No such queue (or message, token, node)."""
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(RaftqError):
    """The queue (or token) exists already."""
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(RaftqError):
    """The caller's identity lacks the permission on the queue."""
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(RaftqError):
    """A limit was reached (queue full, disk short); nothing was stored."""
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(RaftqError):
    """Stale lease token, queue in use, or a feature the cluster's version lacks."""
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(RaftqError):
    code = grpc.StatusCode.ABORTED


class OutOfRange(RaftqError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(RaftqError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(RaftqError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(RaftqError):
    """No node could serve the call (down, no leader) within the retries."""
    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(RaftqError):
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(RaftqError):
    """No or invalid credentials (token, client certificate)."""
    code = grpc.StatusCode.UNAUTHENTICATED


class ClientClosed(RaftqError):
    """The :class:`~raftq.Client` was closed."""
    code = grpc.StatusCode.CANCELLED


_BY_CODE: dict[grpc.StatusCode, type[RaftqError]] = {
    cls.code: cls for cls in (
        Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
        PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
        Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated)
}

_DETAILS_KEY = "grpc-status-details-bin"
_ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"


def error_info_of(err: grpc.RpcError) -> Optional[error_details_pb2.ErrorInfo]:
    """The ErrorInfo detail of a failed gRPC call, if it carries one."""
    trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    for key, value in trailers or ():
        if key != _DETAILS_KEY:
            continue
        st = status_pb2.Status()
        try:
            st.ParseFromString(value)
        except Exception:  # a malformed detail says nothing usable
            return None
        for d in st.details:
            if d.type_url == _ERROR_INFO_TYPE:
                info = error_details_pb2.ErrorInfo()
                info.ParseFromString(d.value)
                return info
    return None


def from_rpc_error(err: grpc.RpcError, op: str = "") -> RaftqError:
    """The typed error for a failed gRPC call."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    cls = _BY_CODE.get(code, RaftqError)
    msg = f"raftq {op}: {details}" if op else str(details)
    return cls(msg, code=code, error_info=error_info_of(err))


__all__ = [name for name, v in list(globals().items())
           if isinstance(v, type) and issubclass(v, RaftqError)] + [
    "REASON_NOT_LEADER", "REASON_NO_LEADER", "error_info_of", "from_rpc_error"]
