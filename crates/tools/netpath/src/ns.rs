//! Network namespaces and the `ip` commands that make and remove them, the
//! host-wide index that keeps two paths' names and addresses apart, the
//! clean-up of what a crashed owner left, and running code on a thread
//! inside a namespace.

use std::collections::BTreeSet;
use std::fs::File;
use std::net::Ipv4Addr;
use std::process::Command;

use anyhow::{Context as _, bail};

/// Every namespace this crate makes is `netpath-{owner pid}-{index}-{a|b}`.
pub const PREFIX: &str = "netpath-";

/// The most paths one host holds at once.
const MAX_INDEX: u32 = 4096;

/// Runs `ip` with `args`; its own error output on failure.
pub fn ip(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running `ip` (iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Why this machine cannot make a path, in one line; `None` if it can.
pub fn unavailable() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("the packet path needs root (network namespaces and TUN devices)".into());
    }
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
    {
        return Some(format!("the packet path needs /dev/net/tun: {e}"));
    }
    if ip(&["-V"]).is_err() {
        return Some("the packet path needs the `ip` command (iproute2)".into());
    }
    None
}

/// A parsed name of ours: (owner pid, index, side).
fn parse(name: &str) -> Option<(u32, u32, char)> {
    let rest = name.strip_prefix(PREFIX)?;
    let mut parts = rest.split('-');
    let pid = parts.next()?.parse().ok()?;
    let idx = parts.next()?.parse().ok()?;
    let side = parts.next()?.chars().next()?;
    Some((pid, idx, side))
}

/// The namespaces of ours that exist now.
fn ours() -> anyhow::Result<Vec<String>> {
    Ok(ip(&["netns", "list"])?
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| parse(n).is_some())
        .map(str::to_owned)
        .collect())
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Removes the namespaces whose owner is gone (a crash, a kill -9); returns
/// their names. Deleting a namespace takes its devices with it.
pub fn clean_stale() -> anyhow::Result<Vec<String>> {
    let mut removed = Vec::new();
    for n in ours()? {
        if parse(&n).is_some_and(|(pid, _, _)| !alive(pid)) {
            ip(&["netns", "del", &n])?;
            removed.push(n);
        }
    }
    Ok(removed)
}

/// The host-wide lock held while an index is chosen and its namespaces made.
pub fn lock() -> anyhow::Result<nix::fcntl::Flock<File>> {
    let f = File::create("/run/netpath.lock").context("creating /run/netpath.lock")?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow::anyhow!("locking /run/netpath.lock: {e}"))
}

/// The lowest index no namespace of ours uses, nor a device of ours left
/// on the host (call under [`lock`]). A removed namespace lives on, with its
/// veth pair's host end, while its orphaned TCP sockets finish (up to a
/// few minutes); its index is not reused until they have.
pub fn free_index() -> anyhow::Result<u32> {
    let mut used: BTreeSet<u32> = ours()?
        .iter()
        .filter_map(|n| parse(n).map(|(_, i, _)| i))
        .collect();
    for line in ip(&["-o", "link", "show"])?.lines() {
        let name = line.split(": ").nth(1).unwrap_or("");
        let name = name.split('@').next().unwrap_or("");
        if let Some(i) = name
            .strip_prefix("npv")
            .or_else(|| name.strip_prefix("npt"))
            .and_then(|r| r.strip_suffix(['a', 'b']))
            .and_then(|r| r.parse().ok())
        {
            used.insert(i);
        }
    }
    (0..MAX_INDEX)
        .find(|i| !used.contains(i))
        .context("every netpath index is in use")
}

/// The names and addresses of path `index`: within 10.96.0.0/12, 32
/// addresses each: .1/.2 the path's ends (A, B), .5/.6 the host and A on
/// A's control link, .9/.10 the host and B on B's, and .16 to .31 more
/// addresses a side can take on the path ([`Plan::extra`]).
#[derive(Debug, Clone)]
pub struct Plan {
    pub index: u32,
    pub ns: [String; 2],
    pub tun: [String; 2],
    pub veth: [String; 2],
    pub path: [Ipv4Addr; 2],
    pub control: [Ipv4Addr; 2],
    pub host: [Ipv4Addr; 2],
}

impl Plan {
    pub fn new(index: u32) -> Plan {
        let base = u32::from(Ipv4Addr::new(10, 96, 0, 0)) + index * BLOCK;
        let at = |o: u32| Ipv4Addr::from(base + o);
        let pid = std::process::id();
        Plan {
            index,
            ns: [
                format!("{PREFIX}{pid}-{index}-a"),
                format!("{PREFIX}{pid}-{index}-b"),
            ],
            tun: [format!("npt{index}a"), format!("npt{index}b")],
            veth: [format!("npv{index}a"), format!("npv{index}b")],
            path: [at(1), at(2)],
            control: [at(6), at(10)],
            host: [at(5), at(9)],
        }
    }

    /// The `k`-th more address on the path (0 to [`EXTRA`] - 1).
    pub fn extra(&self, k: u32) -> Option<Ipv4Addr> {
        (k < EXTRA).then(|| {
            Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 96, 0, 0)) + self.index * BLOCK + 16 + k)
        })
    }
}

/// Addresses per path.
const BLOCK: u32 = 32;

/// More addresses a path's sides can take, beyond one each.
pub const EXTRA: u32 = 16;

/// Runs `f` on a new thread that has entered namespace `ns`: sockets it
/// creates belong to that namespace for their whole life, whichever thread
/// uses them afterwards.
pub fn in_namespace<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> anyhow::Result<T> {
    let path = format!("/run/netns/{ns}");
    let file = File::open(&path).with_context(|| format!("opening {path}"))?;
    std::thread::scope(|s| {
        s.spawn(move || {
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                .with_context(|| format!("entering {ns}"))?;
            Ok(f())
        })
        .join()
        .map_err(|_| anyhow::anyhow!("a thread in {ns} panicked"))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_owner_and_index_and_addresses_do_not_overlap() {
        let p = Plan::new(7);
        assert_eq!(parse(&p.ns[1]), Some((std::process::id(), 7, 'b')));
        assert!(p.tun.iter().chain(&p.veth).all(|n| n.len() <= 15));
        let q = Plan::new(8);
        let all = |p: &Plan| -> Vec<Ipv4Addr> {
            let mut v: Vec<Ipv4Addr> = p
                .path
                .iter()
                .chain(&p.control)
                .chain(&p.host)
                .copied()
                .collect();
            v.extend((0..EXTRA).map(|k| p.extra(k).unwrap()));
            v
        };
        let (mine, next) = (all(&p), all(&q));
        for a in &next {
            assert!(!mine.contains(a), "{a}");
        }
        let mut distinct = mine.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), mine.len());
        assert_eq!(p.extra(EXTRA), None);
        // The last path's last address is still in 10.96.0.0/12.
        let last = Plan::new(MAX_INDEX - 1);
        assert_eq!(last.extra(EXTRA - 1), Some(Ipv4Addr::new(10, 97, 255, 255)));
        assert_eq!(last.host[1], Ipv4Addr::new(10, 97, 255, 233));
    }
}
