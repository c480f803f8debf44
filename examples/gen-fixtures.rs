//! Writes the synthetic fixture captures and their expected findings.
//!
//! Usage: `cargo run --example gen-fixtures -- <outdir>` (the checked-in set lives in
//! `fixtures/gen`). For every fixture it writes `<name>.pcap` or `<name>.pcapng`,
//! `<name>.expect.jsonl` (one line per resume request, in report order), and a `README.md`
//! listing what each fixture exercises. Every run writes the same bytes.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use mcp_resume_audit_synth::{
    BASE_TIME_NS, ByteOrder, Capture, ConnClose, ConnSpec, EventField, EventStream, ExchangeKind,
    ExpectedResume, Fate, FlowSpec, HeaderCase, Interleave, Ipv6Extension, LineEnd, LinkFraming,
    PacketWriter, PcapFormat, PcapWriter, PcapngWriter, Resume, ResumeResponse, Scenario,
    SessionSpec, SseEvent, SseStyle, StreamClose, TsResolution, Vlan, write_expectations,
};

/// Time between consecutive packets: not a whole number of microseconds, so nanosecond files
/// carry sub-microsecond digits and microsecond files truncate them.
const STEP_NS: u64 = 57_250;

type Out<'a> = &'a mut dyn Write;

struct Fixture {
    name: &'static str,
    pcapng: bool,
    about: &'static str,
    build: fn(Out<'_>) -> io::Result<Vec<ExpectedResume>>,
}

fn main() -> io::Result<()> {
    let dir: PathBuf = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("fixtures/gen"));
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
    let ext = if f.pcapng { "pcapng" } else { "pcap" };
    let mut capture = BufWriter::new(File::create(dir.join(format!("{}.{ext}", f.name)))?);
    let expected = (f.build)(&mut capture)?;
    capture.flush()?;
    let mut lines = BufWriter::new(File::create(dir.join(format!("{}.expect.jsonl", f.name)))?);
    write_expectations(&mut lines, &expected)?;
    lines.flush()
}

fn write_readme(dir: &Path, fixtures: &[Fixture]) -> io::Result<()> {
    let mut r = BufWriter::new(File::create(dir.join("README.md"))?);
    writeln!(r, "# Synthetic fixtures")?;
    writeln!(r)?;
    writeln!(
        r,
        "Produced by `cargo run --example gen-fixtures -- fixtures/gen` (source: \
         `examples/gen-fixtures.rs` over `src/synth.rs`); every run writes the same bytes. \
         Do not edit these files by hand: change the generator and run it again."
    )?;
    writeln!(r)?;
    writeln!(
        r,
        "Each `<name>.pcap` / `<name>.pcapng` has a `<name>.expect.jsonl`: one JSON object per \
         request carrying `Last-Event-ID`, in report order (request time, then frame), with the \
         keys `session_id`, `verdict`, `last_event_id`, `first_event_id`, `tcp_stream` \
         (Wireshark `tcp.stream`) and `request_frame` (1-based frame holding the request's first \
         byte). Verdicts come from the scenario definition, not from any analyzer. A \
         `capture_incomplete` verdict has `first_event_id` null even when later ids were \
         captured, because the true first id is not in the capture."
    )?;
    writeln!(r)?;
    writeln!(
        r,
        "Unless stated: legacy pcap, little-endian, microseconds, Ethernet, IPv4, client \
         192.168.56.10, server 192.168.56.1:8000, packets 57.25 µs apart from \
         2026-11-09T10:00:00Z, lowercase header names, LF line ends, the session initialized on \
         its own connection (`initialize` answered by an SSE stream with a priming event, then \
         `notifications/initialized`), and the resume GET on a new connection."
    )?;
    writeln!(r)?;
    writeln!(r, "| fixture | exercises |")?;
    writeln!(r, "|---|---|")?;
    for f in fixtures {
        let ext = if f.pcapng { "pcapng" } else { "pcap" };
        writeln!(r, "| `{}.{ext}` | {} |", f.name, f.about)?;
    }
    r.flush()
}

fn catalog() -> Vec<Fixture> {
    vec![
        Fixture {
            name: "verdict-correct",
            pcapng: false,
            about: "`correct`: Last-Event-ID 4417, stream resumes at 4418, ends with the last chunk.",
            build: verdict_correct,
        },
        Fixture {
            name: "verdict-gap-skipped",
            pcapng: false,
            about: "`gap_skipped`: Last-Event-ID 4417, stream resumes at 4430; the client resets the connection.",
            build: verdict_gap_skipped,
        },
        Fixture {
            name: "verdict-replayed-from-zero",
            pcapng: false,
            about: "`replayed`: Last-Event-ID 4417, stream restarts at 0; the server closes with FIN (no last chunk).",
            build: verdict_replayed_from_zero,
        },
        Fixture {
            name: "verdict-replayed-partial",
            pcapng: false,
            about: "`replayed`: partial replay, first id equals Last-Event-ID (4417).",
            build: verdict_replayed_partial,
        },
        Fixture {
            name: "verdict-rejected-400",
            pcapng: false,
            about: "`rejected`: the resume is answered `400 Bad Request` with a JSON-RPC error (Go SDK behaviour).",
            build: verdict_rejected_400,
        },
        Fixture {
            name: "verdict-rejected-405",
            pcapng: false,
            about: "`rejected`: the resume is answered `405 Method Not Allowed` (spec 2026-07-28 has no resumable streams).",
            build: verdict_rejected_405,
        },
        Fixture {
            name: "verdict-unverifiable-client-aborted",
            pcapng: false,
            about: "`unverifiable`: 200 event stream, no event yet when the client resets the connection; nothing proves the stream was empty.",
            build: verdict_client_aborted,
        },
        Fixture {
            name: "verdict-empty",
            pcapng: false,
            about: "`empty`: `200` event stream with no event at all, then the server's FIN.",
            build: verdict_empty,
        },
        Fixture {
            name: "verdict-unverifiable",
            pcapng: false,
            about: "`unverifiable`: opaque ids (`sA_1732_x9f` sent, `sA_1733_k2m` first); canonical header names, `event:` before `id:`.",
            build: verdict_unverifiable,
        },
        Fixture {
            name: "verdict-incomplete-first-id-dropped",
            pcapng: false,
            about: "`capture_incomplete`: the segment carrying the first event (id 4418) is missing from the capture; ids 4419 and 4420 follow.",
            build: verdict_incomplete_first_id_dropped,
        },
        Fixture {
            name: "verdict-incomplete-capture-ends",
            pcapng: false,
            about: "`capture_incomplete`: `200` event-stream head, then the capture ends before any event.",
            build: verdict_incomplete_capture_ends,
        },
        Fixture {
            name: "verdict-incomplete-no-response",
            pcapng: false,
            about: "`capture_incomplete`: the capture ends right after the resume request (the server's ACK is the last packet).",
            build: verdict_incomplete_no_response,
        },
        Fixture {
            name: "pcap-be-vlan",
            pcapng: false,
            about: "Big-endian pcap (microseconds); Ethernet with one 802.1Q tag (VLAN 42). `correct`.",
            build: pcap_be_vlan,
        },
        Fixture {
            name: "pcap-ns-qinq",
            pcapng: false,
            about: "Nanosecond pcap (magic a1b23c4d); Ethernet QinQ (802.1ad 100 outer, 802.1Q 42 inner). `gap_skipped`.",
            build: pcap_ns_qinq,
        },
        Fixture {
            name: "pcap-be-ns-sll",
            pcapng: false,
            about: "Big-endian nanosecond pcap; Linux cooked capture v1 (link type 113). `correct`.",
            build: pcap_be_ns_sll,
        },
        Fixture {
            name: "pcap-sll2",
            pcapng: false,
            about: "Linux cooked capture v2 (link type 276, interface index 3). `replayed`.",
            build: pcap_sll2,
        },
        Fixture {
            name: "pcap-null-loopback",
            pcapng: false,
            about: "BSD loopback (link type 0): `initialize` over IPv4 127.0.0.1 (family 2), the resume over IPv6 ::1 (family 30). `correct`.",
            build: pcap_null_loopback,
        },
        Fixture {
            name: "pcap-raw-ipv4",
            pcapng: false,
            about: "Raw IP (link type 101) carrying IPv4. `correct`.",
            build: pcap_raw_ipv4,
        },
        Fixture {
            name: "pcap-raw-ipv6",
            pcapng: false,
            about: "Raw IPv6 (link type 229), fd00:56::10 → [fd00:56::1]:8000. `correct`.",
            build: pcap_raw_ipv6,
        },
        Fixture {
            name: "ipv6-ext-header",
            pcapng: false,
            about: "Ethernet IPv6 with an extension header before TCP: Hop-by-Hop Options on the `initialize` connection, Destination Options on the resume connection. `correct`.",
            build: ipv6_ext_header,
        },
        Fixture {
            name: "pcapng-two-interfaces",
            pcapng: true,
            about: "pcapng, two interfaces: 0 = Ethernet, microseconds (no if_tsresol); 1 = raw IPv4 (link type 228), nanoseconds (if_tsresol 9). `initialize` on 0, the resume on 1. `correct`. (libpcap-based tools such as tcpdump refuse a link type that differs per interface; Wireshark's reader, e.g. `capinfos`, reads it.)",
            build: pcapng_two_interfaces,
        },
        Fixture {
            name: "pcapng-spb",
            pcapng: true,
            about: "pcapng: the `initialize` connection in simple packet blocks (no timestamps), the resume connection in enhanced packet blocks. `correct`.",
            build: pcapng_spb,
        },
        Fixture {
            name: "pcapng-two-sections",
            pcapng: true,
            about: "pcapng with two sections: little-endian (SLL2, nanoseconds) holding `initialize`, then big-endian (Ethernet, microseconds) holding the resume; frame numbers and tcp.stream run on across sections. `correct`. (libpcap-based tools such as tcpdump fail at the big-endian section; Wireshark's reader, e.g. `capinfos`, reads it.)",
            build: pcapng_two_sections,
        },
        Fixture {
            name: "tcp-reordered",
            pcapng: false,
            about: "Reordering: the resume request, cut in 64-byte segments, has its first two segments swapped (request_frame is the later frame that holds the first byte); the first event's segment arrives after the second's. `correct`.",
            build: tcp_reordered,
        },
        Fixture {
            name: "tcp-retransmission",
            pcapng: false,
            about: "Retransmissions: the resume request and the second event are duplicated; the first event is retransmitted overlapping (first half, then from its first quarter to its end). `correct`.",
            build: tcp_retransmission,
        },
        Fixture {
            name: "tcp-seq-wraparound",
            pcapng: false,
            about: "Sequence numbers wrap past 2^32 inside the request and the response on both connections. `correct`.",
            build: tcp_seq_wraparound,
        },
        Fixture {
            name: "tcp-mid-connection",
            pcapng: false,
            about: "The capture starts mid-connection: no handshake, no `initialize`; the first packet is the resume GET. `correct`.",
            build: tcp_mid_connection,
        },
        Fixture {
            name: "tcp-port-reuse",
            pcapng: false,
            about: "Port reuse: two connections on the same 4-tuple (SYN again after FIN), tcp.stream 0 and 1, a resume on each (`correct`, then `replayed`).",
            build: tcp_port_reuse,
        },
        Fixture {
            name: "tcp-keep-alive",
            pcapng: false,
            about: "Keep-alive: `initialize` POST, `notifications/initialized` POST and the resume GET on one connection (TypeScript-client style, canonical header names). `correct`.",
            build: tcp_keep_alive,
        },
        Fixture {
            name: "sse-crlf",
            pcapng: false,
            about: "SSE lines end in CRLF with `event: message` after `id:` (Python SDK style). `correct`.",
            build: sse_crlf,
        },
        Fixture {
            name: "sse-event-before-id",
            pcapng: false,
            about: "SSE `event: message` before `id:` (TypeScript SDK style), LF. `gap_skipped`.",
            build: sse_event_before_id,
        },
        Fixture {
            name: "sse-gzip",
            pcapng: false,
            about: "The resumed stream has `Content-Encoding: gzip`, flushed after every event (each chunk ends in a sync flush), with the gzip trailer before the last chunk. `correct`.",
            build: sse_gzip,
        },
        Fixture {
            name: "sse-priming-resume",
            pcapng: false,
            about: "The resumed stream starts with a priming event (`id: 4418` and an empty `data:`), then 4419 and 4420. `correct` with first id 4418.",
            build: sse_priming_resume,
        },
        Fixture {
            name: "mixed",
            pcapng: false,
            about: "Seven sessions on concurrent, interleaved connections: `correct` (CRLF, reset), `replayed` (keep-alive, canonical), `rejected` 404, two `empty` reconnects with the same Last-Event-ID, `unverifiable` uuid ids without Mcp-Session-Id (session_id null), `gap_skipped` on a stream still open at capture end, and `capture_incomplete` (first event dropped).",
            build: mixed,
        },
    ]
}

// ---------------------------------------------------------------------------------------------
// Building blocks
// ---------------------------------------------------------------------------------------------

const CLIENT_V4: Ipv4Addr = Ipv4Addr::new(192, 168, 56, 10);
const SERVER_V4: Ipv4Addr = Ipv4Addr::new(192, 168, 56, 1);
const CLIENT_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x56, 0, 0, 0, 0, 0, 0x10);
const SERVER_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x56, 0, 0, 0, 0, 0, 1);
const SERVER_PORT: u16 = 8000;

/// A connection from `client:port` to `server:8000`, with ISNs derived from the port.
fn flow_between(interface: u32, client: IpAddr, server: IpAddr, port: u16) -> FlowSpec {
    let mut f = FlowSpec::new(
        interface,
        mcp_resume_audit_synth::Endpoint::new(client, port),
        mcp_resume_audit_synth::Endpoint::new(server, SERVER_PORT),
    );
    let p = u32::from(port);
    f.client_isn = p.wrapping_mul(2_654_435_761);
    f.server_isn = p.wrapping_mul(2_246_822_519) ^ 0x5bd1_e995;
    f
}

fn flow(interface: u32, port: u16) -> FlowSpec {
    flow_between(interface, CLIENT_V4.into(), SERVER_V4.into(), port)
}

fn conn(flow: FlowSpec) -> ConnSpec {
    ConnSpec::new(flow)
}

fn initialize() -> ExchangeKind {
    ExchangeKind::Initialize {
        priming_id: Some("0".to_string()),
        result_id: Some("1".to_string()),
    }
}

/// `initialize` and `notifications/initialized` on `init`, then `resume` on `resume_conn`.
fn session_two_conns(
    sid: &str,
    init: FlowSpec,
    resume_conn: FlowSpec,
    resume: Resume,
) -> SessionSpec {
    SessionSpec::new(Some(sid), vec![conn(init), conn(resume_conn)])
        .exchange(0, initialize())
        .exchange(0, ExchangeKind::InitializedNotification)
        .exchange(1, ExchangeKind::Resume(resume))
}

fn basic_session(sid: &str, interface: u32, port: u16, resume: Resume) -> SessionSpec {
    session_two_conns(
        sid,
        flow(interface, port),
        flow(interface, port + 1),
        resume,
    )
}

fn stream(ids: &[&str], close: StreamClose) -> ResumeResponse {
    ResumeResponse::Stream(EventStream::with_ids(ids, close))
}

fn pcap_capture(
    out: Out<'_>,
    order: ByteOrder,
    resolution: TsResolution,
    framing: LinkFraming,
) -> io::Result<(Capture<PcapWriter<Out<'_>>>, u32)> {
    let writer = PcapWriter::new(out, PcapFormat::new(order, resolution, framing.link_type()))?;
    let mut cap = Capture::new(writer, BASE_TIME_NS, STEP_NS);
    let iface = cap.add_interface(framing, resolution)?;
    Ok((cap, iface))
}

const ETHERNET: LinkFraming = LinkFraming::Ethernet {
    vlan: Vlan::Untagged,
};

fn run<W: PacketWriter>(
    cap: &mut Capture<W>,
    sessions: &[SessionSpec],
    interleave: Interleave,
) -> io::Result<Vec<ExpectedResume>> {
    let mut scenario = Scenario::new();
    for s in sessions {
        scenario.add_session(s)?;
    }
    scenario.run(cap, interleave)
}

/// One session on an Ethernet pcap (little-endian, microseconds).
fn simple(out: Out<'_>, sid: &str, resume: Resume) -> io::Result<Vec<ExpectedResume>> {
    let (mut cap, iface) = pcap_capture(out, ByteOrder::Little, TsResolution::Micro, ETHERNET)?;
    run(
        &mut cap,
        &[basic_session(sid, iface, 50_000, resume)],
        Interleave::Sequential,
    )
}

// ---------------------------------------------------------------------------------------------
// One fixture per verdict
// ---------------------------------------------------------------------------------------------

fn verdict_correct(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let resume = Resume::new(
        "4417",
        stream(&["4418", "4419", "4420"], StreamClose::TerminalChunk),
    );
    simple(out, "sess-correct-7f3a", resume)
}

fn verdict_gap_skipped(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let resume = Resume::new("4417", stream(&["4430", "4431"], StreamClose::ClientReset));
    simple(out, "sess-gap-91c2", resume)
}

fn verdict_replayed_from_zero(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let resume = Resume::new(
        "4417",
        stream(&["0", "1", "2", "3"], StreamClose::ServerFin),
    );
    simple(out, "sess_a91c04d2", resume)
}

fn verdict_replayed_partial(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let resume = Resume::new(
        "4417",
        stream(&["4417", "4418"], StreamClose::TerminalChunk),
    );
    simple(out, "sess-partial-22be", resume)
}

fn verdict_rejected_400(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    simple(
        out,
        "sess-400-5d10",
        Resume::new("17", ResumeResponse::Status(400)),
    )
}

fn verdict_rejected_405(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    simple(
        out,
        "sess-405-0c4e",
        Resume::new("17", ResumeResponse::Status(405)),
    )
}

fn verdict_empty(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    simple(
        out,
        "sess-empty-e3f1",
        Resume::new("4417", stream(&[], StreamClose::ServerFin)),
    )
}

fn verdict_client_aborted(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    simple(
        out,
        "sess-abort-0d2c",
        Resume::new("4417", stream(&[], StreamClose::ClientReset)),
    )
}

fn verdict_unverifiable(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let (mut cap, iface) = pcap_capture(out, ByteOrder::Little, TsResolution::Micro, ETHERNET)?;
    let mut s = EventStream::with_ids(&["sA_1733_k2m", "sA_1734_p0q"], StreamClose::ClientReset);
    s.style = TYPESCRIPT_STYLE;
    let resume = Resume::new("sA_1732_x9f", ResumeResponse::Stream(s));
    let mut session = basic_session(
        "5d0e7c1a-2b7f-4f0e-9a57-0d9c1f0b6e21",
        iface,
        50_000,
        resume,
    );
    session.header_case = HeaderCase::Canonical;
    session.style = TYPESCRIPT_STYLE;
    run(&mut cap, &[session], Interleave::Sequential)
}

fn verdict_incomplete_first_id_dropped(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let mut s = EventStream::with_ids(&["4418", "4419", "4420"], StreamClose::TerminalChunk);
    s.events[0].fate = Fate::Drop;
    simple(
        out,
        "sess-drop-4b8d",
        Resume::new("4417", ResumeResponse::Stream(s)),
    )
}

fn verdict_incomplete_capture_ends(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    simple(
        out,
        "sess-open-a0b1",
        Resume::new("4417", stream(&[], StreamClose::Open)),
    )
}

fn verdict_incomplete_no_response(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    simple(
        out,
        "sess-noresp-61f7",
        Resume::new("4417", ResumeResponse::CaptureEnds),
    )
}

// ---------------------------------------------------------------------------------------------
// Formats and link types
// ---------------------------------------------------------------------------------------------

fn correct_resume() -> Resume {
    Resume::new("41", stream(&["42", "43"], StreamClose::TerminalChunk))
}

fn pcap_be_vlan(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let framing = LinkFraming::Ethernet {
        vlan: Vlan::Single(42),
    };
    let (mut cap, iface) = pcap_capture(out, ByteOrder::Big, TsResolution::Micro, framing)?;
    let s = basic_session("sess-vlan-1", iface, 50_100, correct_resume());
    run(&mut cap, &[s], Interleave::Sequential)
}

fn pcap_ns_qinq(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let framing = LinkFraming::Ethernet {
        vlan: Vlan::QinQ {
            outer: 100,
            inner: 42,
        },
    };
    let (mut cap, iface) = pcap_capture(out, ByteOrder::Little, TsResolution::Nano, framing)?;
    let resume = Resume::new("41", stream(&["45", "46"], StreamClose::TerminalChunk));
    let s = basic_session("sess-qinq-1", iface, 50_200, resume);
    run(&mut cap, &[s], Interleave::Sequential)
}

fn pcap_be_ns_sll(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let (mut cap, iface) = pcap_capture(
        out,
        ByteOrder::Big,
        TsResolution::Nano,
        LinkFraming::LinuxSll,
    )?;
    let s = basic_session("sess-sll-1", iface, 50_300, correct_resume());
    run(&mut cap, &[s], Interleave::Sequential)
}

fn pcap_sll2(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let framing = LinkFraming::LinuxSll2 { interface_index: 3 };
    let (mut cap, iface) = pcap_capture(out, ByteOrder::Little, TsResolution::Micro, framing)?;
    let resume = Resume::new("41", stream(&["1", "2"], StreamClose::ServerFin));
    let s = basic_session("sess-sll2-1", iface, 50_400, resume);
    run(&mut cap, &[s], Interleave::Sequential)
}

fn pcap_null_loopback(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let framing = LinkFraming::Null { ipv6_family: 30 };
    let (mut cap, iface) = pcap_capture(out, ByteOrder::Little, TsResolution::Micro, framing)?;
    let init = flow_between(
        iface,
        Ipv4Addr::LOCALHOST.into(),
        Ipv4Addr::LOCALHOST.into(),
        50_500,
    );
    let resume_conn = flow_between(
        iface,
        Ipv6Addr::LOCALHOST.into(),
        Ipv6Addr::LOCALHOST.into(),
        50_501,
    );
    let s = session_two_conns("sess-null-1", init, resume_conn, correct_resume());
    run(&mut cap, &[s], Interleave::Sequential)
}

fn pcap_raw_ipv4(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let (mut cap, iface) = pcap_capture(
        out,
        ByteOrder::Little,
        TsResolution::Micro,
        LinkFraming::RawIp,
    )?;
    let s = basic_session("sess-raw4-1", iface, 50_600, correct_resume());
    run(&mut cap, &[s], Interleave::Sequential)
}

fn pcap_raw_ipv6(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let (mut cap, iface) = pcap_capture(
        out,
        ByteOrder::Little,
        TsResolution::Micro,
        LinkFraming::RawIpv6,
    )?;
    let init = flow_between(iface, CLIENT_V6.into(), SERVER_V6.into(), 50_700);
    let resume_conn = flow_between(iface, CLIENT_V6.into(), SERVER_V6.into(), 50_701);
    let s = session_two_conns("sess-raw6-1", init, resume_conn, correct_resume());
    run(&mut cap, &[s], Interleave::Sequential)
}

fn ipv6_ext_header(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let (mut cap, iface) = pcap_capture(out, ByteOrder::Little, TsResolution::Micro, ETHERNET)?;
    let mut init = flow_between(iface, CLIENT_V6.into(), SERVER_V6.into(), 50_800);
    init.ipv6_extension = Ipv6Extension::HopByHop;
    let mut resume_conn = flow_between(iface, CLIENT_V6.into(), SERVER_V6.into(), 50_801);
    resume_conn.ipv6_extension = Ipv6Extension::DestinationOptions;
    let s = session_two_conns("sess-v6ext-1", init, resume_conn, correct_resume());
    run(&mut cap, &[s], Interleave::Sequential)
}

fn pcapng_capture(out: Out<'_>, order: ByteOrder) -> io::Result<Capture<PcapngWriter<Out<'_>>>> {
    Ok(Capture::new(
        PcapngWriter::new(out, order)?,
        BASE_TIME_NS,
        STEP_NS,
    ))
}

/// The session is split in two parts run one after the other: `initialize` (no resume), then
/// the resume (same session id) on its own connection.
fn init_only(sid: &str, f: FlowSpec) -> SessionSpec {
    SessionSpec::new(Some(sid), vec![conn(f)])
        .exchange(0, initialize())
        .exchange(0, ExchangeKind::InitializedNotification)
}

fn resume_only(sid: &str, f: FlowSpec, resume: Resume) -> SessionSpec {
    SessionSpec::new(Some(sid), vec![conn(f)]).exchange(0, ExchangeKind::Resume(resume))
}

fn pcapng_two_interfaces(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let mut cap = pcapng_capture(out, ByteOrder::Little)?;
    let eth = cap.add_interface(ETHERNET, TsResolution::Micro)?;
    let raw4 = cap.add_interface(LinkFraming::RawIpv4, TsResolution::Nano)?;
    let s = session_two_conns(
        "sess-ng2if-1",
        flow(eth, 51_000),
        flow(raw4, 51_001),
        correct_resume(),
    );
    run(&mut cap, &[s], Interleave::Sequential)
}

fn pcapng_spb(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let sid = "sess-spb-1";
    let mut cap = pcapng_capture(out, ByteOrder::Little)?;
    let eth = cap.add_interface(ETHERNET, TsResolution::Micro)?;
    cap.writer_mut().set_simple_packets(true);
    let mut expected = run(
        &mut cap,
        &[init_only(sid, flow(eth, 51_100))],
        Interleave::Sequential,
    )?;
    cap.writer_mut().set_simple_packets(false);
    cap.advance(150_000_000);
    let s = resume_only(sid, flow(eth, 51_101), correct_resume());
    expected.extend(run(&mut cap, &[s], Interleave::Sequential)?);
    Ok(expected)
}

fn pcapng_two_sections(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let sid = "sess-2sec-1";
    let mut cap = pcapng_capture(out, ByteOrder::Little)?;
    let sll2 = cap.add_interface(
        LinkFraming::LinuxSll2 { interface_index: 2 },
        TsResolution::Nano,
    )?;
    let mut expected = run(
        &mut cap,
        &[init_only(sid, flow(sll2, 51_200))],
        Interleave::Sequential,
    )?;
    cap.new_section(ByteOrder::Big)?;
    let eth = cap.add_interface(ETHERNET, TsResolution::Micro)?;
    cap.advance(150_000_000);
    let s = resume_only(sid, flow(eth, 51_201), correct_resume());
    expected.extend(run(&mut cap, &[s], Interleave::Sequential)?);
    Ok(expected)
}

// ---------------------------------------------------------------------------------------------
// TCP
// ---------------------------------------------------------------------------------------------

fn tcp_reordered(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let (mut cap, iface) = pcap_capture(out, ByteOrder::Little, TsResolution::Micro, ETHERNET)?;
    let mut s = EventStream::with_ids(&["4418", "4419", "4420"], StreamClose::TerminalChunk);
    s.events[0].fate = Fate::SwapWithNext;
    let mut resume = Resume::new("4417", ResumeResponse::Stream(s));
    resume.request_fate = Fate::SwapWithNext;
    let mut resume_conn = flow(iface, 51_301);
    resume_conn.mss = 64;
    let session = session_two_conns("sess-reorder-1", flow(iface, 51_300), resume_conn, resume);
    run(&mut cap, &[session], Interleave::Sequential)
}

fn tcp_retransmission(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let (mut cap, iface) = pcap_capture(out, ByteOrder::Little, TsResolution::Micro, ETHERNET)?;
    let mut s = EventStream::with_ids(&["4418", "4419", "4420"], StreamClose::TerminalChunk);
    s.events[0].fate = Fate::OverlapRetransmit;
    s.events[1].fate = Fate::Duplicate;
    let mut resume = Resume::new("4417", ResumeResponse::Stream(s));
    resume.request_fate = Fate::Duplicate;
    let session = basic_session("sess-retx-1", iface, 51_400, resume);
    run(&mut cap, &[session], Interleave::Sequential)
}

fn tcp_seq_wraparound(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let (mut cap, iface) = pcap_capture(out, ByteOrder::Little, TsResolution::Micro, ETHERNET)?;
    let mut init = flow(iface, 51_500);
    init.client_isn = u32::MAX - 100;
    init.server_isn = u32::MAX - 150;
    let mut resume_conn = flow(iface, 51_501);
    resume_conn.client_isn = u32::MAX - 60;
    resume_conn.server_isn = u32::MAX - 300;
    let resume = Resume::new(
        "4417",
        stream(&["4418", "4419", "4420"], StreamClose::TerminalChunk),
    );
    let session = session_two_conns("sess-wrap-1", init, resume_conn, resume);
    run(&mut cap, &[session], Interleave::Sequential)
}

fn tcp_mid_connection(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let (mut cap, iface) = pcap_capture(out, ByteOrder::Little, TsResolution::Micro, ETHERNET)?;
    let mut c = conn(flow(iface, 51_600));
    c.handshake = false;
    let resume = Resume::new("4417", stream(&["4418", "4419"], StreamClose::ClientReset));
    let session =
        SessionSpec::new(Some("sess-mid-1"), vec![c]).exchange(0, ExchangeKind::Resume(resume));
    run(&mut cap, &[session], Interleave::Sequential)
}

fn tcp_port_reuse(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let (mut cap, iface) = pcap_capture(out, ByteOrder::Little, TsResolution::Micro, ETHERNET)?;
    let first = flow(iface, 51_700);
    let mut second = first.clone();
    // A new incarnation starts above the old one's sequence space, as TIME-WAIT reuse needs.
    second.client_isn = first.client_isn.wrapping_add(1_000_000);
    second.server_isn = first.server_isn.wrapping_add(1_000_000);
    let r1 = Resume::new("10", stream(&["11", "12"], StreamClose::TerminalChunk));
    let r2 = Resume::new("12", stream(&["5", "6"], StreamClose::ServerFin));
    let session = SessionSpec::new(Some("sess-reuse-1"), vec![conn(first), conn(second)])
        .exchange(0, initialize())
        .exchange(0, ExchangeKind::Resume(r1))
        .exchange(1, ExchangeKind::Resume(r2));
    run(&mut cap, &[session], Interleave::Sequential)
}

fn tcp_keep_alive(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let (mut cap, iface) = pcap_capture(out, ByteOrder::Little, TsResolution::Micro, ETHERNET)?;
    let mut s = EventStream::with_ids(&["4418", "4419"], StreamClose::TerminalChunk);
    s.style.event_field = EventField::BeforeId;
    let mut session = SessionSpec::new(Some("sess-keepalive-1"), vec![conn(flow(iface, 51_800))])
        .exchange(0, initialize())
        .exchange(0, ExchangeKind::InitializedNotification)
        .exchange(
            0,
            ExchangeKind::Resume(Resume::new("4417", ResumeResponse::Stream(s))),
        );
    session.header_case = HeaderCase::Canonical;
    session.style.event_field = EventField::BeforeId;
    run(&mut cap, &[session], Interleave::Sequential)
}

// ---------------------------------------------------------------------------------------------
// SSE details
// ---------------------------------------------------------------------------------------------

const PYTHON_STYLE: SseStyle = SseStyle {
    line_end: LineEnd::CrLf,
    event_field: EventField::AfterId,
};
const TYPESCRIPT_STYLE: SseStyle = SseStyle {
    line_end: LineEnd::Lf,
    event_field: EventField::BeforeId,
};

fn styled(ids: &[&str], style: SseStyle, close: StreamClose) -> EventStream {
    let mut s = EventStream::with_ids(ids, close);
    s.style = style;
    s
}

fn sse_crlf(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let (mut cap, iface) = pcap_capture(out, ByteOrder::Little, TsResolution::Micro, ETHERNET)?;
    let s = styled(&["4", "5", "6"], PYTHON_STYLE, StreamClose::ClientReset);
    let resume = Resume::new("3", ResumeResponse::Stream(s));
    let mut session = basic_session("sess-crlf-1", iface, 51_900, resume);
    session.style = PYTHON_STYLE;
    run(&mut cap, &[session], Interleave::Sequential)
}

fn sse_event_before_id(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let (mut cap, iface) = pcap_capture(out, ByteOrder::Little, TsResolution::Micro, ETHERNET)?;
    let s = styled(&["9", "10"], TYPESCRIPT_STYLE, StreamClose::TerminalChunk);
    let resume = Resume::new("3", ResumeResponse::Stream(s));
    let mut session = basic_session("sess-evfirst-1", iface, 52_000, resume);
    session.style = TYPESCRIPT_STYLE;
    run(&mut cap, &[session], Interleave::Sequential)
}

fn sse_gzip(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let mut s = styled(
        &["4418", "4419", "4420"],
        PYTHON_STYLE,
        StreamClose::TerminalChunk,
    );
    s.gzip = true;
    simple(
        out,
        "sess-gzip-1",
        Resume::new("4417", ResumeResponse::Stream(s)),
    )
}

fn sse_priming_resume(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let mut s = EventStream::with_ids(&["4419", "4420"], StreamClose::ClientReset);
    s.events.insert(0, SseEvent::priming("4418"));
    simple(
        out,
        "sess-priming-1",
        Resume::new("4417", ResumeResponse::Stream(s)),
    )
}

// ---------------------------------------------------------------------------------------------
// Mixed
// ---------------------------------------------------------------------------------------------

fn mixed(out: Out<'_>) -> io::Result<Vec<ExpectedResume>> {
    let (mut cap, iface) = pcap_capture(out, ByteOrder::Little, TsResolution::Micro, ETHERNET)?;

    // Python style: CRLF, lowercase, new connection per request, client resets the stream.
    let a_stream = styled(&["121", "122"], PYTHON_STYLE, StreamClose::ClientReset);
    let mut a = basic_session(
        "mix-a-3c11",
        iface,
        53_000,
        Resume::new("120", ResumeResponse::Stream(a_stream)),
    );
    a.style = PYTHON_STYLE;

    // TypeScript style: one keep-alive connection, canonical names, replay from zero.
    let b_stream = styled(
        &["0", "1", "2"],
        TYPESCRIPT_STYLE,
        StreamClose::TerminalChunk,
    );
    let mut b = SessionSpec::new(Some("mix-b-77d0"), vec![conn(flow(iface, 53_100))])
        .exchange(0, initialize())
        .exchange(0, ExchangeKind::InitializedNotification)
        .exchange(
            0,
            ExchangeKind::Resume(Resume::new("57", ResumeResponse::Stream(b_stream))),
        );
    b.header_case = HeaderCase::Canonical;
    b.style = TYPESCRIPT_STYLE;

    // An expired session: 404.
    let c = basic_session(
        "mix-c-0a9e",
        iface,
        53_200,
        Resume::new("8", ResumeResponse::Status(404)),
    );

    // A server that no longer knows the id: 200 with an empty stream, twice, same id.
    let empty = || Resume::new("9", stream(&[], StreamClose::ServerFin));
    let d = SessionSpec::new(
        Some("mix-d-5b2f"),
        vec![
            conn(flow(iface, 53_300)),
            conn(flow(iface, 53_301)),
            conn(flow(iface, 53_302)),
        ],
    )
    .exchange(0, initialize())
    .exchange(1, ExchangeKind::Resume(empty()))
    .exchange(2, ExchangeKind::Resume(empty()));

    // uuid event ids, and a resume that does not send Mcp-Session-Id.
    let mut e_resume = Resume::new(
        "0f8fad5b-d9cb-469f-a165-70867728950e",
        stream(
            &["7c9e6679-7425-40de-944b-e07fc1f90ae7"],
            StreamClose::ClientReset,
        ),
    );
    e_resume.send_session_id = false;
    let e = basic_session("mix-e-9f00", iface, 53_400, e_resume);

    // A gap, on a stream still open when the capture ends.
    let f = basic_session(
        "mix-f-c4d3",
        iface,
        53_500,
        Resume::new("300", stream(&["350", "351"], StreamClose::Open)),
    );

    // The first event is lost by the capture.
    let mut g_stream = EventStream::with_ids(&["51", "52"], StreamClose::TerminalChunk);
    g_stream.events[0].fate = Fate::Drop;
    let g = basic_session(
        "mix-g-1e6a",
        iface,
        53_600,
        Resume::new("50", ResumeResponse::Stream(g_stream)),
    );

    let mut g_conn_close = g;
    g_conn_close.connections[1].close = ConnClose::ServerFin;

    run(
        &mut cap,
        &[a, b, c, d, e, f, g_conn_close],
        Interleave::RoundRobin,
    )
}
