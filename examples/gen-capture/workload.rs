//! The benchmark workload: interleaved MCP sessions written batch after batch.
//!
//! Each batch is a [`Scenario`] of up to a few hundred sessions whose connections are open at
//! the same time and whose packets interleave (one write of each session in turn). A session
//! initializes on its own connection, then reconnects one to four times with `Last-Event-ID`,
//! each time on a new connection answered by a long chunked event stream of JSON-RPC
//! `notifications/progress` events (150–400 bytes each). Most resumes are correct; every other
//! verdict is sprinkled in (skipped and replayed ids, refusals, empty streams, opaque ids, a
//! first event missing from the capture, a capture ending before the answer), with a few
//! retransmitted, reordered or gzip-encoded streams. Most sessions end with a `DELETE` on the
//! connection that initialized them. Batches follow each other on one capture,
//! so frame numbers, `tcp.stream` indices and time run on; every connection has its own
//! 4-tuple.
//!
//! Every connection goes on the workload's [`Wire`]: cleartext HTTP/1.1 by default, or
//! HTTP/2 and/or TLS; the sessions, their events and the expected findings are the same on
//! every wire (the random choices are made before, and apart from, the wire), so rows of a
//! benchmark compare the same traffic. TLS secrets derive from the seed; their key log lines
//! go to the key log writer as each connection opens. The size asked for is that of the
//! cleartext HTTP/1.1 capture of the sessions; another wire's capture is as much larger as
//! its framing and records make it.
//!
//! Memory is one batch (at most `BATCH_BYTES` of packets), never the capture: packets stream
//! to the output as they are made. The same parameters always give the same bytes.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::net::Ipv4Addr;
use std::rc::Rc;

use mcp_resume_audit_synth::{
    BASE_TIME_NS, ByteOrder, Capture, ConnClose, ConnSpec, Endpoint, EventField, EventStream,
    ExchangeKind, Fate, FlowSpec, HeaderCase, Interleave, LineEnd, LinkFraming, PacketWriter,
    PcapFormat, PcapWriter, PcapngWriter, Resume, ResumeResponse, Scenario, SessionSpec, SseEvent,
    SseStyle, StreamClose, TsResolution, Vlan, Wire, write_expectations,
};

/// Container format of the capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Pcap,
    Pcapng,
}

/// What to write.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Approximate size in bytes: batches are written until it is reached.
    pub size: u64,
    pub format: Format,
    pub seed: u64,
    /// Sessions open at once (per batch); `None`: 256, fewer for small captures.
    pub sessions: Option<usize>,
    /// HTTP version and TLS of every connection.
    pub wire: Wire,
}

/// Time between consecutive packets.
const STEP_NS: u64 = 20_000;
/// Largest batch: what one scenario holds in memory before it is written.
const BATCH_BYTES: u64 = 48 << 20;
/// Capture bytes one event costs on average (data segment, its ACK, record headers), the
/// first guess before measured batches refine it.
const FIRST_GUESS_EVENT_BYTES: f64 = 460.0;
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const SERVER_PORT: u16 = 8000;

/// splitmix64: small, deterministic, good enough to pick shapes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    /// True with probability `p` percent.
    fn percent(&mut self, p: u64) -> bool {
        self.next() % 100 < p
    }
}

/// Counts the bytes that reach the file; the count is shared because the capture writers own
/// their output.
struct Counting<W: Write> {
    inner: W,
    bytes: Rc<Cell<u64>>,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes.set(self.bytes.get() + n as u64);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Words progress messages are made of.
const WORDS: &[&str] = &[
    "indexing",
    "repository",
    "files",
    "analyzed",
    "fetching",
    "embeddings",
    "for",
    "chunk",
    "of",
    "documents",
    "compiling",
    "crate",
    "tests",
    "passed",
    "uploading",
    "artifact",
    "to",
    "bucket",
    "scanning",
    "dependencies",
    "resolved",
    "query",
    "rows",
    "processed",
];

fn progress_message(rng: &mut Rng) -> String {
    let want = rng.range(40, 280) as usize;
    let mut m = String::with_capacity(want + 16);
    while m.len() < want {
        if !m.is_empty() {
            m.push(' ');
        }
        m.push_str(WORDS[(rng.next() % WORDS.len() as u64) as usize]);
    }
    m
}

/// The shape of the next resume of a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Correct,
    Gap,
    Replay,
    Rejected,
    Empty,
    Opaque,
    FirstDropped,
    CaptureEnds,
}

fn pick_kind(rng: &mut Rng) -> Kind {
    match rng.next() % 1000 {
        0..800 => Kind::Correct,
        800..850 => Kind::Gap,
        850..900 => Kind::Replay,
        900..930 => Kind::Rejected,
        930..950 => Kind::Empty,
        950..980 => Kind::Opaque,
        980..998 => Kind::FirstDropped,
        _ => Kind::CaptureEnds,
    }
}

/// Builds one session; `serial` is its number over the whole capture (its client address).
/// Returns the session and the events it sends.
fn session(rng: &mut Rng, serial: u64, mean_events: u64) -> (SessionSpec, u64) {
    // 10.1.0.0 onwards: one client address per session, so every 4-tuple is unique.
    let host = 0x0a01_0000u32.wrapping_add(serial as u32);
    let client = Ipv4Addr::from(host);
    let resumes = rng.range(1, 4) as usize;
    let port_base = rng.range(20_000, 60_000) as u16;
    let mut conns = Vec::with_capacity(resumes + 1);
    for k in 0..=resumes {
        let mut f = FlowSpec::new(
            0,
            Endpoint::new(client, port_base + k as u16),
            Endpoint::new(SERVER, SERVER_PORT),
        );
        f.client_isn = rng.next() as u32;
        f.server_isn = rng.next() as u32;
        conns.push(ConnSpec::new(f));
    }
    let sid = format!("{:016x}{:016x}", rng.next(), rng.next());
    let mut spec = SessionSpec::new(Some(&sid), conns);
    if rng.percent(40) {
        spec.header_case = HeaderCase::Canonical;
    }
    let style = SseStyle {
        line_end: if rng.percent(30) {
            LineEnd::CrLf
        } else {
            LineEnd::Lf
        },
        event_field: match rng.next() % 3 {
            0 => EventField::Omit,
            1 => EventField::BeforeId,
            _ => EventField::AfterId,
        },
    };
    spec.style = style;
    spec.progress_message = Some(progress_message(rng));
    spec = spec
        .exchange(
            0,
            ExchangeKind::Initialize {
                priming_id: Some("0".to_string()),
                result_id: Some("1".to_string()),
            },
        )
        .exchange(0, ExchangeKind::InitializedNotification);
    // The id of the last event the client saw.
    let mut last_seen: u64 = 1;
    let mut events_total = 0;
    let mut ended_waiting = false;
    for k in 1..=resumes {
        let kind = pick_kind(rng);
        let n = rng.range(mean_events / 4, mean_events * 7 / 4).max(1);
        let numeric = |first: u64| -> Vec<SseEvent> {
            (0..n)
                .map(|i| SseEvent::with_id((first + i).to_string()))
                .collect()
        };
        let close = match rng.next() % 100 {
            0..70 => StreamClose::TerminalChunk,
            70..85 => StreamClose::ServerFin,
            _ => StreamClose::ClientReset,
        };
        let stream = |events: Vec<SseEvent>, rng: &mut Rng| {
            let mut s = EventStream {
                style,
                events,
                gzip: rng.percent(2),
                close,
                head_fate: Fate::Deliver,
            };
            // A few segments retransmitted or reordered, as on a busy link.
            for ev in s.events.iter_mut().skip(1) {
                if rng.percent(1) {
                    ev.fate = match rng.next() % 3 {
                        0 => Fate::Duplicate,
                        1 => Fate::OverlapRetransmit,
                        _ => Fate::SwapWithNext,
                    };
                }
            }
            ResumeResponse::Stream(s)
        };
        let last = last_seen.to_string();
        let (resume, sent) = match kind {
            Kind::Correct => {
                let r = Resume::new(&last, stream(numeric(last_seen + 1), rng));
                last_seen += n;
                (r, n)
            }
            Kind::Gap => {
                let first = last_seen + rng.range(2, 200);
                let r = Resume::new(&last, stream(numeric(first), rng));
                last_seen = first + n - 1;
                (r, n)
            }
            Kind::Replay => {
                let first = rng.range(0, last_seen);
                let r = Resume::new(&last, stream(numeric(first), rng));
                last_seen = first + n - 1;
                (r, n)
            }
            Kind::Rejected => {
                let status = [400, 404, 405, 409, 503][(rng.next() % 5) as usize];
                (Resume::new(&last, ResumeResponse::Status(status)), 0)
            }
            Kind::Empty => {
                let mut s = EventStream::with_ids::<&str>(&[], StreamClose::ServerFin);
                s.style = style;
                (Resume::new(&last, ResumeResponse::Stream(s)), 0)
            }
            Kind::Opaque => {
                let tag = rng.next() as u32;
                let ids: Vec<SseEvent> = (0..n)
                    .map(|i| SseEvent::with_id(format!("ev_{tag:08x}_{}", 1 + i)))
                    .collect();
                let r = Resume::new(format!("ev_{tag:08x}_0"), stream(ids, rng));
                (r, n)
            }
            Kind::FirstDropped => {
                let mut events = numeric(last_seen + 1);
                if let Some(first) = events.first_mut() {
                    first.fate = Fate::Drop;
                }
                let r = Resume::new(&last, stream(events, rng));
                last_seen += n;
                (r, n)
            }
            Kind::CaptureEnds => (Resume::new(&last, ResumeResponse::CaptureEnds), 0),
        };
        events_total += sent;
        if kind == Kind::CaptureEnds || matches!(close, StreamClose::ServerFin) {
            spec.connections[k].close = ConnClose::LeaveOpen;
        }
        spec = spec.exchange(k, ExchangeKind::Resume(resume));
        ended_waiting = kind == Kind::CaptureEnds;
    }
    // Most clients end the session when they are done (the Python SDK does by default), on
    // the connection they opened it on; a client still waiting for an answer does not.
    if !ended_waiting && rng.percent(90) {
        spec = spec.exchange(0, ExchangeKind::Terminate);
    }
    (spec, events_total)
}

/// What was written.
#[derive(Debug, Default)]
pub struct Totals {
    pub bytes: u64,
    pub frames: u64,
    pub batches: u64,
    pub sessions: u64,
    pub resumes: u64,
    pub events: u64,
    pub verdicts: BTreeMap<&'static str, u64>,
}

/// Writes the capture to `out`, the TLS key log lines to `key_log`, and, when given, the
/// expected findings (JSON Lines) to `expect`.
pub fn write_capture<W: Write>(
    w: &Workload,
    out: W,
    key_log: &mut dyn Write,
    expect: Option<&mut dyn Write>,
) -> io::Result<Totals> {
    let written = Rc::new(Cell::new(0));
    let file = Counting {
        inner: out,
        bytes: Rc::clone(&written),
    };
    // The batches are planned on the size of the cleartext HTTP/1.1 capture of the same
    // sessions, so every wire carries the same traffic: on another wire, each batch is also
    // written as cleartext to a counter, and that count drives the plan.
    let cleartext = Rc::new(Cell::new(0));
    let shadow = (w.wire != Wire::default()).then(|| Counting {
        inner: io::sink(),
        bytes: Rc::clone(&cleartext),
    });
    let planned = if shadow.is_some() {
        &cleartext
    } else {
        &written
    };
    let mut totals = match w.format {
        Format::Pcap => {
            let mut cap = pcap_capture(file)?;
            let mut shadow = shadow.map(pcap_capture).transpose()?;
            let mut totals = generate(&mut cap, shadow.as_mut(), w, planned, key_log, expect)?;
            totals.frames = cap.frames();
            cap.into_writer().into_inner().flush()?;
            totals
        }
        Format::Pcapng => {
            let mut cap = pcapng_capture(file)?;
            let mut shadow = shadow.map(pcapng_capture).transpose()?;
            let mut totals = generate(&mut cap, shadow.as_mut(), w, planned, key_log, expect)?;
            totals.frames = cap.frames();
            cap.into_writer().into_inner().flush()?;
            totals
        }
    };
    totals.bytes = written.get();
    Ok(totals)
}

const FRAMING: LinkFraming = LinkFraming::Ethernet {
    vlan: Vlan::Untagged,
};

fn pcap_capture<W: Write>(out: W) -> io::Result<Capture<PcapWriter<W>>> {
    let format = PcapFormat::new(ByteOrder::Little, TsResolution::Micro, FRAMING.link_type());
    let mut cap = Capture::new(PcapWriter::new(out, format)?, BASE_TIME_NS, STEP_NS);
    cap.add_interface(FRAMING, TsResolution::Micro)?;
    Ok(cap)
}

fn pcapng_capture<W: Write>(out: W) -> io::Result<Capture<PcapngWriter<W>>> {
    let writer = PcapngWriter::new(out, ByteOrder::Little)?;
    let mut cap = Capture::new(writer, BASE_TIME_NS, STEP_NS);
    cap.add_interface(FRAMING, TsResolution::Micro)?;
    Ok(cap)
}

/// Writes batches to `cap` until `planned` (the bytes of `cap`, or of `shadow`, the
/// cleartext capture of the same sessions, when there is one) reaches the workload's size.
fn generate<W: PacketWriter, S: PacketWriter>(
    cap: &mut Capture<W>,
    mut shadow: Option<&mut Capture<S>>,
    w: &Workload,
    planned: &Cell<u64>,
    key_log: &mut dyn Write,
    mut expect: Option<&mut dyn Write>,
) -> io::Result<Totals> {
    let mut rng = Rng(w.seed ^ 0x6d63_702d_6175_6469);
    let mut totals = Totals::default();
    let mut event_bytes = FIRST_GUESS_EVENT_BYTES;
    while planned.get() < w.size {
        let before = planned.get();
        let budget = (w.size - before).min(BATCH_BYTES);
        // Small captures get fewer sessions, so their streams stay long.
        let sessions = w
            .sessions
            .unwrap_or_else(|| (budget / (192 << 10)).clamp(4, 256) as usize)
            .max(1);
        // About 2.5 streams per session.
        let mean_events =
            ((budget as f64 / event_bytes / sessions as f64 / 2.5) as u64).clamp(4, 20_000);
        let mut specs = Vec::with_capacity(sessions);
        let mut events = 0;
        for _ in 0..sessions {
            let (spec, n) = session(&mut rng, totals.sessions, mean_events);
            specs.push(spec);
            totals.sessions += 1;
            events += n;
        }
        if let Some(shadow) = shadow.as_mut() {
            let mut scenario = Scenario::new();
            for spec in &specs {
                scenario.add_session(spec)?;
            }
            scenario.run(shadow, Interleave::RoundRobin)?;
        }
        let mut scenario = Scenario::new();
        for spec in specs {
            scenario.add_session(&spec.wire(w.wire))?;
        }
        let expected = scenario.run_with_key_log(cap, Interleave::RoundRobin, key_log)?;
        drop(scenario);
        totals.batches += 1;
        totals.events += events;
        totals.resumes += expected.len() as u64;
        for e in &expected {
            *totals.verdicts.entry(e.verdict.as_str()).or_insert(0) += 1;
        }
        if let Some(out) = expect.as_mut() {
            write_expectations(out, &expected)?;
        }
        let got = planned.get() - before;
        if events > 0 {
            event_bytes = (got as f64 / events as f64).max(64.0);
        }
    }
    Ok(totals)
}
