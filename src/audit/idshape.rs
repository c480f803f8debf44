//! Event id shapes: where a structured id keeps its counter.
//!
//! Input: event id strings, two at a time (consecutive ids of one stream, or a
//! `Last-Event-ID` and the first id of the resumed stream), and optionally a user pattern.
//! Output: [`PairObs`] (what two consecutive ids of one stream say about a shape), [`Split`]
//! (an id cut around its counter), [`IdPattern`] (a user's `--id-pattern`), the display form of
//! a learned shape, and the part of an id that names its namespace
//! ([`namespace_key_hash`]).
//! Invariants: pure functions over strings; a counter is a maximal run of ASCII digits, named
//! by its position counted from the end of the id (0 = the last run), compared as a decimal of
//! any length; nothing here decides a verdict, it only says which decimals to compare.

use std::cmp::Ordering;

use regex::Regex;

use crate::audit::verdict::DecimalId;

/// Digit runs considered as the counter, counted from the end of the id. Real ids put their
/// counter last (`<stream>_<n>`, `event-<n>`) or first (`<n>/<request>`); four covers both with
/// room for a version or a date in the constant part.
pub const MAX_RUN_FROM_END: usize = 4;

/// An id cut around one of its digit runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Split<'a> {
    pub prefix: &'a str,
    pub seq: &'a str,
    pub suffix: &'a str,
}

/// Cuts `id` around its `k`-th maximal digit run counted from the end (0 = last run).
/// Scans backwards without allocating: this runs for every event id of a capture.
pub fn split_at_run(id: &str, k: usize) -> Option<Split<'_>> {
    let b = id.as_bytes();
    let mut end = b.len();
    let mut seen = 0;
    loop {
        while end > 0 && !b[end - 1].is_ascii_digit() {
            end -= 1;
        }
        if end == 0 {
            return None;
        }
        let mut start = end;
        while start > 0 && b[start - 1].is_ascii_digit() {
            start -= 1;
        }
        if seen == k {
            // Digit runs are ASCII, so both cuts fall on character boundaries.
            return Some(Split {
                prefix: id.get(..start)?,
                seq: id.get(start..end)?,
                suffix: id.get(end..)?,
            });
        }
        seen += 1;
        end = start;
    }
}

/// What two consecutive ids of one stream say about a shape with its counter at run `k`.
/// The constant parts borrow from the ids (they are equal in both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PairObs<'a> {
    pub k: u8,
    pub prefix: &'a str,
    pub suffix: &'a str,
    /// The counter went up by exactly one.
    pub counts: bool,
    /// The counter went up by more than one: a counter shared by several streams does that,
    /// so the shape still orders ids, but ids between may have gone elsewhere. A counter
    /// that stays or goes down contradicts the shape.
    pub skips: bool,
}

/// Compares two consecutive ids of one stream. They speak of a shape only when they differ in
/// exactly one digit run (same text before and after it); the pair then supports that shape
/// when the run counts up by one, skips when it goes up by more, and contradicts it
/// otherwise. Equal ids, ids that differ
/// elsewhere, and pure integers (already comparable) say nothing.
pub fn observe_pair<'a>(prev: &'a str, next: &str) -> Option<PairObs<'a>> {
    if prev == next || DecimalId::parse(prev).is_some() && DecimalId::parse(next).is_some() {
        return None;
    }
    for k in 0..MAX_RUN_FROM_END {
        let (Some(a), Some(b)) = (split_at_run(prev, k), split_at_run(next, k)) else {
            return None;
        };
        if a.prefix == b.prefix && a.suffix == b.suffix {
            return Some(PairObs {
                k: k as u8,
                prefix: a.prefix,
                suffix: a.suffix,
                counts: is_successor(a.seq, b.seq),
                skips: !is_successor(a.seq, b.seq)
                    && cmp_decimal(a.seq, b.seq) == Some(Ordering::Less),
            });
        }
    }
    None
}

/// `next == prev + 1` as decimals of any length.
pub fn is_successor(prev: &str, next: &str) -> bool {
    // The common case without allocating: both fit in 64 bits.
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit()) && !s.is_empty();
    if digits(prev) && digits(next) {
        let (p, n) = (prev.trim_start_matches('0'), next.trim_start_matches('0'));
        if p.len() <= 19 && n.len() <= 19 {
            let value = |s: &str| {
                if s.is_empty() {
                    Some(0)
                } else {
                    s.parse::<u64>().ok()
                }
            };
            if let (Some(p), Some(n)) = (value(p), value(n)) {
                return p.checked_add(1) == Some(n);
            }
        }
    }
    matches!(
        crate::audit::verdict::compare_ids(prev, next),
        Some(crate::audit::verdict::IdOrder::Next)
    )
}

/// Order of two decimals of any length; `None` when either is not one.
pub fn cmp_decimal(a: &str, b: &str) -> Option<Ordering> {
    Some(DecimalId::parse(a)?.cmp_value(&DecimalId::parse(b)?))
}

/// A user's description of the ids (`--id-pattern`): a regular expression that must match a
/// whole id, with a named group `seq` (the counter) and optionally `stream` (what names the
/// stream). With `stream`, two ids compare only when their streams are equal; without it, any
/// two ids the pattern matches compare (the user says they share one counter).
#[derive(Clone, Debug)]
pub struct IdPattern {
    source: String,
    re: Regex,
    has_stream: bool,
}

/// Why a `--id-pattern` cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PatternError {
    #[error("--id-pattern: not a valid regular expression: {0}")]
    Syntax(String),
    #[error(
        "--id-pattern: the pattern needs a named group `seq` for the counter, e.g. (?P<seq>\\d+)"
    )]
    NoSeq,
}

impl IdPattern {
    /// Compiles a user's pattern, which must match a whole id and name a group `seq`.
    pub fn new(pattern: &str) -> Result<Self, PatternError> {
        let re = Regex::new(&format!("^(?:{pattern})$"))
            .map_err(|e| PatternError::Syntax(e.to_string()))?;
        let names: Vec<&str> = re.capture_names().flatten().collect();
        if !names.contains(&"seq") {
            return Err(PatternError::NoSeq);
        }
        Ok(IdPattern {
            has_stream: names.contains(&"stream"),
            source: pattern.to_string(),
            re,
        })
    }

    /// The pattern as the user gave it.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The counter and the stream of `id`, when the pattern matches it and `seq` is a
    /// decimal (the stream is empty when the pattern has no `stream` group).
    pub fn parse<'a>(&self, id: &'a str) -> Option<(&'a str, &'a str)> {
        let caps = self.re.captures(id)?;
        let seq = caps.name("seq")?;
        DecimalId::parse(seq.as_str())?;
        let stream = if self.has_stream {
            caps.name("stream").map_or("", |m| m.as_str())
        } else {
            ""
        };
        Some((seq.as_str(), stream))
    }

    /// The counters of two ids of one stream, when both match and name the same stream.
    pub fn pair<'a>(&self, last: &'a str, first: &'a str) -> Option<(&'a str, &'a str)> {
        let (a, ka) = self.parse(last)?;
        let (b, kb) = self.parse(first)?;
        (ka == kb).then_some((a, b))
    }
}

fn escape_braces(s: &str) -> String {
    s.replace('{', "{{").replace('}', "}}")
}

fn common_prefix_len<'a>(items: impl Iterator<Item = &'a str> + Clone) -> usize {
    let mut it = items.clone();
    let Some(first) = it.next() else { return 0 };
    let mut n = first.len();
    for s in it {
        n = n.min(
            first
                .bytes()
                .zip(s.bytes())
                .take_while(|(a, b)| a == b)
                .count(),
        );
    }
    while !first.is_char_boundary(n) {
        n -= 1;
    }
    n
}

fn common_suffix_len<'a>(items: impl Iterator<Item = &'a str> + Clone) -> usize {
    let mut it = items.clone();
    let Some(first) = it.next() else { return 0 };
    let mut n = first.len();
    for s in it {
        n = n.min(
            first
                .bytes()
                .rev()
                .zip(s.bytes().rev())
                .take_while(|(a, b)| a == b)
                .count(),
        );
    }
    while !first.is_char_boundary(first.len() - n) {
        n -= 1;
    }
    n
}

/// One side (before or after the counter) of a shape, from the texts seen on every stream:
/// literal when they agree, else `{stream}` between what they share.
fn display_part(parts: &[&str]) -> String {
    let Some(first) = parts.first() else {
        return String::new();
    };
    if parts.iter().all(|p| p == first) {
        return escape_braces(first);
    }
    let pre = common_prefix_len(parts.iter().copied());
    let rests: Vec<&str> = parts.iter().map(|p| p.get(pre..).unwrap_or("")).collect();
    let suf = common_suffix_len(rests.iter().copied());
    let head = first.get(..pre).unwrap_or("");
    let r0 = rests.first().copied().unwrap_or("");
    let tail = r0.get(r0.len() - suf..).unwrap_or("");
    format!("{}{{stream}}{}", escape_braces(head), escape_braces(tail))
}

/// The display form of a shape, from the (prefix, suffix) of every stream that showed it:
/// e.g. `{stream}_{seq}`, `event-{seq}`, `{seq}/{stream}`.
pub fn display_shape(families: &[(&str, &str)]) -> String {
    let prefixes: Vec<&str> = families.iter().map(|f| f.0).collect();
    let suffixes: Vec<&str> = families.iter().map(|f| f.1).collect();
    format!(
        "{}{{seq}}{}",
        display_part(&prefixes),
        display_part(&suffixes)
    )
}

/// Hash and byte length of the part of an id that names its namespace: the id without its
/// digits, computed without building it (this runs for every event id). Per-session counters
/// (`7`, `event-7`, `7/3`) leave little or nothing; random stream ids and uuids leave most of
/// their letters. Equal keys give equal hashes however the digits split them.
pub fn namespace_key_hash(id: &[u8]) -> (u64, usize) {
    // FNV-1a over the bytes that are not digits: ids are short, and this needs no buffer.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut n = 0;
    for &b in id.iter().filter(|b| !b.is_ascii_digit()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        n += 1;
    }
    (h, n)
}

/// Bytes of the namespace key an id needs before its reappearance in another session can be
/// taken as proof: shorter keys are shared by design (`event-`, `/`, nothing at all).
pub const MIN_DISTINCTIVE_KEY: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_count_runs_from_the_end() {
        let s = split_at_run("ab12_cd_345", 0).unwrap();
        assert_eq!((s.prefix, s.seq, s.suffix), ("ab12_cd_", "345", ""));
        let s = split_at_run("ab12_cd_345", 1).unwrap();
        assert_eq!((s.prefix, s.seq, s.suffix), ("ab", "12", "_cd_345"));
        assert_eq!(split_at_run("ab12_cd_345", 2), None);
        assert_eq!(split_at_run("none", 0), None);
        let s = split_at_run("7/3", 1).unwrap();
        assert_eq!((s.prefix, s.seq, s.suffix), ("", "7", "/3"));
    }

    #[test]
    fn pairs_that_count_support_and_others_contradict() {
        let o = observe_pair("S9x_4", "S9x_5").unwrap();
        assert_eq!((o.k, o.prefix, o.suffix, o.counts), (0, "S9x_", "", true));
        let o = observe_pair("event-9", "event-10").unwrap();
        assert!(o.counts);
        let o = observe_pair("event-09", "event-10").unwrap();
        assert!(o.counts, "leading zeros do not change the value");
        let o = observe_pair("7/3", "8/3").unwrap();
        assert_eq!((o.k, o.prefix, o.suffix, o.counts), (1, "", "/3", true));
        let o = observe_pair("s_4", "s_6").unwrap();
        assert!(!o.counts);
        let o = observe_pair("s_4", "s_3").unwrap();
        assert!(!o.counts);
        // Say nothing: equal, pure integers, differ outside one run, different run counts.
        assert_eq!(observe_pair("s_4", "s_4"), None);
        assert_eq!(observe_pair("4", "5"), None);
        assert_eq!(observe_pair("a_1_x9", "a_2_y9"), None);
        assert_eq!(observe_pair("a_1", "a_1_2"), None);
        assert_eq!(
            observe_pair(
                "3f2a9c1e-5b7d-4e2a-9f1c-0d8e7b6a5c4d",
                "8e1d2c3b-4a5f-4e6d-8c7b-9a0f1e2d3c4b"
            ),
            None
        );
        // TypeScript SDK style: timestamp and random part both change.
        assert_eq!(
            observe_pair("sA_1732000000123_k2m9x", "sA_1732000000187_p0q3z"),
            None
        );
    }

    #[test]
    fn user_patterns_need_seq_and_compare_within_one_stream() {
        assert_eq!(IdPattern::new("ev-\\d+").unwrap_err(), PatternError::NoSeq);
        assert!(matches!(
            IdPattern::new("(?P<seq>").unwrap_err(),
            PatternError::Syntax(_)
        ));
        let p = IdPattern::new(r"(?P<stream>[a-z]+)-(?P<seq>\d+)").unwrap();
        assert_eq!(p.pair("abc-4", "abc-5"), Some(("4", "5")));
        assert_eq!(p.pair("abc-4", "xyz-5"), None);
        assert_eq!(p.pair("abc-4", "abc-5x"), None, "whole id must match");
        let p = IdPattern::new(r"e(?P<seq>\d+)\.(?:[0-9a-f]+)").unwrap();
        assert_eq!(p.pair("e4.ff", "e5.ff"), Some(("4", "5")));
        assert_eq!(
            p.pair("e4.ff", "e5.0e"),
            Some(("4", "5")),
            "no stream: one counter"
        );
        assert_eq!(p.pair("e4.ff", "x5.0e"), None);
        let p = IdPattern::new(r"(?P<seq>[0-9a-z]+)").unwrap();
        assert_eq!(p.pair("12", "1a"), None, "seq must be decimal");
    }

    #[test]
    fn shapes_display_literal_or_stream_parts() {
        assert_eq!(display_shape(&[("event-", "")]), "event-{seq}");
        assert_eq!(
            display_shape(&[("K7QX2M_", ""), ("ZP3W9A_", "")]),
            "{stream}_{seq}"
        );
        assert_eq!(display_shape(&[("", "/3"), ("", "/7")]), "{seq}/{stream}");
        assert_eq!(
            display_shape(&[("s1_", ""), ("s2_", "")]),
            "s{stream}_{seq}"
        );
        assert_eq!(display_shape(&[("{x}", "")]), "{{x}}{seq}");
        assert_eq!(
            display_shape(&[("é1_", ""), ("é2_", "")]),
            "é{stream}_{seq}"
        );
        assert_eq!(display_shape(&[("aé", ""), ("bé", "")]), "{stream}é{seq}");
    }

    #[test]
    fn successors_of_any_length() {
        for (a, b, want) in [
            ("9", "10", true),
            ("0009", "10", true),
            ("0", "1", true),
            ("1", "1", false),
            ("2", "1", false),
            ("18446744073709551615", "18446744073709551616", true),
            ("9999999999999999999", "10000000000000000000", true),
            ("99999999999999999999999", "100000000000000000000000", true),
            ("x", "1", false),
        ] {
            assert_eq!(is_successor(a, b), want, "{a} {b}");
        }
    }

    fn namespace_key(id: &str) -> String {
        id.chars().filter(|c| !c.is_ascii_digit()).collect()
    }

    #[test]
    fn namespace_keys() {
        assert_eq!(namespace_key("event-17"), "event-");
        assert_eq!(namespace_key("17/3"), "/");
        assert_eq!(namespace_key("K7QX2M_5"), "KQXM_");
        assert_eq!(namespace_key_hash(b"ab1c22d"), namespace_key_hash(b"abcd"));
        assert_eq!(namespace_key_hash(b"ab1c22d").1, 4);
        assert_ne!(namespace_key_hash(b"ab1c"), namespace_key_hash(b"ab1d"));
    }
}
