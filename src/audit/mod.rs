//! The session stage: what a whole session, and the other sessions of the capture, prove
//! about each resume.
//!
//! Input: the [`ExchangeSummary`]s of one input and their decided [`ResumeRecord`]s, exchange
//! by exchange as they end, in an order that does not depend on threads ([`Stage`]).
//! Output: each resume's [`Forensics`] (the id shape or other evidence that decided an
//! opaque-id resume, the client cursor audit, findings with the frames that prove them),
//! findings tied to no resume, and, on request, one [`SessionView`] per session.
//! Invariants:
//! - A session is audited when the client has ended it (`DELETE` answered 2xx) and nothing of
//!   it is open, at the end of the input, or early when the exchanges held exceed
//!   [`Retention::memory_bytes`] (least recently active first, counted). Its
//!   summaries are put in capture order first (frame, then connection and exchange), so the
//!   answer does not depend on the order they arrived in.
//! - The seed's verdict on integer ids is never changed. An `unverifiable` verdict on opaque
//!   ids is decided only from evidence: a user pattern, a shape learned from at least two
//!   consecutive ids with no contradiction in the session, a re-delivery of what the client
//!   had already acknowledged, or the server's `event: resume` acknowledgment.
//! - Priming events (no data) are never evidence of re-delivery: re-sending one delivers
//!   nothing. Identical content counts only for events that cannot legitimately repeat
//!   (responses, server requests, progress notifications).
//! - Memory: the facts each summary carries are capped where they are gathered; the stage
//!   holds the summaries of sessions not yet audited (bounded as above), and an index of
//!   [`MAX_CROSS_IDS`] distinctive ids for the cross-session check.
//! - A HAR's exchanges come whole and in the order of its entries: [`HarFeed`] puts them in
//!   order of start within half the retention budget before the stage takes them, and counts
//!   those it could not.

mod hops;
pub mod idshape;
pub mod verdict;

use std::cell::OnceCell;
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use serde::Serialize;

use crate::exchange::{
    ContentFact, ContentKind, ExchangeSummary, FactMap, IdFact, ResumeRecord, StreamSummary,
    fact_hash,
};
use crate::record::{BodyEnd, Mark};
use idshape::IdPattern;
use verdict::{DecimalId, Decision, LostRange, ResponseFacts, StreamOutcome, Verdict};

/// How the session stage runs.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `--id-pattern`: a user's description of the ids.
    pub id_pattern: Option<IdPattern>,
    /// `--sessions`: build one view per session.
    pub views: bool,
    /// The input's threads (`-j`): with 2 or more, the sessions still held when it ends are
    /// audited on two threads, else on this one alone. The report is the same either way.
    pub threads: usize,
}

/// Links followed back through resumes of resumes to find what the client had acknowledged.
const MAX_LINEAGE: usize = 8;
/// Findings of one kind reported per resume.
const MAX_FINDINGS_PER_KIND: usize = 8;
/// Exchanges listed per session view; the rest are counted.
pub const MAX_VIEW_EXCHANGES: usize = 1000;

/// A frame (or HAR entry) the report cites, with its role in the proof.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cite {
    /// What the frame shows in the proof (`resume_request`, `first_event`, ...).
    pub role: &'static str,
    /// The frame (or HAR entry) and its time.
    pub mark: Mark,
    /// Wireshark's `tcp.stream` of the connection; `None` on HAR input.
    pub tcp_stream: Option<u64>,
    /// The mark is a HAR entry index rather than a frame.
    pub har: bool,
    /// The session the cited exchange belongs to, when it is not the finding's own.
    pub session_id: Option<String>,
}

/// What decided (or backs) a resume's verdict beyond the seed's integer comparison.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceKind {
    /// The counter of a learned id shape was compared by the seed's boundary.
    IdShape,
    /// The counter of the user's `--id-pattern` was compared by the seed's boundary.
    IdPattern,
    /// An id the client had acknowledged was delivered again.
    IdRedelivered,
    /// An event the client had acknowledged (same type and data) was delivered again.
    EventRedelivered,
    /// The server's `event: resume` acknowledgment named its resume point.
    ResumeAck,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evidence {
    pub how: EvidenceKind,
    pub detail: String,
    pub id: Option<String>,
    pub shape: Option<String>,
    pub last_seq: Option<String>,
    pub first_seq: Option<String>,
    pub ack: Option<String>,
    /// How many acknowledged ids (or events) the stream delivered again.
    pub count: Option<u64>,
    pub cites: Vec<Cite>,
}

/// Where a resume's `Last-Event-ID` stands against what the capture shows the client was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CursorStatus {
    /// `Last-Event-ID` is the last id delivered on its stream before the resume.
    Consistent,
    /// Later ids were delivered on that stream before the resume.
    Stale,
    /// `Last-Event-ID` is beyond every id delivered on that stream.
    Ahead,
    /// The capture does not show where `Last-Event-ID` came from.
    NotSeen,
}

impl CursorStatus {
    /// The name the report gives the status (what its `Serialize` writes).
    pub fn as_str(self) -> &'static str {
        match self {
            CursorStatus::Consistent => "consistent",
            CursorStatus::Stale => "stale",
            CursorStatus::Ahead => "ahead",
            CursorStatus::NotSeen => "not_seen",
        }
    }
}

/// The client's cursor against what the capture shows it was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub status: CursorStatus,
    pub detail: String,
    pub last_delivered_id: Option<String>,
    pub behind_by: Option<u64>,
    pub cites: Vec<Cite>,
}

/// What a finding is about; docs/findings.md describes each kind and what it relies on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// The same id twice on one resumed stream.
    DuplicateIdInStream,
    /// The resumed stream re-sent ids or events delivered on another stream of the session.
    DuplicateDelivery,
    /// The resumed stream delivered ids first delivered to another session.
    CrossSessionLeak,
    /// The client resumed from a position older than one it had already been given.
    CursorStale,
    /// The client resumed from a position it was never given.
    CursorAhead,
    /// A reconnect without `Last-Event-ID` after the session's streams carried ids.
    CursorLost,
    /// Progress for one token went backwards or repeated on a resumed stream.
    ProgressRegressed,
    /// A JSON-RPC response id delivered twice.
    DuplicateResponse,
    /// A `list_changed` notification delivered again after a resume.
    ListChangedAgain,
}

impl FindingKind {
    /// Every kind, in report order.
    pub const ALL: [FindingKind; 9] = [
        FindingKind::DuplicateIdInStream,
        FindingKind::DuplicateDelivery,
        FindingKind::CrossSessionLeak,
        FindingKind::CursorStale,
        FindingKind::CursorAhead,
        FindingKind::CursorLost,
        FindingKind::ProgressRegressed,
        FindingKind::DuplicateResponse,
        FindingKind::ListChangedAgain,
    ];

    /// The name the report gives the kind.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::DuplicateIdInStream => "duplicate_id_in_stream",
            FindingKind::DuplicateDelivery => "duplicate_delivery",
            FindingKind::CrossSessionLeak => "cross_session_leak",
            FindingKind::CursorStale => "cursor_stale",
            FindingKind::CursorAhead => "cursor_ahead",
            FindingKind::CursorLost => "cursor_lost",
            FindingKind::ProgressRegressed => "progress_regressed",
            FindingKind::DuplicateResponse => "duplicate_response",
            FindingKind::ListChangedAgain => "list_changed_again",
        }
    }
}

/// How grave a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The server did something wrong, and the capture proves it.
    Error,
    /// Something a client or server should not do, or that breaks session state.
    Warning,
    /// Context for an analyst; nothing is proven wrong.
    Info,
}

/// Something the session stage proved about a session, with the frames that prove it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// What it is about.
    pub kind: FindingKind,
    /// How grave it is.
    pub severity: Severity,
    /// The session it is about, when known.
    pub session_id: Option<String>,
    /// One sentence for a person.
    pub detail: String,
    /// The event id (or JSON-RPC id) concerned, when one is.
    pub id: Option<String>,
    /// The other session, for a cross-session leak.
    pub other_session_id: Option<String>,
    /// The resume request this finding belongs to.
    pub resume: Option<Cite>,
    /// The frames that prove it.
    pub cites: Vec<Cite>,
}

/// What the session stage found about one resume.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Forensics {
    /// The shape (or user pattern) whose counter decided an opaque-id resume.
    pub id_shape: Option<String>,
    pub evidence: Option<Box<Evidence>>,
    pub cursor: Option<Box<Cursor>>,
    pub findings: Vec<Finding>,
    /// In a session the capture holds at several hops of a proxy: this resume's hop (0: the
    /// copy nearest the client).
    pub hop: Option<u32>,
    /// From hop 1 on: the request of the hop before that this one relays (boxed: every
    /// resume held for its session carries the field, few carry a value).
    pub relays: Option<Box<Cite>>,
}

/// A resume as a session view lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResumeView {
    pub request: Cite,
    pub verdict: Verdict,
    pub last_event_id: String,
    pub first_event_id: Option<String>,
    pub id_shape: Option<String>,
    pub cursor: Option<CursorStatus>,
}

/// One session: its exchanges in capture order, resumes, and findings.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionView {
    /// `Mcp-Session-Id`.
    pub session_id: String,
    /// `MCP-Protocol-Version` values the session's requests sent.
    pub protocol_versions: Vec<String>,
    /// Its first and last frame.
    pub first: Mark,
    /// See `first`.
    pub last: Mark,
    /// Its exchanges, the first 1000 of them.
    pub exchanges: Vec<ExchangeSummary>,
    /// Exchanges beyond that limit, counted.
    pub exchanges_omitted: u64,
    /// Its resumes.
    pub resumes: Vec<ResumeView>,
    /// Its findings.
    pub findings: Vec<Finding>,
}

/// What the stage gives besides the updated resumes.
#[cfg(test)]
#[derive(Debug, Default)]
pub struct Outcome {
    /// Findings tied to no resume, in capture order.
    pub findings: Vec<Finding>,
    pub views: Vec<SessionView>,
}

/// Exchanges of one session audited against each other. Every audit of a resume looks at the
/// session's other exchanges, so the work grows with the square of a session's size: a session
/// that reaches this many exchanges (a client reconnecting without end, or a hostile capture)
/// is audited then, and its later exchanges are audited apart from the earlier ones.
pub const MAX_AUDITED_EXCHANGES: usize = 4096;

type JoinKey = (Option<u64>, Option<u64>, u32, u64);

fn join_of_resume(r: &ResumeRecord) -> JoinKey {
    (
        r.connection.tcp_stream,
        r.connection.har_entry,
        r.exchange,
        r.request.frame,
    )
}

fn join_of_summary(x: &ExchangeSummary) -> Option<JoinKey> {
    Some((
        x.connection.tcp_stream,
        x.connection.har_entry,
        x.exchange,
        x.request?.frame,
    ))
}

/// A frame of exchange `x`; the session is named only where it is not the finding's own.
fn cite(x: &ExchangeSummary, role: &'static str, mark: Mark) -> Cite {
    Cite {
        role,
        mark,
        tcp_stream: x.connection.tcp_stream,
        har: x.connection.har_entry.is_some(),
        session_id: None,
    }
}

fn resume_cite(r: &ResumeRecord) -> Cite {
    Cite {
        role: "resume_request",
        mark: r.request,
        tcp_stream: r.connection.tcp_stream,
        har: r.connection.har_entry.is_some(),
        session_id: None,
    }
}

/// Where a fact sits: the summary index and the fact.
type At<'a, F> = (usize, &'a F);

/// Indexes over one session's kept facts.
struct SessionIndex<'a> {
    members: &'a [usize],
    /// The members whose streams carried ids: the ones a cursor or a namespace can come from
    /// (most exchanges of a long session carry none, and each audit looks at these).
    with_ids: Vec<usize>,
    /// Every id fact of the members, by hash; built only when resumes are audited
    /// (`ids_indexed`).
    ids: FactGroups<'a, IdFact>,
    ids_indexed: bool,
    content: FactGroups<'a, ContentFact>,
    rpc: FactMap<Vec<At<'a, ContentFact>>>,
    /// (run from end, prefix, suffix) → (support, breaks, skips), over all streams of the
    /// session, in order of key.
    shapes: Vec<ShapeTotal<'a>>,
    /// The members the capture lost bytes of (see [`lost_bytes`]), in capture order: a proof
    /// that needs every delivery of the session, or the absence of one, cannot be made past
    /// them.
    lossy: Vec<usize>,
    /// The members that began the session, in capture order.
    starts: Vec<usize>,
    /// Connections of the input that may carry MCP were not read: the session may have had
    /// exchanges the capture cannot show.
    unread: bool,
    /// The members whose event streams' ends the capture does not show (see
    /// [`SessionIndex::open_before`]), in capture order.
    unended: Vec<usize>,
    /// The highest decimal ids sent, made at the first resume that asks (see
    /// [`SessionIndex::highest_decimal`]).
    highest: OnceCell<Option<HighestDecimal<'a>>>,
}

/// A shape's key and its totals over a session (see [`SessionIndex::shapes`]).
type ShapeTotal<'a> = ((u8, &'a str, &'a str), (u64, u64, u64));

/// Facts of one session grouped by hash: sorted by hash, the facts of one hash in the order
/// they were added. One buffer for the whole session, where a map would hold one per hash
/// (most hashes, event ids, occur once).
struct FactGroups<'a, F> {
    entries: Vec<(u64, At<'a, F>)>,
}

impl<'a, F> FactGroups<'a, F> {
    fn new() -> Self {
        FactGroups {
            entries: Vec::new(),
        }
    }

    fn push(&mut self, hash: u64, at: At<'a, F>) {
        self.entries.push((hash, at));
    }

    /// Groups what was pushed; a stable sort keeps each hash's facts in the order pushed.
    fn seal(&mut self) {
        self.entries.sort_by_key(|e| e.0);
    }

    /// The facts of `hash`, in the order pushed (after [`FactGroups::seal`]).
    fn get(&self, hash: u64) -> &[(u64, At<'a, F>)] {
        let lo = self.entries.partition_point(|e| e.0 < hash);
        // Counted, not searched: most hashes have one fact or none, and callers read them all.
        let n = self.entries[lo..]
            .iter()
            .take_while(|e| e.0 == hash)
            .count();
        &self.entries[lo..lo + n]
    }
}

/// Adds up the tallies of equal keys in `shapes`, leaving one entry per key, in order of key.
fn total_shapes(shapes: &mut Vec<ShapeTotal<'_>>) {
    shapes.sort_by(|a, b| a.0.cmp(&b.0));
    shapes.dedup_by(|later, kept| {
        if later.0 != kept.0 {
            return false;
        }
        kept.1.0 += later.1.0;
        kept.1.1 += later.1.1;
        kept.1.2 += later.1.2;
        true
    });
}

/// The capture lost bytes of this exchange: holes in its event stream, a body whose framing
/// was lost, a request whose answer was not captured, or an answer whose request was not, or a
/// HAR body not proven whole. A captured stream still open when the capture ended lost
/// nothing before that end.
fn lost_bytes(x: &ExchangeSummary) -> bool {
    x.stream().is_some_and(|s| s.gaps > 0)
        || matches!(x.end, Some((BodyEnd::LostSync, _)))
        || x.request.is_none()
        || x.response.is_none()
        || har_body_unproven(x)
}

/// A HAR event stream whose body the entry does not prove whole: tools leave streamed bodies
/// out or cut them short, so it may have delivered more than it holds.
fn har_body_unproven(x: &ExchangeSummary) -> bool {
    x.connection.har_entry.is_some()
        && x.event_stream
        && !matches!(x.end, Some((BodyEnd::Complete, _)))
}

/// An event stream whose end the capture shows: complete, reset or gone away, or ended by an
/// error seen on the wire. Anything that is not an event stream counts as ended.
fn shows_end(x: &ExchangeSummary) -> bool {
    !x.event_stream
        || matches!(
            x.end,
            Some((
                BodyEnd::Complete | BodyEnd::Reset { .. } | BodyEnd::GoneAway { .. },
                _
            ))
        )
        || matches!(x.end, Some((BodyEnd::Stream(e), _)) if e.seen_on_wire())
}

/// A stream's offer to [`highest_sent`] for a decimal cursor before frame `before`: its
/// highest integer id when that was sent before, else its last id before, with its text.
fn decimal_offer(s: &StreamSummary, before: u64) -> Option<(&str, Mark)> {
    match &s.max_int_id {
        Some(m) if m.mark.frame < before => Some((m.text.as_str(), m.mark)),
        _ => last_id_before(s, before).and_then(|(_, m, t)| Some((t?, m))),
    }
}

/// The highest id sent, as [`highest_sent`] gives it: its text, where, and the stream.
type Highest<'a> = Option<(&'a str, Mark, usize)>;

/// The highest decimal id of a session's streams before a frame, for sessions with many
/// streams and many resumes whose cursor the capture does not show delivered, where the loop
/// over every earlier stream at every resume would take time quadratic in the session.
///
/// A stream's offer stops changing at the last frame of its ids (its settling frame): before
/// a frame past it, the offer is its final one. So the answer is the best of two parts: the
/// settled streams, a prefix of them in order of settling frame, whose best final offer is
/// kept for every prefix; and the streams that began before the frame but had not settled,
/// found through a tree of settling frames over the streams in order of start. Best means
/// the highest value, and of equal values the first stream in capture order, as in the loop.
struct HighestDecimal<'a> {
    /// Settling frames, ascending, and the best final offer among the streams up to each
    /// (a position in `with_ids`).
    settle: Vec<u64>,
    settled_best: Vec<Option<u32>>,
    /// Each position's final offer, when it has one.
    offer: Vec<Option<(DecimalId<'a>, &'a str, Mark)>>,
    /// Start frames, ascending, with their positions; a tree whose leaves are those
    /// positions' settling frames and whose nodes hold their children's maximum.
    start: Vec<(u64, u32)>,
    tree: Vec<u64>,
}

impl<'a> HighestDecimal<'a> {
    /// Streams with ids a session needs for this to pay for itself.
    const MIN_STREAMS: usize = 32;

    /// `None` when some stream's final offer is not decimal: the loop compares such ids.
    fn build(xs: &'a [Box<ExchangeSummary>], with_ids: &[usize]) -> Option<Self> {
        let n = with_ids.len();
        let mut offer = Vec::with_capacity(n);
        let mut settle_of = Vec::with_capacity(n);
        let mut settle_at = Vec::with_capacity(n);
        let mut start = Vec::with_capacity(n);
        for (p, &j) in with_ids.iter().enumerate() {
            let begin = xs[j].start().frame;
            let mut settle = begin;
            let mut last = None;
            if let Some(s) = stream_of(xs, j) {
                let marks = s.max_int_id.iter().chain(&s.last_id).map(|l| l.mark.frame);
                let facts = s.id_facts.iter().map(|f| f.mark.frame);
                settle = marks.chain(facts).fold(settle, u64::max);
                if let Some((text, mark)) = decimal_offer(s, u64::MAX) {
                    last = Some((DecimalId::parse(text)?, text, mark));
                }
            }
            offer.push(last);
            settle_at.push(settle);
            settle_of.push((settle, u32::try_from(p).ok()?));
            start.push((begin, u32::try_from(p).ok()?));
        }
        settle_of.sort_unstable();
        start.sort_unstable();
        let mut settled_best = Vec::with_capacity(n);
        let mut best: Option<u32> = None;
        for &(_, p) in &settle_of {
            if Self::better(&offer, p, best) {
                best = Some(p);
            }
            settled_best.push(best);
        }
        let leaves = n.next_power_of_two();
        let mut tree = vec![0; 2 * leaves];
        for (i, &(_, p)) in start.iter().enumerate() {
            tree[leaves + i] = settle_at[p as usize];
        }
        for node in (1..leaves).rev() {
            tree[node] = tree[2 * node].max(tree[2 * node + 1]);
        }
        Some(HighestDecimal {
            settle: settle_of.iter().map(|&(f, _)| f).collect(),
            settled_best,
            offer,
            start,
            tree,
        })
    }

    /// Position `p`'s final offer beats the one at `best`: a higher value, or the same value
    /// from a stream earlier in capture order.
    fn better(offer: &[Option<(DecimalId<'a>, &'a str, Mark)>], p: u32, best: Option<u32>) -> bool {
        let Some((d, ..)) = &offer[p as usize] else {
            return false;
        };
        let Some(b) = best else { return true };
        let Some((bd, ..)) = &offer[b as usize] else {
            return true;
        };
        match d.cmp_value(bd) {
            Ordering::Greater => true,
            Ordering::Equal => p < b,
            Ordering::Less => false,
        }
    }

    fn query(
        &self,
        xs: &'a [Box<ExchangeSummary>],
        with_ids: &[usize],
        xi: usize,
        before: u64,
    ) -> Option<Highest<'a>> {
        let settled = self.settle.partition_point(|&f| f < before);
        let mut best: Option<(DecimalId<'a>, &'a str, Mark, u32)> = None;
        if let Some(p) = settled.checked_sub(1).and_then(|k| self.settled_best[k]) {
            if with_ids[p as usize] == xi {
                // Rare (the resumed stream settled before its own request): the loop leaves
                // it out.
                return None;
            }
            if let Some((d, text, mark)) = &self.offer[p as usize] {
                best = Some((d.clone(), text, *mark, p));
            }
        }
        let began = self.start.partition_point(|&(f, _)| f < before);
        let leaves = self.tree.len() / 2;
        // Nodes over [lo, hi) of the start order, whose settling frames reach `before`.
        let mut stack = vec![(1usize, 0usize, leaves)];
        while let Some((node, lo, hi)) = stack.pop() {
            if lo >= began || self.tree[node] < before {
                continue;
            }
            if hi - lo > 1 {
                let mid = (lo + hi) / 2;
                stack.push((2 * node + 1, mid, hi));
                stack.push((2 * node, lo, mid));
                continue;
            }
            let p = self.start[lo].1;
            let j = with_ids[p as usize];
            if j == xi {
                continue;
            }
            let Some((text, mark)) = stream_of(xs, j).and_then(|s| decimal_offer(s, before)) else {
                continue;
            };
            let d = DecimalId::parse(text)?;
            let wins = match &best {
                None => true,
                Some((bd, _, _, bp)) => match d.cmp_value(bd) {
                    Ordering::Greater => true,
                    Ordering::Equal => p < *bp,
                    Ordering::Less => false,
                },
            };
            if wins {
                best = Some((d, text, mark, p));
            }
        }
        Some(best.map(|(_, text, mark, p)| (text, mark, with_ids[p as usize])))
    }
}

impl<'a> SessionIndex<'a> {
    /// The index of `members`; the facts only the audit of a resume looks at (ids, content,
    /// shapes) only when `resumes`.
    fn build(xs: &'a [Box<ExchangeSummary>], members: &'a [usize], resumes: bool) -> Self {
        let mut ix = SessionIndex {
            members,
            with_ids: Vec::new(),
            ids: FactGroups::new(),
            ids_indexed: resumes,
            content: FactGroups::new(),
            rpc: FactMap::default(),
            shapes: Vec::new(),
            lossy: Vec::new(),
            starts: Vec::new(),
            unread: false,
            unended: Vec::new(),
            highest: OnceCell::new(),
        };
        for &i in members {
            if lost_bytes(&xs[i]) {
                ix.lossy.push(i);
            }
            if xs[i].opens_session {
                ix.starts.push(i);
            }
            if !shows_end(&xs[i]) {
                ix.unended.push(i);
            }
            let Some(s) = xs[i].stream() else {
                continue;
            };
            for c in s.content.iter() {
                if let Some(id) = c.rpc_id
                    && c.kind == ContentKind::Response
                {
                    ix.rpc.entry(id).or_default().push((i, c));
                }
            }
            if !resumes {
                continue;
            }
            if s.ids > 0 {
                ix.with_ids.push(i);
            }
            for f in s.id_facts.iter() {
                ix.ids.push(f.hash, (i, f));
            }
            for c in s.content.iter() {
                ix.content.push(c.hash, (i, c));
            }
            ix.shapes.extend(s.shapes.iter().map(|t| {
                (
                    (t.k, t.prefix.as_str(), t.suffix.as_str()),
                    (
                        u64::from(t.support),
                        u64::from(t.breaks),
                        u64::from(t.skips),
                    ),
                )
            }));
        }
        ix.ids.seal();
        ix.content.seal();
        total_shapes(&mut ix.shapes);
        ix
    }

    /// The first member before frame `before` (other than `except`) whose bytes the capture
    /// lost.
    fn loss_before(
        &self,
        xs: &[Box<ExchangeSummary>],
        before: u64,
        except: usize,
    ) -> Option<usize> {
        self.lossy
            .iter()
            .copied()
            .find(|&j| j != except && xs[j].start().frame < before)
    }

    /// An event stream of the session, other than `except`, that began before frame `before`
    /// and whose end the capture does not show (still open when the capture ended, no longer
    /// followed, or not readable to its end): its last bytes may have been lost without a
    /// trace, since no later packet of its connection stands past them.
    fn open_before(
        &self,
        xs: &[Box<ExchangeSummary>],
        before: u64,
        except: usize,
    ) -> Option<usize> {
        self.unended
            .iter()
            .copied()
            .find(|&j| j != except && xs[j].start().frame < before)
    }

    /// The highest decimal id sent before frame `before` by the session's streams other than
    /// `xi`, as [`highest_sent`] finds it for a decimal cursor, in logarithmic time; `None`
    /// when this cannot tell (an id not decimal is in the way) and the loop must decide.
    /// Sessions with few streams that carried ids take the loop.
    fn highest_decimal(
        &self,
        xs: &'a [Box<ExchangeSummary>],
        xi: usize,
        before: u64,
    ) -> Option<Highest<'a>> {
        if self.with_ids.len() < HighestDecimal::MIN_STREAMS {
            return None;
        }
        self.highest
            .get_or_init(|| HighestDecimal::build(xs, &self.with_ids))
            .as_ref()?
            .query(xs, &self.with_ids, xi, before)
    }

    /// The capture holds the session from its start: an exchange before frame `before` began
    /// it.
    fn start_seen(&self, xs: &[Box<ExchangeSummary>], before: u64) -> bool {
        self.starts.iter().any(|&j| xs[j].start().frame < before)
    }

    /// The learned shape two ids share: their counters, prefix and suffix, and its display.
    /// A shape holds only when nothing in the session contradicts it, so none is learned in a
    /// session the capture lost bytes of: the contradiction may be in what was lost.
    fn shape_pair<'s>(&self, last: &'s str, first: &'s str) -> Option<ShapePair<'s>> {
        let (k, l, f, skips) = self.shared_shape(last, first)?;
        let families: Vec<(&str, &str)> = self
            .shapes
            .iter()
            .filter(|((kk, _, _), (s, b, _))| usize::from(*kk) == k && *s > 0 && *b == 0)
            .map(|((_, p, s), _)| (*p, *s))
            .collect();
        Some(ShapePair {
            last_seq: l.seq,
            first_seq: f.seq,
            prefix: l.prefix,
            suffix: l.suffix,
            display: idshape::display_shape(&families),
            skips,
        })
    }

    /// The learned shape two ids share, as [`SessionIndex::shape_pair`] finds it: the run
    /// from the end that holds their counters, their splits there, and whether some stream's
    /// counter skipped.
    fn shared_shape<'s>(
        &self,
        last: &'s str,
        first: &'s str,
    ) -> Option<(usize, idshape::Split<'s>, idshape::Split<'s>, bool)> {
        if !self.lossy.is_empty() || self.unread {
            return None;
        }
        for k in 0..idshape::MAX_RUN_FROM_END {
            let (Some(a), Some(b)) = (
                idshape::split_at_run(last, k),
                idshape::split_at_run(first, k),
            ) else {
                return None;
            };
            if a.prefix != b.prefix || a.suffix != b.suffix {
                continue;
            }
            let key = (k as u8, a.prefix, a.suffix);
            let Ok(at) = self.shapes.binary_search_by(|e| e.0.cmp(&key)) else {
                continue;
            };
            let (support, breaks, skips) = self.shapes[at].1;
            if support == 0 || breaks > 0 {
                continue;
            }
            return Some((k, a, b, skips > 0));
        }
        None
    }
}

struct ShapePair<'s> {
    /// Some stream's counter went up by more than one: the ids between may have gone to
    /// other streams, so a counter past the next one proves no loss.
    skips: bool,
    last_seq: &'s str,
    first_seq: &'s str,
    prefix: &'s str,
    suffix: &'s str,
    display: String,
}

/// How two ids of one session compare, when anything says they can.
fn order_ids(ix: &SessionIndex<'_>, opts: &Options, a: &str, b: &str) -> Option<Ordering> {
    if let Some(o) = idshape::cmp_decimal(a, b) {
        return Some(o);
    }
    if let Some(p) = &opts.id_pattern
        && let Some((x, y)) = p.pair(a, b)
    {
        return idshape::cmp_decimal(x, y);
    }
    let (_, a, b, _) = ix.shared_shape(a, b)?;
    idshape::cmp_decimal(a.seq, b.seq)
}

/// A stream the client's cursor came from, and how far along it the cursor was.
struct Link<'a> {
    x: usize,
    fact: &'a IdFact,
}

/// The lists an audit of one resume fills and reads, kept for the next resume of the session
/// rather than made for each: a reconnect storm audits tens of resumes a session.
#[derive(Default)]
struct Scratch<'a> {
    /// The resume's lineage ([`lineage`]).
    links: Vec<Link<'a>>,
    /// The ids the resumed stream delivered, priming events left out.
    resumed_ids: Vec<&'a IdFact>,
}

/// The first delivery of a distinctive id, for the cross-session check.
#[derive(Clone, Debug)]
struct Delivery {
    session: Arc<str>,
    mark: Mark,
    /// The connection's number, meaningful when `flags` has [`Delivery::STREAM`].
    stream: u64,
    flags: u8,
}

impl Delivery {
    const STREAM: u8 = 1;
    const HAR: u8 = 2;

    fn new(session: Arc<str>, mark: Mark, tcp_stream: Option<u64>, har: bool) -> Self {
        let mut flags = 0;
        if tcp_stream.is_some() {
            flags |= Delivery::STREAM;
        }
        if har {
            flags |= Delivery::HAR;
        }
        Delivery {
            session,
            mark,
            stream: tcp_stream.unwrap_or(0),
            flags,
        }
    }

    fn tcp_stream(&self) -> Option<u64> {
        (self.flags & Delivery::STREAM != 0).then_some(self.stream)
    }

    fn har(&self) -> bool {
        self.flags & Delivery::HAR != 0
    }
}

/// An id's hash and its first delivery.
#[derive(Debug)]
struct CrossEntry {
    hash: u64,
    delivery: Delivery,
}

/// First deliveries of distinctive ids over the whole input, bounded: when full, the oldest
/// entry goes first, so a leak is seen while the leaked id is among the last `cap`
/// ([`MAX_CROSS_IDS`]) distinctive ids delivered.
///
/// The entries sit in one list in the order their ids first came (a ring once full, the
/// oldest replaced in place), and a table of positions finds them by hash: 56 bytes an entry
/// and 5 a table slot, where a map holding the entries and a queue of their order took
/// 65 a slot (with up to twice as many slots as entries) and 8 more an entry.
#[derive(Debug)]
struct CrossIndex {
    entries: Vec<CrossEntry>,
    /// Once `entries` is full, the next one replaced.
    oldest: usize,
    at: hashbrown::HashTable<u32>,
    cap: usize,
}

impl Default for CrossIndex {
    fn default() -> Self {
        CrossIndex::with_cap(MAX_CROSS_IDS)
    }
}

/// Distinctive ids remembered for the cross-session check (at most about 17 MB in all).
pub const MAX_CROSS_IDS: usize = 1 << 18;

/// The table's hash of an id's hash (spread as the maps of facts spread theirs).
fn cross_slot_hash(hash: u64) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(hash)
}

impl CrossIndex {
    fn with_cap(cap: usize) -> Self {
        CrossIndex {
            entries: Vec::new(),
            oldest: 0,
            at: hashbrown::HashTable::new(),
            // Positions are u32.
            cap: cap.clamp(1, u32::MAX as usize),
        }
    }

    fn get(&self, hash: u64) -> Option<&Delivery> {
        let entries = &self.entries;
        let i = *self.at.find(cross_slot_hash(hash), |&i| {
            entries.get(i as usize).is_some_and(|e| e.hash == hash)
        })?;
        entries.get(i as usize).map(|e| &e.delivery)
    }

    fn add(&mut self, x: &ExchangeSummary, session: &Arc<str>) {
        // Integers and short ids can be shared by chance: they never prove a leak.
        let Some(s) = x.stream().filter(|_| x.stream_distinctive) else {
            return;
        };
        for f in s.id_facts.iter() {
            if !f.distinctive() {
                continue;
            }
            let d = Delivery::new(
                session.clone(),
                f.mark,
                x.connection.tcp_stream,
                x.connection.har_entry.is_some(),
            );
            self.insert(f.hash, d);
        }
    }

    /// Keeps `d` as the first delivery of the id hashed `hash` unless one at an earlier
    /// frame is kept already.
    fn insert(&mut self, hash: u64, d: Delivery) {
        let entries = &mut self.entries;
        let slot_hash = cross_slot_hash(hash);
        if let Some(&i) = self.at.find(slot_hash, |&i| {
            entries.get(i as usize).is_some_and(|e| e.hash == hash)
        }) {
            // An earlier delivery replaces the one kept; the entry keeps its place.
            if let Some(e) = entries.get_mut(i as usize)
                && d.mark.frame < e.delivery.mark.frame
            {
                e.delivery = d;
            }
            return;
        }
        let entry = CrossEntry { hash, delivery: d };
        let i = if entries.len() < self.cap {
            entries.push(entry);
            entries.len() - 1
        } else {
            let i = self.oldest;
            self.oldest = (i + 1) % self.cap;
            let Some(old) = entries.get_mut(i) else {
                return;
            };
            if let Ok(e) = self
                .at
                .find_entry(cross_slot_hash(old.hash), |&j| j as usize == i)
            {
                e.remove();
            }
            *old = entry;
            i
        };
        let entries = &self.entries;
        self.at.insert_unique(slot_hash, i as u32, |&j| {
            entries
                .get(j as usize)
                .map_or(0, |e| cross_slot_hash(e.hash))
        });
    }
}

/// Where the stage's results go, each once its session is audited (on a thread of its own
/// when a capture is read by several).
pub trait Sink: Send {
    /// A resume, with its forensics filled in. Boxed as the stage held it: a record is about
    /// a kilobyte, and most sinks only read it.
    fn resume(&mut self, r: Box<ResumeRecord>);
    /// A finding tied to no resume.
    fn finding(&mut self, f: Finding);
    /// A session view (only with [`Options::views`]).
    fn view(&mut self, v: SessionView);
}

/// A borrowed sink takes the records for its owner.
impl<T: Sink + ?Sized> Sink for &mut T {
    fn resume(&mut self, r: Box<ResumeRecord>) {
        (**self).resume(r)
    }
    fn finding(&mut self, f: Finding) {
        (**self).finding(f)
    }
    fn view(&mut self, v: SessionView) {
        (**self).view(v)
    }
}

/// When the stage audits a session before the input is over. There is no time after which a
/// session is over: a client may resume hours later (after a laptop slept, say), and that is
/// when a server is most likely to have lost the events; so sessions are audited early only
/// when memory runs short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Bytes of exchange facts held for sessions not yet audited; past it, the least recently
    /// active sessions without an open exchange are audited early.
    pub memory_bytes: usize,
}

impl Retention {
    /// Everything is held until the end of the input.
    pub const UNBOUNDED: Retention = Retention {
        memory_bytes: usize::MAX,
    };
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            memory_bytes: DEFAULT_SESSION_MEMORY,
        }
    }
}

/// `--session-memory` by default: five times what hundreds of sessions open at once hold, and
/// what keeps the whole process within 64 MiB on captures of thousands of interleaved
/// sessions, whatever their size.
pub const DEFAULT_SESSION_MEMORY: usize = 16 << 20;

/// A session whose exchanges are not yet audited.
#[derive(Default)]
struct Live {
    name: Arc<str>,
    /// Boxed: a list of the summaries themselves doubled its room as it grew, and the room
    /// not yet used (a quarter to a half of the list, several hundred bytes a slot) was held
    /// for every session; one is made whole again when the session is audited.
    #[allow(clippy::vec_box)]
    xs: Vec<Box<ExchangeSummary>>,
    /// Boxed: a record is large, and a long session's list grows (and is sorted) by moving
    /// its items.
    #[allow(clippy::vec_box)]
    resumes: Vec<Box<ResumeRecord>>,
    /// Exchanges of the session begun and not yet over.
    open: u32,
    /// The client ended the session (`DELETE` answered 2xx): it is audited as soon as nothing
    /// of it is open.
    terminated: bool,
    /// Its place among idle sessions (when `open` is 0).
    idle_at: Option<u64>,
    held: usize,
}

/// The slot of each session held, by id.
type LiveMap = hashbrown::HashMap<Arc<str>, usize, foldhash::quality::RandomState>;

/// The sessions held, each in a slot that stays its own while it is held. The open exchanges
/// and the idle order name a session by its slot: finding it again takes no lookup of its id,
/// and keeping it named no count of references (each count changed is a locked instruction,
/// which waits for every store before it: a reconnect storm's stage made four an exchange).
#[derive(Default)]
struct Sessions {
    ids: LiveMap,
    slots: Vec<Live>,
    /// Slots no session holds; their [`Live`] is the default, never idle.
    free: Vec<usize>,
}

impl Sessions {
    /// Sessions held.
    fn len(&self) -> usize {
        self.ids.len()
    }

    /// The slot of session `sid`, made when it is new: one lookup.
    fn slot(&mut self, sid: &str) -> usize {
        match self.ids.entry_ref(sid) {
            hashbrown::hash_map::EntryRef::Occupied(o) => *o.get(),
            hashbrown::hash_map::EntryRef::Vacant(v) => {
                let name: Arc<str> = Arc::from(sid);
                let live = Live {
                    name: name.clone(),
                    ..Live::default()
                };
                let slot = match self.free.pop() {
                    Some(slot) => {
                        self.slots[slot] = live;
                        slot
                    }
                    None => {
                        self.slots.push(live);
                        self.slots.len() - 1
                    }
                };
                v.insert_with_key(name, slot);
                slot
            }
        }
    }

    /// Lets the session of `slot` go: its slot is free for the next new one.
    fn remove(&mut self, slot: usize) -> Live {
        let l = std::mem::take(&mut self.slots[slot]);
        self.ids.remove(&*l.name);
        self.free.push(slot);
        l
    }
}

/// Moves the session of `slot`, `l`, to the end of the idle order, as of event count `seq` (or
/// out of it, while it has open exchanges). True when an entry was added to `idle`.
fn touch_live(seq: u64, slot: usize, idle: &mut VecDeque<(u64, usize)>, l: &mut Live) -> bool {
    let was = l.idle_at.take();
    if l.open > 0 {
        return false;
    }
    l.idle_at = Some(seq);
    // A session touched again while it is last (an exchange's open, close and end come one
    // after the other) keeps its entry.
    if let Some(back) = idle.back_mut()
        && was == Some(back.0)
        && back.1 == slot
    {
        back.0 = seq;
        return false;
    }
    idle.push_back((seq, slot));
    true
}

/// Counters of the stage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageStats {
    /// Sessions audited before they were over: the memory bound, or
    /// [`MAX_AUDITED_EXCHANGES`]; their later exchanges are audited apart from the earlier.
    pub sessions_retired_early: u64,
    /// Exchanges of an input held whole that began before one the stage had already taken
    /// (see [`HarFeed`]).
    pub har_entries_late: u64,
}

/// The session stage over one input, fed exchange by exchange in a deterministic order.
/// Memory: the exchanges of sessions not yet audited (bounded by [`Retention`] and
/// [`MAX_AUDITED_EXCHANGES`] per session), one entry per open exchange, and the cross-session
/// index ([`MAX_CROSS_IDS`]).
pub struct Stage {
    opts: Options,
    retention: Retention,
    /// Keyed by session ids a peer chose: a seeded hasher (foldhash), not SipHash, which was
    /// a few percent of a reconnect storm's time.
    sessions: Sessions,
    /// Sessions without an open exchange, least recently active first (by the count of
    /// events taken when they were last active). An entry whose count is no longer its
    /// session's `idle_at` is stale and skipped: a session touched again is pushed anew
    /// rather than taken out (a tree kept in order cost a storm of reconnects a few percent),
    /// and the queue is compacted when stale entries outnumber the sessions. Sessions by slot:
    /// an entry whose slot was let go, or holds another session since, is stale too (its
    /// count is none, or a later one).
    idle: VecDeque<(u64, usize)>,
    /// Open exchanges by (connection, exchange), and their session's slot: a session with an
    /// open exchange is held (see [`Stage::retire`]), so the slot stays its own.
    open: HashMap<(u64, u32), usize, rustc_hash::FxBuildHasher>,
    held: usize,
    seq: u64,
    cross: CrossIndex,
    /// The hop of each server that proxies' copies placed so far.
    hops: hops::HopMap,
    /// Traffic of the input that may carry MCP was not read (so far): any session may have
    /// had exchanges there.
    unread: bool,
    pub stats: StageStats,
}

impl Stage {
    pub fn new(opts: &Options, retention: Retention) -> Self {
        Stage {
            opts: opts.clone(),
            retention,
            sessions: Sessions::default(),
            idle: VecDeque::new(),
            open: HashMap::default(),
            held: 0,
            seq: 0,
            cross: CrossIndex::default(),
            hops: hops::HopMap::default(),
            unread: false,
            stats: StageStats::default(),
        }
    }

    /// A connection of the input that may carry MCP was not read, wholly or in part, or lost
    /// requests that no session can be named for: from now on no session is taken to be
    /// whole (no claim rests on what a session was not sent).
    pub fn traffic_unread(&mut self) {
        self.unread = true;
    }

    /// Moves the session of `slot` to the end of the idle order (or out of it, while it has
    /// open exchanges).
    fn touch(&mut self, slot: usize) {
        self.seq += 1;
        let l = &mut self.sessions.slots[slot];
        if touch_live(self.seq, slot, &mut self.idle, l) {
            self.compact_idle();
        }
    }

    /// Drops the stale entries of the idle order once they outnumber the sessions.
    fn compact_idle(&mut self) {
        if self.idle.len() > 4 * self.sessions.len() + 1024 {
            let slots = &self.sessions.slots;
            self.idle
                .retain(|(k, slot)| slots[*slot].idle_at == Some(*k));
        }
    }

    /// An exchange of session `sid` has begun on connection `key` (its request is seen).
    pub fn opened(&mut self, sid: &str, key: (u64, u32)) {
        let slot = self.sessions.slot(sid);
        self.sessions.slots[slot].open += 1;
        if let Some(before) = self.open.insert(key, slot) {
            self.closed(before);
        }
        self.touch(slot);
    }

    fn closed(&mut self, slot: usize) {
        let l = &mut self.sessions.slots[slot];
        l.open = l.open.saturating_sub(1);
        self.touch(slot);
    }

    /// An exchange is over: its summary (when kept) and its resume (when it is one). `key`
    /// names the exchange an earlier [`Stage::opened`] announced.
    pub fn exchange<S: Sink + ?Sized>(
        &mut self,
        key: Option<(u64, u32)>,
        summary: Option<Box<ExchangeSummary>>,
        resume: Option<Box<ResumeRecord>>,
        sink: &mut S,
    ) {
        let mut ended_in = None;
        if let Some(k) = key
            && let Some(slot) = self.open.remove(&k)
        {
            self.closed(slot);
            ended_in = Some(slot);
        }
        let Some(x) = summary.filter(|x| x.session_id.is_some()) else {
            // Nothing to audit it against: it stands on its own stream.
            if let Some(r) = resume {
                sink.resume(r);
            }
            if let Some(s) = ended_in {
                self.retire_if_over(s, sink);
            }
            self.enforce(sink);
            return;
        };
        let bytes = held_bytes(&x, resume.as_deref());
        let sid = x.session_id.as_deref().unwrap_or_default();
        // The session the exchange began in is nearly always the one it is held in.
        let slot = match ended_in {
            Some(s) if *self.sessions.slots[s].name == *sid => s,
            _ => self.sessions.slot(sid),
        };
        let l = &mut self.sessions.slots[slot];
        self.cross.add(&x, &l.name);
        l.terminated |= x.method.as_deref() == Some("DELETE")
            && x.status.is_some_and(|s| (200..300).contains(&s));
        l.xs.push(x);
        l.resumes.extend(resume);
        l.held += bytes;
        let full = l.xs.len() >= MAX_AUDITED_EXCHANGES;
        self.held += bytes;
        // [`Stage::touch`] on the session at hand.
        self.seq += 1;
        let pushed = touch_live(self.seq, slot, &mut self.idle, l);
        // Whether [`Stage::retire_if_over`] would audit it below: auditing another session
        // meanwhile leaves this one as it is.
        let over = l.terminated && l.open == 0;
        if pushed {
            self.compact_idle();
        }
        if full {
            self.stats.sessions_retired_early += 1;
            self.retire(slot, sink);
        }
        if let Some(s) = ended_in
            && s != slot
        {
            self.retire_if_over(s, sink);
        }
        // Once audited for being full, it is either gone or held anew with open exchanges.
        if over && !full {
            self.retire(slot, sink);
        }
        self.enforce(sink);
    }

    /// Audits the session of `slot` when the client ended it and nothing of it is open.
    fn retire_if_over<S: Sink + ?Sized>(&mut self, slot: usize, sink: &mut S) {
        let l = &self.sessions.slots[slot];
        if l.terminated && l.open == 0 {
            self.retire(slot, sink);
        }
    }

    /// While over the memory bound, audits the least recently active sessions.
    fn enforce<S: Sink + ?Sized>(&mut self, sink: &mut S) {
        while self.held > self.retention.memory_bytes
            && let Some((k, slot)) = self.idle.pop_front()
        {
            if self.sessions.slots[slot].idle_at == Some(k) {
                self.stats.sessions_retired_early += 1;
                self.retire(slot, sink);
            }
        }
    }

    /// Audits what is held of one session and lets it go; a session with open exchanges stays
    /// known, empty, so that their ends are counted.
    fn retire<S: Sink + ?Sized>(&mut self, slot: usize, sink: &mut S) {
        let mut l = self.take_live(slot);
        let audit = audit_session(
            &l.name,
            std::mem::take(&mut l.xs),
            &mut l.resumes,
            &self.cross,
            &self.opts,
            self.unread,
            &mut self.hops,
        );
        hand_on(l.resumes, audit, sink);
    }

    /// What is held of one session, taken out of the stage (see [`Stage::retire`]).
    fn take_live(&mut self, slot: usize) -> Live {
        let held = &mut self.sessions.slots[slot];
        self.held = self.held.saturating_sub(held.held);
        if held.open > 0 {
            let anew = Live {
                name: held.name.clone(),
                open: held.open,
                ..Live::default()
            };
            std::mem::replace(held, anew)
        } else {
            self.sessions.remove(slot)
        }
    }

    /// The input is over: every session still held is audited, in order of name.
    ///
    /// With [`Options::threads`] of 2 or more, on two threads: a session whose exchanges all
    /// reach one server neither reads nor adds to the hop map ([`hops::one_server`]), so those
    /// sessions are audited in any order, on either thread, while the others are audited in
    /// order of name on this one, first (each may place servers for the next). Their records
    /// are handed on in order of name, as on one thread, each session's as soon as those
    /// before it are (the report's thread need not wait for the last one).
    pub fn finish<S: Sink + ?Sized>(mut self, sink: &mut S) -> StageStats {
        let mut held: Vec<(Arc<str>, usize)> = self
            .sessions
            .ids
            .iter()
            .map(|(sid, slot)| (sid.clone(), *slot))
            .collect();
        held.sort_unstable();
        if self.opts.threads < 2 || held.len() < 2 {
            for (_, slot) in held {
                self.retire(slot, sink);
            }
            return self.stats;
        }
        let lives: Vec<Live> = held
            .into_iter()
            .map(|(_, slot)| self.take_live(slot))
            .collect();
        let n = lives.len();
        // Each session's records once audited, by its place in order of name.
        let mut done: Vec<Option<Audited>> = (0..n).map(|_| None).collect();
        let (cross, opts, unread) = (&self.cross, &self.opts, self.unread);
        let audit = |mut l: Live, hops: &mut hops::HopMap| {
            let xs = std::mem::take(&mut l.xs);
            let audit = audit_session(&l.name, xs, &mut l.resumes, cross, opts, unread, hops);
            (l.resumes, audit)
        };
        let mut together = Vec::new();
        for (i, l) in lives.into_iter().enumerate() {
            if hops::one_server(&l.xs) {
                together.push((i, l));
            } else {
                done[i] = Some(audit(l, &mut self.hops));
            }
        }
        let queue = std::sync::Mutex::new(together.into_iter());
        let next = || {
            queue
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .next()
        };
        let (to_here, from_there) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            let there = std::thread::Builder::new()
                .name("sessions 1".to_string())
                .spawn_scoped(s, move || {
                    // Stays empty: no session audited here reads or adds to it.
                    let mut no_hops = hops::HopMap::default();
                    while let Some((i, l)) = next() {
                        if to_here.send((i, audit(l, &mut no_hops))).is_err() {
                            break;
                        }
                    }
                });
            // This thread audits too (all of them, if no second thread could be had), and
            // hands on the records of each session whose turn has come.
            let mut no_hops = hops::HopMap::default();
            let mut handed = 0;
            loop {
                let mine = next();
                let more = mine.is_some();
                if let Some((i, l)) = mine {
                    done[i] = Some(audit(l, &mut no_hops));
                }
                for (i, a) in from_there.try_iter() {
                    done[i] = Some(a);
                }
                while let Some((resumes, audit)) = done.get_mut(handed).and_then(Option::take) {
                    hand_on(resumes, audit, sink);
                    handed += 1;
                }
                if !more {
                    break;
                }
            }
            if let Ok(h) = there {
                h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            }
            for (i, a) in from_there.try_iter() {
                done[i] = Some(a);
            }
            for (resumes, audit) in done.into_iter().skip(handed).flatten() {
                hand_on(resumes, audit, sink);
            }
        });
        self.stats
    }
}

/// What the audit of one session gives besides its resumes' forensics: its findings tied to
/// no resume and, on request, its view.
type SessionAudit = (Vec<Finding>, Option<SessionView>);

/// A session audited: its resumes, and what else its audit gave.
#[allow(clippy::vec_box)]
type Audited = (Vec<Box<ResumeRecord>>, SessionAudit);

/// Hands on the records of one audited session: its resumes, its findings, its view.
#[allow(clippy::vec_box)]
fn hand_on<S: Sink + ?Sized>(resumes: Vec<Box<ResumeRecord>>, audit: SessionAudit, sink: &mut S) {
    let (findings, view) = audit;
    for r in resumes {
        sink.resume(r);
    }
    for f in findings {
        sink.finding(f);
    }
    if let Some(v) = view {
        sink.view(v);
    }
}

/// What the retention budget counts for a held exchange summary, stream summary and resume
/// record, whatever their layout: fixed numbers rather than `size_of`, so that a change of
/// layout never changes which sessions a budget retires early, and with it the report. Each
/// is at least the size of its record (a test checks it), so the estimate never undercounts.
const HELD_EXCHANGE: usize = 296;
const HELD_STREAM: usize = 520;
const HELD_RESUME: usize = 952;

/// About what an exchange's summary and resume occupy while held, from what they hold alone:
/// text by its length, the stream's facts as [`StreamSummary::facts_room`] counts them (not
/// by the room they were given: see there).
fn held_bytes(x: &ExchangeSummary, r: Option<&ResumeRecord>) -> usize {
    fn text<S: AsRef<str>>(s: &Option<S>) -> usize {
        s.as_ref().map_or(0, |s| s.as_ref().len())
    }
    let mut n = HELD_EXCHANGE
        + text(&x.session_id)
        + text(&x.method)
        + text(&x.target)
        + text(&x.last_event_id)
        + text(&x.protocol_version);
    if x.stream().is_some() {
        // Counted where the facts were made (`held_stream`), from what `facts_room` reads.
        n += HELD_STREAM + x.stream_room as usize;
    }
    if let Some(r) = r {
        n += HELD_RESUME
            + r.last_event_id.len()
            + r.method.len()
            + r.target.len()
            + text(&r.first_event_id)
            + text(&r.session_id)
            + text(&r.content_type);
    }
    n
}

/// Runs the stage over one input held whole: every exchange is known before any session is
/// audited.
#[cfg(test)]
pub fn analyze(
    resumes: Vec<ResumeRecord>,
    xs: Vec<ExchangeSummary>,
    opts: &Options,
) -> (Vec<ResumeRecord>, Outcome) {
    let mut sink = Collected::default();
    let mut feed = HarFeed::new(opts, Retention::UNBOUNDED);
    feed.add(
        resumes.into_iter().map(Box::new).collect(),
        xs.into_iter().map(Box::new).collect(),
        &mut sink,
    );
    feed.finish(&mut sink);
    sink.sort();
    let out = Outcome {
        findings: sink.findings,
        views: sink.views,
    };
    (sink.resumes, out)
}

/// Where an exchange of an input held whole goes in the session stage's order: the order the
/// exchanges began (time, then entry index, then exchange), then the order they came in.
type StartKey = (i64, u64, u32, u64);

/// An exchange waiting for its turn in [`HarFeed`].
struct Waiting {
    key: StartKey,
    bytes: usize,
    x: Box<ExchangeSummary>,
    r: Option<Box<ResumeRecord>>,
}

impl PartialEq for Waiting {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl Eq for Waiting {}
impl PartialOrd for Waiting {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiting {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key.cmp(&other.key)
    }
}

/// The session stage over an input whose exchanges come whole and not in the order they
/// began: a HAR document, whose entries are written as they completed (or in any order), with
/// no connection to follow. The stage takes them in the order they began, so that a `DELETE`
/// does not end a session before a stream that began earlier and completed later.
///
/// Exchanges wait in a queue ordered by start until those waiting exceed a window of half the
/// retention budget; then the earliest go to the stage, which holds sessions within the
/// budget as it does for a capture. An input in order of start (as browsers and proxies write
/// HAR files), or out of order by less than the window, is taken exactly in order of start,
/// in bounded memory. An exchange that began before one already taken is taken late (its
/// session may have been audited without it) and counted: never silently.
pub struct HarFeed {
    stage: Stage,
    waiting: std::collections::BinaryHeap<std::cmp::Reverse<Waiting>>,
    waiting_bytes: usize,
    window: usize,
    /// The key of the last exchange taken.
    taken: Option<StartKey>,
    /// Resumes with no summary to audit them against, given out at the end in report order
    /// (in the boxes they were made in, as the sink takes them).
    #[allow(clippy::vec_box)]
    rest: Vec<Box<ResumeRecord>>,
    seq: u64,
    late: u64,
}

impl HarFeed {
    pub fn new(opts: &Options, retention: Retention) -> Self {
        HarFeed {
            stage: Stage::new(opts, retention),
            waiting: std::collections::BinaryHeap::new(),
            waiting_bytes: 0,
            window: retention.memory_bytes / 2,
            taken: None,
            rest: Vec::new(),
            seq: 0,
            late: 0,
        }
    }

    /// Exchanges of the input and their resumes, in the order the input holds them; each
    /// resume goes with the summary of its exchange, given in the same call. How the
    /// exchanges are split into calls does not change what the stage is given. Boxed where
    /// they were made, they wait and reach the stage without being copied.
    #[allow(clippy::vec_box)]
    pub fn add<S: Sink + ?Sized>(
        &mut self,
        resumes: Vec<Box<ResumeRecord>>,
        xs: Vec<Box<ExchangeSummary>>,
        sink: &mut S,
    ) {
        // Fx hashing, as `audit_session` does: the keys are the input's own positions and
        // counters, not values it chose (SipHash here took 1.5% of a HAR's reading thread).
        let mut by_key: HashMap<JoinKey, Box<ResumeRecord>, rustc_hash::FxBuildHasher> =
            HashMap::with_capacity_and_hasher(resumes.len(), rustc_hash::FxBuildHasher);
        let mut loose = Vec::new();
        for r in resumes {
            let k = join_of_resume(&r);
            if let Some(dup) = by_key.insert(k, r) {
                loose.push(dup);
            }
        }
        for x in xs {
            let r = join_of_summary(&x).and_then(|k| by_key.remove(&k));
            let m = x.start();
            let key = (m.time_ns, m.frame, x.exchange, self.seq);
            self.seq += 1;
            let bytes = held_bytes(&x, r.as_deref());
            self.waiting_bytes += bytes;
            self.waiting
                .push(std::cmp::Reverse(Waiting { key, bytes, x, r }));
            // After each exchange, so that how the input's exchanges are grouped into calls
            // changes nothing.
            while self.waiting_bytes > self.window && self.take_one(sink) {}
        }
        self.rest.extend(by_key.into_values().chain(loose));
    }

    /// Gives the earliest waiting exchange to the stage; false when none waits.
    fn take_one<S: Sink + ?Sized>(&mut self, sink: &mut S) -> bool {
        let Some(std::cmp::Reverse(w)) = self.waiting.pop() else {
            return false;
        };
        self.waiting_bytes -= w.bytes;
        if self.taken.is_some_and(|t| w.key < t) {
            self.late += 1;
        } else {
            self.taken = Some(w.key);
        }
        self.stage.exchange(None, Some(w.x), w.r, sink);
        true
    }

    /// The input is over: what waits goes to the stage, the resumes without a summary to the
    /// sink, and every session still held is audited.
    pub fn finish<S: Sink + ?Sized>(mut self, sink: &mut S) -> StageStats {
        while self.take_one(sink) {}
        self.rest.sort_by_key(|r| resume_order(r));
        for r in std::mem::take(&mut self.rest) {
            sink.resume(r);
        }
        let mut stats = self.stage.finish(sink);
        stats.har_entries_late = self.late;
        stats
    }
}

/// The stage's results gathered in memory.
#[derive(Debug, Default)]
pub struct Collected {
    pub resumes: Vec<ResumeRecord>,
    pub findings: Vec<Finding>,
    pub views: Vec<SessionView>,
}

impl Collected {
    /// Puts each kind of record in report order.
    pub fn sort(&mut self) {
        self.resumes.sort_by_key(resume_order);
        sort_findings(&mut self.findings);
        sort_views(&mut self.views);
    }
}

impl Sink for Collected {
    fn resume(&mut self, r: Box<ResumeRecord>) {
        self.resumes.push(*r);
    }
    fn finding(&mut self, f: Finding) {
        self.findings.push(f);
    }
    fn view(&mut self, v: SessionView) {
        self.views.push(v);
    }
}

/// Report order of resumes: request time, frame, connection, exchange.
pub fn resume_order(r: &ResumeRecord) -> (i64, u64, Option<u64>, u32) {
    (
        r.request.time_ns,
        r.request.frame,
        r.connection.tcp_stream,
        r.exchange,
    )
}

/// Report order of findings tied to no resume: by their first frame.
pub fn sort_findings(findings: &mut [Finding]) {
    findings.sort_by(|a, b| finding_order(a).cmp(&finding_order(b)));
}

pub fn finding_order(f: &Finding) -> (Option<u64>, FindingKind, Option<&str>) {
    (
        f.cites.first().map(|c| c.mark.frame),
        f.kind,
        f.session_id.as_deref(),
    )
}

/// Report order of session views: by where they begin.
pub fn sort_views(views: &mut [SessionView]) {
    views.sort_by(|a, b| (a.first.frame, &a.session_id).cmp(&(b.first.frame, &b.session_id)));
}

/// Records of a session brought into the cache before its audit: summaries, resumes and
/// stream facts of this many exchanges are about 170 KB, well within what a core keeps near.
const PREFETCH_RECORDS: usize = 96;

/// Audits one session's exchanges against each other: fills in its resumes' forensics, and
/// gives its findings tied to no resume and, on request, its view.
#[allow(clippy::vec_box)]
fn audit_session(
    sid: &str,
    // Boxed as the session held them: moving each out of its box cost a copy of every
    // summary at every audit (3% of a reconnect storm's time).
    mut xs: Vec<Box<ExchangeSummary>>,
    resumes: &mut [Box<ResumeRecord>],
    cross: &CrossIndex,
    opts: &Options,
    unread: bool,
    known: &mut hops::HopMap,
) -> SessionAudit {
    // The session's records were made long ago on other threads and are cold: asked for at
    // once, their misses overlap instead of each waiting for the one before. A session's
    // first ones only: a larger session's would not stay in the cache until their turn.
    for x in xs.iter().take(PREFETCH_RECORDS) {
        crate::cache::prefetch(&**x);
    }
    for r in resumes.iter().take(PREFETCH_RECORDS) {
        crate::cache::prefetch(&**r);
    }
    let capture_order = |x: &ExchangeSummary| {
        let m = x.start();
        (
            m.frame,
            m.time_ns,
            x.connection.tcp_stream,
            x.connection.har_entry,
            x.exchange,
        )
    };
    // Mostly in order already: a sort would still take a buffer of half the (large) items.
    if !xs.is_sorted_by_key(|x| capture_order(x)) {
        xs.sort_by_key(|x| capture_order(x));
    }
    if !resumes.is_sorted_by_key(|r| resume_order(r)) {
        resumes.sort_by_key(|r| resume_order(r));
    }
    // The summaries are in the cache now; the stream facts they point to are next.
    for s in xs
        .iter()
        .take(PREFETCH_RECORDS)
        .filter_map(|x| x.stream_facts.as_deref())
    {
        crate::cache::prefetch(s);
    }
    let resume_of: HashMap<JoinKey, usize, rustc_hash::FxBuildHasher> = resumes
        .iter()
        .enumerate()
        .map(|(i, r)| (join_of_resume(r), i))
        .collect();
    // A HAR input's marks carry entry indexes where a capture's carry frame numbers.
    let har = xs.iter().any(|x| x.connection.har_entry.is_some());
    let all: Vec<usize> = (0..xs.len()).collect();
    let hops = hops::hops(&xs, known);
    // A session's findings are gathered again only for its view.
    let mut session_findings = Vec::new();
    let mut loose = Vec::new();
    let mut at_level: Vec<usize> = Vec::new();
    let mut audited: Vec<(usize, usize)> = Vec::new();
    for level in 0..=hops.as_ref().map_or(0, |h| h.max) {
        let members: &[usize] = match &hops {
            None => &all,
            Some(h) => {
                at_level.clear();
                at_level.extend(all.iter().copied().filter(|&i| h.level[i] == level));
                &at_level
            }
        };
        // The resumes of the level, in capture order: (exchange, resume).
        audited.clear();
        audited.extend(members.iter().filter_map(|&xi| {
            xs[xi].last_event_id.as_ref()?;
            let ri = *resume_of.get(&join_of_summary(&xs[xi])?)?;
            (ri < resumes.len()).then_some((xi, ri))
        }));
        let mut ix = SessionIndex::build(&xs, members, !audited.is_empty());
        ix.unread = unread;
        let mut scratch = Scratch::default();
        for &(xi, ri) in &audited {
            let r = &mut resumes[ri];
            audit_resume(&xs, &ix, cross, opts, xi, r, &mut scratch);
            if let Some(h) = &hops {
                r.forensic.hop = Some(level);
                r.forensic.relays = h.relays[xi]
                    .and_then(|o| Some(Box::new(cite(&xs[o], "relayed_request", xs[o].request?))));
            }
            if har {
                har_places(&mut r.forensic);
            }
            if opts.views {
                session_findings.extend(r.forensic.findings.iter().cloned());
            }
        }
        let mut found = Vec::new();
        cursor_lost(&xs, &ix, &mut found);
        loose_duplicate_responses(&xs, &ix, &mut found);
        if har {
            for f in &mut found {
                f.detail = har_words(&f.detail);
            }
        }
        // A session's finding that an outer hop shows already (the same kind about the same
        // id) is the proxy passing it on: it is told once, at the hop nearest the client.
        found.retain(|f| {
            level == 0
                || f.id.is_none()
                || !loose
                    .iter()
                    .any(|o: &Finding| o.kind == f.kind && o.id == f.id)
        });
        if opts.views {
            session_findings.extend(found.iter().cloned());
        }
        loose.append(&mut found);
    }
    let view = opts
        .views
        .then(|| view(sid, &xs, &all, resumes, &resume_of, session_findings));
    (loose, view)
}

/// The words of a detail for HAR input: "frame N" there is HAR entry N.
fn har_words(detail: &str) -> String {
    let mut out = String::with_capacity(detail.len() + 16);
    let mut rest = detail;
    while let Some(at) = rest.find("frame") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "frame".len()..];
        let (word, tail) = match after.strip_prefix("s ") {
            Some(t) => ("HAR entries ", t),
            None => match after.strip_prefix(' ') {
                Some(t) => ("HAR entry ", t),
                None => ("frame", after),
            },
        };
        // Only a place: the word followed by a number.
        if word != "frame" && tail.starts_with(|c: char| c.is_ascii_digit()) {
            out.push_str(word);
            rest = tail;
        } else {
            out.push_str("frame");
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn har_places(f: &mut Forensics) {
    for x in &mut f.findings {
        x.detail = har_words(&x.detail);
    }
    if let Some(c) = &mut f.cursor {
        c.detail = har_words(&c.detail);
    }
    if let Some(e) = &mut f.evidence {
        e.detail = har_words(&e.detail);
    }
}

fn decide_by_counter(last: &str, first: &str) -> Decision {
    verdict::decide(
        last,
        ResponseFacts::Answered {
            status: 200,
            event_stream: true,
            first_id: Some(first),
            gap_before_first_id: false,
            outcome: Some(StreamOutcome::EndedOnWire),
        },
    )
}

/// The seed's boundary on the counters of two structured ids; the lost range is given as ids.
fn decide_structured(last_seq: &str, first_seq: &str, prefix: &str, suffix: &str) -> Decision {
    let mut d = decide_by_counter(last_seq, first_seq);
    d.reason = match d.verdict {
        Verdict::Correct => "the counter in the event id resumed at the one after Last-Event-ID's",
        Verdict::GapSkipped => {
            "the counter in the event id resumed past the one after Last-Event-ID's: the events \
             between were lost"
        }
        Verdict::Replayed => {
            "the counter in the event id resumed at or before Last-Event-ID's: events were sent \
             again"
        }
        _ => d.reason,
    };
    if let Some(lost) = d.lost.take() {
        d.lost = Some(Box::new(LostRange {
            from: format!("{prefix}{}{suffix}", lost.from),
            to: format!("{prefix}{}{suffix}", lost.to),
            count: lost.count,
        }));
    }
    d
}

fn stream_of(xs: &[Box<ExchangeSummary>], i: usize) -> Option<&StreamSummary> {
    xs.get(i).and_then(|x| x.stream())
}

/// The deliveries of `Last-Event-ID` the client's cursor stands on: the latest delivery of it
/// before the resume request, then, when that stream was itself a resume, the delivery its own
/// `Last-Event-ID` stood on, and so on.
fn lineage<'a>(
    xs: &'a [Box<ExchangeSummary>],
    ix: &SessionIndex<'a>,
    resumed: usize,
    last_event_id: &str,
    before: Mark,
    links: &mut Vec<Link<'a>>,
) {
    links.clear();
    let mut hash = fact_hash(&[last_event_id.as_bytes()]);
    let mut before = before;
    // The resumed stream and those already on the lineage (at most MAX_LINEAGE), in an array
    // rather than a list of their own, which cost every resume an allocation; slots not yet
    // used hold the resumed stream.
    let mut exclude = [resumed; MAX_LINEAGE + 1];
    while links.len() < MAX_LINEAGE {
        let Some((x, fact)) = ix
            .ids
            .get(hash)
            .iter()
            .map(|e| e.1)
            .filter(|(i, f)| !exclude.contains(i) && sent_before(&xs[*i], f.mark, before))
            .max_by_key(|(i, f)| (f.mark.frame, *i, f.event))
        else {
            break;
        };
        links.push(Link { x, fact });
        if let Some(slot) = exclude.get_mut(links.len()) {
            *slot = x;
        }
        let Some(up) = xs.get(x) else { break };
        match (&up.last_event_id, up.request) {
            (Some(l), Some(req)) => {
                hash = fact_hash(&[l.as_bytes()]);
                before = req;
            }
            _ => break,
        }
    }
}

/// Whether a delivery at `at` on exchange `x` came before the request at `request`, for
/// finding where a client's cursor came from: earlier in the capture, or, in a capture (not a
/// HAR file, whose marks are entry start times), earlier in time though recorded later. A
/// capture host with several queues records packets out of order; their times stay true, and
/// a delivery taken for later would make a cursor the client was given look invented.
fn sent_before(x: &ExchangeSummary, at: Mark, request: Mark) -> bool {
    at.frame < request.frame || (x.connection.har_entry.is_none() && at.time_ns < request.time_ns)
}

/// The delivery of `hash` the client had acknowledged, if any: on a lineage stream, at or
/// before the acknowledged event.
fn acknowledged<'a, F: Fact>(
    deliveries: &[(u64, At<'a, F>)],
    links: &[Link<'_>],
    before: u64,
) -> Option<At<'a, F>> {
    deliveries
        .iter()
        .find(|(_, (i, f))| {
            f.delivers()
                && f.mark().frame < before
                && links.iter().any(|l| l.x == *i && f.event() <= l.fact.event)
        })
        .map(|e| e.1)
}

/// An earlier delivery of `hash` in the session that is not a legitimate resend: not on the
/// resumed stream itself, and not past the acknowledged event on a lineage stream.
fn elsewhere<'a, F: Fact>(
    deliveries: &[(u64, At<'a, F>)],
    links: &[Link<'_>],
    resumed: usize,
    before: u64,
) -> Option<At<'a, F>> {
    deliveries
        .iter()
        .find(|(_, (i, f))| {
            *i != resumed
                && f.delivers()
                && f.mark().frame < before
                && !links.iter().any(|l| l.x == *i && f.event() > l.fact.event)
        })
        .map(|e| e.1)
}

trait Fact {
    fn mark(&self) -> Mark;
    fn event(&self) -> u64;
    /// The delivery gave the client something: a priming event (no data) gave nothing, so
    /// its id coming back with data is not the same event delivered twice.
    fn delivers(&self) -> bool;
}

impl Fact for IdFact {
    fn mark(&self) -> Mark {
        self.mark
    }
    fn event(&self) -> u64 {
        self.event
    }
    fn delivers(&self) -> bool {
        !self.priming
    }
}

impl Fact for ContentFact {
    fn mark(&self) -> Mark {
        self.mark
    }
    fn event(&self) -> u64 {
        self.event
    }
    fn delivers(&self) -> bool {
        true
    }
}

/// A re-delivery found on the resumed stream: the earlier delivery, the later one, how many.
struct Redelivery<'a, F> {
    earlier: At<'a, F>,
    again: &'a F,
    count: u64,
}

/// What the resumed stream delivered again: ids and events the client had acknowledged
/// (proof of replay), and ids another stream of the session delivered (a duplicate, but not
/// necessarily one the client had).
struct Redeliveries<'a> {
    id: Option<Redelivery<'a, IdFact>>,
    id_elsewhere: Option<Redelivery<'a, IdFact>>,
    content: Option<Redelivery<'a, ContentFact>>,
}

fn find_redeliveries<'a>(
    ix: &SessionIndex<'a>,
    links: &[Link<'a>],
    xi: usize,
    resumed_ids: &[&'a IdFact],
    resumed_content: impl Iterator<Item = &'a ContentFact>,
) -> Redeliveries<'a> {
    let mut id_redelivery: Option<Redelivery<'a, IdFact>> = None;
    let mut id_elsewhere: Option<Redelivery<'a, IdFact>> = None;
    for &f in resumed_ids {
        let d = ix.ids.get(f.hash);
        if let Some(e) = acknowledged(d, links, f.mark.frame) {
            match id_redelivery.as_mut() {
                Some(rd) => rd.count += 1,
                None => {
                    id_redelivery = Some(Redelivery {
                        earlier: e,
                        again: f,
                        count: 1,
                    })
                }
            }
        } else if !f.integer
            && let Some(e) = elsewhere(d, links, xi, f.mark.frame)
        {
            // Integer ids are often counted per stream, so the same integer on two streams
            // is not the same event; structured and opaque ids are unique in a session.
            match id_elsewhere.as_mut() {
                // The id quoted is the first one whose text was kept.
                Some(rd) if rd.again.text.is_none() && f.text.is_some() => {
                    rd.count += 1;
                    rd.earlier = e;
                    rd.again = f;
                }
                Some(rd) => rd.count += 1,
                None => {
                    id_elsewhere = Some(Redelivery {
                        earlier: e,
                        again: f,
                        count: 1,
                    })
                }
            }
        }
    }
    let mut content_redelivery: Option<Redelivery<'a, ContentFact>> = None;
    for c in resumed_content {
        if let Some(e) = acknowledged(ix.content.get(c.hash), links, c.mark.frame) {
            match content_redelivery.as_mut() {
                Some(rd) => rd.count += 1,
                None => {
                    content_redelivery = Some(Redelivery {
                        earlier: e,
                        again: c,
                        count: 1,
                    })
                }
            }
        }
    }

    Redeliveries {
        id: id_redelivery,
        id_elsewhere,
        content: content_redelivery,
    }
}

/// The evidence of an acknowledged id delivered again.
fn id_evidence(xs: &[Box<ExchangeSummary>], xi: usize, rd: &Redelivery<'_, IdFact>) -> Evidence {
    let x = &xs[xi];
    {
        let text = rd.again.text.as_deref().map(str::to_string);
        Evidence {
            how: EvidenceKind::IdRedelivered,
            detail: format!(
                "id {} was delivered at frame {} and again on the resumed stream at frame {}; \
                 the client had acknowledged it (it is at or before Last-Event-ID on its stream)",
                text.as_deref().unwrap_or("?"),
                rd.earlier.1.mark.frame,
                rd.again.mark.frame
            ),
            id: text,
            shape: None,
            last_seq: None,
            first_seq: None,
            ack: None,
            count: Some(rd.count),
            cites: vec![
                cite(&xs[rd.earlier.0], "first_delivery", rd.earlier.1.mark),
                cite(x, "delivered_again", rd.again.mark),
            ],
        }
    }
}

/// The evidence of an acknowledged event (same type and data) delivered again.
fn content_evidence(
    xs: &[Box<ExchangeSummary>],
    xi: usize,
    rd: &Redelivery<'_, ContentFact>,
) -> Evidence {
    let x = &xs[xi];
    Evidence {
        how: EvidenceKind::EventRedelivered,
        detail: format!(
            "an event with the same type and data ({}) was delivered at frame {} and again on the \
             resumed stream at frame {}; the client had acknowledged it",
            content_name(rd.again.kind),
            rd.earlier.1.mark.frame,
            rd.again.mark.frame
        ),
        id: None,
        shape: None,
        last_seq: None,
        first_seq: None,
        ack: None,
        count: Some(rd.count),
        cites: vec![
            cite(&xs[rd.earlier.0], "first_delivery", rd.earlier.1.mark),
            cite(x, "delivered_again", rd.again.mark),
        ],
    }
}

/// The verdict of a resume whose ids the seed cannot compare, from the other evidence the
/// session holds, in order of strength: the user's id pattern, a learned id shape, an
/// acknowledged id or event delivered again, the server's resume acknowledgment. Re-delivery
/// is shown as evidence whatever decided the verdict.
fn decide_opaque<'a>(
    xs: &'a [Box<ExchangeSummary>],
    ix: &SessionIndex<'a>,
    opts: &Options,
    xi: usize,
    r: &mut ResumeRecord,
    red: &Redeliveries<'a>,
) {
    let x = &xs[xi];
    let first = r.first_event_id.clone();
    if r.ids_opaque
        && r.decision.verdict == Verdict::Unverifiable
        && let Some(first) = first.as_deref()
    {
        let last = r.last_event_id.clone();
        let pattern = opts
            .id_pattern
            .as_ref()
            .and_then(|p| p.pair(&last, first).map(|(a, b)| (p.source(), a, b)));
        if let Some((source, a, b)) = pattern {
            // What surrounds the counter may vary from id to id under a user's pattern, so
            // the lost range is given as counters.
            r.decision = decide_structured(a, b, "", "");
            r.forensic.id_shape = Some(source.to_string());
            r.forensic.evidence = Some(Box::new(Evidence {
                how: EvidenceKind::IdPattern,
                detail: format!(
                    "--id-pattern gives counter {a} in Last-Event-ID and {b} in the first id"
                ),
                id: Some(first.to_string()),
                shape: Some(source.to_string()),
                last_seq: Some(a.to_string()),
                first_seq: Some(b.to_string()),
                ack: None,
                count: None,
                cites: r
                    .first_event
                    .map(|m| cite(x, "first_event", m))
                    .into_iter()
                    .collect(),
            }));
        } else if let Some((sp, decision)) = ix.shape_pair(&last, first).and_then(|sp| {
            let d = decide_structured(sp.last_seq, sp.first_seq, sp.prefix, sp.suffix);
            // A counter shared by streams skips ids on each: past the next one proves nothing.
            (!(sp.skips && d.verdict == Verdict::GapSkipped)).then_some((sp, d))
        }) {
            r.decision = decision;
            r.forensic.id_shape = Some(sp.display.clone());
            let how = if sp.skips {
                "consecutive ids of a stream count up, some by more than one"
            } else {
                "consecutive ids of a stream count up by one"
            };
            r.forensic.evidence = Some(Box::new(Evidence {
                how: EvidenceKind::IdShape,
                detail: format!(
                    "the session's ids have the shape {} ({how}); counter {} in Last-Event-ID, \
                     {} in the first id",
                    sp.display, sp.last_seq, sp.first_seq
                ),
                id: Some(first.to_string()),
                shape: Some(sp.display),
                last_seq: Some(sp.last_seq.to_string()),
                first_seq: Some(sp.first_seq.to_string()),
                ack: None,
                count: None,
                cites: r
                    .first_event
                    .map(|m| cite(x, "first_event", m))
                    .into_iter()
                    .collect(),
            }));
        } else if let Some(rd) = &red.id {
            r.decision = Decision {
                verdict: Verdict::Replayed,
                reason: "the resumed stream delivered again an id the client had already \
                         received (at or before Last-Event-ID)",
                lost: None,
                replayed_count: None,
            };
            r.forensic.evidence = Some(Box::new(id_evidence(xs, xi, rd)));
        } else if let Some(rd) = &red.content {
            r.decision = Decision {
                verdict: Verdict::Replayed,
                reason: "the resumed stream delivered again an event the client had already \
                         received (at or before Last-Event-ID)",
                lost: None,
                replayed_count: None,
            };
            r.forensic.evidence = Some(Box::new(content_evidence(xs, xi, rd)));
        } else if let Some((ack, at)) = r.resume_ack.clone() {
            let ordered = if ack == last {
                Some(Ordering::Equal)
            } else {
                order_ids(ix, opts, &ack, &last)
            };
            let reason = match ordered {
                Some(Ordering::Equal) => Some((
                    Verdict::Correct,
                    "the server's resume acknowledgment names Last-Event-ID as its resume point",
                )),
                Some(Ordering::Less) => Some((
                    Verdict::Replayed,
                    "the server's resume acknowledgment names a point before Last-Event-ID: \
                     events were sent again",
                )),
                Some(Ordering::Greater) => Some((
                    Verdict::GapSkipped,
                    "the server's resume acknowledgment names a point past Last-Event-ID: \
                     events were lost",
                )),
                None => None,
            };
            if let Some((v, reason)) = reason {
                r.decision = Decision {
                    verdict: v,
                    reason,
                    lost: None,
                    replayed_count: None,
                };
            }
            r.forensic.evidence = Some(Box::new(Evidence {
                how: EvidenceKind::ResumeAck,
                detail: format!(
                    "an `event: resume` frame names {ack:?} as the resume point; Last-Event-ID \
                     was {last:?}"
                ),
                id: None,
                shape: None,
                last_seq: None,
                first_seq: None,
                ack: Some(ack),
                count: None,
                cites: vec![cite(x, "resume_ack", at)],
            }));
        }
    }
    // Re-delivery backs any replay verdict, and is worth showing whatever decided it.
    if r.forensic.evidence.is_none() {
        if let Some(rd) = &red.id {
            r.forensic.evidence = Some(Box::new(id_evidence(xs, xi, rd)));
        } else if let Some(rd) = &red.content {
            r.forensic.evidence = Some(Box::new(content_evidence(xs, xi, rd)));
        }
    }
}

fn audit_resume<'a>(
    xs: &'a [Box<ExchangeSummary>],
    ix: &SessionIndex<'a>,
    cross: &'a CrossIndex,
    opts: &Options,
    xi: usize,
    r: &mut ResumeRecord,
    scratch: &mut Scratch<'a>,
) {
    let x = &xs[xi];
    let req = r.request;
    lineage(xs, ix, xi, &r.last_event_id, req, &mut scratch.links);
    let links = &scratch.links[..];
    let stream = x.stream();
    scratch.resumed_ids.clear();
    if let Some(s) = stream {
        scratch
            .resumed_ids
            .extend(s.id_facts.iter().filter(|f| !f.priming));
    }
    let resumed_ids = &scratch.resumed_ids[..];
    let resumed_content = stream.into_iter().flat_map(|s| s.content.iter());

    let red = find_redeliveries(ix, links, xi, resumed_ids, resumed_content);

    decide_opaque(xs, ix, opts, xi, r, &red);

    // Copied only into the findings made: most resumes have none.
    let session_id = &x.session_id;
    let at_resume = resume_cite(r);
    let finding = |kind, severity, detail: String, id: Option<String>, cites: Vec<Cite>| Finding {
        kind,
        severity,
        session_id: session_id.clone(),
        detail,
        id,
        other_session_id: None,
        resume: Some(at_resume.clone()),
        cites,
    };
    let mut findings = Vec::new();

    // The client's cursor.
    let cursor = audit_cursor(xs, ix, opts, xi, &r.last_event_id, req.frame, links);
    match cursor.status {
        CursorStatus::Stale => findings.push(finding(
            FindingKind::CursorStale,
            Severity::Info,
            cursor.detail.clone(),
            cursor.last_delivered_id.clone(),
            cursor.cites.clone(),
        )),
        CursorStatus::Ahead => findings.push(finding(
            FindingKind::CursorAhead,
            Severity::Warning,
            cursor.detail.clone(),
            Some(r.last_event_id.clone()),
            cursor.cites.clone(),
        )),
        _ => {}
    }
    r.forensic.cursor = Some(Box::new(cursor));

    if let Some(s) = stream {
        for d in s.dup_ids.iter().take(MAX_FINDINGS_PER_KIND) {
            findings.push(finding(
                FindingKind::DuplicateIdInStream,
                Severity::Error,
                format!(
                    "the resumed stream carried id {} twice: frames {} and {}",
                    d.text, d.first.frame, d.again.frame
                ),
                Some(d.text.clone()),
                vec![
                    cite(x, "first_delivery", d.first),
                    cite(x, "delivered_again", d.again),
                ],
            ));
        }
    }
    if let Some(rd) = &red.id_elsewhere {
        let text = rd.again.text.as_deref().map(str::to_string);
        let first = text
            .as_deref()
            .map(|t| format!("{t} ("))
            .unwrap_or_else(|| "(".into());
        // "Not at or before Last-Event-ID on its stream" is only known when the capture holds
        // where the client's cursor came from: after a loss it is a note that names the loss.
        let (severity, detail) = match ix.loss_before(xs, req.frame, xi) {
            None if !ix.unread => (
                Severity::Warning,
                format!(
                    "the resumed stream re-sent {} id(s) already delivered on another stream of \
                     the session, first {first}frame {}, again at frame {}); they are not at or \
                     before Last-Event-ID on its stream, so the client may or may not have had \
                     them",
                    rd.count, rd.earlier.1.start.frame, rd.again.start.frame
                ),
            ),
            lost => (
                Severity::Info,
                format!(
                    "the resumed stream re-sent {} id(s) already delivered on another stream of \
                     the session, first {first}frame {}, again at frame {}); the capture lost \
                     bytes of the session{}, so whether the client had acknowledged them cannot \
                     be told",
                    rd.count,
                    rd.earlier.1.start.frame,
                    rd.again.start.frame,
                    lost.map(|j| format!(" (from frame {})", xs[j].start().frame))
                        .unwrap_or_default()
                ),
            ),
        };
        findings.push(finding(
            FindingKind::DuplicateDelivery,
            severity,
            detail,
            text,
            vec![
                cite(&xs[rd.earlier.0], "first_delivery", rd.earlier.1.start),
                cite(x, "delivered_again", rd.again.start),
            ],
        ));
    }
    if let Some(mut leak) = cross_session(xs, ix, cross, xi, resumed_ids, req.frame) {
        leak.resume = Some(at_resume.clone());
        findings.push(leak);
    }
    symptoms(xs, ix, opts, xi, r, links, &mut findings);
    r.forensic.findings = findings;
}

fn content_name(kind: ContentKind) -> &'static str {
    match kind {
        ContentKind::Response => "a JSON-RPC response",
        ContentKind::Request => "a request from the server",
        ContentKind::Progress => "a progress notification",
    }
}

/// `prefix`, the decimal digits of `n`, then `suffix`: what `format!` makes of them, without
/// its machinery, for the text nearly every resume's cursor carries.
fn text_with_number(prefix: &str, mut n: u64, suffix: &str) -> String {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut s = String::with_capacity(prefix.len() + digits.len() - at + suffix.len());
    s.push_str(prefix);
    s.extend(digits[at..].iter().map(|&d| char::from(d)));
    s.push_str(suffix);
    s
}

/// The last id a stream delivered before `before`, with its text when the summary has it.
fn last_id_before(s: &StreamSummary, before: u64) -> Option<(u64, Mark, Option<&str>)> {
    if let Some(l) = &s.last_id
        && l.mark.frame < before
    {
        return Some((l.id_index, l.mark, Some(&l.text)));
    }
    s.id_facts
        .iter()
        .rev()
        .find(|f| f.mark.frame < before)
        .map(|f| (f.id_index, f.mark, f.text.as_deref()))
}

fn audit_cursor<'a>(
    xs: &'a [Box<ExchangeSummary>],
    ix: &SessionIndex<'a>,
    opts: &Options,
    xi: usize,
    last_event_id: &str,
    before: u64,
    links: &[Link<'_>],
) -> Cursor {
    if let Some(link) = links.first()
        && let Some(s) = stream_of(xs, link.x)
    {
        let from = cite(&xs[link.x], "last_event_id_delivered", link.fact.mark);
        if let Some((index, mark, text)) = last_id_before(s, before)
            && index > link.fact.id_index
        {
            let behind = index - link.fact.id_index;
            if let Some(j) = ix.loss_before(xs, before, usize::MAX) {
                // A later delivery of Last-Event-ID, on a stream whose bytes were lost (this
                // one included), may be where the client's cursor came from.
                return Cursor {
                    status: CursorStatus::NotSeen,
                    detail: format!(
                        "Last-Event-ID was delivered at frame {}, and {behind} later id(s) \
                         followed on that stream, but the capture lost bytes of the session \
                         (from frame {}): the client may have had it from there",
                        link.fact.mark.frame,
                        xs[j].start().frame
                    ),
                    last_delivered_id: text.map(str::to_string),
                    behind_by: None,
                    cites: vec![from, cite(&xs[j], "capture_loss", xs[j].start())],
                };
            }
            return Cursor {
                status: CursorStatus::Stale,
                detail: format!(
                    "Last-Event-ID was delivered at frame {}, but {behind} later id(s) were on \
                     the wire on that stream before the resume (the last, {}, at frame {}): the \
                     client did not keep them, or they never reached it",
                    link.fact.mark.frame,
                    text.unwrap_or("?"),
                    mark.frame
                ),
                last_delivered_id: text.map(str::to_string),
                behind_by: Some(behind),
                cites: vec![from, cite(&xs[link.x], "last_id_delivered", mark)],
            };
        }
        return Cursor {
            status: CursorStatus::Consistent,
            detail: text_with_number(
                "Last-Event-ID is the last id delivered on its stream (frame ",
                link.fact.mark.frame,
                ")",
            ),
            last_delivered_id: Some(last_event_id.to_string()),
            behind_by: Some(0),
            cites: vec![from],
        };
    }
    // Not seen delivered: compare with the highest comparable id the session was sent.
    let best = if DecimalId::parse(last_event_id).is_some() {
        ix.highest_decimal(xs, xi, before)
    } else {
        None
    }
    .unwrap_or_else(|| highest_sent(xs, ix, opts, xi, last_event_id, before));
    let Some((text, mark, j)) = best.map(|(t, m, j)| (t.to_string(), m, j)) else {
        return Cursor {
            status: CursorStatus::NotSeen,
            detail: "the capture does not show Last-Event-ID delivered in this session".into(),
            last_delivered_id: None,
            behind_by: None,
            cites: Vec::new(),
        };
    };
    let c = vec![cite(&xs[j], "highest_id_delivered", mark)];
    let order = order_ids(ix, opts, last_event_id, &text);
    if matches!(order, Some(Ordering::Greater | Ordering::Less)) {
        // A claim about a position never seen delivered needs the whole session up to the
        // resume: its start, and every byte of its exchanges.
        if let Some(l) = ix.loss_before(xs, before, xi) {
            return Cursor {
                status: CursorStatus::NotSeen,
                detail: format!(
                    "Last-Event-ID was not seen delivered, and the capture lost bytes of the \
                     session (from frame {}): it may have been delivered there",
                    xs[l].start().frame
                ),
                last_delivered_id: Some(text),
                behind_by: None,
                cites: vec![cite(&xs[l], "capture_loss", xs[l].start())],
            };
        }
        if order == Some(Ordering::Greater)
            && let Some(o) = ix.open_before(xs, before, xi)
        {
            return Cursor {
                status: CursorStatus::NotSeen,
                detail: format!(
                    "Last-Event-ID was not seen delivered, and the capture does not show the end \
                     of the session's event stream from frame {}: it may have been delivered in \
                     its last bytes (the highest comparable id seen is {text}, frame {})",
                    xs[o].start().frame,
                    mark.frame
                ),
                last_delivered_id: Some(text),
                behind_by: None,
                cites: vec![cite(&xs[o], "stream_without_end", xs[o].start())],
            };
        }
        if ix.unread {
            return Cursor {
                status: CursorStatus::NotSeen,
                detail: format!(
                    "Last-Event-ID was not seen delivered, and connections of the capture that \
                     may carry this session were not read: it may have been delivered there (the \
                     highest comparable id seen is {text}, frame {})",
                    mark.frame
                ),
                last_delivered_id: Some(text),
                behind_by: None,
                cites: c,
            };
        }
        if !ix.start_seen(xs, before) {
            return Cursor {
                status: CursorStatus::NotSeen,
                detail: format!(
                    "Last-Event-ID was not seen delivered, and the capture does not hold the \
                     session's start: it may have been delivered before the capture began (the \
                     highest comparable id seen is {text}, frame {})",
                    mark.frame
                ),
                last_delivered_id: Some(text),
                behind_by: None,
                cites: c,
            };
        }
    }
    match order {
        Some(Ordering::Greater) => Cursor {
            status: CursorStatus::Ahead,
            detail: format!(
                "Last-Event-ID is past {text}, the highest comparable id the capture shows \
                 delivered in the session (frame {}; the capture holds the session from its \
                 start, with no bytes missing): the client sent a position it was never given",
                mark.frame
            ),
            last_delivered_id: Some(text),
            behind_by: None,
            cites: c,
        },
        Some(Ordering::Less) => Cursor {
            status: CursorStatus::Stale,
            detail: format!(
                "Last-Event-ID is before {text}, a later id delivered in the session (frame {})",
                mark.frame
            ),
            last_delivered_id: Some(text),
            behind_by: None,
            cites: c,
        },
        _ => Cursor {
            status: CursorStatus::NotSeen,
            detail: format!(
                "Last-Event-ID was not seen delivered; the highest comparable id is {text} \
                 (frame {})",
                mark.frame
            ),
            last_delivered_id: Some(text),
            behind_by: None,
            cites: c,
        },
    }
}

/// The highest id comparable with `last_event_id` that the session's streams other than `xi`
/// sent before frame `before`: its text, where, and the stream (the first stream holding it).
/// Each stream offers its highest integer id when the cursor is an integer, else its last id.
fn highest_sent<'a>(
    xs: &'a [Box<ExchangeSummary>],
    ix: &SessionIndex<'a>,
    opts: &Options,
    xi: usize,
    last_event_id: &str,
    before: u64,
) -> Highest<'a> {
    // Borrowed while compared: this runs over every earlier stream of the session.
    // Decimal ids are read once each: `order_ids` compares two decimals as decimals, so
    // comparing the parsed values gives what it would.
    let mut best: Option<(&str, Mark, usize, Option<DecimalId<'_>>)> = None;
    let integer = crate::exchange::is_integer_id(last_event_id);
    let last_decimal = DecimalId::parse(last_event_id);
    for &j in &ix.with_ids {
        if j == xi || xs[j].start().frame >= before {
            continue;
        }
        let Some(s) = stream_of(xs, j) else { continue };
        let candidate = if integer {
            decimal_offer(s, before)
        } else {
            last_id_before(s, before).and_then(|(_, m, t)| Some((t?, m)))
        };
        let Some((text, mark)) = candidate else {
            continue;
        };
        let decimal = DecimalId::parse(text);
        let comparable = (last_decimal.is_some() && decimal.is_some())
            || order_ids(ix, opts, last_event_id, text).is_some();
        if !comparable {
            continue;
        }
        let higher = match (&best, &decimal) {
            (None, _) => true,
            (Some((_, _, _, Some(b))), Some(d)) => d.cmp_value(b) == Ordering::Greater,
            (Some((b, ..)), _) => order_ids(ix, opts, text, b) == Some(Ordering::Greater),
        };
        if higher {
            best = Some((text, mark, j, decimal));
        }
    }
    best.map(|(t, m, j, _)| (t, m, j))
}

/// Ids of the resumed stream first delivered to another session. Only ids that cannot be
/// shared by chance count: not integers, with a namespace key of at least
/// [`idshape::MIN_DISTINCTIVE_KEY`] bytes that none of this session's own earlier ids had,
/// and only when this session's own ids were seen (else its namespace is unknown).
fn cross_session<'a>(
    xs: &'a [Box<ExchangeSummary>],
    ix: &SessionIndex<'a>,
    cross: &'a CrossIndex,
    xi: usize,
    resumed_ids: &[&'a IdFact],
    before: u64,
) -> Option<Finding> {
    let x = &xs[xi];
    // No id of the stream could name another session: none to look up.
    if !x.stream_distinctive {
        return None;
    }
    let own = x.session_id.as_deref()?;
    // The session's own earlier streams that carried ids with data.
    let own_streams = || {
        ix.with_ids
            .iter()
            .filter(move |&&j| j != xi && xs[j].start().frame < before)
            .filter_map(|&j| stream_of(xs, j))
            .filter(|s| s.ids > s.priming)
    };
    own_streams().next()?;
    // Their namespace keys, gathered only once an id of the resumed stream needs them.
    let mut own_keys: Option<HashSet<u64, rustc_hash::FxBuildHasher>> = None;
    let mut first: Option<(&Delivery, &IdFact)> = None;
    let mut count = 0u64;
    for &f in resumed_ids {
        let Some(d) = cross.get(f.hash) else {
            continue;
        };
        let other: &str = &d.session;
        let text = f.text.as_deref().unwrap_or("");
        if other == own
            || d.mark.frame >= f.mark.frame
            || crate::exchange::is_integer_id(text)
            || !f.distinctive()
            || own_keys
                .get_or_insert_with(|| own_streams().flat_map(|s| s.keys.iter().copied()).collect())
                .contains(&f.key)
        {
            continue;
        }
        count += 1;
        if first.is_none() {
            first = Some((d, f));
        }
    }
    let (d, f) = first?;
    let other = d.session.to_string();
    let text = f.text.as_deref().unwrap_or("?").to_string();
    Some(Finding {
        kind: FindingKind::CrossSessionLeak,
        severity: Severity::Error,
        session_id: x.session_id.clone(),
        detail: format!(
            "the resumed stream of session {own} delivered {count} id(s) first delivered to \
             session {other}: {text} went to that session at frame {} and to this one at frame {}",
            d.mark.frame, f.mark.frame
        ),
        id: Some(text),
        other_session_id: Some(other.clone()),
        resume: None,
        cites: vec![
            Cite {
                role: "other_session_delivery",
                mark: d.mark,
                tcp_stream: d.tcp_stream(),
                har: d.har(),
                session_id: Some(other),
            },
            cite(x, "delivered_again", f.mark),
        ],
    })
}

/// Progress that goes backwards or repeats, a response delivered twice, a `list_changed`
/// delivered again: on the resumed stream, against what the session delivered before.
fn symptoms(
    xs: &[Box<ExchangeSummary>],
    ix: &SessionIndex<'_>,
    opts: &Options,
    xi: usize,
    r: &ResumeRecord,
    links: &[Link<'_>],
    findings: &mut Vec<Finding>,
) {
    let x = &xs[xi];
    let Some(s) = x.stream() else { return };
    let make = |kind, severity, detail: String, id: Option<String>, cites: Vec<Cite>| Finding {
        kind,
        severity,
        session_id: x.session_id.clone(),
        detail,
        id,
        other_session_id: None,
        resume: Some(resume_cite(r)),
        cites,
    };
    progress_regressions(xs, ix, xi, s, &make, findings);
    duplicate_responses(xs, ix, xi, s, &make, findings);
    list_changed_again(xs, ix, opts, xi, s, r, links, &make, findings);
}

/// What makes a finding tied to the resume being audited.
type MakeFinding<'f> =
    dyn Fn(FindingKind, Severity, String, Option<String>, Vec<Cite>) -> Finding + 'f;

/// For each progress token of the resumed stream: its first progress at or below the
/// highest the session delivered before it, or progress going back within the stream.
fn progress_regressions(
    xs: &[Box<ExchangeSummary>],
    ix: &SessionIndex<'_>,
    xi: usize,
    s: &StreamSummary,
    make: &MakeFinding<'_>,
    findings: &mut Vec<Finding>,
) {
    let x = &xs[xi];
    let mut progress = 0;
    for t in &s.progress {
        if progress >= MAX_FINDINGS_PER_KIND {
            break;
        }
        // The highest progress of this token the session saw before this stream's first.
        let mut best: Option<(f64, Mark, usize)> = None;
        for &j in ix.members {
            if j == xi {
                continue;
            }
            let Some(o) = stream_of(xs, j) else { continue };
            for u in o.progress.iter().filter(|u| u.token == t.token) {
                for p in [u.first, u.max, u.last] {
                    if p.mark.frame < t.first.mark.frame && best.is_none_or(|b| p.value > b.0) {
                        best = Some((p.value, p.mark, j));
                    }
                }
            }
        }
        let step = match best {
            Some((v, m, j)) if t.first.value <= v => {
                Some((v, cite(&xs[j], "earlier_progress", m), t.first))
            }
            _ => t
                .regressed
                .map(|(b, a)| (b.value, cite(x, "earlier_progress", b.mark), a)),
        };
        if let Some((before, c, after)) = step {
            let how = if after.value == before {
                "repeated"
            } else {
                "went backwards"
            };
            findings.push(make(
                FindingKind::ProgressRegressed,
                Severity::Warning,
                format!(
                    "progress for token {} {how} after the resume: {before} (frame {}), then {} \
                     (frame {}); a client accumulating progress is now wrong",
                    t.token_text, c.mark.frame, after.value, after.mark.frame
                ),
                None,
                vec![c, cite(x, "progress_again", after.mark)],
            ));
            progress += 1;
        }
    }
}

/// JSON-RPC responses of the resumed stream whose request id was answered before, in the
/// session or earlier on the same stream.
fn duplicate_responses(
    xs: &[Box<ExchangeSummary>],
    ix: &SessionIndex<'_>,
    xi: usize,
    s: &StreamSummary,
    make: &MakeFinding<'_>,
    findings: &mut Vec<Finding>,
) {
    let x = &xs[xi];
    let mut dups = 0;
    let mut seen_rpc: HashSet<u64, rustc_hash::FxBuildHasher> = HashSet::default();
    for c in s.content.iter() {
        if dups >= MAX_FINDINGS_PER_KIND {
            break;
        }
        let (ContentKind::Response, Some(rpc)) = (c.kind, c.rpc_id) else {
            continue;
        };
        if !seen_rpc.insert(rpc) {
            continue;
        }
        let earlier = ix.rpc.get(&rpc).and_then(|v| {
            v.iter()
                .find(|(j, e)| e.mark.frame < c.mark.frame && (*j != xi || e.event < c.event))
        });
        if let Some(&(j, e)) = earlier {
            let same = e.hash == c.hash;
            findings.push(make(
                FindingKind::DuplicateResponse,
                Severity::Error,
                format!(
                    "the response to one request was delivered twice: frame {} and, after the \
                     resume, frame {}{}",
                    e.mark.frame,
                    c.mark.frame,
                    if same {
                        " (identical content)"
                    } else {
                        " (different content: the client may have reused the request id)"
                    }
                ),
                None,
                vec![
                    cite(&xs[j], "first_delivery", e.mark),
                    cite(x, "delivered_again", c.mark),
                ],
            ));
            dups += 1;
        }
    }
}

/// `list_changed` notifications of the resumed stream whose id the client already had, or
/// that order at or before `Last-Event-ID`.
#[allow(clippy::too_many_arguments)]
fn list_changed_again(
    xs: &[Box<ExchangeSummary>],
    ix: &SessionIndex<'_>,
    opts: &Options,
    xi: usize,
    s: &StreamSummary,
    r: &ResumeRecord,
    links: &[Link<'_>],
    make: &MakeFinding<'_>,
    findings: &mut Vec<Finding>,
) {
    let x = &xs[xi];
    for lc in s.list_changed.iter().take(MAX_FINDINGS_PER_KIND) {
        let Some((hash, text)) = &lc.event_id else {
            continue;
        };
        // The same id earlier: on the client's own stream at or before its cursor, or, for
        // ids that are unique in a session (not integers), anywhere else.
        let d = ix.ids.get(*hash);
        let earlier = acknowledged(d, links, lc.mark.frame).or_else(|| {
            if crate::exchange::is_integer_id(text) {
                None
            } else {
                elsewhere(d, links, xi, lc.mark.frame)
            }
        });
        let detail = match earlier {
            Some((j, f)) => Some((
                format!(
                    "{} (id {text}) was delivered at frame {} and again after the resume at \
                     frame {}: the client re-lists and re-applies a change it already had",
                    lc.method, f.mark.frame, lc.mark.frame
                ),
                vec![
                    cite(&xs[j], "first_delivery", f.mark),
                    cite(x, "delivered_again", lc.mark),
                ],
            )),
            None => match order_ids(ix, opts, text, &r.last_event_id) {
                Some(Ordering::Less | Ordering::Equal) => Some((
                    format!(
                        "{} (id {text}, at or before Last-Event-ID {}) was delivered again after \
                         the resume at frame {}",
                        lc.method, r.last_event_id, lc.mark.frame
                    ),
                    vec![cite(x, "delivered_again", lc.mark)],
                )),
                _ => None,
            },
        };
        if let Some((detail, cites)) = detail {
            findings.push(make(
                FindingKind::ListChangedAgain,
                Severity::Warning,
                detail,
                Some(text.clone()),
                cites,
            ));
        }
    }
}

/// Reconnects of the standalone stream without `Last-Event-ID`. A session's standalone
/// stream is a GET without `Last-Event-ID`; its lineage goes on through resumes whose
/// `Last-Event-ID` it delivered. When a stream of that lineage gave the client a cursor (it
/// delivered an id, or it was a resume, so the client had one) and is over, a new GET without
/// `Last-Event-ID` has dropped it. Resumes of request streams and of ids never delivered do not
/// belong to the lineage: the standalone stream may reconnect without a cursor it never had.
fn cursor_lost(xs: &[Box<ExchangeSummary>], ix: &SessionIndex<'_>, out: &mut Vec<Finding>) {
    struct Held {
        at: usize,
        id: String,
        mark: Mark,
        delivered: bool,
    }
    // The ids the lineage's streams delivered, looked up for a request with a cursor only (a
    // session without one needs none). With the session's ids indexed, the lineage is kept as
    // its members, and an id is in it when one of them delivered it: one look-up a cursor,
    // where a set of the ids read every id of every stream of the lineage, made long before.
    let cursors = ix.members.iter().any(|&i| xs[i].last_event_id.is_some());
    let mut lineage: HashSet<u64, rustc_hash::FxBuildHasher> = HashSet::default();
    let mut joined = if ix.ids_indexed {
        vec![false; xs.len()]
    } else {
        Vec::new()
    };
    let delivered_in_lineage = |lineage: &HashSet<u64, _>, joined: &[bool], hash: u64| {
        if ix.ids_indexed {
            ix.ids.get(hash).iter().any(|(_, (j, _))| joined[*j])
        } else {
            lineage.contains(&hash)
        }
    };
    let mut held: Option<Held> = None;
    for &i in ix.members {
        let x = &xs[i];
        if x.method.as_deref() != Some("GET") {
            continue;
        }
        let Some(req) = x.request else { continue };
        let joins = match &x.last_event_id {
            None => {
                if let Some(h) = held.take() {
                    let prev = &xs[h.at];
                    // A reconnect the capture lost (or could not read) may have carried the
                    // cursor: only a session whole up to this request shows it dropped.
                    let whole = !ix.unread && ix.loss_before(xs, req.frame, i).is_none();
                    if whole && prev.end.is_some_and(|(_, m)| m.frame < req.frame) {
                        out.push(lost_cursor(x, req, prev, &h.id, h.mark, h.delivered));
                    } else {
                        held = Some(h);
                    }
                }
                true
            }
            Some(l) => {
                delivered_in_lineage(&lineage, &joined, fact_hash(&[l.as_bytes()]))
                    || held.as_ref().is_some_and(|h| &h.id == l)
            }
        };
        if !joins {
            continue;
        }
        if ix.ids_indexed {
            joined[i] = true;
        } else if cursors && let Some(s) = x.stream() {
            lineage.extend(s.id_facts.iter().map(|f| f.hash));
        }
        let delivered = x.stream().and_then(|s| s.last_id.as_ref());
        held = match (delivered, &x.last_event_id) {
            (Some(l), _) => Some(Held {
                at: i,
                id: l.text.clone(),
                mark: l.mark,
                delivered: true,
            }),
            (None, Some(l)) => Some(Held {
                at: i,
                id: l.clone(),
                mark: req,
                delivered: false,
            }),
            (None, None) => held,
        };
    }
}

fn lost_cursor(
    x: &ExchangeSummary,
    req: Mark,
    prev: &ExchangeSummary,
    id: &str,
    mark: Mark,
    delivered: bool,
) -> Finding {
    let detail = if delivered {
        format!(
            "the standalone stream reconnected (frame {}) without Last-Event-ID although its \
             earlier stream delivered id {id} (frame {}) and ended: what the server sent after it \
             cannot be resumed",
            req.frame, mark.frame
        )
    } else {
        format!(
            "the standalone stream reconnected (frame {}) without Last-Event-ID although it had \
             resumed with Last-Event-ID {id} (frame {}) and that stream ended without an id: \
             the client dropped its cursor",
            req.frame, mark.frame
        )
    };
    Finding {
        kind: FindingKind::CursorLost,
        severity: Severity::Warning,
        session_id: x.session_id.clone(),
        detail,
        id: Some(id.to_string()),
        other_session_id: None,
        resume: None,
        cites: vec![
            cite(x, "reconnect_request", req),
            cite(prev, "earlier_cursor", mark),
        ],
    }
}

/// The same response (same id, same content) delivered twice where no resume is involved.
fn loose_duplicate_responses(
    xs: &[Box<ExchangeSummary>],
    ix: &SessionIndex<'_>,
    out: &mut Vec<Finding>,
) {
    let mut groups: Vec<&Vec<At<'_, ContentFact>>> =
        ix.rpc.values().filter(|v| v.len() > 1).collect();
    groups.sort_by_key(|v| v.first().map(|(_, c)| c.mark.frame));
    for v in groups.into_iter().take(MAX_FINDINGS_PER_KIND) {
        let mut sorted: Vec<At<'_, ContentFact>> = v.clone();
        sorted.sort_by_key(|(j, c)| (c.mark.frame, *j, c.event));
        let Some(&(j0, c0)) = sorted.first() else {
            continue;
        };
        // A stream whose request the capture lost may have been a resume: no resume being
        // involved can only be told from a request that was seen without Last-Event-ID.
        let again = sorted.iter().skip(1).find(|(j, c)| {
            c.hash == c0.hash
                && xs
                    .get(*j)
                    .is_some_and(|x| x.request.is_some() && x.last_event_id.is_none())
        });
        if let Some(&(j1, c1)) = again {
            out.push(Finding {
                kind: FindingKind::DuplicateResponse,
                severity: Severity::Error,
                session_id: xs[j1].session_id.clone(),
                detail: format!(
                    "the same response (same id, identical content) was delivered twice: frames \
                     {} and {}",
                    c0.mark.frame, c1.mark.frame
                ),
                id: None,
                other_session_id: None,
                resume: None,
                cites: vec![
                    cite(&xs[j0], "first_delivery", c0.mark),
                    cite(&xs[j1], "delivered_again", c1.mark),
                ],
            });
        }
    }
}

fn view(
    sid: &str,
    xs: &[Box<ExchangeSummary>],
    members: &[usize],
    resumes: &[Box<ResumeRecord>],
    resume_of: &HashMap<JoinKey, usize, rustc_hash::FxBuildHasher>,
    findings: Vec<Finding>,
) -> SessionView {
    let mut versions: Vec<String> = members
        .iter()
        .filter_map(|&i| xs[i].protocol_version.as_deref().map(str::to_owned))
        .collect();
    versions.sort();
    versions.dedup();
    let first = members.first().map(|&i| xs[i].start()).unwrap_or_default();
    let last = members
        .iter()
        .map(|&i| {
            let x = &xs[i];
            x.end.map(|(_, m)| m).or(x.response).unwrap_or(x.start())
        })
        .max_by_key(|m| m.frame)
        .unwrap_or(first);
    let exchanges = members
        .iter()
        .take(MAX_VIEW_EXCHANGES)
        .map(|&i| {
            let mut x = ExchangeSummary::clone(&xs[i]);
            // The view shows counts and ends, not the facts behind the checks.
            if let Some(s) = x.stream_mut() {
                s.id_facts = Default::default();
                s.content = Default::default();
            }
            x
        })
        .collect();
    let resumes = members
        .iter()
        .filter_map(|&i| join_of_summary(&xs[i]).and_then(|k| resume_of.get(&k)))
        .filter_map(|&ri| resumes.get(ri))
        .map(|r| ResumeView {
            request: resume_cite(r),
            verdict: r.decision.verdict,
            last_event_id: r.last_event_id.clone(),
            first_event_id: r.first_event_id.clone(),
            id_shape: r.forensic.id_shape.clone(),
            cursor: r.forensic.cursor.as_ref().map(|c| c.status),
        })
        .collect();
    SessionView {
        session_id: sid.to_string(),
        protocol_versions: versions,
        first,
        last,
        exchanges,
        exchanges_omitted: members.len().saturating_sub(MAX_VIEW_EXCHANGES) as u64,
        resumes,
        findings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::{ConnectionRef, ExchangeTracker, grown_room, held_stream};
    use crate::record::{BodyEnd, HttpSink, Limits, RequestHead, ResponseHead};
    use crate::testing::xorshift;

    /// The cross index as it was first written: a map of first deliveries and a queue of
    /// their order, the oldest evicted past `cap`.
    #[derive(Default)]
    struct CrossModel {
        first: HashMap<u64, (String, Mark, Option<u64>, bool)>,
        order: VecDeque<u64>,
    }

    impl CrossModel {
        fn insert(&mut self, cap: usize, hash: u64, d: (String, Mark, Option<u64>, bool)) {
            match self.first.entry(hash) {
                std::collections::hash_map::Entry::Occupied(mut e) => {
                    if d.1.frame < e.get().1.frame {
                        e.insert(d);
                    }
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(d);
                    self.order.push_back(hash);
                    if self.order.len() > cap
                        && let Some(old) = self.order.pop_front()
                    {
                        self.first.remove(&old);
                    }
                }
            }
        }
    }

    #[test]
    fn the_cross_index_keeps_what_a_map_and_an_order_queue_keep() {
        // Few distinct hashes against a small bound: ids come back while kept, after their
        // eviction, and with earlier frames than the delivery kept.
        for seed in 1..=300u64 {
            let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let cap = 1 + (xorshift(&mut rng) % 9) as usize;
            let distinct = 1 + xorshift(&mut rng) % 24;
            let mut index = CrossIndex::with_cap(cap);
            let mut model = CrossModel::default();
            for step in 0..400u64 {
                let hash = xorshift(&mut rng) % distinct;
                let frame = xorshift(&mut rng) % 1000;
                let session = format!("s{}", xorshift(&mut rng) % 5);
                let stream = match xorshift(&mut rng) % 3 {
                    0 => None,
                    1 => Some(u64::MAX),
                    _ => Some(step),
                };
                let har = xorshift(&mut rng).is_multiple_of(2);
                let mark = Mark::new(frame, step as i64);
                index.insert(
                    hash,
                    Delivery::new(session.as_str().into(), mark, stream, har),
                );
                model.insert(cap, hash, (session, mark, stream, har));
                assert!(index.entries.len() <= cap && index.at.len() == index.entries.len());
                for h in 0..distinct {
                    let got = index
                        .get(h)
                        .map(|d| (d.session.to_string(), d.mark, d.tcp_stream(), d.har()));
                    assert_eq!(got.as_ref(), model.first.get(&h), "seed {seed} step {step}");
                }
            }
        }
    }

    #[test]
    fn a_full_cross_index_stays_within_its_memory() {
        assert!(std::mem::size_of::<CrossEntry>() <= 56);
        let mut index = CrossIndex::default();
        let session: Arc<str> = "s".into();
        // Past the bound, so that the table has had removals as well as insertions.
        for n in 0..(MAX_CROSS_IDS + MAX_CROSS_IDS / 2) as u64 {
            let mark = Mark::new(n + 1, 0);
            index.insert(
                n.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                Delivery::new(session.clone(), mark, Some(n), false),
            );
        }
        assert_eq!(index.entries.len(), MAX_CROSS_IDS);
        let bytes = index.entries.capacity() * std::mem::size_of::<CrossEntry>()
            + index.at.allocation_size();
        // The figure the module's documentation gives.
        assert!(bytes <= 17_500_000, "{bytes} bytes");
    }

    #[test]
    fn cursor_statuses_are_named_as_they_serialize() {
        for c in [
            CursorStatus::Consistent,
            CursorStatus::Stale,
            CursorStatus::Ahead,
            CursorStatus::NotSeen,
        ] {
            assert_eq!(
                serde_json::to_string(&c).unwrap(),
                format!("\"{}\"", c.as_str())
            );
        }
    }

    #[test]
    fn text_with_a_number_is_what_format_writes() {
        let mut ns = vec![0, 1, 9, 10, 99, 100, 12_345, u64::MAX - 1, u64::MAX];
        ns.extend((0..20).map(|p| 10u64.pow(p)));
        ns.extend((1..20).map(|p| 10u64.pow(p) - 1));
        for n in ns {
            assert_eq!(
                text_with_number("at (frame ", n, ")"),
                format!("at (frame {n})")
            );
            assert_eq!(text_with_number("", n, ""), n.to_string());
        }
    }

    #[test]
    fn the_budget_counts_what_a_summary_holds_never_the_room_it_was_given() {
        // Made from a capture, lists and text keep the room they grew to; read back from a
        // facts file (`--reduce`), the same summary has room fitted to its contents. Counted,
        // the room made the two retire different sessions early.
        let roomy_text = |s: &str| {
            let mut t = String::with_capacity(200);
            t.push_str(s);
            Some(t)
        };
        let mut stream = crate::exchange::StreamSummary::default();
        stream.keys.reserve(100);
        stream.keys.extend([1, 2, 3]);
        stream.retry.reserve(50);
        stream.retry.push((5, Mark::default()));
        stream.shapes.reserve(40);
        stream.list_changed.reserve(30);
        let held = held_stream(Some(Box::new(stream)));
        let roomy = ExchangeSummary {
            connection: Default::default(),
            exchange: 0,
            session_id: roomy_text("s-1"),
            method: roomy_text("GET").map(Into::into),
            target: roomy_text("/mcp").map(Into::into),
            last_event_id: roomy_text("7"),
            protocol_version: roomy_text("2025-06-18").map(Into::into),
            request: Some(Mark::default()),
            status: Some(200),
            response: Some(Mark::default()),
            event_stream: true,
            end: None,
            stream_facts: held.facts,
            stream_empty: held.empty,
            stream_room: held.room,
            stream_distinctive: held.distinctive,
            opens_session: false,
        };
        // A clone's room is fitted to what it holds.
        let fitted = roomy.clone();
        assert!(fitted.stream().unwrap().keys.capacity() < roomy.stream().unwrap().keys.capacity());
        assert_eq!(held_bytes(&roomy, None), held_bytes(&fitted, None));
        // The stream's part, counted again from each one's facts.
        let (roomy_facts, fitted_facts) = (roomy.stream().unwrap(), fitted.stream().unwrap());
        assert_eq!(roomy_facts.facts_room(), fitted_facts.facts_room());
        assert!(roomy_facts.facts_room() > 0);
        assert_eq!(roomy.stream_room as usize, roomy_facts.facts_room());
    }

    #[test]
    fn the_budget_counts_at_least_what_each_held_record_occupies() {
        assert!(HELD_EXCHANGE >= std::mem::size_of::<ExchangeSummary>());
        assert!(HELD_STREAM >= std::mem::size_of::<StreamSummary>());
        assert!(HELD_RESUME >= std::mem::size_of::<ResumeRecord>());
    }

    #[test]
    fn a_fitted_list_counts_the_room_it_would_hold_grown_a_push_at_a_time() {
        let mut grown: Vec<[u64; 20]> = Vec::new();
        assert_eq!(grown_room(0), 0);
        for len in 1..=100 {
            grown.push([0; 20]);
            assert_eq!(grown_room(len), grown.capacity(), "{len}");
        }
    }

    #[test]
    fn an_empty_stream_held_without_its_summary_counts_as_one_held_with_it() {
        let mut cap = Cap::default();
        cap.ex("GET", "s", Some("4"), 200, &[]);
        cap.ex("GET", "s", Some("4"), 200, &[("5", "x")]);
        let (empty, full) = (&cap.xs[0], &cap.xs[1]);
        assert!(empty.stream_empty && empty.stream_facts.is_none());
        assert!(!full.stream_empty && full.stream_facts.is_some());
        let mut boxed = empty.clone();
        (boxed.stream_facts, boxed.stream_empty) = (Some(Box::default()), false);
        assert_eq!(boxed.stream(), empty.stream());
        assert_eq!(held_bytes(&boxed, None), held_bytes(empty, None));
        assert!(held_bytes(full, None) > held_bytes(empty, None));
    }

    /// A capture built exchange by exchange: each on its own connection, frames in order.
    #[derive(Clone, Default)]
    struct Cap {
        frame: u64,
        conn: u64,
        resumes: Vec<ResumeRecord>,
        xs: Vec<ExchangeSummary>,
    }

    impl Cap {
        /// One exchange answered `status`; a 200 is an event stream of `(id, data)` events,
        /// one per frame, that ends on the wire.
        fn ex(
            &mut self,
            method: &str,
            sid: &str,
            last: Option<&str>,
            status: u16,
            events: &[(&str, &str)],
        ) -> u64 {
            let mut t = ExchangeTracker::new(&Limits::default());
            self.frame += 1;
            let request = self.frame;
            t.request(RequestHead {
                exchange: 0,
                method: method.to_owned().into(),
                target: "/mcp".into(),
                session_id: Some(sid.into()),
                last_event_id: last.map(str::to_string),
                first: Mark::new(request, request as i64),
                complete: Mark::new(request, request as i64),
                ..Default::default()
            });
            self.frame += 1;
            t.response(ResponseHead {
                exchange: 0,
                status,
                content_type: Some(if status == 200 {
                    "text/event-stream".into()
                } else {
                    "application/json".into()
                }),
                first: Mark::new(self.frame, self.frame as i64),
                complete: Mark::new(self.frame, self.frame as i64),
                ..Default::default()
            });
            for (id, data) in events {
                self.frame += 1;
                let text = if data.is_empty() {
                    format!("id: {id}\ndata:\n\n")
                } else {
                    format!("id: {id}\ndata: {data}\n\n")
                };
                t.body(0, text.as_bytes(), Mark::new(self.frame, self.frame as i64));
            }
            self.frame += 1;
            t.body_end(
                0,
                BodyEnd::Complete,
                Mark::new(self.frame, self.frame as i64),
            );
            let at = ConnectionRef {
                tcp_stream: Some(self.conn),
                ..Default::default()
            };
            self.conn += 1;
            for mut r in t.resumes.drain(..) {
                r.connection = at.clone();
                self.resumes.push(*r);
            }
            for mut x in t.summaries.drain(..) {
                x.connection = at.clone();
                self.xs.push(*x);
            }
            request
        }

        fn run(self, opts: &Options) -> (Vec<ResumeRecord>, Outcome) {
            analyze(self.resumes, self.xs, opts)
        }
    }

    fn kinds(r: &ResumeRecord) -> Vec<FindingKind> {
        r.forensic.findings.iter().map(|f| f.kind).collect()
    }

    const MSG: &str = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#;

    #[test]
    fn a_shape_contradicted_anywhere_in_the_session_decides_nothing() {
        // A counter that goes back contradicts the shape.
        let mut c = Cap::default();
        c.ex(
            "GET",
            "s",
            None,
            200,
            &[("k_1", MSG), ("k_2", MSG), ("k_4", MSG), ("k_3", MSG)],
        );
        c.ex("GET", "s", Some("k_4"), 200, &[("k_5", MSG)]);
        let (r, _) = c.run(&Options::default());
        assert_eq!(r[0].decision.verdict, Verdict::Unverifiable);
        assert_eq!(r[0].forensic.id_shape, None);

        let mut c = Cap::default();
        c.ex(
            "GET",
            "s",
            None,
            200,
            &[("k_1", MSG), ("k_2", MSG), ("k_3", MSG)],
        );
        c.ex("GET", "s", Some("k_3"), 200, &[("k_4", MSG)]);
        let (r, _) = c.run(&Options::default());
        assert_eq!(r[0].decision.verdict, Verdict::Correct);
        assert_eq!(r[0].forensic.id_shape.as_deref(), Some("k_{seq}"));
    }

    /// A counter shared by several streams (the conformance suite's mock server), or a
    /// priming event that takes an id on another stream, makes a stream skip ids: the shape
    /// still orders them, so a resume at the next counter is correct and one before it a
    /// replay, but one past it proves no loss.
    /// An event whose data spans frames is cited where it began (the frame holding its `id:`
    /// line), not at the frame that completed it, which holds only the end of its data.
    #[test]
    fn a_duplicate_is_cited_where_its_id_is() {
        let u1 = "aa11bb22-cc33-4d44-8e55-ff6600000001";
        let u2 = "aa11bb22-cc33-4d44-8e55-ff6600000002";
        let v1 = "0d0e0f10-1112-4314-9516-171819202122";
        let mut c = Cap::default();
        c.ex("GET", "s", None, 200, &[(u1, MSG), (u2, MSG)]);
        c.ex("POST", "s", None, 200, &[(v1, MSG)]);
        // The resume re-sends u2 in an event whose data continues over two more frames.
        let mut t = ExchangeTracker::new(&Limits::default());
        c.frame += 1;
        let at = |f: u64| Mark::new(f, f as i64);
        t.request(RequestHead {
            exchange: 0,
            method: "GET".into(),
            target: "/mcp".into(),
            session_id: Some("s".into()),
            last_event_id: Some(v1.into()),
            first: at(c.frame),
            complete: at(c.frame),
            ..Default::default()
        });
        c.frame += 1;
        t.response(ResponseHead {
            exchange: 0,
            status: 200,
            content_type: Some("text/event-stream".into()),
            first: at(c.frame),
            complete: at(c.frame),
            ..Default::default()
        });
        let id_frame = c.frame + 1;
        t.body(
            0,
            format!(
                "id: {u2}
data: "
            )
            .as_bytes(),
            at(id_frame),
        );
        t.body(0, &[b'x'; 3000], at(id_frame + 1));
        t.body(
            0,
            b"

",
            at(id_frame + 2),
        );
        t.body_end(0, BodyEnd::Complete, at(id_frame + 3));
        c.frame = id_frame + 3;
        let conn = ConnectionRef {
            tcp_stream: Some(c.conn),
            ..Default::default()
        };
        c.resumes.extend(t.resumes.drain(..).map(|mut r| {
            r.connection = conn.clone();
            *r
        }));
        c.xs.extend(t.summaries.drain(..).map(|mut x| {
            x.connection = conn.clone();
            *x
        }));
        let (r, _) = c.run(&Options::default());
        let dup = r[0]
            .forensic
            .findings
            .iter()
            .find(|f| f.kind == FindingKind::DuplicateDelivery)
            .expect("the re-sent id is reported");
        assert_eq!(dup.id.as_deref(), Some(u2));
        assert_eq!(dup.cites[1].mark.frame, id_frame);
        assert!(dup.detail.contains(&format!("again at frame {id_frame}")));
    }

    #[test]
    fn har_details_name_entries_not_frames() {
        assert_eq!(
            har_words("delivered at frame 48, frames 3 and 4 (frame 7); a frame of mind"),
            "delivered at HAR entry 48, HAR entries 3 and 4 (HAR entry 7); a frame of mind"
        );
        assert_eq!(har_words("frame"), "frame");
        assert_eq!(har_words("frames x"), "frames x");
    }

    #[test]
    fn a_stream_that_skips_ids_keeps_its_shape_but_proves_no_gap() {
        let session = |c: &mut Cap| {
            c.ex(
                "GET",
                "s",
                None,
                200,
                &[("event-8", MSG), ("event-9", MSG), ("event-10", MSG)],
            );
            c.ex(
                "GET",
                "s",
                Some("event-10"),
                200,
                &[("event-11", MSG), ("event-19", ""), ("event-21", MSG)],
            );
        };
        let mut c = Cap::default();
        session(&mut c);
        c.ex("GET", "s", Some("event-21"), 200, &[("event-22", MSG)]);
        c.ex("GET", "s", Some("event-22"), 200, &[("event-20", MSG)]);
        c.ex("GET", "s", Some("event-22"), 200, &[("event-25", MSG)]);
        let (r, _) = c.run(&Options::default());
        let verdicts: Vec<Verdict> = r.iter().map(|r| r.decision.verdict).collect();
        assert_eq!(
            verdicts,
            [
                Verdict::Correct,
                Verdict::Correct,
                Verdict::Replayed,
                Verdict::Unverifiable
            ]
        );
        assert_eq!(r[1].forensic.id_shape.as_deref(), Some("event-{seq}"));
        assert!(
            r[1].forensic
                .evidence
                .as_ref()
                .is_some_and(|e| e.detail.contains("some by more than one"))
        );
        assert_eq!(r[3].forensic.id_shape, None);
        assert!(r[3].decision.lost.is_none());
    }

    #[test]
    fn the_same_integer_on_another_stream_is_not_the_same_event() {
        let mut c = Cap::default();
        c.ex("POST", "s", None, 200, &[("1", MSG), ("2", MSG)]);
        c.ex("GET", "s", None, 200, &[("1", MSG), ("2", MSG), ("3", MSG)]);
        c.ex(
            "GET",
            "s",
            Some("3"),
            200,
            &[("1", MSG), ("2", MSG), ("3", MSG), ("4", MSG)],
        );
        let (r, _) = c.run(&Options::default());
        assert_eq!(r[0].decision.verdict, Verdict::Replayed);
        let e = r[0].forensic.evidence.as_ref().unwrap();
        assert_eq!(e.how, EvidenceKind::IdRedelivered);
        // The first delivery cited is on the GET stream the cursor came from (connection 1).
        assert_eq!(e.cites[0].tcp_stream, Some(1));
        assert!(!kinds(&r[0]).contains(&FindingKind::DuplicateDelivery));
    }

    #[test]
    fn ids_resent_after_a_stale_cursor_are_no_replay() {
        let mut c = Cap::default();
        let u = [
            "6f1c0a2e-1b7d-4c2a-9f1c-0d8e7b6a5c41",
            "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d",
        ];
        let w = "c0ffee00-1234-4abc-8def-0123456789ab";
        c.ex("GET", "s", None, 200, &[(u[0], MSG), (u[1], MSG), (w, MSG)]);
        // The client says u[1] although w came after it: the server re-sends w, rightly.
        c.ex("GET", "s", Some(u[1]), 200, &[(w, MSG)]);
        let (r, _) = c.run(&Options::default());
        assert_eq!(r[0].decision.verdict, Verdict::Unverifiable);
        assert!(r[0].forensic.evidence.is_none());
        let cursor = r[0].forensic.cursor.as_ref().unwrap();
        assert_eq!(cursor.status, CursorStatus::Stale);
        assert_eq!(cursor.behind_by, Some(1));
        assert_eq!(kinds(&r[0]), [FindingKind::CursorStale]);
    }

    #[test]
    fn an_unseen_cursor_is_compared_with_the_first_highest_id_sent() {
        // The highest id sent before the resume, from the first stream that holds it.
        let cited = |first_stream: [&'static str; 2]| {
            let mut c = Cap::default();
            c.ex(
                "GET",
                "s",
                None,
                200,
                &[(first_stream[0], MSG), (first_stream[1], MSG)],
            );
            c.ex("GET", "s", None, 200, &[("x1", MSG)]);
            c.ex("GET", "s", None, 200, &[("6", MSG), ("7", MSG)]);
            c.ex("GET", "s", None, 200, &[("3", MSG)]);
            c.ex("GET", "s", Some("9"), 200, &[("10", MSG)]);
            let (r, _) = c.run(&Options::default());
            let cursor = r[0].forensic.cursor.clone().unwrap();
            assert_eq!(cursor.last_delivered_id.as_deref(), Some("7"), "{cursor:?}");
            cursor.cites[0].mark.frame
        };
        assert!(cited(["5", "7"]) < cited(["5", "6"]));
        // An id below every one sent.
        let mut c = Cap::default();
        c.ex("GET", "s", None, 200, &[("5", MSG), ("8", MSG)]);
        c.ex("GET", "s", None, 200, &[("12", MSG)]);
        c.ex("GET", "s", Some("2"), 200, &[("3", MSG)]);
        let (r, _) = c.run(&Options::default());
        let cursor = r[0].forensic.cursor.as_ref().unwrap();
        assert_eq!(
            cursor.last_delivered_id.as_deref(),
            Some("12"),
            "{cursor:?}"
        );
    }

    /// The stage's answer for an input held whole, as it was defined before [`HarFeed`]: every
    /// exchange sorted by start, given to a stage with `retention`, then the resumes without
    /// a summary, then the end.
    fn sorted_then_staged(
        resumes: Vec<ResumeRecord>,
        mut xs: Vec<ExchangeSummary>,
        retention: Retention,
    ) -> (String, StageStats) {
        let opts = Options {
            views: true,
            ..Options::default()
        };
        let mut stage = Stage::new(&opts, retention);
        let mut sink = Collected::default();
        let mut by_key: HashMap<JoinKey, ResumeRecord> = HashMap::new();
        let mut loose = Vec::new();
        for r in resumes {
            if let Some(dup) = by_key.insert(join_of_resume(&r), r) {
                loose.push(dup);
            }
        }
        xs.sort_by_key(|x| (x.start().time_ns, x.start().frame, x.exchange));
        for x in xs {
            let r = join_of_summary(&x).and_then(|k| by_key.remove(&k));
            stage.exchange(None, Some(Box::new(x)), r.map(Box::new), &mut sink);
        }
        let mut rest: Vec<ResumeRecord> = by_key.into_values().chain(loose).collect();
        rest.sort_by_key(resume_order);
        for r in rest {
            sink.resume(Box::new(r));
        }
        let stats = stage.finish(&mut sink);
        sink.sort();
        (format!("{sink:?}"), stats)
    }

    /// [`HarFeed`] given `xs` in the order given, in calls of `sizes` exchanges (cycled), each
    /// resume in the call of its exchange.
    fn fed(
        resumes: &[ResumeRecord],
        xs: &[ExchangeSummary],
        retention: Retention,
        sizes: &[usize],
    ) -> (String, StageStats) {
        let opts = Options {
            views: true,
            ..Options::default()
        };
        let mut feed = HarFeed::new(&opts, retention);
        let mut sink = Collected::default();
        let mut at = 0;
        for &n in sizes.iter().cycle() {
            if at >= xs.len() {
                break;
            }
            let part = &xs[at..(at + n.max(1)).min(xs.len())];
            at += part.len();
            let keys: Vec<JoinKey> = part.iter().filter_map(join_of_summary).collect();
            let rs = resumes
                .iter()
                .filter(|r| keys.contains(&join_of_resume(r)))
                .cloned()
                .map(Box::new)
                .collect();
            let xs = part.iter().cloned().map(Box::new).collect();
            feed.add(rs, xs, &mut sink);
        }
        let stats = feed.finish(&mut sink);
        sink.sort();
        (format!("{sink:?}"), stats)
    }

    /// A HAR's exchanges reach the stage in order of start: held whole (no bound), in any
    /// order and any grouping, as the sort did; bounded, in order of start, exactly as the
    /// sort did with the same bound and none late; bounded and out of order, the same answer
    /// whatever the grouping (so whatever `-j`), the late ones counted.
    #[test]
    fn a_har_feed_takes_exchanges_in_order_of_start() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for round in 0..40u32 {
            let mut c = Cap::default();
            for _ in 0..6 + xorshift(&mut seed) % 20 {
                let sid = format!("s{}", xorshift(&mut seed) % 4);
                let n = xorshift(&mut seed) % 4;
                let base = xorshift(&mut seed) % 50;
                let ids: Vec<String> = (0..n).map(|i| (base + i).to_string()).collect();
                let events: Vec<(&str, &str)> = ids.iter().map(|i| (i.as_str(), MSG)).collect();
                let last = xorshift(&mut seed)
                    .is_multiple_of(3)
                    .then(|| base.to_string());
                if xorshift(&mut seed).is_multiple_of(9) {
                    c.ex("DELETE", &sid, None, 200, &[]);
                } else {
                    c.ex("GET", &sid, last.as_deref(), 200, &events);
                }
            }
            let (resumes, mut xs) = (c.resumes, c.xs);
            let unbounded = Retention::UNBOUNDED;
            let tight = Retention {
                memory_bytes: 1 << (10 + round % 4),
            };
            // In order of start.
            let want = sorted_then_staged(resumes.clone(), xs.clone(), tight);
            let got = fed(&resumes, &xs, tight, &[1]);
            assert_eq!(got.0, want.0, "round {round}");
            assert_eq!(got.1.sessions_retired_early, want.1.sessions_retired_early);
            assert_eq!(got.1.har_entries_late, 0);
            // Shuffled.
            for i in (1..xs.len()).rev() {
                xs.swap(i, (xorshift(&mut seed) % (i as u64 + 1)) as usize);
            }
            let want = sorted_then_staged(resumes.clone(), xs.clone(), unbounded);
            assert_eq!(fed(&resumes, &xs, unbounded, &[1]), want, "round {round}");
            assert_eq!(fed(&resumes, &xs, unbounded, &[3, 1, 7]), want);
            let one = fed(&resumes, &xs, tight, &[1]);
            assert_eq!(fed(&resumes, &xs, tight, &[5, 2]), one, "round {round}");
            assert_eq!(fed(&resumes, &xs, tight, &[64]), one, "round {round}");
            if round % 4 == 0 {
                assert!(one.1.har_entries_late > 0, "round {round}");
            }
        }
    }

    /// The tree over a session's streams answers what the loop over them answers, for every
    /// resume frame and every resumed exchange: streams that overlap, start out of capture
    /// order, repeat values (the first stream holding the highest wins), end in a lower id
    /// than their highest, carry no id, or carry ids that are not decimal (then the tree
    /// may decline, never differ).
    #[test]
    fn the_highest_decimal_tree_answers_what_the_loop_does() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut answered = 0u64;
        for round in 0..300u32 {
            let mut c = Cap::default();
            let opaque = round.is_multiple_of(3);
            for _ in 0..1 + xorshift(&mut seed) % 12 {
                if c.frame > 4 && xorshift(&mut seed).is_multiple_of(3) {
                    // Overlap earlier exchanges.
                    c.frame -= 1 + xorshift(&mut seed) % c.frame.min(9);
                }
                let n = xorshift(&mut seed) % 5;
                let ids: Vec<String> = (0..n)
                    .map(|_| match xorshift(&mut seed) % 10 {
                        0 if opaque => format!("k{}", xorshift(&mut seed) % 9),
                        1 => format!("00{}", xorshift(&mut seed) % 9),
                        2 => "18446744073709551616".to_string(),
                        _ => (xorshift(&mut seed) % 9).to_string(),
                    })
                    .collect();
                let events: Vec<(&str, &str)> = ids.iter().map(|i| (i.as_str(), MSG)).collect();
                c.ex("GET", "s", None, 200, &events);
            }
            let xs: Vec<Box<ExchangeSummary>> = c.xs.into_iter().map(Box::new).collect();
            let mut members: Vec<usize> = (0..xs.len()).collect();
            for i in (1..members.len()).rev() {
                members.swap(i, (xorshift(&mut seed) % (i as u64 + 1)) as usize);
            }
            let ix = SessionIndex::build(&xs, &members, true);
            let tree = HighestDecimal::build(&xs, &ix.with_ids);
            let opts = Options::default();
            for xi in 0..=xs.len() {
                for before in 0..c.frame + 3 {
                    let by_loop = highest_sent(&xs, &ix, &opts, xi, "5", before);
                    let Some(by_tree) = tree
                        .as_ref()
                        .and_then(|t| t.query(&xs, &ix.with_ids, xi, before))
                    else {
                        continue;
                    };
                    answered += 1;
                    assert_eq!(by_tree, by_loop, "round {round}, xi {xi}, before {before}");
                }
            }
        }
        assert!(answered > 10_000, "{answered}");
    }

    #[test]
    fn a_leak_needs_distinctive_ids_and_a_known_namespace() {
        let a_ids = [
            "3f2a9c1e-5b7d-4e2a-9f1c-0d8e7b6a5c4d",
            "8e1d2c3b-4a5f-4e6d-8c7b-9a0f1e2d3c4b",
        ];
        let b_own = "5d4c3b2a-1f0e-4d9c-8b7a-6f5e4d3c2b1a";
        // B's own ids seen before: A's id in B's resumed stream is a leak.
        let mut c = Cap::default();
        c.ex("GET", "a", None, 200, &[(a_ids[0], MSG), (a_ids[1], MSG)]);
        c.ex("GET", "b", None, 200, &[(b_own, MSG)]);
        c.ex("GET", "b", Some(b_own), 200, &[(a_ids[1], MSG)]);
        let (r, _) = c.run(&Options::default());
        let leak = r[0]
            .forensic
            .findings
            .iter()
            .find(|f| f.kind == FindingKind::CrossSessionLeak)
            .expect("leak");
        assert_eq!(leak.other_session_id.as_deref(), Some("a"));
        assert_eq!(leak.severity, Severity::Error);
        assert_eq!(leak.cites[0].session_id.as_deref(), Some("a"));

        // B delivered nothing of its own: its namespace is unknown, no accusation.
        let mut c = Cap::default();
        c.ex("GET", "a", None, 200, &[(a_ids[0], MSG), (a_ids[1], MSG)]);
        c.ex("GET", "b", Some("whatever"), 200, &[(a_ids[1], MSG)]);
        let (r, _) = c.run(&Options::default());
        assert!(!kinds(&r[0]).contains(&FindingKind::CrossSessionLeak));

        // Per-session counters: the same id in two sessions is by design.
        let mut c = Cap::default();
        c.ex(
            "GET",
            "a",
            None,
            200,
            &[("event-1", MSG), ("event-2", MSG), ("event-3", MSG)],
        );
        c.ex("GET", "b", None, 200, &[("event-1", MSG), ("event-2", MSG)]);
        c.ex("GET", "b", Some("event-2"), 200, &[("event-3", MSG)]);
        let (r, _) = c.run(&Options::default());
        assert!(!kinds(&r[0]).contains(&FindingKind::CrossSessionLeak));
        assert_eq!(r[0].decision.verdict, Verdict::Correct);
    }

    #[test]
    fn fact_groups_keep_each_hash_in_the_order_pushed() {
        let facts = [10u32, 11, 12, 13, 14];
        let mut g = FactGroups::new();
        for (i, (h, f)) in [7u64, 3, 7, 9, 3].into_iter().zip(&facts).enumerate() {
            g.push(h, (i, f));
        }
        g.seal();
        let at =
            |h: u64| -> Vec<(usize, u32)> { g.get(h).iter().map(|e| (e.1.0, *e.1.1)).collect() };
        assert_eq!(at(7), [(0, 10), (2, 12)]);
        assert_eq!(at(3), [(1, 11), (4, 14)]);
        assert_eq!(at(9), [(3, 13)]);
        assert!(at(8).is_empty() && at(0).is_empty() && at(u64::MAX).is_empty());
        let empty: FactGroups<'_, u32> = FactGroups::new();
        assert!(empty.get(1).is_empty());
    }

    #[test]
    fn shape_totals_add_up_equal_keys_in_key_order() {
        let mut v = vec![
            ((1, "b", ""), (1, 0, 0)),
            ((0, "a", "x"), (2, 1, 0)),
            ((1, "b", ""), (3, 0, 1)),
            ((0, "a", ""), (1, 0, 0)),
            ((0, "a", "x"), (1, 0, 2)),
        ];
        total_shapes(&mut v);
        assert_eq!(
            v,
            [
                ((0, "a", ""), (1, 0, 0)),
                ((0, "a", "x"), (3, 1, 2)),
                ((1, "b", ""), (4, 0, 1)),
            ]
        );
    }

    #[test]
    fn the_answer_does_not_depend_on_the_order_summaries_arrive_in() {
        let mut c = Cap::default();
        c.ex(
            "POST",
            "s",
            None,
            200,
            &[("p_0", ""), ("p_1", MSG), ("p_2", MSG)],
        );
        c.ex("GET", "s", None, 200, &[("g_0", ""), ("g_1", MSG)]);
        c.ex(
            "GET",
            "s",
            Some("p_2"),
            200,
            &[("p_1", MSG), ("p_2", MSG), ("p_3", MSG)],
        );
        c.ex("GET", "t", Some("zz"), 404, &[]);
        let (resumes, xs) = (c.resumes.clone(), c.xs.clone());
        let (resumes, first) = analyze(resumes, xs.clone(), &Options::default());
        let mut rev = xs;
        rev.reverse();
        let mut resumes2 = c.resumes.clone();
        resumes2.reverse();
        let (resumes2, second) = analyze(resumes2, rev, &Options::default());
        assert_eq!(resumes, resumes2);
        assert_eq!(first.findings, second.findings);
        assert_eq!(resumes[0].decision.verdict, Verdict::Replayed);
        assert_eq!(
            resumes[0].forensic.id_shape.as_deref(),
            Some("{stream}_{seq}")
        );
    }

    #[test]
    fn cursor_lost_finds_the_same_with_the_ids_indexed_or_not() {
        // Reconnects with and without cursors, ids that repeat across streams and cursors that
        // name ids of streams outside the lineage, chosen by a fixed sequence.
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        let mut lost = 0;
        for _ in 0..200 {
            let mut c = Cap::default();
            for _ in 0..1 + next(8) {
                let ids: Vec<String> = (0..next(3)).map(|_| format!("e{}", next(6))).collect();
                let events: Vec<(&str, &str)> = ids.iter().map(|i| (i.as_str(), MSG)).collect();
                let last = (next(3) > 0).then(|| format!("e{}", next(7)));
                let method = if next(5) == 0 { "POST" } else { "GET" };
                c.ex(method, "s", last.as_deref(), 200, &events);
            }
            let xs: Vec<Box<ExchangeSummary>> = c.xs.into_iter().map(Box::new).collect();
            let members: Vec<usize> = (0..xs.len()).collect();
            let found = |indexed: bool| {
                let ix = SessionIndex::build(&xs, &members, indexed);
                assert_eq!(ix.ids_indexed, indexed);
                let mut out = Vec::new();
                cursor_lost(&xs, &ix, &mut out);
                out.iter()
                    .map(|f| (f.kind, f.detail.clone()))
                    .collect::<Vec<_>>()
            };
            let (with, without) = (found(true), found(false));
            assert_eq!(with, without);
            lost += with.len();
        }
        // The sequence makes cursors lost, not only sessions without findings.
        assert!(lost > 20, "{lost}");
    }

    #[test]
    fn cursor_lost_follows_the_standalone_stream_only() {
        // A request stream's resume is refused; the standalone stream, which never got an
        // id, reconnects without Last-Event-ID: nothing was lost.
        let mut c = Cap::default();
        c.ex("GET", "s", None, 200, &[]);
        c.ex("POST", "s", None, 200, &[("p1", MSG), ("p2", MSG)]);
        c.ex("GET", "s", Some("p2"), 404, &[]);
        c.ex("GET", "s", None, 200, &[]);
        let (_, out) = c.run(&Options::default());
        assert!(out.findings.is_empty(), "{:?}", out.findings);

        // The standalone stream delivered an id and ended; the reconnect has no cursor.
        let mut c = Cap::default();
        c.ex("GET", "s", None, 200, &[("g1", MSG)]);
        let again = c.ex("GET", "s", None, 200, &[]);
        let (_, out) = c.run(&Options::default());
        assert_eq!(out.findings.len(), 1);
        assert_eq!(out.findings[0].kind, FindingKind::CursorLost);
        assert_eq!(out.findings[0].cites[0].mark.frame, again);
    }

    /// Feeds a stage one exchange at a time, as the driver does, and records what comes out.
    fn stream_through(
        c: Cap,
        retention: Retention,
        open: &[(usize, &str)],
    ) -> (Vec<String>, StageStats) {
        #[derive(Default)]
        struct Order(Vec<String>);
        impl Sink for Order {
            fn resume(&mut self, r: Box<ResumeRecord>) {
                let cursor = r.forensic.cursor.map(|c| c.status);
                self.0.push(format!(
                    "{}@{}:{cursor:?}",
                    r.session_id.unwrap_or_default(),
                    r.request.frame,
                ));
            }
            fn finding(&mut self, _: Finding) {}
            fn view(&mut self, _: SessionView) {}
        }
        let mut stage = Stage::new(&Options::default(), retention);
        let mut sink = Order::default();
        let mut resumes = c.resumes;
        for (i, x) in c.xs.into_iter().enumerate() {
            let key = (x.connection.tcp_stream.unwrap_or(0), x.exchange);
            for (at, sid) in open {
                if *at == i {
                    stage.opened(sid, (1000 + i as u64, 0));
                }
            }
            let r = resumes
                .iter()
                .position(|r| join_of_resume(r) == join_of_summary(&x).unwrap())
                .map(|p| resumes.remove(p));
            stage.exchange(Some(key), Some(Box::new(x)), r.map(Box::new), &mut sink);
            sink.0.push(format!("after {i}"));
        }
        let stats = stage.finish(&mut sink);
        (sink.0, stats)
    }

    #[test]
    fn the_idle_order_stays_bounded_and_least_recent_first() {
        let mut st = Stage::new(&Options::default(), Retention::UNBOUNDED);
        for i in 0..50_000u64 {
            let slot = st.sessions.slot(&format!("s{}", i % 7));
            st.touch(slot);
            if i % 3 == 0 {
                st.touch(slot);
            }
        }
        assert!(
            st.idle.len() <= 4 * st.sessions.len() + 1024,
            "{}",
            st.idle.len()
        );
        let slots = &st.sessions.slots;
        let order: Vec<&str> = st
            .idle
            .iter()
            .filter(|(k, slot)| slots[*slot].idle_at == Some(*k))
            .map(|(_, slot)| &*slots[*slot].name)
            .collect();
        assert_eq!(order, ["s6", "s0", "s1", "s2", "s3", "s4", "s5"]);
        // A session with an open exchange is out of the order until it is idle again.
        st.opened("s6", (1, 0));
        let slots = &st.sessions.slots;
        let first = st
            .idle
            .iter()
            .find(|(k, slot)| slots[*slot].idle_at == Some(*k))
            .map(|(_, slot)| slots[*slot].name.to_string());
        assert_eq!(first.as_deref(), Some("s0"));
    }

    #[test]
    fn a_slot_let_go_and_taken_again_is_never_its_last_session_in_the_idle_order() {
        let mut st = Stage::new(&Options::default(), Retention::UNBOUNDED);
        let idle = |st: &Stage| -> Vec<String> {
            let slots = &st.sessions.slots;
            st.idle
                .iter()
                .filter(|(k, slot)| slots[*slot].idle_at == Some(*k))
                .map(|(_, slot)| slots[*slot].name.to_string())
                .collect()
        };
        let a = st.sessions.slot("a");
        st.touch(a);
        assert_eq!(idle(&st), ["a"]);
        let gone = st.sessions.remove(a);
        assert_eq!(&*gone.name, "a");
        // Its entry stays in the order, stale: the slot is no one's.
        assert_eq!(st.idle.len(), 1);
        assert!(idle(&st).is_empty());
        let b = st.sessions.slot("b");
        assert_eq!(b, a, "a free slot is taken before a new one is made");
        assert!(idle(&st).is_empty(), "b was never idle");
        st.touch(b);
        assert_eq!(idle(&st), ["b"]);
        assert_eq!(st.sessions.ids.get("a"), None);
        assert_eq!(st.sessions.ids.get("b"), Some(&b));
        assert_eq!(st.sessions.len(), 1);
    }

    #[test]
    fn memory_short_audits_idle_sessions_first_and_never_one_with_an_open_exchange() {
        let mut c = Cap::default();
        c.ex("GET", "a", None, 200, &[("1", MSG), ("2", MSG)]);
        c.ex("GET", "b", None, 200, &[("1", MSG)]);
        c.ex("GET", "a", Some("2"), 200, &[("3", MSG)]);
        c.ex("GET", "b", Some("1"), 200, &[("1", MSG)]);
        let unbounded = stream_through(c.clone(), Retention::UNBOUNDED, &[]);
        assert_eq!(unbounded.1.sessions_retired_early, 0);
        // Nothing comes out before the end; both cursors are found on the earlier streams.
        assert_eq!(
            unbounded.0,
            [
                "after 0",
                "after 1",
                "after 2",
                "after 3",
                "a@10:Some(Consistent)",
                "b@14:Some(Consistent)"
            ]
        );
        // With no memory to spare, a session is audited as soon as it has nothing open: a's
        // first stream is gone when its resume comes. Session b has an exchange open
        // (announced before exchange 1) until the end, so it is audited whole.
        let tight = Retention { memory_bytes: 0 };
        let (order, stats) = stream_through(c, tight, &[(1, "b")]);
        assert_eq!(
            order,
            [
                "after 0",
                "after 1",
                "a@10:Some(NotSeen)",
                "after 2",
                "after 3",
                "b@14:Some(Consistent)"
            ]
        );
        assert_eq!(stats.sessions_retired_early, 2);
    }

    #[test]
    fn a_session_the_client_ended_is_audited_at_once_and_not_counted_early() {
        let mut c = Cap::default();
        c.ex("GET", "a", None, 200, &[("1", MSG), ("2", MSG)]);
        c.ex("GET", "a", Some("2"), 200, &[("3", MSG)]);
        c.ex("DELETE", "a", None, 200, &[]);
        c.ex("GET", "b", None, 200, &[("1", MSG)]);
        c.ex("DELETE", "b", None, 405, &[]);
        let (order, stats) = stream_through(c, Retention::UNBOUNDED, &[]);
        // a goes when its DELETE is answered; b's DELETE was refused, so b is still on.
        assert_eq!(
            order,
            [
                "after 0",
                "after 1",
                "a@6:Some(Consistent)",
                "after 2",
                "after 3",
                "after 4"
            ]
        );
        assert_eq!(stats.sessions_retired_early, 0);
    }

    /// One exchange of session `sid` on connection `conn` from `client` to `server`: the
    /// request (with `last`, if any) at frame and time `req`, the answer at `resp` (none: not
    /// captured), its stream one event of id `first`.
    #[allow(clippy::too_many_arguments)]
    fn hop_exchange(
        sid: &str,
        conn: u64,
        client: crate::net::decode::Endpoint,
        server: crate::net::decode::Endpoint,
        last: Option<&str>,
        req: u64,
        resp: Option<u64>,
        first: &str,
    ) -> (ExchangeSummary, Option<ResumeRecord>) {
        let mark = |f: u64| Mark::new(f, f as i64 * 1000);
        let mut t = ExchangeTracker::new(&Limits::default());
        t.request(RequestHead {
            exchange: 0,
            method: "GET".into(),
            target: "/mcp".into(),
            session_id: Some(sid.into()),
            last_event_id: last.map(str::to_string),
            first: mark(req),
            complete: mark(req),
            ..Default::default()
        });
        if let Some(resp) = resp {
            t.response(ResponseHead {
                exchange: 0,
                status: 200,
                content_type: Some("text/event-stream".into()),
                first: mark(resp),
                complete: mark(resp),
                ..Default::default()
            });
            let event = format!("id: {first}\ndata: {MSG}\n\n");
            t.body(0, event.as_bytes(), mark(resp));
            t.body_end(0, BodyEnd::Complete, mark(resp));
        } else {
            t.finish(None, false, mark(req));
        }
        let at = ConnectionRef {
            tcp_stream: Some(conn),
            client: Some(client),
            server: Some(server),
            ..Default::default()
        };
        let mut x = *t.summaries.pop().expect("a summary");
        x.connection = at.clone();
        let r = t.resumes.pop().map(|r| {
            let mut r = *r;
            r.connection = at;
            r
        });
        (x, r)
    }

    /// The sessions still held at the end, audited on two threads, give what one thread
    /// gives, in the same order: among them a proxied session whose copy to the backend is
    /// placed at hop 1 only by the pairs of another session audited before it.
    #[test]
    fn the_last_sessions_audited_on_two_threads_give_what_one_gives() {
        let ep = |ip: [u8; 4], port: u16| crate::net::decode::Endpoint {
            ip: std::net::IpAddr::from(ip),
            port,
        };
        let (c, p, b) = (
            ep([10, 0, 0, 1], 5000),
            ep([10, 0, 0, 2], 443),
            ep([10, 0, 0, 3], 80),
        );
        let q = |port| ep([10, 0, 0, 2], port);
        let mut all = vec![
            // "a": both copies of two exchanges, paired: the backend is at hop 1.
            hop_exchange("a", 0, c, p, None, 1, Some(4), "1"),
            hop_exchange("a", 1, q(6000), b, None, 2, Some(3), "1"),
            hop_exchange("a", 2, c, p, Some("1"), 10, Some(13), "2"),
            hop_exchange("a", 3, q(6001), b, Some("1"), 11, Some(12), "2"),
            // "b": the outer answer was not captured, so its copy pairs with nothing; only
            // what "a" placed puts it at hop 1.
            hop_exchange("b", 4, c, p, Some("7"), 20, None, "8"),
            hop_exchange("b", 5, q(6002), b, Some("7"), 21, Some(22), "8"),
        ];
        // Sessions on one server each, some resuming.
        for i in 0..12u64 {
            let sid = format!("s{i}");
            let server = ep([10, 0, 1, i as u8], 8000);
            let client = ep([10, 0, 2, 1], 7000 + i as u16);
            all.push(hop_exchange(
                &sid,
                10 + 2 * i,
                client,
                server,
                None,
                30 + 10 * i,
                Some(31 + 10 * i),
                "1",
            ));
            all.push(hop_exchange(
                &sid,
                11 + 2 * i,
                client,
                server,
                Some("1"),
                33 + 10 * i,
                Some(34 + 10 * i),
                "3",
            ));
        }
        let run = |threads: usize| {
            let opts = Options {
                views: true,
                threads,
                ..Options::default()
            };
            let mut stage = Stage::new(&opts, Retention::UNBOUNDED);
            let mut sink = Collected::default();
            for (x, r) in all.iter().cloned() {
                stage.exchange(None, Some(Box::new(x)), r.map(Box::new), &mut sink);
            }
            stage.finish(&mut sink);
            sink
        };
        let one = run(1);
        let copy = one
            .resumes
            .iter()
            .find(|r| r.connection.tcp_stream == Some(5))
            .expect("b's copy");
        assert_eq!(copy.forensic.hop, Some(1));
        assert_eq!(one.resumes.len(), 2 + 2 + 12);
        assert_eq!(one.views.len(), 14);
        for threads in [2, 3] {
            assert_eq!(
                format!("{:?}", run(threads)),
                format!("{one:?}"),
                "{threads}"
            );
        }
    }

    #[test]
    fn a_user_pattern_decides_and_names_itself() {
        let mut c = Cap::default();
        c.ex("GET", "s", None, 200, &[("e1.x9", MSG)]);
        c.ex("GET", "s", Some("e1.x9"), 200, &[("e5.q2", MSG)]);
        let opts = Options {
            id_pattern: Some(IdPattern::new(r"e(?P<seq>\d+)\.\w+").unwrap()),
            views: true,
            ..Options::default()
        };
        let (r, out) = c.run(&opts);
        assert_eq!(r[0].decision.verdict, Verdict::GapSkipped);
        let lost = r[0].decision.lost.as_ref().unwrap();
        assert_eq!(
            (lost.from.as_str(), lost.to.as_str(), lost.count),
            ("2", "4", Some(3))
        );
        assert_eq!(
            r[0].forensic.id_shape.as_deref(),
            Some(r"e(?P<seq>\d+)\.\w+")
        );
        assert_eq!(out.views.len(), 1);
        assert_eq!(out.views[0].exchanges.len(), 2);
        assert_eq!(out.views[0].resumes[0].verdict, Verdict::GapSkipped);
    }
}
