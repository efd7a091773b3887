// Load order-service's gRPC ListOrders directly with k6's own gRPC client:
// the Spring Boot post's load-tool pitfall, made reproducible (the README's
// "Sources" names the posts).
//
// k6 has no generated stubs: it parses the .proto at start and converts every
// message to and from a JavaScript object through protobuf reflection, on the
// load generator's CPU. With large answers that conversion, not gRPC, is what
// this script measures: the Spring Boot post first read "gRPC is 3.3x slower than REST"
// out of exactly this. Compare its numbers with the same query made through
// user-service (k6/closed-loop.js with VIA=grpc: the `upstream_micros` Trend
// is the round trip measured by a compiled client), and look at k6's own CPU.
//
//   k6 run k6/grpc-direct.js                                   # 100 orders, 10 VUs, 30 s
//   k6 run -e ORDERS=1000 -e VUS=8 -e DURATION=10s k6/grpc-direct.js
//
// Parameters: GRPC_ADDR (order-service's gRPC host:port, default
// localhost:50052; docker compose: order-service:50052), ORDERS (default
// 100), USER_ID, FIELDS (comma-separated, empty = all), VUS, DURATION,
// GRACEFUL_STOP, SUMMARY_JSON (default summary-grpc-direct.json).
import grpc from 'k6/net/grpc';
import { check } from 'k6';
import { Counter } from 'k6/metrics';
import { userFor, TREND_STATS, COUNTING } from './lib/user-orders.js';

function env(name, fallback) {
  const v = __ENV[name];
  return v === undefined || v === '' ? fallback : v;
}

const orders = parseInt(env('ORDERS', '100'), 10);
const addr = env('GRPC_ADDR', 'localhost:50052');
const userId = env('USER_ID', userFor(orders));
const fields = env('FIELDS', '');
const summaryJson = env('SUMMARY_JSON', 'summary-grpc-direct.json');

// The contract itself, not a copy: paths are resolved from this script's folder.
const client = new grpc.Client();
client.load(['../proto'], 'order/v2/order.proto');

// Only good answers count: status OK and the orders asked for. k6 gives no
// per-call timing for gRPC, so the latency is grpc_req_duration over every
// call (a round with more than 1% bad calls is left out by the lab).
const goodAnswers = new Counter('good_answers');
const badAnswers = new Counter('bad_answers');
// Answers order-service sent compressed (the grpc-encoding it chose): the
// lab's cells run without compression unless an experiment is about it.
const compressedAnswers = new Counter('compressed_answers');

export const options = {
  summaryTrendStats: TREND_STATS,
  scenarios: {
    grpc_direct: {
      executor: 'constant-vus',
      vus: parseInt(env('VUS', '10'), 10),
      duration: env('DURATION', '30s'),
      gracefulStop: env('GRACEFUL_STOP', '5s'),
    },
  },
};

const request = { user_id: userId, page_size: Math.max(orders, 1) };
if (fields !== '') {
  request.read_mask = { paths: fields.split(',') };
}

export default function () {
  // One connection per VU, opened on its first iteration and reused: the
  // same connection use as user-service's gRPC channels.
  if (__ITER === 0) {
    client.connect(addr, { plaintext: true, maxReceiveSize: 64 * 1024 * 1024 });
  }
  const res = client.invoke('order.v2.OrderService/ListOrders', request);
  const ok = check(res, {
    'status is OK': (r) => r && r.status === grpc.StatusOK,
    // The fixed users own exactly ORDERS orders; the others are asked for ORDERS.
    'got the orders asked for': (r) => r && r.message && (r.message.orders || []).length === orders,
  });
  if (!ok) {
    badAnswers.add(1);
    return;
  }
  goodAnswers.add(1);
  const enc = res.headers ? res.headers['grpc-encoding'] : undefined;
  if (enc !== undefined && String(enc) !== '' && String(enc) !== 'identity') {
    compressedAnswers.add(1);
  }
}

export function handleSummary(data) {
  const m = data.metrics;
  const d = m.grpc_req_duration ? m.grpc_req_duration.values : {};
  const n = m.iterations ? m.iterations.values : {};
  const f = (v) => (v === undefined ? '-' : Number(v).toFixed(2));
  const text = [
    `grpc direct (k6's own client): ${addr} orders=${orders}`,
    `  calls           ${n.count || 0} (${f(n.rate)}/s)`,
    `  grpc_req_duration ms  p50 ${f(d.med)}  p90 ${f(d['p(90)'])}  p95 ${f(d['p(95)'])}  p99 ${f(d['p(99)'])}  max ${f(d.max)}`,
    `  bad answers     ${m.bad_answers ? m.bad_answers.values.count : 0}`,
    `  summary JSON    ${summaryJson}`,
  ].join('\n');
  return {
    stdout: text + '\n',
    [summaryJson]: JSON.stringify(Object.assign({ lab_counting: COUNTING }, data), null, 1),
  };
}
