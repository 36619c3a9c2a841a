"""raftq: a Python client of the raftq work-queue broker.

Quick start::

    import raftq
    with raftq.Client("127.0.0.1:7400,127.0.0.1:7410") as c:
        c.create_queue("jobs")
        c.enqueue("jobs", b"hello")
        c.consume("jobs", lambda m: print(m.payload))

The request and response messages are the API's protobuf messages
(``raftq.pb``), documented in the broker's docs/api.md.
"""

from raftq._proto.raftq.v1 import raftq_pb2 as pb
from raftq.client import (DEFAULT_TIMEOUT, MAX_RECEIVE_BYTES, MAX_REQUEST_BYTES, TLS, Client, Message,
                          RetryPolicy, lease_ref, new_dedup_id)
from raftq.consumer import (MAX_REASON_BYTES, Consumer, DeadLetter, HandBack, Received, Subscription,
                            truncate_reason)
from raftq.errors import (Aborted, AlreadyExists, Cancelled, ClientClosed, DataLoss, DeadlineExceeded,
                          FailedPrecondition, Internal, InvalidArgument, NotFound, OutOfRange,
                          PermissionDenied, RaftqError, ResourceExhausted, Unauthenticated, Unavailable,
                          Unimplemented, Unknown)

__version__ = "0.1.0"

__all__ = [
    "Client", "TLS", "RetryPolicy", "Message", "Consumer", "Subscription", "Received", "DeadLetter", "HandBack",
    "truncate_reason", "lease_ref", "new_dedup_id", "pb", "MAX_REASON_BYTES", "MAX_RECEIVE_BYTES",
    "MAX_REQUEST_BYTES", "DEFAULT_TIMEOUT",
    "RaftqError", "Aborted", "AlreadyExists", "Cancelled", "ClientClosed", "DataLoss", "DeadlineExceeded",
    "FailedPrecondition", "Internal", "InvalidArgument", "NotFound", "OutOfRange", "PermissionDenied",
    "ResourceExhausted", "Unauthenticated", "Unavailable", "Unimplemented", "Unknown",
]
