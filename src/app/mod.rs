//! Application layer: what a connection speaks, and the parsers that read it.
//!
//! Input: the byte-stream contract of one connection, per direction — in-order `data(bytes,
//! mark)`, `gap(len)` for bytes the capture lost, one `end(how)` — as TCP reassembly delivers
//! it ([`crate::record::StreamSink`]). A layer that produces bytes for another one (TLS hands
//! its plaintext on) delivers them to its child through the same contract, so a layer can be
//! put between two others without either knowing.
//! Output: HTTP exchanges through [`crate::record::HttpSink`], and, when the connection is
//! over, [`Coverage`]: what it was read as, or why it was not read.
//! Invariants:
//! - [`AppStack`] is a closed enum: the hot path dispatches statically.
//! - What a connection speaks is decided in one place ([`detect`]), from the first bytes of
//!   the direction that speaks first; until then every call is held (a few bytes, bounded by
//!   [`detect::MAX_DETECT_BYTES`] in the deciding direction) and replayed in order to the
//!   parser chosen, so the outcome never depends on how the bytes were cut.
//! - A connection that cannot be read ends in [`AppStack::Unreadable`] with its reason; the
//!   caller stops feeding it.
//!
//! Parts: [`detect`] (protocol detection), [`http1`] (HTTP/1.1 exchanges), [`h2`] (HTTP/2
//! streams as the same exchanges: framing, HPACK, recovery after lost bytes), [`tls`] (TLS
//! decryption with logged secrets, handing plaintext to the HTTP parser), [`coding`] (content
//! codings, shared by every HTTP version), [`sse`] (event-stream bodies), [`jsonrpc`] (the few
//! JSON-RPC members the session checks read out of event data).

pub mod coding;
pub mod detect;
pub mod h2;
pub mod http1;
pub mod jsonrpc;
pub mod sse;
pub mod tls;

use crate::record::{Direction, HttpSink, Limits, Mark, StreamEnd};
use detect::{Detection, MAX_DETECT_BYTES, Protocol};
use http1::HttpConnection;

/// Why a connection was not read. Each is counted, with its bytes and server endpoint, in the
/// coverage accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Unread {
    /// It does not speak HTTP.
    NotHttp,
    /// TLS, and it cannot be decrypted.
    Tls,
    /// HTTP/2, which is not read.
    Http2,
}

impl Unread {
    pub fn as_str(self) -> &'static str {
        match self {
            Unread::NotHttp => "not_http",
            Unread::Tls => "tls_no_keys",
            Unread::Http2 => "http2_unsupported",
        }
    }
}

/// What became of a connection's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coverage {
    /// No payload in either direction.
    Empty,
    /// Read as HTTP/1.1.
    Http1,
    /// Not read, and why.
    Unread(Unread),
}

/// One held call of the contract, while the protocol is not known yet.
#[derive(Debug)]
enum Held {
    Data(Direction, Vec<u8>, Mark),
    Gap(Direction, u64, Mark),
    End(Direction, StreamEnd, Mark),
}

/// The calls of a connection whose protocol is not decided yet.
#[derive(Debug)]
pub struct Detector {
    from_start: bool,
    /// The direction whose first bytes decide, once one sent any.
    speaker: Option<Direction>,
    /// Its first bytes (at most [`MAX_DETECT_BYTES`]).
    first: Vec<u8>,
    held: Vec<Held>,
    /// Bytes held from the other direction; past [`MAX_HELD_BYTES`] the decision is forced.
    other_bytes: usize,
}

/// Bytes of the silent direction held while the speaking one has not said enough.
const MAX_HELD_BYTES: usize = 64 << 10;

/// The application stack of one connection.
// The stack lives inside a boxed connection: its size costs nothing per packet, and boxing the
// parser would cost an indirection on every call of the hot path.
#[allow(clippy::large_enum_variant)]
pub enum AppStack {
    Detecting(Detector),
    Http1(HttpConnection),
    /// Not read, and why; with the direction that spoke first, when known (the client of a
    /// TLS or HTTP/2 connection).
    Unreadable(Unread, Option<Direction>),
}

impl AppStack {
    /// `from_start`: the capture saw the connection's SYN, so each direction's first byte is
    /// the first byte the peer sent.
    pub fn new(from_start: bool) -> Self {
        AppStack::Detecting(Detector {
            from_start,
            speaker: None,
            first: Vec::new(),
            held: Vec::new(),
            other_bytes: 0,
        })
    }

    pub fn data<S: HttpSink>(
        &mut self,
        limits: &Limits,
        dir: Direction,
        bytes: &[u8],
        mark: Mark,
        sink: &mut S,
    ) {
        match self {
            AppStack::Http1(h) => h.data(dir, bytes, mark, sink),
            AppStack::Unreadable(..) => {}
            AppStack::Detecting(d) => {
                if bytes.is_empty() {
                    return;
                }
                let speaker = *d.speaker.get_or_insert(dir);
                if speaker == dir {
                    let room = MAX_DETECT_BYTES.saturating_sub(d.first.len());
                    d.first
                        .extend_from_slice(bytes.get(..room.min(bytes.len())).unwrap_or(bytes));
                } else {
                    d.other_bytes += bytes.len();
                }
                let decision = match detect::detect(&d.first, d.from_start) {
                    Detection::Decided(p) => Some(p),
                    Detection::NeedMore if d.other_bytes > MAX_HELD_BYTES => Some(Protocol::Http1),
                    Detection::NeedMore => None,
                };
                match decision {
                    // The common case: the first segment decides, nothing was held.
                    Some(p) if d.held.is_empty() => {
                        self.decide(limits, p, sink);
                        self.data(limits, dir, bytes, mark, sink);
                    }
                    Some(p) => {
                        d.held.push(Held::Data(dir, bytes.to_vec(), mark));
                        self.decide(limits, p, sink);
                    }
                    None => d.held.push(Held::Data(dir, bytes.to_vec(), mark)),
                }
            }
        }
    }

    pub fn gap<S: HttpSink>(
        &mut self,
        limits: &Limits,
        dir: Direction,
        len: u64,
        mark: Mark,
        sink: &mut S,
    ) {
        match self {
            AppStack::Http1(h) => h.gap(dir, len, mark, sink),
            AppStack::Unreadable(..) => {}
            AppStack::Detecting(d) => {
                d.held.push(Held::Gap(dir, len, mark));
                // Missing bytes before the decision: the HTTP/1.1 parser resynchronizes.
                if d.speaker.is_none_or(|s| s == dir) {
                    self.decide(limits, Protocol::Http1, sink);
                }
            }
        }
    }

    pub fn end<S: HttpSink>(
        &mut self,
        limits: &Limits,
        dir: Direction,
        how: StreamEnd,
        mark: Mark,
        sink: &mut S,
    ) {
        match self {
            AppStack::Http1(h) => h.end(dir, how, mark, sink),
            AppStack::Unreadable(..) => {}
            AppStack::Detecting(d) => {
                d.held.push(Held::End(dir, how, mark));
                if d.speaker.is_none_or(|s| s == dir) {
                    self.decide(limits, Protocol::Http1, sink);
                }
            }
        }
    }

    /// Hands the connection to the parser of `protocol` and replays what was held.
    fn decide<S: HttpSink>(&mut self, limits: &Limits, protocol: Protocol, sink: &mut S) {
        let AppStack::Detecting(d) = self else {
            return;
        };
        let held = std::mem::take(&mut d.held);
        let speaker = d.speaker;
        *self = match protocol {
            Protocol::Http1 => AppStack::Http1(HttpConnection::new(limits, d.from_start)),
            Protocol::Http2 => AppStack::Unreadable(Unread::Http2, speaker),
            Protocol::Tls => AppStack::Unreadable(Unread::Tls, speaker),
        };
        for h in held {
            match h {
                Held::Data(dir, bytes, mark) => self.data(limits, dir, &bytes, mark, sink),
                Held::Gap(dir, len, mark) => self.gap(limits, dir, len, mark, sink),
                Held::End(dir, how, mark) => self.end(limits, dir, how, mark, sink),
            }
        }
    }

    /// The direction that carries requests, once known.
    pub fn client_direction(&self) -> Option<Direction> {
        match self {
            AppStack::Http1(h) => h.client_direction(),
            AppStack::Unreadable(_, speaker) => *speaker,
            AppStack::Detecting(_) => None,
        }
    }

    /// Nothing more will be read from this connection: the caller may drop it.
    pub fn is_done(&self) -> bool {
        match self {
            AppStack::Http1(h) => h.is_abandoned(),
            AppStack::Unreadable(..) => true,
            AppStack::Detecting(_) => false,
        }
    }

    /// What the connection was read as, or why not; `saw_exchange` tells whether any HTTP
    /// message was parsed on it.
    pub fn coverage(&self, saw_exchange: bool) -> Coverage {
        match self {
            AppStack::Detecting(d) if d.speaker.is_none() => Coverage::Empty,
            AppStack::Detecting(_) => Coverage::Http1,
            AppStack::Http1(_) if saw_exchange => Coverage::Http1,
            AppStack::Http1(h) if h.is_abandoned() => Coverage::Unread(Unread::NotHttp),
            AppStack::Http1(_) => Coverage::Http1,
            AppStack::Unreadable(u, _) => Coverage::Unread(*u),
        }
    }
}
