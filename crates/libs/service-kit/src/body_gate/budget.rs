//! The bytes request bodies hold while their calls wait for the rest, over
//! the process: two budgets, one for the calls that keep their slot and
//! one for those that lent it or gave it back, and what each call holds of
//! them.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The most bytes of request bodies held at once, over the process, by
/// calls that lent or gave back their slot while waiting for the rest.
pub const STALLED_BODY_BYTES: usize = 8 << 20;

/// The most bytes of request bodies held at once, over the process, by
/// calls that keep their slot while they wait for the rest. A call that
/// would pass it gives its slot back at once (its bytes then count in
/// [`STALLED_BODY_BYTES`], or it is shed): with 512 slots' calls holding
/// 64 KiB each, a flood took order-service's debug build 63 MiB up at its
/// peak, 27 with 64 slots, 46-48 with this bound.
pub const WAITING_BODY_BYTES: usize = 16 << 20;

/// What a call waiting without a slot counts in the budget beside its
/// body's bytes: its stream's and task's state, whatever it received.
pub const CALL_COST: usize = 16 << 10;

/// Bytes held by bodies that wait, and the most they may hold.
#[derive(Debug)]
pub struct StalledBudget {
    limit: usize,
    held: AtomicUsize,
}

impl StalledBudget {
    /// A budget of `limit` bytes.
    pub const fn new(limit: usize) -> Self {
        StalledBudget {
            limit,
            held: AtomicUsize::new(0),
        }
    }

    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Room for `n` more bytes, taken; `false` (nothing taken) if there is
    /// none.
    fn try_hold(&self, n: usize) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                h.checked_add(n).filter(|t| *t <= self.limit)
            })
            .is_ok()
    }

    fn release(&self, n: usize) {
        self.held.fetch_sub(n, Ordering::AcqRel);
    }
}

/// The two budgets a call's body draws on while it waits.
#[derive(Debug, Clone, Copy)]
pub struct Budgets {
    /// Calls without a slot: their bytes plus [`CALL_COST`] each.
    pub stalled: &'static StalledBudget,
    /// Calls that keep their slot: their bytes.
    pub with_slot: &'static StalledBudget,
}

impl Budgets {
    /// The process's: [`STALLED_BODY_BYTES`] and [`WAITING_BODY_BYTES`],
    /// every listener's bodies.
    pub fn process() -> Budgets {
        static STALLED: StalledBudget = StalledBudget::new(STALLED_BODY_BYTES);
        static WITH_SLOT: StalledBudget = StalledBudget::new(WAITING_BODY_BYTES);
        Budgets {
            stalled: &STALLED,
            with_slot: &WITH_SLOT,
        }
    }
}

/// What one call holds of its [`Budgets`].
#[derive(Debug, Default)]
pub(super) struct Held {
    stalled: usize,
    with_slot: usize,
}

impl Held {
    /// The call has no slot now: its `received` bytes, plus [`CALL_COST`],
    /// take their room among the stalled (leaving the room they had with a
    /// slot); `false`, nothing taken, if there is none.
    pub(super) fn without_slot(&mut self, b: Budgets, received: usize) -> bool {
        self.release_with_slot(b);
        // Held already (lent, then silent): nothing came since, so the
        // same bytes.
        if self.stalled > 0 {
            return true;
        }
        let cost = received + CALL_COST;
        if b.stalled.try_hold(cost) {
            self.stalled = cost;
            true
        } else {
            false
        }
    }

    /// The call waits keeping its slot: its `received` bytes take their
    /// room among those that do; `false` if there is none.
    pub(super) fn with_slot(&mut self, b: Budgets, received: usize) -> bool {
        if self.with_slot > 0 || received == 0 {
            return true;
        }
        if b.with_slot.try_hold(received) {
            self.with_slot = received;
            true
        } else {
            false
        }
    }

    fn release_with_slot(&mut self, b: Budgets) {
        if self.with_slot > 0 {
            b.with_slot.release(self.with_slot);
            self.with_slot = 0;
        }
    }

    /// The call waits no more (bytes came, or it is over): its room in
    /// both budgets is freed.
    pub(super) fn release(&mut self, b: Budgets) {
        self.release_with_slot(b);
        if self.stalled > 0 {
            b.stalled.release(self.stalled);
            self.stalled = 0;
        }
    }
}
