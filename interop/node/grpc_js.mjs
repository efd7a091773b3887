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
//   gzip             order-service with every request gzip-compressed (and
//                    one call on a channel without): ListOrders, StreamOrders
//   health check HOST:PORT SERVICE...
//                    Check for each SERVICE ("" is the whole server) and a
//                    name no service has; Watch on the first for 0.5 s
//   health unknown HOST:PORT
//                    Watch on a name no service has for 0.5 s
//   reflection v1|v1alpha HOST:PORT
//                    list the port's services through server reflection,
//                    then fetch each one's descriptors and read its methods
//
// Health and reflection go through grpc-js's generic client with their
// messages declared below (the standard services' own, field for field)
// and the descriptors decoded by protobufjs, as grpcurl-like Node tools do.
//
// Prints one JSON object; the Rust test (tests/api/interop) checks it.

import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";
import protobuf from "protobufjs";
import descriptor from "protobufjs/ext/descriptor/index.js";

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

/** gRPC's standard services' messages, as health.proto and reflection.proto declare them. */
const STANDARD = protobuf.parse(
  `syntax = "proto3";
  package standard;
  message HealthCheckRequest { string service = 1; }
  message HealthCheckResponse {
    enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
    ServingStatus status = 1;
  }
  message ServerReflectionRequest {
    string host = 1;
    oneof message_request {
      string file_by_filename = 3;
      string file_containing_symbol = 4;
      string list_services = 7;
    }
  }
  message FileDescriptorResponse { repeated bytes file_descriptor_proto = 1; }
  message ServiceResponse { string name = 1; }
  message ListServiceResponse { repeated ServiceResponse service = 1; }
  message ErrorResponse { int32 error_code = 1; string error_message = 2; }
  message ServerReflectionResponse {
    string valid_host = 1;
    ServerReflectionRequest original_request = 2;
    oneof message_response {
      FileDescriptorResponse file_descriptor_response = 4;
      ListServiceResponse list_services_response = 6;
      ErrorResponse error_response = 7;
    }
  }`,
  { keepCase: true },
).root;

/** (serialize, deserialize) of a message type of STANDARD, for grpc-js's generic client. */
function codec(name) {
  const t = STANDARD.lookupType(`standard.${name}`);
  return [
    (v) => Buffer.from(t.encode(t.create(v)).finish()),
    (b) => t.toObject(t.decode(b), { enums: String, defaults: true, bytes: Buffer }),
  ];
}

const UNKNOWN_SERVICE = "no.such.Service";
const WATCH_MS = 500;

function healthCheck(client, service) {
  const [ser] = codec("HealthCheckRequest");
  const [, de] = codec("HealthCheckResponse");
  return new Promise((resolve) => {
    client.makeUnaryRequest("/grpc.health.v1.Health/Check", ser, de, { service }, deadline(T), (err, a) =>
      resolve(err ? { error: errorJson(err) } : { status: a.status }),
    );
  });
}

/** The statuses a Watch yields until its deadline, and how the stream ended. */
function healthWatch(client, service) {
  const [ser] = codec("HealthCheckRequest");
  const [, de] = codec("HealthCheckResponse");
  return new Promise((resolve) => {
    const statuses = [];
    const call = client.makeServerStreamRequest("/grpc.health.v1.Health/Watch", ser, de, { service }, deadline(WATCH_MS));
    call.on("data", (a) => statuses.push(a.status));
    call.on("error", (e) => resolve({ statuses, end: errorJson(e) }));
    call.on("end", () => resolve({ statuses, end: { code: "OK" } }));
  });
}

async function health(kind, addr, services) {
  const client = new grpc.Client(addr, grpc.credentials.createInsecure());
  try {
    if (kind === "check") {
      const check = {};
      for (const s of [...services, UNKNOWN_SERVICE]) check[s] = await healthCheck(client, s);
      return { check, watch: await healthWatch(client, services[0]) };
    }
    if (kind === "unknown") return { watch: await healthWatch(client, UNKNOWN_SERVICE) };
    throw new Error(`unknown health scenario ${kind}`);
  } finally {
    client.close();
  }
}

/** One reflection stream: each request written, every answer read to the end. */
function reflectionStream(client, version, requests) {
  const [ser] = codec("ServerReflectionRequest");
  const [, de] = codec("ServerReflectionResponse");
  const path = `/grpc.reflection.${version}.ServerReflection/ServerReflectionInfo`;
  return new Promise((resolve, reject) => {
    const answers = [];
    const call = client.makeBidiStreamRequest(path, ser, de, deadline(T));
    call.on("data", (a) => answers.push(a));
    call.on("error", reject);
    call.on("end", () => resolve(answers));
    for (const r of requests) call.write(r);
    call.end();
  });
}

/** The methods of `service` ([name, client streaming, server streaming]), from the files reflection sent. */
function methodsOf(service, files) {
  for (const bytes of files) {
    const f = descriptor.FileDescriptorProto.decode(bytes);
    for (const s of f.service ?? []) {
      if (`${f.package}.${s.name}` === service) {
        return (s.method ?? []).map((m) => [m.name, Boolean(m.clientStreaming), Boolean(m.serverStreaming)]);
      }
    }
  }
  return null;
}

async function reflection(version, addr) {
  if (version !== "v1" && version !== "v1alpha") throw new Error(`unknown reflection version ${version}`);
  const client = new grpc.Client(addr, grpc.credentials.createInsecure());
  try {
    const [listed] = await reflectionStream(client, version, [{ list_services: "" }]);
    const services = listed.list_services_response.service.map((s) => s.name).sort();
    const answers = await reflectionStream(
      client,
      version,
      services.map((s) => ({ file_containing_symbol: s })),
    );
    const methods = {};
    services.forEach((s, i) => {
      const files = answers[i]?.file_descriptor_response?.file_descriptor_proto ?? [];
      methods[s] = methodsOf(s, files);
    });
    return { services, methods };
  } catch (e) {
    return { error: errorJson(e) };
  } finally {
    client.close();
  }
}

/**
 * order-service with gzip on every request of a channel (grpc-js's
 * `grpc.default_compression_algorithm`), and one call on a channel without:
 * the orders each answer carried. (grpc-js takes `grpc-encoding` out of the
 * headers it hands over, so the answers' own encoding is not seen here.)
 */
async function gzip(addr) {
  const gz = new pkg.order.v2.OrderService(addr, grpc.credentials.createInsecure(), {
    ...OPTIONS,
    "grpc.default_compression_algorithm": 2, // gzip
  });
  const plain = new pkg.order.v2.OrderService(addr, grpc.credentials.createInsecure(), OPTIONS);
  const orders = (p) => p.orders.map(order);
  return {
    unary: await unary(gz, "ListOrders", { user_id: user(1000), page_size: 1000 }, { call: deadline(T) }, orders),
    stream: await serverStream(gz, "StreamOrders", { user_id: user(100), page_size: 100 }, deadline(T), (m) =>
      order(m.order),
    ),
    uncompressed_call: await unary(plain, "ListOrders", { user_id: user(10), page_size: 10 }, { call: deadline(T) }, orders),
  };
}

const [scenario, addr, id, ...rest] = process.argv.slice(2);
const scenarios = {
  orders: () => orders(addr),
  users: () => users(addr, id),
  "server-deadline": () => serverDeadline(addr),
  "server-deadline-users": () => serverDeadlineUsers(addr),
  gzip: () => gzip(addr),
  // health KIND HOST:PORT SERVICE...; reflection VERSION HOST:PORT
  health: () => health(addr, id, rest),
  reflection: () => reflection(addr, id),
};
if (!scenarios[scenario]) {
  console.error(`unknown scenario ${scenario}`);
  process.exit(2);
}
emit(await scenarios[scenario]());
