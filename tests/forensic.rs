//! Runs the real binary with `--sessions` on every session-level fixture and compares what the
//! session stage found with `<name>.forensic.json`, written beside the capture by the
//! generator from the scenario definition: per resume the verdict, id shape, evidence kind,
//! cursor status and findings, each with the exact frames it must cite; findings tied to no
//! resume; and the sessions with their exchange and resume counts. Also checks the text
//! account and the invariants every finding must keep.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_mcp-resume-audit")
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/forensic")
}

fn fixtures() -> Vec<(PathBuf, Value)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(fixture_dir()).expect("fixtures/forensic") {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if let Some(stem) = name.strip_suffix(".forensic.json") {
            let want: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            out.push((p.with_file_name(format!("{stem}.pcap")), want));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

struct Report {
    resumes: Vec<Value>,
    findings: Vec<Value>,
    sessions: Vec<Value>,
    summary: Value,
    code: i32,
    stderr: String,
}

fn run(args: &[&str]) -> Report {
    let out = Command::new(bin()).args(args).output().expect("run binary");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let mut r = Report {
        resumes: vec![],
        findings: vec![],
        sessions: vec![],
        summary: Value::Null,
        code: out.status.code().unwrap_or(-1),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    for l in text.lines() {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"));
        match v["type"].as_str() {
            Some("resume") => r.resumes.push(v),
            Some("finding") => r.findings.push(v),
            Some("session") => r.sessions.push(v),
            Some("summary") => r.summary = v,
            other => panic!("unknown record type {other:?}"),
        }
    }
    r
}

/// The frames a finding or evidence cites, in order.
fn frames(v: &Value) -> Vec<u64> {
    v["cites"]
        .as_array()
        .map(|c| c.iter().filter_map(|c| c["frame"].as_u64()).collect())
        .unwrap_or_default()
}

fn want_frames(v: &Value) -> Vec<u64> {
    v["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_u64().unwrap())
        .collect()
}

/// Findings as (kind, frames), sorted, for comparison.
fn got_findings(list: &Value) -> Vec<(String, Vec<u64>)> {
    let mut v: Vec<(String, Vec<u64>)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["kind"].as_str().unwrap().to_string(), frames(f)))
        .collect();
    v.sort();
    v
}

fn want_findings(list: &Value) -> Vec<(String, Vec<u64>)> {
    let mut v: Vec<(String, Vec<u64>)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["kind"].as_str().unwrap().to_string(), want_frames(f)))
        .collect();
    v.sort();
    v
}

#[test]
fn every_session_fixture_gives_its_findings() {
    let all = fixtures();
    assert!(all.len() >= 15, "found {}", all.len());
    let mut failures = Vec::new();
    for (cap, want) in &all {
        let name = cap.file_name().unwrap().to_string_lossy().to_string();
        let mut args: Vec<String> = want["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        args.extend(["-j1".into(), "--sessions".into(), cap.display().to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let got = run(&args);
        let mut fail = |what: String| failures.push(format!("{name}: {what}"));
        for w in want["resumes"].as_array().unwrap() {
            let frame = &w["request_frame"];
            let Some(g) = got.resumes.iter().find(|r| &r["request_frame"] == frame) else {
                fail(format!("no resume at frame {frame}"));
                continue;
            };
            for k in ["verdict", "id_shape"] {
                if g[k] != w[k] {
                    fail(format!(
                        "resume {frame}: {k} is {}, expected {} ({})",
                        g[k], w[k], g["reason"]
                    ));
                }
            }
            if g["cursor"]["status"] != w["cursor"] {
                fail(format!(
                    "resume {frame}: cursor {}, expected {} ({})",
                    g["cursor"]["status"], w["cursor"], g["cursor"]["detail"]
                ));
            }
            match (&w["evidence"], g.get("evidence")) {
                (Value::Null, None) => {}
                (Value::Null, Some(e)) => fail(format!("resume {frame}: unexpected evidence {e}")),
                (we, None) => fail(format!("resume {frame}: no evidence, expected {we}")),
                (we, Some(ge)) => {
                    if ge["how"] != we["how"] || frames(ge) != want_frames(we) {
                        fail(format!(
                            "resume {frame}: evidence {} {:?}, expected {} {:?}",
                            ge["how"],
                            frames(ge),
                            we["how"],
                            want_frames(we)
                        ));
                    }
                }
            }
            let (gf, wf) = (got_findings(&g["findings"]), want_findings(&w["findings"]));
            if gf != wf {
                fail(format!(
                    "resume {frame}: findings {gf:?}, expected {wf:?}\n  {}",
                    g["findings"]
                ));
            }
        }
        let loose = Value::Array(got.findings.clone());
        let (gf, wf) = (got_findings(&loose), want_findings(&want["findings"]));
        if gf != wf {
            fail(format!("findings {gf:?}, expected {wf:?}\n  {loose}"));
        }
        let ws = want["sessions"].as_array().unwrap();
        if got.sessions.len() != ws.len() {
            fail(format!(
                "{} sessions, expected {}",
                got.sessions.len(),
                ws.len()
            ));
        }
        for w in ws {
            let Some(g) = got
                .sessions
                .iter()
                .find(|s| s["session_id"] == w["session_id"])
            else {
                fail(format!("no session {}", w["session_id"]));
                continue;
            };
            let n = g["exchanges"].as_array().unwrap().len() as u64;
            let r = g["resumes"].as_array().unwrap().len() as u64;
            if Some(n) != w["exchanges"].as_u64() || Some(r) != w["resumes"].as_u64() {
                fail(format!(
                    "session {}: {n} exchanges and {r} resumes, expected {} and {}",
                    w["session_id"], w["exchanges"], w["resumes"]
                ));
            }
        }
        let errors = got.resumes.iter().any(|r| {
            r["verdict"] != "correct"
                || r["findings"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|f| f["severity"] == "error")
        }) || got.findings.iter().any(|f| f["severity"] == "error");
        if got.code != i32::from(errors) {
            fail(format!("exit status {}: {}", got.code, got.stderr));
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Every finding, everywhere, states its evidence: words, and at least one frame that exists
/// in the capture; and every session view lists its exchanges in capture order.
#[test]
fn every_finding_cites_frames_of_the_capture() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut caps = Vec::new();
    for sub in ["forensic", "gen", "real-tool"] {
        for e in std::fs::read_dir(root.join(sub)).unwrap() {
            let p = e.unwrap().path();
            if matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("pcap" | "pcapng")
            ) {
                caps.push(p);
            }
        }
    }
    caps.sort();
    for cap in &caps {
        let got = run(&["--sessions", cap.to_str().unwrap()]);
        let packets = got.summary["packets"].as_u64().unwrap();
        let mut all: Vec<&Value> = got.findings.iter().collect();
        for r in &got.resumes {
            all.extend(r["findings"].as_array().unwrap());
            if let Some(e) = r.get("evidence") {
                assert!(!e["detail"].as_str().unwrap().is_empty());
                for f in frames(e) {
                    assert!(f >= 1 && f <= packets, "{}: {e}", cap.display());
                }
            }
        }
        for f in all {
            assert!(
                !f["detail"].as_str().unwrap_or("").is_empty(),
                "{}: {f}",
                cap.display()
            );
            let fr = frames(f);
            assert!(
                !fr.is_empty(),
                "{}: finding without frames {f}",
                cap.display()
            );
            assert!(
                fr.iter().all(|&n| n >= 1 && n <= packets),
                "{}: {f}",
                cap.display()
            );
        }
        for s in &got.sessions {
            let starts: Vec<u64> = s["exchanges"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| {
                    x["request"]["frame"]
                        .as_u64()
                        .or(x["response"]["frame"].as_u64())
                        .unwrap()
                })
                .collect();
            assert!(
                starts.windows(2).all(|w| w[0] <= w[1]),
                "{}: {starts:?}",
                cap.display()
            );
        }
    }
}

/// The report over every forensic fixture at once, with `args` before the inputs.
fn report_over_all(args: &[&str]) -> Vec<u8> {
    let caps: Vec<String> = fixtures()
        .iter()
        .map(|(c, _)| c.display().to_string())
        .collect();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(caps.iter().map(String::as_str));
    Command::new(bin()).args(&all).output().unwrap().stdout
}

/// The same report for every thread count in `threads`; returns it.
fn same_for_threads(threads: &[&str], args: &[&str]) -> Vec<u8> {
    let mut first: Option<Vec<u8>> = None;
    for j in threads {
        let mut with = vec![*j];
        with.extend_from_slice(args);
        let out = report_over_all(&with);
        match &first {
            None => first = Some(out),
            Some(f) => assert!(f == &out, "{j} {args:?} differs"),
        }
    }
    first.unwrap()
}

fn last_line_json(out: &[u8]) -> Value {
    let text = String::from_utf8(out.to_vec()).unwrap();
    serde_json::from_str(text.lines().last().unwrap()).unwrap()
}

#[test]
fn session_report_is_byte_identical_for_any_thread_count() {
    same_for_threads(&["-j1", "-j2", "-j5"], &["--sessions"]);
    for (cap, _) in fixtures() {
        let cap = cap.display().to_string();
        let base = Command::new(bin())
            .args(["-j1", "--sessions", &cap])
            .output()
            .unwrap()
            .stdout;
        for j in ["-j2", "-j5"] {
            let one = Command::new(bin())
                .args([j, "--sessions", &cap])
                .output()
                .unwrap()
                .stdout;
            assert_eq!(one, base, "{cap} with {j}");
        }
    }
}

/// With no memory for the session stage, sessions are audited as soon as nothing of theirs is
/// open: the answer changes (less is known), but never with the thread count, and the
/// summary says how many sessions were audited early.
#[test]
fn sessions_audited_early_give_the_same_report_for_any_thread_count() {
    let tight = same_for_threads(
        &["-j1", "-j2", "-j3"],
        &["--sessions", "--session-memory", "0"],
    );
    let tight = last_line_json(&tight);
    assert!(tight["sessions_retired_early"].as_u64().unwrap() > 0);
    let roomy = last_line_json(&report_over_all(&["-j1", "--sessions"]));
    assert_eq!(roomy["sessions_retired_early"], 0);
    // What the stage adds is lost; the verdicts on integer ids are the streams' own.
    assert_eq!(roomy["resumes"], tight["resumes"]);
}

#[test]
fn text_account_names_what_went_wrong_and_where() {
    let cap = fixture_dir().join("cross-session-leak.pcap");
    let out = Command::new(bin())
        .args(["--format", "text", cap.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains("{\""), "no JSON in text mode:\n{text}");
    assert!(text.contains("session tenant-b-93"), "{text}");
    assert!(text.contains("cross_session_leak"), "{text}");
    assert!(text.contains("tenant-a-41"), "{text}");
    assert!(text.contains("open in Wireshark: tcp.stream eq"), "{text}");
    // Sessions with nothing wrong are only counted.
    assert!(
        !text.lines().any(|l| l.starts_with("session tenant-a-41")),
        "{text}"
    );
    assert!(text.contains("other session(s)"), "{text}");
    assert_eq!(out.status.code(), Some(1));

    let clean = fixture_dir().join("shape-stream-seq.pcap");
    let out = Command::new(bin())
        .args(["--format", "text", clean.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("every resume correct"), "{text}");
    assert!(text.contains("1 correct"), "{text}");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_bad_id_pattern_is_refused_with_a_clear_message() {
    let cap = fixture_dir().join("id-pattern.pcap");
    for (pattern, says) in [
        ("e\\d+", "named group `seq`"),
        ("(?P<seq>", "regular expression"),
    ] {
        let out = Command::new(bin())
            .args(["--id-pattern", pattern, cap.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--id-pattern") && err.contains(says), "{err}");
    }
}

#[test]
fn plain_run_has_no_session_records() {
    let cap = fixture_dir().join("cursor-lost.pcap");
    let got = run(&[cap.to_str().unwrap()]);
    assert!(got.sessions.is_empty());
    assert_eq!(got.findings.len(), 2);
    assert_eq!(got.summary["findings"]["cursor_lost"], 2);
}

/// Every frame a finding, an evidence or a cursor cites lies in the `tcp.stream` it names, as
/// Wireshark numbers them (skipped, with a message, when tshark is not installed).
#[test]
fn cited_frames_are_where_wireshark_puts_them() {
    let tshark = Command::new("tshark").arg("--version").output();
    if !tshark.is_ok_and(|o| o.status.success()) {
        eprintln!("tshark not installed: cited frames not cross-checked");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut caps: Vec<PathBuf> = Vec::new();
    for sub in ["forensic", "real"] {
        for e in std::fs::read_dir(root.join(sub)).unwrap() {
            let p = e.unwrap().path();
            if matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("pcap" | "pcapng")
            ) {
                caps.push(p);
            }
        }
    }
    caps.sort();
    let mut checked = 0;
    for cap in &caps {
        let got = run(&["--sessions", cap.to_str().unwrap()]);
        let mut cites: Vec<Value> = Vec::new();
        let mut collect = |v: &Value| {
            if let Some(c) = v["cites"].as_array() {
                cites.extend(c.iter().cloned());
            }
            if v["resume"].is_object() {
                cites.push(v["resume"].clone());
            }
        };
        for r in &got.resumes {
            r["findings"]
                .as_array()
                .unwrap()
                .iter()
                .for_each(&mut collect);
            if let Some(e) = r.get("evidence") {
                collect(e);
            }
            if r["cursor"].is_object() {
                collect(&r["cursor"]);
            }
        }
        got.findings.iter().for_each(&mut collect);
        if cites.is_empty() {
            continue;
        }
        let out = Command::new("tshark")
            .args(["-n", "-r"])
            .arg(cap)
            .args(["-T", "fields", "-e", "frame.number", "-e", "tcp.stream"])
            .output()
            .unwrap();
        let streams: std::collections::HashMap<u64, u64> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let mut it = l.split('\t');
                Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
            })
            .collect();
        for c in &cites {
            let (Some(frame), Some(stream)) = (c["frame"].as_u64(), c["tcp_stream"].as_u64())
            else {
                continue;
            };
            assert_eq!(
                streams.get(&frame),
                Some(&stream),
                "{}: {c} is not where tshark puts frame {frame}",
                cap.display()
            );
            checked += 1;
        }
    }
    assert!(checked > 50, "only {checked} cites checked");
}
