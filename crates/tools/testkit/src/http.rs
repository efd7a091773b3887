//! Small HTTP helpers the services' tests share.

/// The body of a GET of `url` on `client`, as text, whatever its status
/// (a service's `/metrics`, say).
pub async fn get_text(client: &reqwest::Client, url: &str) -> String {
    let res = client
        .get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    res.text()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: the body: {e}"))
}
