//! order-service's own series on `/metrics`, beside the request metrics:
//! which store it serves from and, on Postgres, its connection pool.

use telemetry::metrics::{Collector, DescriptorEncoder, Kind, NoLabels, encode_family};

use crate::store::{OrderStore as _, Store};

/// `order_service_info{store,version}` and, on Postgres,
/// `order_db_pool_connections`, `order_db_pool_in_use` and
/// `order_db_pool_waiting`, read at each scrape.
#[derive(Debug, Clone)]
pub struct StoreCollector(pub Store);

impl Collector for StoreCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        encode_family(
            &mut encoder,
            "order_service_info",
            "Which store this instance serves from, and its version",
            None,
            Kind::Gauge,
            [(
                [
                    ("store", self.0.kind().to_owned()),
                    ("version", env!("CARGO_PKG_VERSION").to_owned()),
                ],
                1u64,
            )],
        )?;
        let crate::store::Store::Postgres(pg) = &self.0 else {
            return Ok(());
        };
        let p = pg.pool_stats();
        let size = u64::from(p.size);
        for (name, help, value) in [
            (
                "order_db_pool_connections",
                "Postgres connections open",
                size,
            ),
            (
                "order_db_pool_in_use",
                "Postgres connections running a query",
                size.saturating_sub(p.idle as u64),
            ),
            (
                "order_db_pool_waiting",
                "Queries waiting for a connection",
                u64::try_from(p.waiting).unwrap_or(0),
            ),
        ] {
            encode_family(
                &mut encoder,
                name,
                help,
                None,
                Kind::Gauge,
                [(NoLabels::default(), value)],
            )?;
        }
        Ok(())
    }
}
