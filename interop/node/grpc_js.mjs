// @grpc/grpc-js, with proto/ loaded at run time by @grpc/proto-loader: a
// gRPC client this project did not write, calling either service.
//
// Usage: node grpc_js.mjs SCENARIO HOST:PORT [USER_ID]
//   orders           order-service: unary, server stream, bidi stream, errors,
//                    1 ms on 10,000 orders, and the channel after them
//   users            user-service (USER_ID's orders over gRPC): unary, errors,
//                    1 ms on 10,000 orders, and the channel after them
//   server-deadline  10,000 orders with `grpc-timeout: 1m` sent as metadata
//                    and no deadline of the client's own: whatever status
//                    comes back is the server's
//
// Prints one JSON object; the Rust test (tests/api/interop) checks it.

import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";

import { PROTO_DIR, emit, orderJson, user } from "./common.mjs";

const definition = protoLoader.loadSync(["order/v2/order.proto", "user/v1/user.proto"], {
  includeDirs: [PROTO_DIR],
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});
const pkg = grpc.loadPackageDefinition(definition);
const OPTIONS = { "grpc.max_receive_message_length": 64 << 20 };
const T = 30_000; // ms: generous, so that only the 1 ms calls ever see a deadline

const order = (o) => orderJson(o, String);
const deadline = (ms) => ({ deadline: Date.now() + ms });

function errorJson(e) {
  return {
    code: grpc.status[e.code],
    message: e.details,
    // grpc-js hands google.rpc.Status details over as this trailer's bytes.
    has_status_details: e.metadata?.get("grpc-status-details-bin").length > 0,
  };
}

/** A unary call as a promise: {ok: what(answer)} or {error: ...}. */
function unary(client, method, request, options, what) {
  return new Promise((resolve) => {
    const args = options.metadata ? [request, options.metadata, options.call] : [request, options.call];
    client[method](...args, (err, answer) => resolve(err ? { error: errorJson(err) } : { ok: what(answer) }));
  });
}

/** A server stream read to its end: {ok: [what(message)...]} or {error: ...}. */
function serverStream(client, method, request, callOptions, what) {
  return new Promise((resolve) => {
    const seen = [];
    const call = client[method](request, callOptions);
    call.on("data", (m) => seen.push(what(m)));
    call.on("error", (e) => resolve({ error: errorJson(e), after: seen.length }));
    call.on("end", () => resolve({ ok: seen }));
  });
}

function lookups(client, requests) {
  return new Promise((resolve) => {
    const seen = [];
    const call = client.LookupOrders(deadline(T));
    call.on("data", (a) =>
      seen.push({
        request_id: Number(a.request_id),
        orders: a.orders.map(order),
        error: a.error ? { code: a.error.code, message: a.error.message } : null,
      }),
    );
    call.on("error", (e) => resolve({ error: errorJson(e) }));
    call.on("end", () => resolve({ ok: seen.sort((x, y) => x.request_id - y.request_id) }));
    for (const r of requests) call.write(r);
    call.end();
  });
}

async function orders(addr) {
  const c = new pkg.order.v2.OrderService(addr, grpc.credentials.createInsecure(), OPTIONS);
  const big = { user_id: user(10000), page_size: 10000 };
  const count = (page) => page.orders.length;
  return {
    unary: await unary(c, "ListOrders", { user_id: user(100), page_size: 100 }, { call: deadline(T) }, (p) =>
      p.orders.map(order),
    ),
    stream: await serverStream(c, "StreamOrders", { user_id: user(1000), page_size: 1000 }, deadline(T), (m) =>
      order(m.order),
    ),
    bidi: await lookups(c, [
      { request_id: 7, user_id: user(10), page_size: 10 },
      { request_id: 8, user_id: "nope", page_size: 10 },
    ]),
    bad_user_id: await unary(c, "ListOrders", { user_id: "nope" }, { call: deadline(T) }, count),
    unknown_order: await unary(c, "GetOrder", { id: "00000000-0000-4000-8000-000000000000" }, { call: deadline(T) }, (r) =>
      r.order.id,
    ),
    unary_1ms: await unary(c, "ListOrders", big, { call: deadline(1) }, count),
    stream_1ms: await serverStream(c, "StreamOrders", big, deadline(1), () => 1),
    after: await unary(c, "ListOrders", { user_id: user(10), page_size: 10 }, { call: deadline(T) }, count),
  };
}

async function users(addr, id) {
  const c = new pkg.user.v1.UserService(addr, grpc.credentials.createInsecure(), OPTIONS);
  const big = { id: user(10000), via: "grpc", limit: 10000 };
  return {
    unary: await unary(c, "GetUserWithOrders", { id, via: "grpc", limit: 100 }, { call: deadline(T) }, (r) => ({
      user_id: r.user.id,
      username: r.user.username,
      via: r.via,
      orders: r.orders.map(order),
    })),
    unknown_via: await unary(c, "GetUserWithOrders", { id, via: "carrier-pigeon" }, { call: deadline(T) }, (r) => r.via),
    unknown_user: await unary(c, "GetUser", { id: "00000000-0000-4000-8000-000000000000" }, { call: deadline(T) }, (r) =>
      r.user.id,
    ),
    unary_1ms: await unary(c, "GetUserWithOrders", big, { call: deadline(1) }, (r) => r.orders.length),
    after: await unary(c, "GetUser", { id }, { call: deadline(T) }, (r) => r.user.id),
  };
}

async function serverDeadline(addr) {
  const metadata = new grpc.Metadata();
  metadata.set("grpc-timeout", "1m");
  const o = new pkg.order.v2.OrderService(addr, grpc.credentials.createInsecure(), OPTIONS);
  const started = Date.now();
  const answer = await unary(o, "ListOrders", { user_id: user(10000), page_size: 10000 }, { metadata, call: {} }, (p) =>
    p.orders.length,
  );
  return { ...answer, took_ms: Date.now() - started };
}

async function serverDeadlineUsers(addr) {
  const metadata = new grpc.Metadata();
  metadata.set("grpc-timeout", "1m");
  const u = new pkg.user.v1.UserService(addr, grpc.credentials.createInsecure(), OPTIONS);
  const started = Date.now();
  const big = { id: user(10000), via: "grpc", limit: 10000 };
  const answer = await unary(u, "GetUserWithOrders", big, { metadata, call: {} }, (r) => r.orders.length);
  return { ...answer, took_ms: Date.now() - started };
}

const [scenario, addr, id] = process.argv.slice(2);
const scenarios = {
  orders: () => orders(addr),
  users: () => users(addr, id),
  "server-deadline": () => serverDeadline(addr),
  "server-deadline-users": () => serverDeadlineUsers(addr),
};
if (!scenarios[scenario]) {
  console.error(`unknown scenario ${scenario}`);
  process.exit(2);
}
emit(await scenarios[scenario]());
