//! `netpath`: brings a packet-level path up between two network namespaces
//! and carries packets until Ctrl-C, or removes what a crashed run left.

use std::sync::mpsc;

use clap::{Parser, Subcommand};
use netpath::{CongestionControl, Link, Path, PathConfig, Side};

#[derive(Parser)]
#[command(
    name = "netpath",
    about = "A packet-level network path between two network namespaces (A and B): delay, jitter, loss, a rate cap and a queue per direction, in the kernel's own TCP",
    long_about = "A packet-level network path between two network namespaces, A and B, joined by \
two TUN devices; this process carries every IP packet between them, delaying, \
losing and rate-limiting each per direction. Both kernels run their own TCP over \
it (slow start, retransmissions, the congestion control named by --cc).\n\n\
Run a program on either side with `ip netns exec NAME program`; the names and \
addresses are printed when the path is up. Needs root and /dev/net/tun.\n\n\
A link is space-separated words:\n  \
delay=10ms        one-way delay (us, ms, s)\n  \
jitter=1ms        added to each packet's delay; dist=uniform (±j, default) or dist=normal (sd j)\n  \
reorder           let jitter reorder packets (off: a packet never overtakes)\n  \
loss=1%           random loss; loss=ge:P,R is Gilbert-Elliott (P: good->bad, R: bad->good per packet)\n  \
rate=50mbit       a rate cap (kbit, mbit, gbit)\n  \
queue=50ms        the drop-tail queue before the cap, in time at the rate or bytes (64kb)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Bring a path up and carry packets until Ctrl-C; then print what each
    /// direction carried, lost and dropped, and take everything down.
    Up {
        /// Both directions' link (overridden by --a-to-b / --b-to-a).
        #[arg(long, default_value = "")]
        link: String,
        /// The link from A to B.
        #[arg(long)]
        a_to_b: Option<String>,
        /// The link from B to A.
        #[arg(long)]
        b_to_a: Option<String>,
        /// The MTU of both ends, bytes.
        #[arg(long, default_value_t = 1500)]
        mtu: u16,
        /// TCP congestion control on both ends (cubic, bbr, reno), set on
        /// the path's routes so nothing host-wide changes.
        #[arg(long, default_value = "cubic")]
        cc: String,
        /// Seed of the loss and jitter draws (each direction's losses and
        /// its jitter draw from streams of their own): the same seed loses
        /// the same packets by their order in each direction.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Remove the namespaces of netpath runs whose process is gone.
    Clean,
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("netpath: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Clean => {
            let removed = netpath::ns::clean_stale()?;
            println!("removed {} stale namespace(s)", removed.len());
            for n in removed {
                println!("  {n}");
            }
            Ok(())
        }
        Command::Up {
            link,
            a_to_b,
            b_to_a,
            mtu,
            cc,
            seed,
        } => {
            let both: Link = link.parse()?;
            let config = PathConfig {
                a_to_b: a_to_b.map_or(Ok(both), |s| s.parse())?,
                b_to_a: b_to_a.map_or(Ok(both), |s| s.parse())?,
                mtu,
                cc: cc.parse::<CongestionControl>()?,
                seed,
            };
            let path = Path::up(&config)?;
            for side in [Side::A, Side::B] {
                let facts = path.tcp_facts(side)?;
                println!(
                    "{side:?}: ip netns exec {}   path {}   control {} (from the host)   tcp {} initcwnd {} slow-start-after-idle {}",
                    path.ns(side),
                    path.path_addr(side),
                    path.control_addr(side),
                    facts.congestion_control,
                    facts.initcwnd,
                    u8::from(facts.slow_start_after_idle),
                );
            }
            println!("carrying packets; Ctrl-C to stop");
            let (tx, rx) = mpsc::channel();
            ctrlc::set_handler(move || {
                let _ = tx.send(());
            })?;
            let _ = rx.recv();
            let [ab, ba] = path.stats();
            let device = path.device_drops();
            for (i, (name, s)) in [("a-to-b", ab), ("b-to-a", ba)].into_iter().enumerate() {
                println!("{}", summary(name, &s, device.as_ref().ok().map(|d| d[i])));
            }
            if let Err(e) = device {
                println!("the TUN queues' drops could not be read: {e:#}");
            }
            Ok(())
        }
    }
}

/// One direction's account, as `netpath up` prints it when stopped.
fn summary(name: &str, s: &netpath::DirectionStats, device_drops: Option<u64>) -> String {
    let mut out = format!(
        "{name}: {} packets, {} delivered ({} bytes), {} lost, {} dropped by the full queue, \
         {} silenced, {} write errors",
        s.packets,
        s.delivered,
        s.bytes_delivered,
        s.lost,
        s.queue_drops,
        s.silenced,
        s.write_errors
    );
    match device_drops {
        Some(d) => out.push_str(&format!(
            ", {d} dropped at the TUN queue before the emulator read them"
        )),
        None => out.push_str(", TUN queue drops unknown"),
    }
    if s.timed > 0 {
        out.push_str(&format!(
            "; of {} delayed packets {} written early (mean {:.1} µs), the rest late by {:.1} µs \
             on average, p99 under {} µs",
            s.timed,
            s.early,
            s.early_ns as f64 / 1e3 / s.early.max(1) as f64,
            s.late_ns as f64 / 1e3 / s.timed.saturating_sub(s.early).max(1) as f64,
            s.late_quantile_us(0.99).unwrap_or(0),
        ));
    }
    out
}
