//! The in-memory store: the data set in a map, for protocol-overhead runs and
//! for a demo that needs nothing installed.

use std::collections::HashMap;
use std::sync::RwLock;

use model::{FieldSet, NewOrder, Order};
use uuid::Uuid;

use super::port::{Created, ListQuery, OrderPage, OrderStore, StoreError, now};

/// Orders by user, each user's sorted by id.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: RwLock<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_user: HashMap<Uuid, Vec<Order>>,
    /// Order id -> user id, for `get`.
    owner: HashMap<Uuid, Uuid>,
    /// Idempotency key -> (order id, request fingerprint).
    keys: HashMap<String, (Uuid, String)>,
}

impl Inner {
    fn find(&self, id: Uuid) -> Option<&Order> {
        let orders = self.by_user.get(self.owner.get(&id)?)?;
        orders
            .binary_search_by_key(&id, |o| o.id)
            .ok()
            .map(|i| &orders[i])
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn empty() -> Self {
        Self::default()
    }

    /// A store holding the deterministic data set.
    pub fn with_dataset() -> Self {
        let mut inner = Inner::default();
        for u in dataset::users() {
            let orders = dataset::orders_of(&u);
            for o in &orders {
                inner.owner.insert(o.id, u.id);
            }
            if !orders.is_empty() {
                inner.by_user.insert(u.id, orders);
            }
        }
        MemoryStore {
            inner: RwLock::new(inner),
        }
    }

    /// How many orders the store holds.
    pub fn len(&self) -> usize {
        self.read().owner.len()
    }

    /// Whether the store holds no order.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-written order:
        // every write below is a single insert. Keep serving.
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }
}

fn project(o: &Order, fields: FieldSet) -> Order {
    o.project(fields)
}

impl OrderStore for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn list(&self, q: &ListQuery) -> Result<OrderPage, StoreError> {
        let inner = self.read();
        let Some(all) = inner.by_user.get(&q.user_id) else {
            return Ok(OrderPage {
                orders: Vec::new(),
                next: None,
            });
        };
        let start = q
            .after
            .map_or(0, |after| all.partition_point(|o| o.id <= after));
        let orders = all[start..]
            .iter()
            .take(q.limit as usize + 1)
            .map(|o| project(o, q.fields))
            .collect();
        Ok(OrderPage::from_overfetch(orders, q.limit))
    }

    async fn get(&self, id: Uuid, fields: FieldSet) -> Result<Order, StoreError> {
        self.read()
            .find(id)
            .map(|o| project(o, fields))
            .ok_or(StoreError::NotFound(id))
    }

    async fn create(&self, new: NewOrder, key: &str) -> Result<Created, StoreError> {
        let fingerprint = new.fingerprint();
        let mut inner = self.write();
        if let Some((id, fp)) = inner.keys.get(key) {
            if *fp != fingerprint {
                return Err(StoreError::KeyReused(key.to_owned()));
            }
            let order = inner.find(*id).cloned().ok_or(StoreError::NotFound(*id))?;
            return Ok(Created {
                order,
                replayed: true,
            });
        }
        let order = new.into_order(Uuid::new_v4(), now());
        let orders = inner.by_user.entry(order.user_id).or_default();
        let at = orders.partition_point(|o| o.id < order.id);
        orders.insert(at, order.clone());
        inner.owner.insert(order.id, order.user_id);
        inner.keys.insert(key.to_owned(), (order.id, fingerprint));
        Ok(Created {
            order,
            replayed: false,
        })
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
