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
//! - [`AppStack`] holds one parser of a closed set (the hot path dispatches statically),
//!   under a TLS layer when the connection speaks TLS: the parser then reads the plaintext
//!   (HTTP/1.1 or HTTP/2, detected again from its first bytes), fed through the same contract.
//! - What a connection speaks is decided in one place ([`detect`]), from the first bytes of
//!   the direction that speaks first; until then every call is held (a few bytes, bounded by
//!   [`detect::MAX_DETECT_BYTES`] in the deciding direction) and replayed in order to the
//!   parser chosen, so the outcome never depends on how the bytes were cut.
//! - A connection that cannot be read ends unreadable, with its reason
//!   ([`AppStack::is_done`]); the caller stops feeding it.
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
#[cfg(test)]
pub(crate) mod testing;
pub mod tls;

use crate::record::{Direction, HttpSink, Limits, Mark, StreamEnd, StreamSink};
use detect::{Detection, MAX_DETECT_BYTES, Protocol};
use h2::Http2Connection;
use http1::HttpConnection;
use tls::{KeyLog, TlsConnection, TlsFacts, TlsStatus};

/// What every layer of a connection's stack may need besides its bytes.
#[derive(Clone, Copy)]
pub(crate) struct AppCtx<'a> {
    pub limits: &'a Limits,
    /// The TLS secrets known so far (key log files, and Decryption Secrets Blocks read up to
    /// this point of the capture).
    pub keys: &'a KeyLog,
}

/// Why a connection was not read. Each is counted, with its bytes and server endpoint, in the
/// coverage accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Unread {
    /// It does not speak HTTP.
    NotHttp,
    /// TLS, and no key log gave its secrets.
    TlsNoKeys,
    /// TLS with a version or cipher suite that is not decrypted (CBC, CCM, TLS 1.1 and older).
    TlsUnsupported,
    /// TLS whose logged secrets do not decrypt it.
    TlsKeysWrong,
    /// TLS whose handshake the capture does not hold: no client random to look keys up by.
    TlsHandshakeMissing,
    /// The capture lost the first bytes, so what the connection speaks cannot be told.
    GapBeforeProtocol,
}

impl Unread {
    pub fn as_str(self) -> &'static str {
        match self {
            Unread::NotHttp => "not_http",
            Unread::TlsNoKeys => "tls_no_keys",
            Unread::TlsUnsupported => "tls_unsupported",
            Unread::TlsKeysWrong => "tls_keys_wrong",
            Unread::TlsHandshakeMissing => "tls_handshake_missing",
            Unread::GapBeforeProtocol => "gap_before_protocol",
        }
    }
}

/// What became of a connection's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coverage {
    /// No payload in either direction.
    Empty,
    /// Read, as this protocol stack (`http1`, `h2`, `tls/http1`, `tls/h2`).
    Read(&'static str),
    /// Not read, and why.
    Unread(Unread),
}

/// One held call of the contract, while the protocol is not known yet.
#[derive(Debug)]
enum Held {
    Data(Direction, Vec<u8>, Mark),
    Gap(Direction, u64, Mark),
    End(Direction, StreamEnd, Mark),
    /// [`AppStack::ahead_of_peer`], [`AppStack::after_peer`], [`AppStack::before_peer`]: said
    /// of the bytes that follow, so kept in their place.
    AheadOfPeer(Direction, Mark, u64),
    AfterPeer(Direction),
    BeforePeer(Direction, Mark, u64),
}

/// The calls of a connection whose protocol is not decided yet.
#[derive(Debug)]
pub(crate) struct Detector {
    from_start: bool,
    /// The plaintext of a TLS connection: TLS again is not followed.
    inside_tls: bool,
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

/// Hands the TLS layer's plaintext to the child stack, with the HTTP sink of the connection.
struct ChildSink<'a, 'c, S> {
    ctx: AppCtx<'c>,
    child: &'a mut Layer,
    sink: &'a mut S,
}

impl<S: HttpSink> StreamSink for ChildSink<'_, '_, S> {
    fn data(&mut self, dir: Direction, bytes: &[u8], mark: Mark) {
        self.child.data(self.ctx, dir, bytes, mark, self.sink);
    }
    fn gap(&mut self, dir: Direction, len: u64, mark: Mark) {
        self.child.gap(self.ctx, dir, len, mark, self.sink);
    }
    fn end(&mut self, dir: Direction, how: StreamEnd, mark: Mark) {
        self.child.end(self.ctx, dir, how, mark, self.sink);
    }
}

/// The application stack of one connection: the parser of what it speaks, under TLS when it
/// speaks TLS.
// The stack lives inside a boxed connection: its size costs nothing per packet, and boxing the
// HTTP/1 parser would cost an indirection on every call of the hot path. The TLS layer is
// boxed beside the parser rather than around it: a box holding both (1,184 bytes, the
// allocator's 1,280-byte class) left the connection's own room for a parser unused, where the
// TLS layer alone takes the 768-byte class.
pub(crate) struct AppStack {
    tls: Option<Box<TlsConnection>>,
    /// The plaintext's parser under TLS.
    layer: Layer,
}

/// A parser of the stack, or what is known before one is chosen. The HTTP/2 one is boxed:
/// twice the HTTP/1 one's size, inline it made every open connection (thousands at once,
/// mostly HTTP/1) pay for it.
#[allow(clippy::large_enum_variant)]
enum Layer {
    Detecting(Detector),
    Http1(HttpConnection),
    Http2(Box<Http2Connection>),
    /// The first bytes were TLS: the calls held and the ones that follow, until the stack
    /// puts a TLS layer above a new detector and replays them (never left in place once the
    /// call that decided returns).
    TlsFound(Vec<Held>),
    /// Not read, and why; with the direction that spoke first, when known.
    Unreadable(Unread, Option<Direction>),
}

impl AppStack {
    /// `from_start`: the capture saw the connection's SYN, so each direction's first byte is
    /// the first byte the peer sent.
    pub fn new(from_start: bool) -> Self {
        AppStack {
            tls: None,
            layer: Layer::detecting(from_start, false),
        }
    }

    pub fn data<S: HttpSink>(
        &mut self,
        ctx: AppCtx<'_>,
        dir: Direction,
        bytes: &[u8],
        mark: Mark,
        sink: &mut S,
    ) {
        match &mut self.tls {
            Some(tls) => {
                let child = &mut self.layer;
                tls.data(
                    ctx.keys,
                    dir,
                    bytes,
                    mark,
                    &mut ChildSink { ctx, child, sink },
                );
            }
            None => {
                self.layer.data(ctx, dir, bytes, mark, sink);
                if matches!(self.layer, Layer::TlsFound(_)) {
                    self.begin_tls(ctx, sink);
                }
            }
        }
    }

    /// The connection speaks TLS: its layer goes above a detector of the plaintext, and what
    /// was held goes through it in order. Fed to the layer here rather than through
    /// [`AppStack::data`], which then calls nothing that calls it back and is inlined.
    #[cold]
    fn begin_tls<S: HttpSink>(&mut self, ctx: AppCtx<'_>, sink: &mut S) {
        let Layer::TlsFound(held) = &mut self.layer else {
            return;
        };
        let held = std::mem::take(held);
        self.layer = Layer::detecting(true, true);
        let tls = self.tls.insert(Box::new(TlsConnection::new(ctx.limits)));
        for h in held {
            let child = &mut self.layer;
            let mut sink = ChildSink { ctx, child, sink };
            match h {
                Held::Data(dir, bytes, mark) => tls.data(ctx.keys, dir, &bytes, mark, &mut sink),
                Held::Gap(dir, len, mark) => tls.gap(ctx.keys, dir, len, mark, &mut sink),
                Held::End(dir, how, mark) => tls.end(dir, how, mark, &mut sink),
                // Said of plaintext HTTP/1 only ([`AppStack::ahead_of_peer`]).
                Held::AheadOfPeer(..) | Held::AfterPeer(_) | Held::BeforePeer(..) => {}
            }
        }
    }

    /// The next bytes of `dir` come ahead of bytes of the other direction the capture has not
    /// shown ([`crate::record::StreamSink::ahead_of_peer`]). Over HTTP/1 an answer may then
    /// follow a request the capture lacks, and is paired with no request it may not answer.
    /// HTTP/2 pairs by stream id. Under TLS the plaintext given next may come from a record
    /// begun in earlier segments, sent before those bytes, so it is not passed on: only
    /// plaintext HTTP/1 takes it.
    pub fn ahead_of_peer(&mut self, dir: Direction, mark: Mark, unseen: u64) {
        if self.tls.is_none() {
            self.layer.held(Held::AheadOfPeer(dir, mark, unseen));
        }
    }

    /// The next bytes of `dir` were sent after every byte of the other direction given so
    /// far ([`crate::record::StreamSink::after_peer`]): over HTTP/1 an answer there may answer
    /// any request given before, whatever its frame. Plaintext HTTP/1 only, as for
    /// [`AppStack::ahead_of_peer`].
    pub fn after_peer(&mut self, dir: Direction) {
        if self.tls.is_none() {
            self.layer.held(Held::AfterPeer(dir));
        }
    }

    /// The next bytes of `dir` were sent before the other direction's last `unacked` bytes
    /// arrived ([`crate::record::StreamSink::before_peer`]): over HTTP/1 an answer there
    /// answers no request starting in them. Plaintext HTTP/1 only, as for
    /// [`AppStack::ahead_of_peer`].
    pub fn before_peer(&mut self, dir: Direction, mark: Mark, unacked: u64) {
        if self.tls.is_none() {
            self.layer.held(Held::BeforePeer(dir, mark, unacked));
        }
    }

    pub fn gap<S: HttpSink>(
        &mut self,
        ctx: AppCtx<'_>,
        dir: Direction,
        len: u64,
        mark: Mark,
        sink: &mut S,
    ) {
        match &mut self.tls {
            Some(tls) => {
                let child = &mut self.layer;
                tls.gap(
                    ctx.keys,
                    dir,
                    len,
                    mark,
                    &mut ChildSink { ctx, child, sink },
                );
            }
            None => self.layer.gap(ctx, dir, len, mark, sink),
        }
    }

    pub fn end<S: HttpSink>(
        &mut self,
        ctx: AppCtx<'_>,
        dir: Direction,
        how: StreamEnd,
        mark: Mark,
        sink: &mut S,
    ) {
        match &mut self.tls {
            Some(tls) => {
                let child = &mut self.layer;
                tls.end(dir, how, mark, &mut ChildSink { ctx, child, sink });
            }
            None => self.layer.end(ctx, dir, how, mark, sink),
        }
    }

    /// The direction that carries requests, once known.
    pub fn client_direction(&self) -> Option<Direction> {
        match &self.tls {
            Some(t) => t.facts().client.or_else(|| self.layer.client_direction()),
            None => self.layer.client_direction(),
        }
    }

    /// The TLS facts, when the connection is TLS.
    pub fn tls(&self) -> Option<&TlsFacts> {
        self.tls.as_deref().map(TlsConnection::facts)
    }

    /// What this connection's layers could not read inside the bytes they had, by kind: the
    /// blind spots within a read connection, for the summary's anomalies.
    pub fn losses(&self) -> impl Iterator<Item = (&'static str, u64)> {
        // Counted in arrays rather than gathered in a list: a connection is closed with three
        // calls, and a plain HTTP/1.1 one (most of them) has nothing to count.
        let tls = self.tls.as_ref().map(|t| {
            let f = t.facts();
            [
                ("tls_records_lost", f.records_lost),
                ("tls_resynchronized", f.resyncs),
                ("tls_resync_failed", f.resync_failures),
                ("tls_auth_failures", f.auth_failures),
            ]
        });
        let h2 = match &self.layer {
            Layer::Http2(h) => {
                let s = h.stats();
                Some([
                    ("h2_headers_unreadable", s.headers_unreadable),
                    ("h2_resynchronized", s.resyncs),
                    ("h2_push_promises", s.push_promises),
                    ("h2_protocol_errors", s.protocol_errors),
                    ("h2_streams_evicted", s.streams_evicted),
                ])
            }
            _ => None,
        };
        tls.into_iter()
            .flatten()
            .chain(h2.into_iter().flatten())
            .filter(|(_, n)| *n > 0)
    }

    /// Nothing more will be read from this connection: the caller may drop it.
    pub fn is_done(&self) -> bool {
        match &self.tls {
            Some(t) => t.facts().status.is_final_failure() || self.layer.is_done(),
            None => self.layer.is_done(),
        }
    }

    /// What the connection was read as, or why not; `saw_exchange` tells whether any HTTP
    /// message was parsed on it.
    pub fn coverage(&self, saw_exchange: bool) -> Coverage {
        let Some(t) = &self.tls else {
            return self.layer.coverage(saw_exchange);
        };
        let f = t.facts();
        match &f.status {
            _ if f.records_decrypted > 0 => match self.layer.coverage(saw_exchange) {
                Coverage::Read("h2") => Coverage::Read("tls/h2"),
                Coverage::Read(_) | Coverage::Empty => Coverage::Read("tls/http1"),
                other => other,
            },
            TlsStatus::Unsupported(_) => Coverage::Unread(Unread::TlsUnsupported),
            TlsStatus::KeysWrong => Coverage::Unread(Unread::TlsKeysWrong),
            TlsStatus::HandshakeNotCaptured => Coverage::Unread(Unread::TlsHandshakeMissing),
            TlsStatus::NotTls => Coverage::Unread(Unread::NotHttp),
            _ => Coverage::Unread(Unread::TlsNoKeys),
        }
    }
}

impl Layer {
    fn detecting(from_start: bool, inside_tls: bool) -> Self {
        Layer::Detecting(Detector {
            from_start,
            inside_tls,
            speaker: None,
            first: Vec::new(),
            held: Vec::new(),
            other_bytes: 0,
        })
    }

    fn data<S: HttpSink>(
        &mut self,
        ctx: AppCtx<'_>,
        dir: Direction,
        bytes: &[u8],
        mark: Mark,
        sink: &mut S,
    ) {
        match self {
            Layer::Http1(h) => {
                let used = h.data(dir, bytes, mark, sink);
                if let Some(exchange) = h.switched_to_h2c() {
                    self.switch_to_h2c(
                        ctx,
                        exchange,
                        dir,
                        &bytes[used.min(bytes.len())..],
                        mark,
                        sink,
                    );
                }
            }
            Layer::Http2(h) => h.data(dir, bytes, mark, sink),
            Layer::TlsFound(held) => held.push(Held::Data(dir, bytes.to_vec(), mark)),
            Layer::Unreadable(..) => {}
            Layer::Detecting(_) => self.detect(ctx, dir, bytes, mark, sink),
        }
    }

    /// Bytes while the protocol is not known: judged, held, or handed to the parser they
    /// decide. Kept out of [`Layer::data`], the path of every segment once it is decided.
    #[cold]
    #[inline(never)]
    fn detect<S: HttpSink>(
        &mut self,
        ctx: AppCtx<'_>,
        dir: Direction,
        bytes: &[u8],
        mark: Mark,
        sink: &mut S,
    ) {
        let Layer::Detecting(d) = self else {
            return;
        };
        if bytes.is_empty() {
            return;
        }
        let speaker = *d.speaker.get_or_insert(dir);
        // The speaker's first bytes are judged where they lie, and copied only when
        // they do not decide: nearly every connection is decided by its first segment.
        let mut unheld = None;
        if speaker == dir {
            let room = MAX_DETECT_BYTES.saturating_sub(d.first.len());
            let take = bytes.get(..room.min(bytes.len())).unwrap_or(bytes);
            if d.first.is_empty() {
                unheld = Some(take);
            } else {
                d.first.extend_from_slice(take);
            }
        } else {
            d.other_bytes += bytes.len();
        }
        let first = unheld.unwrap_or(&d.first);
        let detected = if d.inside_tls {
            detect::detect_plaintext(first)
        } else {
            detect::detect(first, d.from_start)
        };
        if let Some(take) = unheld
            && matches!(detected, Detection::NeedMore)
        {
            d.first.extend_from_slice(take);
        }
        let decision = match detected {
            Detection::Decided(p) => Some(p),
            Detection::NeedMore if d.other_bytes > MAX_HELD_BYTES => Some(Protocol::Http1),
            Detection::NeedMore => None,
        };
        match decision {
            // The common case: the first segment decides, nothing was held.
            Some(p) if d.held.is_empty() => {
                self.decide(ctx, p, sink);
                self.data(ctx, dir, bytes, mark, sink);
            }
            Some(p) => {
                d.held.push(Held::Data(dir, bytes.to_vec(), mark));
                self.decide(ctx, p, sink);
            }
            None => d.held.push(Held::Data(dir, bytes.to_vec(), mark)),
        }
    }

    /// The HTTP/1.1 parser saw `101 Switching Protocols` to `h2c`: the connection goes on as
    /// HTTP/2, `rest` being the first bytes of it.
    #[cold]
    #[inline(never)]
    fn switch_to_h2c<S: HttpSink>(
        &mut self,
        ctx: AppCtx<'_>,
        exchange: u32,
        dir: Direction,
        rest: &[u8],
        mark: Mark,
        sink: &mut S,
    ) {
        let Layer::Http1(h) = self else {
            return;
        };
        let Some(client) = h.client_direction() else {
            *self = Layer::Unreadable(Unread::NotHttp, None);
            return;
        };
        *self = Layer::Http2(Box::new(Http2Connection::upgraded(
            ctx.limits, client, exchange,
        )));
        if !rest.is_empty() {
            self.data(ctx, dir, rest, mark, sink);
        }
    }

    /// A call said of the bytes that follow ([`AppStack::ahead_of_peer`] and the like): taken
    /// by the HTTP/1 parser, held with the bytes while the protocol is not known, ignored by
    /// the others.
    fn held(&mut self, h: Held) {
        match (self, h) {
            (Layer::Http1(c), Held::AheadOfPeer(dir, mark, unseen)) => {
                c.ahead_of_peer(dir, mark, unseen)
            }
            (Layer::Http1(c), Held::AfterPeer(dir)) => c.after_peer(dir),
            (Layer::Http1(c), Held::BeforePeer(dir, mark, unacked)) => {
                c.before_peer(dir, mark, unacked)
            }
            (Layer::Detecting(Detector { held, .. }) | Layer::TlsFound(held), h) => held.push(h),
            _ => {}
        }
    }

    fn gap<S: HttpSink>(
        &mut self,
        ctx: AppCtx<'_>,
        dir: Direction,
        len: u64,
        mark: Mark,
        sink: &mut S,
    ) {
        match self {
            Layer::Http1(h) => h.gap(dir, len, mark, sink),
            Layer::Http2(h) => h.gap(dir, len, mark, sink),
            Layer::TlsFound(held) => held.push(Held::Gap(dir, len, mark)),
            Layer::Unreadable(..) => {}
            Layer::Detecting(d) => {
                d.held.push(Held::Gap(dir, len, mark));
                // Missing bytes before the decision: the HTTP/1.1 parser resynchronizes.
                if d.speaker.is_none_or(|s| s == dir) {
                    self.decide(ctx, Protocol::Http1, sink);
                }
            }
        }
    }

    fn end<S: HttpSink>(
        &mut self,
        ctx: AppCtx<'_>,
        dir: Direction,
        how: StreamEnd,
        mark: Mark,
        sink: &mut S,
    ) {
        match self {
            Layer::Http1(h) => h.end(dir, how, mark, sink),
            Layer::Http2(h) => h.end(dir, how, mark, sink),
            Layer::TlsFound(held) => held.push(Held::End(dir, how, mark)),
            Layer::Unreadable(..) => {}
            Layer::Detecting(d) => {
                d.held.push(Held::End(dir, how, mark));
                if d.speaker.is_none_or(|s| s == dir) {
                    self.decide(ctx, Protocol::Http1, sink);
                }
            }
        }
    }

    /// Hands the connection to the parser of `protocol` and replays what was held.
    fn decide<S: HttpSink>(&mut self, ctx: AppCtx<'_>, protocol: Protocol, sink: &mut S) {
        let Layer::Detecting(d) = self else {
            return;
        };
        let held = std::mem::take(&mut d.held);
        let speaker = d.speaker;
        *self = match protocol {
            Protocol::Http1 => Layer::Http1(HttpConnection::new(ctx.limits, d.from_start)),
            Protocol::Http2 => Layer::Http2(Box::new(Http2Connection::new(ctx.limits))),
            Protocol::Tls if d.inside_tls => Layer::Unreadable(Unread::NotHttp, speaker),
            // The stack puts the TLS layer above a new detector, and replays what was held.
            Protocol::Tls => {
                *self = Layer::TlsFound(held);
                return;
            }
        };
        for h in held {
            match h {
                Held::Data(dir, bytes, mark) => self.data(ctx, dir, &bytes, mark, sink),
                Held::Gap(dir, len, mark) => self.gap(ctx, dir, len, mark, sink),
                Held::End(dir, how, mark) => self.end(ctx, dir, how, mark, sink),
                h @ (Held::AheadOfPeer(..) | Held::AfterPeer(_) | Held::BeforePeer(..)) => {
                    self.held(h)
                }
            }
        }
    }

    /// The direction that carries requests, once known.
    fn client_direction(&self) -> Option<Direction> {
        match self {
            Layer::Http1(h) => h.client_direction(),
            Layer::Http2(h) => h.client_direction(),
            Layer::Unreadable(_, speaker) => *speaker,
            Layer::Detecting(_) | Layer::TlsFound(_) => None,
        }
    }

    /// Nothing more will be read from this connection: the caller may drop it.
    fn is_done(&self) -> bool {
        match self {
            Layer::Http1(h) => h.is_abandoned() && h.switched_to_h2c().is_none(),
            Layer::Http2(h) => h.is_abandoned(),
            Layer::Unreadable(..) => true,
            Layer::Detecting(_) | Layer::TlsFound(_) => false,
        }
    }

    /// What the connection was read as, or why not; `saw_exchange` tells whether any HTTP
    /// message was parsed on it.
    fn coverage(&self, saw_exchange: bool) -> Coverage {
        match self {
            Layer::Detecting(d) if d.speaker.is_none() => Coverage::Empty,
            Layer::Detecting(_) => Coverage::Read("http1"),
            Layer::Http1(_) if saw_exchange => Coverage::Read("http1"),
            Layer::Http1(h) if h.is_abandoned() => Coverage::Unread(Unread::NotHttp),
            Layer::Http1(_) => Coverage::Read("http1"),
            Layer::Http2(h) if h.is_abandoned() && !saw_exchange => {
                Coverage::Unread(Unread::NotHttp)
            }
            Layer::Http2(_) => Coverage::Read("h2"),
            Layer::Unreadable(u, _) => Coverage::Unread(*u),
            // Never seen from outside: the stack takes it over in the call that made it.
            Layer::TlsFound(_) => Coverage::Read("http1"),
        }
    }
}
