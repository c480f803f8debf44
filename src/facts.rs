//! The facts format: what the map step (packets → exchanges, per input) hands the reduce step
//! (the session stage and the report), as versioned JSON Lines (docs/facts.md).
//!
//! Input (map side): the session stage's events of one input, in the order the stage takes
//! them ([`FactSink`]), and the input's counters at its end. Output (reduce side): the same
//! events given to the same [`Reducer`] that a single run uses, so a run and map + reduce
//! cannot diverge.
//! Invariants:
//! - Every record names its input and carries its `seq` (its place among the input's
//!   records); records that concern a session carry its `session_id`, the key a distributed
//!   engine groups by. Any grouping or shuffling of the records is undone by sorting by
//!   (input, seq).
//! - Reading never trusts a size in the file: a line is read up to [`MAX_LINE_BYTES`], names
//!   the code keeps (`reason`, counter names) are interned up to [`MAX_NAMES`] distinct ones,
//!   and a bad line is an error naming the file and the line; the other lines are still read.
//! - The mirror types below convert to and from the pipeline's own, field by field: a field
//!   added to those fails the build here until the format says how it is carried.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, Read, Write};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use crate::audit::verdict::{Decision, LostRange, Verdict};
use crate::audit::{self, Forensics, StageStats};
use crate::driver::InputStats;
use crate::exchange::{
    ConnectionRef, ContentFact, ContentKind, DupId, ExchangeSummary, HeadTail, IdFact, IdSeen,
    ListChangedFact, ProgressAt, ProgressTrack, ResumeRecord, ShapeTally, StreamSummary, TlsInfo,
    held_stream,
};
use crate::net::decode::Endpoint;
use crate::record::{BodyEnd, HeadText, Mark};
use crate::report::spool::{Runs, SPOOL_MEMORY};
use crate::report::{CoverageStats, Tally};

/// The `format` of the header record.
pub const FORMAT: &str = "mcp-resume-audit-facts";
/// The `version` of the header record; a reader refuses any other.
pub const VERSION: u32 = 1;
/// Longest line read; a longer one is an error (a summary's facts are capped far below).
pub const MAX_LINE_BYTES: usize = 16 << 20;
/// Distinct names interned from facts files (verdict reasons, counter names).
pub const MAX_NAMES: usize = 4096;
/// Longest name interned.
const MAX_NAME_BYTES: usize = 1024;

/// Takes the session stage's events of one input, in the order the stage takes them.
pub trait FactSink: Send {
    /// An exchange of session `sid` began on (connection, exchange) `key`.
    fn opened(&mut self, sid: &str, key: (u64, u32));
    /// Traffic that may carry MCP was not read.
    fn unread(&mut self);
    /// An exchange is over: its summary and its resume (when it is one).
    /// Boxed as they were made: they are held boxed until their session is audited.
    fn ended(
        &mut self,
        key: (u64, u32),
        x: Option<Box<ExchangeSummary>>,
        r: Option<Box<ResumeRecord>>,
    );
    /// Exchanges of a HAR document and their resumes, in entry order (each resume in the call
    /// that gives its exchange's summary); the document is over at [`FactSink::finish`].
    /// Boxed where they are made, as [`FactSink::ended`] takes them: a summary is some 300
    /// bytes, a resume some 620, and the stage holds each in its own box.
    #[allow(clippy::vec_box)]
    fn har(&mut self, resumes: Vec<Box<ResumeRecord>>, xs: Vec<Box<ExchangeSummary>>);
    /// The input is over.
    fn finish(&mut self) -> StageStats;
}

/// The reduce step of one input: the session stage, its records going to `sink` (borrowed,
/// or owned and given back by [`Reducer::into_sink`]).
pub struct Reducer<S> {
    opts: audit::Options,
    retention: audit::Retention,
    stage: Option<audit::Stage>,
    /// The session stage of a HAR document, made at its first exchanges.
    har: Option<audit::HarFeed>,
    sink: S,
}

impl<S: audit::Sink> Reducer<S> {
    /// A stage run with `opts` and `retention`.
    pub fn new(opts: &audit::Options, retention: audit::Retention, sink: S) -> Self {
        Reducer {
            opts: opts.clone(),
            retention,
            stage: Some(audit::Stage::new(opts, retention)),
            har: None,
            sink,
        }
    }

    /// The sink, once [`FactSink::finish`] has given it the last records.
    pub fn into_sink(self) -> S {
        self.sink
    }
}

impl<S: audit::Sink> FactSink for Reducer<S> {
    fn opened(&mut self, sid: &str, key: (u64, u32)) {
        if let Some(s) = self.stage.as_mut() {
            s.opened(sid, key);
        }
    }
    fn unread(&mut self) {
        if let Some(s) = self.stage.as_mut() {
            s.traffic_unread();
        }
    }
    fn ended(
        &mut self,
        key: (u64, u32),
        x: Option<Box<ExchangeSummary>>,
        r: Option<Box<ResumeRecord>>,
    ) {
        if let Some(s) = self.stage.as_mut() {
            s.exchange(Some(key), x, r, &mut self.sink);
        }
    }
    fn har(&mut self, resumes: Vec<Box<ResumeRecord>>, xs: Vec<Box<ExchangeSummary>>) {
        let (opts, retention) = (&self.opts, self.retention);
        self.har
            .get_or_insert_with(|| audit::HarFeed::new(opts, retention))
            .add(resumes, xs, &mut self.sink);
    }
    fn finish(&mut self) -> StageStats {
        let mut stats = match self.stage.take() {
            Some(s) => s.finish(&mut self.sink),
            None => StageStats::default(),
        };
        if let Some(h) = self.har.take() {
            let har = h.finish(&mut self.sink);
            stats.sessions_retired_early += har.sessions_retired_early;
            stats.har_entries_late += har.har_entries_late;
        }
        stats
    }
}

// ---------------------------------------------------------------------------------------------
// Records.

/// The first line of every facts file.
#[derive(Serialize, Deserialize)]
struct Header {
    format: String,
    version: u32,
}

/// One line after the header.
#[derive(Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
enum Fact {
    /// An input begins: the files it is made of (a set), when several.
    Input {
        input: String,
        seq: u64,
        files: Option<Vec<String>>,
    },
    Opened {
        input: String,
        seq: u64,
        session_id: String,
        stream: u64,
        exchange: u32,
    },
    Unread {
        input: String,
        seq: u64,
    },
    Ended {
        input: String,
        seq: u64,
        session_id: Option<String>,
        stream: u64,
        exchange: u32,
        summary: Option<Box<XSummary>>,
        resume: Option<Box<XResume>>,
    },
    Har {
        input: String,
        seq: u64,
        session_id: Option<String>,
        summary: Option<Box<XSummary>>,
        resume: Option<Box<XResume>>,
    },
    /// The input is over: its counters, session hashes and messages.
    InputEnd {
        input: String,
        seq: u64,
        stats: Box<XStats>,
        sessions: Vec<u64>,
        messages: Vec<(bool, String)>,
    },
}

impl Fact {
    fn input(&self) -> &str {
        match self {
            Fact::Input { input, .. }
            | Fact::Opened { input, .. }
            | Fact::Unread { input, .. }
            | Fact::Ended { input, .. }
            | Fact::Har { input, .. }
            | Fact::InputEnd { input, .. } => input,
        }
    }
    fn seq(&self) -> u64 {
        match self {
            Fact::Input { seq, .. }
            | Fact::Opened { seq, .. }
            | Fact::Unread { seq, .. }
            | Fact::Ended { seq, .. }
            | Fact::Har { seq, .. }
            | Fact::InputEnd { seq, .. } => *seq,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Interning: names the pipeline keeps as `&'static str`.

static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);

/// The `&'static str` for `s`: one of the pipeline's own names, or one leaked once per
/// distinct name up to [`MAX_NAMES`].
fn intern(s: &str) -> Result<&'static str, String> {
    let mut g = NAMES
        .lock()
        .map_err(|_| "name table poisoned".to_string())?;
    let set = g.get_or_insert_with(HashSet::new);
    if let Some(k) = set.get(s) {
        return Ok(k);
    }
    if s.len() > MAX_NAME_BYTES || set.len() >= MAX_NAMES {
        return Err(format!(
            "too many distinct names (or one too long) in facts: {:.60}",
            s
        ));
    }
    let k: &'static str = Box::leak(s.to_string().into_boxed_str());
    set.insert(k);
    Ok(k)
}

// ---------------------------------------------------------------------------------------------
// Mirror types.

type M = (u64, i64);

fn m(x: Mark) -> M {
    (x.frame, x.time_ns)
}
fn um(x: M) -> Mark {
    Mark::new(x.0, x.1)
}

#[derive(Serialize, Deserialize)]
struct XEndpoint(String, u16);

impl XEndpoint {
    fn of(e: &Endpoint) -> Self {
        XEndpoint(e.ip.to_string(), e.port)
    }
    fn back(&self) -> Result<Endpoint, String> {
        let ip: IpAddr = self
            .0
            .parse()
            .map_err(|_| format!("bad IP address {:?}", self.0))?;
        Ok(Endpoint { ip, port: self.1 })
    }
}

#[derive(Serialize, Deserialize)]
struct XTls {
    version: Option<String>,
    cipher: Option<String>,
    sni: Option<String>,
    alpn: Option<String>,
    keys: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct XConn {
    tcp_stream: Option<u64>,
    client: Option<XEndpoint>,
    server: Option<XEndpoint>,
    har_entry: Option<u64>,
    tls: Option<XTls>,
}

impl XConn {
    fn of(c: &ConnectionRef) -> Self {
        XConn {
            tcp_stream: c.tcp_stream,
            client: c.client.as_ref().map(XEndpoint::of),
            server: c.server.as_ref().map(XEndpoint::of),
            har_entry: c.har_entry,
            tls: c.tls.as_ref().map(|t| XTls {
                version: t.version.clone(),
                cipher: t.cipher.clone(),
                sni: t.sni.clone(),
                alpn: t.alpn.clone(),
                keys: t.keys.clone(),
            }),
        }
    }
    fn back(self) -> Result<ConnectionRef, String> {
        Ok(ConnectionRef {
            tcp_stream: self.tcp_stream,
            client: self.client.map(|e| e.back()).transpose()?,
            server: self.server.map(|e| e.back()).transpose()?,
            har_entry: self.har_entry,
            tls: self.tls.map(|t| {
                Arc::new(TlsInfo {
                    version: t.version,
                    cipher: t.cipher,
                    sni: t.sni,
                    alpn: t.alpn,
                    keys: t.keys,
                })
            }),
        })
    }
}

#[derive(Serialize, Deserialize)]
struct XSeen(String, M, u64);

fn seen(s: &IdSeen) -> XSeen {
    XSeen(s.text.clone(), m(s.mark), s.id_index)
}
fn unseen(s: XSeen) -> IdSeen {
    IdSeen {
        text: s.0,
        mark: um(s.1),
        id_index: s.2,
    }
}

#[derive(Serialize, Deserialize)]
struct XIdFact {
    hash: u64,
    mark: M,
    event: u64,
    id_index: u64,
    priming: bool,
    integer: bool,
    start: M,
    key: u64,
    key_len: u32,
    text: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct XContent {
    hash: u64,
    kind: u8,
    rpc_id: Option<u64>,
    mark: M,
    event: u64,
    event_id: Option<u64>,
}

#[derive(Serialize, Deserialize)]
struct XAt(f64, M);

fn at(p: &ProgressAt) -> XAt {
    XAt(p.value, m(p.mark))
}
fn unat(p: XAt) -> ProgressAt {
    ProgressAt {
        value: p.0,
        mark: um(p.1),
    }
}

#[derive(Serialize, Deserialize)]
struct XProgress {
    token: u64,
    token_text: String,
    first: XAt,
    last: XAt,
    max: XAt,
    regressed: Option<(XAt, XAt)>,
}

/// `ListChangedFact`: method, mark, event id (its hash and text).
type XListChanged = (String, M, Option<(u64, String)>);

#[derive(Serialize, Deserialize)]
struct XStream {
    events: u64,
    ids: u64,
    priming: u64,
    first_id: Option<XSeen>,
    last_id: Option<XSeen>,
    max_int_id: Option<XSeen>,
    id_facts: Vec<XIdFact>,
    id_facts_dropped: u64,
    content: Vec<XContent>,
    content_dropped: u64,
    progress: Vec<XProgress>,
    list_changed: Vec<XListChanged>,
    retry: Vec<(u64, M)>,
    resume_ack: Option<(String, M)>,
    shapes: Vec<(u8, String, String, u32, u32, u32)>,
    keys: Vec<u64>,
    dup_ids: Vec<(String, M, M)>,
    gaps: u64,
    endpoint_session: Option<String>,
    facts_dropped: u64,
}

fn kind_no(k: ContentKind) -> u8 {
    match k {
        ContentKind::Response => 0,
        ContentKind::Request => 1,
        ContentKind::Progress => 2,
    }
}

fn kind_of(n: u8) -> Result<ContentKind, String> {
    Ok(match n {
        0 => ContentKind::Response,
        1 => ContentKind::Request,
        2 => ContentKind::Progress,
        _ => return Err(format!("unknown content kind {n}")),
    })
}

impl XStream {
    fn of(s: &StreamSummary) -> Self {
        XStream {
            events: s.events,
            ids: s.ids,
            priming: s.priming,
            first_id: s.first_id.as_ref().map(seen),
            last_id: s.last_id.as_ref().map(seen),
            max_int_id: s.max_int_id.as_ref().map(seen),
            id_facts: s
                .id_facts
                .iter()
                .map(|f| XIdFact {
                    hash: f.hash,
                    mark: m(f.mark),
                    event: f.event,
                    id_index: f.id_index,
                    priming: f.priming,
                    integer: f.integer,
                    start: m(f.start),
                    key: f.key,
                    key_len: f.key_len,
                    text: f.text.as_deref().map(str::to_string),
                })
                .collect(),
            id_facts_dropped: s.id_facts.dropped,
            content: s
                .content
                .iter()
                .map(|c| XContent {
                    hash: c.hash,
                    kind: kind_no(c.kind),
                    rpc_id: c.rpc_id,
                    mark: m(c.mark),
                    event: c.event,
                    event_id: c.event_id,
                })
                .collect(),
            content_dropped: s.content.dropped,
            progress: s
                .progress
                .iter()
                .map(|p| XProgress {
                    token: p.token,
                    token_text: p.token_text.clone(),
                    first: at(&p.first),
                    last: at(&p.last),
                    max: at(&p.max),
                    regressed: p.regressed.as_ref().map(|(a, b)| (at(a), at(b))),
                })
                .collect(),
            list_changed: s
                .list_changed
                .iter()
                .map(|l| (l.method.clone(), m(l.mark), l.event_id.clone()))
                .collect(),
            retry: s.retry.iter().map(|(v, k)| (*v, m(*k))).collect(),
            resume_ack: s.resume_ack.as_ref().map(|(t, k)| (t.clone(), m(*k))),
            shapes: s
                .shapes
                .iter()
                .map(|t| {
                    (
                        t.k,
                        t.prefix.clone(),
                        t.suffix.clone(),
                        t.support,
                        t.breaks,
                        t.skips,
                    )
                })
                .collect(),
            keys: s.keys.clone(),
            dup_ids: s
                .dup_ids
                .iter()
                .map(|d| (d.text.clone(), m(d.first), m(d.again)))
                .collect(),
            gaps: s.gaps,
            endpoint_session: s.endpoint_session.as_deref().map(String::from),
            facts_dropped: s.facts_dropped,
        }
    }

    fn back(self) -> Result<StreamSummary, String> {
        let mut id_facts = HeadTail::default();
        for f in self.id_facts {
            id_facts.push(IdFact {
                hash: f.hash,
                mark: um(f.mark),
                event: f.event,
                id_index: f.id_index,
                priming: f.priming,
                integer: f.integer,
                start: um(f.start),
                key: f.key,
                key_len: f.key_len,
                text: f.text.map(String::into_boxed_str),
            });
        }
        id_facts.dropped += self.id_facts_dropped;
        let mut content = HeadTail::default();
        for c in self.content {
            content.push(ContentFact {
                hash: c.hash,
                kind: kind_of(c.kind)?,
                rpc_id: c.rpc_id,
                mark: um(c.mark),
                event: c.event,
                event_id: c.event_id,
            });
        }
        content.dropped += self.content_dropped;
        Ok(StreamSummary {
            events: self.events,
            ids: self.ids,
            priming: self.priming,
            first_id: self.first_id.map(unseen),
            last_id: self.last_id.map(unseen),
            max_int_id: self.max_int_id.map(unseen),
            id_facts,
            content,
            progress: self
                .progress
                .into_iter()
                .map(|p| ProgressTrack {
                    token: p.token,
                    token_text: p.token_text,
                    first: unat(p.first),
                    last: unat(p.last),
                    max: unat(p.max),
                    regressed: p.regressed.map(|(a, b)| (unat(a), unat(b))),
                })
                .collect(),
            list_changed: self
                .list_changed
                .into_iter()
                .map(|(method, mark, event_id)| ListChangedFact {
                    method,
                    mark: um(mark),
                    event_id,
                })
                .collect(),
            retry: self.retry.into_iter().map(|(v, k)| (v, um(k))).collect(),
            resume_ack: self.resume_ack.map(|(t, k)| (t, um(k))),
            shapes: self
                .shapes
                .into_iter()
                .map(|(k, prefix, suffix, support, breaks, skips)| ShapeTally {
                    k,
                    prefix,
                    suffix,
                    support,
                    breaks,
                    skips,
                })
                .collect(),
            keys: self.keys,
            dup_ids: self
                .dup_ids
                .into_iter()
                .map(|(text, first, again)| DupId {
                    text,
                    first: um(first),
                    again: um(again),
                })
                .collect(),
            gaps: self.gaps,
            endpoint_session: self.endpoint_session.map(String::into_boxed_str),
            facts_dropped: self.facts_dropped,
        })
    }
}

#[derive(Serialize, Deserialize)]
struct XSummary {
    connection: XConn,
    exchange: u32,
    session_id: Option<String>,
    method: Option<HeadText>,
    target: Option<HeadText>,
    last_event_id: Option<String>,
    protocol_version: Option<HeadText>,
    request: Option<M>,
    status: Option<u16>,
    response: Option<M>,
    event_stream: bool,
    end: Option<(BodyEnd, M)>,
    stream: Option<XStream>,
    opens_session: bool,
}

impl XSummary {
    fn of(x: &ExchangeSummary) -> Self {
        XSummary {
            connection: XConn::of(&x.connection),
            exchange: x.exchange,
            session_id: x.session_id.clone(),
            method: x.method.clone(),
            target: x.target.clone(),
            last_event_id: x.last_event_id.clone(),
            protocol_version: x.protocol_version.clone(),
            request: x.request.map(m),
            status: x.status,
            response: x.response.map(m),
            event_stream: x.event_stream,
            end: x.end.map(|(e, k)| (e, m(k))),
            stream: x.stream().map(XStream::of),
            opens_session: x.opens_session,
        }
    }
    fn back(self) -> Result<ExchangeSummary, String> {
        let held = held_stream(self.stream.map(|s| s.back().map(Box::new)).transpose()?);
        Ok(ExchangeSummary {
            connection: self.connection.back()?,
            exchange: self.exchange,
            session_id: self.session_id,
            method: self.method,
            target: self.target,
            last_event_id: self.last_event_id,
            protocol_version: self.protocol_version,
            request: self.request.map(um),
            status: self.status,
            response: self.response.map(um),
            event_stream: self.event_stream,
            end: self.end.map(|(e, k)| (e, um(k))),
            stream_facts: held.facts,
            stream_empty: held.empty,
            stream_room: held.room,
            stream_distinctive: held.distinctive,
            opens_session: self.opens_session,
        })
    }
}

#[derive(Serialize, Deserialize)]
struct XResume {
    session_id: Option<String>,
    verdict: String,
    reason: String,
    lost: Option<(String, String, Option<u64>)>,
    replayed_count: Option<u64>,
    last_event_id: String,
    first_event_id: Option<String>,
    first_id_after_gap: Option<String>,
    first_event_id_truncated: bool,
    method: HeadText,
    target: HeadText,
    protocol_version: Option<HeadText>,
    request: M,
    status: Option<u16>,
    content_type: Option<HeadText>,
    response: Option<M>,
    first_event: Option<M>,
    events_before_first_id: u64,
    stream_events: u64,
    resent_ids: u64,
    stream_end: Option<BodyEnd>,
    last_proof: M,
    connection: XConn,
    exchange: u32,
    h2_stream: Option<u32>,
    priming_ack: Option<M>,
    resume_ack: Option<(String, M)>,
    retry: Vec<(u64, M)>,
    ids_opaque: bool,
}

impl XResume {
    /// `None` when the session stage has already filled its forensics: the map step never
    /// has.
    fn of(r: &ResumeRecord) -> Option<Self> {
        if r.forensic != Forensics::default() {
            return None;
        }
        Some(XResume {
            session_id: r.session_id.clone(),
            verdict: r.decision.verdict.as_str().to_string(),
            reason: r.decision.reason.to_string(),
            lost: r
                .decision
                .lost
                .as_ref()
                .map(|l| (l.from.clone(), l.to.clone(), l.count)),
            replayed_count: r.decision.replayed_count,
            last_event_id: r.last_event_id.clone(),
            first_event_id: r.first_event_id.clone(),
            first_id_after_gap: r.first_id_after_gap.clone(),
            first_event_id_truncated: r.first_event_id_truncated,
            method: r.method.clone(),
            target: r.target.clone(),
            protocol_version: r.protocol_version.clone(),
            request: m(r.request),
            status: r.status,
            content_type: r.content_type.clone(),
            response: r.response.map(m),
            first_event: r.first_event.map(m),
            events_before_first_id: r.events_before_first_id,
            stream_events: r.stream_events,
            resent_ids: r.resent_ids,
            stream_end: r.stream_end,
            last_proof: m(r.last_proof),
            connection: XConn::of(&r.connection),
            exchange: r.exchange,
            h2_stream: r.h2_stream,
            priming_ack: r.priming_ack.map(m),
            resume_ack: r.resume_ack.as_ref().map(|(t, k)| (t.clone(), m(*k))),
            retry: r.retry.iter().map(|(v, k)| (*v, m(*k))).collect(),
            ids_opaque: r.ids_opaque,
        })
    }

    fn back(self) -> Result<ResumeRecord, String> {
        let verdict = Verdict::ALL
            .into_iter()
            .find(|v| v.as_str() == self.verdict)
            .ok_or_else(|| format!("unknown verdict {:?}", self.verdict))?;
        Ok(ResumeRecord {
            session_id: self.session_id,
            decision: Decision {
                verdict,
                reason: intern(&self.reason)?,
                lost: self
                    .lost
                    .map(|(from, to, count)| Box::new(LostRange { from, to, count })),
                replayed_count: self.replayed_count,
            },
            last_event_id: self.last_event_id,
            first_event_id: self.first_event_id,
            first_id_after_gap: self.first_id_after_gap,
            first_event_id_truncated: self.first_event_id_truncated,
            method: self.method,
            target: self.target,
            protocol_version: self.protocol_version,
            request: um(self.request),
            status: self.status,
            content_type: self.content_type,
            response: self.response.map(um),
            first_event: self.first_event.map(um),
            events_before_first_id: self.events_before_first_id,
            stream_events: self.stream_events,
            resent_ids: self.resent_ids,
            stream_end: self.stream_end,
            last_proof: um(self.last_proof),
            connection: self.connection.back()?,
            exchange: self.exchange,
            h2_stream: self.h2_stream,
            priming_ack: self.priming_ack.map(um),
            resume_ack: self.resume_ack.map(|(t, k)| (t, um(k))),
            retry: self.retry.into_iter().map(|(v, k)| (v, um(k))).collect(),
            ids_opaque: self.ids_opaque,
            forensic: Forensics::default(),
        })
    }
}

type XTally = (u64, u64);

#[derive(Serialize, Deserialize)]
struct XCoverage {
    read: BTreeMap<String, XTally>,
    empty: u64,
    unread: BTreeMap<String, XTally>,
    ignored: XTally,
    h2_headers_unreadable: u64,
    tls_rest_unreadable: u64,
    packets_cut: u64,
    snap_length: Option<u64>,
    servers: Vec<(String, String, XTally)>,
}

#[derive(Serialize, Deserialize)]
struct XStats {
    packets: u64,
    skipped: BTreeMap<String, u64>,
    tcp_connections: u64,
    http_exchanges: u64,
    tcp_gaps: u64,
    tcp_gap_bytes: u64,
    out_of_order_overflows: u64,
    connections_evicted: u64,
    anomalies: BTreeMap<String, u64>,
    facts_dropped: u64,
    exchanges_not_audited: u64,
    sessions_retired_early: u64,
    coverage: XCoverage,
}

fn tally(t: &Tally) -> XTally {
    (t.connections, t.bytes)
}
fn untally(t: XTally) -> Tally {
    Tally {
        connections: t.0,
        bytes: t.1,
    }
}

impl XStats {
    fn of(s: &InputStats) -> Self {
        let c = &s.coverage;
        XStats {
            packets: s.packets,
            skipped: s.skipped.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            tcp_connections: s.tcp_connections,
            http_exchanges: s.http_exchanges,
            tcp_gaps: s.tcp_gaps,
            tcp_gap_bytes: s.tcp_gap_bytes,
            out_of_order_overflows: s.out_of_order_overflows,
            connections_evicted: s.connections_evicted,
            anomalies: s.anomalies.clone(),
            facts_dropped: s.facts_dropped,
            exchanges_not_audited: s.exchanges_not_audited,
            sessions_retired_early: s.sessions_retired_early,
            coverage: XCoverage {
                read: c
                    .read
                    .iter()
                    .map(|(k, t)| (k.to_string(), tally(t)))
                    .collect(),
                empty: c.empty,
                unread: c
                    .unread
                    .iter()
                    .map(|(k, t)| (k.to_string(), tally(t)))
                    .collect(),
                ignored: tally(&c.ignored),
                h2_headers_unreadable: c.h2_headers_unreadable,
                tls_rest_unreadable: c.tls_rest_unreadable,
                packets_cut: c.packets_cut,
                snap_length: c.snap_length,
                servers: c
                    .server_tally()
                    .map(|(s, r, t)| (s.to_string(), r.to_string(), tally(&t)))
                    .collect(),
            },
        }
    }

    fn back(self) -> Result<InputStats, String> {
        let c = self.coverage;
        let mut coverage = CoverageStats::default();
        coverage.empty = c.empty;
        coverage.ignored = untally(c.ignored);
        coverage.h2_headers_unreadable = c.h2_headers_unreadable;
        coverage.tls_rest_unreadable = c.tls_rest_unreadable;
        coverage.packets_cut = c.packets_cut;
        coverage.snap_length = c.snap_length;
        for (k, t) in c.read {
            coverage.read.insert(intern(&k)?, untally(t));
        }
        for (k, t) in c.unread {
            coverage.unread.insert(intern(&k)?, untally(t));
        }
        for (s, r, t) in c.servers {
            coverage.add_server_tally(s, intern(&r)?, untally(t));
        }
        let mut skipped = BTreeMap::new();
        for (k, v) in self.skipped {
            skipped.insert(intern(&k)?, v);
        }
        Ok(InputStats {
            packets: self.packets,
            skipped,
            tcp_connections: self.tcp_connections,
            http_exchanges: self.http_exchanges,
            tcp_gaps: self.tcp_gaps,
            tcp_gap_bytes: self.tcp_gap_bytes,
            out_of_order_overflows: self.out_of_order_overflows,
            connections_evicted: self.connections_evicted,
            anomalies: self.anomalies,
            facts_dropped: self.facts_dropped,
            exchanges_not_audited: self.exchanges_not_audited,
            sessions_retired_early: self.sessions_retired_early,
            coverage,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Writing.

/// The map step's output: writes the facts of one input after another to `out`.
pub struct FactsWriter<W: Write + Send> {
    out: W,
    input: String,
    seq: u64,
    /// The first write error; later writes are skipped.
    pub error: Option<std::io::Error>,
}

impl<W: Write + Send> FactsWriter<W> {
    /// Writes the header record.
    pub fn new(mut out: W) -> Self {
        let header = Header {
            format: FORMAT.to_string(),
            version: VERSION,
        };
        let error = serde_json::to_writer(&mut out, &header)
            .map_err(std::io::Error::other)
            .and_then(|_| out.write_all(b"\n"))
            .err();
        FactsWriter {
            out,
            input: String::new(),
            seq: 0,
            error,
        }
    }

    fn put(&mut self, f: &Fact) {
        if self.error.is_some() {
            return;
        }
        self.seq += 1;
        let r = serde_json::to_writer(&mut self.out, f)
            .map_err(std::io::Error::other)
            .and_then(|_| self.out.write_all(b"\n"));
        if let Err(e) = r {
            self.error = Some(e);
        }
    }

    /// An input begins; `files` are its files when it is a set.
    pub fn begin(&mut self, input: &str, files: Option<Vec<String>>) {
        self.input = input.to_string();
        self.seq = 0;
        let f = Fact::Input {
            input: self.input.clone(),
            seq: 0,
            files,
        };
        self.put(&f);
    }

    /// The input is over: its counters, the hashes of its sessions, its messages.
    pub fn end(
        &mut self,
        stats: &InputStats,
        sessions: &crate::exchange::SessionSet,
        messages: &[(bool, String)],
    ) {
        let f = Fact::InputEnd {
            input: self.input.clone(),
            seq: self.seq,
            stats: Box::new(XStats::of(stats)),
            sessions: sessions.iter().collect(),
            messages: messages.to_vec(),
        };
        self.put(&f);
    }

    /// Flushes and gives the writer back, or the first error.
    pub fn into_inner(mut self) -> std::io::Result<W> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

impl<W: Write + Send> FactSink for FactsWriter<W> {
    fn opened(&mut self, sid: &str, key: (u64, u32)) {
        let f = Fact::Opened {
            input: self.input.clone(),
            seq: self.seq,
            session_id: sid.to_string(),
            stream: key.0,
            exchange: key.1,
        };
        self.put(&f);
    }
    fn unread(&mut self) {
        let f = Fact::Unread {
            input: self.input.clone(),
            seq: self.seq,
        };
        self.put(&f);
    }
    fn ended(
        &mut self,
        key: (u64, u32),
        x: Option<Box<ExchangeSummary>>,
        r: Option<Box<ResumeRecord>>,
    ) {
        let session_id = x
            .as_ref()
            .and_then(|x| x.session_id.clone())
            .or_else(|| r.as_ref().and_then(|r| r.session_id.clone()));
        let f = Fact::Ended {
            input: self.input.clone(),
            seq: self.seq,
            session_id,
            stream: key.0,
            exchange: key.1,
            summary: x.as_deref().map(|x| Box::new(XSummary::of(x))),
            resume: r.as_deref().and_then(XResume::of).map(Box::new),
        };
        self.put(&f);
    }
    fn har(&mut self, resumes: Vec<Box<ResumeRecord>>, xs: Vec<Box<ExchangeSummary>>) {
        // Entry by entry (both lists are in entry order): its summary, then its resumes. The
        // lines do not depend on how the entries were grouped into calls (so not on `-j`).
        let mut rs = resumes.iter().peekable();
        for x in &xs {
            let entry = x.connection.har_entry;
            while let Some(r) = rs.next_if(|r| r.connection.har_entry < entry) {
                self.har_resume(r);
            }
            let f = Fact::Har {
                input: self.input.clone(),
                seq: self.seq,
                session_id: x.session_id.clone(),
                summary: Some(Box::new(XSummary::of(x))),
                resume: None,
            };
            self.put(&f);
            while let Some(r) = rs.next_if(|r| r.connection.har_entry == entry) {
                self.har_resume(r);
            }
        }
        for r in rs {
            self.har_resume(r);
        }
    }
    fn finish(&mut self) -> StageStats {
        StageStats::default()
    }
}

impl<W: Write + Send> FactsWriter<W> {
    /// One resume of a HAR document.
    fn har_resume(&mut self, r: &ResumeRecord) {
        let f = Fact::Har {
            input: self.input.clone(),
            seq: self.seq,
            session_id: r.session_id.clone(),
            summary: None,
            resume: XResume::of(r).map(Box::new),
        };
        self.put(&f);
    }
}

// ---------------------------------------------------------------------------------------------
// Reading.

/// What one input's records say besides its events (those are sorted apart, see
/// [`FactsSet`]).
#[derive(Default)]
pub struct InputFacts {
    /// The input's name.
    pub input: String,
    /// Its files, when it is a set.
    pub files: Option<Vec<String>>,
    /// Counters, session hashes and messages, from its `input_end` record.
    pub end: Option<InputEnd>,
    /// Problems of the facts themselves (a missing `input_end`, a record given twice), known
    /// once its events are replayed.
    pub problems: Vec<String>,
    /// Where its first record that reads as one sits (facts file, line): the input's place in
    /// the report, and the file its problems cite. `None`: only damaged lines named it.
    first: Option<(u64, u64)>,
}

impl InputFacts {
    /// A record of the input, read whole, sits at line `no` of facts file `file`.
    fn named_at(&mut self, file: u64, no: u64) {
        let at = (file, no);
        self.first = Some(self.first.map_or(at, |f| f.min(at)));
    }
}

/// What an `input_end` record holds: counters, session hashes, messages, and its `seq`.
pub type InputEnd = (
    InputStats,
    crate::exchange::SessionSet,
    Vec<(bool, String)>,
    u64,
);

enum Event {
    Opened(String, (u64, u32)),
    Unread,
    Ended(
        (u64, u32),
        Option<Box<ExchangeSummary>>,
        Option<Box<ResumeRecord>>,
    ),
    Har(Option<Box<ExchangeSummary>>, Option<Box<ResumeRecord>>),
}

/// What a line says of itself before it is read whole: a header, or the record of an input's
/// event, or something to read whole at once. Values it does not name are skipped unread.
#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow)]
    t: Option<Cow<'a, str>>,
    #[serde(borrow)]
    input: Option<Cow<'a, str>>,
    seq: Option<u64>,
    format: Option<IgnoredAny>,
}

/// The tags of event records, by number: read whole only when their input is replayed.
const EVENT_TAGS: [&str; 4] = ["opened", "unread", "ended", "har"];

/// The tag's number, `t`, `input` and `seq` of an event record that begins with them as facts
/// files are written (`{"t":"ended","input":"a.pcap","seq":12,`), with no escape in the
/// name: told from its first bytes. Any other line is told by [`Probe`].
fn quick_probe(text: &[u8]) -> Option<(u64, &str, u64)> {
    let rest = text.strip_prefix(b"{\"t\":\"")?;
    let tag = EVENT_TAGS
        .iter()
        .position(|t| rest.starts_with(t.as_bytes()) && rest.get(t.len()) == Some(&b'"'))?;
    let rest = rest[EVENT_TAGS[tag].len() + 1..].strip_prefix(b",\"input\":\"")?;
    let end = memchr::memchr2(b'"', b'\\', rest)?;
    let (name, rest) = rest.split_at(end);
    // A string JSON reads as it stands: no escape, no control character.
    if name.iter().any(|&b| b < 0x20) {
        return None;
    }
    let name = std::str::from_utf8(name).ok()?;
    let rest = rest.strip_prefix(b"\",\"seq\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    // JSON writes no leading zero, and the number ends where the record goes on.
    if digits == 0
        || (digits > 1 && rest[0] == b'0')
        || !matches!(rest.get(digits), Some(b',' | b'}'))
    {
        return None;
    }
    let seq = rest[..digits].iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })?;
    Some((tag as u64, name, seq))
}

// An event record read whole at its input's replay, straight into its fields: [`Fact`]'s tag
// makes serde keep a copy of every value of the record before reading it. The fields are
// [`Fact`]'s, with `t`, `input` and `seq` (which the line was told by) named but not read
// again, so a line reads here exactly when it reads as a [`Fact`].

#[derive(Deserialize)]
#[allow(dead_code)]
struct OpenedLine {
    t: IgnoredAny,
    input: IgnoredAny,
    seq: IgnoredAny,
    session_id: String,
    stream: u64,
    exchange: u32,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct UnreadLine {
    t: IgnoredAny,
    input: IgnoredAny,
    seq: IgnoredAny,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct EndedLine<'a> {
    t: IgnoredAny,
    input: IgnoredAny,
    seq: IgnoredAny,
    #[serde(borrow)]
    session_id: Option<Cow<'a, str>>,
    stream: u64,
    exchange: u32,
    summary: Option<Box<XSummary>>,
    resume: Option<Box<XResume>>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct HarLine<'a> {
    t: IgnoredAny,
    input: IgnoredAny,
    seq: IgnoredAny,
    #[serde(borrow)]
    session_id: Option<Cow<'a, str>>,
    summary: Option<Box<XSummary>>,
    resume: Option<Box<XResume>>,
}

/// The event of an event record's line whose tag is `tag` (its number in [`EVENT_TAGS`]): the
/// line does not read (the error of reading it as a [`Fact`]), or it does and its values are
/// taken or not.
fn read_event(tag: u64, line: &[u8]) -> Result<Result<Event, String>, serde_json::Error> {
    fn back<X, T>(
        x: Option<Box<X>>,
        f: fn(X) -> Result<T, String>,
    ) -> Result<Option<Box<T>>, String> {
        x.map(|x| f(*x)).transpose().map(|x| x.map(Box::new))
    }
    let direct = match tag {
        0 => serde_json::from_slice::<OpenedLine>(line)
            .map(|o| Ok(Event::Opened(o.session_id, (o.stream, o.exchange)))),
        1 => serde_json::from_slice::<UnreadLine>(line).map(|_| Ok(Event::Unread)),
        2 => serde_json::from_slice::<EndedLine>(line).map(|e| {
            Ok(Event::Ended(
                (e.stream, e.exchange),
                back(e.summary, XSummary::back)?,
                back(e.resume, XResume::back)?,
            ))
        }),
        _ => serde_json::from_slice::<HarLine>(line).map(|h| {
            Ok(Event::Har(
                back(h.summary, XSummary::back)?,
                back(h.resume, XResume::back)?,
            ))
        }),
    };
    // A line that does not read is read as a [`Fact`], whose error the message quotes.
    direct.or_else(|_| serde_json::from_slice::<Fact>(line).map(event_of))
}

/// Facts files read into one report's inputs.
///
/// Input: facts files, one after another ([`FactsSet::read`]). Output: each input's events in
/// `seq` order, given to a sink per input ([`FactsSet::replay`]), and messages
/// (`FILE: line N: ...`) for what could not be read, in the order of the files and lines.
/// Invariants:
/// - Memory does not grow with the facts: an event record is kept as its line, sorted by
///   (input, `seq`, file, line) through runs on disk as the report's lines are (a reconnect
///   storm's facts are larger than its capture), and read whole only as its input is
///   replayed. An input's `input` and `input_end` records are read whole as they come.
/// - The report is the one of the facts read whole and sorted in memory: inputs in the order
///   their first record comes, each `seq` once (the first that reads), every damaged line an
///   error for its file and line, whether it is found as it comes or as its input is replayed.
pub struct FactsSet {
    /// The inputs, in the order a line first named them.
    inputs: Vec<InputFacts>,
    by_name: HashMap<String, usize>,
    /// The facts files read, by number.
    files: Vec<String>,
    /// Event records: their lines, sorted by `[input, seq, file, line << 2 | tag]`.
    events: Runs,
    /// `(file, line, is_error, text)`; put in order once every input is replayed.
    messages: Vec<(u64, u64, bool, String)>,
}

impl Default for FactsSet {
    fn default() -> Self {
        FactsSet::with_memory(SPOOL_MEMORY)
    }
}

/// One input's events on their way to its sink: each `seq` once, a HAR document's exchanges
/// gathered for the one call that takes them.
#[allow(clippy::vec_box)]
struct Replay<S> {
    sink: S,
    /// The `seq` of the last event given to the sink.
    last: Option<u64>,
    events: u64,
    doubled: u64,
    har: bool,
    har_x: Vec<Box<ExchangeSummary>>,
    har_r: Vec<Box<ResumeRecord>>,
}

impl<S: FactSink> Replay<S> {
    fn new(sink: S) -> Self {
        Replay {
            sink,
            last: None,
            events: 0,
            doubled: 0,
            har: false,
            har_x: Vec::new(),
            har_r: Vec::new(),
        }
    }

    fn event(&mut self, seq: u64, e: Event) {
        if self.last == Some(seq) {
            self.doubled += 1;
            return;
        }
        self.last = Some(seq);
        self.events += 1;
        match e {
            Event::Opened(sid, key) => self.sink.opened(&sid, key),
            Event::Unread => self.sink.unread(),
            Event::Ended(key, x, r) => self.sink.ended(key, x, r),
            Event::Har(x, r) => {
                self.har = true;
                self.har_x.extend(x);
                self.har_r.extend(r);
            }
        }
    }

    /// The input is over: its sink finished, and what the facts lacked said in `inp`, citing
    /// the facts file (of `files`) its first record came from.
    fn finish(mut self, inp: &mut InputFacts, files: &[String]) -> (S, StageStats) {
        let source = inp.first.map_or("", |(f, _)| &files[f as usize]);
        if self.har {
            let (r, x) = (
                std::mem::take(&mut self.har_r),
                std::mem::take(&mut self.har_x),
            );
            self.sink.har(r, x);
        }
        let stats = self.sink.finish();
        if self.doubled > 0 {
            inp.problems.push(format!(
                "{source}: input {}: {} record(s) given twice, read once",
                inp.input, self.doubled
            ));
        }
        match &inp.end {
            None => inp.problems.push(format!(
                "{source}: input {}: no input_end record (the facts are cut short); its counters are missing",
                inp.input
            )),
            Some((_, _, _, end)) if *end != self.events + 1 => inp.problems.push(format!(
                "{source}: input {}: {} event record(s) where the input_end record counts {}; the report is made from those read",
                inp.input,
                self.events,
                end.saturating_sub(1)
            )),
            Some(_) => {}
        }
        (self.sink, stats)
    }
}

impl FactsSet {
    /// No facts yet; event records gathered `memory` bytes at a time before a run is sorted
    /// and written to disk.
    pub fn with_memory(memory: usize) -> Self {
        FactsSet {
            inputs: Vec::new(),
            by_name: HashMap::new(),
            files: Vec::new(),
            events: Runs::new(memory, true),
            messages: Vec::new(),
        }
    }

    /// A message for facts file `file` as a whole (it could not be opened, say).
    pub fn file_error(&mut self, name: &str, text: String) {
        let file = self.files.len() as u64;
        self.files.push(name.to_string());
        self.messages.push((file, 0, true, text));
    }

    /// Reads one facts file from `src`; `name` is how messages cite it.
    pub fn read<R: BufRead>(&mut self, name: &str, mut src: R) {
        let file = self.files.len() as u64;
        self.files.push(name.to_string());
        let mut line = Vec::new();
        let mut no = 0u64;
        let mut header = false;
        loop {
            line.clear();
            let got = match (&mut src)
                .take(MAX_LINE_BYTES as u64 + 1)
                .read_until(b'\n', &mut line)
            {
                Ok(n) => n,
                Err(e) => {
                    let text = format!("{name}: line {}: read error: {e}", no + 1);
                    self.error(file, no + 1, text);
                    return;
                }
            };
            if got == 0 {
                break;
            }
            no += 1;
            if line.len() > MAX_LINE_BYTES {
                self.error(
                    file,
                    no,
                    format!(
                        "{name}: line {no}: longer than {MAX_LINE_BYTES} bytes; the rest of the file is not read"
                    ),
                );
                return;
            }
            if line.last() != Some(&b'\n') {
                self.error(
                    file,
                    no,
                    format!("{name}: line {no}: cut short (no end of line); the line is not read"),
                );
                break;
            }
            let text = &line[..line.len() - 1];
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if !header {
                match serde_json::from_slice::<Header>(text) {
                    Ok(h) if h.format == FORMAT && h.version == VERSION => header = true,
                    Ok(h) if h.format == FORMAT => {
                        self.error(file, no, format!(
                            "{name}: line {no}: facts version {} (this program reads version {VERSION}); the file is not read",
                            h.version
                        ));
                        return;
                    }
                    _ => {
                        self.error(file, no, format!(
                            "{name}: line {no}: not a facts file (no {{\"format\":\"{FORMAT}\",\"version\":{VERSION}}} header); the file is not read"
                        ));
                        return;
                    }
                }
                continue;
            }
            self.line(name, file, no, text);
        }
        if !header && no == 0 {
            self.error(file, 0, format!("{name}: empty: not a facts file"));
        }
    }

    /// One line after the header: an event record is kept for its input's replay; any other
    /// line is read whole now.
    fn line(&mut self, name: &str, file: u64, no: u64, text: &[u8]) {
        if let Some((tag, input, seq)) = quick_probe(text) {
            let i = self.input_named(input);
            self.keep_event(i, seq, tag, file, no, text);
            return;
        }
        let probe = serde_json::from_slice::<Probe>(text).ok();
        if let Some(p) = &probe {
            // A shuffled file may repeat the header (one per part concatenated).
            if p.format.is_some() && serde_json::from_slice::<Header>(text).is_ok() {
                return;
            }
            if let (Some(t), Some(input), Some(seq)) = (&p.t, &p.input, p.seq)
                && let Some(tag) = EVENT_TAGS.iter().position(|e| e == t)
            {
                let i = self.input_named(input);
                self.keep_event(i, seq, tag as u64, file, no, text);
                return;
            }
        }
        let fact: Fact = match serde_json::from_slice(text) {
            Ok(f) => f,
            Err(e) => {
                self.error(
                    file,
                    no,
                    format!("{name}: line {no}: {e}; the line is not read"),
                );
                return;
            }
        };
        let i = self.input_named(fact.input());
        let inp = &mut self.inputs[i];
        inp.named_at(file, no);
        let seq = fact.seq();
        match fact {
            Fact::Input { files, .. } => inp.files = files,
            Fact::InputEnd {
                stats,
                sessions,
                messages,
                seq,
                ..
            } => {
                let end = if inp.end.is_some() {
                    Err(format!("input {:?}: a second input_end record", inp.input))
                } else {
                    stats
                        .back()
                        .map(|stats| (stats, sessions.into_iter().collect(), messages, seq))
                };
                match end {
                    Ok(end) => inp.end = Some(end),
                    Err(e) => self.error(
                        file,
                        no,
                        format!("{name}: line {no}: {e}; the line is not read"),
                    ),
                }
            }
            // An event record the probe did not tell: kept as any other.
            f => {
                let tag = match f {
                    Fact::Opened { .. } => 0,
                    Fact::Unread { .. } => 1,
                    Fact::Ended { .. } => 2,
                    _ => 3,
                };
                self.keep_event(i, seq, tag, file, no, text)
            }
        }
    }

    /// The number of the input named `name`, taken at its first line.
    fn input_named(&mut self, name: &str) -> usize {
        if let Some(&i) = self.by_name.get(name) {
            return i;
        }
        let i = self.inputs.len();
        self.inputs.push(InputFacts {
            input: name.to_string(),
            ..InputFacts::default()
        });
        self.by_name.insert(name.to_string(), i);
        i
    }

    /// Keeps an event record's line, to sort by `[input, seq, file, line << 2 | tag]`.
    fn keep_event(&mut self, input: usize, seq: u64, tag: u64, file: u64, no: u64, text: &[u8]) {
        let bytes = self.events.bytes();
        let from = bytes.len();
        bytes.extend_from_slice(text);
        self.events
            .push(from, 0, [input as u64, seq, file, no << 2 | tag], None);
    }

    fn error(&mut self, file: u64, line: u64, text: String) {
        self.messages.push((file, line, true, text));
    }

    /// Gives each input's events, in `seq` order, to the sink `begin` makes for it, and
    /// finishes it. Returns, in report order, every input a record named with its sink and
    /// the stage's counters; [`FactsSet::messages`] then holds every message in order.
    pub fn replay<S, B>(
        &mut self,
        threads: usize,
        mut begin: B,
    ) -> std::io::Result<Vec<(InputFacts, S, StageStats)>>
    where
        S: FactSink,
        B: FnMut(&mut InputFacts) -> S,
    {
        let mut inputs = std::mem::take(&mut self.inputs);
        let mut done: Vec<Option<(S, StageStats)>> = (0..inputs.len()).map(|_| None).collect();
        let mut current: Option<(usize, Replay<S>)> = None;
        let files = &self.files;
        let messages = &mut self.messages;
        // Finishes the input being replayed, and every one after it up to `upto` (those have
        // no event records).
        let mut advance = |current: &mut Option<(usize, Replay<S>)>,
                           inputs: &mut [InputFacts],
                           done: &mut [Option<(S, StageStats)>],
                           upto: usize| {
            let next = match current.take() {
                Some((i, r)) => {
                    done[i] = Some(r.finish(&mut inputs[i], files));
                    i + 1
                }
                None => 0,
            };
            for i in next..upto {
                let r = Replay::new(begin(&mut inputs[i]));
                done[i] = Some(r.finish(&mut inputs[i], files));
            }
            if upto < inputs.len() {
                *current = Some((upto, Replay::new(begin(&mut inputs[upto]))));
            }
        };
        let mut runs = std::mem::replace(&mut self.events, Runs::new(0, false));
        if let Some(e) = runs.spill_error() {
            messages.push((u64::MAX, 0, false, format!("facts: {e}")));
        }
        read_back(&mut runs, files, threads, |r| {
            if current.as_ref().map(|(c, _)| *c) != Some(r.input) {
                advance(&mut current, &mut inputs, &mut done, r.input);
            }
            let (event, message) = match r.read {
                ReadOf::Event(e) => (Some(e), None),
                ReadOf::Refused(m) => (None, Some(m)),
                ReadOf::Unreadable(m) => {
                    messages.push((r.file, r.no, true, m));
                    return;
                }
            };
            inputs[r.input].named_at(r.file, r.no);
            if let Some((_, replay)) = current.as_mut()
                && let Some(e) = event
            {
                replay.event(r.seq, e);
            }
            if let Some(m) = message {
                messages.push((r.file, r.no, true, m));
            }
        })?;
        let n = inputs.len();
        advance(&mut current, &mut inputs, &mut done, n);
        self.messages.sort_by_key(|m| (m.0, m.1));
        // Inputs in the order their first record came; those only damaged lines named are
        // not inputs.
        let mut out: Vec<(InputFacts, S, StageStats)> = inputs
            .into_iter()
            .zip(done)
            .filter_map(|(inp, d)| {
                let (s, stats) = d?;
                inp.first.map(|_| (inp, s, stats))
            })
            .collect();
        out.sort_by_key(|(inp, _, _)| inp.first);
        Ok(out)
    }

    /// `(is_error, text)` of what could not be read, each naming the file (and line), in the
    /// order of the files and lines.
    pub fn messages(&self) -> Vec<(bool, String)> {
        self.messages
            .iter()
            .map(|(_, _, e, t)| (*e, t.clone()))
            .collect()
    }
}

/// What reading an event record back gave.
enum ReadOf {
    Event(Event),
    /// The record was read, its values refused: the message.
    Refused(String),
    /// The line does not read as a record: the message.
    Unreadable(String),
}

/// An event record read back, with its place: its input's number, its `seq`, its facts
/// file's number and its line there.
struct ReadBack {
    input: usize,
    seq: u64,
    file: u64,
    no: u64,
    read: ReadOf,
}

/// Event records read in batches of this many on a thread of their own.
const READ_BATCH: usize = 128;
/// A batch is sent once its lines reach this many bytes, however few they are: what is read
/// ahead stays small with lines of any length (up to [`MAX_LINE_BYTES`]).
const READ_BATCH_BYTES: usize = 256 << 10;
/// Batches read ahead of the session stage.
const READ_AHEAD_BATCHES: usize = 2;

/// Reads the event records of `runs` back, in order, and hands each to `consume`: with more
/// than one thread, the lines are read on a thread of their own (most of a reduce's work is
/// reading them), at most [`READ_AHEAD_BATCHES`] batches ahead of `consume`.
fn read_back<F>(
    runs: &mut Runs,
    files: &[String],
    threads: usize,
    mut consume: F,
) -> std::io::Result<()>
where
    F: FnMut(ReadBack),
{
    let read = |key: &crate::report::spool::SortKey, line: &[u8]| {
        let [input, seq, file, at] = key.words;
        let (no, tag) = (at >> 2, at & 3);
        let message = |e: &dyn std::fmt::Display| {
            let name = &files[file as usize];
            format!("{name}: line {no}: {e}; the line is not read")
        };
        let read = match read_event(tag, line) {
            Ok(Ok(e)) => ReadOf::Event(e),
            Ok(Err(e)) => ReadOf::Refused(message(&e)),
            Err(e) => ReadOf::Unreadable(message(&e)),
        };
        ReadBack {
            input: input as usize,
            seq,
            file,
            no,
            read,
        }
    };
    if threads <= 1 {
        return runs.for_each(|key, line| {
            consume(read(key, line));
            Ok(())
        });
    }
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<ReadBack>>(READ_AHEAD_BATCHES);
        let reader = scope.spawn(move || {
            let mut batch = Vec::with_capacity(READ_BATCH);
            let mut bytes = 0;
            let result = runs.for_each(|key, line| {
                batch.push(read(key, line));
                bytes += line.len();
                if batch.len() == READ_BATCH || bytes >= READ_BATCH_BYTES {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(READ_BATCH));
                    bytes = 0;
                    tx.send(full).map_err(std::io::Error::other)?;
                }
                Ok(())
            });
            if !batch.is_empty() {
                // The receiver reads to the end: a send fails only if it is gone.
                let _ = tx.send(batch);
            }
            result
        });
        for batch in rx {
            batch.into_iter().for_each(&mut consume);
        }
        reader
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the facts' reader failed")))
    })
}

/// The event an event record tells of, with its `seq`.
fn event_of(fact: Fact) -> Result<Event, String> {
    Ok(match fact {
        Fact::Opened {
            session_id,
            stream,
            exchange,
            ..
        } => Event::Opened(session_id, (stream, exchange)),
        Fact::Unread { .. } => Event::Unread,
        Fact::Ended {
            stream,
            exchange,
            summary,
            resume,
            ..
        } => Event::Ended(
            (stream, exchange),
            summary.map(|x| x.back()).transpose()?.map(Box::new),
            resume.map(|r| r.back()).transpose()?.map(Box::new),
        ),
        Fact::Har {
            summary, resume, ..
        } => Event::Har(
            summary.map(|x| x.back()).transpose()?.map(Box::new),
            resume.map(|r| r.back()).transpose()?.map(Box::new),
        ),
        Fact::Input { .. } | Fact::InputEnd { .. } => {
            return Err("not an event record".to_string());
        }
    })
}

/// A sink that writes down what it is given, as text: for tests and the fuzz crate.
#[derive(Default)]
pub(crate) struct Log(pub(crate) Vec<String>);

impl FactSink for Log {
    fn opened(&mut self, sid: &str, key: (u64, u32)) {
        self.0.push(format!("opened {sid} {key:?}"));
    }
    fn unread(&mut self) {
        self.0.push("unread".into());
    }
    fn ended(
        &mut self,
        key: (u64, u32),
        x: Option<Box<ExchangeSummary>>,
        r: Option<Box<ResumeRecord>>,
    ) {
        let x = x.map(|x| x.exchange);
        self.0.push(format!("ended {key:?} {x:?} {}", r.is_some()));
    }
    fn har(&mut self, resumes: Vec<Box<ResumeRecord>>, xs: Vec<Box<ExchangeSummary>>) {
        let xs: Vec<u32> = xs.iter().map(|x| x.exchange).collect();
        self.0.push(format!("har {} {xs:?}", resumes.len()));
    }
    fn finish(&mut self) -> StageStats {
        self.0.push("finish".into());
        StageStats::default()
    }
}

/// What the reduce makes of facts files read with runs of `memory` bytes and `threads`
/// threads, as lines of text: per input its name, what its sink was given and its problems;
/// then the messages. For tests and the fuzz crate.
pub(crate) fn replay_text(
    files: &[(String, Vec<u8>)],
    memory: usize,
    threads: usize,
) -> Vec<String> {
    let mut set = FactsSet::with_memory(memory);
    for (name, text) in files {
        set.read(name, &text[..]);
    }
    replayed_text(&mut set, threads)
}

/// What the reduce makes of the facts `set` has read, as [`replay_text`] writes it.
fn replayed_text(set: &mut FactsSet, threads: usize) -> Vec<String> {
    let mut out = Vec::new();
    match set.replay(threads, |_| Log::default()) {
        Ok(inputs) => {
            for (inp, log, _) in inputs {
                out.push(format!("input {}", inp.input));
                out.extend(log.0);
                out.extend(inp.problems);
            }
        }
        Err(e) => out.push(format!("replay failed: {e}")),
    }
    out.extend(set.messages().into_iter().map(|(_, m)| m));
    out
}

/// Whether what [`quick_probe`] tells of a line is what [`Probe`] tells of it, when both tell
/// anything: `Err` says how they differ. For the fuzz crate.
pub(crate) fn probes_agree(line: &[u8]) -> Result<(), String> {
    let Some((tag, input, seq)) = quick_probe(line) else {
        return Ok(());
    };
    // A line serde refuses is refused again when it is read whole.
    let Ok(p) = serde_json::from_slice::<Probe>(line) else {
        return Ok(());
    };
    let told = (p.t.as_deref(), p.input.as_deref(), p.seq);
    if told != (Some(EVENT_TAGS[tag as usize]), Some(input), Some(seq)) {
        return Err(format!("quick: {tag} {input:?} {seq}; serde: {told:?}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_facts_are_interned_once_and_bounded() {
        let a = intern("a reason read from facts").unwrap();
        let b = intern("a reason read from facts").unwrap();
        assert!(std::ptr::eq(a, b), "one copy per distinct name");
        assert!(intern(&"x".repeat(MAX_NAME_BYTES + 1)).is_err());
        // A file of ever-new names stops being interned at the bound instead of leaking.
        let refused = (0..MAX_NAMES + 10)
            .filter(|i| intern(&format!("name {i}")).is_err())
            .count();
        assert!(refused >= 10, "{refused}");
        // Names already known are still found.
        assert!(intern("a reason read from facts").is_ok());
    }

    #[test]
    fn a_summary_read_back_counts_the_room_of_its_stream_as_made() {
        use crate::exchange::{ContentFact, ContentKind, IdFact, IdSeen, StreamSummary};
        let mut s = StreamSummary::default();
        for i in 0..40u64 {
            s.id_facts.push(IdFact {
                hash: i,
                mark: Mark::new(i, 0),
                event: i,
                id_index: i,
                priming: false,
                integer: true,
                start: Mark::new(i, 0),
                key: 0,
                key_len: 0,
                text: (i < 3).then(|| i.to_string().into_boxed_str()),
            });
            s.content.push(ContentFact {
                hash: i,
                kind: ContentKind::Response,
                rpc_id: Some(i),
                mark: Mark::new(i, 0),
                event: i,
                event_id: None,
            });
        }
        s.keys.reserve(64);
        s.keys.extend([1, 2, 3]);
        s.last_id = Some(IdSeen {
            text: "39".into(),
            mark: Mark::new(39, 0),
            id_index: 39,
        });
        let held = held_stream(Some(Box::new(s)));
        let x = ExchangeSummary {
            exchange: 2,
            session_id: Some("s".into()),
            last_event_id: Some("4".into()),
            request: Some(Mark::new(1, 5)),
            status: Some(200),
            event_stream: true,
            stream_facts: held.facts,
            stream_empty: held.empty,
            stream_room: held.room,
            stream_distinctive: held.distinctive,
            ..Default::default()
        };
        assert!(x.stream_room > 0);
        let text = serde_json::to_string(&XSummary::of(&x)).unwrap();
        let back = serde_json::from_str::<XSummary>(&text)
            .unwrap()
            .back()
            .unwrap();
        // Its lists' room is fitted to their contents now; the count is the same.
        assert!(back.stream().unwrap().keys.capacity() < 64);
        assert_eq!(back, x);
        assert_eq!(
            back.stream_room as usize,
            back.stream().unwrap().facts_room()
        );
    }

    #[test]
    fn a_record_that_is_not_whole_is_an_error_for_its_line() {
        let mut set = FactsSet::default();
        let text = format!(
            "{{\"format\":\"{FORMAT}\",\"version\":{VERSION}}}\n\
             {{\"t\":\"unread\",\"input\":\"i\",\"seq\":1}}\n\
             {{\"t\":\"har\",\"input\":\"i\",\"seq\":2,\"session_id\":null,\"summary\":null,\
             \"resume\":{{\"verdict\":\"fine\"}}}}\n"
        );
        set.read("f.jsonl", text.as_bytes());
        let replayed = set.replay(1, |_| Log::default()).unwrap();
        assert_eq!(replayed.len(), 1);
        let messages = set.messages();
        assert!(
            messages
                .iter()
                .any(|(e, m)| *e && m.starts_with("f.jsonl: line 3: ")),
            "{messages:?}"
        );
        // The good line was read; the input's missing end is said.
        assert_eq!(replayed[0].1.0, ["unread", "finish"]);
        assert!(replayed[0].0.problems[0].contains("no input_end record"));
    }

    /// Facts read the way they were before event records were sorted on disk: every line read
    /// whole as it comes, each input's events sorted in memory. What the reduce writes, as
    /// lines of text: per input its name, what its sink was given and its problems; then the
    /// messages.
    fn model(files: &[(String, String)]) -> Vec<String> {
        struct In {
            name: String,
            source: String,
            events: Vec<(u64, Event)>,
            end: Option<u64>,
        }
        let mut inputs: Vec<In> = Vec::new();
        let mut messages = Vec::new();
        for (name, text) in files {
            for (no, line) in text.lines().enumerate().skip(1) {
                let no = no + 1;
                if serde_json::from_str::<Header>(line).is_ok() {
                    continue;
                }
                let fact: Fact = match serde_json::from_str(line) {
                    Ok(f) => f,
                    Err(e) => {
                        messages.push(format!("{name}: line {no}: {e}; the line is not read"));
                        continue;
                    }
                };
                let i = match inputs.iter().position(|i| i.name == fact.input()) {
                    Some(i) => i,
                    None => {
                        inputs.push(In {
                            name: fact.input().into(),
                            source: name.clone(),
                            events: Vec::new(),
                            end: None,
                        });
                        inputs.len() - 1
                    }
                };
                let seq = fact.seq();
                let got = match fact {
                    Fact::Input { .. } => Ok(()),
                    Fact::InputEnd { seq, .. } if inputs[i].end.is_none() => {
                        inputs[i].end = Some(seq);
                        Ok(())
                    }
                    Fact::InputEnd { .. } => Err(format!(
                        "input {:?}: a second input_end record",
                        inputs[i].name
                    )),
                    f => event_of(f).map(|e| inputs[i].events.push((seq, e))),
                };
                if let Err(e) = got {
                    messages.push(format!("{name}: line {no}: {e}; the line is not read"));
                }
            }
        }
        let mut out = Vec::new();
        for mut inp in inputs {
            out.push(format!("input {}", inp.name));
            inp.events.sort_by_key(|(s, _)| *s);
            let before = inp.events.len();
            inp.events.dedup_by_key(|(s, _)| *s);
            let mut log = Log::default();
            let (mut har_x, mut har_r, mut har) = (Vec::new(), Vec::new(), false);
            let events = inp.events.len() as u64;
            for (_, e) in inp.events {
                match e {
                    Event::Opened(sid, key) => log.opened(&sid, key),
                    Event::Unread => log.unread(),
                    Event::Ended(key, x, r) => log.ended(key, x, r),
                    Event::Har(x, r) => {
                        har = true;
                        har_x.extend(x);
                        har_r.extend(r);
                    }
                }
            }
            if har {
                log.har(har_r, har_x);
            }
            log.finish();
            out.extend(log.0);
            let (src, name) = (&inp.source, &inp.name);
            if before as u64 > events {
                let n = before as u64 - events;
                out.push(format!(
                    "{src}: input {name}: {n} record(s) given twice, read once"
                ));
            }
            match inp.end {
                None => out.push(format!(
                    "{src}: input {name}: no input_end record (the facts are cut short); its counters are missing"
                )),
                Some(end) if end != events + 1 => out.push(format!(
                    "{src}: input {name}: {events} event record(s) where the input_end record counts {}; the report is made from those read",
                    end.saturating_sub(1)
                )),
                Some(_) => {}
            }
        }
        out.extend(messages);
        out
    }

    /// The same lines, from facts read through [`FactsSet`] with runs of `memory` bytes.
    fn replayed(files: &[(String, String)], memory: usize, threads: usize) -> (Vec<String>, usize) {
        let mut set = FactsSet::with_memory(memory);
        for (name, text) in files {
            set.read(name, text.as_bytes());
        }
        let runs = set.events.runs();
        (replayed_text(&mut set, threads), runs)
    }

    /// Facts files of several inputs, their records spread over the files in any order,
    /// some given twice, some lost, some damaged.
    fn scrambled_facts(seed: u64) -> Vec<(String, String)> {
        let mut rng = seed | 1;
        let mut r = |n: u64| crate::testing::xorshift(&mut rng) % n;
        let stats = serde_json::to_string(&XStats::of(&InputStats::default())).unwrap();
        let mut lines: Vec<String> = Vec::new();
        for input in 0..4 {
            let name = format!("cap-{input}.pcap");
            let n = r(60);
            lines.push(format!(
                r#"{{"t":"input","input":"{name}","seq":0,"files":null}}"#
            ));
            for seq in 1..=n {
                let line = match r(6) {
                    0 => format!(
                        r#"{{"t":"opened","input":"{name}","seq":{seq},"session_id":"s{}","stream":{},"exchange":{}}}"#,
                        r(5),
                        r(9),
                        r(3)
                    ),
                    1 => format!(r#"{{"t":"unread","input":"{name}","seq":{seq}}}"#),
                    2 | 3 => format!(
                        r#"{{"t":"ended","input":"{name}","seq":{seq},"session_id":null,"stream":{},"exchange":{},"summary":null,"resume":null}}"#,
                        r(9),
                        r(3)
                    ),
                    4 => format!(
                        r#"{{"seq":{seq},"input":"{name}","t":"har","session_id":null,"summary":null,"resume":null}}"#
                    ),
                    // Damaged: found only when the record is read whole.
                    _ => format!(
                        r#"{{"t":"ended","input":"{name}","seq":{seq},"stream":"x","exchange":0}}"#
                    ),
                };
                lines.push(line);
            }
            if r(4) != 0 {
                let end = if r(5) == 0 { n + 3 } else { n + 1 };
                lines.push(format!(
                    r#"{{"t":"input_end","input":"{name}","seq":{end},"stats":{stats},"sessions":[],"messages":[]}}"#
                ));
            }
        }
        // Lines written otherwise than the map step writes them: the same records, but for the
        // last two (a tag given twice, a number JSON does not write).
        for line in lines.iter_mut() {
            match r(12) {
                0 => *line = line.replacen("\"input\":\"cap-", "\"input\":\"cap\\u002d", 1),
                1 => *line = line.replacen("{\"t\":", "{ \"t\" :", 1),
                2 => *line = line.replacen("\"seq\":", "\"seq\": ", 1),
                3 => *line = format!("{},\"t\":\"unread\"}}", &line[..line.len() - 1]),
                4 => *line = line.replacen("\"seq\":", "\"seq\":0", 1),
                _ => {}
            }
        }
        // Doubled, lost and broken lines.
        for _ in 0..r(20) {
            let i = r(lines.len() as u64) as usize;
            let copy = lines[i].clone();
            lines.push(copy);
        }
        for _ in 0..r(4) {
            let i = r(lines.len() as u64) as usize;
            lines.remove(i);
        }
        for _ in 0..r(4) {
            let i = r(lines.len() as u64) as usize;
            let half = lines[i].len() / 2;
            lines[i].truncate(half);
        }
        lines.push(r#"{"t":"input_end","input":"cap-9.pcap","seq":"broken"}"#.into());
        // Shuffled, then dealt to files each beginning with the header.
        for i in (1..lines.len()).rev() {
            lines.swap(i, r(i as u64 + 1) as usize);
        }
        let header = format!("{{\"format\":\"{FORMAT}\",\"version\":{VERSION}}}");
        let mut files: Vec<(String, String)> = (0..3)
            .map(|f| (format!("part-{f}.facts"), format!("{header}\n")))
            .collect();
        for line in lines {
            let f = r(3) as usize;
            files[f].1.push_str(&line);
            files[f].1.push('\n');
            if r(10) == 0 {
                files[f].1.push_str(&header);
                files[f].1.push('\n');
            }
        }
        files
    }

    #[test]
    fn facts_sorted_on_disk_replay_as_facts_read_whole_in_memory() {
        let mut spilled = 0;
        for seed in 0..120u64 {
            let files = scrambled_facts(seed * 7919 + 1);
            let want = model(&files);
            for (memory, threads) in [(64, 1), (1024, 2), (SPOOL_MEMORY, 1), (SPOOL_MEMORY, 2)] {
                let (got, runs) = replayed(&files, memory, threads);
                assert_eq!(
                    got, want,
                    "seed {seed}, runs of {memory} bytes, {threads} threads"
                );
                spilled += usize::from(runs > 1);
            }
        }
        assert!(spilled > 100, "runs went to disk {spilled} times");
    }

    #[test]
    fn facts_in_memory_stay_within_one_run() {
        let files = scrambled_facts(5);
        let mut set = FactsSet::with_memory(4096);
        for _ in 0..50 {
            for (name, text) in &files {
                set.read(name, text.as_bytes());
            }
            assert!(set.events.held() < 4096 + 70_000, "{}", set.events.held());
        }
        assert!(set.events.runs() > 10);
    }
}
