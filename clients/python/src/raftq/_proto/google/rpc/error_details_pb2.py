"""google.rpc.ErrorInfo: googleapis-common-protos' definition when installed
(one definition per process), else the copy generated with the client."""

try:
    from google.rpc.error_details_pb2 import *  # noqa: F401,F403
    from google.rpc.error_details_pb2 import ErrorInfo  # noqa: F401
except ImportError:
    from raftq._proto.google.rpc._error_details_pb2 import *  # noqa: F401,F403
    from raftq._proto.google.rpc._error_details_pb2 import ErrorInfo  # noqa: F401
