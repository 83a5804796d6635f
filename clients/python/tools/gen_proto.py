"""Regenerates toolsched/v1/*_pb2*.py(i) from the repository's proto, or checks
that the committed files match it.

    python tools/gen_proto.py           # rewrite src/toolsched/v1/
    python tools/gen_proto.py --check   # exit 1 and name the files that differ

Needs grpcio-tools (the version in pyproject's `test` extra: the output
depends on it).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE_SRC = HERE.parent / "src"
PROTO_ROOT = HERE.parents[2] / "proto"
PROTO = "toolsched/v1/toolsched.proto"
GENERATED = ("toolsched_pb2.py", "toolsched_pb2.pyi", "toolsched_pb2_grpc.py")


def generate(out: Path) -> None:
    """Runs protoc (grpcio-tools' bundled one) into `out`."""
    import grpc_tools
    from grpc_tools import protoc

    include = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        PROTO,
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {PROTO_ROOT / PROTO}")


def differences() -> list[str]:
    """The generated files that differ from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        stale = []
        for name in GENERATED:
            fresh = (Path(tmp) / "toolsched" / "v1" / name).read_bytes()
            committed = PACKAGE_SRC / "toolsched" / "v1" / name
            if not committed.exists() or committed.read_bytes() != fresh:
                stale.append(str(committed))
        return stale


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare")
    args = parser.parse_args()
    if args.check:
        stale = differences()
        for path in stale:
            print(f"stale generated code: {path} (run python tools/gen_proto.py)", file=sys.stderr)
        return 1 if stale else 0
    generate(PACKAGE_SRC)
    return 0


if __name__ == "__main__":
    sys.exit(main())
