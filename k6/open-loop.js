// Open loop: RATE iterations start every second whatever the answers do
// (k6's constant-arrival-rate executor). When every VU is busy the iteration
// is not sent but counted in `dropped_iterations`: the overload signal of
// the Spring Boot post's connection-budget table. Tail latency rises before drops appear.
//
//   k6 run k6/open-loop.js                                     # grpc, 100 orders, 500/s, 30 s
//   k6 run -e VIA=h1-json -e RATE=4000 -e MAX_VUS=200 k6/open-loop.js
//
// Every parameter and its default: k6/lib/user-orders.js.
import { params, commonOptions, iteration, summarize } from './lib/user-orders.js';

export const options = Object.assign(commonOptions(), {
  scenarios: {
    open_loop: {
      executor: 'constant-arrival-rate',
      rate: params.rate,
      timeUnit: '1s',
      duration: params.duration,
      preAllocatedVUs: Math.min(params.preVus, params.maxVus),
      maxVUs: params.maxVus,
      gracefulStop: params.gracefulStop,
    },
  },
});

export default function () {
  iteration();
}

export function handleSummary(data) {
  return summarize(data, 'open loop');
}
