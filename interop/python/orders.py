"""grpcio, a gRPC client this project did not write, calling order-service's
order.v2 and order.v1 APIs with stubs generated from proto/.

Usage: orders.py SCENARIO HOST:PORT
  data       unary (every fixed user; 10,000 orders in one page), paging,
             a read mask, GetOrder, the server stream, the bidi stream, both
             batch calls and the legacy v1 API
  errors     bad arguments (with their google.rpc.BadRequest), not found,
             unimplemented, a request over the request cap, a failing stream
  deadlines  a generous deadline, 1 ms on 10,000 orders (unary and stream),
             and the channel still working after them
  gzip       requests sent gzip-compressed (answers too, when the server is
             told to compress)

Prints one JSON object; the Rust test (tests/api/interop) checks it against
the data set.
"""

import sys

from common import attempt, emit, error_json, load_stubs, order_json

load_stubs()

import grpc  # noqa: E402
from google.protobuf import field_mask_pb2  # noqa: E402
from google.protobuf.json_format import MessageToDict  # noqa: E402
from order.v1 import order_pb2 as v1  # noqa: E402
from order.v1 import order_pb2_grpc as v1_grpc  # noqa: E402
from order.v2 import order_pb2 as v2  # noqa: E402
from order.v2 import order_pb2_grpc as v2_grpc  # noqa: E402


def user(count):
    """The data set's fixed user with `count` orders: its id's last digits spell the count."""
    return f"00000000-0000-0000-0000-{count:012d}"


OPTIONS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
T = 30  # seconds: generous, so that only the deadline scenarios ever see one


def orders_of(page):
    return [order_json(o) for o in page.orders]


def data(stub, legacy):
    out = {"unary": {}}
    for n in (0, 1, 10, 100, 1000, 10000):
        page = stub.ListOrders(v2.ListOrdersRequest(user_id=user(n), page_size=max(n, 1)), timeout=T)
        out["unary"][str(n)] = {"orders": orders_of(page), "next_page_token": page.next_page_token}
    # The default page size (0 means 100).
    out["default_page"] = len(stub.ListOrders(v2.ListOrdersRequest(user_id=user(1000)), timeout=T).orders)

    pages, token = [], ""
    while True:
        page = stub.ListOrders(v2.ListOrdersRequest(user_id=user(1000), page_size=300, page_token=token), timeout=T)
        pages.append([o.id for o in page.orders])
        token = page.next_page_token
        if not token:
            break
    out["pages"] = pages

    mask = field_mask_pb2.FieldMask(paths=["status", "total_minor", "note", "shipping_address"])
    masked = stub.ListOrders(v2.ListOrdersRequest(user_id=user(100), page_size=20, read_mask=mask), timeout=T)
    out["masked"] = orders_of(masked)

    wanted = out["unary"]["10"]["orders"][3]["id"]
    out["get"] = order_json(stub.GetOrder(v2.GetOrderRequest(id=wanted), timeout=T).order)

    stream = stub.StreamOrders(v2.StreamOrdersRequest(user_id=user(1000), page_size=1000), timeout=T)
    out["stream"] = [order_json(m.order) for m in stream]

    lookups = [
        v2.LookupOrdersRequest(request_id=1, user_id=user(10), page_size=10),
        v2.LookupOrdersRequest(request_id=2, user_id=user(100), page_size=50, read_mask=mask),
        v2.LookupOrdersRequest(request_id=3, user_id="nope", page_size=5),
        v2.LookupOrdersRequest(request_id=4, user_id=user(0), page_size=5),
    ]
    answers = list(stub.LookupOrders(iter(lookups), timeout=T))
    out["bidi"] = sorted(
        (
            {
                "request_id": a.request_id,
                "orders": orders_of(a),
                "next_page_token": a.next_page_token,
                "error": {"code": a.error.code, "message": a.error.message} if a.HasField("error") else None,
            }
            for a in answers
        ),
        key=lambda a: a["request_id"],
    )

    queries = [
        v2.ListOrdersRequest(user_id=user(10), page_size=10),
        v2.ListOrdersRequest(user_id=user(100), page_size=5),
    ]
    batch = stub.BatchListOrders(v2.BatchListOrdersRequest(requests=queries), timeout=T)
    out["batch"] = [orders_of(r) for r in batch.responses]
    streamed = stub.BatchStreamOrders(v2.BatchStreamOrdersRequest(requests=queries), timeout=T)
    out["batch_stream"] = [{"index": m.index, "orders": orders_of(m)} for m in streamed]

    old = legacy.ListOrders(v1.ListOrdersRequest(user_id=user(10), page_size=10), timeout=T)
    out["v1"] = [
        MessageToDict(o, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
        for o in old.orders
    ]
    return out


def errors(ch, stub):
    def list_orders(**kw):
        return lambda: len(stub.ListOrders(v2.ListOrdersRequest(**kw), timeout=T).orders)

    def get_order(id):
        return lambda: stub.GetOrder(v2.GetOrderRequest(id=id), timeout=T).order.id

    def raw(path):
        call = ch.unary_unary(path, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        return lambda: len(call(b"", timeout=T))

    def stream(**kw):
        return lambda: len(list(stub.StreamOrders(v2.StreamOrdersRequest(**kw), timeout=T)))

    return {
        "bad_user_id": attempt(list_orders(user_id="nope")),
        "page_size_too_large": attempt(list_orders(user_id=user(10), page_size=10001)),
        "negative_page_size": attempt(list_orders(user_id=user(10), page_size=-1)),
        "bad_page_token": attempt(list_orders(user_id=user(10), page_token="not a token")),
        "bad_mask": attempt(
            lambda: len(
                stub.ListOrders(
                    v2.ListOrdersRequest(user_id=user(10), read_mask=field_mask_pb2.FieldMask(paths=["nope"])),
                    timeout=T,
                ).orders
            )
        ),
        "unknown_order": attempt(get_order("00000000-0000-4000-8000-000000000000")),
        "bad_order_id": attempt(get_order("x")),
        "unknown_method": attempt(raw("/order.v2.OrderService/NoSuchMethod")),
        "unknown_service": attempt(raw("/no.such.Service/Method")),
        # 2 MiB of page token: over the 1 MiB request cap.
        "over_request_cap": attempt(list_orders(user_id=user(10), page_token="x" * (2 << 20))),
        "stream_bad_user_id": attempt(stream(user_id="nope")),
        "bad_create": attempt(
            lambda: stub.CreateOrder(v2.CreateOrderRequest(idempotency_key="k", user_id="nope"), timeout=T).order.id
        ),
        # After all that, the same channel still answers.
        "after": attempt(list_orders(user_id=user(10), page_size=10)),
    }


def deadlines(stub):
    big = v2.ListOrdersRequest(user_id=user(10000), page_size=10000)

    def stream(timeout):
        request = v2.StreamOrdersRequest(user_id=user(10000), page_size=10000)
        return lambda: len(list(stub.StreamOrders(request, timeout=timeout)))

    return {
        "generous": attempt(lambda: len(stub.ListOrders(big, timeout=T).orders)),
        "unary_1ms": attempt(lambda: len(stub.ListOrders(big, timeout=0.001).orders)),
        "stream_1ms": attempt(stream(0.001)),
        "after": attempt(lambda: len(stub.ListOrders(v2.ListOrdersRequest(user_id=user(10)), timeout=T).orders)),
    }


def gzip(stub):
    """The channel compresses every request with gzip; one call asks for
    none. The answers' encoding is what the server chose."""
    out = {}
    call = stub.ListOrders.with_call(v2.ListOrdersRequest(user_id=user(1000), page_size=1000), timeout=T)
    page, rendezvous = call
    out["unary"] = orders_of(page)
    out["unary_initial_metadata"] = {k: v for k, v in (rendezvous.initial_metadata() or ()) if not k.endswith("-bin")}
    stream = stub.StreamOrders(v2.StreamOrdersRequest(user_id=user(100), page_size=100), timeout=T)
    out["stream"] = [order_json(m.order) for m in stream]
    plain = stub.ListOrders(
        v2.ListOrdersRequest(user_id=user(10), page_size=10), timeout=T, compression=grpc.Compression.NoCompression
    )
    out["uncompressed_call"] = orders_of(plain)
    return out


def main():
    scenario, addr = sys.argv[1], sys.argv[2]
    compression = grpc.Compression.Gzip if scenario == "gzip" else None
    with grpc.insecure_channel(addr, options=OPTIONS, compression=compression) as ch:
        stub = v2_grpc.OrderServiceStub(ch)
        if scenario == "data":
            out = data(stub, v1_grpc.OrderServiceStub(ch))
        elif scenario == "errors":
            out = errors(ch, stub)
        elif scenario == "deadlines":
            out = deadlines(stub)
        elif scenario == "gzip":
            out = gzip(stub)
        else:
            sys.exit(f"unknown scenario {scenario}")
    emit(out)


if __name__ == "__main__":
    main()
