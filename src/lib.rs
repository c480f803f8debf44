#![warn(missing_docs)]
//! mcp-resume-audit: finds, in packet captures, every reconnect of an MCP Streamable HTTP
//! session and tells whether the server resumed correctly, silently skipped events, or
//! silently replayed them.

//!
//! The pipeline, one module per stage (each module's header says its input, output and
//! invariants):
//!
//! ```text
//! input    pcap / pcapng records, HAR entries
//!   → net       link and IP decode, flow table, TCP reassembly (data / gap / end per direction)
//!   → app       protocol detection; TLS (decrypts into a child); HTTP/1.1; HTTP/2; content coding; SSE
//!   → exchange  per-connection exchanges (request, response, SSE facts), keyed by exchange id
//!   → facts     the map/reduce boundary: session events, in process or as JSON Lines
//!   → audit     sessions, resume verdicts, id shapes, findings
//!   → report    JSON Lines, the text account, the HTML page
//! driver   runs the stages, on one thread or sharded by connection
//! ```
//!
//! The public API is what this page lists: [`run`] for a whole report, [`map_run`] and
//! [`reduce_run`] for its two halves apart (docs/facts.md), [`analyze_path`] and
//! [`analyze_reader`] for the records of one input, the [`Options`] they take and the record
//! types they give. The stages themselves are private; benches, property tests and fuzz
//! targets reach them through the hidden `stages` and `fuzzing` modules, which promise
//! nothing.

mod app;
mod audit;
mod cache;
mod driver;
mod exchange;
mod facts;
mod input;
mod json_stops;
mod net;
mod record;
mod report;
#[cfg(test)]
mod testing;

pub use audit::idshape::IdPattern;
pub use audit::verdict::Verdict;
pub use audit::{
    Cite, CursorStatus, DEFAULT_SESSION_MEMORY, Finding, FindingKind, Options as AuditOptions,
    Retention, SessionView, Severity, Sink,
};
pub use driver::{
    EndpointFilter, HumanReport, InputReport, InputStats, Options, Progress, RunOutcome, TlsKeys,
    analyze_path, analyze_path_into, analyze_reader, analyze_reader_into, map_run, reduce_run, run,
};
pub use exchange::ResumeRecord;
pub use input::set::files_under;
pub use record::Limits;
pub use report::dest::ReportFile;
pub use report::{write_finding, write_resume, write_session};

/// The stages one at a time, for benches, property tests and the fuzz crate. Not an API: no
/// stability, no documentation promises.
#[doc(hidden)]
pub mod stages {
    pub use crate::app::http1::HttpConnection;
    pub use crate::app::jsonrpc::{RpcFact, classify};
    pub use crate::app::sse::{OwnedSseEvent, SseEvent, SseParser};
    pub use crate::audit::verdict::{self, IdOrder, ResponseFacts, StreamOutcome};
    pub use crate::exchange::ExchangeTracker;
    pub use crate::input::capture::CaptureReader;
    pub use crate::net::decode::{self, Endpoint};
    pub use crate::net::tcp::{TcpConnection, TcpFlags, TcpSegment};
    pub use crate::record::{
        Anomaly, BodyEnd, Direction, HttpSink, Mark, RequestHead, ResponseHead, StreamEnd,
        StreamSink,
    };
    pub use crate::report::html::{HtmlReport, PAGE_SESSIONS, PAGINATE_ABOVE, page_plan};
    pub use crate::report::spool::Spool;
    pub use crate::report::write_human_input;
}
/// Entry points for the fuzz crate (`fuzz/`), which reaches the library only through what it
/// exports. Not an API: no stability, no documentation promises.
#[doc(hidden)]
pub mod fuzzing {
    use crate::app::h2::Http2Connection;
    use crate::app::tls::{KeyLog, KeySource, TlsConnection, TlsStatus};
    use crate::record::{Direction, HttpSink, Limits, Mark, StreamEnd, StreamSink};

    /// `app::h2::Http2Connection` (crate-private) behind a public face.
    pub struct Http2Fuzz(Http2Connection);

    impl Http2Fuzz {
        /// `upgraded`: `Some((client, stream1_exchange))` as after `Upgrade: h2c`.
        pub fn new(limits: &Limits, upgraded: Option<(Direction, u32)>) -> Self {
            Http2Fuzz(match upgraded {
                Some((client, exchange)) => Http2Connection::upgraded(limits, client, exchange),
                None => Http2Connection::new(limits),
            })
        }
        pub fn data<S: HttpSink>(
            &mut self,
            dir: Direction,
            bytes: &[u8],
            mark: Mark,
            sink: &mut S,
        ) {
            self.0.data(dir, bytes, mark, sink);
        }
        pub fn gap<S: HttpSink>(&mut self, dir: Direction, len: u64, mark: Mark, sink: &mut S) {
            self.0.gap(dir, len, mark, sink);
        }
        pub fn end<S: HttpSink>(
            &mut self,
            dir: Direction,
            how: StreamEnd,
            mark: Mark,
            sink: &mut S,
        ) {
            self.0.end(dir, how, mark, sink);
        }
        pub fn client_direction(&self) -> Option<Direction> {
            self.0.client_direction()
        }
        pub fn is_abandoned(&self) -> bool {
            self.0.is_abandoned()
        }
    }

    /// A HAR entry read both ways (body text decoded on its own, and by serde_json with the
    /// entry): the records and messages of each, as debug text.
    pub fn har_entry_readings(raw: &[u8]) -> (String, String) {
        crate::input::har::entry_readings(raw)
    }

    /// A HAR entry read by the analyzer's own reader and by serde_json: `Ok(true)` when the
    /// former took it and both made the same of it, `Ok(false)` when it left the entry to
    /// serde_json, `Err` saying how they differ.
    pub fn har_entry_direct(raw: &[u8]) -> Result<bool, String> {
        crate::input::har::direct_reading_agrees(raw)
    }

    /// Where the JSON container opening at `doc[0]` ends (or breaks), read a block at a time
    /// in pieces of the given sizes (with the CPU's widest compares, then with SSE2's), and
    /// byte by byte whole: debug text of each answer.
    pub fn nesting_readings(doc: &[u8], pieces: &[usize]) -> [String; 3] {
        use crate::input::nesting::{Reading, read_in_pieces};
        [
            format!("{:?}", read_in_pieces(doc, pieces, Reading::Blocks)),
            format!("{:?}", read_in_pieces(doc, pieces, Reading::NarrowBlocks)),
            format!("{:?}", read_in_pieces(doc, &[usize::MAX], Reading::Bytes)),
        ]
    }

    /// What the reduce makes of facts files (name, bytes) read with runs of `memory` bytes and
    /// `threads` threads: lines of text (each input's events as its sink took them, its
    /// problems, then the messages).
    pub fn facts_replayed(
        files: &[(String, Vec<u8>)],
        memory: usize,
        threads: usize,
    ) -> Vec<String> {
        crate::facts::replay_text(files, memory, threads)
    }

    /// Whether a facts line's tag, input and `seq`, read from its first bytes, are what serde
    /// reads: `Err` says how they differ.
    pub fn facts_probes_agree(line: &[u8]) -> Result<(), String> {
        crate::facts::probes_agree(line)
    }

    /// Capture files (each given with the capture point it belongs to, in order) merged as
    /// `--fleet` merges them, against each file read alone: `Err` says where they differ (see
    /// `input::merge::merged_as_alone`). The files are written to a temporary directory.
    pub fn merge_agrees(files: &[(usize, &[u8])], max_block: usize) -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut points: Vec<Vec<std::path::PathBuf>> = Vec::new();
        for (i, (point, bytes)) in files.iter().enumerate() {
            let path = dir.path().join(format!("f{i}"));
            std::fs::write(&path, bytes).map_err(|e| e.to_string())?;
            while points.len() <= *point {
                points.push(Vec::new());
            }
            points[*point].push(path);
        }
        crate::input::merge::merged_as_alone(&points, max_block)
    }

    /// The raw JSON of each whole entry of a HAR document.
    pub fn har_entries(doc: &[u8]) -> Vec<Vec<u8>> {
        crate::input::har::entries_of(doc)
    }

    /// One TLS connection and the key log it decrypts with.
    pub struct TlsHarness {
        keys: KeyLog,
        conn: TlsConnection,
    }

    impl TlsHarness {
        pub fn new(keylog: &[u8]) -> Self {
            let mut keys = KeyLog::new();
            keys.add_nss(keylog, KeySource::Embedded);
            TlsHarness {
                keys,
                conn: TlsConnection::new(&Limits::default()),
            }
        }
        /// More key log lines, as a Decryption Secrets Block would bring.
        pub fn add_keys(&mut self, text: &[u8]) {
            self.keys.add_nss(text, KeySource::Embedded);
        }
        pub fn data<C: StreamSink>(
            &mut self,
            dir: Direction,
            bytes: &[u8],
            mark: Mark,
            child: &mut C,
        ) {
            self.conn.data(&self.keys, dir, bytes, mark, child);
        }
        pub fn gap<C: StreamSink>(&mut self, dir: Direction, len: u64, mark: Mark, child: &mut C) {
            self.conn.gap(&self.keys, dir, len, mark, child);
        }
        pub fn end<C: StreamSink>(
            &mut self,
            dir: Direction,
            how: StreamEnd,
            mark: Mark,
            child: &mut C,
        ) {
            self.conn.end(dir, how, mark, child);
        }
        /// The status, as text, and the records decrypted.
        pub fn summary(&self) -> (String, u64) {
            let f = self.conn.facts();
            (format!("{:?}", f.status), f.records_decrypted)
        }
        /// True when authentication failed and no record was decrypted, the case in which
        /// nothing may have reached the child.
        pub fn keys_wrong_only(&self) -> bool {
            let f = self.conn.facts();
            f.status == TlsStatus::KeysWrong && f.records_decrypted == 0
        }
    }

    /// Reads an NSS key log: (lines, secrets, malformed, errors named, client randoms held).
    /// Read again as a file is, a few bytes at a time, it must give the same; read from a
    /// file, its secrets read back from there (spans of 1 to 2,000 bytes), the same secrets.
    pub fn keylog_counts(text: &[u8]) -> (u64, u64, u64, usize, usize) {
        let source = || KeySource::File("fuzz".into());
        let mut keys = KeyLog::new();
        let s = keys.add_nss(text, source());
        let mut again = KeyLog::new();
        let pieces = Pieces::new(text, text.len() % 13 + 1);
        let read = again.add_nss_reader(pieces, source());
        assert_eq!(read.ok().as_ref(), Some(&s), "the key log read in pieces");
        assert_eq!(again.len(), keys.len());
        let mut file = tempfile::tempfile().expect("a temporary file");
        std::io::Write::write_all(&mut file, text).expect("written");
        std::io::Seek::rewind(&mut file).expect("rewound");
        let mut spans = KeyLog::with_max_span(text.len() as u32 % 2000 + 1);
        let read = spans.add_nss_file(file, source());
        assert_eq!(read.ok().as_ref(), Some(&s), "the key log read from a file");
        assert!(spans.randoms().eq(keys.randoms()));
        for random in keys.randoms() {
            assert_eq!(
                spans.get(random),
                keys.get(random),
                "read back from the file"
            );
        }
        assert_eq!(spans.stale(), 0);
        (s.lines, s.secrets, s.malformed, s.errors.len(), keys.len())
    }

    /// `bytes` decoded as the compressed stream its first bytes name (`None` when they name
    /// none of gzip, zstd, lz4 and xz), the input given `size` bytes a read: at most `cap`
    /// bytes of output (more may be asked of a small input), and whether an error ended it.
    pub fn decompressed(bytes: &[u8], size: usize, cap: usize) -> Option<(Vec<u8>, bool)> {
        use std::io::Read;
        let codec = crate::input::compressed::Codec::sniff(bytes)?;
        let mut decoder = codec.decoder(Pieces::new(bytes, size));
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while out.len() < cap {
            match decoder.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Some((out, true)),
            }
        }
        out.truncate(cap);
        Some((out, false))
    }

    /// Bytes given `size` at a time (at least one), as a pipe may give them.
    pub struct Pieces<'a> {
        rest: &'a [u8],
        size: usize,
    }

    impl<'a> Pieces<'a> {
        pub fn new(bytes: &'a [u8], size: usize) -> Self {
            Pieces {
                rest: bytes,
                size: size.max(1),
            }
        }
    }

    impl std::io::Read for Pieces<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.size.min(buf.len()).min(self.rest.len());
            let (now, rest) = self.rest.split_at(n);
            buf[..n].copy_from_slice(now);
            self.rest = rest;
            Ok(n)
        }
    }
}
