// What every user-service script shares: parameters from the environment,
// one iteration (one request to user-service's fan-out endpoint: one user's
// orders, or the first orders of USERS users), the counting rules (only good answers count: see `judge`), the
// upstream Trend and a JSON summary.
//
// Parameters (environment variables, `k6 run -e NAME=value` or the shell):
//   BASE_URL      user-service's REST base URL   default http://localhost:8081
//                 (docker compose: http://user-service:8081)
//   VIA           transport user-service uses to reach order-service   default grpc
//                 h1-json h1-json-close h2c-json h1-proto h2c-proto
//                 h2c-proto-tuned connect-h1-proto connect-h2c-proto grpc
//                 grpc-tuned grpc-stream grpc-stream-tuned grpc-bidi
//                 grpc-bidi-tuned tcp-proto grpc-v1
//   ORDERS        orders per user (the limit)            default 100; 1 with USERS
//   USER_ID       whose orders; default: the fixed user owning exactly ORDERS
//                 orders when ORDERS is 0/1/10/100/1000/10000, else the
//                 10,000-order user (then ORDERS is only the limit)
//   FIELDS        comma-separated order fields, empty = all                default ""
//   USERS         0: one user's orders (GET /v1/users/{id}/orders); N > 0: the
//                 first ORDERS orders of the data set's other users 1..N in one
//                 request (GET /v1/orders?users=…)                          default 0
//   BATCH         with USERS: true asks user-service for one call answering
//                 every user (grpc, grpc-stream); false, one call per user  default false
//   VUS           closed loop: virtual users                               default 10
//   RATE          open loop: iterations started per second                 default 500
//   PRE_VUS       open loop: VUs allocated before the start                default 50
//   MAX_VUS       open loop: most VUs k6 may use                           default 500
//   DURATION      how long the scenario runs                               default 30s
//   GRACEFUL_STOP how long iterations in flight may finish                 default 5s
//   SUMMARY_JSON  where handleSummary writes k6's summary data             default summary.json
//   THRESHOLDS    on: a run past MAX_ERROR_RATE or P95_MS exits non-zero   default on
//                 (the lab turns them off: its pool ladder overloads on purpose)
//   MAX_ERROR_RATE  the share of failed requests (not 2xx/3xx) allowed     default 0.01
//   P95_MS        the p95 of good answers allowed, ms                      default 2000
import http from 'k6/http';
import { Trend, Counter } from 'k6/metrics';

function env(name, fallback) {
  const v = __ENV[name];
  return v === undefined || v === '' ? fallback : v;
}

function int(name, fallback) {
  const raw = env(name, String(fallback));
  const n = parseInt(raw, 10);
  if (Number.isNaN(n) || n < 0) {
    throw new Error(`${name} must be a non-negative integer, got ${JSON.stringify(raw)}`);
  }
  return n;
}

// The data set's fixed users spell their order counts in their ids.
const FIXED = [0, 1, 10, 100, 1000, 10000];

/** The fixed user whose id spells `orders`, or the 10,000-order user. */
export function userFor(orders) {
  const n = FIXED.includes(orders) ? orders : 10000;
  return `00000000-0000-0000-0000-${String(n).padStart(12, '0')}`;
}

function share(name, fallback) {
  const raw = env(name, String(fallback));
  const x = Number(raw);
  if (raw.trim() === '' || Number.isNaN(x) || x < 0 || x > 1) {
    throw new Error(`${name} must be a number from 0 to 1, got ${JSON.stringify(raw)}`);
  }
  return x;
}

const thresholds = env('THRESHOLDS', 'on');
if (thresholds !== 'on' && thresholds !== 'off') {
  throw new Error(`THRESHOLDS must be on or off, got ${JSON.stringify(thresholds)}`);
}

const users = int('USERS', 0);
const orders = int('ORDERS', users > 0 ? 1 : 100);
const batch = env('BATCH', 'false');
if (batch !== 'true' && batch !== 'false') {
  throw new Error(`BATCH must be true or false, got ${JSON.stringify(batch)}`);
}

/** The id of the data set's `i`-th other user (1-based): its digits spell `i`. */
export function otherUser(i) {
  return `00000000-0000-0001-0000-${String(i).padStart(12, '0')}`;
}

export const params = {
  baseUrl: env('BASE_URL', 'http://localhost:8081').replace(/\/+$/, ''),
  via: env('VIA', 'grpc'),
  orders,
  // user-service refuses limit=0; a user with no orders is asked for 1.
  limit: Math.max(orders, 1),
  userId: env('USER_ID', userFor(orders)),
  fields: env('FIELDS', ''),
  users,
  batch: batch === 'true',
  vus: Math.max(int('VUS', 10), 1),
  rate: Math.max(int('RATE', 500), 1),
  preVus: Math.max(int('PRE_VUS', 50), 1),
  maxVus: Math.max(int('MAX_VUS', 500), 1),
  duration: env('DURATION', '30s'),
  // Closed loop only: each VU waits this long after an answer before its
  // next request (0: at once), so that pooled connections sit idle.
  thinkMs: Math.max(int('THINK_MS', 0), 0),
  gracefulStop: env('GRACEFUL_STOP', '5s'),
  summaryJson: env('SUMMARY_JSON', 'summary.json'),
  // The Content-Length every good answer has, when the caller knows it (the
  // lab asks once and counts the orders itself); unset, each VU parses its
  // first good answer instead.
  expectedLength: env('EXPECTED_LENGTH', null),
  thresholds: thresholds === 'on',
  maxErrorRate: share('MAX_ERROR_RATE', 0.01),
  p95Ms: Math.max(int('P95_MS', 2000), 1),
};

// Percentiles every script reports; the lab reads exactly these names.
export const TREND_STATS = ['avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'p(99.9)', 'max', 'count'];

/** Options shared by every scenario. */
export function commonOptions() {
  return {
    summaryTrendStats: TREND_STATS,
    // k6 does not keep the bodies (it still reads them off the socket): less
    // of the load generator's CPU goes into strings nobody looks at.
    discardResponseBodies: true,
    // One summary row for all URLs rather than one per user id.
    tags: { via: params.via },
    // A bad run exits non-zero (k6's exit code 99): too many failed
    // requests, or good answers too slow.
    thresholds: params.thresholds
      ? {
          http_req_failed: [`rate<=${params.maxErrorRate}`],
          good_duration: [`p(95)<${params.p95Ms}`],
        }
      : {},
  };
}

// The counting rules, named in the summary (`lab_counting`) so that the lab
// knows which figures it reads. Only good answers count: a 200, over the
// transport asked for, with a body of the right length (below). Their
// number, latency and upstream time are kept apart from everything else.
export const COUNTING = 'good-answers-1';
export const goodAnswers = new Counter('good_answers');
export const goodDuration = new Trend('good_duration', true);
// Every good answer's time as a histogram the lab reads whole (k6's summary
// keeps percentiles only): counter `good_hdr_bN` counts the answers from
// 10^(N/50) to 10^((N+1)/50) µs, 50 buckets a decade (each 4.7% wide),
// 1 µs to 100 s. Only counters that got a sample reach the summary.
export const HDR_PER_DECADE = 50;
const HDR_BUCKETS = HDR_PER_DECADE * 8;
const goodHdr = Array.from({ length: HDR_BUCKETS }, (_, i) => new Counter(`good_hdr_b${i}`));
export function recordGoodTime(ms) {
  const us = Math.max(ms * 1000, 1);
  const b = Math.min(Math.floor(Math.log10(us) * HDR_PER_DECADE), HDR_BUCKETS - 1);
  goodHdr[b].add(1);
}
// The round trip user-service measured around its call to order-service
// (the `x-upstream-micros` header) on good answers: the number the Spring
// Boot post trusted, because it does not include the load tool's own client.
export const upstreamMicros = new Trend('upstream_micros');
// Where each good answer's round trip went (the `x-upstream-parts` header,
// given when user-service records it: USER_UPSTREAM_BREAKDOWN, with
// order-service's ORDER_SERVER_TIMING), in µs. `wire` is what the other
// parts leave of the round trip. The two checks count the answers whose
// parts fit: store + encode <= total, and total + decode <= upstream.
export const PARTS = ['store', 'encode', 'total', 'decode', 'wire'];
const partTrends = Object.fromEntries(PARTS.map((p) => [p, new Trend(`part_${p}_micros`)]));
export const partsReported = new Counter('parts_reported');
export const partsServerOk = new Counter('parts_server_ok');
export const partsClientOk = new Counter('parts_client_ok');

/** Records one answer's `x-upstream-parts`; a malformed value counts as reported, failing both checks. */
export function recordParts(value) {
  const got = {};
  for (const kv of value.split(',')) {
    const [k, v] = kv.split('=');
    got[k] = Number(v);
  }
  partsReported.add(1);
  const { store, encode, total, decode, upstream } = got;
  if (![store, encode, total, decode, upstream].every((x) => Number.isFinite(x) && x >= 0)) {
    return;
  }
  // Each part is rounded to the nanosecond on its own: a nanosecond each.
  partsServerOk.add(store + encode <= total + 0.002 ? 1 : 0);
  partsClientOk.add(total + decode <= upstream + 0.001 ? 1 : 0);
  partTrends.store.add(store);
  partTrends.encode.add(encode);
  partTrends.total.add(total);
  partTrends.decode.add(decode);
  partTrends.wire.add(Math.max(upstream - total - decode, 0));
}

// Answers that were not good and not shed.
export const badAnswers = new Counter('bad_answers');
// 503 with Retry-After: user-service shedding load at its limit of
// concurrent requests. An outcome of its own: neither good nor bad.
export const shedAnswers = new Counter('shed_answers');
// Bodies parsed and their orders counted (each VU's first good answer).
export const parsedBodies = new Counter('parsed_bodies');
// How calls ended when something broke (the lab's faults): every answer
// that was not good, by the status user-service gave (0: none at all, the
// connection failed or k6 gave up), and every answer slower than SLOW_MS,
// good or not.
export const SLOW_MS = 1000;
export const slowAnswers = new Counter('slow_answers');
export const NOT_GOOD_STATUSES = [0, 500, 502, 503, 504];
const notGood = Object.fromEntries(NOT_GOOD_STATUSES.map((s) => [s, new Counter(`not_good_${s}`)]));
const notGoodOther = new Counter('not_good_other');

function url() {
  let u;
  if (params.users > 0) {
    const ids = [];
    for (let i = 1; i <= params.users; i++) {
      ids.push(otherUser(i));
    }
    u = `${params.baseUrl}/v1/orders?users=${ids.join(',')}&limit=${params.limit}&via=${encodeURIComponent(params.via)}&batch=${params.batch}`;
  } else {
    u = `${params.baseUrl}/v1/users/${params.userId}/orders?limit=${params.limit}&via=${encodeURIComponent(params.via)}`;
  }
  if (params.fields !== '') {
    u += `&fields=${encodeURIComponent(params.fields)}`;
  }
  return u;
}

const URL = url();
const REQUEST_PARAMS = { tags: { name: 'user-orders' } };
// The same request with its body kept, to parse it.
const PARSE_PARAMS = { tags: { name: 'user-orders' }, responseType: 'text' };

/** How many orders the answer must hold, when the user is a fixed one. */
export function expectedOrders() {
  return params.userId === userFor(params.orders) ? params.orders : null;
}

/** The calls to order-service a many-users answer must have taken. */
const EXPECTED_CALLS = params.users > 0 ? String(params.batch ? 1 : params.users) : null;

/**
 * Whether a parsed body holds what was asked: one user's orders (as many as
 * the fixed user has), or one entry per user asked, in order, each with 1 to
 * `limit` orders (every one of the data set's first thousand other users has
 * at least one order).
 */
function bodyHolds(body) {
  if (params.users === 0) {
    const want = expectedOrders();
    return Array.isArray(body.orders) && (want === null || body.orders.length === want);
  }
  if (!Array.isArray(body.lookups) || body.lookups.length !== params.users) {
    return false;
  }
  return body.lookups.every(
    (l, i) =>
      l.user_id === otherUser(i + 1) &&
      Array.isArray(l.orders) &&
      l.orders.length >= 1 &&
      l.orders.length <= params.limit,
  );
}

// How an answer's body is checked without keeping every body (the scripts
// discard them: reading them into strings would be measured as the load
// generator's cost). The same user, limit and fields always give the same
// bytes, so an answer cut short, padded or holding other orders has another
// length: every answer must carry the expected Content-Length. The lab
// passes it (EXPECTED_LENGTH, from one answer it parsed and counted itself
// before the round); without it, each VU keeps its first good answer's body,
// parses it, counts its orders, and takes its length.
let expectedLength = params.expectedLength;

/** `good`, `bad` or `shed`. */
export function judge(res) {
  if (res.status === 503 && res.headers['Retry-After'] !== undefined) {
    return 'shed';
  }
  if (res.status !== 200 || res.headers['X-Via'] !== params.via) {
    return 'bad';
  }
  if (EXPECTED_CALLS !== null && res.headers['X-Upstream-Calls'] !== EXPECTED_CALLS) {
    return 'bad';
  }
  const length = res.headers['Content-Length'];
  if (length === undefined) {
    return 'bad';
  }
  if (expectedLength === null) {
    if (typeof res.body !== 'string') {
      return 'bad';
    }
    let body;
    try {
      body = JSON.parse(res.body);
    } catch (e) {
      return 'bad';
    }
    parsedBodies.add(1);
    if (!bodyHolds(body)) {
      return 'bad';
    }
    expectedLength = length;
    return 'good';
  }
  return length === expectedLength ? 'good' : 'bad';
}

// No k6 `check` here: the counters below say the same, and a check is one
// more metric sample per answer on the load generator's CPU.
function record(res) {
  const verdict = judge(res);
  if (res.timings.duration > SLOW_MS) {
    slowAnswers.add(1);
  }
  if (verdict !== 'good') {
    (notGood[res.status] || notGoodOther).add(1);
  }
  if (verdict === 'shed') {
    shedAnswers.add(1);
    return false;
  }
  if (verdict === 'bad') {
    badAnswers.add(1);
    return false;
  }
  goodAnswers.add(1);
  goodDuration.add(res.timings.duration);
  recordGoodTime(res.timings.duration);
  const up = res.headers['X-Upstream-Micros'];
  if (up !== undefined) {
    upstreamMicros.add(parseInt(up, 10));
  }
  const parts = res.headers['X-Upstream-Parts'];
  if (parts !== undefined) {
    recordParts(parts);
  }
  return true;
}

/** One iteration: one request, one answer. */
export function iteration() {
  record(http.get(URL, expectedLength === null ? PARSE_PARAMS : REQUEST_PARAMS));
}

function fmt(v, unit) {
  if (v === undefined || v === null) {
    return '-';
  }
  return `${Number(v).toFixed(2)}${unit}`;
}

/**
 * A short text summary for the terminal (jslib's textSummary is a remote
 * import, which a machine without internet access cannot load) and the whole
 * summary data as JSON for the lab and for anyone else.
 */
export function summarize(data, title) {
  const m = data.metrics;
  const who = params.users > 0 ? `users=${params.users} batch=${params.batch}` : `user=${params.userId}`;
  const lines = [`${title}: via=${params.via} orders=${params.orders} ${who}`];
  if (m.http_reqs) {
    lines.push(`  requests        ${m.http_reqs.values.count} (${fmt(m.http_reqs.values.rate, '/s')})`);
  }
  if (m.dropped_iterations) {
    lines.push(`  dropped         ${m.dropped_iterations.values.count}`);
  }
  if (m.http_req_duration) {
    const d = m.http_req_duration.values;
    lines.push(`  end-to-end ms   p50 ${fmt(d.med, '')}  p90 ${fmt(d['p(90)'], '')}  p95 ${fmt(d['p(95)'], '')}  p99 ${fmt(d['p(99)'], '')}  max ${fmt(d.max, '')}`);
  }
  if (m.upstream_micros) {
    const u = m.upstream_micros.values;
    lines.push(`  upstream us     p50 ${fmt(u.med, '')}  p95 ${fmt(u['p(95)'], '')}  p99 ${fmt(u['p(99)'], '')}  max ${fmt(u.max, '')}`);
  }
  const count = (name) => (m[name] ? m[name].values.count : 0);
  lines.push(`  good answers    ${count('good_answers')} (bad ${count('bad_answers')}, shed ${count('shed_answers')}; ${count('parsed_bodies')} bodies parsed)`);
  lines.push(`  summary JSON    ${params.summaryJson}`);
  return {
    stdout: lines.join('\n') + '\n',
    [params.summaryJson]: JSON.stringify(
      Object.assign({ lab_counting: COUNTING, lab_users: params.users, lab_batch: params.batch }, data),
      null,
      1,
    ),
  };
}
