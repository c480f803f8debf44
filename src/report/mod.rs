//! Report: typed records to bytes.
//!
//! Input: decided [`ResumeRecord`]s with the input they came from, findings and session views
//! of the session stage, and the run's [`Summary`].
//! Output: JSON Lines, one `{"type":"resume",...}` object per resume, one
//! `{"type":"finding",...}` per finding tied to no resume, one `{"type":"session",...}` per
//! session when asked, and one `{"type":"summary",...}` last; or a plain-text account for a
//! person ([`write_human`]). The field names are a contract (documented in README.md and
//! docs/findings.md).
//! Invariants: no I/O here beyond the writer handed in; the same records give the same bytes.

pub mod files;
pub mod html;
pub mod spool;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use serde::Serialize;

use crate::audit::verdict::{LostRange, Verdict};
use crate::audit::{
    Cite, Cursor, CursorStatus, Evidence, Finding, FindingKind, SessionView, Severity,
};
use crate::exchange::{ExchangeSummary, ResumeRecord};
use crate::record::{BodyEnd, Mark};

/// The version of the records' schema (docs/schema/*.json), written in every record so that a
/// line read alone says what it is; raised when a field is removed or changes meaning, not
/// when one is added.
pub const SCHEMA_VERSION: u32 = 1;

/// Epoch seconds with microseconds, as Zeek writes `ts` (the instant [`rfc3339_micros`]
/// writes, to the same microsecond).
pub fn epoch_seconds(time_ns: i64) -> f64 {
    time_ns.div_euclid(1000) as f64 / 1e6
}

/// RFC 3339 UTC with microseconds, e.g. `2026-11-09T10:00:00.000123Z` (truncated, never
/// rounded up into the next second).
pub fn rfc3339_micros(time_ns: i64) -> String {
    // In i128: the microsecond below the earliest i64 instant is not an i64. Every one of
    // them (years 1677 to 2262) is within jiff's range.
    let floored = i128::from(time_ns) - i128::from(time_ns.rem_euclid(1000));
    match jiff::Timestamp::from_nanosecond(floored) {
        // jiff's RFC 3339 printer with six fractional digits: the same text as
        // `%Y-%m-%dT%H:%M:%S%.6fZ`, without parsing a format string for every time of a
        // report that may hold millions.
        Ok(t) => format!("{t:.6}"),
        Err(_) => String::new(),
    }
}

#[derive(Serialize)]
struct TlsLine<'a> {
    version: Option<&'a str>,
    cipher: Option<&'a str>,
    sni: Option<&'a str>,
    alpn: Option<&'a str>,
    keys: Option<&'a str>,
}

#[derive(Serialize)]
struct ResumeLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    input: &'a str,
    session_id: Option<&'a str>,
    verdict: Verdict,
    reason: &'static str,
    last_event_id: &'a str,
    first_event_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lost: Option<&'a LostRange>,
    #[serde(skip_serializing_if = "Option::is_none")]
    replay_span: Option<u64>,
    resent_ids: u64,
    request_method: &'a str,
    request_target: &'a str,
    request_time: String,
    request_frame: Option<u64>,
    /// Capture sets only: the file of `request_frame` (and so on for each `*_frame`).
    #[serde(skip_serializing_if = "Option::is_none")]
    request_file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    har_entry: Option<u64>,
    protocol_version: Option<&'a str>,
    response_status: Option<u16>,
    response_content_type: Option<&'a str>,
    response_frame: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_file: Option<String>,
    first_event_frame: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_event_file: Option<String>,
    first_event_time: Option<String>,
    events_before_first_id: u64,
    stream_events: u64,
    stream_end: Option<&'static str>,
    client: Option<String>,
    server: Option<String>,
    tcp_stream: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    h2_stream: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls: Option<TlsLine<'a>>,
    display_filter: Option<String>,
    /// The id shape (or `--id-pattern`) whose counter decided an opaque-id resume.
    id_shape: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    evidence: Option<&'a Evidence>,
    cursor: Option<&'a Cursor>,
    /// A session the capture holds at several hops of a proxy: this copy's hop (0 nearest
    /// the client) and the request it relays.
    #[serde(skip_serializing_if = "Option::is_none")]
    hop: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    relays: Option<&'a Cite>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priming_ack_frame: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priming_ack_file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resume_ack: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    retry_ms: Vec<u64>,
    findings: &'a [Finding],
    // Zeek / Elastic Common Schema-style copies of the fields above, for joins: the request
    // time as epoch seconds, and the endpoints' address and port apart.
    ts: f64,
    first_event_ts: Option<f64>,
    client_ip: Option<String>,
    client_port: Option<u16>,
    server_ip: Option<String>,
    server_port: Option<u16>,
    schema_version: u32,
}

pub fn body_end_name(end: Option<BodyEnd>) -> Option<&'static str> {
    use crate::record::StreamEnd::*;
    Some(match end? {
        BodyEnd::Complete => "complete",
        BodyEnd::Stream(Fin) => "fin",
        BodyEnd::Stream(Rst) => "rst",
        BodyEnd::Stream(PeerRst) => "client_rst",
        BodyEnd::Stream(CaptureEnd) => "capture_end",
        BodyEnd::Stream(Evicted) => "evicted",
        BodyEnd::Stream(Abandoned) => "abandoned",
        BodyEnd::LostSync => "lost_sync",
        BodyEnd::Malformed => "malformed",
        BodyEnd::Reset {
            by_client: false, ..
        } => "stream_reset",
        BodyEnd::Reset {
            by_client: true, ..
        } => "client_stream_reset",
        BodyEnd::GoneAway { .. } => "goaway",
    })
}

/// A Wireshark display filter that shows the frames proving the finding.
fn display_filter(tcp_stream: u64, from: Mark, to: Mark) -> String {
    let (a, b) = (from.frame.min(to.frame), from.frame.max(to.frame));
    format!("tcp.stream eq {tcp_stream} && frame.number >= {a} && frame.number <= {b}")
}

/// The display filter for a connection of a capture set, where each file numbers its own
/// `tcp.stream`s: the connection's addresses and ports, and the frames when both are in one
/// file.
fn set_display_filter(c: &crate::exchange::ConnectionRef, from: Mark, to: Mark) -> Option<String> {
    let (client, server) = (c.client?, c.server?);
    let ip = if client.ip.is_ipv6() { "ipv6" } else { "ip" };
    let mut f = if client.ip == server.ip {
        format!("{ip}.addr eq {}", client.ip)
    } else {
        format!("{ip}.addr eq {} && {ip}.addr eq {}", client.ip, server.ip)
    };
    f.push_str(&format!(
        " && tcp.port eq {} && tcp.port eq {}",
        client.port, server.port
    ));
    let ((fa, a), (fb, b)) = (files::locate(from.frame), files::locate(to.frame));
    if fa == fb {
        f.push_str(&format!(
            " && frame.number >= {} && frame.number <= {}",
            a.min(b),
            a.max(b)
        ));
    }
    Some(f)
}

/// Writes one resume record as a JSON line.
pub fn write_resume<W: Write + ?Sized>(
    out: &mut W,
    input: &str,
    r: &ResumeRecord,
) -> std::io::Result<()> {
    // HAR records cite entries, not frames: their marks carry the entry index.
    let har = r.connection.har_entry.is_some();
    let frame = |m: Mark| (!har).then(|| files::locate(m.frame).1);
    let file = |m: Mark| if har { None } else { files::locate(m.frame).0 };
    let line = ResumeLine {
        kind: "resume",
        input,
        session_id: r.session_id.as_deref(),
        verdict: r.decision.verdict,
        reason: r.decision.reason,
        last_event_id: &r.last_event_id,
        first_event_id: r.first_event_id.as_deref(),
        lost: r.decision.lost.as_ref(),
        replay_span: r.decision.replayed_count,
        resent_ids: r.resent_ids,
        request_method: &r.method,
        request_target: &r.target,
        request_time: rfc3339_micros(r.request.time_ns),
        request_frame: frame(r.request),
        request_file: file(r.request),
        har_entry: r.connection.har_entry,
        protocol_version: r.protocol_version.as_deref(),
        response_status: r.status,
        response_content_type: r.content_type.as_deref(),
        response_frame: r.response.and_then(frame),
        response_file: r.response.and_then(file),
        first_event_frame: r.first_event.and_then(frame),
        first_event_file: r.first_event.and_then(file),
        first_event_time: r
            .first_event
            .filter(|_| !har)
            .map(|m| rfc3339_micros(m.time_ns)),
        events_before_first_id: r.events_before_first_id,
        stream_events: r.stream_events,
        stream_end: body_end_name(r.stream_end),
        client: r.connection.client.map(|e| e.to_string()),
        server: r.connection.server.map(|e| e.to_string()),
        tcp_stream: r.connection.tcp_stream,
        h2_stream: r.h2_stream,
        tls: r.connection.tls.as_deref().map(|t| TlsLine {
            version: t.version.as_deref(),
            cipher: t.cipher.as_deref(),
            sni: t.sni.as_deref(),
            alpn: t.alpn.as_deref(),
            keys: t.keys.as_deref(),
        }),
        display_filter: r.connection.tcp_stream.and_then(|s| {
            let f = if files::in_set(r.request.frame) {
                set_display_filter(&r.connection, r.request, r.last_proof)?
            } else {
                display_filter(s, r.request, r.last_proof)
            };
            // Wireshark dissects HTTP/2 by itself only under TLS (by ALPN); cleartext h2c
            // needs "Decode As", without which an http2 field would hide every frame.
            Some(match (r.h2_stream, &r.connection.tls) {
                (Some(h), Some(_)) => format!("{f} && http2.streamid eq {h}"),
                _ => f,
            })
        }),
        id_shape: r.forensic.id_shape.as_deref(),
        evidence: r.forensic.evidence.as_ref(),
        cursor: r.forensic.cursor.as_ref(),
        hop: r.forensic.hop,
        relays: r.forensic.relays.as_deref(),
        priming_ack_frame: r.priming_ack.and_then(frame),
        priming_ack_file: r.priming_ack.and_then(file),
        resume_ack: r.resume_ack.as_ref().map(|a| a.0.as_str()),
        retry_ms: r.retry.iter().map(|r| r.0).collect(),
        findings: &r.forensic.findings,
        ts: epoch_seconds(r.request.time_ns),
        first_event_ts: r
            .first_event
            .filter(|_| !har)
            .map(|m| epoch_seconds(m.time_ns)),
        client_ip: r.connection.client.map(|e| e.ip.to_string()),
        client_port: r.connection.client.map(|e| e.port),
        server_ip: r.connection.server.map(|e| e.ip.to_string()),
        server_port: r.connection.server.map(|e| e.port),
        schema_version: SCHEMA_VERSION,
    };
    serde_json::to_writer(&mut *out, &line)?;
    out.write_all(b"\n")
}

impl Serialize for Cite {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = ser.serialize_map(None)?;
        m.serialize_entry("role", self.role)?;
        if self.har {
            m.serialize_entry("har_entry", &self.mark.frame)?;
        } else {
            let (file, frame) = files::locate(self.mark.frame);
            m.serialize_entry("frame", &frame)?;
            if let Some(file) = file {
                m.serialize_entry("file", &file)?;
            }
            m.serialize_entry("time", &rfc3339_micros(self.mark.time_ns))?;
        }
        if let Some(s) = self.tcp_stream {
            m.serialize_entry("tcp_stream", &s)?;
        }
        if let Some(s) = &self.session_id {
            m.serialize_entry("session_id", s)?;
        }
        m.end()
    }
}

impl Serialize for Evidence {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = ser.serialize_map(None)?;
        m.serialize_entry("how", &self.how)?;
        m.serialize_entry("detail", &files::detail_text(&self.detail))?;
        let opt = [
            ("id", &self.id),
            ("shape", &self.shape),
            ("last_seq", &self.last_seq),
            ("first_seq", &self.first_seq),
            ("ack", &self.ack),
        ];
        for (k, v) in opt {
            if let Some(v) = v {
                m.serialize_entry(k, v)?;
            }
        }
        if let Some(c) = self.count {
            m.serialize_entry("count", &c)?;
        }
        m.serialize_entry("cites", &self.cites)?;
        m.end()
    }
}

impl Serialize for Cursor {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = ser.serialize_map(None)?;
        m.serialize_entry("status", &self.status)?;
        m.serialize_entry("detail", &files::detail_text(&self.detail))?;
        m.serialize_entry("last_delivered_id", &self.last_delivered_id)?;
        if let Some(b) = self.behind_by {
            m.serialize_entry("behind_by", &b)?;
        }
        m.serialize_entry("cites", &self.cites)?;
        m.end()
    }
}

impl Serialize for Finding {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = ser.serialize_map(None)?;
        m.serialize_entry("kind", &self.kind)?;
        m.serialize_entry("severity", &self.severity)?;
        m.serialize_entry("session_id", &self.session_id)?;
        m.serialize_entry("detail", &files::detail_text(&self.detail))?;
        if let Some(id) = &self.id {
            m.serialize_entry("id", id)?;
        }
        if let Some(o) = &self.other_session_id {
            m.serialize_entry("other_session_id", o)?;
        }
        if let Some(r) = &self.resume {
            m.serialize_entry("resume", r)?;
        }
        m.serialize_entry("cites", &self.cites)?;
        m.end()
    }
}

#[derive(Serialize)]
struct FindingLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    input: &'a str,
    #[serde(flatten)]
    finding: &'a Finding,
    schema_version: u32,
}

/// Writes a finding tied to no resume as a JSON line.
pub fn write_finding<W: Write + ?Sized>(
    out: &mut W,
    input: &str,
    f: &Finding,
) -> std::io::Result<()> {
    let line = FindingLine {
        kind: "finding",
        input,
        finding: f,
        schema_version: SCHEMA_VERSION,
    };
    serde_json::to_writer(&mut *out, &line)?;
    out.write_all(b"\n")
}

#[derive(Serialize)]
struct StreamLine<'a> {
    events: u64,
    ids: u64,
    priming: u64,
    first_id: Option<&'a str>,
    first_id_frame: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_id_file: Option<String>,
    last_id: Option<&'a str>,
    last_id_frame: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_id_file: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    retry_ms: Vec<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resume_ack: Option<&'a str>,
    gaps: u64,
}

#[derive(Serialize)]
struct ExchangeLine<'a> {
    method: Option<&'a str>,
    target: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_event_id: Option<&'a str>,
    status: Option<u16>,
    request: Option<Cite>,
    response: Option<Cite>,
    end: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<StreamLine<'a>>,
}

#[derive(Serialize)]
struct ResumeBrief<'a> {
    request: &'a Cite,
    verdict: Verdict,
    last_event_id: &'a str,
    first_event_id: Option<&'a str>,
    id_shape: Option<&'a str>,
    cursor: Option<CursorStatus>,
}

#[derive(Serialize)]
struct SessionLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    input: &'a str,
    session_id: &'a str,
    protocol_versions: &'a [String],
    first_time: String,
    last_time: String,
    exchanges: Vec<ExchangeLine<'a>>,
    exchanges_omitted: u64,
    resumes: Vec<ResumeBrief<'a>>,
    findings: &'a [Finding],
    /// `first_time` and `last_time` as epoch seconds.
    first_ts: f64,
    last_ts: f64,
    schema_version: u32,
}

fn exchange_line(x: &ExchangeSummary) -> ExchangeLine<'_> {
    let at = |role, m: Mark| Cite {
        role,
        mark: m,
        tcp_stream: x.connection.tcp_stream,
        har: x.connection.har_entry.is_some(),
        session_id: None,
    };
    let har = x.connection.har_entry.is_some();
    let frame = |m: Mark| (!har).then(|| files::locate(m.frame).1);
    let file = |m: Mark| if har { None } else { files::locate(m.frame).0 };
    ExchangeLine {
        method: x.method.as_deref(),
        target: x.target.as_deref(),
        last_event_id: x.last_event_id.as_deref(),
        status: x.status,
        request: x.request.map(|m| at("request", m)),
        response: x.response.map(|m| at("response", m)),
        end: body_end_name(x.end.map(|e| e.0)),
        stream: x.stream.as_deref().map(|s| StreamLine {
            events: s.events,
            ids: s.ids,
            priming: s.priming,
            first_id: s.first_id.as_ref().map(|i| i.text.as_str()),
            first_id_frame: s.first_id.as_ref().and_then(|i| frame(i.mark)),
            first_id_file: s.first_id.as_ref().and_then(|i| file(i.mark)),
            last_id: s.last_id.as_ref().map(|i| i.text.as_str()),
            last_id_frame: s.last_id.as_ref().and_then(|i| frame(i.mark)),
            last_id_file: s.last_id.as_ref().and_then(|i| file(i.mark)),
            retry_ms: s.retry.iter().map(|r| r.0).collect(),
            resume_ack: s.resume_ack.as_ref().map(|a| a.0.as_str()),
            gaps: s.gaps,
        }),
    }
}

/// Writes one session view as a JSON line.
pub fn write_session<W: Write + ?Sized>(
    out: &mut W,
    input: &str,
    v: &SessionView,
) -> std::io::Result<()> {
    let line = SessionLine {
        kind: "session",
        input,
        session_id: &v.session_id,
        protocol_versions: &v.protocol_versions,
        first_time: rfc3339_micros(v.first.time_ns),
        last_time: rfc3339_micros(v.last.time_ns),
        exchanges: v.exchanges.iter().map(exchange_line).collect(),
        exchanges_omitted: v.exchanges_omitted,
        resumes: v
            .resumes
            .iter()
            .map(|r| ResumeBrief {
                request: &r.request,
                verdict: r.verdict,
                last_event_id: &r.last_event_id,
                first_event_id: r.first_event_id.as_deref(),
                id_shape: r.id_shape.as_deref(),
                cursor: r.cursor,
            })
            .collect(),
        findings: &v.findings,
        first_ts: epoch_seconds(v.first.time_ns),
        last_ts: epoch_seconds(v.last.time_ns),
        schema_version: SCHEMA_VERSION,
    };
    serde_json::to_writer(&mut *out, &line)?;
    out.write_all(b"\n")
}

fn cite_text(c: &Cite) -> String {
    let place = if c.har {
        format!("HAR entry {}", c.mark.frame)
    } else {
        files::frame_text(c.mark.frame)
    };
    match c.tcp_stream {
        Some(s) => format!("{place} (tcp.stream {s})"),
        None => place,
    }
}

fn severity_tag(s: Severity) -> &'static str {
    match s {
        Severity::Error => "ERROR",
        Severity::Warning => "warning",
        Severity::Info => "note",
    }
}

fn write_finding_text<W: Write + ?Sized>(
    out: &mut W,
    indent: &str,
    f: &Finding,
) -> std::io::Result<()> {
    writeln!(
        out,
        "{indent}{} {}: {}",
        severity_tag(f.severity),
        f.kind.as_str(),
        files::detail_text(&f.detail)
    )?;
    if !f.cites.is_empty() {
        let at: Vec<String> = f
            .cites
            .iter()
            .map(|c| format!("{} {}", c.role.replace('_', " "), cite_text(c)))
            .collect();
        writeln!(out, "{indent}  see: {}", at.join("; "))?;
    }
    Ok(())
}

/// A resume or finding deserves a person's attention.
fn notable_resume(r: &ResumeRecord) -> bool {
    r.decision.verdict != Verdict::Correct
        || r.forensic
            .findings
            .iter()
            .any(|f| f.severity != Severity::Info)
}

/// What the account for a person needs of one input: the resumes and findings it tells of,
/// and how many resumes each session had. Only what deserves attention is kept whole.
#[derive(Debug, Default)]
pub struct HumanNotes {
    resumes: Vec<ResumeRecord>,
    loose: Vec<Finding>,
    /// Per session (by name hash; `None`: no session id): resumes, and whether any is told of.
    sessions: HashMap<Option<u64>, (u64, bool)>,
}

fn session_key(sid: Option<&str>) -> Option<u64> {
    sid.map(|s| crate::exchange::fact_hash(&[s.as_bytes()]))
}

impl HumanNotes {
    pub fn resume(&mut self, r: ResumeRecord) {
        let notable = notable_resume(&r);
        let e = self
            .sessions
            .entry(session_key(r.session_id.as_deref()))
            .or_default();
        e.0 += 1;
        e.1 |= notable;
        if notable {
            self.resumes.push(r);
        }
    }

    pub fn finding(&mut self, f: Finding) {
        self.sessions
            .entry(session_key(f.session_id.as_deref()))
            .or_default()
            .1 = true;
        self.loose.push(f);
    }
}

/// How a verdict is shown on a terminal (the styles are dropped where colour is off): an
/// accusation in red, what the capture cannot tell in yellow, a correct resume in green.
fn verdict_style(v: Verdict) -> anstyle::Style {
    use anstyle::AnsiColor::*;
    let colour = match v {
        Verdict::GapSkipped | Verdict::Replayed => Red,
        Verdict::CaptureIncomplete | Verdict::Unverifiable => Yellow,
        Verdict::Correct => Green,
        Verdict::Rejected | Verdict::Empty => Cyan,
    };
    anstyle::Style::new().fg_color(Some(colour.into())).bold()
}

/// Writes, for a person, what went wrong in one input: per session, each resume that is not
/// `correct` or has findings, with the reason, the proof and the frames to open in Wireshark;
/// then findings tied to no resume. Sessions where all is well are only counted.
pub fn write_human_input<W: Write + ?Sized>(
    out: &mut W,
    input: &str,
    notes: &mut HumanNotes,
) -> std::io::Result<()> {
    type Group<'a> = (Vec<&'a ResumeRecord>, Vec<&'a Finding>);
    notes.resumes.sort_by_key(crate::audit::resume_order);
    crate::audit::sort_findings(&mut notes.loose);
    let mut groups: BTreeMap<Option<&str>, Group<'_>> = BTreeMap::new();
    for r in &notes.resumes {
        groups.entry(r.session_id.as_deref()).or_default().0.push(r);
    }
    for f in &notes.loose {
        groups.entry(f.session_id.as_deref()).or_default().1.push(f);
    }
    writeln!(out, "== {input} ==")?;
    let quiet = notes.sessions.values().filter(|(_, told)| !told).count();
    // Sessions in time order: by their first resume, then those with findings only.
    let mut order: Vec<Option<&str>> = Vec::with_capacity(groups.len());
    let mut seen = std::collections::HashSet::new();
    for sid in notes
        .resumes
        .iter()
        .map(|r| r.session_id.as_deref())
        .chain(notes.loose.iter().map(|f| f.session_id.as_deref()))
    {
        if seen.insert(sid) {
            order.push(sid);
        }
    }
    for sid in &order {
        let Some((rs, fs)) = groups.get(sid) else {
            continue;
        };
        let total = notes
            .sessions
            .get(&session_key(*sid))
            .map_or(rs.len() as u64, |e| e.0);
        match sid {
            Some(sid) => writeln!(out, "session {sid}: {total} resume(s)")?,
            None => writeln!(out, "no session id: {total} resume(s)")?,
        }
        for r in rs.iter().filter(|r| notable_resume(r)) {
            let place = if r.connection.har_entry.is_some() {
                format!("HAR entry {}", r.request.frame)
            } else {
                format!(
                    "{}{}",
                    files::frame_text(r.request.frame),
                    r.connection
                        .tcp_stream
                        .map(|s| format!(", tcp.stream {s}"))
                        .unwrap_or_default()
                )
            };
            let style = verdict_style(r.decision.verdict);
            writeln!(
                out,
                "  {style}[{}]{style:#} {} {} at {} ({place})",
                r.decision.verdict.as_str(),
                r.method,
                r.target,
                rfc3339_micros(r.request.time_ns)
            )?;
            writeln!(
                out,
                "    Last-Event-ID {:?}, first id {}: {}",
                r.last_event_id,
                r.first_event_id
                    .as_deref()
                    .map_or("none".to_string(), |f| format!("{f:?}")),
                r.decision.reason
            )?;
            if let Some(lost) = &r.decision.lost {
                let count = lost
                    .count
                    .map_or("more than 2^64".to_string(), |c| c.to_string());
                writeln!(
                    out,
                    "    ids lost: {} to {} ({count} event(s) the client never got)",
                    lost.from, lost.to
                )?;
            }
            if let Some(hop) = r.forensic.hop {
                match &r.forensic.relays {
                    Some(c) => writeln!(
                        out,
                        "    hop {hop}: a proxy's copy of the request at {}",
                        files::frame_text(c.mark.frame)
                    )?,
                    None => writeln!(out, "    hop {hop}: the copy nearest the client")?,
                }
            }
            if let Some(shape) = &r.forensic.id_shape {
                writeln!(out, "    ids compared by their counter, shape {shape}")?;
            }
            if let Some(e) = &r.forensic.evidence {
                writeln!(out, "    proof: {}", files::detail_text(&e.detail))?;
            }
            if let Some(c) = &r.forensic.cursor
                && matches!(c.status, CursorStatus::Stale | CursorStatus::Ahead)
            {
                writeln!(out, "    client cursor: {}", files::detail_text(&c.detail))?;
            }
            for f in &r.forensic.findings {
                if f.kind != FindingKind::CursorStale && f.kind != FindingKind::CursorAhead {
                    write_finding_text(out, "    ", f)?;
                }
            }
            let filter = match r.connection.tcp_stream {
                Some(_) if files::in_set(r.request.frame) => {
                    set_display_filter(&r.connection, r.request, r.last_proof).map(|f| {
                        format!(
                            "{f} (in {})",
                            files::locate(r.request.frame).0.unwrap_or_default()
                        )
                    })
                }
                Some(s) => Some(display_filter(s, r.request, r.last_proof)),
                None => None,
            };
            if let Some(f) = filter {
                writeln!(out, "    open in Wireshark: {f}")?;
            }
        }
        for f in fs {
            write_finding_text(out, "  ", f)?;
        }
    }
    if quiet > 0 {
        writeln!(
            out,
            "{quiet} other session(s): every resume correct, nothing to report"
        )?;
    }
    if notes.sessions.is_empty() {
        writeln!(out, "no resume and no finding")?;
    }
    Ok(())
}

/// The closing line of the account for a person.
pub fn write_human_summary<W: Write + ?Sized>(out: &mut W, s: &Summary) -> std::io::Result<()> {
    // Capture health first: what could be seen decides what the verdicts are worth.
    let c = &s.coverage;
    let list = |m: &BTreeMap<&'static str, Tally>| {
        m.iter()
            .map(|(k, t)| format!("{} {k}", t.connections))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut health = format!(
        "capture: {} packet(s), {} TCP connection(s)",
        s.packets, s.tcp_connections
    );
    if !c.read.is_empty() {
        health.push_str(&format!("; read: {}", list(&c.read)));
    }
    if !c.unread.is_empty() {
        health.push_str(&format!("; NOT read: {}", list(&c.unread)));
    }
    if s.tcp_gaps > 0 {
        health.push_str(&format!(
            "; {} TCP gap(s), {} bytes the capture lost",
            s.tcp_gaps, s.tcp_gap_bytes
        ));
    }
    if c.packets_cut > 0 {
        health.push_str(&format!(
            "; {} packet(s) cut at {} bytes",
            c.packets_cut,
            c.snap_length.unwrap_or(0)
        ));
    }
    let skipped: u64 = s.packets_skipped.values().sum();
    if skipped > 0 {
        health.push_str(&format!("; {skipped} packet(s) skipped"));
    }
    writeln!(out, "{health}")?;
    let verdicts: Vec<String> = s
        .verdicts
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(v, n)| format!("{n} {v}"))
        .collect();
    let findings: Vec<String> = s
        .findings
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    writeln!(
        out,
        "{} input(s), {} session(s), {} resume(s){}{}{}",
        s.inputs,
        s.sessions,
        s.resumes,
        if verdicts.is_empty() {
            String::new()
        } else {
            format!(": {}", verdicts.join(", "))
        },
        if findings.is_empty() {
            String::new()
        } else {
            format!("; findings: {}", findings.join(", "))
        },
        if s.inputs_failed > 0 {
            format!("; {} input(s) could not be read in full", s.inputs_failed)
        } else {
            String::new()
        }
    )
}

/// Why an input, or part of one, could not be read.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct InputProblem {
    pub input: String,
    pub error: String,
}

/// Totals over the whole run.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub inputs: u64,
    /// Inputs that could not be read at all, or only in part.
    pub inputs_failed: u64,
    pub packets: u64,
    pub tcp_connections: u64,
    pub http_exchanges: u64,
    pub sessions: u64,
    pub resumes: u64,
    pub verdicts: BTreeMap<&'static str, u64>,
    /// Holes in TCP streams the capture did not hold, and their bytes.
    pub tcp_gaps: u64,
    pub tcp_gap_bytes: u64,
    /// Packets skipped by reason (not TCP, fragments, malformed, unsupported link type).
    pub packets_skipped: BTreeMap<&'static str, u64>,
    /// Parser anomalies by kind.
    pub anomalies: BTreeMap<String, u64>,
    /// Connections dropped to stay within `--max-connections`.
    pub connections_evicted: u64,
    /// Out-of-order buffers that overflowed `--max-out-of-order` and were given up as gaps.
    pub out_of_order_overflows: u64,
    /// Findings of the session stage by kind.
    pub findings: BTreeMap<&'static str, u64>,
    /// Session facts dropped by the per-stream caps (see docs/findings.md).
    pub facts_dropped: u64,
    /// Exchanges left out of the session stage by its caps.
    pub exchanges_not_audited: u64,
    /// Sessions audited before they were over, to stay within `--session-memory` or the
    /// exchanges one session may hold; their later exchanges were audited apart.
    pub sessions_retired_early: u64,
    /// What the TCP connections were read as, and what could not be read, and why.
    pub coverage: CoverageStats,
    pub problems: Vec<InputProblem>,
    /// Per input: what it held, what was read and what was not.
    pub per_input: Vec<InputSummary>,
    pub schema_version: u32,
}

/// One input's line in the summary.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct InputSummary {
    pub input: String,
    /// Could not be read, wholly or in part (its errors are in `problems`).
    pub failed: bool,
    pub packets: u64,
    pub tcp_connections: u64,
    pub http_exchanges: u64,
    pub resumes: u64,
    pub coverage: CoverageStats,
    /// A capture set's files in the order they were read; empty for one file.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
}

/// Connections and bytes of one kind.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Tally {
    pub connections: u64,
    pub bytes: u64,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.connections += other.connections;
        self.bytes += other.bytes;
    }
}

/// A server endpoint whose traffic was not read.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct UnreadServer {
    pub server: String,
    pub reason: &'static str,
    pub connections: u64,
    pub bytes: u64,
}

/// Server endpoints named in `unread_servers`, by bytes; the rest are only counted.
pub const MAX_UNREAD_SERVERS: usize = 10;
/// Distinct (server, reason) pairs tallied per input before further ones go to `other`.
const MAX_SERVERS_TALLIED: usize = 4096;

/// Coverage accounting: every TCP connection is read (by protocol), empty, or not read with
/// a reason; packets cut by the snap length are counted apart.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct CoverageStats {
    /// Connections read, by protocol stack (`http1`, `h2`, `tls/http1`, `tls/h2`), with their
    /// payload bytes.
    pub read: BTreeMap<&'static str, Tally>,
    /// Connections that carried no payload.
    pub empty: u64,
    /// Connections not read, by reason (`tls_no_keys`, `tls_unsupported`, `tls_keys_wrong`,
    /// `tls_handshake_missing`, `not_http`).
    pub unread: BTreeMap<&'static str, Tally>,
    /// Connections not read whose server the user named as not MCP (`--ignore-endpoint`).
    pub ignored: Tally,
    /// HTTP/2 header blocks of read connections that could not be decoded because bytes
    /// before them were lost (their direction's HPACK state went with them): requests and
    /// answers there, resumes among them, cannot be seen.
    pub h2_headers_unreadable: u64,
    /// TLS directions whose rest could not be decrypted after bytes the capture lost (no later
    /// record authenticated within the search bounds).
    pub tls_rest_unreadable: u64,
    /// Frames the snap length cut short (their missing bytes are TCP gaps), and the longest
    /// captured length among them.
    pub packets_cut: u64,
    pub snap_length: Option<u64>,
    /// The servers whose connections were not read, most bytes first.
    pub unread_servers: Vec<UnreadServer>,
    #[serde(skip)]
    servers: BTreeMap<(String, &'static str), Tally>,
}

impl CoverageStats {
    pub fn count_read(&mut self, protocol: &'static str, bytes: u64) {
        self.read.entry(protocol).or_default().add(Tally {
            connections: 1,
            bytes,
        });
    }

    pub fn count_unread(&mut self, reason: &'static str, server: Option<String>, bytes: u64) {
        let one = Tally {
            connections: 1,
            bytes,
        };
        self.unread.entry(reason).or_default().add(one);
        let server = server.unwrap_or_else(|| "unknown".to_string());
        let key = if self.servers.len() < MAX_SERVERS_TALLIED
            || self.servers.contains_key(&(server.clone(), reason))
        {
            (server, reason)
        } else {
            ("other".to_string(), reason)
        };
        self.servers.entry(key).or_default().add(one);
    }

    pub fn count_cut(&mut self, captured: u64) {
        self.packets_cut += 1;
        self.snap_length = Some(self.snap_length.map_or(captured, |s| s.max(captured)));
    }

    pub fn absorb(&mut self, other: &CoverageStats) {
        for (k, t) in &other.read {
            self.read.entry(k).or_default().add(*t);
        }
        self.empty += other.empty;
        self.ignored.add(other.ignored);
        self.h2_headers_unreadable += other.h2_headers_unreadable;
        self.tls_rest_unreadable += other.tls_rest_unreadable;
        for (k, t) in &other.unread {
            self.unread.entry(k).or_default().add(*t);
        }
        for (k, t) in &other.servers {
            self.servers.entry(k.clone()).or_default().add(*t);
        }
        self.packets_cut += other.packets_cut;
        self.snap_length = match (self.snap_length, other.snap_length) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.name_servers();
    }

    /// The (server, reason) tally behind `unread_servers`, whole (for the facts format).
    pub fn server_tally(&self) -> impl Iterator<Item = (&str, &'static str, Tally)> {
        self.servers
            .iter()
            .map(|((server, reason), t)| (server.as_str(), *reason, *t))
    }

    /// Adds to the (server, reason) tally (the facts reader gives back what
    /// [`CoverageStats::server_tally`] gave).
    pub fn add_server_tally(&mut self, server: String, reason: &'static str, t: Tally) {
        self.servers.entry((server, reason)).or_default().add(t);
    }

    /// Fills `unread_servers` from the tally: most bytes first, then by name.
    pub fn name_servers(&mut self) {
        let mut all: Vec<UnreadServer> = self
            .servers
            .iter()
            .map(|((server, reason), t)| UnreadServer {
                server: server.clone(),
                reason,
                connections: t.connections,
                bytes: t.bytes,
            })
            .collect();
        all.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then_with(|| a.server.cmp(&b.server))
                .then_with(|| a.reason.cmp(b.reason))
        });
        all.truncate(MAX_UNREAD_SERVERS);
        self.unread_servers = all;
    }

    /// Traffic that may carry MCP went unread (traffic that is not HTTP at all does not
    /// count).
    pub fn may_hide_mcp(&self) -> bool {
        self.unread.keys().any(|r| *r != "not_http")
            || self.packets_cut > 0
            || self.h2_headers_unreadable > 0
            || self.tls_rest_unreadable > 0
    }

    /// One line for a person: what was not read and what would help; `None` when all was.
    pub fn warning(&self) -> Option<String> {
        if !self.may_hide_mcp() {
            return None;
        }
        let mut parts = Vec::new();
        for (reason, t) in &self.unread {
            let what = match *reason {
                "tls_no_keys" => {
                    "TLS without its keys: pass --tls-keylog FILE (SSLKEYLOGFILE format)"
                }
                "tls_unsupported" => {
                    "TLS with a version or cipher suite that is not decrypted (CBC, CCM, TLS 1.1 or older)"
                }
                "tls_keys_wrong" => {
                    "TLS that the logged keys do not decrypt: another session's key log?"
                }
                "tls_handshake_missing" => {
                    "TLS whose handshake the capture missed: capture from the connections' start"
                }
                "gap_before_protocol" => {
                    "connections whose first bytes the capture lost: what they speak cannot be told"
                }
                "not_http" => continue,
                other => other,
            };
            parts.push(format!(
                "{} connection(s), {} bytes: {what}",
                t.connections, t.bytes
            ));
        }
        if self.h2_headers_unreadable > 0 {
            parts.push(format!(
                "{} HTTP/2 header block(s) unreadable after bytes the capture lost (HPACK state \
                 lost): the requests and answers there cannot be seen",
                self.h2_headers_unreadable
            ));
        }
        if self.tls_rest_unreadable > 0 {
            parts.push(format!(
                "{} TLS direction(s) not decrypted past bytes the capture lost (no later record \
                 could be found and authenticated)",
                self.tls_rest_unreadable
            ));
        }
        if self.packets_cut > 0 {
            parts.push(format!(
                "{} packet(s) cut at {} bytes by the snap length: capture with -s 0",
                self.packets_cut,
                self.snap_length.unwrap_or(0)
            ));
        }
        let servers: Vec<String> = self
            .unread_servers
            .iter()
            .filter(|s| s.reason != "not_http")
            .take(3)
            .map(|s| format!("{} ({})", s.server, s.reason))
            .collect();
        let mut line = format!("traffic not read: {}", parts.join("; "));
        if !servers.is_empty() {
            line.push_str(&format!("; servers: {}", servers.join(", ")));
        }
        Some(line)
    }
}

impl Summary {
    pub fn new() -> Self {
        let mut s = Summary {
            kind: "summary",
            schema_version: SCHEMA_VERSION,
            ..Default::default()
        };
        for v in Verdict::ALL {
            s.verdicts.insert(v.as_str(), 0);
        }
        for k in FindingKind::ALL {
            s.findings.insert(k.as_str(), 0);
        }
        s
    }

    pub fn count_finding(&mut self, f: &Finding) {
        *self.findings.entry(f.kind.as_str()).or_insert(0) += 1;
    }

    /// Adds the verdict and finding counts of `other` (one input's) to these.
    pub fn absorb_counts(&mut self, other: &Summary) {
        self.resumes += other.resumes;
        for (k, v) in &other.verdicts {
            *self.verdicts.entry(k).or_insert(0) += v;
        }
        for (k, v) in &other.findings {
            *self.findings.entry(k).or_insert(0) += v;
        }
    }

    pub fn count_verdict(&mut self, v: Verdict) {
        *self.verdicts.entry(v.as_str()).or_insert(0) += 1;
        self.resumes += 1;
    }

    pub fn write<W: Write + ?Sized>(&self, out: &mut W) -> std::io::Result<()> {
        serde_json::to_writer(&mut *out, self)?;
        out.write_all(b"\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http2_ends_have_report_names() {
        let name = |end| body_end_name(Some(end));
        let reset = |by_client| BodyEnd::Reset { by_client, code: 8 };
        assert_eq!(name(reset(false)), Some("stream_reset"));
        assert_eq!(name(reset(true)), Some("client_stream_reset"));
        assert_eq!(name(BodyEnd::GoneAway { code: 0 }), Some("goaway"));
    }

    #[test]
    fn rfc3339_is_the_strftime_text_everywhere_in_range() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut instants = vec![0, -1, 1, 999, 1000, -1000, -1001, i64::MIN, i64::MAX];
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            instants.push(x as i64);
            instants.push((x % 4_000_000_000_000_000_000) as i64);
        }
        for ns in instants {
            let floored = i128::from(ns) - i128::from(ns.rem_euclid(1000));
            let t = jiff::Timestamp::from_nanosecond(floored).expect("every i64 is in range");
            let want = t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
            assert_eq!(rfc3339_micros(ns), want, "{ns}");
        }
    }

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(rfc3339_micros(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            rfc3339_micros(1_762_682_400_123_456_789),
            "2025-11-09T10:00:00.123456Z"
        );
        assert_eq!(
            rfc3339_micros(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000000Z"
        );
        assert_eq!(rfc3339_micros(-1_000), "1969-12-31T23:59:59.999999Z");
    }

    #[test]
    fn filter_spans_the_proof() {
        assert_eq!(
            display_filter(3, Mark::new(12, 0), Mark::new(15, 0)),
            "tcp.stream eq 3 && frame.number >= 12 && frame.number <= 15"
        );
    }
}
