//! Properties of the stages, checked through the library's public interface on generated
//! input: reassembly gives back the bytes that were sent however the segments arrive; the
//! HTTP and SSE parsers give one answer for any split of their input; the verdict follows the
//! seed's boundary for every pair of integer ids, checked against an independent oracle; and
//! capture loss on the wire never adds an accusation.

use mcp_resume_audit::Limits;
use mcp_resume_audit::Verdict;
use mcp_resume_audit::stages::HttpConnection;
use mcp_resume_audit::stages::{
    Anomaly, BodyEnd, Direction, HttpSink, Mark, RequestHead, ResponseHead, StreamEnd, StreamSink,
};
use mcp_resume_audit::stages::{IdOrder, ResponseFacts, StreamOutcome, verdict};
use mcp_resume_audit::stages::{OwnedSseEvent, SseEvent, SseParser};
use mcp_resume_audit::stages::{TcpConnection, TcpFlags, TcpSegment};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// TCP reassembly.

/// What one direction received: bytes by position, gaps, and how it ended.
#[derive(Debug, Default)]
struct Received {
    /// (position, bytes) of each data call.
    data: Vec<(u64, Vec<u8>)>,
    /// (position, length) of each gap.
    gaps: Vec<(u64, u64)>,
    next: u64,
    end: Option<StreamEnd>,
}

#[derive(Debug, Default)]
struct Both([Received; 2]);

impl StreamSink for Both {
    fn data(&mut self, dir: Direction, bytes: &[u8], _mark: Mark) {
        let r = &mut self.0[dir.index()];
        assert!(r.end.is_none(), "data after end");
        r.data.push((r.next, bytes.to_vec()));
        r.next += bytes.len() as u64;
    }
    fn gap(&mut self, dir: Direction, len: u64, _mark: Mark) {
        let r = &mut self.0[dir.index()];
        assert!(r.end.is_none(), "gap after end");
        r.gaps.push((r.next, len));
        r.next += len;
    }
    fn end(&mut self, dir: Direction, how: StreamEnd, _mark: Mark) {
        let r = &mut self.0[dir.index()];
        assert!(r.end.is_none(), "two ends");
        r.end = Some(how);
    }
}

fn seg(seq: u32, flags: TcpFlags, payload: &[u8], frame: u64) -> TcpSegment<'_> {
    TcpSegment {
        seq,
        ack: 0,
        flags,
        payload,
        mark: Mark::new(frame, frame as i64),
    }
}

const ACK: TcpFlags = TcpFlags::new(false, true, false, false);

/// A stream, the captured pieces of it as (start, end) ranges in capture order, and the ISN.
fn cut_stream() -> impl Strategy<Value = (Vec<u8>, Vec<(usize, usize)>, u32)> {
    (
        proptest::collection::vec(any::<u8>(), 1..1500),
        any::<u32>(),
    )
        .prop_flat_map(|(stream, isn)| {
            let len = stream.len();
            // Cut points make a covering; extra ranges add duplicates and overlaps.
            let cuts = proptest::collection::vec(0..len, 0..12);
            let extra = proptest::collection::vec((0..len, 1..400usize), 0..8);
            (Just(stream), cuts, extra, Just(isn), any::<u64>()).prop_map(
                |(stream, mut cuts, extra, isn, shuffle_seed)| {
                    let len = stream.len();
                    cuts.push(0);
                    cuts.push(len);
                    cuts.sort_unstable();
                    cuts.dedup();
                    let mut ranges: Vec<(usize, usize)> =
                        cuts.windows(2).map(|w| (w[0], w[1])).collect();
                    for (start, n) in extra {
                        ranges.push((start, (start + n).min(len)));
                    }
                    shuffle(&mut ranges, shuffle_seed);
                    (stream, ranges, isn)
                },
            )
        })
}

/// Fisher-Yates with a fixed-seed xorshift, so that proptest can shrink the seed.
fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut x = seed | 1;
    for i in (1..items.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        items.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

/// Feeds SYN, then the pieces in the given order, then FIN; returns the forward direction.
fn reassemble(stream: &[u8], ranges: &[(usize, usize)], isn: u32) -> Received {
    let mut conn = TcpConnection::new(&Limits::default());
    let mut sink = Both::default();
    let syn = TcpFlags::new(true, false, false, false);
    conn.segment(Direction::Forward, &seg(isn, syn, &[], 1), &mut sink);
    let first = isn.wrapping_add(1);
    for (i, &(a, b)) in ranges.iter().enumerate() {
        let s = first.wrapping_add(a as u32);
        conn.segment(
            Direction::Forward,
            &seg(s, ACK, &stream[a..b], i as u64 + 2),
            &mut sink,
        );
    }
    let fin = ACK.with_fin(true);
    let end_seq = first.wrapping_add(stream.len() as u32);
    let frame = ranges.len() as u64 + 2;
    conn.segment(
        Direction::Forward,
        &seg(end_seq, fin, &[], frame),
        &mut sink,
    );
    conn.finish(StreamEnd::CaptureEnd, Mark::new(frame + 1, 0), &mut sink);
    let [forward, _] = sink.0;
    forward
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Reordered, duplicated and overlapping segments that cover the stream give it back
    /// whole, without a gap, ended by the FIN.
    #[test]
    fn reassembly_gives_back_the_stream((stream, ranges, isn) in cut_stream()) {
        let got = reassemble(&stream, &ranges, isn);
        let bytes: Vec<u8> = got.data.iter().flat_map(|(_, b)| b.iter().copied()).collect();
        prop_assert!(got.gaps.is_empty(), "gaps {:?}", got.gaps);
        prop_assert_eq!(bytes, stream);
        prop_assert_eq!(got.end, Some(StreamEnd::Fin));
    }

    /// With pieces missing, every delivered byte still sits at its own position, the holes are
    /// gaps in their place, and positions add up to the stream's length.
    #[test]
    fn reassembly_never_glues_across_a_hole(
        (stream, ranges, isn) in cut_stream(),
        drop_mask in any::<u16>(),
    ) {
        let kept: Vec<(usize, usize)> = ranges
            .iter()
            .enumerate()
            .filter(|(i, _)| drop_mask & (1 << (i % 16)) == 0)
            .map(|(_, r)| *r)
            .collect();
        let got = reassemble(&stream, &kept, isn);
        for (pos, bytes) in &got.data {
            let pos = *pos as usize;
            prop_assert_eq!(&stream[pos..pos + bytes.len()], &bytes[..]);
        }
        let mut covered = vec![false; stream.len()];
        for &(a, b) in &kept {
            covered[a..b].iter_mut().for_each(|c| *c = true);
        }
        for &(pos, len) in &got.gaps {
            for p in pos..pos + len {
                prop_assert!(!covered[p as usize], "byte {} was captured but reported missing", p);
            }
        }
        prop_assert_eq!(got.next, stream.len() as u64);
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1: one answer for any split.

#[derive(Clone, Debug, PartialEq, Eq)]
enum HttpEvent {
    Request(RequestHead),
    Response(ResponseHead),
    Body(u32, Vec<u8>, Mark),
    BodyGap(u32, u64, Mark),
    BodyEnd(u32, BodyEnd, Mark),
    Anomaly(Anomaly, Mark),
}

#[derive(Default)]
struct HttpLog(Vec<HttpEvent>);

impl HttpSink for HttpLog {
    fn request(&mut self, head: RequestHead) {
        self.0.push(HttpEvent::Request(head));
    }
    fn response(&mut self, head: ResponseHead) {
        self.0.push(HttpEvent::Response(head));
    }
    fn body(&mut self, exchange: u32, bytes: &[u8], mark: Mark) {
        // Body bytes of one frame are one piece, however the parser cut its calls.
        if let Some(HttpEvent::Body(x, kept, m)) = self.0.last_mut()
            && *x == exchange
            && *m == mark
        {
            kept.extend_from_slice(bytes);
            return;
        }
        self.0.push(HttpEvent::Body(exchange, bytes.to_vec(), mark));
    }
    fn body_gap(&mut self, exchange: u32, len: u64, mark: Mark) {
        self.0.push(HttpEvent::BodyGap(exchange, len, mark));
    }
    fn body_end(&mut self, exchange: u32, how: BodyEnd, mark: Mark) {
        self.0.push(HttpEvent::BodyEnd(exchange, how, mark));
    }
    fn anomaly(&mut self, what: Anomaly, mark: Mark) {
        self.0.push(HttpEvent::Anomaly(what, mark));
    }
}

/// One frame of a connection: who sent it and its bytes.
type Frame = (Direction, Vec<u8>);

/// Pieces MCP traffic is made of, plus damage, so that generated connections reach the states
/// that matter: chunked and length-framed SSE answers, resumes, bad framing, junk.
fn http_frames() -> impl Strategy<Value = Vec<Frame>> {
    let client: Vec<&'static [u8]> = vec![
        b"GET /mcp HTTP/1.1\r\nHost: h\r\nAccept: text/event-stream\r\nMcp-Session-Id: s1\r\nLast-Event-ID: 41\r\n\r\n",
        b"POST /mcp HTTP/1.1\r\nhost: h\r\ncontent-type: application/json\r\ncontent-length: 17\r\n\r\n{\"jsonrpc\":\"2.0\"}",
        b"GET /mcp HTTP/1.1\r\nlast-event-id: s_1\r\n\r\n",
        b"DELETE /mcp HTTP/1.1\r\nmcp-session-id: s1\r\n\r\n",
        b"POST /mcp HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"GET / HTTP/1.1\r\ncontent-length: -1\r\n\r\n",
        b"\r\n",
        b"garbage that is not http\n",
    ];
    let server: Vec<&'static [u8]> = vec![
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 24\r\n\r\nid: 42\ndata: {}\n\nid: 43\n\n",
        b"HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\n\r\n{}",
        b"HTTP/1.1 405 Method Not Allowed\r\n\r\n",
        b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"10\r\nid: 42\ndata: x\n\n\r\n",
        b"e\r\nid: 43\ndata: y\n\r\n",
        b"0\r\n\r\n",
        b"fffffffffffffffffffff\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\nid: 1\n\n",
    ];
    let frame = prop_oneof![
        4 => (proptest::sample::select(client), 0..3usize).prop_map(|(b, cut)| (Direction::Forward, b[cut.min(b.len())..].to_vec())),
        6 => (proptest::sample::select(server), 0..3usize).prop_map(|(b, cut)| (Direction::Reverse, b[..b.len() - cut.min(b.len())].to_vec())),
        1 => (any::<bool>(), proptest::collection::vec(any::<u8>(), 0..40)).prop_map(|(fwd, b)| {
            (if fwd { Direction::Forward } else { Direction::Reverse }, b)
        }),
    ];
    proptest::collection::vec(frame, 0..12)
}

/// Feeds the frames, each frame cut by `cut` into calls (same mark for all pieces).
fn run_http(
    frames: &[Frame],
    from_start: bool,
    cut: &dyn Fn(&[u8]) -> Vec<usize>,
) -> Vec<HttpEvent> {
    let limits = Limits {
        max_header_bytes: 512,
        ..Limits::default()
    };
    let mut conn = HttpConnection::new(&limits, from_start);
    let mut log = HttpLog::default();
    for (i, (dir, bytes)) in frames.iter().enumerate() {
        let mark = Mark::new(i as u64 + 1, i as i64);
        let mut at = 0;
        for len in cut(bytes) {
            conn.data(*dir, &bytes[at..at + len], mark, &mut log);
            at += len;
        }
    }
    let end = Mark::new(frames.len() as u64 + 1, 0);
    conn.end(Direction::Forward, StreamEnd::Fin, end, &mut log);
    conn.end(Direction::Reverse, StreamEnd::Fin, end, &mut log);
    log.0
}

fn whole(b: &[u8]) -> Vec<usize> {
    if b.is_empty() { vec![] } else { vec![b.len()] }
}

fn bytewise(b: &[u8]) -> Vec<usize> {
    vec![1; b.len()]
}

/// Piece lengths from a seed: pieces of 1..=7 bytes.
fn seeded(seed: u64) -> impl Fn(&[u8]) -> Vec<usize> {
    move |b: &[u8]| {
        let mut x = seed | 1;
        let mut left = b.len();
        let mut out = Vec::new();
        while left > 0 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = ((x % 7) as usize + 1).min(left);
            out.push(n);
            left -= n;
        }
        out
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn http_parser_gives_one_answer_for_any_split(
        frames in http_frames(),
        from_start in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let reference = run_http(&frames, from_start, &whole);
        prop_assert_eq!(&run_http(&frames, from_start, &bytewise), &reference);
        prop_assert_eq!(&run_http(&frames, from_start, &seeded(seed)), &reference);
    }
}

/// Steps of a fuzz transcript (the encoding of the `http1_parser` and `sse_parser` fuzz
/// targets, see fuzz/src/lib.rs): two header bytes, then tagged data, gap and end steps.
enum Step {
    Data(Direction, Vec<u8>),
    Gap(Direction, u64),
    End(Direction, StreamEnd),
}

fn read_transcript(bytes: &[u8]) -> ([u8; 2], Vec<Step>) {
    const ENDS: [StreamEnd; 5] = [
        StreamEnd::Fin,
        StreamEnd::Rst,
        StreamEnd::CaptureEnd,
        StreamEnd::Evicted,
        StreamEnd::Abandoned,
    ];
    let mut steps = Vec::new();
    let mut rest = &bytes[2..];
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
                steps.push(Step::Gap(
                    dir,
                    u64::from(u32::from_le_bytes(len.try_into().unwrap())),
                ));
            }
            2 => steps.push(Step::End(dir, ENDS[usize::from((tag >> 3) & 7) % 5])),
            _ => {
                let Some((len, tail)) = rest.split_at_checked(2) else {
                    break;
                };
                let len = usize::from(u16::from_le_bytes([len[0], len[1]])).min(tail.len());
                steps.push(Step::Data(dir, tail[..len].to_vec()));
                rest = &tail[len..];
            }
        }
    }
    ([bytes[0], bytes[1]], steps)
}

/// The inputs a fuzz target found bugs with (fixtures/malformed/fuzz/TARGET/), in name order,
/// with their bytes; at least two.
fn fuzz_found(target: &str) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/malformed/fuzz")
        .join(target);
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixture dir")
        .flatten()
        .map(|e| e.path())
        .collect();
    paths.sort();
    assert!(paths.len() >= 2, "{dir:?}");
    paths
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

/// How a replay cuts each data step: piece lengths, or one call per step (an empty one too)
/// when `None`.
type Cut<'a> = Option<&'a dyn Fn(&[u8]) -> Vec<usize>>;

/// A connection a fuzz target's transcript is replayed into.
trait Replay {
    fn data(&mut self, d: Direction, bytes: &[u8], mark: Mark, log: &mut HttpLog);
    fn gap(&mut self, d: Direction, len: u64, mark: Mark, log: &mut HttpLog);
    fn end(&mut self, d: Direction, how: StreamEnd, mark: Mark, log: &mut HttpLog);
}

impl Replay for HttpConnection {
    fn data(&mut self, d: Direction, bytes: &[u8], mark: Mark, log: &mut HttpLog) {
        HttpConnection::data(self, d, bytes, mark, log);
    }
    fn gap(&mut self, d: Direction, len: u64, mark: Mark, log: &mut HttpLog) {
        HttpConnection::gap(self, d, len, mark, log);
    }
    fn end(&mut self, d: Direction, how: StreamEnd, mark: Mark, log: &mut HttpLog) {
        HttpConnection::end(self, d, how, mark, log);
    }
}

impl Replay for mcp_resume_audit::fuzzing::Http2Fuzz {
    fn data(&mut self, d: Direction, bytes: &[u8], mark: Mark, log: &mut HttpLog) {
        Self::data(self, d, bytes, mark, log);
    }
    fn gap(&mut self, d: Direction, len: u64, mark: Mark, log: &mut HttpLog) {
        Self::gap(self, d, len, mark, log);
    }
    fn end(&mut self, d: Direction, how: StreamEnd, mark: Mark, log: &mut HttpLog) {
        Self::end(self, d, how, mark, log);
    }
}

/// Feeds a transcript's steps as the fuzz targets do (step `i` at frame `i + 1`; the steps of
/// a direction after its end are dropped); returns which directions ended.
fn replay<C: Replay>(conn: &mut C, steps: &[Step], cut: Cut, log: &mut HttpLog) -> [bool; 2] {
    let mut ended = [false; 2];
    for (i, step) in steps.iter().enumerate() {
        let mark = Mark::new(i as u64 + 1, i as i64);
        match step {
            Step::Data(d, b) if !ended[d.index()] => match cut {
                None => conn.data(*d, b, mark, log),
                Some(cut) => {
                    let mut at = 0;
                    for len in cut(b) {
                        conn.data(*d, &b[at..at + len], mark, log);
                        at += len;
                    }
                }
            },
            Step::Gap(d, len) if !ended[d.index()] => conn.gap(*d, *len, mark, log),
            Step::End(d, how) if !ended[d.index()] => {
                ended[d.index()] = true;
                conn.end(*d, *how, mark, log);
            }
            _ => {}
        }
    }
    ended
}

/// Inputs on which the `http1_parser` fuzz target once found two answers for two splits
/// (fixtures/malformed/fuzz/http1_parser/, described in fixtures/malformed/README.md).
#[test]
fn fuzz_found_http_inputs_give_one_answer_for_any_split() {
    for (path, bytes) in fuzz_found("http1_parser") {
        let (header, steps) = read_transcript(&bytes);
        let limits = Limits {
            max_header_bytes: 256 << (header[1] % 9),
            ..Limits::default()
        };
        let run = |cut: &dyn Fn(&[u8]) -> Vec<usize>| {
            let mut conn = HttpConnection::new(&limits, header[0] & 1 != 0);
            let mut log = HttpLog::default();
            replay(&mut conn, &steps, Some(cut), &mut log);
            log.0
        };
        let reference = run(&whole);
        let name = path.display().to_string();
        assert_eq!(run(&bytewise), reference, "{name}");
        for seed in 0..32 {
            assert_eq!(run(&seeded(seed)), reference, "{name} seed {seed}");
        }
    }
}

/// Inputs on which the `h2_parser` fuzz target once found two answers for two splits
/// (fixtures/malformed/fuzz/h2_parser/, described in fixtures/malformed/README.md), replayed
/// as the target feeds them: the prefaces first (unless header bit 0 says not), a data call
/// per step when whole (an empty one too), and both directions ended at the close.
#[test]
fn fuzz_found_http2_inputs_give_one_answer_for_any_split() {
    use mcp_resume_audit::fuzzing::Http2Fuzz;
    const CLIENT_START: &[u8] =
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
    const SERVER_START: &[u8] = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00";
    for (path, bytes) in fuzz_found("h2_parser") {
        let (header, steps) = read_transcript(&bytes);
        let limits = Limits {
            max_header_bytes: 64 << (header[1] % 11),
            ..Limits::default()
        };
        let upgraded = (header[0] & 2 != 0).then_some((Direction::Forward, u32::from(header[1])));
        let run = |cut: Cut| {
            let mut conn = Http2Fuzz::new(&limits, upgraded);
            let mut log = HttpLog::default();
            if header[0] & 1 == 0 {
                conn.data(Direction::Forward, CLIENT_START, Mark::new(0, 0), &mut log);
                conn.data(Direction::Reverse, SERVER_START, Mark::new(0, 0), &mut log);
            }
            let ended = replay(&mut conn, &steps, cut, &mut log);
            let last = Mark::new(steps.len() as u64 + 1, 0);
            for d in [Direction::Forward, Direction::Reverse] {
                if !ended[d.index()] {
                    conn.end(d, StreamEnd::CaptureEnd, last, &mut log);
                }
            }
            log.0
        };
        let reference = run(None);
        let name = path.display().to_string();
        assert_eq!(run(Some(&bytewise)), reference, "{name}");
        for seed in 0..32 {
            assert_eq!(run(Some(&seeded(seed))), reference, "{name} seed {seed}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// SSE: one answer for any split.

/// Events as compared between runs.
type OwnedEvent = OwnedSseEvent;

fn owned(e: &SseEvent<'_>) -> OwnedEvent {
    OwnedEvent::from(e)
}

fn sse_body() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let line_end = prop_oneof![Just(&b"\n"[..]), Just(&b"\r\n"[..]), Just(&b"\r"[..])];
    let field = prop_oneof![
        (0u64..100_000).prop_map(|n| format!("id: {n}").into_bytes()),
        Just(b"id:".to_vec()),
        Just(b"id: a\0b".to_vec()),
        Just(b"event: message".to_vec()),
        Just(b"data: {\"jsonrpc\":\"2.0\"}".to_vec()),
        Just(b"data".to_vec()),
        Just(b"retry: 500".to_vec()),
        Just(b"retry: 5x".to_vec()),
        Just(b": keep-alive".to_vec()),
        Just(b"idx: 3".to_vec()),
        Just(Vec::new()),
        Just(b"\xef\xbb\xbf".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..30),
        Just(vec![b'x'; 70]),
    ];
    let line = (field, line_end).prop_map(|(f, e)| [f, e.to_vec()].concat());
    // Frames of a few lines each.
    proptest::collection::vec(
        proptest::collection::vec(line, 0..6).prop_map(|l| l.concat()),
        0..8,
    )
}

fn run_sse(frames: &[Vec<u8>], cut: &dyn Fn(&[u8]) -> Vec<usize>) -> (Vec<OwnedEvent>, bool) {
    let limits = Limits {
        max_sse_field_bytes: 32,
        ..Limits::default()
    };
    let mut p = SseParser::new(&limits, 0);
    let mut events = Vec::new();
    for (i, bytes) in frames.iter().enumerate() {
        let mark = Mark::new(i as u64 + 1, i as i64);
        let mut at = 0;
        for len in cut(bytes) {
            p.feed(&bytes[at..at + len], mark, |e| events.push(owned(e)));
            at += len;
        }
    }
    let pending = p.finish(Mark::new(frames.len() as u64 + 1, 0));
    (events, pending)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn sse_parser_gives_one_answer_for_any_split(frames in sse_body(), seed in any::<u64>()) {
        let reference = run_sse(&frames, &whole);
        prop_assert_eq!(&run_sse(&frames, &bytewise), &reference);
        prop_assert_eq!(&run_sse(&frames, &seeded(seed)), &reference);
    }
}

// ---------------------------------------------------------------------------------------------
// Verdicts against an independent oracle.

/// A non-negative integer as little-endian base-10^9 limbs, the oracle's own arithmetic
/// (the code under test works on decimal digit strings).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Big(Vec<u32>);

const LIMB: u32 = 1_000_000_000;

impl Big {
    /// Parses ASCII digits (leading zeros allowed); `None` for anything else.
    fn parse(s: &str) -> Option<Big> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let digits = s.as_bytes();
        let mut limbs = Vec::new();
        let mut end = digits.len();
        while end > 0 {
            let start = end.saturating_sub(9);
            let chunk = std::str::from_utf8(&digits[start..end]).ok()?;
            limbs.push(chunk.parse().ok()?);
            end = start;
        }
        let mut b = Big(limbs);
        b.trim();
        Some(b)
    }
    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }
    fn add_one(&self) -> Big {
        let mut limbs = self.0.clone();
        for l in limbs.iter_mut() {
            if *l + 1 < LIMB {
                *l += 1;
                return Big(limbs);
            }
            *l = 0;
        }
        limbs.push(1);
        Big(limbs)
    }
    fn cmp(&self, other: &Big) -> std::cmp::Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }
    fn to_u128(&self) -> Option<u128> {
        let mut v: u128 = 0;
        for l in self.0.iter().rev() {
            v = v
                .checked_mul(u128::from(LIMB))?
                .checked_add(u128::from(*l))?;
        }
        Some(v)
    }
    fn to_decimal(&self) -> String {
        match self.0.split_last() {
            None => "0".into(),
            Some((top, rest)) => {
                let mut s = top.to_string();
                for l in rest.iter().rev() {
                    s.push_str(&format!("{l:09}"));
                }
                s
            }
        }
    }
}

fn oracle(last: &str, first: &str) -> Option<Verdict> {
    let (l, f) = (Big::parse(last)?, Big::parse(first)?);
    Some(match f.cmp(&l.add_one()) {
        std::cmp::Ordering::Equal => Verdict::Correct,
        std::cmp::Ordering::Greater => Verdict::GapSkipped,
        std::cmp::Ordering::Less => Verdict::Replayed,
    })
}

fn decide_first(last: &str, first: &str) -> verdict::Decision {
    verdict::decide(
        last,
        ResponseFacts::Answered {
            status: 200,
            event_stream: true,
            first_id: Some(first),
            gap_before_first_id: false,
            outcome: Some(StreamOutcome::EndedOnWire),
        },
    )
}

/// Checks decide and compare_ids on one pair against the oracle, counts included.
fn check_pair(last: &str, first: &str) -> Result<(), TestCaseError> {
    let want = oracle(last, first);
    let got = decide_first(last, first);
    match want {
        None => {
            prop_assert_eq!(got.verdict, Verdict::Unverifiable, "{:?} {:?}", last, first);
            prop_assert!(verdict::compare_ids(last, first).is_none());
        }
        Some(v) => {
            prop_assert_eq!(got.verdict, v, "{:?} {:?}", last, first);
            let (l, f) = (Big::parse(last).unwrap(), Big::parse(first).unwrap());
            let small = l.to_u128().zip(f.to_u128());
            match verdict::compare_ids(last, first) {
                Some(IdOrder::Next) => prop_assert_eq!(v, Verdict::Correct),
                Some(IdOrder::Skipped(lost)) => {
                    prop_assert_eq!(v, Verdict::GapSkipped);
                    prop_assert_eq!(&lost.from, &l.add_one().to_decimal());
                    if let Some((l, f)) = small {
                        prop_assert_eq!(lost.to.parse::<u128>().ok(), Some(f - 1));
                        prop_assert_eq!(lost.count, u64::try_from(f - l - 1).ok());
                    }
                }
                Some(IdOrder::Repeated { count }) => {
                    prop_assert_eq!(v, Verdict::Replayed);
                    if let Some((l, f)) = small {
                        let span = (l - f).checked_add(1);
                        prop_assert_eq!(count, span.and_then(|n| u64::try_from(n).ok()));
                    }
                }
                None => prop_assert!(false, "integers judged not comparable"),
            }
        }
    }
    Ok(())
}

/// Integers near the interesting edges: 0, u64::MAX, powers of ten, u128::MAX and beyond.
fn edge_integer() -> impl Strategy<Value = String> {
    let u64_edges = prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(u64::MAX / 2),
        any::<u64>(),
        0u64..64,
    ]
    .prop_map(|v| v.to_string());
    let huge = prop_oneof![
        Just(u128::MAX.to_string()),
        Just("18446744073709551616".to_string()),
        Just("999999999999999999999999999999".to_string()),
        Just("1000000000000000000000000000000".to_string()),
        "[1-9][0-9]{19,60}",
    ];
    prop_oneof![4 => u64_edges, 1 => huge]
}

/// Near neighbours of a value, so that the three outcomes are all hit often.
fn near(v: &str, delta: i8) -> String {
    let b = Big::parse(v).unwrap_or(Big(vec![]));
    match delta {
        d if d > 0 => (0..d).fold(b, |x, _| x.add_one()).to_decimal(),
        _ => v.to_string(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn verdict_matches_the_seed_boundary_on_u64(last in any::<u64>(), first in any::<u64>()) {
        check_pair(&last.to_string(), &first.to_string())?;
    }

    #[test]
    fn verdict_matches_the_seed_boundary_near_each_other(
        last in edge_integer(),
        delta in 0i8..4,
        zeros in (0usize..4, 0usize..4),
        swap in any::<bool>(),
    ) {
        let first = near(&last, delta);
        let (a, b) = if swap { (first, last) } else { (last, first) };
        check_pair(&a, &b)?;
        // Leading zeros do not change the value.
        let a0 = format!("{}{a}", "0".repeat(zeros.0));
        let b0 = format!("{}{b}", "0".repeat(zeros.1));
        check_pair(&a0, &b0)?;
        prop_assert_eq!(decide_first(&a0, &b0).verdict, decide_first(&a, &b).verdict);
    }

    #[test]
    fn verdict_matches_the_seed_boundary_on_any_pair(last in edge_integer(), first in edge_integer()) {
        check_pair(&last, &first)?;
    }

    /// Signs, whitespace, hex, decimals, non-ASCII digits: not integers, so unverifiable.
    #[test]
    fn ids_that_are_not_plain_integers_are_unverifiable(
        n in any::<u64>(),
        wrap in prop_oneof![
            Just(("-", "")), Just(("+", "")), Just((" ", "")), Just(("", " ")),
            Just(("\t", "")), Just(("", "\n")), Just(("0x", "")), Just(("", ".0")),
            Just(("", "e3")), Just(("١", "")), Just(("", "_1")),
        ],
        other in any::<u64>(),
        on_first in any::<bool>(),
    ) {
        let odd = format!("{}{n}{}", wrap.0, wrap.1);
        let plain = other.to_string();
        let (last, first) = if on_first { (plain, odd) } else { (odd, plain) };
        check_pair(&last, &first)?;
        prop_assert_eq!(decide_first(&last, &first).verdict, Verdict::Unverifiable);
    }
}

#[test]
fn verdict_extremes_exhaustively() {
    let values = [
        "0",
        "1",
        "2",
        "9",
        "10",
        "4294967295",
        "4294967296",
        "9223372036854775807",
        "9223372036854775808",
        "18446744073709551614",
        "18446744073709551615",
        "18446744073709551616",
        "18446744073709551617",
        "340282366920938463463374607431768211455",
        "340282366920938463463374607431768211456",
        "000",
        "0018446744073709551616",
        "",
        "-0",
        "-1",
        " 1",
        "1 ",
        "+1",
    ];
    for last in values {
        for first in values {
            check_pair(last, first).unwrap_or_else(|e| panic!("{last:?} {first:?}: {e}"));
        }
    }
}

/// Damaged `.zhar` inputs on which the `har` fuzz target once found two answers for two ways of
/// reading (fixtures/malformed/fuzz/har/, described in fixtures/malformed/README.md).
#[test]
fn fuzz_found_zhar_inputs_give_one_answer_however_read() {
    use mcp_resume_audit::fuzzing::Pieces;
    use mcp_resume_audit::{InputReport, Options, analyze_reader};
    let seen = |r: &InputReport| format!("{:?}\n{:?}\n{:?}", r.resumes, r.stats, r.messages);
    for (path, bytes) in fuzz_found("har") {
        let whole = analyze_reader("fuzz.har", &bytes[..], &Options::default());
        assert!(whole.failed(), "{:?}: the damage is reported", path);
        for size in [1, 2, 7, 64, 333, 4096] {
            let cut = analyze_reader("fuzz.har", Pieces::new(&bytes, size), &Options::default());
            assert_eq!(seen(&whole), seen(&cut), "{:?} read {size} at a time", path);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Capture loss never adds an accusation.

mod capture_loss {
    use mcp_resume_audit::Verdict;
    use mcp_resume_audit::{Options, analyze_reader};
    use mcp_resume_audit_synth::{
        BASE_TIME_NS, ByteOrder, Capture, ConnSpec, Endpoint, EventStream, ExchangeKind, Fate,
        FlowSpec, Interleave, LinkFraming, PcapFormat, PcapWriter, Resume, ResumeResponse,
        Scenario, SessionSpec, SseEvent, StreamClose, TsResolution, Vlan,
    };
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use std::net::Ipv4Addr;

    fn fate(code: u8) -> Fate {
        match code % 5 {
            0 => Fate::Deliver,
            1 => Fate::Drop,
            2 => Fate::Duplicate,
            3 => Fate::OverlapRetransmit,
            _ => Fate::SwapWithNext,
        }
    }

    /// One session: `initialize`, then on a second connection a resume with `last` answered
    /// by integer ids from `first`, each event's chunk and the head meeting its fate; the
    /// delivered events written `per_write` to a chunk.
    fn capture(
        last: u32,
        first: u32,
        fates: &[Fate],
        head: Fate,
        request: Fate,
        close: StreamClose,
        per_write: usize,
    ) -> Vec<u8> {
        let framing = LinkFraming::Ethernet {
            vlan: Vlan::Untagged,
        };
        let writer = PcapWriter::new(
            Vec::new(),
            PcapFormat::new(ByteOrder::Little, TsResolution::Micro, framing.link_type()),
        )
        .unwrap();
        let mut cap = Capture::new(writer, BASE_TIME_NS, 1_000_000);
        let iface = cap.add_interface(framing, TsResolution::Micro).unwrap();
        let flow = |port| {
            FlowSpec::new(
                iface,
                Endpoint::new(Ipv4Addr::new(10, 0, 0, 2), port),
                Endpoint::new(Ipv4Addr::new(10, 0, 0, 1), 8000),
            )
        };
        let mut stream = EventStream::with_ids(&[] as &[&str], close);
        stream.head_fate = head;
        stream.per_write = per_write;
        stream.events = fates
            .iter()
            .enumerate()
            .map(|(k, f)| SseEvent::with_id((first + k as u32).to_string()).fate(*f))
            .collect();
        let mut resume = Resume::new(last.to_string(), ResumeResponse::Stream(stream));
        resume.request_fate = request;
        let session = SessionSpec::new(
            Some("sess-prop"),
            vec![ConnSpec::new(flow(41000)), ConnSpec::new(flow(41001))],
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
        let mut scenario = Scenario::new();
        scenario.add_session(&session).unwrap();
        scenario.run(&mut cap, Interleave::Sequential).unwrap();
        cap.into_writer().into_inner()
    }

    /// Verdicts in report order, and the findings as (kind, severity).
    fn claims(bytes: &[u8]) -> (Vec<Verdict>, BTreeSet<String>) {
        let r = analyze_reader("prop.pcap", bytes, &Options::default());
        let verdicts = r.resumes.iter().map(|r| r.decision.verdict).collect();
        let findings = r
            .resumes
            .iter()
            .flat_map(|r| r.forensic.findings.iter())
            .chain(r.findings.iter())
            .map(|f| format!("{} {:?}", f.kind.as_str(), f.severity))
            .collect();
        (verdicts, findings)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// Segments of the resumed stream dropped, duplicated, overlapped or swapped (the
        /// response head's too, and the request duplicated or swapped): the verdict is the
        /// loss-free one or `capture_incomplete`, and no finding appears that the loss-free
        /// capture does not give. Events written several to a chunk read as when written one
        /// by one.
        #[test]
        fn loss_on_the_wire_never_adds_an_accusation(
            last in 1u32..1000,
            delta in 0u32..4,
            codes in proptest::collection::vec(0u8..5, 1..6),
            per_write in 1usize..5,
            head in 0u8..5,
            request in prop_oneof![Just(0u8), Just(2u8), Just(4u8)],
            close in prop_oneof![
                Just(StreamClose::TerminalChunk),
                Just(StreamClose::ServerFin),
                Just(StreamClose::ClientReset),
                Just(StreamClose::Open),
            ],
        ) {
            // delta 0: replayed from `last`; 1: correct; 2 and 3: ids skipped.
            let first = last + delta;
            let clean = vec![Fate::Deliver; codes.len()];
            let lossy: Vec<Fate> = codes.iter().map(|c| fate(*c)).collect();
            let d = Fate::Deliver;
            let whole = claims(&capture(last, first, &clean, d, d, close, 1));
            let packed_bytes = capture(last, first, &clean, d, d, close, per_write);
            if per_write > 1 && clean.len() > 1 {
                // Fewer chunks and segments: the events were written together.
                let alone = capture(last, first, &clean, d, d, close, 1);
                prop_assert!(packed_bytes.len() < alone.len());
            }
            prop_assert_eq!(claims(&packed_bytes), whole.clone());
            let cut = claims(&capture(last, first, &lossy, fate(head), fate(request), close, per_write));
            prop_assert_eq!(whole.0.len(), 1);
            prop_assert_eq!(cut.0.len(), 1, "the resume is still found");
            prop_assert!(
                cut.0[0] == whole.0[0] || cut.0[0] == Verdict::CaptureIncomplete,
                "{:?} became {:?}", whole.0[0], cut.0[0]
            );
            let extra: Vec<&String> = cut.1.difference(&whole.1).collect();
            prop_assert!(extra.is_empty(), "new findings {:?}", extra);
        }
    }
}
