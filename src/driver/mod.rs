//! The driver: inputs → packets → connections → exchanges → resumes, in parallel.
//!
//! Input: paths (or `-` for standard input) and [`Options`]; [`run`] makes them inputs
//! ([`crate::input::set`]): files, directories walked, ring buffers and `--merge` sets read as
//! one capture, `--fleet` capture points merged by time ([`crate::input::merge`]), each file
//! possibly compressed ([`crate::input::compressed`]).
//! Output: per input an [`InputReport`] (resumes in report order, counters, problems), and
//! [`run`] writes the whole report.
//! Invariants:
//! - Connections are numbered in order of their first packet, as Wireshark's `tcp.stream`
//!   numbers them, by the single reader of a capture; shards only ever see whole connections,
//!   so the report is the same for any thread count. With `-jN` there are `2N` shards, each
//!   taken by whichever worker is free, one worker at a time, its batches in order.
//! - The reader's flow table is bounded by `Limits::max_connections` (least recently active
//!   evicted first); connections closed by either side leave it after a quiet minute of
//!   capture time.
//! - Payload bytes are copied at most once (into a batch for a worker thread), never kept
//!   (a `--fleet` run copies them once more, as it reads each capture point ahead).
//! - The files of a set are read one after the other through one flow table; a frame of
//!   member `n` is numbered `n << MEMBER_SHIFT | its own number` ([`crate::record`]), so
//!   frames keep growing in reading order and a lone file's numbers are its own.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use rayon::prelude::*;
use std::sync::Arc;

use crate::app::AppStack;
use crate::app::tls::{KeyLog, KeySource};
use crate::app::{AppCtx, Coverage, Unread};
use crate::audit::verdict::{LimitHit, Verdict};
use crate::audit::{self, Finding, SessionView};
use crate::exchange::{
    ConnectionRef, ExchangeSummary, ExchangeTracker, ResumeRecord, SessionName, SessionSet, TlsInfo,
};
use crate::facts::{FactSink, FactsSet, FactsWriter, Reducer};
use crate::input::capture::{self, CaptureReader, InputKind, Record, Records};
use crate::input::compressed::{Codec, read_prefix};
use crate::input::har;
use crate::input::merge::{FrameMap, MergedCapture};
use crate::input::set::{self, CaptureSet, Input};
use crate::net::decode::{self, Endpoint, Skip};
use crate::net::flow::{FlowEvent, FlowPacket, FlowTable, FoldHashKey, SWEEP_EVERY_PACKETS};
use crate::net::tcp::{TcpConnection, TcpSegment};
use crate::record::{Direction, Limits, Mark, StreamEnd, StreamSink};
use crate::report::html::HtmlReport;
use crate::report::spool::Spool;
use crate::report::{self, CoverageStats, InputProblem, Summary};

/// Told how far the reading of the inputs got: a progress display, for one. The library
/// draws nothing itself.
pub trait Progress: Send + Sync {
    /// `bytes` more of the inputs were read.
    fn advance(&self, bytes: u64);
    /// Every input is read; called before the report's messages are written.
    fn finish(&self);
    /// Runs `write`, which writes messages while inputs are still being read, with the
    /// display put aside so that the two do not share a line.
    fn aside(&self, write: &mut dyn FnMut()) {
        write();
    }
}

impl std::fmt::Debug for dyn Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress")
    }
}

/// How a run is done.
#[derive(Clone, Debug)]
pub struct Options {
    /// Threads (1: everything on the calling thread; N > 1 on one capture: N workers, besides
    /// the reader and the session stage; several inputs: N inputs at a time, each on one
    /// thread).
    pub threads: usize,
    /// Bounds on memory and on what is kept (`--max-*`).
    pub limits: Limits,
    /// Advanced by the capture bytes read, over all inputs (its length is the caller's to set);
    /// finished and cleared before [`run`] writes any message.
    pub progress: Option<Arc<dyn Progress>>,
    /// The session stage: `--id-pattern`, `--sessions`.
    pub forensic: audit::Options,
    /// When the session stage audits a session early: `--session-memory`.
    pub retention: audit::Retention,
    /// Where the account for a person goes.
    pub human: HumanReport,
    /// TLS secrets from `--tls-keylog` files (Decryption Secrets Blocks of a capture are added
    /// as it is read).
    pub tls: TlsKeys,
    /// Servers whose traffic is not MCP: their unread connections are counted as ignored,
    /// not as unread (`--ignore-endpoint`).
    pub ignore: Vec<EndpointFilter>,
    /// `--html FILE`: also write the report as one HTML page there, from the same lines.
    pub html: Option<PathBuf>,
    /// `--merge`: every capture file given is one capture (a set the names do not show).
    pub merge: bool,
    /// `--fleet`: every capture input is a capture point of one incident; they are merged by
    /// time into one capture with one session stage.
    pub fleet: bool,
}

/// A server endpoint to leave out of the unread traffic: `IP:PORT`, `[IPv6]:PORT`, `IP` (any
/// port) or `:PORT` (any address).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointFilter {
    /// The address, or any.
    pub ip: Option<std::net::IpAddr>,
    /// The port, or any.
    pub port: Option<u16>,
}

impl EndpointFilter {
    /// True when `e` is a server this filter names.
    pub fn matches(&self, e: &Endpoint) -> bool {
        self.ip.is_none_or(|ip| ip == e.ip) && self.port.is_none_or(|p| p == e.port)
    }
}

impl std::str::FromStr for EndpointFilter {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?}: expected IP:PORT, [IPv6]:PORT, IP or :PORT");
        let port = |p: &str| p.parse::<u16>().map_err(|_| bad());
        if let Some(p) = s.strip_prefix(':')
            && !p.contains(':')
        {
            return Ok(EndpointFilter {
                ip: None,
                port: Some(port(p)?),
            });
        }
        if let Ok(addr) = s.parse::<std::net::SocketAddr>() {
            return Ok(EndpointFilter {
                ip: Some(addr.ip()),
                port: Some(addr.port()),
            });
        }
        let ip = match s.strip_prefix('[') {
            Some(inner) => inner.strip_suffix(']').ok_or_else(bad)?,
            None => s,
        };
        ip.parse()
            .map(|ip| EndpointFilter {
                ip: Some(ip),
                port: None,
            })
            .map_err(|_| bad())
    }
}

/// TLS secrets given by the user, shared by every input.
#[derive(Clone, Debug, Default)]
pub struct TlsKeys(Arc<KeyLog>);

impl TlsKeys {
    /// Reads NSS key log files (`SSLKEYLOGFILE` format). Returns the secrets and messages for
    /// standard error: `(is_error, text)` — a file that cannot be read is an error, bad lines
    /// are a warning naming the first of them.
    pub fn from_files(paths: &[PathBuf]) -> (TlsKeys, Vec<(bool, String)>) {
        let mut keys = KeyLog::new();
        let mut messages = Vec::new();
        for path in paths {
            let name = path.display().to_string();
            let source = KeySource::File(name.as_str().into());
            match std::fs::File::open(path).and_then(|file| keys.add_nss_file(file, source)) {
                Err(e) => messages.push((true, format!("{name}: cannot read the key log: {e}"))),
                Ok(stats) => {
                    if stats.secrets == 0 {
                        messages.push((false, format!("{name}: no TLS secrets in this key log")));
                    }
                    if let Some(first) = stats.errors.first() {
                        messages.push((
                            false,
                            format!(
                                "{name}: line {}: {}; {} malformed line(s) skipped",
                                first.line, first.reason, stats.malformed
                            ),
                        ));
                    }
                }
            }
        }
        (TlsKeys(Arc::new(keys)), messages)
    }

    /// Secrets known.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// No secret is known.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Lookups of a connection's secrets that, read back from a key log file, found other
    /// bytes than first read (the file changed during the run): those were not decrypted.
    pub fn stale(&self) -> u64 {
        self.0.stale()
    }
}

/// The plain-text account of what went wrong, for a person.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HumanReport {
    /// JSON Lines only.
    #[default]
    Off,
    /// JSON Lines on the output, the account on the message stream (a terminal).
    Messages,
    /// The account instead of JSON Lines.
    Instead,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            threads: 1,
            limits: Limits::default(),
            progress: None,
            forensic: audit::Options::default(),
            retention: audit::Retention::default(),
            human: HumanReport::Off,
            tls: TlsKeys::default(),
            ignore: Vec::new(),
            html: None,
            merge: false,
            fleet: false,
        }
    }
}

/// Bytes read between two updates of the progress bar: often enough for a smooth bar, rarely
/// enough to cost nothing.
const PROGRESS_STEP_BYTES: u64 = 4 << 20;

/// Counters of one input.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InputStats {
    /// Packets (or HAR entries) read.
    pub packets: u64,
    /// Packets that gave no TCP segment, by reason.
    pub skipped: BTreeMap<&'static str, u64>,
    /// TCP connections seen.
    pub tcp_connections: u64,
    /// HTTP exchanges seen.
    pub http_exchanges: u64,
    /// Holes in TCP streams given up as gaps, and their bytes.
    pub tcp_gaps: u64,
    /// See `tcp_gaps`.
    pub tcp_gap_bytes: u64,
    /// Holes given up because `--max-out-of-order` was reached.
    pub out_of_order_overflows: u64,
    /// Connections evicted to stay within `--max-connections`.
    pub connections_evicted: u64,
    /// Anomalies the parsers recovered from, by name.
    pub anomalies: BTreeMap<String, u64>,
    /// Session facts dropped by per-stream caps, and exchanges left out of the session stage.
    pub facts_dropped: u64,
    /// See `facts_dropped`.
    pub exchanges_not_audited: u64,
    /// Sessions audited early to stay within `--session-memory`.
    pub sessions_retired_early: u64,
    /// What was read, what was not, and why.
    pub coverage: CoverageStats,
}

impl InputStats {
    fn absorb(&mut self, other: &InputStats) {
        self.packets += other.packets;
        for (k, v) in &other.skipped {
            *self.skipped.entry(k).or_insert(0) += v;
        }
        self.tcp_connections += other.tcp_connections;
        self.http_exchanges += other.http_exchanges;
        self.tcp_gaps += other.tcp_gaps;
        self.tcp_gap_bytes += other.tcp_gap_bytes;
        self.out_of_order_overflows += other.out_of_order_overflows;
        self.connections_evicted += other.connections_evicted;
        for (k, v) in &other.anomalies {
            *self.anomalies.entry(k.clone()).or_insert(0) += v;
        }
        self.facts_dropped += other.facts_dropped;
        self.exchanges_not_audited += other.exchanges_not_audited;
        self.sessions_retired_early += other.sessions_retired_early;
        self.coverage.absorb(&other.coverage);
    }
}

/// What one input gave.
#[derive(Debug, Default)]
pub struct InputReport {
    /// The input's name, as messages and the report cite it.
    pub input: String,
    /// The records, in report order, when the caller collects them ([`analyze_reader`]).
    pub resumes: Vec<ResumeRecord>,
    /// Findings of the session stage tied to no resume, and the session views.
    pub findings: Vec<Finding>,
    /// See `findings`.
    pub views: Vec<SessionView>,
    /// Hashes of the session ids seen.
    pub sessions: SessionSet,
    /// Its counters.
    pub stats: InputStats,
    /// Messages for standard error: `(is_error, text)`; an error makes the exit status 2.
    pub messages: Vec<(bool, String)>,
}

impl InputReport {
    fn new(input: &str) -> Self {
        InputReport {
            input: input.to_string(),
            ..Default::default()
        }
    }

    /// Counts what the session stage did, and says what it could not take in order.
    fn stage_stats(&mut self, stats: audit::StageStats) {
        self.stats.sessions_retired_early += stats.sessions_retired_early;
        let late = stats.har_entries_late;
        if late > 0 {
            let (began, whose, them) = if late == 1 {
                ("entry began", "its session", "it")
            } else {
                ("entries began", "their sessions", "them")
            };
            self.messages.push((
                false,
                format!(
                    "{}: {late} {began} before entries already audited (the HAR is out of order \
                     of startedDateTime by more than --session-memory holds): {whose} may have \
                     been audited without {them}",
                    self.input
                ),
            ));
        }
    }

    fn error(&mut self, text: String) {
        self.messages.push((true, text));
    }

    /// The report with its records, put in report order.
    fn with(mut self, mut c: audit::Collected) -> Self {
        c.sort();
        self.resumes = c.resumes;
        self.findings = c.findings;
        self.views = c.views;
        self
    }

    /// True when the input could not be read, wholly or in part.
    pub fn failed(&self) -> bool {
        self.messages.iter().any(|(e, _)| *e)
    }
}

/// Analyzes one input named by path (`-` is standard input), its records collected in the
/// report, in report order.
pub fn analyze_path(path: &Path, opts: &Options) -> InputReport {
    let mut c = audit::Collected::default();
    let report = analyze_path_into(path, opts, &mut c);
    report.with(c)
}

/// Analyzes one input named by path (`-` is standard input); its records go to `sink`.
pub fn analyze_path_into(path: &Path, opts: &Options, sink: &mut dyn audit::Sink) -> InputReport {
    map_path(path, opts, &mut reducer(opts, sink))
}

/// The reduce step of one input, its records going to `sink`; the sessions held at its end
/// are audited on two threads when the input is analyzed on two or more.
fn reducer<S: audit::Sink>(opts: &Options, sink: S) -> Reducer<S> {
    let forensic = audit::Options {
        threads: opts.threads,
        ..opts.forensic.clone()
    };
    Reducer::new(&forensic, opts.retention, sink)
}

/// The map step of one input named by path: its session events go to `facts`.
fn map_path(path: &Path, opts: &Options, facts: &mut dyn FactSink) -> InputReport {
    let name = path.display().to_string();
    if name == "-" {
        return map_reader(&name, std::io::stdin().lock(), opts, facts);
    }
    match File::open(path) {
        Ok(f) => map_reader(&name, f, opts, facts),
        Err(e) => {
            let mut r = InputReport::new(&name);
            r.error(format!("{name}: cannot open: {e}"));
            r
        }
    }
}

/// Analyzes one input from any reader, its records collected in the report, in report order;
/// `name` is how messages and the report cite it.
pub fn analyze_reader<R: Read>(name: &str, src: R, opts: &Options) -> InputReport {
    let mut c = audit::Collected::default();
    let report = analyze_reader_into(name, src, opts, &mut c);
    report.with(c)
}

/// Analyzes one input from any reader; its records go to `sink` as the session stage lets
/// them go.
pub fn analyze_reader_into<R: Read>(
    name: &str,
    src: R,
    opts: &Options,
    sink: &mut dyn audit::Sink,
) -> InputReport {
    map_reader(name, src, opts, &mut reducer(opts, sink))
}

/// The map step of one input from any reader: its session events go to `facts`.
fn map_reader<R: Read>(
    name: &str,
    mut src: R,
    opts: &Options,
    sink: &mut dyn FactSink,
) -> InputReport {
    let mut report = InputReport::new(name);
    let mut head = [0u8; 64];
    let got = match read_prefix(&mut src, &mut head) {
        Ok(got) => got,
        Err((got, e)) => {
            report.error(format!("{name}: offset {got}: read error: {e}"));
            return report;
        }
    };
    let prefix = &head[..got];
    let chained = prefix.chain(src);
    if let Some(codec) = Codec::sniff(prefix) {
        // One layer of compression: what it holds must be a capture or a HAR.
        let inner = Decompressed {
            codec,
            src: codec.decoder(chained),
        };
        return analyze_decompressed(name, inner, opts, sink);
    }
    match capture::sniff(prefix) {
        Some(InputKind::Pcap | InputKind::PcapNg) => {
            let one = Member {
                no: 0,
                name: name.to_string(),
                src: Ok(Source::Bytes(Box::new(chained))),
            };
            analyze_capture(&mut std::iter::once(one), opts, &mut report, sink)
        }
        Some(InputKind::Json) => {
            let exchanges = read_har(name, chained, opts, sink);
            har_session_stage(&mut report, exchanges, sink);
        }
        Some(InputKind::Zlib) => {
            let exchanges = read_har(name, har::ZlibInput::new(chained), opts, sink);
            har_session_stage(&mut report, exchanges, sink);
        }
        None => report.error(format!(
            "{name}: offset 0: not a capture (pcap, pcapng) or HAR file: unrecognized magic bytes"
        )),
    }
    report
}

/// The map step of a capture set: its files one after the other as one capture, in the order
/// of `set.members` (see [`CaptureSet::order_by_time`]), their frames numbered per member
/// ([`crate::record::member_frame`]).
fn map_set(set: &CaptureSet, opts: &Options, sink: &mut dyn FactSink) -> InputReport {
    let mut report = InputReport::new(&set.name);
    let mut members = set.members.iter().enumerate().map(|(i, path)| Member {
        no: i as u64 + 1,
        name: path.display().to_string(),
        src: open_member(path).map(Source::Bytes),
    });
    analyze_capture(&mut members, opts, &mut report, sink);
    report
}

/// The map step of capture points merged by time ([`MergedCapture`]) as one capture.
fn map_merged(
    name: &str,
    merged: Box<MergedCapture>,
    opts: &Options,
    sink: &mut dyn FactSink,
) -> InputReport {
    let mut report = InputReport::new(name);
    let one = Member {
        no: 0,
        name: name.to_string(),
        src: Ok(Source::Merged(merged)),
    };
    analyze_capture(&mut std::iter::once(one), opts, &mut report, sink);
    report
}

fn max_block(opts: &Options) -> usize {
    opts.limits.max_block_bytes
}

/// The merged capture's frames, named by the file each came from.
struct MergedNames(Arc<FrameMap>);

impl report::files::FrameNames for MergedNames {
    fn locate(&self, frame: u64) -> Option<(String, u64)> {
        self.0.locate(frame).map(|(f, l)| (f.to_string(), l))
    }
    fn files(&self) -> Vec<String> {
        self.0.files.clone()
    }
}

/// A file of a set, decompressed when it is compressed.
fn open_member(path: &Path) -> Result<Box<dyn Read>, String> {
    let name = path.display();
    let (codec, src) =
        crate::input::compressed::open_sniffed(path).map_err(|e| format!("{name}: {e}"))?;
    Ok(decompressed(codec, src))
}

/// `src` decompressed by `codec`, or as it is when there is none.
fn decompressed<'a, R: Read + 'a>(codec: Option<Codec>, src: R) -> Box<dyn Read + 'a> {
    match codec {
        Some(codec) => Box::new(Decompressed {
            codec,
            src: codec.decoder(src),
        }),
        None => Box::new(src),
    }
}

/// The decompressed bytes of an input, whose read errors say they come from the codec.
struct Decompressed<'a> {
    codec: Codec,
    src: Box<dyn Read + 'a>,
}

impl Read for Decompressed<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        self.src.read(out).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("{} decompression: {e}", self.codec.name()),
            )
        })
    }
}

/// [`analyze_reader_into`] on what a compressed input holds; compressed again is refused (a
/// bomb of nested layers gains nothing).
fn analyze_decompressed(
    name: &str,
    mut src: Decompressed<'_>,
    opts: &Options,
    sink: &mut dyn FactSink,
) -> InputReport {
    let mut head = [0u8; 8];
    let got = match read_prefix(&mut src, &mut head) {
        Ok(got) => got,
        Err((got, e)) => {
            let mut r = InputReport::new(name);
            r.error(format!(
                "{name}: offset {got} (decompressed): read error: {e}"
            ));
            return r;
        }
    };
    if let Some(again) = Codec::sniff(&head[..got]) {
        let mut r = InputReport::new(name);
        r.error(format!(
            "{name}: offset 0 (decompressed): {} inside {}: nested compression is not read",
            again.name(),
            src.codec.name()
        ));
        return r;
    }
    let prefix = head[..got].to_vec();
    map_reader(name, std::io::Cursor::new(prefix).chain(src), opts, sink)
}

impl ShardMsg {
    /// The message for a flow table's event, given while the reader is at `frame`.
    fn from_flow(e: FlowEvent, frame: u64) -> Self {
        match e {
            FlowEvent::Open(s, a, b, syn) => ShardMsg::Open(s, a, b, syn),
            FlowEvent::End(s, how, mark) => ShardMsg::End(s, how, mark, frame),
        }
    }
}

/// Instructions from the reader to the shards.
#[derive(Clone, Debug)]
enum ShardMsg {
    /// The TLS secrets known from here on (a Decryption Secrets Block was read); for every
    /// shard.
    Keys(Arc<KeyLog>),
    /// A connection begins: its number, its two endpoints (forward source first), and whether
    /// its first packet is a SYN. Sent apart from packets, which it would make twice as large.
    Open(u64, Endpoint, Endpoint, bool),
    Packet(FlowPacket, usize, usize),
    /// The connection is over for the reader (evicted, or replaced by a new one on the same
    /// 4-tuple): finish it now. The mark is where it ended (a replaced connection's, when it
    /// was replaced); the frame is the one being read when the reader ended it, the key of
    /// what finishing it gives the session stage: a key below the frames the shard already
    /// said it was past would be taken in a different order with one shard than with two.
    End(u64, StreamEnd, Mark, u64),
}

/// What a shard hands the session stage about one exchange.
#[derive(Debug)]
enum StageEvent {
    /// Its request named session `0`.
    Opened(SessionName),
    /// It is over: its summary (when kept) and its resume (when it is one). Boxed, so that
    /// the events queued between threads stay small.
    Ended(Option<Box<ExchangeSummary>>, Option<Box<ResumeRecord>>),
    /// A connection that may carry MCP was not read, wholly or in part, or lost requests (or
    /// answers it could not pair) that no session can be named for.
    Unread,
}

/// A [`StageEvent`] with its place in the order the session stage takes them in: the frame
/// whose processing produced it (`u64::MAX` at the end of the input), then connection,
/// exchange, and opening before ending. The key depends on the capture only, never on
/// which shard produced it.
#[derive(Debug)]
struct Keyed {
    frame: u64,
    stream: u64,
    exchange: u32,
    event: StageEvent,
}

impl Keyed {
    fn key(&self) -> (u64, u64, u32, bool) {
        (
            self.frame,
            self.stream,
            self.exchange,
            matches!(self.event, StageEvent::Ended(..)),
        )
    }
}

/// Frame key of the events made when the input is over.
const END_OF_INPUT: u64 = u64::MAX;

/// One followed connection.
struct Conn {
    tcp: TcpConnection,
    app: AppStack,
    tracker: ExchangeTracker,
    endpoints: (Endpoint, Endpoint),
    /// Payload bytes of both directions, for the coverage accounting.
    bytes: u64,
    /// What the report says of the connection's TLS, made once its records decrypt.
    tls: Option<Arc<TlsInfo>>,
    /// What the connection first gave its application stack: data, or a gap (the capture
    /// lost its first bytes, so what it speaks cannot be told).
    first: Option<bool>,
    ends: [Option<StreamEnd>; 2],
    gaps: [bool; 2],
}

/// Feeds reassembled bytes to the connection's application stack, remembering how each
/// direction ended.
struct Bridge<'a> {
    ctx: AppCtx<'a>,
    /// Direction of the packet being processed, when it carries a RST.
    rst_from: Option<Direction>,
    app: &'a mut AppStack,
    tracker: &'a mut ExchangeTracker,
    first: &'a mut Option<bool>,
    ends: &'a mut [Option<StreamEnd>; 2],
    gaps: &'a mut [bool; 2],
}

impl StreamSink for Bridge<'_> {
    fn data(&mut self, dir: Direction, bytes: &[u8], mark: Mark) {
        self.first.get_or_insert(true);
        self.app.data(self.ctx, dir, bytes, mark, self.tracker);
    }
    fn gap(&mut self, dir: Direction, len: u64, mark: Mark) {
        self.first.get_or_insert(false);
        self.gaps[dir.index()] = true;
        // Requests may have been lost: no session can be named for them. So may answers of
        // a connection that showed no exchange yet (a TLS handshake the gap broke): whatever
        // it carried cannot be read now, nor ever tied to a session.
        if self.app.client_direction().is_none_or(|c| c == dir) || self.tracker.exchanges == 0 {
            self.tracker.unattributed_loss = true;
        }
        self.app.gap(self.ctx, dir, len, mark, self.tracker);
    }
    fn end(&mut self, dir: Direction, how: StreamEnd, mark: Mark) {
        // Who reset matters: a stream cut by its own sender ended there; one cut by the
        // receiver may have had more to come.
        let how = match (how, self.rst_from) {
            (StreamEnd::Rst, Some(from)) if from != dir => StreamEnd::PeerRst,
            _ => how,
        };
        self.ends[dir.index()] = Some(how);
        self.app.end(self.ctx, dir, how, mark, self.tracker);
    }
    fn sent_unseen(&mut self, dir: Direction, _mark: Mark) {
        // Requests may be among those bytes: no session is taken for whole from here on, even
        // if they come late.
        if self.app.client_direction().is_none_or(|c| c == dir) {
            self.tracker.unattributed_loss = true;
        }
    }
    fn after_peer(&mut self, dir: Direction, _mark: Mark) {
        self.app.after_peer(dir);
    }
    fn before_peer(&mut self, dir: Direction, mark: Mark, unacked: u64) {
        self.app.before_peer(dir, mark, unacked);
    }
    fn ahead_of_peer(&mut self, dir: Direction, mark: Mark, unseen: u64) {
        self.app.ahead_of_peer(dir, mark, unseen);
    }
}

/// How far ahead in a batch a shard asks for a message's connection state, so that it is in
/// the cache when the message's turn comes (sessions interleave over thousands of
/// connections, and the state of each is 16 cache lines); the session stage looks as far
/// ahead among the events it is given.
const PREFETCH_AHEAD: usize = 4;

/// The connections of one shard and what they produced.
struct Shard {
    limits: Limits,
    /// Boxed: a connection's state is large, and the lookup on every packet should probe a
    /// table of small entries.
    conns: HashMap<u64, Box<Conn>, FoldHashKey>,
    /// For the session stage, in the order they were made.
    events: Vec<Keyed>,
    /// The input is over: what connections give now is keyed [`END_OF_INPUT`].
    finishing: bool,
    /// Hashes of the session ids seen (in no order: the report counts them). Every closed
    /// connection adds its own, mostly ones seen before.
    sessions: SessionSet,
    stats: InputStats,
    /// Connections dropped as unreadable before they ended: their later bytes are still
    /// counted, and they are accounted for when they end.
    unread: HashMap<u64, (Unread, Endpoint, u64), FoldHashKey>,
    /// Servers whose unread traffic is not MCP, by the user's word (`--ignore-endpoint`).
    ignore: Arc<[EndpointFilter]>,
    /// The TLS secrets known at this point of the capture.
    keys: Arc<KeyLog>,
    /// The resume and summary lists a connection's tracker fills, lent to the connection for
    /// the length of one call ([`Lists::lend`]): [`drain`] empties them before the call
    /// returns, so room of their own would only sit idle in every open connection (thousands
    /// at once, several KiB each), and fresh room at every exchange cost two large
    /// allocations per exchange.
    lists: Lists,
    /// Emptied lists of opened sessions of connections closed, for the next ones opened: a
    /// list of its own cost every connection of a reconnect storm an allocation, and with one
    /// spare list most of them still made their own (0.61 a resume: their connections
    /// overlap). Lent per call as the other lists are, they cost every packet three more
    /// words swapped each way.
    spare_opened: Vec<Vec<(u32, SessionName)>>,
    /// What the report says of the TLS of the last connection described.
    tls_infos: TlsInfos,
}

/// Emptied lists of opened sessions a shard keeps for connections to come, at most.
const SPARE_OPENED_LISTS: usize = 256;
/// The room of a list of opened sessions kept for another connection, at most.
const SPARE_OPENED_ROOM: usize = 4;

/// Emptied resume and summary lists, with their room: the tracker's lists, whose records are
/// boxed where it makes them (see `ExchangeTracker::resumes`).
#[derive(Default)]
#[allow(clippy::vec_box)]
struct Lists {
    resumes: Vec<Box<ResumeRecord>>,
    summaries: Vec<Box<ExchangeSummary>>,
}

impl Lists {
    /// Gives the lists' room to `t`, whose own lists are empty and hold none.
    fn lend(&mut self, t: &mut ExchangeTracker) {
        std::mem::swap(&mut self.resumes, &mut t.resumes);
        std::mem::swap(&mut self.summaries, &mut t.summaries);
    }

    /// Takes the room back once `t` is drained. Lists that are not empty stay with their
    /// connection (nothing leaves records undrained, but records must never pass to another
    /// connection); the shard then keeps the connection's empty ones.
    fn take_back(&mut self, t: &mut ExchangeTracker) {
        if t.resumes.is_empty() && t.summaries.is_empty() {
            self.lend(t);
        }
    }
}

impl Shard {
    fn new(limits: &Limits, keys: Arc<KeyLog>, ignore: Arc<[EndpointFilter]>) -> Self {
        Shard {
            limits: limits.clone(),
            conns: HashMap::with_hasher(FoldHashKey::default()),
            events: Vec::new(),
            finishing: false,
            sessions: SessionSet::default(),
            stats: InputStats::default(),
            unread: HashMap::with_hasher(FoldHashKey::default()),
            keys,
            ignore,
            lists: Lists::default(),
            spare_opened: Vec::new(),
            tls_infos: TlsInfos::default(),
        }
    }

    fn open(&mut self, stream: u64, endpoints: (Endpoint, Endpoint), from_start: bool) {
        self.conns.insert(
            stream,
            Box::new(Conn {
                tcp: TcpConnection::new(&self.limits),
                app: AppStack::new(from_start),
                tracker: ExchangeTracker::new(&self.limits)
                    .with_opened(self.spare_opened.pop().unwrap_or_default()),
                endpoints,
                bytes: 0,
                tls: None,
                first: None,
                ends: [None; 2],
                gaps: [false; 2],
            }),
        );
    }

    fn packet(&mut self, m: &FlowPacket, payload: &[u8]) {
        let Some(c) = self.conns.get_mut(&m.stream) else {
            if let Some(u) = self.unread.get_mut(&m.stream) {
                u.2 += payload.len() as u64;
            }
            return;
        };
        let seg = TcpSegment {
            seq: m.seq,
            ack: m.ack,
            flags: m.flags,
            payload,
            mark: m.mark,
        };
        // Often about half the frames only acknowledge what was delivered: TCP counts them, and
        // nothing above it hears of them, so the connection neither closes nor ends here.
        if c.tcp.quiet_ack(m.dir, &seg) {
            return;
        }
        c.bytes += payload.len() as u64;
        self.lists.lend(&mut c.tracker);
        let mut bridge = Bridge {
            ctx: AppCtx {
                limits: &self.limits,
                keys: &self.keys,
            },
            rst_from: m.flags.rst().then_some(m.dir),
            app: &mut c.app,
            tracker: &mut c.tracker,
            first: &mut c.first,
            ends: &mut c.ends,
            gaps: &mut c.gaps,
        };
        c.tcp.segment(m.dir, &seg, &mut bridge);
        if c.tracker.has_news() {
            drain(
                m.stream,
                c,
                m.mark.frame,
                &mut self.events,
                &mut self.tls_infos,
            );
        }
        self.lists.take_back(&mut c.tracker);
        if c.tcp.is_closed() {
            self.close(m.stream, StreamEnd::CaptureEnd, m.mark, m.mark.frame);
        } else if c.app.is_done() {
            // Not readable (or no longer): its state goes now, and its later packets find no
            // connection, so they cost one lookup each.
            self.close(m.stream, StreamEnd::Abandoned, m.mark, m.mark.frame);
        }
    }

    /// Counts a connection that was not read, unless the user said its server is not MCP.
    fn count_unread(&mut self, reason: Unread, server: Endpoint, bytes: u64) {
        if reason != Unread::NotHttp && self.ignore.iter().any(|f| f.matches(&server)) {
            self.stats.coverage.ignored.connections += 1;
            self.stats.coverage.ignored.bytes += bytes;
        } else {
            self.stats
                .coverage
                .count_unread(reason.as_str(), Some(server.to_string()), bytes);
        }
    }

    /// Finishes a connection that ended at `mark`: what is buffered is flushed, open exchanges
    /// are decided. What it gives the session stage is keyed by frame `at`, the one being read
    /// (or [`END_OF_INPUT`]).
    fn close(&mut self, stream: u64, how: StreamEnd, mark: Mark, at: u64) {
        let Some(mut c) = self.conns.remove(&stream) else {
            if let Some((reason, server, bytes)) = self.unread.remove(&stream) {
                self.count_unread(reason, server, bytes);
            }
            return;
        };
        self.lists.lend(&mut c.tracker);
        let mut bridge = Bridge {
            ctx: AppCtx {
                limits: &self.limits,
                keys: &self.keys,
            },
            rst_from: None,
            app: &mut c.app,
            tracker: &mut c.tracker,
            first: &mut c.first,
            ends: &mut c.ends,
            gaps: &mut c.gaps,
        };
        c.tcp.finish(how, mark, &mut bridge);
        let server_dir = c.app.client_direction().map(Direction::other);
        let server_end = server_dir.and_then(|d| c.ends[d.index()]);
        // Bytes a layer above TCP lost (TLS records it could not decrypt, HTTP/2 header blocks
        // it could not read) may have held the answer too.
        let server_gaps = server_dir.is_none_or(|d| c.gaps[d.index()])
            || c.app.losses().any(|(kind, n)| {
                n > 0
                    && matches!(
                        kind,
                        "tls_records_lost"
                            | "tls_resync_failed"
                            | "tls_auth_failures"
                            | "h2_headers_unreadable"
                            | "h2_resynchronized"
                    )
            });
        c.tracker.finish(server_end, server_gaps, mark);
        let frame = if self.finishing { END_OF_INPUT } else { at };
        drain(stream, &mut c, frame, &mut self.events, &mut self.tls_infos);
        self.lists.take_back(&mut c.tracker);
        // Lists kept only while few and small: a burst of requests in one packet leaves a
        // long one, which goes with its connection.
        if c.tracker.opened.is_empty()
            && c.tracker.opened.capacity() <= SPARE_OPENED_ROOM
            && self.spare_opened.len() < SPARE_OPENED_LISTS
        {
            self.spare_opened
                .push(std::mem::take(&mut c.tracker.opened));
        }
        let t = c.tcp.stats();
        self.stats.tcp_connections += 1;
        self.stats.tcp_gaps += t.gaps;
        self.stats.tcp_gap_bytes += t.gap_bytes;
        self.stats.out_of_order_overflows += t.overflows;
        self.stats.http_exchanges += c.tracker.exchanges;
        // Bytes that never reached a parser as data (only gaps did), or that were not HTTP
        // after the capture lost the first ones: what the connection spoke cannot be told.
        let coverage = match c.app.coverage(c.tracker.exchanges > 0) {
            Coverage::Empty if c.bytes > 0 => Coverage::Unread(Unread::GapBeforeProtocol),
            Coverage::Unread(Unread::NotHttp) if c.first == Some(false) => {
                Coverage::Unread(Unread::GapBeforeProtocol)
            }
            other => other,
        };
        match coverage {
            _ if c.bytes == 0 => self.stats.coverage.empty += 1,
            Coverage::Empty => self.stats.coverage.empty += 1,
            Coverage::Read(how) => self.stats.coverage.count_read(how, c.bytes),
            Coverage::Unread(reason) => {
                let (fwd, rev) = c.endpoints;
                let server = match c.app.client_direction() {
                    Some(Direction::Reverse) => fwd,
                    _ => rev,
                };
                if how == StreamEnd::Abandoned {
                    self.unread.insert(stream, (reason, server, c.bytes));
                } else {
                    self.count_unread(reason, server, c.bytes);
                }
            }
        }
        let ignored = |server: &Endpoint| self.ignore.iter().any(|f| f.matches(server));
        let server = match c.app.client_direction() {
            Some(Direction::Reverse) => c.endpoints.0,
            _ => c.endpoints.1,
        };
        let unread = match coverage {
            Coverage::Unread(Unread::NotHttp) => false,
            Coverage::Unread(_) => c.bytes > 0 && !ignored(&server),
            _ => c.app.losses().any(|(kind, n)| {
                n > 0 && matches!(kind, "h2_headers_unreadable" | "tls_resync_failed")
            }),
        };
        if unread {
            self.events.push(Keyed {
                frame,
                stream,
                exchange: 0,
                event: StageEvent::Unread,
            });
        }
        for (kind, n) in c.app.losses() {
            match kind {
                "h2_headers_unreadable" => self.stats.coverage.h2_headers_unreadable += n,
                "tls_resync_failed" => self.stats.coverage.tls_rest_unreadable += n,
                _ => {}
            }
            *self.stats.anomalies.entry(kind.to_string()).or_insert(0) += n;
        }
        for (a, _) in &c.tracker.anomalies {
            *self.stats.anomalies.entry(anomaly_name(*a)).or_insert(0) += 1;
        }
        self.sessions.extend(c.tracker.session_ids.iter());
        self.stats.facts_dropped += c.tracker.facts_dropped;
        self.stats.exchanges_not_audited += c.tracker.summaries_dropped;
    }

    /// Asks the processor to bring the state of the connection `msg` is for into the cache,
    /// so that it is there when the message's turn comes.
    fn prefetch(&self, msg: &ShardMsg) {
        if let ShardMsg::Packet(m, _, _) = msg
            && let Some(c) = self.conns.get(&m.stream)
        {
            crate::cache::prefetch(&**c);
        }
    }

    fn handle(&mut self, msg: ShardMsg, bytes: &[u8]) {
        match msg {
            ShardMsg::Packet(m, from, to) => self.packet(&m, bytes.get(from..to).unwrap_or(&[])),
            ShardMsg::End(stream, how, mark, at) => self.close(stream, how, mark, at),
            ShardMsg::Open(stream, a, b, from_start) => self.open(stream, (a, b), from_start),
            ShardMsg::Keys(keys) => self.keys = keys,
        }
    }

    fn finish(&mut self, mark: Mark) {
        self.finishing = true;
        let mut open: Vec<u64> = self.conns.keys().copied().collect();
        open.extend(self.unread.keys());
        open.sort_unstable();
        for s in open {
            self.close(s, StreamEnd::CaptureEnd, mark, END_OF_INPUT);
        }
    }
}

/// Moves what a connection's exchanges gave since the last call into `events`: the sessions
/// requests named, and each exchange that ended with its summary and resume, endpoints filled
/// in. `frame` is their key.
fn drain(stream: u64, c: &mut Conn, frame: u64, events: &mut Vec<Keyed>, tls_infos: &mut TlsInfos) {
    if std::mem::take(&mut c.tracker.unattributed_loss) {
        events.push(Keyed {
            frame,
            stream,
            exchange: 0,
            event: StageEvent::Unread,
        });
    }
    for (exchange, sid) in c.tracker.opened.drain(..) {
        events.push(Keyed {
            frame,
            stream,
            exchange,
            event: StageEvent::Opened(sid),
        });
    }
    if c.tracker.summaries.is_empty() && c.tracker.resumes.is_empty() {
        return;
    }
    let (fwd, rev) = c.endpoints;
    let (client, server) = match c.app.client_direction() {
        Some(Direction::Forward) => (Some(fwd), Some(rev)),
        Some(Direction::Reverse) => (Some(rev), Some(fwd)),
        None => (None, None),
    };
    let connection = ConnectionRef {
        tcp_stream: Some(stream),
        client,
        server,
        har_entry: None,
        tls: match (&c.tls, c.app.tls()) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(f)) => {
                let t = tls_infos.of(f);
                if f.records_decrypted > 0 {
                    c.tls = Some(t.clone());
                }
                Some(t)
            }
            (None, None) => None,
        },
    };
    let overflowed = c.tcp.stats().overflows > 0;
    let finished = |mut r: Box<ResumeRecord>| {
        // Gaps on a connection whose out-of-order buffer overflowed are the limit's doing.
        if overflowed
            && r.decision.verdict == Verdict::CaptureIncomplete
            && r.decision.reason != LimitHit::Connections.reason()
        {
            r.decision.blame_limit(LimitHit::OutOfOrder);
        }
        r.connection = connection.clone();
        r
    };
    // The resumes are taken from the tracker's list in place, which keeps its room for the
    // shard's next drains: a list of their own cost an allocation at every drain.
    let resumes = &mut c.tracker.resumes;
    for mut x in c.tracker.summaries.drain(..) {
        x.connection = connection.clone();
        let exchange = x.exchange;
        let r = resumes
            .iter()
            .position(|r| r.exchange == exchange)
            .map(|i| finished(resumes.remove(i)));
        events.push(Keyed {
            frame,
            stream,
            exchange,
            event: StageEvent::Ended(Some(x), r),
        });
    }
    for r in resumes.drain(..) {
        events.push(Keyed {
            frame,
            stream,
            exchange: r.exchange,
            event: StageEvent::Ended(None, Some(finished(r))),
        });
    }
}

/// What the report says of the TLS of the last connection described, with the facts it was
/// made of. The connections of a capture are mostly alike (one server name, suite and key log),
/// and each resume and exchange summary holds its connection's description until the session
/// stage has reported it (thousands at once on a capture of many sessions over TLS, some 250
/// bytes each when every connection had its own): alike connections share one.
#[derive(Default)]
struct TlsInfos {
    last: Option<(TlsInfoKey, Arc<TlsInfo>)>,
}

/// The facts a [`TlsInfo`] is made of that it does not hold as they are.
struct TlsInfoKey {
    version: Option<u16>,
    cipher_suite: Option<u16>,
    key_source: Option<KeySource>,
}

impl TlsInfos {
    /// What the report says of a connection with these facts: the last one made, when they
    /// are the same facts.
    fn of(&mut self, f: &crate::app::tls::TlsFacts) -> Arc<TlsInfo> {
        if let Some((key, info)) = &self.last
            && key.version == f.version
            && key.cipher_suite == f.cipher_suite
            && key.key_source == f.key_source
            && info.sni == f.sni
            && info.alpn == f.alpn
        {
            return info.clone();
        }
        let info = Arc::new(tls_info(f));
        let key = TlsInfoKey {
            version: f.version,
            cipher_suite: f.cipher_suite,
            key_source: f.key_source.clone(),
        };
        self.last = Some((key, info.clone()));
        info
    }
}

/// What the report says of a TLS connection.
fn tls_info(f: &crate::app::tls::TlsFacts) -> TlsInfo {
    TlsInfo {
        version: f.version.map(|v| match v {
            0x0304 => "TLS 1.3".to_string(),
            0x0303 => "TLS 1.2".to_string(),
            0x0302 => "TLS 1.1".to_string(),
            0x0301 => "TLS 1.0".to_string(),
            other => format!("{other:#06x}"),
        }),
        cipher: f.cipher_suite.map(crate::app::tls::cipher_suite_name),
        sni: f.sni.clone(),
        alpn: f.alpn.clone(),
        keys: f.key_source.as_ref().map(|k| match k {
            KeySource::File(name) => format!("keylog:{name}"),
            KeySource::Embedded => "pcapng".to_string(),
        }),
    }
}

fn anomaly_name(a: crate::record::Anomaly) -> String {
    serde_json::to_value(a)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{a:?}"))
}

fn skip_name(s: Skip) -> &'static str {
    match s {
        Skip::UnsupportedLinkType => "unsupported_link_type",
        Skip::NotTcp => "not_tcp",
        Skip::IpFragment => "ip_fragment",
        Skip::Malformed => "malformed",
    }
}

/// Where packets go once classified: straight into one shard, or in batches to worker threads.
trait Dispatch {
    fn packet(&mut self, m: FlowPacket, payload: &[u8]);
    /// A message without payload (`Open`, `End`).
    fn control(&mut self, msg: ShardMsg);
    /// Every message of frames up to `frame` has been given.
    fn frame_done(&mut self, frame: u64);
}

/// Takes the shards' events for the session stage and gives them to it in key order: an
/// event is let through once every shard has said it is past the event's frame.
struct Merger<'s> {
    facts: &'s mut dyn FactSink,
    /// Per shard, the events it handed over and that are not let through yet, by frame.
    held: Vec<std::collections::VecDeque<Keyed>>,
    /// Per shard, the last frame all of whose events it has handed over.
    done: Vec<u64>,
    /// The events being let through, in key order (kept for its room).
    out: Vec<Keyed>,
}

impl<'s> Merger<'s> {
    fn new(shards: usize, facts: &'s mut dyn FactSink) -> Self {
        Merger {
            facts,
            held: (0..shards).map(|_| Default::default()).collect(),
            done: vec![0; shards],
            out: Vec::new(),
        }
    }

    fn take(&mut self, shard: usize, done: u64, events: &mut Vec<Keyed>) {
        // The merge's premise: what a shard hands over is keyed past the frames it said it was
        // past before. An event keyed below would be taken in another order with one shard
        // than with two (checked where debug assertions are on: tests, fuzz targets).
        debug_assert!(
            self.done
                .get(shard)
                .is_none_or(|&past| events.iter().all(|e| e.frame > past)),
            "shard {shard} handed over an event keyed at or below a frame it had said it was past"
        );
        let (Some(held), Some(d)) = (self.held.get_mut(shard), self.done.get_mut(shard)) else {
            return;
        };
        *d = (*d).max(done);
        if events.is_empty() {
            return;
        }
        // A shard makes its events in the order of the frames it is given, so they come
        // sorted by frame, and one hand-over's frames start where the last one's end (it may
        // hold events of the frame being read when it was made): `release` takes each shard's
        // events up to a frame from the front. Sorted here when that should ever not hold.
        let sorted = events.is_sorted_by_key(|e| e.frame)
            && held
                .back()
                .zip(events.first())
                .is_none_or(|(last, first)| last.frame <= first.frame);
        held.extend(events.drain(..));
        if !sorted {
            held.make_contiguous().sort_by_key(|e| e.frame);
        }
    }

    /// Gives the stage every event no shard can still precede.
    fn release(&mut self) {
        let upto = self.done.iter().copied().min().unwrap_or(END_OF_INPUT);
        for held in &mut self.held {
            let n = held.partition_point(|k| k.frame <= upto);
            self.out.extend(held.drain(..n));
        }
        if self.out.is_empty() {
            return;
        }
        // Each shard's part is in frame order already: the sort merges them.
        self.out.sort_by_key(Keyed::key);
        // With one shard (`-j1`) the stage runs on the thread that just wrote the events, and
        // asking ahead only cost time (the default mix's `-j1` CPU 0.34 -> 0.39 s).
        let ahead = self.done.len() > 1;
        let mut events = self.out.drain(..);
        while let Some(k) = events.next() {
            // What the stage reads of an ended exchange was written on a worker's core: it is
            // asked for a few events ahead.
            if ahead
                && let Some(Keyed {
                    event: StageEvent::Ended(x, r),
                    ..
                }) = events.as_slice().get(PREFETCH_AHEAD - 1)
            {
                if let Some(x) = x {
                    crate::cache::prefetch(&**x);
                }
                if let Some(r) = r {
                    crate::cache::prefetch(&**r);
                }
            }
            let key = (k.stream, k.exchange);
            match k.event {
                StageEvent::Opened(sid) => self.facts.opened(&sid, key),
                StageEvent::Unread => self.facts.unread(),
                StageEvent::Ended(x, r) => self.facts.ended(key, x, r),
            }
        }
    }

    fn finish(mut self) -> audit::StageStats {
        for d in &mut self.done {
            *d = END_OF_INPUT;
        }
        self.release();
        self.facts.finish()
    }
}

/// One shard on the reader's thread (`-j1`).
struct Inline<'s> {
    shard: Shard,
    merger: Merger<'s>,
}

impl Dispatch for Inline<'_> {
    fn packet(&mut self, m: FlowPacket, payload: &[u8]) {
        self.shard.packet(&m, payload);
    }
    fn control(&mut self, msg: ShardMsg) {
        self.shard.handle(msg, &[]);
    }
    fn frame_done(&mut self, frame: u64) {
        if !self.shard.events.is_empty() {
            self.merger.take(0, frame, &mut self.shard.events);
            self.merger.release();
        }
    }
}

struct Batch {
    msgs: Vec<ShardMsg>,
    bytes: Vec<u8>,
    /// Every message of frames up to this one is in this batch or an earlier one.
    done: u64,
}

impl Batch {
    fn new() -> Self {
        Batch {
            msgs: Vec::with_capacity(BATCH_MSGS),
            bytes: Vec::with_capacity(BATCH_BYTES + 2048),
            done: 0,
        }
    }
}

const BATCH_BYTES: usize = 64 << 10;
const BATCH_MSGS: usize = 512;
/// Batches queued per worker (in all shards' queues together) before the reader waits. With
/// more threads than cores, a worker is sometimes off a core for a while; a short queue then
/// fills and the reader waits on it: with a queue of its own per worker, at 4 `perf sched` on
/// the default mix with `-j2` found one core idle 36% of the run, at 16 (1 MiB of payload per
/// worker) 16%; 16 took 17–19% off the `-j2` wall time of the default and tiny mixes against
/// 4, 32 gained nothing more. Shared by the shards, 8 cost those mixes 3% against 16 for 2 MiB
/// less at the peak. Every batch ever made is kept, so the reserve is paid for at the peak.
const BATCHES_QUEUED: usize = 16;
/// Frames between two hand-overs to the session stage: every shard is sent what it has, so
/// that a quiet shard does not hold the others' events back.
const HAND_OVER_FRAMES: u64 = 1 << 14;
/// Events a worker gathers before it hands them over between those frames. Handing over after
/// every batch that ended an exchange woke the stage some 2,000 times in a 256 MiB TLS capture
/// with `-j2` (`perf sched`), each wake-up a switch on a core the workers need; at 128, 355
/// times, and the workers switched 3× less often. Alternated runs, 256 MiB, `-j2`: 4–8% less
/// CPU and 2–8% less wall time on the default, tiny and TLS 1.3 captures; peak RSS unchanged
/// beyond the noise (sessions, storm, tiny).
const HAND_OVER_EVENTS: usize = 128;

/// Hand-overs queued for the session stage before the workers wait: one hand-over holds the
/// exchanges a batch ended (for tiny packets up to a few hundred). Where the stage is the
/// busiest thread (many sessions, reconnect storms), a short queue stops a worker each time
/// the stage is off a core: 16 against 4 took 8–11% off those mixes' `-j2` wall time, about
/// 1 MiB more at the peak.
const HANDED_QUEUED: usize = 16;

/// What a worker gives back after a batch: the shard, the batch's `done` frame, its events.
type Handed = (usize, u64, Vec<Keyed>);

/// Event buffers the session stage has emptied, given back to the shard that filled them:
/// the shard's next events go into the room they already have, rather than the stage freeing
/// every buffer a worker allocated (a free on another thread than the allocation's costs the
/// allocator more).
type Emptied = mpsc::Sender<Vec<Keyed>>;

/// Shards per worker thread. A connection's shard is fixed by its number; a shard is not tied
/// to a worker but taken by whichever worker is free when it has batches queued. With one
/// shard per worker, a worker whose connections were busier for a while filled its queue, the
/// reader waited on it, and the other worker ran dry (`perf sched` on the default mix with
/// `-j2`: 15% of both cores idle). Alternated runs, 256 MiB, `-j2`: two shards a worker took
/// 15% and 27% off the default and tiny mixes' wall time against one; four did no better than
/// two, and held more events waiting for the slowest shard (3 MiB more at the peak of 3,000
/// sessions).
const SHARDS_PER_WORKER: usize = 2;

/// A shard, with the emptied event buffers the session stage gives back to it.
struct Slot {
    shard: Shard,
    /// `None` once [`Shard::finish`] has run and its last events are handed over: the stage
    /// then frees those events' buffer rather than giving it back to a shard that is done.
    emptied: Option<mpsc::Receiver<Vec<Keyed>>>,
}

/// The batches queued for each shard, and the shards no worker holds.
struct PoolState {
    queues: Vec<std::collections::VecDeque<Batch>>,
    /// `None` while a worker holds the shard.
    slots: Vec<Option<Slot>>,
    /// Batches in all queues.
    queued: usize,
    /// Workers waiting for a shard with work.
    idle: usize,
    /// The reader waits for room.
    full: bool,
    /// The reader is done: no more batches come, and the shards are finished at this mark.
    closed: Option<Mark>,
    /// A worker panicked: the run is going down, nobody waits any longer.
    broken: bool,
}

impl PoolState {
    /// The shard a worker should take next: `prefer` (the one it just had, whose state is
    /// still in its cache) when it has work, else the first free one that has. `None` when
    /// no free shard has work.
    fn pick(&self, prefer: Option<usize>) -> Option<usize> {
        let ready = |s: usize| self.slots[s].is_some() && !self.queues[s].is_empty();
        prefer
            .filter(|&s| ready(s))
            .or_else(|| (0..self.slots.len()).find(|&s| ready(s)))
    }
}

/// Work shared by the reader and the workers: a queue of batches per shard, at most one
/// worker at a time on a shard, so that a shard's batches are processed in order.
struct Pool {
    state: std::sync::Mutex<PoolState>,
    /// Signalled when a free shard gets work, or the reader is done.
    work: std::sync::Condvar,
    /// Signalled when a worker takes a batch while the reader waits for room.
    room: std::sync::Condvar,
    /// Batches queued in all before the reader waits.
    cap: usize,
    /// The session hashes of all shards, moved here from a shard once it holds
    /// [`SHARD_SESSIONS`]: every shard sees most sessions of a capture (a session's
    /// connections go to any shard), and sets of their own held each nearly all of them.
    sessions: std::sync::Mutex<SessionSet>,
}

/// Session hashes a shard gathers before it moves them to the pool's set.
const SHARD_SESSIONS: usize = 4096;

impl Pool {
    fn new(slots: Vec<Slot>, cap: usize) -> Self {
        Pool {
            state: std::sync::Mutex::new(PoolState {
                queues: slots.iter().map(|_| Default::default()).collect(),
                slots: slots.into_iter().map(Some).collect(),
                queued: 0,
                idle: 0,
                full: false,
                closed: None,
                broken: false,
            }),
            work: std::sync::Condvar::new(),
            room: std::sync::Condvar::new(),
            cap,
            sessions: Default::default(),
        }
    }

    /// The state, even when a panicking worker left the lock poisoned: the state is
    /// consistent between any two statements that hold it.
    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues `batch` for shard `s`, once there is room.
    fn push(&self, s: usize, batch: Batch) {
        let mut st = self.lock();
        while st.queued >= self.cap && !st.broken {
            st.full = true;
            st = self
                .room
                .wait(st)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        st.full = false;
        if st.broken {
            // A worker is gone; its panic ends the run, so what is left is dropped.
            return;
        }
        st.queues[s].push_back(batch);
        st.queued += 1;
        // A shard a worker holds is taken up again by that worker: no one else can.
        let wake = st.idle > 0 && st.slots[s].is_some();
        // Woken once the lock is free: a worker woken while it is held only sleeps again on
        // the lock (`perf` on the default mix with `-j2`: 700 such sleeps in a 0.2 s run).
        drop(st);
        if wake {
            self.work.notify_one();
        }
    }

    /// No more batches come; the shards are to be finished at `last`.
    fn close(&self, last: Mark) {
        self.lock().closed = Some(last);
        self.work.notify_all();
    }

    /// Moves a shard's session hashes to the pool's set, once it holds enough of them or
    /// `all` the same.
    fn gather(&self, shard: &mut Shard, all: bool) {
        if all || shard.sessions.held() >= SHARD_SESSIONS {
            let mut to = self
                .sessions
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            shard.sessions.move_into(&mut to);
        }
    }

    /// The shards, once every worker is done with them, in shard order, and the session
    /// hashes moved out of them.
    fn into_shards(self) -> (Vec<Shard>, SessionSet) {
        let st = self
            .state
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let sessions = self
            .sessions
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (
            st.slots.into_iter().flatten().map(|s| s.shard).collect(),
            sessions,
        )
    }
}

/// Marks the pool broken if the worker holding it unwinds, so that the reader and the other
/// workers do not wait for it; the panic itself is raised again when the worker is joined.
struct Unwinding<'a>(&'a Pool);

impl Drop for Unwinding<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.lock().broken = true;
            self.0.work.notify_all();
            self.0.room.notify_all();
        }
    }
}

/// Times a worker that finds no batch waiting gives up its core (`yield_now`) and looks
/// again before it sleeps on [`Pool::work`]. The next batch is often a few microseconds away,
/// and a sleep costs more than that: the reader's wake-up is a system call and, on a virtual
/// machine, an interrupt sent to the other core, then the scheduler's delay. Looking again 64
/// times halved the context switches on the default mix with `-j2` (2,251 → 916) and took
/// 8–15% off its wall time and that of tiny events, keep-alive, long-lived streams and large
/// events, for 1–2% more on 3,000 open sessions, where the workers seldom run dry and a turn
/// spent looking is a turn the stage does not get (and 3% more CPU, the same wall time, on a
/// gzip-compressed capture, whose reader is slower than the workers).
const SPINS: usize = 64;

/// What a worker has to do with the shard it took.
enum Task {
    Batch(Batch),
    /// The input is over: close the shard's connections.
    Finish(Mark),
}

/// A worker: takes a free shard with work, does it, gives the shard back, until the input is
/// over and every shard finished. What a shard ends goes to the session stage through
/// `handed`; its emptied batches back to the reader through `spare`.
fn work(pool: &Pool, spare: &mpsc::Sender<Batch>, handed: &mpsc::SyncSender<Handed>) {
    let _unwinding = Unwinding(pool);
    let mut prefer = None;
    let mut spins = 0;
    let mut st = pool.lock();
    loop {
        if st.broken {
            return;
        }
        let (s, task) = if let Some(s) = st.pick(prefer) {
            spins = 0;
            let Some(batch) = st.queues[s].pop_front() else {
                unreachable!("picked shard {s} has a batch")
            };
            st.queued -= 1;
            (s, Task::Batch(batch))
        } else if let Some(last) = st.closed {
            // Every queue of a free shard is empty, and none fills again.
            let unfinished = (0..st.slots.len()).find(|&s| {
                st.slots[s]
                    .as_ref()
                    .is_some_and(|slot| slot.emptied.is_some())
            });
            match unfinished {
                Some(s) => (s, Task::Finish(last)),
                None => return,
            }
        } else if spins < SPINS {
            spins += 1;
            drop(st);
            std::thread::yield_now();
            st = pool.lock();
            continue;
        } else {
            st.idle += 1;
            st = pool
                .work
                .wait(st)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            st.idle -= 1;
            continue;
        };
        let Some(mut slot) = st.slots[s].take() else {
            unreachable!("shard {s} is free")
        };
        let reader_waits = st.full;
        drop(st);
        if reader_waits {
            pool.room.notify_one();
        }
        match task {
            Task::Batch(mut batch) => {
                let shard = &mut slot.shard;
                let mut msgs = batch.msgs.drain(..);
                while let Some(msg) = msgs.next() {
                    if let Some(ahead) = msgs.as_slice().get(PREFETCH_AHEAD - 1) {
                        shard.prefetch(ahead);
                    }
                    shard.handle(msg, &batch.bytes);
                }
                drop(msgs);
                let done = batch.done;
                batch.msgs.clear();
                batch.bytes.clear();
                // The reader may be done already; then the batch is simply freed.
                let _ = spare.send(batch);
                if shard.events.len() >= HAND_OVER_EVENTS || done.is_multiple_of(HAND_OVER_FRAMES) {
                    let next = (slot.emptied.as_ref())
                        .and_then(|e| e.try_recv().ok())
                        .unwrap_or_default();
                    let events = std::mem::replace(&mut shard.events, next);
                    let _ = handed.send((s, done, events));
                }
                pool.gather(shard, false);
            }
            Task::Finish(last) => {
                let shard = &mut slot.shard;
                shard.finish(last);
                let events = std::mem::take(&mut shard.events);
                // Let go first, so that the stage frees this last buffer.
                slot.emptied = None;
                let _ = handed.send((s, END_OF_INPUT, events));
                pool.gather(shard, true);
            }
        }
        st = pool.lock();
        st.slots[s] = Some(slot);
        prefer = Some(s);
    }
}

/// The reader's side of the worker threads: a batch in the making per shard.
struct Threaded<'p> {
    pool: &'p Pool,
    pending: Vec<Batch>,
    /// Batches the workers are done with, emptied, to be filled again: a fresh batch is large
    /// enough that the allocator maps and unmaps it each time, which costs more than the copy.
    spare: mpsc::Receiver<Batch>,
    /// The last frame whose messages are all given.
    done: u64,
}

impl Threaded<'_> {
    fn shard_of(&self, stream: u64) -> usize {
        shard_of(stream, self.pending.len())
    }

    /// Queues a message without payload for `shard`.
    fn push(&mut self, shard: usize, msg: ShardMsg) {
        let b = &mut self.pending[shard];
        b.msgs.push(msg);
        if b.bytes.len() >= BATCH_BYTES || b.msgs.len() >= BATCH_MSGS {
            self.flush(shard);
        }
    }

    fn flush(&mut self, shard: usize) {
        let fresh = self.spare.try_recv().unwrap_or_else(|_| Batch::new());
        let mut full = std::mem::replace(&mut self.pending[shard], fresh);
        full.done = self.done;
        self.pool.push(shard, full);
    }
}

impl Dispatch for Threaded<'_> {
    fn packet(&mut self, m: FlowPacket, payload: &[u8]) {
        let s = self.shard_of(m.stream);
        let b = &mut self.pending[s];
        let from = b.bytes.len();
        // Half the packets are pure acknowledgments: no call to copy nothing.
        if !payload.is_empty() {
            b.bytes.extend_from_slice(payload);
        }
        b.msgs.push(ShardMsg::Packet(m, from, b.bytes.len()));
        if b.bytes.len() >= BATCH_BYTES || b.msgs.len() >= BATCH_MSGS {
            self.flush(s);
        }
    }
    fn control(&mut self, msg: ShardMsg) {
        let stream = match msg {
            ShardMsg::Packet(m, ..) => m.stream,
            ShardMsg::End(s, ..) | ShardMsg::Open(s, ..) => s,
            ShardMsg::Keys(_) => {
                for s in 0..self.pending.len() {
                    self.push(s, msg.clone());
                }
                return;
            }
        };
        let s = self.shard_of(stream);
        self.push(s, msg);
    }
    fn frame_done(&mut self, frame: u64) {
        self.done = frame;
        if frame.is_multiple_of(HAND_OVER_FRAMES) {
            for s in 0..self.pending.len() {
                self.flush(s);
            }
        }
    }
}

/// The shard of connection `stream` among `shards` (at least one): its number modulo their
/// count, by a mask when the count is a power of two (four shards with `-j2`, eight with
/// `-j4`), which spares the reader a division at every packet.
fn shard_of(stream: u64, shards: usize) -> usize {
    let n = shards as u64;
    if n.is_power_of_two() {
        (stream & (n - 1)) as usize
    } else {
        (stream % n) as usize
    }
}

/// A file of the capture being read: its number in a set (0 when the input is one file), the
/// name its messages give, and its bytes (or why they cannot be had).
struct Member<'a> {
    no: u64,
    name: String,
    src: Result<Source<'a>, String>,
}

/// Where a member's records come from.
enum Source<'a> {
    /// A capture file's bytes (decompressed when it is compressed).
    Bytes(Box<dyn Read + 'a>),
    /// Capture points merged by time, their packets read as they are placed.
    Merged(Box<MergedCapture>),
}

/// What the reading carries from one member of a capture to the next.
struct Reading {
    table: FlowTable,
    last: Mark,
    ends: Vec<FlowEvent>,
    keys: Arc<KeyLog>,
    /// The file read before, and the time of its last packet.
    before: Option<(String, i64)>,
}

/// Reads the capture (the files of a set one after the other, as one), classifies packets and
/// feeds them to `sink`. Returns the last mark.
fn read_packets<'a, D: Dispatch>(
    members: &mut dyn Iterator<Item = Member<'a>>,
    opts: &Options,
    sink: &mut D,
    report: &mut InputReport,
) -> (Mark, FlowTable) {
    let mut reading = Reading {
        table: FlowTable::new(opts.limits.max_connections),
        last: Mark::default(),
        ends: Vec::new(),
        keys: opts.tls.0.clone(),
        before: None,
    };
    for member in members {
        let name = member.name.as_str();
        let base = frame_base(member.no);
        match member.src {
            Err(e) => report.error(e),
            Ok(Source::Merged(mut merged)) => {
                read_member(&mut *merged, name, base, opts, &mut reading, sink, report)
            }
            Ok(Source::Bytes(src)) => match CaptureReader::open(src, opts.limits.max_block_bytes) {
                Ok(mut reader) => {
                    read_member(&mut reader, name, base, opts, &mut reading, sink, report)
                }
                Err(e) => report.error(format!("{name}: {e}")),
            },
        }
    }
    (reading.last, reading.table)
}

/// Reads one member's records: its frames are numbered from `base`.
fn read_member<S: Records, D: Dispatch>(
    reader: &mut S,
    name: &str,
    base: u64,
    opts: &Options,
    reading: &mut Reading,
    sink: &mut D,
    report: &mut InputReport,
) {
    let Reading {
        table,
        last,
        ends,
        keys,
        before,
    } = reading;
    let mut progress_shown = 0;
    let mut packets = 0u64;
    // The first and last packet times of the file (0: none yet); a packet with no time
    // (0) leaves them be.
    let (mut first_ns, mut last_ns) = (0i64, 0i64);
    loop {
        if let Some(bar) = &opts.progress {
            let at = reader.position();
            if at - progress_shown >= PROGRESS_STEP_BYTES {
                bar.advance(at - progress_shown);
                progress_shown = at;
            }
        }
        let packet = match reader.next_record() {
            Ok(Some(Record::Packet(p))) => p,
            Ok(Some(Record::TlsKeyLog(text))) => {
                let mut more = (**keys).clone();
                more.add_nss(text, KeySource::Embedded);
                *keys = Arc::new(more);
                sink.control(ShardMsg::Keys(keys.clone()));
                continue;
            }
            Ok(None) => break,
            Err(e) => {
                report.error(format!(
                    "{name}: {e} (after frame {packets}); analyzed up to there"
                ));
                break;
            }
        };
        packets += 1;
        report.stats.packets += 1;
        let frame = base | packet.frame;
        let mark = Mark::new(frame, packet.time_ns);
        *last = mark;
        if packet.time_ns != 0 {
            if first_ns == 0 {
                first_ns = packet.time_ns;
            }
            last_ns = packet.time_ns;
        }
        if (packet.orig_len as usize) > packet.data.len() {
            report.stats.coverage.count_cut(packet.data.len() as u64);
        }
        // Matched in place: moving the packet out of the result copied its addresses in
        // one wide load just after they were written in narrow stores, and the load
        // waited for them (3-5% of a `-j2` run on the tiny mix).
        match &decode::decode(packet.linktype, packet.data) {
            Ok(tcp) => {
                let msg = table.classify(tcp, mark, frame, |e| {
                    sink.control(ShardMsg::from_flow(e, frame))
                });
                sink.packet(msg, tcp.payload);
            }
            Err(skip) => *report.stats.skipped.entry(skip_name(*skip)).or_insert(0) += 1,
        }
        if packet.frame % SWEEP_EVERY_PACKETS == 0 || table.len() > table.max_connections {
            table.sweep(mark, ends);
            for e in ends.drain(..) {
                sink.control(ShardMsg::from_flow(e, frame));
            }
        }
        sink.frame_done(frame);
    }
    if let Some(bar) = &opts.progress {
        bar.advance(reader.position().saturating_sub(progress_shown));
    }
    let cut_short = reader.files_cut_short();
    if cut_short > 0 {
        *report.stats.skipped.entry("truncated_record").or_insert(0) += cut_short;
    }
    if let Some(at) = reader.truncated_at() {
        // Read in part: counted as a failed input, though every whole packet was analyzed.
        report.error(format!(
            "{name}: offset {at}: last record cut short; analyzed up to the last whole packet"
        ));
    }
    let skipped = reader.skipped_records();
    if skipped > 0 {
        *report.stats.skipped.entry("no_interface").or_insert(0) += skipped;
    }
    let times = (first_ns != 0).then_some((first_ns, last_ns));
    if let (Some((prev, prev_end)), Some((first, _))) = (&before, times)
        && first < *prev_end
    {
        report.messages.push((
            false,
            format!(
                "{name}: its first packet ({}) is older than the last one of {prev} ({}): \
                 the files overlap in time or the clock went back; read one after the other",
                report::rfc3339_micros(first),
                report::rfc3339_micros(*prev_end)
            ),
        ));
    }
    if let Some((_, end)) = times {
        *before = Some((name.to_string(), end));
    }
}

/// Spawns `f` on a scoped thread called `name`. A thread the system cannot make ends the run
/// with that reason, as the standard library's `spawn` does.
pub(crate) fn thread_named<'scope, T: Send + 'scope>(
    name: &str,
    scope: &'scope std::thread::Scope<'scope, '_>,
    f: impl FnOnce() -> T + Send + 'scope,
) -> std::thread::ScopedJoinHandle<'scope, T> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn_scoped(scope, f)
        .unwrap_or_else(|e| panic!("cannot start the {name} thread: {e}"))
}

fn frame_base(member: u64) -> u64 {
    member << crate::record::MEMBER_SHIFT
}

fn analyze_capture<'a>(
    members: &mut dyn Iterator<Item = Member<'a>>,
    opts: &Options,
    report: &mut InputReport,
    sink: &mut dyn FactSink,
) {
    let (shards, sessions, stage) = if opts.threads <= 1 {
        let mut inline = Inline {
            shard: Shard::new(&opts.limits, opts.tls.0.clone(), opts.ignore.clone().into()),
            merger: Merger::new(1, sink),
        };
        let (last, table) = read_packets(members, opts, &mut inline, report);
        report.stats.connections_evicted = table.evicted;
        let Inline {
            mut shard,
            mut merger,
        } = inline;
        shard.finish(last);
        merger.take(0, END_OF_INPUT, &mut shard.events);
        (vec![shard], SessionSet::default(), merger.finish())
    } else {
        // The reader and the session stage are threads of their own besides the workers: the
        // workers do about two thirds of the work, and the reader and the stage fill the
        // gaps the workers leave on the cores.
        let n = opts.threads;
        let k = n * SHARDS_PER_WORKER;
        let (emptied_tx, emptied): (Vec<Emptied>, Vec<_>) =
            (0..k).map(|_| mpsc::channel::<Vec<Keyed>>()).unzip();
        let ignore: Arc<[EndpointFilter]> = opts.ignore.clone().into();
        let slots = emptied
            .into_iter()
            .map(|emptied| Slot {
                shard: Shard::new(&opts.limits, opts.tls.0.clone(), ignore.clone()),
                emptied: Some(emptied),
            })
            .collect();
        let pool = Pool::new(slots, BATCHES_QUEUED * n);
        let stats = std::thread::scope(|scope| {
            let (spare_tx, spare) = mpsc::channel::<Batch>();
            // Bounded, so that a stage slower than the workers (a huge session's audits) holds
            // them back rather than its queue growing.
            let (handed_tx, handed) = mpsc::sync_channel::<Handed>(HANDED_QUEUED);
            // Named threads, so that `top -H`, `perf` and a panic message say which is which.
            let stage = thread_named("sessions", scope, move || {
                let mut merger = Merger::new(k, sink);
                for (s, done, mut events) in handed {
                    merger.take(s, done, &mut events);
                    merger.release();
                    if let Some(back) = emptied_tx.get(s) {
                        // A shard that is finished no longer needs it; it is freed here then.
                        let _ = back.send(events);
                    }
                }
                merger.finish()
            });
            let workers: Vec<_> = (0..n)
                .map(|w| {
                    let (pool, spare_tx, handed_tx) = (&pool, spare_tx.clone(), handed_tx.clone());
                    thread_named(&format!("worker {w}"), scope, move || {
                        work(pool, &spare_tx, &handed_tx)
                    })
                })
                .collect();
            drop((spare_tx, handed_tx));
            let mut threaded = Threaded {
                pool: &pool,
                pending: (0..k).map(|_| Batch::new()).collect(),
                spare,
                done: 0,
            };
            let (last, table) = read_packets(members, opts, &mut threaded, report);
            report.stats.connections_evicted = table.evicted;
            for s in 0..k {
                threaded.flush(s);
            }
            drop(threaded);
            pool.close(last);
            // A worker or stage that panicked takes the run down with its message, as it
            // would with -j1: without its shard, the report would be silently incomplete.
            for w in workers {
                w.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            }
            stage
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        });
        let (shards, sessions) = pool.into_shards();
        (shards, sessions, stats)
    };
    report.sessions.extend(sessions.iter());
    for shard in shards {
        report.sessions.extend(shard.sessions.iter());
        report.stats.absorb(&shard.stats);
    }
    report.stage_stats(stage);
}

/// Reads one HAR document, its entries' records going to `sink`'s session stage as they are
/// analyzed. With `-j2` and more the stage runs on a thread of its own (`sessions`), as it does
/// for a capture: the reading thread then only finds entries and hands them to the entry
/// threads, which it would otherwise keep waiting while it audits (on a HAR of 51,026 entries
/// of 4 KiB the stage took two fifths of the reading thread). The stage is given the same
/// calls in the same order either way.
fn read_har<R: Read>(
    name: &str,
    src: R,
    opts: &Options,
    sink: &mut dyn FactSink,
) -> har::HarExchanges {
    if opts.threads < 2 {
        return har::read_har_into(name, src, &opts.limits, opts.threads, &mut |r, x| {
            sink.har(r, x)
        });
    }
    std::thread::scope(|scope| {
        // Bounded, so that a stage slower than the reading holds the reading back.
        let (to_stage, handed) = mpsc::sync_channel::<(
            Vec<Box<ResumeRecord>>,
            Vec<Box<ExchangeSummary>>,
        )>(HANDED_QUEUED);
        let stage_sink = &mut *sink;
        let stage = thread_named("sessions", scope, move || {
            for (r, x) in handed {
                stage_sink.har(r, x);
            }
        });
        let exchanges = har::read_har_into(name, src, &opts.limits, opts.threads, &mut |r, x| {
            // A stage that is gone panicked: its join below says so.
            let _ = to_stage.send((r, x));
        });
        drop(to_stage);
        stage
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        exchanges
    })
}

/// A HAR document is over (its exchanges went to `sink` as they were read, and any left in
/// `har` go now): the session stage audits what it holds, and says what it could not take
/// in order.
fn har_session_stage(report: &mut InputReport, har: har::HarExchanges, sink: &mut dyn FactSink) {
    report.stats.http_exchanges += har.http_exchanges;
    report.sessions.extend(har.sessions.iter());
    if !(har.resumes.is_empty() && har.summaries.is_empty()) {
        sink.har(har.resumes, har.summaries);
    }
    report.messages.extend(har.messages);
    let stats = sink.finish();
    report.stage_stats(stats);
}

/// The inputs of a run as the paths make them (sets ordered by time, `--fleet` points), with
/// the warnings each gave, and the messages of the paths themselves.
type Planned = (Vec<(bool, String)>, Vec<(Input, Vec<(bool, String)>)>);

fn plan_inputs(inputs: &[PathBuf], opts: &Options) -> Planned {
    let mut plan = set::plan(inputs, opts.merge);
    let planned = if opts.fleet {
        let (inputs, warnings) = set::points(std::mem::take(&mut plan.inputs), max_block(opts));
        plan.messages.extend(warnings);
        inputs
    } else {
        std::mem::take(&mut plan.inputs)
    };
    let inputs: Vec<(Input, Vec<(bool, String)>)> = planned
        .into_iter()
        .map(|i| match i {
            Input::Set(mut s) if !opts.fleet => {
                let warnings = s.order_by_time(opts.limits.max_block_bytes);
                (Input::Set(s), warnings)
            }
            one => (one, Vec::new()),
        })
        .collect();
    (plan.messages, inputs)
}

/// A planned input made ready to be read: a merged run's stream is opened here, because the
/// names of its frames must be known before the first record is written.
enum Ready<'a> {
    One(&'a Path),
    Set(&'a CaptureSet),
    Merged(String, Box<MergedCapture>, crate::input::merge::Messages),
}

/// Makes a planned input ready, with how its frames are named when it is made of several
/// files.
fn ready<'a>(
    input: &'a Input,
    o: &Options,
) -> (Ready<'a>, Option<Arc<dyn report::files::FrameNames>>) {
    match input {
        Input::One(p) => (Ready::One(p), None),
        Input::Set(s) => {
            let files: Arc<dyn report::files::FrameNames> = Arc::new(report::files::SetFiles(
                s.members.iter().map(|p| p.display().to_string()).collect(),
            ));
            (Ready::Set(s), Some(files))
        }
        Input::Points(points) => {
            let files: Vec<Vec<PathBuf>> = points.iter().map(|p| p.members.clone()).collect();
            let (merged, map, messages) = MergedCapture::new(&files, max_block(o));
            let names: Arc<dyn report::files::FrameNames> = Arc::new(MergedNames(map));
            (
                Ready::Merged(input.name(), Box::new(merged), messages),
                Some(names),
            )
        }
    }
}

/// The map step of one input: its session events go to `facts`; gives its report.
fn map_input(input: Ready<'_>, o: &Options, facts: &mut dyn FactSink) -> InputReport {
    match input {
        Ready::One(p) => map_path(p, o, facts),
        Ready::Set(s) => map_set(s, o, facts),
        Ready::Merged(name, merged, messages) => {
            let mut report = map_merged(&name, merged, o, facts);
            if let Ok(mut m) = messages.lock() {
                report.messages.append(&mut m);
            }
            report
        }
    }
}

/// The map step alone: writes every input's facts (docs/facts.md) to `out` instead of a
/// report, one input after the other; messages go to `err`. `--fleet` is refused: its
/// citations name files through a map of the merged frames that the facts do not carry.
pub fn map_run<W: Write + Send, E: Write>(
    inputs: &[PathBuf],
    opts: &Options,
    out: W,
    err: &mut E,
) -> std::io::Result<RunOutcome> {
    let mut outcome = RunOutcome {
        findings: false,
        input_errors: false,
        unread: false,
    };
    if opts.fleet {
        writeln!(
            err,
            "error: --fleet cannot be mapped to facts (its citations need the merged frame map); \
             map each capture point and reduce them, or run --fleet on one machine"
        )?;
        outcome.input_errors = true;
        return Ok(outcome);
    }
    let (plan_messages, inputs) = plan_inputs(inputs, opts);
    let mut writer = FactsWriter::new(out);
    for (is_error, text) in &plan_messages {
        writeln!(
            err,
            "{}: {text}",
            if *is_error { "error" } else { "warning" }
        )?;
        outcome.input_errors |= *is_error;
    }
    for (input, warnings) in &inputs {
        let files = match input {
            Input::Set(s) => Some(s.members.iter().map(|p| p.display().to_string()).collect()),
            _ => None,
        };
        writer.begin(&input.name(), files);
        let (input, _) = ready(input, opts);
        let mut report = map_input(input, opts, &mut writer);
        report.messages.splice(0..0, warnings.iter().cloned());
        writer.end(&report.stats, &report.sessions, &report.messages);
        let mut written = Ok(());
        let mut write = || {
            for (is_error, text) in &report.messages {
                let kind = if *is_error { "error" } else { "warning" };
                if written.is_ok() {
                    written = writeln!(err, "{kind}: {text}");
                }
            }
        };
        match &opts.progress {
            Some(bar) if !report.messages.is_empty() => bar.aside(&mut write),
            _ => write(),
        }
        written?;
        outcome.input_errors |= report.failed();
        if let Some(e) = writer.error.take() {
            return Err(e);
        }
    }
    if let Some(bar) = &opts.progress {
        bar.finish();
    }
    writer.into_inner()?;
    Ok(outcome)
}

/// The options a run works with: the page draws every session's timeline, so it needs the
/// session views even when the JSON Lines do not print them (the report's tee keeps them out
/// of the JSON Lines then).
fn with_views_for_html(opts: &Options) -> std::borrow::Cow<'_, Options> {
    if opts.html.is_some() && !opts.forensic.views {
        std::borrow::Cow::Owned(Options {
            forensic: audit::Options {
                views: true,
                ..opts.forensic.clone()
            },
            ..opts.clone()
        })
    } else {
        std::borrow::Cow::Borrowed(opts)
    }
}

/// The spool of one input's report: it collects the account for a person when one is
/// written, and makes no JSON lines when that account is the whole report.
fn spool_for(input: &str, opts: &Options) -> Spool {
    let mut spool = Spool::new(input, opts.human != HumanReport::Off);
    if opts.human == HumanReport::Instead && opts.html.is_none() {
        spool.account_only();
    }
    spool
}

/// The HTML page of `--html`, begun with the inputs' names, when one is asked for.
fn html_page(opts: &Options, names: &[String]) -> std::io::Result<Option<HtmlReport>> {
    opts.html
        .as_ref()
        .map(|path| HtmlReport::create(path, names))
        .transpose()
}

/// The reduce step alone: reads facts files (docs/facts.md; `-` is standard input), in any
/// grouping or order of their records, and writes the report the single run on the same
/// inputs writes. A damaged line is an error naming its file and line; the rest is read.
pub fn reduce_run<W: Write, E: Write>(
    facts: &[PathBuf],
    opts: &Options,
    out: &mut W,
    err: &mut E,
) -> std::io::Result<RunOutcome> {
    let sessions_to_json = opts.forensic.views;
    let opts = &*with_views_for_html(opts);
    let mut set = FactsSet::default();
    for path in facts {
        let name = path.display().to_string();
        // Facts files may be compressed as captures may (gzip, zstd, lz4, xz), told by their
        // first bytes.
        let opened = if name == "-" {
            crate::input::compressed::sniffed(std::io::stdin().lock())
                .map(|(codec, src)| decompressed(codec, src))
        } else {
            crate::input::compressed::open_sniffed(path)
                .map(|(codec, src)| decompressed(codec, src))
        };
        match opened {
            Ok(src) => set.read(&name, std::io::BufReader::new(src)),
            Err(e) => set.file_error(&name, format!("{name}: {e}")),
        }
    }
    let replayed = set.replay(opts.threads, |inp| {
        let mut spool = spool_for(&inp.input, opts);
        spool.files = inp
            .files
            .take()
            .map(|f| Arc::new(report::files::SetFiles(f)) as Arc<dyn report::files::FrameNames>);
        reducer(opts, spool)
    })?;
    let names: Vec<String> = replayed.iter().map(|(i, ..)| i.input.clone()).collect();
    let html = html_page(opts, &names)?;
    let reports = replayed
        .into_iter()
        .map(|(mut inp, reduced, stage)| {
            let mut report = InputReport::new(&inp.input);
            if let Some((stats, sessions, messages, _)) = inp.end.take() {
                report.stats = stats;
                report.sessions = sessions;
                report.messages = messages;
            }
            report.stage_stats(stage);
            report
                .messages
                .extend(inp.problems.drain(..).map(|p| (true, p)));
            (report, reduced.into_sink())
        })
        .collect();
    write_report(
        &set.messages(),
        reports,
        html,
        sessions_to_json,
        opts,
        out,
        err,
    )
}

/// The outcome of a whole run, for the exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunOutcome {
    /// Some resume was not `correct`, or an error finding was made.
    pub findings: bool,
    /// Some input could not be read, wholly or in part.
    pub input_errors: bool,
    /// Traffic that may carry MCP was not read (TLS, HTTP/2, packets cut by the snap length).
    pub unread: bool,
}

impl RunOutcome {
    /// 1: a verdict other than `correct`, or an error finding; else 2: an input could not be
    /// read, wholly or in part; else 3: every input was read but traffic that may carry MCP
    /// was not; else 0. An accusation comes first: it holds whatever else went unread, and
    /// the summary and standard error still name every problem.
    pub fn exit_code(self) -> i32 {
        if self.findings {
            1
        } else if self.input_errors {
            2
        } else if self.unread {
            3
        } else {
            0
        }
    }
}

/// Analyzes every input (in parallel when there are several) and writes the report: resumes
/// in input order, then the summary. Messages go to `err`.
pub fn run<W: Write, E: Write>(
    inputs: &[PathBuf],
    opts: &Options,
    out: &mut W,
    err: &mut E,
) -> std::io::Result<RunOutcome> {
    let sessions_to_json = opts.forensic.views;
    let opts = &*with_views_for_html(opts);
    let (plan_messages, inputs) = plan_inputs(inputs, opts);
    let names: Vec<String> = inputs.iter().map(|(i, _)| i.name()).collect();
    let html = html_page(opts, &names)?;
    // The map step and the reduce step of each input, in one process: the session events go
    // straight from the one to the other.
    let one = |(input, warnings): &(Input, Vec<(bool, String)>), o: &Options| {
        let mut spool = spool_for(&input.name(), opts);
        let (input, files) = ready(input, o);
        spool.files = files;
        // With more than one thread for this input, its report's lines are made on a thread
        // of their own beside the session stage ([`report::relay`]).
        let mut report = if o.threads > 1 {
            report::relay::on_report_thread(&mut spool, |sink| {
                map_input(input, o, &mut reducer(o, sink))
            })
        } else {
            map_input(input, o, &mut reducer(o, &mut spool))
        };
        report.messages.splice(0..0, warnings.iter().cloned());
        (report, spool)
    };
    let reports: Vec<(InputReport, Spool)> = if inputs.len() > 1 && opts.threads > 1 {
        let per_input = Options {
            threads: 1,
            ..opts.clone()
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(opts.threads)
            .thread_name(|i| format!("input {i}"))
            .build()
            .map_err(std::io::Error::other)?;
        pool.install(|| inputs.par_iter().map(|p| one(p, &per_input)).collect())
    } else {
        inputs.iter().map(|p| one(p, opts)).collect()
    };
    if let Some(bar) = &opts.progress {
        bar.finish();
    }
    write_report(
        &plan_messages,
        reports,
        html,
        sessions_to_json,
        opts,
        out,
        err,
    )
}

/// Writes the whole report from every input's records: what the paths gave (`plan_messages`),
/// then each input's lines, the summary, the HTML page and the account for a person.
fn write_report<W: Write, E: Write>(
    plan_messages: &[(bool, String)],
    mut reports: Vec<(InputReport, Spool)>,
    mut html: Option<HtmlReport>,
    sessions_to_json: bool,
    opts: &Options,
    out: &mut W,
    err: &mut E,
) -> std::io::Result<RunOutcome> {
    let mut summary = Summary::new();
    let mut stats = InputStats::default();
    let mut outcome = RunOutcome {
        findings: false,
        input_errors: false,
        unread: false,
    };
    // What the paths themselves gave: a directory that holds nothing to read is an input that
    // failed.
    for (is_error, text) in plan_messages {
        writeln!(
            err,
            "{}: {text}",
            if *is_error { "error" } else { "warning" }
        )?;
        if *is_error {
            outcome.input_errors = true;
            summary.problems.push(InputProblem {
                input: text.split(": ").next().unwrap_or_default().to_string(),
                error: text.clone(),
            });
            summary.inputs += 1;
            summary.inputs_failed += 1;
        }
    }
    let mut no_json = std::io::sink();
    let json: &mut dyn Write = if opts.human == HumanReport::Instead {
        &mut no_json
    } else {
        out
    };
    let mut tee;
    let json: &mut dyn Write = match html.as_mut() {
        Some(h) => {
            tee = h.tee(json, sessions_to_json);
            &mut tee
        }
        None => json,
    };
    for (r, spool) in &mut reports {
        if let Some(e) = spool.spill_error() {
            r.messages.push((false, format!("{}: {e}", r.input)));
        }
        for (is_error, text) in &r.messages {
            writeln!(
                err,
                "{}: {text}",
                if *is_error { "error" } else { "warning" }
            )?;
            if *is_error {
                summary.problems.push(InputProblem {
                    input: r.input.clone(),
                    error: text.clone(),
                });
            }
        }
        let mut coverage = r.stats.coverage.clone();
        coverage.name_servers();
        if let Some(w) = coverage.warning() {
            writeln!(err, "warning: {}: {w}", r.input)?;
            outcome.unread = true;
        }
        summary.inputs += 1;
        if r.failed() {
            summary.inputs_failed += 1;
            outcome.input_errors = true;
        }
        spool.write_to(json)?;
        summary.per_input.push(report::InputSummary {
            input: r.input.clone(),
            failed: r.failed(),
            packets: r.stats.packets,
            tcp_connections: r.stats.tcp_connections,
            http_exchanges: r.stats.http_exchanges,
            resumes: spool.summary.resumes,
            coverage,
            files: spool.files.as_ref().map(|f| f.files()).unwrap_or_default(),
        });
        summary.absorb_counts(&spool.summary);
        outcome.findings |= spool.findings;
        // Sessions are named per input: the same id in two captures is counted once per input.
        summary.sessions += r.sessions.len() as u64;
        stats.absorb(&r.stats);
    }
    summary.packets = stats.packets;
    summary.tcp_connections = stats.tcp_connections;
    summary.http_exchanges = stats.http_exchanges;
    summary.tcp_gaps = stats.tcp_gaps;
    summary.tcp_gap_bytes = stats.tcp_gap_bytes;
    summary.packets_skipped = stats.skipped;
    summary.anomalies = stats.anomalies;
    summary.connections_evicted = stats.connections_evicted;
    summary.out_of_order_overflows = stats.out_of_order_overflows;
    summary.facts_dropped = stats.facts_dropped;
    summary.exchanges_not_audited = stats.exchanges_not_audited;
    summary.sessions_retired_early = stats.sessions_retired_early;
    stats.coverage.name_servers();
    summary.coverage = stats.coverage;
    summary.write(json)?;
    json.flush()?;
    if let Some(h) = html {
        h.finish()?;
    }
    let human: Option<&mut dyn Write> = match opts.human {
        HumanReport::Off => None,
        HumanReport::Messages => Some(err),
        HumanReport::Instead => Some(out),
    };
    if let Some(h) = human {
        for (r, spool) in &mut reports {
            if let Some(notes) = spool.human.as_mut() {
                report::files::with_files(spool.files.as_ref(), || {
                    report::write_human_input(h, &r.input, notes, !r.failed())
                })?;
            }
        }
        report::write_human_summary(h, &summary)?;
        h.flush()?;
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection's state is boxed and allocated once per connection; thousands are live
    /// at once in a session-heavy capture. At most 1,024 bytes it takes the allocator's
    /// 1,024-byte size class, where 1,025 would take the 1,280-byte one.
    #[test]
    fn a_connections_state_fits_its_size_class() {
        let size = std::mem::size_of::<Conn>();
        assert!(size <= 1024, "{size} bytes");
    }

    /// Connections with the same TLS facts share one description, and any fact that differs
    /// makes a description of its own; either way it says what the facts say.
    #[test]
    fn alike_tls_connections_share_one_description() {
        let base = crate::app::tls::TlsFacts {
            version: Some(0x0304),
            cipher_suite: Some(0x1301),
            sni: Some("mcp.example".to_string()),
            alpn: Some("http/1.1".to_string()),
            key_source: Some(KeySource::File(Arc::from("a.keys"))),
            records_decrypted: 3,
            ..Default::default()
        };
        let mut infos = TlsInfos::default();
        let first = infos.of(&base);
        assert_eq!(*first, tls_info(&base));
        assert_eq!(first.cipher.as_deref(), Some("TLS_AES_128_GCM_SHA256"));
        // Facts the description does not hold do not matter.
        let busier = crate::app::tls::TlsFacts {
            records_decrypted: 90,
            ..base.clone()
        };
        assert!(Arc::ptr_eq(&first, &infos.of(&busier)));
        let variants: [fn(&mut crate::app::tls::TlsFacts); 6] = [
            |f| f.version = Some(0x0303),
            |f| f.cipher_suite = Some(0x1302),
            |f| f.sni = None,
            |f| f.alpn = Some("h2".to_string()),
            |f| f.key_source = Some(KeySource::File(Arc::from("b.keys"))),
            |f| f.key_source = Some(KeySource::Embedded),
        ];
        for change in variants {
            let mut other = base.clone();
            change(&mut other);
            let info = infos.of(&other);
            assert!(!Arc::ptr_eq(&first, &info), "{other:?}");
            assert_eq!(*info, tls_info(&other));
            assert_ne!(*info, *first);
            // The same facts again share the description just made, and the first facts
            // are described anew, alike.
            assert!(Arc::ptr_eq(&info, &infos.of(&other)));
            let again = infos.of(&base);
            assert_eq!(*again, *first);
        }
    }

    /// Records the order the session stage is given events in.
    #[derive(Default)]
    struct Order(Vec<(u64, u32, bool)>);

    impl FactSink for Order {
        fn opened(&mut self, _sid: &str, key: (u64, u32)) {
            self.0.push((key.0, key.1, false));
        }
        fn unread(&mut self) {}
        fn ended(
            &mut self,
            key: (u64, u32),
            _x: Option<Box<ExchangeSummary>>,
            _r: Option<Box<ResumeRecord>>,
        ) {
            self.0.push((key.0, key.1, true));
        }
        fn har(&mut self, _resumes: Vec<Box<ResumeRecord>>, _xs: Vec<Box<ExchangeSummary>>) {}
        fn finish(&mut self) -> audit::StageStats {
            audit::StageStats::default()
        }
    }

    fn opened(frame: u64, stream: u64) -> Keyed {
        Keyed {
            frame,
            stream,
            exchange: 0,
            event: StageEvent::Opened(SessionName::new("")),
        }
    }

    fn ended(frame: u64, stream: u64) -> Keyed {
        Keyed {
            frame,
            stream,
            exchange: 0,
            event: StageEvent::Ended(None, None),
        }
    }

    /// The stage's order is the key order, whatever the shards and the order their
    /// hand-overs arrive in; nothing is let through before every shard is past its frame.
    #[test]
    fn the_merger_lets_events_through_in_key_order_once_every_shard_is_past_them() {
        let mut order = Order::default();
        let mut m = Merger::new(3, &mut order);
        // Shard 1 hands over an event of frame 7, which it is not past yet (the frame being
        // read when its batch was sent), and one of frame 5.
        m.take(1, 6, &mut vec![ended(5, 1), opened(7, 4)]);
        m.release();
        m.take(0, 9, &mut vec![opened(2, 0), ended(8, 3), opened(8, 3)]);
        m.release();
        // Shard 2 has said nothing: nothing may go.
        assert_eq!(order_len(&m), 5);
        m.take(2, 5, &mut vec![ended(3, 2)]);
        m.release();
        // Everything up to frame 5 goes; frame 7 and 8 wait for shards 1 and 2.
        m.take(1, 12, &mut vec![ended(7, 4)]);
        m.take(2, 20, &mut Vec::new());
        m.release();
        m.finish();
        assert_eq!(
            order.0,
            [
                (0, 0, false),
                (2, 0, true),
                (1, 0, true),
                (4, 0, false),
                (4, 0, true),
                (3, 0, false),
                (3, 0, true),
            ]
        );
    }

    fn order_len(m: &Merger<'_>) -> usize {
        m.held.iter().map(|h| h.len()).sum()
    }

    /// A hand-over out of frame order is put in order before it is taken from.
    #[test]
    fn the_merger_orders_a_hand_over_that_comes_out_of_order() {
        let mut order = Order::default();
        let mut m = Merger::new(2, &mut order);
        m.take(0, 10, &mut vec![ended(9, 0), opened(4, 2)]);
        // Frame 4 must go before frame 6 of the other shard, though frame 9 may not go yet.
        m.take(1, 8, &mut vec![ended(6, 1)]);
        m.release();
        assert_eq!(order_len(&m), 1);
        m.finish();
        assert_eq!(order.0, [(2, 0, false), (1, 0, true), (0, 0, true)]);
    }

    #[test]
    fn a_connections_shard_is_its_number_modulo_the_shards() {
        for shards in 1..=6 {
            for stream in (0..100u64).chain([u64::MAX - 1, u64::MAX]) {
                assert_eq!(
                    shard_of(stream, shards),
                    (stream % shards as u64) as usize,
                    "{stream} among {shards}"
                );
            }
        }
    }

    #[test]
    fn endpoint_filters_parse_and_match() {
        let ep = |s: &str| {
            let a: std::net::SocketAddr = s.parse().unwrap();
            Endpoint {
                ip: a.ip(),
                port: a.port(),
            }
        };
        let f: EndpointFilter = "10.0.0.5:443".parse().unwrap();
        assert!(f.matches(&ep("10.0.0.5:443")));
        assert!(!f.matches(&ep("10.0.0.5:8443")));
        let f: EndpointFilter = ":443".parse().unwrap();
        assert!(f.matches(&ep("192.0.2.1:443")) && !f.matches(&ep("192.0.2.1:80")));
        let f: EndpointFilter = "[::1]:8443".parse().unwrap();
        assert!(f.matches(&ep("[::1]:8443")));
        let f: EndpointFilter = "::1".parse().unwrap();
        assert!(f.matches(&ep("[::1]:1")));
        let f: EndpointFilter = "127.0.0.1".parse().unwrap();
        assert!(f.matches(&ep("127.0.0.1:9")));
        for bad in ["", "host:443", ":x", "1.2.3.4:70000", "[::1"] {
            assert!(bad.parse::<EndpointFilter>().is_err(), "{bad}");
        }
    }

    /// Counts what it is told.
    #[derive(Default)]
    struct Counter {
        bytes: std::sync::atomic::AtomicU64,
        finished: std::sync::atomic::AtomicBool,
    }

    impl Progress for Counter {
        fn advance(&self, bytes: u64) {
            self.bytes
                .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
        }
        fn finish(&self) {
            self.finished
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[test]
    fn progress_counts_every_byte_of_every_input() {
        use std::sync::atomic::Ordering::Relaxed;
        let inputs = [fixture("mixed.pcap"), fixture("pcapng-two-sections.pcapng")];
        let total: u64 = inputs
            .iter()
            .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
            .sum();
        assert!(total > 0);
        for threads in [1, 2, 3] {
            let bar = Arc::new(Counter::default());
            let opts = Options {
                threads,
                progress: Some(bar.clone()),
                ..Options::default()
            };
            let mut out = Vec::new();
            let mut err = Vec::new();
            let outcome = run(&inputs, &opts, &mut out, &mut err);
            assert!(outcome.is_ok_and(|o| !o.input_errors), "threads {threads}");
            assert_eq!(bar.bytes.load(Relaxed), total, "threads {threads}");
            assert!(bar.finished.load(Relaxed));
            // One input at a time through the reader and its workers counts the same.
            let bar = Arc::new(Counter::default());
            let opts = Options {
                threads,
                progress: Some(bar.clone()),
                ..Options::default()
            };
            let _ = analyze_path(&inputs[0], &opts);
            assert_eq!(
                bar.bytes.load(Relaxed),
                std::fs::metadata(&inputs[0]).map(|m| m.len()).unwrap_or(1)
            );
        }
    }

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/gen")
            .join(name)
    }
}
