//! TLS secrets from NSS key logs (the `SSLKEYLOGFILE` format), keyed by client random.
//!
//! Input: the bytes of a key log file (whole, or read a block at a time), or of a pcapng
//! Decryption Secrets Block, and where they came from ([`KeySource`]). Lines are
//! `LABEL <client random hex> <secret hex>`.
//! Output: a [`KeyLog`] that answers "which secrets belong to this client random", and per
//! call a [`KeyLogStats`] saying what was read and which lines were not.
//! Invariants: no line is fatal: a malformed line is counted and named by its 1-based number
//! and the rest is still read; unknown labels are counted, not errors; memory is one entry of
//! fixed size per client random, plus the secrets of lines that cannot be read back from a
//! regular file (those of a pipe or the capture, and those far from the client random's first
//! line), plus at most [`MAX_NAMED_ERRORS`] error texts per call (and, reading a file, one
//! block and one line's first bytes). A label seen again for the same client random keeps the
//! first secret (a key log is appended to, and the first line is the one the stack wrote when
//! the connection was made); a differing later value is counted as a conflict. Secrets read
//! back from a file are those first read or none: a file changed since gives nothing from its
//! new bytes, and the lookup is counted ([`KeyLog::stale`]).

use std::cell::RefCell;
use std::fs::File;
use std::hash::BuildHasher;
use std::io::{self, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::HashTable;

use crate::app::tls::crypto::Secret;
use crate::net::flow::FoldHashKey;

/// Malformed lines named in one [`KeyLogStats`]; more are only counted.
pub(crate) const MAX_NAMED_ERRORS: usize = 32;
/// Longest line read; a longer one is malformed (a real line is under 250 bytes).
const MAX_LINE_LEN: usize = 1024;
/// Bytes of a key log file read at a time.
const READ_BLOCK: usize = 256 * 1024;

/// Where secrets came from: a key log file named by the user, or the capture itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KeySource {
    /// Shared by every client random the file names, and by every connection they open.
    File(Arc<str>),
    /// A pcapng Decryption Secrets Block.
    Embedded,
}

/// The secrets logged for one client random, as [`KeyLog::get`] gives them. Each is absent
/// until a line gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SessionSecrets {
    /// TLS 1.2 (and earlier) master secret, always 48 bytes.
    pub master: Option<[u8; 48]>,
    pub client_handshake: Option<Secret>,
    pub server_handshake: Option<Secret>,
    pub client_traffic_0: Option<Secret>,
    pub server_traffic_0: Option<Secret>,
    pub client_early: Option<Secret>,
    /// Accepted and kept only so duplicates are recognised; no decryption uses it.
    pub exporter: Option<Secret>,
    /// Source of the first line for this client random.
    pub source: KeySource,
}

/// One malformed line, by 1-based line number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyLogError {
    pub line: u64,
    pub reason: &'static str,
}

/// What one [`KeyLog::add_nss`] call read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct KeyLogStats {
    /// Lines seen, blank and comment lines included.
    pub lines: u64,
    /// Secrets stored (new label for a client random).
    pub secrets: u64,
    /// Lines repeating a secret already held, with the same value.
    pub duplicates: u64,
    /// Lines repeating a label for a client random with a different value (first kept).
    pub conflicts: u64,
    /// Well-formed lines whose label this tool does not use (counted, not errors).
    pub unknown_labels: u64,
    /// Malformed lines, all counted here.
    pub malformed: u64,
    /// The first [`MAX_NAMED_ERRORS`] malformed lines.
    pub errors: Vec<KeyLogError>,
}

/// All secrets known so far, by client random. Grows as key logs and Decryption Secrets
/// Blocks are read; never shrinks.
///
/// A key log is appended to for as long as its TLS stack runs, and names far more client
/// randoms than one capture opens; it is held for the whole run. One read from a regular file
/// keeps, per client random, where its lines are in that file (a [`Entry`] of 56 bytes, and 4
/// in the table that finds it) and reads them again when a connection asks
/// ([`KeyLog::get`]): about 60 bytes for a TLS 1.3 connection's four secrets, which held in
/// memory take about 220. Lines of one client random further apart than
/// [`DEFAULT_MAX_SPAN`], and lines from a pipe or from the capture (Decryption Secrets Blocks),
/// are held in memory as tagged bytes.
#[derive(Clone, Debug)]
pub(crate) struct KeyLog {
    /// In the order client randoms were first named.
    sessions: Chunked<Entry>,
    /// Positions in `sessions`, by the client random's hash.
    index: HashTable<u32>,
    hasher: FoldHashKey,
    /// Secrets stored so far: a connection waiting for keys looks again only when it moved.
    generation: u64,
    /// Secrets held in memory: each as its label's number, its length (32 or 48), and its
    /// bytes, in the order their lines came; `Entry::held` is a position here plus one.
    held: Vec<Box<[u8]>>,
    /// Where lines came from; `Entry::source` is a position here.
    sources: Vec<Origin>,
    /// Longest stretch of a file one client random's lines may span and still be read back.
    max_span: u32,
    /// Lines read back that no longer said what they said when first read (the file was
    /// changed during the run); shared by the copies made as the capture adds secrets.
    stale: Arc<AtomicU64>,
}

impl Default for KeyLog {
    fn default() -> Self {
        KeyLog {
            sessions: Chunked::default(),
            index: HashTable::new(),
            hasher: FoldHashKey::default(),
            generation: 0,
            held: Vec::new(),
            sources: Vec::new(),
            max_span: DEFAULT_MAX_SPAN,
            stale: Arc::default(),
        }
    }
}

/// Longest stretch of a key log file, from the first line of a client random to its last,
/// read again when a connection asks for its secrets. A TLS stack writes a connection's lines
/// within its handshake, a few hundred bytes apart where many connections are made at once;
/// a client random named again much later is held in memory from there on.
pub(crate) const DEFAULT_MAX_SPAN: u32 = 8 * 1024;

/// A list in blocks of [`CHUNK`] items: it grows a block at a time, where a `Vec` doubles and
/// holds both its old and its new allocation while it copies (a key log of 263,000 client
/// randoms peaked at 41 MiB with a `Vec`).
#[derive(Clone, Debug)]
struct Chunked<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

const CHUNK: usize = 4096;

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Chunked<T> {
    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn get(&self, i: usize) -> Option<&T> {
        self.chunks.get(i / CHUNK)?.get(i % CHUNK)
    }

    fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.chunks.get_mut(i / CHUNK)?.get_mut(i % CHUNK)
    }

    fn push(&mut self, item: T) {
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => last.push(item),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(item);
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
    }

    fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }
}

/// A source of lines, and the file to read them again from (a regular file read whole).
#[derive(Clone, Debug)]
struct Origin {
    source: KeySource,
    file: Option<Arc<ReadBack>>,
}

/// One client random: the stretch of its source's file holding its first lines (`span`
/// bytes from `from`; none when `span` is 0), and the secrets of later lines held in memory.
#[derive(Clone, Debug)]
struct Entry {
    random: [u8; 32],
    from: u64,
    span: u32,
    /// A digest of the secrets in the span, as first read: a reading that disagrees is stale.
    check: u32,
    /// Position in `KeyLog::held` plus one; 0 when nothing is held.
    held: u32,
    /// The source of its first line, a position in `KeyLog::sources`.
    source: u16,
    /// The labels stored for it (one bit per label's number), and those of them in the span.
    labels: u8,
    span_labels: u8,
}

/// A line's label; its number is how tagged secrets and label bits name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Label {
    ClientRandom = 0,
    ClientHandshake = 1,
    ServerHandshake = 2,
    ClientTraffic0 = 3,
    ServerTraffic0 = 4,
    ClientEarly = 5,
    Exporter = 6,
}

impl Label {
    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// Each secret of tagged bytes with its label's number.
fn tagged(items: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    let mut rest = items;
    std::iter::from_fn(move || {
        let (&[tag, len], tail) = rest.split_first_chunk::<2>()?;
        let (bytes, next) = tail.split_at_checked(usize::from(len))?;
        rest = next;
        Some((tag, bytes))
    })
}

fn push_tagged(items: &mut Vec<u8>, label: Label, secret: &[u8]) {
    items.extend_from_slice(&[label as u8, secret.len() as u8]);
    items.extend_from_slice(secret);
}

/// The secrets of tagged bytes, the first of each label; `None` when there are none.
fn unpack(items: &[u8], source: &KeySource) -> Option<SessionSecrets> {
    if items.is_empty() {
        return None;
    }
    let mut s = SessionSecrets {
        master: None,
        client_handshake: None,
        server_handshake: None,
        client_traffic_0: None,
        server_traffic_0: None,
        client_early: None,
        exporter: None,
        source: source.clone(),
    };
    for (tag, bytes) in tagged(items) {
        let slot = match tag {
            0 => {
                if s.master.is_none() {
                    s.master = bytes.try_into().ok();
                }
                continue;
            }
            1 => &mut s.client_handshake,
            2 => &mut s.server_handshake,
            3 => &mut s.client_traffic_0,
            4 => &mut s.server_traffic_0,
            5 => &mut s.client_early,
            _ => &mut s.exporter,
        };
        if slot.is_none() {
            *slot = Secret::new(bytes);
        }
    }
    Some(s)
}

/// A digest of one secret, summed over a span's: a changed file reads back another sum.
fn digest(hasher: &FoldHashKey, label: Label, secret: &[u8]) -> u32 {
    hasher.hash_one((label as u8, secret)) as u32
}

/// A key log file kept to read spans back from, with a number no other file of the process
/// has (the window of [`read_back`] names its file by it).
#[derive(Debug)]
struct ReadBack {
    file: File,
    id: u64,
}

static NEXT_READ_BACK: AtomicU64 = AtomicU64::new(1);

/// Bytes of a key log file read at once to read a span back. A TLS stack logs connections in
/// the order it makes them, and a capture shows their handshakes in about that order: the
/// next connections to ask find their lines in the same read (one `pread` for tens of
/// connections, where one each cost 6–11% more CPU on a capture of many short connections).
const READ_BACK_WINDOW: usize = 32 * 1024;

/// The last window of a key log file read by this thread.
struct Window {
    /// The file's [`ReadBack::id`]; 0 for none.
    id: u64,
    /// Where in the file the window begins, and how many of its bytes were read.
    at: u64,
    valid: usize,
    bytes: Vec<u8>,
}

thread_local! {
    static WINDOW: RefCell<Window> = const {
        RefCell::new(Window {
            id: 0,
            at: 0,
            valid: 0,
            bytes: Vec::new(),
        })
    };
}

/// `f` of the `len` bytes of `file` at `from`, from this thread's window when it holds them and
/// from a new window read at `from` otherwise; `None` when the file ends before them or cannot
/// be read.
fn read_back<T>(file: &ReadBack, from: u64, len: usize, f: impl FnOnce(&[u8]) -> T) -> Option<T> {
    if len > READ_BACK_WINDOW {
        let mut bytes = vec![0u8; len];
        read_at(&file.file, &mut bytes, from).ok()?;
        return Some(f(&bytes));
    }
    WINDOW.with_borrow_mut(|w| {
        let held = w.id == file.id
            && from >= w.at
            && (from - w.at).checked_add(len as u64) <= Some(w.valid as u64);
        if !held {
            w.id = 0;
            w.bytes.resize(READ_BACK_WINDOW, 0);
            w.valid = read_most(&file.file, &mut w.bytes, from).ok()?;
            (w.id, w.at) = (file.id, from);
        }
        let start = usize::try_from(from - w.at).ok()?;
        w.bytes.get(start..start.checked_add(len)?).map(f)
    })
}

/// Reads `buf.len()` bytes of `file` at `at`, leaving its position where it was.
#[cfg(unix)]
fn read_at(file: &File, buf: &mut [u8], at: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, at)
}

/// Reads bytes of `file` at `at` into `buf` until it is full or the file ends; how many.
#[cfg(unix)]
fn read_most(file: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let into = &mut buf[done..];
        match std::os::unix::fs::FileExt::read_at(file, into, at + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

#[cfg(not(unix))]
fn read_at(_: &File, _: &mut [u8], _: u64) -> io::Result<()> {
    Err(io::ErrorKind::Unsupported.into())
}

#[cfg(not(unix))]
fn read_most(_: &File, _: &mut [u8], _: u64) -> io::Result<usize> {
    Err(io::ErrorKind::Unsupported.into())
}

fn label(name: &[u8]) -> Option<Label> {
    Some(match name {
        b"CLIENT_RANDOM" => Label::ClientRandom,
        b"CLIENT_HANDSHAKE_TRAFFIC_SECRET" => Label::ClientHandshake,
        b"SERVER_HANDSHAKE_TRAFFIC_SECRET" => Label::ServerHandshake,
        b"CLIENT_TRAFFIC_SECRET_0" => Label::ClientTraffic0,
        b"SERVER_TRAFFIC_SECRET_0" => Label::ServerTraffic0,
        b"CLIENT_EARLY_TRAFFIC_SECRET" => Label::ClientEarly,
        b"EXPORTER_SECRET" => Label::Exporter,
        _ => return None,
    })
}

/// The value of each byte as a hex digit, or `NOT_HEX`.
const HEX_VALUE: [u8; 256] = {
    let mut t = [NOT_HEX; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};
const NOT_HEX: u8 = 0x10;

/// Decodes hex into `out`, which must be exactly half as long as `text`. A key log of a busy
/// capture holds megabytes of hex, read before the capture: a table lookup per digit and one
/// test per byte, where a match per digit took a quarter of the key log's load time.
fn decode_hex(text: &[u8], out: &mut [u8]) -> bool {
    if text.len() != out.len() * 2 {
        return false;
    }
    let mut bad = 0u8;
    for (o, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        let (h, l) = (
            HEX_VALUE[usize::from(pair[0])],
            HEX_VALUE[usize::from(pair[1])],
        );
        bad |= h | l;
        *o = h << 4 | (l & 0x0f);
    }
    bad & NOT_HEX == 0
}

/// A line as TLS libraries write it, decoded: a label this tool uses, one space, the client
/// random's 64 hex digits, one space, the secret's hex digits. `None` for any other shape; the
/// general reading of [`parse_line`] then takes the line and names what is wrong with it.
/// On such a line both readings find the same three fields (no white space is hex or part of a
/// label), so they agree; this one only skips splitting at every byte, which took a fifth of
/// the load time of a busy key log.
fn common_line(line: &[u8]) -> Option<(Label, [u8; 32], [u8; 48], usize)> {
    let space = memchr::memchr(b' ', line)?;
    let label = label(&line[..space])?;
    let rest = &line[space + 1..];
    let (random_hex, gap, secret_hex) = (rest.get(..64)?, rest.get(64)?, rest.get(65..)?);
    if *gap != b' ' || secret_hex.is_empty() {
        return None;
    }
    let (random, secret, secret_len) = decode_fields(random_hex, secret_hex).ok()?;
    Some((label, random, secret, secret_len))
}

/// A line's client random and secret (the secret in its first `len` bytes), decoded; the
/// error says which is wrong.
fn decode_fields(
    random_hex: &[u8],
    secret_hex: &[u8],
) -> Result<([u8; 32], [u8; 48], usize), &'static str> {
    let mut random = [0u8; 32];
    if !decode_hex(random_hex, &mut random) {
        return Err("client random is not 64 hex digits");
    }
    if !secret_hex.len().is_multiple_of(2) || secret_hex.len() > 96 {
        return Err("secret is not 32 or 48 bytes of hex");
    }
    let mut secret = [0u8; 48];
    let len = secret_hex.len() / 2;
    if !decode_hex(secret_hex, &mut secret[..len]) {
        return Err("secret is not hex");
    }
    Ok((random, secret, len))
}

impl KeyLogStats {
    fn malformed(&mut self, line: u64, reason: &'static str) {
        self.malformed += 1;
        if self.errors.len() < MAX_NAMED_ERRORS {
            self.errors.push(KeyLogError { line, reason });
        }
    }
}

/// The part of a line read so far: its bytes while they may still make a line short enough
/// to read; past that, only the first byte that is not white space (a blank line or a
/// comment may be of any length).
#[derive(Default)]
struct LineCarry {
    bytes: Vec<u8>,
    /// `Some` once the line is too long: its first byte that is not white space, if any.
    overflow: Option<Option<u8>>,
}

impl LineCarry {
    fn push(&mut self, more: &[u8]) {
        if self.overflow.is_none() {
            // One byte more than a line may have: a carriage return before the newline.
            if self.bytes.len() + more.len() <= MAX_LINE_LEN + 1 {
                self.bytes.extend_from_slice(more);
                return;
            }
            self.overflow = Some(first_not_white(&self.bytes));
            self.bytes = Vec::new();
        }
        if let Some(None) = self.overflow {
            self.overflow = Some(first_not_white(more));
        }
    }

    fn is_empty(&self) -> bool {
        self.bytes.is_empty() && self.overflow.is_none()
    }
}

fn first_not_white(bytes: &[u8]) -> Option<u8> {
    bytes.iter().copied().find(|b| !b.is_ascii_whitespace())
}

enum Stored {
    New,
    Same,
    Conflict,
}

/// A line read: nothing to store (blank, a comment), a label this tool does not use, or a
/// secret with its label and client random (the secret in its first `len` bytes).
enum Parsed {
    Nothing,
    UnknownLabel,
    Secret(Label, [u8; 32], [u8; 48], usize),
}

/// One line (without its newline or carriage return), as loading reads it and as reading a
/// span back reads it again: the two must agree on every line.
fn parse_line(line: &[u8]) -> Result<Parsed, &'static str> {
    let trimmed = line.trim_ascii();
    if trimmed.is_empty() || trimmed.starts_with(b"#") {
        return Ok(Parsed::Nothing);
    }
    if line.len() > MAX_LINE_LEN {
        return Err("line too long");
    }
    let (label, random, secret, secret_len) = match common_line(trimmed) {
        Some(fields) => fields,
        None => {
            let mut fields = trimmed
                .split(|b| b.is_ascii_whitespace())
                .filter(|f| !f.is_empty());
            let (Some(name), Some(random_hex), Some(secret_hex), None) =
                (fields.next(), fields.next(), fields.next(), fields.next())
            else {
                return Err("expected three fields: label, client random, secret");
            };
            let (random, secret, secret_len) = decode_fields(random_hex, secret_hex)?;
            let Some(label) = label(name) else {
                return Ok(Parsed::UnknownLabel);
            };
            (label, random, secret, secret_len)
        }
    };
    let value = &secret[..secret_len];
    if let Label::ClientRandom = label {
        if value.len() != 48 {
            return Err("master secret is not 48 bytes");
        }
    } else if Secret::new(value).is_none() {
        return Err("traffic secret is not 32 or 48 bytes");
    }
    Ok(Parsed::Secret(label, random, secret, secret_len))
}

/// Where a line is in its file: the offset of its first byte and of the byte after it.
type LineAt = Option<(u64, u64)>;

impl KeyLog {
    pub(crate) fn new() -> Self {
        KeyLog::default()
    }

    /// A key log whose client randoms may span at most `max_span` bytes of a file and still be
    /// read back (the tests' way to reach both ways of keeping secrets).
    pub(crate) fn with_max_span(max_span: u32) -> Self {
        KeyLog {
            max_span,
            ..KeyLog::default()
        }
    }

    /// The client randoms named, in the order they were first named.
    pub(crate) fn randoms(&self) -> impl Iterator<Item = &[u8; 32]> {
        self.sessions.iter().map(|e| &e.random)
    }

    pub(crate) fn len(&self) -> usize {
        self.sessions.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Counts stored secrets; it changes whenever a lookup could give a different answer.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Lookups whose lines, read back from their file, no longer said what they said when the
    /// file was read (it was changed during the run); their secrets were not given.
    pub(crate) fn stale(&self) -> u64 {
        self.stale.load(Ordering::Relaxed)
    }

    /// The secrets logged for a client random, if any line named it. Those of a span are read
    /// back from their file; a file that no longer holds them (changed, cut, unreadable)
    /// gives only the secrets held in memory, and counts as [`Self::stale`].
    pub(crate) fn get(&self, client_random: &[u8; 32]) -> Option<SessionSecrets> {
        let entry = self.sessions.get(self.find(client_random)?)?;
        let source = &self.sources.get(usize::from(entry.source))?.source;
        let mut items = Vec::new();
        if entry.span != 0 {
            match self.read_span(entry) {
                Some((span_items, check, labels))
                    if check == entry.check && labels == entry.span_labels =>
                {
                    items = span_items;
                }
                _ => {
                    self.stale.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if let Some(held) = self.held_items(entry) {
            items.extend_from_slice(held);
        }
        unpack(&items, source)
    }

    fn held_items(&self, entry: &Entry) -> Option<&[u8]> {
        let at = (entry.held as usize).checked_sub(1)?;
        self.held.get(at).map(|b| &b[..])
    }

    /// The secrets of an entry's span read from its file: the first of each label among the
    /// lines naming its client random, as tagged bytes, with their digest and labels.
    /// `None` when the file cannot give the span's bytes.
    fn read_span(&self, entry: &Entry) -> Option<(Vec<u8>, u32, u8)> {
        let file = self.sources.get(usize::from(entry.source))?.file.as_ref()?;
        read_back(file, entry.from, entry.span as usize, |bytes| {
            let (mut items, mut check, mut labels) = (Vec::with_capacity(256), 0u32, 0u8);
            // memchr finds the line ends (a span is a few hundred bytes of several lines).
            let mut from = 0;
            let ends = memchr::memchr_iter(b'\n', bytes).chain(std::iter::once(bytes.len()));
            for end in ends {
                let raw = bytes.get(from..end).unwrap_or_default();
                from = end + 1;
                let line = raw.strip_suffix(b"\r").unwrap_or(raw);
                let Ok(Parsed::Secret(label, random, secret, len)) = parse_line(line) else {
                    continue;
                };
                if random != entry.random || labels & label.bit() != 0 {
                    continue;
                }
                labels |= label.bit();
                let secret = &secret[..len];
                check = check.wrapping_add(digest(&self.hasher, label, secret));
                push_tagged(&mut items, label, secret);
            }
            (items, check, labels)
        })
    }

    fn find(&self, random: &[u8; 32]) -> Option<usize> {
        let hash = self.hasher.hash_one(random);
        let at = self.index.find(hash, |&i| {
            self.sessions
                .get(i as usize)
                .is_some_and(|p| p.random == *random)
        })?;
        Some(*at as usize)
    }

    /// The position of `source` in the sources, added when new. A file to read back from is
    /// always a source of its own; `None` past `u16::MAX` sources.
    fn origin(&mut self, source: KeySource, file: Option<Arc<ReadBack>>) -> Option<u16> {
        if file.is_none()
            && let Some(at) = self
                .sources
                .iter()
                .position(|o| o.file.is_none() && o.source == source)
        {
            return u16::try_from(at).ok();
        }
        let at = u16::try_from(self.sources.len()).ok()?;
        self.sources.push(Origin { source, file });
        Some(at)
    }

    /// Adds an NSS key log's lines; returns what was read; bad lines are counted and named,
    /// never fatal.
    pub(crate) fn add_nss(&mut self, text: &[u8], source: KeySource) -> KeyLogStats {
        let mut stats = KeyLogStats::default();
        let Some(origin) = self.origin(source, None) else {
            stats.malformed(1, TOO_MANY_SOURCES);
            return stats;
        };
        // A final newline ends the last line rather than starting another.
        let body = text.strip_suffix(b"\n").unwrap_or(text);
        // memchr finds the line ends: the key log of a busy capture has tens of thousands.
        let mut from = 0;
        let ends = memchr::memchr_iter(b'\n', body).chain(std::iter::once(body.len()));
        for (index, end) in ends.enumerate() {
            let raw = &body[from..end];
            from = end + 1;
            self.add_numbered(raw, index as u64 + 1, origin, None, &mut stats);
        }
        stats
    }

    /// Adds the NSS key log in `file`, as [`Self::add_nss_reader`] reads it. A regular file
    /// is kept open and its secrets read back when asked for; anything else (a pipe, a
    /// device), and any file past the first [`MAX_OPEN_KEY_LOGS`], is held in memory.
    pub(crate) fn add_nss_file(
        &mut self,
        file: File,
        source: KeySource,
    ) -> io::Result<KeyLogStats> {
        let open = self.sources.iter().filter(|o| o.file.is_some()).count();
        if !file.metadata()?.is_file() || cfg!(not(unix)) || open >= MAX_OPEN_KEY_LOGS {
            return self.add_nss_reader(file, source);
        }
        let file = Arc::new(ReadBack {
            file,
            id: NEXT_READ_BACK.fetch_add(1, Ordering::Relaxed),
        });
        let Some(origin) = self.origin(source, Some(file.clone())) else {
            let mut stats = KeyLogStats::default();
            stats.malformed(1, TOO_MANY_SOURCES);
            return Ok(stats);
        };
        self.read_lines(&file.file, origin, true)
    }

    /// Adds an NSS key log read from `reader` a block at a time, as [`Self::add_nss`] reads
    /// the same bytes: the file is never held whole (a busy capture's key log is tens of
    /// megabytes, read before the capture), nor more than [`MAX_LINE_LEN`] bytes of a line.
    /// A read error ends the reading; what was read before it stays.
    pub(crate) fn add_nss_reader(
        &mut self,
        reader: impl Read,
        source: KeySource,
    ) -> io::Result<KeyLogStats> {
        let Some(origin) = self.origin(source, None) else {
            let mut stats = KeyLogStats::default();
            stats.malformed(1, TOO_MANY_SOURCES);
            return Ok(stats);
        };
        self.read_lines(reader, origin, false)
    }

    /// The lines of `reader`, a block at a time; with `spans`, each with where it is.
    fn read_lines(
        &mut self,
        mut reader: impl Read,
        origin: u16,
        spans: bool,
    ) -> io::Result<KeyLogStats> {
        let mut stats = KeyLogStats::default();
        let mut block = vec![0u8; READ_BLOCK];
        let mut line = LineCarry::default();
        let mut line_no = 0u64;
        // Offsets in the file: of the block read last, and of the line being read.
        let (mut block_at, mut line_at) = (0u64, 0u64);
        let mut any = false;
        loop {
            let n = match reader.read(&mut block) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            any = true;
            let mut rest = block.get(..n).unwrap_or_default();
            let mut rest_at = block_at;
            while let Some(end) = memchr::memchr(b'\n', rest) {
                line.push(&rest[..end]);
                line_no += 1;
                let end_at = rest_at + end as u64;
                let at = spans.then_some((line_at, end_at));
                self.add_carried(&mut line, line_no, origin, at, &mut stats);
                rest = &rest[end + 1..];
                rest_at = end_at + 1;
                line_at = rest_at;
            }
            line.push(rest);
            block_at += n as u64;
        }
        // What follows the last newline is a line when it is not empty; no bytes at all
        // are one empty line.
        if !line.is_empty() || !any {
            let at = spans.then_some((line_at, block_at));
            self.add_carried(&mut line, line_no + 1, origin, at, &mut stats);
        }
        Ok(stats)
    }

    fn add_carried(
        &mut self,
        line: &mut LineCarry,
        line_no: u64,
        origin: u16,
        at: LineAt,
        stats: &mut KeyLogStats,
    ) {
        match line.overflow {
            None => self.add_numbered(&line.bytes, line_no, origin, at, stats),
            Some(first) => {
                stats.lines += 1;
                // A blank line or a comment may be of any length.
                if first.is_some_and(|b| b != b'#') {
                    stats.malformed(line_no, "line too long");
                }
            }
        }
        line.bytes.clear();
        line.overflow = None;
    }

    /// One line (without its newline), by 1-based number, and where it is in its file when
    /// it may be read back from there.
    fn add_numbered(
        &mut self,
        raw: &[u8],
        line_no: u64,
        origin: u16,
        at: LineAt,
        stats: &mut KeyLogStats,
    ) {
        stats.lines += 1;
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        match parse_line(line) {
            Err(reason) => stats.malformed(line_no, reason),
            Ok(Parsed::Nothing) => {}
            Ok(Parsed::UnknownLabel) => stats.unknown_labels += 1,
            Ok(Parsed::Secret(label, random, secret, len)) => {
                match self.store(random, label, &secret[..len], origin, at) {
                    Ok(Stored::New) => {
                        stats.secrets += 1;
                        self.generation += 1;
                    }
                    Ok(Stored::Same) => stats.duplicates += 1,
                    Ok(Stored::Conflict) => stats.conflicts += 1,
                    Err(reason) => stats.malformed(line_no, reason),
                }
            }
        }
    }

    /// Stores `secret` under `label` for `random` unless the label is there already. A new
    /// client random from a file to read back starts a span at its line; a later line joins
    /// the span while it is in the same file and within the longest span, and is held in
    /// memory otherwise (and from then on).
    fn store(
        &mut self,
        random: [u8; 32],
        label: Label,
        secret: &[u8],
        origin: u16,
        at: LineAt,
    ) -> Result<Stored, &'static str> {
        let Some(position) = self.find(&random) else {
            let position = u32::try_from(self.sessions.len()).map_err(|_| TOO_MANY_RANDOMS)?;
            let mut entry = Entry {
                random,
                from: 0,
                span: 0,
                check: 0,
                held: 0,
                source: origin,
                labels: label.bit(),
                span_labels: 0,
            };
            match at.and_then(|(from, end)| Some((from, u32::try_from(end - from).ok()?))) {
                Some((from, span)) if span != 0 => {
                    entry.from = from;
                    entry.span = span;
                    entry.check = digest(&self.hasher, label, secret);
                    entry.span_labels = label.bit();
                }
                _ => self.hold(&mut entry, label, secret)?,
            }
            let hash = self.hasher.hash_one(random);
            let (sessions, hasher) = (&self.sessions, &self.hasher);
            self.index.insert_unique(hash, position, |&i| {
                sessions
                    .get(i as usize)
                    .map_or(0, |p| hasher.hash_one(p.random))
            });
            self.sessions.push(entry);
            return Ok(Stored::New);
        };
        let entry = self.sessions.get(position).ok_or(TOO_MANY_RANDOMS)?;
        if entry.labels & label.bit() != 0 {
            let read;
            let items = if entry.span_labels & label.bit() != 0 {
                read = self.read_span(entry).map(|(items, _, _)| items);
                read.as_deref()
            } else {
                self.held_items(entry)
            };
            let old = items.and_then(|items| {
                tagged(items)
                    .find(|&(tag, _)| tag == label as u8)
                    .map(|(_, bytes)| bytes)
            });
            return Ok(if old == Some(secret) {
                Stored::Same
            } else {
                Stored::Conflict
            });
        }
        let joins = match at {
            Some((_, end)) if entry.span != 0 && entry.held == 0 && entry.source == origin => {
                u32::try_from(end.saturating_sub(entry.from))
                    .ok()
                    .filter(|&span| span <= self.max_span)
            }
            _ => None,
        };
        let check = digest(&self.hasher, label, secret);
        let mut entry = entry.clone();
        entry.labels |= label.bit();
        match joins {
            Some(span) => {
                entry.span = span;
                entry.check = entry.check.wrapping_add(check);
                entry.span_labels |= label.bit();
            }
            None => self.hold(&mut entry, label, secret)?,
        }
        if let Some(slot) = self.sessions.get_mut(position) {
            *slot = entry;
        }
        Ok(Stored::New)
    }

    /// Adds a secret to those the entry holds in memory.
    fn hold(&mut self, entry: &mut Entry, label: Label, secret: &[u8]) -> Result<(), &'static str> {
        match (entry.held as usize).checked_sub(1) {
            Some(at) => {
                let old = self.held.get_mut(at).ok_or(TOO_MANY_RANDOMS)?;
                let mut items = Vec::with_capacity(old.len() + 2 + secret.len());
                items.extend_from_slice(old);
                push_tagged(&mut items, label, secret);
                *old = items.into_boxed_slice();
            }
            None => {
                let next = u32::try_from(self.held.len() + 1).map_err(|_| TOO_MANY_RANDOMS)?;
                let mut items = Vec::with_capacity(2 + secret.len());
                push_tagged(&mut items, label, secret);
                self.held.push(items.into_boxed_slice());
                entry.held = next;
            }
        }
        Ok(())
    }
}

/// Key log files kept open to read back from: one file descriptor each for the whole run
/// (a process may have as few as 1,024), so that a key log per host of a fleet, hundreds of
/// files, still opens; the files after these are held in memory.
pub(crate) const MAX_OPEN_KEY_LOGS: usize = 64;

const TOO_MANY_SOURCES: &str = "more than 65,535 key log sources";
const TOO_MANY_RANDOMS: &str = "too many client randoms";

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    const R1: &str = "af5d338f17de420d6b71c803786293747e16a71418c364740697af9e7d5252ce";
    const S32: &str = "b67b7d690cc16c4e75e54213cb2d37b4e9c912bcded9105d42befd59d391ad38";
    const S48: &str = "1213be11a145b5431f9bfeb14bfccf9244978c1b299e0fd8ac5e74a68477e21e48efe7a4e848c7d93745a5dffc7b1136";

    #[test]
    fn hex_digits_are_exactly_0_to_9_and_a_to_f_in_either_case() {
        let value = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        };
        for h in 0..=255u8 {
            for l in 0..=255u8 {
                let mut out = [0u8; 2];
                // After a valid pair: a bad digit must spoil the whole text, not only its pair.
                let ok = decode_hex(&[b'7', b'f', h, l], &mut out);
                let want = value(h).zip(value(l)).map(|(h, l)| h << 4 | l);
                assert_eq!(ok, want.is_some(), "{h:#04x} {l:#04x}");
                if let Some(v) = want {
                    assert_eq!(out, [0x7f, v]);
                }
            }
        }
        assert!(!decode_hex(b"abc", &mut [0u8; 2]), "odd length");
    }

    /// Every label, by its number.
    const LABELS: [&str; 7] = [
        "CLIENT_RANDOM",
        "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
        "SERVER_HANDSHAKE_TRAFFIC_SECRET",
        "CLIENT_TRAFFIC_SECRET_0",
        "SERVER_TRAFFIC_SECRET_0",
        "CLIENT_EARLY_TRAFFIC_SECRET",
        "EXPORTER_SECRET",
    ];

    /// The secrets by their label's number.
    fn by_label(s: SessionSecrets) -> [Option<Vec<u8>>; 7] {
        [
            s.master.map(|m| m.to_vec()),
            s.client_handshake.map(|x| x.as_bytes().to_vec()),
            s.server_handshake.map(|x| x.as_bytes().to_vec()),
            s.client_traffic_0.map(|x| x.as_bytes().to_vec()),
            s.server_traffic_0.map(|x| x.as_bytes().to_vec()),
            s.client_early.map(|x| x.as_bytes().to_vec()),
            s.exporter.map(|x| x.as_bytes().to_vec()),
        ]
    }

    fn random(hex: &str) -> [u8; 32] {
        let mut r = [0u8; 32];
        assert!(decode_hex(hex.as_bytes(), &mut r));
        r
    }

    #[test]
    fn the_common_shape_and_any_other_spacing_read_alike() {
        // Each line in the shape TLS libraries write, then spaced otherwise (tabs, runs of
        // white space, around the fields), then with a flaw the general reading names.
        let labels = [
            "CLIENT_RANDOM",
            "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
            "SERVER_TRAFFIC_SECRET_0",
            "EXPORTER_SECRET",
            "SOME_FUTURE_LABEL",
        ];
        for label in labels {
            for secret in [S32, S48, &S48[..94], &S32[..31], "", "zz"] {
                let lines = [
                    format!("{label} {R1} {secret}"),
                    format!("{label}\t{R1}  {secret}"),
                    format!(" {label} {R1}\t\t{secret} "),
                    format!("{label}  {R1} {secret}"),
                    format!("{label} {} {secret}", &R1[..62]),
                    format!("{label} {R1}0 {secret}"),
                    format!("{label} {R1}0{secret}"),
                ];
                let read = |line: &str| {
                    let mut log = KeyLog::new();
                    let stats = log.add_nss(line.as_bytes(), KeySource::Embedded);
                    let s = log.get(&random(R1));
                    let s = s.as_ref();
                    let secrets = [
                        s.and_then(|s| s.master).map(|m| m.to_vec()),
                        s.and_then(|s| s.client_handshake)
                            .map(|x| x.as_bytes().to_vec()),
                        s.and_then(|s| s.server_traffic_0)
                            .map(|x| x.as_bytes().to_vec()),
                        s.and_then(|s| s.exporter).map(|x| x.as_bytes().to_vec()),
                    ];
                    (stats, secrets)
                };
                let common = read(&lines[0]);
                for other in &lines[1..4] {
                    assert_eq!(read(other), common, "{other:?} against {:?}", lines[0]);
                }
                for flawed in &lines[4..] {
                    assert_eq!(read(flawed).0.malformed, 1, "{flawed:?}");
                }
            }
        }
    }

    #[test]
    fn every_label_comments_blank_lines_and_crlf() {
        let text = format!(
            "# SSL/TLS secrets log file\r\n\r\nCLIENT_RANDOM {R1} {S48}\r\n\
             CLIENT_HANDSHAKE_TRAFFIC_SECRET {R1} {S32}\n\
             SERVER_HANDSHAKE_TRAFFIC_SECRET {R1} {S48}\n\
             CLIENT_TRAFFIC_SECRET_0 {R1} {S32}\n\
             SERVER_TRAFFIC_SECRET_0 {R1} {S32}\n\
             CLIENT_EARLY_TRAFFIC_SECRET {R1} {S32}\n\
             EXPORTER_SECRET {R1} {S32}\n\
             \t  # indented comment\n"
        );
        let mut log = KeyLog::new();
        let stats = log.add_nss(text.as_bytes(), KeySource::File("k.log".into()));
        assert_eq!(stats.malformed, 0, "{:?}", stats.errors);
        assert_eq!(
            (stats.lines, stats.secrets, stats.unknown_labels),
            (10, 7, 0)
        );
        let s = log.get(&random(R1)).unwrap();
        assert!(s.master.is_some() && s.client_early.is_some() && s.exporter.is_some());
        assert_eq!(s.server_handshake.unwrap().as_bytes().len(), 48);
        assert_eq!(s.client_traffic_0.unwrap().as_bytes().len(), 32);
        assert_eq!(s.source, KeySource::File("k.log".into()));
        assert_eq!((log.len(), log.is_empty()), (1, false));
    }

    #[test]
    fn duplicates_conflicts_and_unknown_labels() {
        let other = S32.replace('b', "c");
        let text = format!(
            "CLIENT_TRAFFIC_SECRET_0 {R1} {S32}\nCLIENT_TRAFFIC_SECRET_0 {R1} {S32}\n\
             CLIENT_TRAFFIC_SECRET_0 {R1} {other}\nSOMETHING_NEW {R1} {S32}\n"
        );
        let mut log = KeyLog::new();
        let stats = log.add_nss(text.as_bytes(), KeySource::Embedded);
        assert_eq!(
            (
                stats.secrets,
                stats.duplicates,
                stats.conflicts,
                stats.unknown_labels
            ),
            (1, 1, 1, 1)
        );
        let kept = log.get(&random(R1)).unwrap().client_traffic_0.unwrap();
        assert_eq!(
            kept,
            Secret::new(&crate::app::tls::crypto::tests::hex(S32)).unwrap()
        );
        // A second file adding the same line is a duplicate, and keeps the first source.
        let again = log.add_nss(
            format!("CLIENT_TRAFFIC_SECRET_0 {R1} {S32}").as_bytes(),
            KeySource::File("b".into()),
        );
        assert_eq!((again.duplicates, again.lines), (1, 1));
        assert_eq!(log.get(&random(R1)).unwrap().source, KeySource::Embedded);
    }

    /// Lines of many client randoms, interleaved, repeated and contradicted, against a map of
    /// (client random, label) to the first secret given; and the packed size.
    #[test]
    fn interleaved_lines_keep_the_first_secret_of_each_label() {
        let labels = LABELS;
        let mut next = below(0x2545_f491_4f6c_dd1d);
        let mut text = String::new();
        let mut model: HashMap<([u8; 32], usize), Vec<u8>> = HashMap::new();
        for _ in 0..2000 {
            let mut r = [0u8; 32];
            r[0] = next(40) as u8;
            let label = next(labels.len() as u64) as usize;
            let len = if label == 0 || next(2) == 0 { 48 } else { 32 };
            let secret: Vec<u8> = (0..len).map(|_| next(3) as u8).collect();
            text.push_str(&format!(
                "{} {} {}\n",
                labels[label],
                hexs(&r),
                hexs(&secret)
            ));
            model.entry((r, label)).or_insert(secret);
        }
        let mut log = KeyLog::new();
        let stats = log.add_nss(text.as_bytes(), KeySource::Embedded);
        assert_eq!(stats.secrets, model.len() as u64);
        assert_eq!(stats.malformed, 0);
        for first in 0..40u8 {
            let mut r = [0u8; 32];
            r[0] = first;
            let got = log.get(&r).map(by_label);
            let want: [Option<Vec<u8>>; 7] =
                std::array::from_fn(|label| model.get(&(r, label)).cloned());
            if want.iter().all(Option::is_none) {
                assert!(got.is_none());
            } else {
                assert_eq!(got, Some(want), "random {first}");
            }
        }
        // Held in memory, each secret costs its bytes and two; an entry its client random and
        // 24 bytes.
        assert!(size_of::<Entry>() <= 56);
        let held = log.held.iter().map(|items| items.len()).sum::<usize>();
        let secrets = model.values().map(|s| s.len() + 2).sum::<usize>();
        assert_eq!(held, secrets);
    }

    /// A client random, its secrets by label's number, and the source of its first line.
    type Named = ([u8; 32], [Option<Vec<u8>>; 7], KeySource);

    /// Every client random's secrets and source, in the order they were first named.
    fn contents(log: &KeyLog) -> Vec<Named> {
        log.sessions
            .iter()
            .map(|e| {
                let s = log
                    .get(&e.random)
                    .expect("a client random named has a secret");
                let source = s.source.clone();
                (e.random, by_label(s), source)
            })
            .collect()
    }

    /// A key log of `n` lines: client randoms of a few lines each, interleaved, some far
    /// apart; labels repeated with the same or another secret; hex in either case; carriage
    /// returns, blank lines, comments, unknown labels, malformed and overlong lines.
    fn messy_key_log(seed: u64, n: usize) -> String {
        let labels = LABELS;
        let mut next = below(seed);
        let mut text = String::new();
        for i in 0..n as u64 {
            // Mostly one of the three connections being made (lines close together), now and
            // then one made long before.
            let made = if next(40) == 0 {
                next(i / 8 + 1)
            } else {
                i / 8 + next(3)
            };
            let mut r = [0u8; 32];
            r[..8].copy_from_slice(&made.to_le_bytes());
            r[31] = 0x5a;
            let label = next(labels.len() as u64) as usize;
            let len = if label == 0 || next(2) == 0 { 48 } else { 32 };
            let secret: Vec<u8> = (0..len).map(|_| next(2) as u8).collect();
            let (mut random_hex, secret_hex) = (hexs(&r), hexs(&secret));
            if next(5) == 0 {
                random_hex = random_hex.to_uppercase();
            }
            let line = match next(20) {
                0 => String::new(),
                1 => "# a comment".to_string(),
                2 => format!("UNKNOWN_LABEL {random_hex} {secret_hex}"),
                3 => format!("{} {random_hex} {}", labels[label], &secret_hex[2..]),
                4 => format!("{} {random_hex}", labels[label]),
                5 => "x".repeat(1100),
                6 => format!(" {}\t{random_hex}  {secret_hex} ", labels[label]),
                _ => format!("{} {random_hex} {secret_hex}", labels[label]),
            };
            text.push_str(&line);
            text.push_str(if next(6) == 0 { "\r\n" } else { "\n" });
        }
        text
    }

    fn write_file(dir: &tempfile::TempDir, name: &str, text: &str) -> std::path::PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Secrets read back from a file, whatever part was held in memory, are those the same
    /// lines give held whole in memory: per file and across two files naming the same client
    /// randoms (the first file's secrets and source win), with the same counts.
    #[test]
    fn a_file_read_back_gives_what_memory_gives() {
        let dir = tempfile::tempdir().unwrap();
        for seed in 1..=6u64 {
            let texts = [
                messy_key_log(seed * 0x9e37_79b9, 1500),
                messy_key_log(seed * 0x7f4a_7c15, 700),
            ];
            let paths = [
                write_file(&dir, "a.keys", &texts[0]),
                write_file(&dir, "b.keys", &texts[1]),
            ];
            let sources = [KeySource::File("a".into()), KeySource::File("b".into())];
            let mut memory = KeyLog::new();
            let want: Vec<KeyLogStats> = (0..2)
                .map(|i| memory.add_nss(texts[i].as_bytes(), sources[i].clone()))
                .collect();
            let (mut fewer_held, mut most_held) = (usize::MAX, 0);
            for max_span in [1, 300, 2000, DEFAULT_MAX_SPAN] {
                let mut file = KeyLog::with_max_span(max_span);
                for i in 0..2 {
                    let opened = File::open(&paths[i]).unwrap();
                    let got = file.add_nss_file(opened, sources[i].clone()).unwrap();
                    assert_eq!(got, want[i], "seed {seed}, span {max_span}, file {i}");
                }
                assert_eq!(file.generation(), memory.generation());
                assert_eq!(
                    contents(&file),
                    contents(&memory),
                    "seed {seed}, {max_span}"
                );
                assert_eq!(file.stale(), 0);
                // Every client random has a span (its first line is in a file); the longer the
                // spans may be, the fewer client randoms hold a secret in memory.
                let spans = file.sessions.iter().filter(|e| e.span != 0).count();
                let held = file.sessions.iter().filter(|e| e.held != 0).count();
                assert_eq!(spans, file.len());
                let longest = file.sessions.iter().map(|e| e.span).max().unwrap_or(0);
                assert!(
                    longest <= max_span.max(MAX_LINE_LEN as u32 + 1),
                    "{longest}"
                );
                assert!(
                    held <= fewer_held,
                    "seed {seed}, span {max_span}: {held} held"
                );
                most_held = most_held.max(held);
                fewer_held = held;
            }
            assert!(fewer_held > 0, "some lines are further apart than any span");
            assert!(fewer_held * 2 < most_held, "{fewer_held} of {most_held}");
        }
    }

    /// Past [`MAX_OPEN_KEY_LOGS`] files, a key log is held in memory, and reads alike.
    #[test]
    fn files_past_the_open_ones_are_held_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_file(
            &dir,
            "k.keys",
            &format!("CLIENT_TRAFFIC_SECRET_0 {R1} {S32}\n"),
        );
        let mut log = KeyLog::new();
        for i in 0..MAX_OPEN_KEY_LOGS + 3 {
            let source = KeySource::File(format!("k{i}").into());
            log.add_nss_file(File::open(&path).unwrap(), source)
                .unwrap();
        }
        let open = log.sources.iter().filter(|o| o.file.is_some()).count();
        assert_eq!(
            (open, log.sources.len()),
            (MAX_OPEN_KEY_LOGS, MAX_OPEN_KEY_LOGS + 3)
        );
        let other = R1.replace('a', "c");
        let text = format!("CLIENT_TRAFFIC_SECRET_0 {other} {S32}\n");
        let late = write_file(&dir, "late.keys", &text);
        log.add_nss_file(File::open(late).unwrap(), KeySource::File("late".into()))
            .unwrap();
        let found = log.get(&random(&other)).unwrap();
        assert_eq!(found.source, KeySource::File("late".into()));
        assert!(found.client_traffic_0.is_some() && log.held.len() == 1);
        assert_eq!(
            log.get(&random(R1)).unwrap().source,
            KeySource::File("k0".into())
        );
    }

    /// A file changed after it was read never lends its new bytes: a lookup whose span reads
    /// back otherwise gives only what memory holds, and is counted as stale; a window read
    /// before the change gives what was first read.
    #[test]
    fn a_key_log_changed_after_reading_gives_no_secret_from_its_new_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let r2 = R1.replace('a', "b");
        let text = format!(
            "CLIENT_TRAFFIC_SECRET_0 {R1} {S32}\nCLIENT_TRAFFIC_SECRET_0 {r2} {S32}\n\
             {}\nSERVER_TRAFFIC_SECRET_0 {r2} {S32}\n",
            "#".repeat(200)
        );
        let path = write_file(&dir, "k.keys", &text);
        let mut log = KeyLog::with_max_span(100);
        let stats = log
            .add_nss_file(File::open(&path).unwrap(), KeySource::File("k".into()))
            .unwrap();
        assert_eq!((stats.secrets, log.held.len()), (3, 1));
        let first = log.get(&random(R1)).unwrap().client_traffic_0;
        assert!(first.is_some());
        // The same length, another secret for each client random.
        let other = S32.replace('b', "c");
        std::fs::write(&path, text.replace(S32, &other)).unwrap();
        // This thread's window still holds the bytes first read: the same secret.
        assert_eq!(log.get(&random(R1)).unwrap().client_traffic_0, first);
        let forget = || WINDOW.with_borrow_mut(|w| w.id = 0);
        forget();
        assert!(log.get(&random(R1)).is_none());
        let second = log.get(&random(&r2)).unwrap();
        assert!(second.client_traffic_0.is_none());
        assert!(
            second.server_traffic_0.is_some(),
            "held in memory: still given"
        );
        assert_eq!(log.stale(), 2);
        // Cut short, and then gone: the same.
        std::fs::write(&path, &text[..40]).unwrap();
        forget();
        assert!(log.get(&random(R1)).is_none());
        std::fs::remove_file(&path).unwrap();
        forget();
        assert!(
            log.get(&random(R1)).is_none(),
            "the open file is read, now cut short"
        );
        assert_eq!(log.stale(), 4);
    }

    #[test]
    fn a_chunked_list_reads_as_the_list_pushed_across_its_blocks() {
        let mut list = Chunked::default();
        assert!(list.is_empty() && list.get(0).is_none());
        for i in 0..3 * CHUNK + 5 {
            list.push(i);
            assert_eq!((list.len(), list.get(i)), (i + 1, Some(&i)));
        }
        assert!(list.iter().copied().eq(0..3 * CHUNK + 5));
        assert_eq!(list.get(3 * CHUNK + 5), None);
        *list.get_mut(CHUNK).unwrap() = 7;
        assert_eq!(
            (list.get(CHUNK), list.get(CHUNK - 1)),
            (Some(&7), Some(&(CHUNK - 1)))
        );
        assert_eq!(list.chunks.len(), 4);
        assert!(list.chunks.iter().all(|c| c.capacity() == CHUNK));
    }

    /// A deterministic draw below `n` (xorshift).
    fn below(mut seed: u64) -> impl FnMut(u64) -> u64 {
        move |n| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        }
    }

    fn hexs(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn malformed_lines_are_named_and_the_rest_is_read() {
        let short_random = &R1[..62];
        let text = format!(
            "CLIENT_RANDOM {R1}\n\
             CLIENT_RANDOM {short_random} {S48}\n\
             CLIENT_RANDOM {R1} {S32}\n\
             CLIENT_HANDSHAKE_TRAFFIC_SECRET {R1} {S48}00\n\
             CLIENT_HANDSHAKE_TRAFFIC_SECRET {R1} zz{}\n\
             SERVER_TRAFFIC_SECRET_0 {R1} {S32} extra\n\
             SERVER_TRAFFIC_SECRET_0 {R1} abc\n\
             SERVER_TRAFFIC_SECRET_0 {R1} {S32}\n\
             CLIENT_RANDOM {R1} {}",
            &S32[2..],
            &S48[..40]
        );
        let mut log = KeyLog::new();
        let stats = log.add_nss(text.as_bytes(), KeySource::Embedded);
        let lines: Vec<u64> = stats.errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, vec![1, 2, 3, 4, 5, 6, 7, 9]);
        assert_eq!((stats.malformed, stats.secrets, stats.lines), (8, 1, 9));
        assert!(log.get(&random(R1)).unwrap().server_traffic_0.is_some());
    }

    /// A file read a block at a time, whole, and a few bytes at a time reads as the same
    /// bytes given at once: lines of every kind, long ones cut anywhere, with or without a
    /// final newline.
    #[test]
    fn a_key_log_read_in_pieces_reads_as_one_given_whole() {
        let pieces = [
            format!("CLIENT_RANDOM {R1} {S48}"),
            format!("CLIENT_TRAFFIC_SECRET_0 {R1} {S32}\r"),
            format!("SERVER_TRAFFIC_SECRET_0 {R1} {}", S32.replace('b', "c")),
            format!("SERVER_TRAFFIC_SECRET_0 {} {S32}", R1.replace('a', "0")),
            String::new(),
            "\r".to_string(),
            "   \t ".to_string(),
            "# comment".to_string(),
            format!("#{}", "x".repeat(3000)),
            format!("{}# long comment", " ".repeat(2000)),
            " ".repeat(5000),
            "y".repeat(1024),
            "y".repeat(1025),
            format!("{}\r", "y".repeat(1024)),
            format!("{}\r", "y".repeat(1025)),
            format!("{}z", " ".repeat(1500)),
            format!("CLIENT_RANDOM {R1}"),
            "UNKNOWN_LABEL a b".to_string(),
        ];
        let mut next = below(0x0123_4567_89ab_cdef);
        let secrets = contents;
        for case in 0..300 {
            let lines = (0..next(12)).map(|_| pieces[next(pieces.len() as u64) as usize].as_str());
            let mut text = lines.collect::<Vec<_>>().join("\n");
            if next(2) == 0 {
                text.push('\n');
            }
            let mut whole = KeyLog::new();
            let want = whole.add_nss(text.as_bytes(), KeySource::Embedded);
            let mut block = KeyLog::new();
            let got = block
                .add_nss_reader(text.as_bytes(), KeySource::Embedded)
                .unwrap();
            assert_eq!(got, want, "case {case}: {text:?}");
            assert_eq!(secrets(&block), secrets(&whole));
            let mut trickle = KeyLog::new();
            // 1 to 700 bytes a read, a size per case.
            let reader = crate::fuzzing::Pieces::new(text.as_bytes(), case * 7 % 700 + 1);
            let got = trickle.add_nss_reader(reader, KeySource::Embedded).unwrap();
            assert_eq!(got, want, "case {case} in pieces: {text:?}");
            assert_eq!(secrets(&trickle), secrets(&whole));
        }
    }

    #[test]
    fn hostile_input_never_panics_and_names_a_bounded_number_of_lines() {
        let mut text = Vec::new();
        for i in 0..100u32 {
            text.extend_from_slice(format!("CLIENT_RANDOM {i}\n").as_bytes());
        }
        text.extend(std::iter::repeat_n(b'a', 5000));
        text.extend_from_slice(b"\n\xff\xfe\x00 \xc3\n");
        let mut log = KeyLog::new();
        let stats = log.add_nss(&text, KeySource::Embedded);
        assert_eq!(stats.malformed, 102);
        assert_eq!(stats.errors.len(), MAX_NAMED_ERRORS);
        assert!(log.is_empty());
        let empty = log.add_nss(b"", KeySource::Embedded);
        assert_eq!(empty.lines, 1);
    }
}
