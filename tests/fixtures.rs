//! Runs the real binary on every committed capture fixture and compares its report with the
//! expected results written beside the fixture (`<name>.expect.jsonl`). Expected files name
//! only the fields they pin; every other field is free.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_mcp-resume-audit")
}

fn fixtures_with_expectations() -> Vec<(PathBuf, PathBuf)> {
    let expects =
        common::fixture_files(|p| p.to_string_lossy().ends_with(".expect.jsonl"), |_| true);
    let mut found = Vec::new();
    for expect in expects {
        let name = expect.file_name().unwrap().to_string_lossy().to_string();
        let stem = name.trim_end_matches(".expect.jsonl");
        for ext in ["pcap", "pcapng", "har", "zhar"] {
            let cap = expect.with_file_name(format!("{stem}.{ext}"));
            if cap.exists() {
                found.push((cap, expect.clone()));
            }
        }
    }
    found.sort();
    found
}

pub struct Run {
    pub resumes: Vec<Value>,
    /// `{"type":"finding"}` lines: findings of the session stage tied to no resume.
    pub findings: Vec<Value>,
    pub summary: Value,
    pub code: i32,
    pub stderr: String,
}

pub fn run(args: &[&str]) -> Run {
    let out = Command::new(bin()).args(args).output().expect("run binary");
    let stdout = String::from_utf8(out.stdout).expect("utf-8 report");
    let mut lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect();
    let summary = lines.pop().expect("a summary line");
    assert_eq!(summary["type"], "summary");
    assert!(
        lines
            .iter()
            .all(|l| l["type"] == "resume" || l["type"] == "finding")
    );
    let (resumes, findings) = lines.into_iter().partition(|l| l["type"] == "resume");
    Run {
        resumes,
        findings,
        summary,
        code: out.status.code().unwrap_or(-1),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn every_fixture_gives_its_expected_report() {
    let fixtures = fixtures_with_expectations();
    assert!(
        fixtures.len() >= 10,
        "fixtures missing: found {}",
        fixtures.len()
    );
    let mut failures = Vec::new();
    for (cap, expect) in &fixtures {
        let want: Vec<Value> = std::fs::read_to_string(expect)
            .unwrap()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let mut args = vec!["-j1".to_string()];
        args.extend(common::key_log_args(cap));
        args.push(cap.display().to_string());
        let got = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let name = cap.display().to_string();
        if got.resumes.len() != want.len() {
            failures.push(format!(
                "{name}: {} resumes reported, {} expected\n  got: {:?}\n  stderr: {}",
                got.resumes.len(),
                want.len(),
                got.resumes
                    .iter()
                    .map(|r| (&r["verdict"], &r["last_event_id"], &r["first_event_id"]))
                    .collect::<Vec<_>>(),
                got.stderr
            ));
            continue;
        }
        for (i, (g, w)) in got.resumes.iter().zip(&want).enumerate() {
            for (k, v) in w.as_object().unwrap() {
                if &g[k] != v {
                    failures.push(format!(
                        "{name}: resume {i}: {k} is {}, expected {v} (reason: {})",
                        g[k], g["reason"]
                    ));
                }
            }
        }
        let error = |f: &Value| f["severity"] == "error";
        let any_finding = got.resumes.iter().any(|r| {
            r["verdict"] != "correct"
                || r["findings"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(error))
        }) || got.findings.iter().any(error);
        let cov = &got.summary["coverage"];
        let unread = cov["unread"]
            .as_object()
            .is_some_and(|u| u.keys().any(|k| k != "not_http"))
            || cov["packets_cut"] != 0;
        let want_code = if any_finding {
            1
        } else if unread {
            3
        } else {
            0
        };
        if got.code != want_code {
            failures.push(format!(
                "{name}: exit status {}, expected {want_code}; stderr: {}",
                got.code, got.stderr
            ));
        }
        assert_eq!(got.summary["resumes"], got.resumes.len());
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn report_is_byte_identical_for_any_thread_count() {
    let fixtures = fixtures_with_expectations();
    let caps: Vec<String> = fixtures
        .iter()
        .map(|(c, _)| c.display().to_string())
        .collect();
    let keys: Vec<String> = fixtures
        .iter()
        .flat_map(|(c, _)| common::key_log_args(c))
        .collect();
    let mut outputs = Vec::new();
    for j in ["-j1", "-j2", "-j3", "-j8"] {
        // All inputs at once (inputs in parallel) and each one alone (shards in parallel).
        let mut args = vec![j];
        args.extend(keys.iter().map(String::as_str));
        args.extend(caps.iter().map(String::as_str));
        let all = Command::new(bin()).args(&args).output().unwrap();
        outputs.push(all.stdout);
        for (cap, _) in &fixtures {
            let one = Command::new(bin())
                .arg(j)
                .args(common::key_log_args(cap))
                .arg(cap)
                .output()
                .unwrap();
            outputs.push(one.stdout);
        }
    }
    let per_run = caps.len() + 1;
    for k in 1..4 {
        for i in 0..per_run {
            assert_eq!(
                outputs[i],
                outputs[k * per_run + i],
                "run {i} differs with thread setting {k}"
            );
        }
    }
}

#[test]
fn unreadable_inputs_are_named_and_others_still_analyzed() {
    let dir = std::env::temp_dir().join(format!("mra-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let junk = dir.join("notes.txt");
    std::fs::write(&junk, b"this is not a capture\n").unwrap();
    let fixtures = fixtures_with_expectations();
    let (good, expect) = &fixtures[0];
    let want = std::fs::read_to_string(expect)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count();
    let missing = dir.join("missing.pcap");
    let got = run(&[
        junk.to_str().unwrap(),
        good.to_str().unwrap(),
        missing.to_str().unwrap(),
    ]);
    // Some resume is not correct: an accusation comes before the read errors, which stderr
    // and the summary still name.
    assert_eq!(got.code, 1, "stderr: {}", got.stderr);
    assert_eq!(got.resumes.len(), want);
    assert_eq!(got.summary["inputs"], 3);
    assert_eq!(got.summary["inputs_failed"], 2);
    let err_lines: Vec<&str> = got.stderr.lines().collect();
    assert_eq!(err_lines.len(), 2, "{}", got.stderr);
    assert!(err_lines[0].contains("notes.txt") && err_lines[0].contains("offset 0"));
    assert!(err_lines[1].contains("missing.pcap"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn truncated_capture_is_analyzed_up_to_its_last_whole_packet() {
    let fixtures = fixtures_with_expectations();
    let (cap, _) = fixtures
        .iter()
        .find(|(c, _)| c.extension().unwrap() == "pcap")
        .unwrap();
    let bytes = std::fs::read(cap).unwrap();
    let dir = std::env::temp_dir().join(format!("mra-trunc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cut = dir.join("cut.pcap");
    std::fs::write(&cut, &bytes[..bytes.len() - 7]).unwrap();
    let got = run(&[cut.to_str().unwrap()]);
    assert!(
        got.stderr.starts_with("error: ") && got.stderr.contains("offset"),
        "{}",
        got.stderr
    );
    // Read in part: the input counts as failed, and the run says so unless it accuses.
    assert_eq!(got.summary["inputs_failed"], 1);
    assert_eq!(got.summary["problems"].as_array().unwrap().len(), 1);
    assert!(got.code == 2 || got.code == 1, "{}", got.code);
    let whole = run(&[cap.to_str().unwrap()]);
    assert_eq!(
        got.summary["packets"].as_u64().unwrap() + 1,
        whole.summary["packets"].as_u64().unwrap()
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_report_never_overwrites_an_input() {
    let dir = std::env::temp_dir().join(format!("mra-out-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cap = dir.join("evidence.pcap");
    let original =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/real/py-counter.pcap"))
            .unwrap();
    std::fs::write(&cap, &original).unwrap();
    // The same file under another spelling is still the input.
    let other_name = dir.join(".").join("evidence.pcap");
    let out = Command::new(bin())
        .arg("-o")
        .arg(&other_name)
        .arg(&cap)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("refusing to write the report"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(&cap).unwrap(),
        original,
        "the input was changed"
    );
    // `-o -` is standard output, and a real target is written whole at the end.
    let out = Command::new(bin())
        .args(["-o", "-"])
        .arg(&cap)
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);
    assert!(!dir.join("-").exists());
    let target = dir.join("report.jsonl");
    let out = Command::new(bin())
        .arg("-o")
        .arg(&target)
        .arg(&cap)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&target).unwrap().lines().count(), 3);
    // Nothing but the input and the report is left in the folder.
    let mut left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["evidence.pcap", "report.jsonl"]);
    std::fs::remove_dir_all(&dir).ok();
}
