"""Server reflection as grpcurl, Postman or grpcui use it: list a port's
services, then fetch each one's descriptors and read its methods.

Usage: reflection.py VERSION HOST:PORT
  v1       grpc.reflection.v1, what current tools try first
  v1alpha  grpc.reflection.v1alpha, what older tools speak

Both go through grpcio-reflection's own client,
ProtoReflectionDescriptorDatabase, which speaks v1alpha; for v1 its stub is
pointed at v1's method path (the two versions' messages are the same).

Prints {"services": [...], "methods": {service: [[name, client_streaming,
server_streaming], ...] or null}} or {"error": ...}; the Rust test checks it.
"""

import sys

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, field_mask_pb2, timestamp_pb2  # noqa: F401
from grpc_reflection.v1alpha import reflection_pb2 as pb
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from common import emit, error_json

V1 = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"


class V1Stub:
    """The v1alpha stub's one method, on v1's path."""

    def __init__(self, ch):
        self.ServerReflectionInfo = ch.stream_stream(
            V1,
            request_serializer=pb.ServerReflectionRequest.SerializeToString,
            response_deserializer=pb.ServerReflectionResponse.FromString,
        )


def well_known(name):
    """google/protobuf/*.proto from the client's own protobuf runtime, as
    grpcurl and protoreflect do: a server need not send the well-known types."""
    if not name.startswith("google/protobuf/"):
        return None
    f = descriptor_pb2.FileDescriptorProto()
    descriptor_pool.Default().FindFileByName(name).CopyToProto(f)
    return f


class WithWellKnown:
    """A descriptor database: the well-known types, then the server's."""

    def __init__(self, db):
        self.db = db

    def FindFileByName(self, name):
        return well_known(name) or self.db.FindFileByName(name)

    def FindFileContainingSymbol(self, symbol):
        return self.db.FindFileContainingSymbol(symbol)


def describe(ch, version):
    db = ProtoReflectionDescriptorDatabase(ch)
    if version == "v1":
        db._stub = V1Stub(ch)  # the one attribute it calls; grpcio-reflection is pinned
    services = sorted(db.get_services())
    pool = descriptor_pool.DescriptorPool(WithWellKnown(db))
    methods = {}
    for name in services:
        try:
            svc = pool.FindServiceByName(name)
        except (KeyError, TypeError):
            methods[name] = None
            continue
        methods[name] = [[m.name, m.client_streaming, m.server_streaming] for m in svc.methods]
    return {"services": services, "methods": methods}


def main():
    version, addr = sys.argv[1], sys.argv[2]
    if version not in ("v1", "v1alpha"):
        sys.exit(f"unknown reflection version {version}")
    with grpc.insecure_channel(addr) as ch:
        try:
            out = describe(ch, version)
        except grpc.RpcError as e:
            out = {"error": error_json(e)}
    emit(out)


if __name__ == "__main__":
    main()
