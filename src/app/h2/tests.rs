//! Transcripts of HTTP/2 connections, each run whole, byte by byte and at random split
//! points, with one answer required.

use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use proptest::prelude::*;

use super::frame::encode::{frame, padded, settings};
use super::frame::{CLIENT_PREFACE, FLAG_END_HEADERS, FLAG_END_STREAM, FLAG_PADDED, FrameType};
use super::hpack::encode::{self as henc, Literal};
use super::*;
use crate::app::testing::{Event, Recorder, Split, Step, XorShift, data};

const C: Direction = Direction::Forward;
const S: Direction = Direction::Reverse;

#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    events: Vec<Event>,
    abandoned: bool,
    client: Option<Direction>,
    stats: H2Stats,
}

fn mark_of(i: usize) -> Mark {
    Mark::new(i as u64 + 1, (i as i64 + 1) * 1_000)
}

#[derive(Clone, Copy)]
enum Start {
    New,
    Upgraded(Direction, u32),
}

fn run(limits: &Limits, start: Start, steps: &[Step], split: Split) -> Outcome {
    let mut conn = match start {
        Start::New => Http2Connection::new(limits),
        Start::Upgraded(client, ex) => Http2Connection::upgraded(limits, client, ex),
    };
    let mut rec = Recorder::default();
    let mut rng = XorShift(match split {
        Split::Random(seed) => seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        _ => 1,
    });
    for (i, step) in steps.iter().enumerate() {
        let mark = mark_of(i);
        match step {
            Step::Data(dir, bytes) => match split {
                Split::Whole => conn.data(*dir, bytes, mark, &mut rec),
                Split::Bytewise => {
                    for piece in bytes.chunks(1) {
                        conn.data(*dir, piece, mark, &mut rec);
                    }
                }
                Split::Random(seed) => {
                    let mut rest = &bytes[..];
                    let spread = if seed % 2 == 0 { 7 } else { 97 };
                    while !rest.is_empty() {
                        let n = (1 + (rng.next() % spread) as usize).min(rest.len());
                        conn.data(*dir, &rest[..n], mark, &mut rec);
                        rest = &rest[n..];
                    }
                }
            },
            Step::Gap(dir, len) => conn.gap(*dir, *len, mark, &mut rec),
            Step::End(dir, how) => conn.end(*dir, *how, mark, &mut rec),
            // HTTP/2 pairs by stream id: the order of directions says nothing it uses.
            Step::Ahead(..) | Step::Late(..) | Step::Before(..) => {}
        }
    }
    Outcome {
        events: rec.events,
        abandoned: conn.is_abandoned(),
        client: conn.client_direction(),
        stats: conn.stats().clone(),
    }
}

fn transcript_with(limits: &Limits, start: Start, steps: &[Step]) -> Outcome {
    let whole = run(limits, start, steps, Split::Whole);
    assert_eq!(
        run(limits, start, steps, Split::Bytewise),
        whole,
        "byte by byte"
    );
    for seed in 1..=6 {
        assert_eq!(
            run(limits, start, steps, Split::Random(seed)),
            whole,
            "random split, seed {seed}"
        );
    }
    let server_ended = whole.client.is_some_and(|c| {
        steps
            .iter()
            .any(|s| matches!(s, Step::End(d, _) if *d == c.other()))
    });
    check_contract(&whole.events, server_ended || whole.abandoned);
    whole
}

fn transcript(steps: &[Step]) -> Outcome {
    transcript_with(&Limits::default(), Start::New, steps)
}

/// The `HttpSink` contract: a response before its body calls, nothing after its
/// `body_end`, one `body_end` per response once the server's side ended; a `body_end`
/// without a response only as `LostSync` after a request.
fn check_contract(events: &[Event], server_ended: bool) {
    use std::collections::HashMap;
    #[derive(PartialEq, Debug)]
    enum Phase {
        Requested,
        Open,
        Ended,
    }
    let mut phases: HashMap<u32, Phase> = HashMap::new();
    for event in events {
        match event {
            Event::Request(head) => {
                assert!(
                    phases.insert(head.exchange, Phase::Requested).is_none(),
                    "{event:?}"
                );
            }
            Event::Response(head) => {
                let before = phases.insert(head.exchange, Phase::Open);
                assert!(matches!(before, None | Some(Phase::Requested)), "{event:?}");
            }
            Event::Body(e, ..) | Event::BodyGap(e, ..) => {
                assert_eq!(
                    phases.get(e),
                    Some(&Phase::Open),
                    "{event:?} outside a body"
                );
            }
            Event::BodyEnd(e, how, _) => {
                let phase = phases.get(e);
                assert!(
                    phase == Some(&Phase::Open)
                        || (phase == Some(&Phase::Requested) && *how == BodyEnd::LostSync),
                    "{event:?} outside a body"
                );
                phases.insert(*e, Phase::Ended);
            }
            Event::Anomaly(..) => {}
        }
    }
    if server_ended {
        assert!(
            !phases.values().any(|p| *p == Phase::Open),
            "a body never ended"
        );
    }
}

fn summary(events: &[Event]) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut body: Option<(u32, Vec<u8>)> = None;
    let flush = |body: &mut Option<(u32, Vec<u8>)>, lines: &mut Vec<String>| {
        if let Some((e, bytes)) = body.take() {
            lines.push(format!("body {e} {}", String::from_utf8_lossy(&bytes)));
        }
    };
    for event in events {
        if let Event::Body(e, bytes, _) = event {
            match &mut body {
                Some((open, acc)) if open == e => acc.extend_from_slice(bytes),
                _ => {
                    flush(&mut body, &mut lines);
                    body = Some((*e, bytes.clone()));
                }
            }
            continue;
        }
        flush(&mut body, &mut lines);
        lines.push(match event {
            Event::Request(h) => format!(
                "req {} {} {} sid={} last={}",
                h.exchange,
                h.method,
                h.target,
                h.session_id.as_deref().unwrap_or("-"),
                h.last_event_id.as_deref().unwrap_or("-")
            ),
            Event::Response(h) => format!(
                "resp {} {} {}",
                h.exchange,
                h.status,
                h.content_type.as_deref().unwrap_or("-")
            ),
            Event::BodyGap(e, len, _) => format!("gap {e} {len}"),
            Event::BodyEnd(e, how, _) => format!("end {e} {how:?}"),
            Event::Anomaly(what, _) => format!("anomaly {what:?}"),
            Event::Body(..) => unreachable!(),
        });
    }
    flush(&mut body, &mut lines);
    lines
}

// ----- frame and block builders -----

fn client_preface() -> Vec<u8> {
    let mut out = CLIENT_PREFACE.to_vec();
    out.extend(settings(&[(1, 4096), (4, 65535)]));
    out
}

fn server_preface() -> Vec<u8> {
    let mut out = settings(&[(3, 100)]);
    out.extend(frame(FrameType::Settings, frame::FLAG_ACK, 0, b""));
    out
}

fn headers(stream: u32, end_stream: bool, block: &[u8]) -> Vec<u8> {
    let flags = FLAG_END_HEADERS | if end_stream { FLAG_END_STREAM } else { 0 };
    frame(FrameType::Headers, flags, stream, block)
}

fn data_frame(stream: u32, end_stream: bool, bytes: &[u8]) -> Vec<u8> {
    frame(
        FrameType::Data,
        if end_stream { FLAG_END_STREAM } else { 0 },
        stream,
        bytes,
    )
}

/// A request block with only static-table and literal representations (no table inserts).
fn plain_request(method: &str, path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    match method {
        "GET" => henc::indexed(&mut b, 2),
        "POST" => henc::indexed(&mut b, 3),
        other => henc::literal_name(&mut b, Literal::Without, 2, other, false),
    }
    henc::indexed(&mut b, 6);
    henc::literal_name(&mut b, Literal::Without, 4, path, true);
    for (n, v) in extra {
        henc::literal(&mut b, Literal::Without, n, v, false);
    }
    b
}

fn plain_response(status: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    henc::literal_name(&mut b, Literal::Without, 8, status, false);
    for (n, v) in extra {
        henc::literal(&mut b, Literal::Without, n, v, true);
    }
    b
}

const SSE: (&str, &str) = ("content-type", "text/event-stream");

fn rst(stream: u32, code: u32) -> Vec<u8> {
    frame(FrameType::RstStream, 0, stream, &code.to_be_bytes())
}

fn goaway(last: u32, code: u32) -> Vec<u8> {
    let mut p = last.to_be_bytes().to_vec();
    p.extend_from_slice(&code.to_be_bytes());
    frame(FrameType::GoAway, 0, 0, &p)
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

// ----- transcripts -----

/// The way MCP clients resume over HTTP/2: a POST on stream 7 answered by an event stream,
/// then the resume GET on stream 9 with `last-event-id`, on the same connection, with
/// header fields indexed from the dynamic table the POST filled.
#[test]
fn resume_get_on_stream_9_after_post_on_stream_7() {
    let mut post = Vec::new();
    henc::indexed(&mut post, 3);
    henc::indexed(&mut post, 7);
    henc::literal_name(&mut post, Literal::Without, 4, "/mcp", false);
    henc::literal_name(&mut post, Literal::Indexed, 1, "localhost:8000", true);
    henc::literal(
        &mut post,
        Literal::Indexed,
        "mcp-session-id",
        "sess-1",
        true,
    );
    henc::literal(
        &mut post,
        Literal::Indexed,
        "mcp-protocol-version",
        "2025-11-25",
        false,
    );
    let mut ok = Vec::new();
    henc::indexed(&mut ok, 8);
    henc::literal_name(&mut ok, Literal::Indexed, 31, "text/event-stream", true);
    henc::literal(&mut ok, Literal::Without, "mcp-session-id", "sess-1", false);
    let mut get = Vec::new();
    henc::size_update(&mut get, 4096);
    henc::indexed(&mut get, 2);
    henc::indexed(&mut get, 7);
    henc::literal_name(&mut get, Literal::Without, 4, "/mcp", false);
    henc::indexed(&mut get, 64);
    henc::indexed(&mut get, 63);
    henc::indexed(&mut get, 62);
    henc::literal(&mut get, Literal::Never, "last-event-id", "2", true);
    let mut ok2 = Vec::new();
    henc::indexed(&mut ok2, 8);
    henc::indexed(&mut ok2, 62);
    let steps = [
        data(C, cat(&[&client_preface(), &headers(7, false, &post)])),
        data(
            C,
            data_frame(
                7,
                true,
                br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
            ),
        ),
        data(S, cat(&[&server_preface(), &headers(7, false, &ok)])),
        data(S, data_frame(7, false, b"id: 1\ndata: a\n\n")),
        data(S, data_frame(7, true, b"id: 2\ndata: b\n\n")),
        data(C, headers(9, true, &get)),
        data(
            S,
            cat(&[
                &headers(9, false, &ok2),
                &data_frame(9, false, b"id: 3\ndata: c\n\n"),
            ]),
        ),
        Step::End(C, StreamEnd::Fin),
        Step::End(S, StreamEnd::Fin),
    ];
    let out = transcript(&steps);
    assert_eq!(
        summary(&out.events),
        [
            "req 7 POST /mcp sid=sess-1 last=-",
            "resp 7 200 text/event-stream",
            "body 7 id: 1\ndata: a\n\nid: 2\ndata: b\n\n",
            "end 7 Complete",
            "req 9 GET /mcp sid=sess-1 last=2",
            "resp 9 200 text/event-stream",
            "body 9 id: 3\ndata: c\n\n",
            "end 9 Stream(Fin)",
        ]
    );
    assert_eq!(out.client, Some(C));
    let requests: Vec<&RequestHead> = out
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Request(h) => Some(h),
            _ => None,
        })
        .collect();
    let get = requests[1];
    assert_eq!(get.h2_stream, Some(9));
    assert_eq!(get.protocol_version.as_deref(), Some("2025-11-25"));
    assert_eq!((get.first, get.complete), (mark_of(5), mark_of(5)));
    let Event::Response(resp) = &out.events[1] else {
        panic!()
    };
    assert_eq!(
        (resp.h2_stream, resp.session_id.as_deref()),
        (Some(7), Some("sess-1"))
    );
    assert_eq!(out.stats.headers_unreadable, 0);
    assert_eq!(out.stats.frames.settings, 3);
}

#[test]
fn interleaved_data_of_several_streams() {
    let mut client = client_preface();
    for id in [1, 3, 5] {
        client.extend(headers(
            id,
            true,
            &plain_request("GET", &format!("/s{id}"), &[]),
        ));
    }
    let mut server = server_preface();
    for id in [5, 1, 3] {
        server.extend(headers(id, false, &plain_response("200", &[SSE])));
    }
    for round in 0..3 {
        for id in [3, 1, 5] {
            server.extend(data_frame(
                id,
                round == 2 && id != 5,
                format!("{id}.{round};").as_bytes(),
            ));
        }
    }
    let out = transcript(&[
        data(C, client),
        data(S, server),
        Step::End(S, StreamEnd::Rst),
    ]);
    let bodies: Vec<String> = summary(&out.events)
        .into_iter()
        .filter(|l| l.starts_with("body") || l.starts_with("end"))
        .collect();
    assert_eq!(
        bodies,
        [
            "body 3 3.0;",
            "body 1 1.0;",
            "body 5 5.0;",
            "body 3 3.1;",
            "body 1 1.1;",
            "body 5 5.1;",
            "body 3 3.2;",
            "end 3 Complete",
            "body 1 1.2;",
            "end 1 Complete",
            "body 5 5.2;",
            "end 5 Stream(Rst)",
        ]
    );
}

#[test]
fn stream_resets_by_each_side_carry_their_code() {
    let client = cat(&[
        &client_preface(),
        &headers(
            1,
            true,
            &plain_request("GET", "/a", &[("last-event-id", "4")]),
        ),
        &headers(3, true, &plain_request("GET", "/b", &[])),
    ]);
    let server = cat(&[
        &server_preface(),
        &headers(1, false, &plain_response("200", &[SSE])),
        &headers(3, false, &plain_response("200", &[SSE])),
        &data_frame(1, false, b"id: 5\n\n"),
    ]);
    let out = transcript(&[
        data(C, client),
        data(S, server),
        data(C, rst(1, 8)),
        data(S, rst(3, 2)),
        Step::End(C, StreamEnd::Fin),
        Step::End(S, StreamEnd::Fin),
    ]);
    let ends: Vec<String> = summary(&out.events)
        .into_iter()
        .filter(|l| l.starts_with("end"))
        .collect();
    assert_eq!(
        ends,
        [
            "end 1 Reset { by_client: true, code: 8 }",
            "end 3 Reset { by_client: false, code: 2 }",
        ]
    );
}

#[test]
fn goaway_ends_streams_above_its_last_stream_and_at_the_end() {
    let client = cat(&[
        &client_preface(),
        &headers(1, true, &plain_request("GET", "/a", &[])),
        &headers(3, true, &plain_request("GET", "/b", &[])),
        &headers(5, true, &plain_request("GET", "/c", &[])),
    ]);
    let server = cat(&[
        &server_preface(),
        &headers(1, false, &plain_response("200", &[SSE])),
        &headers(3, false, &plain_response("200", &[SSE])),
        &headers(5, false, &plain_response("200", &[SSE])),
    ]);
    let out = transcript(&[
        data(C, client),
        data(S, server),
        data(S, goaway(3, 0)),
        data(S, data_frame(1, false, b"x")),
        Step::End(S, StreamEnd::Fin),
        Step::End(C, StreamEnd::Fin),
    ]);
    let ends: Vec<String> = summary(&out.events)
        .into_iter()
        .filter(|l| l.starts_with("end"))
        .collect();
    assert_eq!(
        ends,
        [
            "end 5 GoneAway { code: 0 }",
            "end 1 GoneAway { code: 0 }",
            "end 3 GoneAway { code: 0 }",
        ]
    );
    assert_eq!(out.stats.frames.goaway, 1);
}

#[test]
fn padding_continuation_and_trailers() {
    let block = plain_request(
        "GET",
        "/mcp",
        &[("mcp-session-id", "s-9"), ("last-event-id", "17")],
    );
    let (a, b) = block.split_at(5);
    let (b, c) = b.split_at(4);
    let mut padded_headers = padded(a, 6);
    padded_headers.insert(0, 0);
    padded_headers.remove(0);
    let client = cat(&[
        &client_preface(),
        &frame(
            FrameType::Headers,
            FLAG_PADDED | FLAG_END_STREAM,
            1,
            &padded(a, 6),
        ),
        &frame(FrameType::Continuation, 0, 1, b),
        &frame(FrameType::Continuation, FLAG_END_HEADERS, 1, c),
    ]);
    let mut trailers = Vec::new();
    henc::literal(&mut trailers, Literal::Without, "grpc-status", "0", false);
    let server = cat(&[
        &server_preface(),
        &headers(1, false, &plain_response("200", &[SSE])),
        &frame(FrameType::Data, FLAG_PADDED, 1, &padded(b"id: 1\n\n", 9)),
        &frame(FrameType::Data, FLAG_PADDED, 1, &padded(b"", 3)),
        &data_frame(1, false, b"id: 2\n\n"),
        &headers(1, true, &trailers),
    ]);
    let out = transcript(&[
        data(C, client),
        data(S, server),
        Step::End(S, StreamEnd::Fin),
    ]);
    assert_eq!(
        summary(&out.events),
        [
            "req 1 GET /mcp sid=s-9 last=17",
            "resp 1 200 text/event-stream",
            "body 1 id: 1\n\nid: 2\n\n",
            "end 1 Complete",
        ]
    );
    assert_eq!(out.stats.frames.continuation, 2);
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::new(), Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

#[test]
fn gzip_body_is_decoded_and_unknown_codings_are_malformed() {
    let text = b"id: 1\ndata: hello\n\nid: 2\ndata: world\n\n";
    let z = gzip(text);
    let (z1, z2) = z.split_at(z.len() / 2);
    let client = cat(&[
        &client_preface(),
        &headers(1, true, &plain_request("GET", "/a", &[])),
        &headers(3, true, &plain_request("GET", "/b", &[])),
    ]);
    let server = cat(&[
        &server_preface(),
        &headers(
            1,
            false,
            &plain_response("200", &[SSE, ("content-encoding", "gzip")]),
        ),
        &data_frame(1, false, z1),
        &data_frame(1, true, z2),
        &headers(
            3,
            false,
            &plain_response("200", &[SSE, ("content-encoding", "br")]),
        ),
        &data_frame(3, true, b"\x0b\x02\x80"),
    ]);
    let out = transcript(&[data(C, client), data(S, server)]);
    assert_eq!(
        summary(&out.events)[3..],
        [
            "body 1 id: 1\ndata: hello\n\nid: 2\ndata: world\n\n",
            "end 1 Complete",
            "resp 3 200 text/event-stream",
            "anomaly BadContentEncoding",
            "end 3 Malformed",
        ]
    );
}

#[test]
fn interim_responses_are_skipped() {
    let client = cat(&[
        &client_preface(),
        &headers(1, true, &plain_request("GET", "/", &[])),
    ]);
    let server = cat(&[
        &server_preface(),
        &headers(1, false, &plain_response("103", &[("link", "</x>")])),
        &headers(1, true, &plain_response("404", &[])),
    ]);
    let out = transcript(&[data(C, client), data(S, server)]);
    assert_eq!(
        summary(&out.events),
        ["req 1 GET / sid=- last=-", "resp 1 404 -", "end 1 Complete"]
    );
}

#[test]
fn upgraded_connection_answers_stream_1_as_the_given_exchange() {
    // The server's preface may come before the client's; roles were set by HTTP/1.1.
    let server = cat(&[
        &server_preface(),
        &headers(1, false, &plain_response("200", &[SSE])),
        &data_frame(1, true, b"id: 1\n\n"),
    ]);
    let client = cat(&[
        &client_preface(),
        &headers(3, true, &plain_request("GET", "/next", &[])),
    ]);
    let server2 = cat(&[&headers(3, true, &plain_response("204", &[]))]);
    let out = transcript_with(
        &Limits::default(),
        Start::Upgraded(C, 4),
        &[data(S, server), data(C, client), data(S, server2)],
    );
    assert_eq!(
        summary(&out.events),
        [
            "resp 4 200 text/event-stream",
            "body 4 id: 1\n\n",
            "end 4 Complete",
            "req 6 GET /next sid=- last=-",
            "resp 6 204 -",
            "end 6 Complete",
        ]
    );
    let Event::Response(first) = &out.events[0] else {
        panic!()
    };
    assert_eq!(first.h2_stream, Some(1));
}

#[test]
fn bad_preface_or_first_frame_abandons() {
    let out = transcript(&[
        data(C, b"PRI * HTTP/1.1\r\n\r\n"),
        data(S, server_preface()),
    ]);
    assert!(out.abandoned);
    let out = transcript(&[data(S, data_frame(1, false, b"x"))]);
    assert!(out.abandoned);
    let out = transcript(&[data(C, b"GET / HTTP/1.1\r\n\r\n")]);
    assert!(out.abandoned);
    // Both sides sending the client preface is not HTTP/2 either.
    let out = transcript(&[data(C, client_preface()), data(S, client_preface())]);
    assert!(out.abandoned);
}

/// A gap inside one DATA frame keeps framing: the exact count goes to the body.
#[test]
fn gap_inside_a_data_frame_keeps_framing() {
    let client = cat(&[
        &client_preface(),
        &headers(1, true, &plain_request("GET", "/", &[])),
    ]);
    let frame_bytes = data_frame(1, false, b"id: 1\n\nid: 2\n\nid: 3\n\n");
    let steps = [
        data(C, client),
        data(
            S,
            cat(&[
                &server_preface(),
                &headers(1, false, &plain_response("200", &[SSE])),
            ]),
        ),
        data(S, &frame_bytes[..9 + 7]),
        Step::Gap(S, 7),
        data(
            S,
            cat(&[&frame_bytes[9 + 14..], &data_frame(1, true, b"id: 4\n\n")]),
        ),
    ];
    let out = transcript(&steps);
    assert_eq!(
        summary(&out.events)[2..],
        [
            "body 1 id: 1\n\n",
            "gap 1 7",
            "body 1 id: 3\n\nid: 4\n\n",
            "end 1 Complete"
        ]
    );
    assert_eq!(out.stats.resyncs, 0);
}

/// A gap across frame headers: framing is found again and the stream goes on after a gap
/// of unknown length; the server's later header blocks are unreadable.
#[test]
fn gap_across_frames_resyncs_and_continues_the_stream() {
    let client = cat(&[
        &client_preface(),
        &headers(
            1,
            true,
            &plain_request("GET", "/", &[("last-event-id", "0")]),
        ),
        &headers(3, true, &plain_request("GET", "/x", &[])),
    ]);
    let steps = [
        data(C, client),
        data(
            S,
            cat(&[
                &server_preface(),
                &headers(1, false, &plain_response("200", &[SSE])),
            ]),
        ),
        data(S, data_frame(1, false, b"id: 1\n\n")),
        Step::Gap(S, 50),
        // The packet after the gap starts inside a frame: a tail of SSE text, then frames.
        data(
            S,
            cat(&[
                b"ta: lost\n\n",
                &data_frame(1, false, b"id: 9\n\n"),
                &data_frame(1, false, b"id: 10\n\n"),
            ]),
        ),
        data(S, headers(3, true, &plain_response("200", &[]))),
        Step::End(S, StreamEnd::Fin),
    ];
    let out = transcript(&steps);
    assert_eq!(
        summary(&out.events)[4..],
        [
            "anomaly Resynchronized",
            "gap 1 0",
            "body 1 id: 9\n\nid: 10\n\n",
            "end 3 LostSync",
            "end 1 Stream(Fin)",
        ]
    );
    assert_eq!(out.stats.resyncs, 1);
    assert_eq!(out.stats.bytes_skipped, 10);
    assert_eq!(out.stats.headers_unreadable, 1);
}

/// A gap inside a HEADERS block: framing survives, but the table cannot, so every later
/// block of that direction is unreadable — never guessed.
#[test]
fn gap_inside_a_header_block_makes_later_blocks_unreadable() {
    let mut first = Vec::new();
    henc::indexed(&mut first, 2);
    henc::literal(&mut first, Literal::Indexed, "last-event-id", "41", false);
    henc::literal_name(&mut first, Literal::Without, 4, "/one", false);
    let hf = headers(1, true, &first);
    let later = headers(3, true, &plain_request("GET", "/two", &[]));
    let steps = [
        data(C, cat(&[&client_preface(), &hf[..12]])),
        Step::Gap(C, 4),
        data(C, cat(&[&hf[16..], &later])),
        data(
            S,
            cat(&[
                &server_preface(),
                &headers(3, false, &plain_response("200", &[SSE])),
                &data_frame(3, true, b"id: 1\n\n"),
            ]),
        ),
    ];
    let out = transcript(&steps);
    assert_eq!(
        summary(&out.events),
        [
            "resp 3 200 text/event-stream",
            "body 3 id: 1\n\n",
            "end 3 Complete"
        ]
    );
    assert_eq!(out.stats.headers_unreadable, 2);
    assert_eq!(out.stats.resyncs, 0);
}

/// The server's response head cut by a gap: that exchange ends `LostSync`, with no response.
#[test]
fn lost_response_head_ends_the_exchange_lost_sync() {
    let client = cat(&[
        &client_preface(),
        &headers(1, true, &plain_request("GET", "/", &[])),
    ]);
    let resp = headers(1, false, &plain_response("200", &[SSE]));
    let steps = [
        data(C, client),
        data(S, cat(&[&server_preface(), &resp[..11]])),
        Step::Gap(S, 3),
        data(S, cat(&[&resp[14..], &data_frame(1, false, b"id: 1\n\n")])),
        Step::End(S, StreamEnd::Fin),
    ];
    let out = transcript(&steps);
    assert_eq!(
        summary(&out.events),
        ["req 1 GET / sid=- last=-", "end 1 LostSync"]
    );
}

/// A direction whose first bytes are missing is not abandoned: its frames are found, and
/// what its lost table would have told stays unread.
#[test]
fn direction_starting_with_a_gap_resyncs() {
    let client = cat(&[
        &client_preface(),
        &headers(1, true, &plain_request("GET", "/", &[])),
    ]);
    let steps = [
        data(C, client),
        Step::Gap(S, 100),
        data(
            S,
            cat(&[
                &headers(1, false, &plain_response("200", &[SSE])),
                &data_frame(1, false, b"id: 1\n\n"),
            ]),
        ),
    ];
    let out = transcript(&steps);
    assert!(!out.abandoned);
    assert_eq!(
        summary(&out.events),
        [
            "req 1 GET / sid=- last=-",
            "anomaly Resynchronized",
            "end 1 LostSync"
        ]
    );
}

#[test]
fn gap_in_an_encoded_body_ends_it_lost_sync() {
    let client = cat(&[
        &client_preface(),
        &headers(1, true, &plain_request("GET", "/", &[])),
    ]);
    let z = gzip(b"id: 1\n\nid: 2\n\n");
    let f = data_frame(1, true, &z);
    let steps = [
        data(C, client),
        data(
            S,
            cat(&[
                &server_preface(),
                &headers(
                    1,
                    false,
                    &plain_response("200", &[SSE, ("content-encoding", "gzip")]),
                ),
            ]),
        ),
        data(S, &f[..12]),
        Step::Gap(S, 2),
        data(S, &f[14..]),
    ];
    let out = transcript(&steps);
    assert_eq!(summary(&out.events)[2..], ["gap 1 0", "end 1 LostSync"]);
}

#[test]
fn oversized_frames_are_skipped_and_settings_raise_the_limit() {
    let client = cat(&[
        &CLIENT_PREFACE[..],
        &settings(&[(5, 32768)]),
        &headers(1, true, &plain_request("GET", "/", &[])),
        &headers(3, true, &plain_request("GET", "/", &[])),
    ]);
    let big = vec![b'x'; 20_000];
    let too_big = vec![b'y'; 40_000];
    let server = cat(&[
        &server_preface(),
        &headers(1, false, &plain_response("200", &[])),
        &data_frame(1, false, &big),
        &data_frame(1, false, &too_big),
        &data_frame(1, true, b"z"),
    ]);
    let out = transcript(&[data(C, client), data(S, server)]);
    let lines = summary(&out.events);
    assert!(lines[3] == format!("body 1 {}", "x".repeat(20_000)));
    assert_eq!(
        lines[4..],
        [
            "anomaly Http2Protocol",
            "gap 1 0",
            "body 1 z",
            "end 1 Complete"
        ]
    );
    assert_eq!(out.stats.protocol_errors, 1);
}

#[test]
fn oversized_header_block_is_too_large_and_later_blocks_unreadable() {
    let limits = Limits {
        max_header_bytes: 64,
        ..Limits::default()
    };
    let big = plain_request("GET", "/", &[("x-big", &"v".repeat(100))]);
    let client = cat(&[
        &client_preface(),
        &headers(1, true, &big),
        &headers(3, true, &plain_request("GET", "/small", &[])),
    ]);
    let out = transcript_with(&limits, Start::New, &[data(C, client)]);
    assert_eq!(summary(&out.events), ["anomaly HeaderTooLarge"]);
    assert_eq!(out.stats.headers_unreadable, 2);
}

#[test]
fn push_promises_are_counted_and_keep_the_table_in_step() {
    let client = cat(&[
        &client_preface(),
        &headers(1, true, &plain_request("GET", "/", &[])),
    ]);
    let mut promised = vec![0, 0, 0, 2];
    let mut pblock = Vec::new();
    henc::indexed(&mut pblock, 2);
    henc::literal(&mut pblock, Literal::Indexed, "x-pushed", "yes", false);
    promised.extend(&pblock);
    let mut resp = Vec::new();
    henc::indexed(&mut resp, 8);
    henc::indexed(&mut resp, 62);
    let server = cat(&[
        &server_preface(),
        &frame(FrameType::PushPromise, FLAG_END_HEADERS, 1, &promised),
        &headers(1, true, &resp),
        &headers(2, true, &plain_response("200", &[])),
    ]);
    let out = transcript(&[data(C, client), data(S, server)]);
    assert_eq!(
        summary(&out.events),
        ["req 1 GET / sid=- last=-", "resp 1 200 -", "end 1 Complete"]
    );
    assert_eq!(out.stats.push_promises, 1);
    assert_eq!(out.stats.headers_unreadable, 0);
}

#[test]
fn streams_are_capped_by_evicting_the_oldest() {
    let mut client = client_preface();
    let mut server = server_preface();
    let n = MAX_STREAMS as u32 + 10;
    for i in 0..n {
        let id = 2 * i + 1;
        client.extend(headers(id, true, &plain_request("GET", "/", &[])));
        server.extend(headers(id, false, &plain_response("200", &[])));
    }
    let mut conn = Http2Connection::new(&Limits::default());
    let mut rec = Recorder::default();
    conn.data(C, &client, mark_of(0), &mut rec);
    conn.data(S, &server, mark_of(1), &mut rec);
    assert!(conn.streams.len() <= MAX_STREAMS);
    assert_eq!(conn.stats().streams_evicted, 10);
    let evicted = rec
        .events
        .iter()
        .filter(|e| matches!(e, Event::BodyEnd(_, BodyEnd::Stream(StreamEnd::Evicted), _)))
        .count();
    // Requests evicted before their answer have no body to end.
    assert!(evicted <= 10);
}

#[test]
fn content_decoders_are_capped() {
    let mut client = client_preface();
    let mut server = server_preface();
    let n = MAX_DECODERS as u32 + 3;
    for i in 0..n {
        let id = 2 * i + 1;
        client.extend(headers(id, true, &plain_request("GET", "/", &[])));
        let gz = plain_response("200", &[SSE, ("content-encoding", "gzip")]);
        server.extend(headers(id, false, &gz));
    }
    let out = transcript(&[data(C, client), data(S, server)]);
    let evicted: Vec<String> = summary(&out.events)
        .into_iter()
        .filter(|l| l.starts_with("end"))
        .collect();
    assert_eq!(
        evicted,
        [
            "end 1 Stream(Evicted)",
            "end 3 Stream(Evicted)",
            "end 5 Stream(Evicted)"
        ]
    );
}

#[test]
fn a_flood_of_tiny_frames_stays_bounded() {
    let mut server = server_preface();
    for i in 0..200_000u32 {
        server.extend(frame(FrameType::Unknown(0xf0), 0, i, b""));
        server.extend(frame(FrameType::Ping, 0, 0, &[0; 8]));
    }
    let mut conn = Http2Connection::new(&Limits::default());
    let mut rec = Recorder::default();
    conn.data(C, &client_preface(), mark_of(0), &mut rec);
    conn.data(S, &server, mark_of(1), &mut rec);
    assert_eq!(conn.stats().frames.ping, 200_000);
    assert!(conn.streams.is_empty());
    assert!(rec.events.is_empty());
}

#[test]
fn hostile_lengths_do_not_allocate_ahead() {
    // A frame header announcing 16 MB, a HEADERS block with a huge string length: nothing
    // is allocated from either, and the connection goes on.
    let mut block = Vec::new();
    henc::integer(&mut block, 0x40, 6, 0);
    henc::integer(&mut block, 0, 7, 1 << 27);
    let client = cat(&[
        &client_preface(),
        &headers(1, true, &block),
        &[0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 3],
    ]);
    let out = transcript(&[data(C, client), Step::Gap(C, u64::MAX)]);
    assert_eq!(out.stats.protocol_errors, 1);
    assert_eq!(out.stats.headers_unreadable, 1);
}

// ----- properties -----

fn fragment() -> impl Strategy<Value = Vec<u8>> {
    let mut hb = Vec::new();
    henc::literal(&mut hb, Literal::Indexed, "last-event-id", "5", true);
    let pieces: Vec<Vec<u8>> = vec![
        client_preface(),
        server_preface(),
        headers(1, false, &plain_request("GET", "/", &[])),
        headers(3, true, &plain_request("POST", "/", &[])),
        headers(1, false, &plain_response("200", &[SSE])),
        headers(3, true, &plain_response("100", &[])),
        headers(5, false, &hb),
        headers(
            1,
            true,
            &plain_response("200", &[("content-encoding", "gzip")]),
        ),
        frame(FrameType::Headers, 0, 1, &hb),
        frame(FrameType::Continuation, FLAG_END_HEADERS, 1, &hb),
        data_frame(1, false, b"id: 1\n\n"),
        data_frame(3, true, b"x"),
        frame(FrameType::Data, FLAG_PADDED, 1, &padded(b"ab", 2)),
        rst(1, 8),
        goaway(1, 0),
        settings(&[(5, 20000)]),
        vec![0, 0],
    ];
    prop_oneof![
        4 => proptest::sample::select(pieces),
        1 => proptest::collection::vec(any::<u8>(), 0..24),
    ]
}

fn step_strategy() -> impl Strategy<Value = Step> {
    let dir = prop_oneof![Just(C), Just(S)];
    prop_oneof![
        8 => (dir.clone(), proptest::collection::vec(fragment(), 1..5))
            .prop_map(|(d, parts)| Step::Data(d, parts.concat())),
        1 => (dir, 0u64..40).prop_map(|(d, n)| Step::Gap(d, n)),
    ]
}

proptest! {
    #[test]
    fn any_transcript_gives_one_answer_and_keeps_the_contract(
        steps in proptest::collection::vec(step_strategy(), 0..12),
    ) {
        let limits = Limits { max_header_bytes: 96, ..Limits::default() };
        let mut steps = steps;
        steps.insert(0, data(S, server_preface()));
        steps.insert(0, data(C, client_preface()));
        steps.push(Step::End(C, StreamEnd::Fin));
        steps.push(Step::End(S, StreamEnd::Rst));
        transcript_with(&limits, Start::New, &steps);
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        a in proptest::collection::vec(any::<u8>(), 0..300),
        b in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let steps = [
            data(C, cat(&[&client_preface(), &a])),
            data(S, cat(&[&server_preface(), &b])),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ];
        transcript(&steps);
    }
}

// ----- a real capture -----

/// Forwards reassembled TCP bytes to the HTTP/2 parser.
struct H2Bridge<'a> {
    conn: &'a mut Http2Connection,
    rec: &'a mut Recorder,
}

impl crate::record::StreamSink for H2Bridge<'_> {
    fn data(&mut self, dir: Direction, bytes: &[u8], mark: Mark) {
        self.conn.data(dir, bytes, mark, self.rec);
    }
    fn gap(&mut self, dir: Direction, len: u64, mark: Mark) {
        self.conn.gap(dir, len, mark, self.rec);
    }
    fn end(&mut self, dir: Direction, how: StreamEnd, mark: Mark) {
        self.conn.end(dir, how, mark, self.rec);
    }
}

/// `fixtures/h2-real/py-h2c-prior.pcap` (hypercorn and the Python SDK client over h2c with
/// prior knowledge; see the fixture's `record.sh`) read through the crate's own capture
/// reader, packet decoder and TCP reassembly: every request head of the session comes out,
/// each on its stream, and the resume GET carries its `last-event-id`. Skipped while the
/// fixture is not in the tree.
#[test]
fn real_h2c_prior_knowledge_capture() {
    use crate::input::capture::CaptureReader;
    use crate::net::decode;
    use crate::net::tcp::{TcpConnection, TcpSegment};
    use std::collections::BTreeMap;

    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/h2-real/py-h2c-prior.pcap");
    let Ok(file) = std::fs::File::open(&path) else {
        eprintln!("skipped: {} is not in the tree", path.display());
        return;
    };
    let limits = Limits::default();
    let mut reader = CaptureReader::open(std::io::BufReader::new(file), 1 << 20).unwrap();
    // Per connection (keyed by the endpoints of its first packet): reassembly and parser.
    let mut conns: BTreeMap<
        (decode::Endpoint, decode::Endpoint),
        (TcpConnection, Http2Connection, Recorder),
    > = BTreeMap::new();
    let mut last = Mark::default();
    while let Some(p) = reader.next_packet().unwrap() {
        let Ok(tcp) = decode::decode(p.linktype, p.data) else {
            continue;
        };
        let mark = Mark::new(p.frame, p.time_ns);
        last = mark;
        let (key, dir) = if conns.contains_key(&(tcp.dst, tcp.src)) {
            ((tcp.dst, tcp.src), Direction::Reverse)
        } else {
            ((tcp.src, tcp.dst), Direction::Forward)
        };
        let (tcp_conn, h2, rec) = conns.entry(key).or_insert_with(|| {
            (
                TcpConnection::new(&limits),
                Http2Connection::new(&limits),
                Recorder::default(),
            )
        });
        let seg = TcpSegment {
            seq: tcp.seq,
            ack: tcp.ack,
            flags: tcp.flags,
            payload: tcp.payload,
            mark,
        };
        tcp_conn.segment(dir, &seg, &mut H2Bridge { conn: h2, rec });
    }
    let mut requests = Vec::new();
    for (_, (mut tcp_conn, mut h2, mut rec)) in conns {
        tcp_conn.finish(
            StreamEnd::CaptureEnd,
            last,
            &mut H2Bridge {
                conn: &mut h2,
                rec: &mut rec,
            },
        );
        assert!(!h2.is_abandoned());
        assert_eq!(h2.stats().headers_unreadable, 0);
        assert_eq!(h2.stats().resyncs, 0);
        check_contract(&rec.events, true);
        for event in rec.events {
            if let Event::Request(head) = event {
                assert_eq!(Some(head.exchange), head.h2_stream);
                assert!(head.exchange % 2 == 1);
                requests.push(head);
            }
        }
    }
    assert!(
        requests
            .iter()
            .any(|r| r.method == "POST" && r.target == "/mcp")
    );
    assert!(
        requests
            .iter()
            .any(|r| r.method == "GET" && r.last_event_id.is_some() && r.session_id.is_some()),
        "a resume GET with its last-event-id: {requests:#?}"
    );
}

/// A frame skipped for its length (padded, but too short for the pad length) ends where a
/// HEADERS frame begins, in one call or at a cut: the request's head begins where the HEADERS
/// frame's first byte came, whichever way the bytes were cut (the fuzz target once found it
/// dated from the skipped frame's first byte when both came in one call).
#[test]
fn a_head_after_a_skipped_frame_begins_at_its_own_first_byte() {
    let skipped = frame(FrameType::Data, FLAG_PADDED, 1, b"");
    let out = transcript(&[
        data(C, client_preface()),
        data(S, server_preface()),
        data(C, &skipped[..8]),
        data(
            C,
            cat(&[
                &skipped[8..],
                &headers(3, true, &plain_request("GET", "/mcp", &[])),
            ]),
        ),
    ]);
    let first: Vec<(Mark, Mark)> = out
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Request(h) => Some((h.first, h.complete)),
            _ => None,
        })
        .collect();
    assert_eq!(first, [(mark_of(3), mark_of(3))]);
}

/// A gap that ends exactly where its frame ends finishes the frame at the gap: the stream's
/// end (its `END_STREAM` was in the frame's header) is told at the gap's frame, not at the
/// direction's next bytes (the fuzz target once found a frame finished by a gap ended at
/// whichever call came next, so that an empty call moved it).
#[test]
fn a_frame_finished_by_a_gap_ends_at_the_gap() {
    let frame_bytes = data_frame(1, true, b"id: 1\n\nid: 2\n\n");
    let padded_frame = frame(
        FrameType::Data,
        FLAG_PADDED | FLAG_END_STREAM,
        3,
        &padded(b"id: 7\n\n", 5),
    );
    let ends = |steps: &[Step]| -> Vec<(u32, Mark)> {
        transcript(steps)
            .events
            .iter()
            .filter_map(|e| match e {
                Event::BodyEnd(x, _, m) => Some((*x, *m)),
                _ => None,
            })
            .collect()
    };
    let start = [
        data(
            C,
            cat(&[
                &client_preface(),
                &headers(1, true, &plain_request("GET", "/", &[])),
                &headers(3, true, &plain_request("GET", "/", &[])),
            ]),
        ),
        data(
            S,
            cat(&[
                &server_preface(),
                &headers(1, false, &plain_response("200", &[SSE])),
                &headers(3, false, &plain_response("200", &[SSE])),
            ]),
        ),
    ];
    // The content's last bytes lost, then (a step later) the other stream's frame, its
    // padding lost at the end.
    let mut steps = start.to_vec();
    steps.extend([
        data(S, &frame_bytes[..9 + 7]),
        Step::Gap(S, frame_bytes.len() as u64 - 9 - 7),
        data(S, &padded_frame[..padded_frame.len() - 3]),
        Step::Gap(S, 3),
        data(S, frame(FrameType::Ping, 0, 0, &[0; 8])),
    ]);
    assert_eq!(ends(&steps), [(1, mark_of(3)), (3, mark_of(5))]);
    // Without anything after the gaps, the same.
    steps.pop();
    assert_eq!(ends(&steps), [(1, mark_of(3)), (3, mark_of(5))]);
}
