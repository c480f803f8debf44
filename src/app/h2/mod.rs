//! HTTP/2 exchanges of one TCP connection, parsed incrementally from both directions.
//!
//! Input: the calls of [`crate::record::StreamSink`] for one connection that speaks HTTP/2
//! from its first byte (prior knowledge, or TLS with ALPN `h2`: `Http2Connection::new`) or
//! from right after an accepted `Upgrade: h2c` (`Http2Connection::upgraded`) — in-order
//! bytes of each direction, missing bytes as `gap(len)`, one `end` per direction.
//!
//! Output: the same [`HttpSink`] calls as [`crate::app::http1`]: a request head per client
//! HEADERS, a response head per final server HEADERS (1xx skipped), DATA content with padding
//! removed and content coding (gzip, deflate) decoded, body gaps, one body end per delivered
//! response head, and anomalies. The exchange id of a stream is its stream id (after an
//! upgrade: stream 1 is the HTTP/1.1 exchange given, stream `s` that plus `s - 1`).
//!
//! Invariants:
//! - Roles by content: the direction that sends the client preface is the client (a
//!   direction that starts with a SETTINGS frame instead is the server). A direction whose
//!   first bytes are neither, or whose first frame is not SETTINGS, makes the connection
//!   abandoned: open bodies end with `Stream(Abandoned)` and later calls return at once.
//! - Body ends, each delivered once: END_STREAM or trailers → `Complete`; RST_STREAM →
//!   `Reset` (by which side, with its code); the server's GOAWAY naming a lower last stream,
//!   or the server's direction ending after a GOAWAY → `GoneAway`; the server's direction
//!   ending otherwise → `Stream(how)`; eviction → `Stream(Evicted)`.
//! - Lost bytes, never guessed over. A gap inside a frame keeps framing: DATA content lost
//!   becomes `body_gap(len)` (an encoded body cannot be decoded on: `body_gap(0)` then
//!   `LostSync`). A gap that may hold frame headers loses framing: the direction's HPACK
//!   table is lost for good (every later header block of that direction is counted in
//!   `headers_unreadable` and read as nothing), the direction searches for the next frame
//!   start (`frame::Resync`) and delivers nothing meanwhile; after it, DATA of known
//!   streams goes on after a `body_gap(0)`. A request whose response head can no longer be
//!   read ends with `body_end(LostSync)` and no response (the one exception in the sink
//!   contract).
//! - Bounded state: at most `MAX_STREAMS` streams (the least recently active is evicted
//!   beyond it); one header block per direction, buffered up to `Limits::max_header_bytes`
//!   (beyond: `HeaderTooLarge`, and the direction's HPACK table is lost, since a block cannot
//!   be skipped without desynchronising it); HPACK tables at most `MAX_HPACK_TABLE`; at most
//!   `MAX_DECODERS` content decoders; DATA content passes through as sub-slices. Work per call is proportional to the bytes given.
//! - Answers depend on marks, never on how the bytes of one mark are cut into calls.

pub(crate) mod frame;
pub(crate) mod hpack;

use std::collections::BTreeMap;
use std::mem;

use crate::app::coding::{ContentCoding, ContentDecoder};
use crate::record::{
    Anomaly, BodyEnd, Direction, HttpSink, Limits, Mark, RequestHead, ResponseHead, StreamEnd,
    head_text_owned,
};
use frame::{
    FLAG_ACK, FLAG_END_HEADERS, FLAG_END_STREAM, FrameEvent, FrameHeader, FrameReader, FrameType,
    GapEffect, Resync, Sender,
};
use hpack::HpackDecoder;

/// Streams followed at once per connection.
pub(crate) const MAX_STREAMS: usize = 1024;
/// Encoded bodies decoded at once per connection: each decoder holds an inflate window and
/// an output buffer (tens of KiB), so beyond this the least recently active one is evicted.
pub(crate) const MAX_DECODERS: usize = 64;
/// Largest HPACK dynamic table kept per direction. Browsers advertise 64 KiB; a peer that
/// asks for more than we keep makes its header blocks unreadable rather than our memory grow.
pub(crate) const MAX_HPACK_TABLE: usize = 64 * 1024;
/// While searching for a frame start, streams up to this many ids past the highest one seen
/// are believed (streams opened in the lost bytes).
const STREAM_ID_SLACK: u32 = 2 * 1024;
/// SETTINGS parameters (RFC 9113 section 6.5.2).
const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;

/// Frames seen, by type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FrameCounts {
    pub(crate) data: u64,
    pub(crate) headers: u64,
    pub(crate) priority: u64,
    pub(crate) rst_stream: u64,
    pub(crate) settings: u64,
    pub(crate) push_promise: u64,
    pub(crate) ping: u64,
    pub(crate) goaway: u64,
    pub(crate) window_update: u64,
    pub(crate) continuation: u64,
    pub(crate) unknown: u64,
}

impl FrameCounts {
    fn count(&mut self, kind: FrameType) {
        let n = match kind {
            FrameType::Data => &mut self.data,
            FrameType::Headers => &mut self.headers,
            FrameType::Priority => &mut self.priority,
            FrameType::RstStream => &mut self.rst_stream,
            FrameType::Settings => &mut self.settings,
            FrameType::PushPromise => &mut self.push_promise,
            FrameType::Ping => &mut self.ping,
            FrameType::GoAway => &mut self.goaway,
            FrameType::WindowUpdate => &mut self.window_update,
            FrameType::Continuation => &mut self.continuation,
            FrameType::Unknown(_) => &mut self.unknown,
        };
        *n += 1;
    }
}

/// What the parser saw of the connection, for coverage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct H2Stats {
    pub(crate) frames: FrameCounts,
    /// PUSH_PROMISE frames (their header blocks are decoded only to keep HPACK in step).
    pub(crate) push_promises: u64,
    /// Times framing was found again after lost bytes.
    pub(crate) resyncs: u64,
    /// Bytes skipped while searching for a frame start.
    pub(crate) bytes_skipped: u64,
    /// Header blocks that could not be read (HPACK table lost, block cut or too large).
    pub(crate) headers_unreadable: u64,
    /// Frames that break the protocol (skipped or ignored).
    pub(crate) protocol_errors: u64,
    /// Streams dropped to respect [`MAX_STREAMS`].
    pub(crate) streams_evicted: u64,
}

/// The HTTP/2 parser of one TCP connection (both directions).
pub(crate) struct Http2Connection {
    max_header_bytes: usize,
    abandoned: bool,
    client: Option<Direction>,
    dirs: [DirState; 2],
    streams: BTreeMap<u32, Stream>,
    /// After an upgrade: the exchange of stream 1.
    upgrade_base: Option<u32>,
    /// The server's GOAWAY error code, once one was seen.
    server_goaway: Option<u32>,
    /// Highest client stream id seen; new streams must be above it.
    highest_stream: u32,
    /// Activity counter: streams remember when they were last touched, for eviction.
    clock: u64,
    stats: H2Stats,
}

/// What the content of the frame being read feeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Current {
    Ignore,
    Data {
        stream: u32,
    },
    Block,
    Settings,
    /// RST_STREAM or GOAWAY: the first 8 bytes are kept.
    Fixed,
}

struct HeaderBlock {
    stream: u32,
    push: bool,
    first: Mark,
    end_stream: bool,
    bytes: Vec<u8>,
    /// Bytes of the block were lost or dropped: it cannot be decoded.
    lost: bool,
}

struct DirState {
    reader: FrameReader,
    /// `None` once the table is lost: no later block of this direction can be read.
    hpack: Option<HpackDecoder>,
    /// `Some` while framing is lost.
    resync: Option<Resync>,
    /// The first frame was seen (it must be SETTINGS).
    seen_frame: bool,
    ended: bool,
    /// Mark of the call that held the current frame's first byte.
    frame_first: Mark,
    current: Current,
    block: Option<HeaderBlock>,
    /// Partial SETTINGS entry, or the kept bytes of a RST_STREAM / GOAWAY.
    fixed: [u8; 8],
    fixed_have: usize,
}

impl DirState {
    fn new() -> Self {
        DirState {
            reader: FrameReader::new(),
            hpack: Some(HpackDecoder::new(MAX_HPACK_TABLE)),
            resync: None,
            seen_frame: false,
            ended: false,
            frame_first: Mark::default(),
            current: Current::Ignore,
            block: None,
            fixed: [0; 8],
            fixed_have: 0,
        }
    }

    fn keep_fixed(&mut self, bytes: &[u8], limit: usize) {
        for &b in bytes {
            if self.fixed_have >= limit {
                break;
            }
            if let Some(slot) = self.fixed.get_mut(self.fixed_have) {
                *slot = b;
            }
            self.fixed_have += 1;
        }
    }

    fn fixed_u32(&self, at: usize) -> u32 {
        let mut b = [0u8; 4];
        if let Some(src) = self.fixed.get(at..at + 4) {
            b.copy_from_slice(src);
        }
        u32::from_be_bytes(b)
    }
}

struct Stream {
    exchange: u32,
    /// Its request head was delivered (by this parser, or by HTTP/1.1 before an upgrade).
    request: bool,
    response: Response,
    /// Bytes of the body may be missing before the next ones: a `body_gap(0)` is due.
    gap_pending: bool,
    last_active: u64,
}

enum Response {
    /// No final response head yet.
    Awaiting,
    Body(Body),
}

struct Body {
    /// `body_end` not yet delivered; once it is, DATA is still followed silently.
    open: bool,
    decoder: Option<Box<ContentDecoder>>,
}

/// The header facts later stages use, from one decoded header block.
#[derive(Debug, Default)]
struct Fields {
    method: Option<String>,
    path: Option<String>,
    status: Option<String>,
    content_type: Option<String>,
    content_encoding: Option<String>,
    session_id: Option<String>,
    last_event_id: Option<String>,
    protocol_version: Option<String>,
}

impl Fields {
    fn add(&mut self, name: &[u8], value: &[u8]) {
        let text = || String::from_utf8_lossy(value).into_owned();
        // HTTP/2 names are lowercase on the wire; matching without case costs nothing.
        let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
        if is(":method") {
            self.method.get_or_insert_with(text);
        } else if is(":path") {
            self.path.get_or_insert_with(text);
        } else if is(":status") {
            self.status.get_or_insert_with(text);
        } else if is("content-type") {
            self.content_type.get_or_insert_with(text);
        } else if is("content-encoding") {
            match &mut self.content_encoding {
                Some(all) => {
                    all.push_str(", ");
                    all.push_str(&text());
                }
                None => self.content_encoding = Some(text()),
            }
        } else if is("mcp-session-id") {
            self.session_id.get_or_insert_with(text);
        } else if is("last-event-id") {
            self.last_event_id.get_or_insert_with(text);
        } else if is("mcp-protocol-version") {
            self.protocol_version.get_or_insert_with(text);
        }
    }

    /// The status code, when it is three digits.
    fn status_code(&self) -> Option<u16> {
        let s = self.status.as_deref()?;
        (s.len() == 3 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    }
}

impl Http2Connection {
    /// A connection that speaks HTTP/2 from its first byte (prior knowledge, or ALPN `h2`).
    pub(crate) fn new(limits: &Limits) -> Self {
        Http2Connection {
            max_header_bytes: limits.max_header_bytes,
            abandoned: false,
            client: None,
            dirs: [DirState::new(), DirState::new()],
            streams: BTreeMap::new(),
            upgrade_base: None,
            server_goaway: None,
            highest_stream: 0,
            clock: 0,
            stats: H2Stats::default(),
        }
    }

    /// A connection that switched from HTTP/1.1 by `Upgrade: h2c` (answered `101`): the bytes
    /// given next are each direction's first HTTP/2 bytes. Stream 1 is the upgraded request,
    /// already delivered as exchange `stream1_exchange`; stream `s` becomes exchange
    /// `stream1_exchange + (s - 1)`.
    pub(crate) fn upgraded(limits: &Limits, client: Direction, stream1_exchange: u32) -> Self {
        let mut conn = Http2Connection::new(limits);
        conn.client = Some(client);
        conn.upgrade_base = Some(stream1_exchange);
        conn.highest_stream = 1;
        conn.streams.insert(
            1,
            Stream {
                exchange: stream1_exchange,
                request: true,
                response: Response::Awaiting,
                gap_pending: false,
                last_active: 0,
            },
        );
        conn
    }

    /// The direction that sends requests, once known.
    pub(crate) fn client_direction(&self) -> Option<Direction> {
        self.client
    }

    /// Not HTTP/2 after all (bad preface, or a first frame other than SETTINGS): the caller
    /// stops feeding it.
    pub(crate) fn is_abandoned(&self) -> bool {
        self.abandoned
    }

    pub(crate) fn stats(&self) -> &H2Stats {
        &self.stats
    }

    /// The next in-order bytes of `dir`, all seen in the frame `mark`.
    pub(crate) fn data<S: HttpSink>(
        &mut self,
        dir: Direction,
        bytes: &[u8],
        mark: Mark,
        sink: &mut S,
    ) {
        let d = dir.index();
        if self.abandoned || self.dirs[d].ended {
            return;
        }
        if self.dirs[d].resync.is_some() {
            let (sender, max_frame, ceiling) = self.search_hints(dir);
            let plausible =
                |h: &FrameHeader| frame::plausible(h, sender, max_frame) && h.stream <= ceiling;
            let Some(resync) = self.dirs[d].resync.as_mut() else {
                return;
            };
            let (taken, replay) = resync.push(bytes, mark, plausible);
            let Some(replay) = replay else {
                return;
            };
            self.stats.bytes_skipped += resync.skipped();
            self.stats.resyncs += 1;
            self.dirs[d].resync = None;
            self.dirs[d].reader.resume();
            sink.anomaly(Anomaly::Resynchronized, mark);
            for (m, piece) in &replay {
                self.feed(dir, piece, *m, sink);
            }
            self.feed(dir, bytes.get(taken..).unwrap_or_default(), mark, sink);
            return;
        }
        self.feed(dir, bytes, mark, sink);
    }

    /// `len` bytes of `dir` are missing from the capture at this point of the stream; 0 when
    /// how many is not known (bytes lost under TLS), which no frame boundary survives.
    pub(crate) fn gap<S: HttpSink>(&mut self, dir: Direction, len: u64, mark: Mark, sink: &mut S) {
        let d = dir.index();
        if self.abandoned || self.dirs[d].ended {
            return;
        }
        if let Some(resync) = self.dirs[d].resync.as_mut() {
            // Nothing buffered can join the bytes after the gap.
            self.stats.bytes_skipped += resync.skipped();
            *resync = Resync::default();
            return;
        }
        if len == 0 {
            self.lose_sync(dir, mark, sink);
            return;
        }
        match self.dirs[d].reader.gap(len) {
            GapEffect::InSkipped
            | GapEffect::InFrame {
                content_lost: Some(0),
                ..
            } => {}
            GapEffect::InFrame { content_lost, .. } => {
                match self.dirs[d].current {
                    Current::Data { stream } => {
                        self.body_lost(stream, content_lost, mark, sink);
                    }
                    Current::Block => {
                        if let Some(block) = self.dirs[d].block.as_mut() {
                            block.lost = true;
                            block.bytes = Vec::new();
                        }
                    }
                    // A cut SETTINGS, RST_STREAM or GOAWAY cannot be applied.
                    _ => self.dirs[d].current = Current::Ignore,
                }
            }
            GapEffect::Lost => {
                self.lose_sync(dir, mark, sink);
                return;
            }
        }
        // A gap that reached its frame's end ends the frame here, at the gap, rather than at
        // the next bytes of the direction, which a cut of the stream could move.
        self.feed(dir, &[], mark, sink);
    }

    /// `dir` ended. When it is the server's, every open body ends: `GoneAway` after a GOAWAY,
    /// else `Stream(how)`.
    pub(crate) fn end<S: HttpSink>(
        &mut self,
        dir: Direction,
        how: StreamEnd,
        mark: Mark,
        sink: &mut S,
    ) {
        let d = dir.index();
        if self.abandoned || self.dirs[d].ended {
            return;
        }
        self.dirs[d].ended = true;
        self.dirs[d].block = None;
        self.dirs[d].resync = None;
        if self.client != Some(dir.other()) {
            return;
        }
        let end = match self.server_goaway {
            Some(code) => BodyEnd::GoneAway { code },
            None => BodyEnd::Stream(how),
        };
        for (_, stream) in mem::take(&mut self.streams) {
            end_body(stream, end, mark, sink);
        }
    }

    // ----- bytes to frames -----

    fn feed<S: HttpSink>(&mut self, dir: Direction, bytes: &[u8], mark: Mark, sink: &mut S) {
        let d = dir.index();
        let mut rest = bytes;
        loop {
            if self.abandoned || self.dirs[d].resync.is_some() {
                return;
            }
            let state = &mut self.dirs[d];
            let (used, event) = state.reader.next(rest);
            if state.reader.header_began() {
                state.frame_first = mark;
            }
            rest = rest.get(used..).unwrap_or_default();
            match event {
                None => return,
                Some(event) => self.on_event(dir, event, mark, sink),
            }
        }
    }

    fn on_event<S: HttpSink>(
        &mut self,
        dir: Direction,
        event: FrameEvent<'_>,
        mark: Mark,
        sink: &mut S,
    ) {
        let d = dir.index();
        match event {
            FrameEvent::Preface => match self.client {
                None => self.client = Some(dir),
                Some(c) if c == dir => {}
                // Both sides claim to be the client.
                Some(_) => self.abandon(mark, sink),
            },
            FrameEvent::NotHttp2 => self.abandon(mark, sink),
            FrameEvent::Oversized(h) => {
                self.stats.frames.count(h.kind);
                if !self.first_frame(dir, &h, mark, sink) {
                    return;
                }
                self.protocol_error(mark, sink);
                self.interrupt_block(dir, &h, mark, sink);
                self.frame_lost(dir, &h, mark, sink);
            }
            FrameEvent::Begin(h) => {
                self.stats.frames.count(h.kind);
                if !self.first_frame(dir, &h, mark, sink) {
                    return;
                }
                self.interrupt_block(dir, &h, mark, sink);
                self.dirs[d].current = self.begin_frame(dir, &h, mark, sink);
                self.dirs[d].fixed_have = 0;
            }
            FrameEvent::Content(bytes) => self.content(dir, bytes, mark, sink),
            FrameEvent::End(h) => {
                let current = mem::replace(&mut self.dirs[d].current, Current::Ignore);
                self.end_frame(dir, &h, current, mark, sink);
            }
            FrameEvent::Malformed(h) => {
                self.protocol_error(mark, sink);
                self.dirs[d].current = Current::Ignore;
                self.frame_lost(dir, &h, mark, sink);
            }
        }
    }

    /// The first frame of a direction must be SETTINGS (RFC 9113 section 3.4); the side
    /// that sent no preface is the server. Returns false when the connection was abandoned.
    fn first_frame<S: HttpSink>(
        &mut self,
        dir: Direction,
        h: &FrameHeader,
        mark: Mark,
        sink: &mut S,
    ) -> bool {
        let state = &mut self.dirs[dir.index()];
        if state.seen_frame {
            return true;
        }
        state.seen_frame = true;
        if h.kind != FrameType::Settings || h.has(FLAG_ACK) {
            self.abandon(mark, sink);
            return false;
        }
        if self.client.is_none() {
            self.client = Some(dir.other());
        }
        true
    }

    /// What the content of a new frame feeds.
    fn begin_frame<S: HttpSink>(
        &mut self,
        dir: Direction,
        h: &FrameHeader,
        mark: Mark,
        sink: &mut S,
    ) -> Current {
        let d = dir.index();
        let from_server = self.client == Some(dir.other());
        let fixed_len_ok = |len: u32| h.length == len;
        match h.kind {
            FrameType::Data => {
                if !from_server {
                    return Current::Ignore;
                }
                let server_lost = self.dirs[d].hpack.is_none();
                match self.streams.get_mut(&h.stream) {
                    Some(stream) => {
                        self.clock += 1;
                        stream.last_active = self.clock;
                        match &stream.response {
                            Response::Body(_) => Current::Data { stream: h.stream },
                            // DATA before any response head: the head was in lost bytes.
                            Response::Awaiting if server_lost => {
                                if let Some(stream) = self.streams.remove(&h.stream) {
                                    answer_lost(&stream, mark, sink);
                                }
                                Current::Ignore
                            }
                            Response::Awaiting => {
                                self.protocol_error(mark, sink);
                                Current::Ignore
                            }
                        }
                    }
                    None => Current::Ignore,
                }
            }
            FrameType::Headers | FrameType::PushPromise => {
                let push = h.kind == FrameType::PushPromise;
                if push {
                    self.stats.push_promises += 1;
                }
                self.dirs[d].block = Some(HeaderBlock {
                    stream: h.stream,
                    push,
                    first: self.dirs[d].frame_first,
                    end_stream: !push && h.has(FLAG_END_STREAM),
                    bytes: Vec::new(),
                    lost: false,
                });
                Current::Block
            }
            FrameType::Continuation => {
                if self.dirs[d]
                    .block
                    .as_ref()
                    .is_some_and(|b| b.stream == h.stream)
                {
                    Current::Block
                } else {
                    // A fragment of a block never seen: the table may now be out of step.
                    self.protocol_error(mark, sink);
                    self.dirs[d].hpack = None;
                    Current::Ignore
                }
            }
            FrameType::Settings => {
                let ok = if h.has(FLAG_ACK) {
                    h.length == 0
                } else {
                    h.length.is_multiple_of(6)
                };
                if ok && h.stream == 0 {
                    Current::Settings
                } else {
                    self.protocol_error(mark, sink);
                    Current::Ignore
                }
            }
            FrameType::RstStream if fixed_len_ok(4) && h.stream != 0 => Current::Fixed,
            FrameType::GoAway if h.length >= 8 && h.stream == 0 => Current::Fixed,
            FrameType::RstStream | FrameType::GoAway => {
                self.protocol_error(mark, sink);
                Current::Ignore
            }
            FrameType::Ping if !fixed_len_ok(8) => {
                self.protocol_error(mark, sink);
                Current::Ignore
            }
            FrameType::WindowUpdate if !fixed_len_ok(4) => {
                self.protocol_error(mark, sink);
                Current::Ignore
            }
            FrameType::Priority if !fixed_len_ok(5) => {
                self.protocol_error(mark, sink);
                Current::Ignore
            }
            _ => Current::Ignore,
        }
    }

    fn content<S: HttpSink>(&mut self, dir: Direction, bytes: &[u8], mark: Mark, sink: &mut S) {
        let d = dir.index();
        match self.dirs[d].current {
            Current::Ignore => {}
            Current::Data { stream } => self.deliver(stream, bytes, mark, sink),
            Current::Block => {
                let max = self.max_header_bytes;
                let Some(block) = self.dirs[d].block.as_mut() else {
                    return;
                };
                if block.lost {
                    return;
                }
                if block.bytes.len() + bytes.len() > max {
                    block.lost = true;
                    block.bytes = Vec::new();
                    sink.anomaly(Anomaly::HeaderTooLarge, mark);
                    // The block is not kept, so the table cannot follow it.
                    self.dirs[d].hpack = None;
                    return;
                }
                block.bytes.extend_from_slice(bytes);
            }
            Current::Settings => {
                for &b in bytes {
                    let state = &mut self.dirs[d];
                    state.keep_fixed(&[b], 6);
                    if state.fixed_have == 6 {
                        let id = u16::from_be_bytes([state.fixed[0], state.fixed[1]]);
                        let value = state.fixed_u32(2);
                        state.fixed_have = 0;
                        self.apply_setting(dir, id, value, mark, sink);
                    }
                }
            }
            Current::Fixed => self.dirs[d].keep_fixed(bytes, 8),
        }
    }

    /// A SETTINGS value sent by `dir` binds what the other direction sends.
    fn apply_setting<S: HttpSink>(
        &mut self,
        dir: Direction,
        id: u16,
        value: u32,
        mark: Mark,
        sink: &mut S,
    ) {
        let peer = &mut self.dirs[dir.other().index()];
        match id {
            SETTINGS_MAX_FRAME_SIZE => {
                if (frame::DEFAULT_MAX_FRAME_SIZE..=frame::MAX_FRAME_SIZE_LIMIT).contains(&value) {
                    peer.reader.max_frame_size = value;
                } else {
                    self.protocol_error(mark, sink);
                }
            }
            // The table bound is enforced by the decoder itself (MAX_HPACK_TABLE): a peer
            // encoder that uses more than we keep fails its block rather than our memory.
            SETTINGS_HEADER_TABLE_SIZE => {}
            _ => {}
        }
    }

    fn end_frame<S: HttpSink>(
        &mut self,
        dir: Direction,
        h: &FrameHeader,
        current: Current,
        mark: Mark,
        sink: &mut S,
    ) {
        let d = dir.index();
        match (h.kind, current) {
            (FrameType::Data, Current::Data { stream }) if h.has(FLAG_END_STREAM) => {
                if let Some(stream) = self.streams.remove(&stream) {
                    end_body(stream, BodyEnd::Complete, mark, sink);
                }
            }
            (
                FrameType::Headers | FrameType::PushPromise | FrameType::Continuation,
                Current::Block,
            ) if h.has(FLAG_END_HEADERS) => {
                self.finish_block(dir, mark, sink);
            }
            (FrameType::RstStream, Current::Fixed) if self.dirs[d].fixed_have >= 4 => {
                let code = self.dirs[d].fixed_u32(0);
                if let Some(stream) = self.streams.remove(&h.stream) {
                    let by_client = self.client == Some(dir);
                    end_body(stream, BodyEnd::Reset { by_client, code }, mark, sink);
                }
            }
            // A client's GOAWAY names pushed streams only: nothing of ours.
            (FrameType::GoAway, Current::Fixed)
                if self.dirs[d].fixed_have >= 8 && self.client == Some(dir.other()) =>
            {
                let last = self.dirs[d].fixed_u32(0) & 0x7fff_ffff;
                let code = self.dirs[d].fixed_u32(4);
                self.server_goaway = Some(code);
                // Streams above the last one named were never processed by the server.
                let above: Vec<u32> = self
                    .streams
                    .range(last.saturating_add(1)..)
                    .map(|(&id, _)| id)
                    .collect();
                for id in above {
                    if let Some(stream) = self.streams.remove(&id) {
                        end_body(stream, BodyEnd::GoneAway { code }, mark, sink);
                    }
                }
            }
            _ => {}
        }
    }

    // ----- header blocks -----

    /// A frame other than the block's CONTINUATION interrupts an open header block: the
    /// block is lost and the table with it.
    fn interrupt_block<S: HttpSink>(
        &mut self,
        dir: Direction,
        h: &FrameHeader,
        mark: Mark,
        sink: &mut S,
    ) {
        let d = dir.index();
        let Some(block) = self.dirs[d].block.as_mut() else {
            return;
        };
        if h.kind == FrameType::Continuation && h.stream == block.stream {
            return;
        }
        block.lost = true;
        block.bytes = Vec::new();
        self.protocol_error(mark, sink);
        self.finish_block(dir, mark, sink);
    }

    /// A frame that was skipped whole or cut: what it carried is lost.
    fn frame_lost<S: HttpSink>(
        &mut self,
        dir: Direction,
        h: &FrameHeader,
        mark: Mark,
        sink: &mut S,
    ) {
        let d = dir.index();
        match h.kind {
            FrameType::Data if self.client == Some(dir.other()) => {
                self.body_lost(h.stream, None, mark, sink);
            }
            FrameType::Headers | FrameType::PushPromise | FrameType::Continuation => {
                self.dirs[d].hpack = None;
                if let Some(block) = self.dirs[d].block.as_mut() {
                    block.lost = true;
                    block.bytes = Vec::new();
                } else {
                    self.dirs[d].block = Some(HeaderBlock {
                        stream: h.stream,
                        push: h.kind == FrameType::PushPromise,
                        first: self.dirs[d].frame_first,
                        end_stream: h.kind == FrameType::Headers && h.has(FLAG_END_STREAM),
                        bytes: Vec::new(),
                        lost: true,
                    });
                }
                if h.has(FLAG_END_HEADERS) {
                    self.finish_block(dir, mark, sink);
                }
            }
            _ => {}
        }
    }

    fn finish_block<S: HttpSink>(&mut self, dir: Direction, mark: Mark, sink: &mut S) {
        let d = dir.index();
        let Some(block) = self.dirs[d].block.take() else {
            return;
        };
        let mut fields = None;
        if !block.lost
            && let Some(decoder) = self.dirs[d].hpack.as_mut()
        {
            let mut f = Fields::default();
            match decoder.decode(&block.bytes, |n, v| f.add(n, v)) {
                Ok(()) => fields = Some(f),
                // Never guess: the table may hold part of the block now.
                Err(_) => self.dirs[d].hpack = None,
            }
        }
        if block.lost {
            // Whatever the table would have learnt from the block is gone with it.
            self.dirs[d].hpack = None;
        }
        if fields.is_none() {
            self.stats.headers_unreadable += 1;
        }
        if block.push {
            return;
        }
        if self.client == Some(dir) {
            self.request_block(&block, fields, mark, sink);
        } else if self.client == Some(dir.other()) {
            self.response_block(&block, fields, mark, sink);
        }
    }

    fn request_block<S: HttpSink>(
        &mut self,
        block: &HeaderBlock,
        fields: Option<Fields>,
        mark: Mark,
        sink: &mut S,
    ) {
        let id = block.stream;
        if self.streams.contains_key(&id) {
            // Trailers of the request: nothing later stages use.
            return;
        }
        if id <= self.highest_stream || id.is_multiple_of(2) {
            // Stream ids only grow (RFC 9113 section 5.1.1); an old id is no new request.
            self.protocol_error(mark, sink);
            return;
        }
        let Some(exchange) = self.exchange_of(id) else {
            return;
        };
        self.highest_stream = id;
        self.open_stream(id, exchange, mark, sink);
        let Some(f) = fields else {
            return;
        };
        if let Some(stream) = self.streams.get_mut(&id) {
            stream.request = true;
        }
        sink.request(RequestHead {
            exchange,
            method: head_text_owned(f.method.unwrap_or_default()),
            target: head_text_owned(f.path.unwrap_or_default()),
            session_id: f.session_id,
            last_event_id: f.last_event_id,
            protocol_version: f.protocol_version.map(head_text_owned),
            first: block.first,
            complete: mark,
            h2_stream: Some(id),
        });
    }

    fn response_block<S: HttpSink>(
        &mut self,
        block: &HeaderBlock,
        fields: Option<Fields>,
        mark: Mark,
        sink: &mut S,
    ) {
        let id = block.stream;
        if id.is_multiple_of(2) {
            // A pushed stream's answer: decoded only to keep the table in step.
            return;
        }
        if !self.streams.contains_key(&id) {
            // The request was not read (lost bytes, or a capture that missed it).
            let Some(exchange) = self.exchange_of(id).filter(|_| id > self.highest_stream) else {
                return;
            };
            self.highest_stream = id;
            self.open_stream(id, exchange, mark, sink);
        }
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        self.clock += 1;
        stream.last_active = self.clock;
        if let Response::Body(_) = stream.response {
            // Trailers end the body, readable or not.
            if let Some(stream) = self.streams.remove(&id) {
                end_body(stream, BodyEnd::Complete, mark, sink);
            }
            return;
        }
        let Some(f) = fields else {
            // The answer's head is lost: nothing of this exchange can be read any more.
            if let Some(stream) = self.streams.remove(&id) {
                answer_lost(&stream, mark, sink);
            }
            return;
        };
        let Some(status) = f.status_code() else {
            self.protocol_error(mark, sink);
            if block.end_stream {
                self.streams.remove(&id);
            }
            return;
        };
        if (100..200).contains(&status) {
            // Interim response: the final one is still to come.
            return;
        }
        let exchange = stream.exchange;
        let coding = f
            .content_encoding
            .as_deref()
            .map_or(ContentCoding::Identity, ContentCoding::parse);
        sink.response(ResponseHead {
            exchange,
            status,
            content_type: f.content_type.map(head_text_owned),
            session_id: f.session_id,
            content_encoding: f.content_encoding,
            first: block.first,
            complete: mark,
            h2_stream: Some(id),
        });
        let mut body = Body {
            open: true,
            decoder: None,
        };
        match coding {
            ContentCoding::Identity => {}
            ContentCoding::Gzip | ContentCoding::Deflate => {
                self.make_room_for_decoder(id, mark, sink);
                body.decoder = Some(Box::new(if coding == ContentCoding::Gzip {
                    ContentDecoder::gzip()
                } else {
                    ContentDecoder::deflate()
                }));
            }
            ContentCoding::Unsupported => {
                sink.anomaly(Anomaly::BadContentEncoding, mark);
                sink.body_end(exchange, BodyEnd::Malformed, mark);
                body.open = false;
            }
        }
        if let Some(stream) = self.streams.get_mut(&id) {
            stream.response = Response::Body(body);
        }
        if block.end_stream
            && let Some(stream) = self.streams.remove(&id)
        {
            end_body(stream, BodyEnd::Complete, mark, sink);
        }
    }

    // ----- streams -----

    fn exchange_of(&self, stream: u32) -> Option<u32> {
        if stream.is_multiple_of(2) {
            return None;
        }
        match self.upgrade_base {
            Some(base) => base.checked_add(stream - 1),
            None => Some(stream),
        }
    }

    fn open_stream<S: HttpSink>(&mut self, id: u32, exchange: u32, mark: Mark, sink: &mut S) {
        if self.streams.len() >= MAX_STREAMS {
            let oldest = self
                .streams
                .iter()
                .min_by_key(|(_, s)| s.last_active)
                .map(|(&id, _)| id);
            if let Some(stream) = oldest.and_then(|id| self.streams.remove(&id)) {
                self.stats.streams_evicted += 1;
                end_body(stream, BodyEnd::Stream(StreamEnd::Evicted), mark, sink);
            }
        }
        self.clock += 1;
        self.streams.insert(
            id,
            Stream {
                exchange,
                request: false,
                response: Response::Awaiting,
                gap_pending: false,
                last_active: self.clock,
            },
        );
    }

    /// Evicts the least recently active stream holding a content decoder when
    /// [`MAX_DECODERS`] are held (`keep` is the stream about to get one).
    fn make_room_for_decoder<S: HttpSink>(&mut self, keep: u32, mark: Mark, sink: &mut S) {
        let holders = self
            .streams
            .iter()
            .filter(|(_, s)| matches!(&s.response, Response::Body(b) if b.decoder.is_some()));
        if holders.clone().count() < MAX_DECODERS {
            return;
        }
        let oldest = holders
            .filter(|&(&id, _)| id != keep)
            .min_by_key(|(_, s)| s.last_active)
            .map(|(&id, _)| id);
        if let Some(stream) = oldest.and_then(|id| self.streams.remove(&id)) {
            self.stats.streams_evicted += 1;
            end_body(stream, BodyEnd::Stream(StreamEnd::Evicted), mark, sink);
        }
    }

    fn deliver<S: HttpSink>(&mut self, id: u32, bytes: &[u8], mark: Mark, sink: &mut S) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        let exchange = stream.exchange;
        let Response::Body(body) = &mut stream.response else {
            return;
        };
        if !body.open || bytes.is_empty() {
            return;
        }
        if mem::take(&mut stream.gap_pending) {
            sink.body_gap(exchange, 0, mark);
        }
        let Some(decoder) = body.decoder.as_mut() else {
            sink.body(exchange, bytes, mark);
            return;
        };
        if decoder
            .feed(bytes, |out| sink.body(exchange, out, mark))
            .is_err()
        {
            sink.anomaly(Anomaly::BadContentEncoding, mark);
            sink.body_end(exchange, BodyEnd::Malformed, mark);
            body.open = false;
            body.decoder = None;
        }
    }

    /// Content of a stream's body is missing: `Some(n)` bytes, or an unknown count.
    fn body_lost<S: HttpSink>(&mut self, id: u32, lost: Option<u64>, mark: Mark, sink: &mut S) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        let Response::Body(body) = &mut stream.response else {
            return;
        };
        body_gap(
            stream.exchange,
            body,
            &mut stream.gap_pending,
            lost,
            mark,
            sink,
        );
    }

    // ----- lost bytes -----

    /// A gap that may hold frame headers: framing and the HPACK table of `dir` are lost.
    fn lose_sync<S: HttpSink>(&mut self, dir: Direction, mark: Mark, sink: &mut S) {
        let d = dir.index();
        let state = &mut self.dirs[d];
        state.hpack = None;
        state.resync = Some(Resync::default());
        // The first frame found after lost bytes need not be the direction's first.
        state.seen_frame = true;
        state.current = Current::Ignore;
        if let Some(block) = state.block.as_mut() {
            // Its end, if any, was in the gap or will look like a stray CONTINUATION.
            block.lost = true;
            block.bytes = Vec::new();
            self.finish_block(dir, mark, sink);
        }
        if self.client != Some(dir.other()) {
            return;
        }
        // Any open body may have lost bytes: the next ones get a gap of unknown length.
        for stream in self.streams.values_mut() {
            if let Response::Body(body) = &mut stream.response {
                body_gap(
                    stream.exchange,
                    body,
                    &mut stream.gap_pending,
                    None,
                    mark,
                    sink,
                );
            }
        }
    }

    /// The bounds a frame start must keep while `dir` is searched.
    fn search_hints(&self, dir: Direction) -> (Option<Sender>, u32, u32) {
        let sender = self.client.map(|c| {
            if c == dir {
                Sender::Client
            } else {
                Sender::Server
            }
        });
        let max_frame = self.dirs[dir.index()].reader.max_frame_size;
        (
            sender,
            max_frame,
            self.highest_stream.saturating_add(STREAM_ID_SLACK),
        )
    }

    fn protocol_error<S: HttpSink>(&mut self, mark: Mark, sink: &mut S) {
        self.stats.protocol_errors += 1;
        sink.anomaly(Anomaly::Http2Protocol, mark);
    }

    fn abandon<S: HttpSink>(&mut self, mark: Mark, sink: &mut S) {
        self.abandoned = true;
        for (_, stream) in mem::take(&mut self.streams) {
            end_body(stream, BodyEnd::Stream(StreamEnd::Abandoned), mark, sink);
        }
        for state in &mut self.dirs {
            state.block = None;
            state.resync = None;
        }
    }
}

/// Missing body bytes: an encoded body cannot be decoded past them, so it ends; a plain one
/// gets the gap now (count known) or before its next bytes (count unknown).
fn body_gap<S: HttpSink>(
    exchange: u32,
    body: &mut Body,
    gap_pending: &mut bool,
    lost: Option<u64>,
    mark: Mark,
    sink: &mut S,
) {
    if !body.open {
        return;
    }
    if body.decoder.is_some() {
        if mem::take(gap_pending) {
            sink.body_gap(exchange, 0, mark);
        }
        sink.body_gap(exchange, 0, mark);
        sink.body_end(exchange, BodyEnd::LostSync, mark);
        body.open = false;
        body.decoder = None;
        return;
    }
    match lost {
        Some(n) => {
            if mem::take(gap_pending) {
                sink.body_gap(exchange, 0, mark);
            }
            sink.body_gap(exchange, n, mark);
        }
        None => *gap_pending = true,
    }
}

/// The response head of a stream can no longer be read: a delivered request ends
/// `LostSync` without a response (the sink contract's one exception).
fn answer_lost<S: HttpSink>(stream: &Stream, mark: Mark, sink: &mut S) {
    if stream.request {
        sink.body_end(stream.exchange, BodyEnd::LostSync, mark);
    }
}

/// Ends the body of a stream that is being dropped, if its head was delivered and its end
/// not yet.
fn end_body<S: HttpSink>(stream: Stream, how: BodyEnd, mark: Mark, sink: &mut S) {
    let Response::Body(body) = stream.response else {
        return;
    };
    if !body.open {
        return;
    }
    if stream.gap_pending {
        sink.body_gap(stream.exchange, 0, mark);
    }
    if how == BodyEnd::Complete && body.decoder.as_ref().is_some_and(|d| !d.at_end()) {
        // The stream ended inside the compressed data.
        sink.anomaly(Anomaly::BadContentEncoding, mark);
        sink.body_end(stream.exchange, BodyEnd::Malformed, mark);
        return;
    }
    sink.body_end(stream.exchange, how, mark);
}

#[cfg(test)]
mod tests;
