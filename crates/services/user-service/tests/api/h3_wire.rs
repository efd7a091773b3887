//! HTTP/3's byte counts against a capture: what user-service counts for
//! `h3-proto` (UDP payload, read from quinn) is what tshark sees cross
//! loopback between its QUIC socket and order-service's, each way. QUIC's
//! payload is encrypted, so the capture is counted datagram by datagram
//! (UDP length less its 8-byte header), handshake included.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, BufReader};
use user_service::upstream::Transport;

use crate::helpers::{OrderService, spawn_users_with};

/// tshark capturing UDP to and from `port` on loopback into `file`, once
/// it says it is capturing.
async fn capture(port: u16, file: &std::path::Path) -> tokio::process::Child {
    let mut tshark = tokio::process::Command::new("tshark")
        .args(["-i", "lo", "-f", &format!("udp port {port}"), "-w"])
        .arg(file)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("tshark runs (scripts/setup installs it; capturing needs root)");
    let mut lines = BufReader::new(tshark.stderr.take().unwrap()).lines();
    tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("Capturing on") {
                return;
            }
        }
        panic!("tshark ended before capturing");
    })
    .await
    .expect("tshark capturing within 20 s");
    // Its later lines are not read: keep the pipe drained.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    tshark
}

/// UDP payload bytes in `file`: (to `port`, from `port`), and datagrams.
fn payload_bytes(file: &std::path::Path, port: u16) -> (u64, u64, u64) {
    let out = std::process::Command::new("tshark")
        .args(["-r"])
        .arg(file)
        .args(["-T", "fields", "-e", "udp.dstport", "-e", "udp.length"])
        .output()
        .expect("tshark reads the capture");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (mut to, mut from, mut n) = (0, 0, 0);
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let (dst, len) = line.split_once('\t').expect("two fields");
        let payload = len.trim().parse::<u64>().unwrap() - 8;
        if dst.trim().parse::<u16>().unwrap() == port {
            to += payload;
        } else {
            from += payload;
        }
        n += 1;
    }
    (to, from, n)
}

#[tokio::test]
async fn h3_byte_counts_are_the_udp_payload_a_capture_sees() {
    let orders = OrderService::replica_with([127, 0, 0, 1].into(), [0; 4], |_| {}).await;
    let file = std::env::temp_dir().join(format!(
        "h3-wire-{}-{}.pcapng",
        std::process::id(),
        orders.h3.port()
    ));
    let mut tshark = capture(orders.h3.port(), &file).await;
    let users = spawn_users_with(&orders, |s| s.pool_size = 1).await;
    let via = Transport::H3Proto;
    for count in [1, 100, 1_000, 100, 1] {
        users
            .orders_ok(dataset::fixed_user_id(count), via, "&limit=1000")
            .await;
    }
    let counted = users.snapshot(via);
    // A last acknowledgement may follow the last count: let it pass, then
    // stop the capture (SIGINT: tshark writes what it has).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = tshark.id().unwrap().to_string();
    std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    tshark.wait().await.unwrap();
    let (to, from, datagrams) = payload_bytes(&file, orders.h3.port());
    eprintln!(
        "counted {} written / {} read; captured {to} / {from} in {datagrams} datagrams",
        counted.bytes_written, counted.bytes_read
    );
    assert_eq!(counted.connections_opened, 1);
    // The counts are taken after each call: what comes after the last one
    // (its acknowledgements, a keep-alive ping) is in the capture only. IP
    // and UDP headers are in neither: 28 bytes a datagram would show.
    for (what, counted, captured) in [
        ("to order-service", counted.bytes_written, to),
        ("from order-service", counted.bytes_read, from),
    ] {
        assert!(
            captured >= counted,
            "{what}: counted {counted} > captured {captured}"
        );
        assert!(
            captured - counted <= 200,
            "{what}: counted {counted}, captured {captured} ({datagrams} datagrams)"
        );
    }
    // The 1,000-order answers went over: the counts are not a handshake's.
    assert!(from > 200_000, "{from}");
    let _ = std::fs::remove_file(&file);
    users.stop().await;
    orders.stop().await;
}
