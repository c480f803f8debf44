//! Checks the report's Wireshark references against Wireshark itself: for every resume in
//! every capture fixture, tshark must place the request frame and the first-event frame in the
//! `tcp.stream` the report names, and the display filter must select the request frame.
//!
//! tshark is required under CI (`.ci/run` installs it); elsewhere the test says it was skipped.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn tshark_available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn captures() -> Vec<PathBuf> {
    common::fixture_files(
        |p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("pcap" | "pcapng")
            )
        },
        // Damaged captures are for the reader's error paths, not for stream numbering.
        |p| !p.ends_with("malformed"),
    )
}

/// frame number → tcp.stream, as tshark numbers them.
fn tshark_streams(cap: &Path) -> Option<HashMap<u64, u64>> {
    let out = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(cap)
        .args(["-T", "fields", "-e", "frame.number", "-e", "tcp.stream"])
        .output()
        .ok()?;
    if !out.status.success() {
        // libpcap-based readers refuse some valid pcapng layouts; tshark says so on stderr.
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Some(
        text.lines()
            .filter_map(|l| {
                let mut f = l.split('\t');
                let frame = f.next()?.trim().parse().ok()?;
                let stream = f.next()?.trim().parse().ok()?;
                Some((frame, stream))
            })
            .collect(),
    )
}

#[test]
fn frames_and_streams_agree_with_tshark() {
    if !tshark_available() {
        assert!(
            std::env::var_os("CI").is_none(),
            "tshark must be installed under CI"
        );
        eprintln!("tshark not installed: Wireshark cross-check skipped");
        return;
    }
    let mut checked = 0;
    let mut failures = Vec::new();
    for cap in captures() {
        let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume-audit"))
            .args(common::key_log_args(&cap))
            .arg(&cap)
            .output()
            .unwrap();
        let report = String::from_utf8(out.stdout).unwrap();
        let resumes: Vec<Value> = report
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v["type"] == "resume")
            .collect();
        if resumes.is_empty() {
            continue;
        }
        let Some(streams) = tshark_streams(&cap) else {
            eprintln!("{}: tshark cannot read it; skipped", cap.display());
            continue;
        };
        for r in &resumes {
            let stream = r["tcp_stream"].as_u64().unwrap();
            for key in ["request_frame", "first_event_frame"] {
                let Some(frame) = r[key].as_u64() else {
                    continue;
                };
                checked += 1;
                if streams.get(&frame) != Some(&stream) {
                    failures.push(format!(
                        "{}: {key} {frame} is in tcp.stream {:?} for tshark, {stream} in the report",
                        cap.display(),
                        streams.get(&frame)
                    ));
                }
            }
        }
        // The first resume's display filter, applied by tshark, shows its request frame.
        let first = &resumes[0];
        let filter = first["display_filter"].as_str().unwrap();
        // With the same keys, as a user would open it.
        let keys = cap.with_extension("keys");
        let mut tshark = Command::new("tshark");
        if keys.exists() {
            tshark
                .arg("-o")
                .arg(format!("tls.keylog_file:{}", keys.display()));
        }
        let shown = tshark
            .args(["-n", "-r"])
            .arg(&cap)
            .args(["-Y", filter, "-T", "fields", "-e", "frame.number"])
            .output()
            .unwrap();
        let shown = String::from_utf8_lossy(&shown.stdout);
        let want = first["request_frame"].as_u64().unwrap().to_string();
        if !shown.lines().any(|l| l.trim() == want) {
            failures.push(format!(
                "{}: filter {filter:?} does not show frame {want}",
                cap.display()
            ));
        }
    }
    assert!(checked >= 40, "only {checked} frames checked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
