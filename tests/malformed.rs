//! Hostile input through the real binary: every file of fixtures/malformed/ gives the behaviour
//! its README states (what is reported on stderr, the exit status, what the summary counts,
//! and the verdict of the well-formed resume each file also holds), and inputs too large to
//! commit — a 1 MB header, a 100 MB SSE line, a flood of connections that never close — are
//! made at test time in a temporary folder, with the process's peak memory checked.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use mcp_resume_audit_synth::malformed;
use serde_json::Value;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_mcp-resume-audit")
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/malformed")
}

struct Run {
    resumes: Vec<Value>,
    summary: Value,
    code: i32,
    stderr: String,
    /// Highest resident set size seen while the process ran, in KiB.
    peak_rss_kb: u64,
}

/// Runs the binary, sampling its peak resident memory (VmHWM) until it exits. The last sample
/// before exit is taken as the peak: VmHWM only grows, and the exit itself frees memory.
fn run(args: &[&std::ffi::OsStr]) -> Run {
    let out_file = tempfile("report.jsonl");
    let mut child = Command::new(bin())
        .args(args)
        .arg("--output")
        .arg(&out_file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the binary");
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    let stderr_pipe = child.stderr.take().expect("stderr");
    let reader =
        std::thread::spawn(move || std::io::read_to_string(stderr_pipe).unwrap_or_default());
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&status_path)
            && let Some(kb) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak = peak.max(kb);
        }
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stderr = reader.join().unwrap_or_default();
    let text = std::fs::read_to_string(&out_file).unwrap_or_default();
    let mut lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect();
    let summary = lines
        .pop()
        .unwrap_or_else(|| panic!("no summary; stderr: {stderr}"));
    assert_eq!(summary["type"], "summary");
    assert!(!stderr.contains("panicked"), "{stderr}");
    Run {
        resumes: lines,
        summary,
        code: status.code().expect("exited, not killed by a signal"),
        stderr,
        peak_rss_kb: peak,
    }
}

fn run_paths(paths: &[&Path], flags: &[&str]) -> Run {
    let mut args: Vec<&std::ffi::OsStr> = flags.iter().map(std::ffi::OsStr::new).collect();
    args.extend(paths.iter().map(|p| p.as_os_str()));
    run(&args)
}

/// A fresh file in the temporary folder, removed when the returned guard is dropped (a
/// folder per process was left behind by every run).
fn tempfile(name: &str) -> tempfile::TempPath {
    tempfile::Builder::new()
        .prefix("mcp-resume-audit-malformed-")
        .suffix(&format!("-{name}"))
        .tempfile()
        .expect("temp file")
        .into_temp_path()
}

fn verdicts(r: &Run) -> Vec<&str> {
    r.resumes
        .iter()
        .map(|v| v["verdict"].as_str().unwrap_or("?"))
        .collect()
}

fn count(v: &Value, map: &str, key: &str) -> u64 {
    v[map][key].as_u64().unwrap_or(0)
}

/// What one committed file must give.
struct Case {
    file: &'static str,
    code: i32,
    /// Substrings of stderr (empty: stderr must be empty).
    stderr: &'static [&'static str],
    /// Lines on stderr: one per unreadable input, or per unreadable HAR entry.
    lines: usize,
    verdicts: &'static [&'static str],
    /// `(map, key, count)` entries the summary must hold, e.g. `("packets_skipped", ...)`.
    counts: &'static [(&'static str, &'static str, u64)],
    inputs_failed: u64,
}

const CASES: &[Case] = &[
    Case {
        file: "bad-magic.pcap",
        code: 2,
        stderr: &["error:", "bad-magic.pcap", "offset 0", "unrecognized magic"],
        lines: 1,
        verdicts: &[],
        counts: &[],
        inputs_failed: 1,
    },
    Case {
        file: "truncated-global-header.pcap",
        code: 2,
        stderr: &[
            "error:",
            "truncated-global-header.pcap",
            "offset 0",
            "cut short",
        ],
        lines: 1,
        verdicts: &[],
        counts: &[],
        inputs_failed: 1,
    },
    Case {
        file: "truncated-record-header.pcap",
        // Read in part: every whole packet analyzed, and the input counted as failed.
        code: 2,
        stderr: &[
            "error:",
            "truncated-record-header.pcap",
            "offset 853",
            "cut short",
        ],
        lines: 1,
        verdicts: &["correct"],
        counts: &[("packets_skipped", "truncated_record", 1)],
        inputs_failed: 1,
    },
    Case {
        file: "truncated-record-body.pcap",
        // Read in part: every whole packet analyzed, and the input counted as failed.
        code: 2,
        stderr: &[
            "error:",
            "truncated-record-body.pcap",
            "offset 853",
            "cut short",
        ],
        lines: 1,
        verdicts: &["correct"],
        counts: &[("packets_skipped", "truncated_record", 1)],
        inputs_failed: 1,
    },
    Case {
        file: "caplen-above-snaplen.pcap",
        code: 0,
        stderr: &[],
        lines: 0,
        verdicts: &["correct"],
        counts: &[],
        inputs_failed: 0,
    },
    Case {
        file: "caplen-4gib.pcap",
        code: 2,
        stderr: &[
            "error:",
            "caplen-4gib.pcap",
            "offset 853",
            "4294967295 bytes",
            "after frame 8",
        ],
        lines: 1,
        verdicts: &["correct"],
        counts: &[],
        inputs_failed: 1,
    },
    Case {
        file: "zero-length-packets.pcap",
        code: 0,
        stderr: &[],
        lines: 0,
        verdicts: &["correct"],
        counts: &[("packets_skipped", "malformed", 3)],
        inputs_failed: 0,
    },
    Case {
        file: "pcapng-epb-before-idb.pcapng",
        code: 0,
        stderr: &[],
        lines: 0,
        verdicts: &["correct"],
        counts: &[("packets_skipped", "no_interface", 1)],
        inputs_failed: 0,
    },
    Case {
        file: "pcapng-unknown-interface.pcapng",
        code: 0,
        stderr: &[],
        lines: 0,
        verdicts: &["correct"],
        counts: &[("packets_skipped", "no_interface", 2)],
        inputs_failed: 0,
    },
    Case {
        file: "pcapng-bad-block-length.pcapng",
        code: 2,
        stderr: &[
            "error:",
            "pcapng-bad-block-length.pcapng",
            "offset 1068",
            "bad length 13",
        ],
        lines: 1,
        verdicts: &["correct"],
        counts: &[],
        inputs_failed: 1,
    },
    Case {
        file: "pcapng-block-length-mismatch.pcapng",
        code: 2,
        stderr: &[
            "error:",
            "pcapng-block-length-mismatch.pcapng",
            "offset 1068",
            "trailing length",
        ],
        lines: 1,
        verdicts: &["correct"],
        counts: &[],
        inputs_failed: 1,
    },
    Case {
        file: "pcapng-sections-both-byte-orders.pcapng",
        code: 0,
        stderr: &[],
        lines: 0,
        verdicts: &["correct", "correct"],
        counts: &[],
        inputs_failed: 0,
    },
    Case {
        file: "ip-truncated-header.pcap",
        code: 0,
        stderr: &[],
        lines: 0,
        verdicts: &["correct"],
        counts: &[("packets_skipped", "malformed", 1)],
        inputs_failed: 0,
    },
    Case {
        file: "tcp-truncated-header.pcap",
        code: 0,
        stderr: &[],
        lines: 0,
        verdicts: &["correct"],
        counts: &[("packets_skipped", "malformed", 1)],
        inputs_failed: 0,
    },
    Case {
        file: "ip-bad-ihl.pcap",
        code: 0,
        stderr: &[],
        lines: 0,
        verdicts: &["correct"],
        counts: &[("packets_skipped", "malformed", 2)],
        inputs_failed: 0,
    },
    Case {
        file: "tcp-bad-data-offset.pcap",
        code: 0,
        stderr: &[],
        lines: 0,
        verdicts: &["correct"],
        counts: &[("packets_skipped", "malformed", 2)],
        inputs_failed: 0,
    },
    Case {
        file: "ip-fragments.pcap",
        code: 0,
        stderr: &[],
        lines: 0,
        verdicts: &["correct"],
        counts: &[("packets_skipped", "ip_fragment", 2)],
        inputs_failed: 0,
    },
    Case {
        file: "http-10000-headers.pcap",
        code: 1,
        stderr: &[],
        lines: 0,
        verdicts: &["capture_incomplete"],
        counts: &[("anomalies", "header_too_large", 1)],
        inputs_failed: 0,
    },
    Case {
        file: "http-chunk-size-2-64.pcap",
        code: 1,
        stderr: &[],
        lines: 0,
        verdicts: &["unverifiable"],
        counts: &[("anomalies", "bad_chunk", 1)],
        inputs_failed: 0,
    },
    Case {
        file: "http-content-length-negative.pcap",
        code: 1,
        stderr: &[],
        lines: 0,
        verdicts: &["unverifiable"],
        counts: &[("anomalies", "bad_content_length", 1)],
        inputs_failed: 0,
    },
    Case {
        file: "http-content-length-conflicting.pcap",
        code: 1,
        stderr: &[],
        lines: 0,
        verdicts: &["unverifiable"],
        counts: &[("anomalies", "bad_content_length", 1)],
        inputs_failed: 0,
    },
    Case {
        file: "sse-id-10kb.pcap",
        code: 1,
        stderr: &[],
        lines: 0,
        verdicts: &["capture_incomplete"],
        counts: &[("anomalies", "sse_field_too_long", 1)],
        inputs_failed: 0,
    },
    Case {
        file: "har-wrong-types.har",
        code: 2,
        stderr: &[
            "har-wrong-types.har: entry 1: invalid type",
            "har-wrong-types.har: entry 2: not a JSON object",
        ],
        lines: 2,
        verdicts: &["correct", "correct"],
        counts: &[],
        inputs_failed: 1,
    },
    Case {
        file: "har-invalid-base64.har",
        code: 2,
        stderr: &[
            "har-invalid-base64.har: entry 0: invalid base64",
            "har-invalid-base64.har: entry 1: invalid base64",
        ],
        lines: 2,
        verdicts: &["correct"],
        counts: &[],
        inputs_failed: 1,
    },
    Case {
        file: "tcp-hole-then-64kb.pcap",
        code: 1,
        stderr: &[],
        lines: 0,
        verdicts: &["capture_incomplete"],
        counts: &[],
        inputs_failed: 0,
    },
];

#[test]
fn every_malformed_file_gives_its_documented_behaviour() {
    for case in CASES {
        let path = corpus_dir().join(case.file);
        let r = run_paths(&[&path], &[]);
        let what = format!("{}: stderr {:?}", case.file, r.stderr);
        assert_eq!(r.code, case.code, "{what}");
        if case.stderr.is_empty() {
            assert!(r.stderr.is_empty(), "{what}");
        } else {
            assert_eq!(r.stderr.lines().count(), case.lines, "{what}");
            for part in case.stderr {
                assert!(r.stderr.contains(part), "{part:?} missing: {what}");
            }
        }
        assert_eq!(verdicts(&r), case.verdicts, "{what}");
        for (map, key, n) in case.counts {
            assert_eq!(count(&r.summary, map, key), *n, "{map}.{key}: {what}");
        }
        assert_eq!(r.summary["inputs_failed"], case.inputs_failed, "{what}");
        if case.code == 2 {
            let problems = r.summary["problems"].as_array().expect("problems");
            assert_eq!(problems.len(), case.lines, "{what}");
            for p in problems {
                assert!(p["error"].as_str().unwrap().contains(case.file), "{what}");
            }
        }
    }
}

#[test]
fn limits_hit_name_the_flag_in_the_reason() {
    let r = run_paths(&[&corpus_dir().join("http-10000-headers.pcap")], &[]);
    let reason = r.resumes[0]["reason"].as_str().unwrap();
    assert!(reason.contains("--max-header-bytes"), "{reason}");
    let r = run_paths(&[&corpus_dir().join("sse-id-10kb.pcap")], &[]);
    let reason = r.resumes[0]["reason"].as_str().unwrap();
    assert!(reason.contains("--max-sse-field"), "{reason}");
    // A hole the capture never fills: at the FIN it is a gap of the capture...
    let hole = corpus_dir().join("tcp-hole-then-64kb.pcap");
    let r = run_paths(&[&hole], &[]);
    assert_eq!(r.summary["out_of_order_overflows"], 0);
    assert!(!r.resumes[0]["reason"].as_str().unwrap().contains("--max"));
    // ... but given up early, for the limit, it says so, and the summary counts it.
    let r = run_paths(&[&hole], &["--max-out-of-order", "4096"]);
    assert_eq!(verdicts(&r), ["capture_incomplete"]);
    assert!(r.summary["out_of_order_overflows"].as_u64().unwrap() >= 1);
    let reason = r.resumes[0]["reason"].as_str().unwrap();
    assert!(reason.contains("--max-out-of-order"), "{reason}");
    // Raised limits read the same files whole.
    let r = run_paths(
        &[&corpus_dir().join("sse-id-10kb.pcap")],
        &["--max-sse-field", "20000"],
    );
    assert_eq!(verdicts(&r), ["gap_skipped"]);
}

#[test]
fn one_bad_input_does_not_stop_the_others() {
    let mut paths: Vec<PathBuf> = CASES.iter().map(|c| corpus_dir().join(c.file)).collect();
    paths.push(corpus_dir().join("does-not-exist.pcap"));
    let refs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    for threads in ["1", "2"] {
        let r = run_paths(&refs, &["-j", threads]);
        // Findings in the good inputs come before the read errors, still named on stderr.
        assert_eq!(r.code, 1);
        let failing = CASES.iter().filter(|c| c.code == 2).count() + 1;
        let lines = CASES
            .iter()
            .filter(|c| c.code == 2)
            .map(|c| c.lines)
            .sum::<usize>()
            + 1;
        assert_eq!(r.summary["inputs_failed"], failing as u64);
        assert_eq!(r.summary["problems"].as_array().unwrap().len(), lines);
        let errors: Vec<&str> = r
            .stderr
            .lines()
            .filter(|l| l.starts_with("error:"))
            .collect();
        assert_eq!(errors.len(), lines, "{}", r.stderr);
        assert!(r.stderr.contains("does-not-exist.pcap: cannot open"));
        let want: usize = CASES.iter().map(|c| c.verdicts.len()).sum();
        assert_eq!(r.resumes.len(), want);
        // Each resume names the input it came from, in input order.
        let inputs: Vec<&str> = r
            .resumes
            .iter()
            .map(|v| v["input"].as_str().unwrap())
            .collect();
        let mut sorted = inputs.clone();
        sorted.sort_by_key(|i| {
            let name = Path::new(i).file_name().and_then(|n| n.to_str());
            CASES.iter().position(|c| Some(c.file) == name)
        });
        assert_eq!(inputs, sorted);
    }
}

#[test]
fn committed_corpus_matches_its_generator() {
    let files = malformed::corpus().expect("generate");
    for (name, bytes) in &files {
        let committed = std::fs::read(corpus_dir().join(name)).unwrap_or_else(|e| {
            panic!("{name}: {e} (run: cargo run --example gen-malformed -- fixtures/malformed)")
        });
        assert!(
            committed == *bytes,
            "{name} differs from what gen-malformed writes"
        );
    }
    let mut named: Vec<&str> = files.iter().map(|(n, _)| *n).collect();
    named.sort_unstable();
    let mut cased: Vec<&str> = CASES.iter().map(|c| c.file).collect();
    cased.sort_unstable();
    assert_eq!(named, cased, "every generated file has a case here");
}

#[test]
fn readme_lists_every_file() {
    let readme = std::fs::read_to_string(corpus_dir().join("README.md")).expect("README");
    let mut files = Vec::new();
    let mut dirs = vec![corpus_dir()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.path().is_dir() {
                dirs.push(e.path());
            } else if e.file_name() != "README.md" {
                let rel = e.path().strip_prefix(corpus_dir()).unwrap().to_path_buf();
                files.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    for f in files {
        assert!(
            readme.contains(&format!("`{f}`")),
            "{f} is not described in the README"
        );
    }
}

/// Peak memory allowed for a run whose state the limits bound (the debug build's own
/// footprint included).
const BOUNDED_RSS_KB: u64 = 160 * 1024;

#[test]
fn a_one_megabyte_header_is_dropped_within_the_head_limit() {
    let path = tempfile("http-header-1mb.pcap");
    let out = std::fs::File::create(&path)
        .map(std::io::BufWriter::new)
        .unwrap();
    malformed::huge_header(out, 1 << 20).unwrap();
    let r = run_paths(&[&path], &[]);
    assert_eq!(r.code, 1);
    assert_eq!(verdicts(&r), ["capture_incomplete"]);
    assert!(
        r.resumes[0]["reason"]
            .as_str()
            .unwrap()
            .contains("--max-header-bytes")
    );
    assert_eq!(count(&r.summary, "anomalies", "header_too_large"), 1);
    assert!(r.peak_rss_kb < BOUNDED_RSS_KB, "peak {} KiB", r.peak_rss_kb);
    // Raised to fit, the same answer is read whole.
    let r = run_paths(&[&path], &["--max-header-bytes", "2000000"]);
    assert_eq!(verdicts(&r), ["correct"]);
}

#[test]
fn a_100_megabyte_sse_line_costs_no_memory() {
    let path = tempfile("sse-line-100mb.pcap");
    let out = std::fs::File::create(&path)
        .map(std::io::BufWriter::new)
        .unwrap();
    malformed::endless_sse_line(out, 100 << 20).unwrap();
    let r = run_paths(&[&path], &[]);
    // The line never ends, so no event is complete: an event stream closed without an id.
    assert_eq!(verdicts(&r), ["empty"]);
    assert_eq!(r.summary["tcp_gaps"], 0);
    assert!(r.peak_rss_kb < BOUNDED_RSS_KB, "peak {} KiB", r.peak_rss_kb);
}

/// Connections in the flood test; `MCP_AUDIT_FLOOD` raises it (100000 for the full run that
/// docs/fuzzing.md reports, with its timings).
fn flood_size() -> u32 {
    std::env::var("MCP_AUDIT_FLOOD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

#[test]
fn a_flood_of_open_connections_is_evicted_and_said_so() {
    let n = flood_size();
    let path = tempfile("flood.pcap");
    let out = std::fs::File::create(&path)
        .map(std::io::BufWriter::new)
        .unwrap();
    malformed::connection_flood(out, n).unwrap();
    let max = 1000u64;
    let r = run_paths(&[&path], &["--max-connections", &max.to_string()]);
    assert_eq!(r.code, 1);
    assert_eq!(r.summary["tcp_connections"], u64::from(n));
    let evicted = r.summary["connections_evicted"].as_u64().unwrap();
    // Evicted down to seven eighths of the limit at a time; at most `max` left at the end.
    assert!(evicted >= u64::from(n) - max, "evicted {evicted}");
    assert_eq!(r.resumes.len(), n as usize);
    let by_limit = r
        .resumes
        .iter()
        .filter(|v| {
            v["verdict"] == "capture_incomplete"
                && v["reason"].as_str().unwrap().contains("--max-connections")
        })
        .count() as u64;
    assert_eq!(by_limit, evicted, "every evicted resume names the limit");
    assert!(verdicts(&r).iter().all(|v| *v == "capture_incomplete"));
    assert!(r.peak_rss_kb < BOUNDED_RSS_KB, "peak {} KiB", r.peak_rss_kb);
    // Every connection resumes the one session: auditing its exchanges against each other
    // costs the square of their number, so the session stage audits them 4096 at a time.
    assert_eq!(r.summary["exchanges_not_audited"].as_u64(), Some(0));
    assert_eq!(
        r.summary["sessions_retired_early"].as_u64(),
        Some(u64::from(n) / 4096)
    );
}

/// Found by the `pipeline` fuzz target (kept in `fixtures/malformed/fuzz/pipeline/`): a
/// connection replaced by a new one on its 4-tuple is ended by the reader once its patience
/// is over, and what finishing it gave the session stage was keyed by the frame where it was
/// replaced, earlier than frames the reader had already passed. With one worker the stage took
/// it at once; with two, in key order before events the other worker had not yet let go. So a
/// session retired before a later resume at `-j1` and kept it at `-j2`: two reports. The key is
/// now the frame being read when the reader ends the connection.
#[test]
fn a_replaced_connection_ended_late_gives_one_report_at_any_thread_count() {
    let path = corpus_dir().join("fuzz/pipeline/replaced-connection-ended-late.pcap");
    let report = |j: &str| {
        let r = run_paths(&[&path], &[j, "--max-connections", "3", "--sessions"]);
        // A verdict other than correct comes first; the file's damaged end is an error too.
        assert_eq!(r.code, 1, "{}", r.stderr);
        assert!(
            r.stderr.contains("exceeds the 16777216 byte limit"),
            "{}",
            r.stderr
        );
        (r.resumes, r.summary)
    };
    let (lines, summary) = report("-j1");
    for j in ["-j2", "-j3"] {
        assert_eq!(report(j), (lines.clone(), summary.clone()), "{j}");
    }
    // The session ended (DELETE answered, nothing left open) before the resume at frame 239
    // arrived: the resume is audited in a view of its own, where the Last-Event-ID it sends
    // was never delivered.
    let late = lines
        .iter()
        .find(|l| l["type"] == "resume" && l["request_frame"] == 239)
        .expect("the resume of frame 239");
    assert_eq!(late["cursor"]["status"], "not_seen");
    let views: Vec<usize> = lines
        .iter()
        .filter(|l| l["type"] == "session" && l["session_id"] == late["session_id"])
        .map(|v| v["exchanges"].as_array().map_or(0, Vec::len))
        .collect();
    assert_eq!(views, [4, 1]);
}

/// The account for a person vouches only for what was read: an input cut short or not a
/// capture at all says it was not read in full, where a whole one says nothing of the kind.
#[test]
fn the_text_account_says_which_inputs_were_not_read_in_full() {
    let text = |name: &str| {
        let out = Command::new(bin())
            .args(["--format", "text"])
            .arg(corpus_dir().join(name))
            .output()
            .expect("run the binary");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let nothing = text("bad-magic.pcap");
    assert!(
        nothing.contains("no resume and no finding in what was read; NOT read in full"),
        "{nothing}"
    );
    let part = text("truncated-record-body.pcap");
    assert!(part.contains("every resume correct"), "{part}");
    assert!(part.contains("NOT read in full"), "{part}");
    let whole = text("tcp-hole-then-64kb.pcap");
    assert!(whole.contains("[capture_incomplete]"), "{whole}");
    assert!(!whole.contains("NOT read in full"), "{whole}");
}
