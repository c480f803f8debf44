//! The records of one input on their way out: written as JSON lines as soon as the session
//! stage lets them go, and put in report order only when the input is over.
//!
//! Input: resumes, findings and session views ([`audit::Sink`]), in any order.
//! Output: the JSON lines in report order (resumes by request time, then findings tied to no
//! resume, then session views), the run's counters, and, on request, what the account for a
//! person needs ([`HumanNotes`]).
//! Invariants:
//! - Memory does not grow with the number of records: lines gather in a run of
//!   [`SPOOL_MEMORY`] bytes; a full run is sorted and written to an unnamed temporary file,
//!   and the runs are merged when the input is over, at most [`MERGE_FAN_IN`] at a time.
//! - The order depends on the records only (ties keep the order they came in, which the
//!   stage makes independent of threads).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::collections::binary_heap::PeekMut;
use std::fs::File;
use std::io::{IoSlice, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

use crate::audit::{self, Finding, SessionView, Severity};
use crate::exchange::ResumeRecord;
use crate::report::{self, HumanNotes, Summary};

/// Bytes of lines gathered in memory before they are sorted and moved to the file as a run.
/// The run is resident at the peak of a long input, beside the session stage's state, so it
/// is kept small; with [`MERGE_FAN_IN`], reports up to 512 MiB are still merged in one pass (a
/// reconnect storm of 256 MiB writes a report of about that size; each extra pass copies all
/// of it twice more).
pub const SPOOL_MEMORY: usize = 1 << 20;
/// Room for the line that takes a run past [`SPOOL_MEMORY`] (a longer one grows the run).
const RUN_SLACK: usize = 64 << 10;
/// Runs merged at once; more are first merged into longer runs.
pub const MERGE_FAN_IN: usize = 512;
/// Bytes the runs of one merge read ahead, together: once the session stage's state is gone,
/// so beside little else.
const MERGE_READ_AHEAD: usize = 4 << 20;
/// Bytes read ahead from each run at least ([`MERGE_READ_AHEAD`] shared by [`MERGE_FAN_IN`]
/// runs), and at most: fewer runs each read further, in fewer calls (a reconnect storm's 230
/// MB report, read back 8 KiB at a time, took some 30,000 of them).
const RUN_READ_AHEAD: usize = MERGE_READ_AHEAD / MERGE_FAN_IN;
const RUN_READ_AHEAD_MAX: usize = 256 << 10;

/// Where a line sorts: its section (in the report: resumes, findings, views), then the
/// section's order (its words, then its text), then the order lines came in.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct SortKey {
    pub(crate) section: u8,
    pub(crate) words: [u64; 4],
    pub(crate) text: Option<Box<str>>,
    seq: u64,
}

/// A line waiting in memory: its key and where it sits in the run's bytes.
#[derive(Debug)]
struct Slot {
    key: SortKey,
    from: usize,
    to: usize,
}

/// A sorted run in the file: `[from, to)`.
#[derive(Clone, Copy, Debug)]
struct Run {
    from: u64,
    to: u64,
}

/// Lines sorted through runs on disk: gathered in memory up to a bound, each full run sorted
/// and written to an unnamed temporary file, the runs merged when every line is in.
#[derive(Debug)]
pub(crate) struct Runs {
    memory: usize,
    /// Whether a run's whole room is taken at its first line (the report's lines, which fill
    /// runs), or grown as lines come (the plain-text account's, often a few).
    room_at_first_line: bool,
    buf: Vec<u8>,
    slots: Vec<Slot>,
    file: Option<File>,
    /// Bytes in the file.
    file_len: u64,
    runs: Vec<Run>,
    /// The fixed parts of the entries of the run being written to the file.
    heads: Vec<u8>,
    seq: u64,
    /// The first error of the temporary file, if any; lines are then kept in memory.
    spill_error: Option<String>,
}

/// The lines of one input, their counters and (on request) the notes for a person.
pub struct Spool {
    input: String,
    /// `input` as a JSON string.
    input_json: Vec<u8>,
    lines: Runs,
    /// Whether the JSON lines are made: not when only the account for a person is written.
    keep_lines: bool,
    counts: [usize; 3],
    /// Verdicts and findings counted as they come.
    pub summary: Summary,
    /// A resume with a finding verdict, or an error finding.
    pub findings: bool,
    /// What the plain-text account needs, when one is written.
    pub human: Option<HumanNotes>,
    /// The files of a capture set, in reading order, which its records cite by name.
    pub files: Option<std::sync::Arc<dyn report::files::FrameNames>>,
}

const RESUMES: u8 = 0;
const FINDINGS: u8 = 1;
const VIEWS: u8 = 2;

impl Runs {
    /// No lines yet; runs of `memory` bytes, their room taken at their first line when
    /// `room_at_first_line`.
    pub(crate) fn new(memory: usize, room_at_first_line: bool) -> Self {
        Runs {
            memory,
            room_at_first_line,
            buf: Vec::new(),
            slots: Vec::new(),
            file: None,
            file_len: 0,
            runs: Vec::new(),
            heads: Vec::new(),
            seq: 0,
            spill_error: None,
        }
    }

    /// Runs written to the temporary file so far.
    pub(crate) fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Bytes allocated for lines in memory (for tests).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.buf.capacity()
    }

    /// Bytes of lines a run gathers before it is written to the file.
    pub(crate) fn memory(&self) -> usize {
        self.memory
    }

    /// The first error of the temporary file, if any (lines are then kept in memory).
    pub(crate) fn spill_error(&self) -> Option<&str> {
        self.spill_error.as_deref()
    }

    /// The run's bytes, where the next line is written before [`Runs::push`] takes it. With
    /// `room_at_first_line`, room for a whole run from its first line on: grown by doubling,
    /// they passed [`SPOOL_MEMORY`] with twice that allocated, copying what they held.
    pub(crate) fn bytes(&mut self) -> &mut Vec<u8> {
        if self.room_at_first_line && self.buf.capacity() == 0 && self.memory <= SPOOL_MEMORY {
            self.buf.reserve_exact(self.memory + RUN_SLACK);
        }
        &mut self.buf
    }

    /// Takes the line written to the run's bytes since `from`, to sort by `section`, `words`,
    /// `text`, then the order lines came in.
    pub(crate) fn push(&mut self, from: usize, section: u8, words: [u64; 4], text: Option<&str>) {
        self.seq += 1;
        let key = SortKey {
            section,
            words,
            text: text.map(Box::from),
            seq: self.seq,
        };
        self.slots.push(Slot {
            key,
            from,
            to: self.buf.len(),
        });
        if self.buf.len() >= self.memory && self.spill_error.is_none() {
            self.spill();
        }
    }

    /// Sorts the lines in memory and writes them to the file as one run.
    fn spill(&mut self) {
        self.sort_slots();
        let from = self.file_len;
        let written = (|| -> std::io::Result<u64> {
            let mut f = match self.file.take() {
                Some(f) => f,
                None => temp_file()?,
            };
            let result = (|| {
                // Each entry's fixed parts and text gathered in one buffer, written with the
                // lines where they are, one vectored write for hundreds of entries: the lines
                // pass through no buffer of this process on their way to the file.
                let mut heads = std::mem::take(&mut self.heads);
                heads.clear();
                for slot in &self.slots {
                    let fixed = entry_fixed(&slot.key, slot.to - slot.from)?;
                    heads.extend_from_slice(&fixed[..ENTRY_HEAD]);
                    if let Some(text) = slot.key.text.as_deref() {
                        heads.extend_from_slice(text.as_bytes());
                    }
                    heads.extend_from_slice(&fixed[ENTRY_HEAD..]);
                }
                let mut at = 0;
                let mut pieces = Vec::with_capacity(2 * self.slots.len());
                for slot in &self.slots {
                    let head_len =
                        ENTRY_HEAD + ENTRY_TAIL + slot.key.text.as_deref().map_or(0, str::len);
                    pieces.push(IoSlice::new(heads.get(at..at + head_len).unwrap_or(&[])));
                    pieces.push(IoSlice::new(
                        self.buf.get(slot.from..slot.to).unwrap_or(&[]),
                    ));
                    at += head_len;
                }
                let total: usize = pieces.iter().map(|p| p.len()).sum();
                f.seek(SeekFrom::Start(from))?;
                let written = write_all_vectored(&mut f, &mut pieces);
                drop(pieces);
                self.heads = heads;
                written.map(|()| total as u64)
            })();
            self.file = Some(f);
            result
        })();
        match written {
            Ok(n) => {
                self.file_len += n;
                self.runs.push(Run {
                    from,
                    to: self.file_len,
                });
                self.slots.clear();
                self.buf.clear();
            }
            Err(e) => {
                self.spill_error = Some(format!(
                    "cannot write the report's temporary file in {}: {e}; records are kept in \
                     memory",
                    std::env::temp_dir().display()
                ));
            }
        }
    }

    /// Hands every line to `visit` with its key, in order.
    pub(crate) fn for_each<F>(&mut self, mut visit: F) -> std::io::Result<()>
    where
        F: FnMut(&SortKey, &[u8]) -> std::io::Result<()>,
    {
        if self.runs.is_empty() {
            self.sort_slots();
            for slot in &self.slots {
                visit(&slot.key, self.buf.get(slot.from..slot.to).unwrap_or(&[]))?;
            }
            return Ok(());
        }
        if !self.slots.is_empty() {
            self.spill();
            if let Some(e) = &self.spill_error {
                return Err(std::io::Error::other(e.clone()));
            }
        }
        let Some(f) = self.file.as_ref() else {
            return Ok(());
        };
        // Long runs from short ones, at the end of the file, until one merge takes them all.
        while self.runs.len() > MERGE_FAN_IN {
            let group: Vec<Run> = self.runs.drain(..MERGE_FAN_IN).collect();
            let from = self.file_len;
            let mut tail = TailWriter {
                f,
                at: from,
                buf: Vec::with_capacity(RUN_READ_AHEAD),
            };
            merge_runs(f, &group, |k, line| write_entry(&mut tail, k, line))?;
            tail.flush()?;
            self.file_len = tail.at;
            self.runs.push(Run {
                from,
                to: self.file_len,
            });
        }
        merge_runs(f, &self.runs, visit)
    }

    /// Puts the lines in memory in order; they often come in it already.
    fn sort_slots(&mut self) {
        if !self.slots.is_sorted_by(|a, b| a.key <= b.key) {
            self.slots.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        }
    }
}

impl Spool {
    /// An empty spool for `input`, collecting for the plain-text account when `human`.
    pub fn new(input: &str, human: bool) -> Self {
        Spool::with_memory(input, human, SPOOL_MEMORY)
    }

    /// A spool that moves its lines to a file past `memory` bytes (and the plain-text
    /// account's, each of its sorts).
    pub fn with_memory(input: &str, human: bool, memory: usize) -> Self {
        let mut input_json = Vec::with_capacity(input.len() + 2);
        crate::report::json::str(&mut input_json, input);
        Spool {
            input: input.to_string(),
            input_json,
            lines: Runs::new(memory, true),
            keep_lines: true,
            counts: [0; 3],
            summary: Summary::new(),
            findings: false,
            human: human.then(|| HumanNotes::new(memory)),
            files: None,
        }
    }

    /// Makes no JSON lines, only the counters and the account for a person (which must be
    /// asked for): the report is that account alone.
    pub fn account_only(&mut self) {
        self.keep_lines = false;
    }

    /// Records taken: resumes, findings tied to no resume, session views.
    pub fn counts(&self) -> [usize; 3] {
        self.counts
    }

    /// Runs written to the temporary file so far.
    pub fn runs(&self) -> usize {
        self.lines.runs()
    }

    /// The first error of a temporary file, if any; what it would have held is kept in
    /// memory.
    pub fn spill_error(&self) -> Option<&str> {
        self.lines
            .spill_error()
            .or_else(|| self.human.as_ref().and_then(HumanNotes::spill_error))
    }

    /// Counts a record and takes its line, written to the run's bytes since `from`.
    fn push(&mut self, from: usize, section: u8, words: [u64; 4], text: Option<&str>) {
        self.counts[usize::from(section)] += 1;
        if self.keep_lines {
            self.lines.push(from, section, words, text);
        }
    }

    /// Writes every line in report order.
    pub fn write_to<W: Write + ?Sized>(&mut self, out: &mut W) -> std::io::Result<()> {
        self.lines.for_each(|_, line| out.write_all(line))
    }

    /// Every line in report order, in memory (for tests).
    #[cfg(test)]
    pub(crate) fn written(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_to(&mut out).unwrap();
        out
    }

    fn count_finding(&mut self, f: &Finding) {
        self.summary.count_finding(f);
        self.findings |= f.severity == Severity::Error;
    }
}

/// A run entry: section, four key words, text (length, or `u32::MAX` for none), sequence,
/// line length, line.
fn write_entry<W: Write + ?Sized>(out: &mut W, key: &SortKey, line: &[u8]) -> std::io::Result<()> {
    let fixed = entry_fixed(key, line.len())?;
    // Head and tail in one piece when no text comes between them (resumes have none).
    match key.text.as_deref() {
        None => out.write_all(&fixed)?,
        Some(text) => {
            out.write_all(&fixed[..ENTRY_HEAD])?;
            out.write_all(text.as_bytes())?;
            out.write_all(&fixed[ENTRY_HEAD..])?;
        }
    }
    out.write_all(line)
}

/// The fixed parts of an entry for `key` and a line of `line_len` bytes: its head, then its
/// tail (the key's text, if any, goes between them).
fn entry_fixed(key: &SortKey, line_len: usize) -> std::io::Result<[u8; ENTRY_HEAD + ENTRY_TAIL]> {
    let mut fixed = [0u8; ENTRY_HEAD + ENTRY_TAIL];
    let (head, tail) = fixed.split_at_mut(ENTRY_HEAD);
    head[0] = key.section;
    for (to, w) in head[1..33].chunks_exact_mut(8).zip(key.words) {
        to.copy_from_slice(&w.to_le_bytes());
    }
    let text_len = match &key.text {
        Some(t) => u32::try_from(t.len()).map_err(std::io::Error::other)?,
        None => u32::MAX,
    };
    head[33..].copy_from_slice(&text_len.to_le_bytes());
    tail[..8].copy_from_slice(&key.seq.to_le_bytes());
    let len = u32::try_from(line_len).map_err(std::io::Error::other)?;
    tail[8..].copy_from_slice(&len.to_le_bytes());
    Ok(fixed)
}

/// Writes every byte of `pieces`, in order, with as few calls as the system allows.
fn write_all_vectored(f: &mut File, mut pieces: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    while !pieces.is_empty() {
        match f.write_vectored(pieces) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut pieces, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Bytes of an entry before its text: section, four key words, text length.
const ENTRY_HEAD: usize = 37;
/// Bytes of an entry between its text and its line: sequence, line length.
const ENTRY_TAIL: usize = 12;

/// Appends to the file at its own place, whatever reads happen in between.
struct TailWriter<'f> {
    f: &'f File,
    at: u64,
    buf: Vec<u8>,
}

impl Write for TailWriter<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        if self.buf.len() >= RUN_READ_AHEAD {
            self.flush()?;
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.f.write_all_at(&self.buf, self.at)?;
        self.at += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }
}

/// Reads one run of the file back, entry by entry, with a read-ahead buffer of its own. The
/// runs share the file: each read says where in it (`pread`), one call rather than a seek
/// and a read.
struct RunReader {
    at: u64,
    end: u64,
    /// Bytes read: `buf[pos..len]` are yet to be taken; the rest of `buf` is room.
    buf: Vec<u8>,
    pos: usize,
    len: usize,
    /// Where the line of the entry last read is in `buf`.
    line: (usize, usize),
    /// Bytes each read asks for at least.
    ahead: usize,
}

impl RunReader {
    /// A reader of `run`, one of `runs` merged together.
    fn new(run: Run, runs: usize) -> Self {
        RunReader {
            ahead: (MERGE_READ_AHEAD / runs.max(1)).clamp(RUN_READ_AHEAD, RUN_READ_AHEAD_MAX),
            at: run.from,
            end: run.to,
            buf: Vec::new(),
            pos: 0,
            len: 0,
            line: (0, 0),
        }
    }

    /// Makes `n` bytes available at `pos`; false at the end of the run.
    fn fill(&mut self, f: &File, n: usize) -> std::io::Result<bool> {
        if self.len - self.pos >= n {
            return Ok(true);
        }
        self.buf.copy_within(self.pos..self.len, 0);
        self.len -= self.pos;
        self.pos = 0;
        let want = n.max(self.ahead).saturating_sub(self.len);
        let left = self.end.saturating_sub(self.at);
        let take = (want as u64).min(left) as usize;
        if take > 0 {
            if self.buf.len() < self.len + take {
                self.buf.resize(self.len + take, 0);
            }
            f.read_exact_at(&mut self.buf[self.len..self.len + take], self.at)?;
            self.len += take;
            self.at += take as u64;
        }
        Ok(self.len >= n)
    }

    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        s
    }

    fn array<const N: usize>(&mut self, f: &File) -> std::io::Result<[u8; N]> {
        if !self.fill(f, N)? {
            return Err(damaged());
        }
        let mut b = [0u8; N];
        b.copy_from_slice(self.take(N));
        Ok(b)
    }

    /// The next entry's key, or `None` at the end of the run; its line is [`RunReader::line`]
    /// until the next call.
    fn next(&mut self, f: &File) -> std::io::Result<Option<SortKey>> {
        if !self.fill(f, 1)? {
            return Ok(None);
        }
        // The fixed parts of an entry are taken whole: field by field, each asked for its
        // bytes to be there.
        let head: [u8; ENTRY_HEAD] = self.array(f)?;
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&head[at..at + 8]);
            u64::from_le_bytes(w)
        };
        let section = head[0];
        let words = [word(1), word(9), word(17), word(25)];
        let text = match u32::from_le_bytes([head[33], head[34], head[35], head[36]]) {
            u32::MAX => None,
            n => {
                let n = n as usize;
                if !self.fill(f, n)? {
                    return Err(damaged());
                }
                let t = String::from_utf8_lossy(self.take(n)).into_owned();
                Some(t.into_boxed_str())
            }
        };
        let tail: [u8; ENTRY_TAIL] = self.array(f)?;
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&tail[..8]);
        let seq = u64::from_le_bytes(seq);
        let len = u32::from_le_bytes([tail[8], tail[9], tail[10], tail[11]]) as usize;
        if !self.fill(f, len)? {
            return Err(damaged());
        }
        self.line = (self.pos, self.pos + len);
        self.pos += len;
        Ok(Some(SortKey {
            section,
            words,
            text,
            seq,
        }))
    }

    /// The line of the entry last read.
    fn line(&self) -> &[u8] {
        &self.buf[self.line.0..self.line.1]
    }
}

fn damaged() -> std::io::Error {
    std::io::Error::other("the report's temporary file was cut short")
}

/// Merges sorted runs, handing each line to `visit` with its key, in order.
fn merge_runs<F>(f: &File, runs: &[Run], mut visit: F) -> std::io::Result<()>
where
    F: FnMut(&SortKey, &[u8]) -> std::io::Result<()>,
{
    let mut readers: Vec<RunReader> = runs
        .iter()
        .map(|r| RunReader::new(*r, runs.len()))
        .collect();
    let mut heap = BinaryHeap::with_capacity(readers.len());
    for (i, r) in readers.iter_mut().enumerate() {
        if let Some(k) = r.next(f)? {
            heap.push(Reverse((k, i)));
        }
    }
    // A reader's line stays in its buffer until that reader is read again, after the line
    // is handed on. The least entry is replaced in place by its run's next one.
    while let Some(mut least) = heap.peek_mut() {
        let Reverse((k, i)) = &*least;
        let i = *i;
        let r = &mut readers[i];
        visit(k, r.line())?;
        match r.next(f)? {
            Some(next) => *least = Reverse((next, i)),
            None => {
                PeekMut::pop(least);
            }
        }
    }
    Ok(())
}

impl audit::Sink for Spool {
    fn resume(&mut self, r: Box<ResumeRecord>) {
        self.summary.count_verdict(r.decision.verdict);
        self.findings |= r.decision.verdict.is_finding();
        for f in &r.forensic.findings {
            self.count_finding(f);
        }
        let key = resume_key(&r);
        let from = write_record(
            self.files.as_ref(),
            self.keep_lines.then_some(&mut self.lines),
            self.human.as_mut(),
            |buf| report::resume_line_quoted(buf, &self.input_json, &r),
            |h| h.resume(&r, key),
        );
        self.push(from, RESUMES, key, None);
    }

    fn finding(&mut self, f: Finding) {
        self.count_finding(&f);
        let (frame, kind, sid) = audit::finding_order(&f);
        let words = [frame.map_or(0, |f| f.saturating_add(1)), kind as u64, 0, 0];
        let from = write_record(
            self.files.as_ref(),
            self.keep_lines.then_some(&mut self.lines),
            self.human.as_mut(),
            |buf| report::finding_line(buf, &self.input, &f),
            |h| h.finding(&f, words, sid),
        );
        self.push(from, FINDINGS, words, sid);
    }

    fn view(&mut self, v: SessionView) {
        if !self.keep_lines {
            self.counts[usize::from(VIEWS)] += 1;
            return;
        }
        let (input, buf) = (&self.input, self.lines.bytes());
        let from = buf.len();
        // Writing to memory cannot fail.
        let _ = report::files::with_files(self.files.as_ref(), || {
            report::write_session(buf, input, &v)
        });
        self.push(from, VIEWS, [v.first.frame, 0, 0, 0], Some(&v.session_id));
    }
}

/// Writes a record's JSON line into `lines`' run (when the lines are kept) and its text into
/// the account (when one is written), with a capture set's file names at hand for both;
/// returns where the line begins.
fn write_record(
    files: Option<&std::sync::Arc<dyn report::files::FrameNames>>,
    lines: Option<&mut Runs>,
    human: Option<&mut HumanNotes>,
    line: impl FnOnce(&mut Vec<u8>),
    text: impl FnOnce(&mut HumanNotes),
) -> usize {
    report::files::with_files(files, || {
        let mut from = 0;
        if let Some(lines) = lines {
            let buf = lines.bytes();
            from = buf.len();
            line(buf);
        }
        if let Some(h) = human {
            text(h);
        }
        from
    })
}

/// Report order of resumes: request time, frame, connection, exchange.
fn resume_key(r: &ResumeRecord) -> [u64; 4] {
    [
        // Time as an unsigned word that sorts as the signed one does.
        (r.request.time_ns as u64) ^ (1 << 63),
        r.request.frame,
        r.connection.tcp_stream.map_or(0, |s| s.saturating_add(1)),
        u64::from(r.exchange),
    ]
}

/// A temporary file with no name: it is removed as soon as it is made, so nothing is left
/// behind whatever happens to the process.
fn temp_file() -> std::io::Result<File> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    for _ in 0..16 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!(
            "mcp-resume-audit-{}-{n}-{nanos}.spool",
            std::process::id()
        ));
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(f) => {
                // On systems that cannot remove an open file, it stays; the name says whose.
                let _ = std::fs::remove_file(&path);
                return Ok(f);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no free temporary file name"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::Sink;
    use crate::driver::{Options, analyze_path};

    /// Feeds the records of `report`, in report order or reversed, to a spool of `memory` bytes.
    fn spool_of(report: &crate::driver::InputReport, memory: usize, reverse: bool) -> Spool {
        let mut s = Spool::with_memory("in", true, memory);
        let mut rs = report.resumes.clone();
        let mut fs = report.findings.clone();
        let mut vs = report.views.clone();
        if reverse {
            rs.reverse();
            fs.reverse();
            vs.reverse();
        }
        // Interleaved, as the session stage lets them go.
        for v in vs {
            s.view(v);
        }
        for f in fs {
            s.finding(f);
        }
        for r in rs {
            s.resume(Box::new(r));
        }
        s
    }

    /// A run of small lines fills the room it was given at its first line, past
    /// [`SPOOL_MEMORY`] by one line, and never doubles it.
    #[test]
    fn a_run_keeps_the_room_of_its_first_line() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let report = analyze_path(&root.join("fixtures/gen/mixed.pcap"), &Options::default());
        let mut s = Spool::new("in", false);
        let mut most = 0;
        while s.runs() < 3 {
            for r in &report.resumes {
                s.resume(Box::new(r.clone()));
                most = most.max(s.lines.buf.len());
                assert_eq!(s.lines.buf.capacity(), SPOOL_MEMORY + RUN_SLACK);
            }
        }
        assert!(most >= SPOOL_MEMORY - 4096, "{most}");
    }

    /// The same resumes `rounds` times over, every other round reversed (ties keep the order
    /// they came in), in a spool of `memory` bytes.
    fn scrambled(resumes: &[ResumeRecord], rounds: usize, memory: usize) -> Spool {
        let mut s = Spool::with_memory("in", false, memory);
        for round in 0..rounds {
            let mut rs = resumes.to_vec();
            if round % 2 == 1 {
                rs.reverse();
            }
            for r in rs {
                s.resume(Box::new(r));
            }
        }
        s
    }

    /// Runs of more entries than one vectored write takes (1,024 pieces, two an entry) are
    /// written whole, in as many writes as it takes.
    #[test]
    fn long_runs_are_written_whole_across_vectored_writes() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let report = analyze_path(&root.join("fixtures/gen/mixed.pcap"), &Options::default());
        let line: usize = report
            .resumes
            .iter()
            .map(|r| {
                let mut b = Vec::new();
                report::write_resume(&mut b, "in", r).unwrap();
                b.len()
            })
            .max()
            .unwrap();
        // Room for some 600 of the longest lines a run, 1,200 pieces or more.
        let rounds = (3 * 600usize).div_ceil(report.resumes.len()) + 1;
        let mut whole = scrambled(&report.resumes, rounds, usize::MAX);
        let mut runs = scrambled(&report.resumes, rounds, 600 * line);
        assert!(runs.runs() >= 2, "{} runs", runs.runs());
        assert!(runs.counts()[0] / runs.runs() > 512);
        let (a, b) = (whole.written(), runs.written());
        assert_eq!(a.len(), b.len());
        assert!(a == b);
    }

    #[test]
    fn many_runs_are_merged_in_rounds_with_the_same_result() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let report = analyze_path(&root.join("fixtures/gen/mixed.pcap"), &Options::default());
        // Enough rounds for more than two merges of MERGE_FAN_IN runs before the last one.
        let rounds = (2 * MERGE_FAN_IN).div_ceil(report.resumes.len()) + 1;
        let mut whole = scrambled(&report.resumes, rounds, usize::MAX);
        let mut runs = scrambled(&report.resumes, rounds, 0);
        assert!(runs.runs() > 2 * MERGE_FAN_IN, "{} runs", runs.runs());
        let (a, b) = (whole.written(), runs.written());
        assert_eq!(a.len(), b.len());
        assert!(a == b);
        assert_eq!(
            String::from_utf8(b).unwrap().lines().count(),
            rounds * report.resumes.len()
        );
    }

    #[test]
    fn runs_merged_together_share_the_read_ahead_within_its_bounds() {
        let ahead = |runs| RunReader::new(Run { from: 0, to: 1 }, runs).ahead;
        assert_eq!(ahead(0), RUN_READ_AHEAD_MAX);
        assert_eq!(ahead(1), RUN_READ_AHEAD_MAX);
        assert_eq!(ahead(64), MERGE_READ_AHEAD / 64);
        assert_eq!(ahead(220), MERGE_READ_AHEAD / 220);
        assert_eq!(ahead(MERGE_FAN_IN), RUN_READ_AHEAD);
        assert_eq!(ahead(10 * MERGE_FAN_IN), RUN_READ_AHEAD);
        for runs in 1..=MERGE_FAN_IN {
            assert!(ahead(runs) * runs <= MERGE_READ_AHEAD.max(RUN_READ_AHEAD_MAX));
        }
    }

    /// Merges runs into their lines alone.
    fn merge_lines(f: &File, runs: &[Run], out: &mut Vec<u8>) -> std::io::Result<()> {
        merge_runs(f, runs, |_, line| out.write_all(line))
    }

    /// Merges runs into whole entries, as for a longer run.
    fn merge_entries(f: &File, runs: &[Run], out: &mut Vec<u8>) -> std::io::Result<()> {
        merge_runs(f, runs, |k, line| write_entry(out, k, line))
    }

    /// An entry of a run: its key and its line.
    type Entry = (SortKey, Vec<u8>);

    /// Runs of `entries` entries each (their lines from empty to several read-aheads long,
    /// some keys with a text), written to a file as the spill writes them; with every entry,
    /// in report order.
    fn synthetic_runs(runs: usize, entries: usize) -> (File, Vec<Run>, Vec<Entry>) {
        let f = temp_file().unwrap();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || crate::testing::xorshift(&mut rng);
        let (mut all, mut spans, mut at, mut seq) = (Vec::new(), Vec::new(), 0u64, 0u64);
        for _ in 0..runs {
            let mut run = Vec::new();
            for _ in 0..entries {
                seq += 1;
                let r = next();
                let len = match r % 5 {
                    0 => 0,
                    1 => (r >> 8) as usize % 100,
                    2 => RUN_READ_AHEAD - 60 + (r >> 8) as usize % 120,
                    3 => (r >> 8) as usize % (3 * RUN_READ_AHEAD),
                    _ => (r >> 8) as usize % (3 * RUN_READ_AHEAD_MAX),
                };
                let key = SortKey {
                    section: (r % 3) as u8,
                    words: [r >> 50, 0, (r >> 20) % 4, 0],
                    text: (r % 7 == 0).then(|| "t".repeat((r >> 30) as usize % 40).into()),
                    seq,
                };
                let line: Vec<u8> = (0..len)
                    .map(|i| b'a' + ((i as u64 + seq) % 26) as u8)
                    .collect();
                run.push((key, line));
            }
            run.sort_by(|a, b| a.0.cmp(&b.0));
            let mut bytes = Vec::new();
            for (k, l) in &run {
                write_entry(&mut bytes, k, l).unwrap();
            }
            f.write_all_at(&bytes, at).unwrap();
            spans.push(Run {
                from: at,
                to: at + bytes.len() as u64,
            });
            at += bytes.len() as u64;
            all.extend(run);
        }
        all.sort_by(|a, b| a.0.cmp(&b.0));
        (f, spans, all)
    }

    #[test]
    fn entries_of_any_length_are_merged_across_the_reads_they_span() {
        for (runs, entries) in [(1, 30), (7, 12), (300, 2)] {
            let (f, spans, all) = synthetic_runs(runs, entries);
            let want: Vec<u8> = all.iter().flat_map(|(_, l)| l.iter().copied()).collect();
            let mut lines = Vec::new();
            merge_lines(&f, &spans, &mut lines).unwrap();
            assert!(lines == want, "{runs} runs");
            // As whole entries, for a longer run: the same entries, read back as one run.
            let mut whole = Vec::new();
            merge_entries(&f, &spans, &mut whole).unwrap();
            let end = f.metadata().unwrap().len();
            f.write_all_at(&whole, end).unwrap();
            let one = [Run {
                from: end,
                to: end + whole.len() as u64,
            }];
            let mut again = Vec::new();
            merge_lines(&f, &one, &mut again).unwrap();
            assert!(again == want, "{runs} runs, as one");
        }
    }

    #[test]
    fn a_run_cut_short_is_an_error() {
        let (f, mut spans, _) = synthetic_runs(3, 5);
        // The last run claims more bytes than the file has.
        let last = spans.len() - 1;
        spans[last].to += 100;
        let mut out = Vec::new();
        assert!(merge_lines(&f, &spans, &mut out).is_err());
    }

    #[test]
    fn lines_come_out_in_report_order_from_memory_or_the_file_alike() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let opts = Options {
            forensic: crate::audit::Options {
                views: true,
                ..Default::default()
            },
            ..Options::default()
        };
        for cap in [
            "fixtures/gen/mixed.pcap",
            "fixtures/forensic/cursor-lost.pcap",
        ] {
            let report = analyze_path(&root.join(cap), &opts);
            assert!(!report.resumes.is_empty(), "{cap}");
            // The lines the report writes, in the order it keeps its records in.
            let mut want = Vec::new();
            for r in &report.resumes {
                report::write_resume(&mut want, "in", r).unwrap();
            }
            for f in &report.findings {
                report::write_finding(&mut want, "in", f).unwrap();
            }
            for v in &report.views {
                report::write_session(&mut want, "in", v).unwrap();
            }
            for memory in [usize::MAX, 0, 700] {
                for reverse in [false, true] {
                    let mut s = spool_of(&report, memory, reverse);
                    assert!(s.spill_error().is_none());
                    assert_eq!(
                        s.counts(),
                        [
                            report.resumes.len(),
                            report.findings.len(),
                            report.views.len()
                        ]
                    );
                    let got = s.written();
                    assert!(
                        got == want,
                        "{cap}, memory {memory}, reverse {reverse}:\n{}",
                        String::from_utf8_lossy(&got)
                    );
                    // Only a spool given no room has moved its lines to a file; with none,
                    // every line is a run, and runs are merged in several rounds.
                    assert_eq!(s.runs() > 0, memory != usize::MAX, "{cap} {memory}");
                    assert_eq!(s.summary.resumes, report.resumes.len() as u64);
                }
            }
        }
    }

    /// The account for a person as it was first written, as a model: every record kept
    /// whole, sorted and grouped in memory.
    fn account_model(resumes: &[ResumeRecord], loose: &[Finding]) -> Vec<u8> {
        type Group<'a> = (Vec<&'a ResumeRecord>, Vec<&'a Finding>);
        let mut told: Vec<&ResumeRecord> = resumes
            .iter()
            .filter(|r| report::notable_resume(r))
            .collect();
        told.sort_by_key(|r| audit::resume_order(r));
        let mut loose: Vec<&Finding> = loose.iter().collect();
        loose.sort_by(|a, b| audit::finding_order(a).cmp(&audit::finding_order(b)));
        let mut groups: std::collections::BTreeMap<Option<&str>, Group<'_>> = Default::default();
        let mut order = Vec::new();
        for r in &told {
            let sid = r.session_id.as_deref();
            if !groups.contains_key(&sid) {
                order.push(sid);
            }
            groups.entry(sid).or_default().0.push(r);
        }
        for f in &loose {
            let sid = f.session_id.as_deref();
            if !groups.contains_key(&sid) {
                order.push(sid);
            }
            groups.entry(sid).or_default().1.push(f);
        }
        let mut out = b"== in ==\n".to_vec();
        for sid in &order {
            let (rs, fs) = &groups[sid];
            let total = resumes
                .iter()
                .filter(|r| r.session_id.as_deref() == *sid)
                .count();
            match sid {
                Some(s) => {
                    out.extend_from_slice(format!("session {s}: {total} resume(s)\n").as_bytes())
                }
                None => {
                    out.extend_from_slice(format!("no session id: {total} resume(s)\n").as_bytes())
                }
            }
            for r in rs {
                report::write_resume_text(&mut out, r).unwrap();
            }
            for f in fs {
                report::write_finding_text(&mut out, "  ", f).unwrap();
            }
        }
        let mut sids: Vec<Option<&str>> = resumes
            .iter()
            .map(|r| r.session_id.as_deref())
            .chain(loose.iter().map(|f| f.session_id.as_deref()))
            .collect();
        sids.sort();
        sids.dedup();
        let quiet = sids.iter().filter(|s| !groups.contains_key(*s)).count();
        if quiet > 0 {
            out.extend_from_slice(
                format!("{quiet} other session(s): every resume correct, nothing to report\n")
                    .as_bytes(),
            );
        }
        if sids.is_empty() {
            out.extend_from_slice(b"no resume and no finding\n");
        }
        out
    }

    /// Resumes of the fixtures, and copies of them made to stress the account: some without
    /// a session id, some moved into another session or to another time, all notable ones
    /// twice (ties keep the order they came in).
    fn account_records() -> (Vec<ResumeRecord>, Vec<Finding>) {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let (mut resumes, mut loose) = (Vec::new(), Vec::new());
        for dir in ["fixtures/gen", "fixtures/forensic"] {
            let mut caps: Vec<_> = std::fs::read_dir(root.join(dir))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
                .collect();
            caps.sort();
            for cap in caps {
                let report = analyze_path(&cap, &Options::default());
                resumes.extend(report.resumes);
                loose.extend(report.findings);
            }
        }
        assert!(!loose.is_empty() && resumes.len() > 20);
        // Findings with no session, in a session with resumes, in a session of their own.
        for f in loose.clone() {
            let mut c = f.clone();
            c.session_id = None;
            loose.push(c);
            let mut c = f.clone();
            c.session_id = resumes[resumes.len() / 2].session_id.clone();
            loose.push(c);
            let mut c = f;
            c.session_id = Some("findings-only".into());
            loose.push(c);
        }
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let base = resumes.clone();
        for (i, r) in base.iter().enumerate() {
            let mut c = r.clone();
            match crate::testing::xorshift(&mut rng) % 4 {
                0 => c.session_id = None,
                1 => c.session_id = base[(i * 7) % base.len()].session_id.clone(),
                2 => c.request.time_ns -= 1_000_000_000,
                _ => {}
            }
            resumes.push(c);
            if report::notable_resume(r) {
                resumes.push(r.clone());
            }
        }
        (resumes, loose)
    }

    /// The account written through runs on disk, with any room for them and records in any
    /// order, is the account of the records kept whole.
    #[test]
    fn the_account_for_a_person_is_the_one_of_records_kept_whole() {
        let (resumes, loose) = account_records();
        let told = resumes.iter().filter(|r| report::notable_resume(r)).count();
        assert!(told > 10 && told < resumes.len(), "{told}");
        for reverse in [false, true] {
            let (mut rs, mut fs) = (resumes.clone(), loose.clone());
            if reverse {
                rs.reverse();
                fs.reverse();
            }
            let want = account_model(&rs, &fs);
            for (memory, account_only) in [
                (usize::MAX, false),
                (0, false),
                (700, false),
                (1 << 20, false),
                (700, true),
            ] {
                let mut s = Spool::with_memory("in", true, memory);
                if account_only {
                    s.account_only();
                }
                for f in &fs {
                    s.finding(f.clone());
                }
                for r in &rs {
                    s.resume(Box::new(r.clone()));
                }
                // Without JSON lines, only the counters.
                assert_eq!(s.written().is_empty(), account_only);
                assert_eq!(s.counts(), [rs.len(), fs.len(), 0]);
                assert_eq!(s.summary.resumes, rs.len() as u64);
                let notes = s.human.as_mut().unwrap();
                assert_eq!(notes.told_runs() > 0, memory < 4096, "{memory}");
                let mut got = Vec::new();
                report::write_human_input(&mut got, "in", notes, true).unwrap();
                assert!(
                    got == want,
                    "memory {memory}, reverse {reverse}:\n{}\n---\n{}",
                    String::from_utf8_lossy(&got),
                    String::from_utf8_lossy(&want)
                );
            }
        }
        // Nothing at all.
        let mut s = Spool::with_memory("in", true, 0);
        let mut got = Vec::new();
        report::write_human_input(&mut got, "in", s.human.as_mut().unwrap(), true).unwrap();
        assert_eq!(got, account_model(&[], &[]));
    }

    /// The account's memory does not follow the number of resumes it tells of: past its
    /// room, their texts are in runs on disk.
    #[test]
    fn the_account_keeps_its_texts_within_its_room() {
        let (resumes, _) = account_records();
        let told: Vec<&ResumeRecord> = resumes
            .iter()
            .filter(|r| report::notable_resume(r))
            .collect();
        let memory = 16 << 10;
        let mut notes = report::HumanNotes::new(memory);
        let mut most = 0;
        for round in 0..200u64 {
            for (i, r) in told.iter().enumerate() {
                notes.resume(r, [round, i as u64, 0, 0]);
                most = most.max(notes.told_held());
            }
        }
        assert!(notes.told_runs() >= 10, "{} runs", notes.told_runs());
        // A run holds at most its room and the text that took it past.
        assert!(most < 2 * (memory + 8192), "{most} bytes held");
        let mut got = Vec::new();
        report::write_human_input(&mut got, "in", &mut notes, true).unwrap();
        let text = String::from_utf8(got).unwrap();
        let listed = text.lines().filter(|l| l.starts_with("  \u{1b}[")).count();
        assert_eq!(listed, 200 * told.len());
    }
}
