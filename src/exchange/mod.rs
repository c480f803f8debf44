//! Exchanges and resumes of one connection: what each request sent and what came back.
//!
//! Input: the HTTP exchanges of one connection (as an [`HttpSink`]), with the bodies of
//! `text/event-stream` answers run through the SSE parser.
//! Output: one [`ResumeRecord`] per request that carried `Last-Event-ID`, decided by
//! [`crate::audit::verdict::decide`]; one [`ExchangeSummary`] per exchange that belongs to an MCP
//! session or answered with an event stream, carrying bounded facts about the stream (hashes
//! of its ids and of its distinctive events, with the frames that carried them) for the
//! session stage ([`crate::audit`]); and the set of session ids seen.
//! Invariants: per exchange only derived facts are kept (ids, hashes, counters, marks), never a
//! body; per stream every list is capped (first and last [`FACTS_HEAD`]/[`FACTS_TAIL`] facts,
//! a few progress tokens, retry values, shapes), and what a cap drops is counted; state for
//! an exchange lives while it is open, summaries until the input is done.
//! Priming events (an id with empty data) count as ids for the first-id comparison, except a
//! priming event at the head of a resumed stream that repeats `Last-Event-ID` exactly: it
//! re-states the client's position and delivers nothing, so the next id decides.

mod seen;

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

use crate::app::jsonrpc::{self, RpcFact};
use crate::app::sse::{EventSink, SseEvent, SseParser};
use crate::audit::Forensics;
use crate::audit::idshape;
use crate::audit::verdict::{
    self, DecimalId, Decision, LimitHit, NoAnswer, ResponseFacts, StreamOutcome, Verdict,
};
use crate::net::decode::Endpoint;
use crate::record::{
    Anomaly, BodyEnd, HeadText, HttpSink, Limits, Mark, RequestHead, ResponseHead, StreamEnd,
};
use seen::SeenIds;

/// Facts (ids, distinctive events) kept from the start of each stream: a replay from zero
/// re-sends these, and the first of a resumed stream's re-deliveries is among them.
pub const FACTS_HEAD: usize = 8;
/// Facts kept from the end of each stream: the client's Last-Event-ID is among the last ids it
/// got, and a partial replay re-sends these.
pub const FACTS_TAIL: usize = 8;
/// Bytes of each event's data looked at for JSON-RPC facts.
pub const KEEP_DATA: usize = 16 << 10;
/// Bytes from the start and from the end of an event's data that its content hash covers
/// (with the data's length and what makes the event unique).
pub const CONTENT_HEAD: usize = 256;
pub const CONTENT_TAIL: usize = 64;
/// Progress tokens followed per stream.
pub const MAX_PROGRESS_TOKENS: usize = 8;
/// `list_changed` notifications kept per stream.
pub const MAX_LIST_CHANGED: usize = 16;
/// `retry:` changes kept per stream.
pub const MAX_RETRY: usize = 8;
/// Shape observations kept per stream.
pub const MAX_SHAPES: usize = 4;
/// Distinct namespace keys kept per stream.
pub const MAX_KEYS: usize = 32;
/// Duplicate ids reported per resumed stream.
pub const MAX_DUPS: usize = 8;
/// Ids remembered per resumed stream to find duplicates inside it.
pub const MAX_SEEN_IDS: usize = 1024;
/// Characters of an id or target kept for display.
pub const MAX_TEXT: usize = 256;
/// Exchange summaries kept per connection; further exchanges are counted, not kept.
pub const MAX_SUMMARIES_PER_CONNECTION: usize = 4096;

/// Where an exchange happened, as the report cites it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnectionRef {
    /// Wireshark's `tcp.stream` index for captures; for HAR input, unused (`None`).
    pub tcp_stream: Option<u64>,
    pub client: Option<Endpoint>,
    pub server: Option<Endpoint>,
    /// For HAR input: the 0-based index of the entry in the file, as it appears there. Marks
    /// of HAR records carry this index as their `frame`.
    pub har_entry: Option<u64>,
    /// For TLS connections: what was negotiated and where the keys came from.
    pub tls: Option<std::sync::Arc<TlsInfo>>,
}

/// The TLS facts a report cites for a connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsInfo {
    /// `TLS 1.2`, `TLS 1.3`.
    pub version: Option<String>,
    /// IANA name of the cipher suite.
    pub cipher: Option<String>,
    pub sni: Option<String>,
    pub alpn: Option<String>,
    /// `keylog:<file>` or `pcapng` (a Decryption Secrets Block).
    pub keys: Option<String>,
}

/// One resume: a request carrying `Last-Event-ID`, what came back, and the verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct ResumeRecord {
    /// `Mcp-Session-Id` of the resume request (or of its answer, or of its URL).
    pub session_id: Option<String>,
    /// The verdict, its reason, and the lost or replayed range.
    pub decision: Decision,
    /// `Last-Event-ID` exactly as sent.
    pub last_event_id: String,
    /// The first `id:` of the answer's stream, exactly as received.
    pub first_event_id: Option<String>,
    /// For `capture_incomplete` after missing bytes: the first id the capture holds after them.
    pub first_id_after_gap: Option<String>,
    /// The first id was longer than the field limit and is cut.
    pub first_event_id_truncated: bool,
    /// The request method.
    pub method: HeadText,
    /// The request target.
    pub target: HeadText,
    /// `MCP-Protocol-Version` of the request.
    pub protocol_version: Option<HeadText>,
    /// The frame of the request head's first byte.
    pub request: Mark,
    /// The answer's status, when captured.
    pub status: Option<u16>,
    /// The answer's `Content-Type`.
    pub content_type: Option<HeadText>,
    /// The frame of the answer head's first byte.
    pub response: Option<Mark>,
    /// The frame that completed the first event carrying an id.
    pub first_event: Option<Mark>,
    /// Events (blocks with fields) seen on the stream before the first one carrying an id.
    pub events_before_first_id: u64,
    /// Events seen on the stream in all.
    pub stream_events: u64,
    /// Events of the stream whose integer id is at or below the integer `Last-Event-ID`:
    /// deliveries seen repeated (counted over the whole stream as captured).
    pub resent_ids: u64,
    /// How the answer's body ended (`None`: still open at capture end, or no answer).
    pub stream_end: Option<BodyEnd>,
    /// The last frame that belongs to the proof (first event, else the end of the answer).
    pub last_proof: Mark,
    /// The connection: endpoints, `tcp.stream`, TLS facts.
    pub connection: ConnectionRef,
    /// 0-based index of the exchange on its connection: joins the record to its summary.
    pub exchange: u32,
    /// The HTTP/2 stream of the request, on HTTP/2.
    pub h2_stream: Option<u32>,
    /// A priming event at the head of the stream that repeated `Last-Event-ID`, skipped when
    /// choosing the first id.
    pub priming_ack: Option<Mark>,
    /// An `event: resume` acknowledgment: the resume point it states, and where.
    pub resume_ack: Option<(String, Mark)>,
    /// `retry:` values of the stream, each time the value changed (capped).
    pub retry: Vec<(u64, Mark)>,
    /// The verdict is `unverifiable` only because the ids are not integers: the session
    /// stage may decide it from other evidence.
    pub ids_opaque: bool,
    /// What the session stage found about this resume.
    pub forensic: Forensics,
}

/// The first `FACTS_HEAD` and the last `FACTS_TAIL` items pushed; the ones between are
/// counted in `dropped`.
#[derive(Clone, Debug)]
pub struct HeadTail<T> {
    head: Vec<T>,
    /// The last items, in a ring: once it is full, each item pushed takes the place of the
    /// oldest, at `oldest`, where a queue's pop and push moved two.
    tail: Vec<T>,
    oldest: usize,
    pub dropped: u64,
}

impl<T> Default for HeadTail<T> {
    fn default() -> Self {
        HeadTail::new()
    }
}

impl<T: PartialEq> PartialEq for HeadTail<T> {
    /// The same items kept, in the same order, and as many dropped.
    fn eq(&self, other: &Self) -> bool {
        self.dropped == other.dropped && self.iter().eq(other.iter())
    }
}

impl<T> HeadTail<T> {
    pub const fn new() -> Self {
        HeadTail {
            head: Vec::new(),
            tail: Vec::new(),
            oldest: 0,
            dropped: 0,
        }
    }

    pub fn push(&mut self, item: T) {
        if self.head.len() < FACTS_HEAD {
            if self.head.capacity() == 0 {
                self.head.reserve_exact(FACTS_HEAD);
            }
            self.head.push(item);
            return;
        }
        if self.tail.len() < FACTS_TAIL {
            if self.tail.capacity() == 0 {
                self.tail.reserve_exact(FACTS_TAIL);
            }
            self.tail.push(item);
            return;
        }
        if let Some(slot) = self.tail.get_mut(self.oldest) {
            *slot = item;
        }
        self.oldest = (self.oldest + 1) % FACTS_TAIL;
        self.dropped += 1;
    }

    /// Gives back the room a short stream did not use.
    pub fn shrink(&mut self) {
        self.head.shrink_to_fit();
        self.tail.shrink_to_fit();
    }

    /// Kept items in the order they were pushed.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + Clone {
        let (newer, older) = self.tail.split_at(self.oldest.min(self.tail.len()));
        self.head.iter().chain(older).chain(newer)
    }

    pub fn is_empty(&self) -> bool {
        self.head.is_empty()
    }

    /// The next item pushed goes to the head, which is never dropped.
    pub fn head_has_room(&self) -> bool {
        self.head.len() < FACTS_HEAD
    }
}

/// An id as shown in the report: its text (cut at [`MAX_TEXT`]), where it came, and its
/// position among the stream's ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdSeen {
    pub text: String,
    pub mark: Mark,
    pub id_index: u64,
}

/// One event id of a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdFact {
    /// Hash of the whole id as received.
    pub hash: u64,
    pub mark: Mark,
    /// Position of the event in the stream (0-based, over all events).
    pub event: u64,
    /// Position among the stream's ids (0-based).
    pub id_index: u64,
    /// The event had no data (a priming event): it delivers nothing when re-sent.
    pub priming: bool,
    /// The id is a decimal integer: streams may each count their own, so the same integer
    /// on two streams need not be the same event.
    pub integer: bool,
    /// Where the event began: the frame that holds its `id:` line when the event opens with
    /// it, where `mark` (where it was complete) may hold only the end of a long data field.
    pub start: Mark,
    /// Hash and length of the id's namespace key ([`idshape::namespace_key`]).
    pub key: u64,
    pub key_len: u32,
    /// The id's text, kept for the head facts of resumed streams (the ones findings quote).
    pub text: Option<Box<str>>,
}

impl IdFact {
    /// The id could name its session in another one: it delivered something (not a priming
    /// event) and its namespace key is long enough not to be shared by chance (integers and
    /// short ids never prove a leak).
    pub fn distinctive(&self) -> bool {
        !self.priming && self.key_len as usize >= crate::audit::idshape::MIN_DISTINCTIVE_KEY
    }
}

/// What makes an event's content worth comparing: it cannot legitimately be sent twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContentKind {
    /// A JSON-RPC response: one per request.
    Response,
    /// A request from the server: its id is used once.
    Request,
    /// A progress notification: progress must increase, so the same one never comes twice.
    Progress,
}

/// One distinctive event of a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContentFact {
    /// Hash of the event type, the data length and the kept data.
    pub hash: u64,
    pub kind: ContentKind,
    /// Hash of the raw JSON-RPC id, for responses and requests.
    pub rpc_id: Option<u64>,
    pub mark: Mark,
    pub event: u64,
    /// The event's own SSE id, when it had one.
    pub event_id: Option<u64>,
}

/// A progress value and where it came.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProgressAt {
    pub value: f64,
    pub mark: Mark,
}

/// The progress of one token on one stream.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgressTrack {
    pub token: u64,
    /// The raw JSON token, cut for display.
    pub token_text: String,
    pub first: ProgressAt,
    pub last: ProgressAt,
    pub max: ProgressAt,
    /// The first time progress did not increase on this stream: (before, after).
    pub regressed: Option<(ProgressAt, ProgressAt)>,
}

/// A `list_changed` notification on a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListChangedFact {
    pub method: String,
    pub mark: Mark,
    pub event_id: Option<(u64, String)>,
}

/// The same id twice on one resumed stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DupId {
    pub text: String,
    pub first: Mark,
    pub again: Mark,
}

/// Consecutive ids of a stream that agree (`support`), skip ahead (`skips`: the counter went
/// up by more than one) or disagree (`breaks`) with a shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeTally {
    pub k: u8,
    pub prefix: String,
    pub suffix: String,
    pub support: u32,
    pub breaks: u32,
    pub skips: u32,
}

/// Bounded facts about one `text/event-stream` answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamSummary {
    pub events: u64,
    pub ids: u64,
    pub priming: u64,
    pub first_id: Option<IdSeen>,
    pub last_id: Option<IdSeen>,
    /// The highest integer id of the stream, when it has any.
    pub max_int_id: Option<IdSeen>,
    pub id_facts: HeadTail<IdFact>,
    pub content: HeadTail<ContentFact>,
    pub progress: Vec<ProgressTrack>,
    pub list_changed: Vec<ListChangedFact>,
    pub retry: Vec<(u64, Mark)>,
    pub resume_ack: Option<(String, Mark)>,
    pub shapes: Vec<ShapeTally>,
    /// Distinct namespace key hashes of the stream's ids (capped at [`MAX_KEYS`]).
    pub keys: Vec<u64>,
    pub dup_ids: Vec<DupId>,
    /// Holes in the body the capture did not hold.
    pub gaps: u64,
    /// For the 2024-11-05 transport: the session named by an `endpoint` event. Boxed rather
    /// than a `String`: eight bytes less keep the summary in the allocator's 512-byte class.
    pub endpoint_session: Option<Box<str>>,
    /// Facts beyond the caps (ids and contents between head and tail, tokens, events).
    pub facts_dropped: u64,
}

/// The facts of a stream that carried nothing: no event, id, gap or fact of any kind (an
/// empty `200` of a reconnect loop).
pub static EMPTY_STREAM: StreamSummary = StreamSummary {
    events: 0,
    ids: 0,
    priming: 0,
    first_id: None,
    last_id: None,
    max_int_id: None,
    id_facts: HeadTail::new(),
    content: HeadTail::new(),
    progress: Vec::new(),
    list_changed: Vec::new(),
    retry: Vec::new(),
    resume_ack: None,
    shapes: Vec::new(),
    keys: Vec::new(),
    dup_ids: Vec::new(),
    gaps: 0,
    endpoint_session: None,
    facts_dropped: 0,
};

impl StreamSummary {
    /// True when the summary says nothing [`EMPTY_STREAM`] does not, down to the room its
    /// lists hold (which the session stage's memory budget counts).
    pub fn is_empty(&self) -> bool {
        self == &EMPTY_STREAM
            && self.progress.capacity() == 0
            && self.list_changed.capacity() == 0
            && self.retry.capacity() == 0
            && self.shapes.capacity() == 0
            && self.keys.capacity() == 0
    }

    /// About what its facts occupy beyond the summary itself, as the session stage's memory
    /// budget counts them: text by its length, lists by the room [`grown_room`] gives them
    /// (their room as allocated differs between a summary made from the capture and the same
    /// summary read back from a facts file, and counted, it made the two retire different
    /// sessions early). 0 for [`EMPTY_STREAM`].
    pub fn facts_room(&self) -> usize {
        use std::mem::size_of;
        self.id_facts.iter().count() * size_of::<IdFact>()
            + self
                .id_facts
                .iter()
                .map(|f| f.text.as_ref().map_or(0, |t| t.len()))
                .sum::<usize>()
            + self.content.iter().count() * size_of::<ContentFact>()
            + grown_room(self.progress.len()) * (size_of::<ProgressTrack>() + 32)
            + grown_room(self.list_changed.len()) * (size_of::<ListChangedFact>() + 48)
            + grown_room(self.shapes.len()) * (size_of::<ShapeTally>() + 32)
            + grown_room(self.keys.len()) * size_of::<u64>()
            + self.dup_ids.len() * (size_of::<DupId>() + 32)
            + grown_room(self.retry.len()) * size_of::<(u64, Mark)>()
            + [&self.first_id, &self.last_id, &self.max_int_id]
                .iter()
                .map(|i| i.as_ref().map_or(0, |i| i.text.len()))
                .sum::<usize>()
    }
}

/// One exchange, as the session stage needs it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExchangeSummary {
    pub connection: ConnectionRef,
    pub exchange: u32,
    pub session_id: Option<String>,
    /// `None` when the request was not captured.
    pub method: Option<HeadText>,
    pub target: Option<HeadText>,
    pub last_event_id: Option<String>,
    pub protocol_version: Option<HeadText>,
    pub request: Option<Mark>,
    pub status: Option<u16>,
    pub response: Option<Mark>,
    pub event_stream: bool,
    pub end: Option<(BodyEnd, Mark)>,
    /// The stream's facts, unless it carried nothing; read them with
    /// [`ExchangeSummary::stream`], made by [`held_stream`].
    pub stream_facts: Option<Box<StreamSummary>>,
    /// The stream carried nothing: its facts are [`EMPTY_STREAM`], and not held.
    pub stream_empty: bool,
    /// [`StreamSummary::facts_room`] of `stream_facts` (0 without), made with them by
    /// [`held_stream`]: counted where the facts were just made, on the thread that made them,
    /// rather than by the session stage on another core, which would read them all from memory
    /// for it (the stage's largest single cost on a HAR of small entries). It fills padding the
    /// summary had.
    pub stream_room: u32,
    /// Some id the stream's facts keep could name its session elsewhere
    /// ([`IdFact::distinctive`]), made with them by [`held_stream`]: the session stage's
    /// index of such ids reads the facts only of the streams that have one. Reading every
    /// stream's, made long before (and on another core with `-j2`), took 3.1% of the `-j1`
    /// samples on a HAR of small entries, whose ids are integers.
    pub stream_distinctive: bool,
    /// The exchange began its session: the answer named a session that the request did not
    /// (an `initialize`), or the stream's `endpoint` event did (the 2024-11-05 transport).
    pub opens_session: bool,
}

/// How the session stage holds the facts of an exchange's stream: the fields of
/// [`ExchangeSummary`] that [`held_stream`] makes.
#[derive(Debug, Default, PartialEq)]
pub struct HeldStream {
    /// [`ExchangeSummary::stream_facts`].
    pub facts: Option<Box<StreamSummary>>,
    /// [`ExchangeSummary::stream_empty`].
    pub empty: bool,
    /// [`ExchangeSummary::stream_room`].
    pub room: u32,
    /// [`ExchangeSummary::stream_distinctive`].
    pub distinctive: bool,
}

/// How the session stage holds the facts of an exchange's stream: a stream that carried
/// nothing ([`StreamSummary::is_empty`]: every answer of a reconnect loop) keeps no summary of
/// its own, and reads as [`EMPTY_STREAM`]; what the stage's budget and index need of the facts
/// is counted here, on the thread that made them.
pub fn held_stream(summary: Option<Box<StreamSummary>>) -> HeldStream {
    match summary {
        Some(s) if s.is_empty() => HeldStream {
            empty: true,
            ..HeldStream::default()
        },
        Some(s) => {
            let room = u32::try_from(s.facts_room()).unwrap_or(u32::MAX);
            let distinctive = s.id_facts.iter().any(IdFact::distinctive);
            HeldStream {
                facts: Some(s),
                empty: false,
                room,
                distinctive,
            }
        }
        None => HeldStream::default(),
    }
}

/// The room a list of `len` items holds when grown one push at a time (four items, then
/// doublings): what the session stage's budget counts for lists whose room is fitted to their
/// items, so that how their room is reserved never changes which sessions it retires early.
pub fn grown_room(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        len.next_power_of_two().max(4)
    }
}

impl ExchangeSummary {
    /// The stream's facts, if any were kept.
    pub fn stream(&self) -> Option<&StreamSummary> {
        match &self.stream_facts {
            Some(s) => Some(s),
            None => self.stream_empty.then_some(&EMPTY_STREAM),
        }
    }

    /// The stream's facts to change, when it has any beyond [`EMPTY_STREAM`].
    pub fn stream_mut(&mut self) -> Option<&mut StreamSummary> {
        self.stream_facts.as_deref_mut()
    }

    /// Where the exchange begins in the capture.
    pub fn start(&self) -> Mark {
        self.request.or(self.response).unwrap_or_default()
    }
}

/// Up to eight bytes as a little-endian word (missing bytes are zero), without a call to
/// memcpy for short slices.
#[inline]
fn word(bytes: &[u8]) -> u64 {
    if let Some(w) = bytes.first_chunk::<8>() {
        return u64::from_le_bytes(*w);
    }
    if let (Some(a), Some(b)) = (bytes.first_chunk::<4>(), bytes.last_chunk::<4>()) {
        // Two overlapping reads cover 4 to 7 bytes; the length is hashed separately.
        return u64::from(u32::from_le_bytes(*a)) | (u64::from(u32::from_le_bytes(*b)) << 32);
    }
    bytes
        .iter()
        .enumerate()
        .fold(0, |w, (i, &b)| w | (u64::from(b) << (8 * i)))
}

/// A 64-bit hash of byte strings (their lengths included): it runs over every event id and
/// every distinctive event of a capture. foldhash with a fixed seed, so the same bytes give
/// the same hash on every thread and in every run; never shown, only equality of hashes is
/// used.
pub fn fact_hash(parts: &[&[u8]]) -> u64 {
    use std::hash::BuildHasher;
    static STATE: foldhash::quality::FixedState =
        foldhash::quality::FixedState::with_seed(0xa076_1d64_78bd_642f);
    STATE.hash_one(parts)
}

/// A set of session id hashes (`fact_hash`). A connection nearly always names one session,
/// which is held inline: a set of its own cost every connection of a reconnect storm an
/// allocation. The others are in a set made when a second one comes (inline, the empty set
/// made every connection 24 bytes larger).
#[derive(Clone, Debug, Default)]
pub struct SessionHashes {
    first: Option<u64>,
    // Boxed for the size of the empty set inline, not of its contents.
    #[allow(clippy::box_collection)]
    more: Option<Box<HashSet<u64, rustc_hash::FxBuildHasher>>>,
}

impl SessionHashes {
    /// Adds `hash`, if it is not in the set already.
    pub fn insert(&mut self, hash: u64) {
        match self.first {
            None => self.first = Some(hash),
            Some(f) if f == hash => {}
            Some(_) => {
                self.more.get_or_insert_with(Default::default).insert(hash);
            }
        }
    }

    /// True when `hash` is in the set.
    pub fn contains(&self, hash: u64) -> bool {
        self.first == Some(hash) || self.more.as_ref().is_some_and(|m| m.contains(&hash))
    }

    /// The hashes, each once, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.first
            .into_iter()
            .chain(self.more.iter().flat_map(|m| m.iter().copied()))
    }
}

/// The hashes of the session ids of an input, as compact as an exact count allows: eight
/// bytes per session in one sorted list, and the newest hashes unsorted beside it until they
/// are an eighth as many (then sorted, stripped of the ones known and merged in). A hash set
/// costs 10 to 20 bytes per session and doubles as it grows: the two shards' sets of a
/// capture of 75,000 sessions held 2.4 MB at its peak (heaptrack), beside a B-tree for the
/// input's total, and grew with every session of a longer capture.
#[derive(Clone, Debug, Default)]
pub struct SessionSet {
    sorted: Vec<u64>,
    recent: Vec<u64>,
}

/// Fewest unsorted hashes gathered before they are merged: a storm names the same few
/// sessions on thousands of connections, and each merge costs a search per distinct hash.
const MIN_RECENT_SESSIONS: usize = 1024;

impl SessionSet {
    pub fn insert(&mut self, hash: u64) {
        self.recent.push(hash);
        if self.recent.len() >= (self.sorted.len() / 8).max(MIN_RECENT_SESSIONS) {
            self.settle();
        }
    }

    /// The unsorted hashes that are not in the sorted list, sorted, each once.
    fn news(&self, mut recent: Vec<u64>) -> Vec<u64> {
        recent.sort_unstable();
        recent.dedup();
        recent.retain(|h| self.sorted.binary_search(h).is_err());
        recent
    }

    /// Merges the unsorted hashes into the sorted list.
    fn settle(&mut self) {
        let recent = std::mem::take(&mut self.recent);
        let mut news = self.news(recent);
        // In place from the back: the list grows by what is new, never to twice its size.
        let old = self.sorted.len();
        self.sorted.reserve_exact(news.len());
        self.sorted.resize(old + news.len(), 0);
        let (mut i, mut j) = (old, news.len());
        for k in (0..self.sorted.len()).rev() {
            if j == 0 {
                break;
            }
            if i > 0 && self.sorted[i - 1] > news[j - 1] {
                self.sorted[k] = self.sorted[i - 1];
                i -= 1;
            } else {
                self.sorted[k] = news[j - 1];
                j -= 1;
            }
        }
        news.clear();
        self.recent = news;
    }

    /// The hashes, each once, in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        let mut a = self.sorted.iter().copied().peekable();
        let mut b = self.news(self.recent.clone()).into_iter().peekable();
        std::iter::from_fn(move || match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x < y => a.next(),
            (Some(_), Some(_)) | (None, _) => b.next(),
            (Some(_), None) => a.next(),
        })
    }

    /// How many sessions.
    pub fn len(&self) -> usize {
        self.sorted.len() + self.news(self.recent.clone()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty() && self.recent.is_empty()
    }

    /// Hashes held, a hash given twice counted twice until the set sorts it in.
    pub fn held(&self) -> usize {
        self.sorted.len() + self.recent.len()
    }

    /// Moves every hash into `to`, leaving this set empty (with its room).
    pub fn move_into(&mut self, to: &mut SessionSet) {
        to.extend(self.iter());
        self.sorted.clear();
        self.recent.clear();
    }
}

impl Extend<u64> for SessionSet {
    fn extend<I: IntoIterator<Item = u64>>(&mut self, hashes: I) {
        for h in hashes {
            self.insert(h);
        }
    }
}

impl FromIterator<u64> for SessionSet {
    fn from_iter<I: IntoIterator<Item = u64>>(hashes: I) -> Self {
        let mut s = SessionSet::default();
        s.extend(hashes);
        s
    }
}

/// The namespace key of an integer id: nothing is left once its digits are gone.
static EMPTY_KEY: std::sync::LazyLock<(u64, usize)> =
    std::sync::LazyLock::new(|| idshape::namespace_key_hash(b""));

/// A map keyed by `fact_hash` values: already hashed, so rustc-hash's one multiplication
/// is all the spreading they need.
pub type FactMap<V> = HashMap<u64, V, rustc_hash::FxBuildHasher>;

/// Replaces `out` with `bytes` cut at [`MAX_TEXT`] characters, reusing its buffer.
fn set_text(out: &mut String, bytes: &[u8]) {
    out.clear();
    match std::str::from_utf8(bytes) {
        Ok(s) if s.len() <= MAX_TEXT => out.push_str(s),
        _ => out.push_str(&cut_text(bytes)),
    }
}

fn set_seen(slot: &mut Option<IdSeen>, id: &[u8], text: Option<&str>, mark: Mark, id_index: u64) {
    match slot {
        Some(seen) => update_seen(seen, id, text, mark, id_index),
        None => *slot = Some(new_seen(id, mark, id_index)),
    }
}

/// `seen` made the id `id` (its text `text` when known) seen at `mark`.
fn update_seen(seen: &mut IdSeen, id: &[u8], text: Option<&str>, mark: Mark, id_index: u64) {
    match text {
        Some(t) if t.len() <= MAX_TEXT => {
            seen.text.clear();
            seen.text.push_str(t);
        }
        _ => set_text(&mut seen.text, id),
    }
    seen.mark = mark;
    seen.id_index = id_index;
}

fn new_seen(id: &[u8], mark: Mark, id_index: u64) -> IdSeen {
    IdSeen {
        text: cut_text(id),
        mark,
        id_index,
    }
}

/// `s` with no room beyond its length, as a copy of it would have.
fn tight(mut s: String) -> String {
    s.shrink_to_fit();
    s
}

fn tight_head(t: HeadText) -> HeadText {
    match t {
        HeadText::Owned(s) => HeadText::Owned(tight(s)),
        known => known,
    }
}

fn cut_text(bytes: &[u8]) -> String {
    // ASCII (nearly every id and header) is one byte per character.
    if bytes.is_ascii() {
        let s = std::str::from_utf8(&bytes[..bytes.len().min(MAX_TEXT)]).unwrap_or_default();
        return s.to_string();
    }
    let s = String::from_utf8_lossy(bytes);
    match s.char_indices().nth(MAX_TEXT) {
        Some((at, _)) => s[..at].to_string(),
        None => s.into_owned(),
    }
}

/// What a resumed stream tells about the seed's comparison.
#[derive(Debug)]
struct ResumeFacts {
    last_event_id: String,
    first_id: Option<(String, bool, Mark)>,
    events: u64,
    events_before_first_id: u64,
    /// Integer ids at or below the integer `Last-Event-ID`: events seen delivered again.
    resent_ids: u64,
    gap_before_first_id: bool,
    /// `Last-Event-ID` is a decimal integer (asked for every event), and its value when it
    /// fits 64 bits.
    last_is_integer: bool,
    last_value: Option<u64>,
    priming_ack: Option<Mark>,
    /// Ids seen on this stream, to find duplicates when it ends (capped at [`MAX_SEEN_IDS`]).
    seen: SeenIds,
}

/// Facts gathered from one answer's event stream.
#[derive(Debug)]
struct StreamFacts {
    /// Boxed: only resumed streams have them, and inline they made every stream's state
    /// (thousands open at once in a session-heavy capture) 208 bytes larger, into the
    /// allocator's 768-byte size class from the 640-byte one.
    resume: Option<Box<ResumeFacts>>,
    summary: Option<Box<StreamSummary>>,
    shape: ShapeState,
    tail: TailEvents,
    /// The stream's highest integer id.
    max_int: MaxInt,
    /// The namespace key of the previous id (ids of one stream mostly share it).
    last_key: Option<u64>,
    /// The stream's last id when it is an integer written without leading zeros (its value,
    /// where it came, its position among the ids); `summary.last_id` is stale while set.
    last_int: Option<(u64, Mark, u64)>,
    max_id: usize,
}

#[derive(Debug)]
struct StreamState {
    parser: SseParser,
    facts: StreamFacts,
}

struct OpenExchange {
    request: Option<RequestHead>,
    response: Option<ResponseHead>,
    /// Boxed: only event streams have one, and inline it made every connection's tracker (the
    /// hot exchange is held in it) and every open exchange several hundred bytes larger, and
    /// those bytes were copied each time an exchange went into or out of the table.
    stream: Option<Box<StreamState>>,
    /// The answer is an event stream to read whose body has not begun: its state is made when
    /// the first bytes (or a gap) of the body come, so that an answer with no body (every
    /// answer of a reconnect loop) costs no state. Holds the request's `Last-Event-ID`.
    unread_stream: Option<Option<String>>,
    end: Option<(BodyEnd, Mark)>,
}

impl OpenExchange {
    fn empty() -> Self {
        OpenExchange {
            request: None,
            response: None,
            stream: None,
            unread_stream: None,
            end: None,
        }
    }
}

/// The state of an event stream about to be read; `resumed_from` is the `Last-Event-ID` of its
/// request, `keep` says whether session facts are gathered. Never inlined: the state is built
/// in the frame of the function that makes it, and in the body's path, taken at every slice
/// of a body, that frame cost more than the rest.
#[inline(never)]
fn new_stream(max_field: usize, keep: bool, resumed_from: Option<String>) -> Box<StreamState> {
    let resume = resumed_from.map(|last_event_id| {
        Box::new(ResumeFacts {
            last_is_integer: DecimalId::parse(&last_event_id).is_some(),
            last_value: small_value(&last_event_id),
            last_event_id,
            first_id: None,
            events: 0,
            events_before_first_id: 0,
            resent_ids: 0,
            gap_before_first_id: false,
            priming_ack: None,
            seen: SeenIds::default(),
        })
    });
    Box::new(StreamState {
        parser: SseParser::with_field_limit(max_field, if keep { KEEP_DATA } else { 0 }),
        facts: StreamFacts {
            resume,
            summary: keep.then(Box::default),
            shape: ShapeState::default(),
            tail: TailEvents::default(),
            max_int: MaxInt::default(),
            last_key: None,
            last_int: None,
            max_id: max_field,
        },
    })
}

/// Collects one connection's exchanges (implements [`HttpSink`]).
pub struct ExchangeTracker {
    /// `Limits::max_sse_field_bytes`, the one limit the tracker applies (to the event streams
    /// it reads): the whole `Limits` made every connection 32 bytes larger.
    max_sse_field: usize,
    // Exchange numbers are a counter the HTTP stage assigns, not input: rustc-hash spreads them
    // with one multiplication, where SipHash costs more than the rest of a body call.
    // Boxed, as `hot` is: moving an exchange in or out of the table moves a pointer.
    /// The table itself is made when a second exchange is open at once (pipelining, HTTP/2):
    /// inline, the empty table made every connection 24 bytes larger.
    #[allow(clippy::box_collection)]
    open: Option<Box<HashMap<u32, Box<OpenExchange>, rustc_hash::FxBuildHasher>>>,
    /// The exchange a request or response head last named, kept out of `open`: a connection
    /// mostly carries one exchange at a time, and its body slices then find it without a
    /// lookup (which costs a cache miss on the table at every slice). Boxed: most connections
    /// open at once are idle between exchanges (a session's first connection waits for its
    /// `DELETE`), and inline the slot made each of them some 340 bytes larger.
    hot: Option<(u32, Box<OpenExchange>)>,
    /// Decided resumes, in the order they were decided; the connection fills in endpoints.
    /// Boxed where they are made: a record (some 620 bytes) reaches the session stage in a
    /// box, and held by value it would be copied whole at each step on the way (out of this
    /// list, through the filling in of its endpoints, into the box).
    pub resumes: Vec<Box<ResumeRecord>>,
    /// Exchange summaries for the session stage, in the order they completed; boxed where
    /// they are made, as the resumes are.
    pub summaries: Vec<Box<ExchangeSummary>>,
    /// Session ids seen on the connection, as their `fact_hash`: only how many distinct
    /// sessions the input has is counted from them, and a hash needs no copy of the id.
    pub session_ids: SessionHashes,
    /// Exchanges whose request named a session (header or URL), as requests are seen: the
    /// session stage knows from them which sessions are still active.
    pub opened: Vec<(u32, SessionName)>,
    /// Anomalies the parsers recovered from, up to a bound.
    pub anomalies: Vec<(Anomaly, Mark)>,
    /// Exchanges (requests or responses) seen.
    pub exchanges: u64,
    /// Facts dropped by the per-stream caps, and summaries by the per-connection cap.
    pub facts_dropped: u64,
    /// See `facts_dropped`.
    pub summaries_dropped: u64,
    keep_summaries: bool,
    /// Sessions requests name are listed in [`ExchangeTracker::opened`]: not where no stage
    /// hears of a request before its exchange is over (a HAR entry).
    list_opened: bool,
    /// The connection was evicted (`Limits::max_connections`) while exchanges were open.
    evicted: bool,
    /// Where the HTTP stage lost messages, if it ever did: boxed when it first does (a clean
    /// connection never does, and inline the two marks made every connection 40 bytes
    /// larger).
    lost: Option<Box<LostMarks>>,
    /// Since the caller last took it: requests may have been lost (bytes of the client's
    /// direction missing, or an answer that could not be paired with a request), and no
    /// session can be named for them.
    pub unattributed_loss: bool,
}

/// A session id as a request named it, on its way to the session stage. Held in place when
/// it is as short as session ids nearly always are (a UUID's text is 36 bytes): naming it then
/// costs the worker no allocation, and the stage no release of memory another thread holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionName {
    /// Up to [`SessionName::SHORT`] bytes.
    Short(arrayvec::ArrayString<{ SessionName::SHORT }>),
    /// Longer.
    Long(Box<str>),
}

impl SessionName {
    /// The longest name held in place.
    pub const SHORT: usize = 40;

    /// `name`, held in place when it is short enough.
    pub fn new(name: &str) -> Self {
        match arrayvec::ArrayString::from(name) {
            Ok(short) => SessionName::Short(short),
            Err(_) => SessionName::Long(name.into()),
        }
    }
}

impl std::ops::Deref for SessionName {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            SessionName::Short(s) => s,
            SessionName::Long(s) => s,
        }
    }
}

/// Where a connection's HTTP stage lost messages.
#[derive(Debug, Default)]
struct LostMarks {
    /// The last message head dropped for exceeding `Limits::max_header_bytes`.
    head_too_large: Option<Mark>,
    /// The last time the HTTP stage skipped bytes it could not read as HTTP (a lost or
    /// unreadable message head), or met an answer it could not pair with a request: an
    /// answer to an open request may have been among them.
    resynced: Option<Mark>,
}

/// Anomalies kept per connection for the report; further ones are only counted.
const MAX_ANOMALIES_KEPT: usize = 64;

impl ExchangeTracker {
    /// A tracker for a new connection.
    pub fn new(limits: &Limits) -> Self {
        ExchangeTracker {
            max_sse_field: limits.max_sse_field_bytes,
            open: None,
            hot: None,
            resumes: Vec::new(),
            summaries: Vec::new(),
            session_ids: SessionHashes::default(),
            opened: Vec::new(),
            anomalies: Vec::new(),
            exchanges: 0,
            facts_dropped: 0,
            summaries_dropped: 0,
            keep_summaries: true,
            list_opened: true,
            evicted: false,
            lost: None,
            unattributed_loss: false,
        }
    }

    /// Something for the session stage has come since it was last taken: a request naming a
    /// session, a summary or a resume.
    pub fn has_news(&self) -> bool {
        !(self.opened.is_empty()
            && self.summaries.is_empty()
            && self.resumes.is_empty()
            && !self.unattributed_loss)
    }

    /// Gives the tracker `room` (an empty list) for the sessions its requests open.
    pub fn with_opened(mut self, room: Vec<(u32, SessionName)>) -> Self {
        debug_assert!(room.is_empty());
        self.opened = room;
        self
    }

    /// Lists no sessions in [`ExchangeTracker::opened`]: for exchanges over before the
    /// session stage hears of them.
    pub fn without_opened(mut self) -> Self {
        self.list_opened = false;
        self
    }

    /// Stops gathering session facts for this connection (resumes are still decided): the
    /// driver's bound on how many connections of one input feed the session stage.
    pub fn without_summaries(mut self) -> Self {
        self.keep_summaries = false;
        self
    }

    /// The open exchange `exchange`, created if need be; it becomes the hot one.
    fn entry(&mut self, exchange: u32) -> &mut OpenExchange {
        match self.hot.take() {
            Some((n, ex)) if n == exchange => &mut self.hot.insert((n, ex)).1,
            other => {
                if let Some((n, old)) = other {
                    self.open
                        .get_or_insert_with(Default::default)
                        .insert(n, old);
                }
                let ex = self
                    .open
                    .as_mut()
                    .and_then(|o| o.remove(&exchange))
                    .unwrap_or_else(|| Box::new(OpenExchange::empty()));
                &mut self.hot.insert((exchange, ex)).1
            }
        }
    }

    /// The open exchange `exchange`, if there is one, to read.
    fn get_ref(&self, exchange: u32) -> Option<&OpenExchange> {
        match &self.hot {
            Some((n, ex)) if *n == exchange => Some(ex),
            _ => self.open.as_ref()?.get(&exchange).map(|ex| &**ex),
        }
    }

    /// The open exchange `exchange`, if there is one.
    fn get(&mut self, exchange: u32) -> Option<&mut OpenExchange> {
        match &mut self.hot {
            Some((n, ex)) if *n == exchange => Some(ex),
            _ => self.open.as_mut()?.get_mut(&exchange).map(|ex| &mut **ex),
        }
    }

    /// The event stream state of the open exchange `exchange`, made if its body begins now.
    fn stream(&mut self, exchange: u32) -> Option<&mut StreamState> {
        let max_field = self.max_sse_field;
        let keep = self.keep_summaries;
        let ex = match &mut self.hot {
            Some((n, ex)) if *n == exchange => ex,
            _ => self.open.as_mut()?.get_mut(&exchange)?,
        };
        if ex.unread_stream.is_some() {
            let resumed_from = ex.unread_stream.take().flatten();
            ex.stream = Some(new_stream(max_field, keep, resumed_from));
        }
        ex.stream.as_deref_mut()
    }

    /// See [`LostMarks::resynced`].
    fn resynced(&self) -> Option<Mark> {
        self.lost.as_ref().and_then(|l| l.resynced)
    }

    /// Takes the open exchange `exchange` out, if there is one.
    fn remove(&mut self, exchange: u32) -> Option<Box<OpenExchange>> {
        match &self.hot {
            Some((n, _)) if *n == exchange => self.hot.take().map(|(_, ex)| ex),
            _ => self.open.as_mut()?.remove(&exchange),
        }
    }

    /// Decides what is still open: called when the connection is over. `server_end` says how
    /// the server's side ended (`None` when unknown), and whether bytes were missing from it.
    pub fn finish(&mut self, server_end: Option<StreamEnd>, server_gaps: bool, mark: Mark) {
        let mut ids: Vec<u32> = self.open.iter().flat_map(|o| o.keys().copied()).collect();
        ids.extend(self.hot.as_ref().map(|(n, _)| *n));
        ids.sort_unstable();
        self.evicted = server_end == Some(StreamEnd::Evicted);
        for id in ids {
            if let Some(mut ex) = self.remove(id) {
                self.finish_stream(&mut ex, mark);
                // Bytes the HTTP stage skipped, or an answer it could not pair, may have been
                // this request's answer: after the request, or before it when the capture
                // holds the answer ahead of the request it answers.
                let skipped_after = self.resynced().is_some();
                let no_answer = match server_end {
                    _ if server_gaps || skipped_after => NoAnswer::NotCaptured,
                    Some(StreamEnd::Fin | StreamEnd::Rst) => NoAnswer::ServerClosed,
                    Some(StreamEnd::PeerRst) => NoAnswer::ClientAborted,
                    _ => NoAnswer::NotCaptured,
                };
                self.complete(id, ex, no_answer, mark);
            }
        }
    }

    /// An exchange is over: its summary is kept, and a resume is decided.
    fn complete(&mut self, exchange: u32, ex: Box<OpenExchange>, no_answer: NoAnswer, mark: Mark) {
        let OpenExchange {
            mut request,
            mut response,
            stream,
            unread_stream,
            end,
        } = *ex;
        let (mut resume, summary) = match stream {
            Some(mut s) => {
                s.facts.finish();
                let StreamState { facts, .. } = *s;
                (facts.resume.map(|r| *r), facts.summary)
            }
            None => (None, None),
        };
        // An event stream whose body never began: its facts are those of a stream that carried
        // nothing, and its resume facts those of one that delivered nothing, as no facts do.
        let empty_stream = unread_stream.is_some() && self.keep_summaries;
        let mut unread_from = unread_stream.flatten();
        let request_named = request.as_ref().is_some_and(|r| {
            r.session_id.is_some() || jsonrpc::session_from_url(r.target.as_bytes()).is_some()
        });
        let opens_session = request.is_some()
            && !request_named
            && (response.as_ref().is_some_and(|r| r.session_id.is_some())
                || summary
                    .as_ref()
                    .is_some_and(|s| s.endpoint_session.is_some()));
        // The heads end here: what the records need is taken out of them rather than copied,
        // and copied only where both the resume and the summary keep it.
        let mut session_id = request
            .as_mut()
            .and_then(|r| r.session_id.take())
            .or_else(|| response.as_mut().and_then(|r| r.session_id.take()))
            .or_else(|| {
                request
                    .as_ref()
                    .and_then(|r| jsonrpc::session_from_url(r.target.as_bytes()))
            })
            .or_else(|| {
                summary
                    .as_ref()
                    .and_then(|s| s.endpoint_session.as_deref().map(String::from))
            });
        self.note_session(&session_id);
        let mut summary = summary;
        if let Some(s) = summary.as_deref_mut() {
            self.facts_dropped += s.facts_dropped + s.id_facts.dropped + s.content.dropped;
            s.id_facts.shrink();
            s.content.shrink();
            s.progress.shrink_to_fit();
        }
        let event_stream = response.as_ref().is_some_and(ResponseHead::is_event_stream);
        let last_event_id = request.as_mut().and_then(|r| r.last_event_id.take());
        let relevant = session_id.is_some() || event_stream || last_event_id.is_some();
        let keep = self.keep_summaries && relevant;
        if keep && self.summaries.len() >= MAX_SUMMARIES_PER_CONNECTION {
            self.summaries_dropped += 1;
        }
        let keep = keep && self.summaries.len() < MAX_SUMMARIES_PER_CONNECTION;
        let resumed = request.is_some() && last_event_id.is_some();
        // The summary's copies of the request, made before the resume takes the originals;
        // when no resume is made the summary takes the originals instead. A string taken is
        // made as tight as a copy would be: the session stage's budget counts its room.
        let head = match &mut request {
            Some(r) if keep && resumed => Some((
                r.method.clone(),
                if r.target.len() <= MAX_TEXT {
                    r.target.clone()
                } else {
                    HeadText::Owned(cut_text(r.target.as_bytes()))
                },
                r.protocol_version.clone(),
                r.first,
            )),
            Some(r) if keep => Some((
                tight_head(std::mem::take(&mut r.method)),
                if r.target.len() <= MAX_TEXT {
                    tight_head(std::mem::take(&mut r.target))
                } else {
                    HeadText::Owned(cut_text(r.target.as_bytes()))
                },
                r.protocol_version.take().map(tight_head),
                r.first,
            )),
            _ => None,
        };
        let kept_session_id = match (keep, resumed) {
            (true, true) => session_id.clone(),
            (true, false) => session_id.take().map(tight),
            (false, _) => None,
        };
        // The resume facts hold their own copy of `Last-Event-ID`, no longer needed.
        let kept_last_event_id = if keep {
            match resume.as_mut() {
                Some(r) if last_event_id.is_some() => Some(std::mem::take(&mut r.last_event_id)),
                _ if last_event_id.is_some() && unread_from.is_some() => unread_from.take(),
                _ => last_event_id.clone(),
            }
        } else {
            None
        };
        if let Some(request) = request
            && let Some(last_event_id) = last_event_id
        {
            self.decide(
                exchange,
                request,
                response.as_ref(),
                resume,
                summary.as_deref(),
                end,
                last_event_id,
                session_id,
                no_answer,
                mark,
            );
            // Taken only now: deciding reads it from the answer's head.
            if let Some(r) = self.resumes.last_mut() {
                r.content_type = response
                    .as_mut()
                    .and_then(|h| h.content_type.take())
                    .map(tight_head);
            }
        }
        if !keep {
            return;
        }
        let (method, target, protocol_version, request) = match head {
            Some((m, t, p, first)) => (Some(m), Some(t), p, Some(first)),
            None => (None, None, None, None),
        };
        let held = match summary {
            None if empty_stream => HeldStream {
                empty: true,
                ..HeldStream::default()
            },
            summary => held_stream(summary),
        };
        self.summaries.push(Box::new(ExchangeSummary {
            connection: ConnectionRef::default(),
            exchange,
            session_id: kept_session_id,
            method,
            target,
            last_event_id: kept_last_event_id,
            protocol_version,
            request,
            status: response.as_ref().map(|r| r.status),
            response: response.as_ref().map(|r| r.first),
            event_stream,
            end,
            stream_facts: held.facts,
            stream_empty: held.empty,
            stream_room: held.room,
            stream_distinctive: held.distinctive,
            opens_session,
        }));
    }

    #[allow(clippy::too_many_arguments)]
    fn decide(
        &mut self,
        exchange: u32,
        request: RequestHead,
        response: Option<&ResponseHead>,
        mut resume: Option<ResumeFacts>,
        summary: Option<&StreamSummary>,
        end: Option<(BodyEnd, Mark)>,
        last_event_id: String,
        session_id: Option<String>,
        no_answer: NoAnswer,
        mark: Mark,
    ) {
        let stream_end = end.map(|(how, _)| how);
        let facts = match response {
            None => ResponseFacts::Missing(no_answer),
            Some(resp) => ResponseFacts::Answered {
                status: resp.status,
                event_stream: resp.is_event_stream(),
                first_id: resume
                    .as_ref()
                    .and_then(|s| s.first_id.as_ref().map(|f| f.0.as_str())),
                gap_before_first_id: resume.as_ref().is_some_and(|s| s.gap_before_first_id),
                outcome: stream_end.map(outcome_of),
            },
        };
        let mut decision = verdict::decide(&last_event_id, facts);
        let evicted =
            self.evicted || end.is_some_and(|(how, _)| how == BodyEnd::Stream(StreamEnd::Evicted));
        if evicted && decision.verdict == Verdict::CaptureIncomplete {
            decision.blame_limit(LimitHit::Connections);
        }
        if response.is_none()
            && self
                .lost
                .as_ref()
                .and_then(|l| l.head_too_large)
                .is_some_and(|m| m.frame >= request.complete.frame)
        {
            // The answer may be the head that was dropped: no verdict against the server.
            decision.blame_limit(LimitHit::HeadBytes);
        }
        if decision.verdict == Verdict::Rejected && response.is_some_and(|r| r.status == 405) {
            decision.reason = "the server answered 405 Method Not Allowed: it offers no \
                               resumable GET stream (as on protocol 2026-07-28, which dropped \
                               resumption)";
        }
        let (mut first_id, first_truncated, mut first_mark) =
            match resume.as_mut().and_then(|s| s.first_id.take()) {
                Some((id, truncated, m)) => (Some(id), truncated, Some(m)),
                None => (None, false, None),
            };
        // After missing bytes, the first id the capture holds need not be the stream's first:
        // it is kept apart so that nobody reads it as the server's resume point.
        let mut first_id_after_gap = None;
        if decision.verdict == Verdict::CaptureIncomplete {
            first_id_after_gap = first_id.take();
            first_mark = None;
        }
        if first_truncated && decision.verdict != Verdict::CaptureIncomplete {
            // A cut id cannot be compared honestly.
            decision.blame_limit(LimitHit::SseField);
        }
        let ids_opaque = decision.verdict == Verdict::Unverifiable
            && first_id.is_some()
            && !first_truncated
            && response.is_some_and(|r| (200..300).contains(&r.status) && r.is_event_stream());
        let last_proof = first_mark
            .or(end.map(|(_, m)| m))
            .or(response.map(|r| r.complete))
            .unwrap_or(
                if response.is_none()
                    && (no_answer != NoAnswer::NotCaptured
                        || self
                            .resynced()
                            .is_some_and(|m| m.frame >= request.complete.frame))
                {
                    mark
                } else {
                    request.complete
                },
            );
        self.resumes.push(Box::new(ResumeRecord {
            session_id,
            decision,
            last_event_id,
            first_event_id: first_id,
            first_id_after_gap,
            first_event_id_truncated: first_truncated,
            method: request.method,
            target: request.target,
            protocol_version: request.protocol_version,
            request: request.first,
            status: response.map(|r| r.status),
            content_type: None,
            response: response.map(|r| r.first),
            first_event: first_mark,
            events_before_first_id: resume.as_ref().map_or(0, |s| s.events_before_first_id),
            stream_events: resume.as_ref().map_or(0, |s| s.events),
            resent_ids: resume.as_ref().map_or(0, |s| s.resent_ids),
            stream_end,
            last_proof,
            connection: ConnectionRef::default(),
            exchange,
            h2_stream: request.h2_stream.or(response.and_then(|r| r.h2_stream)),
            priming_ack: resume.as_ref().and_then(|s| s.priming_ack),
            resume_ack: summary.and_then(|s| s.resume_ack.clone()),
            retry: summary.map(|s| s.retry.clone()).unwrap_or_default(),
            ids_opaque,
            forensic: Forensics::default(),
        }));
    }

    /// Ends the event stream of an exchange; ids or event types cut at the field limit are
    /// reported once per stream.
    fn finish_stream(&mut self, ex: &mut OpenExchange, mark: Mark) {
        if let Some(stream) = ex.stream.as_mut() {
            stream.parser.finish(mark);
            if stream.parser.fields_cut() > 0 {
                self.anomaly(Anomaly::SseFieldTooLong, mark);
            }
        }
    }

    fn note_session(&mut self, id: &Option<String>) {
        if let Some(id) = id {
            self.session_ids.insert(fact_hash(&[id.as_bytes()]));
        }
    }
}

fn outcome_of(end: BodyEnd) -> StreamOutcome {
    match end {
        BodyEnd::Complete => StreamOutcome::EndedOnWire,
        BodyEnd::Stream(StreamEnd::PeerRst) => StreamOutcome::ClientAborted,
        BodyEnd::Stream(how) if how.seen_on_wire() => StreamOutcome::EndedOnWire,
        BodyEnd::Stream(_) => StreamOutcome::NotSeenToEnd,
        BodyEnd::LostSync => StreamOutcome::LostSync,
        BodyEnd::Malformed => StreamOutcome::Undecodable,
        // A server's RST_STREAM ends the stream on the wire, as a server's TCP RST does; the
        // client's says the client gave up while the server may have had more.
        BodyEnd::Reset {
            by_client: false, ..
        } => StreamOutcome::EndedOnWire,
        BodyEnd::Reset {
            by_client: true, ..
        } => StreamOutcome::ClientAborted,
        // The server said it would not go on with this stream: its end was seen on the wire.
        BodyEnd::GoneAway { .. } => StreamOutcome::EndedOnWire,
    }
}

/// The previous id's shape tally, its counter's value (when it fits 64 bits), and the
/// namespace key every id of that shape has.
#[derive(Clone, Copy, Debug)]
struct ShapeCursor {
    tally: usize,
    value: Option<u64>,
    key: (u64, usize),
}

/// The highest integer id of a stream. While ids fit 64 bits only the value and where it came
/// are updated (ids usually grow, so this happens at every event); its text is written when
/// the stream ends.
#[derive(Debug, Default)]
struct MaxInt {
    value: Option<u64>,
    /// The highest id as text, once one did not fit 64 bits (compared as decimals). Boxed:
    /// such ids are rare, and inline the slot made every stream's state 40 bytes larger.
    big: Option<Box<IdSeen>>,
    mark: Mark,
    id_index: u64,
    seen: bool,
}

impl MaxInt {
    /// `value` is the id's value when it fits 64 bits, computed once per event by the caller;
    /// the id is a whole decimal integer. Its text is read only past 64 bits.
    fn see(&mut self, value: Option<u64>, id: &[u8], mark: Mark, id_index: u64) {
        match (value, &self.big) {
            (Some(v), None) => {
                if !self.seen || self.value.is_none_or(|cur| v > cur) {
                    self.value = Some(v);
                    self.mark = mark;
                    self.id_index = id_index;
                    self.seen = true;
                }
            }
            (Some(_), Some(_)) => {}
            (None, _) => {
                let Ok(text) = std::str::from_utf8(id) else {
                    return;
                };
                let higher = match &self.big {
                    Some(b) => above(text, &b.text, None),
                    None => true,
                };
                if higher {
                    match self.big.as_deref_mut() {
                        Some(b) => update_seen(b, id, Some(text), mark, id_index),
                        None => self.big = Some(Box::new(new_seen(id, mark, id_index))),
                    }
                }
            }
        }
    }

    fn take(&mut self) -> Option<IdSeen> {
        if let Some(b) = self.big.take() {
            return Some(*b);
        }
        let v = self.value.filter(|_| self.seen)?;
        Some(IdSeen {
            text: v.to_string(),
            mark: self.mark,
            id_index: self.id_index,
        })
    }
}

/// `id <= last` for decimal ids, without comparing strings when `last` fits 64 bits.
/// `value` is `id`'s value when it fits 64 bits.
fn at_or_below(id: &[u8], value: Option<u64>, last: &str, last_value: Option<u64>) -> bool {
    match (last_value, value) {
        (Some(l), Some(i)) => i <= l,
        _ => match (
            DecimalId::parse(std::str::from_utf8(id).unwrap_or("")),
            DecimalId::parse(last),
        ) {
            (Some(i), Some(l)) => i.cmp_value(&l).is_le(),
            _ => false,
        },
    }
}

/// `id > max` for decimal ids, `max_value` being `max`'s value when it fits 64 bits.
fn above(id: &str, max: &str, max_value: Option<u64>) -> bool {
    match (small_value(id), max_value) {
        (Some(i), Some(m)) => i > m,
        _ => match (DecimalId::parse(id), DecimalId::parse(max)) {
            (Some(i), Some(m)) => i.cmp_value(&m).is_gt(),
            (Some(_), None) => true,
            _ => false,
        },
    }
}

fn small_value(digits: &str) -> Option<u64> {
    digits_value(digits.as_bytes())
}

/// The value of a run of ASCII digits with at most 19 significant ones (so that it fits 64
/// bits), without going through `str::parse`: it is asked for every integer id.
fn digits_value(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let Some(start) = digits.iter().position(|&b| b != b'0') else {
        return Some(0);
    };
    let d = digits.get(start..)?;
    if d.len() > 19 {
        return None;
    }
    // 19 digits stay below 10^19 < 2^64: the wrapping operations never wrap.
    Some(d.iter().fold(0u64, |v, &b| {
        v.wrapping_mul(10).wrapping_add(u64::from(b - b'0'))
    }))
}

/// What the shape tallies of a stream remember between two ids.
#[derive(Debug, Default)]
struct ShapeState {
    /// The previous id of the stream; emptied at a gap.
    prev_id: Option<String>,
    /// Where the previous id stood in its shape, tried first for the next id.
    cursor: Option<ShapeCursor>,
}

impl ShapeState {
    /// Counts the pair (previous id, `next`) in the shape tallies. A stream's ids keep one
    /// shape, so the previous id's tally is tried first: when `next` is its prefix, digits
    /// and suffix, nothing is split and the counters compare as integers. Returns the
    /// namespace key of `next` when it has a known shape.
    fn step(&mut self, s: &mut StreamSummary, next: &str) -> Option<(u64, usize)> {
        let out = match self.cursor {
            Some(c) => match s.shapes.get_mut(c.tally) {
                Some(t) => match counter_in(next, t) {
                    Some(mid) => {
                        let value = small_value(mid);
                        let step = match (c.value, value) {
                            (Some(a), Some(b)) if a == b => None,
                            (Some(a), Some(b)) if a.checked_add(1) == Some(b) => {
                                Some(Ordering::Equal)
                            }
                            (Some(a), Some(b)) => Some(a.cmp(&b)),
                            _ => self
                                .prev_id
                                .as_deref()
                                .and_then(|p| counter_in(p, t))
                                .filter(|p| *p != mid)
                                .and_then(|p| {
                                    if idshape::is_successor(p, mid) {
                                        Some(Ordering::Equal)
                                    } else {
                                        idshape::cmp_decimal(p, mid)
                                    }
                                }),
                        };
                        // Equal: up by one; Less: up by more; Greater: down.
                        match step {
                            Some(Ordering::Equal) => t.support = t.support.saturating_add(1),
                            Some(Ordering::Less) => t.skips = t.skips.saturating_add(1),
                            Some(Ordering::Greater) => t.breaks = t.breaks.saturating_add(1),
                            None => {}
                        }
                        self.cursor = Some(ShapeCursor { value, ..c });
                        Some(c.key)
                    }
                    None => self.slow(s, next),
                },
                None => self.slow(s, next),
            },
            None => self.slow(s, next),
        };
        let buf = self.prev_id.get_or_insert_with(String::new);
        buf.clear();
        buf.push_str(next);
        out
    }

    fn slow(&mut self, s: &mut StreamSummary, next: &str) -> Option<(u64, usize)> {
        self.cursor = None;
        let prev = self.prev_id.as_deref()?;
        let obs = idshape::observe_pair(prev, next)?;
        let tally = tally_shape(s, &obs)?;
        let t = s.shapes.get(tally)?;
        let mid = counter_in(next, t)?;
        let mut joined = Vec::with_capacity(t.prefix.len() + t.suffix.len());
        joined.extend_from_slice(t.prefix.as_bytes());
        joined.extend_from_slice(t.suffix.as_bytes());
        let key = idshape::namespace_key_hash(&joined);
        self.cursor = Some(ShapeCursor {
            tally,
            value: small_value(mid),
            key,
        });
        Some(key)
    }
}

impl StreamFacts {
    fn on_event(&mut self, ev: &SseEvent<'_>) {
        let priming = ev.id.is_some() && ev.data_len == 0;
        // One look at the id answers what several checks below ask.
        let integer_id = ev
            .id
            .is_some_and(|id| !id.is_empty() && id.iter().all(u8::is_ascii_digit));
        // Its value, when it fits 64 bits: several checks compare it.
        let int_value = match ev.id {
            Some(id) if integer_id => digits_value(id),
            _ => None,
        };
        let skipped_ack = self.resume_event(ev, priming, integer_id, int_value);
        // The summary is taken out while its facts are written, so that the other parts of
        // the state can be borrowed beside it.
        let Some(mut s) = self.summary.take() else {
            return;
        };
        let event = s.events;
        s.events += 1;
        note_retry_and_type(&mut s, ev);
        let id = ev.id.map(|id| IdEvent {
            id,
            priming,
            integer_id,
            int_value,
            skipped_ack,
        });
        let event_id_hash = id.map(|id| self.id_event(&mut s, ev, &id, event));
        if ev.data_len > 0 {
            self.data_event(&mut s, ev, integer_id, event, event_id_hash);
        }
        self.summary = Some(s);
    }

    /// What the event tells about the resume: events before the first id, the priming
    /// acknowledgment, the first id, ids at or below `Last-Event-ID`. Returns true when the
    /// event was the skipped acknowledgment.
    fn resume_event(
        &mut self,
        ev: &SseEvent<'_>,
        priming: bool,
        integer_id: bool,
        int_value: Option<u64>,
    ) -> bool {
        let Some(r) = self.resume.as_mut() else {
            return false;
        };
        r.events += 1;
        let Some(id) = ev.id else {
            if r.first_id.is_none() {
                r.events_before_first_id += 1;
            }
            return false;
        };
        if r.first_id.is_none()
            && r.priming_ack.is_none()
            && priming
            && id == r.last_event_id.as_bytes()
        {
            r.priming_ack = Some(ev.mark);
            return true;
        }
        if integer_id
            && r.last_is_integer
            && at_or_below(id, int_value, &r.last_event_id, r.last_value)
        {
            r.resent_ids += 1;
        }
        if r.first_id.is_none() {
            let text = match std::str::from_utf8(id) {
                Ok(s) => s.to_owned(),
                Err(_) => String::from_utf8_lossy(id).into_owned(),
            };
            r.first_id = Some((text, ev.id_truncated || id.len() > self.max_id, ev.mark));
        }
        false
    }

    /// The facts of an event's id: counters, shape tallies, namespace keys, duplicates, first,
    /// last and highest ids, and the id fact itself. Returns the id's hash.
    fn id_event(
        &mut self,
        s: &mut StreamSummary,
        ev: &SseEvent<'_>,
        e: &IdEvent<'_>,
        event: u64,
    ) -> u64 {
        let IdEvent {
            id,
            priming,
            integer_id,
            int_value,
            skipped_ack,
        } = *e;
        let hash = fact_hash(&[id]);
        let id_index = s.ids;
        s.ids += 1;
        if priming {
            s.priming += 1;
        }
        // The id's text, when it is UTF-8 and whole. An integer's digits are both, unless
        // cut: its text is read below only where one is needed (an id past 64 bits, or with
        // leading zeros), not at every event.
        let text_of = || std::str::from_utf8(id).ok().filter(|_| !ev.id_truncated);
        let text = if integer_id { None } else { text_of() };
        let shaped = match text {
            // Integers (no text here) are compared as they are: they have no shape to learn.
            Some(t) => self.shape.step(s, t),
            _ => {
                self.shape = ShapeState::default();
                None
            }
        };
        // Ids of one shape share their namespace key: it is computed once per shape, and
        // an integer's key is empty.
        let (key, key_len) = match shaped {
            Some(k) => k,
            None if integer_id => *EMPTY_KEY,
            None => idshape::namespace_key_hash(id),
        };
        if self.last_key != Some(key) && !s.keys.contains(&key) {
            if s.keys.len() < MAX_KEYS {
                s.keys.push(key);
            } else {
                s.facts_dropped += 1;
            }
        }
        self.last_key = Some(key);
        // Duplicates inside one resumed stream (a priming event delivers nothing, and the
        // skipped acknowledgment is the client's own position).
        if let Some(r) = self.resume.as_mut()
            && !priming
            && !r.seen.push(hash, id, int_value, ev.mark)
        {
            s.facts_dropped += 1;
        }
        if s.first_id.is_none() {
            // A first id is made from its bytes: the text is not read.
            s.first_id = Some(new_seen(id, ev.mark, id_index));
        }
        if integer_id && !ev.id_truncated {
            self.max_int.see(int_value, id, ev.mark, id_index);
        }
        // The text of an integer written without leading zeros is its value: it is written
        // out once, when the stream ends, rather than copied at every event.
        match int_value {
            Some(v) if !ev.id_truncated && (id.len() == 1 || id.first() != Some(&b'0')) => {
                self.last_int = Some((v, ev.mark, id_index));
            }
            _ => {
                self.last_int = None;
                let text = if integer_id { text_of() } else { text };
                set_seen(&mut s.last_id, id, text, ev.mark, id_index);
            }
        }
        let resumed = self.resume.is_some();
        s.id_facts.push(IdFact {
            hash,
            mark: ev.mark,
            event,
            id_index,
            priming,
            integer: integer_id,
            start: ev.first_mark,
            key,
            key_len: u32::try_from(key_len).unwrap_or(u32::MAX),
            text: (resumed && !skipped_ack && s.id_facts.head_has_room())
                .then(|| cut_text(id).into_boxed_str()),
        });
        hash
    }

    /// An event with data: read for JSON-RPC facts now when it is among the first, else
    /// held back in case it is among the last.
    fn data_event(
        &mut self,
        s: &mut StreamSummary,
        ev: &SseEvent<'_>,
        integer_id: bool,
        event: u64,
        event_id: Option<u64>,
    ) {
        let data = EventData {
            data: ev.data,
            event_type: ev.event_type,
            data_len: ev.data_len,
            data_truncated: ev.data_truncated,
            id: ev.id,
            integer_id,
            mark: ev.mark,
            event,
            event_id,
        };
        if event < CLASSIFY_HEAD {
            read_data(s, &data);
        } else {
            // Later events are read when the stream ends, and only the last few: the facts
            // of the middle of a long stream would not be kept anyway.
            self.tail.keep(&data);
        }
    }

    /// Reads the events held back at the end of the stream, and finds its duplicate ids.
    fn finish(&mut self) {
        if let Some(s) = self.summary.as_deref_mut() {
            s.max_int_id = self.max_int.take();
            if let Some((value, mark, id_index)) = self.last_int.take() {
                s.last_id = Some(IdSeen {
                    text: value.to_string(),
                    mark,
                    id_index,
                });
            }
        }
        if let (Some(r), Some(s)) = (self.resume.as_mut(), self.summary.as_deref_mut()) {
            s.dup_ids = r.seen.duplicates();
        }
        if let Some(s) = self.summary.as_deref_mut() {
            s.facts_dropped += self.tail.skipped;
            let (newer, older) = self.tail.slots.split_at(self.tail.oldest);
            for t in older.iter().chain(newer) {
                let (event_type, rest) = t.buf.split_at(t.type_len.min(t.buf.len()));
                let id = rest.get(..t.id_len.unwrap_or(0)).unwrap_or(rest);
                read_data(
                    s,
                    &EventData {
                        data: t.data.get(..TAIL_DATA).unwrap_or(&t.data),
                        event_type,
                        data_len: t.data_len,
                        data_truncated: t.data_truncated,
                        id: t.id_len.map(|_| id),
                        integer_id: t.integer_id,
                        mark: t.mark,
                        event: t.event,
                        event_id: t.event_id,
                    },
                );
            }
        }
    }

    fn gap(&mut self) {
        self.shape.cursor = None;
        if let Some(r) = self.resume.as_mut()
            && r.first_id.is_none()
        {
            r.gap_before_first_id = true;
        }
        // Consecutive ids across a hole are not consecutive events.
        self.shape.prev_id = None;
        if let Some(s) = self.summary.as_deref_mut() {
            s.gaps += 1;
        }
    }
}

/// An event's id, with what the caller already knows of it.
#[derive(Clone, Copy)]
struct IdEvent<'a> {
    id: &'a [u8],
    /// The event has no data.
    priming: bool,
    integer_id: bool,
    int_value: Option<u64>,
    /// It was the priming acknowledgment skipped at the head of a resumed stream.
    skipped_ack: bool,
}

/// `retry:` values as they change, and what `endpoint` and `resume` events name.
fn note_retry_and_type(s: &mut StreamSummary, ev: &SseEvent<'_>) {
    if let Some(v) = ev.retry
        && s.retry.last().map(|r| r.0) != Some(v)
    {
        if s.retry.len() < MAX_RETRY {
            s.retry.push((v, ev.mark));
        } else {
            s.facts_dropped += 1;
        }
    }
    match ev.event_type {
        b"endpoint" if s.endpoint_session.is_none() => {
            s.endpoint_session = jsonrpc::session_from_url(ev.data).map(String::into_boxed_str);
        }
        b"resume" if s.resume_ack.is_none() => {
            s.resume_ack = jsonrpc::resume_point(ev.data).map(|p| (p, ev.mark));
        }
        _ => {}
    }
}

/// An event's data and where it stands, as the JSON-RPC reading needs it.
struct EventData<'a> {
    data: &'a [u8],
    event_type: &'a [u8],
    data_len: u64,
    data_truncated: bool,
    id: Option<&'a [u8]>,
    integer_id: bool,
    mark: Mark,
    event: u64,
    event_id: Option<u64>,
}

/// Events of a stream read as they come; later ones wait in [`TailEvents`].
pub const CLASSIFY_HEAD: u64 = 32;
/// Bytes of data kept for each held-back event.
const TAIL_DATA: usize = 4 << 10;

/// An event held back until its stream ends, in buffers reused from event to event.
#[derive(Debug, Default)]
struct TailEvent {
    /// The event type, then the id.
    buf: Vec<u8>,
    /// The data (its first [`TAIL_DATA`] bytes are read): the parser's buffer, taken in
    /// exchange for the one the slot held, so that the data is not copied.
    data: Vec<u8>,
    type_len: usize,
    id_len: Option<usize>,
    data_len: u64,
    data_truncated: bool,
    integer_id: bool,
    mark: Mark,
    event: u64,
    event_id: Option<u64>,
}

/// The last [`FACTS_TAIL`] events past the first [`CLASSIFY_HEAD`] of a stream, in a ring.
#[derive(Debug, Default)]
struct TailEvents {
    /// Filled in arrival order; once full, `oldest` is overwritten next.
    slots: Vec<TailEvent>,
    oldest: usize,
    /// Events that left the window unread.
    skipped: u64,
    /// The slot of the event just kept, whose data buffer comes next ([`EventSink::take_data`]).
    pending: Option<usize>,
}

/// Largest data buffer a tail slot takes from the parser rather than copy from: slots keep
/// [`TAIL_DATA`] bytes, so a larger buffer would only hold memory.
const TAIL_SWAP_CAPACITY: usize = 2 * TAIL_DATA;

impl TailEvents {
    /// Keeps an event's type, id and where it stands; its data follows in [`Self::data`].
    fn keep(&mut self, d: &EventData<'_>) {
        let at = if self.slots.len() < FACTS_TAIL {
            if self.slots.capacity() == 0 {
                self.slots.reserve_exact(FACTS_TAIL);
            }
            self.slots.push(TailEvent::default());
            self.slots.len() - 1
        } else {
            self.skipped += 1;
            let at = self.oldest;
            self.oldest = (at + 1) % FACTS_TAIL;
            at
        };
        let Some(t) = self.slots.get_mut(at) else {
            return;
        };
        t.buf.clear();
        t.buf.extend_from_slice(d.event_type);
        t.type_len = d.event_type.len();
        t.id_len = d.id.map(<[u8]>::len);
        t.buf.extend_from_slice(d.id.unwrap_or(&[]));
        // Until the data arrives the slot holds none, never an older event's.
        t.data.clear();
        t.data_len = d.data_len;
        t.data_truncated = d.data_truncated || d.data.len() > TAIL_DATA;
        t.integer_id = d.integer_id;
        t.mark = d.mark;
        t.event = d.event;
        t.event_id = d.event_id;
        self.pending = Some(at);
    }

    /// The data of the event just kept: the parser's buffer is swapped for the slot's when
    /// both are small, else the kept part is copied.
    fn data(&mut self, data: &mut Vec<u8>) {
        let Some(t) = self.pending.take().and_then(|at| self.slots.get_mut(at)) else {
            return;
        };
        if data.capacity() <= TAIL_SWAP_CAPACITY && t.data.capacity() <= TAIL_SWAP_CAPACITY {
            if t.data.capacity() < data.capacity() {
                // The parser goes on with a buffer as large as the one it gives: events of
                // one stream are alike, and a smaller one would be grown again.
                t.data = Vec::with_capacity(data.capacity());
            }
            std::mem::swap(&mut t.data, data);
        } else {
            t.data.clear();
            t.data
                .extend_from_slice(data.get(..TAIL_DATA).unwrap_or(data.as_slice()));
        }
    }
}

impl EventSink for StreamFacts {
    fn event(&mut self, ev: &SseEvent<'_>) {
        self.on_event(ev);
    }

    fn take_data(&mut self, data: &mut Vec<u8>) {
        self.tail.data(data);
    }
}

/// What one event's data says: responses and server requests, progress, `list_changed`.
fn read_data(s: &mut StreamSummary, ev: &EventData<'_>) {
    let (event, event_id_hash, integer_id) = (ev.event, ev.event_id, ev.integer_id);
    let fact = jsonrpc::classify(ev.data);
    // Content is compared by type, length, the first and last bytes of the data, and what
    // makes such an event unique (its JSON-RPC id, or its progress token and value).
    let content = |kind, unique: &[u8], rpc_id: Option<&[u8]>| {
        let data = ev.data;
        let head = data.get(..CONTENT_HEAD).unwrap_or(data);
        let tail = data
            .get(data.len().saturating_sub(CONTENT_TAIL).max(head.len())..)
            .unwrap_or(&[]);
        ContentFact {
            hash: fact_hash(&[
                ev.event_type,
                &ev.data_len.to_le_bytes(),
                head,
                tail,
                unique,
                &[u8::from(ev.data_truncated)],
            ]),
            kind,
            rpc_id: rpc_id.map(|id| fact_hash(&[id])),
            mark: ev.mark,
            event,
            event_id: event_id_hash,
        }
    };
    match fact {
        RpcFact::Response { id } => {
            s.content.push(content(ContentKind::Response, id, Some(id)));
        }
        RpcFact::Request { id } => {
            s.content.push(content(ContentKind::Request, id, Some(id)));
        }
        RpcFact::Progress { token, progress } => {
            // Progress must increase: one token and value is one notification, whatever
            // else its data holds. On integer ids the id already tells a re-delivery, so
            // the content is kept only for events whose ids say nothing.
            let key = fact_hash(&[token]);
            if !integer_id {
                s.content.push(ContentFact {
                    hash: fact_hash(&[
                        b"progress",
                        &key.to_le_bytes(),
                        &progress.to_bits().to_le_bytes(),
                    ]),
                    kind: ContentKind::Progress,
                    rpc_id: None,
                    mark: ev.mark,
                    event,
                    event_id: event_id_hash,
                });
            }
            track_progress(s, key, token, progress, ev.mark);
        }
        RpcFact::ListChanged { method } => {
            if s.list_changed.len() < MAX_LIST_CHANGED {
                s.list_changed.push(ListChangedFact {
                    method: cut_text(method),
                    mark: ev.mark,
                    event_id: ev.id.map(|id| (fact_hash(&[id]), cut_text(id))),
                });
            } else {
                s.facts_dropped += 1;
            }
        }
        RpcFact::Other => {}
    }
}

/// The counter of `id` when it is `t.prefix`, a run of digits, `t.suffix`.
fn counter_in<'a>(id: &'a str, t: &ShapeTally) -> Option<&'a str> {
    let (b, p, q) = (id.as_bytes(), t.prefix.as_bytes(), t.suffix.as_bytes());
    let end = b.len().checked_sub(q.len())?;
    if end <= p.len() || !same(&b[..p.len()], p) || !same(&b[end..], q) {
        return None;
    }
    let mid = &b[p.len()..end];
    if !mid.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // Both cuts are next to ASCII digits, so they fall on character boundaries.
    id.get(p.len()..end)
}

/// Equality of short byte strings, word by word: ids are compared for every event, and a
/// call into the C library's memcmp costs more than the comparison.
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut x = a.chunks_exact(8);
    let mut y = b.chunks_exact(8);
    for (u, v) in (&mut x).zip(&mut y) {
        if word(u) != word(v) {
            return false;
        }
    }
    let (u, v) = (x.remainder(), y.remainder());
    u.len() == v.len() && word(u) == word(v)
}

fn tally_shape(s: &mut StreamSummary, obs: &idshape::PairObs<'_>) -> Option<usize> {
    let at = s
        .shapes
        .iter()
        .position(|t| t.k == obs.k && t.prefix == obs.prefix && t.suffix == obs.suffix);
    let at = match at {
        Some(at) => at,
        None if s.shapes.len() < MAX_SHAPES => {
            s.shapes.push(ShapeTally {
                k: obs.k,
                prefix: obs.prefix.to_string(),
                suffix: obs.suffix.to_string(),
                support: 0,
                breaks: 0,
                skips: 0,
            });
            s.shapes.len() - 1
        }
        None => {
            s.facts_dropped += 1;
            return None;
        }
    };
    let t = s.shapes.get_mut(at)?;
    if obs.counts {
        t.support = t.support.saturating_add(1);
    } else if obs.skips {
        t.skips = t.skips.saturating_add(1);
    } else {
        t.breaks = t.breaks.saturating_add(1);
    }
    Some(at)
}

fn track_progress(s: &mut StreamSummary, key: u64, token: &[u8], value: f64, mark: Mark) {
    let now = ProgressAt { value, mark };
    if let Some(t) = s.progress.iter_mut().find(|t| t.token == key) {
        if value <= t.last.value && t.regressed.is_none() {
            t.regressed = Some((t.last, now));
        }
        t.last = now;
        if value > t.max.value {
            t.max = now;
        }
        return;
    }
    if s.progress.len() >= MAX_PROGRESS_TOKENS {
        s.facts_dropped += 1;
        return;
    }
    if s.progress.capacity() == 0 {
        // Nearly every stream follows one token: room for four (a first push's) was most of
        // the memory a short stream's facts held.
        s.progress.reserve_exact(1);
    }
    s.progress.push(ProgressTrack {
        token: key,
        token_text: cut_text(token),
        first: now,
        last: now,
        max: now,
        regressed: None,
    });
}

impl HttpSink for ExchangeTracker {
    fn request(&mut self, head: RequestHead) {
        self.exchanges += 1;
        self.note_session(&head.session_id);
        let n = head.exchange;
        if self.keep_summaries
            && self.list_opened
            && let Some(sid) = head
                .session_id
                .as_deref()
                .map(SessionName::new)
                .or_else(|| {
                    jsonrpc::session_from_url(head.target.as_bytes()).map(|s| SessionName::new(&s))
                })
        {
            if self.opened.capacity() == 0 {
                // Emptied after every packet: one slot is nearly always enough, where a first
                // push makes four in every open connection.
                self.opened.reserve_exact(1);
            }
            self.opened.push((n, sid));
        }
        self.entry(n).request = Some(head);
    }

    fn request_named(&self, exchange: u32, session_id: &[u8]) -> bool {
        self.get_ref(exchange)
            .and_then(|ex| ex.request.as_ref()?.session_id.as_deref())
            .is_some_and(|named| named.as_bytes() == session_id)
    }

    fn response(&mut self, head: ResponseHead) {
        self.note_session(&head.session_id);
        let n = head.exchange;
        let keep = self.keep_summaries;
        let resynced = self.resynced();
        let ex = self.entry(n);
        let uncaptured = ex.request.is_none();
        // An answer paired with a request made before bytes the HTTP stage skipped may answer
        // a request lost in them instead: requests no session can be named for.
        let paired_across_loss = ex
            .request
            .as_ref()
            .zip(resynced)
            .is_some_and(|(r, skipped)| skipped.frame >= r.complete.frame);
        if uncaptured {
            // The request was not captured: without it there is nothing to pair.
            self.exchanges += 1;
        }
        self.unattributed_loss |= paired_across_loss;
        let ex = self.entry(n);
        let resumed_from = ex.request.as_ref().and_then(|r| r.last_event_id.clone());
        // Event streams are read for session facts; a resume is read even when those are off.
        if head.is_event_stream() && (keep || resumed_from.is_some()) {
            ex.stream = None;
            ex.unread_stream = Some(resumed_from);
        }
        ex.response = Some(head);
    }

    fn body(&mut self, exchange: u32, bytes: &[u8], mark: Mark) {
        // The stream's state is looked for first as it was made: only the body's first bytes
        // go on to make it.
        if let Some(StreamState { parser, facts }) =
            self.get(exchange).and_then(|ex| ex.stream.as_deref_mut())
        {
            parser.feed_sink(bytes, mark, facts);
            return;
        }
        let Some(StreamState { parser, facts }) = self.stream(exchange) else {
            return;
        };
        parser.feed_sink(bytes, mark, facts);
    }

    fn body_gap(&mut self, exchange: u32, _len: u64, mark: Mark) {
        let Some(stream) = self.stream(exchange) else {
            return;
        };
        stream.facts.gap();
        stream.parser.gap(mark);
    }

    fn body_end(&mut self, exchange: u32, how: BodyEnd, mark: Mark) {
        let Some(mut ex) = self.remove(exchange) else {
            return;
        };
        self.finish_stream(&mut ex, mark);
        ex.end = Some((how, mark));
        self.complete(exchange, ex, NoAnswer::NotCaptured, mark);
    }

    fn anomaly(&mut self, what: Anomaly, mark: Mark) {
        if what == Anomaly::HeaderTooLarge {
            self.lost
                .get_or_insert_with(Default::default)
                .head_too_large = Some(mark);
        }
        if matches!(what, Anomaly::Resynchronized | Anomaly::UnpairedResponse) {
            self.lost.get_or_insert_with(Default::default).resynced = Some(mark);
        }
        if what == Anomaly::UnpairedResponse {
            self.unattributed_loss = true;
        }
        if self.anomalies.len() < MAX_ANOMALIES_KEPT {
            self.anomalies.push((what, mark));
        }
    }
}

/// True when `id` is a decimal integer by the verdict's rules (used by the report to say
/// whether ids were comparable).
pub fn is_integer_id(id: &str) -> bool {
    DecimalId::parse(id).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_name_is_held_in_place_up_to_its_bound_and_is_the_text_it_was_given() {
        let short = "0".repeat(SessionName::SHORT);
        let long = "0".repeat(SessionName::SHORT + 1);
        // A name of multi-byte characters whose bytes pass the bound, though not its count.
        let wide = "é".repeat(SessionName::SHORT / 2 + 1);
        for (name, in_place) in [
            ("", true),
            ("4f3c2a9e-8b1d-4c6e-9f0a-7d5b3e2c1a08", true),
            (short.as_str(), true),
            (long.as_str(), false),
            (wide.as_str(), false),
        ] {
            let n = SessionName::new(name);
            assert_eq!(&*n, name);
            assert_eq!(matches!(n, SessionName::Short(_)), in_place, "{name}");
        }
    }

    #[test]
    fn a_tracker_without_opened_lists_no_session_its_requests_name() {
        for (tracker, listed) in [
            (ExchangeTracker::new(&Limits::default()), 1),
            (ExchangeTracker::new(&Limits::default()).without_opened(), 0),
        ] {
            let mut t = tracker;
            t.request(RequestHead {
                exchange: 0,
                method: "GET".into(),
                target: "/mcp".into(),
                session_id: Some("s-1".into()),
                ..RequestHead::default()
            });
            assert_eq!(t.opened.len(), listed);
            assert!(t.request_named(0, b"s-1"));
        }
    }

    #[test]
    fn request_named_is_the_open_requests_session_id_byte_for_byte() {
        let mut t = ExchangeTracker::new(&Limits::default());
        for (exchange, sid) in [(0, Some("s-1")), (1, None)] {
            t.request(RequestHead {
                exchange,
                method: "GET".into(),
                target: "/mcp".into(),
                session_id: sid.map(String::from),
                ..RequestHead::default()
            });
        }
        assert!(t.request_named(0, b"s-1"));
        assert!(!t.request_named(0, b"s-2"));
        assert!(!t.request_named(0, b"S-1"));
        assert!(!t.request_named(1, b"s-1"));
        assert!(!t.request_named(2, b"s-1"));
    }

    /// The highest integer id: by value while ids fit 64 bits, then as decimal text (boxed,
    /// made once and updated in place) once one does not.
    #[test]
    fn the_highest_id_is_kept_past_64_bits() {
        let mut max = MaxInt::default();
        let mut see = |text: &str, frame: u64| {
            max.see(
                small_value(text),
                text.as_bytes(),
                Mark::new(frame, 0),
                frame,
            )
        };
        see("5", 1);
        see("3", 2);
        see("18446744073709551616", 3);
        see("7", 4);
        see("18446744073709551618", 5);
        see("18446744073709551617", 6);
        let top = max.take().expect("a highest id");
        assert_eq!(
            (top.text.as_str(), top.mark.frame, top.id_index),
            ("18446744073709551618", 5, 5)
        );
        let mut small = MaxInt::default();
        for (i, t) in ["9", "12", "11"].into_iter().enumerate() {
            small.see(
                small_value(t),
                t.as_bytes(),
                Mark::new(i as u64, 0),
                i as u64,
            );
        }
        assert_eq!(small.take().map(|s| s.text), Some("12".to_string()));
    }

    #[test]
    fn head_and_tail_keep_the_first_and_last_items_in_order() {
        for n in 0..(FACTS_HEAD + 3 * FACTS_TAIL) as u32 {
            let mut ht = HeadTail::default();
            for i in 0..n {
                ht.push(i);
            }
            let all: Vec<u32> = (0..n).collect();
            let head = &all[..all.len().min(FACTS_HEAD)];
            let rest = &all[head.len()..];
            let tail = &rest[rest.len().saturating_sub(FACTS_TAIL)..];
            let want: Vec<u32> = head.iter().chain(tail).copied().collect();
            assert_eq!(ht.iter().copied().collect::<Vec<_>>(), want, "{n} pushed");
            assert_eq!(ht.iter().rev().count(), want.len());
            assert_eq!(ht.dropped as usize, n as usize - want.len());
            // Kept alike, equal, whatever the ring's turn.
            let mut same = HeadTail::default();
            for i in head.iter().chain(tail) {
                same.push(*i);
            }
            same.dropped = ht.dropped;
            assert_eq!(ht, same, "{n} pushed");
        }
    }

    /// An event stream's state is boxed, one per open stream, and so is its summary, until the
    /// session stage is done with it; thousands of each are live at once in a session-heavy
    /// capture. At most 512 bytes each takes the allocator's 512-byte size class, where 513
    /// would take the 640-byte one.
    #[test]
    fn a_streams_state_and_summary_fit_their_size_class() {
        let size = std::mem::size_of::<StreamState>();
        assert!(size <= 512, "state: {size} bytes");
        let size = std::mem::size_of::<StreamSummary>();
        assert!(size <= 512, "summary: {size} bytes");
    }

    proptest::proptest! {
        #[test]
        fn a_session_set_holds_what_a_btree_set_would(
            // Few distinct values, so most inserts repeat one, and runs long enough to merge
            // many times, into lists small and large.
            hashes in proptest::collection::vec(0u64..6_000, 0..20_000),
            peek_every in 1usize..5_000,
        ) {
            let mut set = SessionSet::default();
            let mut model = std::collections::BTreeSet::new();
            for (i, h) in hashes.iter().enumerate() {
                set.insert(*h);
                model.insert(*h);
                if i % peek_every == 0 {
                    proptest::prop_assert_eq!(set.len(), model.len());
                }
            }
            proptest::prop_assert_eq!(set.len(), model.len());
            proptest::prop_assert_eq!(set.is_empty(), model.is_empty());
            let listed: Vec<u64> = set.iter().collect();
            let want: Vec<u64> = model.iter().copied().collect();
            proptest::prop_assert_eq!(&listed, &want);
            set.settle();
            proptest::prop_assert!(set.recent.is_empty());
            proptest::prop_assert_eq!(set.sorted, want);
        }
    }

    #[test]
    fn a_session_set_merges_its_recent_hashes_and_stays_small() {
        let mut set = SessionSet::default();
        // Descending, so every merge puts the new hashes before all the known ones.
        for h in (0..100_000u64).rev() {
            set.insert(h * 7);
            set.insert(h * 7);
        }
        assert!(set.recent.len() < MIN_RECENT_SESSIONS.max(100_000 / 8) + 1);
        assert_eq!(set.len(), 100_000);
        assert!(set.iter().eq((0..100_000u64).map(|h| h * 7)));
        // Grown by what each merge added, never doubled.
        assert!(set.sorted.capacity() < 100_000 + 100_000 / 8 + MIN_RECENT_SESSIONS);
    }

    #[test]
    fn only_a_summary_with_nothing_in_it_is_held_as_empty() {
        assert_eq!(held_stream(None), HeldStream::default());
        let empty = HeldStream {
            empty: true,
            ..HeldStream::default()
        };
        assert_eq!(held_stream(Some(Box::default())), empty);
        let changed: [fn(&mut StreamSummary); 6] = [
            |s| s.events = 1,
            |s| s.gaps = 1,
            |s| s.facts_dropped = 1,
            |s| s.endpoint_session = Some(Box::default()),
            // Room the session stage's budget counts, though the list holds nothing.
            |s| s.keys.reserve(1),
            |s| s.progress.reserve(1),
        ];
        for change in changed {
            let mut s = StreamSummary::default();
            change(&mut s);
            // A clone would not keep the room reserved.
            let want = s.clone();
            let held = held_stream(Some(Box::new(s)));
            assert!(!held.empty, "{want:?}");
            assert!(!held.distinctive, "{want:?}");
            assert_eq!(held.facts.as_deref(), Some(&want));
            assert_eq!(held.room as usize, want.facts_room(), "{want:?}");
        }
    }

    /// The flag that lets the session stage's index skip a stream's ids: set exactly when
    /// one of the ids kept is distinctive, whichever place it holds among them.
    #[test]
    fn a_held_stream_is_distinctive_when_an_id_it_keeps_is() {
        let fact = |key_len: usize, priming: bool| IdFact {
            hash: 1,
            mark: Mark::default(),
            event: 0,
            id_index: 0,
            priming,
            integer: false,
            start: Mark::default(),
            key: 2,
            key_len: key_len as u32,
            text: None,
        };
        let long = crate::audit::idshape::MIN_DISTINCTIVE_KEY;
        let held = |facts: &[IdFact]| {
            let mut s = StreamSummary::default();
            for f in facts {
                s.id_facts.push(f.clone());
            }
            held_stream(Some(Box::new(s))).distinctive
        };
        assert!(!held(&[]));
        assert!(!held(&[fact(long - 1, false), fact(0, false)]));
        // A priming event delivers nothing: its id proves nothing.
        assert!(!held(&[fact(long, true)]));
        let n = FACTS_HEAD + FACTS_TAIL + 5;
        for at in 0..n {
            let mut facts = vec![fact(0, false); n];
            facts[at] = fact(long, false);
            // The ones between the head and the tail are dropped, and with them the flag.
            let kept = at < FACTS_HEAD || at >= n - FACTS_TAIL;
            assert_eq!(held(&facts), kept, "distinctive id at {at} of {n}");
        }
    }

    #[test]
    fn cut_text_keeps_the_first_characters_of_any_bytes() {
        let by_chars =
            |b: &[u8]| -> String { String::from_utf8_lossy(b).chars().take(MAX_TEXT).collect() };
        let long_ascii = vec![b'a'; MAX_TEXT + 10];
        let long_utf8 = "é".repeat(MAX_TEXT + 3).into_bytes();
        let mut mixed = vec![b'x'; MAX_TEXT - 1];
        mixed.extend_from_slice("€z".as_bytes());
        for b in [
            &b""[..],
            b"evt-42",
            &long_ascii,
            &long_utf8,
            &mixed,
            b"bad \xff\xfe bytes",
            &[0xff; MAX_TEXT + 1],
        ] {
            assert_eq!(cut_text(b), by_chars(b), "{b:?}");
        }
        assert_eq!(cut_text(&long_ascii).len(), MAX_TEXT);
    }

    #[test]
    fn a_summary_counts_the_room_of_its_stream_as_it_is_made() {
        let mut body = String::new();
        for i in 0..30 {
            body.push_str(&format!(
                "id: {i}\nretry: {}\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\
                 \"notifications/progress\",\"params\":{{\"progressToken\":\"t{}\",\
                 \"progress\":{i}}}}}\n\n",
                1000 + i % 3,
                i % 4
            ));
        }
        for last in [None, Some("3")] {
            let (_, xs) = exchange(body.as_bytes(), &[7, 100, 101, 900], last);
            let facts = xs[0].stream().unwrap();
            assert!(facts.id_facts.iter().count() > 8 && !facts.progress.is_empty());
            assert_eq!(xs[0].stream_room as usize, facts.facts_room());
        }
        // A stream that carried nothing is held without facts, and counts none.
        let (_, xs) = exchange(b"", &[], Some("3"));
        assert!(xs[0].stream_empty && xs[0].stream_room == 0);
    }

    /// One exchange through a tracker: the body cut at `cuts` (offsets, ascending), each piece
    /// in its own frame.
    fn exchange(
        body: &[u8],
        cuts: &[usize],
        last: Option<&str>,
    ) -> (Vec<ResumeRecord>, Vec<ExchangeSummary>) {
        let mut t = ExchangeTracker::new(&Limits::default());
        t.request(RequestHead {
            exchange: 0,
            method: "GET".into(),
            target: "/mcp".into(),
            session_id: Some("s-1".into()),
            last_event_id: last.map(str::to_string),
            first: Mark::new(1, 10),
            complete: Mark::new(1, 10),
            ..Default::default()
        });
        t.response(ResponseHead {
            exchange: 0,
            status: 200,
            content_type: Some("text/event-stream".into()),
            first: Mark::new(2, 20),
            complete: Mark::new(2, 20),
            ..Default::default()
        });
        let mut from = 0;
        let mut frame = 3;
        for &c in cuts.iter().chain(std::iter::once(&body.len())) {
            let c = c.min(body.len());
            if c > from {
                t.body(0, &body[from..c], Mark::new(frame, frame as i64 * 10));
                frame += 1;
                from = c;
            }
        }
        t.body_end(0, BodyEnd::Complete, Mark::new(frame, frame as i64 * 10));
        let summaries = t.summaries.into_iter().map(|x| *x).collect();
        (t.resumes.into_iter().map(|r| *r).collect(), summaries)
    }

    /// The facts of an exchange with every mark blanked: marks name the frame of the piece
    /// that completed an event, which depends on the split; everything else must not.
    fn facts(body: &[u8], cuts: &[usize], last: Option<&str>) -> String {
        let (r, x) = exchange(body, cuts, last);
        let strip = |_: Mark| Mark::default();
        let mut x = x;
        for e in &mut x {
            if let Some(s) = e.stream_mut() {
                let clean = |f: &mut IdSeen| f.mark = strip(f.mark);
                s.first_id.as_mut().map(clean);
                s.last_id.as_mut().map(clean);
                s.max_int_id.as_mut().map(clean);
                let ids: Vec<IdFact> = s
                    .id_facts
                    .iter()
                    .map(|f| IdFact {
                        mark: Mark::default(),
                        start: Mark::default(),
                        ..f.clone()
                    })
                    .collect();
                s.id_facts = HeadTail::default();
                for f in ids {
                    s.id_facts.push(f);
                }
                let content: Vec<ContentFact> = s
                    .content
                    .iter()
                    .map(|f| ContentFact {
                        mark: Mark::default(),
                        ..f.clone()
                    })
                    .collect();
                s.content = HeadTail::default();
                for f in content {
                    s.content.push(f);
                }
                for p in &mut s.progress {
                    for a in [&mut p.first, &mut p.last, &mut p.max] {
                        a.mark = Mark::default();
                    }
                    p.regressed = p.regressed.map(|(mut a, mut b)| {
                        a.mark = Mark::default();
                        b.mark = Mark::default();
                        (a, b)
                    });
                }
                for l in &mut s.list_changed {
                    l.mark = Mark::default();
                }
                for r in &mut s.retry {
                    r.1 = Mark::default();
                }
                for d in &mut s.dup_ids {
                    d.first = Mark::default();
                    d.again = Mark::default();
                }
                if let Some(a) = s.resume_ack.as_mut() {
                    a.1 = Mark::default();
                }
            }
            e.end = None;
        }
        let r: Vec<_> = r
            .into_iter()
            .map(|r| {
                (
                    r.decision.verdict,
                    r.first_event_id,
                    r.priming_ack.is_some(),
                    r.resent_ids,
                    r.stream_events,
                    r.resume_ack.map(|a| a.0),
                    r.retry.iter().map(|x| x.0).collect::<Vec<_>>(),
                )
            })
            .collect();
        format!("{r:?}\n{x:?}")
    }

    fn stream_body() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(b"id: 7\r\ndata:\r\nretry: 500\r\n\r\n");
        b.extend_from_slice(b"event: resume\ndata: {\"lastEventId\":\"7\"}\n\n");
        for n in 8..60u32 {
            let data = match n % 4 {
                0 => format!(
                    r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"t","progress":{}}}}}"#,
                    n % 20
                ),
                1 => format!(r#"{{"jsonrpc":"2.0","id":{n},"result":{{}}}}"#),
                2 => r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#.into(),
                _ => format!(
                    r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"data":"{n}"}}}}"#
                ),
            };
            let id = if n == 30 { 29 } else { n };
            b.extend_from_slice(format!("id: {id}\ndata: {data}\n\n").as_bytes());
        }
        b.extend_from_slice(b"retry: 3000\nid: 60\ndata: x\n\n");
        b
    }

    #[test]
    fn facts_do_not_depend_on_how_the_body_is_split() {
        let body = stream_body();
        for last in [None, Some("7")] {
            let whole = facts(&body, &[], last);
            let bytewise: Vec<usize> = (1..body.len()).collect();
            assert_eq!(facts(&body, &bytewise, last), whole);
            let mut seed = 0x2545_f491_4f6c_dd1du64;
            for _ in 0..20 {
                let mut cuts = Vec::new();
                let mut at = 0;
                while at < body.len() {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    at += 1 + (seed % 97) as usize;
                    cuts.push(at);
                }
                assert_eq!(facts(&body, &cuts, last), whole, "cuts {cuts:?}");
            }
        }
    }

    #[test]
    fn what_one_stream_tells() {
        let (r, x) = exchange(&stream_body(), &[], Some("7"));
        let r = &r[0];
        // The priming event repeats Last-Event-ID: skipped; the next id decides.
        assert_eq!(r.first_event_id.as_deref(), Some("8"));
        assert_eq!(r.decision.verdict, Verdict::Correct);
        assert!(r.priming_ack.is_some());
        assert_eq!(r.resume_ack.as_ref().map(|a| a.0.as_str()), Some("7"));
        assert_eq!(r.retry.iter().map(|x| x.0).collect::<Vec<_>>(), [500, 3000]);
        let s = x[0].stream().unwrap();
        assert_eq!(s.events, 55);
        assert_eq!(s.priming, 1);
        assert_eq!(s.first_id.as_ref().unwrap().text, "7");
        assert_eq!(s.last_id.as_ref().unwrap().text, "60");
        assert_eq!(s.max_int_id.as_ref().unwrap().text, "60");
        // Id 29 came twice (at 29 and at 30).
        assert_eq!(s.dup_ids.len(), 1);
        assert_eq!(s.dup_ids[0].text, "29");
        // Kept facts are capped: the first and the last ones.
        let kept: Vec<u64> = s.id_facts.iter().map(|f| f.id_index).collect();
        assert_eq!(kept.len(), FACTS_HEAD + FACTS_TAIL);
        assert_eq!(kept[0], 0);
        assert_eq!(*kept.last().unwrap(), s.ids - 1);
        assert!(s.id_facts.dropped > 0);
        // Progress 8, 12, 16 (the events read at once), then the tail: it went back (20 → 0).
        let p = &s.progress[0];
        assert_eq!(p.token_text, "\"t\"");
        assert!(p.regressed.is_some());
        assert!(!s.list_changed.is_empty());
        assert!(s.list_changed[0].method.ends_with("/list_changed"));
        // Responses are distinctive content; progress on integer ids is not kept as content.
        assert!(s.content.iter().all(|c| c.kind == ContentKind::Response));
    }

    #[test]
    fn exchanges_open_at_once_keep_their_own_streams() {
        let mut t = ExchangeTracker::new(&Limits::default());
        for n in 0..3u32 {
            t.request(RequestHead {
                exchange: n,
                method: "GET".into(),
                session_id: Some("s".into()),
                last_event_id: Some(format!("{}", 10 * n)),
                first: Mark::new(u64::from(n) + 1, 0),
                complete: Mark::new(u64::from(n) + 1, 0),
                ..Default::default()
            });
        }
        for n in [1u32, 0] {
            t.response(ResponseHead {
                exchange: n,
                status: 200,
                content_type: Some("text/event-stream".into()),
                first: Mark::new(10, 0),
                complete: Mark::new(10, 0),
                ..Default::default()
            });
        }
        // Slices of the two answers alternate, each event cut in two.
        let slices: [(u32, &[u8]); 5] = [
            (0, b"id: "),
            (1, b"id: 1"),
            (0, b""),
            (1, b"1\ndata: x\n\n"),
            (0, b"1\ndata: x\n\n"),
        ];
        for (i, (n, bytes)) in slices.into_iter().enumerate() {
            t.body(n, bytes, Mark::new(20 + i as u64, 0));
        }
        t.body_end(1, BodyEnd::Complete, Mark::new(30, 0));
        t.finish(None, false, Mark::new(40, 0));
        let firsts: Vec<(u32, Option<&str>)> = t
            .resumes
            .iter()
            .map(|r| (r.exchange, r.first_event_id.as_deref()))
            .collect();
        // Exchange 1 ended first; the others were decided at the end, in exchange order.
        assert_eq!(firsts, [(1, Some("11")), (0, Some("1")), (2, None)]);
        let events: Vec<(u32, u64)> = t
            .summaries
            .iter()
            .map(|x| (x.exchange, x.stream().map_or(0, |s| s.events)))
            .collect();
        assert_eq!(events, [(1, 1), (0, 1), (2, 0)]);
    }

    #[test]
    fn rising_integer_ids_leading_zeros_and_repeats() {
        // Rising integers: no duplicates, and the last id keeps its text.
        let (_, x) = exchange(
            b"id: 8\ndata: a\n\nid: 9\ndata: b\n\nid: 10\ndata: c\n\n",
            &[],
            Some("7"),
        );
        let s = x[0].stream().unwrap();
        assert!(s.dup_ids.is_empty());
        assert_eq!(s.last_id.as_ref().unwrap().text, "10");
        assert_eq!(s.last_id.as_ref().unwrap().id_index, 2);
        // "08" and "8" are different ids with one value; the last id is quoted as sent.
        let (_, x) = exchange(b"id: 8\ndata: a\n\nid: 08\ndata: b\n\n", &[], Some("7"));
        let s = x[0].stream().unwrap();
        assert!(s.dup_ids.is_empty());
        assert_eq!(s.last_id.as_ref().unwrap().text, "08");
        // A canonical integer after a text id replaces it as the last id.
        let (_, x) = exchange(b"id: a-1\ndata: a\n\nid: 12\ndata: b\n\n", &[], Some("7"));
        let s = x[0].stream().unwrap();
        assert_eq!(s.last_id.as_ref().unwrap().text, "12");
        assert_eq!(s.last_id.as_ref().unwrap().mark, Mark::new(3, 30));
        // Ids that stop rising: each repeat after its previous delivery, in stream order,
        // also when the repeated id came while the ids still rose.
        let body = b"id: 8\ndata: a\n\nid: 9\ndata: b\n\nid: 10\ndata: c\n\nid: 9\ndata: d\n\n\
                     id: x\ndata: e\n\nid: 8\ndata: f\n\nid: 9\ndata: g\n\nid: x\ndata: h\n\n";
        // One frame per byte, so that every event has its own mark.
        let cuts: Vec<usize> = (1..body.len()).collect();
        let (_, x) = exchange(body, &cuts, Some("7"));
        let s = x[0].stream().unwrap();
        let texts: Vec<&str> = s.dup_ids.iter().map(|d| d.text.as_str()).collect();
        assert_eq!(texts, ["9", "8", "9", "x"]);
        assert!(s.dup_ids.iter().all(|d| d.first.frame < d.again.frame));
        assert_eq!(s.dup_ids[2].first, s.dup_ids[0].again);
    }

    #[test]
    fn a_fresh_priming_id_counts_and_a_repeat_mid_stream_is_no_duplicate() {
        let body = b"id: 8\ndata:\n\nid: 9\ndata: a\n\nid: 8\ndata:\n\nid: 10\ndata: b\n\n";
        let (r, x) = exchange(body, &[], Some("7"));
        assert_eq!(r[0].first_event_id.as_deref(), Some("8"));
        assert_eq!(r[0].decision.verdict, Verdict::Correct);
        assert!(r[0].priming_ack.is_none());
        assert!(x[0].stream().unwrap().dup_ids.is_empty());
        // Only the priming acknowledgment and nothing after it: still no id delivered.
        let (r, _) = exchange(b"id: 7\ndata:\n\n", &[], Some("7"));
        assert_eq!(r[0].decision.verdict, Verdict::Empty);
        assert!(r[0].priming_ack.is_some());
    }

    #[test]
    fn shapes_are_tallied_per_pair_and_restart_after_a_gap() {
        let mut t = ExchangeTracker::new(&Limits::default());
        t.request(RequestHead {
            exchange: 0,
            method: "GET".into(),
            session_id: Some("s".into()),
            ..Default::default()
        });
        t.response(ResponseHead {
            exchange: 0,
            status: 200,
            content_type: Some("text/event-stream".into()),
            ..Default::default()
        });
        t.body(
            0,
            b"id: Ab_1\ndata: x\n\nid: Ab_2\ndata: x\n\nid: Ab_3\ndata: x\n\n",
            Mark::new(3, 0),
        );
        t.body_gap(0, 10, Mark::new(4, 0));
        // After the hole: a blank line resynchronizes; Ab_3 to Ab_9 across it is no pair.
        t.body(
            0,
            b"\n\nid: Ab_9\ndata: x\n\nid: Ab_11\ndata: x\n\n",
            Mark::new(5, 0),
        );
        t.body_end(0, BodyEnd::Complete, Mark::new(6, 0));
        let s = t.summaries[0].stream().unwrap();
        assert_eq!(s.shapes.len(), 1);
        let tally = &s.shapes[0];
        assert_eq!((tally.prefix.as_str(), tally.suffix.as_str()), ("Ab_", ""));
        // Ab_9 to Ab_11 skips one: no contradiction, but no support either.
        assert_eq!((tally.support, tally.breaks, tally.skips), (2, 0, 1));
        assert_eq!(s.gaps, 1);
    }

    #[test]
    fn sessions_come_from_headers_urls_or_endpoint_events() {
        let mut t = ExchangeTracker::new(&Limits::default());
        t.request(RequestHead {
            exchange: 0,
            method: "POST".into(),
            target: "/messages?sessionId=abc".into(),
            ..Default::default()
        });
        t.response(ResponseHead {
            exchange: 0,
            status: 202,
            ..Default::default()
        });
        t.body_end(0, BodyEnd::Complete, Mark::new(2, 0));
        t.request(RequestHead {
            exchange: 1,
            method: "GET".into(),
            target: "/sse".into(),
            ..Default::default()
        });
        t.response(ResponseHead {
            exchange: 1,
            status: 200,
            content_type: Some("text/event-stream".into()),
            ..Default::default()
        });
        t.body(
            1,
            b"event: endpoint\ndata: /messages/?session_id=def\n\n",
            Mark::new(4, 0),
        );
        t.body_end(1, BodyEnd::Complete, Mark::new(5, 0));
        let ids: Vec<_> = t.summaries.iter().map(|x| x.session_id.clone()).collect();
        assert_eq!(ids, [Some("abc".to_string()), Some("def".to_string())]);
        assert!(
            t.session_ids.contains(fact_hash(&[b"abc".as_slice()]))
                && t.session_ids.contains(fact_hash(&[b"def".as_slice()]))
        );
    }

    #[test]
    fn non_session_traffic_keeps_no_summary() {
        let mut t = ExchangeTracker::new(&Limits::default());
        t.request(RequestHead {
            exchange: 0,
            method: "GET".into(),
            target: "/index.html".into(),
            ..Default::default()
        });
        t.response(ResponseHead {
            exchange: 0,
            status: 200,
            content_type: Some("text/html".into()),
            ..Default::default()
        });
        t.body(0, b"<html>", Mark::new(2, 0));
        t.body_end(0, BodyEnd::Complete, Mark::new(3, 0));
        assert!(t.summaries.is_empty());
    }

    #[test]
    fn fact_hash_sees_lengths_and_every_byte() {
        let h = |p: &[&[u8]]| fact_hash(p);
        assert_eq!(h(&[b"abc"]), h(&[b"abc"]));
        assert_ne!(h(&[b"ab", b"c"]), h(&[b"a", b"bc"]));
        assert_ne!(h(&[b""]), h(&[]));
        let long: Vec<u8> = (0..300u32).map(|i| (i % 251) as u8).collect();
        for i in 0..long.len() {
            let mut other = long.clone();
            other[i] ^= 1;
            assert_ne!(h(&[&long]), h(&[&other]), "byte {i}");
        }
        for n in 0..40 {
            assert_ne!(h(&[&long[..n]]), h(&[&long[..n + 1]]));
        }
    }

    #[test]
    fn server_stream_reset_ended_on_the_wire() {
        let end = BodyEnd::Reset {
            by_client: false,
            code: 2,
        };
        assert_eq!(outcome_of(end), StreamOutcome::EndedOnWire);
    }

    #[test]
    fn client_stream_reset_is_a_client_abort() {
        let end = BodyEnd::Reset {
            by_client: true,
            code: 8,
        };
        assert_eq!(outcome_of(end), StreamOutcome::ClientAborted);
    }

    #[test]
    fn goaway_ended_on_the_wire() {
        assert_eq!(
            outcome_of(BodyEnd::GoneAway { code: 0 }),
            StreamOutcome::EndedOnWire
        );
    }

    /// An answer that follows bytes the HTTP stage skipped may answer a request lost in them:
    /// pairing it with the request before the skip tells the session stage of the loss.
    #[test]
    fn an_answer_paired_across_skipped_bytes_is_a_loss_no_session_is_named_for() {
        let run = |skip: bool| {
            let mut t = ExchangeTracker::new(&Limits::default());
            t.request(RequestHead {
                exchange: 0,
                method: "GET".into(),
                target: "/mcp".into(),
                session_id: Some("s-1".into()),
                first: Mark::new(1, 10),
                complete: Mark::new(1, 10),
                ..Default::default()
            });
            if skip {
                t.anomaly(Anomaly::Resynchronized, Mark::new(3, 30));
            }
            t.response(ResponseHead {
                exchange: 0,
                status: 200,
                content_type: Some("text/event-stream".into()),
                first: Mark::new(4, 40),
                complete: Mark::new(4, 40),
                ..Default::default()
            });
            t.unattributed_loss
        };
        assert!(run(true));
        assert!(!run(false));
    }
}
