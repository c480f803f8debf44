//! HAR input through the real binary: bad entries and documents, and the same verdicts as the
//! captures of the same traffic.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_mcp-resume-audit")
}

struct Run {
    resumes: Vec<Value>,
    summary: Value,
    code: i32,
    stderr: String,
}

fn run(args: &[&str]) -> Run {
    let out = Command::new(bin()).args(args).output().expect("run binary");
    let stdout = String::from_utf8(out.stdout).expect("utf-8 report");
    let mut lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect();
    let summary = lines.pop().expect("a summary line");
    assert_eq!(summary["type"], "summary");
    Run {
        resumes: lines,
        summary,
        code: out.status.code().unwrap_or(-1),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// A HAR 1.2 document of `entries`, written as `file` in a scratch folder of its own: the
/// folder (for the test to remove) and the file.
fn write_har(tag: &str, file: &str, entries: Vec<Value>) -> (PathBuf, PathBuf) {
    let har = json!({"log": {"version": "1.2", "creator": {"name": "test", "version": "1"},
                             "entries": entries}});
    let dir = scratch(tag);
    let path = dir.join(file);
    std::fs::write(&path, serde_json::to_vec(&har).unwrap()).unwrap();
    (dir, path)
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mra-har-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn resume(index: u64, last: &str, text: Value, encoding: Option<&str>) -> Value {
    let mut content = json!({"size": 0, "mimeType": "text/event-stream", "text": text});
    if let Some(enc) = encoding {
        content["encoding"] = json!(enc);
    }
    json!({
        "startedDateTime": format!("2026-11-09T10:00:{:02}.000Z", index),
        "request": {"method": "GET", "url": "http://127.0.0.1:8000/mcp",
                    "headers": [{"name": "Mcp-Session-Id", "value": "s-bad"},
                                {"name": "Last-Event-ID", "value": last}]},
        "response": {"status": 200,
                     "headers": [{"name": "Content-Type", "value": "text/event-stream"}],
                     "content": content}
    })
}

#[test]
fn bad_entries_are_named_and_the_rest_is_analyzed() {
    let dir = scratch("entries");
    let mut entries = vec![
        resume(0, "1", json!("id: 2\ndata: a\n\n"), None),
        // Wrong type: the method is a number.
        resume(1, "1", json!("id: 2\ndata: a\n\n"), None),
        // Missing required field: no response.
        json!({"startedDateTime": "2026-11-09T10:00:02Z",
               "request": {"method": "GET", "url": "/", "headers": []}}),
        // Invalid base64 in a resumed stream.
        resume(3, "1", json!("aWQ6IDI*"), Some("base64")),
        // A huge Last-Event-ID.
        resume(4, &"9".repeat(200_000), json!("id: 2\ndata: a\n\n"), None),
        // Not a date.
        resume(5, "1", json!("id: 2\ndata: a\n\n"), None),
        json!([1, 2, 3]),
        resume(7, "4", json!("aWQ6IDUKZGF0YTogeAoK"), Some("base64")),
    ];
    entries[1]["request"]["method"] = json!(5);
    entries[5]["startedDateTime"] = json!("yesterday");
    let doc = json!({"log": {"version": "1.2", "creator": {"name": "t", "version": "1"},
                             "entries": entries}});
    let path = dir.join("bad.har");
    std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
    let got = run(&[path.to_str().unwrap()]);
    assert_eq!(got.code, 2, "{}", got.stderr);
    let cited: Vec<u64> = got
        .resumes
        .iter()
        .map(|r| r["har_entry"].as_u64().unwrap())
        .collect();
    assert_eq!(cited, vec![0, 7]);
    assert!(got.resumes.iter().all(|r| r["verdict"] == "correct"));
    let errors: Vec<&str> = got.stderr.lines().collect();
    assert_eq!(errors.len(), 6, "{}", got.stderr);
    for (line, (entry, what)) in errors.iter().zip([
        (1, "invalid type"),
        (2, "missing field `response`"),
        (3, "invalid base64"),
        (4, "Last-Event-ID is longer than 65536 bytes"),
        (5, "is not an RFC 3339 date-time"),
        (6, "not a JSON object"),
    ]) {
        assert!(line.starts_with("error: "), "{line}");
        assert!(line.contains("bad.har: "), "{line}");
        assert!(line.contains(&format!("entry {entry}: ")), "{line}");
        assert!(line.contains(what), "{line}");
        assert!(line.len() < 400, "one short line: {line}");
    }
    assert_eq!(got.summary["inputs_failed"], 1);
    assert_eq!(got.summary["problems"].as_array().unwrap().len(), 6);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn documents_that_are_not_har_fail_alone() {
    let dir = scratch("docs");
    let cases: [(&str, &[u8], &str); 6] = [
        ("garbage.har", b"{garbage", "expected a member name"),
        (
            "array.json",
            b"[1, 2]",
            "not a capture (pcap, pcapng) or HAR file",
        ),
        (
            "other.json",
            b"{\"name\": \"package\", \"version\": 1}",
            "not a HAR file",
        ),
        (
            "cut.har",
            b"{\"log\": {\"entries\": [{\"startedDateTime\": \"20",
            "entry 0",
        ),
        ("bad.zhar", b"\x78\x9c\x01\x02\x03garbage", "read error"),
        (
            "types.har",
            b"{\"log\": {\"entries\": 5}}",
            "\"log.entries\" is not an array",
        ),
    ];
    let good = root().join("fixtures/har/verdict-correct.har");
    let mut args = vec![good.to_str().unwrap().to_string()];
    for (name, bytes, _) in &cases {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        args.push(p.to_str().unwrap().to_string());
    }
    for threads in ["-j1", "-j3"] {
        let mut a: Vec<&str> = vec![threads];
        a.extend(args.iter().map(String::as_str));
        let got = run(&a);
        assert_eq!(got.code, 2);
        assert_eq!(got.resumes.len(), 1);
        assert_eq!(got.resumes[0]["verdict"], "correct");
        assert_eq!(got.summary["inputs"], 7);
        assert_eq!(got.summary["inputs_failed"], 6);
        let lines: Vec<&str> = got.stderr.lines().collect();
        assert_eq!(lines.len(), cases.len(), "{}", got.stderr);
        for (line, (name, _, what)) in lines.iter().zip(&cases) {
            assert!(line.contains(name) && line.contains(what), "{line}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// (session_id, verdict, last_event_id, first_event_id) of each resume.
fn verdicts(r: &Run) -> Vec<(Value, Value, Value, Value)> {
    r.resumes
        .iter()
        .map(|x| {
            (
                x["session_id"].clone(),
                x["verdict"].clone(),
                x["last_event_id"].clone(),
                x["first_event_id"].clone(),
            )
        })
        .collect()
}

#[test]
fn a_capture_and_a_har_of_the_same_traffic_agree() {
    let har_dir = root().join("fixtures/har");
    let mut compared = 0;
    for e in std::fs::read_dir(&har_dir).unwrap().flatten() {
        let p = e.path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        // The verdict-* HARs record the same exchanges as the captures of the same name.
        let Some(stem) = name
            .strip_suffix(".har")
            .filter(|s| s.starts_with("verdict-"))
        else {
            continue;
        };
        let cap = root().join(format!("fixtures/gen/{stem}.pcap"));
        if !cap.exists() {
            continue;
        }
        let from_har = run(&[p.to_str().unwrap()]);
        let from_cap = run(&[cap.to_str().unwrap()]);
        assert_eq!(verdicts(&from_har), verdicts(&from_cap), "{stem}");
        assert_eq!(from_har.code, from_cap.code, "{stem}");
        assert!(from_har.resumes.iter().all(|r| r["har_entry"].is_u64()
            && r["request_frame"].is_null()
            && r["tcp_stream"].is_null()
            && r["display_filter"].is_null()));
        compared += 1;
    }
    assert!(compared >= 8, "only {compared} pairs");
}

#[test]
fn an_export_cannot_make_a_streamed_body_empty() {
    // The same resume as verdict-empty, with the proof of length removed: the HAR no longer
    // shows that the server sent nothing.
    let p = root().join("fixtures/har/verdict-empty.har");
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    let headers = &mut doc["log"]["entries"][2]["response"]["headers"];
    headers
        .as_array_mut()
        .unwrap()
        .retain(|h| h["name"] != "content-length");
    let dir = scratch("empty");
    let q = dir.join("no-length.har");
    std::fs::write(&q, serde_json::to_vec(&doc).unwrap()).unwrap();
    let got = run(&[q.to_str().unwrap()]);
    assert_eq!(got.resumes.len(), 1);
    assert_eq!(got.resumes[0]["verdict"], "capture_incomplete");
    assert!(
        got.resumes[0]["reason"]
            .as_str()
            .unwrap()
            .contains("empty body"),
        "{}",
        got.resumes[0]
    );
    assert_eq!(got.code, 1);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_har_on_standard_input() {
    let p = root().join("fixtures/har/quirk-zhar.zhar");
    let out = Command::new(bin())
        .arg("-")
        .stdin(std::fs::File::open(&p).unwrap())
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["verdict"], "replayed");
    assert_eq!(first["har_entry"], 2);
    assert_eq!(first["input"], "-");
}

#[test]
fn attached_bodies_are_only_read_beside_the_har() {
    let dir = scratch("file");
    std::fs::write(dir.join("body.dat"), b"id: 2\ndata: x\n\n").unwrap();
    let mut entries = Vec::new();
    for (k, file) in ["body.dat", "../body.dat", "/etc/hostname", "gone.dat"]
        .iter()
        .enumerate()
    {
        let mut e = resume(k as u64, "1", json!(null), None);
        e["response"]["content"] =
            json!({"size": 15, "mimeType": "text/event-stream", "_file": file});
        entries.push(e);
    }
    let doc = json!({"log": {"entries": entries}});
    let path = dir.join("attach.har");
    std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
    let got = run(&[path.to_str().unwrap()]);
    let seen: Vec<(u64, &str)> = got
        .resumes
        .iter()
        .map(|r| {
            (
                r["har_entry"].as_u64().unwrap(),
                r["verdict"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(seen, vec![(0, "correct"), (3, "capture_incomplete")]);
    let lines: Vec<&str> = got.stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{}", got.stderr);
    assert!(lines[0].contains("entry 1: content._file \"../body.dat\" is not a plain file name"));
    assert!(lines[1].contains("entry 2: content._file"));
    assert!(lines[2].starts_with("warning: ") && lines[2].contains("gone.dat"));
    // A verdict other than correct comes before the read error (stderr names it).
    assert_eq!(got.code, 1);
    std::fs::remove_dir_all(&dir).ok();
}

/// One HAR entry: `method` on `/mcp` for session `sid` (none for `initialize`), answered by
/// an event stream `body` whose Content-Length proves it whole.
fn entry(second: u64, method: &str, sid: Option<&str>, last: Option<&str>, body: &str) -> Value {
    let mut req_headers = vec![json!({"name": "Accept", "value": "text/event-stream"})];
    if let Some(sid) = sid {
        req_headers.push(json!({"name": "Mcp-Session-Id", "value": sid}));
    }
    if let Some(last) = last {
        req_headers.push(json!({"name": "Last-Event-ID", "value": last}));
    }
    json!({
        "startedDateTime": format!("2026-11-09T10:00:{second:02}.000Z"),
        "request": {"method": method, "url": "http://127.0.0.1:8000/mcp", "headers": req_headers},
        "response": {"status": 200,
                     "headers": [{"name": "Content-Type", "value": "text/event-stream"},
                                 {"name": "Content-Length", "value": body.len().to_string()},
                                 {"name": "Mcp-Session-Id", "value": sid.unwrap_or("")}],
                     "content": {"size": body.len(), "mimeType": "text/event-stream",
                                 "text": body}}
    })
}

fn sse(events: &[(&str, String)]) -> String {
    events
        .iter()
        .map(|(id, data)| format!("id: {id}\ndata: {data}\n\n"))
        .collect()
}

fn progress(token: &str, value: u32) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"{token}","progress":{value}}}}}"#
    )
}

/// The streams of a HAR that came before a resume are read too: they are what shows one
/// session's events reaching another (an event store keyed by request id, shared between
/// sessions) and progress going back after a replay. Findings name HAR entries, not frames.
#[test]
fn earlier_streams_of_a_har_give_the_session_its_facts() {
    let msg = |n: u32| {
        format!(r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"n":{n}}}}}"#)
    };
    let a1 = "7c1e4a52-93d0-4f55-8d2b-0a6f3b9e1c11";
    let a2 = "e94b0f3c-1a7d-4c6e-b2f8-5d3a9c0e7b22";
    let b1 = "3f8a2d61-c5e9-47b0-9a1e-6b4d8f2c0a33";
    let c = |n: u32| format!("c0ffee00-aaaa-4bbb-8ccc-{n:012}");
    let entries = vec![
        entry(
            1,
            "POST",
            None,
            None,
            &sse(&[("", msg(0))]).replace("id: \n", ""),
        ),
        entry(
            2,
            "GET",
            Some("sess-A"),
            None,
            &sse(&[(a1, msg(1)), (a2, msg(2))]),
        ),
        entry(3, "GET", Some("sess-B"), None, &sse(&[(b1, msg(3))])),
        // B resumes and receives A's second event.
        entry(4, "GET", Some("sess-B"), Some(b1), &sse(&[(a2, msg(2))])),
        // C's call reports progress 1, 2, 3; its resume replays from the start.
        entry(
            5,
            "POST",
            Some("sess-C"),
            None,
            &sse(&[
                (&c(1), progress("t1", 1)),
                (&c(2), progress("t1", 2)),
                (&c(3), progress("t1", 3)),
            ]),
        ),
        entry(
            6,
            "GET",
            Some("sess-C"),
            Some(&c(3)),
            &sse(&[(&c(1), progress("t1", 1))]),
        ),
    ];
    let (dir, path) = write_har("earlier-streams", "sessions.har", entries);
    let r = run(&["-q", "-j1", path.to_str().unwrap()]);
    let findings: Vec<&Value> = r
        .resumes
        .iter()
        .flat_map(|l| l["findings"].as_array().into_iter().flatten())
        .collect();
    let of = |kind: &str| findings.iter().find(|f| f["kind"] == kind).copied();
    let leak = of("cross_session_leak").expect("the leak is reported");
    assert_eq!(leak["session_id"], "sess-B");
    assert_eq!(leak["other_session_id"], "sess-A");
    assert_eq!(leak["id"], a2);
    let entries_cited: Vec<&Value> = leak["cites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["har_entry"])
        .collect();
    assert_eq!(entries_cited, [&json!(1), &json!(3)]);
    let detail = leak["detail"].as_str().unwrap();
    assert!(
        detail.contains("HAR entry 1") && !detail.contains("frame"),
        "{detail}"
    );
    let regressed = of("progress_regressed").expect("the progress regression is reported");
    assert_eq!(regressed["session_id"], "sess-C");
    // The replay itself is decided from the earlier stream too (its ids' counter).
    let c_resume = r
        .resumes
        .iter()
        .find(|l| l["last_event_id"] == c(3))
        .unwrap();
    assert_eq!(c_resume["verdict"], "replayed");
    assert_eq!(c_resume["cursor"]["status"], "consistent");
    let _ = std::fs::remove_dir_all(dir);
}

/// A HAR lists an entry when it completes: the standalone GET, which began before the
/// DELETE and ended after it, comes after the DELETE in the file. It is still part of its
/// session, not a session view of its own.
#[test]
fn a_stream_that_ends_after_the_delete_stays_in_its_session() {
    let msg = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#;
    let mut delete = entry(3, "DELETE", Some("sess-D"), None, "");
    delete["response"]["headers"] = json!([]);
    let entries = vec![
        entry(
            1,
            "GET",
            Some("sess-D"),
            Some("d-41"),
            &sse(&[("d-42", msg.to_string())]),
        ),
        delete,
        entry(
            2,
            "GET",
            Some("sess-D"),
            None,
            &sse(&[("d-43", msg.to_string())]),
        ),
    ];
    let (dir, path) = write_har("after-delete", "late-get.har", entries);
    let r = run(&["-q", "-j1", "--sessions", path.to_str().unwrap()]);
    let views: Vec<&Value> = r
        .resumes
        .iter()
        .filter(|l| l["type"] == "session")
        .collect();
    assert_eq!(views.len(), 1, "{views:#?}");
    assert_eq!(views[0]["exchanges"].as_array().unwrap().len(), 3);
    let _ = std::fs::remove_dir_all(dir);
}

/// Entries go to the session stage in order of start, through a window of half the session
/// memory: an entry that began before one already taken is taken late, its session may have
/// been audited without it, and the run says so. With no session memory at all, every
/// exchange is audited alone (the two GETs counted as retired early, the DELETE ends its
/// session). The answer does not depend on `-j`;
/// with the default memory the window holds the whole document.
#[test]
fn a_har_out_of_order_past_the_session_memory_says_so() {
    let msg = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#;
    let mut delete = entry(3, "DELETE", Some("sess-L"), None, "");
    delete["response"]["headers"] = json!([]);
    let entries = vec![
        entry(
            1,
            "GET",
            Some("sess-L"),
            Some("l-41"),
            &sse(&[("l-42", msg.to_string())]),
        ),
        delete,
        entry(
            2,
            "GET",
            Some("sess-L"),
            None,
            &sse(&[("l-43", msg.to_string())]),
        ),
    ];
    let (dir, path) = write_har("late-entry", "late.har", entries);
    let p = path.to_str().unwrap();
    let views = |r: &Run| {
        r.resumes
            .iter()
            .filter(|l| l["type"] == "session")
            .map(|v| v["exchanges"].as_array().unwrap().len())
            .collect::<Vec<_>>()
    };
    let late = run(&["-q", "-j1", "--sessions", "--session-memory", "0", p]);
    assert_eq!(views(&late), [1, 1, 1], "{:#?}", late.resumes);
    assert_eq!(late.summary["sessions_retired_early"], 2);
    assert!(
        late.stderr.contains(
            "late.har: 1 entry began before entries already audited (the HAR is out of order \
             of startedDateTime by more than --session-memory holds)"
        ),
        "{}",
        late.stderr
    );
    let late2 = run(&["-q", "-j2", "--sessions", "--session-memory", "0", p]);
    assert_eq!(late2.resumes, late.resumes);
    assert_eq!(late2.stderr, late.stderr);
    let whole = run(&["-q", "-j2", "--sessions", p]);
    assert_eq!(views(&whole), [3]);
    assert!(!whole.stderr.contains("began before"), "{}", whole.stderr);
    let _ = std::fs::remove_dir_all(dir);
}

/// A HAR of several hundred entries (many batches on the entry threads, given back out of
/// order) gives the same facts to a map step and the same report at any `-j`, also when the
/// session memory is small enough that sessions are audited early and entries wait in order.
#[test]
fn a_long_har_gives_the_same_facts_and_report_at_any_j() {
    let msg = |n: usize| {
        format!(r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"n":{n}}}}}"#)
    };
    let mut entries = Vec::new();
    for i in 0..600usize {
        let sid = format!("sess-{}", i % 9);
        let first = i * 10;
        let events: Vec<(String, String)> = (0..1 + i % 12)
            .map(|k| ((first + k).to_string(), msg(k)))
            .collect();
        let body: String = events
            .iter()
            .map(|(id, data)| format!("id: {id}\ndata: {data}\n\n"))
            .collect();
        // Every third a resume; the times go back now and then by a few seconds.
        let last = (i % 3 == 0 && i > 9).then(|| (first - 85).to_string());
        let second = (i as u64 * 2).saturating_sub(if i % 17 == 0 { 5 } else { 0 });
        let mut e = entry(second % 60, "GET", Some(&sid), last.as_deref(), &body);
        e["startedDateTime"] = json!(format!(
            "2026-11-09T{:02}:{:02}:{:02}.000Z",
            10 + second / 3600,
            (second / 60) % 60,
            second % 60
        ));
        entries.push(e);
    }
    let (dir, path) = write_har("long", "long.har", entries);
    let p = path.to_str().unwrap();
    let out = |args: &[&str]| {
        let o = Command::new(bin()).args(args).arg(p).output().expect("run");
        (o.stdout, String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let facts = out(&["-j1", "--emit-facts", "-"]);
    assert!(facts.0.len() > 100_000, "{}", facts.0.len());
    let small = ["--sessions", "--session-memory", "96KiB"];
    let report = out(&[&["-j1"][..], &small].concat());
    let early = run(&[&["-q", "-j1"][..], &small, &[p]].concat());
    assert!(
        early.summary["sessions_retired_early"].as_u64().unwrap() > 0,
        "{}",
        early.summary
    );
    for j in ["-j2", "-j3", "-j8"] {
        assert!(out(&[j, "--emit-facts", "-"]) == facts, "facts at {j}");
        assert!(out(&[&[j][..], &small].concat()) == report, "report at {j}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
