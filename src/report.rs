//! Report: typed records to bytes.
//!
//! Input: decided [`ResumeRecord`]s with the input they came from, and the run's [`Summary`].
//! Output: JSON Lines, one `{"type":"resume",...}` object per resume and one
//! `{"type":"summary",...}` last. The field names are a contract (documented in README.md).
//! Invariants: no I/O here beyond the writer handed in; the same records give the same bytes.

use std::collections::BTreeMap;
use std::io::Write;

use serde::Serialize;

use crate::record::{BodyEnd, Mark};
use crate::session::ResumeRecord;
use crate::verdict::{LostRange, Verdict};

/// RFC 3339 UTC with microseconds, e.g. `2026-11-09T10:00:00.000123Z`.
pub fn rfc3339_micros(time_ns: i64) -> String {
    let secs = time_ns.div_euclid(1_000_000_000);
    let micros = time_ns.rem_euclid(1_000_000_000) / 1000;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
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
    #[serde(skip_serializing_if = "Option::is_none")]
    har_entry: Option<u64>,
    protocol_version: Option<&'a str>,
    response_status: Option<u16>,
    response_content_type: Option<&'a str>,
    response_frame: Option<u64>,
    first_event_frame: Option<u64>,
    first_event_time: Option<String>,
    events_before_first_id: u64,
    stream_events: u64,
    stream_end: Option<&'static str>,
    client: Option<String>,
    server: Option<String>,
    tcp_stream: Option<u64>,
    display_filter: Option<String>,
}

fn body_end_name(end: Option<BodyEnd>) -> Option<&'static str> {
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
    })
}

/// A Wireshark display filter that shows the frames proving the finding.
fn display_filter(tcp_stream: u64, from: Mark, to: Mark) -> String {
    let (a, b) = (from.frame.min(to.frame), from.frame.max(to.frame));
    format!("tcp.stream eq {tcp_stream} && frame.number >= {a} && frame.number <= {b}")
}

/// Writes one resume record as a JSON line.
pub fn write_resume<W: Write>(out: &mut W, input: &str, r: &ResumeRecord) -> std::io::Result<()> {
    // HAR records cite entries, not frames: their marks carry the entry index.
    let har = r.connection.har_entry.is_some();
    let frame = |m: Mark| (!har).then_some(m.frame);
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
        har_entry: r.connection.har_entry,
        protocol_version: r.protocol_version.as_deref(),
        response_status: r.status,
        response_content_type: r.content_type.as_deref(),
        response_frame: r.response.and_then(frame),
        first_event_frame: r.first_event.and_then(frame),
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
        display_filter: r
            .connection
            .tcp_stream
            .map(|s| display_filter(s, r.request, r.last_proof)),
    };
    serde_json::to_writer(&mut *out, &line)?;
    out.write_all(b"\n")
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
    pub problems: Vec<InputProblem>,
}

impl Summary {
    pub fn new() -> Self {
        let mut s = Summary {
            kind: "summary",
            ..Default::default()
        };
        for v in Verdict::ALL {
            s.verdicts.insert(v.as_str(), 0);
        }
        s
    }

    pub fn count_verdict(&mut self, v: Verdict) {
        *self.verdicts.entry(v.as_str()).or_insert(0) += 1;
        self.resumes += 1;
    }

    pub fn write<W: Write>(&self, out: &mut W) -> std::io::Result<()> {
        serde_json::to_writer(&mut *out, self)?;
        out.write_all(b"\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
