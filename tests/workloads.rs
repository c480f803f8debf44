//! The benchmark's traffic mixes, read back: every mix `gen-capture` writes, on cleartext
//! HTTP/1.1 and (for two of them) on the TLS and HTTP/2 wires with their key logs, must give
//! for each resume the verdict, `Last-Event-ID` and first id the generator says it wrote, and
//! no resume it did not write. The captures are small versions of the benchmark's, made in
//! memory by the generator's own code.

#[allow(dead_code)]
#[path = "../examples/gen-capture/workload.rs"]
mod workload;

use std::collections::{BTreeMap, BTreeSet};

use mcp_resume_audit::{Options, TlsKeys, analyze_path};
use mcp_resume_audit_synth::{HttpVersion, TlsSpec, TlsSuite, Wire};
use serde_json::Value;
use workload::{Format, Mix, Workload, write_capture};

const MIXES: [Mix; 8] = [
    Mix::Default,
    Mix::Tiny,
    Mix::Large,
    Mix::Sessions,
    Mix::Storm,
    Mix::KeepAlive,
    Mix::Long,
    Mix::Loaded,
];

/// What one resume is: its verdict, `Last-Event-ID` and first id.
type Outcome = (String, String, Option<String>);
/// Resumes by connection (`tcp.stream`) and request frame.
type Resumes = BTreeMap<(u64, u64), Outcome>;

/// Writes `mix` on `wire` and reads it back; returns each resume by connection and request
/// frame, as written and as read, and the bytes written.
fn written_and_read(mix: Mix, wire: Wire, size: u64) -> (Resumes, Resumes, u64) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let (cap, keys) = (dir.path().join("w.pcap"), dir.path().join("w.keys"));
    let w = Workload {
        size,
        format: Format::Pcap,
        seed: 7,
        sessions: None,
        wire,
        mix,
        mss: None,
    };
    let (mut bytes, mut key_log, mut expect) = (Vec::new(), Vec::new(), Vec::new());
    let totals = write_capture(&w, &mut bytes, &mut key_log, Some(&mut expect)).unwrap();
    std::fs::write(&cap, &bytes).unwrap();
    std::fs::write(&keys, &key_log).unwrap();
    let mut written = BTreeMap::new();
    for line in std::str::from_utf8(&expect).unwrap().lines() {
        let e: Value = serde_json::from_str(line).unwrap();
        let at = (
            e["tcp_stream"].as_u64().unwrap(),
            e["request_frame"].as_u64().unwrap(),
        );
        let outcome = (
            e["verdict"].as_str().unwrap().to_string(),
            e["last_event_id"].as_str().unwrap().to_string(),
            e["first_event_id"].as_str().map(str::to_string),
        );
        assert!(written.insert(at, outcome).is_none(), "{line}");
    }
    assert_eq!(written.len() as u64, totals.resumes);
    let (tls, messages) = TlsKeys::from_files(std::slice::from_ref(&keys));
    assert!(
        messages.is_empty() || wire.tls.is_none(),
        "{mix:?}: {messages:?}"
    );
    let opts = Options {
        threads: 2,
        tls,
        ..Options::default()
    };
    let report = analyze_path(&cap, &opts);
    assert!(
        !report.failed(),
        "{mix:?} on {wire:?}: {:?}",
        report.messages
    );
    let mut read = BTreeMap::new();
    for r in &report.resumes {
        let at = (r.connection.tcp_stream.unwrap(), r.request.frame);
        let outcome = (
            r.decision.verdict.as_str().to_string(),
            r.last_event_id.clone(),
            r.first_event_id.clone(),
        );
        assert!(read.insert(at, outcome).is_none(), "{at:?}");
    }
    (written, read, totals.bytes)
}

/// The resumes whose outcome differs (as written, as read), at most `n` of them.
fn differences(written: &Resumes, read: &Resumes, n: usize) -> Vec<String> {
    let keys: BTreeSet<_> = written.keys().chain(read.keys()).collect();
    keys.into_iter()
        .filter(|k| written.get(k) != read.get(k))
        .take(n)
        .map(|k| {
            format!(
                "{k:?}: written {:?}, read {:?}",
                written.get(k),
                read.get(k)
            )
        })
        .collect()
}

#[test]
fn every_mix_reads_back_as_written() {
    let mut verdicts = BTreeSet::new();
    for mix in MIXES {
        let (written, read, bytes) = written_and_read(mix, Wire::default(), 2 << 20);
        assert!(bytes >= 2 << 20, "{mix:?}: {bytes} bytes");
        assert!(written.len() >= 5, "{mix:?}: {} resumes", written.len());
        let wrong = differences(&written, &read, 5);
        assert!(
            wrong.is_empty(),
            "{mix:?}: {} of {} resumes differ, e.g.\n{}",
            written
                .keys()
                .filter(|k| written.get(k) != read.get(k))
                .count()
                + read.keys().filter(|k| !written.contains_key(k)).count(),
            written.len(),
            wrong.join("\n")
        );
        verdicts.extend(written.values().map(|o| o.0.clone()));
    }
    // The mixes together carry every verdict.
    assert_eq!(
        verdicts.into_iter().collect::<Vec<_>>(),
        [
            "capture_incomplete",
            "correct",
            "empty",
            "gap_skipped",
            "rejected",
            "replayed",
            "unverifiable"
        ]
    );
}

#[test]
fn the_encrypted_and_http2_wires_read_back_as_written() {
    let tls13 = Some(TlsSpec {
        suite: TlsSuite::Tls13Aes128Gcm,
        seed: 7,
    });
    let tls12 = Some(TlsSpec {
        suite: TlsSuite::Tls12EcdheRsaAes128Gcm,
        seed: 7,
    });
    let wires = [
        Wire {
            http: HttpVersion::Http1,
            tls: tls13,
        },
        Wire {
            http: HttpVersion::Http1,
            tls: tls12,
        },
        Wire {
            http: HttpVersion::Http2,
            tls: None,
        },
        Wire {
            http: HttpVersion::Http2,
            tls: tls13,
        },
    ];
    for mix in [Mix::Default, Mix::Storm] {
        let (plain, _, _) = written_and_read(mix, Wire::default(), 1 << 20);
        for wire in wires {
            let (written, read, _) = written_and_read(mix, wire, 1 << 20);
            // The same traffic on every wire.
            assert_eq!(
                written.values().collect::<Vec<_>>(),
                plain.values().collect::<Vec<_>>(),
                "{mix:?} on {wire:?}"
            );
            let wrong = differences(&written, &read, 5);
            assert!(
                wrong.is_empty(),
                "{mix:?} on {wire:?}:\n{}",
                wrong.join("\n")
            );
        }
    }
}
