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
    /// The traffic mix.
    pub mix: Mix,
    /// Largest TCP payload of a segment; `None`: 1,460 (Ethernet). Loopback captures and
    /// hosts that coalesce received segments (GRO) see up to 64 KiB in one packet.
    pub mss: Option<u16>,
}

/// The traffic mix of a workload: each stresses another part of the analyzer, over the same
/// session and resume logic (every mix keeps every verdict in it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mix {
    /// Progress events of 150–400 bytes, one to four resumes per session, each on a new
    /// connection, up to 256 sessions at once.
    #[default]
    Default,
    /// Progress notifications of about 100 bytes (no message), two to six resumes per
    /// session: per-event costs dominate.
    Tiny,
    /// Tool results of 100–300 KB per event, each split over many segments.
    Large,
    /// 3,000 sessions open at once, their packets interleaved: per-connection state and the
    /// session stage dominate.
    Sessions,
    /// Reconnect storms: ten to forty resumes per session, most answered by an empty `200`
    /// event stream.
    Storm,
    /// One connection per session, reused for every exchange (HTTP keep-alive).
    KeepAlive,
    /// A few long-lived streams of tens of thousands of events each.
    Long,
    /// A loaded server: 3,000 sessions open through the whole capture, their progress events
    /// written several to a segment (as a server's buffered writes put them), one or two
    /// resumes a session. At 0.4 GB: some 520,000 packets and 4,500 resumes.
    Loaded,
}

/// What a mix sets.
struct Shape {
    /// Length range of each session's progress message; `None`: no message.
    message: Option<(u64, u64)>,
    /// Sessions at once when the user does not say.
    sessions: Option<usize>,
    /// Resumes per session.
    resumes: (u64, u64),
    /// Bounds on the mean events per stream.
    mean_events: (u64, u64),
    /// Most resumes get an empty stream.
    storm: bool,
    /// Every exchange on the session's first connection.
    keep_alive: bool,
    /// Capture bytes one event costs, the first guess before measured batches refine it.
    event_bytes: f64,
    /// Delivered events a server write carries (see `EventStream::per_write`).
    per_write: usize,
    /// Largest batch: the sessions of a batch are open at once. [`ONE_BATCH`]: the whole
    /// capture is one batch, whose size comes near the size asked for (within a few percent).
    batch_bytes: u64,
}

impl Mix {
    fn shape(self) -> Shape {
        let base = Shape {
            message: Some((40, 280)),
            sessions: None,
            resumes: (1, 4),
            mean_events: (4, 20_000),
            storm: false,
            keep_alive: false,
            event_bytes: FIRST_GUESS_EVENT_BYTES,
            per_write: 1,
            batch_bytes: BATCH_BYTES,
        };
        match self {
            Mix::Default => base,
            Mix::Tiny => Shape {
                message: None,
                resumes: (2, 6),
                ..base
            },
            Mix::Large => Shape {
                message: Some((100_000, 300_000)),
                sessions: Some(16),
                mean_events: (2, 20_000),
                event_bytes: 210_000.0,
                ..base
            },
            Mix::Sessions => Shape {
                sessions: Some(3000),
                ..base
            },
            Mix::Storm => Shape {
                resumes: (10, 40),
                storm: true,
                ..base
            },
            Mix::KeepAlive => Shape {
                keep_alive: true,
                ..base
            },
            Mix::Long => Shape {
                sessions: Some(4),
                resumes: (1, 2),
                mean_events: (4, 400_000),
                ..base
            },
            Mix::Loaded => Shape {
                sessions: Some(3000),
                resumes: (1, 2),
                per_write: 14,
                event_bytes: LOADED_EVENT_BYTES,
                batch_bytes: ONE_BATCH,
                ..base
            },
        }
    }
}

/// Time between consecutive packets.
const STEP_NS: u64 = 20_000;
/// Largest batch: what one scenario holds in memory before it is written.
const BATCH_BYTES: u64 = 48 << 20;
/// Capture bytes one event costs on average (data segment, its ACK, record headers), the
/// first guess before measured batches refine it.
const FIRST_GUESS_EVENT_BYTES: f64 = 460.0;
/// No bound on a batch: one batch makes the capture.
const ONE_BATCH: u64 = u64::MAX;
/// The same for [`Mix::Loaded`]'s events, 14 to a write: measured, so that its one batch
/// comes near the size asked for.
const LOADED_EVENT_BYTES: f64 = 345.0;
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

fn progress_message(rng: &mut Rng, (lo, hi): (u64, u64)) -> String {
    let want = rng.range(lo, hi) as usize;
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

/// The id of a stream's `i`th event under [`Kind::Opaque`]: 16 hex digits scrambled from the
/// stream's tag and `i`, so that no counter can be read in them, nor an order between them.
fn opaque_id(tag: u32, i: u64) -> String {
    let mut x = (u64::from(tag) << 32 | i).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 29;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 32;
    format!("{x:016x}")
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
fn session(
    rng: &mut Rng,
    serial: u64,
    mean_events: u64,
    shape: &Shape,
    mss: Option<u16>,
) -> (SessionSpec, u64) {
    // 10.1.0.0 onwards: one client address per session, so every 4-tuple is unique.
    let host = 0x0a01_0000u32.wrapping_add(serial as u32);
    let client = Ipv4Addr::from(host);
    let resumes = rng.range(shape.resumes.0, shape.resumes.1) as usize;
    let port_base = rng.range(20_000, 60_000) as u16;
    let connections = if shape.keep_alive { 1 } else { resumes + 1 };
    let mut conns = Vec::with_capacity(connections);
    for k in 0..connections {
        let mut f = FlowSpec::new(
            0,
            Endpoint::new(client, port_base + k as u16),
            Endpoint::new(SERVER, SERVER_PORT),
        );
        f.client_isn = rng.next() as u32;
        f.server_isn = rng.next() as u32;
        if let Some(mss) = mss {
            f.mss = mss;
        }
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
    spec.progress_message = shape.message.map(|range| progress_message(rng, range));
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
        let mut kind = pick_kind(rng);
        if shape.storm && rng.percent(90) {
            kind = Kind::Empty;
        }
        if shape.keep_alive && kind == Kind::CaptureEnds && k < resumes {
            // On a reused connection nothing can follow an answer that never comes.
            kind = Kind::Correct;
        }
        let n = rng.range(mean_events / 4, mean_events * 7 / 4).max(1);
        let numeric = |first: u64| -> Vec<SseEvent> {
            (0..n)
                .map(|i| SseEvent::with_id((first + i).to_string()))
                .collect()
        };
        let close = match rng.next() % 100 {
            _ if shape.keep_alive => StreamClose::TerminalChunk,
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
                per_write: shape.per_write,
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
                let end = if shape.keep_alive {
                    StreamClose::TerminalChunk
                } else {
                    StreamClose::ServerFin
                };
                let mut s = EventStream::with_ids::<&str>(&[], end);
                s.style = style;
                (Resume::new(&last, ResumeResponse::Stream(s)), 0)
            }
            Kind::Opaque => {
                let tag = rng.next() as u32;
                let ids: Vec<SseEvent> = (0..n)
                    .map(|i| SseEvent::with_id(opaque_id(tag, 1 + i)))
                    .collect();
                let r = Resume::new(opaque_id(tag, 0), stream(ids, rng));
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
        let conn = if shape.keep_alive { 0 } else { k };
        if kind == Kind::CaptureEnds
            || (!shape.keep_alive && matches!(close, StreamClose::ServerFin))
        {
            spec.connections[conn].close = ConnClose::LeaveOpen;
        }
        spec = spec.exchange(conn, ExchangeKind::Resume(resume));
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
    let shape = w.mix.shape();
    let mut totals = Totals::default();
    let mut event_bytes = shape.event_bytes;
    while planned.get() < w.size && !(shape.batch_bytes == ONE_BATCH && totals.batches == 1) {
        let before = planned.get();
        let budget = (w.size - before).min(shape.batch_bytes);
        // Small captures get fewer sessions, so their streams stay long.
        let sessions = w
            .sessions
            .or(shape.sessions)
            .unwrap_or_else(|| (budget / (192 << 10)).clamp(4, 256) as usize)
            .max(1);
        // Streams per session: about half the resumes' mean, plus one.
        let streams = (shape.resumes.0 + shape.resumes.1) as f64 / 2.0;
        let (lo, hi) = shape.mean_events;
        let mean_events =
            ((budget as f64 / event_bytes / sessions as f64 / streams) as u64).clamp(lo, hi);
        let mut specs = Vec::with_capacity(sessions);
        let mut events = 0;
        for _ in 0..sessions {
            let (spec, n) = session(&mut rng, totals.sessions, mean_events, &shape, w.mss);
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
