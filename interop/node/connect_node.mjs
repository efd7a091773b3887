// @connectrpc/connect-node, a Connect client this project did not write,
// calling order.v2.OrderService on order-service's REST port. The service
// descriptors come from `buf build proto -o FILE` (a FileDescriptorSet read
// with @bufbuild/protobuf's createFileRegistry): no generated code.
//
// Usage: node connect_node.mjs SCENARIO BASE_URL DESCRIPTOR_SET
//   data                unary (all fields, a read mask), GetOrder and the server
//                       stream, over HTTP/1.1 and h2c, binary and JSON
//   errors              a bad argument (with its google.rpc.BadRequest), not
//                       found, unimplemented, a failing stream, 1 ms on 10,000
//                       orders (timeoutMs), each over the four; a request over
//                       the request cap, once, on a fresh h2c connection
//   unknown-method-h1   an unknown method over HTTP/1.1, ten times
//   oversized-h1        a 5 MB request over HTTP/1.1, ten times
//   oversized-h2c       a 5 MB request over h2c on one connection, ten times
//   encodings           a request compressed with gzip, and one sent as `br`
//                       (which no server here reads)
//   get                 GET on a unary route that is not marked side-effect free
//   server-deadline     10,000 orders with `Connect-Timeout-Ms: 1` sent as a
//                       header and no timer of the client's own: whatever
//                       comes back is the server's (connect-node writes the
//                       body after the head, so it may arrive after the 1 ms;
//                       connect_by_hand.mjs makes sure it does)
//
// Prints one JSON object; the Rust test (tests/api/interop) checks it.

import { readFileSync } from "node:fs";

import { create, createFileRegistry, fromBinary } from "@bufbuild/protobuf";
import {
  FieldDescriptorProto_Label as Label,
  FieldDescriptorProto_Type as Type,
  FileDescriptorProtoSchema,
  FileDescriptorSetSchema,
  MethodOptions_IdempotencyLevel,
} from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { compressionGzip, createConnectTransport } from "@connectrpc/connect-node";

import { emit, orderJson, user } from "./common.mjs";

const [scenario, baseUrl, descriptorSet] = process.argv.slice(2);
const registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, readFileSync(descriptorSet)));
const OrderService = registry.getService("order.v2.OrderService");
const OrderStatus = registry.getEnum("order.v2.OrderStatus");
const ListOrders = OrderService.methods.find((m) => m.name === "ListOrders");

// google.rpc.BadRequest, described by hand (proto/ does not import it), so
// that connect-node's own findDetails decodes the detail the server sends.
const BadRequest = createFileRegistry(
  create(FileDescriptorProtoSchema, {
    name: "google/rpc/error_details.proto",
    package: "google.rpc",
    syntax: "proto3",
    messageType: [
      {
        name: "BadRequest",
        field: [
          {
            name: "field_violations",
            jsonName: "fieldViolations",
            number: 1,
            label: Label.REPEATED,
            type: Type.MESSAGE,
            typeName: ".google.rpc.BadRequest.FieldViolation",
          },
        ],
        nestedType: [
          {
            name: "FieldViolation",
            field: [
              { name: "field", jsonName: "field", number: 1, label: Label.OPTIONAL, type: Type.STRING },
              { name: "description", jsonName: "description", number: 2, label: Label.OPTIONAL, type: Type.STRING },
            ],
          },
        ],
      },
    ],
  }),
  () => undefined,
).getMessage("google.rpc.BadRequest");

const TRANSPORTS = {
  "h1-binary": { httpVersion: "1.1", useBinaryFormat: true },
  "h1-json": { httpVersion: "1.1", useBinaryFormat: false },
  "h2c-binary": { httpVersion: "2", useBinaryFormat: true },
  "h2c-json": { httpVersion: "2", useBinaryFormat: false },
};
const T = 30_000; // ms: generous, so that only the 1 ms calls ever see a deadline
const FIVE_MB = "x".repeat(5 << 20);

const transport = (name, more = {}) => createConnectTransport({ baseUrl, ...TRANSPORTS[name], ...more });
const client = (name, more) => createClient(OrderService, transport(name, more));
const order = (o) => orderJson(o, (n) => OrderStatus.values.find((v) => v.number === n)?.name ?? String(n));

function errorJson(e) {
  const ce = ConnectError.from(e);
  return {
    code: Code[ce.code],
    message: ce.rawMessage,
    bad_request: ce.details.length
      ? ce.findDetails(BadRequest).flatMap((b) => b.fieldViolations.map((v) => [v.field, v.description]))
      : null,
    accept_encoding: ce.metadata.get("accept-encoding"),
  };
}

async function attempt(call) {
  try {
    return { ok: await call() };
  } catch (e) {
    return { error: errorJson(e) };
  }
}

async function data() {
  const out = {};
  for (const name of Object.keys(TRANSPORTS)) {
    const c = client(name);
    const opts = { timeoutMs: T };
    const ten = await c.listOrders({ userId: user(10), pageSize: 10 }, opts);
    const stream = [];
    for await (const m of c.streamOrders({ userId: user(1000), pageSize: 1000 }, opts)) stream.push(order(m.order));
    out[name] = {
      unary: (await c.listOrders({ userId: user(100), pageSize: 100 }, opts)).orders.map(order),
      masked: (
        await c.listOrders(
          { userId: user(100), pageSize: 20, readMask: { paths: ["status", "total_minor", "note", "shipping_address"] } },
          opts,
        )
      ).orders.map(order),
      get: order((await c.getOrder({ id: ten.orders[3].id }, opts)).order),
      stream,
    };
  }
  return out;
}

async function errors() {
  const out = {};
  for (const name of Object.keys(TRANSPORTS)) {
    const c = client(name);
    const opts = { timeoutMs: T };
    out[name] = {
      bad_user_id: await attempt(async () => (await c.listOrders({ userId: "nope" }, opts)).orders.length),
      unknown_order: await attempt(async () => (await c.getOrder({ id: "00000000-0000-4000-8000-000000000000" }, opts)).order.id),
      elsewhere: await attempt(async () => (await c.createOrder({ idempotencyKey: "k" }, opts)).order.id),
      stream_bad_user_id: await attempt(async () => {
        let n = 0;
        for await (const _ of c.streamOrders({ userId: "nope" }, opts)) n++;
        return n;
      }),
      unary_1ms: await attempt(
        async () => (await c.listOrders({ userId: user(10000), pageSize: 10000 }, { timeoutMs: 1 })).orders.length,
      ),
      after: await attempt(async () => (await c.listOrders({ userId: user(10), pageSize: 10 }, opts)).orders.length),
    };
  }
  const fresh = client("h2c-binary");
  out.over_request_cap_h2c = await attempt(
    async () => (await fresh.listOrders({ userId: user(10), pageToken: FIVE_MB }, { timeoutMs: 10_000 })).orders.length,
  );
  return out;
}

/**
 * `call` up to ten times: the codes seen. A call that hangs ends at its 5 s
 * timeout as DeadlineExceeded, and the rest are not tried (the connection
 * is stuck; waiting out each would only make the run slow).
 */
async function tenTimes(call) {
  const codes = [];
  for (let i = 0; i < 10; i++) {
    const r = await attempt(call);
    codes.push(r.ok !== undefined ? "OK" : r.error.code);
    if (codes.at(-1) === "DeadlineExceeded") break;
  }
  return { codes };
}

const unknownMethod = { ...ListOrders, name: "NoSuchMethod" };

const scenarios = {
  data,
  errors,
  "unknown-method-h1": () => {
    const t = transport("h1-binary");
    const request = { userId: user(10), pageSize: 10 };
    return tenTimes(() => t.unary(unknownMethod, undefined, 5_000, undefined, request));
  },
  "oversized-h1": () => {
    const c = client("h1-binary");
    return tenTimes(() => c.listOrders({ userId: user(10), pageToken: FIVE_MB }, { timeoutMs: 5_000 }));
  },
  "oversized-h2c": () => {
    const c = client("h2c-binary");
    return tenTimes(() => c.listOrders({ userId: user(10), pageToken: FIVE_MB }, { timeoutMs: 5_000 }));
  },
  encodings: async () => {
    const out = {};
    // An encoding no server here reads: its bytes are left as they are,
    // since a server must refuse it on the header alone.
    const brotli = { name: "br", compress: async (b) => b, decompress: async (b) => b };
    for (const name of ["h1-binary", "h2c-binary"]) {
      out[name] = {};
      for (const [encoding, sendCompression] of [["gzip", compressionGzip], ["br", brotli]]) {
        const c = client(name, { sendCompression, compressMinBytes: 0 });
        out[name][encoding] = await attempt(async () =>
          (await c.listOrders({ userId: user(10), pageSize: 10 }, { timeoutMs: T })).orders.map(order),
        );
      }
    }
    return out;
  },
  get: async () => {
    const out = {};
    // connect-node sends GET only for methods marked side-effect free; this
    // copy of ListOrders says it is, and the server's ListOrders says not.
    const asGet = { ...ListOrders, idempotency: MethodOptions_IdempotencyLevel.NO_SIDE_EFFECTS };
    for (const name of ["h1-json", "h2c-binary"]) {
      const t = transport(name, { useHttpGet: true });
      out[name] = await attempt(async () => (await t.unary(asGet, undefined, T, undefined, { userId: user(10) })).message.orders.length);
    }
    return out;
  },
  "server-deadline": async () => {
    const out = {};
    for (const name of ["h1-binary", "h2c-binary"]) {
      const c = client(name);
      const started = Date.now();
      const r = await attempt(
        async () =>
          (await c.listOrders({ userId: user(10000), pageSize: 10000 }, { headers: { "connect-timeout-ms": "1" } })).orders
            .length,
      );
      out[name] = { ...r, took_ms: Date.now() - started };
    }
    return out;
  },
};

if (!scenarios[scenario]) {
  console.error(`unknown scenario ${scenario}`);
  process.exit(2);
}
emit(await scenarios[scenario]());
