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

/// An HTTP/1.1 answer read off a socket by [`read_h1`].
#[derive(Debug)]
pub struct RawAnswer {
    pub status: u16,
    /// Names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawAnswer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one HTTP/1.1 answer (its body by `content-length` or chunked) from
/// `r`, leaving what follows it in `r`: a client of our own that sees
/// exactly what the server wrote, for tests of connection handling.
pub async fn read_h1<R>(r: &mut tokio::io::BufReader<R>) -> std::io::Result<RawAnswer>
where
    R: tokio::io::AsyncRead + Unpin,
{
    use std::io::{Error, ErrorKind};
    use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _};
    let bad = |what: &str| Error::new(ErrorKind::InvalidData, what.to_owned());
    let mut line = String::new();
    if r.read_line(&mut line).await? == 0 {
        return Err(Error::new(
            ErrorKind::UnexpectedEof,
            "closed before an answer",
        ));
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(&format!("not a status line: {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).await?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(':').ok_or_else(|| bad(l))?;
        headers.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
    let mut a = RawAnswer {
        status,
        headers,
        body: Vec::new(),
    };
    if let Some(n) = a.header("content-length") {
        let n: usize = n.parse().map_err(|_| bad("content-length"))?;
        a.body.resize(n, 0);
        r.read_exact(&mut a.body).await?;
    } else if a.header("transfer-encoding") == Some("chunked") {
        loop {
            line.clear();
            r.read_line(&mut line).await?;
            let size = usize::from_str_radix(line.trim(), 16).map_err(|_| bad("chunk size"))?;
            let mut chunk = vec![0; size + 2];
            r.read_exact(&mut chunk).await?;
            if size == 0 {
                break;
            }
            a.body.extend_from_slice(&chunk[..size]);
        }
    }
    Ok(a)
}
