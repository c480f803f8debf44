//! HTTP/1.1 exchanges of one TCP connection, parsed incrementally from both directions.
//!
//! Input: the calls of [`crate::record::StreamSink`] for one connection — in-order bytes of
//! each direction, missing bytes as `gap(len)`, one `end` per direction — forwarded to
//! [`HttpConnection::data`], [`HttpConnection::gap`] and [`HttpConnection::end`].
//!
//! Output: calls of [`HttpSink`]: request heads, final response heads, content-decoded
//! response body bytes (gzip, x-gzip, deflate), body gaps, one body end per delivered response
//! head, and anomalies. Request bodies are followed for framing only, never delivered.
//!
//! Invariants:
//! - Roles are decided by content: the direction whose stream begins with a request line is
//!   the client. When the capture saw the SYN (`from_start`) and a direction begins with
//!   neither a request line nor a status line, the connection is abandoned at once.
//! - Exchanges are numbered from 0 in request order; responses pair with requests first in,
//!   first out. Once requests or responses may have been lost (a gap or skipped bytes in
//!   either direction, or a capture that began mid-connection), pairing is uncertain: a
//!   response then pairs with the newest pending request that was complete before the
//!   response began (clients do not pipeline in practice), dropping older pending ones; with
//!   no such request it is reported unpaired and numbered as a new exchange.
//! - `body_end` is delivered exactly once per delivered response head, and nothing for that
//!   exchange follows it. A body whose framing survives a gap gets `body_gap` and goes on;
//!   a body whose framing does not gets `body_gap` then `BodyEnd::LostSync`;
//!   an encoded body cannot be decoded past a gap, so it gets `body_gap(0)` then
//!   `BodyEnd::LostSync` (missing bytes are the capture's fault, not malformed data), and its
//!   framing is still followed to the next message.
//! - Lost framing (a gap in a head or a chunk-size line, a bad chunk, a bad Content-Length, an
//!   oversized head, bytes that are not HTTP) makes the direction skip to the next line that
//!   begins a request line or status line; `Anomaly::Resynchronized` is reported once for each
//!   run of skipped bytes. Messages usually begin a TCP segment, so while skipping, the first
//!   byte of a segment (a change of [`Mark`]) also counts as a line start. Results depend on
//!   marks, never on how the bytes of one mark are cut into calls.
//! - State per direction is bounded: a message head is buffered up to
//!   `Limits::max_header_bytes`; body bytes are passed through as sub-slices of the input (or
//!   decoded through a fixed-size buffer); pending requests are capped. Work per call is
//!   proportional to the bytes given (times the deflate expansion ratio for encoded bodies).
//! - After a `101 Switching Protocols` or a successful `CONNECT` the connection stops
//!   speaking HTTP: it is abandoned and later calls return at once.

use std::collections::VecDeque;
use std::mem;
use std::ops::Range;
use std::sync::LazyLock;

use memchr::memmem;

use crate::app::coding::{ContentCoding, ContentDecoder};
use crate::record::{
    Anomaly, BodyEnd, Direction, HeadText, HttpSink, Limits, Mark, RequestHead, ResponseHead,
    StreamEnd, head_text, known_head_bytes,
};

/// Header lines parsed per head; more is reported as `HeaderTooLarge`.
const MAX_HEADERS: usize = 128;
/// Requests awaiting a response, per connection. Older ones are forgotten beyond it (and
/// pairing becomes uncertain), so a client that never gets answers cannot grow memory.
const MAX_PENDING_REQUESTS: usize = 1024;
/// Longest request method accepted while deciding whether bytes start a request line.
const MAX_METHOD_LEN: u8 = 32;
/// Head buffers larger than this are released after use rather than kept per connection.
const RETAINED_HEAD_CAPACITY: usize = 4 * 1024;
/// The common prefix of request-line versions and status lines.
const VERSION_PREFIX: &[u8] = b"HTTP/1.";

static VERSION_FINDER: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(VERSION_PREFIX));

/// The HTTP/1.x parser of one TCP connection (both directions).
pub struct HttpConnection {
    max_header_bytes: usize,
    from_start: bool,
    abandoned: bool,
    client: Option<Direction>,
    directions: [DirectionParser; 2],
    /// Requests delivered and not yet answered, oldest first, with markers where requests
    /// may have been lost.
    pending: VecDeque<Pending>,
    next_exchange: u32,
    /// The server direction lost framing since the last delivered response: responses may
    /// have been lost, so FIFO pairing cannot be trusted.
    responses_lost: bool,
    /// The newest request that the server's bytes since given are known to acknowledge:
    /// it and every earlier one were made before those bytes, whatever their frames.
    acknowledged: Option<u32>,
    /// A `101 Switching Protocols` to `h2c` answered this exchange: the connection goes on
    /// as HTTP/2, the exchange as its stream 1.
    switched_to_h2c: Option<u32>,
    /// Per direction, the newest segment said to be sent before the other direction's last
    /// bytes arrived ([`HttpConnection::before_peer`]): its frame, and the position in the
    /// other direction that its acknowledgment reached.
    sent_before: [Option<(u64, u64)>; 2],
    /// Per direction, bytes said to come ahead of bytes of the other direction the capture
    /// has not shown ([`HttpConnection::ahead_of_peer`]) before either direction's role was
    /// known: taken into account once it is.
    ahead_unplaced: [bool; 2],
}

impl HttpConnection {
    /// `from_start`: the capture saw the connection's SYN, so each direction's first byte is
    /// the first byte the peer sent.
    pub fn new(limits: &Limits, from_start: bool) -> Self {
        let initial = || {
            if from_start {
                State::Head
            } else {
                State::Resync { line_start: true }
            }
        };
        let mut pending = VecDeque::new();
        if !from_start {
            // Requests sent before the capture began may still be waiting for responses.
            pending.push_back(Pending::Lost);
        }
        HttpConnection {
            max_header_bytes: limits.max_header_bytes,
            from_start,
            abandoned: false,
            client: None,
            directions: [
                DirectionParser::new(initial()),
                DirectionParser::new(initial()),
            ],
            pending,
            next_exchange: 0,
            responses_lost: !from_start,
            acknowledged: None,
            switched_to_h2c: None,
            sent_before: [None; 2],
            ahead_unplaced: [false; 2],
        }
    }

    /// The direction that carries requests, once known (by content: a request line vs a
    /// status line).
    pub fn client_direction(&self) -> Option<Direction> {
        self.client
    }

    /// The connection does not speak HTTP (or switched protocols): the caller stops feeding it.
    pub fn is_abandoned(&self) -> bool {
        self.abandoned
    }

    /// The exchange whose `101` switched the connection to HTTP/2 (`Upgrade: h2c`), if any.
    pub fn switched_to_h2c(&self) -> Option<u32> {
        self.switched_to_h2c
    }

    /// The next in-order bytes of `dir`, all seen in the frame `mark`. Returns how many were
    /// taken: all of them, unless the connection switched protocols within them (the rest
    /// belongs to the new protocol).
    pub fn data<S: HttpSink>(
        &mut self,
        dir: Direction,
        bytes: &[u8],
        mark: Mark,
        sink: &mut S,
    ) -> usize {
        if self.abandoned {
            return 0;
        }
        let d = dir.index();
        let parser = &mut self.directions[d];
        let new_segment = parser.last_mark != Some(mark);
        parser.last_mark = Some(mark);
        let base = parser.given;
        parser.given = base.saturating_add(bytes.len() as u64);
        let mut rest = bytes;
        let mut idle_steps = 0u32;
        while !rest.is_empty() && !self.abandoned {
            // A segment is the run of bytes sharing one mark, however the calls cut it.
            let at_segment_start = new_segment && rest.len() == bytes.len();
            self.directions[d].at = base.saturating_add((bytes.len() - rest.len()) as u64);
            let used = match &self.directions[d].state {
                State::Ended => return bytes.len(),
                State::Head => self.step_head(d, rest, at_segment_start, mark, sink),
                // Messages usually begin a segment: its first byte counts as a line start.
                State::Resync { line_start } => {
                    let line_start = *line_start || at_segment_start;
                    self.step_resync(d, rest, line_start, mark, sink)
                }
                State::RequestBody(_) => self.step_request_body(d, rest, mark, sink),
                State::ResponseBody(_) => self.step_response_body(d, rest, mark, sink),
            };
            // Every step consumes bytes or moves to a state that will; this bound only keeps
            // a mistake in that reasoning from turning into a hang on hostile input.
            if used == 0 {
                idle_steps += 1;
                if idle_steps > 8 {
                    self.note_skip(d, mark, sink);
                    self.lose_sync(d, false);
                    return bytes.len();
                }
            } else {
                idle_steps = 0;
            }
            rest = rest.get(used..).unwrap_or_default();
        }
        if self.abandoned {
            bytes.len() - rest.len()
        } else {
            bytes.len()
        }
    }

    /// `len` bytes of `dir` are missing from the capture at this point of the stream; 0 when
    /// how many is not known (bytes lost under TLS, or a direction it cannot read any more).
    pub fn gap<S: HttpSink>(&mut self, dir: Direction, len: u64, mark: Mark, sink: &mut S) {
        if self.abandoned {
            return;
        }
        let d = dir.index();
        self.directions[d].last_mark = None;
        self.directions[d].given = self.directions[d].given.saturating_add(len);
        match &mut self.directions[d].state {
            State::Ended => {}
            State::Head | State::Resync { .. } => self.lose_sync(d, true),
            State::RequestBody(framing) => match framing.gap(len) {
                GapEffect::Kept => {}
                GapEffect::KeptAndComplete => self.directions[d].state = State::Head,
                GapEffect::Lost => self.lose_sync(d, true),
            },
            State::ResponseBody(body) => {
                let effect = body.framing.gap(len);
                if effect == GapEffect::Lost {
                    if body.open {
                        // The body lost these bytes too: its consumer counts them as missing
                        // before it learns that the framing is lost.
                        sink.body_gap(body.exchange, len, mark);
                        sink.body_end(body.exchange, BodyEnd::LostSync, mark);
                    }
                    self.lose_sync(d, true);
                    return;
                }
                if body.open {
                    if body.decoder.is_some() {
                        // Decoding cannot continue past missing compressed bytes, and how
                        // many decoded bytes are missing is unknown.
                        sink.body_gap(body.exchange, 0, mark);
                        sink.body_end(body.exchange, BodyEnd::LostSync, mark);
                        body.open = false;
                        body.decoder = None;
                    } else {
                        sink.body_gap(body.exchange, len, mark);
                    }
                }
                if effect == GapEffect::KeptAndComplete {
                    if body.open {
                        sink.body_end(body.exchange, BodyEnd::Complete, mark);
                    }
                    self.directions[d].state = State::Head;
                }
            }
        }
    }

    /// The next bytes of `dir` were sent after bytes of the other direction that the capture
    /// has not shown: when `dir` answers, a request may be missing before what follows, and
    /// an answer after it is paired as after a lost request. Those bytes, in the frame of
    /// `mark`, acknowledge `unseen` bytes of the other direction past those given (0: not
    /// known): an answer they begin answers no request that starts after those.
    pub fn ahead_of_peer(&mut self, dir: Direction, mark: Mark, unseen: u64) {
        if unseen > 0 {
            let other = &self.directions[dir.other().index()];
            self.sent_before[dir.index()] = Some((mark.frame, other.given.saturating_add(unseen)));
        }
        match self.expected_kind(dir.index()) {
            Some(MessageKind::Response) => self.push_pending(Pending::Lost),
            Some(MessageKind::Request) => {}
            // The first bytes of the connection may be that answer.
            None => self.ahead_unplaced[dir.index()] = true,
        }
    }

    /// The next bytes of `dir` were sent after every byte the other direction gave so far:
    /// when `dir` answers, every request given so far was made before what follows, even one
    /// the capture recorded after it.
    pub fn after_peer(&mut self, dir: Direction) {
        if self.expected_kind(dir.index()) == Some(MessageKind::Response) {
            self.acknowledged = self.pending.iter().rev().find_map(|entry| match entry {
                Pending::Request(r) => Some(r.exchange),
                Pending::Lost => None,
            });
        }
    }

    /// The next bytes of `dir`, in the frame of `mark`, were sent before the last `unacked`
    /// bytes given of the other direction had arrived (their acknowledgment stops short of
    /// them): when they begin an answer, no request starting in those bytes is its request.
    pub fn before_peer(&mut self, dir: Direction, mark: Mark, unacked: u64) {
        let other = &self.directions[dir.other().index()];
        self.sent_before[dir.index()] = Some((mark.frame, other.given.saturating_sub(unacked)));
    }

    /// `dir` ended: a body still open ends with `BodyEnd::Stream(how)`.
    pub fn end<S: HttpSink>(&mut self, dir: Direction, how: StreamEnd, mark: Mark, sink: &mut S) {
        if self.abandoned {
            return;
        }
        let parser = &mut self.directions[dir.index()];
        let state = mem::replace(&mut parser.state, State::Ended);
        parser.release_head();
        if let State::ResponseBody(body) = state
            && body.open
        {
            sink.body_end(body.exchange, BodyEnd::Stream(how), mark);
        }
    }

    // ----- steps: each consumes a prefix of `input` and returns its length -----

    /// Accumulates a message head until its blank line, then parses it.
    fn step_head<S: HttpSink>(
        &mut self,
        d: usize,
        input: &[u8],
        at_segment_start: bool,
        mark: Mark,
        sink: &mut S,
    ) -> usize {
        let max = self.max_header_bytes;
        let parser = &mut self.directions[d];
        if parser.head.is_empty() {
            // Blank lines between messages are tolerated (RFC 9112 section 2.2).
            let blank = input
                .iter()
                .take_while(|&&b| b == b'\r' || b == b'\n')
                .count();
            if blank > 0 {
                return blank;
            }
            parser.head_first = mark;
            parser.head_start = parser.at;
            parser.head_acked = acked_at(self.sent_before[d], mark);
            parser.scan = StartLineScan::new();
            parser.segment_scan = None;
            parser.kind = None;
        } else if at_segment_start && parser.kind.is_none() {
            // Only the newest segment is tried: one test per head keeps the cost bounded.
            let scan = SegmentScan {
                offset: parser.head.len(),
                first: mark,
                scan: StartLineScan::new(),
                decided: None,
            };
            match parser.segment_scan.as_deref_mut() {
                Some(slot) => *slot = scan,
                None => parser.segment_scan = Some(Box::new(scan)),
            }
        }
        if parser.kind.is_none() {
            // Only bytes within the head limit are judged, so that whether a head is too large
            // or not a message at all does not depend on how much one call holds.
            let room = max.saturating_sub(parser.head.len());
            let window = input.get(..room).unwrap_or(input);
            match self.classify_head(d, window, mark, sink) {
                ScanOutcome::NeedMore if window.is_empty() => {
                    if self.directions[d].head_from_resync {
                        // A line picked while skipping that never proved to be a start line.
                        self.note_skip(d, mark, sink);
                        self.lose_sync(d, false);
                    } else {
                        self.head_too_large(d, mark, sink);
                    }
                    return 0;
                }
                ScanOutcome::NeedMore => {
                    // A head restarted inside the window only got shorter: the window fits.
                    self.directions[d].head.extend_from_slice(window);
                    return window.len();
                }
                ScanOutcome::NotStart => return self.head_not_http(d, mark, sink),
                ScanOutcome::Start(kind) => {
                    if !self.kind_fits(d, kind) {
                        return self.head_not_http(d, mark, sink);
                    }
                    self.set_role(d, kind);
                    let parser = &mut self.directions[d];
                    parser.kind = Some(kind);
                    parser.head_from_resync = false;
                    parser.at_stream_start = false;
                }
            }
        }
        let parser = &mut self.directions[d];
        let room = max.saturating_sub(parser.head.len());
        let window = input.get(..room).unwrap_or(input);
        let prev = parser
            .head
            .get(parser.head.len().saturating_sub(2)..)
            .unwrap_or_default();
        match find_head_end(prev, window) {
            Some(end) => {
                let head = window.get(..end).unwrap_or(window);
                if parser.head.is_empty() {
                    // The whole head came in one piece: it is parsed where it lies, without a
                    // copy (and, on a new connection, without an allocation for the copy).
                    let first = parser.head_first;
                    let kind = parser.kind.take();
                    self.parse_head(d, kind, head, first, mark, sink);
                } else {
                    parser.head.extend_from_slice(head);
                    self.finish_head(d, mark, sink);
                }
                end
            }
            None if input.len() > room => {
                self.head_too_large(d, mark, sink);
                room
            }
            None => {
                parser.head.extend_from_slice(input);
                input.len()
            }
        }
    }

    /// Runs the start-line tests of an undecided head over `input`. When the head turns out
    /// not to be a message (or one of the kind this direction does not send) but a segment
    /// that began inside it may still be one (a message that starts a packet right after an
    /// unterminated line), the head restarts there.
    fn classify_head<S: HttpSink>(
        &mut self,
        d: usize,
        input: &[u8],
        mark: Mark,
        sink: &mut S,
    ) -> ScanOutcome {
        let first_judgement = self.from_start && self.directions[d].at_stream_start;
        let wanted = self.expected_kind(d);
        let parser = &mut self.directions[d];
        let outcome = match parser.scan.feed(input) {
            // A start line of the kind this direction does not send is no start for it: like a
            // line that is none, it gives way to a segment that began inside the head. (It once
            // went to the skip instead, which read that segment from its first byte when the
            // deciding call held all of it, and past the bytes already held otherwise: the
            // answer depended on the cuts.)
            ScanOutcome::Start(kind) if wanted.is_some_and(|w| w != kind) => ScanOutcome::NotStart,
            outcome => outcome,
        };
        if let Some(segment) = parser.segment_scan.as_mut()
            && segment.decided.is_none()
        {
            match segment.scan.feed(input) {
                ScanOutcome::Start(kind) => segment.decided = Some(kind),
                ScanOutcome::NotStart => parser.segment_scan = None,
                ScanOutcome::NeedMore => {}
            }
        }
        match outcome {
            ScanOutcome::NotStart if !first_judgement => {
                let Some(segment) = parser.segment_scan.take() else {
                    return outcome;
                };
                let offset = segment.offset.min(parser.head.len());
                parser.head.drain(..offset);
                parser.head_first = segment.first;
                parser.head_start = parser.head_start.saturating_add(offset as u64);
                parser.head_acked = acked_at(self.sent_before[d], segment.first);
                parser.scan = segment.scan;
                self.note_skip(d, mark, sink);
                segment
                    .decided
                    .map_or(ScanOutcome::NeedMore, ScanOutcome::Start)
            }
            ScanOutcome::NeedMore => outcome,
            _ => {
                parser.segment_scan = None;
                outcome
            }
        }
    }

    /// Skips bytes up to the next line that begins a request line or a status line.
    fn step_resync<S: HttpSink>(
        &mut self,
        d: usize,
        input: &[u8],
        line_start: bool,
        mark: Mark,
        sink: &mut S,
    ) -> usize {
        let wanted = self.expected_kind(d);
        let mut previous_hit: Option<usize> = None;
        for hit in VERSION_FINDER.find_iter(input) {
            // Only the stretch since the previous hit is searched for a line break, so many
            // hits on one long line cost no more than the line itself.
            let lower = previous_hit.unwrap_or(0);
            let since = input.get(lower..hit).unwrap_or_default();
            let start = match memchr::memrchr(b'\n', since) {
                Some(k) => lower + k + 1,
                None if previous_hit.is_none() && line_start => 0,
                None => {
                    previous_hit = Some(hit);
                    continue;
                }
            };
            previous_hit = Some(hit);
            let line = input.get(start..).unwrap_or_default();
            // A line still undecided after the head limit is skipped, as the head state skips
            // one that grows past the limit undecided: the same answer for any cut.
            let window = line.get(..self.max_header_bytes).unwrap_or(line);
            match StartLineScan::new().feed(window) {
                ScanOutcome::Start(kind) if wanted.is_none_or(|w| w == kind) => {
                    return self.resync_found(d, start, mark, sink);
                }
                ScanOutcome::NeedMore if window.len() == line.len() => break,
                _ => {}
            }
        }
        // No complete start line; the unfinished last line may still become one.
        let last_line = match memchr::memrchr(b'\n', input) {
            Some(k) => Some(k + 1),
            None => line_start.then_some(0),
        };
        if let Some(start) = last_line {
            let line = input.get(start..).unwrap_or_default();
            if !line.is_empty()
                && line.len() <= self.max_header_bytes
                && StartLineScan::new().feed(line) == ScanOutcome::NeedMore
            {
                return self.resync_found(d, start, mark, sink);
            }
        }
        self.note_skip(d, mark, sink);
        self.directions[d].state = State::Resync {
            line_start: input.last() == Some(&b'\n'),
        };
        input.len()
    }

    fn step_request_body<S: HttpSink>(
        &mut self,
        d: usize,
        input: &[u8],
        mark: Mark,
        sink: &mut S,
    ) -> usize {
        let max = self.max_header_bytes;
        let State::RequestBody(framing) = &mut self.directions[d].state else {
            return 0;
        };
        let step = framing.advance(input, max);
        match step.event {
            FramingEvent::Continue => {}
            FramingEvent::Complete => self.directions[d].state = State::Head,
            FramingEvent::Bad(anomaly) => {
                sink.anomaly(anomaly, mark);
                self.lose_sync(d, false);
            }
        }
        step.used
    }

    fn step_response_body<S: HttpSink>(
        &mut self,
        d: usize,
        input: &[u8],
        mark: Mark,
        sink: &mut S,
    ) -> usize {
        let max = self.max_header_bytes;
        let State::ResponseBody(body) = &mut self.directions[d].state else {
            return 0;
        };
        let step = body.framing.advance(input, max);
        if let Some(range) = step.data
            && let Some(bytes) = input.get(range)
        {
            body.deliver(bytes, mark, sink);
        }
        match step.event {
            FramingEvent::Continue => {}
            FramingEvent::Complete => {
                body.finish(mark, sink);
                self.directions[d].state = State::Head;
            }
            FramingEvent::Bad(anomaly) => {
                sink.anomaly(anomaly, mark);
                if body.open {
                    sink.body_end(body.exchange, BodyEnd::Malformed, mark);
                }
                self.lose_sync(d, false);
            }
        }
        step.used
    }

    // ----- heads -----

    fn finish_head<S: HttpSink>(&mut self, d: usize, mark: Mark, sink: &mut S) {
        let parser = &mut self.directions[d];
        let head = mem::take(&mut parser.head);
        let first = parser.head_first;
        let kind = parser.kind.take();
        self.parse_head(d, kind, &head, first, mark, sink);
        let parser = &mut self.directions[d];
        if parser.head.is_empty() && head.capacity() <= RETAINED_HEAD_CAPACITY {
            let mut head = head;
            head.clear();
            parser.head = head;
        }
    }

    /// Parses a complete head of `kind`, wherever its bytes are held.
    fn parse_head<S: HttpSink>(
        &mut self,
        d: usize,
        kind: Option<MessageKind>,
        head: &[u8],
        first: Mark,
        mark: Mark,
        sink: &mut S,
    ) {
        match kind {
            Some(MessageKind::Request) => self.finish_request(d, head, first, mark, sink),
            Some(MessageKind::Response) => self.finish_response(d, head, first, mark, sink),
            None => self.lose_sync(d, true),
        }
    }

    fn finish_request<S: HttpSink>(
        &mut self,
        d: usize,
        head: &[u8],
        first: Mark,
        mark: Mark,
        sink: &mut S,
    ) {
        // Left uninitialized: the parser writes each header it hands back, and filling all 128
        // (4 KiB) for every head cost about 360 instructions a head.
        let mut headers = [const { mem::MaybeUninit::uninit() }; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut []);
        match parser_config().parse_request_with_uninit_headers(&mut request, head, &mut headers) {
            Ok(httparse::Status::Complete(_)) => {}
            Err(httparse::Error::TooManyHeaders) => {
                sink.anomaly(Anomaly::HeaderTooLarge, mark);
                self.lose_sync(d, true);
                return;
            }
            _ => {
                self.note_skip(d, mark, sink);
                self.lose_sync(d, true);
                return;
            }
        }
        let facts = HeadFacts::from_headers(request.headers);
        let method = request.method.unwrap_or_default();
        let exchange = self.allocate_exchange();
        let start = self.directions[d].head_start;
        self.push_pending(Pending::Request(PendingRequest {
            exchange,
            bodiless_response: method == "HEAD",
            tunnel: method == "CONNECT",
            complete: mark,
            start,
        }));
        sink.request(RequestHead {
            exchange,
            method: head_text(method),
            target: head_text(request.path.unwrap_or_default()),
            session_id: facts.session_id.map(text),
            last_event_id: facts.last_event_id,
            protocol_version: facts.protocol_version,
            first,
            complete: mark,
            h2_stream: None,
        });
        self.directions[d].skipping = false;
        let framing = match (facts.transfer_chunked, facts.content_length) {
            (Some(true), _) => Some(BodyFraming::chunked()),
            // A request body with a transfer coding other than chunked has no knowable
            // end (RFC 9112 section 6.3).
            (Some(false), _) => {
                self.lose_sync(d, true);
                return;
            }
            (None, ContentLength::Invalid) => {
                sink.anomaly(Anomaly::BadContentLength, mark);
                self.lose_sync(d, true);
                return;
            }
            (None, ContentLength::Value(n)) if n > 0 => Some(BodyFraming::Length(n)),
            (None, _) => None,
        };
        self.directions[d].state = match framing {
            Some(framing) => State::RequestBody(framing),
            None => State::Head,
        };
    }

    fn finish_response<S: HttpSink>(
        &mut self,
        d: usize,
        head: &[u8],
        first: Mark,
        mark: Mark,
        sink: &mut S,
    ) {
        // Left uninitialized, as for requests.
        let mut headers = [const { mem::MaybeUninit::uninit() }; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut []);
        match parser_config().parse_response_with_uninit_headers(&mut response, head, &mut headers)
        {
            Ok(httparse::Status::Complete(_)) => {}
            Err(httparse::Error::TooManyHeaders) => {
                sink.anomaly(Anomaly::HeaderTooLarge, mark);
                self.lose_sync(d, true);
                return;
            }
            _ => {
                self.note_skip(d, mark, sink);
                self.lose_sync(d, true);
                return;
            }
        }
        let status = response.code.unwrap_or_default();
        self.directions[d].skipping = false;
        self.directions[d].state = State::Head;
        if (100..200).contains(&status) && status != 101 {
            // Interim response: the request still waits for its final one.
            return;
        }
        let facts = HeadFacts::from_headers(response.headers);
        let acked = self.directions[d].head_acked;
        let (exchange, request) = self.pair_response(first, acked);
        if request.is_none() {
            sink.anomaly(Anomaly::UnpairedResponse, mark);
        }
        if status == 101 && facts.upgrade_h2c {
            // Not an answer but a switch: the request's answer comes as HTTP/2 stream 1.
            self.switched_to_h2c = Some(exchange);
            self.abandon(mark, sink);
            return;
        }
        let encoding = facts
            .content_encoding
            .as_deref()
            .map_or(ContentCoding::Identity, ContentCoding::parse);
        let session_id = facts
            .session_id
            .filter(|sid| !sink.request_named(exchange, sid))
            .map(text);
        sink.response(ResponseHead {
            exchange,
            status,
            content_type: facts.content_type,
            session_id,
            content_encoding: facts.content_encoding,
            first,
            complete: mark,
            h2_stream: None,
        });
        let tunnel = request.is_some_and(|r| r.tunnel) && (200..300).contains(&status);
        if status == 101 || tunnel {
            sink.body_end(exchange, BodyEnd::Complete, mark);
            self.abandon(mark, sink);
            return;
        }
        let bodiless = request.is_some_and(|r| r.bodiless_response)
            || (100..200).contains(&status)
            || status == 204
            || status == 304;
        let framing = if bodiless {
            None
        } else {
            match (facts.transfer_chunked, facts.content_length) {
                (Some(true), _) => Some(BodyFraming::chunked()),
                (Some(false), _) => Some(BodyFraming::UntilClose),
                (None, ContentLength::Invalid) => {
                    sink.anomaly(Anomaly::BadContentLength, mark);
                    sink.body_end(exchange, BodyEnd::Malformed, mark);
                    self.lose_sync(d, true);
                    return;
                }
                (None, ContentLength::Value(0)) => None,
                (None, ContentLength::Value(n)) => Some(BodyFraming::Length(n)),
                (None, ContentLength::Absent) => Some(BodyFraming::UntilClose),
            }
        };
        let Some(framing) = framing else {
            sink.body_end(exchange, BodyEnd::Complete, mark);
            return;
        };
        let mut body = ResponseBody {
            exchange,
            framing,
            decoder: None,
            open: true,
        };
        match encoding {
            ContentCoding::Identity => {}
            ContentCoding::Gzip => body.decoder = Some(Box::new(ContentDecoder::gzip())),
            ContentCoding::Deflate => body.decoder = Some(Box::new(ContentDecoder::deflate())),
            ContentCoding::Unsupported => {
                // The body is still followed for framing, but nothing of it can be read.
                sink.anomaly(Anomaly::BadContentEncoding, mark);
                sink.body_end(exchange, BodyEnd::Malformed, mark);
                body.open = false;
            }
        }
        self.directions[d].state = State::ResponseBody(body);
    }

    /// The head grew beyond `Limits::max_header_bytes`: drop it and skip to the next head.
    fn head_too_large<S: HttpSink>(&mut self, d: usize, mark: Mark, sink: &mut S) {
        sink.anomaly(Anomaly::HeaderTooLarge, mark);
        self.lose_sync(d, false);
    }

    /// The bytes where a head was expected are not one. Consumes nothing: the resync that
    /// follows skips the rest of the line.
    fn head_not_http<S: HttpSink>(&mut self, d: usize, mark: Mark, sink: &mut S) -> usize {
        if self.from_start && self.directions[d].at_stream_start {
            self.abandon(mark, sink);
            return 0;
        }
        if !self.directions[d].head.is_empty() {
            self.note_skip(d, mark, sink);
        }
        self.lose_sync(d, false);
        0
    }

    fn resync_found<S: HttpSink>(
        &mut self,
        d: usize,
        start: usize,
        mark: Mark,
        sink: &mut S,
    ) -> usize {
        if start > 0 {
            self.note_skip(d, mark, sink);
        }
        let parser = &mut self.directions[d];
        parser.head.clear();
        parser.kind = None;
        parser.head_from_resync = true;
        parser.state = State::Head;
        start
    }

    // ----- connection-level bookkeeping -----

    /// The direction stops following framing and searches for the next message head.
    /// Whatever it skips may hold messages, so pairing becomes uncertain.
    fn lose_sync(&mut self, d: usize, line_start: bool) {
        let parser = &mut self.directions[d];
        parser.state = State::Resync { line_start };
        parser.at_stream_start = false;
        parser.release_head();
        match self.expected_kind(d) {
            Some(MessageKind::Request) => self.push_pending(Pending::Lost),
            Some(MessageKind::Response) => self.responses_lost = true,
            None => {
                self.push_pending(Pending::Lost);
                self.responses_lost = true;
            }
        }
    }

    /// Reports `Resynchronized` at the first skipped byte of a run.
    fn note_skip<S: HttpSink>(&mut self, d: usize, mark: Mark, sink: &mut S) {
        let parser = &mut self.directions[d];
        if !parser.skipping {
            parser.skipping = true;
            sink.anomaly(Anomaly::Resynchronized, mark);
        }
    }

    fn abandon<S: HttpSink>(&mut self, mark: Mark, sink: &mut S) {
        self.abandoned = true;
        for parser in &mut self.directions {
            let state = mem::replace(&mut parser.state, State::Ended);
            parser.release_head();
            if let State::ResponseBody(body) = state
                && body.open
            {
                sink.body_end(body.exchange, BodyEnd::Stream(StreamEnd::Abandoned), mark);
            }
        }
        self.pending.clear();
    }

    fn expected_kind(&self, d: usize) -> Option<MessageKind> {
        self.client.map(|client| {
            if client.index() == d {
                MessageKind::Request
            } else {
                MessageKind::Response
            }
        })
    }

    fn kind_fits(&self, d: usize, kind: MessageKind) -> bool {
        self.expected_kind(d).is_none_or(|wanted| wanted == kind)
    }

    fn set_role(&mut self, d: usize, kind: MessageKind) {
        if self.client.is_none() {
            let dir = if d == 0 {
                Direction::Forward
            } else {
                Direction::Reverse
            };
            let client = match kind {
                MessageKind::Request => dir,
                MessageKind::Response => dir.other(),
            };
            self.client = Some(client);
            if self.ahead_unplaced[client.other().index()] {
                self.push_pending(Pending::Lost);
            }
        }
    }

    fn allocate_exchange(&mut self) -> u32 {
        let exchange = self.next_exchange;
        self.next_exchange = exchange.saturating_add(1);
        exchange
    }

    fn push_pending(&mut self, entry: Pending) {
        if entry == Pending::Lost && self.pending.back() == Some(&Pending::Lost) {
            return;
        }
        if self.pending.len() >= MAX_PENDING_REQUESTS {
            while self.pending.len() >= MAX_PENDING_REQUESTS - 1 {
                self.pending.pop_front();
            }
            if self.pending.front() != Some(&Pending::Lost) {
                self.pending.push_front(Pending::Lost);
            }
        }
        if self.pending.capacity() == 0 {
            // A client mostly waits for each answer: one slot, where a first push makes four
            // in every open connection.
            self.pending.reserve_exact(1);
        }
        self.pending.push_back(entry);
    }

    /// The exchange a final response belongs to, and its request when known; `acked`: the
    /// position in the client's bytes that the response's first segment acknowledged, when
    /// short of what was given (a request starting there or later was not yet received).
    fn pair_response(
        &mut self,
        response_first: Mark,
        acked: Option<u64>,
    ) -> (u32, Option<PendingRequest>) {
        let uncertain = self.responses_lost || self.pending.contains(&Pending::Lost);
        if !uncertain {
            if let Some(Pending::Request(request)) = self.pending.pop_front() {
                return (request.exchange, Some(request));
            }
            return (self.allocate_exchange(), None);
        }
        let acknowledged = self.acknowledged;
        let newest_before = self.pending.iter().rposition(|entry| {
            matches!(entry, Pending::Request(r)
                if (r.complete.frame <= response_first.frame
                    || acknowledged.is_some_and(|a| r.exchange <= a))
                    && acked.is_none_or(|a| r.start < a))
        });
        if let Some(index) = newest_before
            && let Some(Pending::Request(request)) = self.pending.get(index).copied()
        {
            // Bytes the capture lost after that request may hold a later one, and a client
            // that waits for each answer before it asks again sent it only once this request
            // was answered: when answers were lost too, this one may be the lost request's.
            // Either way that request's answer is this one or lost, so it waits no longer.
            let later_lost = self
                .pending
                .iter()
                .skip(index + 1)
                .any(|entry| *entry == Pending::Lost);
            self.pending.drain(..=index);
            if later_lost && self.responses_lost {
                return (self.allocate_exchange(), None);
            }
            self.responses_lost = false;
            return (request.exchange, Some(request));
        }
        (self.allocate_exchange(), None)
    }
}

// ----- per-direction state -----

/// What one direction is doing.
enum State {
    /// Expecting or accumulating a message head (the start of a stream, or after a message).
    Head,
    /// Skipping to the next start line; `line_start`: the next byte begins a line.
    Resync { line_start: bool },
    /// Following a request body's framing without delivering it.
    RequestBody(BodyFraming),
    /// Delivering a response body.
    ResponseBody(ResponseBody),
    /// The direction ended.
    Ended,
}

struct DirectionParser {
    state: State,
    /// Bytes of the head being accumulated (bounded by `Limits::max_header_bytes`).
    head: Vec<u8>,
    head_first: Mark,
    scan: StartLineScan,
    /// Start-line test of the segment that began inside an undecided head. Boxed: only heads
    /// split across segments have one, and inline it made every connection 48 bytes larger.
    segment_scan: Option<Box<SegmentScan>>,
    /// Mark of the last bytes given, to tell where a new segment begins.
    last_mark: Option<Mark>,
    /// Kind of the head being accumulated, once its start line is recognised.
    kind: Option<MessageKind>,
    /// No byte of this direction has been judged yet: failing the first judgement abandons
    /// a connection seen from its start.
    at_stream_start: bool,
    /// Inside a run of skipped bytes (already reported as `Resynchronized`).
    skipping: bool,
    /// The undecided head began at a line picked while skipping, not at a message boundary:
    /// if it grows past the head limit undecided, it is skipped rather than too large.
    head_from_resync: bool,
    /// Bytes of the direction given so far, data and gaps.
    given: u64,
    /// Position of the bytes being stepped through.
    at: u64,
    /// Position of the head's first byte.
    head_start: u64,
    /// The other direction's position that the segment holding the head's first byte
    /// acknowledged, when short of what was given of it.
    head_acked: Option<u64>,
}

impl DirectionParser {
    fn new(state: State) -> Self {
        DirectionParser {
            state,
            head: Vec::new(),
            head_first: Mark::default(),
            scan: StartLineScan::new(),
            segment_scan: None,
            last_mark: None,
            kind: None,
            at_stream_start: true,
            skipping: false,
            head_from_resync: false,
            given: 0,
            at: 0,
            head_start: 0,
            head_acked: None,
        }
    }

    fn release_head(&mut self) {
        if self.head.capacity() > RETAINED_HEAD_CAPACITY {
            self.head = Vec::new();
        } else {
            self.head.clear();
        }
        self.kind = None;
        self.head_from_resync = false;
        self.segment_scan = None;
    }
}

/// What `sent` (a direction's [`HttpConnection::sent_before`]) says of the segment of `mark`.
fn acked_at(sent: Option<(u64, u64)>, mark: Mark) -> Option<u64> {
    sent.filter(|&(frame, _)| frame == mark.frame)
        .map(|(_, acked)| acked)
}

/// A candidate message head beginning at a segment start inside an undecided head.
#[derive(Clone, Copy, Debug)]
struct SegmentScan {
    /// Where the segment begins in the head buffer.
    offset: usize,
    first: Mark,
    scan: StartLineScan,
    /// Decided a start line while the head's own test was still undecided.
    decided: Option<MessageKind>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MessageKind {
    Request,
    Response,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PendingRequest {
    exchange: u32,
    /// A HEAD request: its response has no body whatever its headers say.
    bodiless_response: bool,
    /// A CONNECT request: a 2xx answer turns the connection into a tunnel.
    tunnel: bool,
    complete: Mark,
    /// Position of its first byte in the client's bytes (data and gaps).
    start: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    Request(PendingRequest),
    /// Some requests (any number) may have been lost here.
    Lost,
}

struct ResponseBody {
    exchange: u32,
    framing: BodyFraming,
    decoder: Option<Box<ContentDecoder>>,
    /// `body_end` not yet delivered; once it is, the framing is still followed silently.
    open: bool,
}

impl ResponseBody {
    fn deliver<S: HttpSink>(&mut self, bytes: &[u8], mark: Mark, sink: &mut S) {
        if !self.open || bytes.is_empty() {
            return;
        }
        let exchange = self.exchange;
        let Some(decoder) = self.decoder.as_mut() else {
            sink.body(exchange, bytes, mark);
            return;
        };
        let decoded = decoder.feed(bytes, |out| sink.body(exchange, out, mark));
        if decoded.is_err() {
            sink.anomaly(Anomaly::BadContentEncoding, mark);
            sink.body_end(exchange, BodyEnd::Malformed, mark);
            self.open = false;
            self.decoder = None;
        }
    }

    /// The framing says the body is over.
    fn finish<S: HttpSink>(&mut self, mark: Mark, sink: &mut S) {
        if !self.open {
            return;
        }
        self.open = false;
        if self.decoder.as_ref().is_some_and(|d| !d.at_end()) {
            // The body ended inside the compressed stream.
            sink.anomaly(Anomaly::BadContentEncoding, mark);
            sink.body_end(self.exchange, BodyEnd::Malformed, mark);
        } else {
            sink.body_end(self.exchange, BodyEnd::Complete, mark);
        }
        self.decoder = None;
    }
}

// ----- start lines -----

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ScanOutcome {
    /// Every byte so far fits a start line; more are needed to decide.
    NeedMore,
    /// The bytes begin a request line or a status line (up to and including `HTTP/1.`).
    Start(MessageKind),
    /// The bytes cannot begin a start line.
    NotStart,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RequestLineScan {
    /// Bytes of the method so far.
    Method(u8),
    /// Inside the request target; `true` once it has a byte.
    Target(bool),
    /// Bytes of `HTTP/1.` matched after the target.
    Version(u8),
    Dead,
}

/// Incremental test of whether a line begins `method SP target SP HTTP/1.` or `HTTP/1.`,
/// decided at the first byte that rules both out, so non-HTTP streams are recognised from
/// their first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StartLineScan {
    /// Bytes of `HTTP/1.` matched at the start of the line, `None` once ruled out.
    status: Option<u8>,
    request: RequestLineScan,
}

impl StartLineScan {
    const fn new() -> Self {
        StartLineScan {
            status: Some(0),
            request: RequestLineScan::Method(0),
        }
    }

    fn feed(&mut self, bytes: &[u8]) -> ScanOutcome {
        if *self == StartLineScan::new()
            && let Some(outcome) = self.whole_start(bytes)
        {
            return outcome;
        }
        self.feed_each(bytes)
    }

    /// From a fresh scan, a start line whose bytes up to `HTTP/1.` all lie in `bytes`, read by
    /// searches instead of byte by byte: the outcome [`Self::feed_each`] gives, with the state
    /// it leaves. `None` (the state untouched) for anything else, which is left to it.
    fn whole_start(&mut self, bytes: &[u8]) -> Option<ScanOutcome> {
        let last = VERSION_PREFIX.len() as u8 - 1;
        if bytes.starts_with(VERSION_PREFIX) {
            // The status line's test ends at the prefix's last byte; a method would have
            // ended at its `/`.
            *self = StartLineScan {
                status: Some(last),
                request: RequestLineScan::Dead,
            };
            return Some(ScanOutcome::Start(MessageKind::Response));
        }
        // Any first byte but `H` rules the status line out at once.
        if bytes.first() == Some(&b'H') {
            return None;
        }
        let method = bytes
            .iter()
            .take(usize::from(MAX_METHOD_LEN) + 1)
            .position(|&b| !is_token_byte(b))?;
        if method == 0 || bytes.get(method) != Some(&b' ') {
            return None;
        }
        let target = bytes.get(method + 1..)?;
        let end = memchr::memchr3(b' ', b'\r', b'\n', target)?;
        if end == 0 || target.get(end) != Some(&b' ') {
            return None;
        }
        if !target.get(end + 1..)?.starts_with(VERSION_PREFIX) {
            return None;
        }
        *self = StartLineScan {
            status: None,
            request: RequestLineScan::Version(last),
        };
        Some(ScanOutcome::Start(MessageKind::Request))
    }

    /// The scan, one byte at a time.
    fn feed_each(&mut self, bytes: &[u8]) -> ScanOutcome {
        let mut i = 0;
        while let Some(&b) = bytes.get(i) {
            if let Some(n) = self.status {
                if VERSION_PREFIX.get(usize::from(n)) == Some(&b) {
                    if usize::from(n) + 1 == VERSION_PREFIX.len() {
                        return ScanOutcome::Start(MessageKind::Response);
                    }
                    self.status = Some(n + 1);
                } else {
                    self.status = None;
                }
            }
            self.request = match self.request {
                RequestLineScan::Method(n) if is_token_byte(b) && n < MAX_METHOD_LEN => {
                    RequestLineScan::Method(n + 1)
                }
                RequestLineScan::Method(n) if b == b' ' && n > 0 => RequestLineScan::Target(false),
                RequestLineScan::Target(has_byte) => {
                    // A status line never has a space before `HTTP/1.` is matched, so only
                    // the request line is alive here and the target can be skipped by scan.
                    let rest = bytes.get(i..).unwrap_or_default();
                    match memchr::memchr3(b' ', b'\r', b'\n', rest) {
                        None => {
                            self.request = RequestLineScan::Target(has_byte || !rest.is_empty());
                            return ScanOutcome::NeedMore;
                        }
                        Some(k) => {
                            i += k;
                            let nonempty = has_byte || k > 0;
                            if bytes.get(i) == Some(&b' ') && nonempty {
                                RequestLineScan::Version(0)
                            } else {
                                RequestLineScan::Dead
                            }
                        }
                    }
                }
                RequestLineScan::Version(n) if VERSION_PREFIX.get(usize::from(n)) == Some(&b) => {
                    if usize::from(n) + 1 == VERSION_PREFIX.len() {
                        return ScanOutcome::Start(MessageKind::Request);
                    }
                    RequestLineScan::Version(n + 1)
                }
                _ => RequestLineScan::Dead,
            };
            if self.status.is_none() && self.request == RequestLineScan::Dead {
                return ScanOutcome::NotStart;
            }
            i += 1;
        }
        ScanOutcome::NeedMore
    }
}

/// `tchar` of RFC 9110 section 5.6.2.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// End (exclusive, in `input`) of the blank line that ends a head: `\n\n` or `\n\r\n`, which
/// covers CRLF, LF and mixed line ends. `prev` holds the last bytes already buffered, so a
/// terminator split across calls is found.
fn find_head_end(prev: &[u8], input: &[u8]) -> Option<usize> {
    let prev = prev.get(prev.len().saturating_sub(2)..).unwrap_or_default();
    let mut joint = [0u8; 4];
    let mut joint_len = 0;
    for &b in prev.iter().chain(input.iter().take(2)) {
        if let Some(slot) = joint.get_mut(joint_len) {
            *slot = b;
            joint_len += 1;
        }
    }
    // Terminators whose last byte is one of the first two input bytes.
    for e in prev.len()..joint_len {
        let at = |i: usize| joint.get(i).copied();
        if at(e) != Some(b'\n') {
            continue;
        }
        let lf_lf = e >= 1 && at(e - 1) == Some(b'\n');
        let lf_cr_lf = e >= 2 && at(e - 1) == Some(b'\r') && at(e - 2) == Some(b'\n');
        if lf_lf || lf_cr_lf {
            return Some(e - prev.len() + 1);
        }
    }
    for i in memchr::memchr_iter(b'\n', input) {
        match (input.get(i + 1), input.get(i + 2)) {
            (Some(b'\n'), _) => return Some(i + 2),
            (Some(b'\r'), Some(b'\n')) => return Some(i + 3),
            _ => {}
        }
    }
    None
}

fn parser_config() -> httparse::ParserConfig {
    let mut config = httparse::ParserConfig::default();
    // Captures come from real servers: tolerate the header quirks browsers tolerate.
    config
        .allow_spaces_after_header_name_in_responses(true)
        .allow_obsolete_multiline_headers_in_responses(true)
        .ignore_invalid_headers_in_responses(true)
        .ignore_invalid_headers_in_requests(true);
    config
}

// ----- header facts -----

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum ContentLength {
    #[default]
    Absent,
    Value(u64),
    /// Not a number, negative, or conflicting values.
    Invalid,
}

impl ContentLength {
    /// Folds one `Content-Length` field value (possibly a list of equal values) in.
    fn add_field(self, value: &[u8]) -> ContentLength {
        let mut current = self;
        for item in value.split(|&b| b == b',') {
            let item = item.trim_ascii();
            let parsed = parse_decimal(item);
            current = match (current, parsed) {
                (ContentLength::Invalid, _) | (_, None) => ContentLength::Invalid,
                (ContentLength::Absent, Some(n)) => ContentLength::Value(n),
                (ContentLength::Value(old), Some(n)) if old == n => ContentLength::Value(n),
                (ContentLength::Value(_), Some(_)) => ContentLength::Invalid,
            };
        }
        current
    }
}

fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |acc, &b| {
        if b.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

/// The header facts this stage and later ones use.
#[derive(Debug, Default)]
struct HeadFacts<'h> {
    content_length: ContentLength,
    /// `Some(true)` when the last transfer coding is chunked, `Some(false)` for another
    /// last coding, `None` without Transfer-Encoding.
    transfer_chunked: Option<bool>,
    content_type: Option<HeadText>,
    content_encoding: Option<String>,
    /// As sent: an answer's is copied only when its request did not send the same.
    session_id: Option<&'h [u8]>,
    last_event_id: Option<String>,
    protocol_version: Option<HeadText>,
    /// `Upgrade` names `h2c`.
    upgrade_h2c: bool,
}

impl<'h> HeadFacts<'h> {
    fn from_headers(headers: &[httparse::Header<'h>]) -> HeadFacts<'h> {
        let mut facts = HeadFacts::default();
        for header in headers {
            let name = header.name.as_bytes();
            let value = header.value;
            // The length picks the one or two names a header can be; only those are compared.
            match name.len() {
                14 if name_is(name, b"content-length") => {
                    facts.content_length = facts.content_length.add_field(value);
                }
                14 if name_is(name, b"mcp-session-id") => {
                    facts.session_id.get_or_insert(value);
                }
                17 if name_is(name, b"transfer-encoding") => {
                    let last = value
                        .split(|&b| b == b',')
                        .map(<[u8]>::trim_ascii)
                        // `identity` (obsolete) frames nothing.
                        .rfind(|coding| {
                            !coding.is_empty() && !coding.eq_ignore_ascii_case(b"identity")
                        });
                    if let Some(coding) = last {
                        facts.transfer_chunked = Some(coding.eq_ignore_ascii_case(b"chunked"));
                    }
                }
                16 if name_is(name, b"content-encoding") => {
                    let value = text(value);
                    match &mut facts.content_encoding {
                        Some(all) => {
                            all.push_str(", ");
                            all.push_str(&value);
                        }
                        None => facts.content_encoding = Some(value),
                    }
                }
                12 if name_is(name, b"content-type") => {
                    facts.content_type.get_or_insert_with(|| head_value(value));
                }
                13 if name_is(name, b"last-event-id") => {
                    facts.last_event_id.get_or_insert_with(|| text(value));
                }
                20 if name_is(name, b"mcp-protocol-version") => {
                    facts
                        .protocol_version
                        .get_or_insert_with(|| head_value(value));
                }
                7 if name_is(name, b"upgrade") => {
                    facts.upgrade_h2c |= value
                        .split(|&b| b == b',')
                        .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"h2c"));
                }
                _ => {}
            }
        }
        facts
    }
}

/// Whether `name` is `lower` (lowercase letters and other bytes) whatever the case of its
/// letters: `eq_ignore_ascii_case`, on every byte at once. A byte under a letter of `lower`
/// is that letter once ORed with 0x20 only if it is the letter in either case; any other byte
/// must be equal.
#[inline(always)]
fn name_is<const N: usize>(name: &[u8], lower: &[u8; N]) -> bool {
    let Ok(name) = <&[u8; N]>::try_from(name) else {
        return false;
    };
    let mut differ = 0;
    for (&b, &l) in name.iter().zip(lower) {
        let fold = if l.is_ascii_lowercase() { 0x20 } else { 0 };
        differ |= (b | fold) ^ l;
    }
    differ == 0
}

/// A header value the report shows as it is, the program's own copy when exchanges repeat it
/// (no allocation then).
fn head_value(value: &[u8]) -> HeadText {
    // A value exchanges repeat is found by its bytes, before (and without) a check of its
    // UTF-8; a text decoded lossily holds U+FFFD, which none of them does.
    if let Some(known) = known_head_bytes(value) {
        return HeadText::Borrowed(known);
    }
    match std::str::from_utf8(value) {
        Ok(s) => HeadText::Owned(s.to_owned()),
        Err(_) => HeadText::Owned(String::from_utf8_lossy(value).into_owned()),
    }
}

// Compiled into its callers: returned through memory, the text was written there a word at
// a time and moved into its field at once, a read that waited for those writes.
#[inline(always)]
fn text(value: &[u8]) -> String {
    // Valid UTF-8 (nearly every header) is checked a word at a time; the lossy decoder walks
    // character by character.
    match std::str::from_utf8(value) {
        Ok(s) => s.to_owned(),
        Err(_) => String::from_utf8_lossy(value).into_owned(),
    }
}

// ----- body framing -----

/// Where a body ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BodyFraming {
    /// Content-Length: bytes still to come.
    Length(u64),
    Chunked(ChunkState),
    /// Delimited by the end of the connection.
    UntilClose,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChunkState {
    /// Inside a chunk-size line: the value so far, whether it has a digit, whether the
    /// digits are over (extensions or line end follow), and the line's length so far.
    Size {
        value: u64,
        has_digit: bool,
        digits_done: bool,
        line_len: usize,
    },
    /// Chunk data bytes still to come.
    Data(u64),
    /// The CRLF after chunk data; `seen_cr` once its CR went by.
    DataEnd { seen_cr: bool },
    /// Trailer section after the last chunk: the current line's length and first byte, and
    /// the section's length so far.
    Trailer {
        line_len: usize,
        line_first: u8,
        total: usize,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FramingEvent {
    Continue,
    Complete,
    Bad(Anomaly),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct FramingStep {
    used: usize,
    /// Body bytes within the input.
    data: Option<Range<usize>>,
    event: FramingEvent,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GapEffect {
    /// The gap lies inside the body's data: framing goes on.
    Kept,
    /// As `Kept`, and the body's last bytes were in the gap.
    KeptAndComplete,
    /// The gap covers framing bytes or reaches past the body.
    Lost,
}

impl BodyFraming {
    fn chunked() -> Self {
        BodyFraming::Chunked(ChunkState::new_size())
    }

    /// Consumes one piece of framing from `input`. `max_line` bounds chunk-size lines and
    /// the trailer section.
    fn advance(&mut self, input: &[u8], max_line: usize) -> FramingStep {
        match self {
            BodyFraming::Length(remaining) => {
                let take = take_up_to(remaining, input.len());
                let event = if *remaining == 0 {
                    FramingEvent::Complete
                } else {
                    FramingEvent::Continue
                };
                FramingStep {
                    used: take,
                    data: Some(0..take),
                    event,
                }
            }
            BodyFraming::UntilClose => FramingStep {
                used: input.len(),
                data: Some(0..input.len()),
                event: FramingEvent::Continue,
            },
            BodyFraming::Chunked(chunk) => chunk.advance(input, max_line),
        }
    }

    /// `len` bytes missing, 0 when how many is not known: only a body that runs to the close
    /// keeps its framing then.
    fn gap(&mut self, len: u64) -> GapEffect {
        match self {
            BodyFraming::UntilClose => GapEffect::Kept,
            _ if len == 0 => GapEffect::Lost,
            BodyFraming::Length(remaining) if len <= *remaining => {
                *remaining -= len;
                if *remaining == 0 {
                    GapEffect::KeptAndComplete
                } else {
                    GapEffect::Kept
                }
            }
            BodyFraming::Chunked(ChunkState::Data(remaining)) if len <= *remaining => {
                *remaining -= len;
                if *remaining == 0 {
                    *self = BodyFraming::Chunked(ChunkState::DataEnd { seen_cr: false });
                }
                GapEffect::Kept
            }
            _ => GapEffect::Lost,
        }
    }
}

/// Takes up to `available` of the `remaining` bytes, returning how many were taken.
fn take_up_to(remaining: &mut u64, available: usize) -> usize {
    let take = usize::try_from(*remaining).map_or(available, |r| r.min(available));
    // `take` is at most `remaining`, so the subtraction cannot wrap.
    *remaining -= take as u64;
    take
}

impl ChunkState {
    fn new_size() -> Self {
        ChunkState::Size {
            value: 0,
            has_digit: false,
            digits_done: false,
            line_len: 0,
        }
    }

    /// The chunk data from `start` on, `remaining` bytes of it still to come: as much as
    /// `input` holds, then the CRLF after the last byte when it follows whole (anything else
    /// there is the `DataEnd` state's to read).
    fn data_step(&mut self, input: &[u8], start: usize, mut remaining: u64) -> FramingStep {
        let take = take_up_to(&mut remaining, input.len().saturating_sub(start));
        let mut used = start + take;
        *self = if remaining > 0 {
            ChunkState::Data(remaining)
        } else if input.get(used..used + 2) == Some(b"\r\n") {
            used += 2;
            ChunkState::new_size()
        } else {
            ChunkState::DataEnd { seen_cr: false }
        };
        FramingStep {
            used,
            data: Some(start..start + take),
            event: FramingEvent::Continue,
        }
    }

    fn advance(&mut self, input: &[u8], max_line: usize) -> FramingStep {
        let bad = |used: usize| FramingStep {
            used,
            data: None,
            event: FramingEvent::Bad(Anomaly::BadChunk),
        };
        let step = |used: usize, event: FramingEvent| FramingStep {
            used,
            data: None,
            event,
        };
        match self {
            ChunkState::Size {
                value,
                has_digit,
                digits_done,
                line_len,
            } => {
                // The usual line (plain digits, CRLF) whole in the input, with the chunk's
                // data after it: one step instead of one for each.
                if *line_len == 0
                    && !*has_digit
                    && let Some((start, size)) = size_line(input, max_line)
                {
                    return self.data_step(input, start, size);
                }
                // Bytes past the line limit are never looked at, so a long line is given up at
                // the same byte however the input is cut.
                let allowance = max_line.saturating_sub(*line_len).saturating_add(1);
                let input = input.get(..allowance).unwrap_or(input);
                let mut i = 0;
                while let Some(&b) = input.get(i) {
                    if *digits_done && b != b'\n' {
                        // Extensions are ignored: skip to the line end by scan (the usual
                        // CRLF right after the digits needs none).
                        let rest = input.get(i..).unwrap_or_default();
                        match memchr::memchr(b'\n', rest) {
                            Some(k) => i += k,
                            None => {
                                i = input.len();
                                break;
                            }
                        }
                    } else if let Some(digit) = hex_value(b) {
                        match value.checked_mul(16).and_then(|v| v.checked_add(digit)) {
                            Some(v) => *value = v,
                            None => return bad(i),
                        }
                        *has_digit = true;
                        i += 1;
                        continue;
                    } else if *has_digit && matches!(b, b';' | b' ' | b'\t' | b'\r') {
                        *digits_done = true;
                        i += 1;
                        continue;
                    } else if b != b'\n' {
                        return bad(i);
                    }
                    // `input[i]` is the line's LF.
                    if !*has_digit || line_len.saturating_add(i) > max_line {
                        return bad(i);
                    }
                    *self = if *value == 0 {
                        ChunkState::Trailer {
                            line_len: 0,
                            line_first: 0,
                            total: 0,
                        }
                    } else {
                        ChunkState::Data(*value)
                    };
                    return step(i + 1, FramingEvent::Continue);
                }
                *line_len = line_len.saturating_add(i);
                if *line_len > max_line {
                    return bad(i);
                }
                step(i, FramingEvent::Continue)
            }
            ChunkState::Data(remaining) => {
                let remaining = *remaining;
                self.data_step(input, 0, remaining)
            }
            ChunkState::DataEnd { seen_cr } => match input.first() {
                // The usual CRLF whole: both bytes in one step.
                Some(b'\r') if !*seen_cr && input.get(1) == Some(&b'\n') => {
                    *self = ChunkState::new_size();
                    step(2, FramingEvent::Continue)
                }
                Some(b'\r') if !*seen_cr => {
                    *seen_cr = true;
                    step(1, FramingEvent::Continue)
                }
                Some(b'\n') => {
                    *self = ChunkState::new_size();
                    step(1, FramingEvent::Continue)
                }
                Some(_) => bad(0),
                None => step(0, FramingEvent::Continue),
            },
            ChunkState::Trailer {
                line_len,
                line_first,
                total,
            } => {
                // As for heads: only bytes within the limit are looked at, and the trailer is
                // given up at the limit, the same byte for any cut.
                let room = max_line.saturating_sub(*total);
                let whole_input = input.len();
                let input = input.get(..room).unwrap_or(input);
                let Some(k) = memchr::memchr(b'\n', input) else {
                    if input.len() < whole_input {
                        return FramingStep {
                            used: input.len(),
                            data: None,
                            event: FramingEvent::Bad(Anomaly::HeaderTooLarge),
                        };
                    }
                    if *line_len == 0
                        && let Some(&b) = input.first()
                    {
                        *line_first = b;
                    }
                    *line_len = line_len.saturating_add(input.len());
                    *total = total.saturating_add(input.len());
                    if *total > max_line {
                        return FramingStep {
                            used: input.len(),
                            data: None,
                            event: FramingEvent::Bad(Anomaly::HeaderTooLarge),
                        };
                    }
                    return step(input.len(), FramingEvent::Continue);
                };
                let first = if *line_len > 0 {
                    *line_first
                } else {
                    input.first().copied().unwrap_or(b'\n')
                };
                let len = line_len.saturating_add(k);
                let blank = len == 0 || (len == 1 && first == b'\r');
                *total = total.saturating_add(k + 1);
                if blank {
                    return step(k + 1, FramingEvent::Complete);
                }
                if *total > max_line {
                    return FramingStep {
                        used: k + 1,
                        data: None,
                        event: FramingEvent::Bad(Anomaly::HeaderTooLarge),
                    };
                }
                *line_len = 0;
                *line_first = 0;
                step(k + 1, FramingEvent::Continue)
            }
        }
    }
}

/// A chunk-size line at the start of `input` made of 1 to 15 hex digits and CRLF, its value
/// not zero and its LF within `max_line` bytes of its start: the line's length and the value.
fn size_line(input: &[u8], max_line: usize) -> Option<(usize, u64)> {
    let mut value = 0u64;
    for (i, &b) in input.iter().take(17).enumerate() {
        if let Some(digit) = hex_value(b) {
            // At most 15 digits: the value stays below 2^60.
            value = (value << 4) | digit;
            continue;
        }
        let whole = b == b'\r'
            && (1..=15).contains(&i)
            && input.get(i + 1) == Some(&b'\n')
            && i < max_line
            && value != 0;
        return whole.then_some((i + 2, value));
    }
    None
}

fn hex_value(b: u8) -> Option<u64> {
    char::from(b).to_digit(16).map(u64::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    use flate2::Compression;
    use flate2::write::{DeflateEncoder, GzEncoder, ZlibEncoder};
    use proptest::prelude::*;

    use crate::app::testing::{Event, Recorder, Split, Step, XorShift, data};

    const C: Direction = Direction::Forward;
    const S: Direction = Direction::Reverse;

    /// Content type and protocol version: a value exchanges repeat is the program's copy, any
    /// other kept byte for byte, and bytes that are not UTF-8 shown with replacement marks.
    #[test]
    fn head_values_are_borrowed_when_known_and_kept_as_sent_otherwise() {
        let header = |name, value| httparse::Header { name, value };
        let facts = HeadFacts::from_headers(&[
            header("Content-Type", b"text/event-stream"),
            header("MCP-Protocol-Version", b"2025-06-18"),
        ]);
        assert!(matches!(
            facts.content_type,
            Some(HeadText::Borrowed("text/event-stream"))
        ));
        assert!(matches!(
            facts.protocol_version,
            Some(HeadText::Borrowed("2025-06-18"))
        ));
        let facts = HeadFacts::from_headers(&[
            header("content-type", b"text/event-stream; charset=utf-8"),
            header("mcp-protocol-version", b"2099-\xff"),
        ]);
        assert!(matches!(
            facts.content_type.as_deref(),
            Some("text/event-stream; charset=utf-8")
        ));
        assert!(matches!(facts.content_type, Some(HeadText::Owned(_))));
        assert_eq!(facts.protocol_version.as_deref(), Some("2099-\u{fffd}"));
    }

    /// `name_is` answers as `eq_ignore_ascii_case` for every byte at every position of every
    /// name the head facts look for, in either case, and for names a byte longer or shorter.
    #[test]
    fn name_is_matches_eq_ignore_ascii_case() {
        fn check<const N: usize>(lower: &[u8; N]) {
            let cased = [lower.to_vec(), lower.to_ascii_uppercase()];
            for base in &cased {
                assert!(name_is(base, lower));
                for i in 0..N {
                    for b in 0..=255u8 {
                        let mut name = base.clone();
                        name[i] = b;
                        assert_eq!(
                            name_is(&name, lower),
                            name.eq_ignore_ascii_case(lower),
                            "{:?} at {i}",
                            String::from_utf8_lossy(&name)
                        );
                    }
                }
                assert!(!name_is(&base[1..], lower));
                let mut longer = base.clone();
                longer.push(b'x');
                assert!(!name_is(&longer, lower));
            }
        }
        check(b"content-length");
        check(b"mcp-session-id");
        check(b"transfer-encoding");
        check(b"content-encoding");
        check(b"content-type");
        check(b"last-event-id");
        check(b"mcp-protocol-version");
        check(b"upgrade");
    }

    #[derive(Debug, PartialEq, Eq)]
    struct Outcome {
        events: Vec<Event>,
        abandoned: bool,
        client: Option<Direction>,
    }

    /// Mark of step `i`: frame `i + 1`, so marks are the same however a step is cut.
    fn mark_of(i: usize) -> Mark {
        Mark::new(i as u64 + 1, (i as i64 + 1) * 1_000)
    }

    fn run(limits: &Limits, from_start: bool, steps: &[Step], split: Split) -> Outcome {
        let mut conn = HttpConnection::new(limits, from_start);
        let mut rec = Recorder::default();
        let mut rng = XorShift(match split {
            Split::Random(seed) => seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            _ => 1,
        });
        let mut recorded_at: Option<(Direction, u64)> = None;
        let mut sent_before: Option<(Direction, u64)> = None;
        for (i, step) in steps.iter().enumerate() {
            let mut mark = mark_of(i);
            if let (Step::Data(dir, _), Some((d, frame))) = (step, recorded_at)
                && *dir == d
            {
                mark = Mark::new(frame, i64::try_from(frame).unwrap_or(0) * 1_000);
                recorded_at = None;
            }
            if let (Step::Data(dir, _), Some((d, unacked))) = (step, sent_before)
                && *dir == d
            {
                conn.before_peer(d, mark, unacked);
                sent_before = None;
            }
            match step {
                Step::Data(dir, bytes) => match split {
                    Split::Whole => {
                        conn.data(*dir, bytes, mark, &mut rec);
                    }
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
                Step::Ahead(dir, unseen) => {
                    // Said of the direction's next data, in that step's frame.
                    let next = steps[i..]
                        .iter()
                        .position(|s| matches!(s, Step::Data(d, _) if d == dir))
                        .map_or(i, |k| i + k);
                    conn.ahead_of_peer(*dir, mark_of(next), *unseen);
                }
                Step::Late(dir, frame, after) => {
                    if *after {
                        conn.after_peer(*dir);
                    }
                    recorded_at = Some((*dir, *frame));
                }
                Step::Before(dir, unacked) => sent_before = Some((*dir, *unacked)),
            }
        }
        Outcome {
            events: rec.events,
            abandoned: conn.is_abandoned(),
            client: conn.client_direction(),
        }
    }

    /// Runs the transcript whole, byte by byte and at random split points, requires one
    /// answer, checks the sink contract, and returns the answer.
    fn transcript_with(limits: &Limits, from_start: bool, steps: &[Step]) -> Outcome {
        let whole = run(limits, from_start, steps, Split::Whole);
        assert_eq!(
            run(limits, from_start, steps, Split::Bytewise),
            whole,
            "byte by byte"
        );
        for seed in 1..=6 {
            let random = run(limits, from_start, steps, Split::Random(seed));
            assert_eq!(random, whole, "random split, seed {seed}");
        }
        let ended = [C, S].iter().all(|d| {
            steps
                .iter()
                .any(|s| matches!(s, Step::End(dir, _) if dir == d))
        });
        check_contract(&whole.events, ended || whole.abandoned);
        whole
    }

    fn transcript(steps: &[Step]) -> Outcome {
        transcript_with(&Limits::default(), true, steps)
    }

    /// The `HttpSink` contract: a response before its body calls, nothing after its
    /// `body_end`, and (once both directions ended) exactly one `body_end` per response.
    fn check_contract(events: &[Event], all_ended: bool) {
        use std::collections::HashMap;
        #[derive(PartialEq)]
        enum Phase {
            Open,
            Ended,
        }
        let mut phases: HashMap<u32, Phase> = HashMap::new();
        for event in events {
            match event {
                Event::Response(head) => {
                    assert!(
                        phases.insert(head.exchange, Phase::Open).is_none(),
                        "{event:?}"
                    );
                }
                Event::Body(e, ..) | Event::BodyGap(e, ..) => {
                    assert!(
                        phases.get(e) == Some(&Phase::Open),
                        "{event:?} outside a body"
                    );
                }
                Event::BodyEnd(e, ..) => {
                    assert!(
                        phases.get(e) == Some(&Phase::Open),
                        "{event:?} outside a body"
                    );
                    phases.insert(*e, Phase::Ended);
                }
                Event::Request(_) | Event::Anomaly(..) => {}
            }
        }
        if all_ended {
            assert!(
                phases.values().all(|p| *p == Phase::Ended),
                "a body never ended"
            );
        }
    }

    /// Compact view: one line per event, bodies of one exchange merged.
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
                Event::Request(h) => format!("req {} {} {}", h.exchange, h.method, h.target),
                Event::Response(h) => format!("resp {} {}", h.exchange, h.status),
                Event::BodyGap(e, len, _) => format!("gap {e} {len}"),
                Event::BodyEnd(e, how, _) => format!("end {e} {how:?}"),
                Event::Anomaly(what, _) => format!("anomaly {what:?}"),
                Event::Body(..) => unreachable!(),
            });
        }
        flush(&mut body, &mut lines);
        lines
    }

    fn requests(events: &[Event]) -> Vec<&RequestHead> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Request(h) => Some(h),
                _ => None,
            })
            .collect()
    }

    fn responses(events: &[Event]) -> Vec<&ResponseHead> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Response(h) => Some(h),
                _ => None,
            })
            .collect()
    }

    fn chunk(bytes: &[u8]) -> Vec<u8> {
        let mut out = format!("{:x}\r\n", bytes.len()).into_bytes();
        out.extend_from_slice(bytes);
        out.extend_from_slice(b"\r\n");
        out
    }

    fn chunked(pieces: &[&[u8]]) -> Vec<u8> {
        let mut out: Vec<u8> = pieces.iter().flat_map(|p| chunk(p)).collect();
        out.extend_from_slice(b"0\r\n\r\n");
        out
    }

    fn get(target: &str) -> Vec<u8> {
        format!("GET {target} HTTP/1.1\r\nHost: h\r\n\r\n").into_bytes()
    }

    fn ok_length(body: &str) -> Vec<u8> {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    fn concat(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    const SSE_TEXT: &str = "id: 42\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\"}\r\n\r\n\
                            id: 43\r\ndata: second\r\n\r\n";

    // ----- transcripts -----

    #[test]
    fn get_with_chunked_event_stream_response() {
        let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n\
                    Mcp-Session-Id: sess-1\r\nTransfer-Encoding: chunked\r\n\r\n";
        let out = transcript(&[
            data(
                C,
                "GET /mcp HTTP/1.1\r\nHost: h\r\nmcp-session-id: sess-1\r\n",
            ),
            data(
                C,
                "last-event-id: 41\r\nMCP-Protocol-Version: 2025-06-18\r\n\r\n",
            ),
            data(
                S,
                concat(&[head.as_bytes(), &chunk(b"id: 42\r\nevent: message\r\n")]),
            ),
            data(
                S,
                chunked(&[
                    b"data: {\"jsonrpc\":\"2.0\"}\r\n\r\n",
                    b"id: 43\r\ndata: second\r\n\r\n",
                ]),
            ),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /mcp".to_string(),
                "resp 0 200".into(),
                format!("body 0 {SSE_TEXT}"),
                "end 0 Complete".into(),
            ]
        );
        let req = requests(&out.events)[0];
        assert_eq!(req.session_id.as_deref(), Some("sess-1"));
        assert_eq!(req.last_event_id.as_deref(), Some("41"));
        assert_eq!(req.protocol_version.as_deref(), Some("2025-06-18"));
        assert_eq!((req.first, req.complete), (mark_of(0), mark_of(1)));
        let resp = responses(&out.events)[0];
        assert!(resp.is_event_stream());
        assert_eq!(resp.session_id.as_deref(), Some("sess-1"));
        assert_eq!(resp.content_encoding, None);
        assert_eq!((resp.first, resp.complete), (mark_of(2), mark_of(2)));
        assert_eq!(
            out.events.last(),
            Some(&Event::BodyEnd(0, BodyEnd::Complete, mark_of(3)))
        );
        assert_eq!(out.client, Some(C));
        assert!(!out.abandoned);
    }

    #[test]
    fn keep_alive_carries_three_exchanges() {
        let out = transcript(&[
            data(C, get("/one")),
            data(S, ok_length("first")),
            data(
                C,
                "POST /two HTTP/1.1\r\nContent-Length: 7\r\n\r\n{\"a\":1}",
            ),
            data(
                S,
                concat(&[
                    b"HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n",
                    &chunked(&[b"second"]),
                ]),
            ),
            data(C, get("/three")),
            data(S, "HTTP/1.1 204 No Content\r\n\r\n"),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /one",
                "resp 0 200",
                "body 0 first",
                "end 0 Complete",
                "req 1 POST /two",
                "resp 1 202",
                "body 1 second",
                "end 1 Complete",
                "req 2 GET /three",
                "resp 2 204",
                "end 2 Complete",
            ]
        );
    }

    #[test]
    fn pipelined_requests_pair_in_order() {
        let out = transcript(&[
            data(
                C,
                concat(&[&get("/a"), &get("/b"), b"HEAD /c HTTP/1.1\r\n\r\n"]),
            ),
            data(
                S,
                concat(&[
                    &ok_length("A"),
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nB\r\n0\r\n\r\n",
                    b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n",
                ]),
            ),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /a",
                "req 1 GET /b",
                "req 2 HEAD /c",
                "resp 0 200",
                "body 0 A",
                "end 0 Complete",
                "resp 1 200",
                "body 1 B",
                "end 1 Complete",
                "resp 2 200",
                "end 2 Complete",
            ]
        );
    }

    #[test]
    fn content_length_body_holding_http_text() {
        let body = "HTTP/1.1 200 OK\r\n\r\nGET / HTTP/1.1\r\n\r\n";
        let out = transcript(&[
            data(C, get("/")),
            data(S, ok_length(body)),
            data(C, get("/next")),
            data(S, ok_length("2")),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /".to_string(),
                "resp 0 200".into(),
                format!("body 0 {body}"),
                "end 0 Complete".into(),
                "req 1 GET /next".into(),
                "resp 1 200".into(),
                "body 1 2".into(),
                "end 1 Complete".into(),
            ]
        );
    }

    #[test]
    fn chunk_extensions_and_trailers_are_skipped() {
        let out = transcript(&[
            data(C, concat(&[&get("/a"), &get("/b")])),
            data(
                S,
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n\
                 5;name=value\r\nhello\r\n6 ; x=\"y\"\r\n world\r\n0;last\r\nX-Trailer: 1\r\nY: 2\r\n\r\n",
            ),
            data(S, ok_length("next")),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /a",
                "req 1 GET /b",
                "resp 0 200",
                "body 0 hello world",
                "end 0 Complete",
                "resp 1 200",
                "body 1 next",
                "end 1 Complete",
            ]
        );
    }

    #[test]
    fn close_delimited_body_ends_with_the_stream() {
        for how in [StreamEnd::Fin, StreamEnd::Rst, StreamEnd::CaptureEnd] {
            let out = transcript(&[
                data(C, get("/sse")),
                data(
                    S,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\nid: 1\n",
                ),
                data(S, "data: x\n\n"),
                Step::End(S, how),
                Step::End(C, StreamEnd::Fin),
            ]);
            assert_eq!(
                summary(&out.events),
                [
                    "req 0 GET /sse".to_string(),
                    "resp 0 200".into(),
                    "body 0 id: 1\ndata: x\n\n".into(),
                    format!("end 0 Stream({how:?})"),
                ]
            );
        }
    }

    #[test]
    fn length_body_cut_by_the_stream_end() {
        let out = transcript(&[
            data(C, get("/")),
            data(S, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial"),
            Step::End(S, StreamEnd::Rst),
            Step::End(C, StreamEnd::Rst),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /",
                "resp 0 200",
                "body 0 partial",
                "end 0 Stream(Rst)"
            ]
        );
    }

    #[test]
    fn continue_then_final_response() {
        let out = transcript(&[
            data(
                C,
                "POST /mcp HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
            ),
            data(S, "HTTP/1.1 100 Continue\r\n\r\n"),
            data(C, "hello"),
            data(S, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"),
            data(S, ok_length("done")),
            data(C, get("/after")),
            data(S, ok_length("x")),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 POST /mcp",
                "resp 0 200",
                "body 0 done",
                "end 0 Complete",
                "req 1 GET /after",
                "resp 1 200",
                "body 1 x",
                "end 1 Complete",
            ]
        );
    }

    #[test]
    fn head_response_has_no_body() {
        let out = transcript(&[
            data(C, concat(&[b"HEAD /x HTTP/1.1\r\n\r\n", &get("/y")])),
            data(
                S,
                concat(&[
                    b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n",
                    &ok_length("abc"),
                ]),
            ),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 HEAD /x",
                "req 1 GET /y",
                "resp 0 200",
                "end 0 Complete",
                "resp 1 200",
                "body 1 abc",
                "end 1 Complete",
            ]
        );
    }

    #[test]
    fn no_content_and_not_modified_have_no_body() {
        let out = transcript(&[
            data(C, concat(&[&get("/a"), &get("/b"), &get("/c")])),
            data(S, "HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n"),
            data(
                S,
                "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n",
            ),
            data(S, ok_length("c")),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /a",
                "req 1 GET /b",
                "req 2 GET /c",
                "resp 0 204",
                "end 0 Complete",
                "resp 1 304",
                "end 1 Complete",
                "resp 2 200",
                "body 2 c",
                "end 2 Complete",
            ]
        );
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn gzip_chunked_event_stream_is_decoded() {
        let compressed = gzip(SSE_TEXT.as_bytes());
        let pieces: Vec<&[u8]> = compressed.chunks(7).collect();
        let out = transcript(&[
            data(C, get("/mcp")),
            data(
                S,
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n\
                 Transfer-Encoding: chunked\r\n\r\n",
            ),
            data(S, chunked(&pieces)),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /mcp".to_string(),
                "resp 0 200".into(),
                format!("body 0 {SSE_TEXT}"),
                "end 0 Complete".into(),
            ]
        );
        assert_eq!(
            responses(&out.events)[0].content_encoding.as_deref(),
            Some("gzip")
        );
    }

    #[test]
    fn gzip_with_optional_header_fields_and_two_members() {
        let mut encoder = flate2::GzBuilder::new()
            .filename("events.txt")
            .comment("a comment")
            .extra(vec![1, 2, 3, 4, 5])
            .write(Vec::new(), Compression::fast());
        encoder.write_all(b"first member, ").unwrap();
        let mut body = encoder.finish().unwrap();
        body.extend_from_slice(&gzip(b"second member"));
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Encoding: x-gzip\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let out = transcript(&[
            data(C, get("/")),
            data(S, concat(&[head.as_bytes(), &body])),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /",
                "resp 0 200",
                "body 0 first member, second member",
                "end 0 Complete"
            ]
        );
    }

    #[test]
    fn deflate_zlib_and_raw_are_decoded() {
        let text = b"data: deflated event\n\n".repeat(20);
        let mut zlib = ZlibEncoder::new(Vec::new(), Compression::default());
        zlib.write_all(&text).unwrap();
        let mut raw = DeflateEncoder::new(Vec::new(), Compression::default());
        raw.write_all(&text).unwrap();
        for body in [zlib.finish().unwrap(), raw.finish().unwrap()] {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Encoding: deflate\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            let out = transcript(&[
                data(C, get("/")),
                data(S, concat(&[head.as_bytes(), &body])),
                Step::End(C, StreamEnd::Fin),
                Step::End(S, StreamEnd::Fin),
            ]);
            assert_eq!(
                summary(&out.events),
                [
                    "req 0 GET /".to_string(),
                    "resp 0 200".into(),
                    format!("body 0 {}", String::from_utf8_lossy(&text)),
                    "end 0 Complete".into(),
                ]
            );
        }
    }

    #[test]
    fn bad_gzip_data_is_malformed_and_framing_goes_on() {
        let mut body = gzip(SSE_TEXT.as_bytes());
        let middle = body.len() / 2;
        body[middle..].iter_mut().for_each(|b| *b ^= 0x55);
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let out = transcript(&[
            data(C, concat(&[&get("/a"), &get("/b")])),
            data(S, concat(&[head.as_bytes(), &body, &ok_length("fine")])),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        let lines = summary(&out.events);
        let malformed = lines
            .iter()
            .position(|l| l == "end 0 Malformed")
            .expect("malformed end");
        assert_eq!(lines[malformed - 1], "anomaly BadContentEncoding");
        assert_eq!(
            lines[malformed + 1..],
            ["resp 1 200", "body 1 fine", "end 1 Complete"]
        );
        assert!(!lines.iter().any(|l| l.contains("Resynchronized")));
    }

    #[test]
    fn truncated_gzip_inside_complete_framing_is_malformed() {
        let body = gzip(SSE_TEXT.as_bytes());
        let cut = &body[..body.len() - 12];
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
            cut.len()
        );
        let out = transcript(&[
            data(C, get("/")),
            data(S, concat(&[head.as_bytes(), cut])),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        let lines = summary(&out.events);
        assert_eq!(
            lines[lines.len() - 2..],
            ["anomaly BadContentEncoding", "end 0 Malformed"]
        );
    }

    #[test]
    fn unsupported_encoding_delivers_nothing_and_framing_goes_on() {
        let out = transcript(&[
            data(C, concat(&[&get("/a"), &get("/b")])),
            data(S, b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 6\r\n\r\n\x0b\x02\x80abc"),
            data(S, ok_length("ok")),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /a",
                "req 1 GET /b",
                "resp 0 200",
                "anomaly BadContentEncoding",
                "end 0 Malformed",
                "resp 1 200",
                "body 1 ok",
                "end 1 Complete",
            ]
        );
    }

    #[test]
    fn capture_started_mid_connection_resynchronizes() {
        let out = transcript_with(
            &Limits::default(),
            false,
            &[
                data(
                    S,
                    "ta: {\"partial\":true}\r\n\r\nid: 7\r\ndata: HTTP/1.1 inside\r\n\r\n",
                ),
                data(S, concat(&[b"0\r\n\r\n", &ok_length("hi")])),
                data(C, "\r\nfoo\": 1}"),
                data(C, get("/next")),
                data(S, ok_length("there")),
                Step::End(C, StreamEnd::CaptureEnd),
                Step::End(S, StreamEnd::CaptureEnd),
            ],
        );
        assert_eq!(
            summary(&out.events),
            [
                "anomaly Resynchronized",
                "anomaly UnpairedResponse",
                "resp 0 200",
                "body 0 hi",
                "end 0 Complete",
                "anomaly Resynchronized",
                "req 1 GET /next",
                "resp 1 200",
                "body 1 there",
                "end 1 Complete",
            ]
        );
        assert_eq!(out.client, Some(C));
    }

    #[test]
    fn mid_connection_start_at_a_message_boundary_reports_nothing_odd() {
        let out = transcript_with(
            &Limits::default(),
            false,
            &[
                data(C, get("/x")),
                data(S, ok_length("y")),
                Step::End(C, StreamEnd::Fin),
                Step::End(S, StreamEnd::Fin),
            ],
        );
        assert_eq!(
            summary(&out.events),
            ["req 0 GET /x", "resp 0 200", "body 0 y", "end 0 Complete"]
        );
    }

    #[test]
    fn non_http_connection_is_abandoned_from_its_first_bytes() {
        let tls = data(C, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03");
        let out = transcript(&[tls.clone(), data(S, "HTTP/1.1 200 OK\r\n\r\n")]);
        assert!(out.abandoned);
        assert!(out.events.is_empty());

        let out = transcript(&[data(S, "SSH-2.0-OpenSSH_9.6\r\n"), data(C, get("/"))]);
        assert!(out.abandoned);
        assert!(out.events.is_empty());

        // One byte is enough to decide.
        let mut conn = HttpConnection::new(&Limits::default(), true);
        conn.data(C, b"\x16", Mark::default(), &mut Recorder::default());
        assert!(conn.is_abandoned());
        // A prefix that could still be HTTP is not.
        let mut conn = HttpConnection::new(&Limits::default(), true);
        conn.data(C, b"HTTP/1", Mark::default(), &mut Recorder::default());
        conn.data(S, b"GE", Mark::default(), &mut Recorder::default());
        assert!(!conn.is_abandoned());

        // The server side of an HTTP client that gets no HTTP back.
        let out = transcript(&[data(C, get("/")), data(S, "\x00\x00\x00\x04\x01garbage")]);
        assert!(out.abandoned);
        assert_eq!(summary(&out.events), ["req 0 GET /"]);

        let out = transcript(&[data(C, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")]);
        assert!(out.abandoned);

        // Both sides sending requests is not an HTTP exchange.
        let out = transcript(&[data(C, get("/")), data(S, get("/"))]);
        assert!(out.abandoned);
    }

    #[test]
    fn gap_inside_length_body_keeps_framing() {
        let out = transcript(&[
            data(C, concat(&[&get("/a"), &get("/b")])),
            data(S, "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhel"),
            Step::Gap(S, 4),
            data(S, concat(&[b"orld", &ok_length("b")])),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /a",
                "req 1 GET /b",
                "resp 0 200",
                "body 0 hel",
                "gap 0 4",
                "body 0 orld",
                "end 0 Complete",
                "resp 1 200",
                "body 1 b",
                "end 1 Complete",
            ]
        );
        assert!(out.events.contains(&Event::BodyGap(0, 4, mark_of(2))));
    }

    #[test]
    fn gap_that_ends_a_length_body_completes_it() {
        let out = transcript(&[
            data(C, get("/a")),
            data(S, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nabc"),
            Step::Gap(S, 3),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /a",
                "resp 0 200",
                "body 0 abc",
                "gap 0 3",
                "end 0 Complete"
            ]
        );
    }

    #[test]
    fn gap_inside_chunk_data_keeps_framing() {
        let out = transcript(&[
            data(C, get("/a")),
            data(
                S,
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\n01",
            ),
            Step::Gap(S, 5),
            data(S, "789\r\n2\r\nxy\r\n0\r\n\r\n"),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /a",
                "resp 0 200",
                "body 0 01",
                "gap 0 5",
                "body 0 789xy",
                "end 0 Complete",
            ]
        );
    }

    #[test]
    fn gap_in_a_close_delimited_body_keeps_framing() {
        // Also when how many bytes were lost is not known (0, as TLS says it).
        for lost in [1000, 0] {
            let out = transcript(&[
                data(C, get("/a")),
                data(S, "HTTP/1.0 200 OK\r\n\r\nabc"),
                Step::Gap(S, lost),
                data(S, "def"),
                Step::End(C, StreamEnd::Fin),
                Step::End(S, StreamEnd::Fin),
            ]);
            assert_eq!(
                summary(&out.events),
                [
                    "req 0 GET /a".to_string(),
                    "resp 0 200".to_string(),
                    "body 0 abc".to_string(),
                    format!("gap 0 {lost}"),
                    "body 0 def".to_string(),
                    "end 0 Stream(Fin)".to_string()
                ]
            );
        }
    }

    #[test]
    fn gap_in_an_encoded_body_stops_decoding_but_not_framing() {
        let body = gzip(SSE_TEXT.as_bytes());
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let out = transcript(&[
            data(C, concat(&[&get("/a"), &get("/b")])),
            data(S, concat(&[head.as_bytes(), &body[..10]])),
            Step::Gap(S, 5),
            data(S, concat(&[&body[15..], &ok_length("b")])),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /a",
                "req 1 GET /b",
                "resp 0 200",
                "gap 0 0",
                "end 0 LostSync",
                "resp 1 200",
                "body 1 b",
                "end 1 Complete",
            ]
        );
    }

    #[test]
    fn gap_in_chunk_size_line_loses_sync_until_next_response() {
        let out = transcript(&[
            data(C, get("/a")),
            data(C, get("/b")),
            data(
                S,
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n1",
            ),
            Step::Gap(S, 3),
            data(
                S,
                concat(&[b"f\r\nlost data here\r\n0\r\n\r\n", &ok_length("b")]),
            ),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /a",
                "req 1 GET /b",
                "resp 0 200",
                "body 0 hello",
                "gap 0 3",
                "end 0 LostSync",
                "anomaly Resynchronized",
                "resp 1 200",
                "body 1 b",
                "end 1 Complete",
            ]
        );
    }

    #[test]
    fn gap_beyond_a_length_body_loses_sync() {
        let out = transcript(&[
            data(C, get("/a")),
            data(S, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab"),
            Step::Gap(S, 30),
            data(S, "Length: 1\r\n\r\nz"),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /a",
                "resp 0 200",
                "body 0 ab",
                "gap 0 30",
                "end 0 LostSync",
                "anomaly Resynchronized"
            ]
        );
    }

    #[test]
    fn lost_request_head_makes_its_response_unpaired() {
        let out = transcript(&[
            data(C, get("/a")),
            data(S, ok_length("A")),
            data(C, "GET /b HT"),
            Step::Gap(C, 50),
            data(S, ok_length("B")),
            data(C, get("/c")),
            data(S, ok_length("C")),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /a",
                "resp 0 200",
                "body 0 A",
                "end 0 Complete",
                "anomaly UnpairedResponse",
                "resp 1 200",
                "body 1 B",
                "end 1 Complete",
                "req 2 GET /c",
                "resp 2 200",
                "body 2 C",
                "end 2 Complete",
            ]
        );
    }

    #[test]
    fn an_answer_after_lost_answers_and_a_lost_request_is_paired_with_neither() {
        // The answer to GET /a was lost, and so was a request after it: the answer captured
        // next may be either one's, and a client that waits for each answer asked again only
        // once it had the first. The request is lost as a gap, or not (yet) known lost: the
        // answer acknowledges bytes of the client the capture has not shown.
        for lost_request in [Step::Gap(C, 20), Step::Ahead(S, 0)] {
            let out = transcript(&[
                data(C, get("/a")),
                Step::Gap(S, 40),
                lost_request,
                data(S, ok_length("x")),
                Step::End(C, StreamEnd::Fin),
                Step::End(S, StreamEnd::Fin),
            ]);
            let events = summary(&out.events);
            assert!(
                events.iter().any(|e| e.contains("UnpairedResponse")),
                "{events:?}"
            );
            assert!(!events.iter().any(|e| e == "resp 0 200"), "{events:?}");
        }
    }

    #[test]
    fn a_first_answer_ahead_of_a_request_recorded_later_does_not_shift_the_pairing() {
        // The connection's first bytes captured are an answer that acknowledges client bytes
        // not shown yet (said before either role was known); its request was recorded after
        // it. That request has had its answer: the next answer is the next request's.
        let out = transcript(&[
            Step::Ahead(S, 0),
            data(S, ok_length("x")),
            data(C, get("/a")),
            data(C, get("/b")),
            data(S, ok_length("y")),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        let events = summary(&out.events);
        assert!(events.iter().any(|e| e == "resp 2 200"), "{events:?}");
        assert!(!events.iter().any(|e| e == "resp 1 200"), "{events:?}");
    }

    #[test]
    fn an_answer_after_lost_answers_goes_to_the_last_request_before_it() {
        // Also when the request is ahead of answer bytes not captured: that says nothing of
        // requests.
        for before in [None, Some(Step::Ahead(C, 0))] {
            let mut steps = vec![data(C, get("/a")), Step::Gap(S, 40)];
            steps.extend(before);
            steps.extend([
                data(S, ok_length("x")),
                Step::End(C, StreamEnd::Fin),
                Step::End(S, StreamEnd::Fin),
            ]);
            let out = transcript(&steps);
            assert!(summary(&out.events).iter().any(|e| e == "resp 0 200"));
        }
    }

    #[test]
    fn an_answer_sent_after_a_request_recorded_later_may_answer_it() {
        // The answer to GET /b was lost at a message boundary; GET /c went out, and the
        // next answer, which acknowledges it, was recorded before it (with GET /b). Sent
        // after GET /c, it answers GET /c, and GET /b has no captured answer. Without the
        // acknowledgment, the frames put it before GET /c: it goes to GET /b.
        for (after, answered) in [(true, "resp 2 200"), (false, "resp 1 200")] {
            let steps = [
                data(C, get("/a")),
                data(S, ok_length("x")),
                Step::Gap(S, 40),
                data(C, get("/b")),
                data(C, get("/c")),
                Step::Late(S, 4, after),
                data(S, ok_length("y")),
                Step::End(C, StreamEnd::Fin),
                Step::End(S, StreamEnd::Fin),
            ];
            let events = summary(&transcript(&steps).events);
            assert!(events.iter().any(|e| e == answered), "{after}: {events:?}");
        }
    }

    #[test]
    fn an_answer_sent_before_a_request_arrived_does_not_answer_it() {
        // The server's bytes after its answer to GET /a were lost; GET /b and GET /c went
        // out, and the next answer was sent when the server had GET /b only (its
        // acknowledgment stops at GET /c, or inside GET /b). It answers GET /b, whatever the
        // frames say. Once the server had the start of GET /c, or without the
        // acknowledgment, the newest request before it takes it.
        let c = get("/c").len() as u64;
        for (before, answered) in [
            (Some(c), "resp 1 200"),
            (Some(c + 3), "resp 1 200"),
            (Some(c - 3), "resp 2 200"),
            (None, "resp 2 200"),
        ] {
            let mut steps = vec![
                data(C, get("/a")),
                data(S, ok_length("x")),
                Step::Gap(S, 40),
                data(C, get("/b")),
                data(C, get("/c")),
            ];
            steps.extend(before.map(|n| Step::Before(S, n)));
            steps.extend([
                data(S, ok_length("y")),
                Step::End(C, StreamEnd::Fin),
                Step::End(S, StreamEnd::Fin),
            ]);
            let events = summary(&transcript(&steps).events);
            assert!(
                events.iter().any(|e| e == answered),
                "{before:?}: {events:?}"
            );
        }
    }

    #[test]
    fn an_answer_ahead_of_requests_answers_none_it_did_not_acknowledge() {
        // The server's bytes after its answer to GET /a were lost, and so was GET /b; GET /c
        // is recorded, then an answer that was let through ahead of the client bytes it
        // acknowledges. When those stop at the end of GET /b, GET /c had not arrived when it
        // was sent: it answers the lost GET /b, not GET /c. When they reach into GET /c, or
        // are not known, the newest request before it (GET /c) may take it.
        let b = get("/b").len() as u64;
        for (unseen, paired) in [(b, false), (b + 3, true), (0, true)] {
            let events = summary(
                &transcript(&[
                    data(C, get("/a")),
                    data(S, ok_length("x")),
                    Step::Gap(S, 40),
                    Step::Ahead(S, unseen),
                    Step::Gap(C, b),
                    data(C, get("/c")),
                    data(S, ok_length("y")),
                    Step::End(C, StreamEnd::Fin),
                    Step::End(S, StreamEnd::Fin),
                ])
                .events,
            );
            assert_eq!(
                events.iter().any(|e| e == "resp 1 200"),
                paired,
                "{unseen}: {events:?}"
            );
        }
    }

    #[test]
    fn a_loss_of_unknown_length_ends_a_framed_body() {
        let framed = transcript(&[
            data(C, get("/a")),
            data(S, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"),
            Step::Gap(S, 0),
            data(S, "defghij"),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        let events = summary(&framed.events);
        assert!(events.iter().any(|e| e == "end 0 LostSync"), "{events:?}");
    }

    #[test]
    fn gap_inside_request_body_keeps_pairing() {
        let out = transcript(&[
            data(C, "POST /mcp HTTP/1.1\r\nContent-Length: 10\r\n\r\n{\"a"),
            Step::Gap(C, 7),
            data(S, ok_length("r")),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 POST /mcp",
                "resp 0 200",
                "body 0 r",
                "end 0 Complete"
            ]
        );
    }

    #[test]
    fn chunked_request_body_is_followed_not_delivered() {
        let out = transcript(&[
            data(
                C,
                "POST /mcp HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            ),
            data(
                C,
                concat(&[
                    &chunked(&[b"{\"id\":1}", b"GET / HTTP/1.1\r\n\r\n"]),
                    &get("/b"),
                ]),
            ),
            data(S, concat(&[&ok_length("1"), &ok_length("2")])),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 POST /mcp",
                "req 1 GET /b",
                "resp 0 200",
                "body 0 1",
                "end 0 Complete",
                "resp 1 200",
                "body 1 2",
                "end 1 Complete",
            ]
        );
    }

    #[test]
    fn extra_response_is_unpaired_and_numbered_next() {
        let out = transcript(&[
            data(C, get("/a")),
            data(S, concat(&[&ok_length("A"), &ok_length("extra")])),
            data(C, get("/b")),
            data(S, ok_length("B")),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /a",
                "resp 0 200",
                "body 0 A",
                "end 0 Complete",
                "anomaly UnpairedResponse",
                "resp 1 200",
                "body 1 extra",
                "end 1 Complete",
                "req 2 GET /b",
                "resp 2 200",
                "body 2 B",
                "end 2 Complete",
            ]
        );
    }

    #[test]
    fn oversized_head_is_dropped_and_parsing_resumes() {
        let limits = Limits {
            max_header_bytes: 200,
            ..Limits::default()
        };
        let big = format!(
            "HTTP/1.1 200 OK\r\nX-Big: {}\r\nContent-Length: 0\r\n\r\n",
            "v".repeat(300)
        );
        let out = transcript_with(
            &limits,
            true,
            &[
                data(C, concat(&[&get("/a"), &get("/b")])),
                data(S, concat(&[big.as_bytes(), &ok_length("b")])),
                Step::End(C, StreamEnd::Fin),
                Step::End(S, StreamEnd::Fin),
            ],
        );
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /a",
                "req 1 GET /b",
                "anomaly HeaderTooLarge",
                "anomaly Resynchronized",
                "resp 1 200",
                "body 1 b",
                "end 1 Complete",
            ]
        );
    }

    #[test]
    fn too_many_headers_is_a_head_too_large() {
        let many: String = (0..200).map(|i| format!("X-{i}: v\r\n")).collect();
        let head = format!("HTTP/1.1 200 OK\r\n{many}Content-Length: 0\r\n\r\n");
        let out = transcript(&[
            data(C, concat(&[&get("/a"), &get("/b")])),
            data(S, concat(&[head.as_bytes(), &ok_length("b")])),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /a",
                "req 1 GET /b",
                "anomaly HeaderTooLarge",
                "resp 1 200",
                "body 1 b",
                "end 1 Complete",
            ]
        );
    }

    #[test]
    fn chunk_size_overflow_is_a_bad_chunk() {
        let out = transcript(&[
            data(C, concat(&[&get("/a"), &get("/b")])),
            data(
                S,
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n10000000000000000\r\n",
            ),
            data(S, concat(&[b"junk\r\n", &ok_length("b")])),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /a",
                "req 1 GET /b",
                "resp 0 200",
                "body 0 ok",
                "anomaly BadChunk",
                "end 0 Malformed",
                "anomaly Resynchronized",
                "resp 1 200",
                "body 1 b",
                "end 1 Complete",
            ]
        );
        // The largest size that fits is only framing, not an allocation.
        let mut framing = BodyFraming::chunked();
        let step = framing.advance(b"ffffffffffffffff\r\n", 100);
        assert_eq!((step.used, step.event), (18, FramingEvent::Continue));
        assert_eq!(framing, BodyFraming::Chunked(ChunkState::Data(u64::MAX)));
    }

    /// What a chunked body gave when fed in `pieces`: its data, the step that ended it
    /// (none while it goes on), the bytes used up to there, the framing's state after, and the
    /// number of steps.
    fn frame_pieces(
        body: &[u8],
        pieces: &mut dyn FnMut(usize) -> usize,
        max_line: usize,
    ) -> (Vec<u8>, Option<FramingEvent>, usize, BodyFraming, usize) {
        let mut framing = BodyFraming::chunked();
        let (mut data, mut used, mut steps) = (Vec::new(), 0, 0);
        let mut at = 0;
        while at < body.len() {
            let end = (at + pieces(body.len() - at)).min(body.len());
            let mut rest = &body[at..end];
            at = end;
            while !rest.is_empty() {
                let step = framing.advance(rest, max_line);
                steps += 1;
                if let Some(range) = step.data {
                    data.extend_from_slice(&rest[range]);
                }
                used += step.used;
                rest = &rest[step.used..];
                if step.event != FramingEvent::Continue {
                    return (data, Some(step.event), used, framing, steps);
                }
                assert!(step.used > 0, "a step on {} bytes took none", rest.len());
            }
        }
        (data, None, used, framing, steps)
    }

    #[test]
    fn chunks_read_whole_answer_as_state_by_state() {
        // Fed a byte at a time, every part of a chunk (size line, data, CRLF) is a step of its
        // own; fed whole, the usual chunk is one step. Both must give the same data, end, and
        // state, on usual chunks and every odd shape beside them.
        let mut rng = XorShift(0x5EED_C4A7);
        let mut fast_steps = 0;
        for case in 0..3_000 {
            let mut body = Vec::new();
            let mut chunks = 0;
            for _ in 0..1 + rng.next() % 6 {
                let size = match rng.next() % 8 {
                    0 => 1 + rng.next() % 3,
                    1 => 1 + rng.next() % 5_000,
                    _ => 1 + rng.next() % 300,
                };
                let mut line = match rng.next() % 12 {
                    0 => format!("{size:X}"),
                    1 => format!("000{size:x}"),
                    2 => format!("{size:016x}"),
                    _ => format!("{size:x}"),
                };
                match rng.next() % 16 {
                    0 => line.push_str(";ext=1"),
                    1 => line.push(' '),
                    2 => line.push(';'),
                    _ => {}
                }
                line.push_str(if rng.next().is_multiple_of(16) {
                    "\n"
                } else {
                    "\r\n"
                });
                body.extend_from_slice(line.as_bytes());
                // Data holding line ends and digits too, the bytes the framing looks for.
                body.extend((0..size).map(|_| b"ab\r\n;0f"[(rng.next() % 7) as usize]));
                body.extend_from_slice(match rng.next() % 16 {
                    0 => b"\n".as_slice(),
                    1 => b"x\r\n",
                    2 => b"\r",
                    _ => b"\r\n",
                });
                chunks += 1;
            }
            if !rng.next().is_multiple_of(4) {
                body.extend_from_slice(b"0\r\n");
                if rng.next().is_multiple_of(3) {
                    body.extend_from_slice(b"X-Trailer: 1\r\n");
                }
                body.extend_from_slice(b"\r\n");
            }
            // A few bytes of damage somewhere.
            if rng.next().is_multiple_of(10) {
                let at = (rng.next() % body.len() as u64) as usize;
                body[at] = [b'g', b'\r', b'\n', b';', 0][(rng.next() % 5) as usize];
            }
            let max_line = if case % 7 == 0 { 3 } else { 64 };
            let bytewise = frame_pieces(&body, &mut |_| 1, max_line);
            let whole = frame_pieces(&body, &mut |n| n, max_line);
            let mut split = XorShift(case + 1);
            let random = frame_pieces(&body, &mut |_| 1 + (split.next() % 40) as usize, max_line);
            // The state matters while the body goes on; once it ended, it is dropped.
            let answer = |r: &(Vec<u8>, Option<FramingEvent>, usize, BodyFraming, usize)| {
                (r.0.clone(), r.1, r.2, r.1.is_none().then_some(r.3))
            };
            assert_eq!(answer(&whole), answer(&bytewise), "case {case}: {body:?}");
            assert_eq!(answer(&random), answer(&bytewise), "case {case}: {body:?}");
            if whole.4 <= chunks + 2 {
                fast_steps += 1;
            }
        }
        // The usual bodies were read a step a chunk (plus the last chunk's own steps at most).
        assert!(
            fast_steps > 1_000,
            "only {fast_steps} bodies read a step a chunk"
        );
    }

    #[test]
    fn bad_content_length_is_malformed() {
        for field in [
            "Content-Length: -5",
            "Content-Length: 5\r\nContent-Length: 6",
            "Content-Length: 5, 6",
            "Content-Length: 0x10",
            "Content-Length: 99999999999999999999",
        ] {
            let head = format!("HTTP/1.1 200 OK\r\n{field}\r\n\r\nhello");
            let out = transcript(&[
                data(C, concat(&[&get("/a"), &get("/b")])),
                data(S, head),
                data(S, ok_length("b")),
                Step::End(C, StreamEnd::Fin),
                Step::End(S, StreamEnd::Fin),
            ]);
            assert_eq!(
                summary(&out.events),
                [
                    "req 0 GET /a",
                    "req 1 GET /b",
                    "resp 0 200",
                    "anomaly BadContentLength",
                    "end 0 Malformed",
                    "anomaly Resynchronized",
                    "resp 1 200",
                    "body 1 b",
                    "end 1 Complete",
                ],
                "{field}"
            );
        }
        let out = transcript(&[
            data(C, get("/a")),
            data(
                S,
                "HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\ncontent-length: 2\r\n\r\nok",
            ),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            ["req 0 GET /a", "resp 0 200", "body 0 ok", "end 0 Complete"]
        );
    }

    #[test]
    fn switching_protocols_abandons_the_connection() {
        let out = transcript(&[
            data(
                C,
                "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            ),
            data(
                S,
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x05hello",
            ),
            data(C, b"\x81\x85more frames"),
        ]);
        assert!(out.abandoned);
        assert_eq!(
            summary(&out.events),
            ["req 0 GET /ws", "resp 0 101", "end 0 Complete"]
        );
    }

    #[test]
    fn lf_only_heads_and_blank_lines_between_messages() {
        let out = transcript(&[
            data(C, "GET /a HTTP/1.1\nhost: h\n\n\r\n"),
            data(S, "HTTP/1.1 200 OK\ncontent-length: 1\n\nA"),
            data(C, "GET /b HTTP/1.1\r\n\n"),
            data(S, "HTTP/1.1 200 OK\r\ncontent-length: 1\n\r\nB"),
            Step::End(C, StreamEnd::Fin),
            Step::End(S, StreamEnd::Fin),
        ]);
        assert_eq!(
            summary(&out.events),
            [
                "req 0 GET /a",
                "resp 0 200",
                "body 0 A",
                "end 0 Complete",
                "req 1 GET /b",
                "resp 1 200",
                "body 1 B",
                "end 1 Complete",
            ]
        );
    }

    #[test]
    fn header_values_keep_their_bytes() {
        let out = transcript(&[
            data(
                C,
                concat(&[
                    "GET / HTTP/1.1\r\nLAST-EVENT-ID: stream_17\u{e9}_x\r\n".as_bytes(),
                    b"Mcp-Session-Id: \xff\xfe\r\n\r\n",
                ]),
            ),
            Step::End(C, StreamEnd::Fin),
        ]);
        let req = requests(&out.events)[0];
        assert_eq!(req.last_event_id.as_deref(), Some("stream_17\u{e9}_x"));
        assert_eq!(req.session_id.as_deref(), Some("\u{fffd}\u{fffd}"));
    }

    // ----- units -----

    #[test]
    fn start_line_scan_decides_early_and_only_when_sure() {
        let decide = |bytes: &[u8]| StartLineScan::new().feed(bytes);
        assert_eq!(
            decide(b"GET / HTTP/1."),
            ScanOutcome::Start(MessageKind::Request)
        );
        assert_eq!(
            decide(b"HTTP/1."),
            ScanOutcome::Start(MessageKind::Response)
        );
        assert_eq!(decide(b"HTTP/1"), ScanOutcome::NeedMore);
        assert_eq!(decide(b"HTTP"), ScanOutcome::NeedMore);
        assert_eq!(
            decide(b"HTTP /x HTTP/1."),
            ScanOutcome::Start(MessageKind::Request)
        );
        assert_eq!(decide(b"GET /very/long/target"), ScanOutcome::NeedMore);
        assert_eq!(decide(b"GET /a\r\n"), ScanOutcome::NotStart);
        assert_eq!(decide(b"GET  /"), ScanOutcome::NotStart);
        assert_eq!(decide(b" GET"), ScanOutcome::NotStart);
        assert_eq!(decide(b"GET / HTTP/2"), ScanOutcome::NotStart);
        assert_eq!(decide(b"HTTP/2"), ScanOutcome::NotStart);
        assert_eq!(decide(b"data: x"), ScanOutcome::NotStart);
        assert_eq!(decide(b"\x16\x03"), ScanOutcome::NotStart);
        assert_eq!(decide(&[b'A'; 40]), ScanOutcome::NotStart);
        // Fed in pieces, the same answer.
        let mut scan = StartLineScan::new();
        for b in b"POST /mcp HTTP/1".chunks(1) {
            assert_eq!(scan.feed(b), ScanOutcome::NeedMore);
        }
        assert_eq!(scan.feed(b"."), ScanOutcome::Start(MessageKind::Request));
    }

    /// From a fresh scan, `feed` (which may take the whole start line at once) gives the
    /// outcome and leaves the state that the byte-by-byte scan does, for start lines and
    /// near misses cut at every byte.
    #[test]
    fn start_line_at_once_answers_as_byte_by_byte() {
        let mut lines: Vec<Vec<u8>> = [
            &b"GET /mcp HTTP/1.1\r\n"[..],
            b"POST /mcp?x=1 HTTP/1.0\r\n",
            b"HTTP/1.1 200 OK\r\n",
            b"HTTP/1.0 404 x\n",
            b"HEAD / HTTP/1.1\r\n",
            b"HTTP /x HTTP/1.1\r\n",
            b"HTTP/2 200\r\n",
            b"GET / HTTP/2.0\r\n",
            b"GET  / HTTP/1.1\r\n",
            b"GET /a\r\n HTTP/1.1",
            b"GET /a\nb HTTP/1.1",
            b" GET / HTTP/1.1",
            b"G@T / HTTP/1.1",
            b"GET / HTTP/1,1",
            b"GET / HTTP/1.1 HTTP/1.1",
            b"GET /a b HTTP/1.1",
            b"get / http/1.1",
            b"data: x\n",
            b"\x16\x03\x01",
            b"",
        ]
        .iter()
        .map(|l| l.to_vec())
        .collect();
        for n in 30..36 {
            let mut line = vec![b'M'; n];
            line.extend_from_slice(b" /x HTTP/1.1\r\n");
            lines.push(line);
        }
        let mut rng = XorShift(7);
        let alphabet = b"GETHP /1.\r\nx";
        for _ in 0..20_000 {
            let len = (rng.next() % 24) as usize;
            let line = (0..len)
                .map(|_| alphabet[(rng.next() % alphabet.len() as u64) as usize])
                .collect();
            lines.push(line);
        }
        for line in &lines {
            for cut in 0..=line.len() {
                let bytes = &line[..cut];
                let mut fast = StartLineScan::new();
                let mut each = StartLineScan::new();
                assert_eq!(
                    (fast.feed(bytes), fast),
                    (each.feed_each(bytes), each),
                    "{:?}",
                    String::from_utf8_lossy(bytes)
                );
            }
        }
    }

    #[test]
    fn head_end_is_found_across_calls() {
        assert_eq!(find_head_end(b"", b"a\r\n\r\nbody"), Some(5));
        assert_eq!(find_head_end(b"", b"a\n\nbody"), Some(3));
        assert_eq!(find_head_end(b"", b"a\r\nb\r\n"), None);
        assert_eq!(find_head_end(b"\r\n", b"\r\nx"), Some(2));
        assert_eq!(find_head_end(b"\n\r", b"\nx"), Some(1));
        assert_eq!(find_head_end(b"a\n", b"\nx"), Some(1));
        assert_eq!(find_head_end(b"\r\n", b"x\r\n"), None);
        assert_eq!(find_head_end(b"x\r", b"\n\r\n"), Some(3));
    }

    #[test]
    fn content_length_values() {
        let parse = |v: &[u8]| ContentLength::Absent.add_field(v);
        assert_eq!(parse(b"42"), ContentLength::Value(42));
        assert_eq!(parse(b" 7 , 7"), ContentLength::Value(7));
        assert_eq!(
            parse(b"18446744073709551615"),
            ContentLength::Value(u64::MAX)
        );
        assert_eq!(parse(b"18446744073709551616"), ContentLength::Invalid);
        assert_eq!(parse(b"-1"), ContentLength::Invalid);
        assert_eq!(parse(b""), ContentLength::Invalid);
        assert_eq!(parse(b"+3"), ContentLength::Invalid);
        assert_eq!(
            ContentLength::Value(3).add_field(b"4"),
            ContentLength::Invalid
        );
    }

    #[test]
    fn content_codings() {
        assert_eq!(ContentCoding::parse("GZip"), ContentCoding::Gzip);
        assert_eq!(
            ContentCoding::parse("identity, x-gzip"),
            ContentCoding::Gzip
        );
        assert_eq!(ContentCoding::parse("deflate"), ContentCoding::Deflate);
        assert_eq!(ContentCoding::parse("identity"), ContentCoding::Identity);
        assert_eq!(ContentCoding::parse("br"), ContentCoding::Unsupported);
        assert_eq!(
            ContentCoding::parse("gzip, gzip"),
            ContentCoding::Unsupported
        );
        assert!(crate::app::coding::is_zlib_header(0x78, 0x9c));
        assert!(!crate::app::coding::is_zlib_header(0x78, 0x9d));
    }

    #[test]
    fn resync_over_long_lines_is_linear() {
        // Many `HTTP/1.` hits on one unterminated line, then a real response.
        let noise = b"xHTTP/1.".repeat(300_000);
        let mut conn = HttpConnection::new(&Limits::default(), false);
        let mut rec = Recorder::default();
        for piece in noise.chunks(4096) {
            conn.data(S, piece, Mark::default(), &mut rec);
        }
        conn.data(
            S,
            &concat(&[b"\n", &ok_length("z")]),
            Mark::default(),
            &mut rec,
        );
        assert_eq!(
            summary(&rec.events)[..2],
            ["anomaly Resynchronized", "anomaly UnpairedResponse"]
        );
        assert_eq!(summary(&rec.events)[3..], ["body 0 z", "end 0 Complete"]);
    }

    #[test]
    fn an_answer_repeating_its_requests_session_id_carries_no_copy_when_the_sink_knows_it() {
        let exchange = |knows: bool, answer_sid: &str| {
            let mut conn = HttpConnection::new(&Limits::default(), true);
            let mut rec = Recorder {
                knows_requests: knows,
                ..Recorder::default()
            };
            let request = b"GET /mcp HTTP/1.1\r\nMcp-Session-Id: abc\r\n\r\n";
            conn.data(C, request, Mark::default(), &mut rec);
            let answer = format!(
                "HTTP/1.1 200 OK\r\nmcp-session-id: {answer_sid}\r\nContent-Length: 0\r\n\r\n"
            );
            conn.data(S, answer.as_bytes(), Mark::default(), &mut rec);
            let r = responses(&rec.events);
            assert_eq!(r.len(), 1);
            r[0].session_id.clone()
        };
        // The sink knows the request sent it: nothing to copy.
        assert_eq!(exchange(true, "abc"), None);
        // Another id, or a sink that does not know: the answer's own copy.
        assert_eq!(exchange(true, "abd").as_deref(), Some("abd"));
        assert_eq!(exchange(false, "abc").as_deref(), Some("abc"));
    }

    // ----- properties -----

    fn fragment() -> impl Strategy<Value = Vec<u8>> {
        let pieces: Vec<&'static [u8]> = vec![
            b"GET /mcp HTTP/1.1\r\n",
            b"HEAD / HTTP/1.1\r\n",
            b"POST / HTTP/1.0\r\n",
            b"HTTP/1.1 200 OK\r\n",
            b"HTTP/1.1 100 Continue\r\n",
            b"HTTP/1.1 204 No\r\n",
            b"Content-Length: 3\r\n",
            b"Content-Length: -1\r\n",
            b"Transfer-Encoding: chunked\r\n",
            b"Content-Encoding: gzip\r\n",
            b"Content-Encoding: deflate\r\n",
            b"last-event-id: 5\r\n",
            b"\r\n",
            b"\n",
            b"5\r\nhello\r\n",
            b"0\r\n\r\n",
            b"fffffffffffffffff\r\n",
            b"abc",
            b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03",
            b"\x78\x9c\x03\x00",
        ];
        prop_oneof![
            4 => proptest::sample::select(pieces).prop_map(<[u8]>::to_vec),
            1 => proptest::collection::vec(any::<u8>(), 0..24),
        ]
    }

    fn step_strategy() -> impl Strategy<Value = Step> {
        let dir = prop_oneof![Just(C), Just(S)];
        prop_oneof![
            8 => (dir.clone(), proptest::collection::vec(fragment(), 1..6))
                .prop_map(|(d, parts)| Step::Data(d, parts.concat())),
            1 => (dir, 0u64..40).prop_map(|(d, n)| Step::Gap(d, n)),
        ]
    }

    proptest! {
        #[test]
        fn any_transcript_gives_one_answer_and_keeps_the_contract(
            steps in proptest::collection::vec(step_strategy(), 0..14),
            from_start in any::<bool>(),
        ) {
            let limits = Limits { max_header_bytes: 96, ..Limits::default() };
            let mut steps = steps;
            steps.push(Step::End(C, StreamEnd::Fin));
            steps.push(Step::End(S, StreamEnd::Rst));
            transcript_with(&limits, from_start, &steps);
        }

        #[test]
        fn arbitrary_bytes_never_panic(
            a in proptest::collection::vec(any::<u8>(), 0..300),
            b in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let steps = [data(C, &a), data(S, &b), Step::End(C, StreamEnd::Fin), Step::End(S, StreamEnd::Fin)];
            transcript_with(&Limits::default(), false, &steps);
            transcript_with(&Limits::default(), true, &steps);
        }
    }
}
