// Closed loop: VUS virtual users, each sending its next lookup as soon as the
// previous one is answered (or THINK_MS after it). Throughput is what the system gives back; the
// Spring Boot post's payload table (50 VUs, 30 s) was measured this way.
//
//   k6 run k6/closed-loop.js                                   # grpc, 100 orders, 10 VUs, 30 s
//   k6 run -e VIA=h1-json -e ORDERS=1000 -e VUS=50 k6/closed-loop.js
//
// Every parameter and its default: k6/lib/user-orders.js.
import { sleep } from 'k6';
import { params, commonOptions, iteration, summarize } from './lib/user-orders.js';

export const options = Object.assign(commonOptions(), {
  scenarios: {
    closed_loop: {
      executor: 'constant-vus',
      vus: params.vus,
      duration: params.duration,
      gracefulStop: params.gracefulStop,
    },
  },
});

export default function () {
  iteration();
  if (params.thinkMs > 0) {
    sleep(params.thinkMs / 1000);
  }
}

export function handleSummary(data) {
  return summarize(data, 'closed loop');
}
