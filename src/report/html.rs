//! The HTML report: one self-contained page written from the report's own JSON lines.
//!
//! Input: every JSON line the report writes (resumes, findings, session views, the summary),
//! in report order, through [`HtmlReport::tee`]; session views arrive even when the JSON Lines
//! leave them out (`--html` without `--sessions`), and the tee keeps them out of the JSON
//! Lines then.
//! Output: one HTML file, written to a temporary file beside the destination and renamed over
//! it by [`HtmlReport::finish`] (a device or a pipe is written into, see [`super::dest`]): the
//! summary rendered as HTML (inputs, coverage, verdicts, findings), the lines themselves
//! embedded as one JSON array in a `<script type="application/json">` element, and the script
//! that draws a timeline per session from them in the browser. Nothing is fetched: the styles and the script are inline.
//! Invariants:
//! - One source of truth: the page shows what the JSON lines say, nothing is analyzed again.
//!   Each line is parsed with serde_json as it passes, and embedded as it was written.
//! - Embedded JSON cannot end its `<script>` element: `<`, `>` and `&` occur in JSON text only
//!   inside strings, where their `\u00XX` escapes mean the same characters.
//! - Lines go to the file as they come: only the summary and the session groups (input and
//!   id of each session, for the page plan) are kept in memory.
//!
//! Templating is askama: its templates are compiled and type-checked with the crate (a typo in
//! a field name is a build error, not an empty cell), and every value is HTML-escaped unless a
//! template says `|safe`, which only the inline assets and the script-safe JSON do. maud would
//! do as well, but askama keeps the page as an HTML file a reviewer can read; minijinja checks
//! templates only at run time.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use askama::Template;
use serde::{Deserialize, Serialize};

use super::dest::ReportFile;

/// Session groups drawn on one page without paging; past this, the page shows them in pages
/// of [`PAGE_SESSIONS`].
pub const PAGINATE_ABOVE: usize = 300;
/// Session groups per page once paged.
pub const PAGE_SESSIONS: usize = 100;
/// Event ticks drawn per stream lane; a stream with more events is drawn with this many and
/// says how many were left out.
pub const MAX_TICKS_PER_LANE: usize = 40;
/// Lanes drawn per session; the rest are listed as not drawn.
pub const MAX_LANES: usize = 60;

/// The verdicts, in the order the page lists them (the report's seven).
const VERDICTS: [&str; 7] = [
    "correct",
    "gap_skipped",
    "replayed",
    "rejected",
    "empty",
    "unverifiable",
    "capture_incomplete",
];

/// How the session groups are shown: all on one page, or in pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PagePlan {
    pub paged: bool,
    pub pages: usize,
    pub per_page: usize,
}

/// The page plan for `groups` session groups.
pub fn page_plan(groups: usize) -> PagePlan {
    if groups <= PAGINATE_ABOVE {
        PagePlan {
            paged: false,
            pages: 1,
            per_page: groups.max(1),
        }
    } else {
        PagePlan {
            paged: true,
            pages: groups.div_ceil(PAGE_SESSIONS),
            per_page: PAGE_SESSIONS,
        }
    }
}

/// Writes `json` (one JSON text) so that it can stand inside a `<script>` element.
pub fn write_script_safe_json<W: Write + ?Sized>(out: &mut W, json: &[u8]) -> std::io::Result<()> {
    let mut rest = json;
    while let Some(i) = rest.iter().position(|b| matches!(b, b'<' | b'>' | b'&')) {
        out.write_all(&rest[..i])?;
        out.write_all(match rest[i] {
            b'<' => b"\\u003c",
            b'>' => b"\\u003e",
            _ => b"\\u0026",
        })?;
        rest = &rest[i + 1..];
    }
    out.write_all(rest)
}

fn script_safe_json(json: &[u8]) -> String {
    let mut out = Vec::with_capacity(json.len());
    // Writing to memory cannot fail.
    let _ = write_script_safe_json(&mut out, json);
    String::from_utf8_lossy(&out).into_owned()
}

/// What kind of line passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineKind {
    Resume,
    Finding,
    Session,
    Summary,
    Other,
}

/// The fields of a line the writer looks at; the rest is embedded untouched.
#[derive(Deserialize)]
struct LineHead<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    input: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    session_id: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Clone, Copy, Debug, Default, Deserialize)]
struct Tally {
    connections: u64,
    bytes: u64,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct UnreadServer {
    server: String,
    reason: String,
    connections: u64,
    bytes: u64,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct Coverage {
    #[serde(default)]
    read: BTreeMap<String, Tally>,
    #[serde(default)]
    empty: u64,
    #[serde(default)]
    unread: BTreeMap<String, Tally>,
    #[serde(default)]
    packets_cut: u64,
    #[serde(default)]
    snap_length: Option<u64>,
    #[serde(default)]
    unread_servers: Vec<UnreadServer>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct Problem {
    input: String,
    error: String,
}

/// The summary line, as the page shows it.
#[derive(Clone, Debug, Default, Deserialize)]
struct SummaryLine {
    #[serde(default)]
    inputs: u64,
    #[serde(default)]
    inputs_failed: u64,
    #[serde(default)]
    packets: u64,
    #[serde(default)]
    tcp_connections: u64,
    #[serde(default)]
    http_exchanges: u64,
    #[serde(default)]
    sessions: u64,
    #[serde(default)]
    resumes: u64,
    #[serde(default)]
    verdicts: BTreeMap<String, u64>,
    #[serde(default)]
    tcp_gaps: u64,
    #[serde(default)]
    tcp_gap_bytes: u64,
    #[serde(default)]
    packets_skipped: BTreeMap<String, u64>,
    #[serde(default)]
    anomalies: BTreeMap<String, u64>,
    #[serde(default)]
    connections_evicted: u64,
    #[serde(default)]
    out_of_order_overflows: u64,
    #[serde(default)]
    findings: BTreeMap<String, u64>,
    #[serde(default)]
    exchanges_not_audited: u64,
    #[serde(default)]
    sessions_retired_early: u64,
    #[serde(default)]
    coverage: Coverage,
    #[serde(default)]
    problems: Vec<Problem>,
}

/// The page's opening: title, styles, inputs.
#[derive(Template)]
#[template(path = "head.html")]
struct Head<'a> {
    inputs: &'a [String],
    css: &'static str,
}

/// The page's rest, once the lines are in: summary, filters, script.
#[derive(Template)]
#[template(path = "tail.html")]
struct Tail<'a> {
    s: &'a SummaryLine,
    verdicts: Vec<(&'static str, u64)>,
    findings: Vec<(&'a str, u64)>,
    plan: PagePlan,
    groups: usize,
    config: String,
    js: &'static str,
}

/// Settings the script reads, from the constants above.
#[derive(Serialize)]
struct Config {
    plan: PagePlan,
    max_ticks_per_lane: usize,
    max_lanes: usize,
    verdicts: [&'static str; 7],
}

const CSS: &str = include_str!("assets/report.css");
const JS: &str = include_str!("assets/report.js");

/// The HTML report being written.
pub struct HtmlReport {
    /// Where the page goes (beside its destination until it is whole, or the destination
    /// itself when that is a device or a pipe); `None` once finished.
    target: Option<ReportFile>,
    out: Option<BufWriter<File>>,
    lines: u64,
    summary: Option<SummaryLine>,
    /// Session groups: `(input, session id)` of the views, and inputs with resumes or
    /// findings of no session.
    groups: BTreeSet<(String, Option<String>)>,
}

impl HtmlReport {
    /// Starts the page at a temporary file beside `dest` (or in `dest` itself when it is a
    /// device or a pipe); `inputs` as the command line names them.
    pub fn create(dest: &Path, inputs: &[String]) -> std::io::Result<Self> {
        let mut target = ReportFile::create(dest)?;
        let file = target.file_mut().try_clone()?;
        let mut report = HtmlReport {
            target: Some(target),
            out: Some(BufWriter::new(file)),
            lines: 0,
            summary: None,
            groups: BTreeSet::new(),
        };
        let head = Head { inputs, css: CSS };
        let out = report.writer()?;
        head.write_into(out)?;
        out.write_all(b"<script type=\"application/json\" id=\"mra-data\">[")?;
        Ok(report)
    }

    fn writer(&mut self) -> std::io::Result<&mut BufWriter<File>> {
        self.out
            .as_mut()
            .ok_or_else(|| std::io::Error::other("the HTML report is already finished"))
    }

    /// Takes one JSON line of the report (with or without its newline) and says what it was.
    pub fn line(&mut self, line: &[u8]) -> std::io::Result<LineKind> {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let head: LineHead<'_> = serde_json::from_slice(line).map_err(|e| {
            std::io::Error::other(format!("a report line is not the JSON expected: {e}"))
        })?;
        let kind = match head.kind.as_ref() {
            "resume" => LineKind::Resume,
            "finding" => LineKind::Finding,
            "session" => LineKind::Session,
            "summary" => LineKind::Summary,
            _ => LineKind::Other,
        };
        match kind {
            LineKind::Summary => {
                let s: SummaryLine = serde_json::from_slice(line).map_err(|e| {
                    std::io::Error::other(format!("the summary line is not as expected: {e}"))
                })?;
                self.summary = Some(s);
            }
            LineKind::Session => {
                let input = head.input.unwrap_or_default().into_owned();
                let sid = head.session_id.map(|s| s.into_owned());
                self.groups.insert((input, sid));
            }
            LineKind::Resume | LineKind::Finding if head.session_id.is_none() => {
                let input = head.input.unwrap_or_default().into_owned();
                self.groups.insert((input, None));
            }
            _ => {}
        }
        let first = self.lines == 0;
        self.lines += 1;
        let out = self.writer()?;
        if !first {
            out.write_all(b",")?;
        }
        out.write_all(b"\n")?;
        write_script_safe_json(out, line)?;
        Ok(kind)
    }

    /// A writer that passes every report line to this page and to `json`, except session
    /// views when `sessions_to_json` is false.
    pub fn tee<'a>(&'a mut self, json: &'a mut dyn Write, sessions_to_json: bool) -> Tee<'a> {
        Tee {
            html: self,
            json,
            sessions_to_json,
            pending: Vec::new(),
        }
    }

    /// Writes the rest of the page and renames it to its destination.
    pub fn finish(mut self) -> std::io::Result<()> {
        let summary = self.summary.take().unwrap_or_default();
        let groups = self.groups.len();
        let plan = page_plan(groups);
        let config = Config {
            plan,
            max_ticks_per_lane: MAX_TICKS_PER_LANE,
            max_lanes: MAX_LANES,
            verdicts: VERDICTS,
        };
        let config = script_safe_json(&serde_json::to_vec(&config).map_err(std::io::Error::other)?);
        let tail = Tail {
            s: &summary,
            verdicts: VERDICTS
                .iter()
                .map(|v| (*v, summary.verdicts.get(*v).copied().unwrap_or(0)))
                .collect(),
            findings: summary
                .findings
                .iter()
                .map(|(k, n)| (k.as_str(), *n))
                .collect(),
            plan,
            groups,
            config,
            js: JS,
        };
        let mut out = self
            .out
            .take()
            .ok_or_else(|| std::io::Error::other("the HTML report is already finished"))?;
        out.write_all(b"\n]</script>\n")?;
        tail.write_into(&mut out)?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        let target = self
            .target
            .take()
            .ok_or_else(|| std::io::Error::other("the HTML report is already finished"))?;
        if let ReportFile::Replacing(..) = target {
            // On the disk before it takes the destination's name.
            file.sync_all()?;
        }
        drop(file);
        target.finish()
    }
}

impl Drop for HtmlReport {
    /// A page never finished leaves no file behind (its temporary file removes itself) and
    /// writes nothing more where it was going.
    fn drop(&mut self) {
        if let Some(out) = self.out.take() {
            let _ = out.into_parts();
        }
    }
}

/// Splits what the report writes into lines, for the page and the JSON Lines.
pub struct Tee<'a> {
    html: &'a mut HtmlReport,
    json: &'a mut dyn Write,
    sessions_to_json: bool,
    pending: Vec<u8>,
}

impl Tee<'_> {
    fn pass(&mut self, line: &[u8]) -> std::io::Result<()> {
        let kind = self.html.line(line)?;
        if kind != LineKind::Session || self.sessions_to_json {
            self.json.write_all(line)?;
        }
        Ok(())
    }
}

impl Write for Tee<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut rest = buf;
        while let Some(i) = memchr::memchr(b'\n', rest) {
            let (line, after) = rest.split_at(i + 1);
            if self.pending.is_empty() {
                self.pass(line)?;
            } else {
                let mut whole = std::mem::take(&mut self.pending);
                whole.extend_from_slice(line);
                self.pass(&whole)?;
            }
            rest = after;
        }
        self.pending.extend_from_slice(rest);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            self.pass(&line)?;
        }
        self.json.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const HOSTILE: &str = "</script><img src=x onerror=alert(1)><!--";

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "mra-html-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn summary_line() -> String {
        r#"{"type":"summary","inputs":1,"resumes":1,"verdicts":{"correct":1},"findings":{"cursor_lost":0},"coverage":{"read":{},"empty":0,"unread":{},"packets_cut":0,"snap_length":null,"unread_servers":[]},"problems":[]}"#.to_string() + "\n"
    }

    /// The page for these lines, through the tee; and what reached the JSON Lines.
    fn page(inputs: &[String], lines: &[String], sessions_to_json: bool) -> (String, String) {
        let dir = temp_dir("page");
        let dest = dir.join("r.html");
        let mut h = HtmlReport::create(&dest, inputs).unwrap();
        let mut json = Vec::new();
        {
            let mut tee = h.tee(&mut json, sessions_to_json);
            for l in lines {
                // In two pieces, as a writer may be handed them.
                let (a, b) = l.as_bytes().split_at(l.len() / 2);
                tee.write_all(a).unwrap();
                tee.write_all(b).unwrap();
            }
            tee.flush().unwrap();
        }
        h.finish().unwrap();
        let html = std::fs::read_to_string(&dest).unwrap();
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 1, "the temporary file is renamed, not left");
        let _ = std::fs::remove_dir_all(&dir);
        (html, String::from_utf8(json).unwrap())
    }

    /// The embedded array of lines, parsed back.
    fn embedded(html: &str) -> Vec<serde_json::Value> {
        let open = "<script type=\"application/json\" id=\"mra-data\">";
        let from = html.find(open).unwrap() + open.len();
        let to = from + html[from..].find("</script>").unwrap();
        serde_json::from_str(&html[from..to]).unwrap()
    }

    fn hostile_lines() -> Vec<String> {
        let resume = serde_json::json!({
            "type": "resume", "input": HOSTILE, "session_id": HOSTILE, "verdict": "correct",
            "last_event_id": HOSTILE, "first_event_id": "&amp;<b>", "findings": []
        });
        let session = serde_json::json!({
            "type": "session", "input": HOSTILE, "session_id": HOSTILE, "exchanges": [],
            "resumes": [], "findings": []
        });
        vec![
            format!("{resume}\n"),
            format!("{session}\n"),
            summary_line(),
        ]
    }

    #[test]
    fn hostile_ids_cannot_leave_the_data_block() {
        let inputs = vec![HOSTILE.to_string()];
        let (html, _) = page(&inputs, &hostile_lines(), true);
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<!--"));
        // Every `</script>` closes a script the page opened itself.
        assert_eq!(
            html.matches("</script>").count(),
            html.matches("<script").count()
        );
        // The title and the input list escape the name.
        assert!(html.contains("&#60;/script&#62;") || html.contains("&lt;/script&gt;"));
        // The lines come back exactly as written.
        let lines = embedded(&html);
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["session_id"], HOSTILE);
        assert_eq!(lines[0]["first_event_id"], "&amp;<b>");
        assert_eq!(lines[1]["input"], HOSTILE);
        for l in hostile_lines() {
            let v: serde_json::Value = serde_json::from_str(&l).unwrap();
            assert!(lines.contains(&v));
        }
    }

    #[test]
    fn script_safe_json_keeps_the_value() {
        let v = serde_json::json!({"a": "</script>&<!-- >", "b": ["<", 1]});
        let safe = script_safe_json(v.to_string().as_bytes());
        assert!(!safe.contains('<') && !safe.contains('>') && !safe.contains('&'));
        assert_eq!(serde_json::from_str::<serde_json::Value>(&safe).unwrap(), v);
    }

    #[test]
    fn the_assets_cannot_close_their_elements() {
        assert!(
            !JS.contains("</script"),
            "the script must not close its element"
        );
        assert!(!JS.contains("<!--"));
        assert!(!CSS.contains("</style"));
        // Nothing is fetched: no URL leaves the page.
        for asset in [
            JS.replace("http://www.w3.org/2000/svg", ""),
            CSS.to_string(),
        ] {
            assert!(!asset.contains("http://") && !asset.contains("https://"));
            // `url(#id)` names an element of the page itself.
            assert!(!asset.contains("@import"));
            assert!(asset.matches("url(").count() == asset.matches("url(#").count());
        }
    }

    #[test]
    fn session_views_reach_the_page_but_only_the_json_asked_for() {
        let lines = hostile_lines();
        let (html, json) = page(&["a".to_string()], &lines, false);
        assert_eq!(embedded(&html).len(), 3);
        assert_eq!(json, format!("{}{}", lines[0], lines[2]));
        let (_, json) = page(&["a".to_string()], &lines, true);
        assert_eq!(json, lines.concat());
    }

    #[test]
    fn pages_begin_past_the_threshold() {
        assert_eq!(page_plan(0).pages, 1);
        assert!(!page_plan(1).paged);
        let at = page_plan(PAGINATE_ABOVE);
        assert!(!at.paged);
        assert_eq!(at.pages, 1);
        assert_eq!(at.per_page, PAGINATE_ABOVE);
        let past = page_plan(PAGINATE_ABOVE + 1);
        assert!(past.paged);
        assert_eq!(past.per_page, PAGE_SESSIONS);
        assert_eq!(past.pages, (PAGINATE_ABOVE + 1).div_ceil(PAGE_SESSIONS));
        assert_eq!(page_plan(5000).pages, 50);
        assert_eq!(page_plan(5001).pages, 51);
    }

    #[test]
    fn groups_count_views_and_sessionless_records_once() {
        let s = |input: &str, sid: Option<&str>| {
            format!(
                "{}\n",
                serde_json::json!({"type": "session", "input": input, "session_id": sid})
            )
        };
        let r = |input: &str| {
            format!(
                "{}\n",
                serde_json::json!({"type": "resume", "input": input, "session_id": null})
            )
        };
        let mut lines: Vec<String> = (0..PAGINATE_ABOVE + 5)
            .map(|i| s("a", Some(&format!("s{i}"))))
            .collect();
        lines.push(r("a"));
        lines.push(r("a"));
        lines.push(r("b"));
        lines.push(summary_line());
        let (html, _) = page(&["a".to_string(), "b".to_string()], &lines, true);
        let groups = PAGINATE_ABOVE + 5 + 2;
        assert!(
            html.contains(&format!("{groups} session groups")),
            "the page says how many groups"
        );
        let plan = page_plan(groups);
        assert!(html.contains(&format!("\"pages\":{}", plan.pages)));
    }

    #[test]
    fn an_unfinished_page_leaves_no_file() {
        let dir = temp_dir("unfinished");
        let dest = dir.join("r.html");
        {
            let mut h = HtmlReport::create(&dest, &["a".to_string()]).unwrap();
            h.line(summary_line().as_bytes()).unwrap();
        }
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_line_that_is_not_json_is_an_error() {
        let dir = temp_dir("notjson");
        let mut h = HtmlReport::create(&dir.join("r.html"), &[]).unwrap();
        assert!(h.line(b"{not json\n").is_err());
        drop(h);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
