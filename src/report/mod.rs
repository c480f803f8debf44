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

pub mod dest;
pub mod files;
pub mod html;
mod json;
pub mod relay;
pub mod spool;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use serde::Serialize;

#[cfg(test)]
use crate::audit::verdict::LostRange;
use crate::audit::verdict::Verdict;
use crate::audit::{
    Cite, Cursor, CursorStatus, Evidence, Finding, FindingKind, SessionView, Severity,
};
use crate::exchange::{ExchangeSummary, ResumeRecord};
use crate::record::{BodyEnd, Mark};
use json::key;

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
    let mut out = Vec::with_capacity(27);
    json::time_text(&mut out, time_ns);
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
#[derive(Serialize)]
struct TlsLine<'a> {
    version: Option<&'a str>,
    cipher: Option<&'a str>,
    sni: Option<&'a str>,
    alpn: Option<&'a str>,
    keys: Option<&'a str>,
}

#[cfg(test)]
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
    let mut line = Vec::with_capacity(1536);
    resume_line(&mut line, input, r);
    out.write_all(&line)
}

/// The frame of a mark as the report cites it and the file it is in (`None` for a lone
/// file), or neither for a HAR entry.
fn cited(har: bool, m: Mark) -> (Option<u64>, Option<String>) {
    if har {
        return (None, None);
    }
    let (file, frame) = files::locate(m.frame);
    (Some(frame), file)
}

/// Appends one resume record's JSON line, newline included (what [`write_resume`] writes).
pub(crate) fn resume_line(out: &mut Vec<u8>, input: &str, r: &ResumeRecord) {
    let mut quoted = Vec::with_capacity(input.len() + 2);
    json::str(&mut quoted, input);
    resume_line_quoted(out, &quoted, r);
}

/// [`resume_line`], with the input's name given as its JSON string: the lines of one input
/// all name it, and it is escaped once for them all.
pub(crate) fn resume_line_quoted(out: &mut Vec<u8>, input_json: &[u8], r: &ResumeRecord) {
    // HAR records cite entries, not frames: their marks carry the entry index.
    let har = r.connection.har_entry.is_some();
    out.extend_from_slice(b"{\"type\":\"resume\",\"input\":");
    out.extend_from_slice(input_json);
    key!(out, "session_id");
    json::opt_str(out, r.session_id.as_deref());
    key!(out, "verdict");
    json::str(out, r.decision.verdict.as_str());
    key!(out, "reason");
    json::str(out, r.decision.reason);
    key!(out, "last_event_id");
    json::str(out, &r.last_event_id);
    key!(out, "first_event_id");
    json::opt_str(out, r.first_event_id.as_deref());
    if let Some(lost) = &r.decision.lost {
        key!(out, "lost");
        out.extend_from_slice(b"{\"from\":");
        json::str(out, &lost.from);
        key!(out, "to");
        json::str(out, &lost.to);
        key!(out, "count");
        json::opt_u64(out, lost.count);
        out.push(b'}');
    }
    if let Some(n) = r.decision.replayed_count {
        key!(out, "replay_span");
        json::u64(out, n);
    }
    key!(out, "resent_ids");
    json::u64(out, r.resent_ids);
    key!(out, "request_method");
    json::str(out, &r.method);
    key!(out, "request_target");
    json::str(out, &r.target);
    key!(out, "request_time");
    json::time(out, r.request.time_ns);
    let (frame, file) = cited(har, r.request);
    key!(out, "request_frame");
    json::opt_u64(out, frame);
    if let Some(file) = file {
        key!(out, "request_file");
        json::str(out, &file);
    }
    if let Some(entry) = r.connection.har_entry {
        key!(out, "har_entry");
        json::u64(out, entry);
    }
    key!(out, "protocol_version");
    json::opt_str(out, r.protocol_version.as_deref());
    key!(out, "response_status");
    json::opt_u64(out, r.status.map(u64::from));
    key!(out, "response_content_type");
    json::opt_str(out, r.content_type.as_deref());
    let (frame, file) = r.response.map_or((None, None), |m| cited(har, m));
    key!(out, "response_frame");
    json::opt_u64(out, frame);
    if let Some(file) = file {
        key!(out, "response_file");
        json::str(out, &file);
    }
    let (frame, file) = r.first_event.map_or((None, None), |m| cited(har, m));
    key!(out, "first_event_frame");
    json::opt_u64(out, frame);
    if let Some(file) = file {
        key!(out, "first_event_file");
        json::str(out, &file);
    }
    key!(out, "first_event_time");
    match r.first_event.filter(|_| !har) {
        Some(m) => json::time(out, m.time_ns),
        None => json::null(out),
    }
    key!(out, "events_before_first_id");
    json::u64(out, r.events_before_first_id);
    key!(out, "stream_events");
    json::u64(out, r.stream_events);
    key!(out, "stream_end");
    json::opt_str(out, body_end_name(r.stream_end));
    key!(out, "client");
    match r.connection.client {
        Some(e) => json::endpoint(out, e),
        None => json::null(out),
    }
    key!(out, "server");
    match r.connection.server {
        Some(e) => json::endpoint(out, e),
        None => json::null(out),
    }
    key!(out, "tcp_stream");
    json::opt_u64(out, r.connection.tcp_stream);
    if let Some(h) = r.h2_stream {
        key!(out, "h2_stream");
        json::u64(out, u64::from(h));
    }
    if let Some(t) = r.connection.tls.as_deref() {
        key!(out, "tls");
        out.extend_from_slice(b"{\"version\":");
        json::opt_str(out, t.version.as_deref());
        key!(out, "cipher");
        json::opt_str(out, t.cipher.as_deref());
        key!(out, "sni");
        json::opt_str(out, t.sni.as_deref());
        key!(out, "alpn");
        json::opt_str(out, t.alpn.as_deref());
        key!(out, "keys");
        json::opt_str(out, t.keys.as_deref());
        out.push(b'}');
    }
    key!(out, "display_filter");
    resume_display_filter(out, r);
    key!(out, "id_shape");
    json::opt_str(out, r.forensic.id_shape.as_deref());
    if let Some(e) = &r.forensic.evidence {
        key!(out, "evidence");
        evidence_json(out, e);
    }
    key!(out, "cursor");
    match &r.forensic.cursor {
        Some(c) => cursor_json(out, c),
        None => json::null(out),
    }
    if let Some(hop) = r.forensic.hop {
        key!(out, "hop");
        json::u64(out, u64::from(hop));
    }
    if let Some(c) = r.forensic.relays.as_deref() {
        key!(out, "relays");
        cite_json(out, c);
    }
    let (frame, file) = r.priming_ack.map_or((None, None), |m| cited(har, m));
    if let Some(frame) = frame {
        key!(out, "priming_ack_frame");
        json::u64(out, frame);
    }
    if let Some(file) = file {
        key!(out, "priming_ack_file");
        json::str(out, &file);
    }
    if let Some(a) = &r.resume_ack {
        key!(out, "resume_ack");
        json::str(out, &a.0);
    }
    if !r.retry.is_empty() {
        key!(out, "retry_ms");
        let mut sep = b'[';
        for (ms, _) in &r.retry {
            out.push(sep);
            sep = b',';
            json::u64(out, *ms);
        }
        out.push(b']');
    }
    key!(out, "findings");
    findings_json(out, &r.forensic.findings);
    key!(out, "ts");
    json::value(out, &epoch_seconds(r.request.time_ns));
    key!(out, "first_event_ts");
    match r.first_event.filter(|_| !har) {
        Some(m) => json::value(out, &epoch_seconds(m.time_ns)),
        None => json::null(out),
    }
    key!(out, "client_ip");
    match r.connection.client {
        Some(e) => json::ip(out, e.ip),
        None => json::null(out),
    }
    key!(out, "client_port");
    json::opt_u64(out, r.connection.client.map(|e| u64::from(e.port)));
    key!(out, "server_ip");
    match r.connection.server {
        Some(e) => json::ip(out, e.ip),
        None => json::null(out),
    }
    key!(out, "server_port");
    json::opt_u64(out, r.connection.server.map(|e| u64::from(e.port)));
    key!(out, "schema_version");
    json::u64(out, u64::from(SCHEMA_VERSION));
    out.extend_from_slice(b"}\n");
}

/// A resume's `display_filter` value: the frames from the request to the last proof on its
/// connection, or `null`.
fn resume_display_filter(out: &mut Vec<u8>, r: &ResumeRecord) {
    let Some(s) = r.connection.tcp_stream else {
        return json::null(out);
    };
    // Wireshark dissects HTTP/2 by itself only under TLS (by ALPN); cleartext h2c needs
    // "Decode As", without which an http2 field would hide every frame.
    let h2 = match (r.h2_stream, &r.connection.tls) {
        (Some(h), Some(_)) => Some(h),
        _ => None,
    };
    if files::in_set(r.request.frame) {
        match set_display_filter(&r.connection, r.request, r.last_proof) {
            Some(mut f) => {
                if let Some(h) = h2 {
                    f.push_str(&format!(" && http2.streamid eq {h}"));
                }
                json::str(out, &f);
            }
            None => json::null(out),
        }
        return;
    }
    // Digits, letters and punctuation that JSON strings take as they are.
    let (a, b) = (
        r.request.frame.min(r.last_proof.frame),
        r.request.frame.max(r.last_proof.frame),
    );
    out.extend_from_slice(b"\"tcp.stream eq ");
    json::u64(out, s);
    out.extend_from_slice(b" && frame.number >= ");
    json::u64(out, a);
    out.extend_from_slice(b" && frame.number <= ");
    json::u64(out, b);
    if let Some(h) = h2 {
        out.extend_from_slice(b" && http2.streamid eq ");
        json::u64(out, u64::from(h));
    }
    out.push(b'"');
}

/// A [`Cite`] as its `Serialize` writes it.
fn cite_json(out: &mut Vec<u8>, c: &Cite) {
    out.extend_from_slice(b"{\"role\":");
    json::str(out, c.role);
    if c.har {
        key!(out, "har_entry");
        json::u64(out, c.mark.frame);
    } else {
        let (file, frame) = files::locate(c.mark.frame);
        key!(out, "frame");
        json::u64(out, frame);
        if let Some(file) = file {
            key!(out, "file");
            json::str(out, &file);
        }
        key!(out, "time");
        json::time(out, c.mark.time_ns);
    }
    if let Some(s) = c.tcp_stream {
        key!(out, "tcp_stream");
        json::u64(out, s);
    }
    if let Some(s) = &c.session_id {
        key!(out, "session_id");
        json::str(out, s);
    }
    out.push(b'}');
}

fn cites_json(out: &mut Vec<u8>, cites: &[Cite]) {
    out.push(b'[');
    for (i, c) in cites.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        cite_json(out, c);
    }
    out.push(b']');
}

/// An [`Evidence`] as its `Serialize` writes it.
fn evidence_json(out: &mut Vec<u8>, e: &Evidence) {
    out.extend_from_slice(b"{\"how\":");
    json::value(out, &e.how);
    key!(out, "detail");
    json::str(out, &files::detail_text(&e.detail));
    let opt: [(&[u8], _); 5] = [
        (b",\"id\":", &e.id),
        (b",\"shape\":", &e.shape),
        (b",\"last_seq\":", &e.last_seq),
        (b",\"first_seq\":", &e.first_seq),
        (b",\"ack\":", &e.ack),
    ];
    for (k, v) in opt {
        if let Some(v) = v {
            out.extend_from_slice(k);
            json::str(out, v);
        }
    }
    if let Some(c) = e.count {
        key!(out, "count");
        json::u64(out, c);
    }
    key!(out, "cites");
    cites_json(out, &e.cites);
    out.push(b'}');
}

/// A [`Cursor`] as its `Serialize` writes it.
fn cursor_json(out: &mut Vec<u8>, c: &Cursor) {
    out.extend_from_slice(b"{\"status\":");
    json::str(out, c.status.as_str());
    key!(out, "detail");
    json::str(out, &files::detail_text(&c.detail));
    key!(out, "last_delivered_id");
    json::opt_str(out, c.last_delivered_id.as_deref());
    if let Some(b) = c.behind_by {
        key!(out, "behind_by");
        json::u64(out, b);
    }
    key!(out, "cites");
    cites_json(out, &c.cites);
    out.push(b'}');
}

/// The members of a [`Finding`] as its `Serialize` writes them, each after a comma.
fn finding_members(out: &mut Vec<u8>, f: &Finding) {
    key!(out, "kind");
    json::str(out, f.kind.as_str());
    key!(out, "severity");
    json::value(out, &f.severity);
    key!(out, "session_id");
    json::opt_str(out, f.session_id.as_deref());
    key!(out, "detail");
    json::str(out, &files::detail_text(&f.detail));
    if let Some(id) = &f.id {
        key!(out, "id");
        json::str(out, id);
    }
    if let Some(o) = &f.other_session_id {
        key!(out, "other_session_id");
        json::str(out, o);
    }
    if let Some(c) = &f.resume {
        key!(out, "resume");
        cite_json(out, c);
    }
    key!(out, "cites");
    cites_json(out, &f.cites);
}

fn findings_json(out: &mut Vec<u8>, findings: &[Finding]) {
    out.push(b'[');
    for (i, f) in findings.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // The first member goes without its comma.
        let at = out.len();
        finding_members(out, f);
        out[at] = b'{';
        out.push(b'}');
    }
    out.push(b']');
}

/// The serde form of [`write_resume`], which the tests hold it to.
#[cfg(test)]
fn write_resume_serde<W: Write + ?Sized>(
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
        lost: r.decision.lost.as_deref(),
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
        evidence: r.forensic.evidence.as_deref(),
        cursor: r.forensic.cursor.as_deref(),
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

#[cfg(test)]
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
    let mut line = Vec::with_capacity(512);
    finding_line(&mut line, input, f);
    out.write_all(&line)
}

/// Appends one finding's JSON line, newline included (what [`write_finding`] writes).
pub(crate) fn finding_line(out: &mut Vec<u8>, input: &str, f: &Finding) {
    out.extend_from_slice(b"{\"type\":\"finding\",\"input\":");
    json::str(out, input);
    finding_members(out, f);
    key!(out, "schema_version");
    json::u64(out, u64::from(SCHEMA_VERSION));
    out.extend_from_slice(b"}\n");
}

/// The serde form of [`write_finding`], which the tests hold it to.
#[cfg(test)]
fn write_finding_serde<W: Write + ?Sized>(
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
        stream: x.stream().map(|s| StreamLine {
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

pub(crate) fn write_finding_text<W: Write + ?Sized>(
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
pub(crate) fn notable_resume(r: &ResumeRecord) -> bool {
    r.decision.verdict != Verdict::Correct
        || r.forensic
            .findings
            .iter()
            .any(|f| f.severity != Severity::Info)
}

/// What the account for a person needs of one input, as its records come: the text of each
/// resume and finding it tells of, written at once and sorted through runs on disk like the
/// report's lines, and how many resumes each session had. No record is kept whole, so its
/// memory does not grow with the number of resumes.
#[derive(Debug)]
pub struct HumanNotes {
    /// Each told resume's text (section [`TOLD_RESUME`], in report order), then each finding
    /// tied to no resume (section [`TOLD_FINDING`], in report order), behind its session id
    /// ([`put_session`]).
    told: spool::Runs,
    /// Per session (by name hash; `None`: no session id): resumes, and whether any is told of.
    sessions: HashMap<Option<u64>, (u64, bool)>,
}

const TOLD_RESUME: u8 = 0;
const TOLD_FINDING: u8 = 1;

fn session_key(sid: Option<&str>) -> Option<u64> {
    sid.map(|s| crate::exchange::fact_hash(&[s.as_bytes()]))
}

/// Writes a session id (or none) ahead of the text that follows it in a line of the runs:
/// its length (`u32::MAX` for none), then its bytes.
fn put_session(buf: &mut Vec<u8>, sid: Option<&str>) {
    let len = sid.map_or(u32::MAX, |s| u32::try_from(s.len()).unwrap_or(u32::MAX - 1));
    buf.extend_from_slice(&len.to_le_bytes());
    if let Some(s) = sid {
        buf.extend_from_slice(s.as_bytes().get(..(len as usize)).unwrap_or_default());
    }
}

/// A line of the runs: its session id and its text ([`put_session`]).
fn take_session(line: &[u8]) -> (Option<&str>, &[u8]) {
    let Some((len, rest)) = line.split_first_chunk::<4>() else {
        return (None, line);
    };
    match u32::from_le_bytes(*len) {
        u32::MAX => (None, rest),
        n => {
            let (sid, text) = rest.split_at(rest.len().min(n as usize));
            (Some(std::str::from_utf8(sid).unwrap_or_default()), text)
        }
    }
}

impl HumanNotes {
    /// No records yet; the texts sort through runs of `memory` bytes.
    pub fn new(memory: usize) -> Self {
        HumanNotes {
            told: spool::Runs::new(memory, false),
            sessions: HashMap::new(),
        }
    }

    /// The first error of the temporary file, if any (texts are then kept in memory).
    pub fn spill_error(&self) -> Option<&str> {
        self.told.spill_error()
    }

    /// Runs of texts written to the temporary file so far (for tests).
    #[cfg(test)]
    pub(crate) fn told_runs(&self) -> usize {
        self.told.runs()
    }

    /// Bytes allocated for texts in memory (for tests).
    #[cfg(test)]
    pub(crate) fn told_held(&self) -> usize {
        self.told.held()
    }

    /// Counts a resume for its session and, when it deserves attention, writes its text;
    /// `order` is its place in the report ([`spool`]'s key of resumes).
    pub fn resume(&mut self, r: &ResumeRecord, order: [u64; 4]) {
        let notable = notable_resume(r);
        let e = self
            .sessions
            .entry(session_key(r.session_id.as_deref()))
            .or_default();
        e.0 += 1;
        e.1 |= notable;
        if notable {
            let buf = self.told.bytes();
            let from = buf.len();
            put_session(buf, r.session_id.as_deref());
            // Writing to memory cannot fail.
            let _ = write_resume_text(buf, r);
            self.told.push(from, TOLD_RESUME, order, None);
        }
    }

    /// Writes the text of a finding tied to no resume; `words` and `text` are its place in
    /// the report ([`spool`]'s key of findings).
    pub fn finding(&mut self, f: &Finding, words: [u64; 4], text: Option<&str>) {
        self.sessions
            .entry(session_key(f.session_id.as_deref()))
            .or_default()
            .1 = true;
        let buf = self.told.bytes();
        let from = buf.len();
        put_session(buf, f.session_id.as_deref());
        let _ = write_finding_text(buf, "  ", f);
        self.told.push(from, TOLD_FINDING, words, text);
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

/// A resume's text in the account for a person: its verdict and request, the ids, the
/// reason, the proof and the frames to open in Wireshark.
pub(crate) fn write_resume_text<W: Write + ?Sized>(
    out: &mut W,
    r: &ResumeRecord,
) -> std::io::Result<()> {
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
    Ok(())
}

/// Writes, for a person, what went wrong in one input: per session, each resume that is not
/// `correct` or has findings, with the reason, the proof and the frames to open in Wireshark;
/// then findings tied to no resume. Sessions where all is well are only counted; an input not
/// `read_in_full` says so, since its account covers only what was read.
///
/// Sessions come in the order of their first resume told of, then of their first finding for
/// those with findings only. The texts are put in that order by a second sort through runs
/// on disk, keyed by each session's rank: memory holds one rank (and id) per session told of.
pub fn write_human_input<W: Write + ?Sized>(
    out: &mut W,
    input: &str,
    notes: &mut HumanNotes,
    read_in_full: bool,
) -> std::io::Result<()> {
    writeln!(out, "== {input} ==")?;
    let quiet = notes.sessions.values().filter(|(_, told)| !told).count();
    // Ranks by the session id itself: two ids are never taken for one.
    let mut ranks: HashMap<Option<Box<str>>, u64> = HashMap::new();
    let mut grouped = spool::Runs::new(notes.told.memory(), false);
    notes.told.for_each(|_, line| {
        let (sid, _) = take_session(line);
        let next = ranks.len() as u64;
        let rank = *ranks.entry(sid.map(Box::from)).or_insert(next);
        let buf = grouped.bytes();
        let from = buf.len();
        buf.extend_from_slice(line);
        grouped.push(from, 0, [rank, 0, 0, 0], None);
        Ok(())
    })?;
    let mut current = None;
    grouped.for_each(|key, line| {
        let (sid, text) = take_session(line);
        if current != Some(key.words[0]) {
            current = Some(key.words[0]);
            let total = notes.sessions.get(&session_key(sid)).map_or(0, |e| e.0);
            match sid {
                Some(sid) => writeln!(out, "session {sid}: {total} resume(s)")?,
                None => writeln!(out, "no session id: {total} resume(s)")?,
            }
        }
        out.write_all(text)
    })?;
    if quiet > 0 {
        writeln!(
            out,
            "{quiet} other session(s): every resume correct, nothing to report"
        )?;
    }
    // An input that could not be read in full vouches only for what was read.
    match (notes.sessions.is_empty(), read_in_full) {
        (true, true) => writeln!(out, "no resume and no finding")?,
        (true, false) => writeln!(
            out,
            "no resume and no finding in what was read; NOT read in full (its error says why)"
        )?,
        (false, false) => writeln!(out, "NOT read in full (its error says why)")?,
        (false, true) => {}
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

    /// Every capture and HAR file of the fixtures, with its key log when it has one.
    fn fixture_reports() -> Vec<(String, crate::driver::InputReport)> {
        use crate::driver::{Options, TlsKeys, analyze_path};
        fn walk(dir: &std::path::Path, found: &mut Vec<std::path::PathBuf>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p, found);
                } else if matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("pcap" | "pcapng" | "har")
                ) {
                    found.push(p);
                }
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let mut paths = Vec::new();
        walk(&root, &mut paths);
        paths.sort();
        paths
            .into_iter()
            .map(|p| {
                let keys = p.with_extension("keys");
                let mut opts = Options {
                    forensic: crate::audit::Options {
                        views: true,
                        ..Default::default()
                    },
                    ..Options::default()
                };
                if keys.exists() {
                    opts.tls = TlsKeys::from_files(&[keys]).0;
                }
                (p.display().to_string(), analyze_path(&p, &opts))
            })
            .collect()
    }

    /// Moves every frame a record cites into the second file of a capture set.
    fn into_second_file(r: &mut ResumeRecord) {
        let second = |m: &mut Mark| m.frame |= 2 << crate::record::MEMBER_SHIFT;
        let cites = |cs: &mut Vec<Cite>| cs.iter_mut().for_each(|c| second(&mut c.mark));
        second(&mut r.request);
        second(&mut r.last_proof);
        for m in [&mut r.response, &mut r.first_event, &mut r.priming_ack]
            .into_iter()
            .flatten()
        {
            second(m);
        }
        if let Some(e) = &mut r.forensic.evidence {
            cites(&mut e.cites);
        }
        if let Some(c) = &mut r.forensic.cursor {
            cites(&mut c.cites);
        }
        if let Some(c) = &mut r.forensic.relays {
            second(&mut c.mark);
        }
        for f in &mut r.forensic.findings {
            cites(&mut f.cites);
            if let Some(c) = &mut f.resume {
                second(&mut c.mark);
            }
        }
    }

    #[test]
    fn resume_and_finding_lines_are_the_serde_text() {
        let set: std::sync::Arc<dyn files::FrameNames> =
            std::sync::Arc::new(files::SetFiles(vec![
                "a \"1\".pcap".to_string(),
                "b\\2.pcap".to_string(),
            ]));
        let (mut resumes, mut findings) = (0, 0);
        let mut h2_tls = false;
        for (name, report) in fixture_reports() {
            for r in &report.resumes {
                h2_tls |= r.h2_stream.is_some() && r.connection.tls.is_some();
                let mut moved = r.clone();
                into_second_file(&mut moved);
                for (r, names) in [(r, None), (&moved, None), (&moved, Some(&set))] {
                    let (mut got, mut want) = (Vec::new(), Vec::new());
                    files::with_files(names, || {
                        write_resume(&mut got, &name, r).unwrap();
                        write_resume_serde(&mut want, &name, r).unwrap();
                    });
                    assert_eq!(
                        String::from_utf8(got).unwrap(),
                        String::from_utf8(want).unwrap()
                    );
                }
                resumes += 1;
            }
            for f in report
                .findings
                .iter()
                .chain(report.resumes.iter().flat_map(|r| &r.forensic.findings))
            {
                let mut moved = f.clone();
                for c in moved.cites.iter_mut().chain(moved.resume.as_mut()) {
                    c.mark.frame |= 2 << crate::record::MEMBER_SHIFT;
                }
                for (f, names) in [(f, None), (&moved, None), (&moved, Some(&set))] {
                    let (mut got, mut want) = (Vec::new(), Vec::new());
                    files::with_files(names, || {
                        write_finding(&mut got, &name, f).unwrap();
                        write_finding_serde(&mut want, &name, f).unwrap();
                    });
                    assert_eq!(
                        String::from_utf8(got).unwrap(),
                        String::from_utf8(want).unwrap()
                    );
                }
                findings += 1;
            }
        }
        assert!(
            resumes > 100 && findings > 20 && h2_tls,
            "{resumes} {findings} {h2_tls}"
        );
    }

    #[test]
    fn enum_names_are_the_serde_names() {
        for v in Verdict::ALL {
            assert_eq!(
                serde_json::to_string(&v).unwrap(),
                format!("\"{}\"", v.as_str())
            );
        }
        for k in FindingKind::ALL {
            assert_eq!(
                serde_json::to_string(&k).unwrap(),
                format!("\"{}\"", k.as_str())
            );
        }
    }

    #[test]
    fn filter_spans_the_proof() {
        assert_eq!(
            display_filter(3, Mark::new(12, 0), Mark::new(15, 0)),
            "tcp.stream eq 3 && frame.number >= 12 && frame.number <= 15"
        );
    }
}
