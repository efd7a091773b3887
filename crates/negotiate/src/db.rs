//! What both services do alike with their Postgres: how a driver error is
//! classified, how a row's time is stamped, and how a URL is logged.

/// What a database error means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The database cannot answer now (down, restarting, the pool is
    /// exhausted or closed, the connection broke): 503 / UNAVAILABLE, and
    /// worth a retry.
    Unavailable,
    /// Anything else: a bug or a constraint the caller did not expect.
    Other,
}

/// Classifies a driver error. The server ending a connection mid-query is
/// unavailability too: SQLSTATE class 57P (a restart or shutdown, such as
/// 57P01 admin_shutdown) and 08 (connection exceptions).
pub fn classify(e: &sqlx::Error) -> Failure {
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => Failure::Unavailable,
        sqlx::Error::Database(d)
            if d.code()
                .is_some_and(|c| c.starts_with("57P") || c.starts_with("08")) =>
        {
            Failure::Unavailable
        }
        _ => Failure::Other,
    }
}

/// The time a new row is stamped with, cut to the microsecond Postgres
/// keeps, so that what a write returns is what a later read returns.
pub fn now() -> chrono::DateTime<chrono::Utc> {
    use chrono::SubsecRound as _;
    chrono::Utc::now().trunc_subsecs(6)
}

/// A database URL with its password, if any, replaced by `***`: for logs
/// and errors.
pub fn redact(url: &str) -> String {
    let Some((scheme, after)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((userinfo, rest)) = after.rsplit_once('@') else {
        return url.to_owned();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{rest}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_survives_redaction() {
        assert_eq!(
            redact("postgres://app:secret@db:5432/orders"),
            "postgres://app:***@db:5432/orders"
        );
        // An `@` in the password is still the password's.
        assert_eq!(
            redact("postgres://app:p@ss@db/orders"),
            "postgres://app:***@db/orders"
        );
        assert_eq!(redact("postgres://postgres@h/x"), "postgres://postgres@h/x");
        assert_eq!(redact("not a url"), "not a url");
    }

    #[test]
    fn a_lost_server_is_unavailable_and_a_bug_is_not() {
        assert_eq!(classify(&sqlx::Error::PoolTimedOut), Failure::Unavailable);
        assert_eq!(
            classify(&sqlx::Error::Io(std::io::Error::other("reset"))),
            Failure::Unavailable
        );
        assert_eq!(classify(&sqlx::Error::RowNotFound), Failure::Other);
    }

    #[test]
    fn now_is_cut_to_microseconds() {
        use chrono::Timelike as _;
        assert_eq!(now().nanosecond() % 1_000, 0);
    }
}
