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

/// What [`post_then_get`] saw: whether the whole request (body and the GET
/// after it) was written, the first answer, and the second (or why there
/// was none: the connection was closed after the first).
pub struct PostThenGet {
    pub wrote: std::io::Result<()>,
    pub first: RawAnswer,
    pub second: std::io::Result<RawAnswer>,
}

/// Sends a POST of `body` to `path` on a new connection to `addr` (with
/// `headers` after `host` and `content-length`) and, on the same
/// connection, a GET of `/readyz`, writing while the answers are read (as
/// a client streaming its upload does): a raw client that sees exactly what
/// the server did with a body it answered before reading.
pub async fn post_then_get(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> PostThenGet {
    use std::time::Duration;
    use tokio::io::AsyncWriteExt as _;
    let s = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    let (r, mut w) = s.into_split();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let writer = tokio::spawn(async move {
        w.write_all(head.as_bytes()).await?;
        w.write_all(&body).await?;
        w.write_all(b"GET /readyz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await?;
        w.flush().await?;
        // Returned, so that the write half stays open until the answers
        // are read.
        Ok::<_, std::io::Error>(w)
    });
    let mut r = tokio::io::BufReader::new(r);
    let first = tokio::time::timeout(Duration::from_secs(10), read_h1(&mut r))
        .await
        .expect("an answer within 10 s")
        .expect("the first answer");
    let second = tokio::time::timeout(Duration::from_secs(10), read_h1(&mut r))
        .await
        .expect("the second answer or the end within 10 s");
    let wrote = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("the write ends within 10 s")
        .expect("the writer task")
        .map(drop);
    PostThenGet {
        wrote,
        first,
        second,
    }
}
