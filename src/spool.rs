//! The records of one input on their way out: written as JSON lines as soon as the session
//! stage lets them go, and put in report order only when the input is over.
//!
//! Input: resumes, findings and session views ([`sessions::Sink`]), in any order.
//! Output: the JSON lines in report order (resumes by request time, then findings tied to no
//! resume, then session views), the run's counters, and, on request, what the account for a
//! person needs ([`HumanNotes`]).
//! Invariants:
//! - Memory: the lines wait in a buffer of [`SPOOL_MEMORY`] bytes, then in an unnamed
//!   temporary file; what stays in memory per record is its sort key and place (a few dozen
//!   bytes), never the record.
//! - The order depends on the records only (ties keep the order they came in, which the
//!   stage makes independent of threads).

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};

use crate::report::{self, HumanNotes, Summary};
use crate::session::ResumeRecord;
use crate::sessions::{self, Finding, SessionView, Severity};

/// Bytes of lines kept in memory before the spool moves them to a temporary file.
pub const SPOOL_MEMORY: usize = 1 << 20;

/// Where a line sorts among the lines of its section.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct SortKey {
    words: [u64; 4],
    text: Option<Box<str>>,
    seq: u64,
}

#[derive(Debug)]
struct Slot {
    key: SortKey,
    offset: u64,
    len: u32,
}

/// The lines of one input, their counters and (on request) the notes for a person.
pub struct Spool {
    input: String,
    memory: usize,
    buf: Vec<u8>,
    file: Option<File>,
    /// Bytes in the file (the buffer's lines come after them).
    spilled: u64,
    sections: [Vec<Slot>; 3],
    seq: u64,
    /// Verdicts and findings counted as they come.
    pub summary: Summary,
    /// A resume with a finding verdict, or an error finding.
    pub findings: bool,
    pub human: Option<HumanNotes>,
    /// The first error of the temporary file, if any; lines are then kept in memory.
    pub spill_error: Option<String>,
    line: Vec<u8>,
}

const RESUMES: usize = 0;
const FINDINGS: usize = 1;
const VIEWS: usize = 2;

impl Spool {
    pub fn new(input: &str, human: bool) -> Self {
        Spool::with_memory(input, human, SPOOL_MEMORY)
    }

    /// A spool that moves its lines to a file past `memory` bytes.
    pub fn with_memory(input: &str, human: bool, memory: usize) -> Self {
        Spool {
            input: input.to_string(),
            memory,
            buf: Vec::new(),
            file: None,
            spilled: 0,
            sections: [Vec::new(), Vec::new(), Vec::new()],
            seq: 0,
            summary: Summary::new(),
            findings: false,
            human: human.then(HumanNotes::default),
            spill_error: None,
            line: Vec::new(),
        }
    }

    /// Records held: resumes, findings tied to no resume, session views.
    pub fn counts(&self) -> [usize; 3] {
        [
            self.sections[RESUMES].len(),
            self.sections[FINDINGS].len(),
            self.sections[VIEWS].len(),
        ]
    }

    fn push(&mut self, section: usize, words: [u64; 4], text: Option<&str>) {
        self.seq += 1;
        let key = SortKey {
            words,
            text: text.map(Box::from),
            seq: self.seq,
        };
        let offset = self.spilled + self.buf.len() as u64;
        // A line longer than 4 GiB cannot come from bounded records; it is cut rather than
        // mis-indexed.
        let len = u32::try_from(self.line.len()).unwrap_or(u32::MAX);
        self.buf.extend_from_slice(&self.line[..len as usize]);
        self.sections[section].push(Slot { key, offset, len });
        if self.buf.len() >= self.memory && self.spill_error.is_none() {
            self.spill();
        }
    }

    fn spill(&mut self) {
        let result = (|| -> std::io::Result<()> {
            if self.file.is_none() {
                self.file = Some(temp_file()?);
            }
            if let Some(f) = self.file.as_mut() {
                f.write_all(&self.buf)?;
            }
            Ok(())
        })();
        match result {
            Ok(()) => {
                self.spilled += self.buf.len() as u64;
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

    /// Writes every line in report order.
    pub fn write_to<W: Write + ?Sized>(&mut self, out: &mut W) -> std::io::Result<()> {
        if let Some(f) = self.file.as_mut() {
            f.flush()?;
        }
        let mut line = Vec::new();
        for section in &mut self.sections {
            section.sort_unstable_by(|a, b| a.key.cmp(&b.key));
            for slot in section.iter() {
                if slot.offset >= self.spilled {
                    let from = (slot.offset - self.spilled) as usize;
                    let to = from.saturating_add(slot.len as usize);
                    out.write_all(self.buf.get(from..to).unwrap_or(&[]))?;
                } else if let Some(f) = self.file.as_mut() {
                    line.resize(slot.len as usize, 0);
                    f.seek(SeekFrom::Start(slot.offset))?;
                    std::io::Read::read_exact(f, &mut line)?;
                    out.write_all(&line)?;
                }
            }
        }
        Ok(())
    }

    fn count_finding(&mut self, f: &Finding) {
        self.summary.count_finding(f);
        self.findings |= f.severity == Severity::Error;
    }
}

impl sessions::Sink for Spool {
    fn resume(&mut self, r: ResumeRecord) {
        self.summary.count_verdict(r.decision.verdict);
        self.findings |= r.decision.verdict.is_finding();
        for f in &r.forensic.findings {
            self.count_finding(f);
        }
        self.line.clear();
        let mut line = std::mem::take(&mut self.line);
        // Writing to memory cannot fail.
        let _ = report::write_resume(&mut line, &self.input, &r);
        self.line = line;
        let key = resume_key(&r);
        self.push(RESUMES, key, None);
        if let Some(h) = self.human.as_mut() {
            h.resume(r);
        }
    }

    fn finding(&mut self, f: Finding) {
        self.count_finding(&f);
        self.line.clear();
        let mut line = std::mem::take(&mut self.line);
        let _ = report::write_finding(&mut line, &self.input, &f);
        self.line = line;
        let (frame, kind, sid) = sessions::finding_order(&f);
        let words = [frame.map_or(0, |f| f.saturating_add(1)), kind as u64, 0, 0];
        let sid = sid.map(str::to_string);
        self.push(FINDINGS, words, sid.as_deref());
        if let Some(h) = self.human.as_mut() {
            h.finding(f);
        }
    }

    fn view(&mut self, v: SessionView) {
        self.line.clear();
        let mut line = std::mem::take(&mut self.line);
        let _ = report::write_session(&mut line, &self.input, &v);
        self.line = line;
        self.push(VIEWS, [v.first.frame, 0, 0, 0], Some(&v.session_id));
    }
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
    use crate::pipeline::{Options, analyze_path};
    use crate::sessions::Sink;

    fn written(spool: &mut Spool) -> Vec<u8> {
        let mut out = Vec::new();
        spool.write_to(&mut out).unwrap();
        out
    }

    /// Feeds the records of `report`, in report order or reversed, to a spool of `memory` bytes.
    fn spool_of(report: &crate::pipeline::InputReport, memory: usize, reverse: bool) -> Spool {
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
            s.resume(r);
        }
        s
    }

    #[test]
    fn lines_come_out_in_report_order_from_memory_or_the_file_alike() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let opts = Options {
            forensic: crate::sessions::Options {
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
                    assert!(s.spill_error.is_none());
                    assert_eq!(
                        s.counts(),
                        [
                            report.resumes.len(),
                            report.findings.len(),
                            report.views.len()
                        ]
                    );
                    let got = written(&mut s);
                    assert!(
                        got == want,
                        "{cap}, memory {memory}, reverse {reverse}:\n{}",
                        String::from_utf8_lossy(&got)
                    );
                    // Only a spool given no room has moved its lines to a file.
                    assert_eq!(s.spilled > 0, memory != usize::MAX, "{cap} {memory}");
                    assert_eq!(s.summary.resumes, report.resumes.len() as u64);
                }
            }
        }
    }
}
