//! N calls of one transport's adapter against an in-process order-service
//! (in memory), one after another: what `scripts/hop-callgrind` runs under
//! callgrind to count the instructions of a call, and what
//! `scripts/hop-handoffs` runs to count a call's task polls, wake-ups and
//! thread sleeps. callgrind's two runs differ only in N, so their difference
//! over the extra calls is the instructions of one call, start-up and
//! warm-up cancelled out.
//!
//! `cargo run --release -p user-service --example hop_calls -- TRANSPORT ORDERS N [--runtime] [--block-on]`
//! (`-- --list` prints every transport's name)
//!
//! With `--runtime`, it prints one line of JSON: Tokio's counters for both
//! runtimes (the callers', order-service's) over the N calls, per call.
//! Thread sleeps (`parks`) are always counted; spawns and wake-ups
//! (schedules) only in a build with `RUSTFLAGS="--cfg tokio_unstable"`
//! (`scripts/hop-handoffs` makes one).
//!
//! With `HOP_BREAKDOWN` set (to anything), order-service gives its account
//! of each answer (`ORDER_SERVER_TIMING`) and each call's parts are recorded
//! as user-service records them (`USER_UPSTREAM_BREAKDOWN`): `scripts/hop-callgrind`
//! counts what the breakdown costs.
//!
//! The calls run in a spawned task, as user-service makes them inside a
//! request's task and as the hop benchmark's callers do. With `--block-on`
//! they run on the thread blocked on the runtime instead, which every
//! wake-up must reach from another thread.

use std::time::Instant;

use model::FieldSet;
use tokio::runtime::Handle;
use user_service::upstream::{OrderQuery, Transport};

#[path = "../benches/shared/in_process.rs"]
mod in_process;

/// One runtime's counters, summed over its workers.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    /// A worker thread went to sleep (and was woken again).
    parks: u64,
    /// Time the workers spent running tasks, in µs.
    busy_us: u64,
    /// Tasks spawned.
    spawned: Option<u64>,
    /// Tasks woken from a thread that is not one of this runtime's workers
    /// (another runtime's, or the thread blocked on `block_on`).
    remote: Option<u64>,
    /// Tasks woken on a worker of this runtime.
    local: Option<u64>,
    /// Tasks one worker stole from another's queue.
    steals: Option<u64>,
    /// Readiness events from the I/O driver.
    io_ready: Option<u64>,
}

impl Counters {
    fn read(h: &Handle) -> Self {
        let m = h.metrics();
        let workers = 0..m.num_workers();
        let sum = |f: &dyn Fn(usize) -> u64| workers.clone().map(f).sum::<u64>();
        #[allow(unused_mut)]
        let mut c = Counters {
            parks: sum(&|w| m.worker_park_count(w)),
            busy_us: sum(&|w| m.worker_total_busy_duration(w).as_micros() as u64),
            ..Counters::default()
        };
        #[cfg(tokio_unstable)]
        {
            c.spawned = Some(m.spawned_tasks_count());
            c.remote = Some(m.remote_schedule_count());
            c.local = Some(sum(&|w| m.worker_local_schedule_count(w)));
            c.steals = Some(sum(&|w| m.worker_steal_count(w)));
            c.io_ready = Some(m.io_driver_ready_count());
        }
        c
    }

    /// `self - before` per call; a counter this build lacks is null.
    fn per_call(&self, before: &Counters, n: u32) -> serde_json::Value {
        let each = |a: u64, b: u64| (a - b) as f64 / f64::from(n);
        let opt = |a: Option<u64>, b: Option<u64>| Some(each(a?, b?));
        serde_json::json!({
            "parks": each(self.parks, before.parks),
            "busy_us": each(self.busy_us, before.busy_us),
            "spawned": opt(self.spawned, before.spawned),
            "remote": opt(self.remote, before.remote),
            "local": opt(self.local, before.local),
            "steals": opt(self.steals, before.steals),
            "io_ready": opt(self.io_ready, before.io_ready),
        })
    }
}

fn main() -> anyhow::Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut flag = |name: &str| match args.iter().position(|a| a == name) {
        Some(i) => {
            args.remove(i);
            true
        }
        None => false,
    };
    if flag("--list") {
        // Every transport's name, for the scripts that run them all.
        let names: Vec<&str> = Transport::ALL.iter().map(|t| t.name()).collect();
        println!("{}", names.join(" "));
        return Ok(());
    }
    let runtime = flag("--runtime");
    let in_task = !flag("--block-on");
    let [via, orders, n] = args.as_slice() else {
        anyhow::bail!(
            "usage: hop_calls TRANSPORT ORDERS N [--runtime] [--block-on] (transports: {})",
            Transport::names()
        );
    };
    let via: Transport = via.parse()?;
    let orders: u32 = orders.parse()?;
    let n: u32 = n.parse()?;
    anyhow::ensure!(n > 0, "N must be at least 1");
    let order = in_process::order_service();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let up = rt.block_on(async { in_process::upstreams(&order) });
    let source = up.source(via);
    let q = OrderQuery {
        user_id: dataset::fixed_user_id(orders),
        limit: orders,
        fields: FieldSet::ALL,
    };
    let (callers, server) = (rt.handle().clone(), order.runtime.clone());
    let calls = async move {
        // Warm-up: connections opened, caches filled.
        for _ in 0..20 {
            source.list_orders(&q).await?;
        }
        let before = (Counters::read(&callers), Counters::read(&server));
        let start = Instant::now();
        let timed = in_process::breakdown();
        for _ in 0..n {
            // With HOP_BREAKDOWN set, each call's parts are recorded as
            // user-service records them (and order-service times its side).
            let got = if timed {
                user_service::upstream::parts::record(source.list_orders(&q))
                    .await
                    .0?
            } else {
                source.list_orders(&q).await?
            };
            anyhow::ensure!(
                got.len() == orders as usize,
                "{} orders, not {orders}",
                got.len()
            );
        }
        anyhow::Ok((start.elapsed(), before))
    };
    // A task, as user-service runs a call (inside a request's task), or the
    // thread blocked on `block_on`.
    let (took, before) = if in_task {
        rt.block_on(rt.spawn(calls))??
    } else {
        rt.block_on(calls)?
    };
    if runtime {
        let after = (Counters::read(rt.handle()), Counters::read(&order.runtime));
        let line = serde_json::json!({
            "transport": via.name(),
            "orders": orders,
            "calls": n,
            "in_task": in_task,
            "us_per_call": took.as_secs_f64() * 1e6 / f64::from(n),
            "callers": after.0.per_call(&before.0, n),
            "order_service": after.1.per_call(&before.1, n),
        });
        println!("{line}");
    }
    // The server thread never ends by itself: leave without waiting for it.
    std::process::exit(0)
}
