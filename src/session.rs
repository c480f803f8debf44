//! Sessions and resumes: what each exchange of a connection sent and got back.
//!
//! Input: the HTTP exchanges of one connection (as an [`HttpSink`]), with the bodies of
//! `text/event-stream` answers run through the SSE parser.
//! Output: one [`ResumeRecord`] per request that carried `Last-Event-ID`, decided by
//! [`crate::verdict::decide`], and the set of `Mcp-Session-Id` values seen.
//! Invariants: per exchange only derived facts are kept (first id, counters, marks), never a
//! body; state lives only while its exchange is open, so it grows with open exchanges.

use std::collections::{BTreeSet, HashMap};

use crate::decode::Endpoint;
use crate::record::{
    Anomaly, BodyEnd, HttpSink, Limits, Mark, RequestHead, ResponseHead, StreamEnd,
};
use crate::sse::SseParser;
use crate::verdict::{
    self, DecimalId, Decision, LimitHit, NoAnswer, ResponseFacts, StreamOutcome, Verdict,
};

/// Where an exchange happened, as the report cites it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionRef {
    /// Wireshark's `tcp.stream` index for captures; for HAR input, unused (`None`).
    pub tcp_stream: Option<u64>,
    pub client: Option<Endpoint>,
    pub server: Option<Endpoint>,
    /// For HAR input: the 0-based index of the entry in the file, as it appears there. Marks
    /// of HAR records carry this index as their `frame`.
    pub har_entry: Option<u64>,
}

/// One resume: a request carrying `Last-Event-ID`, what came back, and the verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResumeRecord {
    pub session_id: Option<String>,
    pub decision: Decision,
    pub last_event_id: String,
    pub first_event_id: Option<String>,
    /// For `capture_incomplete` after missing bytes: the first id the capture holds after them.
    pub first_id_after_gap: Option<String>,
    /// The first id was longer than the field limit and is cut.
    pub first_event_id_truncated: bool,
    pub method: String,
    pub target: String,
    pub protocol_version: Option<String>,
    pub request: Mark,
    pub status: Option<u16>,
    pub content_type: Option<String>,
    pub response: Option<Mark>,
    pub first_event: Option<Mark>,
    /// Events (blocks with fields) seen on the stream before the first one carrying an id.
    pub events_before_first_id: u64,
    /// Events seen on the stream in all.
    pub stream_events: u64,
    /// Events of the stream whose integer id is at or below the integer `Last-Event-ID`:
    /// deliveries seen repeated (counted over the whole stream as captured).
    pub resent_ids: u64,
    /// How the answer's body ended (`None`: still open at capture end, or no answer).
    pub stream_end: Option<BodyEnd>,
    /// The last frame that belongs to the proof (first event, else the end of the answer).
    pub last_proof: Mark,
    pub connection: ConnectionRef,
}

/// Facts gathered from one answer's event stream.
#[derive(Debug)]
struct StreamFacts {
    parser: Option<SseParser>,
    first_id: Option<(String, bool, Mark)>,
    events_before_first_id: u64,
    events: u64,
    /// Integer ids at or below the integer `Last-Event-ID`: events seen delivered again.
    resent_ids: u64,
    last_event_id: String,
    gap_before_first_id: bool,
}

struct OpenExchange {
    request: Option<RequestHead>,
    response: Option<ResponseHead>,
    stream: Option<StreamFacts>,
    end: Option<(BodyEnd, Mark)>,
}

/// Collects one connection's exchanges (implements [`HttpSink`]).
pub struct ExchangeTracker {
    limits: Limits,
    open: HashMap<u32, OpenExchange>,
    /// Decided resumes, in the order they were decided; the connection fills in endpoints.
    pub resumes: Vec<ResumeRecord>,
    pub session_ids: BTreeSet<String>,
    pub anomalies: Vec<(Anomaly, Mark)>,
    /// Exchanges (requests or responses) seen.
    pub exchanges: u64,
    /// The connection was evicted (`Limits::max_connections`) while exchanges were open.
    evicted: bool,
    /// The last message head dropped for exceeding `Limits::max_header_bytes`.
    head_too_large: Option<Mark>,
}

/// Anomalies kept per connection for the report; further ones are only counted.
const MAX_ANOMALIES_KEPT: usize = 64;

impl ExchangeTracker {
    pub fn new(limits: &Limits) -> Self {
        ExchangeTracker {
            limits: limits.clone(),
            open: HashMap::new(),
            resumes: Vec::new(),
            session_ids: BTreeSet::new(),
            anomalies: Vec::new(),
            exchanges: 0,
            evicted: false,
            head_too_large: None,
        }
    }

    fn entry(&mut self, exchange: u32) -> &mut OpenExchange {
        self.open.entry(exchange).or_insert_with(|| OpenExchange {
            request: None,
            response: None,
            stream: None,
            end: None,
        })
    }

    /// Decides what is still open: called when the connection is over. `server_end` says how
    /// the server's side ended (`None` when unknown), and whether bytes were missing from it.
    pub fn finish(&mut self, server_end: Option<StreamEnd>, server_gaps: bool, mark: Mark) {
        let mut ids: Vec<u32> = self.open.keys().copied().collect();
        ids.sort_unstable();
        self.evicted = server_end == Some(StreamEnd::Evicted);
        for id in ids {
            if let Some(mut ex) = self.open.remove(&id) {
                self.finish_stream(&mut ex, mark);
                let no_answer = match server_end {
                    _ if server_gaps => NoAnswer::NotCaptured,
                    Some(StreamEnd::Fin | StreamEnd::Rst) => NoAnswer::ServerClosed,
                    Some(StreamEnd::PeerRst) => NoAnswer::ClientAborted,
                    _ => NoAnswer::NotCaptured,
                };
                self.decide(ex, no_answer, mark);
            }
        }
    }

    fn decide(&mut self, ex: OpenExchange, no_answer: NoAnswer, mark: Mark) {
        let Some(request) = ex.request else { return };
        let Some(last_event_id) = request.last_event_id.clone() else {
            return;
        };
        let session_id = request
            .session_id
            .clone()
            .or_else(|| ex.response.as_ref().and_then(|r| r.session_id.clone()));
        let stream_end = ex.end.map(|(how, _)| how);
        let facts = match &ex.response {
            None => ResponseFacts::Missing(no_answer),
            Some(resp) => {
                let stream = ex.stream.as_ref();
                ResponseFacts::Answered {
                    status: resp.status,
                    event_stream: resp.is_event_stream(),
                    first_id: stream.and_then(|s| s.first_id.as_ref().map(|f| f.0.as_str())),
                    gap_before_first_id: stream.is_some_and(|s| s.gap_before_first_id),
                    outcome: stream_end.map(outcome_of),
                }
            }
        };
        let mut decision = verdict::decide(&last_event_id, facts);
        let evicted = self.evicted
            || ex
                .end
                .is_some_and(|(how, _)| how == BodyEnd::Stream(StreamEnd::Evicted));
        if evicted && decision.verdict == Verdict::CaptureIncomplete {
            decision.blame_limit(LimitHit::Connections);
        }
        if ex.response.is_none()
            && self
                .head_too_large
                .is_some_and(|m| m.frame >= request.complete.frame)
        {
            // The answer may be the head that was dropped: no verdict against the server.
            decision.blame_limit(LimitHit::HeadBytes);
        }
        let (mut first_id, first_truncated, mut first_mark) =
            match ex.stream.as_ref().and_then(|s| s.first_id.clone()) {
                Some((id, truncated, m)) => (Some(id), truncated, Some(m)),
                None => (None, false, None),
            };
        // After missing bytes, the first id the capture holds need not be the stream's first:
        // it is kept apart so that nobody reads it as the server's resume point.
        let mut first_id_after_gap = None;
        if decision.verdict == Verdict::CaptureIncomplete {
            first_id_after_gap = first_id.take();
            first_mark = None;
        }
        if first_truncated && decision.verdict != Verdict::CaptureIncomplete {
            // A cut id cannot be compared honestly.
            decision.blame_limit(LimitHit::SseField);
        }
        let last_proof = first_mark
            .or(ex.end.map(|(_, m)| m))
            .or(ex.response.as_ref().map(|r| r.complete))
            .unwrap_or(
                if ex.response.is_none() && no_answer != NoAnswer::NotCaptured {
                    mark
                } else {
                    request.complete
                },
            );
        let stream = ex.stream.as_ref();
        self.resumes.push(ResumeRecord {
            session_id,
            decision,
            last_event_id,
            first_event_id: first_id,
            first_id_after_gap,
            first_event_id_truncated: first_truncated,
            method: request.method,
            target: request.target,
            protocol_version: request.protocol_version,
            request: request.first,
            status: ex.response.as_ref().map(|r| r.status),
            content_type: ex.response.as_ref().and_then(|r| r.content_type.clone()),
            response: ex.response.as_ref().map(|r| r.first),
            first_event: first_mark,
            events_before_first_id: stream.map_or(0, |s| s.events_before_first_id),
            stream_events: stream.map_or(0, |s| s.events),
            resent_ids: stream.map_or(0, |s| s.resent_ids),
            stream_end,
            last_proof,
            connection: ConnectionRef {
                tcp_stream: None,
                client: None,
                server: None,
                har_entry: None,
            },
        });
    }

    /// Ends the event stream of an exchange; ids or event types cut at the field limit are
    /// reported once per stream.
    fn finish_stream(&mut self, ex: &mut OpenExchange, mark: Mark) {
        if let Some(stream) = ex.stream.as_mut()
            && let Some(parser) = stream.parser.as_mut()
        {
            parser.finish(mark);
            if parser.fields_cut() > 0 {
                self.anomaly(Anomaly::SseFieldTooLong, mark);
            }
        }
    }

    fn note_session(&mut self, id: &Option<String>) {
        if let Some(id) = id
            && !self.session_ids.contains(id)
        {
            self.session_ids.insert(id.clone());
        }
    }
}

fn outcome_of(end: BodyEnd) -> StreamOutcome {
    match end {
        BodyEnd::Complete => StreamOutcome::EndedOnWire,
        BodyEnd::Stream(StreamEnd::PeerRst) => StreamOutcome::ClientAborted,
        BodyEnd::Stream(how) if how.seen_on_wire() => StreamOutcome::EndedOnWire,
        BodyEnd::Stream(_) => StreamOutcome::NotSeenToEnd,
        BodyEnd::LostSync => StreamOutcome::LostSync,
        BodyEnd::Malformed => StreamOutcome::Undecodable,
    }
}

impl HttpSink for ExchangeTracker {
    fn request(&mut self, head: RequestHead) {
        self.exchanges += 1;
        self.note_session(&head.session_id);
        let n = head.exchange;
        self.entry(n).request = Some(head);
    }

    fn response(&mut self, head: ResponseHead) {
        self.note_session(&head.session_id);
        let n = head.exchange;
        let limits = self.limits.clone();
        let ex = self.entry(n);
        if ex.request.is_none() {
            // The request was not captured: without it there is nothing to pair.
            self.exchanges += 1;
        }
        let ex = self.entry(n);
        // Exchanges that are not resumes need nothing more than their session id.
        let resumed_from = ex.request.as_ref().and_then(|r| r.last_event_id.clone());
        if let Some(last_event_id) = resumed_from
            && head.is_event_stream()
        {
            ex.stream = Some(StreamFacts {
                parser: Some(SseParser::new(&limits, 0)),
                first_id: None,
                events_before_first_id: 0,
                events: 0,
                resent_ids: 0,
                last_event_id,
                gap_before_first_id: false,
            });
        }
        ex.response = Some(head);
    }

    fn body(&mut self, exchange: u32, bytes: &[u8], mark: Mark) {
        let max_id = self.limits.max_sse_field_bytes;
        let Some(ex) = self.open.get_mut(&exchange) else {
            return;
        };
        let Some(stream) = ex.stream.as_mut() else {
            return;
        };
        let StreamFacts {
            parser,
            first_id,
            events_before_first_id,
            events,
            resent_ids,
            last_event_id,
            ..
        } = stream;
        let Some(parser) = parser.as_mut() else {
            return;
        };
        let last = DecimalId::parse(last_event_id);
        parser.feed(bytes, mark, |ev| {
            *events += 1;
            let Some(id) = ev.id else {
                if first_id.is_none() {
                    *events_before_first_id += 1;
                }
                return;
            };
            if let (Some(last), Some(id)) = (
                &last,
                std::str::from_utf8(id).ok().and_then(DecimalId::parse),
            ) && id.cmp_value(last).is_le()
            {
                *resent_ids += 1;
            }
            if first_id.is_none() {
                let text = String::from_utf8_lossy(id).into_owned();
                *first_id = Some((text, ev.id_truncated || id.len() > max_id, ev.mark));
            }
        });
    }

    fn body_gap(&mut self, exchange: u32, _len: u64, mark: Mark) {
        let Some(ex) = self.open.get_mut(&exchange) else {
            return;
        };
        let Some(stream) = ex.stream.as_mut() else {
            return;
        };
        if stream.first_id.is_none() {
            stream.gap_before_first_id = true;
        }
        if let Some(p) = stream.parser.as_mut() {
            p.gap(mark);
        }
    }

    fn body_end(&mut self, exchange: u32, how: BodyEnd, mark: Mark) {
        let Some(mut ex) = self.open.remove(&exchange) else {
            return;
        };
        self.finish_stream(&mut ex, mark);
        ex.end = Some((how, mark));
        self.decide(ex, NoAnswer::NotCaptured, mark);
    }

    fn anomaly(&mut self, what: Anomaly, mark: Mark) {
        if what == Anomaly::HeaderTooLarge {
            self.head_too_large = Some(mark);
        }
        if self.anomalies.len() < MAX_ANOMALIES_KEPT {
            self.anomalies.push((what, mark));
        }
    }
}

/// True when `id` is a decimal integer by the verdict's rules (used by the report to say
/// whether ids were comparable).
pub fn is_integer_id(id: &str) -> bool {
    DecimalId::parse(id).is_some()
}
