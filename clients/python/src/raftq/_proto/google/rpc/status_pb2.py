"""google.rpc.Status: googleapis-common-protos' definition when installed
(one definition per process), else the copy generated with the client."""

try:
    from google.rpc.status_pb2 import *  # noqa: F401,F403
    from google.rpc.status_pb2 import Status  # noqa: F401
except ImportError:
    from raftq._proto.google.rpc._status_pb2 import *  # noqa: F401,F403
    from raftq._proto.google.rpc._status_pb2 import Status  # noqa: F401
