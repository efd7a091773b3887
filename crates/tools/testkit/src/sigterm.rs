//! SIGTERM under load, as both services' tests run it: callers that repeat
//! a request until the service is gone, each keeping a [`Tally`] of what
//! became of its requests, and the sum that says whether anything was lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// What happened to one caller's requests.
#[derive(Debug, Default)]
pub struct Tally {
    pub answered: usize,
    /// Refused at connect (the listener had closed) or handed back unsent:
    /// nothing was sent.
    pub refused: usize,
    /// Sent, and no answer came: what must never happen.
    pub dropped: Vec<String>,
}

/// A caller, running: its label and its tally once it stops.
pub type Caller = tokio::task::JoinHandle<(String, Tally)>;

/// A caller that GETs `url` on `client` until a request is refused at
/// connect (then it stops) or goes wrong: a good answer is a 200 with a body
/// longer than `min_body`. Each good answer also counts in `answered`.
pub fn rest_caller(
    label: String,
    client: reqwest::Client,
    url: String,
    min_body: usize,
    answered: Arc<AtomicUsize>,
) -> Caller {
    tokio::spawn(async move {
        let mut t = Tally::default();
        loop {
            match client.get(&url).send().await {
                Ok(res) => {
                    let status = res.status();
                    match res.bytes().await {
                        Ok(body) if status == 200 && body.len() > min_body => {
                            t.answered += 1;
                            answered.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(body) => {
                            t.dropped.push(format!(
                                "{label}: {status}: {}",
                                String::from_utf8_lossy(&body[..body.len().min(300)])
                            ));
                            return (label, t);
                        }
                        Err(e) => {
                            t.dropped.push(format!("{label}: body cut: {e:?}"));
                            return (label, t);
                        }
                    }
                }
                Err(e) if e.is_connect() => {
                    t.refused += 1;
                    return (label, t);
                }
                Err(e) => {
                    t.dropped.push(format!("{label}: {e:?}"));
                    return (label, t);
                }
            }
        }
    })
}

/// Waits (30 s at most) until every counter reached `at_least`: the load
/// has got going on every caller.
pub async fn load_gets_going(counters: &[Arc<AtomicUsize>], at_least: usize) {
    tokio::time::timeout(Duration::from_secs(60), async {
        while counters
            .iter()
            .any(|c| c.load(Ordering::Relaxed) < at_least)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the load gets going");
}

/// Waits for every caller to stop once the service is gone, and checks that
/// nothing sent was lost, that each caller ended on a request never sent,
/// and that each was answered at least `answered_each` times. Returns the
/// sum.
pub async fn nothing_lost(callers: Vec<Caller>, answered_each: usize) -> Tally {
    let n = callers.len();
    let mut total = Tally::default();
    for c in callers {
        let (label, t) = tokio::time::timeout(Duration::from_secs(30), c)
            .await
            .expect("every caller stops once the service is gone")
            .expect("a caller does not panic");
        assert!(t.answered >= answered_each, "{label}: {t:?}");
        total.answered += t.answered;
        total.refused += t.refused;
        total.dropped.extend(t.dropped);
    }
    eprintln!(
        "{} answered, {} refused before sending, {} dropped",
        total.answered,
        total.refused,
        total.dropped.len()
    );
    assert!(
        total.dropped.is_empty(),
        "requests lost: {:#?}",
        total.dropped
    );
    assert_eq!(total.refused, n, "each caller ends on a refusal");
    total
}
