//! Cost per byte and per event of reading event-stream bodies: the SSE parser alone, and the
//! parser with each event's data classified as JSON-RPC, as the exchange tracker does.
//!
//! Input: bodies made in memory in the shapes of the workload's mixes (`tiny`: progress
//! notifications of about 100 bytes with an id and an event type; `default`: progress with a
//! message, 150–400 bytes; `long`: data of a few KiB), fed in pieces of 1400 bytes as TCP
//! segments bring them. Output: criterion's report, throughput in body bytes per second.
//! `cargo bench --bench sse_scan`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

use mcp_resume_audit::Limits;
use mcp_resume_audit::stages::{Mark, RpcFact, SseParser, classify};

/// Body bytes per shape.
const BODY_BYTES: usize = 8 << 20;
/// Bytes per feed.
const PIECE: usize = 1400;
/// What the exchange tracker keeps of each event's data.
const KEEP_DATA: usize = 16 << 10;

/// One stream of events whose data lines are `message` bytes of text beside the progress.
fn body(message: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(BODY_BYTES + 4096);
    let mut n = 0u64;
    while out.len() < BODY_BYTES {
        n += 1;
        let text: String = "lorem ipsum ".chars().cycle().take(message).collect();
        let params = if message == 0 {
            format!(
                r#"{{"progressToken":"progress-{}","progress":{n},"total":100000}}"#,
                n % 7
            )
        } else {
            format!(
                r#"{{"progressToken":"progress-{}","progress":{n},"total":100000,"message":"{text}"}}"#,
                n % 7
            )
        };
        out.extend_from_slice(
            format!(
                "id: {n}\nevent: message\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{params}}}\n\n"
            )
            .as_bytes(),
        );
    }
    out
}

fn scan(c: &mut Criterion) {
    let limits = Limits::default();
    let mut g = c.benchmark_group("sse_scan");
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (name, message) in [("tiny", 0), ("default", 200), ("long", 4000)] {
        let input = body(message);
        g.throughput(Throughput::Bytes(input.len() as u64));
        g.bench_function(format!("parse_{name}"), |b| {
            b.iter(|| {
                let mut p = SseParser::new(&limits, KEEP_DATA);
                let mut n = 0u64;
                for piece in input.chunks(PIECE) {
                    p.feed(piece, Mark::default(), |e| n += e.data_len);
                }
                black_box(n)
            })
        });
        g.bench_function(format!("parse_classify_{name}"), |b| {
            b.iter(|| {
                let mut p = SseParser::new(&limits, KEEP_DATA);
                let mut n = 0u64;
                for piece in input.chunks(PIECE) {
                    p.feed(piece, Mark::default(), |e| {
                        n += u64::from(!matches!(classify(e.data), RpcFact::Other));
                    });
                }
                black_box(n)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, scan);
criterion_main!(benches);
