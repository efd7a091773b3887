//! Whatever a request holds, its error stays small: no problem body and no
//! `grpc-message` over about 1 KiB, where each of these echoed its input
//! whole (a 60 KB path, a 60 KB header, a 100 KB JSON key).

use crate::helpers::{Backend, spawn};

/// The most an error may take, bytes: the 512-byte cap of its text and the
/// rest of the problem around it.
const SMALL: usize = 1536;

#[tokio::test]
async fn errors_about_huge_input_stay_small() {
    let app = spawn(Backend::Memory).await;
    let c = app.h1();
    let huge = "a".repeat(60_000);
    let mut answers = Vec::new();
    answers.push((
        "unknown route",
        c.get(app.url(&format!("/{huge}"))).send().await.unwrap(),
    ));
    answers.push((
        "problem page",
        c.get(app.url(&format!("/problems/{huge}")))
            .send()
            .await
            .unwrap(),
    ));
    answers.push((
        "406",
        c.get(app.url("/v2/orders?user_id=00000000-0000-0000-0000-000000000010"))
            .header("accept", format!("text/{huge}"))
            .send()
            .await
            .unwrap(),
    ));
    answers.push((
        "415",
        c.post(app.url("/v2/orders"))
            .header("content-type", format!("text/{huge}"))
            .body("{}")
            .send()
            .await
            .unwrap(),
    ));
    let key = "k".repeat(100_000);
    answers.push((
        "unknown JSON key",
        c.post(app.url("/v2/orders"))
            .header("content-type", "application/json")
            .body(format!("{{\"{key}\": 1}}"))
            .send()
            .await
            .unwrap(),
    ));
    answers.push((
        "wrong-type JSON string",
        c.post(app.url("/v2/orders"))
            .header("content-type", "application/json")
            .body(format!("{{\"quantity\": \"{key}\"}}"))
            .send()
            .await
            .unwrap(),
    ));
    for (what, res) in answers {
        let status = res.status();
        assert!(status.is_client_error(), "{what}: {status}");
        let body = res.bytes().await.unwrap();
        assert!(
            body.len() <= SMALL,
            "{what}: a {status} of {} bytes: {}…",
            body.len(),
            String::from_utf8_lossy(&body[..200.min(body.len())])
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn a_connect_error_about_a_huge_body_stays_small() {
    let app = spawn(Backend::Memory).await;
    let key = "k".repeat(100_000);
    for client in [app.h1(), app.h2c()] {
        let res = client
            .post(app.url("/order.v2.OrderService/ListOrders"))
            .header("content-type", "application/json")
            .body(format!("{{\"pageSize\": \"{key}\"}}"))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 400);
        let body = res.bytes().await.unwrap();
        assert!(body.len() <= SMALL, "a 400 of {} bytes", body.len());
        let e: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(e["code"], "invalid_argument", "{e}");
    }
    app.stop().await;
}

/// A 501 is the client's mistake (here a Connect request compressed with
/// an encoding the server does not read): the real binary logs it at
/// DEBUG, never at ERROR as tower-http's trace layer does by default.
#[tokio::test]
async fn a_501_is_logged_as_the_clients_mistake_not_as_an_error() {
    let proc =
        crate::helpers::start_binary(&[("RUST_LOG", "info,telemetry::http_failure=debug")]).await;
    let rest = proc.addr("rest");
    let res = reqwest::Client::new()
        .post(format!("http://{rest}/order.v2.OrderService/ListOrders"))
        .header("content-type", "application/json")
        .header("content-encoding", "br")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 501);
    let levels = |proc: &testkit::process::Proc| -> Vec<(String, String)> {
        proc.log_lines()
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|v| {
                (
                    v["level"].as_str().unwrap_or_default().to_owned(),
                    v["fields"]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                )
            })
            .collect()
    };
    // The trace layer's line comes once the answer is sent.
    let mut seen = levels(&proc);
    for _ in 0..50 {
        if seen.iter().any(|(_, m)| m.contains("does not implement")) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        seen = levels(&proc);
    }
    assert!(
        seen.iter()
            .any(|(l, m)| l == "DEBUG" && m.contains("does not implement")),
        "{seen:?}"
    );
    assert!(!seen.iter().any(|(l, _)| l == "ERROR"), "{seen:?}");
    proc.sigterm().await;
}
