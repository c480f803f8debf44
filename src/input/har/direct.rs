//! A HAR entry read straight into its [`Entry`], without serde_json, for entries as HAR
//! writers write them; serde_json reads any other.
//!
//! Input: one entry's raw JSON, and a buffer for its body text. Output: the [`Entry`]
//! serde_json makes of the same bytes, and whether the body text was decoded ahead into the
//! buffer; or `None`.
//! Invariants:
//! - `Some` only where serde_json reads the entry without an error and makes the same
//!   [`Entry`] of it, text literal included. Whatever this reading is not sure of (a key of
//!   the entry's structure written with escapes, a member given twice, a status or size that
//!   is not a plain integer, a value not of the type read, nesting deeper than
//!   [`MAX_NESTING`], any malformed JSON) gives `None`, and serde_json reads the entry: its
//!   answer and its messages are then the only ones.
//! - Members not read are checked as serde_json checks what it steps over: strings closed,
//!   with no control bytes and only JSON's escapes; numbers in JSON's grammar; the literals
//!   exact; brackets balanced; nothing after the entry but whitespace.
//! - A body text is decoded ahead, in the pass that finds it, unless a `mimeType` before it
//!   says it is no event stream (as `body_text::find` decides): the answers are the same
//!   either way, only the work differs.
//!
//! Why: most of a browser's export is members the analysis never reads (headers, timings,
//! cookies, the initiator's stack) in short strings; serde_json's reading of them, a call a
//! string and a UTF-8 check of each one it lends, took half the instructions of a run on such
//! a HAR under callgrind, and the pass that finds the body text another eighth.

use std::borrow::Cow;

use super::{Content, Entry, EventSourceMessage, Header, Request, Response, TextLiteral};
use crate::input::body_text;
use crate::json_stops::stops;
#[cfg(target_arch = "x86_64")]
use crate::json_stops::stops16;

/// Deepest nesting of the values stepped over (the entry itself is level 1); deeper ones are
/// left to serde_json.
const MAX_NESTING: usize = 64;

/// Entries up to this size are checked for UTF-8 whole: about what checking a few dozen
/// strings one by one costs (a string's check counted as some 230 bytes of the whole's, both
/// measured in instructions under callgrind with the standard library's check; `simdutf8`
/// checks a whole entry in about a third of those instructions).
const WHOLE_CHECK_BYTES: usize = 16 << 10;

/// `raw` read as one entry: the entry, and whether its body text is in `text` (decoded ahead;
/// the entry's literal is the original either way); `None` where serde_json is to read it.
pub(super) fn entry<'a>(raw: &'a [u8], text: &mut Vec<u8>) -> Option<(Entry<'a>, bool)> {
    // One check of the whole entry, where it passes, stands for the check of each string
    // lent (cut at quotes, so on character boundaries): one pass in place of a call a string.
    // An entry's strings outside its body are a few dozen whatever its size, so past
    // `WHOLE_CHECK_BYTES` (a large body, checked as it is decoded) they are checked alone.
    let text_of = (raw.len() <= WHOLE_CHECK_BYTES)
        .then(|| simdutf8::basic::from_utf8(raw).ok())
        .flatten();
    let mut c = Cursor {
        raw,
        text_of,
        at: 0,
    };
    let mut decoded = false;
    let e = c.entry(text, &mut decoded)?;
    if c.ws().is_some() {
        return None;
    }
    Some((e, decoded))
}

/// A position in an entry's bytes.
struct Cursor<'a> {
    raw: &'a [u8],
    /// `raw` as text, when all of it is UTF-8.
    text_of: Option<&'a str>,
    at: usize,
}

/// Fills `slot` with a member's value the first time; a member given twice, or a value not
/// read, is refused (serde_json refuses the first too).
fn put<T>(slot: &mut Option<T>, value: Option<T>) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value?);
    Some(())
}

impl<'a> Cursor<'a> {
    /// The next byte that is not JSON whitespace, not consumed.
    fn ws(&mut self) -> Option<u8> {
        body_text::skip_ws(self.raw, &mut self.at)
    }

    fn eat(&mut self, want: u8) -> Option<()> {
        (self.ws()? == want).then(|| self.at += 1)
    }

    /// After a member or an element: `true` past a comma (another follows), `false` past
    /// `close` (the container ended), `None` for anything else.
    fn next(&mut self, close: u8) -> Option<bool> {
        let b = self.ws()?;
        if b != b',' && b != close {
            return None;
        }
        self.at += 1;
        Some(b == b',')
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.raw.get(self.at..end)? == word).then(|| self.at = end)
    }

    /// `null`, consumed, when the next value is one.
    fn null(&mut self) -> Option<bool> {
        if self.ws()? == b'n' {
            self.literal(b"null")?;
            return Some(true);
        }
        Some(false)
    }

    /// The members of an object of the entry's structure: each key, written without escapes
    /// and UTF-8, given to `read`, which takes its value.
    fn members(&mut self, mut read: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.ws()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            self.eat(b'"')?;
            let (end, escapes) = string_end(self.raw, self.at)?;
            if escapes != Escapes::Absent {
                // It may spell a member read here: serde_json decodes it to compare.
                return None;
            }
            let key = self.raw.get(self.at..end)?;
            // serde_json reads the keys of a structure's members as text, unknown ones too.
            if self.text_of.is_none() && !key.is_ascii() {
                std::str::from_utf8(key).ok()?;
            }
            self.at = end + 1;
            self.eat(b':')?;
            read(self, key)?;
            if !self.next(b'}')? {
                return Some(());
            }
        }
    }

    /// The elements of an array, each read by `read`.
    fn elements(&mut self, mut read: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.ws()? == b']' {
            self.at += 1;
            return Some(());
        }
        loop {
            read(self)?;
            if !self.next(b']')? {
                return Some(());
            }
        }
    }

    /// Steps over any value at nesting `depth`, checking it as serde_json does.
    fn skip(&mut self, depth: usize) -> Option<()> {
        match self.ws()? {
            b'"' => {
                let (end, _) = string_end(self.raw, self.at + 1)?;
                self.at = end + 1;
                Some(())
            }
            b'{' | b'[' if depth >= MAX_NESTING => None,
            b'{' => {
                self.at += 1;
                if self.ws()? == b'}' {
                    self.at += 1;
                    return Some(());
                }
                loop {
                    self.eat(b'"')?;
                    let (end, _) = string_end(self.raw, self.at)?;
                    self.at = end + 1;
                    self.eat(b':')?;
                    self.skip(depth + 1)?;
                    if !self.next(b'}')? {
                        return Some(());
                    }
                }
            }
            b'[' => self.elements(|c| c.skip(depth + 1)),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number().map(drop),
            _ => None,
        }
    }

    /// Steps over a number written as JSON writes one; `Some(Some(v))` for an integer that
    /// serde_json reads as one and that fits 18 digits, `Some(None)` for any other number.
    fn number(&mut self) -> Option<Option<i64>> {
        let digits = |c: &mut Self| {
            let from = c.at;
            while c.raw.get(c.at).is_some_and(u8::is_ascii_digit) {
                c.at += 1;
            }
            c.at - from
        };
        let negative = self.raw.get(self.at) == Some(&b'-');
        if negative {
            self.at += 1;
        }
        let start = self.at;
        let n = match *self.raw.get(self.at)? {
            b'0' => {
                self.at += 1;
                1
            }
            b'1'..=b'9' => digits(self),
            _ => return None,
        };
        let int = self.raw.get(start..self.at)?;
        let mut integer = true;
        if self.raw.get(self.at) == Some(&b'.') {
            self.at += 1;
            integer = false;
            if digits(self) == 0 {
                return None;
            }
        }
        if matches!(self.raw.get(self.at), Some(b'e' | b'E')) {
            self.at += 1;
            integer = false;
            if matches!(self.raw.get(self.at), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if digits(self) == 0 {
                return None;
            }
        }
        if !integer || n > 18 {
            return Some(None);
        }
        let v = int.iter().fold(0i64, |v, &d| v * 10 + i64::from(d - b'0'));
        // serde_json reads `-0` as a float.
        Some(match (negative, v) {
            (true, 0) => None,
            (true, v) => Some(-v),
            (false, v) => Some(v),
        })
    }

    /// An integer value, as an `i64` member takes it.
    fn integer(&mut self) -> Option<i64> {
        match self.ws()? {
            b'-' | b'0'..=b'9' => self.number()?,
            _ => None,
        }
    }

    /// A string value, borrowed when written without escapes (as serde_json lends it).
    fn cow(&mut self) -> Option<Cow<'a, str>> {
        if self.ws()? != b'"' {
            return None;
        }
        let start = self.at;
        let (end, escapes) = string_end(self.raw, start + 1)?;
        self.at = end + 1;
        match escapes {
            Escapes::Absent => match self.text_of {
                Some(text) => text.get(start + 1..end).map(Cow::Borrowed),
                None => std::str::from_utf8(self.raw.get(start + 1..end)?)
                    .ok()
                    .map(Cow::Borrowed),
            },
            Escapes::Short => unescape_simple(self.raw.get(start + 1..end)?).map(Cow::Owned),
            Escapes::Unicode => {
                // Decoded where serde_json decodes it to the same text, and refused where it
                // refuses it; the literal alone is given, so that room is made for it alone.
                let mut decoded = Vec::new();
                body_text::decode(self.raw.get(..=end)?, start, &mut decoded)?;
                String::from_utf8(decoded).ok().map(Cow::Owned)
            }
        }
    }

    fn opt_cow(&mut self) -> Option<Option<Cow<'a, str>>> {
        if self.null()? {
            return Some(None);
        }
        self.cow().map(Some)
    }

    fn opt_string(&mut self) -> Option<Option<String>> {
        Some(self.opt_cow()?.map(Cow::into_owned))
    }

    fn entry(&mut self, text: &mut Vec<u8>, decoded: &mut bool) -> Option<Entry<'a>> {
        let (mut started, mut request, mut response, mut messages) = (None, None, None, None);
        self.members(|c, key| match key {
            b"startedDateTime" => put(&mut started, c.cow()),
            b"request" => put(&mut request, c.request()),
            b"response" => put(&mut response, c.response(text, decoded)),
            b"_eventSourceMessages" => put(&mut messages, c.messages()),
            _ => c.skip(2),
        })?;
        Some(Entry {
            started: started?,
            request: request?,
            response: response?,
            event_source_messages: messages.flatten(),
        })
    }

    fn request(&mut self) -> Option<Request<'a>> {
        let (mut method, mut url, mut headers) = (None, None, None);
        self.members(|c, key| match key {
            b"method" => put(&mut method, c.cow()),
            b"url" => put(&mut url, c.cow()),
            b"headers" => put(&mut headers, c.headers()),
            _ => c.skip(3),
        })?;
        Some(Request {
            method: method?,
            url: url?,
            headers: headers?,
        })
    }

    fn headers(&mut self) -> Option<Vec<Header<'a>>> {
        // Room for as many as a browser sends, so that the list seldom grows.
        let mut all = Vec::with_capacity(16);
        self.elements(|c| {
            if let Some(h) = c.compact_header() {
                all.push(h);
                return Some(());
            }
            let (mut name, mut value) = (None, None);
            c.members(|c, key| match key {
                b"name" => put(&mut name, c.cow()),
                b"value" => put(&mut value, c.cow()),
                _ => c.skip(5),
            })?;
            all.push(Header {
                name: name?,
                value: value?,
            });
            Some(())
        })?;
        Some(all)
    }

    /// A header laid out as HAR writers lay it out, `{"name":…,"value":…}` with no space,
    /// read in one step; `None`, with nothing consumed, for any other layout (read then member
    /// by member, to the same header or the same refusal).
    fn compact_header(&mut self) -> Option<Header<'a>> {
        let from = self.at;
        let mut step = || {
            let rest = self.raw.get(self.at..)?;
            if !rest.starts_with(b"{\"name\":") {
                return None;
            }
            self.at += 8;
            let name = self.cow()?;
            if !self.raw.get(self.at..)?.starts_with(b",\"value\":") {
                return None;
            }
            self.at += 9;
            let value = self.cow()?;
            (self.raw.get(self.at) == Some(&b'}')).then(|| self.at += 1)?;
            Some(Header { name, value })
        };
        let header = step();
        if header.is_none() {
            self.at = from;
        }
        header
    }

    fn response(&mut self, text: &mut Vec<u8>, decoded: &mut bool) -> Option<Response<'a>> {
        let (mut status, mut headers, mut content, mut comment) = (None, None, None, None);
        self.members(|c, key| match key {
            b"status" => put(&mut status, c.integer()),
            b"headers" => put(&mut headers, c.headers()),
            b"content" => put(&mut content, c.content(text, decoded)),
            b"comment" => put(&mut comment, c.opt_string()),
            _ => c.skip(3),
        })?;
        Some(Response {
            status: status?,
            headers: headers?,
            content: content?,
            comment: comment.flatten(),
        })
    }

    fn content(&mut self, text: &mut Vec<u8>, decoded: &mut bool) -> Option<Content<'a>> {
        let (mut size, mut mime_type, mut literal) = (None, None::<Option<String>>, None);
        let (mut encoding, mut comment, mut file) = (None, None, None);
        self.members(|c, key| match key {
            b"size" => {
                let v = if c.null()? {
                    None
                } else {
                    // An integer read as a float is the same number either way.
                    Some(c.integer()? as f64)
                };
                put(&mut size, Some(v))
            }
            b"mimeType" => put(&mut mime_type, c.opt_string()),
            b"text" => {
                let v = if c.null()? {
                    None
                } else {
                    let ahead = mime_type.as_ref().is_none_or(|m| {
                        m.as_deref()
                            .is_none_or(|m| m.to_ascii_lowercase().contains("event-stream"))
                    });
                    Some(c.text(ahead.then_some(&mut *text), decoded)?)
                };
                put(&mut literal, Some(v))
            }
            b"encoding" => put(&mut encoding, c.opt_string()),
            b"comment" => put(&mut comment, c.opt_string()),
            b"_file" => put(&mut file, c.opt_string()),
            _ => c.skip(4),
        })?;
        Some(Content {
            size: size.flatten(),
            mime_type: mime_type.flatten(),
            text: literal.flatten(),
            encoding: encoding.flatten(),
            comment: comment.flatten(),
            file: file.flatten(),
        })
    }

    /// The body text's literal (a string; serde_json would keep any value, which the entry's
    /// reading then refuses, so another value is left to it), decoded into `text` when given.
    fn text(&mut self, text: Option<&mut Vec<u8>>, decoded: &mut bool) -> Option<TextLiteral<'a>> {
        if self.ws()? != b'"' {
            return None;
        }
        let start = self.at;
        match text {
            Some(out) => {
                // Decoded only where serde_json would decode it to the same bytes, which also
                // makes the literal UTF-8.
                self.at = body_text::decode(self.raw, start, out)?;
                *decoded = true;
            }
            None => {
                let (end, _) = string_end(self.raw, start + 1)?;
                self.at = end + 1;
                // serde_json lends a raw value only when it is UTF-8 (as the whole entry is,
                // when it was checked whole).
                if self.text_of.is_none() {
                    simdutf8::basic::from_utf8(self.raw.get(start..self.at)?).ok()?;
                }
            }
        }
        Some(TextLiteral(self.raw.get(start..self.at)?))
    }

    fn messages(&mut self) -> Option<Option<Vec<EventSourceMessage<'a>>>> {
        if self.null()? {
            return Some(None);
        }
        let mut all = Vec::new();
        self.elements(|c| {
            let (mut name, mut id, mut data) = (None, None, None);
            c.members(|c, key| match key {
                b"eventName" => put(&mut name, c.opt_cow()),
                b"eventId" => put(&mut id, c.opt_cow()),
                b"data" => put(&mut data, c.opt_cow()),
                _ => c.skip(4),
            })?;
            all.push(EventSourceMessage {
                event_name: name.flatten(),
                event_id: id.flatten(),
                data: data.flatten(),
            });
            Some(())
        })?;
        Some(Some(all))
    }
}

/// The text of a string's content (between its quotes) whose escapes [`string_end`] found
/// valid and none of which is a `\u`: `None` when the text is not UTF-8, which serde_json
/// refuses too.
fn unescape_simple(inside: &[u8]) -> Option<String> {
    // Byte by byte: the strings are short and their escapes close together (a browser's
    // `sec-ch-ua` quotes every brand), where a search for each backslash costs more than it
    // steps over.
    let mut out = Vec::with_capacity(inside.len());
    let mut bytes = inside.iter();
    while let Some(&b) = bytes.next() {
        out.push(if b != b'\\' {
            b
        } else {
            match *bytes.next()? {
                b'b' => 0x08,
                b'f' => 0x0c,
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                b @ (b'"' | b'\\' | b'/') => b,
                _ => return None,
            }
        });
    }
    String::from_utf8(out).ok()
}

/// The escapes a string holds, from the ones that need the least decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Escapes {
    Absent,
    /// Only escapes of one byte (`\n`, `\"`, …).
    Short,
    /// At least one `\u`.
    Unicode,
}

/// The position of the closing quote of the string whose content starts at `i`, and which
/// escapes it holds; `None` where serde_json refuses the string even when stepping over it (a
/// control byte, an escape JSON does not define, no closing quote). UTF-8 is not checked here:
/// serde_json checks it only in strings it reads.
fn string_end(raw: &[u8], mut i: usize) -> Option<(usize, Escapes)> {
    let mut escapes = Escapes::Absent;
    loop {
        i = next_stop(raw, i);
        match *raw.get(i)? {
            b'"' => return Some((i, escapes)),
            b'\\' => {
                let (len, kind) = match *raw.get(i + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => (2, Escapes::Short),
                    b'u' if raw.get(i + 2..i + 6)?.iter().all(u8::is_ascii_hexdigit) => {
                        (6, Escapes::Unicode)
                    }
                    _ => return None,
                };
                escapes = escapes.max(kind);
                i += len;
            }
            b if b < 0x20 => return None,
            _ => i += 1,
        }
    }
}

/// The first position from `i` that may stop a string: a quote, a backslash or a control
/// byte, or a byte of the last seven, which the caller looks at one by one (or the end).
fn next_stop(raw: &[u8], mut i: usize) -> usize {
    // Sixteen bytes at a time where the target compares them at once, then eight.
    #[cfg(target_arch = "x86_64")]
    while let Some(block) = raw.get(i..).and_then(<[u8]>::first_chunk::<16>) {
        let stops = stops16(block);
        if stops != 0 {
            return i + stops.trailing_zeros() as usize;
        }
        i += 16;
    }
    while let Some(word) = raw.get(i..).and_then(<[u8]>::first_chunk::<8>) {
        let stops = stops(u64::from_le_bytes(*word));
        if stops != 0 {
            return i + (stops.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    i
}
