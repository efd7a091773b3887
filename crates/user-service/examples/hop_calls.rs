//! N calls of one transport's adapter against an in-process order-service
//! (in memory), one after another: what `scripts/hop-callgrind` runs under
//! callgrind to count the instructions of a call. Its two runs differ only
//! in N, so their difference over the extra calls is the instructions of one
//! call, start-up and warm-up cancelled out.
//!
//! `cargo run --release -p user-service --example hop_calls -- TRANSPORT ORDERS N`

use model::FieldSet;
use user_service::upstream::{OrderQuery, Transport};

#[path = "../benches/shared/in_process.rs"]
mod in_process;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [via, orders, n] = args.as_slice() else {
        anyhow::bail!(
            "usage: hop_calls TRANSPORT ORDERS N (transports: {})",
            Transport::names()
        );
    };
    let via: Transport = via.parse()?;
    let orders: u32 = orders.parse()?;
    let n: u32 = n.parse()?;
    let (rest, grpc, tcp) = in_process::order_service();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let up = in_process::upstreams(rest, grpc, tcp);
        let source = up.source(via);
        let q = OrderQuery {
            user_id: dataset::fixed_user_id(orders),
            limit: orders,
            fields: FieldSet::ALL,
        };
        // Warm-up: connections opened, caches filled.
        for _ in 0..20 {
            source.list_orders(&q).await?;
        }
        for _ in 0..n {
            let got = source.list_orders(&q).await?;
            anyhow::ensure!(
                got.len() == orders as usize,
                "{} orders, not {orders}",
                got.len()
            );
        }
        anyhow::Ok(())
    })?;
    // The server thread never ends by itself: leave without waiting for it.
    std::process::exit(0)
}
