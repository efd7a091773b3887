//! The in-memory store: the data set's users in a map, behind a lock that is
//! held only for a lookup or an insert.

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

use uuid::Uuid;

use super::port::{StoreError, UserStore, now};
use crate::domain::{NewUser, User, from_dataset};

#[derive(Debug, Default)]
struct Inner {
    by_id: HashMap<Uuid, User>,
    /// username -> id, so that a duplicate is refused as Postgres's UNIQUE would.
    by_name: HashMap<String, Uuid>,
}

/// Users in memory.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: RwLock<Inner>,
}

impl MemoryStore {
    /// A store holding every user of the data set.
    pub fn seeded() -> Self {
        let mut inner = Inner::default();
        for d in dataset::users() {
            let u = from_dataset(&d);
            inner.by_name.insert(u.username.clone(), u.id);
            inner.by_id.insert(u.id, u);
        }
        MemoryStore {
            inner: RwLock::new(inner),
        }
    }

    /// How many users it holds.
    pub fn len(&self) -> usize {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .by_id
            .len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl UserStore for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn get(&self, id: Uuid) -> Result<Option<User>, StoreError> {
        let user = self
            .inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .by_id
            .get(&id)
            .cloned();
        Ok(user)
    }

    async fn register(&self, new: NewUser) -> Result<User, StoreError> {
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        if inner.by_name.contains_key(&new.username) {
            Err(StoreError::UsernameTaken(new.username))
        } else {
            let user = new.into_user(Uuid::new_v4(), now());
            inner.by_name.insert(user.username.clone(), user.id);
            inner.by_id.insert(user.id, user.clone());
            Ok(user)
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Gender;

    fn new_user(name: &str) -> NewUser {
        NewUser::parse(
            name.into(),
            "Ana".into(),
            "Silva".into(),
            "ana@example.com".into(),
            "+351 912 345 678".into(),
            Gender::Female,
            "1988-08-08",
        )
        .unwrap()
    }

    #[tokio::test]
    async fn it_holds_the_data_set_and_refuses_a_taken_username() {
        let s = MemoryStore::seeded();
        assert_eq!(s.len(), dataset::users().len());
        let fixed = dataset::fixed_user_id(100);
        assert_eq!(s.get(fixed).await.unwrap().unwrap().id, fixed);
        let u = s.register(new_user("ana.silva")).await.unwrap();
        assert_eq!(s.get(u.id).await.unwrap(), Some(u));
        assert!(matches!(
            s.register(new_user("ana.silva")).await,
            Err(StoreError::UsernameTaken(_))
        ));
    }
}
