// Connect calls made by hand with Node's own HTTP clients, for what
// connect-node does only by chance: whether a request's body is still
// arriving when a short deadline passes depends on how its writes are
// timed. Here the body follows the head 50 ms later, every time.
//
// Usage: node connect_by_hand.mjs SCENARIO BASE_URL
//   deadline-while-body-arrives  ListOrders of 10,000 orders (proto3 JSON),
//                                `Connect-Timeout-Ms: 1`, the body 50 ms
//                                after the head, over HTTP/1.1 (node:http)
//                                and h2c (node:http2): the server's answers
//
// Prints {"h1": answer, "h2c": answer}, each {"status", "code" (the Connect
// error's), "message", "orders"} or {"error": what the socket said}; the
// Rust test checks it.

import http from "node:http";
import http2 from "node:http2";

import { emit, user } from "./common.mjs";

const BODY_AFTER_MS = 50;
const PATH = "/order.v2.OrderService/ListOrders";
const HEADERS = {
  "content-type": "application/json",
  "connect-protocol-version": "1",
  "connect-timeout-ms": "1",
};
const body = JSON.stringify({ userId: user(10000), pageSize: 10000 });

function answer(status, text) {
  let parsed = {};
  try {
    parsed = JSON.parse(text);
  } catch {
    // Not JSON: status alone.
  }
  const orders = Array.isArray(parsed.orders) ? parsed.orders.length : null;
  return { status, code: parsed.code ?? null, message: parsed.message ?? null, orders };
}

function overHttp1(baseUrl) {
  return new Promise((resolve) => {
    const headers = { ...HEADERS, "content-length": Buffer.byteLength(body) };
    const req = http.request(`${baseUrl}${PATH}`, { agent: false, method: "POST", headers });
    req.on("response", (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (text += c));
      res.on("end", () => resolve(answer(res.statusCode, text)));
    });
    req.on("error", (e) => resolve({ error: e.message }));
    req.flushHeaders();
    setTimeout(() => req.end(body), BODY_AFTER_MS);
  });
}

function overH2c(baseUrl) {
  return new Promise((resolve) => {
    const session = http2.connect(baseUrl);
    session.on("error", (e) => resolve({ error: e.message }));
    const req = session.request({ ":method": "POST", ":path": PATH, ...HEADERS });
    let status = null;
    let text = "";
    req.setEncoding("utf8");
    req.on("response", (h) => (status = h[":status"]));
    req.on("data", (c) => (text += c));
    req.on("error", (e) => resolve({ error: e.message }));
    req.on("close", () => {
      session.close();
      resolve(status === null ? { error: `stream closed, RST_STREAM code ${req.rstCode}` } : answer(status, text));
    });
    setTimeout(() => req.end(body), BODY_AFTER_MS);
  });
}

const [scenario, baseUrl] = process.argv.slice(2);
if (scenario !== "deadline-while-body-arrives") {
  console.error(`unknown scenario ${scenario}`);
  process.exit(2);
}
emit({ h1: await overHttp1(baseUrl), h2c: await overH2c(baseUrl) });
