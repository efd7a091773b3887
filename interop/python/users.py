"""grpcio calling user-service's user.v1 API, whose GetUserWithOrders
fetches the orders from order-service over the transport it is asked for.

Usage: users.py SCENARIO HOST:PORT USER_ID
  data       GetUser, and GetUserWithOrders over several transports, with
             a read mask and at the limit of 10,000 orders
  errors     bad arguments (with their google.rpc.BadRequest), not found,
             a request over user-service's request cap
  deadlines  a generous deadline, then 1 ms on 10,000 orders
  gzip       requests sent gzip-compressed

USER_ID is the data set's user the data scenario reads (the Rust test
knows its orders). Prints one JSON object for the Rust test to check.
"""

import sys

from common import attempt, emit, load_stubs, order_json, timestamp

load_stubs()

import grpc  # noqa: E402
from google.protobuf import field_mask_pb2  # noqa: E402
from user.v1 import user_pb2 as pb  # noqa: E402
from user.v1 import user_pb2_grpc as pb_grpc  # noqa: E402

OPTIONS = [("grpc.max_receive_message_length", 64 << 20)]
T = 30
TEN_THOUSAND = "00000000-0000-0000-0000-000000010000"


def user_json(u):
    return {
        "id": u.id,
        "username": u.username,
        "first_name": u.first_name,
        "last_name": u.last_name,
        "email": u.email,
        "phone": u.phone,
        "gender": pb.Gender.Name(u.gender),
        "birth_date": u.birth_date,
        "created_at": timestamp(u.created_at),
        "updated_at": timestamp(u.updated_at),
    }


def with_orders(stub, **kw):
    got = stub.GetUserWithOrders(pb.GetUserWithOrdersRequest(**kw), timeout=T)
    return {"user": user_json(got.user), "orders": [order_json(o) for o in got.orders], "via": got.via}


def data(stub, user_id):
    out = {"user": user_json(stub.GetUser(pb.GetUserRequest(id=user_id), timeout=T).user)}
    out["via"] = {
        via: with_orders(stub, id=user_id, via=via, limit=100)
        for via in ("grpc", "grpc-stream", "grpc-bidi", "h1-json", "h2c-proto", "connect-h1-proto", "tcp-proto")
    }
    out["default_via"] = with_orders(stub, id=user_id)
    mask = field_mask_pb2.FieldMask(paths=["total_minor", "status", "coupon_code"])
    out["masked"] = with_orders(stub, id=user_id, via="grpc", limit=7, read_mask=mask)
    big = stub.GetUserWithOrders(pb.GetUserWithOrdersRequest(id=TEN_THOUSAND, via="grpc", limit=10000), timeout=T)
    out["ten_thousand"] = {"ids": [o.id for o in big.orders], "total_minor": sum(o.total_minor for o in big.orders)}
    return out


def errors(stub):
    def get_user(id):
        return lambda: stub.GetUser(pb.GetUserRequest(id=id), timeout=T).user.id

    def with_orders_of(**kw):
        return lambda: len(stub.GetUserWithOrders(pb.GetUserWithOrdersRequest(**kw), timeout=T).orders)

    return {
        "bad_id": attempt(get_user("nope")),
        "unknown_user": attempt(get_user("00000000-0000-4000-8000-000000000000")),
        "unknown_via": attempt(with_orders_of(id=TEN_THOUSAND, via="carrier-pigeon")),
        "limit_too_large": attempt(with_orders_of(id=TEN_THOUSAND, via="grpc", limit=10001)),
        "bad_mask": attempt(
            with_orders_of(id=TEN_THOUSAND, via="grpc", read_mask=field_mask_pb2.FieldMask(paths=["nope"]))
        ),
        "bad_registration": attempt(
            lambda: stub.RegisterUser(pb.RegisterUserRequest(username="x", email="not an email"), timeout=T).user.id
        ),
        # 128 KiB of id: over user-service's 64 KiB request cap.
        "over_request_cap": attempt(get_user("x" * (128 << 10))),
        "after": attempt(get_user(TEN_THOUSAND)),
    }


def deadlines(stub):
    big = pb.GetUserWithOrdersRequest(id=TEN_THOUSAND, via="grpc", limit=10000)
    return {
        "generous": attempt(lambda: len(stub.GetUserWithOrders(big, timeout=T).orders)),
        "unary_1ms": attempt(lambda: len(stub.GetUserWithOrders(big, timeout=0.001).orders)),
        "after": attempt(lambda: stub.GetUser(pb.GetUserRequest(id=TEN_THOUSAND), timeout=T).user.id),
    }


def gzip(stub, user_id):
    return {"with_orders": attempt(lambda: with_orders(stub, id=user_id, via="grpc", limit=100))}


def main():
    scenario, addr, user_id = sys.argv[1], sys.argv[2], sys.argv[3]
    compression = grpc.Compression.Gzip if scenario == "gzip" else None
    with grpc.insecure_channel(addr, options=OPTIONS, compression=compression) as ch:
        stub = pb_grpc.UserServiceStub(ch)
        if scenario == "data":
            out = data(stub, user_id)
        elif scenario == "errors":
            out = errors(stub)
        elif scenario == "deadlines":
            out = deadlines(stub)
        elif scenario == "gzip":
            out = gzip(stub, user_id)
        else:
            sys.exit(f"unknown scenario {scenario}")
    emit(out)


if __name__ == "__main__":
    main()
