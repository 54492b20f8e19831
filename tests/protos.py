"""The test tree's protobuf messages: a `.proto` of tests/ compiled into a module of its classes.

`grpc_tools.protoc` turns the file into a descriptor set, kept in the temporary directory under
the file's digest (a changed file compiles again, an unchanged one once per machine); the
descriptors go into a pool of the file's own, never protobuf's default pool, so a test's copy of
a kubelet API (package `v1`, `v1beta1`) never collides with another copy of the same package
loaded in the same process, such as the production client's. The module holds each top-level
message class, each top-level enum (its wrapper) and each enum value by name, as a `_pb2`
module does; it is built once per process. Calls go through plain `grpc` stubs (`unary_stub`) and
servers answer through generic handlers (`unary_handler`), the classes' `SerializeToString` and
`FromString` as the codec, so no `_pb2_grpc` code is needed.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from concurrent import futures
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.internal import enum_type_wrapper

COMPILE_TIMEOUT = 120.0

_lock = threading.Lock()
_modules: dict[Path, ModuleType] = {}


class ProtoCompileError(RuntimeError):
    """protoc refused a file; the message carries its stderr."""


def compile_proto(path: Path, module_name: str) -> ModuleType:
    """The messages and enums of `path` as module `module_name` (compiled once per process)."""
    key = path.resolve()
    with _lock:
        module = _modules.get(key)
        if module is None:
            module = _build_module(key, module_name, _load_descriptor_set(key))
            _modules[key] = module
        return module


def _load_descriptor_set(path: Path) -> bytes:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    cached = Path(tempfile.gettempdir()) / f"na-proto-{path.stem}-{digest}.desc"
    if not cached.exists():
        # written beside, then renamed: a concurrent session never reads half a file
        with tempfile.TemporaryDirectory(prefix="na-proto-build-") as staging:
            built = Path(staging) / "out.desc"
            done = subprocess.run(
                [sys.executable, "-m", "grpc_tools.protoc", f"-I{path.parent}",
                 f"--descriptor_set_out={built}", path.name],
                capture_output=True,
                text=True,
                timeout=COMPILE_TIMEOUT,
                check=False,
            )  # fmt: skip
            if done.returncode != 0:
                raise ProtoCompileError(f"protoc could not compile {path}:\n{done.stderr}")
            built.replace(cached)
    return cached.read_bytes()


def _build_module(path: Path, module_name: str, descriptor_set: bytes) -> ModuleType:
    pool = descriptor_pool.DescriptorPool()
    for proto in descriptor_pb2.FileDescriptorSet.FromString(descriptor_set).file:
        pool.Add(proto)
    file = pool.FindFileByName(path.name)
    module = ModuleType(module_name, f"the messages of {path}")
    module.DESCRIPTOR = file  # type: ignore[attr-defined]
    for name, message in file.message_types_by_name.items():
        setattr(module, name, message_factory.GetMessageClass(message))
    for name, enum in file.enum_types_by_name.items():
        setattr(module, name, enum_type_wrapper.EnumTypeWrapper(enum))
        for value in enum.values:
            setattr(module, value.name, value.number)
    return module


def serialize(message: Any) -> bytes:
    """A message's wire bytes (a stub's request serializer, a handler's response serializer)."""
    return bytes(message.SerializeToString())


def unary_stub(
    channel: grpc.Channel, method: str, reply_type: Any
) -> grpc.UnaryUnaryMultiCallable[Any, Any]:
    """A unary-unary stub of `method` (`/package.Service/Method`) whose reply is `reply_type`."""
    return channel.unary_unary(
        method, request_serializer=serialize, response_deserializer=reply_type.FromString
    )


def unary_handler(
    behaviour: Callable[[Any, grpc.ServicerContext], Any], request_type: Any
) -> grpc.RpcMethodHandler[Any, Any]:
    """A server's unary-unary handler: `behaviour(request, context)` answers a `request_type`."""
    return grpc.unary_unary_rpc_method_handler(
        behaviour, request_deserializer=request_type.FromString, response_serializer=serialize
    )


def serve_unix(
    socket: Path,
    service: str,
    handlers: Mapping[str, grpc.RpcMethodHandler[Any, Any]],
    *,
    workers: int = 8,
) -> grpc.Server:
    """A started server of `service` (`package.Service`) on the UNIX socket `socket`, its
    methods by name in `handlers`; a call holds one of the `workers` threads while it runs."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="na"))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service, dict(handlers)),)
    )
    server.add_insecure_port(f"unix:{socket}")
    server.start()
    return server
