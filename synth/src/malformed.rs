//! Hostile and damaged captures: the malformed corpus (`fixtures/malformed/`) and the large
//! inputs that are made at test time rather than committed (a 1 MB header, a 100 MB SSE line,
//! a flood of connections that never close).
//!
//! Input: nothing but the parameters of each builder.
//! Output: capture bytes, written to a `Vec` or streamed to any `Write`.
//! Invariants: the same call always gives the same bytes; the streaming builders hold one frame
//! at a time, so a 100 MB capture costs no more memory than a small one. Every damaged file
//! also holds one well-formed resume (last id 4417, answered from 4418) wherever the damage
//! leaves room for it, so a test can check both that the damage is reported and that the
//! rest is still analyzed.

use std::io::{self, Write};
use std::net::Ipv4Addr;

use super::{
    BASE_TIME_NS, ByteOrder, LinkType, PacketWriter, PcapFormat, PcapWriter, PcapngWriter,
    TsResolution,
};

const STEP_NS: u64 = 50_000;

/// TCP control bits.
const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;

/// Largest TCP payload put in one frame.
const MAX_PAYLOAD: usize = 64_000;

fn checksum(mut acc: u32, bytes: &[u8]) -> u32 {
    let mut pairs = bytes.chunks_exact(2);
    for p in &mut pairs {
        acc = acc.wrapping_add(u32::from(u16::from_be_bytes([p[0], p[1]])));
    }
    if let [last] = pairs.remainder() {
        acc = acc.wrapping_add(u32::from(*last) << 8);
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// One TCP segment's addressing and header fields.
#[derive(Clone, Copy, Debug)]
struct Head {
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
    seq: u32,
    ack: u32,
    flags: u8,
}

/// An Ethernet + IPv4 + TCP frame with correct checksums.
fn frame(h: &Head, payload: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&[
        0x02, 0, 0, 0, 0x5e, 0x01, 0x02, 0, 0, 0, 0xc1, 0x01, 0x08, 0x00,
    ]);
    let tcp_len = 20 + payload.len();
    let total = u16::try_from(20 + tcp_len).unwrap_or(u16::MAX);
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&h.src.0.octets());
    ip[16..20].copy_from_slice(&h.dst.0.octets());
    let ck = fold(checksum(0, &ip));
    ip[10..12].copy_from_slice(&ck.to_be_bytes());
    out.extend_from_slice(&ip);
    let mut tcp = [0u8; 20];
    tcp[0..2].copy_from_slice(&h.src.1.to_be_bytes());
    tcp[2..4].copy_from_slice(&h.dst.1.to_be_bytes());
    tcp[4..8].copy_from_slice(&h.seq.to_be_bytes());
    tcp[8..12].copy_from_slice(&h.ack.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = h.flags;
    tcp[14..16].copy_from_slice(&64_240u16.to_be_bytes());
    let mut acc = checksum(0, &h.src.0.octets());
    acc = checksum(acc, &h.dst.0.octets());
    acc = acc.wrapping_add(6 + tcp_len as u32);
    acc = checksum(acc, &tcp);
    acc = checksum(acc, payload);
    tcp[16..18].copy_from_slice(&fold(acc).to_be_bytes());
    out.extend_from_slice(&tcp);
    out.extend_from_slice(payload);
}

/// Packets going to a capture writer, with a clock.
struct Out<W: PacketWriter> {
    writer: W,
    time_ns: u64,
    buf: Vec<u8>,
}

impl<W: PacketWriter> Out<W> {
    fn new(writer: W) -> Self {
        Out {
            writer,
            time_ns: BASE_TIME_NS,
            buf: Vec::with_capacity(2048),
        }
    }

    fn raw(&mut self, interface: u32, bytes: &[u8]) -> io::Result<()> {
        self.writer.write_packet(interface, self.time_ns, bytes)?;
        self.time_ns += STEP_NS;
        Ok(())
    }

    fn segment(&mut self, h: &Head, payload: &[u8]) -> io::Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        frame(h, payload, &mut buf);
        let r = self.raw(0, &buf);
        self.buf = buf;
        r
    }
}

/// A TCP connection written packet by packet: client is side 0, server side 1.
struct Conn {
    ends: [(Ipv4Addr, u16); 2],
    next: [u32; 2],
}

impl Conn {
    fn new(client: (Ipv4Addr, u16), server: (Ipv4Addr, u16)) -> Self {
        Conn {
            ends: [client, server],
            next: [0x1000_0000, 0x7000_0000],
        }
    }

    fn head(&self, from: usize, flags: u8) -> Head {
        Head {
            src: self.ends[from],
            dst: self.ends[1 - from],
            seq: self.next[from],
            ack: self.next[1 - from],
            flags,
        }
    }

    fn handshake<W: PacketWriter>(&mut self, out: &mut Out<W>) -> io::Result<()> {
        let mut syn = self.head(0, SYN);
        syn.ack = 0;
        out.segment(&syn, &[])?;
        self.next[0] = self.next[0].wrapping_add(1);
        let mut syn_ack = self.head(1, SYN | ACK);
        syn_ack.ack = self.next[0];
        out.segment(&syn_ack, &[])?;
        self.next[1] = self.next[1].wrapping_add(1);
        out.segment(&self.head(0, ACK), &[])
    }

    /// `from` sends `bytes` in frames of at most `MAX_PAYLOAD` bytes.
    fn send<W: PacketWriter>(
        &mut self,
        out: &mut Out<W>,
        from: usize,
        bytes: &[u8],
    ) -> io::Result<()> {
        for chunk in bytes.chunks(MAX_PAYLOAD) {
            out.segment(&self.head(from, ACK | PSH), chunk)?;
            self.next[from] = self.next[from].wrapping_add(chunk.len() as u32);
        }
        Ok(())
    }

    /// `from` sends `bytes` that the capture misses.
    fn lose(&mut self, from: usize, bytes: &[u8]) {
        self.next[from] = self.next[from].wrapping_add(bytes.len() as u32);
    }

    /// `from` sends FIN, the peer FIN, `from` the last ACK.
    fn close<W: PacketWriter>(&mut self, out: &mut Out<W>, from: usize) -> io::Result<()> {
        out.segment(&self.head(from, FIN | ACK), &[])?;
        self.next[from] = self.next[from].wrapping_add(1);
        out.segment(&self.head(1 - from, FIN | ACK), &[])?;
        self.next[1 - from] = self.next[1 - from].wrapping_add(1);
        out.segment(&self.head(from, ACK), &[])
    }
}

const CLIENT: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const SERVER: (Ipv4Addr, u16) = (Ipv4Addr::new(127, 0, 0, 1), 8000);

/// The resume request every builder uses: Last-Event-ID 4417.
pub const RESUME_REQUEST: &[u8] = b"GET /mcp HTTP/1.1\r\nhost: 127.0.0.1:8000\r\n\
accept: text/event-stream\r\nmcp-session-id: sess-hostile\r\nlast-event-id: 4417\r\n\r\n";

/// A correct answer to [`RESUME_REQUEST`]: one chunked event with id 4418, then the last chunk.
const CORRECT_ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
mcp-session-id: sess-hostile\r\ntransfer-encoding: chunked\r\n\r\n\
1b\r\nid: 4418\ndata: {\"n\":4418}\n\n\r\n0\r\n\r\n";

/// One whole connection: handshake, the resume request, `answer`, close by the server.
fn exchange<W: PacketWriter>(out: &mut Out<W>, port: u16, answer: &[u8]) -> io::Result<()> {
    let mut c = Conn::new((CLIENT, port), SERVER);
    c.handshake(out)?;
    c.send(out, 0, RESUME_REQUEST)?;
    c.send(out, 1, answer)?;
    c.close(out, 1)
}

fn pcap<W: Write>(out: W) -> io::Result<Out<PcapWriter<W>>> {
    let format = PcapFormat::new(ByteOrder::Little, TsResolution::Micro, LinkType::Ethernet);
    Ok(Out::new(PcapWriter::new(out, format)?))
}

/// A capture with one correct resume, as the base the damaged files start from.
fn correct_capture() -> io::Result<Vec<u8>> {
    let mut out = pcap(Vec::new())?;
    exchange(&mut out, 40_000, CORRECT_ANSWER)?;
    Ok(out.writer.into_inner())
}

/// A capture with one resume answered by `answer` (the server closes after it).
fn capture_answering(answer: &[u8]) -> io::Result<Vec<u8>> {
    let mut out = pcap(Vec::new())?;
    exchange(&mut out, 40_001, answer)?;
    Ok(out.writer.into_inner())
}

/// A correct resume with extra raw frames written before it (each counts as a frame).
fn correct_after_frames(frames: &[Vec<u8>]) -> io::Result<Vec<u8>> {
    let mut out = pcap(Vec::new())?;
    for f in frames {
        out.raw(0, f)?;
    }
    exchange(&mut out, 40_002, CORRECT_ANSWER)?;
    Ok(out.writer.into_inner())
}

/// A well-formed frame to damage.
fn sample_frame(payload: &[u8]) -> Vec<u8> {
    let h = Head {
        src: (CLIENT, 39_999),
        dst: SERVER,
        seq: 1,
        ack: 1,
        flags: ACK | PSH,
    };
    let mut f = Vec::new();
    frame(&h, payload, &mut f);
    f
}

/// Ethernet header length in the frames made here.
const ETH: usize = 14;

/// Splits a pcapng file into its blocks (little-endian sections only).
fn pcapng_blocks(bytes: &[u8]) -> Vec<&[u8]> {
    let mut blocks = Vec::new();
    let mut at = 0;
    while let Some(len) = bytes.get(at + 4..at + 8) {
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let Some(block) = bytes.get(at..at + len) else {
            break;
        };
        blocks.push(block);
        at += len;
    }
    blocks
}

fn correct_pcapng() -> io::Result<Vec<u8>> {
    let mut w = PcapngWriter::new(Vec::new(), ByteOrder::Little)?;
    w.add_interface(LinkType::Ethernet, TsResolution::Micro)?;
    let mut out = Out::new(w);
    exchange(&mut out, 40_003, CORRECT_ANSWER)?;
    Ok(out.writer.into_inner())
}

/// Block type 6 (EPB) in little-endian.
fn is_epb(block: &[u8]) -> bool {
    block.get(..4) == Some(&[6, 0, 0, 0])
}

/// Every committed file of the malformed corpus, by file name (see its README).
pub fn corpus() -> io::Result<Vec<(&'static str, Vec<u8>)>> {
    let mut files: Vec<(&'static str, Vec<u8>)> = Vec::new();

    // ----- capture files -----
    files.push((
        "bad-magic.pcap",
        b"GIF89a\x01\x00\x01\x00 not a capture at all".to_vec(),
    ));
    let good = correct_capture()?;
    files.push(("truncated-global-header.pcap", good[..10].to_vec()));
    let mut t = good.clone();
    t.extend_from_slice(&good[24..31]); // 7 of a record header's 16 bytes
    files.push(("truncated-record-header.pcap", t));
    let mut t = good.clone();
    let record = &good[24..];
    let caplen = u32::from_le_bytes([record[8], record[9], record[10], record[11]]) as usize;
    t.extend_from_slice(&record[..16 + caplen / 2]); // a record cut in its body
    files.push(("truncated-record-body.pcap", t));

    let mut t = good.clone();
    t[16..20].copy_from_slice(&64u32.to_le_bytes()); // snaplen below every frame's length
    files.push(("caplen-above-snaplen.pcap", t));

    let mut t = good.clone();
    let mut absurd = [0u8; 16];
    absurd[8..12].copy_from_slice(&u32::MAX.to_le_bytes()); // caplen 4 GiB - 1
    absurd[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    t.extend_from_slice(&absurd);
    t.extend_from_slice(&[0u8; 64]);
    files.push(("caplen-4gib.pcap", t));

    files.push((
        "zero-length-packets.pcap",
        correct_after_frames(&[Vec::new(), Vec::new(), Vec::new()])?,
    ));

    // ----- pcapng -----
    let ng = correct_pcapng()?;
    let blocks = pcapng_blocks(&ng);
    let (shb, idb) = (blocks[0], blocks[1]);
    let epb = blocks.iter().copied().find(|b| is_epb(b)).unwrap_or(&[]);
    // An EPB before any IDB names an interface that does not exist yet.
    let mut t = shb.to_vec();
    t.extend_from_slice(epb);
    for b in &blocks[1..] {
        t.extend_from_slice(b);
    }
    files.push(("pcapng-epb-before-idb.pcapng", t));

    let mut unknown = epb.to_vec();
    unknown[8..12].copy_from_slice(&7u32.to_le_bytes());
    let mut t = shb.to_vec();
    t.extend_from_slice(idb);
    t.extend_from_slice(&unknown);
    for b in &blocks[2..] {
        t.extend_from_slice(b);
    }
    t.extend_from_slice(&unknown);
    files.push(("pcapng-unknown-interface.pcapng", t));

    let mut t = ng.clone();
    let mut bad = [0u8; 16];
    bad[0] = 6;
    bad[4..8].copy_from_slice(&13u32.to_le_bytes()); // not a multiple of 4
    t.extend_from_slice(&bad);
    files.push(("pcapng-bad-block-length.pcapng", t));

    let mut t = ng.clone();
    let mut bad = [0u8; 32];
    bad[0] = 6;
    bad[4..8].copy_from_slice(&32u32.to_le_bytes());
    bad[28..32].copy_from_slice(&28u32.to_le_bytes()); // trailing length disagrees
    t.extend_from_slice(&bad);
    files.push(("pcapng-block-length-mismatch.pcapng", t));

    // The resume in a little-endian section, then the same again in a big-endian one.
    let mut w = PcapngWriter::new(Vec::new(), ByteOrder::Little)?;
    w.add_interface(LinkType::Ethernet, TsResolution::Micro)?;
    let mut out = Out::new(w);
    exchange(&mut out, 40_004, CORRECT_ANSWER)?;
    out.writer.new_section(ByteOrder::Big)?;
    out.writer
        .add_interface(LinkType::Ethernet, TsResolution::Nano)?;
    exchange(&mut out, 40_005, CORRECT_ANSWER)?;
    files.push((
        "pcapng-sections-both-byte-orders.pcapng",
        out.writer.into_inner(),
    ));

    // ----- packets -----
    let f = sample_frame(b"payload");
    files.push((
        "ip-truncated-header.pcap",
        correct_after_frames(&[f[..ETH + 12].to_vec()])?,
    ));
    files.push((
        "tcp-truncated-header.pcap",
        correct_after_frames(&[f[..ETH + 20 + 8].to_vec()])?,
    ));
    let mut bad_ihl = f.clone();
    bad_ihl[ETH] = 0x43; // IHL 3: shorter than an IPv4 header can be
    let mut long_ihl = f.clone();
    long_ihl[ETH] = 0x4f; // IHL 15: 60 bytes, past the TCP header into the payload
    files.push((
        "ip-bad-ihl.pcap",
        correct_after_frames(&[bad_ihl, long_ihl])?,
    ));
    let mut short_off = f.clone();
    short_off[ETH + 20 + 12] = 2 << 4; // 8 bytes: shorter than a TCP header
    let mut long_off = f.clone();
    long_off[ETH + 20 + 12] = 15 << 4; // 60 bytes: past the end of the frame
    files.push((
        "tcp-bad-data-offset.pcap",
        correct_after_frames(&[short_off, long_off])?,
    ));
    let mut more = f.clone();
    more[ETH + 6] = 0x20; // more fragments, offset 0
    let mut later = f.clone();
    later[ETH + 6] = 0x00;
    later[ETH + 7] = 0x10; // offset 128 bytes
    files.push(("ip-fragments.pcap", correct_after_frames(&[more, later])?));

    // ----- HTTP -----
    let mut many = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n".to_vec();
    // 50 kB: under the head limit, so the count of headers is what is tested.
    for _ in 0..10_000 {
        many.extend_from_slice(b"a:1\r\n");
    }
    many.extend_from_slice(b"\r\nid: 4418\ndata: x\n\n");
    files.push(("http-10000-headers.pcap", capture_answering(&many)?));

    files.push((
        "http-chunk-size-2-64.pcap",
        capture_answering(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
transfer-encoding: chunked\r\n\r\n10000000000000000\r\nid: 4418\ndata: x\n\n\r\n0\r\n\r\n",
        )?,
    ));
    files.push((
        "http-content-length-negative.pcap",
        capture_answering(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
content-length: -19\r\n\r\nid: 4418\ndata: x\n\n",
        )?,
    ));
    files.push((
        "http-content-length-conflicting.pcap",
        capture_answering(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
content-length: 19\r\ncontent-length: 20\r\n\r\nid: 4418\ndata: x\n\n",
        )?,
    ));

    // ----- SSE -----
    let mut long_id = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\nid: ".to_vec();
    long_id.extend(std::iter::repeat_n(b'7', 10_000));
    long_id.extend_from_slice(b"\ndata: x\n\n");
    files.push(("sse-id-10kb.pcap", capture_answering(&long_id)?));

    // ----- HAR -----
    files.push((
        "har-wrong-types.har",
        har_document(&[
            har_resume(
                "2026-11-09T10:00:00.000Z",
                "4417",
                "id: 4418\ndata: x\n\n",
                None,
            ),
            // Every field of the wrong JSON type.
            serde_json::json!({
                "startedDateTime": 20261109,
                "time": "slow",
                "request": {"method": 5, "url": ["http://127.0.0.1:8000/mcp"],
                            "headers": {"name": "last-event-id", "value": "4417"}},
                "response": {"status": "200", "headers": "content-type: text/event-stream",
                             "content": {"text": 42}}
            }),
            serde_json::json!("an entry that is a string"),
            har_resume(
                "2026-11-09T10:00:03.000Z",
                "4418",
                "id: 4419\ndata: y\n\n",
                None,
            ),
        ]),
    ));
    files.push((
        "har-invalid-base64.har",
        har_document(&[
            har_resume(
                "2026-11-09T10:00:00.000Z",
                "4417",
                "!!not*base64 at all",
                Some("base64"),
            ),
            har_resume(
                "2026-11-09T10:00:01.000Z",
                "4417",
                "aWQ6IDQ0MTgKZGF0YTogeAoK=garbage",
                Some("base64"),
            ),
            har_resume(
                "2026-11-09T10:00:02.000Z",
                "4418",
                "aWQ6IDQ0MTkKZGF0YTogeQoK",
                Some("base64"),
            ),
        ]),
    ));

    // ----- TCP -----
    files.push(("tcp-hole-then-64kb.pcap", hole_then_events(64 << 10)?));

    Ok(files)
}

/// A resume whose first event (id 4418) the capture misses, followed by `trailing` bytes of
/// later events in small segments, then the server's FIN: the hole stays open until the FIN
/// unless the out-of-order limit gives it up first.
fn hole_then_events(trailing: usize) -> io::Result<Vec<u8>> {
    let mut out = pcap(Vec::new())?;
    let mut c = Conn::new((CLIENT, 40_030), SERVER);
    c.handshake(&mut out)?;
    c.send(&mut out, 0, RESUME_REQUEST)?;
    c.send(
        &mut out,
        1,
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n",
    )?;
    c.lose(1, b"id: 4418\ndata: lost\n\n");
    let mut id = 4419u64;
    let mut sent = 0;
    while sent < trailing {
        let event = format!("id: {id}\ndata: {}\n\n", "x".repeat(1000));
        c.send(&mut out, 1, event.as_bytes())?;
        sent += event.len();
        id += 1;
    }
    c.close(&mut out, 1)?;
    Ok(out.writer.into_inner())
}

/// A resume whose answer carries one header of `header_bytes` bytes (1 MB in the tests).
pub fn huge_header<W: Write>(out: W, header_bytes: usize) -> io::Result<W> {
    let mut answer = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nx-big: ".to_vec();
    answer.extend(std::iter::repeat_n(b'a', header_bytes));
    answer.extend_from_slice(b"\r\n\r\nid: 4418\ndata: x\n\n");
    let mut o = pcap(out)?;
    exchange(&mut o, 40_010, &answer)?;
    Ok(o.writer.into_inner())
}

/// A resume answered by an event stream holding one `data:` line of `line_bytes` bytes that
/// never ends (no line break), then the server's FIN. Streamed: memory stays one frame.
pub fn endless_sse_line<W: Write>(out: W, line_bytes: u64) -> io::Result<W> {
    let mut o = pcap(out)?;
    let mut c = Conn::new((CLIENT, 40_020), SERVER);
    c.handshake(&mut o)?;
    c.send(&mut o, 0, RESUME_REQUEST)?;
    // No length and no chunking: the body runs to the end of the connection.
    c.send(
        &mut o,
        1,
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: ",
    )?;
    let chunk = vec![b'a'; MAX_PAYLOAD];
    let mut left = line_bytes;
    while left > 0 {
        let n = usize::try_from(left).unwrap_or(usize::MAX).min(MAX_PAYLOAD);
        c.send(&mut o, 1, &chunk[..n])?;
        left -= n as u64;
    }
    c.close(&mut o, 1)?;
    Ok(o.writer.into_inner())
}

/// `connections` connections, each with a resume request and the head of an event-stream
/// answer, none of them ever closed. Client addresses run through 127.1.0.0/16 so every
/// connection has its own 4-tuple.
pub fn connection_flood<W: Write>(out: W, connections: u32) -> io::Result<W> {
    let mut o = pcap(out)?;
    let answer: &[u8] =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n: stream open\n\n";
    for i in 0..connections {
        let [_, _, a, b] = (i / 50_000).to_be_bytes();
        let client = (Ipv4Addr::new(127, 1, a, b), 10_000 + (i % 50_000) as u16);
        let mut c = Conn::new(client, SERVER);
        // Seen mid-connection: no handshake, so each costs two packets.
        c.send(&mut o, 0, RESUME_REQUEST)?;
        c.send(&mut o, 1, answer)?;
    }
    Ok(o.writer.into_inner())
}

/// One HAR entry: a resume GET and a 200 event-stream answer whose body is `text` (decoded as
/// `encoding` says), with a Content-Length equal to the body so the entry proves it whole.
fn har_resume(started: &str, last: &str, text: &str, encoding: Option<&str>) -> serde_json::Value {
    let mut content = serde_json::json!({
        "size": text.len(),
        "mimeType": "text/event-stream",
        "text": text,
    });
    let mut length = text.len();
    if let Some(e) = encoding {
        content["encoding"] = e.into();
        // The decoded length, when the text is valid base64.
        length = text.len() / 4 * 3;
        content["size"] = length.into();
    }
    serde_json::json!({
        "startedDateTime": started,
        "time": 10.0,
        "request": {
            "method": "GET",
            "url": "http://127.0.0.1:8000/mcp",
            "httpVersion": "HTTP/1.1",
            "headers": [
                {"name": "accept", "value": "text/event-stream"},
                {"name": "mcp-session-id", "value": "sess-hostile"},
                {"name": "last-event-id", "value": last}
            ]
        },
        "response": {
            "status": 200,
            "statusText": "OK",
            "httpVersion": "HTTP/1.1",
            "headers": [
                {"name": "content-type", "value": "text/event-stream"},
                {"name": "content-length", "value": length.to_string()}
            ],
            "content": content
        }
    })
}

fn har_document(entries: &[serde_json::Value]) -> Vec<u8> {
    let doc = serde_json::json!({
        "log": {
            "version": "1.2",
            "creator": {"name": "mcp-resume-audit synth", "version": "0"},
            "entries": entries
        }
    });
    let mut text = serde_json::to_vec_pretty(&doc).unwrap_or_default();
    text.push(b'\n');
    text
}
