//! The `netpath` binary where it cannot make a path: one line saying why,
//! before anything is created.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

fn netpath(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args(args)
        .output()
        .unwrap()
}

/// The namespaces of netpath runs (any owner) that exist now.
fn ours() -> Vec<String> {
    netpath::ns::ip(&["netns", "list"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("netpath-"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn without_root_it_says_so_in_one_line_and_makes_nothing() {
    // Run as `nobody`, from a root test (as CI runs): no capability to make
    // a namespace or open the TUN device.
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test drops root to show what happens without it: run it as root"
    );
    let before = ours();
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            env!("CARGO_BIN_EXE_netpath"),
            "up",
            "--link",
            "delay=1ms",
        ])
        .output()
        .expect("setpriv (util-linux)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_eq!(
        err.trim_end().lines().collect::<Vec<_>>(),
        ["netpath: the packet path needs root (network namespaces and TUN devices)"],
        "{err}"
    );
    assert!(out.stdout.is_empty());
    assert_eq!(ours(), before, "nothing was created");
}

#[test]
fn a_bad_setting_is_named_in_one_line_before_anything_is_made() {
    let before = ours();
    for (args, names) in [
        (&["up", "--link", "loss=120%"][..], "loss"),
        (&["up", "--link", "delay=-5ms"][..], "delay"),
        (&["up", "--link", "rate=0mbit"][..], "rate"),
        (
            &["up", "--link", "rate=10mbit queue=1000b"][..],
            "smaller than one 1500-byte packet",
        ),
    ] {
        let out = netpath(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        let lines: Vec<&str> = err.trim_end().lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        assert!(lines[0].contains(names), "{args:?}: {err}");
    }
    assert_eq!(ours(), before, "nothing was created");
}
