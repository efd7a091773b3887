//! A real HAProxy in front of several backends, started and stopped by the
//! caller: the L4 and L7 balancers of the replicas work.
//!
//! - [`Mode::Tcp`] is an L4 balancer (`mode tcp`, `balance roundrobin`): it
//!   balances connections, so every request on a connection goes to the
//!   backend that connection landed on.
//! - [`Mode::Http`] is an L7 balancer (`mode http`, `balance roundrobin`):
//!   it balances requests, HTTP/2 streams and gRPC calls included. It keeps
//!   the client's protocol toward the backends: an HTTP/1.1 request goes on
//!   HTTP/1.1, an HTTP/2 (h2c) one on HTTP/2 (`proto h2`), so that only the
//!   balancer differs from a direct call.
//!
//! HAProxy is Debian's package (`apt-get install haproxy`); [`binary`] finds
//! it, and [`Haproxy::start`] says how to install it when it is missing.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

/// How a frontend balances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// L4: whole TCP connections, round robin.
    Tcp,
    /// L7: HTTP requests, round robin, each on the protocol the client
    /// spoke. `h2_only`: the clients speak HTTP/2 only (gRPC), so the
    /// frontend expects the HTTP/2 preface and needs no HTTP/1.1 path.
    Http { h2_only: bool },
}

/// One listening port of the balancer and the backends it spreads over.
#[derive(Debug, Clone)]
pub struct Frontend {
    /// A name for the config and the logs: letters, digits, `-` and `_`.
    pub name: String,
    pub mode: Mode,
    pub backends: Vec<SocketAddr>,
}

/// HAProxy's path, if it is installed.
pub fn binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|d| d.join("haproxy"))
        .find(|p| p.is_file())
}

/// What to tell someone without HAProxy.
pub const INSTALL_HINT: &str =
    "HAProxy is not installed: `apt-get install haproxy` (Debian's package, 2.6 or later)";

/// Where HAProxy runs and listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place<'a> {
    /// A network namespace to run in (`ip netns exec`), or the caller's.
    pub netns: Option<&'a str>,
    /// The address every frontend binds.
    pub bind: IpAddr,
    /// Where the caller reaches the frontends (the bind address, or an
    /// address of the namespace routed from the caller's).
    pub reach: IpAddr,
}

impl Place<'_> {
    /// On the caller's loopback.
    pub const LOCAL: Place<'static> = Place {
        netns: None,
        bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
        reach: IpAddr::V4(Ipv4Addr::LOCALHOST),
    };
}

/// The configuration for `frontends`, each listening on `bind` at its port
/// of `ports`.
pub fn config(frontends: &[Frontend], bind: IpAddr, ports: &[u16]) -> String {
    let mut c = String::new();
    let _ = writeln!(
        c,
        "global\n    maxconn 4000\n\ndefaults\n    timeout connect 2s\n    timeout client 120s\n    timeout server 120s\n    timeout tunnel 120s\n    timeout http-keep-alive 120s\n    option dontlognull\n"
    );
    for (f, port) in frontends.iter().zip(ports) {
        let name = &f.name;
        match f.mode {
            Mode::Tcp => {
                let _ = writeln!(
                    c,
                    "frontend {name}\n    mode tcp\n    bind {bind}:{port}\n    default_backend {name}\n"
                );
                backend(&mut c, name, "tcp", &f.backends, "");
            }
            Mode::Http { h2_only } => {
                let proto = if h2_only { " proto h2" } else { "" };
                let _ = writeln!(
                    c,
                    "frontend {name}\n    mode http\n    bind {bind}:{port}{proto}\n    use_backend {name}_h2 if {{ req.ver 2.0 }}\n    default_backend {name}_h1\n"
                );
                backend(&mut c, &format!("{name}_h1"), "http", &f.backends, "");
                backend(
                    &mut c,
                    &format!("{name}_h2"),
                    "http",
                    &f.backends,
                    " proto h2",
                );
            }
        }
    }
    c
}

fn backend(c: &mut String, name: &str, mode: &str, servers: &[SocketAddr], proto: &str) {
    let _ = writeln!(c, "backend {name}\n    mode {mode}\n    balance roundrobin");
    for (i, s) in servers.iter().enumerate() {
        let _ = writeln!(c, "    server s{i} {s}{proto}");
    }
    let _ = writeln!(c);
}

/// A running HAProxy, stopped when dropped.
#[derive(Debug)]
pub struct Haproxy {
    child: Child,
    addrs: Vec<SocketAddr>,
    dir: PathBuf,
}

impl Haproxy {
    /// Writes the config for `frontends` into `dir`, starts HAProxy on it,
    /// and waits (10 s at most) until every frontend accepts connections.
    pub fn start(frontends: &[Frontend], dir: &Path) -> anyhow::Result<Haproxy> {
        Haproxy::start_avoiding(frontends, dir, &[], Place::LOCAL)
    }

    /// [`Haproxy::start`], on none of the ports in `avoid`: ports the caller
    /// picked for other listeners and released, which the kernel may hand
    /// out again. HAProxy binds with `SO_REUSEPORT`, so a service binding
    /// the same port later fails while HAProxy answers in its place.
    /// `place` says where it runs and listens, and where it is reached.
    pub fn start_avoiding(
        frontends: &[Frontend],
        dir: &Path,
        avoid: &[u16],
        place: Place<'_>,
    ) -> anyhow::Result<Haproxy> {
        let bin = binary().context(INSTALL_HINT)?;
        let ports = free_ports(frontends.len(), avoid).context("finding free ports for HAProxy")?;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let cfg = dir.join("haproxy.cfg");
        std::fs::write(&cfg, config(frontends, place.bind, &ports))
            .with_context(|| format!("writing {}", cfg.display()))?;
        let check = Command::new(&bin)
            .arg("-c")
            .arg("-f")
            .arg(&cfg)
            .output()
            .context("running haproxy -c")?;
        anyhow::ensure!(
            check.status.success(),
            "HAProxy refuses {}: {}",
            cfg.display(),
            String::from_utf8_lossy(&check.stdout) + String::from_utf8_lossy(&check.stderr)
        );
        let log = std::fs::File::create(dir.join("haproxy.log"))?;
        let mut cmd = match place.netns {
            // `ip netns exec` enters the namespace and execs HAProxy, so the
            // child is HAProxy itself.
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&bin);
                c
            }
            None => Command::new(&bin),
        };
        let child = cmd
            // In the foreground, so that it is this child and stops with it.
            .arg("-db")
            .arg("-f")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let addrs: Vec<SocketAddr> = ports
            .iter()
            .map(|p| SocketAddr::new(place.reach, *p))
            .collect();
        let mut h = Haproxy {
            child,
            addrs,
            dir: dir.to_owned(),
        };
        h.wait_ready()?;
        Ok(h)
    }

    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        for addr in self.addrs.clone() {
            loop {
                if let Some(status) = self.child.try_wait()? {
                    anyhow::bail!(
                        "HAProxy exited ({status}) before it was ready; see {}",
                        self.dir.join("haproxy.log").display()
                    );
                }
                if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                    break;
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "HAProxy does not listen on {addr} after 10 s"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    /// Its process id, for its CPU.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where frontend `i` (in the order given to [`Haproxy::start`]) listens.
    pub fn addr(&self, i: usize) -> SocketAddr {
        self.addrs[i]
    }

    /// Stops HAProxy.
    pub fn stop(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `n` distinct ports free right now, none of them in `avoid`.
fn free_ports(n: usize, avoid: &[u16]) -> std::io::Result<Vec<u16>> {
    // Held until all are picked, so that none comes out twice.
    let mut held = Vec::new();
    while held.len() < n {
        let l = TcpListener::bind("127.0.0.1:0")?;
        if !avoid.contains(&l.local_addr()?.port()) {
            held.push(l);
        }
    }
    held.iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_and_never_the_avoided_ones() {
        // Ports the kernel just handed out and took back: the ones most
        // likely to come out again.
        let avoid: Vec<u16> = (0..200)
            .map(|_| {
                TcpListener::bind("127.0.0.1:0")
                    .and_then(|l| l.local_addr())
                    .map(|a| a.port())
            })
            .collect::<std::io::Result<_>>()
            .unwrap();
        for _ in 0..20 {
            let got = free_ports(3, &avoid).unwrap();
            assert_eq!(got.len(), 3);
            assert!(got.iter().all(|p| !avoid.contains(p)), "{got:?}");
            let mut d = got.clone();
            d.sort_unstable();
            d.dedup();
            assert_eq!(d.len(), 3, "{got:?}");
        }
    }

    #[test]
    fn an_l7_frontend_keeps_each_protocol_toward_the_backends() {
        let backends = vec![
            SocketAddr::from(([127, 0, 0, 1], 8082)),
            SocketAddr::from(([127, 0, 0, 2], 8082)),
        ];
        let c = config(
            &[
                Frontend {
                    name: "rest".into(),
                    mode: Mode::Http { h2_only: false },
                    backends: backends.clone(),
                },
                Frontend {
                    name: "tcp".into(),
                    mode: Mode::Tcp,
                    backends,
                },
            ],
            Place::LOCAL.bind,
            &[1000, 1001],
        );
        assert!(c.contains("bind 127.0.0.1:1000\n"), "{c}");
        assert!(c.contains("use_backend rest_h2 if { req.ver 2.0 }"), "{c}");
        assert!(c.contains("server s1 127.0.0.2:8082 proto h2"), "{c}");
        assert!(c.contains("backend rest_h1\n    mode http\n    balance roundrobin\n    server s0 127.0.0.1:8082\n"), "{c}");
        assert!(
            c.contains("frontend tcp\n    mode tcp\n    bind 127.0.0.1:1001"),
            "{c}"
        );
    }

    #[test]
    fn haproxy_accepts_the_config_it_is_given() {
        let Some(bin) = binary() else {
            panic!("{INSTALL_HINT}");
        };
        let dir = std::env::temp_dir().join(format!("haproxy-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("haproxy.cfg");
        let b = vec![SocketAddr::from(([127, 0, 0, 1], 1))];
        let frontends = [
            Frontend {
                name: "a".into(),
                mode: Mode::Tcp,
                backends: b.clone(),
            },
            Frontend {
                name: "b".into(),
                mode: Mode::Http { h2_only: true },
                backends: b.clone(),
            },
            Frontend {
                name: "c".into(),
                mode: Mode::Http { h2_only: false },
                backends: b,
            },
        ];
        std::fs::write(
            &cfg,
            config(&frontends, "0.0.0.0".parse().unwrap(), &[1, 2, 3]),
        )
        .unwrap();
        let out = Command::new(bin)
            .arg("-c")
            .arg("-f")
            .arg(&cfg)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
