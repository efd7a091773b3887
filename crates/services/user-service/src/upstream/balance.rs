//! Client-side balancing: user-service knows every replica of order-service
//! and spreads its own calls over them.
//!
//! Replicas are hosts that serve order-service on the same ports, as the pods
//! behind a Kubernetes headless Service do. They come from a list of names
//! and addresses (`USER_ORDER_REPLICAS`), each name re-resolved periodically
//! by a [`Resolve`]r, so that a headless Service's DNS answer, which lists
//! every ready pod, is followed as pods come and go. A failed or empty
//! resolution keeps the last good set and is logged.
//!
//! Each transport keeps, per replica, the adapter it would use for a single
//! order-service: the same code, the same connection budget (so the budget is
//! per replica, and the total is the budget times the replicas). A call goes
//! to one replica, picked by [`Pick`]. Every transport balances the same way,
//! gRPC included, rather than gRPC through tonic's balanced channel: tonic's
//! balancer dials through its own connector, which would lose the byte and
//! connection counts every other transport reports, and would make the
//! balancing policy a second variable between the gRPC and REST cells.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use futures::future::BoxFuture;
use model::Order;
use transports::Transport;

use super::port::{OrderQuery, OrderSource, UpstreamError};

/// How a call picks its replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Pick {
    /// Each replica in turn.
    RoundRobin,
    /// Two replicas at random, and the one with fewer calls in flight (ties
    /// to the first).
    P2c,
}

impl std::fmt::Display for Pick {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Pick::RoundRobin => "round-robin",
            Pick::P2c => "p2c",
        })
    }
}

/// Turns a replica name into addresses: DNS in the service, answers a test
/// changes over time in the tests.
pub trait Resolve: Send + Sync + 'static {
    /// The addresses `name` stands for now.
    fn resolve<'a>(&'a self, name: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>>;
}

/// The system resolver (getaddrinfo, through tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct Dns;

impl Resolve for Dns {
    fn resolve<'a>(&'a self, name: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((name, 0)).await?;
            Ok(addrs.map(|a| a.ip()).collect())
        })
    }
}

/// Every address the `replicas` list stands for now: an address is itself,
/// a name is what `resolver` answers. An error names the entry that failed.
pub async fn resolve_all(
    resolver: &dyn Resolve,
    replicas: &[String],
) -> Result<BTreeSet<IpAddr>, String> {
    let mut all = BTreeSet::new();
    for entry in replicas {
        if let Ok(ip) = entry.parse::<IpAddr>() {
            all.insert(ip);
            continue;
        }
        match resolver.resolve(entry).await {
            Ok(ips) => all.extend(ips),
            Err(e) => return Err(format!("resolving {entry}: {e}")),
        }
    }
    if all.is_empty() {
        return Err(format!("{} resolved to no address", replicas.join(", ")));
    }
    Ok(all)
}

/// One replica's adapter, and the calls it has in flight.
struct Member {
    ip: IpAddr,
    source: Arc<dyn OrderSource>,
    in_flight: AtomicUsize,
}

/// Counts a call in flight on a member until it ends.
struct InFlight<'a>(&'a AtomicUsize);

impl Member {
    /// A call on this member begins: counted until the guard drops.
    fn enter(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(&self.in_flight)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Second tries allowed as a share of the calls made: a token bucket in
/// thousandths of a token, each call earning `pct` × 10 of them, up to
/// [`RetryBudget::CAP`]; a second try spends a whole token.
#[derive(Debug)]
pub struct RetryBudget {
    pct: u32,
    milli: AtomicI64,
}

impl RetryBudget {
    /// The most saved up: 10 second tries in a row, then one per
    /// 100 / `pct` calls.
    pub const CAP: i64 = 10_000;

    pub fn new(pct: u32) -> Self {
        RetryBudget {
            pct,
            milli: AtomicI64::new(0),
        }
    }

    /// A call was made: it earns its share.
    pub fn earn(&self) {
        if self.pct == 0 {
            return;
        }
        let add = i64::from(self.pct) * 10;
        let _ = self
            .milli
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| {
                Some((m + add).min(Self::CAP))
            });
    }

    /// Whether a second try may go: a token is spent if one is there.
    pub fn spend(&self) -> bool {
        self.milli
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| {
                (m >= 1_000).then(|| m - 1_000)
            })
            .is_ok()
    }
}

/// One transport's adapters, one per replica, as one [`OrderSource`].
pub struct Balanced {
    transport: Transport,
    pick: Pick,
    members: RwLock<Arc<Vec<Arc<Member>>>>,
    next: AtomicUsize,
    budget: RetryBudget,
}

impl Balanced {
    /// No replica yet: [`Balanced::set`] gives them. A call that fails with
    /// no answer is tried once more on another replica within a budget of
    /// `retry_pct`% of the calls (0: never).
    pub fn new(transport: Transport, pick: Pick, retry_pct: u32) -> Self {
        Balanced {
            transport,
            pick,
            members: RwLock::new(Arc::new(Vec::new())),
            next: AtomicUsize::new(0),
            budget: RetryBudget::new(retry_pct),
        }
    }

    /// The replicas now, in address order.
    pub fn replicas(&self) -> Vec<IpAddr> {
        self.current().iter().map(|m| m.ip).collect()
    }

    /// Makes `ips` the replicas: those already there keep their adapter
    /// (and its connections), new ones get one from `make`, and those gone
    /// are dropped, closing their connections once their calls end.
    pub fn set(
        &self,
        ips: &BTreeSet<IpAddr>,
        make: impl Fn(IpAddr) -> anyhow::Result<Arc<dyn OrderSource>>,
    ) -> anyhow::Result<()> {
        let old = self.current();
        let mut members = Vec::with_capacity(ips.len());
        for ip in ips {
            match old.iter().find(|m| m.ip == *ip) {
                Some(m) => members.push(m.clone()),
                None => members.push(Arc::new(Member {
                    ip: *ip,
                    source: make(*ip)?,
                    in_flight: AtomicUsize::new(0),
                })),
            }
        }
        *self.members.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(members);
        Ok(())
    }

    fn current(&self) -> Arc<Vec<Arc<Member>>> {
        self.members
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The member the next call goes to.
    fn choose(&self) -> Result<Arc<Member>, UpstreamError> {
        let members = self.current();
        let n = members.len();
        if n == 0 {
            return Err(UpstreamError::Unavailable(
                "no replica of order-service is known".to_owned(),
            ));
        }
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        let i = match self.pick {
            Pick::RoundRobin => turn % n,
            Pick::P2c => {
                let a = (service_kit::serve::splitmix(turn as u64) % n as u64) as usize;
                let b = (service_kit::serve::splitmix(!(turn as u64)) % n as u64) as usize;
                let load = |i: usize| members[i].in_flight.load(Ordering::Relaxed);
                if load(b) < load(a) { b } else { a }
            }
        };
        Ok(members[i].clone())
    }

    /// A replica other than `failed` for a second try: the next one in
    /// address order, if there is another.
    fn other_than(&self, failed: IpAddr) -> Option<Arc<Member>> {
        let members = self.current();
        let i = members.iter().position(|m| m.ip == failed)?;
        let next = &members[(i + 1) % members.len()];
        (next.ip != failed).then(|| next.clone())
    }

    /// One call on `member`, counted in flight there.
    async fn call_on(member: &Member, q: &OrderQuery) -> Result<Vec<Order>, UpstreamError> {
        let _counted = member.enter();
        member.source.list_orders(q).await
    }
}

impl OrderSource for Balanced {
    fn transport(&self) -> Transport {
        self.transport
    }

    fn list_orders<'a>(
        &'a self,
        q: &'a OrderQuery,
    ) -> BoxFuture<'a, Result<Vec<Order>, UpstreamError>> {
        Box::pin(async move {
            let member = self.choose()?;
            self.budget.earn();
            match Self::call_on(&member, q).await {
                // No answer came: a read may go to another replica.
                Err(UpstreamError::Unavailable(why)) => match self.other_than(member.ip) {
                    Some(other) if self.budget.spend() => {
                        tracing::debug!(failed = %member.ip, %why, to = %other.ip, "sending the call to another replica");
                        Self::call_on(&other, q).await
                    }
                    _ => Err(UpstreamError::Unavailable(why)),
                },
                answer => answer,
            }
        })
    }

    fn list_batch<'a>(
        &'a self,
        qs: &'a [OrderQuery],
    ) -> Option<BoxFuture<'a, Result<Vec<Vec<Order>>, UpstreamError>>> {
        self.transport.batch_call()?;
        Some(Box::pin(async move {
            let member = self.choose()?;
            let _counted = member.enter();
            match member.source.list_batch(qs) {
                Some(call) => call.await,
                None => Err(UpstreamError::Protocol(format!(
                    "{} has no batch call",
                    self.transport
                ))),
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source that only says which replica it is, by failing with it.
    struct Named(IpAddr);

    impl OrderSource for Named {
        fn transport(&self) -> Transport {
            Transport::Grpc
        }
        fn list_orders<'a>(
            &'a self,
            _q: &'a OrderQuery,
        ) -> BoxFuture<'a, Result<Vec<Order>, UpstreamError>> {
            let ip = self.0;
            Box::pin(async move {
                Err(UpstreamError::Rejected {
                    status: "test".into(),
                    message: ip.to_string(),
                })
            })
        }
    }

    /// A replica that refuses every call (no answer), counting them.
    struct Dead(Arc<AtomicUsize>);

    impl OrderSource for Dead {
        fn transport(&self) -> Transport {
            Transport::Grpc
        }
        fn list_orders<'a>(
            &'a self,
            _q: &'a OrderQuery,
        ) -> BoxFuture<'a, Result<Vec<Order>, UpstreamError>> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Box::pin(async { Err(UpstreamError::Unavailable("connection refused".into())) })
        }
    }

    /// Replica .1 dead and .2 alive (answering with its name); `n` calls
    /// round robin under a budget of `pct`%: the calls that failed, and
    /// those the dead replica was sent.
    async fn dead_and_alive(pct: u32, n: usize) -> (usize, usize) {
        let b = Balanced::new(Transport::Grpc, Pick::RoundRobin, pct);
        let dead = Arc::new(AtomicUsize::new(0));
        b.set(&ips(&[1, 2]), |ip| {
            Ok(if ip == IpAddr::from([127, 0, 0, 1]) {
                Arc::new(Dead(dead.clone())) as Arc<dyn OrderSource>
            } else {
                Arc::new(Named(ip))
            })
        })
        .unwrap();
        let q = OrderQuery {
            user_id: uuid::Uuid::nil(),
            limit: 1,
            fields: model::FieldSet::ALL,
        };
        let mut failed = 0;
        for _ in 0..n {
            match b.list_orders(&q).await {
                Err(UpstreamError::Unavailable(_)) => failed += 1,
                Err(UpstreamError::Rejected { message, .. }) => assert_eq!(message, "127.0.0.2"),
                other => panic!("{other:?}"),
            }
        }
        (failed, dead.load(Ordering::Relaxed))
    }

    #[tokio::test]
    async fn a_call_refused_by_a_dead_replica_is_sent_to_another_within_its_budget() {
        // No budget: every call that lands on the dead replica fails.
        assert_eq!(dead_and_alive(0, 100).await, (50, 50));
        // A budget as large as the calls: none fails, and none is sent to
        // the dead replica twice.
        assert_eq!(dead_and_alive(100, 100).await, (0, 50));
        // 10%: of 1,000 calls (500 refused), about 100 are tried again.
        let (failed, dead) = dead_and_alive(10, 1000).await;
        assert_eq!(dead, 500);
        assert!((395..=405).contains(&failed), "{failed} failed");
    }

    fn ips(n: &[u8]) -> BTreeSet<IpAddr> {
        n.iter().map(|i| IpAddr::from([127, 0, 0, *i])).collect()
    }

    async fn who(b: &Balanced) -> String {
        let q = OrderQuery {
            user_id: uuid::Uuid::nil(),
            limit: 1,
            fields: model::FieldSet::ALL,
        };
        match b.list_orders(&q).await {
            Err(UpstreamError::Rejected { message, .. }) => message,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn round_robin_visits_each_replica_in_turn_and_follows_the_set() {
        let b = Balanced::new(Transport::Grpc, Pick::RoundRobin, 0);
        assert!(matches!(
            b.list_orders(&OrderQuery {
                user_id: uuid::Uuid::nil(),
                limit: 1,
                fields: model::FieldSet::ALL,
            })
            .await,
            Err(UpstreamError::Unavailable(_))
        ));
        b.set(&ips(&[1, 2, 3]), |ip| Ok(Arc::new(Named(ip))))
            .unwrap();
        let mut seen = Vec::new();
        for _ in 0..6 {
            seen.push(who(&b).await);
        }
        assert_eq!(seen[..3], seen[3..]);
        assert_eq!(seen.iter().collect::<BTreeSet<_>>().len(), 3);

        // A replica kept keeps its adapter; a new one gets one; a gone one
        // gets no more calls.
        let made = AtomicUsize::new(0);
        b.set(&ips(&[2, 3, 4]), |ip| {
            made.fetch_add(1, Ordering::Relaxed);
            Ok(Arc::new(Named(ip)))
        })
        .unwrap();
        assert_eq!(made.load(Ordering::Relaxed), 1);
        let mut seen = BTreeSet::new();
        for _ in 0..6 {
            seen.insert(who(&b).await);
        }
        assert_eq!(
            seen,
            ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
                .map(String::from)
                .into()
        );
    }

    #[tokio::test]
    async fn power_of_two_choices_reaches_every_replica() {
        let b = Balanced::new(Transport::Grpc, Pick::P2c, 0);
        b.set(&ips(&[1, 2, 3]), |ip| Ok(Arc::new(Named(ip))))
            .unwrap();
        let mut seen = BTreeSet::new();
        for _ in 0..200 {
            seen.insert(who(&b).await);
        }
        assert_eq!(seen.len(), 3);
    }

    struct Fails;
    impl Resolve for Fails {
        fn resolve<'a>(&'a self, _: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
            Box::pin(async { Err(std::io::Error::other("no such host")) })
        }
    }

    #[tokio::test]
    async fn addresses_stand_for_themselves_and_a_failed_name_is_named() {
        let list = ["127.0.0.2".to_owned(), "127.0.0.1".to_owned()];
        assert_eq!(resolve_all(&Fails, &list).await.unwrap(), ips(&[1, 2]));
        let e = resolve_all(&Fails, &["orders.local".to_owned()])
            .await
            .unwrap_err();
        assert!(
            e.contains("orders.local") && e.contains("no such host"),
            "{e}"
        );
    }
}
