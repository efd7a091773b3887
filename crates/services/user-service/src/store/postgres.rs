//! The Postgres store, through sqlx, with the migrations of
//! `migrations/users` embedded and applied at start.
//!
//! Queries are runtime-checked `sqlx::query_as` with bound parameters (no
//! `.sqlx/` offline data is needed to build, and nothing is ever formatted
//! into SQL).

use anyhow::Context as _;
use chrono::{DateTime, NaiveDate, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::port::{StoreError, UserStore, now};
use crate::domain::{Gender, NewUser, User, from_dataset};

/// The migrations of `migrations/users`, embedded at build time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../../migrations/users");

/// Users in Postgres.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
}

#[derive(sqlx::FromRow)]
struct UserRow {
    id: Uuid,
    username: String,
    first_name: String,
    last_name: String,
    email: String,
    phone: String,
    gender: i16,
    birth_date: NaiveDate,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<UserRow> for User {
    type Error = StoreError;
    fn try_from(r: UserRow) -> Result<Self, Self::Error> {
        Ok(User {
            id: r.id,
            username: r.username,
            first_name: r.first_name,
            last_name: r.last_name,
            email: r.email,
            phone: r.phone,
            gender: Gender::from_i32(i32::from(r.gender)).map_err(|e| {
                anyhow::anyhow!("user {} has a bad gender in the database: {e}", r.id)
            })?,
            birth_date: r.birth_date,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

impl PgStore {
    /// Connects (failing fast if Postgres is not there) and applies the
    /// migrations.
    pub async fn connect(s: &service_kit::db::PoolSettings) -> anyhow::Result<Self> {
        let pool = service_kit::db::connect(s, &MIGRATOR, "migrations/users")
            .await
            .context("opening the users database")?;
        Ok(PgStore { pool })
    }

    /// A store on an existing pool (already migrated).
    pub fn from_pool(pool: PgPool) -> Self {
        PgStore { pool }
    }

    /// The pool, for tests and the seed command.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Inserts the data set's users that are not there yet, in one statement
    /// per thousand users; running it twice changes nothing. Returns how many
    /// rows were inserted.
    #[tracing::instrument(skip_all)]
    pub async fn seed(&self) -> anyhow::Result<u64> {
        let users: Vec<User> = dataset::users().iter().map(from_dataset).collect();
        let mut inserted = 0;
        for chunk in users.chunks(1000) {
            let result = insert(chunk)
                .execute(&self.pool)
                .await
                .context("inserting the data set's users")?;
            inserted += result.rows_affected();
        }
        Ok(inserted)
    }
}

/// One statement inserting `users`, each column bound as an array, skipping
/// a user whose id or username is there already (the rows affected say how
/// many were new): the one insert of users, for a registration and for the
/// seed.
fn insert(
    users: &[User],
) -> sqlx::query::Query<'static, sqlx::Postgres, sqlx::postgres::PgArguments> {
    let text = |f: fn(&User) -> &str| users.iter().map(|u| f(u).to_owned()).collect::<Vec<_>>();
    sqlx::query(
        "INSERT INTO users (id, username, first_name, last_name, email, phone, gender, birth_date, created_at, updated_at)
         SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                              $7::smallint[], $8::date[], $9::timestamptz[], $10::timestamptz[])
         -- No conflict target: an id or a username already there is skipped.
         ON CONFLICT DO NOTHING",
    )
    .bind(users.iter().map(|u| u.id).collect::<Vec<Uuid>>())
    .bind(text(|u| &u.username))
    .bind(text(|u| &u.first_name))
    .bind(text(|u| &u.last_name))
    .bind(text(|u| &u.email))
    .bind(text(|u| &u.phone))
    .bind(users.iter().map(|u| u.gender.as_i16()).collect::<Vec<i16>>())
    .bind(users.iter().map(|u| u.birth_date).collect::<Vec<NaiveDate>>())
    .bind(users.iter().map(|u| u.created_at).collect::<Vec<DateTime<Utc>>>())
    .bind(users.iter().map(|u| u.updated_at).collect::<Vec<DateTime<Utc>>>())
}

impl UserStore for PgStore {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    async fn get(&self, id: Uuid) -> Result<Option<User>, StoreError> {
        let row: Option<UserRow> = sqlx::query_as(
            "SELECT id, username, first_name, last_name, email, phone, gender, birth_date, created_at, updated_at
             FROM users WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(User::try_from).transpose()
    }

    async fn register(&self, new: NewUser) -> Result<User, StoreError> {
        let user = new.into_user(Uuid::new_v4(), now());
        let inserted = insert(std::slice::from_ref(&user))
            .execute(&self.pool)
            .await?;
        // The id is new (v4), so a skipped row is a taken username.
        if inserted.rows_affected() == 0 {
            return Err(StoreError::UsernameTaken(user.username));
        }
        Ok(user)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}
