"""Post-process the stubs protoc wrote under raftq/_proto (make python-proto).

protoc writes imports for a top-level ``raftq.v1`` and ``google.rpc``; the
stubs live inside the ``raftq`` package instead, so their imports are
rewritten to ``raftq._proto...``. The google.rpc messages are generated
as ``_status_pb2``/``_error_details_pb2`` behind a small shim module that
prefers googleapis-common-protos when it is installed: protobuf allows one
definition of a .proto file per process, so a program that also imports
that package (grpcio-status does) must not see a second one.
"""

import pathlib
import re
import sys

SHIM = '''"""google.rpc.{msg}: googleapis-common-protos' definition when installed
(one definition per process), else the copy generated with the client."""

try:
    from google.rpc.{mod} import *  # noqa: F401,F403
    from google.rpc.{mod} import {msg}  # noqa: F401
except ImportError:
    from raftq._proto.google.rpc._{mod} import *  # noqa: F401,F403
    from raftq._proto.google.rpc._{mod} import {msg}  # noqa: F401
'''


def main(root: str) -> None:
    base = pathlib.Path(root)
    rpc = base / "google" / "rpc"
    for mod, msg in (("status_pb2", "Status"), ("error_details_pb2", "ErrorInfo")):
        for ext in (".py", ".pyi"):
            src = rpc / (mod + ext)
            if src.exists():
                src.rename(rpc / ("_" + mod + ext))
        (rpc / (mod + ".py")).write_text(SHIM.format(mod=mod, msg=msg))
    for d in (base, base / "google", rpc, base / "raftq", base / "raftq" / "v1"):
        (d / "__init__.py").touch()
    for f in list(base.rglob("*.py")) + list(base.rglob("*.pyi")):
        text = f.read_text()
        fixed = re.sub(r"^from (raftq\.v1|google\.rpc) import", r"from raftq._proto.\1 import", text, flags=re.M)
        fixed = re.sub(r"^import (raftq\.v1|google\.rpc)\.", r"import raftq._proto.\1.", fixed, flags=re.M)
        if fixed != text:
            f.write_text(fixed)


if __name__ == "__main__":
    main(sys.argv[1])
