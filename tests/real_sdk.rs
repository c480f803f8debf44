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

/// The counter of `id` under an `id_shape` such as `event-{seq}` or `{stream}_{seq}`.
fn counter(shape: &str, id: &str) -> Option<u128> {
    let mut re = String::from("^");
    let mut rest = shape;
    while !rest.is_empty() {
        let (piece, tail) = if let Some(t) = rest.strip_prefix("{seq}") {
            ("(?P<seq>[0-9]+)".to_string(), t)
        } else if let Some(t) = rest.strip_prefix("{stream}") {
            (".+?".to_string(), t)
        } else if let Some(t) = rest.strip_prefix("{{") {
            ("\\{".to_string(), t)
        } else if let Some(t) = rest.strip_prefix("}}") {
            ("\\}".to_string(), t)
        } else {
            let c = rest.chars().next()?;
            (regex::escape(&c.to_string()), &rest[c.len_utf8()..])
        };
        re.push_str(&piece);
        rest = tail;
    }
    re.push('$');
    let caps = regex::Regex::new(&re).ok()?.captures(id)?;
    digits(caps.name("seq")?.as_str())
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
            // The four keys, and where the session stage decided: the id shape whose counter
            // was compared, or the priming event that repeated Last-Event-ID; behind a proxy,
            // the hop.
            let mut keys: Vec<&str> = obj
                .keys()
                .map(String::as_str)
                .filter(|k| !["id_shape", "priming_ack_frame", "hop"].contains(k))
                .collect();
            keys.sort_unstable();
            assert_eq!(
                keys,
                ["first_event_id", "last_event_id", "session_id", "verdict"],
                "{name}:{i}"
            );
            let shape = v.get("id_shape").and_then(Value::as_str);
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
                    let (l, f) = match shape {
                        Some(shape) => (counter(shape, last), counter(shape, first)),
                        None => (digits(last), digits(first)),
                    };
                    let want = match (l, f) {
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
