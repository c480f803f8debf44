//! Fuzz harnesses for mcp-resume-audit: one function per target, shared by the libFuzzer
//! entry points (`cargo fuzz run TARGET`) and by the plain replay binaries (`cargo run
//! --manifest-path fuzz/Cargo.toml --bin TARGET -- FILE_OR_DIR...`).
//!
//! Input: arbitrary bytes. For the capture and pipeline targets they are a capture file; for
//! the stream-level targets they are read as a small structured format (see [`Transcript`]
//! and [`tcp_reassembly`]), so that the fuzzer explores parser states rather than framing.
//! Output: nothing; a harness panics when the code under test panics or breaks a contract
//! its module header states (split independence, exactly-once delivery, bounded buffers).
//! Invariants: every harness is deterministic and bounded in time by its input length.

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

use mcp_resume_audit::Limits;
use mcp_resume_audit::fuzzing::Http2Fuzz;
use mcp_resume_audit::stages::CaptureReader;
use mcp_resume_audit::stages::HttpConnection;
use mcp_resume_audit::stages::decode;
use mcp_resume_audit::stages::{
    Anomaly, BodyEnd, Direction, HttpSink, Mark, RequestHead, ResponseHead, StreamEnd, StreamSink,
};
use mcp_resume_audit::stages::{OwnedSseEvent, SseParser};
use mcp_resume_audit::stages::{TcpConnection, TcpFlags, TcpSegment};
use mcp_resume_audit::{self as driver, Options};

/// Runs `harness` on every file named on the command line (directories: every file inside).
pub fn replay_args(harness: fn(&[u8])) -> ExitCode {
    let mut runs = 0u64;
    for arg in std::env::args_os().skip(1) {
        let path = Path::new(&arg);
        let mut files = Vec::new();
        if path.is_dir() {
            match std::fs::read_dir(path) {
                Ok(entries) => files.extend(entries.flatten().map(|e| e.path())),
                Err(e) => {
                    eprintln!("{}: {e}", path.display());
                    return ExitCode::from(2);
                }
            }
            files.sort();
        } else {
            files.push(path.to_path_buf());
        }
        for f in files.iter().filter(|f| f.is_file()) {
            let mut data = Vec::new();
            if let Err(e) = std::fs::File::open(f).and_then(|mut h| h.read_to_end(&mut data)) {
                eprintln!("{}: {e}", f.display());
                return ExitCode::from(2);
            }
            harness(&data);
            runs += 1;
        }
    }
    eprintln!("replayed {runs} inputs without a failure");
    ExitCode::SUCCESS
}

// ---------------------------------------------------------------------------------------------
// Capture reader and packet decoder.

/// Reads `data` as a capture file and decodes every packet down to TCP.
pub fn capture_decode(data: &[u8]) {
    // A small block limit so that the "record larger than allowed" paths are reachable.
    let max_block = 1 << 16;
    let Ok(mut reader) = CaptureReader::open(data, max_block) else {
        return;
    };
    let mut last_frame = 0;
    // An error ends the packets: damage is reported once, after which nothing more comes.
    while let Ok(Some(p)) = reader.next_packet() {
        assert!(p.data.len() <= max_block, "record above the block limit");
        // Skipped records (a packet naming no interface) still take a frame number.
        assert!(p.frame > last_frame, "frame numbers go up");
        last_frame = p.frame;
        if let Ok(tcp) = decode::decode(p.linktype, p.data) {
            assert!(tcp.payload.len() <= p.data.len());
        }
    }
    assert!(reader.position() <= data.len() as u64);
    if let Some(at) = reader.truncated_at() {
        assert!(at <= data.len() as u64);
    }
}

// ---------------------------------------------------------------------------------------------
// TCP reassembly.

/// Checks the `StreamSink` contract and that delivered bytes sit at their stream positions.
#[derive(Default)]
struct TcpChecker {
    /// Positions accounted for (data or gap) per direction.
    position: [u64; 2],
    /// Low byte of the sequence number of position 0, learnt from the first data byte.
    origin: [Option<u8>; 2],
    ended: [bool; 2],
    /// Calls of any kind.
    calls: u64,
}

impl StreamSink for TcpChecker {
    fn data(&mut self, dir: Direction, bytes: &[u8], _mark: Mark) {
        self.calls += 1;
        let d = dir.index();
        assert!(!self.ended[d], "data after end");
        assert!(!bytes.is_empty(), "empty data call");
        for (i, b) in bytes.iter().enumerate() {
            // Every payload byte is the low byte of its own sequence number, so a byte at the
            // wrong position (glued over a hole, shifted by an overlap) shows here.
            let pos_low = self.position[d].wrapping_add(i as u64) as u8;
            let origin = *self.origin[d].get_or_insert(b.wrapping_sub(pos_low));
            assert_eq!(
                *b,
                origin.wrapping_add(pos_low),
                "byte delivered at the wrong stream position"
            );
        }
        self.position[d] += bytes.len() as u64;
    }
    fn gap(&mut self, dir: Direction, len: u64, _mark: Mark) {
        self.calls += 1;
        let d = dir.index();
        assert!(!self.ended[d], "gap after end");
        assert!(len > 0, "empty gap");
        self.position[d] = self.position[d]
            .checked_add(len)
            .expect("position overflow");
    }
    fn end(&mut self, dir: Direction, _how: StreamEnd, _mark: Mark) {
        self.calls += 1;
        let d = dir.index();
        assert!(!self.ended[d], "end twice");
        self.ended[d] = true;
    }
    fn ahead_of_peer(&mut self, _dir: Direction, _mark: Mark, _unseen: u64) {
        self.calls += 1;
    }
    fn after_peer(&mut self, _dir: Direction, _mark: Mark) {
        self.calls += 1;
    }
    fn before_peer(&mut self, _dir: Direction, _mark: Mark, _unacked: u64) {
        self.calls += 1;
    }
    fn sent_unseen(&mut self, _dir: Direction, _mark: Mark) {
        self.calls += 1;
    }
}

/// Out-of-order limits the TCP harness picks from (one input byte chooses).
const OOO_LIMITS: [usize; 8] = [0, 1, 64, 100, 1000, 4096, 65_536, 4 << 20];

/// One TCP segment as the TCP harness reads it: 6 bytes.
/// byte 0: bit 0 direction, bit 1 SYN, bit 2 ACK, bit 3 FIN, bit 4 RST, bit 5 far (the
/// offsets are shifted left by 16 bits, to reach wraparound and distant positions);
/// bytes 1-2: sequence offset (LE) from the direction's base; bytes 3-4: acknowledgment
/// offset (LE) from the other direction's base; byte 5: payload length.
/// The input starts with the two base sequence numbers (LE u32 each) and one byte choosing the
/// out-of-order limit. Payload byte i of a segment is the low byte of its sequence number.
///
/// A second connection is fed the same segments, pure acknowledgments through
/// `TcpConnection::quiet_ack` where it takes them: each one taken must leave the state the
/// segment path leaves, and the segment path must have called its sink for none of them.
pub fn tcp_reassembly(data: &[u8]) {
    let Some((head, mut rest)) = data.split_at_checked(9) else {
        return;
    };
    let base = [
        u32::from_le_bytes([head[0], head[1], head[2], head[3]]),
        u32::from_le_bytes([head[4], head[5], head[6], head[7]]),
    ];
    let limits = Limits {
        max_out_of_order_bytes: OOO_LIMITS[usize::from(head[8] % 8)],
        ..Limits::default()
    };
    let mut conn = TcpConnection::new(&limits);
    let mut sink = TcpChecker::default();
    let mut quick = TcpConnection::new(&limits);
    let mut quick_sink = TcpChecker::default();
    let mut payload = Vec::with_capacity(256);
    let mut frame = 0u64;
    while let Some((rec, tail)) = rest.split_at_checked(6) {
        rest = tail;
        frame += 1;
        let dir = if rec[0] & 1 == 0 {
            Direction::Forward
        } else {
            Direction::Reverse
        };
        let flags = TcpFlags::new(
            rec[0] & 2 != 0,
            rec[0] & 4 != 0,
            rec[0] & 8 != 0,
            rec[0] & 16 != 0,
        );
        let shift = if rec[0] & 32 != 0 { 16 } else { 0 };
        let seq_off = u32::from(u16::from_le_bytes([rec[1], rec[2]])) << shift;
        let ack_off = u32::from(u16::from_le_bytes([rec[3], rec[4]])) << shift;
        let seq = base[dir.index()].wrapping_add(seq_off);
        let ack = base[dir.other().index()].wrapping_add(ack_off);
        let first_byte_seq = if flags.syn() {
            seq.wrapping_add(1)
        } else {
            seq
        };
        payload.clear();
        payload.extend((0..u32::from(rec[5])).map(|i| first_byte_seq.wrapping_add(i) as u8));
        let seg = TcpSegment {
            seq,
            ack,
            flags,
            payload: &payload,
            mark: Mark::new(frame, frame as i64),
        };
        let calls = sink.calls;
        conn.segment(dir, &seg, &mut sink);
        if quick.quiet_ack(dir, &seg) {
            assert_eq!(
                sink.calls, calls,
                "the segment path spoke of a quiet acknowledgment"
            );
            assert_eq!(
                format!("{conn:?}"),
                format!("{quick:?}"),
                "a quiet acknowledgment left another state than the segment path"
            );
        } else {
            quick.segment(dir, &seg, &mut quick_sink);
        }
    }
    conn.finish(StreamEnd::CaptureEnd, Mark::new(frame + 1, 0), &mut sink);
    quick.finish(
        StreamEnd::CaptureEnd,
        Mark::new(frame + 1, 0),
        &mut quick_sink,
    );
    assert_eq!(
        (quick_sink.calls, quick_sink.position),
        (sink.calls, sink.position),
        "the connection that took quiet acknowledgments told another story"
    );
    for dir in [Direction::Forward, Direction::Reverse] {
        assert!(sink.ended[dir.index()], "a direction never ended");
        assert_eq!(
            sink.position[dir.index()],
            conn.position(dir),
            "positions reported differ from the reassembler's"
        );
    }
    assert!(conn.is_closed());
}

// ---------------------------------------------------------------------------------------------
// Transcripts: the in-order side of a connection, for the HTTP and SSE harnesses.

/// One step of a byte-stream transcript.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step<'a> {
    Data(Direction, &'a [u8]),
    Gap(Direction, u64),
    End(Direction, StreamEnd),
}

const END_KINDS: [StreamEnd; 5] = [
    StreamEnd::Fin,
    StreamEnd::Rst,
    StreamEnd::CaptureEnd,
    StreamEnd::Evicted,
    StreamEnd::Abandoned,
];

/// A parsed transcript: two header bytes (their meaning is the harness's), then steps.
/// Step encoding: a tag byte (bit 0 direction; bits 1-2 kind: 0 and 3 data, 1 gap, 2 end;
/// bits 3-5 the end kind), then for data a LE u16 length and the bytes (cut at the end of the
/// input), for a gap a LE u32 length.
pub struct Transcript<'a> {
    pub header: [u8; 2],
    pub steps: Vec<Step<'a>>,
}

impl<'a> Transcript<'a> {
    pub fn parse(data: &'a [u8]) -> Option<Self> {
        let (head, mut rest) = data.split_at_checked(2)?;
        let mut steps = Vec::new();
        while let Some((&tag, tail)) = rest.split_first() {
            rest = tail;
            let dir = if tag & 1 == 0 {
                Direction::Forward
            } else {
                Direction::Reverse
            };
            match (tag >> 1) & 3 {
                1 => {
                    let Some((len, tail)) = rest.split_at_checked(4) else {
                        break;
                    };
                    rest = tail;
                    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]);
                    steps.push(Step::Gap(dir, u64::from(len)));
                }
                2 => steps.push(Step::End(
                    dir,
                    END_KINDS[usize::from((tag >> 3) & 7) % END_KINDS.len()],
                )),
                _ => {
                    let Some((len, tail)) = rest.split_at_checked(2) else {
                        break;
                    };
                    let len = usize::from(u16::from_le_bytes([len[0], len[1]])).min(tail.len());
                    let (bytes, tail) = tail.split_at(len);
                    rest = tail;
                    steps.push(Step::Data(dir, bytes));
                }
            }
        }
        Some(Transcript {
            header: [head[0], head[1]],
            steps,
        })
    }

    /// The encoding [`Transcript::parse`] reads (data longer than 65,535 bytes is split).
    pub fn encode(header: [u8; 2], steps: &[Step<'_>]) -> Vec<u8> {
        let mut out = header.to_vec();
        for step in steps {
            match step {
                Step::Data(dir, bytes) => {
                    for piece in bytes.chunks(usize::from(u16::MAX)) {
                        out.push(dir.index() as u8);
                        out.extend_from_slice(&(piece.len() as u16).to_le_bytes());
                        out.extend_from_slice(piece);
                    }
                }
                Step::Gap(dir, len) => {
                    out.push(dir.index() as u8 | 2);
                    let len = u32::try_from(*len).unwrap_or(u32::MAX);
                    out.extend_from_slice(&len.to_le_bytes());
                }
                Step::End(dir, how) => {
                    let kind = END_KINDS.iter().position(|k| k == how).unwrap_or(2) as u8;
                    out.push(dir.index() as u8 | 4 | (kind << 3));
                }
            }
        }
        out
    }
}

/// Cut points for feeding one slice in pieces: a tiny deterministic generator (xorshift) so
/// that the same input always gives the same cuts.
struct Cuts(u32);

impl Cuts {
    fn new(seed: u8) -> Self {
        Cuts(u32::from(seed).wrapping_mul(0x9E37_79B9) | 1)
    }
    fn next_len(&mut self, max: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        // Mostly short pieces (the interesting splits are inside tokens), sometimes long ones.
        let len = if self.0 & 3 == 0 {
            (self.0 >> 8) as usize % 512
        } else {
            (self.0 >> 8) as usize % 8
        };
        len.clamp(1, max.max(1))
    }
    fn pieces<'b>(&mut self, mut bytes: &'b [u8], mut each: impl FnMut(&'b [u8])) {
        while !bytes.is_empty() {
            let (piece, rest) = bytes.split_at(self.next_len(bytes.len()));
            each(piece);
            bytes = rest;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1.

#[derive(Clone, Debug, PartialEq, Eq)]
enum HttpEvent {
    Request(RequestHead),
    Response(ResponseHead),
    Body(u32, Vec<u8>, Mark),
    BodyGap(u32, u64, Mark),
    BodyEnd(u32, BodyEnd, Mark),
    Anomaly(Anomaly, Mark),
}

/// Records HTTP events (body bytes of one exchange and mark merged) and checks the order
/// contract of [`HttpSink`].
#[derive(Default)]
struct HttpRecorder {
    events: Vec<HttpEvent>,
    requested: std::collections::BTreeSet<u32>,
    responded: std::collections::BTreeSet<u32>,
    ended: std::collections::BTreeSet<u32>,
    body_bytes: usize,
    /// HTTP/2 only: a request whose answer became unreadable may end `LostSync` without a
    /// response (the sink contract's one exception).
    lost_answer_ok: bool,
}

/// Body bytes kept for comparison; past this only the count is compared.
const BODY_KEPT: usize = 1 << 20;

impl HttpRecorder {
    fn open(&self, exchange: u32) {
        assert!(
            self.responded.contains(&exchange),
            "body before response head"
        );
        assert!(!self.ended.contains(&exchange), "body after body_end");
    }
}

impl HttpSink for HttpRecorder {
    fn request(&mut self, head: RequestHead) {
        self.requested.insert(head.exchange);
        self.events.push(HttpEvent::Request(head));
    }
    fn response(&mut self, head: ResponseHead) {
        assert!(
            self.responded.insert(head.exchange),
            "two responses for one exchange"
        );
        self.events.push(HttpEvent::Response(head));
    }
    fn body(&mut self, exchange: u32, bytes: &[u8], mark: Mark) {
        self.open(exchange);
        self.body_bytes += bytes.len();
        let keep = &bytes[..bytes.len().min(BODY_KEPT.saturating_sub(self.body_bytes))];
        if let Some(HttpEvent::Body(x, kept, m)) = self.events.last_mut()
            && *x == exchange
            && *m == mark
        {
            kept.extend_from_slice(keep);
            return;
        }
        self.events
            .push(HttpEvent::Body(exchange, keep.to_vec(), mark));
    }
    fn body_gap(&mut self, exchange: u32, len: u64, mark: Mark) {
        self.open(exchange);
        self.events.push(HttpEvent::BodyGap(exchange, len, mark));
    }
    fn body_end(&mut self, exchange: u32, how: BodyEnd, mark: Mark) {
        let lost_answer = self.lost_answer_ok
            && how == BodyEnd::LostSync
            && self.requested.contains(&exchange)
            && !self.responded.contains(&exchange);
        if lost_answer {
            assert!(
                self.ended.insert(exchange),
                "two body ends for one exchange"
            );
            self.events.push(HttpEvent::BodyEnd(exchange, how, mark));
            return;
        }
        self.open(exchange);
        self.ended.insert(exchange);
        self.events.push(HttpEvent::BodyEnd(exchange, how, mark));
    }
    fn anomaly(&mut self, what: Anomaly, mark: Mark) {
        self.events.push(HttpEvent::Anomaly(what, mark));
    }
}

fn run_http(t: &Transcript<'_>, split: Option<u8>) -> HttpRecorder {
    let limits = Limits {
        max_header_bytes: 256 << (t.header[1] % 9),
        ..Limits::default()
    };
    let from_start = t.header[0] & 1 != 0;
    let mut conn = HttpConnection::new(&limits, from_start);
    let mut rec = HttpRecorder::default();
    let mut cuts = split.map(Cuts::new);
    let mut ended = [false; 2];
    for (i, step) in t.steps.iter().enumerate() {
        let mark = Mark::new(i as u64 + 1, i as i64);
        match *step {
            Step::Data(dir, bytes) => match cuts.as_mut() {
                Some(c) => c.pieces(bytes, |p| {
                    conn.data(dir, p, mark, &mut rec);
                }),
                None => {
                    conn.data(dir, bytes, mark, &mut rec);
                }
            },
            Step::Gap(dir, len) => conn.gap(dir, len, mark, &mut rec),
            Step::End(dir, how) => {
                // The stream contract: one end per direction, nothing after it.
                if !ended[dir.index()] {
                    ended[dir.index()] = true;
                    conn.end(dir, how, mark, &mut rec);
                }
            }
        }
    }
    let last = Mark::new(t.steps.len() as u64 + 1, 0);
    for dir in [Direction::Forward, Direction::Reverse] {
        if !ended[dir.index()] {
            conn.end(dir, StreamEnd::CaptureEnd, last, &mut rec);
        }
    }
    rec
}

fn step_dir(step: &Step<'_>) -> Direction {
    match *step {
        Step::Data(d, _) | Step::Gap(d, _) | Step::End(d, _) => d,
    }
}

/// Feeds a transcript to the HTTP/1.1 parser twice, each data step whole and then cut at
/// input-chosen points; the events must be the same, and every delivered response head must
/// get exactly one body end once both directions ended.
/// Header byte 0: bit 0 `from_start`, the rest seeds the cuts; byte 1 picks the head limit.
pub fn http1_parser(data: &[u8]) {
    let Some(mut t) = Transcript::parse(data) else {
        return;
    };
    // Steps after a direction's end are not allowed by the stream contract: drop them.
    let mut ended = [false; 2];
    t.steps.retain(|s| {
        let d = step_dir(s).index();
        let keep = !ended[d];
        if let Step::End(..) = s {
            ended[d] = true;
        }
        keep
    });
    let whole = run_http(&t, None);
    let cut = run_http(&t, Some(t.header[0] >> 1));
    assert_eq!(
        whole.events, cut.events,
        "the HTTP events depend on how the bytes were cut"
    );
    assert_eq!(whole.body_bytes, cut.body_bytes);
    assert_eq!(
        whole.responded, whole.ended,
        "a response head without exactly one body end"
    );
}

// ---------------------------------------------------------------------------------------------
// Server-sent events.

type OwnedEvent = OwnedSseEvent;

fn run_sse(t: &Transcript<'_>, split: Option<u8>) -> (Vec<OwnedEvent>, bool, usize) {
    let field = 16usize << (t.header[1] % 8);
    let keep = usize::from(t.header[1] >> 3) * 8;
    let limits = Limits {
        max_sse_field_bytes: field,
        ..Limits::default()
    };
    let bound = 2 * (3 * field + keep) + 256;
    let mut p = SseParser::new(&limits, keep);
    let mut events = Vec::new();
    let mut cuts = split.map(Cuts::new);
    for (i, step) in t.steps.iter().enumerate() {
        let mark = Mark::new(i as u64 + 1, i as i64);
        match *step {
            Step::Data(_, bytes) => match cuts.as_mut() {
                Some(c) => c.pieces(bytes, |piece| {
                    p.feed(piece, mark, |e| events.push(OwnedEvent::from(e)));
                    assert!(p.retained_bytes() <= bound, "SSE buffers above their bound");
                }),
                None => p.feed(bytes, mark, |e| events.push(OwnedEvent::from(e))),
            },
            Step::Gap(..) => p.gap(mark),
            Step::End(..) => break,
        }
        assert!(p.retained_bytes() <= bound, "SSE buffers above their bound");
    }
    let pending = p.finish(Mark::new(t.steps.len() as u64 + 1, 0));
    (events, pending, p.stats().events as usize)
}

/// Feeds a transcript's data and gap steps (either direction) to one SSE parser, whole and
/// cut; events and the pending-block answer must match, and buffers stay bounded.
/// Header byte 0 seeds the cuts; byte 1 picks the field limit (low 3 bits) and the data kept.
pub fn sse_parser(data: &[u8]) {
    let Some(t) = Transcript::parse(data) else {
        return;
    };
    let whole = run_sse(&t, None);
    let cut = run_sse(&t, Some(t.header[0]));
    assert_eq!(
        whole, cut,
        "the SSE events depend on how the bytes were cut"
    );
    assert_eq!(
        whole.0.len(),
        whole.2,
        "events reported differ from the count"
    );
}

// ---------------------------------------------------------------------------------------------
// The whole pipeline.

/// Asserts that two runs on one input gave the same records, counters and messages; `what`
/// names how the runs differed.
fn same_report(a: &driver::InputReport, b: &driver::InputReport, what: &str) {
    assert_eq!(a.resumes, b.resumes, "resumes depend on {what}");
    assert_eq!(a.findings, b.findings, "findings depend on {what}");
    assert_eq!(a.views, b.views, "session views depend on {what}");
    assert_eq!(a.stats, b.stats, "counters depend on {what}");
    assert_eq!(a.messages, b.messages, "messages depend on {what}");
}

/// Runs the whole analysis on `data` as one capture, with small limits so that eviction,
/// out-of-order overflow and head limits are reachable by small inputs; then again with two
/// workers (a reader, two shards and the session stage on threads of their own), which must
/// give the same records, counters and messages.
pub fn pipeline(data: &[u8]) {
    let opts = Options {
        threads: 1,
        limits: Limits {
            max_out_of_order_bytes: 2048,
            max_connections: 3,
            max_header_bytes: 512,
            max_sse_field_bytes: 32,
            max_block_bytes: 1 << 16,
        },
        forensic: mcp_resume_audit::AuditOptions {
            id_pattern: None,
            views: true,
            ..Default::default()
        },
        ..Options::default()
    };
    let report = driver::analyze_reader("fuzz-input", data, &opts);
    assert!(report.stats.connections_evicted <= report.stats.tcp_connections);
    let on_two = driver::analyze_reader(
        "fuzz-input",
        data,
        &Options {
            threads: 2,
            ..opts.clone()
        },
    );
    same_report(&report, &on_two, "threads");
    let mut out = Vec::new();
    for r in &report.resumes {
        mcp_resume_audit::write_resume(&mut out, "fuzz-input", r).expect("writing to memory");
    }
    for f in &report.findings {
        mcp_resume_audit::write_finding(&mut out, "fuzz-input", f).expect("writing to memory");
    }
    for v in &report.views {
        mcp_resume_audit::write_session(&mut out, "fuzz-input", v).expect("writing to memory");
    }
    // The spool, which sorts through runs on disk, gives the same lines in the same order.
    use mcp_resume_audit::Sink;
    let mut spool = mcp_resume_audit::stages::Spool::with_memory("fuzz-input", true, 512);
    for v in &report.views {
        spool.view(v.clone());
    }
    for f in &report.findings {
        spool.finding(f.clone());
    }
    for r in &report.resumes {
        spool.resume(Box::new(r.clone()));
    }
    let mut spooled = Vec::new();
    spool.write_to(&mut spooled).expect("writing to memory");
    assert!(spooled == out, "the spool changed the report");
    if let Some(notes) = spool.human.as_mut() {
        let whole = !report.failed();
        mcp_resume_audit::stages::write_human_input(&mut out, "fuzz-input", notes, whole)
            .expect("writing to memory");
    }
}

// ---------------------------------------------------------------------------------------------
// HAR.

/// Hands out its bytes in pieces of input-chosen sizes, to check that the HAR reader's answer
/// does not depend on how its reads are served.
struct PieceReader<'a> {
    data: &'a [u8],
    cuts: Cuts,
}

impl Read for PieceReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.cuts.next_len(self.data.len().min(buf.len()));
        let n = n.min(self.data.len()).min(buf.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// Reads `data` as a HAR document (the pipeline recognizes it by content), once whole and once
/// served in small reads; resumes, counters and messages must be the same. Then on two entry
/// threads, with the session memory unbounded and small (up to 16 KiB, from the last byte):
/// the records, views, counters and messages must be those of one thread.
/// The input's name points into a folder that does not exist, so `content._file` bodies are
/// never found (the fuzzer must not read files).
pub fn har(data: &[u8]) {
    let opts = Options {
        threads: 1,
        limits: Limits {
            max_header_bytes: 512,
            max_sse_field_bytes: 32,
            ..Limits::default()
        },
        forensic: mcp_resume_audit::AuditOptions {
            id_pattern: None,
            views: true,
            ..Default::default()
        },
        ..Options::default()
    };
    let name = "/nonexistent-fuzz-dir/fuzz.har";
    let whole = driver::analyze_reader(name, data, &opts);
    let seed = data.last().copied().unwrap_or(0);
    let pieces = PieceReader {
        data,
        cuts: Cuts::new(seed),
    };
    let cut = driver::analyze_reader(name, pieces, &opts);
    assert_eq!(
        whole.resumes, cut.resumes,
        "HAR resumes depend on read sizes"
    );
    assert_eq!(whole.stats, cut.stats, "HAR counters depend on read sizes");
    assert_eq!(
        whole.messages, cut.messages,
        "HAR messages depend on read sizes"
    );
    // Entries analyzed on threads give what one thread gives: their records come back from
    // the threads out of order and are put back in entry order. So too with a session memory
    // small enough that the stage audits sessions early and entries wait in order of start.
    let threads = |n: usize, memory_bytes: usize| Options {
        threads: n,
        retention: mcp_resume_audit::Retention { memory_bytes },
        ..opts.clone()
    };
    let on_two = driver::analyze_reader(name, data, &threads(2, opts.retention.memory_bytes));
    same_report(&whole, &on_two, "threads");
    let memory = usize::from(seed) * 64;
    let tight = driver::analyze_reader(name, data, &threads(1, memory));
    let tight_on_two = driver::analyze_reader(name, data, &threads(2, memory));
    same_report(
        &tight,
        &tight_on_two,
        "threads under a small session memory",
    );
}

// ---------------------------------------------------------------------------------------------
// HTTP/2.

/// The client preface with an empty SETTINGS frame, and the server's first SETTINGS.
const H2_CLIENT_START: &[u8] =
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
const H2_SERVER_START: &[u8] = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00";

fn run_h2(t: &Transcript<'_>, split: Option<u8>) -> HttpRecorder {
    let limits = Limits {
        max_header_bytes: 64 << (t.header[1] % 11),
        ..Limits::default()
    };
    let upgraded = (t.header[0] & 2 != 0).then_some((Direction::Forward, u32::from(t.header[1])));
    let mut conn = Http2Fuzz::new(&limits, upgraded);
    let mut rec = HttpRecorder {
        lost_answer_ok: true,
        ..HttpRecorder::default()
    };
    if let Some((_, exchange)) = upgraded {
        // Stream 1's request head was delivered by the HTTP/1.1 parser before the switch.
        rec.requested.insert(exchange);
    }
    let mut cuts = split.map(Cuts::new);
    // Most inputs should reach frames: the prefaces are given unless bit 0 asks for raw bytes.
    if t.header[0] & 1 == 0 {
        conn.data(
            Direction::Forward,
            H2_CLIENT_START,
            Mark::new(0, 0),
            &mut rec,
        );
        conn.data(
            Direction::Reverse,
            H2_SERVER_START,
            Mark::new(0, 0),
            &mut rec,
        );
    }
    let mut ended = [false; 2];
    for (i, step) in t.steps.iter().enumerate() {
        let mark = Mark::new(i as u64 + 1, i as i64);
        match *step {
            Step::Data(dir, bytes) => match cuts.as_mut() {
                Some(c) => c.pieces(bytes, |p| conn.data(dir, p, mark, &mut rec)),
                None => conn.data(dir, bytes, mark, &mut rec),
            },
            Step::Gap(dir, len) => conn.gap(dir, len, mark, &mut rec),
            Step::End(dir, how) => {
                if !ended[dir.index()] {
                    ended[dir.index()] = true;
                    conn.end(dir, how, mark, &mut rec);
                }
            }
        }
    }
    let last = Mark::new(t.steps.len() as u64 + 1, 0);
    for dir in [Direction::Forward, Direction::Reverse] {
        if !ended[dir.index()] {
            conn.end(dir, StreamEnd::CaptureEnd, last, &mut rec);
        }
    }
    rec
}

/// Reads `data` as one HAR entry twice: the quick way (read by the analyzer's own reader, or
/// with its body text decoded in the pass that finds it and serde_json reading the rest), and
/// by serde_json whole. The records, counters and messages must be the same; and an entry the
/// analyzer's own reader takes must be one serde_json reads, into the same fields.
pub fn har_entry(data: &[u8]) {
    let (quick, general) = mcp_resume_audit::fuzzing::har_entry_readings(data);
    assert_eq!(quick, general, "the two readings of one entry differ");
    if let Err(e) = mcp_resume_audit::fuzzing::har_entry_direct(data) {
        panic!("{e}");
    }
}

/// Reads `data[2..]` as one JSON container three times: a block at a time (as the HAR reader
/// finds an entry's end) in pieces whose sizes `data[0]` and `data[1]` pick, with the CPU's
/// widest compares and with SSE2's, and byte by byte whole. The answer (where it ends, or the
/// byte that breaks it and why, or that it goes on and whether inside a string) must be the
/// same.
pub fn json_nesting(data: &[u8]) {
    let [a, b, doc @ ..] = data else {
        return;
    };
    let pieces = [usize::from(*a) + 1, usize::from(*b) * 3 + 1];
    let [wide, narrow, bytes] = mcp_resume_audit::fuzzing::nesting_readings(doc, &pieces);
    assert_eq!(
        wide, bytes,
        "blocks and bytes read one container differently"
    );
    assert_eq!(
        narrow, bytes,
        "SSE2 blocks and bytes read one container differently"
    );
}

/// Bytes 1 on as a compressed input (gzip, zstd, lz4 or xz, told by its first bytes, as the
/// analyzer tells them), decoded from one read of the whole and again from reads of 1 to 256
/// bytes (byte 0 chooses), each up to 4 MiB of output. A stream decodes to one sequence of
/// bytes however it is read: what the two readings gave agree on their common length, and a
/// stream read to its end without an error one way is read to the same end the other way.
pub fn compressed(data: &[u8]) {
    const CAP: usize = 4 << 20;
    let [size, stream @ ..] = data else {
        return;
    };
    let Some(whole) = mcp_resume_audit::fuzzing::decompressed(stream, usize::MAX, CAP) else {
        return;
    };
    let Some(cut) = mcp_resume_audit::fuzzing::decompressed(stream, usize::from(*size) + 1, CAP)
    else {
        unreachable!("the same first bytes name the same codec");
    };
    let common = whole.0.len().min(cut.0.len());
    assert!(
        whole.0[..common] == cut.0[..common],
        "the decoded bytes depend on the reads"
    );
    for (a, b) in [(&whole, &cut), (&cut, &whole)] {
        if !a.1 && a.0.len() < CAP {
            assert!(
                !b.1 && b.0.len() == a.0.len(),
                "one reading ended cleanly after {} bytes, the other {} after {}",
                a.0.len(),
                if b.1 { "failed" } else { "ended" },
                b.0.len()
            );
        }
    }
}

/// Feeds a transcript to the HTTP/2 parser whole and cut at input-chosen points; the events
/// must be the same, and every delivered response head must get exactly one body end once
/// both directions ended (the server's end ends every open body).
/// Header byte 0: bit 0 leaves the prefaces out, bit 1 starts as an `Upgrade: h2c`
/// connection (client Forward), the rest seeds the cuts; byte 1 picks the head limit and the
/// upgraded exchange.
pub fn h2_parser(data: &[u8]) {
    let Some(mut t) = Transcript::parse(data) else {
        return;
    };
    let mut ended = [false; 2];
    t.steps.retain(|s| {
        let d = step_dir(s).index();
        let keep = !ended[d];
        if let Step::End(..) = s {
            ended[d] = true;
        }
        keep
    });
    let whole = run_h2(&t, None);
    let cut = run_h2(&t, Some(t.header[0] >> 2));
    assert_eq!(
        whole.events, cut.events,
        "the HTTP/2 events depend on how the bytes were cut"
    );
    assert_eq!(whole.body_bytes, cut.body_bytes);
    assert!(
        whole.responded.is_subset(&whole.ended),
        "a response head without a body end"
    );
}

// ---------------------------------------------------------------------------------------------
// TLS decryption layer.

/// The key log every `tls_record` run decrypts with: TLS 1.2 and TLS 1.3 secrets for the
/// client random of 32 zero bytes, so inputs (and seeds) that carry that ClientHello reach
/// the key schedule and the record protection.
const FUZZ_KEYLOG: &[u8] =
    b"CLIENT_RANDOM 0000000000000000000000000000000000000000000000000000000000000000 \
111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111\n\
CLIENT_HANDSHAKE_TRAFFIC_SECRET 0000000000000000000000000000000000000000000000000000000000000000 \
2222222222222222222222222222222222222222222222222222222222222222\n\
SERVER_HANDSHAKE_TRAFFIC_SECRET 0000000000000000000000000000000000000000000000000000000000000000 \
3333333333333333333333333333333333333333333333333333333333333333\n\
CLIENT_TRAFFIC_SECRET_0 0000000000000000000000000000000000000000000000000000000000000000 \
4444444444444444444444444444444444444444444444444444444444444444\n\
SERVER_TRAFFIC_SECRET_0 0000000000000000000000000000000000000000000000000000000000000000 \
5555555555555555555555555555555555555555555555555555555555555555\n";

/// What the TLS layer handed its child, with marks, checked against the `StreamSink`
/// contract as it comes.
#[derive(Default, PartialEq, Debug)]
struct TlsChild {
    events: Vec<(u8, Direction, Vec<u8>, u64, u64)>,
    ended: [bool; 2],
}

impl StreamSink for TlsChild {
    fn data(&mut self, dir: Direction, bytes: &[u8], mark: Mark) {
        assert!(!self.ended[dir.index()], "data after end");
        assert!(!bytes.is_empty(), "empty data call");
        self.events.push((0, dir, bytes.to_vec(), 0, mark.frame));
    }
    fn gap(&mut self, dir: Direction, len: u64, mark: Mark) {
        assert!(!self.ended[dir.index()], "gap after end");
        self.events.push((1, dir, Vec::new(), len, mark.frame));
    }
    fn end(&mut self, dir: Direction, _how: StreamEnd, mark: Mark) {
        assert!(!self.ended[dir.index()], "end twice");
        self.ended[dir.index()] = true;
        self.events.push((2, dir, Vec::new(), 0, mark.frame));
    }
}

/// Runs the `tls_record` steps; `cut` splits every data step at a point derived from it.
fn tls_run(data: &[u8], cut: bool) -> (TlsChild, (String, u64), bool) {
    let mut tls = mcp_resume_audit::fuzzing::TlsHarness::new(FUZZ_KEYLOG);
    let mut child = TlsChild::default();
    let mut rest = data;
    let mut frame = 0u64;
    while let Some((&op, tail)) = rest.split_first() {
        frame += 1;
        let mark = Mark::new(frame, 0);
        let dir = if op & 1 == 0 {
            Direction::Forward
        } else {
            Direction::Reverse
        };
        let Some((&n, tail)) = tail.split_first() else {
            break;
        };
        rest = tail;
        match (op >> 1) % 8 {
            // A segment of up to 255 bytes, or a long one (n * 64 bytes) to reach large records.
            0..=4 => {
                let len = if op & 0x80 != 0 {
                    usize::from(n) * 64
                } else {
                    usize::from(n)
                };
                let (bytes, tail) = rest.split_at(len.min(rest.len()));
                rest = tail;
                if cut && bytes.len() > 1 {
                    let at = 1 + usize::from(op) % (bytes.len() - 1);
                    tls.data(dir, &bytes[..at], mark, &mut child);
                    tls.data(dir, &bytes[at..], mark, &mut child);
                } else {
                    tls.data(dir, bytes, mark, &mut child);
                }
            }
            5 => tls.gap(dir, u64::from(n) * 7, mark, &mut child),
            6 => tls.end(dir, StreamEnd::Fin, mark, &mut child),
            _ => tls.add_keys(FUZZ_KEYLOG),
        }
    }
    let mark = Mark::new(frame + 1, 0);
    for dir in [Direction::Forward, Direction::Reverse] {
        if !child.ended[dir.index()] {
            tls.end(dir, StreamEnd::CaptureEnd, mark, &mut child);
        }
    }
    let summary = tls.summary();
    let keys_wrong_only = tls.keys_wrong_only();
    (child, summary, keys_wrong_only)
}

/// Drives one TLS connection with steps: byte `op` (bit 0 direction; bits 1-3 the kind: data,
/// gap, end, or the key log again; bit 7 a long segment), byte `n` (length), then data.
/// Checks the child contract, that ends come once per direction, that nothing decrypted
/// reaches the child when keys were wrong from the start, and that cutting every segment in
/// two changes nothing.
pub fn tls_record(data: &[u8]) {
    let (whole, summary, keys_wrong_only) = tls_run(data, false);
    assert!(whole.ended.iter().all(|&e| e), "a direction never ended");
    if keys_wrong_only {
        assert!(
            whole.events.iter().all(|e| e.0 != 0),
            "data despite wrong keys"
        );
    }
    let (cut, cut_summary, _) = tls_run(data, true);
    assert_eq!(whole, cut, "the answer depends on how segments are cut");
    assert_eq!(summary, cut_summary);
}

/// Reads `data` as an NSS key log: no panic, every line counted once, the named errors
/// bounded.
pub fn tls_keylog(data: &[u8]) {
    let (lines, secrets, malformed, named, randoms) =
        mcp_resume_audit::fuzzing::keylog_counts(data);
    let newlines = data.iter().filter(|&&b| b == b'\n').count() as u64;
    let expected_lines = if data.last() == Some(&b'\n') {
        newlines
    } else {
        newlines + 1
    };
    assert_eq!(lines, expected_lines.max(1));
    assert!(malformed + secrets <= lines);
    assert!(named as u64 <= malformed && named <= 32);
    assert!(randoms as u64 <= secrets);
}

/// Bytes 1 on as the records of facts files (`--reduce`), after their header: cut in two
/// files at a point byte 0 chooses, read with runs of 64 bytes on one thread and with runs of
/// 1 MiB on two. The reduce makes one thing of the facts however they are sorted and read:
/// the same inputs, events, problems and messages both ways. Every line whose tag, input and
/// `seq` are read from its first bytes is read so by serde too.
pub fn facts(data: &[u8]) {
    let [cut, records @ ..] = data else {
        return;
    };
    let header = b"{\"format\":\"mcp-resume-audit-facts\",\"version\":1}\n";
    let at = usize::from(*cut) * records.len() / 255;
    let files: Vec<(String, Vec<u8>)> = [&records[..at], &records[at..]]
        .iter()
        .enumerate()
        .map(|(i, part)| (format!("part-{i}.facts"), [&header[..], part].concat()))
        .collect();
    for line in records.split(|&b| b == b'\n') {
        if let Err(e) = mcp_resume_audit::fuzzing::facts_probes_agree(line) {
            panic!("a line told two ways: {e}");
        }
    }
    let small = mcp_resume_audit::fuzzing::facts_replayed(&files, 64, 1);
    let large = mcp_resume_audit::fuzzing::facts_replayed(&files, 1 << 20, 2);
    assert_eq!(
        small, large,
        "the reduce depends on how the facts are sorted and read"
    );
}

/// Byte 0 chooses how many capture files the rest is cut into (one to four) and, two bits a
/// file from byte 1, the capture point of each (a point's files are read one after the other);
/// bytes 2 and 3 choose where the cuts fall. The files are merged as `--fleet` merges them
/// (`src/input/merge.rs`), with a block limit of 64 KiB. Checks that the merged records are
/// what merging each point's records read alone gives by time (ties: the point named first,
/// key logs where their point's file has them), each packet numbered in turn, its time no
/// earlier than the epoch, and found in the frame map, with its file and number there, when
/// it is handed out; and that the records the files skipped and the files cut short are
/// counted.
pub fn merge(data: &[u8]) {
    let [count, owners, a, b, rest @ ..] = data else {
        return;
    };
    let files = 1 + usize::from(*count % 4);
    let mut cuts = vec![
        0,
        usize::from(*a) * rest.len() / 255,
        usize::from(*b) * rest.len() / 255,
        (usize::from(*a) + usize::from(*b)) / 2 * rest.len() / 255,
    ];
    cuts.truncate(files);
    cuts.sort_unstable();
    cuts.push(rest.len());
    let parts: Vec<(usize, &[u8])> = (0..files)
        .map(|i| {
            let point = usize::from(owners >> (2 * i) & 3).min(i);
            (point, &rest[cuts[i]..cuts[i + 1]])
        })
        .collect();
    if let Err(e) = mcp_resume_audit::fuzzing::merge_agrees(&parts, 64 << 10) {
        panic!("the merged capture differs from its files read alone: {e}");
    }
}
