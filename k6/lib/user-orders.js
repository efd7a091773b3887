// What every user-service script shares: parameters from the environment,
// one iteration (N lookups of a user's orders through user-service's fan-out
// endpoint), the upstream Trend and a JSON summary.
//
// Parameters (environment variables, `k6 run -e NAME=value` or the shell):
//   BASE_URL      user-service's REST base URL   default http://localhost:8081
//                 (docker compose: http://user-service:8081)
//   VIA           transport user-service uses to reach order-service   default grpc
//                 h1-json h1-json-close h2c-json h1-proto h2c-proto grpc
//                 grpc-stream grpc-bidi tcp-proto grpc-v1
//   ORDERS        orders per lookup (the limit)                          default 100
//   USER_ID       whose orders; default: the fixed user owning exactly ORDERS
//                 orders when ORDERS is 0/1/10/100/1000/10000, else the
//                 10,000-order user (then ORDERS is only the limit)
//   FIELDS        comma-separated order fields, empty = all                default ""
//   LOOKUPS       lookups per iteration, sent at once with http.batch      default 1
//   VUS           closed loop: virtual users                               default 10
//   RATE          open loop: iterations started per second                 default 500
//   PRE_VUS       open loop: VUs allocated before the start                default 50
//   MAX_VUS       open loop: most VUs k6 may use                           default 500
//   DURATION      how long the scenario runs                               default 30s
//   GRACEFUL_STOP how long iterations in flight may finish                 default 5s
//   SUMMARY_JSON  where handleSummary writes k6's summary data             default summary.json
import http from 'k6/http';
import { check } from 'k6';
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

const orders = int('ORDERS', 100);

export const params = {
  baseUrl: env('BASE_URL', 'http://localhost:8081').replace(/\/+$/, ''),
  via: env('VIA', 'grpc'),
  orders,
  // user-service refuses limit=0; a user with no orders is asked for 1.
  limit: Math.max(orders, 1),
  userId: env('USER_ID', userFor(orders)),
  fields: env('FIELDS', ''),
  lookups: Math.max(int('LOOKUPS', 1), 1),
  vus: Math.max(int('VUS', 10), 1),
  rate: Math.max(int('RATE', 500), 1),
  preVus: Math.max(int('PRE_VUS', 50), 1),
  maxVus: Math.max(int('MAX_VUS', 500), 1),
  duration: env('DURATION', '30s'),
  gracefulStop: env('GRACEFUL_STOP', '5s'),
  summaryJson: env('SUMMARY_JSON', 'summary.json'),
};

// Percentiles every script reports; the lab reads exactly these names.
export const TREND_STATS = ['avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max', 'count'];

/** Options shared by every scenario. */
export function commonOptions() {
  return {
    summaryTrendStats: TREND_STATS,
    // k6 does not keep the bodies (it still reads them off the socket): less
    // of the load generator's CPU goes into strings nobody looks at.
    discardResponseBodies: true,
    // All the lookups of one iteration leave at once.
    batchPerHost: params.lookups,
    // One summary row for all URLs rather than one per user id.
    tags: { via: params.via },
  };
}

// The round trip user-service measured around its call to order-service
// (the `x-upstream-micros` header): the number seed 001 trusted, because it
// does not include the load tool's own client.
export const upstreamMicros = new Trend('upstream_micros');
// Answers that were not a 200 over the transport asked for.
export const badAnswers = new Counter('bad_answers');

function url() {
  let u = `${params.baseUrl}/v1/users/${params.userId}/orders?limit=${params.limit}&via=${encodeURIComponent(params.via)}`;
  if (params.fields !== '') {
    u += `&fields=${encodeURIComponent(params.fields)}`;
  }
  return u;
}

const URL = url();
const REQUEST_PARAMS = { tags: { name: 'user-orders' } };

function record(res) {
  const ok = check(res, {
    'status is 200': (r) => r.status === 200,
    'served over the transport asked for': (r) => r.headers['X-Via'] === params.via,
  });
  if (!ok) {
    badAnswers.add(1);
  }
  const up = res.headers['X-Upstream-Micros'];
  if (up !== undefined) {
    upstreamMicros.add(parseInt(up, 10));
  }
}

/** One iteration: LOOKUPS lookups, all in flight at once when more than one. */
export function lookups() {
  if (params.lookups === 1) {
    record(http.get(URL, REQUEST_PARAMS));
    return;
  }
  const batch = [];
  for (let i = 0; i < params.lookups; i++) {
    batch.push(['GET', URL, null, REQUEST_PARAMS]);
  }
  for (const res of http.batch(batch)) {
    record(res);
  }
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
  const lines = [`${title}: via=${params.via} orders=${params.orders} lookups=${params.lookups}`];
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
  if (m.bad_answers) {
    lines.push(`  bad answers     ${m.bad_answers.values.count}`);
  }
  lines.push(`  summary JSON    ${params.summaryJson}`);
  return {
    stdout: lines.join('\n') + '\n',
    [params.summaryJson]: JSON.stringify(data, null, 1),
  };
}
