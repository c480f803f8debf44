//! The few JSON-RPC facts the session checks need, read from SSE event data.
//!
//! Input: the kept prefix of one event's data (possibly cut), request targets and
//! `endpoint` event data.
//! Output: an [`RpcFact`] (a response or server request with its raw `id`, a progress
//! notification with its token and value, a `list_changed` notification, or nothing of
//! interest), the session named in a URL query, and the resume point of an `event: resume`
//! acknowledgment.
//! Invariants: no allocation and no full parse. Progress notifications that open as the usual
//! SDKs write them are read by comparing those openings whole, with the same answer as the
//! walk below gives. Otherwise a cheap pre-filter (the data must open an object) comes
//! first; then one pass over the top level of the object borrows the raw values it needs
//! and stops at the first member that decides, which for the usual
//! `{"jsonrpc":"2.0","id":..,"result":..}` or `{"jsonrpc":"2.0","method":"notifications/..`
//! is within the first few dozen bytes. Nested values are skipped with strings jumped by
//! memchr; no serde parse runs on this path. A value cut by the end of the kept prefix is
//! never reported; malformed JSON gives `RpcFact::Other`, never an error.

use memchr::{memchr, memchr2};

/// What an event's data is, as far as the session checks care.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RpcFact<'a> {
    /// A response (`result` or `error`) to the client's request with this raw JSON id.
    Response {
        /// The raw JSON id.
        id: &'a [u8],
    },
    /// A request from the server to the client (it has `method` and `id`).
    Request {
        /// The raw JSON id.
        id: &'a [u8],
    },
    /// `notifications/progress`: the raw JSON progress token and the progress value.
    Progress {
        /// The raw JSON progress token.
        token: &'a [u8],
        /// The progress value.
        progress: f64,
    },
    /// A `notifications/.../list_changed` notification; the method as sent (raw string body).
    ListChanged {
        /// The method as sent.
        method: &'a [u8],
    },
    /// Anything else, or data that is not a JSON-RPC message.
    Other,
}

/// The top-level members of a message the checks look at, as raw JSON values.
#[derive(Default, Debug)]
struct TopLevel<'a> {
    id: Option<&'a [u8]>,
    /// The body of the `method` string, escapes left as sent.
    method: Option<&'a [u8]>,
    has_result: bool,
    has_error: bool,
    params: Option<&'a [u8]>,
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(c) = b.get(i) {
        if !matches!(c, b' ' | b'\t' | b'\r' | b'\n') {
            break;
        }
        i += 1;
    }
    i
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

/// Index just past the string starting at `i` (which holds the opening quote).
fn skip_string(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    // Keys and short values end within a few words: look there a word at a time before
    // calling memchr2, whose call costs more than such a string.
    for _ in 0..4 {
        let Some(chunk) = b.get(j..).and_then(<[u8]>::first_chunk::<8>) else {
            break;
        };
        let w = u64::from_le_bytes(*chunk);
        let hits = zero_bytes(w ^ splat(b'"')) | zero_bytes(w ^ splat(b'\\'));
        if hits != 0 {
            j += (hits.trailing_zeros() / 8) as usize;
            if b.get(j) == Some(&b'"') {
                return Some(j + 1);
            }
            // An escape: the byte after the backslash is never the end.
            j += 2;
            break;
        }
        j += 8;
    }
    loop {
        let rest = b.get(j..)?;
        let at = memchr2(b'"', b'\\', rest)?;
        j += at;
        if b.get(j) == Some(&b'\\') {
            j += 2;
        } else {
            return Some(j + 1);
        }
    }
}

/// Index just past the value starting at `i`; `None` when the data ends inside it or it is
/// not JSON.
fn skip_value(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => skip_string(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match *b.get(j)? {
                    b'"' => {
                        j = skip_string(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while let Some(c) = b.get(j) {
                if matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n') {
                    break;
                }
                j += 1;
            }
            // A scalar that runs to the end of the kept data may have been cut.
            (j < b.len() && j > i).then_some(j)
        }
    }
}

/// The members of the object at the start of some bytes, one at a time: `next_key` reads a
/// key and its colon; `value` then reads the raw value, or the next `next_key` skips it.
/// Anything that is not JSON, or the end of the data, ends the walk quietly.
struct Members<'a> {
    b: &'a [u8],
    i: usize,
    /// A key was read and its value not yet.
    pending: bool,
    done: bool,
}

/// How nearly every MCP message begins; its first member needs no reading.
const JSONRPC_HEAD: &[u8] = br#"{"jsonrpc":"2.0","#;

impl<'a> Members<'a> {
    fn new(b: &'a [u8]) -> Self {
        if b.get(..JSONRPC_HEAD.len())
            .is_some_and(|head| is(head, JSONRPC_HEAD))
        {
            return Members {
                b,
                i: JSONRPC_HEAD.len(),
                pending: false,
                done: false,
            };
        }
        let i = skip_ws(b, 0);
        Members {
            b,
            i: i + 1,
            pending: false,
            done: b.get(i) != Some(&b'{'),
        }
    }

    fn next_key(&mut self) -> Option<&'a [u8]> {
        if self.pending {
            self.value()?;
        }
        if self.done {
            return None;
        }
        let b = self.b;
        let i = skip_ws(b, self.i);
        let key = if b.get(i) == Some(&b'"') {
            skip_string(b, i)
        } else {
            None
        };
        let colon = key.map(|end| skip_ws(b, end));
        match (key, colon) {
            (Some(end), Some(colon)) if b.get(colon) == Some(&b':') => {
                self.i = skip_ws(b, colon + 1);
                self.pending = true;
                b.get(i + 1..end - 1)
            }
            _ => {
                self.done = true;
                None
            }
        }
    }

    /// The bytes from the start of the pending value to the end of the data: a nested object
    /// can be walked in place, without skipping it first. Ends this walk.
    fn rest(&mut self) -> Option<&'a [u8]> {
        if !self.pending || self.done {
            return None;
        }
        self.done = true;
        self.b.get(self.i..)
    }

    fn value(&mut self) -> Option<&'a [u8]> {
        if !self.pending || self.done {
            return None;
        }
        self.pending = false;
        let b = self.b;
        let start = self.i;
        let Some(end) = skip_value(b, start) else {
            self.done = true;
            return None;
        };
        let after = skip_ws(b, end);
        match b.get(after) {
            Some(b',') => self.i = after + 1,
            _ => self.done = true,
        }
        b.get(start..end)
    }
}

/// Equality with a short literal, word by word: keys are compared for every event, and a
/// call into the C library's memcmp costs more than the comparison.
#[inline]
fn is(a: &[u8], lit: &[u8]) -> bool {
    if a.len() != lit.len() {
        return false;
    }
    let mut x = a.chunks_exact(8);
    let mut y = lit.chunks_exact(8);
    for (u, v) in (&mut x).zip(&mut y) {
        if u64::from_le_bytes(u.try_into().unwrap_or_default())
            != u64::from_le_bytes(v.try_into().unwrap_or_default())
        {
            return false;
        }
    }
    x.remainder().iter().zip(y.remainder()).all(|(u, v)| u == v)
}

fn string_body(raw: &[u8]) -> Option<&[u8]> {
    raw.strip_prefix(b"\"")?.strip_suffix(b"\"")
}

const PROGRESS_METHOD: &[u8] = b"notifications/progress";

/// Reads the top level of a message, stopping as soon as what it is is known.
fn top_level(data: &[u8]) -> TopLevel<'_> {
    let mut t = TopLevel::default();
    let mut m = Members::new(data);
    let progress = |m: Option<&[u8]>| m.is_some_and(|m| is(m, PROGRESS_METHOD));
    while let Some(k) = m.next_key() {
        if is(k, b"id") {
            t.id = m.value();
            if t.has_result || t.has_error || t.method.is_some() {
                break;
            }
        } else if is(k, b"result") || is(k, b"error") {
            t.has_result |= k.len() == 6;
            t.has_error |= k.len() == 5;
            if t.id.is_some() {
                break;
            }
        } else if is(k, b"method") {
            t.method = m.value().and_then(string_body);
            let is_progress = progress(t.method);
            match t.method {
                Some(_) if is_progress && t.params.is_some() => break,
                Some(_) if is_progress => {}
                // A notification has no id, and only progress needs its params.
                Some(method) if method.starts_with(b"notifications/") => break,
                Some(_) if t.id.is_some() => break,
                _ => {}
            }
        } else if is(k, b"params") {
            if progress(t.method) {
                // Its members are read in place; nothing after it is needed.
                t.params = m.rest();
                break;
            }
            t.params = m.value();
        }
    }
    t
}

/// The progress value as a finite number. Progress is nearly always a small whole number,
/// read here without the float parser: up to 15 digits it is exact in an f64, as the parser
/// would give it.
fn progress_value(raw: &[u8]) -> Option<f64> {
    if !raw.is_empty() && raw.len() <= 15 && raw.iter().all(u8::is_ascii_digit) {
        let n = raw.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
        return Some(n as f64);
    }
    std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|v| v.is_finite())
}

/// How the progress notifications of the usual SDKs open, up to the value of `params`: with
/// `jsonrpc` first (the Python SDK and most servers) or last (the TypeScript SDK). After
/// either, the walk of the top level would read nothing more: the message is progress and its
/// params are all the bytes from the value on.
const PROGRESS_HEADS: [&[u8]; 2] = [
    br#"{"jsonrpc":"2.0","method":"notifications/progress","params":"#,
    br#"{"method":"notifications/progress","params":"#,
];

/// How progress params open when the token comes first, and what follows the token then.
const TOKEN_KEY: &[u8] = br#"{"progressToken":"#;
const PROGRESS_KEY: &[u8] = br#","progress":"#;

/// The params of a message that opens with one of [`PROGRESS_HEADS`], from the first byte
/// of their value; `None` for any other message.
fn progress_head(data: &[u8]) -> Option<&[u8]> {
    PROGRESS_HEADS.iter().find_map(|head| {
        data.get(..head.len())
            .is_some_and(|h| is(h, head))
            .then(|| data.get(skip_ws(data, head.len())..))
            .flatten()
    })
}

/// The raw token and progress of params that open `{"progressToken":..,"progress":..`, the
/// values found as [`progress_walk`] finds them; `None` for any other params,
/// or when either value is cut.
fn token_first(params: &[u8]) -> Option<(&[u8], &[u8])> {
    if !params
        .get(..TOKEN_KEY.len())
        .is_some_and(|h| is(h, TOKEN_KEY))
    {
        return None;
    }
    let start = skip_ws(params, TOKEN_KEY.len());
    let end = skip_value(params, start)?;
    if !params
        .get(end..end + PROGRESS_KEY.len())
        .is_some_and(|k| is(k, PROGRESS_KEY))
    {
        return None;
    }
    let value_start = skip_ws(params, end + PROGRESS_KEY.len());
    let value_end = skip_value(params, value_start)?;
    Some((params.get(start..end)?, params.get(value_start..value_end)?))
}

/// What the params of a progress notification say: its token and value, or nothing.
fn progress_fact(params: &[u8]) -> RpcFact<'_> {
    match token_first(params) {
        Some((token, value)) => progress_of(token, value),
        None => progress_walk(params),
    }
}

/// [`progress_fact`] by the walk of the params' members alone, for any params.
fn progress_walk(params: &[u8]) -> RpcFact<'_> {
    let (mut token, mut value) = (None, None);
    let mut m = Members::new(params);
    while let Some(k) = m.next_key() {
        if is(k, b"progressToken") {
            token = m.value();
        } else if is(k, b"progress") {
            value = m.value();
        }
        if token.is_some() && value.is_some() {
            break;
        }
    }
    match (token, value) {
        (Some(token), Some(value)) => progress_of(token, value),
        _ => RpcFact::Other,
    }
}

/// Progress with this raw token and raw value, when the value is a finite number.
fn progress_of<'a>(token: &'a [u8], value: &[u8]) -> RpcFact<'a> {
    match progress_value(value) {
        Some(progress) => RpcFact::Progress { token, progress },
        None => RpcFact::Other,
    }
}

/// Reads what an event's data says. `data` is the kept prefix of the data buffer.
pub fn classify(data: &[u8]) -> RpcFact<'_> {
    match progress_head(data) {
        Some(params) => progress_fact(params),
        None => classify_walk(data),
    }
}

/// [`classify`] by the walk of the members alone, for any message.
fn classify_walk(data: &[u8]) -> RpcFact<'_> {
    // Pre-filter: only an object can be a JSON-RPC message.
    if data.get(skip_ws(data, 0)) != Some(&b'{') {
        return RpcFact::Other;
    }
    let t = top_level(data);
    if let Some(id) = t.id {
        if t.has_result || t.has_error {
            return RpcFact::Response { id };
        }
        if t.method.is_some() && id != b"null" {
            return RpcFact::Request { id };
        }
        return RpcFact::Other;
    }
    let Some(method) = t.method else {
        return RpcFact::Other;
    };
    if is(method, PROGRESS_METHOD) {
        return match t.params {
            Some(params) => progress_walk(params),
            None => RpcFact::Other,
        };
    }
    if method.starts_with(b"notifications/") && method.ends_with(b"/list_changed") {
        return RpcFact::ListChanged { method };
    }
    RpcFact::Other
}

/// Longest session id taken from a URL.
const MAX_URL_SESSION: usize = 256;

/// The session a URL names in its query (`sessionId=` as the TypeScript SDK writes it,
/// `session_id=` as the Python SDK does), for the 2024-11-05 HTTP+SSE transport.
pub fn session_from_url(url: &[u8]) -> Option<String> {
    let q = memchr(b'?', url)?;
    let query = url.get(q + 1..)?;
    let query = query.split(|&b| b == b'#').next().unwrap_or(query);
    for pair in query.split(|&b| b == b'&') {
        let Some(eq) = memchr(b'=', pair) else {
            continue;
        };
        let (k, v) = (&pair[..eq], &pair[eq + 1..]);
        if (k == b"sessionId" || k == b"session_id") && !v.is_empty() && v.len() <= MAX_URL_SESSION
        {
            let text = std::str::from_utf8(v).ok()?;
            if text.bytes().all(|b| b.is_ascii_graphic()) {
                return Some(text.to_string());
            }
        }
    }
    None
}

/// Longest resume point taken from an acknowledgment.
const MAX_RESUME_POINT: usize = 4096;

/// The resume point an `event: resume` acknowledgment states: the id after which the server
/// resumes. Accepted forms: a bare id, a JSON string, or a JSON object with one of
/// `lastEventId`, `last_event_id`, `resumeFrom`, `resume_from`, `after` holding a string.
pub fn resume_point(data: &[u8]) -> Option<String> {
    let trimmed = data.trim_ascii();
    if trimmed.is_empty() || trimmed.len() > MAX_RESUME_POINT {
        return None;
    }
    match trimmed.first() {
        Some(b'"') => serde_json::from_slice::<String>(trimmed).ok(),
        Some(b'{') => {
            let mut m = Members::new(trimmed);
            while let Some(k) = m.next_key() {
                if matches!(
                    k,
                    b"lastEventId" | b"last_event_id" | b"resumeFrom" | b"resume_from" | b"after"
                ) {
                    return m
                        .value()
                        .and_then(|v| serde_json::from_slice::<String>(v).ok());
                }
            }
            None
        }
        _ => {
            let text = std::str::from_utf8(trimmed).ok()?;
            (!text.bytes().any(|b| b.is_ascii_whitespace())).then(|| text.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_and_requests_in_any_member_order() {
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#),
            RpcFact::Response { id: b"7" }
        );
        assert_eq!(
            classify(br#"{"result":{"content":[{"id":"x"}]},"jsonrpc":"2.0","id":"r-7"}"#),
            RpcFact::Response { id: br#""r-7""# }
        );
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"a\"}"}}"#),
            RpcFact::Response { id: b"3" }
        );
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","id":4,"method":"sampling/createMessage","params":{}}"#),
            RpcFact::Request { id: b"4" }
        );
        // Nested ids are not the message's id.
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","method":"x","params":{"id":5}}"#),
            RpcFact::Other
        );
    }

    #[test]
    fn progress_and_list_changed() {
        assert_eq!(
            classify(
                br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t1","progress":40,"total":100}}"#
            ),
            RpcFact::Progress {
                token: br#""t1""#,
                progress: 40.0
            }
        );
        assert_eq!(
            classify(
                br#"{"method":"notifications/progress","params":{"progress":2.5,"progressToken":9},"jsonrpc":"2.0"}"#
            ),
            RpcFact::Progress {
                token: b"9",
                progress: 2.5
            }
        );
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#),
            RpcFact::ListChanged {
                method: b"notifications/tools/list_changed"
            }
        );
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"list_changed"}}"#),
            RpcFact::Other
        );
    }

    /// A fact with its slice told by where it lies in `data`, not only by its bytes.
    fn placed<'a>(data: &'a [u8], fact: RpcFact<'a>) -> (RpcFact<'a>, Option<usize>) {
        let slice = match fact {
            RpcFact::Response { id } | RpcFact::Request { id } => Some(id),
            RpcFact::Progress { token, .. } => Some(token),
            RpcFact::ListChanged { method } => Some(method),
            RpcFact::Other => None,
        };
        let at = slice.map(|s| s.as_ptr() as usize - data.as_ptr() as usize);
        (fact, at)
    }

    /// `classify` gives what the walk of the members gives, whole and cut at every byte.
    fn assert_as_walk(data: &[u8]) {
        for cut in (0..=data.len()).rev() {
            let d = &data[..cut];
            assert_eq!(
                placed(d, classify(d)),
                placed(d, classify_walk(d)),
                "{:?}",
                String::from_utf8_lossy(d)
            );
        }
    }

    #[test]
    fn progress_openings_read_as_the_walk_reads_them() {
        let heads: [&[u8]; 9] = [
            PROGRESS_HEADS[0],
            PROGRESS_HEADS[1],
            br#" {"jsonrpc":"2.0","method":"notifications/progress","params":"#,
            br#"{"jsonrpc":"2.0","method":"notifications/progress", "params": "#,
            br#"{"jsonrpc":"2.0","method":"notifications\/progress","params":"#,
            br#"{"jsonrpc":"2.0","method":"notifications/progresses","params":"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"notifications/progress","params":"#,
            br#"{"jsonrpc":"2.0","params":{"progressToken":0,"progress":1},"method":"notifications/progress","x":"#,
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params"#,
        ];
        let tokens: [&[u8]; 9] = [
            br#""progress-17""#,
            br#""a\"b""#,
            br#""a\\\\""#,
            br#""0123456789abcdef0123456789abcdef0123""#,
            b"17",
            b" \"t\"",
            b"null",
            br#"{"a":[1,"}"]}"#,
            br#""""#,
        ];
        let keys: [&[u8]; 6] = [
            PROGRESS_KEY,
            br#" ,"progress":"#,
            br#","progress" :"#,
            br#","progress": "#,
            br#","progresss":"#,
            br#","total":10,"progress":"#,
        ];
        let values: [&[u8]; 8] = [
            b"3", b"2.5", b"-1", b"1e999", b"\"3\"", b"x", b"007", b"null",
        ];
        let tails: [&[u8]; 5] = [
            br#","total":10,"message":"m"}}"#,
            b"}}",
            br#","progressToken":"dup"}}"#,
            br#","progress":9}}"#,
            b" }",
        ];
        for head in heads {
            for token in tokens {
                for key in keys {
                    for value in values {
                        for tail in tails {
                            let params = [TOKEN_KEY, token, key, value, tail].concat();
                            assert_as_walk(&[head, &params].concat());
                            // Params in another order, or with space inside their opening.
                            let params =
                                [b"{ \"progressToken\":", token, key, value, tail].concat();
                            assert_as_walk(&[head, &params].concat());
                        }
                    }
                }
            }
        }
        // The fast reading does happen, and finds the values.
        let data = [
            PROGRESS_HEADS[1],
            TOKEN_KEY,
            br#""t","progress":4},"jsonrpc":"2.0"}"#,
        ]
        .concat();
        assert_eq!(
            token_first(&data[PROGRESS_HEADS[1].len()..]),
            Some((&br#""t""#[..], &b"4"[..]))
        );
        assert_eq!(
            classify(&data),
            RpcFact::Progress {
                token: br#""t""#,
                progress: 4.0
            }
        );
    }

    proptest::proptest! {
        #[test]
        fn any_data_reads_as_the_walk_reads_it(
            head in 0usize..3,
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    "{", "}", "[", "]", "\"", "\\", ":", ",", " ", "\n", "1", "2.5", "x",
                    "\"progressToken\"", "\"progress\"", "\"id\"", "\"result\"",
                    "\"method\"", "\"params\"", "\"notifications/progress\"",
                    r#"{"progressToken":"#, r#","progress":"#, r#""t-1""#,
                ]),
                0..24,
            ),
        ) {
            let head: &[u8] = match head {
                0 => PROGRESS_HEADS[0],
                1 => PROGRESS_HEADS[1],
                _ => b"{",
            };
            let data = [head, parts.concat().as_bytes()].concat();
            assert_as_walk(&data);
        }
    }

    #[test]
    fn cut_or_broken_data_gives_nothing_wrong() {
        let whole = br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t1","progress":40}}"#;
        for cut in 0..whole.len() {
            match classify(&whole[..cut]) {
                RpcFact::Other => {}
                RpcFact::Progress { token, progress } => {
                    assert_eq!((token, progress), (&br#""t1""#[..], 40.0), "cut {cut}");
                }
                other => panic!("cut {cut}: {other:?}"),
            }
        }
        let resp = br#"{"jsonrpc":"2.0","id":12345,"result":{}}"#;
        for cut in 0..resp.len() {
            match classify(&resp[..cut]) {
                RpcFact::Other => {}
                RpcFact::Response { id } => assert_eq!(id, b"12345", "cut {cut}"),
                other => panic!("cut {cut}: {other:?}"),
            }
        }
        for junk in [
            &b"not json \"id\""[..],
            b"{\"id\"",
            b"{\"id\":}",
            b"[1,\"id\"]",
            b"{{{{\"id\"",
        ] {
            assert_eq!(classify(junk), RpcFact::Other);
        }
    }

    #[test]
    fn strings_end_at_their_first_unescaped_quote_at_every_offset() {
        // Either side of the word-at-a-time look and of the handover to memchr2.
        for len in 0..48 {
            for esc in 0..=len {
                let mut body = vec![b'a'; len];
                if esc + 1 < len {
                    body[esc] = b'\\';
                    body[esc + 1] = b'"';
                }
                let text = [&b"\""[..], &body, b"\",1"].concat();
                let want = len + 2;
                assert_eq!(skip_string(&text, 0), Some(want), "len {len} escape {esc}");
                // Cut inside the string: no end.
                for cut in 0..want {
                    assert_eq!(skip_string(&text[..cut], 0), None, "len {len} cut {cut}");
                }
            }
        }
        assert_eq!(skip_string(br#""a\\"b"#, 0), Some(5));
        assert_eq!(skip_string(br#""\\\"""#, 0), Some(6));
    }

    #[test]
    fn progress_values_read_as_the_float_parser_reads_them() {
        let cases: [&[u8]; 14] = [
            b"0",
            b"7",
            b"007",
            b"1000",
            b"999999999999999",
            b"9999999999999999",
            b"18446744073709551616",
            b"2.5",
            b"-3",
            b"1e3",
            b"1e999",
            b"",
            b"x",
            b"1 ",
        ];
        for raw in cases {
            let want = std::str::from_utf8(raw)
                .ok()
                .and_then(|s| s.parse::<f64>().ok())
                .filter(|v| v.is_finite());
            assert_eq!(
                progress_value(raw),
                want,
                "{:?}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn sessions_from_endpoint_urls() {
        assert_eq!(
            session_from_url(b"/messages?sessionId=4f1c-9a").as_deref(),
            Some("4f1c-9a")
        );
        assert_eq!(
            session_from_url(b"/messages/?session_id=abc123&x=1").as_deref(),
            Some("abc123")
        );
        assert_eq!(session_from_url(b"/messages?x=1&sessionid=abc"), None);
        assert_eq!(session_from_url(b"/messages?sessionId="), None);
        assert_eq!(session_from_url(b"/mcp"), None);
    }

    #[test]
    fn resume_points() {
        assert_eq!(resume_point(b"s_4").as_deref(), Some("s_4"));
        assert_eq!(resume_point(b" \"s_4\" ").as_deref(), Some("s_4"));
        assert_eq!(
            resume_point(br#"{"lastEventId":"s_4","n":1}"#).as_deref(),
            Some("s_4")
        );
        assert_eq!(resume_point(br#"{"other":"s_4"}"#), None);
        assert_eq!(resume_point(b"two words"), None);
        assert_eq!(resume_point(b""), None);
    }
}
