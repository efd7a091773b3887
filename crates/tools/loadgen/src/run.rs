//! A run: one thread, one event loop, every connection a task on it.
//!
//! - **Closed loop**: N callers, each with its own keep-alive connection,
//!   each sending its next request when its last is answered (after the
//!   think time, if any). A request's latency runs from its start (the
//!   connect included, for a connection's first).
//! - **Open loop**: request `i` is due at `start + i / rate`, whatever the
//!   answers do (wrk2's method). At its due time it goes to the most
//!   recently freed idle connection (few connections stay hot, as in a
//!   client's pool), or to a new one while under the cap; with none free
//!   and the cap reached it waits, oldest first, for the next connection
//!   to free. Its latency runs from its due time, so a wait for a
//!   connection or for the server is counted, never left out (no
//!   coordinated omission), and how late each request was written is kept
//!   apart ([`ScheduleKept`](crate::tally::ScheduleKept)). Nothing due is
//!   dropped: what is still waiting when the grace period after the run
//!   ends is counted as unsent.
//!
//! Requests in flight when the run ends get the grace period to finish;
//! those that do not are counted as unfinished.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::{Notify, mpsc};

use crate::check::Expect;
use crate::clock::{Timer, now_ns};
use crate::http1::{Conn, Failure, Request};
use crate::tally::{Outcome, RunShape, Summary, Tally};

/// Everything a run is.
#[derive(Debug, Clone)]
pub struct Plan {
    pub request: Request,
    pub expect: Expect,
    /// Closed loop: the callers. Open loop: the most connections.
    pub connections: u32,
    /// Open loop: requests per second; `None` is a closed loop.
    pub rate: Option<f64>,
    pub duration: Duration,
    /// How long requests in flight at the end may take to finish.
    pub grace: Duration,
    /// Closed loop: the wait after an answer before the next request.
    pub think: Duration,
    /// A request with no whole answer by then fails (`timeout`).
    pub timeout: Duration,
    /// Requests slower than this are counted slow, ms.
    pub slow_ms: u64,
}

/// What every task of a run shares (one thread: no locks).
struct Shared {
    plan: Plan,
    tally: RefCell<Tally>,
    /// Requests under way.
    busy: Cell<u32>,
    /// Open loop: requests due that wait for a free connection, oldest
    /// first (always empty in a closed loop).
    pending: RefCell<VecDeque<u64>>,
    /// The run's end has passed: no new request starts (closed loop), or
    /// the schedule is over (open loop).
    ended: Cell<bool>,
    /// Signalled when the last request under way after the end finishes.
    idle: Notify,
}

impl Shared {
    /// One request on `conn` (opened first when there is none), with the
    /// plan's timeout; a connection that failed or will close is dropped.
    async fn one(&self, conn: &mut Option<Conn>) -> Outcome {
        let plan = &self.plan;
        let attempt = async {
            if conn.is_none() {
                *conn = Some(Conn::open(plan.request.addr).await?);
                self.tally.borrow_mut().connection(true);
            }
            let c = conn.as_mut().ok_or(Failure::Connect)?;
            c.exchange(&plan.request, &plan.expect.headers).await
        };
        let result = match tokio::time::timeout(plan.timeout, attempt).await {
            Ok(r) => r,
            Err(_) => Err(Failure::Timeout),
        };
        match result {
            Ok(head) => {
                let verdict = plan.expect.judge(&head);
                if head.close {
                    self.drop_conn(conn);
                }
                Outcome::Answer(head, verdict)
            }
            Err(f) => {
                self.drop_conn(conn);
                Outcome::Failed(f)
            }
        }
    }

    fn drop_conn(&self, conn: &mut Option<Conn>) {
        if conn.take().is_some() {
            self.tally.borrow_mut().connection(false);
        }
    }

    fn start(&self) {
        self.busy.set(self.busy.get() + 1);
    }

    fn finish(&self, outcome: &Outcome, from_ns: u64) {
        let end = now_ns();
        self.tally
            .borrow_mut()
            .record(outcome, end.saturating_sub(from_ns), end);
        self.busy.set(self.busy.get() - 1);
        if self.ended.get() && self.busy.get() == 0 && self.pending.borrow().is_empty() {
            self.idle.notify_one();
        }
    }
}

/// Runs `plan` to its end on a thread of its own making; returns its
/// summary.
pub fn run(plan: Plan) -> anyhow::Result<Summary> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, drive(plan))
}

async fn drive(plan: Plan) -> anyhow::Result<Summary> {
    let shape = RunShape {
        connections: plan.connections,
        rate: plan.rate,
    };
    let grace = plan.grace;
    let shared = Rc::new(Shared {
        tally: RefCell::new(Tally::new(plan.slow_ms)),
        busy: Cell::new(0),
        pending: RefCell::new(VecDeque::new()),
        ended: Cell::new(false),
        idle: Notify::new(),
        plan,
    });
    let start = now_ns();
    let end = start + shared.plan.duration.as_nanos() as u64;
    match shared.plan.rate {
        None => {
            for _ in 0..shared.plan.connections {
                tokio::task::spawn_local(caller(shared.clone(), end));
            }
            tokio::time::sleep(shared.plan.duration).await;
        }
        Some(rate) => {
            let open = Rc::new(OpenLoop::default());
            schedule(&shared, &open, rate, start, end).await?;
        }
    }
    shared.ended.set(true);
    let unsent = || shared.pending.borrow().len() as u64;
    if shared.busy.get() > 0 || unsent() > 0 {
        let _ = tokio::time::timeout(grace, shared.idle.notified()).await;
    }
    let tally = shared.tally.borrow();
    let last = tally.last_end_ns.max(end);
    Ok(tally.summary(
        shape,
        (last - start) as f64 / 1e9,
        u64::from(shared.busy.get()),
        unsent(),
    ))
}

/// A closed-loop caller: one connection, one request after another until
/// the end.
async fn caller(shared: Rc<Shared>, end: u64) {
    let mut conn = None;
    while now_ns() < end {
        let t0 = now_ns();
        shared.start();
        let outcome = shared.one(&mut conn).await;
        shared.finish(&outcome, t0);
        if !shared.plan.think.is_zero() {
            tokio::time::sleep(shared.plan.think).await;
        }
    }
}

/// The open loop's connections: those idle (the last freed on top), and
/// how many are open.
#[derive(Default)]
struct OpenLoop {
    idle: RefCell<Vec<mpsc::UnboundedSender<u64>>>,
    open: Cell<u32>,
}

/// Sends request `i` at `start + i / rate` until `end`.
async fn schedule(
    shared: &Rc<Shared>,
    open: &Rc<OpenLoop>,
    rate: f64,
    start: u64,
    end: u64,
) -> anyhow::Result<()> {
    let timer = Timer::new()?;
    let interval_ns = 1e9 / rate;
    for i in 0u64.. {
        let due = start + (i as f64 * interval_ns) as u64;
        if due >= end {
            break;
        }
        timer.sleep_until(due).await?;
        shared.tally.borrow_mut().due += 1;
        // Under way from now: a job on its way to a connection task that
        // has not run yet is waited for at the end like one in flight.
        shared.start();
        if let Some(conn) = open.idle.borrow_mut().pop() {
            // A task waiting on its channel always takes the job.
            let _ = conn.send(due);
        } else if open.open.get() < shared.plan.connections {
            open.open.set(open.open.get() + 1);
            tokio::task::spawn_local(connection(shared.clone(), open.clone(), due));
        } else {
            shared.tally.borrow_mut().waited += 1;
            shared.busy.set(shared.busy.get() - 1);
            shared.pending.borrow_mut().push_back(due);
        }
    }
    Ok(())
}

/// An open-loop connection: its first request, then the oldest waiting
/// one, or the next the schedule gives it when idle.
async fn connection(shared: Rc<Shared>, open: Rc<OpenLoop>, first: u64) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut conn = None;
    let mut job = Some(first);
    loop {
        let due = match job.take() {
            Some(d) => d,
            None => {
                let next = shared.pending.borrow_mut().pop_front();
                match next {
                    Some(d) => {
                        shared.start();
                        d
                    }
                    None => {
                        open.idle.borrow_mut().push(tx.clone());
                        match rx.recv().await {
                            Some(d) => d,
                            None => return,
                        }
                    }
                }
            }
        };
        shared
            .tally
            .borrow_mut()
            .sent_late(now_ns().saturating_sub(due));
        let outcome = shared.one(&mut conn).await;
        shared.finish(&outcome, due);
    }
}
