//! Coverage accounting on captures recorded with real tools: traffic the analyzer cannot read
//! is named, changes the exit status, and never looks like a clean capture.

use std::process::Command;

use serde_json::Value;

struct Run {
    code: i32,
    stderr: String,
    summary: Value,
}

fn run(input: &str) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume-audit"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["-j1", input])
        .output()
        .expect("run the binary");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    Run {
        code: out.status.code().unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
        summary,
    }
}

#[test]
fn tls_without_keys_is_not_a_clean_capture() {
    let r = run("fixtures/coverage-real/tls13-without-keys.pcap");
    assert_eq!(r.code, 3, "{}", r.stderr);
    let cov = &r.summary["coverage"];
    assert_eq!(cov["unread"]["tls_no_keys"]["connections"], 6);
    assert!(cov["unread"]["tls_no_keys"]["bytes"].as_u64().unwrap() > 10_000);
    assert_eq!(cov["unread_servers"][0]["reason"], "tls_no_keys");
    assert_eq!(cov["unread_servers"][0]["server"], "127.0.0.1:18910");
    assert_eq!(
        r.stderr.trim_end(),
        format!(
            "warning: fixtures/coverage-real/tls13-without-keys.pcap: traffic not read: 6 \
             connection(s), {} bytes: TLS without its keys: pass --tls-keylog FILE (SSLKEYLOGFILE \
             format); servers: 127.0.0.1:18910 (tls_no_keys)",
            cov["unread"]["tls_no_keys"]["bytes"]
        )
    );
}

#[test]
fn http2_prior_knowledge_is_read() {
    let r = run("fixtures/coverage-real/h2c-prior-knowledge.pcap");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let cov = &r.summary["coverage"];
    assert_eq!(cov["read"]["h2"]["connections"], 1);
    assert_eq!(cov["unread"], serde_json::json!({}));
    assert_eq!(r.summary["verdicts"]["correct"], 2);
    // The recorder's port probe carried no payload: empty, neither read nor unread.
    assert_eq!(cov["empty"], 1);
}

#[test]
fn a_tls_capture_with_its_keys_is_read() {
    // Another capture's key log: no secret for these connections, nothing decrypted.
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume-audit"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "-j1",
            "--tls-keylog",
            "fixtures/tls-real/py-tls13-aes128.keys",
            "fixtures/tls-real/py-tls13-aes256.pcap",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "no resume can be read: {stdout}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        summary["coverage"]["unread"]["tls_no_keys"]["connections"],
        6
    );
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume-audit"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "-j1",
            "--tls-keylog",
            "fixtures/tls-real/py-tls13-aes256.keys",
            "fixtures/tls-real/py-tls13-aes256.pcap",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(summary["coverage"]["read"]["tls/http1"]["connections"], 6);
    assert_eq!(summary["coverage"]["unread"], serde_json::json!({}));
    let first: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert_eq!(first["tls"]["version"], "TLS 1.3");
    assert_eq!(first["tls"]["cipher"], "TLS_AES_256_GCM_SHA384");
    assert_eq!(
        first["tls"]["keys"],
        "keylog:fixtures/tls-real/py-tls13-aes256.keys"
    );
}

#[test]
fn an_unsupported_suite_is_named() {
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume-audit"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "-j1",
            "--tls-keylog",
            "fixtures/tls-real/py-tls12-cbc.keys",
            "fixtures/tls-real/py-tls12-cbc.pcap",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(
        summary["coverage"]["unread"]["tls_unsupported"]["connections"],
        6
    );
}

#[test]
fn a_snap_length_cut_is_named_with_its_length() {
    let r = run("fixtures/coverage-real/py-snaplen200.pcap");
    assert_eq!(r.code, 3, "{}", r.stderr);
    let cov = &r.summary["coverage"];
    assert_eq!(cov["packets_cut"], 28);
    assert_eq!(cov["snap_length"], 200);
    assert!(
        r.stderr
            .contains("28 packet(s) cut at 200 bytes by the snap length: capture with -s 0"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_plaintext_capture_read_in_full_exits_as_before() {
    let r = run("fixtures/real/py-counter.pcap");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stderr, "");
    let cov = &r.summary["coverage"];
    assert_eq!(cov["unread"], serde_json::json!({}));
    // As tshark counts them: 18 connections, 6 of them with payload.
    assert_eq!(cov["read"]["http1"]["connections"], 6);
    assert_eq!(cov["empty"], 12);
}

#[test]
fn servers_named_as_not_mcp_are_ignored_not_unread() {
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume-audit"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "-j1",
            "--ignore-endpoint",
            "127.0.0.1:18910",
            "fixtures/coverage-real/tls13-without-keys.pcap",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stderr.is_empty());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(summary["coverage"]["ignored"]["connections"], 6);
    assert_eq!(summary["coverage"]["unread"], serde_json::json!({}));
    // Another port of the same host is still unread.
    let r = Command::new(env!("CARGO_BIN_EXE_mcp-resume-audit"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "--ignore-endpoint",
            ":443",
            "fixtures/coverage-real/tls13-without-keys.pcap",
        ])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(3));
}

/// The records of a legacy little-endian pcap with frame `drop` (1-based) left out, as a busy
/// capture host loses a packet.
fn without_frame(pcap: &[u8], drop: usize) -> Vec<u8> {
    let mut out = pcap[..24].to_vec();
    let mut at = 24;
    let mut frame = 0;
    while at + 16 <= pcap.len() {
        let caplen = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        frame += 1;
        if frame != drop {
            out.extend_from_slice(&pcap[at..at + 16 + caplen]);
        }
        at += 16 + caplen;
    }
    out
}

#[test]
fn http2_headers_lost_with_their_hpack_state_are_not_a_clean_capture() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let pcap = std::fs::read(root.join("fixtures/h2-real/py-h2c-prior.pcap")).unwrap();
    // Frame 30 carries client header blocks: losing it loses the client's HPACK state, and
    // with it every later request of the connection, the two resumes among them.
    let dir = std::env::temp_dir().join(format!("mra-h2loss-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lossy = dir.join("lossy.pcap");
    std::fs::write(&lossy, without_frame(&pcap, 30)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume-audit"))
        .args(["-j1"])
        .arg(&lossy)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(summary["resumes"], 0, "{stdout}");
    assert!(
        summary["coverage"]["h2_headers_unreadable"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert_eq!(out.status.code(), Some(3), "a silent all-clear");
    assert!(String::from_utf8_lossy(&out.stderr).contains("HTTP/2 header block(s) unreadable"));
    std::fs::remove_dir_all(&dir).ok();
}
