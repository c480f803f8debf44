//! Throughput of each stage on the benchmark workload, and of the whole pipeline.
//!
//! Input: a 16 MiB capture of the `gen-capture` workload, made in memory at start-up; each
//! stage is fed what the stage before it produced, recorded once beforehand, so a stage's time
//! is its own. Output: criterion's report, throughput in bytes per second of the stage's own
//! input (capture bytes, frame bytes, TCP payload, HTTP stream bytes, event-stream bodies).
//! `cargo bench --bench stages`; `benches/compare.sh` measures the binary end to end.

#[allow(dead_code)]
#[path = "../examples/gen-capture/workload.rs"]
mod workload;

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

use mcp_resume_audit::Limits;
use mcp_resume_audit::stages::CaptureReader;
use mcp_resume_audit::stages::ExchangeTracker;
use mcp_resume_audit::stages::HttpConnection;
use mcp_resume_audit::stages::SseParser;
use mcp_resume_audit::stages::{
    Anomaly, BodyEnd, Direction, HttpSink, Mark, RequestHead, ResponseHead, StreamEnd, StreamSink,
};
use mcp_resume_audit::stages::{Endpoint, decode};
use mcp_resume_audit::stages::{TcpConnection, TcpFlags, TcpSegment};
use mcp_resume_audit::{self as driver, Options};

const CAPTURE_BYTES: u64 = 16 << 20;

struct Segment {
    dir: Direction,
    seq: u32,
    ack: u32,
    flags: TcpFlags,
    payload: Vec<u8>,
    mark: Mark,
}

struct Connection {
    from_start: bool,
    segments: Vec<Segment>,
    last: Mark,
}

/// What reassembly hands on.
enum StreamCall {
    Data(Direction, Vec<u8>, Mark),
    Gap(Direction, u64, Mark),
    End(Direction, StreamEnd, Mark),
}

/// What the HTTP parser hands on.
enum HttpCall {
    Request(RequestHead),
    Response(ResponseHead),
    Body(u32, Vec<u8>, Mark),
    BodyGap(u32, u64, Mark),
    BodyEnd(u32, BodyEnd, Mark),
    Anomaly(Anomaly, Mark),
}

#[derive(Default)]
struct RecordStream(Vec<StreamCall>);

impl StreamSink for RecordStream {
    fn data(&mut self, dir: Direction, bytes: &[u8], mark: Mark) {
        self.0.push(StreamCall::Data(dir, bytes.to_vec(), mark));
    }
    fn gap(&mut self, dir: Direction, len: u64, mark: Mark) {
        self.0.push(StreamCall::Gap(dir, len, mark));
    }
    fn end(&mut self, dir: Direction, how: StreamEnd, mark: Mark) {
        self.0.push(StreamCall::End(dir, how, mark));
    }
}

#[derive(Default)]
struct CountStream(u64);

impl StreamSink for CountStream {
    fn data(&mut self, _: Direction, bytes: &[u8], _: Mark) {
        self.0 += bytes.len() as u64;
    }
    fn gap(&mut self, _: Direction, len: u64, _: Mark) {
        self.0 += len;
    }
    fn end(&mut self, _: Direction, _: StreamEnd, _: Mark) {}
}

#[derive(Default)]
struct RecordHttp(Vec<HttpCall>);

impl HttpSink for RecordHttp {
    fn request(&mut self, head: RequestHead) {
        self.0.push(HttpCall::Request(head));
    }
    fn response(&mut self, head: ResponseHead) {
        self.0.push(HttpCall::Response(head));
    }
    fn body(&mut self, exchange: u32, bytes: &[u8], mark: Mark) {
        self.0.push(HttpCall::Body(exchange, bytes.to_vec(), mark));
    }
    fn body_gap(&mut self, exchange: u32, len: u64, mark: Mark) {
        self.0.push(HttpCall::BodyGap(exchange, len, mark));
    }
    fn body_end(&mut self, exchange: u32, how: BodyEnd, mark: Mark) {
        self.0.push(HttpCall::BodyEnd(exchange, how, mark));
    }
    fn anomaly(&mut self, what: Anomaly, mark: Mark) {
        self.0.push(HttpCall::Anomaly(what, mark));
    }
}

#[derive(Default)]
struct CountHttp(u64);

impl HttpSink for CountHttp {
    fn request(&mut self, _: RequestHead) {
        self.0 += 1;
    }
    fn response(&mut self, _: ResponseHead) {
        self.0 += 1;
    }
    fn body(&mut self, _: u32, bytes: &[u8], _: Mark) {
        self.0 += bytes.len() as u64;
    }
    fn body_gap(&mut self, _: u32, _: u64, _: Mark) {}
    fn body_end(&mut self, _: u32, _: BodyEnd, _: Mark) {}
    fn anomaly(&mut self, _: Anomaly, _: Mark) {}
}

/// Every stage's input, made once.
struct Staged {
    capture: Vec<u8>,
    frames: Vec<(u32, Vec<u8>)>,
    frame_bytes: u64,
    connections: Vec<Connection>,
    payload_bytes: u64,
    streams: Vec<(bool, Vec<StreamCall>, Mark)>,
    stream_bytes: u64,
    exchanges: Vec<(Vec<HttpCall>, Mark)>,
    /// Event-stream response bodies, one list of pieces per response.
    sse_bodies: Vec<Vec<(Vec<u8>, Mark)>>,
    body_bytes: u64,
}

fn stage() -> Staged {
    let w = workload::Workload {
        size: CAPTURE_BYTES,
        format: workload::Format::Pcap,
        seed: 7,
        sessions: None,
        mix: workload::Mix::Default,
        wire: Default::default(),
        mss: None,
    };
    let mut capture = Vec::with_capacity(CAPTURE_BYTES as usize + (1 << 20));
    if let Err(e) = workload::write_capture(&w, &mut capture, &mut std::io::sink(), None) {
        panic!("workload: {e}");
    }
    let limits = Limits::default();

    let mut frames = Vec::new();
    let mut reader = match CaptureReader::open(&capture[..], limits.max_block_bytes) {
        Ok(r) => r,
        Err(e) => panic!("capture: {e}"),
    };
    while let Ok(Some(p)) = reader.next_packet() {
        frames.push((p.linktype, p.data.to_vec()));
    }
    let frame_bytes = frames.iter().map(|(_, f)| f.len() as u64).sum();

    // Connections by 4-tuple: every connection of the workload has its own.
    let mut index: HashMap<(Endpoint, Endpoint), usize> = HashMap::new();
    let mut connections: Vec<Connection> = Vec::new();
    let mut forward: Vec<Endpoint> = Vec::new();
    for (n, (linktype, data)) in frames.iter().enumerate() {
        let Ok(p) = decode::decode(*linktype, data) else {
            continue;
        };
        let key = if p.src <= p.dst {
            (p.src, p.dst)
        } else {
            (p.dst, p.src)
        };
        let mark = Mark::new(n as u64 + 1, n as i64 * 20_000);
        let k = *index.entry(key).or_insert_with(|| {
            connections.push(Connection {
                from_start: p.flags.syn() && !p.flags.ack(),
                segments: Vec::new(),
                last: mark,
            });
            forward.push(p.src);
            connections.len() - 1
        });
        let dir = if p.src == forward[k] {
            Direction::Forward
        } else {
            Direction::Reverse
        };
        connections[k].segments.push(Segment {
            dir,
            seq: p.seq,
            ack: p.ack,
            flags: p.flags,
            payload: p.payload.to_vec(),
            mark,
        });
        connections[k].last = mark;
    }
    let payload_bytes = connections
        .iter()
        .flat_map(|c| &c.segments)
        .map(|s| s.payload.len() as u64)
        .sum();

    let mut streams = Vec::new();
    for c in &connections {
        let mut rec = RecordStream::default();
        reassemble(c, &limits, &mut rec);
        streams.push((c.from_start, rec.0, c.last));
    }
    let stream_bytes = streams
        .iter()
        .flat_map(|(_, calls, _)| calls)
        .map(|c| match c {
            StreamCall::Data(_, b, _) => b.len() as u64,
            _ => 0,
        })
        .sum();

    let mut exchanges = Vec::new();
    let mut sse_bodies = Vec::new();
    for (from_start, calls, last) in &streams {
        let mut rec = RecordHttp::default();
        parse_http(*from_start, calls, &limits, &mut rec);
        let mut open: HashMap<u32, Vec<(Vec<u8>, Mark)>> = HashMap::new();
        for call in &rec.0 {
            match call {
                HttpCall::Response(h) if h.is_event_stream() => {
                    open.insert(h.exchange, Vec::new());
                }
                HttpCall::Body(x, b, m) => {
                    if let Some(body) = open.get_mut(x) {
                        body.push((b.clone(), *m));
                    }
                }
                HttpCall::BodyEnd(x, _, _) => {
                    if let Some(body) = open.remove(x) {
                        sse_bodies.push(body);
                    }
                }
                _ => {}
            }
        }
        sse_bodies.extend(open.into_values());
        exchanges.push((rec.0, *last));
    }
    let body_bytes = sse_bodies
        .iter()
        .flatten()
        .map(|(b, _)| b.len() as u64)
        .sum();

    Staged {
        capture,
        frames,
        frame_bytes,
        connections,
        payload_bytes,
        streams,
        stream_bytes,
        exchanges,
        sse_bodies,
        body_bytes,
    }
}

fn reassemble<S: StreamSink>(c: &Connection, limits: &Limits, sink: &mut S) {
    let mut tcp = TcpConnection::new(limits);
    for s in &c.segments {
        let seg = TcpSegment {
            seq: s.seq,
            ack: s.ack,
            flags: s.flags,
            payload: &s.payload,
            mark: s.mark,
        };
        tcp.segment(s.dir, &seg, sink);
    }
    tcp.finish(StreamEnd::CaptureEnd, c.last, sink);
}

fn parse_http<S: HttpSink>(from_start: bool, calls: &[StreamCall], limits: &Limits, sink: &mut S) {
    let mut http = HttpConnection::new(limits, from_start);
    for call in calls {
        match call {
            StreamCall::Data(d, b, m) => {
                http.data(*d, b, *m, sink);
            }
            StreamCall::Gap(d, n, m) => http.gap(*d, *n, *m, sink),
            StreamCall::End(d, how, m) => http.end(*d, *how, *m, sink),
        }
    }
}

fn replay_exchanges(calls: &[HttpCall], last: Mark, limits: &Limits) -> usize {
    let mut t = ExchangeTracker::new(limits);
    for call in calls {
        match call {
            HttpCall::Request(h) => t.request(h.clone()),
            HttpCall::Response(h) => t.response(h.clone()),
            HttpCall::Body(x, b, m) => t.body(*x, b, *m),
            HttpCall::BodyGap(x, n, m) => t.body_gap(*x, *n, *m),
            HttpCall::BodyEnd(x, how, m) => t.body_end(*x, *how, *m),
            HttpCall::Anomaly(a, m) => t.anomaly(*a, *m),
        }
    }
    t.finish(Some(StreamEnd::Fin), false, last);
    t.resumes.len()
}

fn stages(c: &mut Criterion) {
    let s = stage();
    let limits = Limits::default();
    let mut g = c.benchmark_group("stages");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));

    g.throughput(Throughput::Bytes(s.capture.len() as u64));
    g.bench_function("capture_read", |b| {
        b.iter(|| {
            let mut n = 0u64;
            let Ok(mut r) = CaptureReader::open(&s.capture[..], limits.max_block_bytes) else {
                return 0;
            };
            while let Ok(Some(p)) = r.next_packet() {
                n += p.data.len() as u64;
            }
            black_box(n)
        })
    });

    g.throughput(Throughput::Bytes(s.frame_bytes));
    g.bench_function("packet_decode", |b| {
        b.iter(|| {
            let mut n = 0u64;
            for (lt, f) in &s.frames {
                if let Ok(p) = decode::decode(*lt, f) {
                    n += u64::from(p.seq) ^ p.payload.len() as u64;
                }
            }
            black_box(n)
        })
    });

    g.throughput(Throughput::Bytes(s.payload_bytes));
    g.bench_function("tcp_reassembly", |b| {
        b.iter(|| {
            let mut sink = CountStream::default();
            for conn in &s.connections {
                reassemble(conn, &limits, &mut sink);
            }
            black_box(sink.0)
        })
    });

    g.throughput(Throughput::Bytes(s.stream_bytes));
    g.bench_function("http1", |b| {
        b.iter(|| {
            let mut sink = CountHttp::default();
            for (from_start, calls, _) in &s.streams {
                parse_http(*from_start, calls, &limits, &mut sink);
            }
            black_box(sink.0)
        })
    });

    g.throughput(Throughput::Bytes(s.body_bytes));
    g.bench_function("sse", |b| {
        b.iter(|| {
            let mut events = 0u64;
            for body in &s.sse_bodies {
                let mut p = SseParser::new(&limits, 0);
                for (bytes, mark) in body {
                    p.feed(bytes, *mark, |_| events += 1);
                }
                p.finish(Mark::default());
            }
            black_box(events)
        })
    });

    // Sessions and verdicts: the exchange tracker runs the SSE parser on resumed streams and
    // decides each resume, so this includes the stage above for those bodies.
    g.throughput(Throughput::Bytes(s.body_bytes));
    g.bench_function("session_verdicts", |b| {
        b.iter(|| {
            let mut n = 0;
            for (calls, last) in &s.exchanges {
                n += replay_exchanges(calls, *last, &limits);
            }
            black_box(n)
        })
    });

    g.throughput(Throughput::Bytes(s.capture.len() as u64));
    g.bench_function("pipeline_j1", |b| {
        let opts = Options::default();
        b.iter(|| {
            let r = driver::analyze_reader("bench", &s.capture[..], &opts);
            black_box(r.resumes.len())
        })
    });
    g.finish();
}

criterion_group!(benches, stages);
criterion_main!(benches);
