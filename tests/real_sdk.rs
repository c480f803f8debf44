//! Guards on the real-SDK corpus in `fixtures/real/`: every recorded input has an expected
//! report beside it (so no capture is silently left out of `tests/fixtures.rs`), stays small,
//! and every expected line obeys the decision rules by itself — an expected file edited by hand
//! into something the rules cannot give fails here, before any comparison with the analyzer.

use std::path::{Path, PathBuf};

use serde_json::Value;

const VERDICTS: [&str; 7] = [
    "correct",
    "gap_skipped",
    "replayed",
    "rejected",
    "empty",
    "unverifiable",
    "capture_incomplete",
];
const MAX_INPUT_BYTES: u64 = 2 * 1024 * 1024;

fn real_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/real")
}

fn files_with_ext(ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(real_dir())
        .expect("fixtures/real exists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    out.sort();
    out
}

/// `<stem>.expect.jsonl` or, while the analyzer disagrees, `<stem>.pending.jsonl`.
fn expectation_for(input: &Path) -> Option<PathBuf> {
    let name = input.file_name()?.to_str()?;
    let stem = name.rsplit_once('.')?.0;
    ["expect", "pending"]
        .iter()
        .map(|kind| input.with_file_name(format!("{stem}.{kind}.jsonl")))
        .find(|p| p.exists())
}

fn digits(s: &str) -> Option<u128> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[test]
fn every_real_input_has_an_expected_report_and_is_small() {
    let mut inputs = Vec::new();
    for ext in ["pcap", "pcapng", "har"] {
        inputs.extend(files_with_ext(ext));
    }
    assert!(inputs.len() >= 15, "real corpus missing: {}", inputs.len());
    for input in &inputs {
        assert!(
            expectation_for(input).is_some(),
            "{} has no expected report",
            input.display()
        );
        let size = std::fs::metadata(input).unwrap().len();
        assert!(
            size < MAX_INPUT_BYTES,
            "{} is {size} bytes",
            input.display()
        );
    }
    let link_kinds = ["pcap", "pcapng", "har"].map(|e| files_with_ext(e).len());
    assert!(
        link_kinds.iter().all(|&n| n > 0),
        "each input kind recorded: {link_kinds:?}"
    );
}

#[test]
fn every_expected_line_obeys_the_decision_rules() {
    let mut lines = 0;
    let mut seen = std::collections::BTreeSet::new();
    for file in files_with_ext("jsonl") {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        if !(name.ends_with(".expect.jsonl") || name.ends_with(".pending.jsonl")) {
            continue;
        }
        for (i, line) in std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
        {
            let v: Value = serde_json::from_str(line).unwrap();
            let obj = v.as_object().unwrap();
            let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
            keys.sort_unstable();
            assert_eq!(
                keys,
                ["first_event_id", "last_event_id", "session_id", "verdict"],
                "{name}:{i}"
            );
            let verdict = v["verdict"].as_str().unwrap();
            assert!(VERDICTS.contains(&verdict), "{name}:{i}: {verdict}");
            seen.insert(verdict.to_string());
            let last = v["last_event_id"].as_str().unwrap();
            let first = v["first_event_id"].as_str();
            match first {
                None => assert!(
                    ["rejected", "empty", "capture_incomplete"].contains(&verdict),
                    "{name}:{i}: {verdict} without a first id"
                ),
                Some(first) => {
                    let want = match (digits(last), digits(first)) {
                        (Some(l), Some(f)) if f == l + 1 => "correct",
                        (Some(l), Some(f)) if f > l + 1 => "gap_skipped",
                        (Some(_), Some(_)) => "replayed",
                        _ => "unverifiable",
                    };
                    assert_eq!(verdict, want, "{name}:{i}: {last} -> {first}");
                }
            }
            lines += 1;
        }
    }
    assert!(lines >= 30, "only {lines} expected lines");
    // The corpus shows every outcome real servers gave, not just the easy ones.
    for v in [
        "correct",
        "gap_skipped",
        "replayed",
        "rejected",
        "empty",
        "unverifiable",
        "capture_incomplete",
    ] {
        assert!(seen.contains(v), "no real capture expects {v}");
    }
}
