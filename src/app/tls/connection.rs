//! The TLS state machine of one TCP connection: records in, decrypted application data out.
//!
//! Input: the [`StreamSink`] calls of one TCP connection (in-order bytes of each direction,
//! lost bytes as `gap(len)`, one `end` per direction), forwarded to [`TlsConnection::data`],
//! [`TlsConnection::gap`] and [`TlsConnection::end`], with the [`KeyLog`] as known at the time
//! of each call (it may grow between calls, as pcapng Decryption Secrets Blocks are read).
//! Output: the same contract on a child sink, carrying the plaintext of application_data
//! records, and [`TlsFacts`] for the report.
//!
//! Invariants:
//! - Only application data reaches the child: `child.data(dir, plaintext, mark)` per record,
//!   with the mark of the TCP bytes that completed the record (after a loss, of the bytes
//!   that let the search prove it: the next segment's, when it ends a segment). Handshake, alerts,
//!   change_cipher_spec, NewSessionTicket and KeyUpdate are consumed.
//! - No byte that failed authentication is ever forwarded. Unauthenticated bytes are never
//!   forwarded at all: a record is plaintext to the child only after its AEAD tag verified.
//! - `child.end` reaches the child exactly once per direction: close_notify gives `Fin`, a
//!   fatal alert `Rst`, otherwise the TCP end as it came; a later TCP end is swallowed.
//! - A direction that cannot be read any more gives the child one `gap(dir, 0, mark)` and
//!   nothing more but its end: wrong keys (the first record of a direction fails to
//!   authenticate: status `KeysWrong`), keys that never came (`NoKeys`), an unsupported
//!   version or suite (`Unsupported`), or a loss no record after could be recovered from.
//! - A capture that starts mid-connection (no ClientHello first) forwards nothing but ends.
//! - Memory is bounded per connection: one record per direction in framing, one kept
//!   handshake message, [`MAX_HELD_BYTES`] of input held while waiting for keys, and a
//!   resynchronisation window that never reaches past [`MAX_RESYNC_SCAN_BYTES`] after the
//!   loss (plus the call that crosses it). Trial decryptions after a loss are
//!   capped at [`MAX_TRIALS_PER_GAP`] (and [`MAX_TRIALS_PER_CONNECTION`]) and the bytes
//!   searched at [`MAX_RESYNC_SCAN_BYTES`].
//! - Results depend on the bytes and the marks, not on how the bytes are cut into calls.
//!
//! Loss recovery goes beyond Wireshark, which stops decrypting a connection at its first
//! missing byte. After a `gap`, the bytes that follow are searched for a plausible record
//! header ([`find_boundary`]: the next header plausible too, or the record ending where a
//! segment ends); a candidate is proved by authenticating it, which also proves
//! its sequence number: TLS 1.2 AES-GCM records carry an explicit nonce that stacks set to
//! the sequence number (tried first); otherwise sequence numbers after the last good one are
//! tried, as many as the lost bytes could have held records, and in TLS 1.3 also the next
//! generation of traffic secret (a KeyUpdate may have been lost). The child then gets
//! `gap(dir, n)` in place of the lost records, `n` being their plaintext length when it
//! follows from the byte count (no TLS 1.3 padding assumed), else 0, then the plaintext.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::mem;
use std::ops::{Deref, DerefMut};
use std::thread::LocalKey;

#[cfg(test)]
use crate::app::tls::crypto::cipher_suite_name;
use crate::app::tls::crypto::{
    Protocol, RecordKey, Secret, SuiteSpec, next_traffic_secret, supported_suite,
};
use crate::app::tls::framing::{
    ALERT, APPLICATION_DATA, Boundary, CHANGE_CIPHER_SPEC, Framed, HANDSHAKE, HEADER_LEN,
    RecordAssembler, RecordHeader, find_boundary,
};
use crate::app::tls::handshake::{
    self, HandshakeMessage, HandshakeReader, parse_client_hello, parse_encrypted_extensions,
    parse_server_hello,
};
use crate::app::tls::keylog::{KeyLog, KeySource};
use crate::record::{Direction, Limits, Mark, StreamEnd, StreamSink};

/// Input held per connection while its keys are unknown; beyond it the connection is given
/// up as `NoKeys`. 256 KiB covers a handshake and the first requests and responses, which is
/// what a key log written as the capture goes (pcapng Decryption Secrets Blocks) needs.
pub(crate) const MAX_HELD_BYTES: usize = 256 * 1024;
/// What one held item costs beyond its bytes, so many tiny items are bounded too.
const HELD_ITEM_COST: usize = 64;
/// Frames of the capture after which a direction's key counts as quiet: parked
/// ([`RecordKey::park`], its expanded form freed) once a record of the other direction comes
/// that much after its last one, and after a record that came that much after the one before
/// (a stream whose records come far apart). With thousands of connections open at once (3,000
/// sessions over TLS 1.3: about 6,000), most are quiet at any moment; parked keys took 4 MiB
/// off that capture's peak. A key is made parked, and expanded by its direction's next
/// record: parking after every record cost 22% more CPU on the default mix over TLS 1.3,
/// where a connection's records mostly come close together; this rule costs about nothing
/// there. A direction with no record yet is never quiet.
const PARK_AFTER_FRAMES: u64 = 2048;
/// Trial decryptions after one loss before the direction is given up.
pub(crate) const MAX_TRIALS_PER_GAP: u32 = 4096;
/// Trial decryptions over a whole connection: a hostile stream of records that never
/// authenticate, each one a loss to recover from, costs no more than this.
pub(crate) const MAX_TRIALS_PER_CONNECTION: u64 = 64 * 1024;
/// Bytes searched for a record boundary after one loss before the direction is given up.
pub(crate) const MAX_RESYNC_SCAN_BYTES: u64 = 256 * 1024;

/// TLS versions as on the wire.
const TLS12: u16 = 0x0303;
const TLS13: u16 = 0x0304;

thread_local! {
    /// A whole record copied out of the bytes that carried it, to be decrypted in place.
    /// Buffers are lent by the thread for the length of one record rather than kept per
    /// connection: thousands of connections are open at once in a busy capture, most of them
    /// between records, and a buffer per direction kept the size of its largest record.
    static RECORD: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// The copies trial decryptions work on (the TLS 1.3 handshake epoch, loss recovery).
    static TRIAL: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Runs `f` on the thread's record buffer ([`RECORD`]), empty. The buffer stays where it is:
/// moved out and back for every record, through the thread-local's setter, it made each
/// record wait on a 16-byte read of the buffer's description just written in 8-byte stores
/// (2-4% of a TLS run's samples). If `f` takes it out to keep it, the next record starts a
/// new one; should `f` ever need it again on the same thread, it gets a buffer of its own.
fn with_record_buffer<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    RECORD.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            f(&mut buf)
        }
        Err(_) => f(&mut Vec::new()),
    })
}

/// A buffer lent by the thread ([`TRIAL`]); it goes back when dropped, unless it was taken
/// out to be kept.
struct Lent {
    slot: &'static LocalKey<Cell<Vec<u8>>>,
    buf: Vec<u8>,
}

impl Lent {
    fn new(slot: &'static LocalKey<Cell<Vec<u8>>>) -> Lent {
        Lent {
            slot,
            buf: slot.take(),
        }
    }
}

impl Deref for Lent {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.buf
    }
}

impl DerefMut for Lent {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let mut buf = mem::take(&mut self.buf);
        if buf.capacity() > 0 {
            buf.clear();
            self.slot.set(buf);
        }
    }
}

/// Where a connection's decryption stands. Terminal states other than `Decrypting` are
/// never left.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum TlsStatus {
    /// No record decrypted yet.
    #[default]
    Handshaking,
    /// At least one record authenticated and decrypted.
    Decrypting,
    /// The key log never gave this connection's secrets (held input was given up).
    NoKeys,
    /// A version or suite this tool cannot decrypt.
    Unsupported(Unsupported),
    /// The capture began after the handshake: no ClientHello, so no key lookup.
    HandshakeNotCaptured,
    /// A direction's first protected record failed to authenticate: the logged secrets do not
    /// belong to this connection. No plaintext was forwarded from that direction.
    KeysWrong,
    /// The bytes are not a TLS record stream.
    NotTls,
}

/// What a connection uses that this tool cannot decrypt: the number it was given, named when
/// asked (every open connection holds a status, and a name it kept made each larger).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unsupported {
    /// A protocol version other than TLS 1.2 and 1.3.
    Version(u16),
    /// A cipher suite that is not readable, or not of the negotiated version.
    Suite(u16),
}

impl Unsupported {
    /// `TLS 1.1`, `version 0x7F1C`, or the suite's IANA name. The report names the suite
    /// from the connection's facts and counts the connection as unreadable; the tests ask
    /// for the name.
    #[cfg(test)]
    pub(crate) fn name(self) -> String {
        match self {
            Unsupported::Version(v) => version_name(v),
            Unsupported::Suite(id) => cipher_suite_name(id),
        }
    }
}

impl TlsStatus {
    pub(crate) fn is_final_failure(&self) -> bool {
        matches!(
            self,
            TlsStatus::NoKeys
                | TlsStatus::Unsupported(_)
                | TlsStatus::HandshakeNotCaptured
                | TlsStatus::NotTls
        )
    }
}

/// Everything the report and coverage accounting need to know about one TLS connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TlsFacts {
    /// The direction that sent the ClientHello.
    pub client: Option<Direction>,
    /// Negotiated version (0x0303 TLS 1.2, 0x0304 TLS 1.3).
    pub version: Option<u16>,
    pub cipher_suite: Option<u16>,
    pub sni: Option<String>,
    /// Negotiated ALPN (ServerHello in TLS 1.2, EncryptedExtensions in TLS 1.3).
    pub alpn: Option<String>,
    pub key_source: Option<KeySource>,
    pub status: TlsStatus,
    /// Records authenticated and decrypted, of any content type.
    pub records_decrypted: u64,
    /// Records that failed to authenticate where they were expected to.
    pub auth_failures: u64,
    /// Losses recovered from: a later record authenticated after a gap.
    pub resyncs: u64,
    /// Records known lost (by sequence number) in recovered losses.
    pub records_lost: u64,
    /// Losses no later record could be recovered from.
    pub resync_failures: u64,
    pub client_random: Option<[u8; 32]>,
    /// The server asked for a second ClientHello.
    pub hello_retry_request: bool,
    /// The ClientHello offered resumption (TLS 1.3 pre_shared_key, or a TLS 1.2 session id).
    pub resumption_offered: bool,
    pub key_updates: u64,
    /// TLS 1.3 0-RTT records decrypted with the early traffic secret.
    pub early_data_records: u64,
}

/// TLS 1.3 key epochs of one direction (TLS 1.2 has only `Application`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Epoch {
    Handshake,
    Application,
}

/// What happens to a direction's bytes.
#[derive(Debug)]
enum Mode {
    Normal,
    /// Bytes were lost; searching for the next record that authenticates.
    Resync(Box<Resync>),
    /// Unreadable from here on; the child got its one `gap(dir, 0)`.
    Lost,
    /// close_notify or a fatal alert ended the direction.
    Closed,
}

#[derive(Debug, Default)]
struct Resync {
    /// Bytes after the loss, not yet known to be lost or a record.
    window: Vec<u8>,
    /// Bytes still to drop before `window` starts: the rest of a record whose header was seen.
    skip: u64,
    /// Ciphertext bytes lost since the last whole record.
    lost: u64,
    /// False when part of the loss has unknown length.
    lost_known: bool,
    /// Search resumes here in `window` (earlier offsets were rejected).
    from: usize,
    /// Offsets of `window` where a segment (a mark) ended, ascending: a record may end there.
    segment_ends: Vec<usize>,
    /// The mark of the last bytes added to `window`.
    last_mark: Option<Mark>,
    /// Bytes dropped from the front of `window` since the loss.
    scanned: u64,
    trials: u32,
}

impl Resync {
    /// The search has come `at` bytes into the window: what lies before is lost.
    fn advance(&mut self, at: usize) {
        self.window.drain(..at);
        self.lost += at as u64;
        self.scanned += at as u64;
        self.from = 0;
        self.segment_ends.retain(|&e| e > at);
        for e in &mut self.segment_ends {
            *e -= at;
        }
    }

    /// The window's bytes so far end a segment.
    fn segment_end(&mut self) {
        let end = self.window.len();
        if end > 0 && self.segment_ends.last() != Some(&end) {
            self.segment_ends.push(end);
        }
    }
}

/// One direction's state.
struct Half {
    framing: RecordAssembler,
    handshake: HandshakeReader,
    mode: Mode,
    /// TLS 1.2: a ChangeCipherSpec was seen; records from here on are protected.
    ccs_seen: bool,
    epoch: Epoch,
    seq: u64,
    /// Keys are boxed (most connections use one per direction once the handshake is over);
    /// the handshake's and the early data's are dropped then. A key's expanded form (over 500
    /// bytes) is freed while its direction is quiet ([`PARK_AFTER_FRAMES`]).
    handshake_key: Option<Box<RecordKey>>,
    app_key: Option<Box<RecordKey>>,
    /// The current application traffic secret (TLS 1.3), for KeyUpdate.
    app_secret: Option<Secret>,
    early_key: Option<Box<RecordKey>>,
    early_seq: u64,
    /// A record of this direction authenticated.
    decrypted_any: bool,
    /// The frame of this direction's last authenticated record (0: none yet).
    last_frame: u64,
    /// The child got this direction's end.
    end_sent: bool,
    /// Input waiting for keys, oldest first, each with its arrival number and mark.
    held: HeldQueue,
}

/// A held item: its arrival number, the item, and where it came.
type HeldItem = (u64, Held, Mark);

/// Input one direction holds while its keys are unknown, oldest first. Boxed, made when the
/// first item is held and freed when the last one goes: most connections never hold any, and
/// the empty queue inline made every TLS connection's state 48 bytes larger (in the
/// allocator's 768-byte size class rather than the 640-byte one).
// The box is the point: `None` is one word, where an empty `VecDeque` is four.
#[allow(clippy::box_collection)]
#[derive(Debug, Default)]
struct HeldQueue(Option<Box<VecDeque<HeldItem>>>);

impl HeldQueue {
    fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|q| q.is_empty())
    }

    fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |q| q.len())
    }

    fn queue(&mut self) -> &mut VecDeque<HeldItem> {
        self.0.get_or_insert_with(Box::default)
    }

    fn push_front(&mut self, item: HeldItem) {
        self.queue().push_front(item);
    }

    fn push_back(&mut self, item: HeldItem) {
        self.queue().push_back(item);
    }

    fn front(&self) -> Option<&HeldItem> {
        self.0.as_ref()?.front()
    }

    fn back_mut(&mut self) -> Option<&mut HeldItem> {
        self.0.as_mut()?.back_mut()
    }

    fn pop_front(&mut self) -> Option<HeldItem> {
        let queue = self.0.as_mut()?;
        let item = queue.pop_front();
        if queue.is_empty() {
            self.0 = None;
        }
        item
    }

    fn clear(&mut self) {
        self.0 = None;
    }
}

#[derive(Debug)]
enum Held {
    /// A whole record whose keys were unknown.
    Record(Vec<u8>),
    /// Raw bytes that came after it.
    Bytes(Vec<u8>),
    Gap(u64),
}

impl Held {
    fn cost(&self) -> usize {
        HELD_ITEM_COST
            + match self {
                Held::Record(b) | Held::Bytes(b) => b.len(),
                Held::Gap(_) => 0,
            }
    }
}

impl Half {
    fn new() -> Half {
        Half {
            framing: RecordAssembler::default(),
            handshake: HandshakeReader::default(),
            mode: Mode::Normal,
            ccs_seen: false,
            epoch: Epoch::Handshake,
            seq: 0,
            handshake_key: None,
            app_key: None,
            app_secret: None,
            early_key: None,
            early_seq: 0,
            decrypted_any: false,
            last_frame: 0,
            end_sent: false,
            held: HeldQueue::default(),
        }
    }

    fn current_key(&self) -> Option<&RecordKey> {
        match self.epoch {
            Epoch::Handshake => self.handshake_key.as_deref(),
            Epoch::Application => self.app_key.as_deref(),
        }
    }
}

/// Whether a record must be decrypted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protection {
    Plain,
    Protected,
}

/// What became of a record handed to [`TlsConnection::record`].
enum Step {
    Done,
    /// Its keys are unknown yet: hold it.
    Hold,
}

/// Which key opened a record in the TLS 1.3 handshake epoch.
#[derive(Clone, Copy)]
enum Opener {
    /// The key of the direction's current epoch.
    Current,
    /// The application key: the handshake's end was not decrypted.
    App,
    /// The 0-RTT key.
    Early,
}

/// How a record found after a loss was opened.
enum Via {
    /// The current key: the sequence number tells how many records were lost.
    Current,
    /// The application key while in the handshake epoch: the handshake's end was lost.
    AppFromHandshake,
    /// The next traffic secret: a KeyUpdate was lost.
    NextGeneration(Box<(Secret, RecordKey)>),
}

/// A record that authenticated after a loss.
struct Found {
    seq: u64,
    via: Via,
    content_type: u8,
    plaintext: Vec<u8>,
}

/// One trial decryption of a copy of `body`, counted against the loss's budget.
fn attempt(
    key: &RecordKey,
    seq: u64,
    header: &[u8; HEADER_LEN],
    body: &[u8],
    scratch: &mut Vec<u8>,
    trials: &mut u32,
    connection_trials: &mut u64,
) -> Option<(u8, Vec<u8>)> {
    if *trials >= MAX_TRIALS_PER_GAP || *connection_trials >= MAX_TRIALS_PER_CONNECTION {
        return None;
    }
    *trials += 1;
    *connection_trials += 1;
    scratch.clear();
    scratch.extend_from_slice(body);
    let opened = key.open(seq, header, scratch)?;
    Some((opened.content_type, scratch.get(opened.plaintext)?.to_vec()))
}

/// The TLS layer of one TCP connection. See the module documentation.
pub(crate) struct TlsConnection {
    facts: TlsFacts,
    suite: Option<SuiteSpec>,
    server_random: Option<[u8; 32]>,
    halves: [Half; 2],
    /// The key log's generation at the last lookup of this connection's secrets, plus one
    /// (0: not looked up yet; plain, where an `Option` took 8 bytes more).
    keys_looked_up: u64,
    arrivals: u64,
    held_bytes: usize,
    /// The first record of the connection started a ClientHello.
    hello_started: bool,
    /// A valid record was seen in either direction: later framing errors are losses, not
    /// proof that the stream is not TLS.
    seen_record: bool,
    /// A ServerHello was just read: held input may be readable now.
    unblocked: bool,
    /// `drain` is running (it is not entered twice).
    draining: bool,
    /// Trial decryptions spent on losses so far.
    trials: u64,
}

impl TlsConnection {
    /// `Limits` is taken so every layer of the stack is built alike; TLS's own bounds are
    /// protocol constants (record sizes) and the constants of this module.
    pub(crate) fn new(_limits: &Limits) -> Self {
        TlsConnection {
            facts: TlsFacts::default(),
            suite: None,
            server_random: None,
            halves: [Half::new(), Half::new()],
            keys_looked_up: 0,
            arrivals: 0,
            held_bytes: 0,
            hello_started: false,
            seen_record: false,
            trials: 0,
            unblocked: false,
            draining: false,
        }
    }

    pub(crate) fn facts(&self) -> &TlsFacts {
        &self.facts
    }

    pub(crate) fn data<C: StreamSink>(
        &mut self,
        keys: &KeyLog,
        dir: Direction,
        bytes: &[u8],
        mark: Mark,
        child: &mut C,
    ) {
        self.drain(keys, child);
        if bytes.is_empty() {
            return;
        }
        if self.halves[dir.index()].held.is_empty() {
            self.feed(keys, dir, bytes, mark, None, child);
        } else {
            self.hold(dir, None, Held::Bytes(bytes.to_vec()), mark, child);
        }
    }

    pub(crate) fn gap<C: StreamSink>(
        &mut self,
        keys: &KeyLog,
        dir: Direction,
        len: u64,
        mark: Mark,
        child: &mut C,
    ) {
        self.drain(keys, child);
        if !self.halves[dir.index()].held.is_empty() || self.gap_needs_keys(keys, dir) {
            self.hold(dir, None, Held::Gap(len), mark, child);
        } else {
            self.gap_now(dir, len, mark, child);
        }
    }

    pub(crate) fn end<C: StreamSink>(
        &mut self,
        dir: Direction,
        how: StreamEnd,
        mark: Mark,
        child: &mut C,
    ) {
        // No key log here: whatever still waits for keys is given up.
        if self.halves.iter().any(|h| !h.held.is_empty()) {
            self.give_up_held(mark, child);
        }
        let resyncing = match &mut self.halves[dir.index()].mode {
            Mode::Resync(rs) => {
                // The end of the stream ends a segment: a record ending there may be the one
                // that recovers the loss.
                rs.segment_end();
                true
            }
            _ => false,
        };
        if resyncing {
            // The keys in use are all the search needs.
            self.feed(&KeyLog::new(), dir, &[], mark, None, child);
            if let Mode::Resync(_) = self.halves[dir.index()].mode {
                self.facts.resync_failures += 1;
                self.lose(dir, mark, child);
            }
        }
        self.send_end(dir, how, mark, child);
    }

    // ---------------------------------------------------------------- input routing

    /// Bytes of one direction, in order, with nothing of that direction held before them.
    /// `arrival` is the held item they come from, if any (it keeps its place in the queue).
    fn feed<C: StreamSink>(
        &mut self,
        keys: &KeyLog,
        dir: Direction,
        bytes: &[u8],
        mark: Mark,
        arrival: Option<u64>,
        child: &mut C,
    ) {
        let d = dir.index();
        // After a recovered loss, the rest of the resynchronisation window comes first.
        let mut carried: Vec<u8>;
        let mut input: &[u8] = bytes;
        loop {
            match self.halves[d].mode {
                Mode::Lost | Mode::Closed => return,
                Mode::Resync(_) => match self.feed_resync(keys, dir, input, mark, child) {
                    Some(rest) => {
                        carried = rest;
                        input = &carried;
                        continue;
                    }
                    None => return,
                },
                Mode::Normal => {}
            }
            if input.is_empty() {
                return;
            }
            // A record wholly within the input is copied to the thread's buffer; one cut
            // across inputs is rebuilt in the direction's own, which is then let go. A record
            // held is taken out of either.
            let held = if let Some(len) = self.halves[d].framing.whole_record(input) {
                let (bytes, rest) = input.split_at(len);
                input = rest;
                with_record_buffer(|record| {
                    record.extend_from_slice(bytes);
                    self.open_or_hold(keys, dir, record, mark, child)
                })
            } else {
                match self.halves[d].framing.feed(&mut input) {
                    Framed::NeedMore => continue,
                    Framed::Invalid(_) => {
                        self.framing_lost(dir);
                        continue;
                    }
                    Framed::Record => {
                        let mut rebuilt = self.halves[d].framing.take_record();
                        self.open_or_hold(keys, dir, &mut rebuilt, mark, child)
                    }
                }
            };
            match held {
                None => {
                    if self.unblocked {
                        self.drain(keys, child);
                    }
                }
                Some(record) => {
                    // The record and everything after it wait, in order, at the front.
                    let arrival = arrival.unwrap_or_else(|| self.next_arrival());
                    if !input.is_empty() {
                        let rest = Held::Bytes(input.to_vec());
                        self.hold(dir, Some(arrival), rest, mark, child);
                    }
                    self.hold(dir, Some(arrival), Held::Record(record), mark, child);
                    return;
                }
            }
        }
    }

    /// Opens one whole record; one whose keys are not known yet is taken out of `record`,
    /// to be held.
    fn open_or_hold<C: StreamSink>(
        &mut self,
        keys: &KeyLog,
        dir: Direction,
        record: &mut Vec<u8>,
        mark: Mark,
        child: &mut C,
    ) -> Option<Vec<u8>> {
        self.seen_record = true;
        match self.record(keys, dir, record, mark, child) {
            Step::Done => None,
            Step::Hold => Some(mem::take(record)),
        }
    }

    fn next_arrival(&mut self) -> u64 {
        self.arrivals += 1;
        self.arrivals
    }

    /// Queues input while keys are unknown: fresh input at the back (`arrival` `None`), input
    /// taken from the queue back at the front, where it was.
    fn hold<C: StreamSink>(
        &mut self,
        dir: Direction,
        arrival: Option<u64>,
        item: Held,
        mark: Mark,
        child: &mut C,
    ) {
        self.held_bytes += item.cost();
        match arrival {
            Some(a) => self.halves[dir.index()].held.push_front((a, item, mark)),
            None => {
                let held = &mut self.halves[dir.index()].held;
                // Bytes of one segment cut into several calls are one item, so the bound is
                // reached at the same point however the bytes were cut.
                if let (Some((_, Held::Bytes(last), last_mark)), Held::Bytes(more)) =
                    (held.back_mut(), &item)
                    && *last_mark == mark
                {
                    last.extend_from_slice(more);
                    self.held_bytes -= HELD_ITEM_COST;
                } else {
                    let a = self.next_arrival();
                    self.halves[dir.index()].held.push_back((a, item, mark));
                }
            }
        }
        if self.held_bytes > MAX_HELD_BYTES {
            self.give_up_held(mark, child);
        }
    }

    /// Retries held input, oldest first across both directions, while its keys are known.
    ///
    /// Runs at the start of every call (the key log may have grown since the last one) and
    /// right after a ServerHello is read: then, and only then, held input can become readable
    /// within a segment, and draining at that very record (not at the end of the call) keeps
    /// the order of the child's calls across directions the same however segments are cut.
    fn drain<C: StreamSink>(&mut self, keys: &KeyLog, child: &mut C) {
        if self.draining {
            return; // the drain under way sees `unblocked` and goes on
        }
        self.draining = true;
        self.unblocked = false;
        let mut blocked = [false, false];
        loop {
            if mem::take(&mut self.unblocked) {
                blocked = [false, false];
            }
            let next = (0..2)
                .filter(|&d| !blocked[d])
                .filter_map(|d| self.halves[d].held.front().map(|&(a, _, _)| (a, d)))
                .min();
            let Some((_, d)) = next else { break };
            let dir = if d == 0 {
                Direction::Forward
            } else {
                Direction::Reverse
            };
            let Some((arrival, item, mark)) = self.halves[d].held.pop_front() else {
                break;
            };
            self.held_bytes = self.held_bytes.saturating_sub(item.cost());
            let before = self.halves[d].held.len();
            match item {
                Held::Record(mut record) => {
                    if !matches!(self.halves[d].mode, Mode::Normal) {
                        // The direction changed mode while this waited: it is input again.
                        self.feed(keys, dir, &record, mark, Some(arrival), child);
                    } else if let Step::Hold = self.record(keys, dir, &mut record, mark, child) {
                        self.hold(dir, Some(arrival), Held::Record(record), mark, child);
                    }
                }
                Held::Bytes(bytes) => self.feed(keys, dir, &bytes, mark, Some(arrival), child),
                Held::Gap(len) => {
                    if self.gap_needs_keys(keys, dir) {
                        self.hold(dir, Some(arrival), Held::Gap(len), mark, child);
                    } else {
                        self.gap_now(dir, len, mark, child);
                    }
                }
            }
            if self.halves[d].held.len() > before {
                blocked[d] = true;
            }
        }
        self.draining = false;
    }

    /// Gives up everything held: the keys did not come in time.
    fn give_up_held<C: StreamSink>(&mut self, mark: Mark, child: &mut C) {
        let status = if self.facts.version.is_some() {
            TlsStatus::NoKeys
        } else {
            TlsStatus::HandshakeNotCaptured
        };
        self.set_status(status);
        self.held_bytes = 0;
        for d in [Direction::Forward, Direction::Reverse] {
            let half = &mut self.halves[d.index()];
            if half.held.is_empty() {
                continue;
            }
            half.held.clear();
            half.framing.clear();
            if self.facts.status != TlsStatus::HandshakeNotCaptured {
                self.lose(d, mark, child);
            } else if matches!(half.mode, Mode::Normal | Mode::Resync(_)) {
                half.mode = Mode::Lost;
            }
        }
    }

    // ---------------------------------------------------------------- records

    /// One whole record (header and body) of a direction in `Normal` mode.
    fn record<C: StreamSink>(
        &mut self,
        keys: &KeyLog,
        dir: Direction,
        record: &mut [u8],
        mark: Mark,
        child: &mut C,
    ) -> Step {
        let Some(header) = RecordHeader::parse(record) else {
            return Step::Done;
        };
        let content_type = header.content_type;
        if self.facts.status.is_final_failure() {
            self.unreadable(dir, content_type, mark, child);
            return Step::Done;
        }
        if !self.hello_started {
            // Nothing is readable before a ClientHello: the capture began mid-connection,
            // unless this very record starts the ClientHello.
            if content_type != HANDSHAKE || record.get(HEADER_LEN) != Some(&handshake::CLIENT_HELLO)
            {
                self.set_status(TlsStatus::HandshakeNotCaptured);
                return Step::Done;
            }
            self.hello_started = true;
        }
        match self.protection(dir, content_type) {
            Protection::Plain if content_type == APPLICATION_DATA => {
                // Application data in the clear breaks the protocol: never forwarded.
                self.lose(dir, mark, child);
                Step::Done
            }
            Protection::Plain => {
                let body = &record[HEADER_LEN..];
                self.deliver(dir, content_type, body, mark, child);
                Step::Done
            }
            Protection::Protected => {
                if !self.load_keys(keys, dir) {
                    return Step::Hold;
                }
                self.open(dir, record, mark, child);
                Step::Done
            }
        }
    }

    fn protection(&self, dir: Direction, content_type: u8) -> Protection {
        match self.facts.version {
            Some(TLS13) if content_type == APPLICATION_DATA => Protection::Protected,
            Some(TLS12) if self.halves[dir.index()].ccs_seen => Protection::Protected,
            // Application data before the version is known: 0-RTT data, or a ServerHello
            // still to come in the other direction. It waits.
            None if content_type == APPLICATION_DATA => Protection::Protected,
            _ => Protection::Plain,
        }
    }

    /// A record of a connection that cannot be decrypted.
    fn unreadable<C: StreamSink>(
        &mut self,
        dir: Direction,
        content_type: u8,
        mark: Mark,
        child: &mut C,
    ) {
        let before_tls13 = self.facts.version.is_some_and(|v| v < TLS13);
        if content_type == CHANGE_CIPHER_SPEC && before_tls13 {
            // Protection starts after it in every version before TLS 1.3.
            self.halves[dir.index()].ccs_seen = true;
            return;
        }
        let protected = content_type == APPLICATION_DATA || self.halves[dir.index()].ccs_seen;
        if protected && self.facts.status != TlsStatus::HandshakeNotCaptured {
            self.lose(dir, mark, child);
        }
    }

    /// Derives the keys of this connection once its secrets are in the key log; false while
    /// they are not (the record must wait).
    fn load_keys(&mut self, keys: &KeyLog, dir: Direction) -> bool {
        let (Some(suite), Some(client_random), Some(client)) =
            (self.suite, self.facts.client_random, self.facts.client)
        else {
            return false;
        };
        let d = dir.index();
        let ready = |h: &Half| h.handshake_key.is_some() || h.app_key.is_some();
        let looked_up = keys.generation().saturating_add(1);
        if self.keys_looked_up == looked_up {
            return ready(&self.halves[d]);
        }
        self.keys_looked_up = looked_up;
        let Some(secrets) = keys.get(&client_random) else {
            return ready(&self.halves[d]);
        };
        let (c, s) = (client.index(), client.other().index());
        match suite.protocol {
            Protocol::Tls12 => {
                let (Some(master), Some(server_random)) = (secrets.master, self.server_random)
                else {
                    return ready(&self.halves[d]);
                };
                if self.halves[c].app_key.is_none()
                    && let Some((ck, sk)) =
                        RecordKey::tls12_pair(&suite, &master, &client_random, &server_random)
                {
                    self.halves[c].app_key = Some(Box::new(ck));
                    self.halves[s].app_key = Some(Box::new(sk));
                    self.halves[c].epoch = Epoch::Application;
                    self.halves[s].epoch = Epoch::Application;
                }
            }
            Protocol::Tls13 => {
                // Fill only what is missing: a key in use (after KeyUpdate) is never replaced.
                let fill = |slot: &mut Option<Box<RecordKey>>, secret: Option<Secret>| {
                    if slot.is_none() {
                        *slot = secret.and_then(|s| RecordKey::tls13(&suite, &s).map(Box::new));
                    }
                };
                // The handshake's keys serve until the application epoch, and are dropped
                // once its key opens a record.
                for (i, secret) in [(c, secrets.client_handshake), (s, secrets.server_handshake)] {
                    if self.halves[i].epoch == Epoch::Handshake {
                        fill(&mut self.halves[i].handshake_key, secret);
                    }
                }
                if self.halves[c].epoch == Epoch::Handshake {
                    fill(&mut self.halves[c].early_key, secrets.client_early);
                }
                for (i, secret) in [(c, secrets.client_traffic_0), (s, secrets.server_traffic_0)] {
                    if self.halves[i].app_key.is_none() && secret.is_some() {
                        self.halves[i].app_secret = secret;
                        fill(&mut self.halves[i].app_key, secret);
                    }
                }
            }
        }
        if self.facts.key_source.is_none() && (ready(&self.halves[c]) || ready(&self.halves[s])) {
            self.facts.key_source = Some(secrets.source);
        }
        ready(&self.halves[d])
    }

    /// Opens a protected record with the keys of its direction and delivers its content.
    fn open<C: StreamSink>(
        &mut self,
        dir: Direction,
        record: &mut [u8],
        mark: Mark,
        child: &mut C,
    ) {
        let d = dir.index();
        let Ok(header) = <[u8; HEADER_LEN]>::try_from(&record[..HEADER_LEN]) else {
            return;
        };
        let record_len = record.len();
        let payload = &mut record[HEADER_LEN..];
        let half = &mut self.halves[d];
        let seq = half.seq;
        // Taken only for trials: most records open in place.
        let mut trial_buf: Option<Lent> = None;
        let result = if half.epoch == Epoch::Application {
            // One key can open it: decrypt in place, no copy.
            let opened = half
                .app_key
                .as_ref()
                .and_then(|k| k.open(seq, &header, payload));
            if opened.is_some() && (half.handshake_key.is_some() || half.early_key.is_some()) {
                // Never used again: the epoch does not go back.
                half.handshake_key = None;
                half.early_key = None;
            }
            opened.map(|o| (Opener::Current, o))
        } else {
            // In the TLS 1.3 handshake epoch the record may also be the first one under the
            // application key (handshake secrets not logged), or 0-RTT data: each trial
            // needs the original bytes, so trials decrypt a copy.
            let scratch: &mut Vec<u8> = trial_buf.insert(Lent::new(&TRIAL));
            let original: &[u8] = payload;
            let mut trial = |key: Option<&RecordKey>, seq: u64| {
                let key = key?;
                scratch.clear();
                scratch.extend_from_slice(original);
                key.open(seq, &header, scratch)
            };
            trial(half.handshake_key.as_deref(), seq)
                .map(|o| (Opener::Current, o))
                .or_else(|| trial(half.app_key.as_deref(), 0).map(|o| (Opener::App, o)))
                .or_else(|| {
                    trial(half.early_key.as_deref(), half.early_seq).map(|o| (Opener::Early, o))
                })
        };
        let Some((opener, opened)) = result else {
            self.auth_failure(dir, record_len, mark, child);
            return;
        };
        let in_place = half.epoch == Epoch::Application;
        match opener {
            Opener::Current => half.seq += 1,
            Opener::App => {
                half.epoch = Epoch::Application;
                half.seq = 1;
            }
            Opener::Early => {
                half.early_seq += 1;
                self.facts.early_data_records += 1;
            }
        }
        self.authenticated(dir, mark);
        if in_place && matches!(opener, Opener::Current) {
            self.deliver(
                dir,
                opened.content_type,
                &payload[opened.plaintext],
                mark,
                child,
            );
        } else if let Some(p) = trial_buf.as_ref().and_then(|b| b.get(opened.plaintext)) {
            self.deliver(dir, opened.content_type, p, mark, child);
        }
    }

    fn authenticated(&mut self, dir: Direction, mark: Mark) {
        self.facts.records_decrypted += 1;
        let now = mark.frame;
        let [first, second] = &mut self.halves;
        let (half, other) = match dir.index() {
            0 => (first, second),
            _ => (second, first),
        };
        half.decrypted_any = true;
        // A direction with no record yet is about to be busy, not quiet: its handshake is
        // going on (or was not captured).
        let quiet = |last: u64| last != 0 && now.saturating_sub(last) > PARK_AFTER_FRAMES;
        let sparse = quiet(half.last_frame);
        half.last_frame = now;
        if sparse && let Some(key) = half.app_key.as_mut() {
            key.park();
        }
        if quiet(other.last_frame)
            && let Some(key) = other.app_key.as_mut()
        {
            key.park();
        }
        self.set_status(TlsStatus::Decrypting);
    }

    /// A record that should have authenticated did not. As a direction's first protected
    /// record, the keys are wrong; later, the record itself is treated as lost and the
    /// direction resynchronises on the records after it.
    fn auth_failure<C: StreamSink>(
        &mut self,
        dir: Direction,
        record_len: usize,
        mark: Mark,
        child: &mut C,
    ) {
        self.facts.auth_failures += 1;
        let half = &mut self.halves[dir.index()];
        half.handshake.reset();
        if !half.decrypted_any {
            self.set_status(TlsStatus::KeysWrong);
            self.lose(dir, mark, child);
            return;
        }
        half.mode = Mode::Resync(Box::new(Resync {
            lost: record_len as u64,
            lost_known: true,
            ..Resync::default()
        }));
    }

    /// The content of a record, plain or decrypted.
    fn deliver<C: StreamSink>(
        &mut self,
        dir: Direction,
        content_type: u8,
        body: &[u8],
        mark: Mark,
        child: &mut C,
    ) {
        let d = dir.index();
        match content_type {
            APPLICATION_DATA if !self.halves[d].end_sent && !body.is_empty() => {
                child.data(dir, body, mark);
            }
            ALERT => {
                let (Some(&level), Some(&description)) = (body.first(), body.get(1)) else {
                    return;
                };
                // close_notify ends the direction cleanly; in TLS 1.3 every other alert but
                // user_canceled is fatal whatever its level says.
                let how = if description == 0 {
                    StreamEnd::Fin
                } else if level == 2 || (self.facts.version == Some(TLS13) && description != 90) {
                    StreamEnd::Rst
                } else {
                    return;
                };
                self.send_end(dir, how, mark, child);
                self.halves[d].mode = Mode::Closed;
                self.halves[d].framing.clear();
            }
            HANDSHAKE => {
                let mut messages = Vec::new();
                self.halves[d].handshake.feed(body, &mut messages);
                for m in messages {
                    self.handshake_message(dir, m);
                }
            }
            // Only TLS 1.2 switches on it; TLS 1.3 sends it for middleboxes only.
            CHANGE_CIPHER_SPEC if self.facts.version == Some(TLS12) => {
                self.halves[d].ccs_seen = true;
            }
            _ => {} // heartbeat, empty application data, a TLS 1.3 ChangeCipherSpec
        }
    }

    fn handshake_message(&mut self, dir: Direction, message: HandshakeMessage) {
        let d = dir.index();
        let Some(body) = message.body else { return };
        match message.msg_type {
            handshake::CLIENT_HELLO => {
                if self.facts.client.is_some_and(|c| c != dir) {
                    return;
                }
                let Some(hello) = parse_client_hello(&body) else {
                    return;
                };
                if self.facts.client_random.is_none() {
                    // A second ClientHello (after HelloRetryRequest) keeps the random.
                    self.facts.client = Some(dir);
                    self.facts.client_random = Some(hello.random);
                }
                self.facts.sni = hello.sni.or(self.facts.sni.take());
                self.facts.resumption_offered |= hello.pre_shared_key || hello.session_id_len > 0;
            }
            handshake::SERVER_HELLO => {
                if self.facts.client != Some(dir.other()) || self.facts.version.is_some() {
                    return;
                }
                let Some(hello) = parse_server_hello(&body) else {
                    return;
                };
                self.facts.cipher_suite = Some(hello.cipher_suite);
                self.unblocked = true;
                if hello.is_hello_retry_request() {
                    self.facts.hello_retry_request = true;
                    return;
                }
                let version = hello.version();
                self.facts.version = Some(version);
                self.server_random = Some(hello.random);
                if hello.alpn.is_some() {
                    self.facts.alpn = hello.alpn;
                }
                let wanted = match version {
                    TLS13 => Some(Protocol::Tls13),
                    TLS12 => Some(Protocol::Tls12),
                    _ => None,
                };
                let Some(wanted) = wanted else {
                    self.set_status(TlsStatus::Unsupported(Unsupported::Version(version)));
                    return;
                };
                match supported_suite(hello.cipher_suite) {
                    Some(suite) if suite.protocol == wanted => self.suite = Some(suite),
                    _ => self.set_status(TlsStatus::Unsupported(Unsupported::Suite(
                        hello.cipher_suite,
                    ))),
                }
            }
            handshake::ENCRYPTED_EXTENSIONS => {
                if let Some(ee) = parse_encrypted_extensions(&body)
                    && ee.alpn.is_some()
                {
                    self.facts.alpn = ee.alpn;
                }
            }
            handshake::FINISHED => {
                // TLS 1.3: the sender's next record uses its application key.
                let half = &mut self.halves[d];
                if self.facts.version == Some(TLS13) && half.epoch == Epoch::Handshake {
                    half.epoch = Epoch::Application;
                    half.seq = 0;
                }
            }
            handshake::KEY_UPDATE => {
                let (Some(suite), half) = (self.suite, &mut self.halves[d]) else {
                    return;
                };
                if self.facts.version == Some(TLS13)
                    && half.epoch == Epoch::Application
                    && let Some(secret) = half.app_secret
                {
                    let next = next_traffic_secret(suite.hash, &secret);
                    half.app_secret = Some(next);
                    half.app_key = RecordKey::tls13(&suite, &next).map(Box::new);
                    half.seq = 0;
                    self.facts.key_updates += 1;
                }
            }
            _ => {}
        }
    }

    // ---------------------------------------------------------------- losses

    /// True when a gap in this direction cannot be recovered from until keys are known.
    fn gap_needs_keys(&mut self, keys: &KeyLog, dir: Direction) -> bool {
        let d = dir.index();
        let protected = match self.facts.version {
            Some(TLS13) => true,
            Some(TLS12) => self.halves[d].ccs_seen,
            _ => false,
        };
        protected
            && !self.facts.status.is_final_failure()
            && matches!(self.halves[d].mode, Mode::Normal)
            && !self.load_keys(keys, dir)
    }

    fn gap_now<C: StreamSink>(&mut self, dir: Direction, len: u64, mark: Mark, child: &mut C) {
        let d = dir.index();
        if self.facts.status.is_final_failure() {
            if self.facts.status != TlsStatus::HandshakeNotCaptured {
                self.lose(dir, mark, child);
            }
            return;
        }
        let half = &mut self.halves[d];
        match &mut half.mode {
            Mode::Lost | Mode::Closed => {}
            Mode::Resync(r) => {
                // A second loss before recovery: what was gathered is lost too.
                if r.skip >= len {
                    r.skip -= len;
                    r.lost += len;
                } else {
                    r.lost += r.skip + len + r.window.len() as u64;
                    r.skip = 0;
                    r.window.clear();
                    r.segment_ends.clear();
                    r.from = 0;
                }
                r.lost_known &= len > 0;
            }
            Mode::Normal => {
                // A record cut by the loss: if its header was seen and the loss ends inside
                // it, its end, and so the next record's start, is known.
                let buffered = half.framing.buffered() as u64;
                let skip = match half.framing.missing() {
                    Some(missing) if len <= missing as u64 => missing as u64 - len,
                    _ => 0,
                };
                half.framing.clear();
                half.handshake.reset();
                half.mode = Mode::Resync(Box::new(Resync {
                    skip,
                    lost: buffered + len,
                    lost_known: len > 0,
                    ..Resync::default()
                }));
            }
        }
    }

    /// Bytes after a loss: searched for the next record that authenticates. Returns the
    /// bytes after that record, to be read normally, once it is found.
    fn feed_resync<C: StreamSink>(
        &mut self,
        keys: &KeyLog,
        dir: Direction,
        mut input: &[u8],
        mark: Mark,
        child: &mut C,
    ) -> Option<Vec<u8>> {
        let d = dir.index();
        let Mode::Resync(mut rs) = mem::replace(&mut self.halves[d].mode, Mode::Normal) else {
            return None;
        };
        if rs.skip > 0 {
            let n = rs.skip.min(input.len() as u64);
            rs.skip -= n;
            rs.lost += n;
            input = &input[n as usize..];
        }
        if !input.is_empty() {
            // New bytes of another segment: the bytes before them ended one.
            if rs.last_mark.is_some_and(|m| m != mark) {
                rs.segment_end();
            }
            rs.last_mark = Some(mark);
            rs.window.extend_from_slice(input);
        }
        let keys_ready = self.load_keys(keys, dir);
        loop {
            let boundary = find_boundary(&rs.window, rs.from, &rs.segment_ends);
            let at = match boundary {
                Boundary::NeedMore(at) | Boundary::Candidate(at) => at,
            };
            if rs.scanned + at as u64 > MAX_RESYNC_SCAN_BYTES {
                // The search went as far past the loss as it may.
                self.facts.resync_failures += 1;
                self.lose(dir, mark, child);
                return None;
            }
            match boundary {
                Boundary::NeedMore(at) => {
                    // Nothing before `at` can start a record: it is lost.
                    rs.advance(at);
                    self.halves[d].mode = Mode::Resync(rs);
                    return None;
                }
                Boundary::Candidate(at) => {
                    if !self.is_protected_phase(dir) {
                        // Nothing to authenticate before encryption starts: the boundary is
                        // taken on its plausibility, and the records read from there.
                        self.facts.resyncs += 1;
                        return Some(rs.window.split_off(at));
                    }
                    let found = if keys_ready {
                        self.try_candidate(dir, &mut rs, at)
                    } else {
                        None
                    };
                    if let Some(found) = found {
                        let header = RecordHeader::parse(&rs.window[at..])?;
                        let end = at + HEADER_LEN + header.len;
                        let rest = rs.window.split_off(end);
                        self.recovered(dir, &rs, at, found, mark, child);
                        return Some(rest);
                    }
                    if rs.trials >= MAX_TRIALS_PER_GAP || self.trials >= MAX_TRIALS_PER_CONNECTION {
                        self.facts.resync_failures += 1;
                        self.lose(dir, mark, child);
                        return None;
                    }
                    rs.from = at + 1;
                }
            }
        }
    }

    fn is_protected_phase(&self, dir: Direction) -> bool {
        match self.facts.version {
            Some(TLS13) => true,
            Some(TLS12) => self.halves[dir.index()].ccs_seen,
            _ => false,
        }
    }

    /// Tries to authenticate the record at `at` of the window under the sequence numbers
    /// (and key generations) the loss allows.
    fn try_candidate(&mut self, dir: Direction, rs: &mut Resync, at: usize) -> Option<Found> {
        let header = RecordHeader::parse(rs.window.get(at..)?)?;
        if self.facts.version == Some(TLS13) && header.content_type != APPLICATION_DATA {
            return None;
        }
        let header_bytes: [u8; HEADER_LEN] = rs.window.get(at..at + HEADER_LEN)?.try_into().ok()?;
        let body = rs
            .window
            .get(at + HEADER_LEN..at + HEADER_LEN + header.len)?;
        let trials = &mut rs.trials;
        let connection_trials = &mut self.trials;
        let mut lent = Lent::new(&TRIAL);
        let scratch = &mut *lent;
        let half = &self.halves[dir.index()];
        let in_handshake = half.epoch == Epoch::Handshake && half.handshake_key.is_some();
        let current = if in_handshake {
            half.handshake_key.as_deref()
        } else {
            half.app_key.as_deref()
        };
        let min_record_len = current.or(half.app_key.as_deref())?.min_record_len() as u64;
        // Records the loss can have held: each costs at least the smallest record.
        let budget = u64::from(MAX_TRIALS_PER_GAP.saturating_sub(*trials));
        let span = if rs.lost_known {
            ((rs.lost + at as u64) / min_record_len + 1).min(budget)
        } else {
            budget
        };
        let base = half.seq;
        let found = |seq, via, (content_type, plaintext)| Found {
            seq,
            via,
            content_type,
            plaintext,
        };
        if let Some(key) = current {
            // TLS 1.2 AES-GCM: the explicit nonce is the sequence number on most stacks.
            if let Some(seq) = key.explicit_nonce(body)
                && seq >= base
                && seq - base <= span
                && let Some(o) = attempt(
                    key,
                    seq,
                    &header_bytes,
                    body,
                    scratch,
                    trials,
                    connection_trials,
                )
            {
                return Some(found(seq, Via::Current, o));
            }
            for seq in base..=base.saturating_add(span) {
                if let Some(o) = attempt(
                    key,
                    seq,
                    &header_bytes,
                    body,
                    scratch,
                    trials,
                    connection_trials,
                ) {
                    return Some(found(seq, Via::Current, o));
                }
            }
        }
        if in_handshake {
            // The loss may have taken the end of the handshake: the application key, from 0.
            let app = half.app_key.as_ref()?;
            for seq in 0..=span {
                if let Some(o) = attempt(
                    app,
                    seq,
                    &header_bytes,
                    body,
                    scratch,
                    trials,
                    connection_trials,
                ) {
                    return Some(found(seq, Via::AppFromHandshake, o));
                }
            }
        } else if self.facts.version == Some(TLS13) {
            // The loss may have taken a KeyUpdate: the next secret, from 0.
            let (suite, secret) = (self.suite?, half.app_secret?);
            let next = next_traffic_secret(suite.hash, &secret);
            let next_key = RecordKey::tls13(&suite, &next)?;
            for seq in 0..=span {
                if let Some(o) = attempt(
                    &next_key,
                    seq,
                    &header_bytes,
                    body,
                    scratch,
                    trials,
                    connection_trials,
                ) {
                    return Some(found(
                        seq,
                        Via::NextGeneration(Box::new((next, next_key))),
                        o,
                    ));
                }
            }
        }
        None
    }

    /// A record authenticated after a loss: account for what was lost, tell the child, and
    /// deliver the record.
    fn recovered<C: StreamSink>(
        &mut self,
        dir: Direction,
        rs: &Resync,
        at: usize,
        found: Found,
        mark: Mark,
        child: &mut C,
    ) {
        let d = dir.index();
        let half = &mut self.halves[d];
        let lost_bytes = rs.lost + at as u64;
        let overhead = half
            .current_key()
            .or(half.app_key.as_deref())
            .map_or(0, |k| k.overhead()) as u64;
        let lost_records = match found.via {
            Via::Current => Some(found.seq.saturating_sub(half.seq)),
            // Records of the old epoch were lost too; how many is unknown.
            Via::AppFromHandshake => {
                half.epoch = Epoch::Application;
                None
            }
            Via::NextGeneration(next) => {
                let (secret, key) = *next;
                half.app_secret = Some(secret);
                half.app_key = Some(Box::new(key));
                self.facts.key_updates += 1;
                None
            }
        };
        half.seq = found.seq + 1;
        self.facts.resyncs += 1;
        self.facts.records_lost += lost_records.unwrap_or(found.seq);
        // The lost records' plaintext, when the byte count says it: their bytes less each
        // record's overhead (TLS 1.3 padding is taken to be absent).
        let plaintext_lost = match lost_records {
            Some(k) if rs.lost_known && k > 0 => lost_bytes.saturating_sub(k * overhead),
            _ => 0,
        };
        if lost_records != Some(0) && !self.halves[d].end_sent {
            child.gap(dir, plaintext_lost, mark);
        }
        self.authenticated(dir, mark);
        self.deliver(dir, found.content_type, &found.plaintext, mark, child);
    }

    /// A header that is not TLS. Before any record, the stream is not TLS; after, bytes were
    /// garbled or lost: resynchronise, the loss being of unknown length.
    fn framing_lost(&mut self, dir: Direction) {
        if !self.seen_record {
            self.set_status(TlsStatus::NotTls);
        }
        let half = &mut self.halves[dir.index()];
        half.framing.clear();
        if !self.seen_record {
            half.mode = Mode::Lost;
            return;
        }
        half.handshake.reset();
        half.mode = Mode::Resync(Box::new(Resync {
            lost: HEADER_LEN as u64,
            lost_known: false,
            ..Resync::default()
        }));
    }

    /// The direction cannot be read any more: the child gets one `gap(dir, 0)`.
    fn lose<C: StreamSink>(&mut self, dir: Direction, mark: Mark, child: &mut C) {
        let half = &mut self.halves[dir.index()];
        if matches!(half.mode, Mode::Lost | Mode::Closed) {
            return;
        }
        half.mode = Mode::Lost;
        half.framing.clear();
        if !half.end_sent {
            child.gap(dir, 0, mark);
        }
    }

    fn send_end<C: StreamSink>(
        &mut self,
        dir: Direction,
        how: StreamEnd,
        mark: Mark,
        child: &mut C,
    ) {
        let half = &mut self.halves[dir.index()];
        if !half.end_sent {
            half.end_sent = true;
            child.end(dir, how, mark);
        }
    }

    fn set_status(&mut self, status: TlsStatus) {
        let current = &self.facts.status;
        let allowed = match status {
            TlsStatus::Decrypting => *current == TlsStatus::Handshaking,
            _ => matches!(current, TlsStatus::Handshaking | TlsStatus::Decrypting),
        };
        if allowed {
            self.facts.status = status;
        }
    }
}

/// A protocol version's name, for `Unsupported`.
#[cfg(test)]
fn version_name(version: u16) -> String {
    match version {
        0x0300 => "SSL 3.0".to_string(),
        0x0301 => "TLS 1.0".to_string(),
        0x0302 => "TLS 1.1".to_string(),
        v => format!("version 0x{v:04X}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::tls::crypto::tests::{
        RFC8448_CLIENT_AP_SECRET, RFC8448_CLIENT_APP_RECORD, RFC8448_CLIENT_FINISHED_RECORD,
        RFC8448_CLIENT_HS_SECRET, RFC8448_SERVER_AP_SECRET, RFC8448_SERVER_HS_SECRET, hex,
    };
    use crate::app::tls::handshake::build;
    use crate::testing::xorshift;

    use Direction::{Forward, Reverse};

    /// What the child saw.
    #[derive(Clone, Debug, PartialEq, Eq)]
    enum Ev {
        Data(Direction, Vec<u8>, u64),
        Gap(Direction, u64, u64),
        End(Direction, StreamEnd, u64),
    }

    #[derive(Default)]
    struct Child(Vec<Ev>);

    impl StreamSink for Child {
        fn data(&mut self, dir: Direction, bytes: &[u8], mark: Mark) {
            assert!(!bytes.is_empty());
            self.0.push(Ev::Data(dir, bytes.to_vec(), mark.frame));
        }
        fn gap(&mut self, dir: Direction, len: u64, mark: Mark) {
            self.0.push(Ev::Gap(dir, len, mark.frame));
        }
        fn end(&mut self, dir: Direction, how: StreamEnd, mark: Mark) {
            self.0.push(Ev::End(dir, how, mark.frame));
        }
    }

    /// One step of a capture: a segment's bytes (its own frame), a loss, an end, or key log
    /// lines arriving (as a pcapng Decryption Secrets Block would).
    #[derive(Clone, Debug)]
    enum Step {
        Seg(Direction, Vec<u8>),
        Lost(Direction, u64),
        End(Direction, StreamEnd),
        Keys(String),
    }

    #[derive(Clone, Copy, Debug)]
    enum Split {
        Whole,
        ByteByByte,
        Random(u64),
    }

    /// `bytes` cut as `split` says, the random cuts seeded by the step's index too: every
    /// piece, empty ones included, in order.
    fn pieces(bytes: &[u8], split: Split, step: usize) -> Vec<&[u8]> {
        let mut cuts = match split {
            Split::Whole => vec![],
            Split::ByteByByte => (1..bytes.len()).collect(),
            Split::Random(seed) => {
                let mut s = seed ^ (step as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let n = xorshift(&mut s) % 6;
                (0..n)
                    .map(|_| (xorshift(&mut s) % (bytes.len() as u64 + 1)) as usize)
                    .collect()
            }
        };
        cuts.sort();
        let mut last = 0;
        cuts.into_iter()
            .chain([bytes.len()])
            .map(|cut| {
                let piece = &bytes[last..cut];
                last = cut;
                piece
            })
            .collect()
    }

    /// Runs the steps through one connection; frame numbers are step indexes + 1.
    fn run(steps: &[Step], keylog: &str, split: Split) -> (Vec<Ev>, TlsFacts) {
        let (tls, events) = run_connection(steps, keylog, split);
        (events, tls.facts().clone())
    }

    /// [`run`], giving the connection itself.
    fn run_connection(steps: &[Step], keylog: &str, split: Split) -> (TlsConnection, Vec<Ev>) {
        run_spaced(steps, keylog, split, 1)
    }

    /// As [`run_connection`], step `i` (0-based) given as frame `(i + 1) * stride`.
    fn run_spaced(
        steps: &[Step],
        keylog: &str,
        split: Split,
        stride: u64,
    ) -> (TlsConnection, Vec<Ev>) {
        let mut keys = KeyLog::new();
        keys.add_nss(keylog.as_bytes(), KeySource::File("test.keys".into()));
        let mut tls = TlsConnection::new(&Limits::default());
        let mut child = Child::default();
        for (i, step) in steps.iter().enumerate() {
            let mark = Mark::new((i as u64 + 1) * stride, 0);
            match step {
                Step::Seg(dir, bytes) => {
                    for piece in pieces(bytes, split, i) {
                        tls.data(&keys, *dir, piece, mark, &mut child);
                    }
                }
                Step::Lost(dir, len) => tls.gap(&keys, *dir, *len, mark, &mut child),
                Step::End(dir, how) => tls.end(*dir, *how, mark, &mut child),
                Step::Keys(text) => {
                    keys.add_nss(text.as_bytes(), KeySource::Embedded);
                }
            }
        }
        (tls, child.0)
    }

    /// Runs whole, byte by byte and at random splits, and requires one answer.
    fn run_all_splits(steps: &[Step], keylog: &str) -> (Vec<Ev>, TlsFacts) {
        let whole = run(steps, keylog, Split::Whole);
        assert_eq!(run(steps, keylog, Split::ByteByByte), whole, "byte by byte");
        for seed in [1u64, 7, 0xdead_beef, 42, 99] {
            assert_eq!(
                run(steps, keylog, Split::Random(seed)),
                whole,
                "seed {seed}"
            );
        }
        whole
    }

    fn plain(content_type: u8, body: &[u8]) -> Vec<u8> {
        let mut r = vec![content_type, 3, 3];
        r.extend_from_slice(&(body.len() as u16).to_be_bytes());
        r.extend_from_slice(body);
        r
    }

    fn hexs(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// One side of a test connection: seals records as a TLS stack would.
    struct Sealer {
        suite: SuiteSpec,
        handshake: Option<RecordKey>,
        app: RecordKey,
        app_secret: Option<Secret>,
        in_app: bool,
        seq: u64,
    }

    impl Sealer {
        fn seal(&mut self, content_type: u8, plaintext: &[u8]) -> Vec<u8> {
            let key = if self.in_app {
                &self.app
            } else {
                self.handshake.as_ref().unwrap()
            };
            let r = key.seal(self.seq, content_type, plaintext, 0);
            self.seq += 1;
            r
        }
        fn enter_application(&mut self) {
            self.in_app = true;
            self.seq = 0;
        }
        fn key_update(&mut self) {
            let next = next_traffic_secret(self.suite.hash, &self.app_secret.unwrap());
            self.app_secret = Some(next);
            self.app = RecordKey::tls13(&self.suite, &next).unwrap();
            self.seq = 0;
        }
    }

    /// A connection's randoms and secrets, its key log, and its two sealers.
    struct Conn {
        suite: SuiteSpec,
        client_random: [u8; 32],
        server_random: [u8; 32],
        keylog: String,
        client: Sealer,
        server: Sealer,
    }

    fn conn(suite_id: u16, tag: u8) -> Conn {
        let suite = supported_suite(suite_id).unwrap();
        let client_random = [tag; 32];
        let mut server_random = [tag.wrapping_add(100); 32];
        server_random[0] = 0x11;
        let cr = hexs(&client_random);
        match suite.protocol {
            Protocol::Tls12 => {
                let master = [tag ^ 0x5a; 48];
                let (c, s) =
                    RecordKey::tls12_pair(&suite, &master, &client_random, &server_random).unwrap();
                let sealer = |app| Sealer {
                    suite,
                    handshake: None,
                    app,
                    app_secret: None,
                    in_app: true,
                    seq: 0,
                };
                Conn {
                    suite,
                    client_random,
                    server_random,
                    keylog: format!("CLIENT_RANDOM {cr} {}\n", hexs(&master)),
                    client: sealer(c),
                    server: sealer(s),
                }
            }
            Protocol::Tls13 => {
                let n = suite.hash.len();
                let secret = |k: u8| Secret::new(&[tag.wrapping_mul(3) ^ k; 48][..n]).unwrap();
                let (chs, shs, cap, sap) = (secret(1), secret(2), secret(3), secret(4));
                let sealer = |hs: Secret, app: Secret| Sealer {
                    suite,
                    handshake: RecordKey::tls13(&suite, &hs),
                    app: RecordKey::tls13(&suite, &app).unwrap(),
                    app_secret: Some(app),
                    in_app: false,
                    seq: 0,
                };
                let line =
                    |label: &str, s: &Secret| format!("{label} {cr} {}\n", hexs(s.as_bytes()));
                Conn {
                    suite,
                    client_random,
                    server_random,
                    keylog: [
                        line("CLIENT_HANDSHAKE_TRAFFIC_SECRET", &chs),
                        line("SERVER_HANDSHAKE_TRAFFIC_SECRET", &shs),
                        line("CLIENT_TRAFFIC_SECRET_0", &cap),
                        line("SERVER_TRAFFIC_SECRET_0", &sap),
                        line("EXPORTER_SECRET", &cap),
                    ]
                    .concat(),
                    client: sealer(chs, cap),
                    server: sealer(shs, sap),
                }
            }
        }
    }

    const REQUEST: &[u8] = b"POST /mcp HTTP/1.1\r\nHost: example\r\nContent-Length: 2\r\n\r\n{}";
    const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n";

    /// The handshake of `c`: the steps, ending with both sides in their application keys.
    fn handshake_steps(c: &mut Conn, client: Direction, psk: bool) -> Vec<Step> {
        let server = client.other();
        let tls13 = c.suite.protocol == Protocol::Tls13;
        let ch = build::client_hello(
            c.client_random,
            "mcp.example",
            &["h2", "http/1.1"],
            tls13,
            psk,
        );
        let mut steps = vec![Step::Seg(client, plain(HANDSHAKE, &ch))];
        if tls13 {
            let sh = build::server_hello(c.server_random, c.suite.id, 0x0304, None);
            let mut flight = plain(HANDSHAKE, &sh);
            flight.extend(plain(CHANGE_CIPHER_SPEC, &[1]));
            let mut msgs = build::encrypted_extensions(Some("http/1.1"));
            if !psk {
                msgs.extend(build::message(11, &[0x30; 700]));
                msgs.extend(build::message(15, &[0x31; 80]));
            }
            msgs.extend(build::message(
                handshake::FINISHED,
                &vec![0x77; c.suite.hash.len()],
            ));
            // The flight is cut into two records, the Finished spanning both.
            let cut = msgs.len() - 10;
            flight.extend(c.server.seal(HANDSHAKE, &msgs[..cut]));
            flight.extend(c.server.seal(HANDSHAKE, &msgs[cut..]));
            c.server.enter_application();
            steps.push(Step::Seg(server, flight));
            let mut fin = plain(CHANGE_CIPHER_SPEC, &[1]);
            fin.extend(
                c.client
                    .seal(HANDSHAKE, &build::message(handshake::FINISHED, &[0x66; 32])),
            );
            c.client.enter_application();
            steps.push(Step::Seg(client, fin));
        } else {
            let sh = build::server_hello(c.server_random, c.suite.id, 0x0303, Some("http/1.1"));
            let mut flight = sh.clone();
            if !psk {
                flight.extend(build::message(11, &[0x30; 900]));
                flight.extend(build::message(12, &[0x32; 300]));
                flight.extend(build::message(14, &[]));
            }
            let mut records = plain(HANDSHAKE, &flight[..flight.len().min(60)]);
            if flight.len() > 60 {
                records.extend(plain(HANDSHAKE, &flight[60..]));
            }
            let fin = build::message(handshake::FINISHED, &[0x55; 12]);
            if psk {
                // Abbreviated handshake: the server sends its Finished first.
                records.extend(plain(CHANGE_CIPHER_SPEC, &[1]));
                records.extend(c.server.seal(HANDSHAKE, &fin));
                steps.push(Step::Seg(server, records));
                let mut cf = plain(CHANGE_CIPHER_SPEC, &[1]);
                cf.extend(c.client.seal(HANDSHAKE, &fin));
                steps.push(Step::Seg(client, cf));
            } else {
                steps.push(Step::Seg(server, records));
                let mut cke = plain(HANDSHAKE, &build::message(16, &[0x41; 66]));
                cke.extend(plain(CHANGE_CIPHER_SPEC, &[1]));
                cke.extend(c.client.seal(HANDSHAKE, &fin));
                steps.push(Step::Seg(client, cke));
                let mut sf = plain(HANDSHAKE, &build::message(4, &[0x42; 100]));
                sf.extend(plain(CHANGE_CIPHER_SPEC, &[1]));
                sf.extend(c.server.seal(HANDSHAKE, &fin));
                steps.push(Step::Seg(server, sf));
            }
        }
        steps
    }

    /// A whole connection: handshake, exchanges (a request, then a response in several
    /// records), close_notify both ways, TCP ends. Also the child events expected.
    fn full_flow(
        c: &mut Conn,
        client: Direction,
        psk: bool,
        exchanges: usize,
    ) -> (Vec<Step>, Vec<Ev>) {
        let server = client.other();
        let mut steps = handshake_steps(c, client, psk);
        let mut expected = Vec::new();
        if c.suite.protocol == Protocol::Tls13 {
            // A NewSessionTicket first, as servers send, consumed by the layer.
            steps.push(Step::Seg(
                server,
                c.server.seal(HANDSHAKE, &build::message(4, &[9; 60])),
            ));
        }
        for i in 0..exchanges {
            let request = [REQUEST, format!("{i}").as_bytes()].concat();
            steps.push(Step::Seg(client, c.client.seal(APPLICATION_DATA, &request)));
            expected.push(Ev::Data(client, request, steps.len() as u64));
            let mut seg = Vec::new();
            for part in [
                RESPONSE.to_vec(),
                vec![b'e'; 3000],
                format!("data: {i}\n\n").into_bytes(),
            ] {
                seg.extend(c.server.seal(APPLICATION_DATA, &part));
                expected.push(Ev::Data(server, part, steps.len() as u64 + 1));
            }
            steps.push(Step::Seg(server, seg));
        }
        steps.push(Step::Seg(client, c.client.seal(ALERT, &[1, 0])));
        expected.push(Ev::End(client, StreamEnd::Fin, steps.len() as u64));
        steps.push(Step::Seg(server, c.server.seal(ALERT, &[1, 0])));
        expected.push(Ev::End(server, StreamEnd::Fin, steps.len() as u64));
        steps.push(Step::End(client, StreamEnd::Fin));
        steps.push(Step::End(server, StreamEnd::Fin));
        (steps, expected)
    }

    const ALL_SUITES: [u16; 9] = [
        0x1301, 0x1302, 0x1303, 0xC02F, 0xC030, 0x009C, 0xC02B, 0xCCA8, 0xCCA9,
    ];

    #[test]
    fn every_suite_round_trips_whole_byte_by_byte_and_split() {
        for (i, id) in ALL_SUITES.into_iter().enumerate() {
            for client in [Forward, Reverse] {
                let mut c = conn(id, i as u8 + 1);
                let (steps, expected) = full_flow(&mut c, client, false, 2);
                let (events, facts) = run_all_splits(&steps, &c.keylog);
                assert_eq!(events, expected, "{}", cipher_suite_name(id));
                assert_eq!(facts.status, TlsStatus::Decrypting);
                assert_eq!(facts.client, Some(client));
                assert_eq!(facts.cipher_suite, Some(id));
                assert_eq!(facts.sni.as_deref(), Some("mcp.example"));
                assert_eq!(facts.alpn.as_deref(), Some("http/1.1"));
                assert_eq!(facts.key_source, Some(KeySource::File("test.keys".into())));
                assert_eq!(
                    (facts.auth_failures, facts.resyncs, facts.records_lost),
                    (0, 0, 0)
                );
                let version = if c.suite.protocol == Protocol::Tls13 {
                    TLS13
                } else {
                    TLS12
                };
                assert_eq!(facts.version, Some(version));
            }
        }
    }

    /// The whole application stack of a TLS connection: the detector holds the first bytes
    /// until they say TLS, then hands them to a TLS layer above a new detector of the
    /// plaintext, which finds HTTP/1.1. However the segments are cut, the same exchanges come
    /// out, with the same marks.
    #[test]
    fn the_stack_reads_the_same_exchanges_from_tls_however_the_segments_are_cut() {
        use crate::app::testing::{Event, Recorder};
        use crate::app::{AppCtx, AppStack, Coverage};
        for (i, id) in ALL_SUITES.into_iter().enumerate() {
            let mut c = conn(id, i as u8 + 31);
            let (steps, _) = full_flow(&mut c, Forward, false, 2);
            let limits = Limits::default();
            let mut answers: Vec<Vec<Event>> = Vec::new();
            for split in [Split::Whole, Split::ByteByByte, Split::Random(7)] {
                let mut keys = KeyLog::new();
                keys.add_nss(c.keylog.as_bytes(), KeySource::File("test.keys".into()));
                let mut stack = AppStack::new(true);
                let mut rec = Recorder::default();
                for (n, step) in steps.iter().enumerate() {
                    let mark = Mark::new(n as u64 + 1, 0);
                    let ctx = AppCtx {
                        limits: &limits,
                        keys: &keys,
                    };
                    let (dir, bytes) = match step {
                        Step::Seg(dir, bytes) => (*dir, bytes),
                        Step::Lost(dir, len) => {
                            stack.gap(ctx, *dir, *len, mark, &mut rec);
                            continue;
                        }
                        Step::End(dir, how) => {
                            stack.end(ctx, *dir, *how, mark, &mut rec);
                            continue;
                        }
                        Step::Keys(text) => {
                            keys.add_nss(text.as_bytes(), KeySource::Embedded);
                            continue;
                        }
                    };
                    for piece in pieces(bytes, split, n) {
                        stack.data(ctx, dir, piece, mark, &mut rec);
                    }
                }
                let name = cipher_suite_name(id);
                let requests = rec.events.iter().filter(|e| matches!(e, Event::Request(_)));
                let responses = rec
                    .events
                    .iter()
                    .filter(|e| matches!(e, Event::Response(_)));
                // The first answer, an event stream of no length, runs to the connection's
                // end: the second is read as its body.
                assert_eq!((requests.count(), responses.count()), (2, 1), "{name}");
                assert!(
                    stack.tls().is_some_and(|f| f.records_decrypted > 0),
                    "{name}"
                );
                assert_eq!(stack.client_direction(), Some(Forward), "{name}");
                assert_eq!(stack.coverage(true), Coverage::Read("tls/http1"), "{name}");
                answers.push(rec.events);
            }
            assert!(
                answers.windows(2).all(|w| w[0] == w[1]),
                "{}",
                cipher_suite_name(id)
            );
        }
    }

    /// A direction's held input is a queue in order, made with its first item and freed
    /// with its last, however it empties.
    #[test]
    fn held_input_is_kept_in_order_and_freed_when_gone() {
        let item = |a: u64| (a, Held::Gap(a), Mark::default());
        let mut q = HeldQueue::default();
        assert!(q.is_empty() && q.0.is_none() && q.front().is_none() && q.pop_front().is_none());
        q.push_back(item(2));
        q.push_back(item(3));
        q.push_front(item(1));
        assert_eq!((q.len(), q.front().map(|i| i.0)), (3, Some(1)));
        if let Some((_, Held::Gap(n), _)) = q.back_mut() {
            *n = 30;
        }
        let popped: Vec<_> = std::iter::from_fn(|| q.pop_front())
            .map(|(a, held, _)| match held {
                Held::Gap(n) => (a, n),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(popped, vec![(1, 1), (2, 2), (3, 30)]);
        assert!(q.is_empty() && q.0.is_none());
        q.push_back(item(4));
        assert!(!q.is_empty());
        q.clear();
        assert!(q.is_empty() && q.0.is_none());
    }

    /// Thousands of connections are open at once in a busy capture, most between records:
    /// what each keeps is its state (boxed, at most 640 bytes: the allocator's 640-byte
    /// class, where 641 would take the 768-byte one), one key per direction once the
    /// handshake is over, and no record buffer.
    #[test]
    fn a_connection_between_records_keeps_its_keys_and_no_buffers() {
        assert!(
            size_of::<TlsConnection>() <= 640,
            "{}",
            size_of::<TlsConnection>()
        );
        for (i, id) in ALL_SUITES.into_iter().enumerate() {
            let mut c = conn(id, i as u8 + 101);
            let (steps, expected) = full_flow(&mut c, Forward, false, 2);
            for split in [Split::Whole, Split::ByteByByte, Split::Random(3)] {
                let (tls, events) = run_connection(&steps, &c.keylog, split);
                assert_eq!(events, expected, "{}", cipher_suite_name(id));
                for half in &tls.halves {
                    assert_eq!(half.epoch, Epoch::Application);
                    assert!(half.app_key.is_some());
                    assert!(half.handshake_key.is_none() && half.early_key.is_none());
                    assert_eq!(half.framing.buffered(), 0);
                }
            }
        }
    }

    /// A direction whose records come far apart (more than [`PARK_AFTER_FRAMES`] frames)
    /// parks its key after each, and so does a direction that fell silent that long: each
    /// record then opens with its key expanded again, and reads as it does when records come
    /// close together, where keys stay expanded.
    #[test]
    fn keys_parked_between_records_far_apart_open_the_same() {
        let stride = PARK_AFTER_FRAMES + 1;
        for (i, id) in ALL_SUITES.into_iter().enumerate() {
            let name = cipher_suite_name(id);
            let mut c = conn(id, i as u8 + 121);
            let (steps, expected) = full_flow(&mut c, Forward, false, 3);
            let spaced_expected: Vec<Ev> = expected
                .iter()
                .map(|e| match e.clone() {
                    Ev::Data(d, b, f) => Ev::Data(d, b, f * stride),
                    Ev::Gap(d, l, f) => Ev::Gap(d, l, f * stride),
                    Ev::End(d, how, f) => Ev::End(d, how, f * stride),
                })
                .collect();
            // Up to the client's closing alert: a record far from the client's last one, and
            // the server's last records (three in one segment) far behind it.
            let open = &steps[..steps.len() - 3];
            for split in [Split::Whole, Split::ByteByByte, Split::Random(7)] {
                let (_, events) = run_spaced(&steps, &c.keylog, split, stride);
                assert_eq!(events, spaced_expected, "{name}");
                let (tls, _) = run_spaced(open, &c.keylog, split, stride);
                for half in &tls.halves {
                    let key = half.app_key.as_ref().expect("the application key");
                    assert!(!key.is_expanded(), "{name}: a key far from its last record");
                }
                let (tls, _) = run_spaced(open, &c.keylog, split, 1);
                for half in &tls.halves {
                    let key = half.app_key.as_ref().expect("the application key");
                    assert!(key.is_expanded(), "{name}: a key its records keep busy");
                }
            }
        }
    }

    #[test]
    fn resumption_tls12_abbreviated_and_tls13_psk() {
        for (id, tag) in [(0xC02F, 31), (0x1301, 32)] {
            let mut c = conn(id, tag);
            let (steps, expected) = full_flow(&mut c, Forward, true, 1);
            let (events, facts) = run_all_splits(&steps, &c.keylog);
            assert_eq!(events, expected);
            assert!(facts.resumption_offered);
        }
    }

    #[test]
    fn rfc8448_client_records_through_the_connection() {
        // RFC 8448 §3's client Finished and application data record, behind hellos built here
        // (the layer reads only the random and suite from them), under the RFC's secrets.
        let random = [0xcb; 32];
        let cr = hexs(&random);
        let keylog = format!(
            "CLIENT_HANDSHAKE_TRAFFIC_SECRET {cr} {}\nSERVER_HANDSHAKE_TRAFFIC_SECRET {cr} {}\n\
             CLIENT_TRAFFIC_SECRET_0 {cr} {}\nSERVER_TRAFFIC_SECRET_0 {cr} {}\n",
            hex(RFC8448_CLIENT_HS_SECRET)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
            hexs(&hex(RFC8448_SERVER_HS_SECRET)),
            hexs(&hex(RFC8448_CLIENT_AP_SECRET)),
            hexs(&hex(RFC8448_SERVER_AP_SECRET)),
        );
        let ch = build::client_hello(random, "server", &[], true, false);
        let sh = build::server_hello([0xa6; 32], 0x1301, 0x0304, None);
        // {client} send alert record: close_notify under the application key, sequence 1.
        let alert = "17 03 03 00 13 c9 87 27 60 65 56 66 b7 4d 7f f1 15 3e fd 6d b6 d0 b0 e3";
        let steps = vec![
            Step::Seg(Forward, plain(HANDSHAKE, &ch)),
            Step::Seg(Reverse, plain(HANDSHAKE, &sh)),
            Step::Seg(Forward, hex(RFC8448_CLIENT_FINISHED_RECORD)),
            Step::Seg(Forward, hex(RFC8448_CLIENT_APP_RECORD)),
            Step::Seg(Forward, hex(alert)),
        ];
        let (events, facts) = run_all_splits(&steps, &keylog);
        assert_eq!(
            events,
            vec![
                Ev::Data(Forward, (0u8..=0x31).collect(), 4),
                Ev::End(Forward, StreamEnd::Fin, 5)
            ]
        );
        assert_eq!(facts.records_decrypted, 3);
    }

    /// Steps of a flow with an application record's bytes, or part of them, taken out as a
    /// loss. `record` counts application records from the first exchange's request.
    fn cut(steps: &[Step], seg: usize, from: usize, len: usize) -> Vec<Step> {
        let mut out = Vec::new();
        for (i, s) in steps.iter().enumerate() {
            match s {
                Step::Seg(d, bytes) if i == seg => {
                    let end = (from + len).min(bytes.len());
                    if from > 0 {
                        out.push(Step::Seg(*d, bytes[..from].to_vec()));
                    }
                    out.push(Step::Lost(*d, (end - from) as u64));
                    if end < bytes.len() {
                        out.push(Step::Seg(*d, bytes[end..].to_vec()));
                    }
                }
                other => out.push(other.clone()),
            }
        }
        out
    }

    fn data_of(events: &[Ev], dir: Direction) -> Vec<Vec<u8>> {
        events
            .iter()
            .filter_map(|e| match e {
                Ev::Data(d, b, _) if *d == dir => Some(b.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_loss_inside_a_record_is_recovered_with_the_exact_plaintext_length() {
        for (i, id) in [0x1301, 0x1303, 0xC02F, 0xC030, 0xCCA8]
            .into_iter()
            .enumerate()
        {
            let mut c = conn(id, 50 + i as u8);
            let (steps, _) = full_flow(&mut c, Forward, false, 3);
            // The server segment of the second exchange: records RESPONSE, 3000 'e', data.
            let seg = steps
                .iter()
                .enumerate()
                .filter(|(_, s)| matches!(s, Step::Seg(Reverse, b) if b.len() > 3000))
                .nth(1)
                .unwrap()
                .0;
            let Step::Seg(_, bytes) = &steps[seg] else {
                unreachable!()
            };
            let first_len = 5 + usize::from(u16::from_be_bytes([bytes[3], bytes[4]]));
            // Lose from inside the first record to inside the second: both records are lost,
            // the third is found by search (the second's header is gone).
            let lossy = cut(&steps, seg, 20, first_len + 10);
            let (events, facts) = run_all_splits(&lossy, &c.keylog);
            let gap = events.iter().find_map(|e| match e {
                Ev::Gap(Reverse, n, _) => Some(*n),
                _ => None,
            });
            assert_eq!(
                gap,
                Some((RESPONSE.len() + 3000) as u64),
                "{}",
                cipher_suite_name(id)
            );
            let server = data_of(&events, Reverse);
            assert!(server.contains(&b"data: 1\n\n".to_vec()));
            assert!(
                server.contains(&b"data: 2\n\n".to_vec()),
                "records after the loss are read"
            );
            assert_eq!(
                (facts.resyncs, facts.records_lost, facts.auth_failures),
                (1, 2, 0)
            );
            assert!(events.contains(&Ev::End(Reverse, StreamEnd::Fin, lossy.len() as u64 - 2)));

            // A loss that ends inside the record whose header was seen: the boundary is known.
            let lossy = cut(&steps, seg, 20, 30);
            let (events, facts) = run_all_splits(&lossy, &c.keylog);
            assert!(events.contains(&Ev::Gap(Reverse, RESPONSE.len() as u64, seg as u64 + 3)));
            assert_eq!((facts.resyncs, facts.records_lost), (1, 1));
        }
    }

    #[test]
    fn a_loss_of_whole_records_between_segments_is_recovered() {
        for (i, id) in [0x1302, 0x1303, 0xC02B, 0xCCA9].into_iter().enumerate() {
            let mut c = conn(id, 70 + i as u8);
            let (steps, _) = full_flow(&mut c, Forward, false, 4);
            let seg = steps
                .iter()
                .enumerate()
                .filter(|(_, s)| matches!(s, Step::Seg(Reverse, b) if b.len() > 3000))
                .nth(1)
                .unwrap()
                .0;
            let Step::Seg(_, bytes) = &steps[seg] else {
                unreachable!()
            };
            let lossy = cut(&steps, seg, 0, bytes.len());
            let (events, facts) = run_all_splits(&lossy, &c.keylog);
            let lost_plain = (RESPONSE.len() + 3000 + b"data: 1\n\n".len()) as u64;
            assert!(
                events
                    .iter()
                    .any(|e| matches!(e, Ev::Gap(Reverse, n, _) if *n == lost_plain))
            );
            assert_eq!(
                (facts.resyncs, facts.records_lost),
                (1, 3),
                "{}",
                cipher_suite_name(id)
            );
        }
    }

    #[test]
    fn a_loss_with_nothing_recoverable_after_it_is_one_unknown_gap() {
        let mut c = conn(0x1301, 90);
        let (mut steps, _) = full_flow(&mut c, Forward, false, 1);
        let end = steps.len() - 2;
        // After the loss only garbage comes, then the TCP end.
        steps.insert(end, Step::Lost(Reverse, 100));
        steps.insert(end + 1, Step::Seg(Reverse, vec![0x17; 40]));
        steps.remove(end - 1); // the server's close_notify
        let (events, facts) = run_all_splits(&steps, &c.keylog);
        let after: Vec<&Ev> = events
            .iter()
            .filter(|e| !matches!(e, Ev::Data(..)))
            .collect();
        assert!(after.contains(&&Ev::Gap(Reverse, 0, steps.len() as u64)));
        assert!(after.contains(&&Ev::End(Reverse, StreamEnd::Fin, steps.len() as u64)));
        assert_eq!((facts.resyncs, facts.resync_failures), (0, 1));
    }

    #[test]
    fn wrong_keys_forward_no_plaintext() {
        for id in [0x1301, 0xC02F, 0xCCA8] {
            let mut c = conn(id, 100);
            let other = conn(id, 101);
            let keylog = other
                .keylog
                .replace(&hexs(&other.client_random), &hexs(&c.client_random));
            let (steps, _) = full_flow(&mut c, Forward, false, 2);
            let (events, facts) = run_all_splits(&steps, &keylog);
            assert!(
                events.iter().all(|e| !matches!(e, Ev::Data(..))),
                "{events:?}"
            );
            assert_eq!(facts.status, TlsStatus::KeysWrong);
            assert!(facts.auth_failures >= 1);
            for dir in [Forward, Reverse] {
                let gaps = events
                    .iter()
                    .filter(|e| matches!(e, Ev::Gap(d, 0, _) if *d == dir))
                    .count();
                let ends = events
                    .iter()
                    .filter(|e| matches!(e, Ev::End(d, StreamEnd::Fin, _) if *d == dir))
                    .count();
                assert_eq!((gaps, ends), (1, 1));
            }
        }
    }

    #[test]
    fn keys_arriving_late_are_used_and_keys_never_arriving_give_no_keys() {
        for id in [0x1301, 0xC030] {
            let mut c = conn(id, 110);
            let (steps, expected) = full_flow(&mut c, Forward, false, 2);
            // The key log lines come as a Decryption Secrets Block after the third exchange
            // segment: everything before is held, then decrypted in order.
            let mut late = steps.clone();
            late.insert(7, Step::Keys(c.keylog.clone()));
            let (events, facts) = run_all_splits(&late, "");
            let shift = |e: &Ev| match e.clone() {
                Ev::Data(d, b, f) if f >= 8 => Ev::Data(d, b, f + 1),
                Ev::End(d, h, f) if f >= 8 => Ev::End(d, h, f + 1),
                other => other,
            };
            let expected_late: Vec<Ev> = expected.iter().map(shift).collect();
            assert_eq!(events, expected_late);
            assert_eq!(facts.key_source, Some(KeySource::Embedded));

            let (events, facts) = run_all_splits(&steps, "");
            assert_eq!(facts.status, TlsStatus::NoKeys);
            assert!(events.iter().all(|e| !matches!(e, Ev::Data(..))));
            let last = steps.len() as u64 - 1;
            assert!(events.contains(&Ev::Gap(Forward, 0, last)));
            assert!(events.contains(&Ev::Gap(Reverse, 0, last)));
            assert!(events.contains(&Ev::End(Forward, StreamEnd::Fin, last)));
            assert!(events.contains(&Ev::End(Reverse, StreamEnd::Fin, last + 1)));
        }
    }

    #[test]
    fn held_input_beyond_the_bound_gives_no_keys_at_once() {
        let mut c = conn(0x1301, 120);
        let mut steps = handshake_steps(&mut c, Forward, false);
        for _ in 0..20 {
            steps.push(Step::Seg(
                Reverse,
                c.server.seal(APPLICATION_DATA, &[b'x'; 16000]),
            ));
        }
        steps.push(Step::Keys(c.keylog.clone()));
        steps.push(Step::Seg(Reverse, c.server.seal(APPLICATION_DATA, b"late")));
        let (events, facts) = run(&steps, "", Split::Whole);
        assert_eq!(facts.status, TlsStatus::NoKeys);
        assert!(events.iter().all(|e| !matches!(e, Ev::Data(..))));
        assert_eq!(
            events
                .iter()
                .filter(|e| matches!(e, Ev::Gap(Reverse, 0, _)))
                .count(),
            1
        );
    }

    #[test]
    fn hello_retry_request_then_second_hello() {
        let mut c = conn(0x1302, 130);
        let ch = build::client_hello(c.client_random, "mcp.example", &["http/1.1"], true, false);
        let hrr = build::server_hello(handshake::HELLO_RETRY_REQUEST_RANDOM, 0x1302, 0x0304, None);
        let mut steps = vec![
            Step::Seg(Forward, plain(HANDSHAKE, &ch)),
            Step::Seg(
                Reverse,
                [plain(HANDSHAKE, &hrr), plain(CHANGE_CIPHER_SPEC, &[1])].concat(),
            ),
            Step::Seg(
                Forward,
                [plain(CHANGE_CIPHER_SPEC, &[1]), plain(HANDSHAKE, &ch)].concat(),
            ),
        ];
        let (rest, expected) = full_flow(&mut c, Forward, false, 1);
        steps.extend(rest.into_iter().skip(1));
        let expected: Vec<Ev> = expected
            .into_iter()
            .map(|e| match e {
                Ev::Data(d, b, f) => Ev::Data(d, b, f + 2),
                Ev::End(d, h, f) => Ev::End(d, h, f + 2),
                g => g,
            })
            .collect();
        let (events, facts) = run_all_splits(&steps, &c.keylog);
        assert_eq!(events, expected);
        assert!(facts.hello_retry_request);
        assert_eq!(facts.version, Some(TLS13));
    }

    #[test]
    fn key_update_is_followed() {
        let mut c = conn(0x1303, 140);
        let mut steps = handshake_steps(&mut c, Forward, false);
        steps.push(Step::Seg(
            Forward,
            c.client.seal(APPLICATION_DATA, b"before"),
        ));
        steps.push(Step::Seg(
            Forward,
            c.client.seal(HANDSHAKE, &build::message(24, &[0])),
        ));
        c.client.key_update();
        steps.push(Step::Seg(
            Forward,
            c.client.seal(APPLICATION_DATA, b"after"),
        ));
        // A second KeyUpdate whose record is lost: the search tries the next generation.
        let lost = c.client.seal(HANDSHAKE, &build::message(24, &[0]));
        c.client.key_update();
        steps.push(Step::Lost(Forward, lost.len() as u64));
        steps.push(Step::Seg(
            Forward,
            c.client.seal(APPLICATION_DATA, b"after the lost one"),
        ));
        // Whether that record ends where its segment ends is known at the end of the stream.
        steps.push(Step::End(Forward, StreamEnd::Fin));
        let (events, facts) = run_all_splits(&steps, &c.keylog);
        assert_eq!(
            data_of(&events, Forward),
            vec![
                b"before".to_vec(),
                b"after".to_vec(),
                b"after the lost one".to_vec()
            ]
        );
        assert_eq!((facts.key_updates, facts.resyncs), (2, 1));
    }

    #[test]
    fn fatal_alert_ends_with_rst_and_later_tcp_end_is_swallowed() {
        let mut c = conn(0xC02F, 150);
        let mut steps = handshake_steps(&mut c, Forward, false);
        steps.push(Step::Seg(Reverse, c.server.seal(ALERT, &[2, 40])));
        steps.push(Step::Seg(
            Reverse,
            c.server.seal(APPLICATION_DATA, b"after the alert"),
        ));
        steps.push(Step::End(Reverse, StreamEnd::Fin));
        steps.push(Step::End(Forward, StreamEnd::Rst));
        let (events, _) = run_all_splits(&steps, &c.keylog);
        assert_eq!(
            events,
            vec![
                Ev::End(Reverse, StreamEnd::Rst, 5),
                Ev::End(Forward, StreamEnd::Rst, 8)
            ]
        );
    }

    #[test]
    fn unsupported_suites_and_versions_are_named() {
        for (suite, version, name) in [
            (0xC013, 0x0303, "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"),
            (0x1304, 0x0304, "TLS_AES_128_CCM_SHA256"),
            (0xC02F, 0x0302, "TLS 1.1"),
            (0x002F, 0x0300, "SSL 3.0"),
        ] {
            let c = conn(0xC02F, 160);
            let ch = build::client_hello(c.client_random, "x", &[], false, false);
            let sh = build::server_hello(c.server_random, suite, version, None);
            let steps = vec![
                Step::Seg(Forward, plain(HANDSHAKE, &ch)),
                Step::Seg(Reverse, plain(HANDSHAKE, &sh)),
                Step::Seg(
                    Forward,
                    [plain(CHANGE_CIPHER_SPEC, &[1]), plain(HANDSHAKE, &[7; 64])].concat(),
                ),
                Step::Seg(Forward, plain(APPLICATION_DATA, &[8; 64])),
                Step::Seg(Reverse, plain(APPLICATION_DATA, &[8; 64])),
                Step::End(Forward, StreamEnd::Fin),
            ];
            let (events, facts) = run_all_splits(&steps, &c.keylog);
            let TlsStatus::Unsupported(what) = facts.status else {
                panic!("{:?}", facts.status);
            };
            assert_eq!(what.name(), name);
            // Before TLS 1.3 protection starts after the ChangeCipherSpec; in TLS 1.3 only
            // application_data records are protected.
            let first = if version == 0x0304 { 4 } else { 3 };
            assert_eq!(
                events,
                vec![
                    Ev::Gap(Forward, 0, first),
                    Ev::Gap(Reverse, 0, 5),
                    Ev::End(Forward, StreamEnd::Fin, 6)
                ]
            );
        }
    }

    #[test]
    fn capture_starting_mid_connection_forwards_nothing_but_ends() {
        let mut c = conn(0x1301, 170);
        let (steps, _) = full_flow(&mut c, Forward, false, 2);
        let late: Vec<Step> = steps.into_iter().skip(4).collect();
        let (events, facts) = run_all_splits(&late, &c.keylog);
        assert_eq!(facts.status, TlsStatus::HandshakeNotCaptured);
        assert!(events.iter().all(|e| matches!(e, Ev::End(..))));
        assert_eq!(events.len(), 2);
    }

    #[test]
    fn not_tls_and_hostile_lengths_never_panic_or_forward() {
        let steps = vec![
            Step::Seg(Forward, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
            Step::Seg(Reverse, b"HTTP/1.1 200 OK\r\n\r\n".to_vec()),
        ];
        let (events, facts) = run_all_splits(&steps, "");
        assert_eq!((events, facts.status), (vec![], TlsStatus::NotTls));

        let mut c = conn(0x1301, 180);
        let mut steps = handshake_steps(&mut c, Forward, false);
        // A record header announcing 65535 bytes, then a handshake message announcing 2^24.
        steps.push(Step::Seg(Reverse, vec![23, 3, 3, 0xff, 0xff, 0, 0, 0]));
        steps.push(Step::Seg(
            Forward,
            plain(HANDSHAKE, &[1, 0xff, 0xff, 0xff, 0]),
        ));
        steps.push(Step::End(Reverse, StreamEnd::Fin));
        steps.push(Step::End(Forward, StreamEnd::Fin));
        let (events, _) = run_all_splits(&steps, &c.keylog);
        assert!(events.iter().all(|e| !matches!(e, Ev::Data(..))));
    }

    #[test]
    fn records_that_never_authenticate_cost_bounded_work() {
        let mut c = conn(0x1301, 200);
        let mut steps = handshake_steps(&mut c, Forward, false);
        steps.push(Step::Seg(Reverse, c.server.seal(APPLICATION_DATA, b"good")));
        // 300 well-framed 16 KiB records of noise: each fails, each starts a search.
        let mut noise = Vec::new();
        for i in 0..300u32 {
            noise.extend(plain(APPLICATION_DATA, &vec![(i % 251) as u8; 16 * 1024]));
        }
        steps.push(Step::Seg(Reverse, noise));
        steps.push(Step::End(Reverse, StreamEnd::Fin));
        let started = std::time::Instant::now();
        let mut tls = TlsConnection::new(&Limits::default());
        let mut keys = KeyLog::new();
        keys.add_nss(c.keylog.as_bytes(), KeySource::Embedded);
        let mut child = Child::default();
        for (i, step) in steps.iter().enumerate() {
            let mark = Mark::new(i as u64 + 1, 0);
            match step {
                Step::Seg(d, b) => tls.data(&keys, *d, b, mark, &mut child),
                Step::End(d, h) => tls.end(*d, *h, mark, &mut child),
                _ => {}
            }
        }
        assert!(tls.trials <= MAX_TRIALS_PER_CONNECTION);
        assert_eq!(data_of(&child.0, Reverse), vec![b"good".to_vec()]);
        assert!(child.0.contains(&Ev::Gap(Reverse, 0, 5)));
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
    }

    /// The key log of the `tls_record` fuzz harness (`fuzz/src/lib.rs`, `FUZZ_KEYLOG`).
    fn fuzz_keylog() -> String {
        let random = "00".repeat(32);
        [
            ("CLIENT_RANDOM", "11".repeat(48)),
            ("CLIENT_HANDSHAKE_TRAFFIC_SECRET", "22".repeat(32)),
            ("SERVER_HANDSHAKE_TRAFFIC_SECRET", "33".repeat(32)),
            ("CLIENT_TRAFFIC_SECRET_0", "44".repeat(32)),
            ("SERVER_TRAFFIC_SECRET_0", "55".repeat(32)),
        ]
        .iter()
        .map(|(label, secret)| format!("{label} {random} {secret}\n"))
        .collect()
    }

    /// Steps from the `tls_record` fuzz harness's encoding (see `fuzz/src/lib.rs`).
    fn fuzz_steps(data: &[u8]) -> Vec<Step> {
        let mut steps = Vec::new();
        let mut rest = data;
        while let [op, n, tail @ ..] = rest {
            rest = tail;
            let dir = if op & 1 == 0 { Forward } else { Reverse };
            match (op >> 1) % 8 {
                0..=4 => {
                    let len = if op & 0x80 != 0 {
                        usize::from(*n) * 64
                    } else {
                        usize::from(*n)
                    };
                    let (bytes, tail) = rest.split_at(len.min(rest.len()));
                    rest = tail;
                    steps.push(Step::Seg(dir, bytes.to_vec()));
                }
                5 => steps.push(Step::Lost(dir, u64::from(*n) * 7)),
                6 => steps.push(Step::End(dir, StreamEnd::Fin)),
                _ => steps.push(Step::Keys(fuzz_keylog())),
            }
        }
        steps
    }

    /// The inputs the `tls_record` fuzz target found bugs with
    /// (`fixtures/malformed/fuzz/tls_record/`): one answer whole, byte by byte and at random
    /// splits.
    #[test]
    fn fuzz_found_inputs_give_one_answer_for_any_split() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/malformed/fuzz/tls_record");
        let mut paths: Vec<_> = std::fs::read_dir(&dir)
            .expect("fixture dir")
            .flatten()
            .map(|e| e.path())
            .collect();
        paths.sort();
        assert!(!paths.is_empty());
        for path in paths {
            let mut steps = fuzz_steps(&std::fs::read(&path).unwrap());
            // The harness ends every direction not ended yet, as TCP would at capture end.
            for dir in [Forward, Reverse] {
                if !steps
                    .iter()
                    .any(|s| matches!(s, Step::End(d, _) if *d == dir))
                {
                    steps.push(Step::End(dir, StreamEnd::CaptureEnd));
                }
            }
            run_all_splits(&steps, &fuzz_keylog());
        }
    }

    /// Writes seeds for the `tls_record` fuzz target into `$FUZZ_SEED_DIR`: whole connections
    /// under the fuzz harness's fixed key log (client random of zeros), in its step encoding,
    /// so the fuzzer starts from inputs that decrypt. Run with
    /// `FUZZ_SEED_DIR=fuzz/corpus/tls_record cargo test --lib write_tls_fuzz_seeds -- --ignored`.
    #[test]
    #[ignore]
    fn write_tls_fuzz_seeds() {
        let Some(out) = std::env::var_os("FUZZ_SEED_DIR") else {
            return;
        };
        std::fs::create_dir_all(&out).unwrap();
        for id in [0x1301, 0x1303, 0xC02F, 0xCCA8] {
            let mut c = conn(id, 0);
            let suite = c.suite;
            if suite.protocol == Protocol::Tls13 {
                let key =
                    |b: u8| RecordKey::tls13(&suite, &Secret::new(&[b; 32]).unwrap()).unwrap();
                c.client.handshake = Some(key(0x22));
                c.server.handshake = Some(key(0x33));
                c.client.app = key(0x44);
                c.server.app = key(0x55);
                c.client.app_secret = Secret::new(&[0x44; 32]);
                c.server.app_secret = Secret::new(&[0x55; 32]);
            } else {
                let (ck, sk) =
                    RecordKey::tls12_pair(&suite, &[0x11; 48], &[0; 32], &c.server_random).unwrap();
                c.client.app = ck;
                c.server.app = sk;
            }
            c.client_random = [0; 32];
            let (steps, _) = full_flow(&mut c, Forward, false, 2);
            let mut seed = Vec::new();
            for step in &steps {
                match step {
                    Step::Seg(dir, bytes) => {
                        for chunk in bytes.chunks(255) {
                            seed.extend([dir.index() as u8, chunk.len() as u8]);
                            seed.extend_from_slice(chunk);
                        }
                    }
                    Step::End(dir, _) => seed.extend([dir.index() as u8 | 6 << 1, 0]),
                    _ => {}
                }
            }
            let path = std::path::Path::new(&out).join(cipher_suite_name(id));
            std::fs::write(path, seed).unwrap();
        }
    }

    #[test]
    fn early_data_is_read_with_the_early_secret() {
        let mut c = conn(0x1301, 190);
        let cr = hexs(&c.client_random);
        let early_secret = Secret::new(&[0xee; 32]).unwrap();
        let early = RecordKey::tls13(&c.suite, &early_secret).unwrap();
        let keylog = format!(
            "{}CLIENT_EARLY_TRAFFIC_SECRET {cr} {}\n",
            c.keylog,
            hexs(early_secret.as_bytes())
        );
        let mut steps = handshake_steps(&mut c, Forward, true);
        // 0-RTT: the client's early record follows its ClientHello, before the ServerHello.
        steps.insert(
            1,
            Step::Seg(Forward, early.seal(0, APPLICATION_DATA, b"GET /early", 0)),
        );
        let (events, facts) = run_all_splits(&steps, &keylog);
        assert_eq!(data_of(&events, Forward), vec![b"GET /early".to_vec()]);
        assert_eq!(facts.early_data_records, 1);
    }

    /// Reads a capture through the crate's own capture reader, decoder and TCP reassembly,
    /// and decrypts every TCP connection with the key log beside it. Returns, per connection,
    /// the decrypted records of each direction (client first) and the facts.
    /// `drop` names frames whose TCP payload is left out, as if the capture had lost them.
    fn decrypt_capture(
        pcap: &std::path::Path,
        keylog: &[u8],
        drop: &[u64],
    ) -> Vec<([Vec<Vec<u8>>; 2], TlsFacts)> {
        use crate::input::capture::CaptureReader;
        use crate::net::decode::{self, Endpoint};
        use crate::net::tcp::{TcpConnection, TcpSegment};

        struct Bridge<'a> {
            tls: &'a mut TlsConnection,
            keys: &'a KeyLog,
            child: &'a mut Child,
        }
        impl StreamSink for Bridge<'_> {
            fn data(&mut self, dir: Direction, bytes: &[u8], mark: Mark) {
                self.tls.data(self.keys, dir, bytes, mark, self.child);
            }
            fn gap(&mut self, dir: Direction, len: u64, mark: Mark) {
                self.tls.gap(self.keys, dir, len, mark, self.child);
            }
            fn end(&mut self, dir: Direction, how: StreamEnd, mark: Mark) {
                self.tls.end(dir, how, mark, self.child);
            }
        }
        struct Flow {
            first: Endpoint,
            tcp: TcpConnection,
            tls: TlsConnection,
            child: Child,
        }

        let mut keys = KeyLog::new();
        let stats = keys.add_nss(keylog, KeySource::File("fixture".into()));
        assert_eq!(stats.malformed, 0, "{:?}", stats.errors);
        let limits = Limits::default();
        let file = std::fs::File::open(pcap).unwrap();
        let mut reader = CaptureReader::open(file, limits.max_block_bytes).unwrap();
        let mut flows: Vec<((Endpoint, Endpoint), Flow)> = Vec::new();
        let mut last = Mark::default();
        while let Some(packet) = reader.next_packet().unwrap() {
            let mark = Mark::new(packet.frame, packet.time_ns);
            last = mark;
            let Ok(tcp) = decode::decode(packet.linktype, packet.data) else {
                continue;
            };
            let key = (tcp.src.min(tcp.dst), tcp.src.max(tcp.dst));
            let i = match flows.iter().position(|(k, _)| *k == key) {
                Some(i) => i,
                None => {
                    flows.push((
                        key,
                        Flow {
                            first: tcp.src,
                            tcp: TcpConnection::new(&limits),
                            tls: TlsConnection::new(&limits),
                            child: Child::default(),
                        },
                    ));
                    flows.len() - 1
                }
            };
            let flow = &mut flows[i].1;
            let dir = if tcp.src == flow.first {
                Forward
            } else {
                Reverse
            };
            if drop.contains(&packet.frame) && !tcp.payload.is_empty() {
                continue;
            }
            let seg = TcpSegment {
                seq: tcp.seq,
                ack: tcp.ack,
                flags: tcp.flags,
                payload: tcp.payload,
                mark,
            };
            let mut bridge = Bridge {
                tls: &mut flow.tls,
                keys: &keys,
                child: &mut flow.child,
            };
            flow.tcp.segment(dir, &seg, &mut bridge);
        }
        flows
            .into_iter()
            .map(|(_, mut flow)| {
                let mut bridge = Bridge {
                    tls: &mut flow.tls,
                    keys: &keys,
                    child: &mut flow.child,
                };
                flow.tcp.finish(StreamEnd::CaptureEnd, last, &mut bridge);
                let facts = flow.tls.facts().clone();
                let client = facts.client.unwrap_or(Forward);
                let mut streams = [Vec::new(), Vec::new()];
                for e in &flow.child.0 {
                    if let Ev::Data(d, b, _) = e {
                        streams[usize::from(*d != client)].push(b.clone());
                    }
                }
                (streams, facts)
            })
            .collect()
    }

    /// The real captures of `fixtures/tls-real/` (Python MCP SDK over HTTPS with OpenSSL's
    /// key log), when present: every connection decrypts to HTTP/1.1 requests and responses,
    /// except those of captures named `*cbc*`, which must be named unsupported.
    /// `MCP_TLS_REAL_DIR` names another folder holding such captures.
    #[test]
    fn real_captures_decrypt_to_http() {
        let dir = std::env::var_os("MCP_TLS_REAL_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tls-real")
            });
        let Ok(entries) = std::fs::read_dir(&dir) else {
            eprintln!("{}: no real TLS captures here; skipped", dir.display());
            return;
        };
        let mut captures: Vec<_> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "pcap" || x == "pcapng"))
            .filter(|p| p.with_extension("keys").exists())
            .collect();
        captures.sort();
        for pcap in captures {
            let keylog = std::fs::read(pcap.with_extension("keys")).unwrap();
            let connections = decrypt_capture(&pcap, &keylog, &[]);
            assert!(!connections.is_empty(), "{}", pcap.display());
            eprintln!("{}: {} connections", pcap.display(), connections.len());
            for ([to_server, to_client], facts) in connections {
                let (to_server, to_client) = (to_server.concat(), to_client.concat());
                eprintln!(
                    "  {:?} {:?} {} records, {} + {} bytes",
                    facts.status,
                    facts.cipher_suite.map(cipher_suite_name),
                    facts.records_decrypted,
                    to_server.len(),
                    to_client.len()
                );
                let what = format!("{}: {facts:?}", pcap.display());
                if pcap.to_string_lossy().contains("cbc") {
                    // A CBC suite: named, unreadable, nothing forwarded.
                    let TlsStatus::Unsupported(unsupported) = &facts.status else {
                        panic!("{what}");
                    };
                    assert!(unsupported.name().contains("_CBC_"), "{what}");
                    assert!(to_server.is_empty() && to_client.is_empty(), "{what}");
                    continue;
                }
                assert_eq!(facts.status, TlsStatus::Decrypting, "{what}");
                assert_eq!(
                    (facts.auth_failures, facts.resync_failures),
                    (0, 0),
                    "{what}"
                );
                let request_line = to_server.split(|&b| b == b'\n').next().unwrap_or(&[]);
                assert!(
                    [&b"GET "[..], b"POST ", b"DELETE "]
                        .iter()
                        .any(|m| request_line.starts_with(m))
                        && request_line.ends_with(b"HTTP/1.1\r"),
                    "{what}: {:?}",
                    String::from_utf8_lossy(request_line)
                );
                assert!(to_client.starts_with(b"HTTP/1.1 "), "{what}");
            }
        }
    }

    /// The real captures again, each with one segment left out at a time, as if the capture
    /// had lost it: wherever the loss falls, nothing fails to authenticate, every record
    /// delivered is one of the records delivered without the loss, in order, and losses inside
    /// the application data are recovered from when a record follows them.
    #[test]
    fn real_captures_recover_from_any_one_lost_segment() {
        let Some(dir) = std::env::var_os("MCP_TLS_REAL_DIR")
            .map(std::path::PathBuf::from)
            .or_else(|| {
                let d = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tls-real");
                d.exists().then_some(d)
            })
        else {
            eprintln!("no real TLS captures; skipped");
            return;
        };
        for name in [
            "py-tls13-aes128",
            "py-tls13-chacha20",
            "py-tls12-aes128gcm",
            "py-tls12-chacha20",
        ] {
            let pcap = dir.join(format!("{name}.pcap"));
            let Ok(keylog) = std::fs::read(pcap.with_extension("keys")) else {
                continue;
            };
            let base = decrypt_capture(&pcap, &keylog, &[]);
            let mut resyncs = 0;
            for frame in 1..=400 {
                for (i, (lossy, facts)) in
                    decrypt_capture(&pcap, &keylog, &[frame]).iter().enumerate()
                {
                    let what = format!("{name} frame {frame} connection {i}: {facts:?}");
                    assert_eq!(facts.auth_failures, 0, "{what}");
                    assert!(
                        matches!(
                            facts.status,
                            TlsStatus::Decrypting | TlsStatus::HandshakeNotCaptured
                        ),
                        "{what}"
                    );
                    for (records, base_records) in lossy.iter().zip(&base[i].0) {
                        // Each record delivered is a base record, in order.
                        let mut from = 0;
                        for record in records {
                            let at = base_records[from..].iter().position(|r| r == record);
                            let at =
                                at.unwrap_or_else(|| panic!("{what}: a record not in the base"));
                            from += at + 1;
                        }
                    }
                    resyncs += facts.resyncs;
                }
            }
            assert!(resyncs >= 12, "{name}: {resyncs} recoveries");
        }
    }
}
