//! RFC 9457 problems as both services' tests check them: an error answer's
//! body, and the OpenAPI document's error answers.

use model::json::Problem;

/// The RFC 9457 problem of an error answer, checked for what every problem
/// has: the media type (whatever the request's `Accept` said), `status`
/// equal to the answer's, a `type` that names the `error` kind, a title
/// and a detail.
pub async fn problem_of(res: reqwest::Response) -> Problem {
    let status = res.status().as_u16();
    assert_eq!(
        res.headers()["content-type"],
        "application/problem+json",
        "{:?}",
        res.url()
    );
    let e: Problem = res.json().await.expect("a problem body");
    assert_eq!(e.status, status, "{e:?}");
    assert_eq!(e.type_uri, format!("/problems/{}", e.error), "{e:?}");
    assert!(!e.title.is_empty() && !e.detail.is_empty(), "{e:?}");
    e
}

/// Checks that every error answer (4xx, 5xx) an OpenAPI document describes
/// is `application/problem+json` and only that, with the `Problem` schema;
/// returns how many there are.
pub fn openapi_errors_are_problems(doc: &serde_json::Value) -> usize {
    let mut errors = 0;
    let object = |v: &serde_json::Value| v.as_object().cloned().unwrap_or_default();
    for (path, item) in object(&doc["paths"]) {
        for (method, op) in object(&item) {
            for (status, res) in object(&op["responses"]) {
                if status.as_str() < "400" {
                    continue;
                }
                errors += 1;
                let content = object(&res["content"]);
                assert_eq!(
                    content.keys().collect::<Vec<_>>(),
                    ["application/problem+json"],
                    "{method} {path} {status}"
                );
                assert_eq!(
                    content["application/problem+json"]["schema"]["$ref"],
                    "#/components/schemas/Problem",
                    "{method} {path} {status}"
                );
            }
        }
    }
    errors
}
