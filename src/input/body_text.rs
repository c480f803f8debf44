//! A HAR entry's body text, found and decoded in one pass before serde_json reads the entry.
//!
//! Input: one entry's raw JSON. Output: where its `response.content.text` string literal lies
//! (quotes included) and the text it decodes to, or `None`.
//! Invariants:
//! - `Some` only for a plain entry: one `response` object holding one `content` object holding
//!   one `text` string, no key on that path written with escapes, no `mimeType` before the
//!   text naming another type than an event stream (a body nobody reads is not copied), and a
//!   string that serde_json decodes to exactly these bytes (no control characters, only the
//!   escapes JSON defines, surrogates in pairs, UTF-8 throughout). Anything else is `None`,
//!   and the entry is read by serde_json whole, which names what is wrong in its own words.
//! - The pass does not check the rest of the entry: the caller gives serde_json the entry with
//!   this literal replaced by `""`, a string token for a string token, so the entry is valid
//!   JSON exactly when the original is.
//!
//! Why: serde_json steps over a body held as a raw value once while reading the entry and
//! decodes it in a second pass; bodies are most of a HAR's bytes, and their escapes (every line
//! end and quote of an event stream) stop each of those passes many times per event.

use std::ops::Range;

use memchr::memchr2;

/// The `response.content.text` literal of `raw` and, in `text` (whatever it held before),
/// what it decodes to; `None` when the entry is not plain (see the module's invariants), and
/// `text` then holds nothing of meaning.
pub fn find(raw: &[u8], text: &mut Vec<u8>) -> Option<Range<usize>> {
    let mut w = Walk { raw, at: 0 };
    let mut span = None;
    let (mut response, mut content) = (false, false);
    w.members(|w, key| {
        if key != b"response" {
            return w.skip_value();
        }
        if std::mem::replace(&mut response, true) {
            return None;
        }
        w.members(|w, key| {
            if key != b"content" {
                return w.skip_value();
            }
            if std::mem::replace(&mut content, true) {
                return None;
            }
            // A body that `mimeType` (written before it, as HAR writers do) says is no event
            // stream is left to serde_json, which steps over it without a copy.
            let mut other_type = false;
            w.members(|w, key| {
                if key == b"mimeType" && w.ws()? == b'"' {
                    let start = w.at;
                    w.skip_string()?;
                    let value = raw.get(start..w.at)?;
                    other_type = !value
                        .windows(b"event-stream".len())
                        .any(|v| v.eq_ignore_ascii_case(b"event-stream"));
                    return Some(());
                }
                if key != b"text" {
                    return w.skip_value();
                }
                if span.is_some() || other_type || w.ws()? != b'"' {
                    return None;
                }
                let start = w.at;
                w.at = decode(raw, start, text)?;
                span = Some(start..w.at);
                Some(())
            })
        })
    })?;
    if w.ws().is_some() {
        return None;
    }
    span
}

/// A position in an entry's bytes.
struct Walk<'a> {
    raw: &'a [u8],
    at: usize,
}

impl<'a> Walk<'a> {
    /// The next byte that is not JSON whitespace, not consumed.
    fn ws(&mut self) -> Option<u8> {
        skip_ws(self.raw, &mut self.at)
    }

    fn eat(&mut self, want: u8) -> Option<()> {
        (self.ws()? == want).then(|| self.at += 1)
    }

    /// An object's members, each key (one without escapes) given to `f`, which takes its
    /// value.
    fn members(&mut self, mut f: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.ws()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            self.eat(b'"')?;
            let rest = self.raw.get(self.at..)?;
            let end = memchr2(b'"', b'\\', rest)?;
            let key = rest.get(..end)?;
            if rest.get(end) != Some(&b'"') {
                return None;
            }
            self.at += end + 1;
            self.eat(b':')?;
            f(self, key)?;
            match self.ws()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Steps over the string whose opening quote is at the position.
    fn skip_string(&mut self) -> Option<()> {
        self.at += 1;
        loop {
            let rest = self.raw.get(self.at..)?;
            let i = memchr2(b'"', b'\\', rest)?;
            if rest.get(i) == Some(&b'"') {
                self.at += i + 1;
                return Some(());
            }
            self.at += i + 2;
        }
    }

    /// Steps over any value. Only strings are read exactly (where a string begins and ends is
    /// what the caller's cut relies on); the rest is left for serde_json to check.
    fn skip_value(&mut self) -> Option<()> {
        match self.ws()? {
            b'"' => self.skip_string(),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match *self.raw.get(self.at)? {
                        b'"' => {
                            self.skip_string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.at += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.at += 1;
                }
            }
            _ => {
                while let Some(&b) = self.raw.get(self.at) {
                    if matches!(b, b',' | b'}' | b']' | b'"' | b' ' | b'\t' | b'\n' | b'\r') {
                        break;
                    }
                    self.at += 1;
                }
                Some(())
            }
        }
    }
}

/// Moves `at` past JSON whitespace; the byte it then points at, not consumed.
pub(super) fn skip_ws(raw: &[u8], at: &mut usize) -> Option<u8> {
    while let Some(&b) = raw.get(*at) {
        if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            return Some(b);
        }
        *at += 1;
    }
    None
}

/// Decodes the JSON string literal whose opening quote is at `at` into `out`, in place of
/// what it held; returns the position after its closing quote, or `None` where serde_json
/// would refuse it.
pub(super) fn decode(raw: &[u8], at: usize, out: &mut Vec<u8>) -> Option<usize> {
    decode_as(raw, at, out, true)
}

/// [`decode`], with AVX2 when `wide` asks for it and the CPU has it, SSE2 otherwise.
fn decode_as(raw: &[u8], at: usize, out: &mut Vec<u8>, wide: bool) -> Option<usize> {
    // The decoded text is never longer than the bytes it is decoded from: room for all of
    // them is made at once (no growth by doubling), the text is written at `w` with copies
    // of a fixed size where it can be, and the room left over is cut off at the end. The
    // buffer is written over, not cleared first: only what it grows by is zeroed, which for
    // one HAR's entries, alike in size, is little.
    let need = raw.len().saturating_sub(at);
    if out.len() < need {
        out.resize(need, 0);
    }
    let mut w = 0;
    let end = decode_into(raw, at + 1, out, &mut w, wide);
    out.truncate(w);
    finish(raw, at, end?, out)
}

/// The body of [`decode`]: from `i`, just past the opening quote, into `out` at `*w`; the
/// position of the closing quote.
fn decode_into(
    raw: &[u8],
    mut i: usize,
    out: &mut [u8],
    w: &mut usize,
    wide: bool,
) -> Option<usize> {
    #[cfg(not(target_arch = "x86_64"))]
    let _ = wide;
    #[cfg(target_arch = "x86_64")]
    {
        let blocks = if wide && super::nesting::wide::available() {
            // SAFETY: `decode_blocks_wide` is compiled for AVX2, and runs only here, where
            // `wide::available` has found it on this CPU.
            unsafe { decode_blocks_wide(raw, &mut i, out, w) }
        } else {
            decode_blocks(raw, &mut i, out, w, super::nesting::string_stops)
        };
        if let Some(end) = blocks? {
            return Some(end);
        }
    }
    loop {
        let rest = raw.get(i..)?;
        let n = memchr2(b'"', b'\\', rest)?;
        out.get_mut(*w..*w + n)?.copy_from_slice(rest.get(..n)?);
        *w += n;
        i += n;
        if raw.get(i) == Some(&b'"') {
            return Some(i);
        }
        i = unescape_short(raw, i, out, w)?;
    }
}

/// Decodes from `*i` a block of 64 bytes at a time, stopping at each quote or backslash the
/// block's masks show: `Some(Some(end))` at the closing quote, `Some(None)` with `*i` where
/// fewer than 64 bytes are left (decoded up to there), `None` for an escape serde_json
/// refuses.
///
/// Each block is copied whole to `out` at `*w` before its stops are looked at, and after each
/// escape the 64 bytes that follow it are copied again to where the text goes on: copies of
/// one fixed size, made without a call, where copying each run between escapes called
/// `memcpy` once per run (an event stream's text has an escape every 10 to 20 bytes). The
/// room [`decode`] makes holds them: `*w` stays behind the position read, minus the opening
/// quote, so 64 bytes from `*w` fit wherever 64 bytes are there to read.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn decode_blocks(
    raw: &[u8],
    i: &mut usize,
    out: &mut [u8],
    w: &mut usize,
    string_stops: impl Fn(&[u8; 64]) -> u64,
) -> Option<Option<usize>> {
    while let Some(block) = raw.get(*i..).and_then(<[u8]>::first_chunk::<64>) {
        let mut stops = string_stops(block);
        out.get_mut(*w..)?
            .first_chunk_mut::<64>()?
            .copy_from_slice(block);
        if stops == 0 {
            *w += 64;
            *i += 64;
            continue;
        }
        // Bytes of the block from `from` on are at `*w` in `out`.
        let mut from = 0;
        loop {
            let k = stops.trailing_zeros() as usize;
            *w += k - from;
            if block[k] == b'"' {
                return Some(Some(*i + k));
            }
            let next = unescape_short(raw, *i + k, out, w)?;
            from = next - *i;
            if from >= 64 {
                *i = next;
                break;
            }
            // The escaped byte (a quote or backslash itself, perhaps) is not a stop.
            stops &= u64::MAX << from;
            match raw.get(next..).and_then(<[u8]>::first_chunk::<64>) {
                Some(ahead) => out
                    .get_mut(*w..)?
                    .first_chunk_mut::<64>()?
                    .copy_from_slice(ahead),
                None => {
                    let rest = block.get(from..)?;
                    out.get_mut(*w..*w + rest.len())?.copy_from_slice(rest);
                }
            }
            if stops == 0 {
                *w += 64 - from;
                *i += 64;
                break;
            }
        }
    }
    Some(None)
}

/// [`decode_blocks`] with AVX2's compares and copies.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn decode_blocks_wide(
    raw: &[u8],
    i: &mut usize,
    out: &mut [u8],
    w: &mut usize,
) -> Option<Option<usize>> {
    decode_blocks(raw, i, out, w, |b| super::nesting::wide::string_stops(b))
}

/// The checks on a literal from `at` to its closing quote at `end` once decoded into `out`:
/// the position after it, or `None` for one serde_json refuses.
fn finish(raw: &[u8], at: usize, end: usize, out: &[u8]) -> Option<usize> {
    // Control bytes are refused inside a string; bytes past ASCII must make UTF-8 (escapes
    // decode to it by construction). One pass over the whole literal, folded without an early
    // exit so that the compiler compares many bytes at once; the runs between escapes are too
    // short for that.
    let literal = raw.get(at..end)?;
    let (control, wide) = literal.iter().fold((false, false), |(c, w), &b| {
        (c | (b < 0x20), w | (b >= 0x80))
    });
    if control || (wide && simdutf8::basic::from_utf8(out).is_err()) {
        return None;
    }
    Some(end + 1)
}

/// What each escape of one byte decodes to (`\n` to a line feed, ...); 0 for the others
/// (`\u` and those JSON does not define), none of which decodes to 0.
const SHORT_ESCAPES: [u8; 256] = {
    let mut table = [0u8; 256];
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table[b'/' as usize] = b'/';
    table[b'b' as usize] = 0x08;
    table[b'f' as usize] = 0x0c;
    table[b'n' as usize] = b'\n';
    table[b'r' as usize] = b'\r';
    table[b't' as usize] = b'\t';
    table
};

/// [`unescape`], with the escapes of one byte (an event stream's line ends and quotes, nearly
/// all of them) decoded in place by a look-up: the call and the match are for `\u`.
#[inline(always)]
fn unescape_short(raw: &[u8], i: usize, out: &mut [u8], w: &mut usize) -> Option<usize> {
    let byte = SHORT_ESCAPES[usize::from(*raw.get(i + 1)?)];
    if byte == 0 {
        return unescape(raw, i, out, w);
    }
    *out.get_mut(*w)? = byte;
    *w += 1;
    Some(i + 2)
}

/// Decodes the escape whose backslash is at `i` into `out` at `*w`; the position after it, or
/// `None` for one serde_json refuses (or a surrogate not in a pair).
fn unescape(raw: &[u8], mut i: usize, out: &mut [u8], w: &mut usize) -> Option<usize> {
    let escape = *raw.get(i + 1)?;
    i += 2;
    let byte = match escape {
        b'"' | b'\\' | b'/' => escape,
        b'b' => 0x08,
        b'f' => 0x0c,
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        b'u' => {
            let unit = hex4(raw.get(i..i + 4)?)?;
            i += 4;
            let code = match unit {
                0xD800..=0xDBFF => {
                    if raw.get(i..i + 2)? != b"\\u" {
                        return None;
                    }
                    let low = hex4(raw.get(i + 2..i + 6)?)?;
                    if !(0xDC00..=0xDFFF).contains(&low) {
                        return None;
                    }
                    i += 6;
                    0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                }
                0xDC00..=0xDFFF => return None,
                _ => unit,
            };
            let mut buf = [0u8; 4];
            let bytes = char::from_u32(code)?.encode_utf8(&mut buf).as_bytes();
            out.get_mut(*w..*w + bytes.len())?.copy_from_slice(bytes);
            *w += bytes.len();
            return Some(i);
        }
        _ => return None,
    };
    *out.get_mut(*w)? = byte;
    *w += 1;
    Some(i)
}

/// Four hex digits (either case), as a `\u` escape holds them.
fn hex4(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0u32, |acc, &d| {
        let v = (d as char).to_digit(16)?;
        Some(acc << 4 | v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_of(raw: &str) -> Option<(String, String)> {
        let mut out = Vec::new();
        let span = find(raw.as_bytes(), &mut out)?;
        Some((
            raw[span].to_string(),
            String::from_utf8(out).expect("decoded text is UTF-8"),
        ))
    }

    /// What serde_json makes of the literal, for comparison.
    fn serde_text(literal: &str) -> Option<String> {
        serde_json::from_str::<String>(literal).ok()
    }

    #[test]
    fn finds_the_text_of_a_plain_entry() {
        let raw = r#"{"startedDateTime":"x","request":{"headers":[{"name":"a","value":"b"}]},
            "response":{"status":200,"text":"not this","content":{"size":3,"text":"a\nb\"c","x":[1,{"text":"no"}]}}}"#;
        let (literal, text) = text_of(raw).expect("plain entry");
        assert_eq!(literal, r#""a\nb\"c""#);
        assert_eq!(text, "a\nb\"c");
        // A type named after the text, or an event stream's, does not stop it.
        for raw in [
            r#"{"response":{"content":{"text":"a","mimeType":"image/png"}}}"#,
            r#"{"response":{"content":{"mimeType":"Text/Event-Stream; charset=utf-8","text":"a"}}}"#,
        ] {
            assert_eq!(text_of(raw).map(|t| t.1), Some("a".to_string()), "{raw}");
        }
    }

    #[test]
    fn every_escape_decodes_as_serde_json_does() {
        for literal in [
            r#""""#,
            r#""plain""#,
            r#""\"\\\/\b\f\n\r\t""#,
            r#""\u0000\u001f\u007f\u00e9\u20AC\uffff""#,
            r#""\ud83d\ude00 and \uD83D\uDE00""#,
            "\"caf\u{e9} \u{1F600}\"",
            "\"\u{7f}\"",
        ] {
            let raw = format!(r#"{{"response":{{"content":{{"text":{literal}}}}}}}"#);
            let (_, text) = text_of(&raw).unwrap_or_else(|| panic!("{literal} refused"));
            assert_eq!(Some(text), serde_text(literal), "{literal}");
        }
    }

    #[test]
    fn strings_serde_json_refuses_or_keys_it_reads_otherwise_are_left_to_it() {
        for (raw, why) in [
            (r#"{"response":{"content":{"text":"a\x"}}}"#, "bad escape"),
            (r#"{"response":{"content":{"text":"\ud800"}}}"#, "lone lead"),
            (
                r#"{"response":{"content":{"text":"\ud800\u0041"}}}"#,
                "lead, no trail",
            ),
            (
                r#"{"response":{"content":{"text":"\udc00"}}}"#,
                "lone trail",
            ),
            (r#"{"response":{"content":{"text":"\u12g4"}}}"#, "bad hex"),
            (
                "{\"response\":{\"content\":{\"text\":\"a\u{1}b\"}}}",
                "control byte",
            ),
            (
                "{\"response\":{\"content\":{\"text\":\"a\nb\"}}}",
                "raw line feed",
            ),
            (
                r#"{"response":{"content":{"text":"a"}},"response":{}}"#,
                "two responses",
            ),
            (
                r#"{"response":{"content":{},"content":{"text":"a"}}}"#,
                "two contents",
            ),
            (
                r#"{"response":{"content":{"text":"a","text":"b"}}}"#,
                "two texts",
            ),
            (
                r#"{"response":{"content":{"te\u0078t":"a"}}}"#,
                "escaped key",
            ),
            (r#"{"response":{"content":{"text":null}}}"#, "null text"),
            (r#"{"response":{"content":{"text":5}}}"#, "number text"),
            (
                r#"{"response":{"content":"text"}}"#,
                "content not an object",
            ),
            (
                r#"{"response":{"content":{"text":"a"}}} x"#,
                "trailing bytes",
            ),
            (r#"{"response":{"content":{"text":"a"#, "cut short"),
            (r#"{"request":{}}"#, "no response"),
            (
                r#"{"response":{"content":{"mimeType":"image/png","text":"a"}}}"#,
                "another type",
            ),
        ] {
            assert_eq!(text_of(raw), None, "{why}: {raw}");
        }
        // Bytes that are not UTF-8.
        let mut raw = br#"{"response":{"content":{"text":"a"#.to_vec();
        raw.extend_from_slice(&[0xc3, 0x28]);
        raw.extend_from_slice(br#""}}}"#);
        assert_eq!(find(&raw, &mut Vec::new()), None);
    }

    /// Valid literals long and short, placed at every alignment to the 64-byte blocks, with
    /// escapes (two, six and twelve bytes) straddling block ends and runs with no stop at all:
    /// each decodes here (no fallback) to what serde_json decodes it to, into a buffer that
    /// still holds the one before (longer or shorter), as a HAR's entries reuse it.
    #[test]
    fn valid_literals_decode_as_serde_json_decodes_them_wherever_they_lie() {
        let pieces = [
            "x",
            "\\n",
            "\\\"",
            "\\\\",
            "\\/",
            "\\u00e9",
            "\\ud83d\\ude00",
            "é",
            "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789",
        ];
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: usize| (crate::testing::xorshift(&mut state) % n as u64) as usize;
        let mut out = b"left over".repeat(40);
        for _ in 0..5_000 {
            let lead = next(80);
            let mut literal = String::from("\"");
            for _ in 0..next(40) {
                literal.push_str(pieces[next(pieces.len())]);
            }
            literal.push('"');
            let raw = format!("{}{literal}{}", " ".repeat(lead), "}".repeat(next(70)));
            let want: String = serde_json::from_str(&literal).expect("valid literal");
            // With the CPU's widest compares, and with SSE2's as CPUs without AVX2 decode.
            for wide in [true, false] {
                let end = decode_as(raw.as_bytes(), lead, &mut out, wide);
                assert_eq!(end, Some(lead + literal.len()), "{raw}");
                assert_eq!(std::str::from_utf8(&out), Ok(want.as_str()), "{raw}");
            }
        }
    }
}
