//! Writes the session-level fixture captures and what the analyzer must find in them.
//!
//! Usage: `cargo run --example gen-forensic -- <outdir>` (the checked-in set lives in
//! `fixtures/forensic`). For every fixture it writes `<name>.pcap`, `<name>.expect.jsonl` (one
//! line per resume, the keys the plain run must give) and `<name>.forensic.json` (what the
//! session stage must find: per resume the verdict, id shape, evidence, cursor and findings
//! with the frames that prove them; findings tied to no resume; sessions), plus a README.md.
//! Every expectation is written from the scenario as it is built (the frames come from the
//! simulator), never from the analyzer. Every run writes the same bytes.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use mcp_resume_audit_synth::{
    BASE_TIME_NS, ByteOrder, Capture, Endpoint, Fate, FlowSpec, LinkFraming, PcapFormat,
    PcapWriter, Side, TcpFlow, TsResolution, Vlan,
};

const STEP_NS: u64 = 57_250;
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 10);
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const SERVER_PORT: u16 = 3000;
const VERSION: &str = "2025-11-25";

// ---------------------------------------------------------------------------------------------
// Wire helpers
// ---------------------------------------------------------------------------------------------

/// One SSE event as a fixture writes it.
#[derive(Clone, Debug)]
struct Ev {
    id: Option<String>,
    event: Option<&'static str>,
    data: String,
    retry: Option<u64>,
}

fn ev(id: impl Into<String>, data: String) -> Ev {
    Ev {
        id: Some(id.into()),
        event: None,
        data,
        retry: None,
    }
}

fn priming(id: impl Into<String>) -> Ev {
    Ev {
        id: Some(id.into()),
        event: None,
        data: String::new(),
        retry: Some(500),
    }
}

fn message(n: u32) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"info","data":"line {n}"}}}}"#
    )
}

fn progress(token: &str, value: u32) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"{token}","progress":{value},"total":100}}}}"#
    )
}

fn response(id: u32) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"done {id}"}}]}}}}"#
    )
}

fn list_changed() -> String {
    r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#.to_string()
}

fn sse_bytes(e: &Ev) -> Vec<u8> {
    let mut s = String::new();
    if let Some(t) = e.event {
        s.push_str(&format!("event: {t}\n"));
    }
    if let Some(id) = &e.id {
        s.push_str(&format!("id: {id}\n"));
    }
    if let Some(r) = e.retry {
        s.push_str(&format!("retry: {r}\n"));
    }
    if e.data.is_empty() {
        s.push_str("data:\n");
    } else {
        s.push_str(&format!("data: {}\n", e.data));
    }
    s.push('\n');
    chunk(s.as_bytes())
}

fn chunk(body: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
    out
}

const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

fn head(first: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut s = format!("{first}\r\n");
    for (k, v) in headers {
        s.push_str(&format!("{k}: {v}\r\n"));
    }
    s.push_str("\r\n");
    s.into_bytes()
}

/// A request: `sid` as `Mcp-Session-Id`, `last` as `Last-Event-ID`, `version` as
/// `MCP-Protocol-Version`.
fn request(
    method: &str,
    path: &str,
    sid: Option<&str>,
    last: Option<&str>,
    version: &str,
    body: &str,
) -> Vec<u8> {
    let host = format!("{SERVER}:{SERVER_PORT}");
    let mut h: Vec<(&str, &str)> = vec![("Host", &host)];
    let len = body.len().to_string();
    if method == "POST" {
        h.push(("Accept", "application/json, text/event-stream"));
        h.push(("Content-Type", "application/json"));
    } else {
        h.push(("Accept", "text/event-stream"));
    }
    if let Some(s) = sid {
        h.push(("Mcp-Session-Id", s));
    }
    h.push(("MCP-Protocol-Version", version));
    if let Some(l) = last {
        h.push(("Last-Event-ID", l));
    }
    if method == "POST" {
        h.push(("Content-Length", &len));
    }
    let mut out = head(&format!("{method} {path} HTTP/1.1"), &h);
    out.extend_from_slice(body.as_bytes());
    out
}

fn sse_head(sid: Option<&str>) -> Vec<u8> {
    let mut h = vec![
        ("Content-Type", "text/event-stream"),
        ("Cache-Control", "no-cache"),
        ("Transfer-Encoding", "chunked"),
    ];
    if let Some(s) = sid {
        h.push(("Mcp-Session-Id", s));
    }
    head("HTTP/1.1 200 OK", &h)
}

fn status(code: u16, reason: &str, body: &str) -> Vec<u8> {
    let len = body.len().to_string();
    let mut out = head(
        &format!("HTTP/1.1 {code} {reason}"),
        &[
            ("Content-Type", "application/json"),
            ("Content-Length", &len),
        ],
    );
    out.extend_from_slice(body.as_bytes());
    out
}

/// A uuid4-looking id, the same for the same `n` on every run.
fn uuid(n: u64) -> String {
    let mut x = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut next = || {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let (a, b) = (next(), next());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}

// ---------------------------------------------------------------------------------------------
// The capture being written
// ---------------------------------------------------------------------------------------------

struct Conn {
    flow: TcpFlow,
}

impl Conn {
    fn stream(&self) -> u64 {
        self.flow.stream_index().unwrap_or(u64::MAX)
    }
}

/// How a response stream ends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    /// The last chunk; the connection stays open, then the client closes it.
    LastChunk,
    /// The client drops the connection (RST) after the events: a lost stream.
    ClientReset,
    /// The server closes the connection (FIN) after the events.
    ServerFin,
}

struct Lab {
    cap: Capture<PcapWriter<Vec<u8>>>,
    iface: u32,
    port: u16,
}

/// What one stream request gave: its request frame, connection, and each event's frame.
struct Sent {
    request: u64,
    stream: u64,
    events: Vec<u64>,
}

impl Lab {
    fn new() -> io::Result<Self> {
        let framing = LinkFraming::Ethernet {
            vlan: Vlan::Untagged,
        };
        let writer = PcapWriter::new(
            Vec::new(),
            PcapFormat::new(ByteOrder::Little, TsResolution::Micro, framing.link_type()),
        )?;
        let mut cap = Capture::new(writer, BASE_TIME_NS, STEP_NS);
        let iface = cap.add_interface(framing, TsResolution::Micro)?;
        Ok(Lab {
            cap,
            iface,
            port: 41_000,
        })
    }

    fn open(&mut self) -> io::Result<Conn> {
        self.port += 1;
        let mut spec = FlowSpec::new(
            self.iface,
            Endpoint::new(CLIENT, self.port),
            Endpoint::new(SERVER, SERVER_PORT),
        );
        let p = u32::from(self.port);
        spec.client_isn = p.wrapping_mul(2_654_435_761);
        spec.server_isn = p.wrapping_mul(2_246_822_519) ^ 0x5bd1_e995;
        let mut flow = TcpFlow::new(spec)?;
        self.cap.advance(20_000_000);
        flow.handshake(&mut self.cap)?;
        Ok(Conn { flow })
    }

    /// Sends bytes; returns the frame holding the first one.
    fn send(&mut self, c: &mut Conn, side: Side, bytes: &[u8]) -> io::Result<u64> {
        let w = c
            .flow
            .send_watched(&mut self.cap, side, bytes, Fate::Deliver)?;
        c.flow
            .watch_hit(w)
            .map(|s| s.frame)
            .ok_or_else(|| io::Error::other("watched byte not captured"))
    }

    fn pause(&mut self, ms: u64) {
        self.cap.advance(ms * 1_000_000);
    }

    fn events(&mut self, c: &mut Conn, evs: &[Ev]) -> io::Result<Vec<u64>> {
        let mut frames = Vec::new();
        for e in evs {
            self.pause(30);
            frames.push(self.send(c, Side::Server, &sse_bytes(e))?);
        }
        Ok(frames)
    }

    fn end(&mut self, c: &mut Conn, end: End) -> io::Result<()> {
        self.pause(30);
        match end {
            End::LastChunk => {
                self.send(c, Side::Server, LAST_CHUNK)?;
                self.pause(5);
                c.flow.close(&mut self.cap, Side::Client)
            }
            End::ClientReset => c.flow.reset(&mut self.cap, Side::Client),
            End::ServerFin => c.flow.close(&mut self.cap, Side::Server),
        }
    }

    /// A request answered by an event stream, on a new connection.
    fn stream(
        &mut self,
        req: Vec<u8>,
        sid: Option<&str>,
        evs: &[Ev],
        end: End,
    ) -> io::Result<Sent> {
        let mut c = self.open()?;
        let request = self.send(&mut c, Side::Client, &req)?;
        self.pause(3);
        self.send(&mut c, Side::Server, &sse_head(sid))?;
        let events = self.events(&mut c, evs)?;
        self.end(&mut c, end)?;
        Ok(Sent {
            request,
            stream: c.stream(),
            events,
        })
    }

    /// `initialize` answered by an event stream with these events.
    fn initialize(&mut self, sid: &str, evs: &[Ev]) -> io::Result<Sent> {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{VERSION}","capabilities":{{}},"clientInfo":{{"name":"fixture-client","version":"1.0.0"}}}}}}"#
        );
        self.stream(
            request("POST", "/mcp", None, None, VERSION, &body),
            Some(sid),
            evs,
            End::LastChunk,
        )
    }

    /// The standalone GET stream, or a resume when `last` is given.
    fn get(&mut self, sid: &str, last: Option<&str>, evs: &[Ev], end: End) -> io::Result<Sent> {
        self.stream(
            request("GET", "/mcp", Some(sid), last, VERSION, ""),
            Some(sid),
            evs,
            end,
        )
    }

    /// `tools/call` with JSON-RPC id `id`, answered by an event stream.
    fn call(&mut self, sid: &str, id: u32, evs: &[Ev], end: End) -> io::Result<Sent> {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"work","arguments":{{}},"_meta":{{"progressToken":"tok{id}"}}}}}}"#
        );
        self.stream(
            request("POST", "/mcp", Some(sid), None, VERSION, &body),
            Some(sid),
            evs,
            end,
        )
    }

    fn finish(self) -> Vec<u8> {
        self.cap.into_writer().into_inner()
    }
}

// ---------------------------------------------------------------------------------------------
// Expectations
// ---------------------------------------------------------------------------------------------

/// What one fixture must give.
#[derive(Default)]
struct Expect {
    /// Lines of `.expect.jsonl` (plain run).
    lines: Vec<Value>,
    /// Arguments for the session-stage run.
    args: Vec<String>,
    resumes: Vec<Value>,
    findings: Vec<Value>,
    sessions: Vec<Value>,
}

/// A resume as the plain run reports it.
fn line(sid: &str, verdict: &str, last: &str, first: Option<&str>, s: &Sent) -> Value {
    json!({
        "session_id": sid,
        "verdict": verdict,
        "last_event_id": last,
        "first_event_id": first,
        "tcp_stream": s.stream,
        "request_frame": s.request,
    })
}

fn with(mut v: Value, key: &str, val: Value) -> Value {
    if let Some(m) = v.as_object_mut() {
        m.insert(key.to_string(), val);
    }
    v
}

fn finding(kind: &str, frames: &[u64]) -> Value {
    json!({"kind": kind, "frames": frames})
}

/// What the session stage must say about one resume.
fn audit(
    s: &Sent,
    verdict: &str,
    id_shape: Option<&str>,
    evidence: Option<(&str, &[u64])>,
    cursor: &str,
    findings: Vec<Value>,
) -> Value {
    json!({
        "request_frame": s.request,
        "verdict": verdict,
        "id_shape": id_shape,
        "evidence": evidence.map(|(how, frames)| json!({"how": how, "frames": frames})),
        "cursor": cursor,
        "findings": findings,
    })
}

fn session(sid: &str, exchanges: u64, resumes: u64) -> Value {
    json!({"session_id": sid, "exchanges": exchanges, "resumes": resumes})
}

struct Fixture {
    name: &'static str,
    about: &'static str,
    build: fn(&mut Lab) -> io::Result<Expect>,
}

fn main() -> io::Result<()> {
    let dir: PathBuf = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("fixtures/forensic"));
    std::fs::create_dir_all(&dir)?;
    let fixtures = catalog();
    for f in &fixtures {
        write_fixture(&dir, f)?;
    }
    write_readme(&dir, &fixtures)?;
    println!("wrote {} fixtures to {}", fixtures.len(), dir.display());
    Ok(())
}

fn write_fixture(dir: &Path, f: &Fixture) -> io::Result<()> {
    let mut lab = Lab::new()?;
    let e = (f.build)(&mut lab)?;
    std::fs::write(dir.join(format!("{}.pcap", f.name)), lab.finish())?;
    let mut lines = BufWriter::new(File::create(dir.join(format!("{}.expect.jsonl", f.name)))?);
    for l in &e.lines {
        writeln!(lines, "{l}")?;
    }
    lines.flush()?;
    let forensic = json!({
        "args": e.args,
        "resumes": e.resumes,
        "findings": e.findings,
        "sessions": e.sessions,
    });
    let text = serde_json::to_string_pretty(&forensic).map_err(io::Error::other)?;
    std::fs::write(
        dir.join(format!("{}.forensic.json", f.name)),
        format!("{text}\n"),
    )
}

fn write_readme(dir: &Path, fixtures: &[Fixture]) -> io::Result<()> {
    let mut r = BufWriter::new(File::create(dir.join("README.md"))?);
    writeln!(r, "# Session-level fixtures")?;
    writeln!(r)?;
    writeln!(
        r,
        "Produced by `cargo run --example gen-forensic -- fixtures/forensic` (source: \
         `examples/gen-forensic.rs` over the TCP simulator of `src/synth.rs`); every run writes \
         the same bytes. Do not edit these files by hand: change the generator and run it again."
    )?;
    writeln!(r)?;
    writeln!(
        r,
        "Each `<name>.pcap` has a `<name>.expect.jsonl` (one object per resume, the keys a plain \
         run must report, checked by `tests/fixtures.rs`) and a `<name>.forensic.json` (checked \
         by `tests/forensic.rs`, which runs with `--sessions` and the fixture's `args`): per \
         resume, by request frame, the verdict, `id_shape`, the evidence kind with the frames it \
         must cite, the cursor status, and each finding's kind with the frames it must cite; \
         findings tied to no resume; and per session the number of exchanges and resumes. All \
         of it is written from the scenario as it is built, with frames taken from the \
         simulator, never from the analyzer."
    )?;
    writeln!(r)?;
    writeln!(
        r,
        "Common to all: legacy pcap, Ethernet, IPv4, client 10.77.0.10, server \
         10.77.0.1:3000, every request on its own connection, canonical header names, \
         protocol version {VERSION} unless stated, one SSE event per chunk."
    )?;
    writeln!(r)?;
    writeln!(r, "| fixture | exercises |")?;
    writeln!(r, "|---|---|")?;
    for f in fixtures {
        writeln!(r, "| `{}.pcap` | {} |", f.name, f.about)?;
    }
    r.flush()
}

fn catalog() -> Vec<Fixture> {
    vec![
        Fixture {
            name: "shape-stream-seq",
            about: "Go SDK style ids `<stream>_<n>`: the standalone stream delivers `ZP3W9A_0..3` and is dropped; the resume with `ZP3W9A_3` gets `ZP3W9A_4`: `correct` by shape `{stream}_{seq}` (learned from the initialize and standalone streams); cursor consistent.",
            build: shape_stream_seq,
        },
        Fixture {
            name: "shape-stream-seq-replayed",
            about: "As `shape-stream-seq`, but the resumed stream starts again at `ZP3W9A_1`: `replayed` by shape.",
            build: shape_stream_seq_replayed,
        },
        Fixture {
            name: "shape-stream-seq-gap",
            about: "As `shape-stream-seq`, but the resumed stream starts at `ZP3W9A_9`: `gap_skipped`, lost `ZP3W9A_4`..`ZP3W9A_8`.",
            build: shape_stream_seq_gap,
        },
        Fixture {
            name: "shape-single-event",
            about: "Structured ids, but no stream carries two ids: nothing is inferred from a single event; `unverifiable`.",
            build: shape_single_event,
        },
        Fixture {
            name: "shape-event-n",
            about: "The conformance suite's mock-server ids `event-<n>`: `correct` by shape `event-{seq}`.",
            build: shape_event_n,
        },
        Fixture {
            name: "shape-request-streams",
            about: "Rust rmcp style request-stream ids `<n>/<request>`: a `tools/call` stream (`0/2`..`2/2`) is dropped and resumed with GET: `3/2` is `correct` by shape `{seq}/{stream}`.",
            build: shape_request_streams,
        },
        Fixture {
            name: "id-pattern",
            about: "Ids `e<n>.<random>` that defeat inference: `unverifiable` by default; with `--id-pattern 'e(?P<seq>\\d+)\\.[a-z0-9]+'` one resume is `correct`, the other `replayed`.",
            build: id_pattern,
        },
        Fixture {
            name: "replay-uuid-ids",
            about: "Python SDK style uuid4 ids: the resume with the last id gets the whole standalone stream again: `replayed`, proven by the ids the client had acknowledged, with both deliveries cited.",
            build: replay_uuid_ids,
        },
        Fixture {
            name: "replay-same-events-new-ids",
            about: "A dropped `tools/call` stream resumed with fresh opaque ids, but the same progress events: `replayed`, proven by identical events; the progress goes back from 20 to 10 (`progress_regressed`).",
            build: replay_same_events_new_ids,
        },
        Fixture {
            name: "symptoms-integer-replay",
            about: "Integer ids: a dropped `tools/call` stream (ids 3..7: priming, `tools/list_changed`, progress 1 and 2, the response) is resumed after 7 and replayed from 4: `replayed` (seed boundary) with `list_changed_again`, `progress_regressed` and `duplicate_response`, each citing both deliveries.",
            build: symptoms_integer_replay,
        },
        Fixture {
            name: "dup-id-in-stream",
            about: "Uuid ids; the resumed stream carries one id twice (a replay race): `duplicate_id_in_stream`; the verdict stays `unverifiable`.",
            build: dup_id_in_stream,
        },
        Fixture {
            name: "cross-session-leak",
            about: "Two sessions with uuid ids; session B's resume delivers two of session A's events: `cross_session_leak` naming both sessions and frames. Two more sessions with per-session `event-<n>` counters get the same id and are rightly not accused.",
            build: cross_session_leak,
        },
        Fixture {
            name: "cursor-stale-ahead",
            about: "Client cursor audit with integer ids: a resume sent with `2` after `4` was delivered (`cursor_stale`, behind by 2; the server's resend of 3 and 4 is correct, not a replay), and one sent with `7` when only `1..3` were delivered in a session whose start (`initialize`) the capture holds (`cursor_ahead`).",
            build: cursor_stale_ahead,
        },
        Fixture {
            name: "cursor-lost",
            about: "Reconnects without Last-Event-ID: after a standalone stream that delivered ids and ended (`cursor_lost`), and after a resume whose stream the client dropped before its first id (`unverifiable`, then `cursor_lost`, the TypeScript client bug).",
            build: cursor_lost,
        },
        Fixture {
            name: "priming",
            about: "Priming events: a resumed stream that opens with a priming event re-stating Last-Event-ID (`3`) then `4` is `correct` (the priming acknowledgment is skipped, `priming_ack_frame`); a priming id re-sent mid-stream is no evidence of replay; a stream with only the acknowledgment is `empty`.",
            build: priming_fixture,
        },
        Fixture {
            name: "retry-resume-ack",
            about: "Protocol details: an `event: resume` acknowledgment naming Last-Event-ID decides an opaque-id resume `correct`; `retry:` 1000 then 3000 reported; an acknowledgment naming another id leaves it `unverifiable`; a 405 to the resume GET on protocol 2026-07-28 is `rejected` with that reason.",
            build: retry_resume_ack,
        },
        Fixture {
            name: "legacy-http-sse",
            about: "The 2024-11-05 HTTP+SSE transport: the session is named by the `endpoint` event's URL (`sessionId=` in one session, `session_id=` in the other), POSTs carry it in their query, and the reconnecting GET /sse with Last-Event-ID is attributed to it (`correct`, cursor consistent).",
            build: legacy_http_sse,
        },
    ]
}

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

fn go_ids(stream: &str, range: std::ops::Range<u32>) -> Vec<Ev> {
    range
        .map(|n| {
            if n == 0 {
                priming(format!("{stream}_0"))
            } else {
                ev(format!("{stream}_{n}"), message(n))
            }
        })
        .collect()
}

/// Initialize and a dropped standalone stream with Go-style ids; returns the standalone stream.
fn go_session(lab: &mut Lab, sid: &str) -> io::Result<Sent> {
    let mut init = vec![priming("K7QX2M_0")];
    init.push(ev("K7QX2M_1", response(0)));
    lab.initialize(sid, &init)?;
    lab.get(sid, None, &go_ids("ZP3W9A", 0..4), End::ClientReset)
}

fn shape_stream_seq(lab: &mut Lab) -> io::Result<Expect> {
    let sid = "go-7d1e";
    go_session(lab, sid)?;
    let r = lab.get(
        sid,
        Some("ZP3W9A_3"),
        &go_ids("ZP3W9A", 4..6),
        End::LastChunk,
    )?;
    let shape = "{stream}_{seq}";
    Ok(Expect {
        lines: vec![with(
            line(sid, "correct", "ZP3W9A_3", Some("ZP3W9A_4"), &r),
            "id_shape",
            json!(shape),
        )],
        resumes: vec![audit(
            &r,
            "correct",
            Some(shape),
            Some(("id_shape", &[r.events[0]])),
            "consistent",
            vec![],
        )],
        sessions: vec![session(sid, 3, 1)],
        ..Expect::default()
    })
}

fn shape_stream_seq_replayed(lab: &mut Lab) -> io::Result<Expect> {
    let sid = "go-3b90";
    go_session(lab, sid)?;
    let r = lab.get(
        sid,
        Some("ZP3W9A_3"),
        &go_ids("ZP3W9A", 1..5),
        End::LastChunk,
    )?;
    let shape = "{stream}_{seq}";
    Ok(Expect {
        lines: vec![with(
            line(sid, "replayed", "ZP3W9A_3", Some("ZP3W9A_1"), &r),
            "id_shape",
            json!(shape),
        )],
        resumes: vec![audit(
            &r,
            "replayed",
            Some(shape),
            Some(("id_shape", &[r.events[0]])),
            "consistent",
            vec![],
        )],
        sessions: vec![session(sid, 3, 1)],
        ..Expect::default()
    })
}

fn shape_stream_seq_gap(lab: &mut Lab) -> io::Result<Expect> {
    let sid = "go-c4a2";
    go_session(lab, sid)?;
    let r = lab.get(
        sid,
        Some("ZP3W9A_3"),
        &go_ids("ZP3W9A", 9..11),
        End::LastChunk,
    )?;
    let shape = "{stream}_{seq}";
    let l = line(sid, "gap_skipped", "ZP3W9A_3", Some("ZP3W9A_9"), &r);
    let l = with(l, "id_shape", json!(shape));
    let l = with(
        l,
        "lost",
        json!({"from": "ZP3W9A_4", "to": "ZP3W9A_8", "count": 5}),
    );
    Ok(Expect {
        lines: vec![l],
        resumes: vec![audit(
            &r,
            "gap_skipped",
            Some(shape),
            Some(("id_shape", &[r.events[0]])),
            "consistent",
            vec![],
        )],
        sessions: vec![session(sid, 3, 1)],
        ..Expect::default()
    })
}

fn shape_single_event(lab: &mut Lab) -> io::Result<Expect> {
    let sid = "go-single";
    lab.initialize(sid, &[ev("Q1_0", response(0))])?;
    lab.get(sid, None, &[ev("R4_7", message(7))], End::ClientReset)?;
    let r = lab.get(sid, Some("R4_7"), &[ev("R4_8", message(8))], End::LastChunk)?;
    Ok(Expect {
        lines: vec![with(
            line(sid, "unverifiable", "R4_7", Some("R4_8"), &r),
            "id_shape",
            Value::Null,
        )],
        resumes: vec![audit(&r, "unverifiable", None, None, "consistent", vec![])],
        sessions: vec![session(sid, 3, 1)],
        ..Expect::default()
    })
}

fn shape_event_n(lab: &mut Lab) -> io::Result<Expect> {
    let sid = "conf-91";
    lab.initialize(sid, &[priming("event-1"), ev("event-2", response(0))])?;
    let evs: Vec<Ev> = (3..6)
        .map(|n| ev(format!("event-{n}"), message(n)))
        .collect();
    lab.get(sid, None, &evs, End::ClientReset)?;
    let r = lab.get(
        sid,
        Some("event-5"),
        &[ev("event-6", message(6)), ev("event-7", message(7))],
        End::LastChunk,
    )?;
    Ok(Expect {
        lines: vec![with(
            line(sid, "correct", "event-5", Some("event-6"), &r),
            "id_shape",
            json!("event-{seq}"),
        )],
        resumes: vec![audit(
            &r,
            "correct",
            Some("event-{seq}"),
            Some(("id_shape", &[r.events[0]])),
            "consistent",
            vec![],
        )],
        sessions: vec![session(sid, 3, 1)],
        ..Expect::default()
    })
}

fn shape_request_streams(lab: &mut Lab) -> io::Result<Expect> {
    let sid = "rmcp-5e";
    lab.initialize(sid, &[priming("0/0"), ev("1/0", response(0))])?;
    lab.call(
        sid,
        2,
        &[
            priming("0/2"),
            ev("1/2", progress("tok2", 10)),
            ev("2/2", progress("tok2", 20)),
        ],
        End::ClientReset,
    )?;
    let r = lab.get(
        sid,
        Some("2/2"),
        &[ev("3/2", progress("tok2", 30)), ev("4/2", response(2))],
        End::LastChunk,
    )?;
    let shape = "{seq}/{stream}";
    Ok(Expect {
        lines: vec![with(
            line(sid, "correct", "2/2", Some("3/2"), &r),
            "id_shape",
            json!(shape),
        )],
        resumes: vec![audit(
            &r,
            "correct",
            Some(shape),
            Some(("id_shape", &[r.events[0]])),
            "consistent",
            vec![],
        )],
        sessions: vec![session(sid, 3, 1)],
        ..Expect::default()
    })
}

fn id_pattern(lab: &mut Lab) -> io::Result<Expect> {
    let pattern = r"e(?P<seq>\d+)\.[a-z0-9]+";
    let ids = ["e1.a7f", "e2.q0z", "e3.m4k"];
    let evs = |ids: &[&str], from: u32| -> Vec<Ev> {
        ids.iter()
            .zip(from..)
            .map(|(id, n)| ev(*id, message(n)))
            .collect()
    };
    let a = "pat-a";
    lab.get(a, None, &evs(&ids, 1), End::ClientReset)?;
    let ra = lab.get(
        a,
        Some("e3.m4k"),
        &evs(&["e4.z8p", "e5.c1d"], 4),
        End::LastChunk,
    )?;
    let b = "pat-b";
    lab.get(b, None, &evs(&ids, 1), End::ClientReset)?;
    let rb = lab.get(
        b,
        Some("e3.m4k"),
        &evs(&["e2.h5t", "e3.w2r", "e4.y6u"], 12),
        End::LastChunk,
    )?;
    let mut lines = Vec::new();
    let mut resumes = Vec::new();
    for (sid, r, first, verdict) in [
        (a, &ra, "e4.z8p", "correct"),
        (b, &rb, "e2.h5t", "replayed"),
    ] {
        lines.push(with(
            line(sid, "unverifiable", "e3.m4k", Some(first), r),
            "id_shape",
            Value::Null,
        ));
        resumes.push(audit(
            r,
            verdict,
            Some(pattern),
            Some(("id_pattern", &[r.events[0]])),
            "consistent",
            vec![],
        ));
    }
    Ok(Expect {
        lines,
        args: vec!["--id-pattern".into(), pattern.into()],
        resumes,
        sessions: vec![session(a, 2, 1), session(b, 2, 1)],
        ..Expect::default()
    })
}

fn replay_uuid_ids(lab: &mut Lab) -> io::Result<Expect> {
    let sid = "py-0c6f";
    lab.initialize(sid, &[priming(uuid(100)), ev(uuid(101), response(0))])?;
    let u: Vec<String> = (1..5).map(uuid).collect();
    let standalone = lab.get(
        sid,
        None,
        &(0..3)
            .map(|i| ev(&u[i], message(i as u32)))
            .collect::<Vec<_>>(),
        End::ClientReset,
    )?;
    let again: Vec<Ev> = (0..4).map(|i| ev(&u[i], message(i as u32))).collect();
    let r = lab.get(sid, Some(&u[2]), &again, End::LastChunk)?;
    Ok(Expect {
        lines: vec![line(sid, "replayed", &u[2], Some(&u[0]), &r)],
        resumes: vec![audit(
            &r,
            "replayed",
            None,
            Some(("id_redelivered", &[standalone.events[0], r.events[0]])),
            "consistent",
            vec![],
        )],
        sessions: vec![session(sid, 3, 1)],
        ..Expect::default()
    })
}

fn replay_same_events_new_ids(lab: &mut Lab) -> io::Result<Expect> {
    let sid = "ts-new-ids";
    lab.initialize(sid, &[priming(uuid(200)), ev(uuid(201), response(0))])?;
    let call = lab.call(
        sid,
        5,
        &[
            priming(uuid(202)),
            ev(uuid(203), progress("tok5", 10)),
            ev(uuid(204), progress("tok5", 20)),
        ],
        End::ClientReset,
    )?;
    let r = lab.get(
        sid,
        Some(&uuid(204)),
        &[
            ev(uuid(301), progress("tok5", 10)),
            ev(uuid(302), progress("tok5", 20)),
            ev(uuid(303), progress("tok5", 30)),
            ev(uuid(304), response(5)),
        ],
        End::LastChunk,
    )?;
    Ok(Expect {
        lines: vec![line(sid, "replayed", &uuid(204), Some(&uuid(301)), &r)],
        resumes: vec![audit(
            &r,
            "replayed",
            None,
            Some(("event_redelivered", &[call.events[1], r.events[0]])),
            "consistent",
            vec![finding(
                "progress_regressed",
                &[call.events[2], r.events[0]],
            )],
        )],
        sessions: vec![session(sid, 3, 1)],
        ..Expect::default()
    })
}

fn symptoms_integer_replay(lab: &mut Lab) -> io::Result<Expect> {
    let sid = "int-symptoms";
    lab.initialize(sid, &[priming("1"), ev("2", response(0))])?;
    let call = lab.call(
        sid,
        7,
        &[
            priming("3"),
            ev("4", list_changed()),
            ev("5", progress("tok7", 1)),
            ev("6", progress("tok7", 2)),
            ev("7", response(7)),
        ],
        End::ClientReset,
    )?;
    let r = lab.get(
        sid,
        Some("7"),
        &[
            ev("4", list_changed()),
            ev("5", progress("tok7", 1)),
            ev("6", progress("tok7", 2)),
            ev("7", response(7)),
            ev("8", message(8)),
        ],
        End::LastChunk,
    )?;
    let l = with(
        line(sid, "replayed", "7", Some("4"), &r),
        "replay_span",
        json!(4),
    );
    Ok(Expect {
        lines: vec![with(l, "resent_ids", json!(4))],
        resumes: vec![audit(
            &r,
            "replayed",
            None,
            Some(("id_redelivered", &[call.events[1], r.events[0]])),
            "consistent",
            vec![
                finding("progress_regressed", &[call.events[3], r.events[1]]),
                finding("duplicate_response", &[call.events[4], r.events[3]]),
                finding("list_changed_again", &[call.events[1], r.events[0]]),
            ],
        )],
        sessions: vec![session(sid, 3, 1)],
        ..Expect::default()
    })
}

fn dup_id_in_stream(lab: &mut Lab) -> io::Result<Expect> {
    let sid = "py-race";
    lab.get(
        sid,
        None,
        &[ev(uuid(401), message(1)), ev(uuid(402), message(2))],
        End::ClientReset,
    )?;
    let r = lab.get(
        sid,
        Some(&uuid(402)),
        &[
            ev(uuid(403), message(3)),
            ev(uuid(404), message(4)),
            ev(uuid(404), message(4)),
            ev(uuid(405), message(5)),
        ],
        End::LastChunk,
    )?;
    Ok(Expect {
        lines: vec![line(sid, "unverifiable", &uuid(402), Some(&uuid(403)), &r)],
        resumes: vec![audit(
            &r,
            "unverifiable",
            None,
            None,
            "consistent",
            vec![finding(
                "duplicate_id_in_stream",
                &[r.events[1], r.events[2]],
            )],
        )],
        sessions: vec![session(sid, 2, 1)],
        ..Expect::default()
    })
}

fn cross_session_leak(lab: &mut Lab) -> io::Result<Expect> {
    let (a, b) = ("tenant-a-41", "tenant-b-93");
    lab.initialize(a, &[priming(uuid(500)), ev(uuid(501), response(0))])?;
    let sa = lab.get(
        a,
        None,
        &(1..4)
            .map(|n| ev(uuid(510 + n), message(n as u32)))
            .collect::<Vec<_>>(),
        End::LastChunk,
    )?;
    lab.initialize(b, &[priming(uuid(600)), ev(uuid(601), response(0))])?;
    lab.get(
        b,
        None,
        &[ev(uuid(611), message(1)), ev(uuid(612), message(2))],
        End::ClientReset,
    )?;
    let rb = lab.get(
        b,
        Some(&uuid(612)),
        &[
            ev(uuid(512), message(2)),
            ev(uuid(513), message(3)),
            ev(uuid(613), message(3)),
        ],
        End::LastChunk,
    )?;
    // Per-session counters: the same id in two sessions is no leak.
    let (c, d) = ("counter-c", "counter-d");
    let n_evs = |range: std::ops::Range<u32>| -> Vec<Ev> {
        range
            .map(|n| ev(format!("event-{n}"), message(n)))
            .collect()
    };
    lab.get(c, None, &n_evs(1..4), End::LastChunk)?;
    lab.get(d, None, &n_evs(1..3), End::ClientReset)?;
    let rd = lab.get(d, Some("event-2"), &n_evs(3..4), End::LastChunk)?;
    Ok(Expect {
        lines: vec![
            line(b, "unverifiable", &uuid(612), Some(&uuid(512)), &rb),
            with(
                line(d, "correct", "event-2", Some("event-3"), &rd),
                "id_shape",
                json!("event-{seq}"),
            ),
        ],
        resumes: vec![
            audit(
                &rb,
                "unverifiable",
                None,
                None,
                "consistent",
                vec![finding("cross_session_leak", &[sa.events[1], rb.events[0]])],
            ),
            audit(
                &rd,
                "correct",
                Some("event-{seq}"),
                Some(("id_shape", &[rd.events[0]])),
                "consistent",
                vec![],
            ),
        ],
        sessions: vec![
            session(a, 2, 0),
            session(b, 3, 1),
            session(c, 1, 0),
            session(d, 2, 1),
        ],
        ..Expect::default()
    })
}

fn cursor_stale_ahead(lab: &mut Lab) -> io::Result<Expect> {
    let evs = |range: std::ops::Range<u32>| -> Vec<Ev> {
        range.map(|n| ev(n.to_string(), message(n))).collect()
    };
    let s1 = "cur-stale";
    let g1 = lab.get(s1, None, &evs(1..5), End::ClientReset)?;
    let r1 = lab.get(s1, Some("2"), &evs(3..6), End::LastChunk)?;
    let s2 = "cur-ahead";
    // The session's start is captured: only then can the capture show that the client was
    // never given the position it sends.
    lab.initialize(s2, &[])?;
    let g2 = lab.get(s2, None, &evs(1..4), End::ClientReset)?;
    let r2 = lab.get(s2, Some("7"), &evs(8..9), End::LastChunk)?;
    Ok(Expect {
        lines: vec![
            line(s1, "correct", "2", Some("3"), &r1),
            line(s2, "correct", "7", Some("8"), &r2),
        ],
        resumes: vec![
            audit(
                &r1,
                "correct",
                None,
                None,
                "stale",
                vec![finding("cursor_stale", &[g1.events[1], g1.events[3]])],
            ),
            audit(
                &r2,
                "correct",
                None,
                None,
                "ahead",
                vec![finding("cursor_ahead", &[g2.events[2]])],
            ),
        ],
        sessions: vec![session(s1, 2, 1), session(s2, 3, 1)],
        ..Expect::default()
    })
}

fn cursor_lost(lab: &mut Lab) -> io::Result<Expect> {
    let evs = |range: std::ops::Range<u32>| -> Vec<Ev> {
        range.map(|n| ev(n.to_string(), message(n))).collect()
    };
    let s1 = "lost-after-end";
    let g1 = lab.get(s1, None, &evs(1..4), End::ServerFin)?;
    let re1 = lab.get(s1, None, &evs(1..2), End::LastChunk)?;
    let s2 = "lost-after-resume";
    lab.get(s2, None, &evs(1..3), End::ClientReset)?;
    let r2 = lab.get(s2, Some("2"), &[], End::ClientReset)?;
    let re2 = lab.get(s2, None, &evs(1..2), End::LastChunk)?;
    Ok(Expect {
        lines: vec![line(s2, "unverifiable", "2", None, &r2)],
        resumes: vec![audit(&r2, "unverifiable", None, None, "consistent", vec![])],
        findings: vec![
            finding("cursor_lost", &[re1.request, g1.events[2]]),
            finding("cursor_lost", &[re2.request, r2.request]),
        ],
        sessions: vec![session(s1, 2, 0), session(s2, 3, 1)],
        ..Expect::default()
    })
}

fn priming_fixture(lab: &mut Lab) -> io::Result<Expect> {
    let s1 = "prime-ack";
    let mut first = vec![priming("1")];
    first.extend((2..4).map(|n| ev(n.to_string(), message(n))));
    lab.get(s1, None, &first, End::ClientReset)?;
    let mut again = vec![priming("3")];
    again.extend((4..6).map(|n| ev(n.to_string(), message(n))));
    let r1 = lab.get(s1, Some("3"), &again, End::LastChunk)?;

    let s2 = "prime-mid";
    let p = uuid(700);
    let mut first = vec![priming(&p)];
    first.extend((1..3).map(|n| ev(uuid(700 + n), message(n as u32))));
    lab.get(s2, None, &first, End::ClientReset)?;
    let r2 = lab.get(
        s2,
        Some(&uuid(702)),
        &[
            ev(uuid(703), message(3)),
            priming(&p),
            ev(uuid(704), message(4)),
        ],
        End::LastChunk,
    )?;

    let s3 = "prime-only";
    lab.get(
        s3,
        None,
        &[ev("1", message(1)), ev("2", message(2))],
        End::ClientReset,
    )?;
    let r3 = lab.get(s3, Some("2"), &[priming("2")], End::ServerFin)?;
    Ok(Expect {
        lines: vec![
            with(
                line(s1, "correct", "3", Some("4"), &r1),
                "priming_ack_frame",
                json!(r1.events[0]),
            ),
            line(s2, "unverifiable", &uuid(702), Some(&uuid(703)), &r2),
            with(
                line(s3, "empty", "2", None, &r3),
                "priming_ack_frame",
                json!(r3.events[0]),
            ),
        ],
        resumes: vec![
            audit(&r1, "correct", None, None, "consistent", vec![]),
            audit(&r2, "unverifiable", None, None, "consistent", vec![]),
            audit(&r3, "empty", None, None, "consistent", vec![]),
        ],
        sessions: vec![session(s1, 2, 1), session(s2, 2, 1), session(s3, 2, 1)],
        ..Expect::default()
    })
}

fn retry_resume_ack(lab: &mut Lab) -> io::Result<Expect> {
    let s1 = "ack-match";
    lab.get(
        s1,
        None,
        &[ev(uuid(801), message(1)), ev(uuid(802), message(2))],
        End::ClientReset,
    )?;
    let ack = Ev {
        id: None,
        event: Some("resume"),
        data: format!(r#"{{"lastEventId":"{}"}}"#, uuid(802)),
        retry: Some(1000),
    };
    let mut later = ev(uuid(804), message(4));
    later.retry = Some(3000);
    let r1 = lab.get(
        s1,
        Some(&uuid(802)),
        &[ack, ev(uuid(803), message(3)), later],
        End::LastChunk,
    )?;

    let s2 = "ack-other";
    lab.get(
        s2,
        None,
        &[ev(uuid(811), message(1)), ev(uuid(812), message(2))],
        End::ClientReset,
    )?;
    let other = Ev {
        id: None,
        event: Some("resume"),
        data: uuid(899),
        retry: None,
    };
    let r2 = lab.get(
        s2,
        Some(&uuid(812)),
        &[other, ev(uuid(813), message(3))],
        End::LastChunk,
    )?;

    // A 2026-07-28 server: no resumable streams, the GET is refused.
    let s3 = "no-resume-2026";
    let mut c = lab.open()?;
    let req = request("GET", "/mcp", Some(s3), Some("9"), "2026-07-28", "");
    let at = lab.send(&mut c, Side::Client, &req)?;
    lab.pause(3);
    lab.send(
        &mut c,
        Side::Server,
        &status(
            405,
            "Method Not Allowed",
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Method not allowed."}}"#,
        ),
    )?;
    lab.pause(5);
    c.flow.close(&mut lab.cap, Side::Client)?;
    let r3 = Sent {
        request: at,
        stream: c.stream(),
        events: vec![],
    };
    Ok(Expect {
        lines: vec![
            with(
                with(
                    line(s1, "correct", &uuid(802), Some(&uuid(803)), &r1),
                    "retry_ms",
                    json!([1000, 3000]),
                ),
                "resume_ack",
                json!(uuid(802)),
            ),
            with(
                line(s2, "unverifiable", &uuid(812), Some(&uuid(813)), &r2),
                "resume_ack",
                json!(uuid(899)),
            ),
            with(
                with(
                    line(s3, "rejected", "9", None, &r3),
                    "protocol_version",
                    json!("2026-07-28"),
                ),
                "response_status",
                json!(405),
            ),
        ],
        resumes: vec![
            audit(
                &r1,
                "correct",
                None,
                Some(("resume_ack", &[r1.events[0]])),
                "consistent",
                vec![],
            ),
            audit(
                &r2,
                "unverifiable",
                None,
                Some(("resume_ack", &[r2.events[0]])),
                "consistent",
                vec![],
            ),
            audit(&r3, "rejected", None, None, "not_seen", vec![]),
        ],
        sessions: vec![session(s1, 2, 1), session(s2, 2, 1), session(s3, 1, 1)],
        ..Expect::default()
    })
}

fn legacy_http_sse(lab: &mut Lab) -> io::Result<Expect> {
    let mut lines = Vec::new();
    let mut resumes = Vec::new();
    let mut sessions = Vec::new();
    for (sid, param) in [("7c1f0a9e4b", "sessionId"), ("d2e8aa31f0", "session_id")] {
        let endpoint = Ev {
            id: None,
            event: Some("endpoint"),
            data: format!("/messages?{param}={sid}"),
            retry: None,
        };
        // The event stream (GET /sse, no session header: the endpoint event names it).
        let mut sse = lab.open()?;
        let req = request("GET", "/sse", None, None, "2024-11-05", "");
        lab.send(&mut sse, Side::Client, &req)?;
        lab.pause(3);
        lab.send(&mut sse, Side::Server, &sse_head(None))?;
        lab.events(&mut sse, std::slice::from_ref(&endpoint))?;
        // Each message is a POST to the endpoint URL, answered 202; answers come on the stream.
        for (n, body) in [
            (
                1,
                r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#,
            ),
            (
                2,
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            ),
        ] {
            let mut p = lab.open()?;
            let path = format!("/messages?{param}={sid}");
            let req = request("POST", &path, None, None, "2024-11-05", body);
            lab.send(&mut p, Side::Client, &req)?;
            lab.pause(3);
            lab.send(&mut p, Side::Server, &status(202, "Accepted", ""))?;
            lab.pause(3);
            p.flow.close(&mut lab.cap, Side::Client)?;
            let data = if n == 1 { response(0) } else { message(n) };
            lab.events(&mut sse, &[ev(n.to_string(), data)])?;
        }
        lab.events(&mut sse, &[ev("3", message(3))])?;
        lab.end(&mut sse, End::ClientReset)?;
        // The reconnect: GET /sse with Last-Event-ID.
        let req = request("GET", "/sse", None, Some("3"), "2024-11-05", "");
        let r = lab.stream(
            req,
            None,
            &[endpoint.clone(), ev("4", message(4))],
            End::LastChunk,
        )?;
        lines.push(line(sid, "correct", "3", Some("4"), &r));
        resumes.push(audit(&r, "correct", None, None, "consistent", vec![]));
        sessions.push(session(sid, 4, 1));
    }
    Ok(Expect {
        lines,
        resumes,
        sessions,
        ..Expect::default()
    })
}
