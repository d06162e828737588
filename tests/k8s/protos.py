"""Python stubs for the kubelet's pod-resources v1 API, generated from podresources/v1/api.proto at test time.

Nothing generated is checked in: the first `load()` of a session runs grpc_tools.protoc into
tests/k8s/_generated/g_<hash>/ (gitignored), keyed by the proto's text and the grpcio-tools version, so a
changed proto or an upgraded protoc regenerates and an unchanged one is reused. Later calls return the
modules already imported.

protoc writes `from v1 import api_pb2` into api_pb2_grpc.py (the import follows the proto's path); that one
line is rewritten to a relative import so that the modules live under this package
(`tests.k8s._generated.g_<hash>.v1`) instead of a top-level `v1` on sys.path.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
PROTO_ROOT = HERE / "podresources"
PROTO = PROTO_ROOT / "v1" / "api.proto"
GENERATED = HERE / "_generated"
SERVICE = "v1.PodResourcesLister"

_ABSOLUTE_IMPORT = "from v1 import api_pb2 as v1_dot_api__pb2"
_RELATIVE_IMPORT = "from . import api_pb2 as v1_dot_api__pb2"


class StubGenerationError(RuntimeError):
    pass


@dataclass(frozen=True)
class PodResourcesProtos:
    """The generated modules: `pb2` has the messages, `pb2_grpc` the client stub and the servicer base."""

    pb2: ModuleType
    pb2_grpc: ModuleType
    directory: Path


@functools.cache
def load() -> PodResourcesProtos:
    try:
        import grpc  # noqa: F401  (the generated api_pb2_grpc needs it)
        from grpc_tools import protoc
    except ImportError as exc:  # pragma: no cover - only without the test dependencies
        raise StubGenerationError(
            f"tests/k8s needs grpcio, grpcio-tools and protobuf ({exc}): pip install grpcio grpcio-tools"
        ) from exc

    key = _cache_key()
    target = GENERATED / f"g_{key}"
    if not (target / "v1" / "api_pb2_grpc.py").is_file():
        _generate(protoc, target)
    package = f"{__package__}._generated.g_{key}.v1"
    pb2 = importlib.import_module(f"{package}.api_pb2")
    pb2_grpc = importlib.import_module(f"{package}.api_pb2_grpc")
    return PodResourcesProtos(pb2=pb2, pb2_grpc=pb2_grpc, directory=target)


def _cache_key() -> str:
    from importlib.metadata import version

    digest = hashlib.sha256(PROTO.read_bytes())
    digest.update(version("grpcio-tools").encode())
    return digest.hexdigest()[:16]


def _generate(protoc: ModuleType, target: Path) -> None:
    """Generate into a fresh directory and rename it into place, so that concurrent sessions never see half."""
    GENERATED.mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".tmp-", dir=GENERATED))
    try:
        well_known = Path(protoc.__file__).resolve().parent / "_proto"
        args = [
            "grpc_tools.protoc",
            f"--proto_path={PROTO_ROOT}",
            f"--proto_path={well_known}",
            f"--python_out={scratch}",
            f"--pyi_out={scratch}",
            f"--grpc_python_out={scratch}",
            "v1/api.proto",
        ]
        rc = protoc.main(args)
        if rc != 0:
            raise StubGenerationError(f"grpc_tools.protoc failed with exit status {rc}: {' '.join(args)}")
        grpc_module = scratch / "v1" / "api_pb2_grpc.py"
        text = grpc_module.read_text()
        if text.count(_ABSOLUTE_IMPORT) != 1:
            raise StubGenerationError(f"{grpc_module}: expected one line {_ABSOLUTE_IMPORT!r} from protoc")
        grpc_module.write_text(text.replace(_ABSOLUTE_IMPORT, _RELATIVE_IMPORT))
        try:
            os.rename(scratch, target)
        except OSError:
            # another session renamed its copy first (the rename of a directory onto a non-empty one fails)
            if not (target / "v1" / "api_pb2_grpc.py").is_file():
                raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(scratch)
