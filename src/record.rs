//! Small owned records handed from one stage to the next, and the sink traits that carry them.
//!
//! Input: nothing; every stage depends on this module and on nothing else upstream of it.
//! Output: the vocabulary of the pipeline — where a byte came from ([`Mark`]), which way it
//! travelled ([`Direction`]), how a byte stream ended ([`StreamEnd`]), HTTP message heads and
//! body ends, and the [`Limits`] that keep every stage's state bounded.
//! Invariants: records are plain data; no record borrows from a capture buffer beyond the call
//! that hands it over, so a stage may keep what it needs and drop the rest.

/// Where a byte was seen: the capture frame (1-based, numbered as Wireshark numbers them) and
/// the capture time of that frame in nanoseconds since the Unix epoch. HAR input uses the entry
/// index (0-based) as `frame` and the entry's `startedDateTime` as time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mark {
    /// Frame number, 1-based (HAR: the entry index, 0-based).
    pub frame: u64,
    /// Capture time of the frame, nanoseconds since the Unix epoch.
    pub time_ns: i64,
}

impl Mark {
    /// A mark at `frame`, seen at `time_ns`.
    pub const fn new(frame: u64, time_ns: i64) -> Self {
        Mark { frame, time_ns }
    }
}

/// Bits of a frame number below a capture set member's number. A frame of member `n` (1-based,
/// in reading order) is `n << MEMBER_SHIFT | its number in its own file`, so frames still grow
/// in reading order, and a lone file's frames are its own (member 0).
pub const MEMBER_SHIFT: u32 = 40;

/// The set member a frame is in (0: the input is one file) and its number in that file.
pub const fn member_frame(frame: u64) -> (u64, u64) {
    (frame >> MEMBER_SHIFT, frame & ((1 << MEMBER_SHIFT) - 1))
}

/// One of the two byte streams of a TCP connection. `Forward` is the direction of the first
/// packet the capture holds for the connection; `Reverse` the other one. Which side is the
/// HTTP client is decided later, by content.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// The direction of the first packet seen.
    Forward = 0,
    /// The other direction.
    Reverse = 1,
}

impl Direction {
    /// 0 for `Forward`, 1 for `Reverse`: an index into per-direction arrays.
    pub fn index(self) -> usize {
        self as usize
    }
    /// The opposite direction.
    pub fn other(self) -> Direction {
        match self {
            Direction::Forward => Direction::Reverse,
            Direction::Reverse => Direction::Forward,
        }
    }
}

/// How the in-order byte stream of one direction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamEnd {
    /// A FIN was seen and every byte before it was delivered (or reported as a gap).
    Fin,
    /// A RST was seen from this direction's sender.
    Rst,
    /// A RST was seen from the other side: the receiver aborted the connection, so this
    /// direction's sender may have had more to say.
    PeerRst,
    /// The capture ended while the connection was still open.
    CaptureEnd,
    /// The connection was dropped to respect `Limits::max_connections`.
    Evicted,
    /// The connection stopped being followed (it does not speak HTTP, or switched protocols).
    Abandoned,
}

impl StreamEnd {
    /// True when the end was seen on the wire, so "nothing more came" is a fact of the traffic
    /// rather than of the capture.
    pub fn seen_on_wire(self) -> bool {
        matches!(self, StreamEnd::Fin | StreamEnd::Rst | StreamEnd::PeerRst)
    }
}

/// Receives the in-order bytes of one direction of a TCP connection.
///
/// Contract: calls arrive in stream order; `data` never repeats a byte; bytes the capture does
/// not hold arrive as one `gap` with their count, in their place; `end` is called exactly once,
/// last.
pub trait StreamSink {
    /// The next bytes of `dir`, in order; `mark` is the frame holding their first byte.
    fn data(&mut self, dir: Direction, bytes: &[u8], mark: Mark);
    /// `len` bytes of `dir` that the capture does not hold, in their place.
    fn gap(&mut self, dir: Direction, len: u64, mark: Mark);
    /// `dir` is over: closed, reset, or the capture ended.
    fn end(&mut self, dir: Direction, how: StreamEnd, mark: Mark);
    /// The next bytes of `dir` are given ahead of bytes of the other direction that they
    /// acknowledge and the capture has not shown (so far): the peer acknowledged them, so the
    /// capture may never show them, or may still, later. Whatever the other direction sent
    /// there (a request, for an answer) may be missing. They acknowledge `unseen` bytes of
    /// the other direction past those given (0 when that is not a plausible number): whatever
    /// the other direction begins after those was not yet received when they were sent.
    fn ahead_of_peer(&mut self, _dir: Direction, _mark: Mark, _unseen: u64) {}
    /// The next bytes of `dir` were held until the other direction's bytes that they
    /// acknowledge came, and they acknowledge every byte given of it so far: they were sent
    /// after all of it, even where the capture recorded them earlier (a capture host with
    /// several queues records packets out of order).
    fn after_peer(&mut self, _dir: Direction, _mark: Mark) {}
    /// The next bytes of `dir`, in the frame of `mark`, were sent before the last `unacked`
    /// bytes given of the other direction (data and gaps) had arrived: their acknowledgment
    /// stops that far short of them. Whatever the other direction began there (a request,
    /// for an answer) was not yet received when they were sent.
    fn before_peer(&mut self, _dir: Direction, _mark: Mark, _unacked: u64) {}
    /// An empty segment of `dir` (an acknowledgment) stood past the bytes given and held of
    /// `dir`: bytes were sent there that the capture has not shown so far. They may still
    /// come, late; what they carry is unknown until then.
    fn sent_unseen(&mut self, _dir: Direction, _mark: Mark) {}
}

/// Text of a message head as sent. The values nearly every MCP exchange repeats (its methods,
/// the `/mcp` path, the protocol versions, the two media types) are the program's own copies
/// rather than an allocation per exchange: in a reconnect storm those were most of an
/// exchange's allocations, each made on a worker and freed on the session stage's thread.
pub type HeadText = std::borrow::Cow<'static, str>;

/// `value` as a [`HeadText`]: borrowed when it is one of the values exchanges repeat.
pub fn head_text(value: &str) -> HeadText {
    match known_head_text(value) {
        Some(known) => HeadText::Borrowed(known),
        None => HeadText::Owned(value.to_owned()),
    }
}

/// `value` as a [`HeadText`], dropped for the program's copy when it is a value exchanges
/// repeat.
pub fn head_text_owned(value: String) -> HeadText {
    match known_head_text(&value) {
        Some(known) => HeadText::Borrowed(known),
        None => HeadText::Owned(value),
    }
}

fn known_head_text(value: &str) -> Option<&'static str> {
    known_head_bytes(value.as_bytes())
}

/// The program's copy of `value` when it is one of the values exchanges repeat; told by its
/// bytes, so that a header value read as bytes needs no UTF-8 check to be found one.
pub fn known_head_bytes(value: &[u8]) -> Option<&'static str> {
    Some(match value {
        b"GET" => "GET",
        b"POST" => "POST",
        b"DELETE" => "DELETE",
        b"/mcp" => "/mcp",
        b"/mcp/" => "/mcp/",
        b"/" => "/",
        b"2024-11-05" => "2024-11-05",
        b"2025-03-26" => "2025-03-26",
        b"2025-06-18" => "2025-06-18",
        b"2025-11-25" => "2025-11-25",
        b"text/event-stream" => "text/event-stream",
        b"application/json" => "application/json",
        _ => return None,
    })
}

/// A parsed HTTP/1.x request head: only the facts later stages use, owned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestHead {
    /// 0-based index of the exchange on its connection (requests and responses pair in order).
    pub exchange: u32,
    /// The request method (`GET`, `POST`, `DELETE`).
    pub method: HeadText,
    /// The request target as sent (HTTP/2: `:path`).
    pub target: HeadText,
    /// `Mcp-Session-Id` as sent (header names are matched without regard to case).
    pub session_id: Option<String>,
    /// `Last-Event-ID` exactly as sent.
    pub last_event_id: Option<String>,
    /// `MCP-Protocol-Version` as sent.
    pub protocol_version: Option<HeadText>,
    /// Frame holding the first byte of the request line (HTTP/2: of the HEADERS frame).
    pub first: Mark,
    /// Frame holding the last byte of the head (HTTP/2: of the header block).
    pub complete: Mark,
    /// The HTTP/2 stream that carried the exchange (`http2.streamid`); `None` on HTTP/1.x.
    pub h2_stream: Option<u32>,
}

/// A parsed HTTP/1.x final (non-1xx) response head.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResponseHead {
    /// Index of the request this response answers (pairing in order, pipelining included).
    pub exchange: u32,
    /// The status code.
    pub status: u16,
    /// `Content-Type` as sent, whole (parameters included).
    pub content_type: Option<HeadText>,
    /// `Mcp-Session-Id` as sent by the server; `None` also when it repeats the one the
    /// exchange's request sent, as [`HttpSink::request_named`] tells (a parser may ask).
    pub session_id: Option<String>,
    /// `Content-Encoding` as sent, when any.
    pub content_encoding: Option<String>,
    /// Frame holding the first byte of the status line (HTTP/2: of the HEADERS frame).
    pub first: Mark,
    /// Frame holding the last byte of the head (HTTP/2: of the header block).
    pub complete: Mark,
    /// The HTTP/2 stream that carried the exchange (`http2.streamid`); `None` on HTTP/1.x.
    pub h2_stream: Option<u32>,
}

impl ResponseHead {
    /// True when the media type is `text/event-stream` (case-insensitive, parameters ignored).
    pub fn is_event_stream(&self) -> bool {
        self.content_type
            .as_deref()
            .is_some_and(is_event_stream_type)
    }
}

/// True when the media type of a `Content-Type` value is `text/event-stream` (case-insensitive,
/// parameters ignored, white space around it ignored as `str::trim` ignores it).
fn is_event_stream_type(ct: &str) -> bool {
    let bytes = ct.as_bytes();
    // What servers nearly always send.
    if bytes.eq_ignore_ascii_case(b"text/event-stream") {
        return true;
    }
    let media = &bytes[..bytes.iter().position(|&b| b == b';').unwrap_or(bytes.len())];
    // Ends that are ASCII and not white space (U+000B is white space to `trim`, not to
    // `is_ascii_whitespace`) leave `trim` nothing to take: the media type is compared as it
    // is, without walking it as characters.
    let plain = |b: Option<&u8>| b.is_some_and(|&b| b.is_ascii_graphic());
    if plain(media.first()) && plain(media.last()) {
        return media.eq_ignore_ascii_case(b"text/event-stream");
    }
    ct.split(';')
        .next()
        .unwrap_or("")
        .trim()
        .eq_ignore_ascii_case("text/event-stream")
}

/// How a message body ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BodyEnd {
    /// The framing said the body is over (Content-Length reached, last chunk, or no body).
    Complete,
    /// The body was delimited by the end of the connection, or cut short by it.
    Stream(StreamEnd),
    /// Framing was lost after missing bytes; the rest of the body cannot be followed.
    LostSync,
    /// The body could not be decoded (bad chunk framing, bad gzip data).
    Malformed,
    /// HTTP/2: a RST_STREAM ended the stream, sent by the client or by the server, with its
    /// error code.
    Reset {
        /// True when the client sent the RST_STREAM.
        by_client: bool,
        /// Its error code.
        code: u32,
    },
    /// HTTP/2: the server's GOAWAY named a last stream id below this stream, or the
    /// connection ended after a GOAWAY while the stream was open; the GOAWAY's error code.
    GoneAway {
        /// The GOAWAY's error code.
        code: u32,
    },
}

/// Receives HTTP exchanges of one connection as they are parsed.
///
/// Contract: for one exchange, `request` comes before `response` when the request was seen;
/// `response` before any `body`/`body_gap` of that response; `body_end` exactly once per
/// response whose head was delivered. One exception, HTTP/2 only: when bytes were lost and
/// the response head of a delivered request can no longer be read, `body_end(LostSync)` comes
/// once without a `response` before it (the capture lacks the answer; nothing follows it). Body bytes are content-decoded (gzip/deflate) already.
/// Request bodies are not delivered.
pub trait HttpSink {
    /// A request head was parsed.
    fn request(&mut self, head: RequestHead);
    /// A final response head was parsed.
    fn response(&mut self, head: ResponseHead);
    /// Whether the request of `exchange` sent `session_id` as its `Mcp-Session-Id`: an answer
    /// that repeats it need not carry a copy of its own (an allocation an exchange, as nearly
    /// every answer repeats it). False when the sink does not know.
    fn request_named(&self, _exchange: u32, _session_id: &[u8]) -> bool {
        false
    }
    /// The next decoded bytes of the response body of `exchange`.
    fn body(&mut self, exchange: u32, bytes: &[u8], mark: Mark);
    /// `len` bytes of the body are missing (0 when the count is not known after decoding).
    fn body_gap(&mut self, exchange: u32, len: u64, mark: Mark);
    /// The response body of `exchange` is over, and how.
    fn body_end(&mut self, exchange: u32, how: BodyEnd, mark: Mark);
    /// Something odd the parser saw and recovered from (reported, never fatal).
    fn anomaly(&mut self, what: Anomaly, mark: Mark);
}

/// Parser anomalies: data on the record, never errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Anomaly {
    /// A head longer than `Limits::max_header_bytes`.
    HeaderTooLarge,
    /// Bytes that are not HTTP where a message head was expected; skipped to the next one.
    Resynchronized,
    /// Bad Content-Length (negative, not a number, or conflicting values).
    BadContentLength,
    /// Bad chunk-size line.
    BadChunk,
    /// A response with no request to pair it with (capture began mid-connection).
    UnpairedResponse,
    /// gzip/deflate data that does not decode.
    BadContentEncoding,
    /// Out-of-order bytes above `Limits::max_out_of_order_bytes` were given up as a gap.
    OutOfOrderOverflow,
    /// An SSE field value longer than `Limits::max_sse_field_bytes` was cut.
    SseFieldTooLong,
    /// An HTTP/2 frame that breaks the protocol (longer than the peer allows, a length or
    /// padding its type forbids, a header block interrupted); skipped by its length.
    Http2Protocol,
}

/// Bounds that keep every stage's state independent of the input size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Out-of-order bytes buffered per direction before the hole is declared a gap.
    pub max_out_of_order_bytes: usize,
    /// Connections tracked at once per capture; the least recently active is evicted beyond it.
    pub max_connections: usize,
    /// Longest HTTP message head (request line or status line plus headers).
    pub max_header_bytes: usize,
    /// Longest SSE `id`/`event`/`retry` value kept (data is counted, never kept).
    pub max_sse_field_bytes: usize,
    /// Largest capture block or record accepted.
    pub max_block_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_out_of_order_bytes: 4 << 20,
            max_connections: 100_000,
            max_header_bytes: 64 << 10,
            max_sse_field_bytes: 4 << 10,
            max_block_bytes: 16 << 20,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_text_borrows_only_the_values_exchanges_repeat_and_keeps_every_byte() {
        for known in [
            "GET",
            "POST",
            "DELETE",
            "/mcp",
            "2025-06-18",
            "text/event-stream",
        ] {
            assert!(matches!(head_text(known), HeadText::Borrowed(k) if k == known));
            let owned = head_text_owned(known.to_owned());
            assert!(matches!(owned, HeadText::Borrowed(k) if k == known));
        }
        // As sent: another case, parameters or spacing are another value.
        for other in [
            "get",
            "/mcp?x=1",
            "text/event-stream; charset=utf-8",
            " GET",
            "",
        ] {
            assert!(matches!(head_text(other), HeadText::Owned(ref o) if o == other));
            let owned = head_text_owned(other.to_owned());
            assert!(matches!(owned, HeadText::Owned(ref o) if o == other));
        }
    }

    #[test]
    fn event_stream_types_are_told_as_the_split_and_trim_tell_them() {
        let told = |ct: &str| {
            ct.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("text/event-stream")
        };
        let pieces = [
            "",
            "text/event-stream",
            "TEXT/Event-Stream",
            "text/event-streams",
            "text/event",
            "application/json",
            ";",
            "; charset=utf-8",
            " ",
            "\t",
            "\u{b}",
            "\u{c}",
            "\r\n",
            "\u{a0}",
            "\u{3000}",
            "\u{85}",
            "é",
            "\u{7f}",
            "x",
            "text/event-stream\u{0}",
        ];
        let mut n = 0;
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    let ct = format!("{a}{b}{c}");
                    assert_eq!(is_event_stream_type(&ct), told(&ct), "{ct:?}");
                    n += usize::from(told(&ct));
                }
            }
        }
        assert!(n > 100);
    }
}
