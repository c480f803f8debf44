//! HTTP/2 frames (RFC 9113) and HPACK header blocks (RFC 7541) as a client and server write
//! them, for cleartext prior-knowledge connections (h2c) and TLS connections with ALPN `h2`.
//!
//! Input: header fields (lowercase names, pseudo-headers first) and body bytes per stream.
//! Output: frame bytes appended to a buffer: the connection prefaces, HEADERS, DATA (split at
//! the default maximum frame size), RST_STREAM, GOAWAY.
//! Invariants: header blocks use no dynamic table (static-table indexed fields where one
//! matches exactly, else literals without indexing and without Huffman coding), so a block
//! decodes alone and losing one never changes how the next decodes; no frame exceeds
//! [`MAX_FRAME_PAYLOAD`]; a header block larger than that continues in CONTINUATION frames.
//! The client announces a window large enough that no flow control blocks a server stream.

/// The client connection preface (RFC 9113 §3.4).
pub const CLIENT_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// SETTINGS_MAX_FRAME_SIZE's default: no frame payload is larger.
pub const MAX_FRAME_PAYLOAD: usize = 16_384;

pub const FRAME_DATA: u8 = 0;
pub const FRAME_HEADERS: u8 = 1;
pub const FRAME_RST_STREAM: u8 = 3;
pub const FRAME_SETTINGS: u8 = 4;
pub const FRAME_GOAWAY: u8 = 7;
pub const FRAME_WINDOW_UPDATE: u8 = 8;
pub const FRAME_CONTINUATION: u8 = 9;

pub const FLAG_END_STREAM: u8 = 0x1;
pub const FLAG_ACK: u8 = 0x1;
pub const FLAG_END_HEADERS: u8 = 0x4;

const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
const MAX_WINDOW: u32 = (1 << 31) - 1;
const DEFAULT_WINDOW: u32 = 65_535;

/// RST_STREAM / GOAWAY error codes.
pub const NO_ERROR: u32 = 0;
pub const CANCEL: u32 = 8;

/// Static-table entries (RFC 7541 Appendix A) that this encoder indexes: index, name, value
/// (an empty value marks an entry used for its name only).
const STATIC: &[(u8, &str, &str)] = &[
    (1, ":authority", ""),
    (2, ":method", "GET"),
    (3, ":method", "POST"),
    (4, ":path", "/"),
    (6, ":scheme", "http"),
    (7, ":scheme", "https"),
    (8, ":status", "200"),
    (9, ":status", "204"),
    (10, ":status", "206"),
    (11, ":status", "304"),
    (12, ":status", "400"),
    (13, ":status", "404"),
    (14, ":status", "500"),
    (16, "accept-encoding", "gzip, deflate"),
    (19, "accept", ""),
    (22, "allow", ""),
    (24, "cache-control", ""),
    (26, "content-encoding", ""),
    (28, "content-length", ""),
    (31, "content-type", ""),
];

/// Appends an HPACK integer with an `prefix_bits`-bit prefix; `first` holds the bits above.
fn put_int(out: &mut Vec<u8>, first: u8, prefix_bits: u32, mut value: usize) {
    let max = (1usize << prefix_bits) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// A string literal without Huffman coding.
fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    put_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// Encodes one header block: an indexed field when the static table has the pair, else a
/// literal without indexing (its name indexed when the table has the name).
pub fn encode_header_block(fields: &[(&str, &str)], out: &mut Vec<u8>) {
    for &(name, value) in fields {
        if let Some(&(i, _, _)) = STATIC
            .iter()
            .find(|&&(_, n, v)| n == name && !v.is_empty() && v == value)
        {
            put_int(out, 0x80, 7, usize::from(i));
            continue;
        }
        match STATIC.iter().find(|&&(_, n, _)| n == name) {
            Some(&(i, _, _)) => put_int(out, 0x00, 4, usize::from(i)),
            None => {
                out.push(0x00);
                put_string(out, name.as_bytes());
            }
        }
        put_string(out, value.as_bytes());
    }
}

/// Appends one frame.
pub fn put_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
}

/// The client's preface: the magic, SETTINGS (no push, a window that never blocks the
/// server), and a WINDOW_UPDATE opening the connection window as wide.
pub fn client_preface(out: &mut Vec<u8>) {
    out.extend_from_slice(CLIENT_PREFACE);
    let mut settings = Vec::with_capacity(18);
    for (id, value) in [
        (0x2u16, 0u32), // SETTINGS_ENABLE_PUSH
        (SETTINGS_MAX_CONCURRENT_STREAMS, 100),
        (SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW),
    ] {
        settings.extend_from_slice(&id.to_be_bytes());
        settings.extend_from_slice(&value.to_be_bytes());
    }
    put_frame(out, FRAME_SETTINGS, 0, 0, &settings);
    put_frame(
        out,
        FRAME_WINDOW_UPDATE,
        0,
        0,
        &(MAX_WINDOW - DEFAULT_WINDOW).to_be_bytes(),
    );
}

/// The server's preface (its SETTINGS) and its acknowledgment of the client's.
pub fn server_preface(out: &mut Vec<u8>) {
    let mut settings = Vec::with_capacity(6);
    settings.extend_from_slice(&SETTINGS_MAX_CONCURRENT_STREAMS.to_be_bytes());
    settings.extend_from_slice(&100u32.to_be_bytes());
    put_frame(out, FRAME_SETTINGS, 0, 0, &settings);
    settings_ack(out);
}

pub fn settings_ack(out: &mut Vec<u8>) {
    put_frame(out, FRAME_SETTINGS, FLAG_ACK, 0, &[]);
}

/// A HEADERS frame (and CONTINUATIONs when the block is larger than one frame).
pub fn headers(out: &mut Vec<u8>, stream: u32, fields: &[(&str, &str)], end_stream: bool) {
    let mut block = Vec::with_capacity(256);
    encode_header_block(fields, &mut block);
    let mut pieces = block.chunks(MAX_FRAME_PAYLOAD).peekable();
    let first = pieces.next().unwrap_or(&[]);
    let mut flags = if end_stream { FLAG_END_STREAM } else { 0 };
    if pieces.peek().is_none() {
        flags |= FLAG_END_HEADERS;
    }
    put_frame(out, FRAME_HEADERS, flags, stream, first);
    while let Some(piece) = pieces.next() {
        let flags = if pieces.peek().is_none() {
            FLAG_END_HEADERS
        } else {
            0
        };
        put_frame(out, FRAME_CONTINUATION, flags, stream, piece);
    }
}

/// DATA frames carrying `bytes` (an empty DATA frame when there are none), the last one with
/// END_STREAM when asked.
pub fn data(out: &mut Vec<u8>, stream: u32, bytes: &[u8], end_stream: bool) {
    if bytes.is_empty() {
        let flags = if end_stream { FLAG_END_STREAM } else { 0 };
        put_frame(out, FRAME_DATA, flags, stream, &[]);
        return;
    }
    let count = bytes.len().div_ceil(MAX_FRAME_PAYLOAD);
    for (i, piece) in bytes.chunks(MAX_FRAME_PAYLOAD).enumerate() {
        let flags = if end_stream && i + 1 == count {
            FLAG_END_STREAM
        } else {
            0
        };
        put_frame(out, FRAME_DATA, flags, stream, piece);
    }
}

pub fn rst_stream(out: &mut Vec<u8>, stream: u32, code: u32) {
    put_frame(out, FRAME_RST_STREAM, 0, stream, &code.to_be_bytes());
}

pub fn goaway(out: &mut Vec<u8>, last_stream: u32, code: u32) {
    let mut payload = (last_stream & 0x7fff_ffff).to_be_bytes().to_vec();
    payload.extend_from_slice(&code.to_be_bytes());
    put_frame(out, FRAME_GOAWAY, 0, 0, &payload);
}

/// The client stream id of a connection's `n`-th request (0-based): 1, 3, 5, ...
pub fn client_stream_id(n: u32) -> u32 {
    2 * n + 1
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A frame read back: type, flags, stream, payload.
    pub(crate) type Frame = (u8, u8, u32, Vec<u8>);

    pub(crate) fn frames(mut bytes: &[u8]) -> Vec<Frame> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let len = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]) as usize;
            let stream = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]);
            out.push((bytes[3], bytes[4], stream, bytes[9..9 + len].to_vec()));
            bytes = &bytes[9 + len..];
        }
        out
    }

    fn get_int(b: &[u8], at: &mut usize, prefix_bits: u32) -> usize {
        let max = (1usize << prefix_bits) - 1;
        let mut v = usize::from(b[*at]) & max;
        *at += 1;
        if v < max {
            return v;
        }
        let mut shift = 0;
        loop {
            let byte = b[*at];
            *at += 1;
            v += usize::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                return v;
            }
        }
    }

    fn get_string(b: &[u8], at: &mut usize) -> String {
        assert_eq!(b[*at] & 0x80, 0, "no Huffman");
        let len = get_int(b, at, 7);
        let s = String::from_utf8(b[*at..*at + len].to_vec()).unwrap();
        *at += len;
        s
    }

    /// A decoder for what this encoder writes (indexed static fields, literals without
    /// indexing), with the static table's names looked up in the RFC's numbering.
    pub(crate) fn decode_block(b: &[u8]) -> Vec<(String, String)> {
        let name_of = |i: usize| {
            STATIC
                .iter()
                .find(|e| usize::from(e.0) == i)
                .map(|e| e.1.to_string())
                .expect("index this encoder uses")
        };
        let mut at = 0;
        let mut out = Vec::new();
        while at < b.len() {
            if b[at] & 0x80 != 0 {
                let i = get_int(b, &mut at, 7);
                let e = STATIC.iter().find(|e| usize::from(e.0) == i).unwrap();
                out.push((e.1.to_string(), e.2.to_string()));
            } else {
                assert_eq!(b[at] & 0xf0, 0, "literal without indexing");
                let i = get_int(b, &mut at, 4);
                let name = if i == 0 {
                    get_string(b, &mut at)
                } else {
                    name_of(i)
                };
                out.push((name, get_string(b, &mut at)));
            }
        }
        out
    }

    #[test]
    fn integers_follow_rfc7541_examples() {
        let mut out = Vec::new();
        put_int(&mut out, 0, 5, 10);
        assert_eq!(out, [10]);
        out.clear();
        put_int(&mut out, 0, 5, 1337);
        assert_eq!(out, [31, 154, 10]);
        out.clear();
        put_int(&mut out, 0, 8, 42);
        assert_eq!(out, [42]);
    }

    #[test]
    fn header_blocks_round_trip_with_static_indices() {
        let long = "x".repeat(300);
        let fields = [
            (":method", "GET"),
            (":scheme", "https"),
            (":authority", "mcp.example:443"),
            (":path", "/mcp"),
            ("accept", "text/event-stream"),
            ("last-event-id", "41"),
            ("x-long", long.as_str()),
        ];
        let mut block = Vec::new();
        encode_header_block(&fields, &mut block);
        assert_eq!(block[0], 0x82, ":method GET is static index 2");
        assert_eq!(block[1], 0x87, ":scheme https is static index 7");
        let back = decode_block(&block);
        let want: Vec<(String, String)> = fields
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert_eq!(back, want);
    }

    #[test]
    fn frames_split_at_the_maximum_size_and_end_the_stream_once() {
        let mut out = Vec::new();
        client_preface(&mut out);
        assert!(out.starts_with(CLIENT_PREFACE));
        let f = frames(&out[CLIENT_PREFACE.len()..]);
        assert_eq!((f[0].0, f[0].2, f[0].3.len()), (FRAME_SETTINGS, 0, 18));
        assert_eq!(f[1].0, FRAME_WINDOW_UPDATE);
        let mut out = Vec::new();
        headers(&mut out, 3, &[(":status", "200")], false);
        data(&mut out, 3, &vec![7u8; 40_000], true);
        data(&mut out, 5, &[], true);
        let f = frames(&out);
        let shape: Vec<(u8, u8, u32, usize)> =
            f.iter().map(|x| (x.0, x.1, x.2, x.3.len())).collect();
        assert_eq!(
            shape,
            [
                (FRAME_HEADERS, FLAG_END_HEADERS, 3, 1),
                (FRAME_DATA, 0, 3, 16_384),
                (FRAME_DATA, 0, 3, 16_384),
                (FRAME_DATA, FLAG_END_STREAM, 3, 40_000 - 2 * 16_384),
                (FRAME_DATA, FLAG_END_STREAM, 5, 0),
            ]
        );
        let mut out = Vec::new();
        let big = "v".repeat(20_000);
        headers(&mut out, 1, &[("x-big", big.as_str())], true);
        let f = frames(&out);
        assert_eq!(
            f.iter().map(|x| (x.0, x.1)).collect::<Vec<_>>(),
            [
                (FRAME_HEADERS, FLAG_END_STREAM),
                (FRAME_CONTINUATION, FLAG_END_HEADERS)
            ]
        );
        let block: Vec<u8> = f.iter().flat_map(|x| x.3.clone()).collect();
        assert_eq!(decode_block(&block), [("x-big".to_string(), big)]);
    }
}
