//! What the lab reads from `/proc`: CPU time and peak memory of a process,
//! sockets by TCP state, and the machine's description.
//!
//! order-service has no `/metrics` of its own yet, and k6 reports nothing
//! about itself, so `/proc` is the one source that treats all three
//! processes alike. Parsers take text so that tests can feed them samples.

use std::path::Path;

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

/// CPU times from `/proc/PID/stat`, in clock ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuTicks {
    /// utime + stime: the process's own threads.
    pub own: u64,
    /// cutime + cstime: children it has waited for. For the lab itself this
    /// is how k6's CPU is read exactly, once k6 has exited and been reaped.
    pub children: u64,
}

/// Parses the text of `/proc/PID/stat`.
pub fn parse_stat(text: &str) -> anyhow::Result<CpuTicks> {
    // The command name (field 2) is in parentheses and may itself contain
    // spaces and parentheses: the fields proper start after the last ')'.
    let after = text
        .rfind(')')
        .map(|i| &text[i + 1..])
        .context("no ')' after the command name")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `fields[0]` is field 3 (state); utime is field 14, so index 11.
    let num = |i: usize| -> anyhow::Result<u64> {
        fields
            .get(i)
            .with_context(|| format!("field {} is missing", i + 3))?
            .parse()
            .with_context(|| format!("field {} is not a number", i + 3))
    };
    Ok(CpuTicks {
        own: num(11)? + num(12)?,
        children: num(13)? + num(14)?,
    })
}

/// The CPU ticks of a running process.
pub fn cpu_ticks(pid: u32) -> anyhow::Result<CpuTicks> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse_stat(&text).with_context(|| format!("parsing {path}"))
}

/// The lab's own CPU ticks (children included).
pub fn self_ticks() -> anyhow::Result<CpuTicks> {
    let text = std::fs::read_to_string("/proc/self/stat").context("reading /proc/self/stat")?;
    parse_stat(&text)
}

/// A `kB` field of `/proc/PID/status` such as `VmHWM` (peak resident set)
/// or `VmRSS`, in kB.
pub fn parse_status_kb(text: &str, field: &str) -> anyhow::Result<u64> {
    let line = text
        .lines()
        .find(|l| l.split(':').next() == Some(field))
        .with_context(|| format!("no {field} line"))?;
    let value = line[field.len() + 1..].trim();
    let number = value.strip_suffix("kB").unwrap_or(value).trim();
    number
        .parse()
        .with_context(|| format!("{field} {value:?} is not a number of kB"))
}

/// Peak resident set size of a running process, in kB.
pub fn peak_rss_kb(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse_status_kb(&text, "VmHWM").with_context(|| format!("parsing {path}"))
}

/// The CPUs a process may run on, as the kernel lists them
/// (`Cpus_allowed_list`: "0", "0-1", "0,2").
pub fn cpus_allowed(pid: u32) -> anyhow::Result<String> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|s| s.trim().to_owned())
        .with_context(|| format!("{path} has no Cpus_allowed_list"))
}

/// Clock ticks per second (`getconf CLK_TCK`); 100 on every Linux the lab
/// has met, used if `getconf` is missing.
pub fn clock_ticks_per_second() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(100)
}

/// Busy CPU ticks of the whole machine (all cores) from `/proc/stat` text:
/// user + nice + system + irq + softirq + steal, idle and iowait left out.
pub fn parse_machine_busy(text: &str) -> anyhow::Result<u64> {
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .context("no aggregate cpu line")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().context("a cpu field is not a number"))
        .collect::<anyhow::Result<_>>()?;
    if v.len() < 8 {
        bail!("the cpu line has {} fields, 8 expected", v.len());
    }
    // user nice system idle iowait irq softirq steal
    Ok(v[0] + v[1] + v[2] + v[5] + v[6] + v[7])
}

/// Busy CPU ticks of the whole machine now.
pub fn machine_busy_ticks() -> anyhow::Result<u64> {
    let text = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    parse_machine_busy(&text)
}

/// Sockets touching one port, by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpStates {
    pub established: u32,
    pub time_wait: u32,
}

/// Counts the sockets of `/proc/net/tcp` (or `tcp6`) text whose local or
/// remote port is `port`. Both ends are counted because either side of a
/// closed connection may be the one left in TIME_WAIT (whoever closed first).
pub fn parse_net_tcp(text: &str, port: u16) -> anyhow::Result<TcpStates> {
    let mut out = TcpStates::default();
    for (i, line) in text.lines().enumerate().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 4 {
            continue;
        }
        let port_of = |addr: &str| -> anyhow::Result<u16> {
            let hex = addr
                .rsplit(':')
                .next()
                .with_context(|| format!("line {}: bad address {addr:?}", i + 1))?;
            u16::from_str_radix(hex, 16)
                .with_context(|| format!("line {}: bad port in {addr:?}", i + 1))
        };
        if port_of(cols[1])? != port && port_of(cols[2])? != port {
            continue;
        }
        match cols[3] {
            "01" => out.established += 1,
            "06" => out.time_wait += 1,
            _ => {}
        }
    }
    Ok(out)
}

/// Sockets of this machine touching `port`, IPv4 and IPv6 together.
pub fn tcp_states(pid: u32, port: u16) -> anyhow::Result<TcpStates> {
    let mut total = TcpStates::default();
    for name in ["tcp", "tcp6"] {
        // The process's own network namespace: the host's, or its packet
        // path's.
        let file = format!("/proc/{pid}/net/{name}");
        if !Path::new(&file).exists() {
            continue;
        }
        let text = std::fs::read_to_string(&file).with_context(|| format!("reading {file}"))?;
        let s = parse_net_tcp(&text, port).with_context(|| format!("parsing {file}"))?;
        total.established += s.established;
        total.time_wait += s.time_wait;
    }
    Ok(total)
}

/// The ephemeral port range (`net.ipv4.ip_local_port_range`): how many
/// client ports TIME_WAIT sockets can use up before connects fail.
pub fn ephemeral_ports() -> Option<u32> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = text.split_whitespace().map(|s| s.parse::<u32>().ok());
    let (lo, hi) = (it.next()??, it.next()??);
    Some(hi.saturating_sub(lo) + 1)
}

/// The CPU model from `/proc/cpuinfo` text.
pub fn parse_cpu_model(text: &str) -> Option<String> {
    text.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
}

/// Total memory in kB from `/proc/meminfo` text.
pub fn parse_mem_total_kb(text: &str) -> anyhow::Result<u64> {
    parse_status_kb(text, "MemTotal")
}

/// Checks a pid is alive (its `/proc` entry exists and is not a zombie).
pub fn is_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => text
            .rfind(')')
            .and_then(|i| text[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// The own CPU ticks of every process whose command name is `name`, by
/// pid, read from a `/proc` (`proc` is `/proc` but for tests). Processes
/// that vanish while being read are left out.
pub fn ticks_of_named(proc: &Path, name: &str) -> std::collections::BTreeMap<u32, u64> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(proc) else {
        return out;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let comm = text
            .find('(')
            .zip(text.rfind(')'))
            .map(|(a, b)| &text[a + 1..b]);
        if comm == Some(name)
            && let Ok(t) = parse_stat(&text)
        {
            out.insert(pid, t.own);
        }
    }
    out
}

/// Ticks spent between two readings of [`ticks_of_named`]: what each
/// process alive at the end spent since the first reading (all of it, for
/// one started in between). A process that ended in between is lost: an
/// undercount, never an overcount.
pub fn ticks_between(
    before: &std::collections::BTreeMap<u32, u64>,
    after: &std::collections::BTreeMap<u32, u64>,
) -> u64 {
    after
        .iter()
        .map(|(pid, t)| t.saturating_sub(before.get(pid).copied().unwrap_or(0)))
        .sum()
}

/// Refuses to run where `/proc` is missing (the lab reads it everywhere).
pub fn require_procfs() -> anyhow::Result<()> {
    if !Path::new("/proc/self/stat").exists() {
        bail!("the lab needs Linux's /proc (CPU and memory of each process are read there)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_are_found_by_name_and_their_cpu_summed_over_a_window() {
        let dir = std::env::temp_dir().join(format!("lab-procfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let write = |pid: u32, comm: &str, utime: u64| {
            let d = dir.join(pid.to_string());
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(
                d.join("stat"),
                format!("{pid} ({comm}) S 1 1 1 0 -1 0 0 0 0 0 {utime} 5 0 0 20 0 1 0 1 1 1"),
            )
            .unwrap();
        };
        write(100, "postgres", 10);
        write(101, "postgres", 20);
        write(200, "user-service", 999);
        std::fs::create_dir_all(dir.join("self")).unwrap();
        let before = ticks_of_named(&dir, "postgres");
        assert_eq!(before.len(), 2, "{before:?}");
        // 100 spends 30 ticks, 101 ends, 102 starts and spends 7.
        write(100, "postgres", 40);
        std::fs::remove_dir_all(dir.join("101")).unwrap();
        write(102, "postgres", 2);
        let after = ticks_of_named(&dir, "postgres");
        assert_eq!(ticks_between(&before, &after), 30 + 7);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    const STAT: &str = "12345 (user-service (x)) S 1 12345 12345 0 -1 4194560 1000 0 0 0 \
                        250 50 7 3 20 0 9 0 100 200000000 3000 18446744073709551615";

    #[test]
    fn stat_times_are_read_after_an_awkward_command_name() {
        let t = parse_stat(STAT).expect("parses");
        assert_eq!(t.own, 300);
        assert_eq!(t.children, 10);
    }

    #[test]
    fn a_truncated_stat_is_an_error() {
        assert!(parse_stat("1 (x) S 1 2 3").is_err());
        assert!(parse_stat("no parenthesis").is_err());
    }

    #[test]
    fn status_fields_are_read_in_kb() {
        let text = "Name:\tk6\nVmPeak:\t  900 kB\nVmHWM:\t   51234 kB\nVmRSS:\t 40000 kB\n";
        assert_eq!(parse_status_kb(text, "VmHWM").expect("present"), 51234);
        assert_eq!(parse_status_kb(text, "VmRSS").expect("present"), 40000);
        assert!(parse_status_kb(text, "VmSwap").is_err());
        let mem = "MemTotal:       24576000 kB\nMemFree: 1 kB\n";
        assert_eq!(parse_mem_total_kb(mem).expect("present"), 24_576_000);
    }

    #[test]
    fn sockets_on_a_port_are_counted_by_state_from_either_end() {
        // 0x1F92 = 8082.
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F92 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n\
   1: 0100007F:1F92 0100007F:D431 06 00000000:00000000 03:00001770 00000000     0        0 0 3\n\
   2: 0100007F:D432 0100007F:1F92 06 00000000:00000000 03:00001770 00000000     0        0 0 3\n\
   3: 0100007F:D433 0100007F:1F92 01 00000000:00000000 00:00000000 00000000     0        0 5 1\n\
   4: 0100007F:D434 0100007F:1F93 06 00000000:00000000 03:00001770 00000000     0        0 0 3\n";
        let s = parse_net_tcp(text, 8082).expect("parses");
        assert_eq!(
            s,
            TcpStates {
                established: 1,
                time_wait: 2
            }
        );
        let v6 = "  sl  local_address                         remote_address                        st\n\
   0: 00000000000000000000000001000000:1F92 00000000000000000000000001000000:9C40 06 0\n";
        assert_eq!(parse_net_tcp(v6, 8082).expect("parses").time_wait, 1);
    }

    #[test]
    fn machine_busy_time_leaves_idle_and_iowait_out() {
        let text = "cpu  100 5 50 9000 40 3 2 1 0 0\ncpu0 50 2 25 4500 20 1 1 0 0 0\n";
        assert_eq!(
            parse_machine_busy(text).expect("parses"),
            100 + 5 + 50 + 3 + 2 + 1
        );
        assert!(parse_machine_busy("cpu0 1 2 3\n").is_err());
        assert!(machine_busy_ticks().expect("readable") > 0);
    }

    #[test]
    fn the_cpu_model_is_found() {
        let text = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n";
        assert_eq!(
            parse_cpu_model(text).as_deref(),
            Some("Intel(R) Xeon(R) CPU @ 2.20GHz")
        );
        assert_eq!(parse_cpu_model("nothing"), None);
    }

    #[test]
    fn this_process_is_readable_and_running() {
        let me = std::process::id();
        assert!(is_running(me));
        assert!(cpu_ticks(me).is_ok());
        assert!(peak_rss_kb(me).expect("readable") > 0);
        assert!(clock_ticks_per_second() > 0);
    }
}
