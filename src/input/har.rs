//! HAR 1.2 exports in: browser and proxy recordings of HTTP exchanges, fed to the session stage.
//!
//! Input: a JSON document (any `Read`; `.zhar` files arrive already inflated) holding
//! `log.entries[]`, as Chrome/Edge, Firefox, mitmproxy, Playwright and Charles/Fiddler-style
//! tools write it; recognized by content. Bodies come from `response.content.text` (base64 when
//! `content.encoding` says so), from a file beside the HAR named by `content._file` (Playwright's
//! attached-content mode), or from `_eventSourceMessages` (`{eventName, eventId, data}`).
//! Output: each entry becomes one exchange of its own [`ExchangeTracker`] — the same session and
//! verdict code as for captures — and every resume is added to the [`InputReport`] with
//! `connection.har_entry` set to the entry's 0-based index in the file and its marks carrying
//! that index as `frame` and `startedDateTime` as time. Problems are one-line messages naming
//! the file and the entry index; a bad entry is skipped and the others are still analyzed.
//! Invariants:
//! - Streaming: the document is scanned in fixed-size reads; one entry at a time is held (raw
//!   bytes, at most `max_entry_bytes`), read in place (strings borrowed) by the reader of
//!   [`direct`] as HAR writers write entries, by serde_json any other way (the same fields,
//!   the same messages), its body text unescaped once (one copy, no larger than the text: in
//!   the pass that finds it for a plain entry, by serde_json for any other), base64-decoded by the
//!   `base64` crate and fed in pieces of at most [`BODY_CHUNK`] bytes, then dropped.
//!   Memory is about twice the largest entry plus constant buffers; the records each entry
//!   gives (a few KiB an event stream) are handed on as soon as it is analyzed ([`Emit`]), to
//!   the session stage's queue in order of start (`audit::HarFeed`). With entry threads
//!   (`-j2` and more on one HAR), one thread reads entries while the others analyze them,
//!   small ones handed over in batches: up to [`IN_FLIGHT_BYTES`] of entries wait or are
//!   analyzed at once (an entry larger than that alone), so memory is then about that, or
//!   three times the largest entry (one read while one is analyzed), plus constant buffers.
//! - Order: the tracker keeps no state from one exchange to the next, so entries can be
//!   analyzed on any thread; what each gives is put back in file order batch by batch as the
//!   threads give it back, and the session stage puts the small records in order of start
//!   (`startedDateTime`, then entry index). No second pass, no body kept for sorting.
//! - A HAR cannot prove that a server sent nothing: an event stream whose body is absent,
//!   empty, or marked as cut short ends as `capture_incomplete` with a reason that says why,
//!   unless the entry itself proves the body whole (a `Content-Length` equal to what was
//!   recorded). Without that proof no body is taken as ended (`stream_end` is `capture_end`),
//!   so `empty` needs it; a recorded id still decides the verdict as usual.
//! - Kept strings (method, URL, session id, Last-Event-ID, protocol version, content type) are
//!   bounded by `Limits::max_header_bytes`; a longer one makes the entry an error.

use std::borrow::Cow;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use memchr::memchr2;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::body_text;
use super::nesting::{MAX_DEPTH, Nesting, Step, TOO_DEEP, UNBALANCED};
use crate::audit::verdict::{Decision, Verdict};
use crate::exchange::{ConnectionRef, ExchangeSummary, ExchangeTracker, ResumeRecord};
use crate::record::{
    BodyEnd, HttpSink, Limits, Mark, RequestHead, ResponseHead, StreamEnd, head_text_owned,
};

mod direct;

/// Largest entry (its raw JSON) accepted; a larger one is reported and skipped.
pub const MAX_ENTRY_BYTES: usize = 1 << 30;
/// Bytes asked of the reader at a time.
const READ_CHUNK: usize = 256 << 10;
/// Largest piece of body handed to the tracker at once.
pub const BODY_CHUNK: usize = 64 << 10;
/// Longest member name compared (longer ones are never names this module looks for).
const MAX_KEY: usize = 64;

// Why a resume's verdict is `capture_incomplete` when the HAR, not the traffic, is the cause.
const NO_RESPONSE: &str = "the HAR holds no response to the resume (status 0 or -1: the \
     request failed, was cancelled, or was still open when the HAR was written)";
const NO_BODY: &str = "the HAR holds no body for this event stream (proxies and browsers often \
     leave streamed bodies out)";
const EMPTY_BODY: &str = "the HAR holds an empty body for this event stream, which is how \
     proxies and browsers record a body they did not keep; it does not show that the server \
     sent nothing";
const CUT_BODY: &str = "the HAR marks this event stream's body as cut short (content.size, \
     Content-Length or a comment says more was sent), so the events it holds cannot stand for \
     what the server sent";
const NO_ID_UNPROVEN: &str = "the HAR's body for this event stream holds no event id, and \
     nothing in the entry (such as a Content-Length equal to it) shows it was recorded to its \
     end";
const FILE_MISSING: &str = "the body file named by content._file is not beside the HAR";
const MESSAGES_NO_ID: &str = "the HAR's _eventSourceMessages hold no event id and do not show \
     that the stream had ended";
const MESSAGES_AMBIGUOUS: &str = "the first of the HAR's _eventSourceMessages repeats \
     Last-Event-ID, which is also what a browser reports for an event without an id, so the \
     first id the server sent is not known";

/// Inflates a zlib stream (a `.zhar`) so that what comes out does not depend on how the
/// stream is read: every byte inflated before an error (a damaged checksum, say) is handed
/// out first, and the error only on the next read. (A decoder that drops the bytes of the
/// read in which the error shows would give more or less of the document by read size.)
pub struct ZlibInput<R: Read> {
    src: R,
    z: flate2::Decompress,
    input: Vec<u8>,
    pos: usize,
    len: usize,
    eof: bool,
    done: bool,
    /// The stream's error: every read after it gives it again, so that a reader that tries
    /// once more is told the same thing.
    failed: Option<(std::io::ErrorKind, String)>,
}

impl<R: Read> ZlibInput<R> {
    pub fn new(src: R) -> Self {
        ZlibInput {
            src,
            z: flate2::Decompress::new(true),
            input: vec![0; 64 << 10],
            pos: 0,
            len: 0,
            eof: false,
            done: false,
            failed: None,
        }
    }
}

impl<R: Read> Read for ZlibInput<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if let Some((kind, text)) = &self.failed {
            return Err(std::io::Error::new(*kind, text.clone()));
        }
        if self.done || out.is_empty() {
            return Ok(0);
        }
        loop {
            if self.pos == self.len && !self.eof {
                self.len = match self.src.read(&mut self.input) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                self.pos = 0;
                self.eof = self.len == 0;
            }
            let (in0, out0) = (self.z.total_in(), self.z.total_out());
            let flush = if self.eof {
                flate2::FlushDecompress::Finish
            } else {
                flate2::FlushDecompress::None
            };
            let status = self
                .z
                .decompress(&self.input[self.pos..self.len], out, flush);
            let used = (self.z.total_in() - in0) as usize;
            let made = (self.z.total_out() - out0) as usize;
            self.pos += used;
            match status {
                Ok(flate2::Status::StreamEnd) => {
                    self.done = true;
                    return Ok(made);
                }
                Ok(_) if made > 0 => return Ok(made),
                Ok(_) if self.eof && used == 0 => {
                    let kind = std::io::ErrorKind::UnexpectedEof;
                    let text = "the zlib stream ends before its end".to_string();
                    self.failed = Some((kind, text.clone()));
                    return Err(std::io::Error::new(kind, text));
                }
                Ok(_) => {}
                Err(_) => {
                    // Not the decoder's own words: where a damaged stream is noticed, and so
                    // what the decoder says, can depend on how much output room each read gave.
                    let kind = std::io::ErrorKind::InvalidData;
                    let text = "the zlib stream is damaged".to_string();
                    self.failed = Some((kind, text.clone()));
                    if made > 0 {
                        return Ok(made);
                    }
                    return Err(std::io::Error::new(kind, text));
                }
            }
        }
    }
}

/// What one HAR document gave: its exchanges, ready for the session stage (boxed where the
/// exchange tracker made them, as [`crate::facts::FactSink::har`] takes them).
#[derive(Debug, Default)]
#[allow(clippy::vec_box)]
pub struct HarExchanges {
    /// Resumes, in entry order.
    pub resumes: Vec<Box<ResumeRecord>>,
    /// Exchange summaries for the session stage.
    pub summaries: Vec<Box<ExchangeSummary>>,
    /// Messages for standard error: `(is_error, text)`.
    pub messages: Vec<(bool, String)>,
    pub http_exchanges: u64,
    /// Hashes of the session ids seen.
    pub sessions: crate::exchange::SessionSet,
}

/// What entries gave, handed on as the document is read: their resumes and exchange
/// summaries, in entry order, a resume in the same call as its exchange's summary.
pub type Emit<'e> = dyn FnMut(Vec<Box<ResumeRecord>>, Vec<Box<ExchangeSummary>>) + 'e;

/// Reads one HAR document; `name` is how messages cite the input, and its directory is where
/// `content._file` bodies are looked for. Each entry's resumes and summaries go to `emit` as
/// soon as the entry is analyzed (the report returned holds none of them). With `threads` of
/// 2 or more, its entries are analyzed on that many threads beside the one that reads the
/// document; what it gives does not depend on `threads`.
pub fn read_har_into<R: Read>(
    name: &str,
    src: R,
    limits: &Limits,
    threads: usize,
    emit: &mut Emit<'_>,
) -> HarExchanges {
    read_har_bounded(name, src, limits, MAX_ENTRY_BYTES, threads, Some(emit))
}

/// [`read_har_into`] with the largest accepted entry given; each entry's records are held in
/// the report when `emit` is `None`.
pub fn read_har_bounded<R: Read>(
    name: &str,
    src: R,
    limits: &Limits,
    max_entry_bytes: usize,
    threads: usize,
    emit: Option<&mut Emit<'_>>,
) -> HarExchanges {
    let mut scan = Scanner::new(src);
    let mut out = HarExchanges::default();
    let mut run = HarRun {
        name,
        dir: Path::new(name)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default(),
        limits,
        report: &mut out,
        // A shorter-lived view of the callback, as the run's lifetime wants.
        emit: match emit {
            Some(e) => Some(e as &mut Emit<'_>),
            None => None,
        },
        body_text: true,
        scratch: EntryScratch::default(),
    };
    let walked = walk(&mut scan, &mut |scan| {
        if threads < 2 {
            entries(scan, &mut run, max_entry_bytes)
        } else {
            entries_on_threads(scan, &mut run, max_entry_bytes, threads)
        }
    });
    match walked {
        Ok(None) => {}
        Ok(Some(at)) => out.messages.push((
            false,
            format!("{name}: offset {at}: data after the end of the HAR document; ignored"),
        )),
        Err(e) => {
            let text = match e.entry {
                Some(i) => format!(
                    "{name}: entry {i}: offset {}: {}; the entries before it were analyzed",
                    e.offset, e.what
                ),
                None => format!("{name}: offset {}: {}", e.offset, e.what),
            };
            out.messages.push((true, text));
        }
    }
    out
}

/// The raw JSON of each entry of a HAR document that has whole ones (for fuzzing seeds).
pub fn entries_of(doc: &[u8]) -> Vec<Vec<u8>> {
    let mut all = Vec::new();
    let _ = walk(&mut Scanner::new(doc), &mut |scan| {
        each_entry(scan, MAX_ENTRY_BYTES, &mut Vec::new(), &mut |_, entry| {
            if let Ok((buf, from)) = entry {
                all.push(buf.split_off(from));
            }
        })
    });
    all
}

/// What one entry gives (its records and messages, as debug text) when its body text is
/// decoded in the pass that finds it, and when serde_json reads the entry whole: the two must
/// be the same (tests and fuzzing hold them to it).
pub fn entry_readings(raw: &[u8]) -> (String, String) {
    let limits = Limits::default();
    let read = |body_text: bool| {
        let mut out = HarExchanges::default();
        let mut run = HarRun {
            name: "t.har",
            // Never found: a `content._file` body is not read.
            dir: PathBuf::from("/nonexistent-dir-for-har-entries"),
            limits: &limits,
            report: &mut out,
            emit: None,
            body_text,
            scratch: EntryScratch::default(),
        };
        // Twice, so that the second entry reads into the first one's buffers.
        run.entry(0, raw);
        run.entry(1, raw);
        format!("{out:?}")
    };
    (read(true), read(false))
}

/// The direct reading of one entry ([`direct`]) held to serde_json's: `Ok(true)` when it
/// read the entry and made of it what serde_json makes (and decoded the body text, when it
/// did, as serde_json decodes it), `Ok(false)` when it left the entry to serde_json, `Err`
/// saying how the two differ.
pub fn direct_reading_agrees(raw: &[u8]) -> Result<bool, String> {
    let mut text = Vec::new();
    let Some((direct, decoded)) = direct::entry(raw, &mut text) else {
        return Ok(false);
    };
    let general: Entry<'_> = serde_json::from_slice(raw)
        .map_err(|e| format!("serde_json refuses an entry read directly: {e}"))?;
    if direct != general {
        return Err(format!(
            "read directly {direct:?}, by serde_json {general:?}"
        ));
    }
    if decoded {
        let literal = general
            .response
            .content
            .text
            .as_ref()
            .map_or(&b""[..], |t| t.0);
        let want = serde_json::from_slice::<String>(literal)
            .map_err(|e| format!("a body text decoded ahead that serde_json refuses: {e}"))?;
        if want.as_bytes() != text {
            return Err(format!(
                "body text decoded ahead {:?}, by serde_json {want:?}",
                String::from_utf8_lossy(&text)
            ));
        }
    }
    Ok(true)
}

/// Where the document stops making sense.
#[derive(Debug)]
struct ScanError {
    offset: u64,
    what: String,
    entry: Option<u64>,
}

/// Walks the document: the `log.entries` array goes to `on_entries` (the scanner at its `[`),
/// everything else is skipped. Says where data follows the document, if it does.
fn walk<R: Read>(
    scan: &mut Scanner<R>,
    on_entries: &mut dyn FnMut(&mut Scanner<R>) -> Result<(), ScanError>,
) -> Result<Option<u64>, ScanError> {
    scan.skip_bom()?;
    if scan.skip_ws()? != Some(b'{') {
        return Err(scan.err("not a HAR file: the document is not a JSON object"));
    }
    let mut log_seen = false;
    let mut entries_seen = false;
    scan.members(&mut |scan, key| {
        if key != b"\"log\"" || log_seen {
            return scan.skip_value();
        }
        log_seen = true;
        if scan.skip_ws()? != Some(b'{') {
            return Err(scan.err("not a HAR file: \"log\" is not an object"));
        }
        scan.members(&mut |scan, key| {
            if key != b"\"entries\"" || entries_seen {
                return scan.skip_value();
            }
            entries_seen = true;
            if scan.skip_ws()? != Some(b'[') {
                return Err(scan.err("not a HAR file: \"log.entries\" is not an array"));
            }
            on_entries(scan)
        })
    })?;
    if !log_seen {
        return Err(scan.err("not a HAR file: the document has no \"log\" object"));
    }
    if !entries_seen {
        return Err(scan.err("not a HAR file: \"log\" has no \"entries\" array"));
    }
    Ok(scan.skip_ws()?.is_some().then(|| scan.offset()))
}

/// Reads the elements of `log.entries` one at a time, each analyzed here.
fn entries<R: Read>(
    scan: &mut Scanner<R>,
    run: &mut HarRun<'_>,
    cap: usize,
) -> Result<(), ScanError> {
    each_entry(scan, cap, &mut Vec::new(), &mut |index, entry| {
        match entry {
            Ok((buf, from)) => {
                run.entry(index, buf.get(from..).unwrap_or_default());
                buf.clear();
            }
            Err(what) => run.entry_error(index, what),
        }
        run.flush();
    })
}

/// What is done with each entry of `log.entries`: the buffer its raw JSON was appended to and
/// where in it the entry begins, or why it is skipped.
type OnEntry<'f> = dyn FnMut(u64, Result<(&mut Vec<u8>, usize), String>) + 'f;

/// Scans the elements of `log.entries` (the scanner is at its `[`): each entry's raw JSON, or
/// why it is skipped, goes to `on` with the entry's index, in order. Each entry is appended to
/// the buffer the entries before it were: `on` decides what the buffer keeps (a batch of
/// entries, or nothing) and may take it (leaving another in its place).
fn each_entry<R: Read>(
    scan: &mut Scanner<R>,
    cap: usize,
    buf: &mut Vec<u8>,
    on: &mut OnEntry<'_>,
) -> Result<(), ScanError> {
    scan.bump();
    if scan.skip_ws()? == Some(b']') {
        scan.bump();
        return Ok(());
    }
    let mut index: u64 = 0;
    loop {
        let in_entry = |mut e: ScanError| {
            e.entry = Some(index);
            e
        };
        match scan.skip_ws()? {
            Some(b'{') => {
                let from = buf.len();
                let fit = scan.scan_value(Some(buf), cap).map_err(in_entry)?;
                if fit {
                    on(index, Ok((buf, from)));
                } else {
                    // Give the memory back: the next entries are usually small.
                    buf.shrink_to(from);
                    on(index, Err(format!("larger than {cap} bytes; skipped")));
                }
            }
            Some(_) => {
                scan.scan_value(None, 0).map_err(in_entry)?;
                on(index, Err("not a JSON object".to_string()));
            }
            None => return Err(in_entry(scan.err("the file ends inside log.entries"))),
        }
        match scan.skip_ws()? {
            Some(b',') => scan.bump(),
            Some(b']') => {
                scan.bump();
                return Ok(());
            }
            Some(_) => return Err(in_entry(scan.err("expected ',' or ']' after the entry"))),
            None => return Err(in_entry(scan.err("the file ends inside log.entries"))),
        }
        index += 1;
    }
}

/// Bytes of entries waiting for or being analyzed on the entry threads at once: past it, the
/// reading thread waits. An entry larger than this is analyzed alone.
const IN_FLIGHT_BYTES: usize = 4 << 20;
/// Entries are handed over together, in batches of about this many bytes (the entry that
/// takes a batch past it ends the batch, however large) or [`BATCH_ENTRIES`] entries, each a
/// lock, a message and perhaps a thread woken, and then a message to the session stage with
/// what they gave. With `-j2`, batches of 512 KiB and 128 entries took 4–8% less time than
/// 256 KiB and 64 on HARs of 1 KiB, 4 KiB and a browser's entries, for 2–3 MiB more at the
/// peak (58 MiB on the 1 KiB entries); 1 MiB and 256 took no less time than 512 KiB and 128,
/// and 3–4 MiB more.
const BATCH_BYTES: usize = 512 << 10;
const BATCH_ENTRIES: usize = 128;
/// Batches analyzed and given back while an earlier one is still being analyzed (a large
/// entry, say) that the reading thread holds before it waits for that one: what they gave
/// cannot go on before it, and would otherwise pile up. (One in unit tests, so that they wait
/// often.)
const BATCHES_BACK: usize = if cfg!(test) { 1 } else { 16 };

/// Entries handed to an entry thread at once: their raw JSON one after the other.
#[derive(Default)]
struct Batch {
    /// Its place in the order batches are sent.
    seq: u64,
    bytes: Vec<u8>,
    /// Each entry's index and where its JSON is in `bytes`.
    entries: Vec<(u64, std::ops::Range<usize>)>,
}

/// The bytes of entries handed to the entry threads and not yet analyzed.
#[derive(Default)]
struct InFlight {
    state: std::sync::Mutex<InFlightState>,
    changed: std::sync::Condvar,
}

#[derive(Default)]
struct InFlightState {
    bytes: usize,
    /// The reading thread waits for room.
    waiting: bool,
    /// An entry thread stopped (panicked): nothing more is handed over.
    stopped: bool,
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, InFlightState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits until `n` more bytes fit (always when none are in flight) and counts them; false
    /// when an entry thread has stopped.
    fn take(&self, n: usize) -> bool {
        let mut s = self.lock();
        while !s.stopped && s.bytes > 0 && s.bytes.saturating_add(n) > IN_FLIGHT_BYTES {
            s.waiting = true;
            s = self
                .changed
                .wait(s)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        s.waiting = false;
        if s.stopped {
            return false;
        }
        s.bytes += n;
        true
    }

    fn give(&self, n: usize) {
        let mut s = self.lock();
        s.bytes -= n;
        // Waking costs a system call: only when the reading thread waits.
        if s.waiting {
            self.changed.notify_all();
        }
    }

    fn stop(&self) {
        self.lock().stopped = true;
        self.changed.notify_all();
    }

    /// An entry thread has stopped.
    fn stopped(&self) -> bool {
        self.lock().stopped
    }
}

/// Tells the reading thread that an entry thread stopped, when it unwinds.
struct StopOnUnwind<'a>(&'a InFlight);

impl Drop for StopOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.stop();
        }
    }
}

/// How many records and messages one entry added to an entry thread's lists.
struct EntrySpan {
    index: u64,
    resumes: usize,
    summaries: usize,
    messages: usize,
}

/// What an entry thread gave for one batch: the batch's place in the order batches were
/// sent, what its entries added, and how much each added.
#[allow(clippy::vec_box)]
struct Done {
    seq: u64,
    resumes: Vec<Box<ResumeRecord>>,
    summaries: Vec<Box<ExchangeSummary>>,
    messages: Vec<(bool, String)>,
    spans: Vec<EntrySpan>,
}

/// Batches given back out of order, held until those before them are in, then added in
/// entry order together with the entries the reading thread skipped.
#[derive(Default)]
struct InOrder {
    next: u64,
    waiting: std::collections::BTreeMap<u64, Done>,
    skipped: std::collections::VecDeque<(u64, String)>,
}

impl InOrder {
    /// Adds to `run` every batch whose turn has come, and the skipped entries before each
    /// entry, then hands the records on.
    fn add_ready(&mut self, run: &mut HarRun<'_>) {
        while let Some(done) = self.waiting.remove(&self.next) {
            self.next += 1;
            let mut resumes = done.resumes.into_iter();
            let mut summaries = done.summaries.into_iter();
            let mut messages = done.messages.into_iter();
            for span in done.spans {
                self.skipped_before(run, span.index);
                run.report
                    .resumes
                    .extend(resumes.by_ref().take(span.resumes));
                run.report
                    .summaries
                    .extend(summaries.by_ref().take(span.summaries));
                run.report
                    .messages
                    .extend(messages.by_ref().take(span.messages));
            }
            run.flush();
        }
    }

    /// Reports the skipped entries before entry `index`.
    fn skipped_before(&mut self, run: &mut HarRun<'_>, index: u64) {
        while self.skipped.front().is_some_and(|(at, _)| *at < index) {
            if let Some((at, what)) = self.skipped.pop_front() {
                run.entry_error(at, what);
            }
        }
    }

    /// Everything is in: adds what is left, in order (a batch that never came back, its
    /// thread having failed, leaves a gap that is stepped over).
    fn finish(&mut self, run: &mut HarRun<'_>) {
        self.add_ready(run);
        while let Some(&seq) = self.waiting.keys().next() {
            self.next = seq;
            self.add_ready(run);
        }
        self.skipped_before(run, u64::MAX);
        run.flush();
    }
}

/// [`entries`] with the entries analyzed on `threads` threads while this one reads on:
/// entries do not depend on one another, so only the order of what they give must be kept,
/// and it is, entry by entry, as [`entries`] gives it. Each batch's records come back as soon
/// as it is analyzed and are handed on in entry order, so that what waits is bounded by the
/// batches in flight, not by the document.
fn entries_on_threads<R: Read>(
    scan: &mut Scanner<R>,
    run: &mut HarRun<'_>,
    cap: usize,
    threads: usize,
) -> Result<(), ScanError> {
    let in_flight = InFlight::default();
    let (to_threads, queue) = std::sync::mpsc::channel::<Batch>();
    let queue = std::sync::Mutex::new(queue);
    let (give_back, given_back) = std::sync::mpsc::channel::<Vec<u8>>();
    let (to_reader, from_threads) = std::sync::mpsc::channel::<Done>();
    let mut order = InOrder::default();
    let (name, dir, limits) = (run.name, run.dir.clone(), run.limits);
    let (scanned, parts) = std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads {
            let (queue, in_flight) = (&queue, &in_flight);
            let (give_back, to_reader) = (give_back.clone(), to_reader.clone());
            let dir = &dir;
            let work = move || {
                let _stop = StopOnUnwind(in_flight);
                let mut out = HarExchanges::default();
                let mut spans = Vec::new();
                let mut worker = HarRun {
                    name,
                    dir: dir.clone(),
                    limits,
                    report: &mut out,
                    emit: None,
                    body_text: true,
                    scratch: EntryScratch::default(),
                };
                loop {
                    // The lock is held only to take the next batch.
                    let next = queue
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .recv();
                    let Ok(batch) = next else {
                        break;
                    };
                    for (index, at) in &batch.entries {
                        let before = worker.lens();
                        worker.entry(*index, &batch.bytes[at.clone()]);
                        let after = worker.lens();
                        spans.push(EntrySpan {
                            index: *index,
                            resumes: after.0 - before.0,
                            summaries: after.1 - before.1,
                            messages: after.2 - before.2,
                        });
                    }
                    // The reading thread may have finished already.
                    let _ = to_reader.send(Done {
                        seq: batch.seq,
                        resumes: std::mem::take(&mut worker.report.resumes),
                        summaries: std::mem::take(&mut worker.report.summaries),
                        messages: std::mem::take(&mut worker.report.messages),
                        spans: std::mem::take(&mut spans),
                    });
                    let mut bytes = batch.bytes;
                    in_flight.give(bytes.len().max(1));
                    // The reading thread reuses the buffer, empty.
                    bytes.clear();
                    let _ = give_back.send(bytes);
                }
                (out.http_exchanges, out.sessions)
            };
            let spawned = std::thread::Builder::new()
                .name(format!("har entries {i}"))
                .spawn_scoped(s, work);
            match spawned {
                Ok(h) => handles.push(h),
                // No more threads to be had: the ones started do the work.
                Err(_) => break,
            }
        }
        drop(give_back);
        drop(to_reader);
        let threads_started = !handles.is_empty();
        let mut batch = Batch::default();
        let mut sent = 0u64;
        let mut send = |mut batch: Batch| {
            batch.seq = sent;
            sent += 1;
            // An empty batch still counts a byte, as the thread gives back.
            let n = batch.bytes.len().max(1);
            if in_flight.take(n) && to_threads.send(batch).is_err() {
                in_flight.give(n);
            }
        };
        // A buffer back from the threads, or one of `want` bytes: a buffer grown from nothing
        // by doubling costs copies and fresh pages.
        let spare = |want: usize| {
            given_back
                .try_recv()
                .unwrap_or_else(|_| Vec::with_capacity(want))
        };
        // The entries are scanned straight into the batch's bytes (no copy): the batch goes
        // when it is full, a large entry with the entries before it, and its buffer is replaced.
        let mut bytes = Vec::with_capacity(2 * BATCH_BYTES);
        let scanned = each_entry(scan, cap, &mut bytes, &mut |index, entry| {
            match entry {
                Ok((bytes, from)) if threads_started => {
                    batch.entries.push((index, from..bytes.len()));
                    if bytes.len() >= BATCH_BYTES || batch.entries.len() >= BATCH_ENTRIES {
                        batch.bytes = std::mem::replace(bytes, spare(2 * BATCH_BYTES));
                        send(std::mem::take(&mut batch));
                    }
                }
                Ok((bytes, from)) => {
                    run.entry(index, bytes.get(from..).unwrap_or_default());
                    bytes.clear();
                    run.flush();
                }
                Err(what) if threads_started => order.skipped.push_back((index, what)),
                Err(what) => {
                    run.entry_error(index, what);
                    run.flush();
                }
            }
            // What the threads have given back so far goes on.
            for done in from_threads.try_iter() {
                order.waiting.insert(done.seq, done);
            }
            // Every batch sent is analyzed unless a thread stops (then nothing waits for it).
            while order.waiting.len() > BATCHES_BACK
                && !order.waiting.contains_key(&order.next)
                && !in_flight.stopped()
            {
                match from_threads.recv_timeout(std::time::Duration::from_millis(20)) {
                    Ok(done) => {
                        order.waiting.insert(done.seq, done);
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
            order.add_ready(run);
        });
        if !batch.entries.is_empty() {
            batch.bytes = bytes;
            send(batch);
        }
        drop(to_threads);
        // Every thread's sender is gone once it has finished.
        for done in from_threads.iter() {
            order.waiting.insert(done.seq, done);
            order.add_ready(run);
        }
        let parts: Vec<(u64, crate::exchange::SessionSet)> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        (scanned, parts)
    });
    order.finish(run);
    for (http_exchanges, sessions) in parts {
        run.report.http_exchanges += http_exchanges;
        run.report.sessions.extend(sessions.iter());
    }
    scanned
}

/// A pull scanner over JSON text: finds the extent of values without building them.
///
/// Kept instead of streaming `log.entries` through serde_json (`Deserializer::from_reader`
/// with a `DeserializeSeed` per level and each entry taken as a `Box<RawValue>`), which was
/// measured on a 1 GiB HAR (`fixtures/har/gen_big_har.py OUT 1024`, 949 entries of 1 MiB,
/// release build, `/usr/bin/time -v`): this scanner 2.1–2.7 s wall, 1.3–1.6 s CPU, 11 MiB peak
/// RSS; serde_json reading byte by byte (exact error offsets) 20–30 s wall, 14–16 s CPU,
/// 12 MiB; the same over a 64 KiB `BufReader` 7–10 s wall, 5.4–5.7 s CPU. Besides, a serde_json
/// stream cannot step over a malformed or oversized entry and go on with the next one, which
/// this scanner does (it only matches brackets and quotes; serde_json judges each entry).
struct Scanner<R> {
    src: R,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// File offset of `buf[0]`.
    base: u64,
    eof: bool,
    /// The state of the container being scanned.
    nesting: Nesting,
}

type MemberFn<'f, R> = dyn FnMut(&mut Scanner<R>, &[u8]) -> Result<(), ScanError> + 'f;

/// Where the value being copied begins in its buffer, and how many bytes it may take there.
#[derive(Clone, Copy)]
struct Room {
    from: usize,
    cap: usize,
}

impl Room {
    fn new(from: usize, cap: usize) -> Self {
        Room { from, cap }
    }
}

impl<R: Read> Scanner<R> {
    fn new(src: R) -> Self {
        Scanner {
            src,
            buf: vec![0; READ_CHUNK],
            pos: 0,
            end: 0,
            base: 0,
            eof: false,
            nesting: Nesting::default(),
        }
    }

    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    fn err(&self, what: &str) -> ScanError {
        ScanError {
            offset: self.offset(),
            what: what.to_string(),
            entry: None,
        }
    }

    /// Makes at least one unread byte available; false at the end of the input.
    fn fill(&mut self) -> Result<bool, ScanError> {
        if self.pos < self.end {
            return Ok(true);
        }
        if self.eof {
            return Ok(false);
        }
        self.base += self.end as u64;
        self.pos = 0;
        self.end = 0;
        loop {
            match self.src.read(&mut self.buf) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.end = n.min(self.buf.len());
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.eof = true;
                    return Err(ScanError {
                        offset: self.base,
                        what: format!("read error: {e}"),
                        entry: None,
                    });
                }
            }
        }
    }

    fn peek(&mut self) -> Result<Option<u8>, ScanError> {
        Ok(if self.fill()? {
            self.buf.get(self.pos).copied()
        } else {
            None
        })
    }

    fn bump(&mut self) {
        self.pos = (self.pos + 1).min(self.end);
    }

    fn skip_bom(&mut self) -> Result<(), ScanError> {
        for want in [0xEF, 0xBB, 0xBF] {
            if self.peek()? != Some(want) {
                // The sniffer only lets a whole BOM or none through.
                return Ok(());
            }
            self.bump();
        }
        Ok(())
    }

    /// Skips whitespace; returns the next byte without consuming it.
    fn skip_ws(&mut self) -> Result<Option<u8>, ScanError> {
        loop {
            match self.peek()? {
                Some(b' ' | b'\t' | b'\n' | b'\r') => self.bump(),
                other => return Ok(other),
            }
        }
    }

    fn skip_value(&mut self) -> Result<(), ScanError> {
        self.scan_value(None, 0).map(|_| ())
    }

    /// Calls `f` with each member name (raw, quotes included) of the object at the cursor;
    /// `f` must consume the member's value.
    fn members(&mut self, f: &mut MemberFn<'_, R>) -> Result<(), ScanError> {
        self.bump();
        if self.skip_ws()? == Some(b'}') {
            self.bump();
            return Ok(());
        }
        let mut key = Vec::with_capacity(MAX_KEY);
        loop {
            if self.skip_ws()? != Some(b'"') {
                return Err(self.err("expected a member name"));
            }
            key.clear();
            let mut fit = true;
            self.scan_string(&mut Some(&mut key), Room::new(0, MAX_KEY), &mut fit)?;
            if !fit {
                key.clear();
            }
            if self.skip_ws()? != Some(b':') {
                return Err(self.err("expected ':' after a member name"));
            }
            self.bump();
            if self.skip_ws()?.is_none() {
                return Err(self.err("the file ends before a member's value"));
            }
            f(self, &key)?;
            match self.skip_ws()? {
                Some(b',') => self.bump(),
                Some(b'}') => {
                    self.bump();
                    return Ok(());
                }
                Some(_) => return Err(self.err("expected ',' or '}'")),
                None => return Err(self.err("the file ends inside an object")),
            }
        }
    }

    /// Appends `n` unread bytes to `out` while the value stays within its `room`, and consumes
    /// them; past it, `out` is cut back to where the value began.
    fn take(&mut self, n: usize, out: &mut Option<&mut Vec<u8>>, room: Room, fit: &mut bool) {
        let to = (self.pos + n).min(self.end);
        if let Some(out) = out.as_deref_mut()
            && *fit
        {
            let run = self.buf.get(self.pos..to).unwrap_or(&[]);
            if out.len() - room.from + run.len() <= room.cap {
                out.extend_from_slice(run);
            } else {
                *fit = false;
                out.truncate(room.from);
            }
        }
        self.pos = to;
    }

    /// Consumes one JSON value at the cursor, appending its bytes to `out` while they fit in
    /// `cap`. Returns whether they fit (when not, `out` is as it was). Brackets are matched; the
    /// rest of the grammar is left to serde_json (for entries) or not needed (for what is
    /// skipped).
    fn scan_value(&mut self, mut out: Option<&mut Vec<u8>>, cap: usize) -> Result<bool, ScanError> {
        let cap = Room::new(out.as_deref().map_or(0, Vec::len), cap);
        if cfg!(target_arch = "x86_64") && matches!(self.peek()?, Some(b'{' | b'[')) {
            return self.scan_container(out, cap);
        }
        let mut fit = true;
        let mut closers: Vec<u8> = Vec::new();
        loop {
            let Some(b) = self.peek()? else {
                return Err(self.err("the file ends inside a value"));
            };
            match b {
                b'"' => {
                    self.scan_string(&mut out, cap, &mut fit)?;
                    if closers.is_empty() {
                        return Ok(fit);
                    }
                }
                b'{' | b'[' => {
                    if closers.len() >= MAX_DEPTH {
                        return Err(self.err(TOO_DEEP));
                    }
                    closers.push(if b == b'{' { b'}' } else { b']' });
                    self.take(1, &mut out, cap, &mut fit);
                }
                b'}' | b']' => {
                    if closers.pop() != Some(b) {
                        return Err(self.err(UNBALANCED));
                    }
                    self.take(1, &mut out, cap, &mut fit);
                    if closers.is_empty() {
                        return Ok(fit);
                    }
                }
                _ if closers.is_empty() => {
                    // A number or a literal standing alone.
                    if !matches!(b, b'-' | b'0'..=b'9' | b't' | b'f' | b'n') {
                        return Err(self.err("not JSON: unexpected character"));
                    }
                    loop {
                        let avail = self.buf.get(self.pos..self.end).unwrap_or(&[]);
                        let n = avail
                            .iter()
                            .position(|c| !matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'+' | b'-' | b'E'))
                            .unwrap_or(avail.len());
                        self.take(n, &mut out, cap, &mut fit);
                        if self.pos < self.end || !self.fill()? {
                            return Ok(fit);
                        }
                    }
                }
                _ => {
                    // Inside a container: copy up to the next string or bracket.
                    let avail = self.buf.get(self.pos..self.end).unwrap_or(&[]);
                    let n = avail
                        .iter()
                        .position(|c| matches!(c, b'"' | b'{' | b'}' | b'[' | b']'))
                        .unwrap_or(avail.len());
                    self.take(n, &mut out, cap, &mut fit);
                }
            }
        }
    }

    /// [`Self::scan_value`] for a container at the cursor, whose end is found a block of
    /// bytes at a time (the same answer, errors and offsets included).
    fn scan_container(
        &mut self,
        mut out: Option<&mut Vec<u8>>,
        cap: Room,
    ) -> Result<bool, ScanError> {
        let mut fit = true;
        self.nesting.reset();
        loop {
            if !self.fill()? {
                return Err(self.err(if self.nesting.in_string() {
                    "the file ends inside a string"
                } else {
                    "the file ends inside a value"
                }));
            }
            let avail = self.buf.get(self.pos..self.end).unwrap_or(&[]);
            match self.nesting.feed(avail) {
                Step::More => {
                    let n = avail.len();
                    self.take(n, &mut out, cap, &mut fit);
                }
                Step::Ended(i) => {
                    self.take(i + 1, &mut out, cap, &mut fit);
                    return Ok(fit);
                }
                Step::Bad(i, what) => {
                    self.pos += i;
                    return Err(self.err(what));
                }
            }
        }
    }

    /// Consumes a string at the cursor (opening quote included) to its closing quote.
    fn scan_string(
        &mut self,
        out: &mut Option<&mut Vec<u8>>,
        cap: Room,
        fit: &mut bool,
    ) -> Result<(), ScanError> {
        self.take(1, out, cap, fit);
        // A backslash ended the previous read: the byte it escapes opens this one.
        let mut escaped = false;
        loop {
            if !self.fill()? {
                return Err(self.err("the file ends inside a string"));
            }
            // One pass over what is buffered, one copy of it: escapes are stepped over in
            // place (two bytes each), the closing quote ends the run.
            let avail = self.buf.get(self.pos..self.end).unwrap_or(&[]);
            let mut i = usize::from(escaped);
            escaped = false;
            let mut closing = None;
            while let Some(k) = avail.get(i..).and_then(|rest| memchr2(b'"', b'\\', rest)) {
                let j = i + k;
                if avail.get(j) == Some(&b'"') {
                    closing = Some(j);
                    break;
                }
                if j + 1 >= avail.len() {
                    escaped = true;
                    break;
                }
                i = j + 2;
            }
            match closing {
                Some(j) => {
                    self.take(j + 1, out, cap, fit);
                    return Ok(());
                }
                None => {
                    let n = avail.len();
                    self.take(n, out, cap, fit);
                }
            }
        }
    }
}

// The parts of an entry that are read; other members (and other tools' `_fields`) are ignored.

#[derive(Debug, Deserialize, PartialEq)]
struct Entry<'a> {
    #[serde(rename = "startedDateTime", borrow)]
    started: Cow<'a, str>,
    #[serde(borrow)]
    request: Request<'a>,
    #[serde(borrow)]
    response: Response<'a>,
    #[serde(rename = "_eventSourceMessages", default, borrow)]
    event_source_messages: Option<Vec<EventSourceMessage<'a>>>,
}

#[derive(Debug, Deserialize, PartialEq)]
struct Request<'a> {
    #[serde(borrow)]
    method: Cow<'a, str>,
    #[serde(borrow)]
    url: Cow<'a, str>,
    #[serde(borrow)]
    headers: Vec<Header<'a>>,
}

#[derive(Debug, Deserialize, PartialEq)]
struct Header<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow)]
    value: Cow<'a, str>,
}

#[derive(Debug, Deserialize, PartialEq)]
struct Response<'a> {
    status: i64,
    #[serde(borrow)]
    headers: Vec<Header<'a>>,
    #[serde(borrow)]
    content: Content<'a>,
    #[serde(default)]
    comment: Option<String>,
}

#[derive(Debug, Deserialize, PartialEq)]
struct Content<'a> {
    #[serde(default)]
    size: Option<f64>,
    #[serde(rename = "mimeType", default)]
    mime_type: Option<String>,
    /// Kept as the raw JSON literal, decoded only for an event stream; `""` when the body text
    /// was decoded ahead by [`body_text`] (the reading of [`direct`] keeps it as written).
    #[serde(default, borrow)]
    text: Option<TextLiteral<'a>>,
    #[serde(default)]
    encoding: Option<String>,
    #[serde(default)]
    comment: Option<String>,
    #[serde(rename = "_file", default)]
    file: Option<String>,
}

/// A JSON value as written in the entry (serde_json's raw value: UTF-8, whitespace around it
/// left out).
#[derive(Debug, PartialEq)]
struct TextLiteral<'a>(&'a [u8]);

impl<'de: 'a, 'a> Deserialize<'de> for TextLiteral<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <&'a RawValue>::deserialize(d).map(|raw| TextLiteral(raw.get().as_bytes()))
    }
}

#[derive(Debug, Deserialize, PartialEq)]
struct EventSourceMessage<'a> {
    #[serde(rename = "eventName", default, borrow)]
    event_name: Option<Cow<'a, str>>,
    #[serde(rename = "eventId", default, borrow)]
    event_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    data: Option<Cow<'a, str>>,
}

/// For each of `names`, the first value of the header of that name (names compared without
/// regard to case), trimmed of optional whitespace as an HTTP parser would. One pass over
/// `headers` finds them all: an entry's few wanted headers are looked up together.
fn headers_named<'h, const N: usize>(
    headers: &'h [Header<'_>],
    names: [&str; N],
) -> [Option<&'h str>; N] {
    let mut found = [None; N];
    let mut left = N;
    for h in headers {
        let name = h.name.as_ref();
        // The first header of each name is the one taken; later ones of the name are not.
        if let Some(slot) = names
            .iter()
            .zip(found.iter_mut())
            .find_map(|(n, slot)| (slot.is_none() && name.eq_ignore_ascii_case(n)).then_some(slot))
        {
            *slot = Some(h.value.trim_matches([' ', '\t']));
            left -= 1;
            if left == 0 {
                break;
            }
        }
    }
    found
}

/// What the entry's body was, as far as the HAR holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BodySource {
    Text,
    File,
    Messages,
    Empty,
    Absent,
    FileMissing,
}

/// How a resume's body ended, and what the HAR adds to its verdict.
struct BodyOutcome {
    how: BodyEnd,
    /// Replaces the reason of a `capture_incomplete` verdict.
    reason: Option<&'static str>,
    /// The recorded events cannot stand for the stream: no server verdict.
    withhold: bool,
}

/// Feeds decoded body bytes to the tracker in pieces.
struct BodySink<'t> {
    tracker: &'t mut ExchangeTracker,
    mark: Mark,
    base64: Option<Base64>,
    out: Vec<u8>,
    /// Decoded bytes fed.
    fed: u64,
}

impl BodySink<'_> {
    fn push(&mut self, bytes: &[u8]) -> Result<(), String> {
        match self.base64.as_mut() {
            None => {
                self.fed += bytes.len() as u64;
                self.tracker.body(0, bytes, self.mark);
            }
            Some(b64) => {
                self.out.clear();
                b64.decode(bytes, &mut self.out)?;
                self.fed += self.out.len() as u64;
                self.tracker.body(0, &self.out, self.mark);
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), String> {
        if let Some(b64) = self.base64.as_mut() {
            self.out.clear();
            b64.finish(&mut self.out)?;
            self.fed += self.out.len() as u64;
            self.tracker.body(0, &self.out, self.mark);
        }
        Ok(())
    }
}

/// One HAR input being analyzed.
struct HarRun<'r> {
    name: &'r str,
    dir: PathBuf,
    limits: &'r Limits,
    report: &'r mut HarExchanges,
    /// Where each entry's records go once it is analyzed, in entry order (see [`Emit`]).
    emit: Option<&'r mut Emit<'r>>,
    /// Body texts of plain entries decoded in the pass that finds them ([`body_text`]); off,
    /// serde_json reads every entry whole (the answers are the same).
    body_text: bool,
    scratch: EntryScratch,
}

/// Buffers one entry after another decodes into: its body text, and the entry without it.
#[derive(Default)]
struct EntryScratch {
    text: Vec<u8>,
    cut: Vec<u8>,
}

/// Capacity of [`EntryScratch`]'s buffers kept from one entry to the next.
const SCRATCH_KEPT: usize = 4 << 20;

impl HarRun<'_> {
    /// Hands the records gathered so far to `emit`, when there is one.
    fn flush(&mut self) {
        if let Some(emit) = self.emit.as_mut()
            && !(self.report.resumes.is_empty() && self.report.summaries.is_empty())
        {
            emit(
                std::mem::take(&mut self.report.resumes),
                std::mem::take(&mut self.report.summaries),
            );
        }
    }

    fn entry_error(&mut self, index: u64, what: String) {
        self.report
            .messages
            .push((true, format!("{}: entry {index}: {what}", self.name)));
    }

    /// A kept string, or why the entry is refused.
    fn kept(&self, what: &str, value: &str) -> Result<String, String> {
        let max = self.limits.max_header_bytes;
        if value.len() > max {
            return Err(format!("{what} is longer than {max} bytes"));
        }
        Ok(value.to_string())
    }

    /// How many resumes, summaries and messages the report holds.
    fn lens(&self) -> (usize, usize, usize) {
        (
            self.report.resumes.len(),
            self.report.summaries.len(),
            self.report.messages.len(),
        )
    }

    fn entry(&mut self, index: u64, raw: &[u8]) {
        if let Err(what) = self.try_entry(index, raw) {
            self.entry_error(index, what);
        }
    }

    fn try_entry(&mut self, index: u64, raw: &[u8]) -> Result<(), String> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = self.try_entry_with(index, raw, &mut scratch);
        // Kept for the next entry only while small: one huge body does not hold its memory
        // for the rest of the run.
        if scratch.text.capacity() <= SCRATCH_KEPT && scratch.cut.capacity() <= SCRATCH_KEPT {
            self.scratch = scratch;
        }
        result
    }

    fn try_entry_with(
        &mut self,
        index: u64,
        raw: &[u8],
        scratch: &mut EntryScratch,
    ) -> Result<(), String> {
        // An entry as HAR writers write it is read by the entry reader of `direct`, its body
        // text decoded on the way. Any other: a plain entry's body text is decoded in the pass
        // that finds it, and serde_json reads the entry without it; the rest are read by
        // serde_json whole, as are entries whose rest it refuses (its message then names the
        // place in the entry as written).
        let EntryScratch { text, cut } = scratch;
        let (e, decoded): (Entry<'_>, _) = match self.body_text.then(|| direct::entry(raw, text)) {
            Some(Some((e, decoded))) => (e, decoded.then_some(text.as_slice())),
            _ => {
                cut.clear();
                let plain = match self.body_text.then(|| body_text::find(raw, text)).flatten() {
                    Some(span) => {
                        cut.extend_from_slice(raw.get(..span.start).unwrap_or_default());
                        cut.extend_from_slice(b"\"\"");
                        cut.extend_from_slice(raw.get(span.end..).unwrap_or_default());
                        serde_json::from_slice::<Entry<'_>>(cut).ok()
                    }
                    None => None,
                };
                match plain {
                    Some(e) => (e, Some(text.as_slice())),
                    None => (
                        serde_json::from_slice(raw).map_err(|e| e.to_string())?,
                        None,
                    ),
                }
            }
        };
        let time_ns = parse_rfc3339(&e.started).ok_or_else(|| {
            let shown: String = e.started.chars().take(40).collect();
            format!("startedDateTime {shown:?} is not an RFC 3339 date-time")
        })?;
        let mark = Mark::new(index, time_ns);
        let req = &e.request;
        let opt = |what: &str, v: Option<&str>| v.map(|v| self.kept(what, v)).transpose();
        let [last_event_id, session_id, protocol_version] = headers_named(
            &req.headers,
            ["last-event-id", "mcp-session-id", "mcp-protocol-version"],
        );
        let last_event_id = opt("Last-Event-ID", last_event_id)?;
        let head = RequestHead {
            exchange: 0,
            method: head_text_owned(self.kept("request.method", &req.method)?),
            target: head_text_owned(self.kept("request.url", &req.url)?),
            session_id: opt("Mcp-Session-Id", session_id)?,
            last_event_id: last_event_id.clone(),
            protocol_version: opt("MCP-Protocol-Version", protocol_version)?.map(head_text_owned),
            first: mark,
            complete: mark,
            // A HAR entry does not name the HTTP/2 stream that carried it.
            h2_stream: None,
        };
        let resp = &e.response;
        // Browsers write 0 (Chrome) or -1 (Playwright) for a request that got no response.
        let status = u16::try_from(resp.status.max(0))
            .ok()
            .filter(|s| *s <= 999)
            .ok_or_else(|| format!("response.status {} is not an HTTP status", resp.status))?;
        // No session stage hears of the entry's request before the entry is over: the list of
        // sessions requests open, made for it, would only be dropped.
        let mut tracker = ExchangeTracker::new(self.limits).without_opened();
        tracker.request(head);
        let mut outcome = BodyOutcome {
            how: BodyEnd::Complete,
            reason: None,
            withhold: false,
        };
        if status == 0 {
            tracker.finish(None, true, mark);
            outcome.reason = Some(NO_RESPONSE);
        } else {
            let [content_type, session_id, content_encoding, content_length] = headers_named(
                &resp.headers,
                [
                    "content-type",
                    "mcp-session-id",
                    "content-encoding",
                    "content-length",
                ],
            );
            let content_type =
                content_type.or(resp.content.mime_type.as_deref().filter(|m| !m.is_empty()));
            // An answer repeating its request's session id is not copied (the tracker takes the
            // request's); being the request's bytes, it would pass the length check theirs did.
            let session_id = session_id.filter(|sid| !tracker.request_named(0, sid.as_bytes()));
            let head = ResponseHead {
                exchange: 0,
                status,
                content_type: opt("response Content-Type", content_type)?.map(head_text_owned),
                session_id: opt("response Mcp-Session-Id", session_id)?,
                content_encoding: opt("Content-Encoding", content_encoding)?,
                first: mark,
                complete: mark,
                h2_stream: None,
            };
            let wants_body = head.is_event_stream();
            tracker.response(head);
            // Every event stream is read, not only resumed ones: earlier streams give the
            // session its facts (what was delivered, to which session).
            if wants_body {
                let last = last_event_id.as_deref().unwrap_or("");
                let lengths = (content_encoding, content_length);
                outcome = self.feed_body(&e, decoded, lengths, last, &mut tracker, mark)?;
            }
            tracker.body_end(0, outcome.how, mark);
        }
        self.report.http_exchanges += tracker.exchanges;
        self.report.sessions.extend(tracker.session_ids.iter());
        for mut r in tracker.resumes.drain(..) {
            let answered_stream = r.status.is_some_and(|s| (200..300).contains(&s));
            if outcome.withhold && answered_stream && r.decision.verdict != Verdict::Rejected {
                r.decision = Decision {
                    verdict: Verdict::CaptureIncomplete,
                    reason: outcome.reason.unwrap_or(CUT_BODY),
                    lost: None,
                    replayed_count: None,
                };
                if r.first_id_after_gap.is_none() {
                    r.first_id_after_gap = r.first_event_id.take();
                }
                r.first_event_id = None;
                r.first_event = None;
                r.first_event_id_truncated = false;
            } else if r.decision.verdict == Verdict::CaptureIncomplete
                && let Some(reason) = outcome.reason
            {
                r.decision.reason = reason;
            }
            r.connection = ConnectionRef {
                tcp_stream: None,
                client: None,
                server: None,
                har_entry: Some(index),
                tls: None,
            };
            self.report.resumes.push(r);
        }
        for mut x in tracker.summaries.drain(..) {
            x.connection.har_entry = Some(index);
            self.report.summaries.push(x);
        }
        Ok(())
    }

    /// Decodes and feeds the body of an event stream (`last_event_id` empty when it is no
    /// resume; `decoded`, its body text when that was decoded ahead); says how it ended.
    fn feed_body(
        &mut self,
        e: &Entry<'_>,
        decoded: Option<&[u8]>,
        (content_encoding, content_length): (Option<&str>, Option<&str>),
        last_event_id: &str,
        tracker: &mut ExchangeTracker,
        mark: Mark,
    ) -> Result<BodyOutcome, String> {
        let resp = &e.response;
        let c = &resp.content;
        let base64 = match c.encoding.as_deref().map(str::trim) {
            None | Some("") => false,
            Some(enc) if enc.eq_ignore_ascii_case("base64") => true,
            Some(enc) => {
                let shown: String = enc.chars().take(40).collect();
                return Err(format!(
                    "content.encoding {shown:?} is not supported (only base64)"
                ));
            }
        };
        let text = match &c.text {
            Some(raw) if raw.0.first() != Some(&b'"') => {
                return Err("response.content.text is not a string".to_string());
            }
            other => other.as_ref().map(|raw| raw.0),
        };
        let messages = e.event_source_messages.as_deref().filter(|m| !m.is_empty());
        let mut sink = BodySink {
            tracker,
            mark,
            base64: base64.then(Base64::default),
            out: Vec::new(),
            fed: 0,
        };
        let mut ambiguous = false;
        let source = if let Some(body) = decoded.filter(|t| !t.is_empty()) {
            body.chunks(BODY_CHUNK)
                .try_for_each(|piece| sink.push(piece))?;
            BodySource::Text
        } else if let Some(raw) = text.filter(|t| t.len() > 2) {
            feed_text(raw, &mut |piece| sink.push(piece))?;
            BodySource::Text
        } else if let Some(file) = c.file.as_deref() {
            self.feed_file(file, &mut sink)?
        } else if let Some(messages) = messages {
            ambiguous = feed_messages(messages, last_event_id, &mut sink)?;
            BodySource::Messages
        } else if text.is_some() {
            BodySource::Empty
        } else {
            BodySource::Absent
        };
        sink.finish()?;
        let fed = sink.fed;
        // An empty body is empty wherever it was kept (Playwright writes an empty file).
        let source = match source {
            BodySource::Text | BodySource::File if fed == 0 => BodySource::Empty,
            other => other,
        };

        // What the entry says of the body's length. Content.size is the decoded length by the
        // HAR spec, but some tools write the encoded length: it is only compared when the
        // body was not content-encoded.
        let encoded = content_encoding
            .is_some_and(|v| v.split(',').any(|c| !matches!(c.trim(), "" | "identity")));
        let declared = (!encoded)
            .then_some(content_length)
            .flatten()
            .and_then(|v| v.parse::<u64>().ok());
        let size_says_more = !encoded && c.size.is_some_and(|s| s.is_finite() && s > fed as f64);
        let comment_says_cut = [c.comment.as_deref(), resp.comment.as_deref()]
            .into_iter()
            .flatten()
            .any(says_cut);
        let cut = size_says_more || comment_says_cut || declared.is_some_and(|d| d > fed);
        let whole = !cut && declared == Some(fed);

        // Only the entry's own length proves a body whole; otherwise its end is not seen, and
        // an id-less stream stays undecided instead of `empty`.
        let not_seen_to_end = BodyEnd::Stream(StreamEnd::CaptureEnd);
        let how = if whole {
            BodyEnd::Complete
        } else {
            not_seen_to_end
        };
        let outcome = |how, reason, withhold| BodyOutcome {
            how,
            reason: Some(reason),
            withhold,
        };
        Ok(match source {
            BodySource::Absent => outcome(how, NO_BODY, false),
            BodySource::Empty => outcome(how, EMPTY_BODY, false),
            BodySource::FileMissing => outcome(not_seen_to_end, FILE_MISSING, false),
            BodySource::Text | BodySource::File if cut => outcome(not_seen_to_end, CUT_BODY, true),
            BodySource::Text | BodySource::File => outcome(how, NO_ID_UNPROVEN, false),
            // Live dispatches of a stream that may still have been open.
            BodySource::Messages if ambiguous => outcome(not_seen_to_end, MESSAGES_AMBIGUOUS, true),
            BodySource::Messages => outcome(not_seen_to_end, MESSAGES_NO_ID, false),
        })
    }

    /// Streams an attached body file (Playwright's `content._file`) from beside the HAR.
    fn feed_file(&mut self, file: &str, sink: &mut BodySink<'_>) -> Result<BodySource, String> {
        let plain = !file.is_empty()
            && file != "."
            && file != ".."
            && !file.contains(['/', '\\', '\0'])
            && file.len() <= 255;
        if !plain {
            let shown: String = file.chars().take(40).collect();
            return Err(format!(
                "content._file {shown:?} is not a plain file name beside the HAR"
            ));
        }
        let path = self.dir.join(file);
        let mut f = match File::open(&path) {
            Ok(f) => f,
            Err(err) => {
                self.report.messages.push((
                    false,
                    format!(
                        "{}: body file {} cannot be opened: {err}",
                        self.name,
                        path.display()
                    ),
                ));
                return Ok(BodySource::FileMissing);
            }
        };
        let mut buf = vec![0u8; BODY_CHUNK];
        loop {
            match f.read(&mut buf) {
                Ok(0) => return Ok(BodySource::File),
                Ok(n) => sink.push(buf.get(..n).unwrap_or(&[]))?,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("body file {}: read error: {e}", path.display())),
            }
        }
    }
}

/// Feeds a body text (`raw`, the JSON string literal) in pieces: serde_json decodes the
/// escapes into its own buffer and lends it out, so the decoded body exists once, beside the
/// entry's raw JSON (a `String` or `Cow` would be a second copy).
fn feed_text(raw: &[u8], out: &mut dyn FnMut(&[u8]) -> Result<(), String>) -> Result<(), String> {
    struct Feed<'o>(&'o mut dyn FnMut(&[u8]) -> Result<(), String>);
    impl serde::de::Visitor<'_> for Feed<'_> {
        /// What the sink said (serde_json's own errors travel outside).
        type Value = Result<(), String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
            Ok(text
                .as_bytes()
                .chunks(BODY_CHUNK)
                .try_for_each(|piece| (self.0)(piece)))
        }
    }
    let mut de = serde_json::Deserializer::from_slice(raw);
    let fed =
        serde::Deserializer::deserialize_str(&mut de, Feed(out)).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    fed
}

/// True when a HAR comment says the body was cut or left out (HTTP Toolkit, Firefox-style
/// notes, proxies with body limits).
fn says_cut(comment: &str) -> bool {
    let lower = comment.to_ascii_lowercase();
    ["truncat", "discard", "cut short", "too large", "exceed"]
        .iter()
        .any(|w| lower.contains(w))
}

/// Writes `_eventSourceMessages` as the event stream they were parsed from.
///
/// Browsers report each event's *last event id*, which an event without an `id` field
/// inherits from the one before it (and, for an EventSource, from the `Last-Event-ID` it
/// reconnected with). So an id is written only where it changes; a first event reporting
/// `Last-Event-ID` itself is ambiguous (a replay of that id, or no id at all), which the
/// return value says. An empty id is no id.
fn feed_messages(
    messages: &[EventSourceMessage<'_>],
    last_event_id: &str,
    sink: &mut BodySink<'_>,
) -> Result<bool, String> {
    let mut previous: Option<&str> = Some(last_event_id).filter(|l| !l.is_empty());
    let mut ambiguous = false;
    let mut block: Vec<u8> = Vec::new();
    for (k, m) in messages.iter().enumerate() {
        block.clear();
        let id = m.event_id.as_deref().filter(|id| !id.is_empty());
        if let Some(id) = id
            && id.contains(['\r', '\n'])
        {
            return Err(format!(
                "_eventSourceMessages[{k}].eventId holds a line break"
            ));
        }
        if k == 0 && id.is_some() && id == previous {
            ambiguous = true;
        }
        if let Some(name) = m.event_name.as_deref()
            && !name.is_empty()
        {
            block.extend_from_slice(b"event: ");
            // A name is one line; anything after a line break would be read as fields.
            let line = name.split(['\r', '\n']).next().unwrap_or("");
            block.extend_from_slice(line.as_bytes());
            block.push(b'\n');
        }
        if id.is_some() && id != previous {
            block.extend_from_slice(b"id: ");
            block.extend_from_slice(id.unwrap_or("").as_bytes());
            block.push(b'\n');
            previous = id;
        }
        // Each line of the data becomes a data field: no byte of it can be read as a field.
        let data = m.data.as_deref().unwrap_or("");
        let mut rest = data;
        loop {
            let cut = rest.find(['\r', '\n']);
            let (line, tail) = match cut {
                Some(i) => {
                    let skip = if rest.get(i..i + 2) == Some("\r\n") {
                        2
                    } else {
                        1
                    };
                    (
                        rest.get(..i).unwrap_or(""),
                        rest.get(i + skip..).unwrap_or(""),
                    )
                }
                None => (rest, ""),
            };
            block.extend_from_slice(b"data: ");
            block.extend_from_slice(line.as_bytes());
            block.push(b'\n');
            if cut.is_none() {
                break;
            }
            rest = tail;
        }
        block.push(b'\n');
        for piece in block.chunks(BODY_CHUNK) {
            // Synthesized text is never base64: bypass the decoder.
            sink.fed += piece.len() as u64;
            sink.tracker.body(0, piece, sink.mark);
        }
    }
    Ok(ambiguous)
}

/// Base64 as HAR writers use it: the standard alphabet, `=` padding only at the end, where it
/// may also be left out; stray bits in the last character are ignored, as browsers do.
const HAR_BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// Streaming strict base64 over [`HAR_BASE64`]: whole groups of four are decoded as they come,
/// at most three characters are held between calls. Errors name the byte offset in the text.
#[derive(Debug, Default)]
pub struct Base64 {
    carry: Vec<u8>,
    /// Input bytes decoded so far (the carry not included), for error positions.
    seen: u64,
    /// A group ended in padding: nothing may follow.
    padded: bool,
}

impl Base64 {
    /// Decodes the next input bytes, appending to `out`.
    pub fn decode(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        if input.is_empty() {
            return Ok(());
        }
        if self.padded {
            return Err(self.after_padding());
        }
        if !self.carry.is_empty() {
            let (more, rest) = input.split_at((4 - self.carry.len()).min(input.len()));
            self.carry.extend_from_slice(more);
            input = rest;
            if self.carry.len() < 4 {
                return Ok(());
            }
            let group = std::mem::take(&mut self.carry);
            self.groups(&group, out)?;
            if !input.is_empty() && self.padded {
                return Err(self.after_padding());
            }
        }
        let (whole, rest) = input.split_at(input.len() / 4 * 4);
        self.groups(whole, out)?;
        if !rest.is_empty() && self.padded {
            return Err(self.after_padding());
        }
        self.carry.extend_from_slice(rest);
        Ok(())
    }

    /// Ends the input: decodes a final partial group.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
        let carry = std::mem::take(&mut self.carry);
        let result = match carry.len() {
            0 => Ok(()),
            1 => Err("invalid base64: a lone final character".to_string()),
            _ => self.groups(&carry, out),
        };
        *self = Base64::default();
        result
    }

    fn after_padding(&self) -> String {
        format!(
            "invalid base64: data after the padding at byte {}",
            self.seen
        )
    }

    /// Decodes whole groups (or the final partial one), naming a bad byte by its offset.
    fn groups(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        if input.is_empty() {
            return Ok(());
        }
        let base = self.seen;
        HAR_BASE64.decode_vec(input, out).map_err(|e| match e {
            base64::DecodeError::InvalidByte(at, b'=') => {
                format!(
                    "invalid base64: misplaced padding at byte {}",
                    base + at as u64
                )
            }
            base64::DecodeError::InvalidByte(at, b)
            | base64::DecodeError::InvalidLastSymbol {
                offset: at,
                symbol: b,
                ..
            } => format!("invalid base64: byte 0x{b:02x} at {}", base + at as u64),
            base64::DecodeError::InvalidLength(_) => {
                "invalid base64: a lone final character".to_string()
            }
            base64::DecodeError::InvalidPadding => "invalid base64: incomplete padding".to_string(),
        })?;
        self.seen += input.len() as u64;
        self.padded = input.last() == Some(&b'=');
        Ok(())
    }
}

/// An RFC 3339 date-time (`YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, as jiff reads it: `t`,
/// `z` and a space are accepted too, and so is `±HHMM`) to nanoseconds since the Unix epoch;
/// `None` when malformed or outside what i64 nanoseconds hold (years 1678 to 2261).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    // HAR writers put at most nine fraction digits; a longer text is not a date-time of theirs.
    if s.len() > 64 {
        return None;
    }
    let t: jiff::Timestamp = s.parse().ok()?;
    i64::try_from(t.as_nanosecond()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::{InputReport, Options, analyze_reader};

    /// Hands out the input in pieces of the sizes a generator chooses.
    struct Pieces<'a, F: FnMut() -> usize> {
        data: &'a [u8],
        next: F,
    }

    impl<F: FnMut() -> usize> Read for Pieces<'_, F> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = (self.next)().max(1).min(buf.len()).min(self.data.len());
            let (head, tail) = self.data.split_at(n);
            buf[..n].copy_from_slice(head);
            self.data = tail;
            Ok(n)
        }
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    fn fixture(rel: &str) -> Vec<u8> {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/har")
            .join(rel);
        std::fs::read(p).unwrap()
    }

    /// What a report says, in a comparable form.
    fn summary(r: &InputReport) -> String {
        format!(
            "{:?}\n{:?}\n{:?}\n{:?}",
            r.resumes, r.sessions, r.messages, r.stats
        )
    }

    fn analyze_every_way(name: &str, data: &[u8]) -> String {
        let opts = Options::default();
        let whole = summary(&analyze_reader(name, data, &opts));
        let by_byte = summary(&analyze_reader(name, Pieces { data, next: || 1 }, &opts));
        assert_eq!(whole, by_byte, "{name}: byte by byte");
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..20 {
            let max = 1 + (rng.next() % 700) as usize;
            let mut r2 = Rng(rng.next() | 1);
            let split = summary(&analyze_reader(
                name,
                Pieces {
                    data,
                    next: move || 1 + (r2.next() as usize % max),
                },
                &opts,
            ));
            assert_eq!(whole, split, "{name}: random splits up to {max}");
        }
        whole
    }

    fn threads(n: usize) -> Options {
        Options {
            threads: n,
            ..Options::default()
        }
    }

    /// `read_har_bounded`'s answer in a comparable form (the session set by its members).
    /// Handed on as the entries are read, the records are the same, in the same order, none
    /// left in the report, each resume in the same call as its exchange's summary.
    fn exchanges(data: &[u8], cap: usize, threads: usize) -> String {
        let (mut resumes, mut summaries) = (Vec::new(), Vec::new());
        let mut emit = |rs: Vec<Box<ResumeRecord>>, xs: Vec<Box<ExchangeSummary>>| {
            for r in &rs {
                assert!(
                    xs.iter()
                        .any(|x| x.connection.har_entry == r.connection.har_entry),
                    "{r:?}"
                );
            }
            resumes.extend(rs);
            summaries.extend(xs);
        };
        let limits = Limits::default();
        let streamed = read_har_bounded("t.har", data, &limits, cap, threads, Some(&mut emit));
        assert!(streamed.resumes.is_empty() && streamed.summaries.is_empty());
        let r = read_har_bounded("t.har", data, &limits, cap, threads, None);
        assert_eq!(format!("{resumes:?}"), format!("{:?}", r.resumes));
        assert_eq!(format!("{summaries:?}"), format!("{:?}", r.summaries));
        assert_eq!(streamed.messages, r.messages);
        let sessions: Vec<u64> = r.sessions.iter().collect();
        format!(
            "{:?}\n{:?}\n{:?}\n{}\n{sessions:?}",
            r.resumes, r.summaries, r.messages, r.http_exchanges
        )
    }

    /// A HAR of `n` entries of every kind the entry threads meet: small ones handed over in
    /// batches, large ones alone, ones that are not objects or not entries, one naming a body
    /// file that is not there.
    fn assorted_har(n: usize) -> Vec<u8> {
        let mut rng = Rng(0xA5A5_1234_5678_9ABC);
        let mut doc = String::from("{\"log\":{\"version\":\"1.2\",\"entries\":[");
        for i in 0..n {
            if i > 0 {
                doc.push(',');
            }
            match rng.next() % 16 {
                0 => doc.push_str("[1,2]"),
                1 => doc.push_str("{\"startedDateTime\":5}"),
                2 => doc.push_str(
                    "{\"startedDateTime\":\"2026-11-09T10:00:00Z\",\"request\":{\"method\":\"GET\",\
                     \"url\":\"/mcp\",\"headers\":[]},\"response\":{\"status\":200,\"headers\":[],\
                     \"content\":{\"mimeType\":\"text/event-stream\",\"_file\":\"gone.txt\"}}}",
                ),
                k => {
                    // Bodies from a few bytes to past the batch size.
                    let events = match k {
                        3 => 800 + (rng.next() % 400) as usize,
                        _ => (rng.next() % 40) as usize,
                    };
                    let first = rng.next() % 3;
                    let mut body = String::new();
                    for e in 0..events {
                        body.push_str(&format!(
                            "id: {}\\ndata: {{\\\"n\\\":{e},\\\"pad\\\":\\\"{}\\\"}}\\n\\n",
                            first + e as u64 + 1,
                            "x".repeat(60)
                        ));
                    }
                    let resume = if i % 3 == 0 {
                        ",{\"name\":\"Last-Event-ID\",\"value\":\"1\"}"
                    } else {
                        ""
                    };
                    doc.push_str(&format!(
                        "{{\"startedDateTime\":\"2026-11-09T10:{:02}:{:02}.000Z\",\
                         \"request\":{{\"method\":\"GET\",\"url\":\"http://h/mcp\",\"headers\":\
                         [{{\"name\":\"Mcp-Session-Id\",\"value\":\"s{}\"}}{resume}]}},\
                         \"response\":{{\"status\":200,\"headers\":[{{\"name\":\"Content-Length\",\
                         \"value\":\"{}\"}}],\"content\":{{\"mimeType\":\"text/event-stream\",\
                         \"text\":\"{body}\"}}}}}}",
                        (i / 60) % 60,
                        i % 60,
                        i % 7,
                        body.len() - body.matches("\\").count(),
                    ));
                }
            }
        }
        doc.push_str("]}}");
        doc.into_bytes()
    }

    #[test]
    fn entry_threads_give_what_one_thread_gives() {
        let doc = assorted_har(400);
        let one = exchanges(&doc, MAX_ENTRY_BYTES, 1);
        assert!(
            one.contains("GapSkipped") || one.contains("Correct"),
            "{one}"
        );
        assert!(
            one.contains("not a JSON object") && one.contains("gone.txt"),
            "{one}"
        );
        assert!(doc.len() > 4 * BATCH_BYTES, "large entries are made");
        for t in [2, 3, 5] {
            assert_eq!(one, exchanges(&doc, MAX_ENTRY_BYTES, t), "{t} threads");
            // Entries over the cap are skipped where they are read, between the others.
            assert_eq!(
                exchanges(&doc, 20_000, 1),
                exchanges(&doc, 20_000, t),
                "{t}"
            );
        }
        // Cut anywhere: the entries before the cut, the same error after them.
        let mut rng = Rng(11);
        for _ in 0..30 {
            let cut = (rng.next() as usize) % doc.len();
            let doc = &doc[..cut];
            assert_eq!(
                exchanges(doc, MAX_ENTRY_BYTES, 1),
                exchanges(doc, MAX_ENTRY_BYTES, 2)
            );
        }
        // The whole pipeline, fixtures included, read in pieces.
        for (name, data) in [
            ("assorted.har", doc.clone()),
            ("mixed.har", fixture("mixed.har")),
            ("quirk-zhar.zhar", fixture("quirk-zhar.zhar")),
        ] {
            let want = summary(&analyze_reader(name, &data[..], &threads(1)));
            for t in [2, 3] {
                let got = analyze_reader(name, &data[..], &threads(t));
                assert_eq!(want, summary(&got), "{name}: {t} threads");
                let mut r = Rng(t as u64);
                let split = analyze_reader(
                    name,
                    Pieces {
                        data: &data,
                        next: move || 1 + (r.next() % 5000) as usize,
                    },
                    &threads(t),
                );
                assert_eq!(want, summary(&split), "{name}: {t} threads, pieces");
            }
        }
    }

    #[test]
    fn a_zlib_error_is_given_again_on_every_later_read() {
        let mut bad = fixture("quirk-zhar.zhar");
        let last = bad.len() - 1;
        bad[last] ^= 0x55;
        for step in [1usize, 7, 4096] {
            let mut z = ZlibInput::new(Pieces {
                data: &bad,
                next: move || step,
            });
            let mut out = vec![0u8; 333];
            let first = loop {
                match z.read(&mut out) {
                    Ok(0) => panic!("no error at the end"),
                    Ok(_) => {}
                    Err(e) => break e.to_string(),
                }
            };
            for _ in 0..3 {
                let again = z.read(&mut out).expect_err("the error stays");
                assert_eq!(again.to_string(), first, "read size {step}");
            }
        }
    }

    #[test]
    fn a_damaged_zhar_gives_the_same_answer_however_it_is_read() {
        let good = fixture("quirk-zhar.zhar");
        let whole = analyze_every_way("quirk-zhar.zhar", &good);
        // The last four bytes are the checksum of the inflated document: with it wrong, every
        // byte is still inflated, and the error comes after them.
        let mut bad = good.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0x55;
        let damaged = analyze_every_way("quirk-zhar.zhar", &bad);
        let r = analyze_reader("quirk-zhar.zhar", &bad[..], &Options::default());
        assert!(r.failed(), "{:?}", r.messages);
        assert!(!r.resumes.is_empty());
        assert_eq!(
            whole.lines().next(),
            damaged.lines().next(),
            "the resumes are all read before the checksum"
        );
        // Cut short in the middle of the stream: what was inflated is read, the same way.
        analyze_every_way("quirk-zhar.zhar", &good[..good.len() / 2]);
        // Damage anywhere in the deflate data: wherever the decoder notices it, the answer is
        // the same however the file is read.
        for at in (2..good.len() - 4).step_by(good.len() / 40 + 1) {
            let mut bad = good.clone();
            bad[at] ^= 0xa5;
            analyze_every_way("quirk-zhar.zhar", &bad);
        }
    }

    #[test]
    fn the_same_answer_however_the_file_is_read() {
        for name in [
            "mixed.har",
            "quirk-unsorted.har",
            "quirk-bom-crlf.har",
            "quirk-json-escapes.har",
            "quirk-base64.har",
            "quirk-zhar.zhar",
            "quirk-event-source-messages.har",
        ] {
            let data = fixture(name);
            let got = analyze_every_way(name, &data);
            assert!(got.contains("har_entry: Some("), "{name}: {got}");
        }
    }

    #[test]
    fn entries_are_cited_by_index_and_sorted_by_time() {
        let data = fixture("quirk-unsorted.har");
        let r = analyze_reader("u.har", &data[..], &Options::default());
        let order: Vec<(Option<u64>, Verdict)> = r
            .resumes
            .iter()
            .map(|x| (x.connection.har_entry, x.decision.verdict))
            .collect();
        assert_eq!(
            order,
            vec![
                (Some(4), Verdict::GapSkipped),
                (Some(0), Verdict::Correct),
                (Some(1), Verdict::Replayed)
            ]
        );
        assert!(r.resumes.iter().all(|x| x.connection.tcp_stream.is_none()));
        assert_eq!(r.resumes[0].request.frame, 4);
        assert_eq!(r.stats.http_exchanges, 5);
        assert!(r.messages.is_empty(), "{:?}", r.messages);
    }

    #[test]
    fn a_cut_file_keeps_the_entries_before_the_cut() {
        let data = fixture("mixed.har");
        let whole = analyze_reader("m.har", &data[..], &Options::default());
        assert_eq!(whole.resumes.len(), 7);
        let mut rng = Rng(7);
        for _ in 0..200 {
            let cut = (rng.next() as usize) % data.len();
            let r = analyze_reader("m.har", &data[..cut], &Options::default());
            assert!(r.failed(), "cut at {cut}");
            assert!(r.resumes.len() <= whole.resumes.len());
            for got in &r.resumes {
                assert!(whole.resumes.contains(got), "cut at {cut}: {got:?}");
            }
            let text = &r.messages[0].1;
            assert!(text.starts_with("m.har: "), "{text}");
            assert!(!text.contains('\n'), "{text}");
        }
    }

    #[test]
    fn damaged_bytes_never_panic() {
        let data = fixture("mixed.har");
        let mut rng = Rng(99);
        for _ in 0..300 {
            let mut bad = data.clone();
            for _ in 0..(1 + rng.next() % 8) {
                let at = (rng.next() as usize) % bad.len();
                bad[at] = b"{}[]\":,\\x0 "[(rng.next() % 11) as usize];
            }
            let _ = analyze_reader("d.har", &bad[..], &Options::default());
        }
    }

    #[test]
    fn an_oversized_entry_is_skipped_and_named() {
        let data = fixture("mixed.har");
        let report = read_har_bounded("m.har", &data[..], &Limits::default(), 1500, 1, None);
        let errors: Vec<&String> = report.messages.iter().map(|(_, t)| t).collect();
        assert!(!errors.is_empty());
        assert!(
            errors
                .iter()
                .all(|t| t.contains("larger than 1500 bytes; skipped")),
            "{errors:?}"
        );
        // The small resume entries still went through.
        assert!(!report.resumes.is_empty());
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let mut doc = b"{\"x\":".to_vec();
        doc.extend(std::iter::repeat_n(b'[', 100_000));
        let r = analyze_reader("n.har", &doc[..], &Options::default());
        assert!(r.messages[0].1.contains("nesting"), "{:?}", r.messages);
        let mut doc = b"{\"log\":{\"entries\":[".to_vec();
        doc.extend(std::iter::repeat_n(b'[', 400));
        doc.extend(std::iter::repeat_n(b']', 400));
        doc.extend_from_slice(b"]}}");
        let r = analyze_reader("n.har", &doc[..], &Options::default());
        assert_eq!(r.messages.len(), 1, "{:?}", r.messages);
        assert!(r.messages[0].1.contains("entry 0: not a JSON object"));
    }

    #[test]
    fn not_har_documents() {
        for (doc, want) in [
            (&b"{\"foo\": 1}"[..], "no \"log\" object"),
            (b"{\"log\": []}", "\"log\" is not an object"),
            (b"{\"log\": {\"version\": \"1.2\"}}", "no \"entries\" array"),
            (
                b"{\"log\": {\"entries\": {}}}",
                "\"log.entries\" is not an array",
            ),
            (b"{\"log\": {\"entries\": [", "the file ends"),
            (b"{\"log\" {}}", "expected ':'"),
            (b"{", "expected a member name"),
        ] {
            let r = analyze_reader("x.har", doc, &Options::default());
            assert_eq!(r.messages.len(), 1, "{doc:?}");
            assert!(r.messages[0].1.contains(want), "{doc:?}: {:?}", r.messages);
        }
        let r = analyze_reader(
            "x.har",
            &b"{\"log\":{\"entries\":[]}} x"[..],
            &Options::default(),
        );
        assert!(!r.failed());
        assert!(r.messages[0].1.contains("data after the end"));
    }

    #[test]
    fn rfc3339_times() {
        let base = 1_762_682_400_000_000_000i64; // 2025-11-09T10:00:00Z
        for (s, want) in [
            ("2025-11-09T10:00:00Z", Some(base)),
            ("2025-11-09T10:00:00.5Z", Some(base + 500_000_000)),
            ("2025-11-09T10:00:00.123456789Z", Some(base + 123_456_789)),
            // More than nanoseconds: refused by jiff.
            ("2025-11-09T10:00:00.123456789123Z", None),
            ("2025-11-09T11:00:00+01:00", Some(base)),
            ("2025-11-09T05:00:00-0500", Some(base)),
            ("2025-11-09t10:00:00.000z", Some(base)),
            ("2025-11-09 10:00:00+00:00", Some(base)),
            ("1970-01-01T00:00:00Z", Some(0)),
            ("1969-12-31T23:59:59.999999999Z", Some(-1)),
            ("2024-02-29T00:00:00Z", Some(1_709_164_800_000_000_000)),
            ("2023-02-29T00:00:00Z", None),
            ("2025-13-01T00:00:00Z", None),
            ("2025-11-09T24:00:00Z", None),
            ("2025-11-09T10:00:00", None),
            ("2025-11-09T10:00:00.Z", None),
            ("2025-11-09T10:00:00Zjunk", None),
            // jiff takes offsets up to ±25:59, as Temporal does.
            ("2025-11-09T10:00:00+26:00", None),
            ("9999-12-31T23:59:59Z", None),
            ("", None),
            ("2025-11-0\u{669}T10:00:00Z", None),
        ] {
            assert_eq!(parse_rfc3339(s), want, "{s}");
        }
    }

    fn b64(input: &[u8], split: usize) -> Result<Vec<u8>, String> {
        let mut d = Base64::default();
        let mut out = Vec::new();
        let (a, b) = input.split_at(split.min(input.len()));
        d.decode(a, &mut out)?;
        d.decode(b, &mut out)?;
        d.finish(&mut out)?;
        Ok(out)
    }

    #[test]
    fn base64_strict_and_split_invariant() {
        for (enc, dec) in [
            ("", &b""[..]),
            ("Zg==", b"f"),
            ("Zm8=", b"fo"),
            ("Zm9v", b"foo"),
            ("Zm9vYg==", b"foob"),
            ("Zm9vYmE=", b"fooba"),
            ("Zm9vYmFy", b"foobar"),
            ("Zm9vYg", b"foob"),
            ("+/8=", &[0xfb, 0xff][..]),
        ] {
            for split in 0..=enc.len() {
                assert_eq!(
                    b64(enc.as_bytes(), split).as_deref(),
                    Ok(dec),
                    "{enc} at {split}"
                );
            }
        }
        for bad in [
            "Z", "Zm9vY", "Zg=x", "=Zg=", "Zg===", "Zm 9v", "Zm9v\n", "Zm-_", "Z===",
        ] {
            for split in 0..=bad.len() {
                assert!(b64(bad.as_bytes(), split).is_err(), "{bad} at {split}");
            }
        }
    }

    fn text(raw: &str) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        feed_text(raw.as_bytes(), &mut |p| {
            assert!(!p.is_empty() && p.len() <= BODY_CHUNK);
            out.extend_from_slice(p);
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn body_texts_are_unescaped_and_fed_in_pieces() {
        assert_eq!(
            text(r#""a\nb\"\\\/\t\r\b\f""#).unwrap(),
            b"a\nb\"\\/\t\r\x08\x0c"
        );
        assert_eq!(
            text(r#""caf\u00e9 \ud83d\ude00""#).unwrap(),
            "café \u{1F600}".as_bytes()
        );
        // Not text: a lone surrogate, a bad escape, a cut literal, something after it.
        for bad in [
            r#""\ud83d x""#,
            r#""\x""#,
            r#""\u12""#,
            r#""abc"#,
            r#""a" 1"#,
        ] {
            assert!(text(bad).is_err(), "{bad}");
        }
        // Long bodies come out whole, in bounded pieces, with and without escapes.
        let body: String = (0..40_000).map(|i| format!("id: {i}\\n")).collect();
        let want: String = (0..40_000).map(|i| format!("id: {i}\n")).collect();
        assert_eq!(text(&format!("\"{body}\"")).unwrap(), want.as_bytes());
        let plain = "x".repeat(3 * BODY_CHUNK + 5);
        assert_eq!(text(&format!("\"{plain}\"")).unwrap(), plain.as_bytes());
        // What the sink refuses is what feed_text says.
        let refused = feed_text(b"\"abc\"", &mut |_| Err("no".to_string()));
        assert_eq!(refused, Err("no".to_string()));
    }

    fn sse_entry(text: &str, tail: &str) -> String {
        format!(
            r#"{{"startedDateTime":"2026-11-09T10:00:00.000Z","request":{{"method":"GET","url":"http://h/mcp","headers":[{{"name":"Mcp-Session-Id","value":"s1"}},{{"name":"Last-Event-ID","value":"3"}}]}},"response":{{"status":200,"headers":[{{"name":"Content-Type","value":"text/event-stream"}}],"content":{{"size":-1,"text":{text}{tail}}}}}}}"#
        )
    }

    #[test]
    fn a_body_text_decoded_on_its_own_gives_what_serde_json_gives() {
        // The plain entry takes the quick reading (else this test compares nothing).
        let plain = sse_entry(r#""id: 4\ndata: {\"a\":\"\u00e9\ud83d\ude00\"}\n\n""#, "");
        assert!(super::body_text::find(plain.as_bytes(), &mut Vec::new()).is_some());
        let (fast, general) = entry_readings(plain.as_bytes());
        assert!(fast.contains("first_event_id: Some(\"4\")"), "{fast}");
        assert_eq!(fast, general);

        // Pieces of a body text, valid and not, in random order; and the entry around it,
        // changed at random places.
        let valid: [&[u8]; 15] = [
            b"\\r",
            b"\\n",
            b"data: ",
            b"{\\\"x\\\":1}",
            b"\\\\",
            b"\\/",
            b"\\b\\f\\t",
            b"\\u00e9",
            b"\\u20AC",
            b"\\ud83d\\ude00",
            "caf\u{e9}".as_bytes(),
            b"\x7f",
            b"\\u0000",
            b"\\n\\n",
            b"retry: 10",
        ];
        let invalid: [&[u8]; 9] = [
            b"\\ud83d", b"\\udc00", b"\\u12", b"\\x", b"\xff", b"\xc3", b"\x01", b"\n", b"\"",
        ];
        let tails = [
            "",
            r#","text":"b""#,
            r#","encoding":"base64""#,
            r#","te\u0078t":"b""#,
            " x",
        ];
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        let mut fast_taken = 0;
        for round in 0..3000 {
            // The text opens an id line: what the pieces decode to shows in the resume's
            // first event id, up to the first line end.
            let mut text = b"\"id: ".to_vec();
            for _ in 0..rng.next() % 12 {
                let r = rng.next();
                let piece = if r.is_multiple_of(16) {
                    invalid[(r >> 8) as usize % invalid.len()]
                } else {
                    valid[(r >> 8) as usize % valid.len()]
                };
                text.extend_from_slice(piece);
            }
            text.push(b'"');
            let tail = tails[(rng.next() % 8) as usize % tails.len()];
            let mut raw = sse_entry("@", tail).into_bytes();
            let at = raw.iter().position(|&b| b == b'@').expect("placeholder");
            raw.splice(at..at + 1, text);
            if round % 3 == 0 {
                // A byte changed, dropped or added somewhere in the entry.
                damage(&mut raw, &mut rng, b"\"{}[],:\\ a0");
            }
            if super::body_text::find(&raw, &mut Vec::new()).is_some() {
                fast_taken += 1;
            }
            let (fast, general) = entry_readings(&raw);
            assert_eq!(fast, general, "{}", String::from_utf8_lossy(&raw));
        }
        assert!(
            fast_taken > 300,
            "only {fast_taken} entries took the quick reading"
        );
    }

    /// One byte of `raw` changed to one of `bytes`, dropped, or one of `bytes` added, at a
    /// random place.
    fn damage(raw: &mut Vec<u8>, rng: &mut Rng, bytes: &[u8]) {
        let at = (rng.next() % raw.len() as u64) as usize;
        let byte = bytes[(rng.next() % bytes.len() as u64) as usize];
        match rng.next() % 3 {
            0 => raw[at] = byte,
            1 => {
                raw.remove(at);
            }
            _ => raw.insert(at, byte),
        }
    }

    /// The `.har` files under `dir`, in its subdirectories too.
    fn hars_under(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                hars_under(&p, out);
            } else if p.extension().is_some_and(|x| x == "har") {
                out.push(p);
            }
        }
    }

    #[test]
    fn the_committed_hars_read_directly_are_read_as_serde_json_reads_them() {
        let mut files = Vec::new();
        hars_under(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures"),
            &mut files,
        );
        let (mut entries, mut direct) = (0, 0);
        for f in &files {
            for raw in entries_of(&std::fs::read(f).unwrap()) {
                entries += 1;
                match direct_reading_agrees(&raw) {
                    Ok(taken) => direct += usize::from(taken),
                    Err(e) => panic!("{}: {e}", f.display()),
                }
            }
        }
        assert!(
            files.len() >= 20 && entries >= 200,
            "{} files, {entries} entries",
            files.len()
        );
        // All but the malformed ones and their like.
        assert!(
            direct * 10 >= entries * 9,
            "{direct} of {entries} entries read directly"
        );
    }

    #[test]
    fn entries_changed_at_random_read_directly_are_read_as_serde_json_reads_them() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let seeds: Vec<Vec<u8>> = [
            "har-real/chromium-embed.har",
            "har-real/mitmproxy-streamed.har",
            "har/mixed.har",
        ]
        .iter()
        .flat_map(|f| entries_of(&std::fs::read(root.join(f)).unwrap()))
        .collect();
        assert!(seeds.len() > 30);
        let bytes = b"\"{}[],:\\ a0-.eE1nul\x01\xc3tf";
        let mut rng = Rng(0x5851_F42D_4C95_7F2D);
        let (mut direct, mut left) = (0, 0);
        for _ in 0..6000 {
            let mut raw = seeds[(rng.next() % seeds.len() as u64) as usize].clone();
            for _ in 0..1 + rng.next() % 3 {
                damage(&mut raw, &mut rng, bytes);
            }
            match direct_reading_agrees(&raw) {
                Ok(true) => direct += 1,
                Ok(false) => left += 1,
                Err(e) => panic!("{e}\n{}", String::from_utf8_lossy(&raw)),
            }
        }
        // Changes inside strings mostly leave an entry readable; the rest are refused.
        assert!(
            direct > 1500 && left > 1500,
            "{direct} read directly, {left} left"
        );
    }

    #[test]
    fn the_direct_reading_leaves_what_it_is_unsure_of_to_serde_json() {
        let base = sse_entry(r#""id: 4\n\n""#, "");
        assert_eq!(direct_reading_agrees(base.as_bytes()), Ok(true));
        let deep = format!("{}1{}", "[".repeat(70), "]".repeat(70));
        // Each with whether serde_json reads it.
        let left = [
            (base.replace(r#""status":200"#, r#""status":200.0"#), false),
            (base.replace(r#""status":200"#, r#""status":2e2"#), false),
            (base.replace(r#""size":-1"#, r#""size":-0"#), true),
            (base.replace(r#""size":-1"#, r#""size":1.5"#), true),
            (
                base.replace(r#""method":"GET""#, r#""method":"GET","method":"GET""#),
                false,
            ),
            (base.replace(r#""url""#, r#""\u0075rl""#), true),
            (
                base.replace(r#""text":"#, &format!(r#""x":{deep},"text":"#)),
                true,
            ),
            (base.replace(r#""id: 4\n\n""#, r#""\ud800""#), true),
            (base.replace(r#""id: 4\n\n""#, "\"\x01\""), false),
            (base.replace(r#""status":200"#, r#""status":"200""#), false),
            (format!("{base} x"), false),
        ];
        for (raw, serde_reads) in &left {
            assert_eq!(direct_reading_agrees(raw.as_bytes()), Ok(false), "{raw}");
            let read = serde_json::from_slice::<Entry<'_>>(raw.as_bytes()).is_ok();
            assert_eq!(read, *serde_reads, "{raw}");
        }
        let read = [
            base.replace(r#""id: 4\n\n""#, "null"),
            base.replace(r#""value":"s1""#, r#""value":"s\u0031""#),
            base.replace(r#""value":"s1""#, r#""value":"s\\u0031\/\t\"""#),
            base.replace(
                r#"{"name":"Mcp-Session-Id","value":"s1"}"#,
                r#"{"value":"s1","name":"Mcp-Session-Id"}"#,
            ),
            base.replace(
                r#"{"name":"Mcp-Session-Id","value":"s1"}"#,
                r#"{ "name" : "Mcp-Session-Id" , "value" : "s1" }"#,
            ),
            base.replace(r#""headers":[{"#, r#""headers":[{"comment":"a\"b\\","#),
            base.replace(
                r#""size":-1"#,
                r#""size":null,"x":[true,false,null,-1.5e+3,{}]"#,
            ),
            base.replace(r#""size":-1,"#, r#""mimeType":"text/html","#),
            format!(" {base} \n"),
        ];
        for raw in &read {
            assert_eq!(direct_reading_agrees(raw.as_bytes()), Ok(true), "{raw}");
        }
    }

    #[test]
    fn wanted_headers_are_the_first_of_each_name_found_in_one_pass() {
        let h = |name: &'static str, value: &'static str| Header {
            name: Cow::Borrowed(name),
            value: Cow::Borrowed(value),
        };
        let headers = [
            h("Content-Length", " 12\t"),
            h("MCP-Session-Id", "s1"),
            h("content-type", "text/event-stream"),
            h("mcp-session-id", "s2"),
            h("Content-Encoding", "gzip"),
        ];
        let [ty, sid, length, absent] = headers_named(
            &headers,
            [
                "content-type",
                "mcp-session-id",
                "content-length",
                "last-event-id",
            ],
        );
        assert_eq!(ty, Some("text/event-stream"));
        // The first of two, whatever their case; values trimmed of spaces and tabs.
        assert_eq!(sid, Some("s1"));
        assert_eq!(length, Some("12"));
        assert_eq!(absent, None);
        // Each name looked up alone gives the same.
        for name in ["content-encoding", "mcp-session-id", "content-length", "x"] {
            let alone = headers
                .iter()
                .find(|x| x.name.eq_ignore_ascii_case(name))
                .map(|x| x.value.trim_matches([' ', '\t']));
            assert_eq!(headers_named(&headers, [name])[0], alone, "{name}");
        }
    }

    #[test]
    fn entries_not_all_utf8_have_each_string_read_checked_alone() {
        let base = sse_entry(r#""id: 4\n\n""#, "");
        let with = |from: &str, to: &[u8]| {
            let at = base.find(from).expect("in the entry");
            [
                &base.as_bytes()[..at],
                to,
                &base.as_bytes()[at + from.len()..],
            ]
            .concat()
        };
        // A string stepped over need not be UTF-8 (serde_json does not check it): the entry
        // is read, each string it lends checked on its own.
        let skipped = with(r#""headers":[{"#, b"\"headers\":[{\"comment\":\"a\xffb\",");
        assert!(serde_json::from_slice::<Entry<'_>>(&skipped).is_ok());
        assert_eq!(direct_reading_agrees(&skipped), Ok(true));
        // One lent, or a key, that is not UTF-8 is left to serde_json, which refuses it.
        for raw in [
            with(r#""value":"s1""#, b"\"value\":\"s\xff1\""),
            with(r#""value":"s1""#, b"\"value\":\"s\\\"\xff1\""),
            with(r#""headers":[{"#, b"\"headers\":[{\"x\xff\":1,"),
        ] {
            assert_eq!(direct_reading_agrees(&raw), Ok(false));
            assert!(serde_json::from_slice::<Entry<'_>>(&raw).is_err());
        }
        // The same strings as text, each kind of escape among them, are read directly.
        for raw in [
            with(r#""value":"s1""#, "\"value\":\"s\u{e9}1\"".as_bytes()),
            with(
                r#""value":"s1""#,
                "\"value\":\"\\\"s\u{e9}\\\";v=\\\"1\\\"\"".as_bytes(),
            ),
            with(r#""value":"s1""#, b"\"value\":\"\\\"s\\u00e9\\\"\""),
            with(r#""headers":[{"#, "\"headers\":[{\"x\u{e9}\":1,".as_bytes()),
        ] {
            assert_eq!(direct_reading_agrees(&raw), Ok(true));
        }
        // An entry too large to be checked whole has each string it lends checked alone.
        let pad = format!(r#""url":"http://h/mcp","x":"{}""#, "x".repeat(20 << 10));
        let large = |value: &[u8]| {
            let raw = with(r#""url":"http://h/mcp""#, pad.as_bytes());
            let at = raw
                .windows(12)
                .position(|w| w == br#""value":"s1""#)
                .expect("value");
            [&raw[..at], value, &raw[at + 12..]].concat()
        };
        assert_eq!(direct_reading_agrees(&large(b"\"value\":\"s1\"")), Ok(true));
        assert_eq!(
            direct_reading_agrees(&large("\"value\":\"s\u{e9}\"".as_bytes())),
            Ok(true)
        );
        let bad = large(b"\"value\":\"s\xff\"");
        assert_eq!(direct_reading_agrees(&bad), Ok(false));
        assert!(serde_json::from_slice::<Entry<'_>>(&bad).is_err());
    }

    #[test]
    fn event_source_messages_write_ids_only_where_they_change() {
        let limits = Limits::default();
        let msg = |id: &'static str, data: &'static str| EventSourceMessage {
            event_name: Some(Cow::Borrowed("message")),
            event_id: Some(Cow::Borrowed(id)),
            data: Some(Cow::Borrowed(data)),
        };
        let msgs = [msg("7", "a"), msg("7", "b\r\nid: 99"), msg("8", "")];
        let run = |last: &str, msgs: &[EventSourceMessage<'_>]| {
            let mut tracker = ExchangeTracker::new(&limits);
            let mark = Mark::default();
            tracker.request(RequestHead {
                last_event_id: Some(last.to_string()),
                ..Default::default()
            });
            tracker.response(ResponseHead {
                status: 200,
                content_type: Some("text/event-stream".into()),
                ..Default::default()
            });
            let mut sink = BodySink {
                tracker: &mut tracker,
                mark,
                base64: None,
                out: Vec::new(),
                fed: 0,
            };
            let ambiguous = feed_messages(msgs, last, &mut sink);
            tracker.body_end(0, BodyEnd::Stream(StreamEnd::CaptureEnd), mark);
            (ambiguous, tracker.resumes.pop())
        };
        let (ambiguous, r) = run("5", &msgs);
        assert_eq!(ambiguous, Ok(false));
        let r = r.unwrap();
        // The data line "id: 99" stays data; the repeated 7 is no id; 3 events in all.
        assert_eq!(r.first_event_id.as_deref(), Some("7"));
        assert_eq!(r.stream_events, 3);
        assert_eq!(r.decision.verdict, Verdict::GapSkipped);
        assert_eq!(run("7", &msgs).0, Ok(true));
        assert!(run("5", &[msg("1\n2", "")]).0.is_err());
    }
}
