//! The synthetic capture writer's TLS and HTTP/2 wires, read by the real binary: one scenario
//! of every verdict written as cleartext HTTP/1.1, TLS 1.3 (each suite), TLS 1.2, h2c and
//! TLS 1.3 + h2 must give, with its key log, the verdicts and first ids the scenario
//! definition says (`expected_outcome`), the same as in cleartext; without the key log, every
//! connection is counted as TLS without keys and the exit status says traffic was not read.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use mcp_resume_audit_synth::{
    BASE_TIME_NS, ByteOrder, Capture, ConnSpec, Endpoint, EventField, EventStream, ExchangeKind,
    ExpectedResume, Fate, FlowSpec, HeaderCase, HttpVersion, Interleave, LineEnd, LinkFraming,
    PcapFormat, PcapWriter, Resume, ResumeResponse, Scenario, SessionSpec, SseEvent, SseStyle,
    StreamClose, TlsSpec, TlsSuite, TsResolution, Vlan, Wire, expected_outcome,
};
use serde_json::Value;

fn flow(port: u16) -> FlowSpec {
    let mut f = FlowSpec::new(
        0,
        Endpoint::new(Ipv4Addr::new(10, 1, 0, 2), port),
        Endpoint::new(Ipv4Addr::new(10, 1, 0, 1), 8443),
    );
    f.client_isn = u32::from(port).wrapping_mul(0x9e37_79b9);
    f.server_isn = u32::from(port).wrapping_mul(0x85eb_ca6b);
    f
}

fn session(sid: &str, port: u16, resume: Resume) -> SessionSpec {
    let mut s = SessionSpec::new(
        Some(sid),
        vec![ConnSpec::new(flow(port)), ConnSpec::new(flow(port + 1))],
    )
    .exchange(
        0,
        ExchangeKind::Initialize {
            priming_id: Some("0".into()),
            result_id: Some("1".into()),
        },
    )
    .exchange(0, ExchangeKind::InitializedNotification)
    .exchange(1, ExchangeKind::Resume(resume));
    s.host = "mcp.example:8443".to_string();
    s
}

/// Every verdict, with retransmitted, reordered, lost and gzip-encoded stream pieces.
fn sessions() -> Vec<SessionSpec> {
    let mut out = Vec::new();
    let mut s = EventStream::with_ids(&["4418", "4419"], StreamClose::TerminalChunk);
    s.events[0].fate = Fate::OverlapRetransmit;
    let mut r = Resume::new("4417", ResumeResponse::Stream(s));
    r.request_fate = Fate::Duplicate;
    out.push(session("s-correct", 40_000, r));

    let mut s = EventStream::with_ids(&["0", "1"], StreamClose::ServerFin);
    s.style = SseStyle {
        line_end: LineEnd::CrLf,
        event_field: EventField::AfterId,
    };
    s.events[0].fate = Fate::SwapWithNext;
    let mut sess = session(
        "s-replay",
        40_010,
        Resume::new("7", ResumeResponse::Stream(s)),
    );
    sess.header_case = HeaderCase::Canonical;
    sess.connections[1].flow.mss = 100;
    sess.connections[1].flow.client_isn = u32::MAX - 30;
    out.push(sess);

    let mut s = EventStream::with_ids(&["50", "51"], StreamClose::ClientReset);
    s.gzip = true;
    s.style.event_field = EventField::BeforeId;
    out.push(session(
        "s-gap",
        40_020,
        Resume::new("40", ResumeResponse::Stream(s)),
    ));
    out.push(session(
        "s-rej",
        40_030,
        Resume::new("3", ResumeResponse::Status(404)),
    ));
    out.push(session(
        "s-empty",
        40_040,
        Resume::new(
            "3",
            ResumeResponse::Stream(EventStream::with_ids::<&str>(
                &[],
                StreamClose::TerminalChunk,
            )),
        ),
    ));
    out.push(session(
        "s-opaque",
        40_050,
        Resume::new(
            "a_1",
            ResumeResponse::Stream(EventStream::with_ids(&["a_2"], StreamClose::Open)),
        ),
    ));
    let mut s = EventStream::with_ids(&["9", "10", "11"], StreamClose::TerminalChunk);
    s.events.insert(0, SseEvent::without_id());
    s.events[1].fate = Fate::Drop;
    out.push(session(
        "s-drop",
        40_060,
        Resume::new("8", ResumeResponse::Stream(s)),
    ));
    // A long stream: records and DATA frames of 16 KiB, many segments each.
    let ids: Vec<String> = (21..=420).map(|i| i.to_string()).collect();
    let mut sess = session(
        "s-long",
        40_070,
        Resume::new(
            "20",
            ResumeResponse::Stream(EventStream::with_ids(&ids, StreamClose::TerminalChunk)),
        ),
    );
    sess.progress_message = Some("indexing repository files ".repeat(12));
    out.push(sess);
    out.push(session(
        "s-noresp",
        40_080,
        Resume::new("8", ResumeResponse::CaptureEnds),
    ));
    out
}

/// Verdict, last id, first id and session of one resume.
type Outcome = (String, String, Option<String>, Option<String>);

/// The outcome of each resume, from the definition alone.
fn defined_outcomes() -> Vec<Outcome> {
    let mut out = Vec::new();
    for s in sessions() {
        for ex in &s.exchanges {
            if let ExchangeKind::Resume(r) = &ex.kind {
                let (verdict, first) = expected_outcome(r);
                out.push((
                    verdict.as_str().to_string(),
                    r.last_event_id.clone(),
                    first,
                    s.session_id.clone(),
                ));
            }
        }
    }
    out.sort();
    out
}

struct Written {
    capture: PathBuf,
    keys: PathBuf,
    expected: Vec<ExpectedResume>,
    connections: u64,
}

fn scratch_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("synth-tls-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, name: &str, wire: Wire) -> Written {
    let framing = LinkFraming::Ethernet {
        vlan: Vlan::Untagged,
    };
    let writer = PcapWriter::new(
        Vec::new(),
        PcapFormat::new(ByteOrder::Little, TsResolution::Micro, framing.link_type()),
    )
    .unwrap();
    let mut cap = Capture::new(writer, BASE_TIME_NS, 20_000);
    cap.add_interface(framing, TsResolution::Micro).unwrap();
    let mut scenario = Scenario::new();
    for s in sessions() {
        scenario.add_session(&s.wire(wire)).unwrap();
    }
    let mut key_log = Vec::new();
    let expected = scenario
        .run_with_key_log(&mut cap, Interleave::RoundRobin, &mut key_log)
        .unwrap();
    let connections = cap.connections();
    let capture = dir.join(format!("{name}.pcap"));
    let keys = dir.join(format!("{name}.keys"));
    std::fs::write(&capture, cap.into_writer().into_inner()).unwrap();
    std::fs::write(&keys, key_log).unwrap();
    Written {
        capture,
        keys,
        expected,
        connections,
    }
}

struct Report {
    code: i32,
    resumes: Vec<Value>,
    summary: Value,
    stderr: String,
}

fn analyze(capture: &Path, keys: Option<&Path>) -> Report {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcp-resume-audit"));
    cmd.arg("-j1");
    if let Some(k) = keys {
        cmd.arg("--tls-keylog").arg(k);
    }
    let out = cmd.arg(capture).output().expect("run the binary");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let mut lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let summary = lines.pop().expect("a summary line");
    Report {
        code: out.status.code().unwrap_or(-1),
        resumes: lines
            .into_iter()
            .filter(|l| l["type"] == "resume")
            .collect(),
        summary,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn text(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

/// (verdict, last id, first id, session) of each reported resume, sorted.
fn reported(r: &Report) -> Vec<Outcome> {
    let mut out: Vec<_> = r
        .resumes
        .iter()
        .map(|v| {
            (
                text(&v["verdict"]).unwrap(),
                text(&v["last_event_id"]).unwrap(),
                text(&v["first_event_id"]),
                text(&v["session_id"]),
            )
        })
        .collect();
    out.sort();
    out
}

/// (tcp.stream, request frame) of each resume.
type Places = Vec<(u64, u64)>;

/// Where each resume was asked, as the writer and the analyzer count them.
fn request_places(expected: &[ExpectedResume], r: &Report) -> (Places, Places) {
    let mut want: Vec<_> = expected
        .iter()
        .map(|e| (e.tcp_stream, e.request_frame))
        .collect();
    let mut got: Vec<_> = r
        .resumes
        .iter()
        .map(|v| {
            (
                v["tcp_stream"].as_u64().unwrap(),
                v["request_frame"].as_u64().unwrap(),
            )
        })
        .collect();
    want.sort();
    got.sort();
    (want, got)
}

fn tls(suite: TlsSuite, http: HttpVersion) -> Wire {
    Wire {
        http,
        tls: Some(TlsSpec { suite, seed: 11 }),
    }
}

#[test]
fn every_wire_gives_the_defined_verdicts_and_first_ids() {
    let dir = scratch_dir("wires");
    let defined = defined_outcomes();
    assert_eq!(defined.len(), 9);
    let plain = write(&dir, "plain", Wire::default());
    let plain_report = analyze(&plain.capture, None);
    assert_eq!(reported(&plain_report), defined, "{}", plain_report.stderr);

    let wires = [
        (
            "tls13-aes128",
            tls(TlsSuite::Tls13Aes128Gcm, HttpVersion::Http1),
        ),
        (
            "tls13-aes256",
            tls(TlsSuite::Tls13Aes256Gcm, HttpVersion::Http1),
        ),
        (
            "tls13-chacha20",
            tls(TlsSuite::Tls13ChaCha20Poly1305, HttpVersion::Http1),
        ),
        (
            "tls12-aes128",
            tls(TlsSuite::Tls12EcdheRsaAes128Gcm, HttpVersion::Http1),
        ),
        (
            "h2c",
            Wire {
                http: HttpVersion::Http2,
                tls: None,
            },
        ),
        (
            "tls13-h2",
            tls(TlsSuite::Tls13Aes128Gcm, HttpVersion::Http2),
        ),
        (
            "tls12-h2",
            tls(TlsSuite::Tls12EcdheRsaAes128Gcm, HttpVersion::Http2),
        ),
    ];
    let mut failures = Vec::new();
    for (name, wire) in wires {
        let w = write(&dir, name, wire);
        let keys = wire.tls.is_some().then_some(w.keys.as_path());
        let r = analyze(&w.capture, keys);
        if reported(&r) != defined {
            failures.push(format!(
                "{name}: got {:?}\n  want {:?}\n  stderr: {}",
                reported(&r),
                defined,
                r.stderr
            ));
            continue;
        }
        // The same verdicts as the same traffic in cleartext, asked in the same places.
        assert_eq!(reported(&r), reported(&plain_report), "{name}");
        let (want, got) = request_places(&w.expected, &r);
        assert_eq!(got, want, "{name}: tcp.stream and request frame");
        let cov = &r.summary["coverage"];
        assert_eq!(cov["unread"], serde_json::json!({}), "{name}: {cov}");
        let read_as = match (wire.tls.is_some(), wire.http) {
            (false, HttpVersion::Http2) => "h2",
            (true, HttpVersion::Http1) => "tls/http1",
            (true, HttpVersion::Http2) => "tls/h2",
            (false, HttpVersion::Http1) => "http1",
        };
        assert_eq!(
            cov["read"][read_as]["connections"].as_u64(),
            Some(w.connections),
            "{name}: {cov}"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_the_key_log_every_connection_is_tls_without_keys() {
    let dir = scratch_dir("nokeys");
    for (name, suite) in [
        ("tls13", TlsSuite::Tls13ChaCha20Poly1305),
        ("tls12", TlsSuite::Tls12EcdheRsaAes128Gcm),
    ] {
        let w = write(&dir, name, tls(suite, HttpVersion::Http2));
        let r = analyze(&w.capture, None);
        assert_eq!(r.code, 3, "{name}: {}", r.stderr);
        assert!(r.resumes.is_empty(), "{name}");
        let cov = &r.summary["coverage"];
        assert_eq!(
            cov["unread"]["tls_no_keys"]["connections"].as_u64(),
            Some(w.connections),
            "{name}: {cov}"
        );
        assert_eq!(cov["read"], serde_json::json!({}), "{name}: {cov}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_same_arguments_write_the_same_bytes_and_keys() {
    let dir = scratch_dir("twice");
    let wire = tls(TlsSuite::Tls13Aes256Gcm, HttpVersion::Http2);
    let a = write(&dir, "a", wire);
    let b = write(&dir, "b", wire);
    assert_eq!(
        std::fs::read(&a.capture).unwrap(),
        std::fs::read(&b.capture).unwrap()
    );
    assert_eq!(
        std::fs::read(&a.keys).unwrap(),
        std::fs::read(&b.keys).unwrap()
    );
    let keys = std::fs::read_to_string(&a.keys).unwrap();
    assert_eq!(keys.lines().count() as u64, 4 * a.connections);
    let _ = std::fs::remove_dir_all(&dir);
}
