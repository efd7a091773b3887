"""What the grpcio interop clients share: stubs generated from proto/ when a
client starts, the one JSON form of an order and of a failed call that the
Rust tests compare with the data set, and printing the answer.

Every client prints exactly one JSON object on stdout; the Rust test that ran
it decides what is right. Nothing here asserts.
"""

import atexit
import json
import shutil
import sys
import tempfile
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ["order/v1/order.proto", "order/v2/order.proto", "user/v1/user.proto"]


def load_stubs():
    """Generates the Python stubs of proto/ into a temporary directory (gone
    at exit) and puts it on sys.path, so that `from order.v2 import ...`
    imports what grpcio-tools made from this checkout's contract."""
    import grpc_tools
    from grpc_tools import protoc

    out = tempfile.mkdtemp(prefix="interop-stubs-")
    atexit.register(shutil.rmtree, out, True)
    wkt = Path(grpc_tools.__file__).parent / "_proto"
    args = ["protoc", f"-I{ROOT / 'proto'}", f"-I{wkt}", f"--python_out={out}", f"--grpc_python_out={out}"]
    if protoc.main(args + PROTOS) != 0:
        sys.exit("grpc_tools.protoc could not generate stubs from proto/")
    for pkg in ("order", "order/v1", "order/v2", "user", "user/v1"):
        Path(out, pkg, "__init__.py").touch()
    sys.path.insert(0, out)


def optional(msg, field):
    """A proto3 `optional` field: its value, or None when absent."""
    return getattr(msg, field) if msg.HasField(field) else None


def timestamp(t):
    return [t.seconds, t.nanos]


def order_json(o):
    """Every field of an order.v2.Order as this client decoded it. An absent
    field reads as proto3's default (an absent optional as None), which is
    how the Rust side renders a field outside a read mask."""
    from order.v2 import order_pb2 as v2

    a = o.shipping_address
    return {
        "id": o.id,
        "user_id": o.user_id,
        "product_id": o.product_id,
        "product_name": o.product_name,
        "quantity": o.quantity,
        "unit_price_minor": o.unit_price_minor,
        "discount_minor": o.discount_minor,
        "total_minor": o.total_minor,
        "currency": o.currency,
        "status": v2.OrderStatus.Name(o.status),
        "gift": o.gift,
        "shipping_address": {
            "line1": a.line1,
            "line2": optional(a, "line2"),
            "city": a.city,
            "postal_code": a.postal_code,
            "country_code": a.country_code,
        },
        "note": optional(o, "note"),
        "coupon_code": optional(o, "coupon_code"),
        "created_at": timestamp(o.created_at),
        "updated_at": timestamp(o.updated_at),
    }


def error_json(e):
    """A failed call: its status code's name, its message, and the
    google.rpc.BadRequest field violations when the server sent them (read
    with grpcio-status, as grpcio's users read rich errors)."""
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    violations = None
    status = rpc_status.from_call(e) if hasattr(e, "trailing_metadata") else None
    if status is not None:
        for detail in status.details:
            if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                violations = [[v.field, v.description] for v in bad.field_violations]
    return {"code": e.code().name, "message": e.details(), "bad_request": violations}


def attempt(call):
    """Runs `call`; its answer as {"ok": ...}, or its failure as {"error": ...}."""
    try:
        return {"ok": call()}
    except grpc.RpcError as e:
        return {"error": error_json(e)}


def emit(out):
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
