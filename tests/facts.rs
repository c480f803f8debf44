//! Map + reduce against the single run: the facts of every committed fixture (`--emit-facts`),
//! reduced (`--reduce`), give the single run's report byte for byte — standard output with the
//! session views, standard error and the exit status — also when the records are grouped by
//! session id and shuffled the way a distributed engine hands them over; and damaged facts
//! files are errors naming their file and line, never a crash, the other files still read.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mcp-resume-audit"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

fn is_input(p: &Path) -> bool {
    matches!(
        p.extension().and_then(|e| e.to_str()),
        Some("pcap" | "pcapng" | "har" | "zhar")
    )
}

fn rel(p: &Path) -> PathBuf {
    p.strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(p)
        .to_path_buf()
}

fn single(inputs: &[PathBuf], keys: &[String]) -> Output {
    bin()
        .args(["--sessions", "-j1", "-q"])
        .args(keys)
        .args(inputs)
        .output()
        .expect("run the binary")
}

fn map(inputs: &[PathBuf], keys: &[String], facts: &Path) -> Output {
    let out = bin()
        .args(["-j1", "-q", "--emit-facts"])
        .arg(facts)
        .args(keys)
        .args(inputs)
        .output()
        .expect("run the binary");
    assert!(
        out.stdout.is_empty(),
        "the map step writes no report: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

fn reduce(facts: &[PathBuf]) -> Output {
    bin()
        .args(["--reduce", "--sessions", "-q"])
        .args(facts)
        .output()
        .expect("run the binary")
}

fn same(a: &Output, b: &Output) -> bool {
    a.stdout == b.stdout && a.stderr == b.stderr && a.status.code() == b.status.code()
}

#[test]
fn every_fixture_map_then_reduce_is_the_single_run() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = common::fixture_files(is_input, |_| true);
    assert!(inputs.len() > 100, "fixtures not found: {}", inputs.len());
    let mut differ = Vec::new();
    let mut resumes = 0;
    for (i, input) in inputs.iter().enumerate() {
        let input = rel(input);
        let keys = common::key_log_args(&input);
        let facts = dir.path().join(format!("{i}.jsonl"));
        let whole = single(std::slice::from_ref(&input), &keys);
        map(std::slice::from_ref(&input), &keys, &facts);
        let reduced = reduce(std::slice::from_ref(&facts));
        resumes += String::from_utf8_lossy(&whole.stdout)
            .matches("\"type\":\"resume\"")
            .count();
        if !same(&whole, &reduced) {
            differ.push(input.display().to_string());
        }
    }
    // The comparison means something only if the reports hold resumes.
    assert!(
        resumes > 100,
        "only {resumes} resumes in the fixtures' reports"
    );
    assert!(differ.is_empty(), "map + reduce differs on: {differ:?}");
}

/// A capture of several sessions, one of which leaks ids to another.
fn leak_capture() -> PathBuf {
    PathBuf::from("fixtures/forensic/cross-session-leak.pcap")
}

/// The facts lines regrouped as an engine's shuffle would: by session id (sessions in an order
/// of their own, records without a session apart), each group reversed, a header per part.
fn shuffled(facts: &str) -> String {
    let mut lines = facts.lines();
    let header = lines.next().unwrap().to_string();
    let mut groups: std::collections::BTreeMap<String, Vec<&str>> = Default::default();
    for l in lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let key = v["session_id"].as_str().unwrap_or("").to_string();
        groups.entry(key).or_default().push(l);
    }
    let mut out = String::new();
    for (_, g) in groups.iter().rev() {
        out.push_str(&header);
        out.push('\n');
        for l in g.iter().rev() {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

#[test]
fn facts_grouped_by_session_and_shuffled_reduce_to_the_same_report() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = vec![
        leak_capture(),
        PathBuf::from("fixtures/gen/mixed.pcap"),
        PathBuf::from("fixtures/har/mixed.har"),
    ];
    for i in &inputs {
        assert!(i.exists() || Path::new(env!("CARGO_MANIFEST_DIR")).join(i).exists());
    }
    let whole = single(&inputs, &[]);
    let text = String::from_utf8_lossy(&whole.stdout);
    assert!(
        text.contains("\"cross_session_leak\""),
        "the leak is found by the single run"
    );
    // One facts file per capture, as parallel map tasks write them.
    let mut parts = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        let f = dir.path().join(format!("part{i}.jsonl"));
        map(std::slice::from_ref(input), &[], &f);
        let facts = std::fs::read_to_string(&f).unwrap();
        let sessions: std::collections::BTreeSet<String> = facts
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v["session_id"].as_str().map(str::to_string))
            .collect();
        if i == 0 {
            assert!(sessions.len() >= 2, "the leak needs two sessions");
        }
        let g = dir.path().join(format!("shuffled{i}.jsonl"));
        std::fs::write(&g, shuffled(&facts)).unwrap();
        parts.push(g);
    }
    let reduced = reduce(&parts);
    assert!(
        same(&whole, &reduced),
        "{}\n---\n{}",
        String::from_utf8_lossy(&whole.stderr),
        String::from_utf8_lossy(&reduced.stderr)
    );
    // One file of all inputs, as a single map writes it, is the same too.
    let all = dir.path().join("all.jsonl");
    map(&inputs, &[], &all);
    assert!(same(&whole, &reduce(std::slice::from_ref(&all))));
}

fn facts_of(input: &Path, dir: &Path, name: &str) -> (PathBuf, Vec<u8>) {
    let f = dir.join(name);
    map(&[input.to_path_buf()], &[], &f);
    let bytes = std::fs::read(&f).unwrap();
    (f, bytes)
}

/// The resumes of a report, by their request frame, as text.
fn resume_lines(out: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(out)
        .lines()
        .filter(|l| l.contains("\"type\":\"resume\""))
        .map(str::to_string)
        .collect()
}

fn no_crash(out: &Output) {
    let code = out.status.code();
    assert!(
        matches!(code, Some(0..=3)),
        "exit {code:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for l in String::from_utf8_lossy(&out.stderr).lines() {
        assert!(!l.contains("panicked"), "{l}");
    }
}

#[test]
fn truncated_facts_are_errors_naming_the_file_and_the_rest_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let (_, bytes) = facts_of(&leak_capture(), dir.path(), "leak.jsonl");
    let (good, _) = facts_of(
        Path::new("fixtures/gen/mixed.pcap"),
        dir.path(),
        "good.jsonl",
    );
    let good_alone = reduce(std::slice::from_ref(&good));
    let good_resumes = resume_lines(&good_alone.stdout);
    assert!(!good_resumes.is_empty());
    let cut_path = dir.path().join("cut.jsonl");
    let n = bytes.len();
    let mut cuts: Vec<usize> = (1..24).map(|k| n * k / 24).collect();
    // Right after a line too: every line whole, the input_end record missing.
    cuts.push(bytes.iter().rposition(|&b| b == b'\n').unwrap_or(0));
    cuts.push(0);
    for cut in cuts {
        std::fs::write(&cut_path, &bytes[..cut]).unwrap();
        let out = reduce(&[cut_path.clone(), good.clone()]);
        no_crash(&out);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.lines()
                .any(|l| l.starts_with("error: ") && l.contains(&*cut_path.to_string_lossy())),
            "cut at {cut}: no error names the file: {err}"
        );
        if cut > 0 && bytes[cut - 1] != b'\n' {
            assert!(err.contains("line "), "cut at {cut}: no line named: {err}");
        }
        assert_ne!(out.status.code(), Some(0), "cut at {cut}");
        // The intact file's input is reported whole.
        let got = resume_lines(&out.stdout);
        for r in &good_resumes {
            assert!(got.contains(r), "cut at {cut}: lost {r}");
        }
    }
}

#[test]
fn corrupted_facts_are_errors_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let (_, bytes) = facts_of(&leak_capture(), dir.path(), "leak.jsonl");
    let (good, _) = facts_of(
        Path::new("fixtures/gen/mixed.pcap"),
        dir.path(),
        "good.jsonl",
    );
    let good_resumes = resume_lines(&reduce(std::slice::from_ref(&good)).stdout);
    let bad = dir.path().join("bad.jsonl");
    let lines = bytes.iter().filter(|&&b| b == b'\n').count();
    assert!(lines > 3);
    // A byte changed here and there: into a quote, a brace, a digit, a letter, a NUL.
    let mut hits = 0;
    for (k, with) in [b'"', b'{', b'9', b'x', 0u8, b'\n', b'-']
        .iter()
        .cycle()
        .take(40)
        .enumerate()
    {
        let at = (bytes.len() - 1) * (k + 1) / 41;
        let mut b = bytes.clone();
        if b[at] == *with || b[at] == b'\n' {
            continue;
        }
        b[at] = *with;
        std::fs::write(&bad, &b).unwrap();
        let line = b[..at].iter().filter(|&&c| c == b'\n').count() + 1;
        let out = reduce(&[bad.clone(), good.clone()]);
        no_crash(&out);
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains(&format!("{}: line {line}:", bad.display())) {
            hits += 1;
        }
        let got = resume_lines(&out.stdout);
        for r in &good_resumes {
            assert!(got.contains(r), "byte {at}: lost {r}");
        }
    }
    // Most changes break the line they hit (some land in a string and change only a value).
    assert!(
        hits >= 10,
        "only {hits} corruptions were named by file and line"
    );
}

#[test]
fn a_file_that_is_not_facts_or_of_another_version_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (f, bytes) = facts_of(&leak_capture(), dir.path(), "leak.jsonl");
    let text = String::from_utf8(bytes).unwrap();
    let v2 = dir.path().join("v2.jsonl");
    std::fs::write(&v2, text.replacen("\"version\":1", "\"version\":2", 1)).unwrap();
    let out = reduce(&[v2.clone(), f.clone()]);
    no_crash(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}: line 1: facts version 2", v2.display())),
        "{err}"
    );
    // A capture given to --reduce is not facts.
    let out = reduce(&[leak_capture()]);
    no_crash(&out);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 1: not a facts file"));
    // The same facts given twice are read once, and said.
    let out = reduce(&[f.clone(), f.clone()]);
    no_crash(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("given twice"));
}

#[test]
fn a_ring_buffer_set_maps_and_reduces_with_its_citations_naming_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let ring = dir.path().join("ring");
    std::fs::create_dir(&ring).unwrap();
    // Two files named as dumpcap names a ring buffer: read as one capture, cited per file.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/real-tool/loopback-v4.pcap");
    for (n, stamp) in [(1, "20260101000000"), (2, "20260101000100")] {
        std::fs::copy(&src, ring.join(format!("cap_{n:05}_{stamp}.pcap"))).unwrap();
    }
    let whole = single(std::slice::from_ref(&ring), &[]);
    let text = String::from_utf8_lossy(&whole.stdout);
    assert!(text.contains("\"request_file\""), "{text}");
    assert!(text.matches("\"type\":\"resume\"").count() > 5);
    let facts = dir.path().join("ring.jsonl");
    map(std::slice::from_ref(&ring), &[], &facts);
    let reduced = reduce(std::slice::from_ref(&facts));
    assert!(
        same(&whole, &reduced),
        "{}\n---\n{}",
        String::from_utf8_lossy(&whole.stdout),
        String::from_utf8_lossy(&reduced.stdout)
    );
}

#[test]
fn fleet_runs_are_not_mapped() {
    let dir = tempfile::tempdir().unwrap();
    let facts = dir.path().join("f.jsonl");
    let out = bin()
        .args(["-q", "--fleet", "--emit-facts"])
        .arg(&facts)
        .args([leak_capture(), PathBuf::from("fixtures/gen/mixed.pcap")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--fleet cannot be mapped"));
}

#[test]
fn compressed_facts_reduce_to_the_same_report_from_files_and_standard_input() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let inputs = vec![leak_capture(), PathBuf::from("fixtures/gen/mixed.pcap")];
    let whole = single(&inputs, &[]);
    let plain = dir.path().join("facts.jsonl");
    map(&inputs, &[], &plain);
    let facts = std::fs::read(&plain).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&facts).unwrap();
    let packed = [
        ("gz", gz.finish().unwrap()),
        (
            "zst",
            ruzstd::encoding::compress_to_vec(
                facts.as_slice(),
                ruzstd::encoding::CompressionLevel::Fastest,
            ),
        ),
    ];
    for (ext, bytes) in &packed {
        assert_ne!(bytes.as_slice(), facts.as_slice());
        let f = dir.path().join(format!("facts.jsonl.{ext}"));
        std::fs::write(&f, bytes).unwrap();
        assert!(same(&whole, &reduce(&[f])), "{ext} from a file");
        let mut child = bin()
            .args(["--sessions", "--reduce", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(bytes).unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.stdout, whole.stdout, "{ext} from standard input");
        assert_eq!(out.status.code(), whole.status.code());
    }
    // A cut compressed file is an error naming it, and never a crash.
    let cut = dir.path().join("cut.jsonl.gz");
    std::fs::write(&cut, &packed[0].1[..packed[0].1.len() / 2]).unwrap();
    let out = reduce(&[cut]);
    no_crash(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("cut.jsonl.gz"));
}
