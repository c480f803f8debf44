//! The report's lines made on a thread of their own (`report`), beside the session stage.
//!
//! Input: the session stage's records (resumes, findings tied to no resume, session views),
//! given to a [`Relay`] in the order the stage lets them go.
//! Output: the same calls, in the same order, on the sink the relay was made for, on the
//! `report` thread.
//! Invariants:
//! - Order is kept: records cross in batches through one queue and are handed on in the order
//!   they came, so the sink sees exactly the calls it would see on the stage's thread (a
//!   spool's ties are broken by that order: the report is byte for byte the same).
//! - Memory is bounded: at most [`QUEUED`] batches of [`BATCH`] records wait; a stage that
//!   outruns the report thread waits for room.
//! - A panic on the report thread is the run's: the stage's next batch finds the queue gone
//!   and drops its records, and the join raises the panic with its message.
//!
//! Why: where resumes are many (a reconnect storm: a resume every 1.4 KB of capture, its line
//! 1.2 KB of JSON), writing the lines and moving full runs of them to the spool's file is a
//! third of the session stage's work, and the stage is then the busiest thread: the workers
//! fill its queue and wait, and one core idles while it catches up.

use std::collections::VecDeque;
use std::sync::mpsc;

use crate::audit::{self, Finding, SessionView};
use crate::exchange::ResumeRecord;

/// Records sent in one batch: a batch of resumes is some 64 KB.
const BATCH: usize = 64;
/// Batches waiting for the report thread before the stage waits.
const QUEUED: usize = 8;

/// One call of the stage on its sink.
enum Record {
    Resume(Box<ResumeRecord>),
    Finding(Finding),
    View(SessionView),
}

/// The stage's sink on the stage's side: records gathered into batches for the report thread.
struct Relay {
    batch: Vec<Record>,
    to_report: Option<mpsc::SyncSender<Vec<Record>>>,
    /// Batches the report thread has emptied, their room used again.
    emptied: mpsc::Receiver<Vec<Record>>,
}

impl Relay {
    fn push(&mut self, r: Record) {
        self.batch.push(r);
        if self.batch.len() >= BATCH {
            self.send();
        }
    }

    fn send(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let room = self
            .emptied
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BATCH));
        let full = std::mem::replace(&mut self.batch, room);
        // The report thread is gone only when it panicked: its join raises that.
        if let Some(tx) = &self.to_report
            && tx.send(full).is_err()
        {
            self.to_report = None;
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.send();
    }
}

impl audit::Sink for Relay {
    fn resume(&mut self, r: Box<ResumeRecord>) {
        self.push(Record::Resume(r));
    }
    fn finding(&mut self, f: Finding) {
        self.push(Record::Finding(f));
    }
    fn view(&mut self, v: SessionView) {
        self.push(Record::View(v));
    }
}

/// Runs `f` with a sink whose records reach `sink` on a `report` thread, and returns what `f`
/// returns once every record has reached `sink`.
pub fn on_report_thread<T>(
    sink: &mut dyn audit::Sink,
    f: impl FnOnce(&mut dyn audit::Sink) -> T,
) -> T {
    std::thread::scope(|scope| {
        let (to_report, batches) = mpsc::sync_channel::<Vec<Record>>(QUEUED);
        let (give_back, emptied) = mpsc::channel::<Vec<Record>>();
        let report = crate::driver::thread_named("report", scope, move || {
            for batch in batches {
                let mut records = VecDeque::from(batch);
                while let Some(r) = records.pop_front() {
                    ask_ahead(&records);
                    match r {
                        Record::Resume(r) => sink.resume(r),
                        Record::Finding(f) => sink.finding(f),
                        Record::View(v) => sink.view(v),
                    }
                }
                // Empty: its room comes back with no move of records.
                let batch = Vec::from(records);
                // The stage may be gone already, its last batch sent.
                let _ = give_back.send(batch);
            }
        });
        let out = {
            let mut relay = Relay {
                batch: Vec::with_capacity(BATCH),
                to_report: Some(to_report),
                emptied,
            };
            f(&mut relay)
        };
        report
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        out
    })
}

/// Asks for the records next in line while one is written out: they were made on other cores
/// (the resume on a worker, its audit on the stage's), so each part is a read from afar. Each
/// level is found through the one asked for a record earlier, so that no step waits on the
/// read the step before started: the record three ahead is asked for itself; two ahead, its
/// strings and its cursor; the next one, its cursor's strings and first citation.
fn ask_ahead(records: &VecDeque<Record>) {
    use crate::cache::{prefetch, prefetch_bytes};
    if let Some(Record::Resume(r)) = records.get(2) {
        prefetch(&**r);
    }
    if let Some(Record::Resume(r)) = records.get(1) {
        for s in [
            r.session_id.as_deref(),
            Some(r.last_event_id.as_str()),
            r.first_event_id.as_deref(),
            Some(&*r.target),
        ]
        .into_iter()
        .flatten()
        {
            prefetch_bytes(s.as_bytes());
        }
        if let Some(c) = &r.forensic.cursor {
            prefetch(&**c);
        }
    }
    if let Some(Record::Resume(r)) = records.front()
        && let Some(c) = &r.forensic.cursor
    {
        prefetch_bytes(c.detail.as_bytes());
        if let Some(id) = &c.last_delivered_id {
            prefetch_bytes(id.as_bytes());
        }
        if let Some(first) = c.cites.first() {
            prefetch(first);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::Sink;
    use crate::driver::{Options, analyze_path};
    use crate::report::spool::Spool;

    /// The relay hands on the calls it was given, all of them and in the order given, for
    /// any number of records around the batch size; and a spool fed through it writes the
    /// same bytes as one fed straight.
    #[test]
    fn records_reach_the_sink_in_the_order_they_were_given() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let report = analyze_path(&root.join("fixtures/gen/mixed.pcap"), &Options::default());
        // Findings of the resumes, given again as findings of their own.
        let findings: Vec<Finding> = report
            .resumes
            .iter()
            .flat_map(|r| r.forensic.findings.iter().cloned())
            .collect();
        assert!(!report.resumes.is_empty() && !findings.is_empty());
        // Each record many times, each copy numbered, so that the order it came in shows.
        let feed = |s: &mut dyn Sink, n: usize| {
            for i in 0..n {
                let mut r = report.resumes[i % report.resumes.len()].clone();
                r.exchange = i as u32;
                s.resume(Box::new(r));
                if i % 7 == 0 {
                    let mut f = findings[i % findings.len()].clone();
                    f.detail = format!("finding {i}");
                    s.finding(f);
                }
            }
        };
        /// The calls as they came: resumes by number, findings by detail.
        #[derive(Default)]
        struct Calls(Vec<String>);
        impl Sink for Calls {
            fn resume(&mut self, r: Box<ResumeRecord>) {
                self.0.push(format!("resume {}", r.exchange));
            }
            fn finding(&mut self, f: Finding) {
                self.0.push(f.detail);
            }
            fn view(&mut self, v: SessionView) {
                self.0.push(v.session_id);
            }
        }
        for n in [0, 1, BATCH - 1, BATCH, BATCH + 1, BATCH * (QUEUED + 3) + 5] {
            let mut direct = Calls::default();
            feed(&mut direct, n);
            let mut relayed = Calls::default();
            on_report_thread(&mut relayed, |s| feed(s, n));
            assert!(relayed.0 == direct.0, "{n} records");
            let mut direct = Spool::with_memory("in", false, 4096);
            feed(&mut direct, n);
            let mut relayed = Spool::with_memory("in", false, 4096);
            on_report_thread(&mut relayed, |s| feed(s, n));
            assert_eq!(relayed.counts(), direct.counts(), "{n} records");
            assert!(relayed.written() == direct.written(), "{n} records");
        }
    }

    /// A panic on the report thread is raised by the call, not lost with the records.
    #[test]
    fn a_panic_of_the_sink_is_raised_by_the_call() {
        struct Failing;
        impl Sink for Failing {
            fn resume(&mut self, _: Box<ResumeRecord>) {
                panic!("the sink failed");
            }
            fn finding(&mut self, _: Finding) {}
            fn view(&mut self, _: SessionView) {}
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let report = analyze_path(&root.join("fixtures/gen/mixed.pcap"), &Options::default());
        let r = report.resumes[0].clone();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            on_report_thread(&mut Failing, |s| {
                for _ in 0..BATCH * (QUEUED + 4) {
                    s.resume(Box::new(r.clone()));
                }
            })
        }));
        let p = caught.expect_err("the panic is raised");
        assert_eq!(p.downcast_ref::<&str>(), Some(&"the sink failed"));
    }
}
