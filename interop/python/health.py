"""grpcio-health-checking's stubs asking a service's gRPC port how it is,
as a Kubernetes gRPC probe or a client-side health checker would.

Usage: health.py SCENARIO HOST:PORT SERVICE...
  check    Check for each SERVICE ("" is the whole server) and for a name
           no service has; Watch on the first SERVICE for 0.5 s
  unknown  Watch on a name no service has for 0.5 s

A Watch is read until its deadline: a stream still open then ends with
DEADLINE_EXCEEDED, one the server ended ends with the server's status.
Prints one JSON object for the Rust test to check.
"""

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from common import emit, error_json

UNKNOWN = "no.such.Service"
WATCH_SECONDS = 0.5


def watch(stub, service):
    """The statuses a Watch yields and how the stream ended."""
    seen = []
    try:
        for answer in stub.Watch(health_pb2.HealthCheckRequest(service=service), timeout=WATCH_SECONDS):
            seen.append(health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))
        end = {"code": "OK"}
    except grpc.RpcError as e:
        end = error_json(e)
    return {"statuses": seen, "end": end}


def check(stub, service):
    try:
        answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        return {"status": health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)}
    except grpc.RpcError as e:
        return {"error": error_json(e)}


def main():
    scenario, addr, services = sys.argv[1], sys.argv[2], sys.argv[3:]
    with grpc.insecure_channel(addr) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        if scenario == "check":
            out = {"check": {s: check(stub, s) for s in services + [UNKNOWN]}, "watch": watch(stub, services[0])}
        elif scenario == "unknown":
            out = {"watch": watch(stub, UNKNOWN)}
        else:
            sys.exit(f"unknown scenario {scenario}")
    emit(out)


if __name__ == "__main__":
    main()
