//! Verdicts: pure decisions over plain values.
//!
//! Input: what the client sent (`Last-Event-ID`) and what the capture shows came back
//! ([`ResponseFacts`]).
//! Output: a [`Decision`]: the verdict, why, and for numeric ids the lost range.
//! Invariants: when both ids are integers the seed's boundary holds exactly — first == last + 1
//! is `correct`, first > last + 1 `gap_skipped`, first <= last `replayed` — for integers of any
//! length (compared as decimal strings, never parsed into a fixed width); a capture that lacks
//! the bytes to decide gives `capture_incomplete`, never a verdict against the server.

use std::cmp::Ordering;

/// What the analysis concludes about one resume.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The resumed stream began with the event after `Last-Event-ID`.
    Correct,
    /// The resumed stream began past the event after `Last-Event-ID`: events were lost.
    GapSkipped,
    /// The resumed stream began at or before `Last-Event-ID`: events were sent again.
    Replayed,
    /// The server refused the resume (an error status, or no event stream).
    Rejected,
    /// The resumed stream ended without an event id.
    Empty,
    /// The ids cannot be compared (opaque ids whose shape cannot be learned).
    Unverifiable,
    /// The capture lacks the bytes that would decide.
    CaptureIncomplete,
}

impl Verdict {
    /// Every verdict, in report order.
    pub const ALL: [Verdict; 7] = [
        Verdict::Correct,
        Verdict::GapSkipped,
        Verdict::Replayed,
        Verdict::Rejected,
        Verdict::Empty,
        Verdict::Unverifiable,
        Verdict::CaptureIncomplete,
    ];

    /// The name the report gives the verdict.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Correct => "correct",
            Verdict::GapSkipped => "gap_skipped",
            Verdict::Replayed => "replayed",
            Verdict::Rejected => "rejected",
            Verdict::Empty => "empty",
            Verdict::Unverifiable => "unverifiable",
            Verdict::CaptureIncomplete => "capture_incomplete",
        }
    }

    /// The server did something the client cannot safely continue from, silently.
    pub fn is_finding(self) -> bool {
        self != Verdict::Correct
    }
}

/// A non-negative integer written in decimal, of any length: ASCII digits only, leading zeros
/// allowed (they do not change the value). Signs, spaces and anything else make an id opaque.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecimalId<'a> {
    /// The digits without leading zeros ("" for zero).
    digits: &'a str,
}

impl<'a> DecimalId<'a> {
    /// `s` as a decimal, when it is one.
    pub fn parse(s: &'a str) -> Option<Self> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(DecimalId {
            digits: s.trim_start_matches('0'),
        })
    }

    /// Numeric order of two decimal ids.
    pub fn cmp_value(&self, other: &DecimalId<'_>) -> Ordering {
        self.digits
            .len()
            .cmp(&other.digits.len())
            .then_with(|| self.digits.cmp(other.digits))
    }

    /// The value as u128 when it fits.
    pub fn to_u128(&self) -> Option<u128> {
        if self.digits.is_empty() {
            return Some(0);
        }
        self.digits.parse().ok()
    }
}

/// Decimal string arithmetic on normalized digits (no leading zeros; "" is zero).
fn dec_add_one(digits: &str) -> String {
    let mut out: Vec<u8> = digits.bytes().collect();
    let mut i = out.len();
    loop {
        if i == 0 {
            out.insert(0, b'1');
            break;
        }
        i -= 1;
        if out[i] == b'9' {
            out[i] = b'0';
        } else {
            out[i] += 1;
            break;
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

/// `a - 1` for a > 0.
fn dec_sub_one(digits: &str) -> String {
    let mut out: Vec<u8> = digits.bytes().collect();
    let mut i = out.len();
    while i > 0 {
        i -= 1;
        if out[i] == b'0' {
            out[i] = b'9';
        } else {
            out[i] -= 1;
            break;
        }
    }
    let s = String::from_utf8(out).unwrap_or_default();
    let t = s.trim_start_matches('0');
    if t.is_empty() { "0".into() } else { t.into() }
}

fn show(digits: &str) -> String {
    if digits.is_empty() {
        "0".into()
    } else {
        digits.into()
    }
}

/// Events the server lost between the id the client had and the id it resumed at.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LostRange {
    /// First lost id (last + 1), in decimal.
    pub from: String,
    /// Last lost id (first - 1), in decimal.
    pub to: String,
    /// How many ids, when the count fits in 64 bits.
    pub count: Option<u64>,
}

/// The comparison of two integer ids by the seed's boundary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdOrder {
    /// first == last + 1
    Next,
    /// first > last + 1
    Skipped(LostRange),
    /// first <= last; `count` is last - first + 1 (ids sent again, at least) when it fits.
    Repeated {
        /// last - first + 1, when it fits in 64 bits.
        count: Option<u64>,
    },
}

/// Applies the seed's decision boundary when both ids are integers; `None` otherwise.
pub fn compare_ids(last_event_id: &str, first_event_id: &str) -> Option<IdOrder> {
    let last = DecimalId::parse(last_event_id)?;
    let first = DecimalId::parse(first_event_id)?;
    let next = dec_add_one(last.digits);
    let next = DecimalId { digits: &next };
    Some(match first.cmp_value(&next) {
        Ordering::Equal => IdOrder::Next,
        Ordering::Greater => {
            let to = dec_sub_one(first.digits);
            let count = match (first.to_u128(), last.to_u128()) {
                (Some(f), Some(l)) => u64::try_from(f - l - 1).ok(),
                _ => None,
            };
            IdOrder::Skipped(LostRange {
                from: show(next.digits),
                to,
                count,
            })
        }
        Ordering::Less => {
            let count = match (first.to_u128(), last.to_u128()) {
                // l = u128::MAX and f = 0 would overflow the + 1.
                (Some(f), Some(l)) => (l - f).checked_add(1).and_then(|n| u64::try_from(n).ok()),
                _ => None,
            };
            IdOrder::Repeated { count }
        }
    })
}

/// How the body of the answer ended, as far as the capture shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamOutcome {
    /// Framing ended it, or the server closed (FIN or RST seen).
    EndedOnWire,
    /// The client reset the connection before the body ended: the server may have had more.
    ClientAborted,
    /// Still open when the capture ended, or no longer followed (limits).
    NotSeenToEnd,
    /// Bytes were missing and framing was lost.
    LostSync,
    /// The body could not be decoded (bad framing or an unsupported content encoding).
    Undecodable,
}

/// Why no answer head is in the capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoAnswer {
    /// The server's side ended with FIN or RST, with no bytes missing: there was no answer.
    ServerClosed,
    /// The client reset the connection first: the server may still have been about to answer.
    ClientAborted,
    /// The capture does not show how the server's side ended, or bytes of it are missing.
    NotCaptured,
}

/// What the capture shows of the answer to a resume request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseFacts<'a> {
    /// No response head in the capture; `NoAnswer` says what the capture shows instead.
    Missing(NoAnswer),
    /// A response head was captured.
    Answered {
        /// Its status code.
        status: u16,
        /// Its media type is `text/event-stream`.
        event_stream: bool,
        /// The first `id:` field of the stream, exactly as received.
        first_id: Option<&'a str>,
        /// Bytes of the body were missing before the first id (or before the end, if none).
        gap_before_first_id: bool,
        /// How the body ended; `None` while it was still being received at capture end.
        outcome: Option<StreamOutcome>,
    },
}

/// A verdict with its reason and, for gap_skipped, the lost range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The verdict.
    pub verdict: Verdict,
    /// Why, in one sentence.
    pub reason: &'static str,
    /// For `gap_skipped`: the ids lost.
    pub lost: Option<Box<LostRange>>,
    /// For `replayed`: how many ids were sent again, when known.
    pub replayed_count: Option<u64>,
}

impl Decision {
    fn of(verdict: Verdict, reason: &'static str) -> Self {
        Decision {
            verdict,
            reason,
            lost: None,
            replayed_count: None,
        }
    }
}

/// A bound of the analysis (`record::Limits`, set by a command-line flag) whose crossing left
/// part of a connection unread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitHit {
    /// The connection was evicted to keep the flow table within `--max-connections`.
    Connections,
    /// Out-of-order bytes beyond `--max-out-of-order` were given up as a gap.
    OutOfOrder,
    /// A message head after the request was longer than `--max-header-bytes`.
    HeadBytes,
    /// The first event id was longer than `--max-sse-field` and was cut.
    SseField,
}

impl LimitHit {
    /// Why the resume could not be decided, naming the flag to raise.
    pub fn reason(self) -> &'static str {
        match self {
            LimitHit::Connections => {
                "the connection was evicted to stay within --max-connections before the resume \
                 could be decided"
            }
            LimitHit::OutOfOrder => {
                "bytes of the connection were given up as a gap once --max-out-of-order was \
                 exceeded, before the resume could be decided"
            }
            LimitHit::HeadBytes => {
                "a message head after the request was too large to read (--max-header-bytes, or \
                 more header lines than are parsed), so the answer may be in it"
            }
            LimitHit::SseField => {
                "the first event id is longer than --max-sse-field and was cut, so it cannot be \
                 compared"
            }
        }
    }
}

impl Decision {
    /// The analysis, not the capture or the server, lacks what was needed: the resume is
    /// `capture_incomplete`, and the reason names the limit so that it can be raised.
    pub fn blame_limit(&mut self, limit: LimitHit) {
        *self = Decision::of(Verdict::CaptureIncomplete, limit.reason());
    }
}

/// Decides one resume.
pub fn decide(last_event_id: &str, response: ResponseFacts<'_>) -> Decision {
    use Verdict::*;
    let (status, event_stream, first_id, gap_before_first_id, outcome) = match response {
        ResponseFacts::Missing(NoAnswer::ServerClosed) => {
            return Decision::of(
                Rejected,
                "the server closed the connection without an answer",
            );
        }
        ResponseFacts::Missing(NoAnswer::ClientAborted) => {
            return Decision::of(
                Unverifiable,
                "the client reset the connection before any answer arrived",
            );
        }
        ResponseFacts::Missing(NoAnswer::NotCaptured) => {
            return Decision::of(
                CaptureIncomplete,
                "the capture holds no answer to the resume",
            );
        }
        ResponseFacts::Answered {
            status,
            event_stream,
            first_id,
            gap_before_first_id,
            outcome,
        } => (status, event_stream, first_id, gap_before_first_id, outcome),
    };
    if (100..200).contains(&status) {
        // A 101 (or any 1xx that got this far) is no refusal: the server switched to a
        // protocol whose answer is not read here.
        return Decision::of(
            Unverifiable,
            "the server switched protocols (1xx): its answer is not HTTP this tool reads",
        );
    }
    if !(200..300).contains(&status) {
        return Decision::of(
            Rejected,
            "the server refused the resume with a non-2xx status",
        );
    }
    if !event_stream {
        return Decision::of(
            Unverifiable,
            "the 2xx answer is not a text/event-stream, so it carries no event ids",
        );
    }
    if gap_before_first_id {
        return Decision::of(
            CaptureIncomplete,
            "bytes of the stream are missing from the capture before its first id",
        );
    }
    let Some(first_id) = first_id else {
        return match outcome {
            Some(StreamOutcome::EndedOnWire) => {
                Decision::of(Empty, "the stream ended without delivering any event id")
            }
            Some(StreamOutcome::ClientAborted) => Decision::of(
                Unverifiable,
                "the client reset the connection before the stream delivered any event id",
            ),
            Some(StreamOutcome::LostSync) => Decision::of(
                CaptureIncomplete,
                "bytes of the stream are missing from the capture before its first id",
            ),
            Some(StreamOutcome::Undecodable) => Decision::of(
                Unverifiable,
                "the stream could not be decoded before its first id",
            ),
            Some(StreamOutcome::NotSeenToEnd) | None => Decision::of(
                CaptureIncomplete,
                "the capture ends before the stream delivered any event id",
            ),
        };
    };
    match compare_ids(last_event_id, first_id) {
        Some(IdOrder::Next) => {
            Decision::of(Correct, "the stream resumed at the id after Last-Event-ID")
        }
        Some(IdOrder::Skipped(lost)) => Decision {
            lost: Some(Box::new(lost)),
            ..Decision::of(
                GapSkipped,
                "the stream resumed past the id after Last-Event-ID: the ids between were lost",
            )
        },
        Some(IdOrder::Repeated { count }) => Decision {
            replayed_count: count,
            ..Decision::of(
                Replayed,
                "the stream resumed at or before Last-Event-ID: events were sent again",
            )
        },
        None => Decision::of(
            Unverifiable,
            "the event ids are not integers, so their order cannot be compared",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(first: Option<&str>) -> ResponseFacts<'_> {
        ResponseFacts::Answered {
            status: 200,
            event_stream: true,
            first_id: first,
            gap_before_first_id: false,
            outcome: Some(StreamOutcome::EndedOnWire),
        }
    }

    fn verdict(last: &str, first: &str) -> Verdict {
        decide(last, answered(Some(first))).verdict
    }

    #[test]
    fn seed_boundary_on_small_integers_exhaustively() {
        for last in 0u64..60 {
            for first in 0u64..60 {
                let want = if first == last + 1 {
                    Verdict::Correct
                } else if first > last + 1 {
                    Verdict::GapSkipped
                } else {
                    Verdict::Replayed
                };
                assert_eq!(
                    verdict(&last.to_string(), &first.to_string()),
                    want,
                    "{last} {first}"
                );
            }
        }
    }

    #[test]
    fn seed_example_values() {
        let d = decide("4417", answered(Some("0")));
        assert_eq!(d.verdict, Verdict::Replayed);
        assert_eq!(d.replayed_count, Some(4418));
        let d = decide("4417", answered(Some("4418")));
        assert_eq!(d.verdict, Verdict::Correct);
        let d = decide("4417", answered(Some("3900")));
        assert_eq!(d.verdict, Verdict::Replayed);
        assert_eq!(d.replayed_count, Some(518));
        let d = decide("3900", answered(Some("4418")));
        assert_eq!(d.verdict, Verdict::GapSkipped);
        assert_eq!(
            d.lost,
            Some(Box::new(LostRange {
                from: "3901".into(),
                to: "4417".into(),
                count: Some(517)
            }))
        );
    }

    #[test]
    fn integers_beyond_u64_and_leading_zeros() {
        let max = u64::MAX.to_string();
        let above = "18446744073709551616"; // u64::MAX + 1
        assert_eq!(verdict(&max, above), Verdict::Correct);
        assert_eq!(verdict(&max, &max), Verdict::Replayed);
        assert_eq!(
            verdict(
                "99999999999999999999999999999999999999999",
                "100000000000000000000000000000000000000000"
            ),
            Verdict::Correct
        );
        assert_eq!(verdict("0007", "8"), Verdict::Correct);
        assert_eq!(verdict("7", "0008"), Verdict::Correct);
        assert_eq!(verdict("0", "00"), Verdict::Replayed);
        assert_eq!(verdict("9", "10"), Verdict::Correct);
        assert_eq!(verdict("9", "11"), Verdict::GapSkipped);
        let d = decide(
            "0",
            answered(Some("400000000000000000000000000000000000000000")),
        );
        assert_eq!(d.verdict, Verdict::GapSkipped);
        assert_eq!(d.lost.as_ref().unwrap().count, None);
        assert_eq!(
            d.lost.unwrap().to,
            "399999999999999999999999999999999999999999"
        );
    }

    #[test]
    fn non_integers_are_unverifiable() {
        for (last, first) in [
            ("-1", "0"),
            ("+1", "2"),
            (" 1", "2"),
            ("1 ", "2"),
            ("1", "2\t"),
            ("", "1"),
            ("1", ""),
            ("0x10", "17"),
            ("1.0", "2"),
            ("s_1", "s_2"),
            ("١", "٢"),
        ] {
            assert_eq!(
                verdict(last, first),
                Verdict::Unverifiable,
                "{last:?} {first:?}"
            );
        }
    }

    #[test]
    fn the_capture_is_never_blamed_on_the_server() {
        let gap = ResponseFacts::Answered {
            status: 200,
            event_stream: true,
            first_id: Some("0"),
            gap_before_first_id: true,
            outcome: Some(StreamOutcome::EndedOnWire),
        };
        assert_eq!(decide("10", gap).verdict, Verdict::CaptureIncomplete);
        for outcome in [
            None,
            Some(StreamOutcome::NotSeenToEnd),
            Some(StreamOutcome::LostSync),
        ] {
            let open = ResponseFacts::Answered {
                status: 200,
                event_stream: true,
                first_id: None,
                gap_before_first_id: false,
                outcome,
            };
            assert_eq!(decide("10", open).verdict, Verdict::CaptureIncomplete);
        }
        let missing = ResponseFacts::Missing(NoAnswer::NotCaptured);
        assert_eq!(decide("10", missing).verdict, Verdict::CaptureIncomplete);
    }

    #[test]
    fn refusals_and_empty_streams() {
        for status in [400, 404, 405, 500, 503] {
            let r = ResponseFacts::Answered {
                status,
                event_stream: false,
                first_id: None,
                gap_before_first_id: false,
                outcome: Some(StreamOutcome::EndedOnWire),
            };
            assert_eq!(decide("1", r).verdict, Verdict::Rejected);
        }
        // Switching protocols is not a refusal.
        for status in [101, 199] {
            let r = ResponseFacts::Answered {
                status,
                event_stream: false,
                first_id: None,
                gap_before_first_id: false,
                outcome: Some(StreamOutcome::EndedOnWire),
            };
            assert_eq!(decide("1", r).verdict, Verdict::Unverifiable);
        }
        assert_eq!(decide("1", answered(None)).verdict, Verdict::Empty);
        // A client that hung up first proves nothing about what the server would have sent.
        let aborted = ResponseFacts::Answered {
            status: 200,
            event_stream: true,
            first_id: None,
            gap_before_first_id: false,
            outcome: Some(StreamOutcome::ClientAborted),
        };
        assert_eq!(decide("1", aborted).verdict, Verdict::Unverifiable);
        let json = ResponseFacts::Answered {
            status: 200,
            event_stream: false,
            first_id: None,
            gap_before_first_id: false,
            outcome: Some(StreamOutcome::EndedOnWire),
        };
        assert_eq!(decide("1", json).verdict, Verdict::Unverifiable);
        let closed = ResponseFacts::Missing(NoAnswer::ServerClosed);
        assert_eq!(decide("1", closed).verdict, Verdict::Rejected);
        let aborted = ResponseFacts::Missing(NoAnswer::ClientAborted);
        assert_eq!(decide("1", aborted).verdict, Verdict::Unverifiable);
    }
}
