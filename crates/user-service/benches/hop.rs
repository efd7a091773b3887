//! The hop alone: user-service's adapter for each transport calling a real
//! order-service, in memory, on loopback, and nothing else. There is no k6,
//! no front-end request to user-service and no re-encoding for a client:
//! each adapter (`OrderSource`) is driven directly, as user-service drives it
//! inside a request.
//!
//! order-service runs in this process on a runtime of its own (2 worker
//! threads); the callers run on another (2 worker threads), each caller a
//! task of its own, as user-service makes a call inside a request's task.
//! Each transport gets user-service's default budget of connections (its
//! pool). Two loads: one caller, one call after another; and 8 callers at
//! once (an iteration is then 8 calls, counted as 8 elements).
//!
//! Benchmarks are named `hop/CALLERS/TRANSPORT/ORDERS`.
//! `cargo bench -p user-service --bench hop` (add a filter such as
//! `-- '^hop/1/'` to run some). Under `cargo test` each benchmark runs once,
//! which proves it runs; the lab's `hop` experiment runs it once per round.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use model::FieldSet;
use user_service::upstream::{OrderQuery, OrderSource, Transport};

#[path = "shared/in_process.rs"]
mod in_process;
use in_process::{order_service, upstreams};

fn query(orders: u32) -> OrderQuery {
    OrderQuery {
        user_id: dataset::fixed_user_id(orders),
        limit: orders,
        fields: FieldSet::ALL,
    }
}

/// One call, checked: a wrong answer is not a figure.
async fn call(source: &dyn OrderSource, q: &OrderQuery) {
    let got = source.list_orders(q).await.expect("the call succeeds");
    assert_eq!(got.len(), q.limit as usize, "every order asked for");
}

fn hop(c: &mut Criterion) {
    let order = order_service();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("the callers' runtime");
    let up = rt.block_on(async { upstreams(&order) });
    for callers in [1usize, 8] {
        let mut g = c.benchmark_group(format!("hop/{callers}"));
        g.throughput(Throughput::Elements(callers as u64));
        for orders in [1u32, 1_000] {
            for via in Transport::ALL {
                let source = up.source(via);
                let q = query(orders);
                // Connections opened before the clock starts.
                rt.block_on(call(source.as_ref(), &q));
                g.bench_function(BenchmarkId::new(via.name(), orders), |b| {
                    b.iter_custom(|iters| {
                        rt.block_on(async {
                            let start = Instant::now();
                            let each = |source: Arc<dyn OrderSource>| async move {
                                for _ in 0..iters {
                                    call(source.as_ref(), &q).await;
                                }
                            };
                            // Each caller is a task, as user-service makes a
                            // call inside a request's task: not the thread
                            // blocked on the runtime, which every wake-up
                            // would have to reach from another thread.
                            let tasks: Vec<_> = (0..callers)
                                .map(|_| tokio::spawn(each(source.clone())))
                                .collect();
                            for t in tasks {
                                t.await.expect("a caller");
                            }
                            start.elapsed()
                        })
                    });
                });
            }
        }
        g.finish();
    }
}

criterion_group! {
    name = benches;
    // The command line (`--warm-up-time`, `--measurement-time`) overrides
    // these.
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = hop
}
criterion_main!(benches);
