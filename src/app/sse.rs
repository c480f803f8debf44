//! Events of a `text/event-stream` body, parsed incrementally as the WHATWG HTML standard
//! ("Server-sent events", "Parsing an event stream") says.
//!
//! Input: the content-decoded body of one response, as byte slices in stream order, each with
//! the [`Mark`] of the frame that carried it; explicit gaps where the capture lost bytes; one
//! end call.
//! Output: one [`SseEvent`] per completed block that held an `id`, `event`, `data` or `retry`
//! field, lent to a callback; counters in [`SseStats`].
//! Invariants:
//! - The answer does not depend on how the body is split into slices (a CRLF or a BOM split
//!   across slices is one CRLF or one BOM).
//! - Memory is bounded whatever the line lengths: the kept `id` and `event` values are cut at
//!   `Limits::max_sse_field_bytes`, data is kept only up to `keep_data` and otherwise counted,
//!   field names are matched in a five-byte buffer (a sink of [`SseParser::feed_sink`] that
//!   swaps data buffers hands back buffers of bounded capacity).
//! - After a gap nothing is reported until a blank line proves a block boundary, so a block
//!   the capture cut is never reported as if it were whole.
//! - Bytes are taken as received: the spec's UTF-8 decoding step is not applied, so lengths are
//!   byte counts and invalid UTF-8 passes through unreplaced.

use memchr::{memchr, memchr2};

use crate::record::{Limits, Mark};

/// One event block, as seen when its terminating blank line arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// Value of the last `id` field of this block, exactly as received (after the one optional
    /// leading space is stripped). None when the block had no `id` field, or only ids
    /// containing NUL (which the spec says to ignore). `Some(b"")` for `id:` with empty value.
    pub id: Option<&'a [u8]>,
    /// The id value was longer than the field limit and was cut.
    pub id_truncated: bool,
    /// Value of the last `event` field, empty when none.
    pub event_type: &'a [u8],
    /// Length of the data buffer as the spec builds it (data lines joined by LF, the final LF
    /// removed), counted without keeping it.
    pub data_len: u64,
    /// Number of `data` fields in the block.
    pub data_lines: u32,
    /// `retry` value when the block had a valid one (ASCII digits only; huge values saturate).
    pub retry: Option<u64>,
    /// The first bytes of the data buffer, up to the `keep_data` given to `new`.
    pub data: &'a [u8],
    /// The data buffer was longer than `data`.
    pub data_truncated: bool,
    /// True when the spec would dispatch the event (data buffer non-empty before its final LF
    /// is removed, i.e. the block had at least one `data` field).
    pub dispatched: bool,
    /// Where the blank line that ended the block arrived.
    pub mark: Mark,
    /// Where the first byte of the block arrived (comment lines belong to the block).
    pub first_mark: Mark,
}

/// An [`SseEvent`] copied out of the parser's buffers, to keep or to compare; each field
/// means what the [`SseEvent`] field of the same name means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedSseEvent {
    /// [`SseEvent::id`].
    pub id: Option<Vec<u8>>,
    /// [`SseEvent::id_truncated`].
    pub id_truncated: bool,
    /// [`SseEvent::event_type`].
    pub event_type: Vec<u8>,
    /// [`SseEvent::data_len`].
    pub data_len: u64,
    /// [`SseEvent::data_lines`].
    pub data_lines: u32,
    /// [`SseEvent::retry`].
    pub retry: Option<u64>,
    /// [`SseEvent::data`].
    pub data: Vec<u8>,
    /// [`SseEvent::data_truncated`].
    pub data_truncated: bool,
    /// [`SseEvent::dispatched`].
    pub dispatched: bool,
    /// [`SseEvent::mark`].
    pub mark: Mark,
    /// [`SseEvent::first_mark`].
    pub first_mark: Mark,
}

impl From<&SseEvent<'_>> for OwnedSseEvent {
    fn from(e: &SseEvent<'_>) -> Self {
        OwnedSseEvent {
            id: e.id.map(<[u8]>::to_vec),
            id_truncated: e.id_truncated,
            event_type: e.event_type.to_vec(),
            data_len: e.data_len,
            data_lines: e.data_lines,
            retry: e.retry,
            data: e.data.to_vec(),
            data_truncated: e.data_truncated,
            dispatched: e.dispatched,
            mark: e.mark,
            first_mark: e.first_mark,
        }
    }
}

/// Where a parser's events go: [`SseParser::feed_sink`].
pub trait EventSink {
    /// One completed event, as [`SseParser::feed`] lends it to its callback.
    fn event(&mut self, ev: &SseEvent<'_>);

    /// Called right after [`EventSink::event`] with the buffer that holds the event's data.
    /// A sink that keeps the data may swap the buffer for one of its own (whose content does
    /// not matter: the parser empties it) rather than copy it; the parser goes on with the
    /// buffer it is left with, so a sink that swaps must hand back buffers of bounded capacity.
    fn take_data(&mut self, _data: &mut Vec<u8>) {}
}

/// A callback as an [`EventSink`] that keeps nothing.
struct Callback<F>(F);

impl<F: FnMut(&SseEvent<'_>)> EventSink for Callback<F> {
    fn event(&mut self, ev: &SseEvent<'_>) {
        (self.0)(ev);
    }
}

/// Counters over the whole body.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SseStats {
    /// Blocks reported to the callback.
    pub events: u64,
    /// Comment lines (starting with `:`) parsed.
    pub comments: u64,
    /// Bytes fed, BOM included.
    pub bytes: u64,
    /// Gaps seen.
    pub gaps: u64,
}

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// Longest known field name (`event`, `retry`); longer names are unknown fields.
const NAME_CAP: usize = 5;

/// The fields the spec gives a meaning to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Data,
    Id,
    Event,
    Retry,
}

impl Field {
    fn from_name(name: &[u8]) -> Option<Field> {
        match name {
            b"data" => Some(Field::Data),
            b"id" => Some(Field::Id),
            b"event" => Some(Field::Event),
            b"retry" => Some(Field::Retry),
            _ => None,
        }
    }
}

/// Where the parser stands inside the current line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LineState {
    /// Nothing of the current line consumed yet.
    Start,
    /// Inside a field name; its first bytes are in `name`.
    Name,
    /// Right after the colon: one space here is syntax, not value.
    ValueStart(Field),
    /// Inside the value of a known field.
    Value(Field),
    /// Inside a comment or an unknown field: the rest of the line means nothing.
    Ignored,
    /// After a gap: inside the line the gap cut, whose beginning is lost.
    ResyncCutLine,
    /// After a gap: the cut line ended; lines are skipped until a blank one.
    ResyncAwaitBlank,
}

/// Progress through an optional UTF-8 BOM at the very start of the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BomState {
    /// This many leading bytes matched the BOM so far (0 before any byte).
    Matching(u8),
    /// Past the start of the stream.
    Done,
}

/// The fields of the block being read, as the spec's buffers hold them.
#[derive(Debug, Default)]
struct Block {
    /// A line (field, comment or unknown) of this block has begun.
    started: bool,
    /// An `id`, `event`, `data` or `retry` field has begun.
    has_field: bool,
    first_mark: Mark,
    has_id: bool,
    id: Vec<u8>,
    id_truncated: bool,
    event_type: Vec<u8>,
    data: Vec<u8>,
    data_len: u64,
    data_lines: u32,
    retry: Option<u64>,
}

impl Block {
    /// Empties the block, keeping buffer capacity for the next one.
    fn reset(&mut self) {
        self.started = false;
        self.has_field = false;
        self.has_id = false;
        self.id.clear();
        self.id_truncated = false;
        self.event_type.clear();
        self.data.clear();
        self.data_len = 0;
        self.data_lines = 0;
        self.retry = None;
    }
}

/// Incremental `text/event-stream` parser for one response body.
#[derive(Debug)]
pub struct SseParser {
    field_limit: usize,
    keep_data: usize,
    bom: BomState,
    /// Mark of the first byte of the stream, for BOM-like bytes that turn out to be content.
    bom_mark: Mark,
    line: LineState,
    /// The last byte taken was a CR ending a line: an LF right after it belongs to it.
    after_cr: bool,
    name: [u8; NAME_CAP],
    name_len: usize,
    /// The `id` value being read; it replaces the block's id only if it holds no NUL.
    line_id: Vec<u8>,
    line_id_has_nul: bool,
    /// The value being read was longer than the field limit.
    line_value_cut: bool,
    line_retry: u64,
    line_retry_digits: bool,
    line_retry_invalid: bool,
    block: Block,
    stats: SseStats,
    fields_cut: u64,
}

impl SseParser {
    /// A parser at the start of a stream: fields longer than `limits.max_sse_field_bytes` are
    /// cut, and the first `keep_data` bytes of each data buffer are kept.
    pub fn new(limits: &Limits, keep_data: usize) -> Self {
        SseParser::with_field_limit(limits.max_sse_field_bytes, keep_data)
    }

    /// [`SseParser::new`] with the field limit alone.
    pub fn with_field_limit(field_limit: usize, keep_data: usize) -> Self {
        SseParser {
            field_limit,
            keep_data,
            bom: BomState::Matching(0),
            bom_mark: Mark::default(),
            line: LineState::Start,
            after_cr: false,
            name: [0; NAME_CAP],
            name_len: 0,
            line_id: Vec::new(),
            line_id_has_nul: false,
            line_value_cut: false,
            line_retry: 0,
            line_retry_digits: false,
            line_retry_invalid: false,
            block: Block::default(),
            stats: SseStats::default(),
            fields_cut: 0,
        }
    }

    /// Feeds the next bytes of the body; calls `on_event` for every block completed inside
    /// them that had at least one field among id/event/data/retry (comment-only or empty
    /// blocks are not reported; unknown fields are ignored).
    pub fn feed<F: FnMut(&SseEvent<'_>)>(&mut self, bytes: &[u8], mark: Mark, on_event: F) {
        self.feed_sink(bytes, mark, &mut Callback(on_event));
    }

    /// As [`SseParser::feed`], to a sink that may take each event's data buffer.
    pub fn feed_sink<S: EventSink>(&mut self, bytes: &[u8], mark: Mark, sink: &mut S) {
        self.stats.bytes = self.stats.bytes.saturating_add(bytes.len() as u64);
        let body = self.strip_bom(bytes, mark, sink);
        self.parse(body, mark, sink);
    }

    /// Bytes are missing here. The partial block is discarded; parsing resumes at the first
    /// block that starts after a blank line seen after the gap. The line end that follows the
    /// gap first only closes the cut line, since the gap may have split a CRLF.
    pub fn gap(&mut self, _mark: Mark) {
        self.stats.gaps = self.stats.gaps.saturating_add(1);
        self.bom = BomState::Done;
        self.after_cr = false;
        self.block.reset();
        self.line = LineState::ResyncCutLine;
    }

    /// End of the body. An unterminated final block is discarded, as the spec says; returns
    /// true when such a partial block (with at least one field, possibly still on its
    /// unterminated last line) was pending.
    pub fn finish(&mut self, _mark: Mark) -> bool {
        let field_on_open_line = match self.line {
            LineState::Name => self.name_field().is_some(),
            LineState::ValueStart(_) | LineState::Value(_) => true,
            _ => false,
        };
        let pending = self.block.has_field || field_on_open_line;
        self.bom = BomState::Done;
        self.after_cr = false;
        self.block.reset();
        self.line = LineState::Start;
        pending
    }

    /// Counters: blocks reported, comment lines, bytes fed, gaps seen.
    pub fn stats(&self) -> SseStats {
        self.stats
    }

    /// How many `id` or `event` values were cut at `Limits::max_sse_field_bytes`.
    pub fn fields_cut(&self) -> u64 {
        self.fields_cut
    }

    /// Buffer capacity held, in bytes: bounded by three field limits plus `keep_data` (with
    /// the allocator's rounding), whatever the input.
    pub fn retained_bytes(&self) -> usize {
        self.line_id.capacity()
            + self.block.id.capacity()
            + self.block.event_type.capacity()
            + self.block.data.capacity()
    }

    /// Skips a UTF-8 BOM at the very start of the stream, even when split across feeds;
    /// returns the bytes left to parse.
    fn strip_bom<'b, S: EventSink>(
        &mut self,
        bytes: &'b [u8],
        mark: Mark,
        on_event: &mut S,
    ) -> &'b [u8] {
        let BomState::Matching(already) = self.bom else {
            return bytes;
        };
        let mut matched = usize::from(already);
        let mut rest = bytes;
        if matched == 0 && !rest.is_empty() {
            self.bom_mark = mark;
        }
        while let Some(&expected) = BOM.get(matched) {
            let Some((&byte, tail)) = rest.split_first() else {
                // The slice ended inside what may still be a BOM; decide on the next feed.
                self.bom = BomState::Matching(matched as u8);
                return rest;
            };
            if byte != expected {
                // The bytes matched so far were content after all: parse them first.
                self.bom = BomState::Done;
                let prefix = BOM.get(..matched).unwrap_or(&[]);
                self.parse(prefix, self.bom_mark, on_event);
                return rest;
            }
            matched += 1;
            rest = tail;
        }
        self.bom = BomState::Done;
        rest
    }

    /// The line state machine over bytes past the BOM.
    fn parse<S: EventSink>(&mut self, bytes: &[u8], mark: Mark, on_event: &mut S) {
        let mut rest = bytes;
        while let Some((&first, tail)) = rest.split_first() {
            if self.after_cr {
                self.after_cr = false;
                if first == b'\n' {
                    rest = tail;
                    continue;
                }
            }
            rest = match self.line {
                LineState::Start => match first {
                    b'\r' | b'\n' => {
                        self.end_block(mark, on_event);
                        self.line_end(first, tail)
                    }
                    _ => {
                        if !self.block.started {
                            self.block.started = true;
                            self.block.first_mark = mark;
                        }
                        if first == b':' {
                            self.stats.comments = self.stats.comments.saturating_add(1);
                            self.line = LineState::Ignored;
                            tail
                        } else if let Some((field, value)) = known_head(rest) {
                            self.begin_value(field);
                            // The optional space, when it is in this slice already.
                            match value.split_first() {
                                Some((&b' ', after)) => self.value_run(field, after),
                                Some(_) => self.value_run(field, value),
                                None => {
                                    self.line = LineState::ValueStart(field);
                                    value
                                }
                            }
                        } else if let Some(after) = self.whole_line(rest) {
                            after
                        } else {
                            self.name_len = 0;
                            self.line = LineState::Name;
                            rest
                        }
                    }
                },
                LineState::Name => {
                    // Known names are short: look one byte past the longest for the colon or
                    // line end, bytewise, rather than scanning on through a long unknown name.
                    let room = NAME_CAP.saturating_sub(self.name_len);
                    let window = rest.get(..room + 1).unwrap_or(rest);
                    match window
                        .iter()
                        .position(|&b| matches!(b, b':' | b'\r' | b'\n'))
                    {
                        Some(at) => {
                            let (name, after) = rest.split_at(at);
                            self.push_name(name);
                            let field = self.name_field();
                            let Some((&stop, value)) = after.split_first() else {
                                return;
                            };
                            if stop == b':' {
                                match field {
                                    Some(field) => {
                                        self.begin_value(field);
                                        // The optional space, when it is in this slice already.
                                        match value.split_first() {
                                            Some((&first, after)) => {
                                                self.line = LineState::Value(field);
                                                if first == b' ' { after } else { value }
                                            }
                                            None => {
                                                self.line = LineState::ValueStart(field);
                                                value
                                            }
                                        }
                                    }
                                    None => {
                                        self.line = LineState::Ignored;
                                        value
                                    }
                                }
                            } else {
                                // A line with no colon names a field with an empty value.
                                if let Some(field) = field {
                                    self.begin_value(field);
                                    self.end_value(field);
                                }
                                self.line = LineState::Start;
                                self.line_end(stop, value)
                            }
                        }
                        None if window.len() > room => {
                            // Longer than any known name: an unknown field, whatever follows.
                            self.line = LineState::Ignored;
                            rest
                        }
                        None => {
                            self.push_name(window);
                            &[]
                        }
                    }
                }
                LineState::ValueStart(field) => {
                    self.line = LineState::Value(field);
                    if first == b' ' { tail } else { rest }
                }
                LineState::Value(field) => self.value_run(field, rest),
                LineState::Ignored => match split_line_end(rest) {
                    None => &[],
                    Some((_, stop, after)) => {
                        self.line = LineState::Start;
                        self.line_end(stop, after)
                    }
                },
                LineState::ResyncCutLine => match split_line_end(rest) {
                    None => &[],
                    Some((_, stop, after)) => {
                        self.line = LineState::ResyncAwaitBlank;
                        self.line_end(stop, after)
                    }
                },
                LineState::ResyncAwaitBlank => match first {
                    b'\r' | b'\n' => {
                        // The block the gap cut is over; the block state was emptied at the gap.
                        self.line = LineState::Start;
                        self.line_end(first, tail)
                    }
                    _ => {
                        self.line = LineState::ResyncCutLine;
                        rest
                    }
                },
            };
        }
    }

    /// Takes the value bytes of `field` that `rest` holds up to its line end, and the line end;
    /// returns the bytes after it. Without a line end in `rest` the line goes on in the next
    /// feed, in the `Value` state.
    #[inline]
    fn value_run<'b>(&mut self, field: Field, rest: &'b [u8]) -> &'b [u8] {
        let split = match field {
            Field::Data => split_long_line_end(rest),
            _ => split_line_end(rest),
        };
        match split {
            None => {
                self.value_bytes(field, rest);
                self.line = LineState::Value(field);
                &[]
            }
            Some((value, stop, after)) => {
                self.value_bytes(field, value);
                self.end_value(field);
                self.line = LineState::Start;
                self.line_end(stop, after)
            }
        }
    }

    /// A field line that is whole in `rest` and whose name (at most [`NAME_CAP`] bytes) ends
    /// at a colon, read at once: the same calls the Name and Value states make for it, in one
    /// step instead of a step per state. Returns the bytes after its line end, or `None`
    /// (nothing done) for any other line, which the states then read.
    fn whole_line<'b>(&mut self, rest: &'b [u8]) -> Option<&'b [u8]> {
        let window = rest.get(..NAME_CAP + 1).unwrap_or(rest);
        let colon = window
            .iter()
            .position(|&b| matches!(b, b':' | b'\r' | b'\n'))?;
        if window.get(colon) != Some(&b':') {
            return None;
        }
        // No line end comes before the colon, so the line's content holds it.
        let (content, stop, after) = split_line_end(rest)?;
        let (name, value) = (content.get(..colon)?, content.get(colon + 1..)?);
        if let Some(field) = Field::from_name(name) {
            self.begin_value(field);
            self.value_bytes(field, value.strip_prefix(b" ").unwrap_or(value));
            self.end_value(field);
        }
        Some(self.line_end(stop, after))
    }

    /// Takes the line end `stop` (CR or LF) whose following bytes are `after`: the LF of a
    /// CRLF is consumed here when present, or remembered for the next feed when the CR was
    /// the last byte.
    #[inline]
    fn line_end<'b>(&mut self, stop: u8, after: &'b [u8]) -> &'b [u8] {
        if stop != b'\r' {
            return after;
        }
        match after.split_first() {
            Some((b'\n', rest)) => rest,
            Some(_) => after,
            None => {
                self.after_cr = true;
                after
            }
        }
    }

    /// Appends to the field name; callers never pass more than the room left.
    fn push_name(&mut self, part: &[u8]) {
        let end = self.name_len.saturating_add(part.len());
        if let Some(slot) = self.name.get_mut(self.name_len..end) {
            slot.copy_from_slice(part);
            self.name_len = end;
        }
    }

    fn name_field(&self) -> Option<Field> {
        Field::from_name(self.name.get(..self.name_len).unwrap_or(&[]))
    }

    #[inline]
    fn begin_value(&mut self, field: Field) {
        self.block.has_field = true;
        self.line_value_cut = false;
        match field {
            Field::Data => {
                // Lines are joined by LF: the separator is owed only from the second line on,
                // which also drops the spec's final LF without ever storing it.
                if self.block.data_lines > 0 {
                    self.block.data_len = self.block.data_len.saturating_add(1);
                    append_bounded(&mut self.block.data, b"\n", self.keep_data);
                }
                self.block.data_lines = self.block.data_lines.saturating_add(1);
            }
            Field::Id => {
                self.line_id.clear();
                self.line_id_has_nul = false;
            }
            Field::Event => self.block.event_type.clear(),
            Field::Retry => {
                self.line_retry = 0;
                self.line_retry_digits = false;
                self.line_retry_invalid = false;
            }
        }
    }

    fn value_bytes(&mut self, field: Field, part: &[u8]) {
        if part.is_empty() {
            return;
        }
        match field {
            Field::Data => {
                self.block.data_len = self.block.data_len.saturating_add(part.len() as u64);
                append_bounded(&mut self.block.data, part, self.keep_data);
            }
            Field::Id => {
                // Ids are short: a loop over a few bytes costs less than the call to memchr.
                let has_nul = if part.len() <= 16 {
                    part.contains(&0)
                } else {
                    memchr(0, part).is_some()
                };
                if has_nul {
                    self.line_id_has_nul = true;
                }
                if append_bounded(&mut self.line_id, part, self.field_limit) {
                    self.line_value_cut = true;
                }
            }
            Field::Event => {
                if append_bounded(&mut self.block.event_type, part, self.field_limit) {
                    self.line_value_cut = true;
                }
            }
            Field::Retry => {
                if self.line_retry_invalid {
                    return;
                }
                for &byte in part {
                    if !byte.is_ascii_digit() {
                        self.line_retry_invalid = true;
                        return;
                    }
                    self.line_retry = self
                        .line_retry
                        .saturating_mul(10)
                        .saturating_add(u64::from(byte - b'0'));
                }
                self.line_retry_digits = true;
            }
        }
    }

    #[inline]
    fn end_value(&mut self, field: Field) {
        if self.line_value_cut {
            self.fields_cut = self.fields_cut.saturating_add(1);
        }
        match field {
            Field::Data | Field::Event => {}
            Field::Id => {
                // An id holding NUL is ignored: the block keeps its previous id, if any.
                if !self.line_id_has_nul {
                    std::mem::swap(&mut self.line_id, &mut self.block.id);
                    self.block.has_id = true;
                    self.block.id_truncated = self.line_value_cut;
                }
            }
            Field::Retry => {
                if self.line_retry_digits && !self.line_retry_invalid {
                    self.block.retry = Some(self.line_retry);
                }
            }
        }
    }

    /// A blank line: the spec's "dispatch the event" step, reported whether or not the data
    /// buffer is empty as long as the block held a field.
    fn end_block<S: EventSink>(&mut self, mark: Mark, on_event: &mut S) {
        if self.block.has_field {
            let block = &self.block;
            let event = SseEvent {
                id: block.has_id.then_some(block.id.as_slice()),
                id_truncated: block.has_id && block.id_truncated,
                event_type: &block.event_type,
                data_len: block.data_len,
                data_lines: block.data_lines,
                retry: block.retry,
                data: &block.data,
                data_truncated: block.data_len > block.data.len() as u64,
                dispatched: block.data_lines > 0,
                mark,
                first_mark: block.first_mark,
            };
            on_event.event(&event);
            on_event.take_data(&mut self.block.data);
            self.stats.events = self.stats.events.saturating_add(1);
        }
        self.block.reset();
    }
}

/// Eight bytes packed little-endian, the first in the lowest bits; zeros past the end of
/// `bytes`.
const fn word(bytes: &[u8]) -> u64 {
    let mut w = 0u64;
    let mut i = 0;
    while i < bytes.len() && i < 8 {
        w |= (bytes[i] as u64) << (8 * i);
        i += 1;
    }
    w
}

/// The word whose every byte is `b`.
const fn splat(b: u8) -> u64 {
    u64::from_ne_bytes([b; 8])
}

/// The high bit of every zero byte of `w` set, and possibly of bytes above the lowest zero
/// byte (a borrow runs on from it): the lowest set bit always marks a zero byte.
fn zero_bytes(w: u64) -> u64 {
    w.wrapping_sub(splat(1)) & !w & splat(0x80)
}

/// The lowest `n` bytes of a word.
const fn low_bytes(n: u32) -> u64 {
    (1u64 << (8 * n)) - 1
}

/// A line that opens with `data:`, `id:`, `event:` or `retry:`, told by one compare of its
/// first eight bytes rather than by a scan for the colon and a compare of the name: the field
/// and the bytes after the colon.
#[inline]
fn known_head(line: &[u8]) -> Option<(Field, &[u8])> {
    const DATA: u64 = word(b"data:");
    const ID: u64 = word(b"id:");
    const EVENT: u64 = word(b"event:");
    const RETRY: u64 = word(b"retry:");
    let w = match line.first_chunk::<8>() {
        Some(head) => u64::from_le_bytes(*head),
        // A short line, or one the slice cuts: padded with zeros, which no name holds.
        None => word(line),
    };
    let (field, colon_end) = if w & low_bytes(5) == DATA {
        (Field::Data, 5)
    } else if w & low_bytes(3) == ID {
        (Field::Id, 3)
    } else if w & low_bytes(6) == EVENT {
        (Field::Event, 6)
    } else if w & low_bytes(6) == RETRY {
        (Field::Retry, 6)
    } else {
        return None;
    };
    Some((field, line.get(colon_end..)?))
}

/// Index of the first CR or LF in `bytes`.
#[inline]
fn find_line_end(bytes: &[u8]) -> Option<usize> {
    // Ids, event types and the lines of small values end within a few words: look there a
    // word at a time first, since a call to memchr2 costs more than such a line.
    let mut at = 0;
    while at < 16 {
        let Some(chunk) = bytes.get(at..).and_then(<[u8]>::first_chunk::<8>) else {
            break;
        };
        let w = u64::from_le_bytes(*chunk);
        let hits = zero_bytes(w ^ splat(b'\n')) | zero_bytes(w ^ splat(b'\r'));
        if hits != 0 {
            return Some(at + (hits.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    memchr2(b'\r', b'\n', bytes.get(at..)?).map(|i| at + i)
}

/// Splits at the first CR or LF: (line content, the terminator byte, bytes after it).
#[inline]
fn split_line_end(bytes: &[u8]) -> Option<(&[u8], u8, &[u8])> {
    let at = find_line_end(bytes)?;
    let (content, after) = bytes.split_at(at);
    let (&stop, after) = after.split_first()?;
    Some((content, stop, after))
}

/// As [`split_line_end`], searched by memchr2 from the start: for data lines, which mostly run
/// past the few words [`find_line_end`] looks at first.
#[inline]
fn split_long_line_end(bytes: &[u8]) -> Option<(&[u8], u8, &[u8])> {
    let at = memchr2(b'\r', b'\n', bytes)?;
    let (content, after) = bytes.split_at(at);
    let (&stop, after) = after.split_first()?;
    Some((content, stop, after))
}

/// Appends as much of `part` as fits under `limit`; true when some of it did not fit.
#[inline]
fn append_bounded(buf: &mut Vec<u8>, part: &[u8], limit: usize) -> bool {
    let room = limit.saturating_sub(buf.len());
    let (kept, cut) = part.split_at(part.len().min(room));
    if buf.capacity() - buf.len() < kept.len() {
        grow(buf, kept.len());
    }
    buf.extend_from_slice(kept);
    !cut.is_empty()
}

/// Makes room for `more` bytes: a quarter more than the room held, not twice. A sink may keep
/// the buffer (see [`EventSink::take_data`]), thousands of them at once, each as large as the
/// largest event it carried; growth stays geometric, so an event that comes in many pieces
/// still costs copies in proportion to its length.
#[cold]
#[inline(never)]
fn grow(buf: &mut Vec<u8>, more: usize) {
    let need = buf.len() + more;
    let grown = need.max(buf.capacity() + buf.capacity() / 4);
    buf.reserve_exact(grown - buf.len());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_buffer_grows_by_a_quarter_and_stops_at_its_limit() {
        let mut buf = Vec::new();
        let mut growths = 0;
        for _ in 0..400 {
            let cap = buf.capacity();
            assert!(!append_bounded(&mut buf, &[7; 100], 1 << 20));
            growths += usize::from(buf.capacity() != cap);
            // Never more than a quarter above what it holds, past the first piece.
            assert!(buf.capacity() <= (buf.len() + buf.len() / 4).max(100));
        }
        assert_eq!(buf.len(), 40_000);
        // Geometric: 400 pieces took some 20 growths, not one each.
        assert!(growths <= 25, "{growths} growths");
        // At the limit the rest is cut, and nothing grows for it.
        let mut small = vec![1; 10];
        small.shrink_to_fit();
        assert!(append_bounded(&mut small, &[2; 5], 12));
        assert_eq!(small, [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2]);
        assert!(append_bounded(&mut small, &[3], 12));
        assert_eq!(small.len(), 12);
    }

    type OwnedEvent = OwnedSseEvent;

    impl OwnedSseEvent {
        /// A dispatched event with only data (whole, default marks).
        fn data(data: &[u8], lines: u32) -> Self {
            OwnedEvent {
                id: None,
                id_truncated: false,
                event_type: Vec::new(),
                data_len: data.len() as u64,
                data_lines: lines,
                retry: None,
                data: data.to_vec(),
                data_truncated: false,
                dispatched: true,
                mark: Mark::default(),
                first_mark: Mark::default(),
            }
        }
    }

    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Outcome {
        events: Vec<OwnedEvent>,
        partial_at_end: bool,
        stats: SseStats,
    }

    /// What the body holds, in order.
    #[derive(Clone, Copy, Debug)]
    enum Op<'a> {
        Bytes(&'a [u8]),
        Gap,
    }

    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
    }

    fn limits(field: usize) -> Limits {
        Limits {
            max_sse_field_bytes: field,
            ..Limits::default()
        }
    }

    /// Runs `ops`, cutting every byte run into pieces of the sizes `piece` picks; every feed
    /// carries the default mark so that events compare equal across cuttings.
    fn run(
        ops: &[Op<'_>],
        keep: usize,
        field: usize,
        mut piece: impl FnMut(usize) -> usize,
    ) -> Outcome {
        let mut parser = SseParser::new(&limits(field), keep);
        let mut events = Vec::new();
        for op in ops {
            match *op {
                Op::Bytes(mut bytes) => {
                    while !bytes.is_empty() {
                        let n = piece(bytes.len()).clamp(1, bytes.len());
                        let (now, later) = bytes.split_at(n);
                        parser.feed(now, Mark::default(), |e| events.push(OwnedEvent::from(e)));
                        bytes = later;
                    }
                }
                Op::Gap => parser.gap(Mark::default()),
            }
        }
        let partial_at_end = parser.finish(Mark::default());
        Outcome {
            events,
            partial_at_end,
            stats: parser.stats(),
        }
    }

    /// Whole, byte by byte, and at random split points: one answer, returned.
    fn run_all_ways(ops: &[Op<'_>], keep: usize, field: usize) -> Outcome {
        let whole = run(ops, keep, field, |len| len);
        let bytewise = run(ops, keep, field, |_| 1);
        assert_eq!(whole, bytewise, "byte by byte differs from whole");
        for seed in 1..=24u64 {
            let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let split = run(ops, keep, field, |len| {
                1 + rng.below(len.min(1 + seed as usize * 3))
            });
            assert_eq!(
                whole, split,
                "random split (seed {seed}) differs from whole"
            );
        }
        whole
    }

    fn parse_all_ways(input: &[u8]) -> Outcome {
        run_all_ways(&[Op::Bytes(input)], 64, 64)
    }

    fn events(input: &[u8]) -> Vec<OwnedEvent> {
        parse_all_ways(input).events
    }

    fn datas(input: &[u8]) -> Vec<Vec<u8>> {
        events(input).into_iter().map(|e| e.data).collect()
    }

    #[test]
    fn multi_line_data_is_joined_by_lf() {
        let got = events(b"data: YHOO\ndata: +2\ndata: 10\n\n");
        assert_eq!(got, vec![OwnedEvent::data(b"YHOO\n+2\n10", 3)]);
    }

    #[test]
    fn whatwg_example_with_comment_ids_and_unterminated_block() {
        let out = parse_all_ways(
            b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n",
        );
        let mut first = OwnedEvent::data(b"first event", 1);
        first.id = Some(b"1".to_vec());
        let mut second = OwnedEvent::data(b"second event", 1);
        second.id = Some(Vec::new());
        assert_eq!(out.events, vec![first, second]);
        assert!(out.partial_at_end, "the third block had no blank line");
        assert_eq!(out.stats.comments, 1);
        assert_eq!(out.stats.events, 2);
    }

    #[test]
    fn empty_data_fields_follow_the_spec() {
        let out = parse_all_ways(b"data\n\ndata\ndata\n\ndata:");
        assert_eq!(
            out.events,
            vec![OwnedEvent::data(b"", 1), OwnedEvent::data(b"\n", 2)]
        );
        assert!(out.partial_at_end);
        assert_eq!(datas(b"data:\n\n"), vec![b"".to_vec()]);
    }

    #[test]
    fn exactly_one_leading_space_is_stripped() {
        assert_eq!(
            datas(b"data:test\n\ndata: test\n\ndata:  test\n\ndata: a:b \n\n"),
            vec![
                b"test".to_vec(),
                b"test".to_vec(),
                b" test".to_vec(),
                b"a:b ".to_vec()
            ]
        );
    }

    #[test]
    fn cr_crlf_and_lf_all_end_lines() {
        let want = vec![b"a\nb".to_vec(), b"c".to_vec()];
        assert_eq!(datas(b"data: a\rdata: b\r\rdata: c\r\r"), want);
        assert_eq!(datas(b"data: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n"), want);
        assert_eq!(datas(b"data: a\ndata: b\n\ndata: c\n\n"), want);
        assert_eq!(datas(b"data: a\r\ndata: b\n\rdata: c\n\r\n"), want);
        // CR LF is one line end, LF CR is two.
        assert_eq!(
            datas(b"data: a\n\rdata: b\n\n"),
            vec![b"a".to_vec(), b"b".to_vec()]
        );
    }

    #[test]
    fn crlf_split_across_feeds_is_one_line_end() {
        let mut parser = SseParser::new(&Limits::default(), 16);
        let mut seen = Vec::new();
        for piece in [&b"data: a\r"[..], b"\n", b"data: b\r", b"\n\r", b"\n"] {
            parser.feed(piece, Mark::default(), |e| seen.push(e.data.to_vec()));
        }
        assert_eq!(seen, vec![b"a\nb".to_vec()]);
    }

    #[test]
    fn bom_is_skipped_once_at_the_start_only() {
        assert_eq!(datas(b"\xEF\xBB\xBFdata: x\n\n"), vec![b"x".to_vec()]);
        // A second BOM is part of the field name, which is then unknown.
        assert!(events(b"\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\n").is_empty());
        // A cut BOM is content: these lines name unknown fields.
        assert!(events(b"\xEF\xBBdata: x\n\n").is_empty());
        assert_eq!(datas(b"\xEFdata: x\n\ndata: y\n\n"), vec![b"y".to_vec()]);
        // A BOM-like byte after a valid start is just a byte.
        assert_eq!(
            datas(b"data: \xEF\xBB\xBF\n\n"),
            vec![b"\xEF\xBB\xBF".to_vec()]
        );
        let out = parse_all_ways(b"\xEF\xBB\xBF");
        assert!(out.events.is_empty());
        assert_eq!(out.stats.bytes, 3);
    }

    #[test]
    fn bom_split_across_feeds() {
        let mut parser = SseParser::new(&Limits::default(), 16);
        let mut seen = Vec::new();
        for piece in [&b"\xEF"[..], b"\xBB", b"\xBF", b"data: x\n\n"] {
            parser.feed(piece, Mark::default(), |e| seen.push(e.data.to_vec()));
        }
        assert_eq!(seen, vec![b"x".to_vec()]);
        // The prefix turned out not to be a BOM: its bytes start the first line.
        let mut parser = SseParser::new(&Limits::default(), 16);
        let mut first_marks = Vec::new();
        parser.feed(b"\xEF", Mark::new(1, 0), |_| {});
        parser.feed(b"\xBB:x\n\ndata:y\n\n", Mark::new(2, 0), |e| {
            first_marks.push((e.first_mark, e.data.to_vec()))
        });
        assert_eq!(first_marks, vec![(Mark::new(2, 0), b"y".to_vec())]);
    }

    #[test]
    fn comments_and_unknown_fields_are_not_reported() {
        let out =
            parse_all_ways(b":\n: hi\n\nfoo: bar\n\nDATA: x\nData: y\nid : 3\n\n:c\ndata: z\n\n");
        assert_eq!(out.events, vec![OwnedEvent::data(b"z", 1)]);
        assert_eq!(out.stats.comments, 3);
        assert_eq!(out.stats.events, 1);
        assert!(!out.partial_at_end);
        assert!(events(b"\n\n\r\n\r\r").is_empty());
    }

    #[test]
    fn long_names_near_known_ones_are_unknown() {
        assert!(events(b"datax: 1\n\neventx: 1\n\ndat: 1\n\nretryy: 5\n\niid: 2\n\n").is_empty());
    }

    #[test]
    fn id_rules() {
        let got = events(b"id: 1\nid: a\0b\ndata: x\n\nid: a\0b\ndata: y\n\nid:\n\nid: 7\nid\n\n");
        assert_eq!(got.len(), 4);
        assert_eq!(
            got[0].id.as_deref(),
            Some(&b"1"[..]),
            "NUL id leaves the earlier one"
        );
        assert_eq!(got[1].id, None, "only a NUL id means no id");
        assert!(got[1].dispatched);
        assert_eq!(got[2].id.as_deref(), Some(&b""[..]));
        assert!(
            !got[2].dispatched,
            "an id alone is reported but not dispatched"
        );
        assert_eq!(got[2].data_lines, 0);
        assert_eq!(got[3].id.as_deref(), Some(&b""[..]), "the last id wins");
        // Ids do not carry over from one block to the next.
        let got = events(b"id: 1\ndata: a\n\ndata: b\n\n");
        assert_eq!(got[1].id, None);
    }

    #[test]
    fn retry_rules() {
        let got = events(
            b"retry: 1000\n\nretry: 10a\n\nretry: 5\nretry: x\n\nretry:\n\nretry:  5\n\n\
              retry: 99999999999999999999999999\n\nretry: 0\nretry\n\n",
        );
        let retries: Vec<_> = got.iter().map(|e| e.retry).collect();
        assert_eq!(
            retries,
            vec![
                Some(1000),
                None,
                Some(5),
                None,
                None,
                Some(u64::MAX),
                Some(0)
            ]
        );
        assert!(got.iter().all(|e| !e.dispatched));
    }

    #[test]
    fn event_type_rules() {
        let got =
            events(b"event: ping\n\nevent: a\nevent: b\ndata: x\n\ndata: y\n\nevent\ndata\n\n");
        let types: Vec<_> = got.iter().map(|e| e.event_type.clone()).collect();
        assert_eq!(
            types,
            vec![b"ping".to_vec(), b"b".to_vec(), Vec::new(), Vec::new()]
        );
        assert!(!got[0].dispatched);
        assert!(got[1].dispatched);
    }

    #[test]
    fn values_are_cut_at_the_limits() {
        let input =
            b"id: 123456\nevent: abcdefg\nretry: 123456789\ndata: abcdef\ndata: gh\n\nid: 1234\n\n";
        let out = run_all_ways(&[Op::Bytes(input)], 3, 4);
        let first = &out.events[0];
        assert_eq!(first.id.as_deref(), Some(&b"1234"[..]));
        assert!(first.id_truncated);
        assert_eq!(first.event_type, b"abcd");
        assert_eq!(
            first.retry,
            Some(123_456_789),
            "retry is parsed whole, not cut"
        );
        assert_eq!(first.data, b"abc");
        assert_eq!(first.data_len, 9);
        assert!(first.data_truncated);
        let second = &out.events[1];
        assert_eq!(second.id.as_deref(), Some(&b"1234"[..]));
        assert!(!second.id_truncated, "exactly the limit is not cut");
        // keep_data 0 keeps nothing but still counts.
        let out = run_all_ways(&[Op::Bytes(b"data: hello\n\ndata:\n\n")], 0, 4);
        assert_eq!(out.events[0].data, b"");
        assert_eq!(out.events[0].data_len, 5);
        assert!(out.events[0].data_truncated);
        assert!(!out.events[1].data_truncated);
    }

    #[test]
    fn nul_after_the_cut_still_voids_the_id() {
        let out = run_all_ways(&[Op::Bytes(b"id: 0\ndata: x\nid: 123456789\0\n\n")], 8, 4);
        assert_eq!(out.events[0].id.as_deref(), Some(&b"0"[..]));
        assert!(!out.events[0].id_truncated);
    }

    #[test]
    fn fields_cut_counts_cut_values() {
        let mut parser = SseParser::new(&limits(2), 8);
        parser.feed(
            b"id: 123\nevent: ab\nevent: abc\ndata: long\n\n",
            Mark::default(),
            |_| {},
        );
        assert_eq!(parser.fields_cut(), 2);
    }

    #[test]
    fn gap_discards_the_cut_block_and_resumes_after_a_blank_line() {
        let out = run_all_ways(
            &[
                Op::Bytes(b"data: a\n\ndata: b"),
                Op::Gap,
                Op::Bytes(b"cut\ndata: lost\n\ndata: c\n\n"),
            ],
            16,
            16,
        );
        let got: Vec<_> = out.events.iter().map(|e| e.data.clone()).collect();
        assert_eq!(got, vec![b"a".to_vec(), b"c".to_vec()]);
        assert_eq!(out.stats.gaps, 1);
    }

    #[test]
    fn lf_right_after_a_gap_only_ends_the_cut_line() {
        // The gap may have split a CRLF: the LF is not a blank line.
        let out = run_all_ways(
            &[
                Op::Bytes(b"data: a\r"),
                Op::Gap,
                Op::Bytes(b"\ndata: lost\n\ndata: c\n\n"),
            ],
            16,
            16,
        );
        let got: Vec<_> = out.events.iter().map(|e| e.data.clone()).collect();
        assert_eq!(got, vec![b"c".to_vec()]);
        let out = run_all_ways(
            &[
                Op::Bytes(b"id: 1\n"),
                Op::Gap,
                Op::Bytes(b"\n\ndata: c\r\n\r\n"),
            ],
            16,
            16,
        );
        let got: Vec<_> = out.events.iter().map(|e| e.data.clone()).collect();
        assert_eq!(got, vec![b"c".to_vec()]);
    }

    #[test]
    fn gap_inside_resync_starts_over() {
        let out = run_all_ways(
            &[
                Op::Bytes(b"data: a"),
                Op::Gap,
                Op::Bytes(b"x\ndata: y"),
                Op::Gap,
                Op::Bytes(b"\ndata: lost\n\ndata: z\n\n"),
            ],
            16,
            16,
        );
        let got: Vec<_> = out.events.iter().map(|e| e.data.clone()).collect();
        assert_eq!(got, vec![b"z".to_vec()]);
        assert_eq!(out.stats.gaps, 2);
        // A gap at the very start: the stream begins mid-line, and no BOM is looked for.
        let out = run_all_ways(
            &[
                Op::Gap,
                Op::Bytes(b"a: 1\n\n\xEF\xBB\xBFdata: q\n\ndata: r\n\n"),
            ],
            16,
            16,
        );
        let got: Vec<_> = out.events.iter().map(|e| e.data.clone()).collect();
        assert_eq!(got, vec![b"r".to_vec()]);
    }

    #[test]
    fn finish_reports_a_pending_partial_block() {
        let cases: [(&[u8], bool); 11] = [
            (b"data: x\n", true),
            (b"data: x", true),
            (b"data", true),
            (b"id: 1\ndat", true),
            (b"dat", false),
            (b": comment\n", false),
            (b": comment", false),
            (b"foo: x\n", false),
            (b"id: 3\n\n", false),
            (b"", false),
            (b"data: x\n\r", false),
        ];
        for (input, want) in cases {
            let out = parse_all_ways(input);
            assert_eq!(
                out.partial_at_end,
                want,
                "input {:?}",
                String::from_utf8_lossy(input)
            );
        }
        // After a gap the cut block was already discarded.
        let out = run_all_ways(&[Op::Bytes(b"data: a"), Op::Gap, Op::Bytes(b"b")], 16, 16);
        assert!(!out.partial_at_end);
        // finish leaves nothing pending behind it.
        let mut parser = SseParser::new(&Limits::default(), 16);
        parser.feed(b"data: x\n", Mark::default(), |_| {});
        assert!(parser.finish(Mark::default()));
        assert!(!parser.finish(Mark::default()));
    }

    #[test]
    fn marks_name_the_first_byte_and_the_blank_line() {
        let mut parser = SseParser::new(&Limits::default(), 16);
        let mut seen = Vec::new();
        let feeds: [(&[u8], u64); 6] = [
            (b": c\n", 1),
            (b"data: a\n", 2),
            (b"\ndata", 3),
            (b": b\r", 4),
            (b"\n\r", 5),
            (b"\n", 6),
        ];
        for (bytes, frame) in feeds {
            parser.feed(bytes, Mark::new(frame, frame as i64 * 10), |e| {
                seen.push((e.first_mark.frame, e.mark.frame, e.data.to_vec()))
            });
        }
        assert_eq!(seen, vec![(1, 3, b"a".to_vec()), (3, 5, b"b".to_vec())]);
        assert_eq!(
            parser.stats(),
            SseStats {
                events: 2,
                comments: 1,
                bytes: 24,
                gaps: 0
            }
        );
    }

    #[test]
    fn long_data_line_is_counted_with_bounded_memory() {
        const TOTAL: usize = 10 << 20;
        let mut parser = SseParser::new(&Limits::default(), 32);
        let mut seen = Vec::new();
        parser.feed(b"data:", Mark::default(), |_| {});
        let piece = vec![b'x'; 64 << 10];
        for _ in 0..TOTAL / piece.len() {
            parser.feed(&piece, Mark::default(), |_| {});
            assert!(
                parser.retained_bytes() <= 64,
                "held {}",
                parser.retained_bytes()
            );
        }
        parser.feed(b"\n\n", Mark::default(), |e| seen.push(OwnedEvent::from(e)));
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].data_len, TOTAL as u64);
        assert_eq!(seen[0].data, vec![b'x'; 32]);
        assert!(seen[0].data_truncated);
        assert_eq!(parser.stats().bytes, TOTAL as u64 + 7);
    }

    #[test]
    fn long_id_comment_name_and_unknown_lines_keep_memory_bounded() {
        let limit = 4 << 10;
        let mut parser = SseParser::new(&Limits::default(), 0);
        let piece = vec![b'7'; 64 << 10];
        let mut seen = Vec::new();
        for head in [&b"id: "[..], b":", b"", b"unknown: ", b"retry: "] {
            parser.feed(head, Mark::default(), |_| {});
            for _ in 0..16 {
                parser.feed(&piece, Mark::default(), |_| {});
                assert!(parser.retained_bytes() <= 4 * limit);
            }
            parser.feed(b"\n\n", Mark::default(), |e| seen.push(OwnedEvent::from(e)));
        }
        assert_eq!(seen.len(), 2, "the id block and the retry block");
        assert_eq!(seen[0].id.as_ref().map(Vec::len), Some(limit));
        assert!(seen[0].id_truncated);
        assert_eq!(seen[1].retry, Some(u64::MAX));
    }

    /// A direct reading of the spec over the whole input, for comparison.
    fn reference(input: &[u8], keep: usize, field: usize) -> (Vec<OwnedEvent>, bool) {
        #[derive(Default)]
        struct RefBlock {
            has_field: bool,
            id: Option<Vec<u8>>,
            event_type: Vec<u8>,
            data: Vec<Vec<u8>>,
            retry: Option<u64>,
        }
        let body = input.strip_prefix(&BOM[..]).unwrap_or(input);
        let mut lines = Vec::new();
        let (mut start, mut i) = (0, 0);
        while i < body.len() {
            if body[i] == b'\r' || body[i] == b'\n' {
                lines.push(&body[start..i]);
                if body[i] == b'\r' && body.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                start = i + 1;
            }
            i += 1;
        }
        let tail = &body[start..];
        fn name_value(line: &[u8]) -> (&[u8], &[u8]) {
            match line.iter().position(|&b| b == b':') {
                Some(p) => {
                    let value = &line[p + 1..];
                    (&line[..p], value.strip_prefix(b" ").unwrap_or(value))
                }
                None => (line, &[]),
            }
        }
        let mut out = Vec::new();
        let mut block = RefBlock::default();
        for line in lines {
            if line.is_empty() {
                if block.has_field {
                    let data = block.data.join(&b'\n');
                    let (id, id_truncated) = match &block.id {
                        Some(id) => (Some(id[..id.len().min(field)].to_vec()), id.len() > field),
                        None => (None, false),
                    };
                    out.push(OwnedEvent {
                        id,
                        id_truncated,
                        event_type: block.event_type[..block.event_type.len().min(field)].to_vec(),
                        data_len: data.len() as u64,
                        data_lines: block.data.len() as u32,
                        retry: block.retry,
                        data: data[..data.len().min(keep)].to_vec(),
                        data_truncated: data.len() > keep,
                        dispatched: !block.data.is_empty(),
                        mark: Mark::default(),
                        first_mark: Mark::default(),
                    });
                }
                block = RefBlock::default();
                continue;
            }
            if line[0] == b':' {
                continue;
            }
            let (name, value) = name_value(line);
            match name {
                b"data" => block.data.push(value.to_vec()),
                b"id" if !value.contains(&0) => block.id = Some(value.to_vec()),
                b"event" => block.event_type = value.to_vec(),
                b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                    block.retry = Some(value.iter().fold(0u64, |n, &d| {
                        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
                    }))
                }
                _ => {}
            }
            block.has_field |= matches!(name, b"data" | b"id" | b"event" | b"retry");
        }
        let open_field = !tail.is_empty()
            && tail[0] != b':'
            && matches!(name_value(tail).0, b"data" | b"id" | b"event" | b"retry");
        (out, block.has_field || open_field)
    }

    #[test]
    fn line_ends_are_found_at_every_offset() {
        // Either side of the word-at-a-time look and of the handover to memchr2.
        for len in 0..48 {
            for at in 0..=len {
                for stop in [b'\r', b'\n'] {
                    for filler in [b'x', b'\r' ^ 0x80, b'\n' + 1, 0] {
                        let mut bytes = vec![filler; len];
                        if let Some(b) = bytes.get_mut(at) {
                            *b = stop;
                        }
                        let want = bytes.iter().position(|&b| b == b'\r' || b == b'\n');
                        assert_eq!(find_line_end(&bytes), want, "len {len} at {at}");
                        assert_eq!(
                            split_long_line_end(&bytes),
                            split_line_end(&bytes),
                            "len {len} at {at}"
                        );
                    }
                }
            }
        }
        // The first of a CR and an LF, in either order.
        assert_eq!(find_line_end(b"abc\n\r"), Some(3));
        assert_eq!(find_line_end(b"abcdefghij\r\n"), Some(10));
    }

    #[test]
    fn known_heads_need_the_whole_name_and_colon() {
        type Head<'a> = Option<(Field, &'a [u8])>;
        let cases: [(&[u8], Head<'_>); 12] = [
            (b"data: x", Some((Field::Data, b" x"))),
            (b"data:", Some((Field::Data, b""))),
            (b"id:1", Some((Field::Id, b"1"))),
            (b"event:message", Some((Field::Event, b"message"))),
            (b"retry:", Some((Field::Retry, b""))),
            (b"data", None),
            (b"dat", None),
            (b"id", None),
            (b"Data: x", None),
            (b"datax: 1", None),
            (b"id : 3", None),
            (b"", None),
        ];
        for (line, want) in cases {
            assert_eq!(
                known_head(line),
                want,
                "{:?}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn every_field_cut_at_every_point_gives_one_answer() {
        // Values either side of the word-at-a-time look for the line end, with every line end.
        let values: [&[u8]; 5] = [
            b"",
            b"7",
            b"message",
            b"0123456789abcde",
            b"0123456789abcdefghij",
        ];
        for value in values {
            for name in [&b"data"[..], b"id", b"event", b"retry", b"other"] {
                for end in ENDS {
                    for space in [&b""[..], b" "] {
                        let input = [name, b":", space, value, end, b"data: z", end, end].concat();
                        let want = reference(&input, 64, 64);
                        for cut in 0..=input.len() {
                            assert_eq!(run_cut(&input, &[cut], 64, 64), want, "cut {cut}");
                            assert_eq!(
                                run_cut(&input, &[cut, cut + 1, cut + 5], 64, 64),
                                want,
                                "cuts from {cut}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn reference_agrees_on_a_fixed_case() {
        let input =
            b"\xEF\xBB\xBFid: 1\nid: x\0\nevent: e\ndata: a\ndata\n\n: c\nretry: 9\n\ndata: z";
        let (want, pending) = reference(input, 64, 64);
        let out = parse_all_ways(input);
        assert_eq!(out.events, want);
        assert_eq!(out.partial_at_end, pending);
        assert_eq!(want.len(), 2);
    }

    const LINES: &[&[u8]] = &[
        b"data: a",
        b"data:b",
        b"data",
        b"data:",
        b"data:  two spaces",
        b"data: 0123456789abcdef",
        b"id: 1",
        b"id:",
        b"id",
        b"id: 12345678",
        b"id: x\0y",
        b"event: e",
        b"event: longer-type",
        b"event:",
        b"retry: 10",
        b"retry: 1x",
        b"retry",
        b": comment",
        b":",
        b"foo: bar",
        b"Data: X",
        b"eventx: 1",
        b"",
        b"",
        b"",
        b"\xEF\xBB\xBF",
    ];
    const ENDS: &[&[u8]] = &[b"\n", b"\r", b"\r\n"];

    fn build(bom: bool, lines: &[(usize, usize)], tail: Option<usize>) -> Vec<u8> {
        let mut input = Vec::new();
        if bom {
            input.extend_from_slice(&BOM);
        }
        for &(line, end) in lines {
            input.extend_from_slice(LINES[line % LINES.len()]);
            input.extend_from_slice(ENDS[end % ENDS.len()]);
        }
        if let Some(line) = tail {
            input.extend_from_slice(LINES[line % LINES.len()]);
        }
        input
    }

    /// Feeds `input` cut at the given points.
    fn run_cut(input: &[u8], cuts: &[usize], keep: usize, field: usize) -> (Vec<OwnedEvent>, bool) {
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
        points.push(input.len());
        points.sort_unstable();
        let mut parser = SseParser::new(&limits(field), keep);
        let mut events = Vec::new();
        let mut at = 0;
        for point in points {
            parser.feed(&input[at..point], Mark::default(), |e| {
                events.push(OwnedEvent::from(e))
            });
            at = point;
        }
        (events, parser.finish(Mark::default()))
    }

    /// A sink that takes every data buffer, checks it holds the event's data, and hands back
    /// one left full of other bytes.
    struct Swapper {
        events: Vec<OwnedEvent>,
        spare: Vec<u8>,
    }

    impl EventSink for Swapper {
        fn event(&mut self, ev: &SseEvent<'_>) {
            self.events.push(OwnedEvent::from(ev));
        }
        fn take_data(&mut self, data: &mut Vec<u8>) {
            assert_eq!(
                Some(data.as_slice()),
                self.events.last().map(|e| &e.data[..])
            );
            std::mem::swap(data, &mut self.spare);
            self.spare.clear();
            data.extend_from_slice(b"data: stale\n\n");
        }
    }

    /// As [`run_cut`], to a sink that swaps data buffers.
    fn run_cut_swapping(
        input: &[u8],
        cuts: &[usize],
        keep: usize,
        field: usize,
    ) -> (Vec<OwnedEvent>, bool) {
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
        points.push(input.len());
        points.sort_unstable();
        let mut parser = SseParser::new(&limits(field), keep);
        let mut sink = Swapper {
            events: Vec::new(),
            spare: b"spare".to_vec(),
        };
        let mut at = 0;
        for point in points {
            parser.feed_sink(&input[at..point], Mark::default(), &mut sink);
            at = point;
        }
        (sink.events, parser.finish(Mark::default()))
    }

    proptest! {
        #[test]
        fn any_split_matches_the_reference(
            bom in any::<bool>(),
            lines in prop::collection::vec((0..LINES.len(), 0..ENDS.len()), 0..40),
            tail in prop::option::of(0..LINES.len()),
            cuts in prop::collection::vec(any::<usize>(), 0..12),
            keep in 0usize..12,
            field in 0usize..10,
        ) {
            let input = build(bom, &lines, tail);
            let want = reference(&input, keep, field);
            prop_assert_eq!(run_cut(&input, &[], keep, field), want.clone());
            prop_assert_eq!(run_cut(&input, &cuts, keep, field), want.clone());
            prop_assert_eq!(run_cut_swapping(&input, &cuts, keep, field), want.clone());
            let every: Vec<usize> = (0..input.len()).collect();
            prop_assert_eq!(run_cut(&input, &every, keep, field), want);
        }

        #[test]
        fn any_split_around_a_gap_gives_one_answer(
            before in prop::collection::vec((0..LINES.len(), 0..ENDS.len()), 0..12),
            after in prop::collection::vec((0..LINES.len(), 0..ENDS.len()), 0..12),
            cut_before in 0usize..8,
            seed in 1u64..u64::MAX,
        ) {
            let head = build(false, &before, None);
            let head = &head[..head.len().saturating_sub(cut_before)];
            let tail = build(false, &after, None);
            let ops = [Op::Bytes(head), Op::Gap, Op::Bytes(&tail)];
            let whole = run(&ops, 8, 8, |len| len);
            let mut rng = XorShift(seed);
            prop_assert_eq!(&run(&ops, 8, 8, |len| 1 + rng.below(len)), &whole);
            prop_assert_eq!(&run(&ops, 8, 8, |_| 1), &whole);
            // Nothing after the gap is reported before a blank line that follows a line end.
            let tail_events = reference(&tail, 8, 8).0.len();
            prop_assert!(whole.events.len() >= reference(head, 8, 8).0.len());
            prop_assert!(whole.events.len() <= reference(head, 8, 8).0.len() + tail_events);
        }
    }
}
