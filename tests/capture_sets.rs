//! Capture sets, directories and compressed inputs, against the whole capture.
//!
//! Every committed real capture is split with `editcap -c N` at many sizes (cutting
//! connections, resumed streams and HTTP messages between files) and given in several orders,
//! as files and as their directory, with one and two threads: the report must be the whole
//! capture's, once each set citation (`file` + its own frame) is turned back into the whole
//! capture's frame number — verdicts, first ids, cursors, evidence, findings and their
//! sentences, times, tcp.stream numbers and the counters of the summary.
//!
//! editcap comes with tshark (Debian's `wireshark-common`), which `.ci/run` installs; elsewhere
//! the tests that need it say they were skipped.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_mcp-resume-audit")
}

fn editcap_available() -> bool {
    let ok = Command::new("editcap")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "editcap (with tshark) must be installed under CI"
        );
        eprintln!("editcap not installed: split-capture tests skipped");
    }
    ok
}

struct Report {
    lines: Vec<Value>,
    stderr: String,
    code: i32,
}

fn run(args: &[String]) -> Report {
    let out = Command::new(bin()).args(args).output().expect("run binary");
    let lines = String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    Report {
        lines,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        code: out.status.code().unwrap_or(-1),
    }
}

/// The captures recorded with real stacks.
fn real_captures() -> Vec<PathBuf> {
    common::fixture_files(
        |p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("pcap" | "pcapng")
            )
        },
        |p| {
            let s = p.to_string_lossy();
            !s.ends_with("malformed") && !s.ends_with("gen")
        },
    )
    .into_iter()
    .filter(|p| {
        let s = p.to_string_lossy();
        s.contains("real")
    })
    .collect()
}

/// Splits `cap` into files of `per_file` packets in `dir` (dumpcap-style names); `None` when
/// editcap cannot write this capture's format.
fn split(cap: &Path, per_file: u64, dir: &Path) -> Option<Vec<PathBuf>> {
    let ext = cap.extension()?.to_str()?;
    let out = Command::new("editcap")
        .arg("-c")
        .arg(per_file.to_string())
        .arg(cap)
        .arg(dir.join(format!("part.{ext}")))
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    Some(files)
}

/// The report with every citation in the whole capture's numbering, and what depends on the
/// input's name (the name, display filters, per-input lines) left out.
fn in_whole_numbering(lines: &[Value], files: &[PathBuf], per_file: u64) -> Vec<Value> {
    let index = |name: &str| {
        files
            .iter()
            .position(|f| f.display().to_string() == name)
            .unwrap_or_else(|| panic!("a citation names {name}, which is not in the set"))
            as u64
    };
    mapped(lines, files, &|name, local| index(name) * per_file + local)
}

/// The report with every citation `(file, frame)` turned into `whole(file, frame)`.
fn mapped(lines: &[Value], files: &[PathBuf], whole: &dyn Fn(&str, u64) -> u64) -> Vec<Value> {
    // The set's names, longest first, so that `a.pcap1` is never read as `a.pcap`.
    let mut names: Vec<String> = files
        .iter()
        .map(|f| regex::escape(&f.display().to_string()))
        .collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    let frame_re = regex::Regex::new(&format!(r"frame (\d+) of ({})", names.join("|"))).unwrap();
    fn walk(
        v: &mut Value,
        fix: &dyn Fn(&mut serde_json::Map<String, Value>),
        re: &dyn Fn(&str) -> String,
    ) {
        match v {
            Value::Object(m) => {
                fix(m);
                for (_, x) in m.iter_mut() {
                    walk(x, fix, re);
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|x| walk(x, fix, re)),
            Value::String(s) => *s = re(s),
            _ => {}
        }
    }
    let fix = |m: &mut serde_json::Map<String, Value>| {
        let keys: Vec<String> = m.keys().cloned().collect();
        for k in keys {
            let Some(prefix) = k.strip_suffix("file") else {
                continue;
            };
            let Some(Value::String(name)) = m.remove(&k) else {
                continue;
            };
            let frame_key = format!("{prefix}frame");
            if let Some(Value::Number(n)) = m.get(&frame_key) {
                let local = n.as_u64().unwrap();
                m.insert(frame_key, Value::from(whole(&name, local)));
            }
        }
        for k in ["input", "display_filter", "per_input", "problems", "inputs"] {
            m.remove(k);
        }
    };
    let re = |s: &str| {
        frame_re
            .replace_all(s, |c: &regex::Captures<'_>| {
                let local: u64 = c[1].parse().unwrap();
                format!("frame {}", whole(&c[2], local))
            })
            .into_owned()
    };
    let mut out = lines.to_vec();
    for v in &mut out {
        walk(v, &fix, &re);
    }
    out
}

fn without_names(lines: &[Value]) -> Vec<Value> {
    let mut out = lines.to_vec();
    for v in &mut out {
        if let Value::Object(m) = v {
            for k in ["input", "display_filter", "per_input", "problems", "inputs"] {
                m.remove(k);
            }
        }
    }
    out
}

/// A deterministic shuffle.
fn shuffled<T: Clone>(v: &[T], seed: u64) -> Vec<T> {
    let mut v = v.to_vec();
    let mut s = seed | 1;
    for i in (1..v.len()).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.swap(i, (s % (i as u64 + 1)) as usize);
    }
    v
}

fn args(extra: &[&str], cap: &Path, inputs: &[PathBuf]) -> Vec<String> {
    let mut a: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    a.push("--sessions".into());
    a.extend(common::key_log_args(cap));
    a.extend(inputs.iter().map(|p| p.display().to_string()));
    a
}

#[test]
fn a_capture_split_at_any_size_in_any_order_gives_the_whole_captures_report() {
    if !editcap_available() {
        return;
    }
    let caps = real_captures();
    assert!(caps.len() >= 10, "real captures missing: {}", caps.len());
    let mut checked = 0;
    let mut failures = Vec::new();
    for (ci, cap) in caps.iter().enumerate() {
        let whole = run(&args(&["-j1"], cap, std::slice::from_ref(cap)));
        let packets = whole.lines.last().unwrap()["packets"].as_u64().unwrap();
        for (si, per_file) in [1u64, 4, 29, packets / 2 + 1].into_iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            let Some(files) = split(cap, per_file, dir.path()) else {
                continue;
            };
            let seed = (ci * 31 + si) as u64;
            let orders: [(&str, Vec<PathBuf>); 3] = [
                ("-j1", shuffled(&files, seed)),
                ("-j2", files.iter().rev().cloned().collect()),
                ("-j2", vec![dir.path().to_path_buf()]),
            ];
            for (j, inputs) in orders {
                let set = run(&args(&[j], cap, &inputs));
                let got = in_whole_numbering(&set.lines, &files, per_file);
                let want = without_names(&whole.lines);
                checked += 1;
                if got != want || set.code != whole.code {
                    failures.push(format!(
                        "{} split every {per_file} packets, {j}, {} input(s): exit {} vs {}\n{}",
                        cap.display(),
                        inputs.len(),
                        set.code,
                        whole.code,
                        first_difference(&want, &got)
                    ));
                }
                // The summary says which files were read, in reading order.
                let per_input = &set.lines.last().unwrap()["per_input"];
                if files.len() > 1 {
                    let read: Vec<String> = per_input[0]["files"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|f| f.as_str().unwrap().to_string())
                        .collect();
                    let named: Vec<String> =
                        files.iter().map(|f| f.display().to_string()).collect();
                    assert_eq!(read, named, "{}", cap.display());
                    assert_eq!(per_input.as_array().unwrap().len(), 1);
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    eprintln!("{checked} splits checked");
    assert!(checked >= 150, "only {checked} splits checked");
}

fn first_difference(want: &[Value], got: &[Value]) -> String {
    if want.len() != got.len() {
        return format!("{} lines, want {}", got.len(), want.len());
    }
    for (w, g) in want.iter().zip(got) {
        if w != g {
            return format!("want {w}\n got {g}");
        }
    }
    String::new()
}

/// The capture the tool's README runs first: seven resumes of every verdict.
fn loopback() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/real-tool/loopback-v4.pcap")
}

#[test]
fn a_missing_file_in_the_middle_is_named_and_never_blamed_on_the_server() {
    if !editcap_available() {
        return;
    }
    let cap = loopback();
    let whole = run(&args(&[], &cap, std::slice::from_ref(&cap)));
    // Each resume by its session, request time and Last-Event-ID: its verdict.
    let verdict_of = |lines: &[Value]| -> std::collections::BTreeMap<String, String> {
        lines
            .iter()
            .filter(|l| l["type"] == "resume")
            .map(|l| {
                (
                    format!(
                        "{} {} {}",
                        l["session_id"], l["request_time"], l["last_event_id"]
                    ),
                    l["verdict"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let want = verdict_of(&whole.lines);
    let dir = tempfile::tempdir().unwrap();
    let files = split(&cap, 20, dir.path()).unwrap();
    assert!(files.len() > 5);
    let mut changed = 0;
    for gone in 1..files.len() - 1 {
        let mut rest = files.clone();
        rest.remove(gone);
        let set = run(&args(&[], &cap, &rest));
        assert!(
            set.stderr
                .contains(&format!("the file numbered {gone} is missing")),
            "{}",
            set.stderr
        );
        let got = verdict_of(&set.lines);
        changed += usize::from(got != want);
        for (resume, verdict) in &got {
            // What the capture lost may leave a resume undecided or unseen, never make an
            // accusation the whole capture does not make.
            if verdict == "gap_skipped" || verdict == "replayed" {
                assert_eq!(
                    want.get(resume),
                    Some(verdict),
                    "file {gone} left out: {resume}"
                );
            }
        }
    }
    assert!(
        changed > 0,
        "leaving files out changed nothing: the test proves nothing"
    );
}

#[test]
fn files_whose_names_and_times_disagree_are_read_in_time_order_and_said_so() {
    if !editcap_available() {
        return;
    }
    let cap = loopback();
    let whole = run(&args(&[], &cap, std::slice::from_ref(&cap)));
    let dir = tempfile::tempdir().unwrap();
    let files = split(&cap, 40, dir.path()).unwrap();
    // A ring buffer that wrapped, tcpdump-style: the newest files got the lowest numbers.
    let n = files.len();
    let mut renamed = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let to = dir.path().join(format!("ring.pcap{}", (i + 3) % n));
        std::fs::rename(f, &to).unwrap();
        renamed.push(to);
    }
    let set = run(&args(&[], &cap, &[dir.path().to_path_buf()]));
    assert!(
        set.stderr.contains("differs from the order of their names"),
        "{}",
        set.stderr
    );
    assert_eq!(
        in_whole_numbering(&set.lines, &renamed, 40),
        without_names(&whole.lines)
    );
}

#[test]
fn overlapping_files_are_reported_not_silently_joined() {
    let a = loopback();
    let b = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/real-tool/loopback-v4-any.pcap");
    let set = run(&[
        "--merge".to_string(),
        a.display().to_string(),
        b.display().to_string(),
    ]);
    assert!(set.stderr.contains("overlap in time"), "{}", set.stderr);
    let per_input = set.lines.last().unwrap()["per_input"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(per_input.len(), 1, "--merge makes one input");
}

/// Compresses `data` in every supported format: (extension, bytes).
fn compressed(data: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(data).unwrap();
    let mut lz = lz4_flex::frame::FrameEncoder::new(Vec::new());
    lz.write_all(data).unwrap();
    let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 6);
    xz.write_all(data).unwrap();
    vec![
        ("gz", gz.finish().unwrap()),
        ("zst", zstd::bulk::compress(data, 3).unwrap()),
        ("lz4", lz.finish().unwrap()),
        ("xz", xz.finish().unwrap()),
    ]
}

#[test]
fn compressed_captures_and_hars_give_the_plain_files_report() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    for plain in [
        loopback(),
        root.join("fixtures/real/py-counter.pcap"),
        root.join("fixtures/real/py-from-start.pcapng"),
        root.join("fixtures/real/ts-sdk-mitm-streamed.har"),
    ] {
        let want = run(&args(&[], &plain, std::slice::from_ref(&plain)));
        assert!(!want.lines.is_empty());
        let data = std::fs::read(&plain).unwrap();
        for (ext, bytes) in compressed(&data) {
            // A misleading name: the bytes decide.
            let p = dir.path().join(format!("{}.{ext}.bin", ext));
            std::fs::write(&p, &bytes).unwrap();
            let got = run(&args(&[], &plain, std::slice::from_ref(&p)));
            assert_eq!(
                without_names(&got.lines),
                without_names(&want.lines),
                "{} as {ext}",
                plain.display()
            );
            assert_eq!(got.code, want.code);
            // Cut short: an error naming the file, the other input still analyzed.
            std::fs::write(&p, &bytes[..bytes.len() * 2 / 3]).unwrap();
            let cut = run(&args(&[], &plain, &[p.clone(), plain.clone()]));
            assert!(cut.code != 0, "{ext}");
            assert!(
                cut.stderr.contains(&format!("error: {}", p.display())),
                "{ext}: {}",
                cut.stderr
            );
            assert_eq!(
                cut.lines.last().unwrap()["per_input"][1]["resumes"],
                want.lines.last().unwrap()["resumes"],
                "{ext}"
            );
        }
    }
}

#[test]
fn a_compressed_ring_buffer_in_a_directory_tree_reads_as_the_whole_capture() {
    if !editcap_available() {
        return;
    }
    let cap = loopback();
    let whole = run(&args(&[], &cap, std::slice::from_ref(&cap)));
    let top = tempfile::tempdir().unwrap();
    let ring = top.path().join("host-a");
    std::fs::create_dir(&ring).unwrap();
    let files = split(&cap, 30, &ring).unwrap();
    // `tcpdump -z`-like: every file but the last compressed, each in another format.
    let mut members = Vec::new();
    for (i, f) in files.iter().enumerate() {
        if i + 1 == files.len() {
            members.push(f.clone());
            continue;
        }
        let (ext, bytes) = compressed(&std::fs::read(f).unwrap()).swap_remove(i % 4);
        let to = PathBuf::from(format!("{}.{ext}", f.display()));
        std::fs::write(&to, bytes).unwrap();
        std::fs::remove_file(f).unwrap();
        members.push(to);
    }
    std::fs::write(top.path().join("notes.txt"), "not a capture").unwrap();
    std::fs::write(top.path().join("report.jsonl"), "{\"type\":\"summary\"}\n").unwrap();
    let set = run(&args(&[], &cap, &[top.path().to_path_buf()]));
    assert!(
        set.stderr
            .contains("2 file(s) that are neither captures nor HARs skipped"),
        "{}",
        set.stderr
    );
    assert_eq!(
        in_whole_numbering(&set.lines, &members, 30),
        without_names(&whole.lines)
    );
}

#[test]
fn a_directory_of_unrelated_captures_gives_one_input_each_in_name_order() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let top = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(top.path().join("b/deeper")).unwrap();
    std::fs::create_dir_all(top.path().join("a")).unwrap();
    std::fs::copy(loopback(), top.path().join("b/deeper/host2.pcap")).unwrap();
    std::fs::copy(
        root.join("fixtures/real/py-counter.pcap"),
        top.path().join("a/host1.pcap"),
    )
    .unwrap();
    std::fs::copy(
        root.join("fixtures/real/rmcp.pcap"),
        top.path().join("b/client.pcap"),
    )
    .unwrap();
    let r = run(&[top.path().display().to_string()]);
    let names: Vec<String> = r.lines.last().unwrap()["per_input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["input"].as_str().unwrap().to_string())
        .collect();
    let expect: Vec<String> = ["a/host1.pcap", "b/client.pcap", "b/deeper/host2.pcap"]
        .iter()
        .map(|n| top.path().join(n).display().to_string())
        .collect();
    assert_eq!(names, expect);
    // An empty directory is an input that failed.
    let empty = tempfile::tempdir().unwrap();
    let r = run(&[
        empty.path().display().to_string(),
        loopback().display().to_string(),
    ]);
    assert_eq!(r.code, 1, "the capture's accusations still come first");
    assert!(
        r.stderr
            .contains("no capture or HAR file in this directory")
    );
    assert_eq!(r.lines.last().unwrap()["inputs_failed"], 1);
}

/// Writes the frames of `cap` that `filter` selects to `out`; returns their numbers in `cap`.
fn tshark_select(cap: &Path, filter: &str, out: &Path) -> Vec<u64> {
    let ok = Command::new("tshark")
        .args(["-r"])
        .arg(cap)
        .args(["-Y", filter, "-w"])
        .arg(out)
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(ok, "tshark -Y {filter}");
    let list = Command::new("tshark")
        .args(["-r"])
        .arg(cap)
        .args(["-Y", filter, "-T", "fields", "-e", "frame.number"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect()
}

#[test]
fn connections_captured_on_different_hosts_are_audited_as_one_capture() {
    if !editcap_available() {
        return;
    }
    // Behind a load balancer each backend holds some of a session's connections: the resume
    // on one, the stream it resumes on another. Split by connection over two and three hosts,
    // the fleet must give the whole capture's report, each citation in its host's file.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for cap in [
        loopback(),
        root.join("fixtures/real/ts-sdk-restart.pcap"),
        root.join("fixtures/real/py-evicting.pcap"),
    ] {
        let whole = run(&args(&[], &cap, std::slice::from_ref(&cap)));
        for hosts in [2u64, 3] {
            let dir = tempfile::tempdir().unwrap();
            let mut files = Vec::new();
            let mut frames = Vec::new();
            for h in 0..hosts {
                let f = dir.path().join(format!("backend-{h}.pcap"));
                frames.push(tshark_select(
                    &cap,
                    &format!("tcp.stream % {hosts} == {h}"),
                    &f,
                ));
                files.push(f);
            }
            let inputs: Vec<PathBuf> = files.iter().rev().cloned().collect();
            let whole_frame = |name: &str, local: u64| {
                let h = files
                    .iter()
                    .position(|f| f.display().to_string() == name)
                    .unwrap();
                frames[h][local as usize - 1]
            };
            for j in ["-j1", "-j2"] {
                let fleet = run(&args(&["--fleet", j], &cap, &inputs));
                assert_eq!(
                    mapped(&fleet.lines, &files, &whole_frame),
                    without_names(&whole.lines),
                    "{} over {hosts} hosts {j}",
                    cap.display()
                );
                assert_eq!(fleet.code, whole.code);
            }
            // Apart, the hosts cannot tell: the test has something to prove.
            let apart = run(&args(&[], &cap, &inputs));
            assert_ne!(without_names(&apart.lines), without_names(&whole.lines));
        }
    }
}

#[test]
fn both_sides_of_a_proxy_are_one_session_with_two_hops() {
    if !editcap_available() {
        return;
    }
    // nginx between client and server, captured on its host: each exchange is on the wire
    // twice. Split into the client side's capture and the server side's, the fleet must give
    // the one capture's report: each resume once per hop, the inner one tied to the request
    // it relays, and no event's second copy taken for a second delivery.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (name, proxy, server) in [
        ("py-counter-nginx", 18864, 18863),
        ("ts-sdk-nginx", 18862, 18861),
    ] {
        let cap = root.join(format!("fixtures/real/{name}.pcap"));
        let whole = run(&args(&[], &cap, std::slice::from_ref(&cap)));
        let resumes: Vec<&Value> = whole
            .lines
            .iter()
            .filter(|l| l["type"] == "resume")
            .collect();
        assert!(!resumes.is_empty());
        for pair in resumes.chunks(2) {
            assert_eq!(pair[0]["hop"], 0, "{name}");
            assert_eq!(pair[1]["hop"], 1, "{name}");
            assert_eq!(
                pair[1]["relays"]["frame"], pair[0]["request_frame"],
                "{name}"
            );
            assert_eq!(pair[0]["server_port"], proxy);
            assert_eq!(pair[1]["server_port"], server);
            for k in ["verdict", "last_event_id", "first_event_id"] {
                assert_eq!(pair[0][k], pair[1][k], "{name}: {k}");
            }
        }
        let findings = &whole.lines.last().unwrap()["findings"];
        for kind in [
            "duplicate_delivery",
            "duplicate_response",
            "progress_regressed",
        ] {
            assert_eq!(findings[kind], 0, "{name}: {kind}");
        }
        let dir = tempfile::tempdir().unwrap();
        let files = [
            dir.path().join("client-side.pcap"),
            dir.path().join("server-side.pcap"),
        ];
        let frames = [
            tshark_select(&cap, &format!("tcp.port == {proxy}"), &files[0]),
            tshark_select(&cap, &format!("tcp.port == {server}"), &files[1]),
        ];
        let whole_frame = |n: &str, local: u64| {
            let h = files
                .iter()
                .position(|f| f.display().to_string() == n)
                .unwrap();
            frames[h][local as usize - 1]
        };
        for inputs in [files.to_vec(), files.iter().rev().cloned().collect()] {
            let fleet = run(&args(&["--fleet"], &cap, &inputs));
            assert_eq!(
                mapped(&fleet.lines, &files, &whole_frame),
                without_names(&whole.lines),
                "{name}: {inputs:?}"
            );
            assert_eq!(fleet.code, whole.code);
        }
    }
}

/// The sessions still held when an input ends are audited on two threads under `-j2` and more:
/// those whose exchanges reach one server on either thread, the others (a proxy's, whose
/// audit may place servers' hops for the next session's) in order on one. The report is the
/// same whatever the number. One capture of plain servers' sessions and of both sides of two
/// proxies, cut before each proxied session's `DELETE` so that it is still held at the end.
#[test]
fn sessions_held_at_the_end_are_audited_alike_on_any_thread_count() {
    if !editcap_available() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let mut caps = vec![root.join("fixtures/gen/mixed.pcap")];
    for (name, before_delete) in [("py-counter-nginx", 180), ("ts-sdk-nginx", 128)] {
        let cut = dir.path().join(format!("{name}.pcap"));
        let ok = Command::new("editcap")
            .arg("-r")
            .arg(root.join(format!("fixtures/real/{name}.pcap")))
            .arg(&cut)
            .arg(format!("1-{before_delete}"))
            .status()
            .unwrap();
        assert!(ok.success());
        caps.push(cut);
    }
    let run = |j: &str| {
        let out = Command::new(bin())
            .args(["-q", "--merge", "--sessions", j])
            .args(&caps)
            .output()
            .unwrap();
        out.stdout
    };
    let one = run("-j1");
    let lines: Vec<Value> = String::from_utf8(one.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let resumes = |f: &dyn Fn(&Value) -> bool| {
        lines
            .iter()
            .filter(|l| l["type"] == "resume" && f(l))
            .count()
    };
    // Proxied sessions (resumes at two hops) and plain ones (no hop), none ended by its client.
    assert!(resumes(&|l| l["hop"] == 1) > 0);
    assert!(resumes(&|l| l["hop"].is_null()) > 0);
    let views = lines.iter().filter(|l| l["type"] == "session");
    assert!(views.clone().count() >= 4);
    for v in views {
        let exchanges = v["exchanges"].as_array().unwrap();
        assert!(exchanges.iter().all(|x| x["method"] != "DELETE"), "{v}");
    }
    for j in ["-j2", "-j3"] {
        assert!(run(j) == one, "{j}");
    }
}

/// What must not change when the same traffic is captured twice: verdicts, ids, cursors,
/// evidence, findings; and the counts of connections, exchanges and sessions.
fn essence(lines: &[Value]) -> Vec<Value> {
    lines
        .iter()
        .map(|l| {
            let keep: &[&str] = match l["type"].as_str() {
                Some("resume") => &[
                    "session_id",
                    "verdict",
                    "reason",
                    "last_event_id",
                    "first_event_id",
                    "resent_ids",
                    "replay_span",
                    "lost",
                    "stream_events",
                    "stream_end",
                    "tcp_stream",
                    "id_shape",
                ],
                Some("summary") => &[
                    "sessions",
                    "resumes",
                    "verdicts",
                    "findings",
                    "tcp_connections",
                    "http_exchanges",
                    // Not `coverage`: its bytes count every captured copy of a segment.
                    "tcp_gaps",
                ],
                _ => &["kind", "session_id", "severity"],
            };
            let mut v: serde_json::Map<String, Value> = keep
                .iter()
                .map(|k| (k.to_string(), l[*k].clone()))
                .collect();
            if let Some(c) = l.get("cursor").filter(|c| !c.is_null()) {
                v.insert("cursor".into(), c["status"].clone());
                v.insert("delivered".into(), c["last_delivered_id"].clone());
            }
            if let Some(f) = l.get("findings").and_then(|f| f.as_array()) {
                let kinds: Vec<Value> = f.iter().map(|f| f["kind"].clone()).collect();
                v.insert("finding_kinds".into(), Value::from(kinds));
            }
            if let Some(e) = l.get("evidence") {
                v.insert("evidence".into(), e["how"].clone());
            }
            Value::Object(v)
        })
        .collect()
}

#[test]
fn the_same_traffic_at_two_vantage_points_is_counted_once_and_fills_each_others_holes() {
    if !editcap_available() {
        return;
    }
    let cap = loopback();
    let whole = run(&args(&[], &cap, std::slice::from_ref(&cap)));
    let packets = whole.lines.last().unwrap()["packets"].as_u64().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Host A lost some packets, host B (its clock 40 µs late) lost others.
    let a = dir.path().join("client.pcap");
    let b = dir.path().join("server.pcap");
    let lost_a = format!("{}-{}", packets / 3, packets / 3 + 6);
    let lost_b = format!("{}-{}", packets * 2 / 3, packets * 2 / 3 + 6);
    let edit = |args: &[&str]| {
        let ok = Command::new("editcap").args(args).status().unwrap();
        assert!(ok.success(), "editcap {args:?}");
    };
    let shifted = dir.path().join("shifted.pcap");
    let (capn, an, bn, sn) = (
        cap.display().to_string(),
        a.display().to_string(),
        b.display().to_string(),
        shifted.display().to_string(),
    );
    edit(&[&capn, &an, &lost_a]);
    edit(&["-t", "0.00004", &capn, &sn]);
    edit(&[&sn, &bn, &lost_b]);
    std::fs::remove_file(&shifted).unwrap();
    let alone = run(&args(&[], &cap, std::slice::from_ref(&a)));
    assert_ne!(
        essence(&alone.lines),
        essence(&whole.lines),
        "a host alone misses what it lost"
    );
    for inputs in [vec![a.clone(), b.clone()], vec![b.clone(), a.clone()]] {
        let fleet = run(&args(&["--fleet"], &cap, &inputs));
        assert_eq!(essence(&fleet.lines), essence(&whole.lines), "{inputs:?}");
        assert_eq!(fleet.code, whole.code);
        let summary = fleet.lines.last().unwrap();
        // Every packet of both hosts was read, and each connection counted once.
        assert_eq!(summary["packets"].as_u64().unwrap(), 2 * packets - 14);
        assert_eq!(summary["per_input"].as_array().unwrap().len(), 1);
        // Citations name the host's file.
        for l in fleet.lines.iter().filter(|l| l["type"] == "resume") {
            let f = l["request_file"].as_str().unwrap();
            assert!(f == an || f == bn, "{f}");
        }
    }
}

#[test]
fn a_sets_display_filter_selects_the_cited_frame_in_the_cited_file() {
    if !editcap_available() {
        return;
    }
    let cap = loopback();
    let dir = tempfile::tempdir().unwrap();
    let files = split(&cap, 30, dir.path()).unwrap();
    let set = run(&args(&[], &cap, &files));
    let mut checked = 0;
    for r in set.lines.iter().filter(|l| l["type"] == "resume") {
        let (Some(file), Some(filter)) = (r["request_file"].as_str(), r["display_filter"].as_str())
        else {
            panic!("a set's resume without request_file or display_filter: {r}");
        };
        let out = Command::new("tshark")
            .args([
                "-r",
                file,
                "-Y",
                filter,
                "-T",
                "fields",
                "-e",
                "frame.number",
            ])
            .output()
            .unwrap();
        let frames: Vec<u64> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        assert!(
            frames.contains(&r["request_frame"].as_u64().unwrap()),
            "{filter} in {file}: {frames:?}"
        );
        checked += 1;
    }
    assert!(checked >= 5);
}

#[test]
fn a_damaged_file_in_a_set_is_named_and_the_others_are_still_read() {
    if !editcap_available() {
        return;
    }
    let cap = loopback();
    let whole = run(&args(&[], &cap, std::slice::from_ref(&cap)));
    let dir = tempfile::tempdir().unwrap();
    let files = split(&cap, 25, dir.path()).unwrap();
    assert!(files.len() > 6);
    // One file cut in the middle of a record, one overwritten with garbage after its header,
    // one that is no capture at all: each named, the rest read.
    let cut = &files[2];
    let bytes = std::fs::read(cut).unwrap();
    std::fs::write(cut, &bytes[..bytes.len() - 7]).unwrap();
    let garbage = &files[4];
    let mut bytes = std::fs::read(garbage).unwrap();
    let n = bytes.len();
    bytes[n / 2..].fill(0xff);
    std::fs::write(garbage, &bytes).unwrap();
    let empty = &files[5];
    std::fs::write(empty, b"").unwrap();
    let set = run(&args(&[], &cap, &files));
    for f in [cut, garbage, empty] {
        assert!(
            set.stderr.contains(&format!("error: {}: ", f.display())),
            "{}: {}",
            f.display(),
            set.stderr
        );
    }
    assert!(
        set.stderr.contains("last record cut short"),
        "{}",
        set.stderr
    );
    let summary = set.lines.last().unwrap();
    assert_eq!(summary["inputs"], 1);
    assert_eq!(summary["inputs_failed"], 1);
    assert_eq!(summary["problems"].as_array().unwrap().len(), 3);
    assert!(
        summary["packets"].as_u64().unwrap()
            > whole.lines.last().unwrap()["packets"].as_u64().unwrap() / 2
    );
    // What the damage hid is never an accusation the whole capture does not make.
    let accused = |lines: &[Value]| -> Vec<String> {
        lines
            .iter()
            .filter(|l| l["verdict"] == "gap_skipped" || l["verdict"] == "replayed")
            .map(|l| format!("{} {}", l["session_id"], l["request_time"]))
            .collect()
    };
    for a in accused(&set.lines) {
        assert!(accused(&whole.lines).contains(&a), "{a}");
    }
}

#[test]
fn compressed_standard_input_is_read() {
    let cap = loopback();
    let want = run(&args(&[], &cap, std::slice::from_ref(&cap)));
    let (_, gz) = compressed(&std::fs::read(&cap).unwrap()).swap_remove(0);
    let mut child = Command::new(bin())
        .args(["-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&gz));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let no_sessions = |v: &[Value]| -> Vec<Value> {
        without_names(v)
            .into_iter()
            .filter(|l| l["type"] != "session")
            .collect()
    };
    assert_eq!(no_sessions(&lines), no_sessions(&want.lines));
}

#[test]
fn a_report_is_never_written_over_a_file_of_an_input_directory() {
    let top = tempfile::tempdir().unwrap();
    std::fs::create_dir(top.path().join("host")).unwrap();
    let evidence = top.path().join("host/trace.pcap");
    std::fs::copy(loopback(), &evidence).unwrap();
    let r = run(&[
        "-o".to_string(),
        evidence.display().to_string(),
        top.path().display().to_string(),
    ]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("refusing to write the report"),
        "{}",
        r.stderr
    );
    assert_eq!(
        std::fs::read(&evidence).unwrap(),
        std::fs::read(loopback()).unwrap()
    );
}

#[test]
fn a_capture_and_its_compressed_copy_are_not_taken_for_a_ring() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("trace.pcap");
    std::fs::copy(loopback(), &plain).unwrap();
    let (_, gz) = compressed(&std::fs::read(&plain).unwrap()).swap_remove(0);
    std::fs::write(dir.path().join("trace.pcap.gz"), gz).unwrap();
    let r = run(&[dir.path().display().to_string()]);
    assert!(
        r.stderr.contains("have the same number in the ring"),
        "{}",
        r.stderr
    );
    let per_input = r.lines.last().unwrap()["per_input"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(per_input.len(), 2);
    assert_eq!(per_input[0]["resumes"], per_input[1]["resumes"]);
}
