//! Many capture points read as one capture: their packets merged by time, as `mergecap` merges
//! files, so that one flow table and one session stage see a session wherever it was captured.
//!
//! Input: capture points, each its files in reading order (one file, or a ring buffer), each
//! file possibly compressed.
//! Output: [`MergedCapture`], the [`Records`] of every packet of every point in time order
//! (ties: the point named first), each point's key logs where its files hold them, read by the
//! driver as one file's records are; and a [`FrameMap`] that says, for each frame of the merged
//! capture, which file it came from and its number there, so the report cites the file a
//! person opens.
//! Invariants:
//! - A TCP connection seen at two points (the same addresses and ports) is one connection of
//!   the merged capture: its second copy of each segment is a retransmission to reassembly
//!   (the first captured copy wins) and a copy that only one point holds fills the other's
//!   hole. Connections with other addresses or ports (each side of a proxy, a NAT) stay
//!   distinct connections.
//! - Memory: one read buffer per point, which holds the point's next packet: a packet is
//!   handed out from there, not copied. The frame map is about a byte per packet in an
//!   unnamed temporary file (see [`FrameMap`]), with its last 8,192 frames in memory and up
//!   to 1,024 chunks of 512 frames read back for the report's citations.
//! - A file that cannot be read is an error naming it; the other files and points go on.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::input::capture::{CaptureError, CaptureReader, Packet, Record, Records};
use crate::input::compressed::open_sniffed;

/// A file that cannot be read is not fatal: its error, for standard error.
pub type Messages = Arc<Mutex<Vec<(bool, String)>>>;

/// Which file each frame of the merged capture came from, and its number there.
///
/// Frames are kept in chunks of [`CHUNK_FRAMES`]. A written chunk holds each frame's capture
/// point (one byte while there are at most 256 points) and, as exceptions, the file and number
/// of the frames that do not follow the point's frame before them in the chunk (its first one,
/// a new file, a record skipped): a frame's number is its point's last exception plus the
/// point's frames in between. A chunk of a fleet of a few points is some 530 bytes, an eighth
/// of its frames' full entries (file and number, 8 bytes each), so the chunks read back for
/// the report's citations cover eight times the frames and most lookups find theirs in memory.
#[derive(Debug)]
pub struct FrameMap {
    /// Every file of every point, in the order points and their files were given.
    pub files: Vec<String>,
    /// The point of each file.
    point_of: Vec<u32>,
    /// Bytes of a point's number in a chunk: 1, 2 or 4.
    width: usize,
    state: Mutex<MapState>,
    /// The newest frames, entered one by one without the lock: frame `i` (0-based) at
    /// `i % FRESH_FRAMES`, its file in the high 32 bits and its number there in the low ones,
    /// until it is moved to the state's tail.
    fresh: Box<[AtomicU64]>,
    /// Frames entered so far (published: a frame below it is in `fresh` or the state).
    entered: AtomicU64,
    /// Frames moved from `fresh` to the state (changed under the state's lock).
    moved: AtomicU64,
}

#[derive(Debug, Default)]
struct MapState {
    /// Chunks written, one after the other.
    spill: Option<std::fs::File>,
    /// Where each written chunk begins in `spill`, and where the last one ends.
    chunk_at: Vec<u64>,
    /// Frames after the written chunks: their file and their number there.
    tail: Vec<(u32, u32)>,
    /// The file could not be made or written: later frames stay in `tail`, in memory.
    broken: bool,
    /// Chunks read back (or just written), at `chunk % CACHE_CHUNKS`: the chunk's number plus
    /// one (0: nothing) and its bytes.
    cache: Vec<(u64, Vec<u8>)>,
    /// Each point's last frame while a chunk is made: the chunk's number plus one, the file
    /// and the frame's number there.
    last: Vec<(u64, u32, u32)>,
}

/// Frames of a chunk.
const CHUNK_FRAMES: usize = 512;
/// Frames entered without the lock before they are moved under it, together: the lock, and
/// the wait for every earlier store that taking it means, once in this many frames rather
/// than for each (over half of a fleet's reading thread with `-j2`, measured).
const FRESH_FRAMES: usize = 256;
/// Frames kept in memory before their chunks are written.
const TAIL_FRAMES: usize = 16 * CHUNK_FRAMES;
/// One exception: the frame's place in its chunk (u16), its file (u32) and its number (u32).
const EXCEPTION: usize = 10;
/// Chunks kept read back: about 540 KiB for a fleet of up to 256 points.
const CACHE_CHUNKS: usize = 1024;

impl FrameMap {
    /// `point_of`: the capture point of each file of `files`.
    fn new(files: Vec<String>, point_of: Vec<u32>) -> Self {
        let points = point_of.iter().max().map_or(0, |&p| p as usize + 1);
        let width = match points {
            0..=256 => 1,
            257..=65536 => 2,
            _ => 4,
        };
        FrameMap {
            files,
            point_of,
            width,
            state: Mutex::new(MapState {
                chunk_at: vec![0],
                ..MapState::default()
            }),
            fresh: (0..FRESH_FRAMES).map(|_| AtomicU64::new(0)).collect(),
            entered: AtomicU64::new(0),
            moved: AtomicU64::new(0),
        }
    }

    /// Enters the next frame (its file and number there); called by one thread, the merge.
    /// Visible to [`FrameMap::locate`] on any thread once this returns.
    fn push(&self, file: usize, local: u64) {
        let i = self.entered.load(Ordering::Relaxed);
        if i - self.moved.load(Ordering::Relaxed) >= FRESH_FRAMES as u64 {
            self.move_fresh(i);
        }
        let (file, local) = entry(file, local);
        self.fresh[(i % FRESH_FRAMES as u64) as usize]
            .store(u64::from(file) << 32 | u64::from(local), Ordering::Relaxed);
        // Publishes the slot's store with it.
        self.entered.store(i + 1, Ordering::Release);
    }

    /// Moves the frames entered up to `upto` from `fresh` to the state, under the lock: their
    /// slots may then be entered again.
    fn move_fresh(&self, upto: u64) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        let from = self.moved.load(Ordering::Relaxed);
        for i in from..upto {
            let packed = self.fresh[(i % FRESH_FRAMES as u64) as usize].load(Ordering::Relaxed);
            s.tail.push(((packed >> 32) as u32, packed as u32));
        }
        self.moved.store(upto, Ordering::Relaxed);
        if s.tail.len() >= TAIL_FRAMES {
            self.write_chunks(&mut s);
        }
    }

    /// The file (its name) and number there of frame `frame` (1-based) of the merged capture.
    pub fn locate(&self, frame: u64) -> Option<(&str, u64)> {
        let mut s = self.state.lock().ok()?;
        let i = frame.checked_sub(1)?;
        // Held by the lock: the frames from `moved` on stay in their slots while it is held
        // (the merge moves them under it before it enters over them).
        let moved = self.moved.load(Ordering::Relaxed);
        if i >= moved {
            if i >= self.entered.load(Ordering::Acquire) {
                return None;
            }
            let packed = self.fresh[(i % FRESH_FRAMES as u64) as usize].load(Ordering::Relaxed);
            let file = self.files.get((packed >> 32) as usize)?;
            return Some((file.as_str(), u64::from(packed as u32)));
        }
        let chunks = s.chunk_at.len() as u64 - 1;
        let written = chunks * CHUNK_FRAMES as u64;
        let (file, local) = if i >= written {
            *s.tail.get(usize::try_from(i - written).ok()?)?
        } else {
            let chunk = i / CHUNK_FRAMES as u64;
            let at = (i % CHUNK_FRAMES as u64) as usize;
            let bytes = s.chunk(chunk)?;
            self.find(bytes, at)?
        };
        Some((self.files.get(file as usize)?.as_str(), u64::from(local)))
    }

    /// The point of the frame at place `at` of a chunk's points.
    fn point(&self, points: &[u8], at: usize) -> Option<u32> {
        let b = points.get(at * self.width..(at + 1) * self.width)?;
        Some(match *b {
            [a] => u32::from(a),
            [a, b] => u32::from(u16::from_le_bytes([a, b])),
            [a, b, c, d] => u32::from_le_bytes([a, b, c, d]),
            _ => return None,
        })
    }

    /// The file and number of the frame at place `at` of a written chunk.
    fn find(&self, chunk: &[u8], at: usize) -> Option<(u32, u32)> {
        let n = usize::from(u16::from_le_bytes(chunk.get(..2)?.try_into().ok()?));
        let exceptions = chunk.get(2..2 + n * EXCEPTION)?;
        let points = chunk.get(2 + n * EXCEPTION..)?;
        let p = self.point(points, at)?;
        let place = |e: &[u8]| usize::from(u16::from_le_bytes([e[0], e[1]]));
        // The point's last exception at or before `at`: the first frame of the point in the
        // chunk is always one.
        let before = exceptions
            .chunks_exact(EXCEPTION)
            .take_while(|e| place(e) <= at)
            .filter(|e| self.point(points, place(e)) == Some(p))
            .last()?;
        let from = place(before);
        let file = u32::from_le_bytes(before[2..6].try_into().ok()?);
        let local = u32::from_le_bytes(before[6..10].try_into().ok()?);
        let between = match self.width {
            1 => points
                .get(from + 1..=at)?
                .iter()
                .filter(|&&b| u32::from(b) == p)
                .count(),
            _ => (from + 1..=at)
                .filter(|&k| self.point(points, k) == Some(p))
                .count(),
        };
        Some((file, local.saturating_add(between as u32)))
    }

    /// Writes the tail's whole chunks to the temporary file (made on the first call), keeping
    /// the rest of the tail; each chunk written is also kept in the cache.
    fn write_chunks(&self, s: &mut MapState) {
        if s.broken {
            return;
        }
        if s.spill.is_none() {
            match tempfile::tempfile() {
                Ok(f) => s.spill = Some(f),
                Err(_) => {
                    s.broken = true;
                    return;
                }
            }
        }
        let whole = s.tail.len() / CHUNK_FRAMES * CHUNK_FRAMES;
        let mut out = Vec::new();
        let mut made = Vec::new();
        for frames in s.tail[..whole].chunks_exact(CHUNK_FRAMES) {
            let chunk = s.chunk_at.len() as u64 - 1 + made.len() as u64;
            let start = out.len();
            self.encode(chunk, frames, &mut s.last, &mut out);
            made.push((chunk, start..out.len()));
        }
        match s.spill.as_mut().map(|f| f.write_all(&out)) {
            Some(Ok(())) => {
                let base = *s.chunk_at.last().unwrap_or(&0);
                for (chunk, range) in made {
                    s.chunk_at.push(base + range.end as u64);
                    if s.cache.is_empty() {
                        s.cache = vec![(0, Vec::new()); CACHE_CHUNKS];
                    }
                    let slot = &mut s.cache[(chunk % CACHE_CHUNKS as u64) as usize];
                    slot.0 = chunk + 1;
                    slot.1.clear();
                    slot.1.extend_from_slice(&out[range]);
                }
                s.tail.drain(..whole);
            }
            _ => s.broken = true,
        }
    }

    /// Appends chunk number `chunk` of `frames` to `out`: the count of exceptions, the
    /// exceptions, then each frame's point.
    fn encode(
        &self,
        chunk: u64,
        frames: &[(u32, u32)],
        last: &mut Vec<(u64, u32, u32)>,
        out: &mut Vec<u8>,
    ) {
        let mut exceptions = Vec::new();
        let mut points = Vec::with_capacity(frames.len() * self.width);
        for (at, &(file, local)) in frames.iter().enumerate() {
            let p = self.point_of.get(file as usize).copied().unwrap_or(0);
            let pi = p as usize;
            if last.len() <= pi {
                last.resize(pi + 1, (0, 0, 0));
            }
            let follows = last[pi] == (chunk + 1, file, local.wrapping_sub(1)) && local != 0;
            if !follows {
                exceptions.extend_from_slice(&(at as u16).to_le_bytes());
                exceptions.extend_from_slice(&file.to_le_bytes());
                exceptions.extend_from_slice(&local.to_le_bytes());
            }
            last[pi] = (chunk + 1, file, local);
            points.extend_from_slice(&p.to_le_bytes()[..self.width]);
        }
        let n = (exceptions.len() / EXCEPTION) as u16;
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(&exceptions);
        out.extend_from_slice(&points);
    }
}

/// The map's entry of a frame: the file's index, then the frame's number there (saturated).
fn entry(file: usize, local: u64) -> (u32, u32) {
    (
        u32::try_from(file).unwrap_or(u32::MAX),
        u32::try_from(local).unwrap_or(u32::MAX),
    )
}

impl MapState {
    /// The bytes of written chunk `chunk`: from the cache, or read back into it.
    fn chunk(&mut self, chunk: u64) -> Option<&[u8]> {
        use std::os::unix::fs::FileExt;
        let start = *self.chunk_at.get(usize::try_from(chunk).ok()?)?;
        let end = *self.chunk_at.get(usize::try_from(chunk).ok()? + 1)?;
        if self.cache.is_empty() {
            self.cache = vec![(0, Vec::new()); CACHE_CHUNKS];
        }
        let slot = (chunk % CACHE_CHUNKS as u64) as usize;
        let f = self.spill.as_ref()?;
        let (tag, bytes) = self.cache.get_mut(slot)?;
        if *tag != chunk + 1 {
            *tag = 0;
            bytes.resize(usize::try_from(end - start).ok()?, 0);
            f.read_exact_at(bytes, start).ok()?;
            *tag = chunk + 1;
        }
        Some(bytes)
    }
}

/// A capture point being read: its files, the one open now and its next packet.
struct Point {
    files: Vec<(usize, PathBuf)>,
    next_file: usize,
    reader: Option<(usize, CaptureReader<Box<dyn Read>>)>,
    /// How far `reader` had read when it was last asked.
    read_to: u64,
    /// The point's next packet, which its reader holds (lends) until it is asked again.
    pending: Option<Head>,
    /// The file read before, and the time of its last packet (for the overlap warning).
    last: Option<(usize, i64)>,
}

/// What the merge needs of a point's next packet to place it; its bytes stay in the reader.
#[derive(Clone, Copy)]
struct Head {
    time_ns: i64,
    file: usize,
    /// Its number in its file.
    local: u64,
}

/// The merged capture: the packets of every point in time order, with the secrets their files
/// embed, read as [`Records`] the way one file's records are read.
///
/// A packet is handed out from its point's read buffer, where its reader lends it until the
/// point is asked for its next one (at the next call): no packet is copied or read ahead.
pub struct MergedCapture {
    points: Vec<Point>,
    map: Arc<FrameMap>,
    messages: Messages,
    max_block: usize,
    /// Key logs read on the way and not yet handed out, in the order they were read.
    secrets: VecDeque<Vec<u8>>,
    /// The key log handed out last, which the caller borrows until the next call.
    out_secrets: Vec<u8>,
    /// The point whose packet was handed out last: it moves on at the next call.
    lent: Option<usize>,
    /// Frames handed out so far.
    frames: u64,
    /// Bytes read of every point's files.
    read_bytes: u64,
    /// Records the points' files passed over without being packets.
    skipped: u64,
    /// Files whose last record was cut short.
    cut_short: u64,
    started: bool,
}

impl MergedCapture {
    /// `points`: each point's files in reading order.
    pub fn new(points: &[Vec<PathBuf>], max_block: usize) -> (Self, Arc<FrameMap>, Messages) {
        let mut names = Vec::new();
        let mut point_of = Vec::new();
        let mut ps = Vec::new();
        for files in points {
            let mut fs = Vec::new();
            for f in files {
                fs.push((names.len(), f.clone()));
                names.push(f.display().to_string());
                point_of.push(u32::try_from(ps.len()).unwrap_or(u32::MAX));
            }
            ps.push(Point {
                files: fs,
                next_file: 0,
                reader: None,
                read_to: 0,
                pending: None,
                last: None,
            });
        }
        let map = Arc::new(FrameMap::new(names, point_of));
        let messages: Messages = Arc::default();
        let m = MergedCapture {
            points: ps,
            map: map.clone(),
            messages: messages.clone(),
            max_block,
            secrets: VecDeque::new(),
            out_secrets: Vec::new(),
            lent: None,
            frames: 0,
            read_bytes: 0,
            skipped: 0,
            cut_short: 0,
            started: false,
        };
        (m, map, messages)
    }

    fn say(&self, is_error: bool, text: String) {
        if let Ok(mut m) = self.messages.lock() {
            m.push((is_error, text));
        }
    }

    /// Makes point `p`'s next packet pending (queueing any secrets it passes), opening its
    /// next file when one ends.
    fn advance(&mut self, p: usize) {
        loop {
            if self.points[p].reader.is_none() {
                let point = &mut self.points[p];
                let Some((file, path)) = point.files.get(point.next_file).cloned() else {
                    return;
                };
                point.next_file += 1;
                match open(&path, self.max_block) {
                    Ok(r) => {
                        let point = &mut self.points[p];
                        point.read_to = r.position();
                        self.read_bytes += point.read_to;
                        point.reader = Some((file, r));
                    }
                    Err(e) => {
                        self.say(true, format!("{}: {e}", path.display()));
                    }
                }
                continue;
            }
            let point = &mut self.points[p];
            let Some((file, reader)) = point.reader.as_mut() else {
                return;
            };
            let file = *file;
            // Some(Some): a packet; Some(None): the file is over; None: secrets, read on.
            let next = match reader.next_record_lent() {
                Ok(Some(Record::Packet(pk))) => Some(Some(Head {
                    time_ns: pk.time_ns,
                    file,
                    local: pk.frame,
                })),
                Ok(Some(Record::TlsKeyLog(text))) => {
                    self.secrets.push_back(text.to_vec());
                    None
                }
                Ok(None) => Some(None),
                Err(e) => {
                    let name = &self.map.files[file];
                    let text = format!("{name}: {e}; analyzed up to there");
                    if let Ok(mut m) = self.messages.lock() {
                        m.push((true, text));
                    }
                    Some(None)
                }
            };
            let at = reader.position();
            self.read_bytes += at.saturating_sub(point.read_to);
            point.read_to = at;
            let Some(next) = next else {
                continue;
            };
            match next {
                Some(head) => {
                    self.points[p].pending = Some(head);
                    return;
                }
                None => {
                    if let Some((_, r)) = self.points[p].reader.take() {
                        self.skipped += r.skipped_records();
                        if let Some(at) = r.truncated_at() {
                            self.cut_short += 1;
                            let name = &self.map.files[file];
                            let text = format!(
                                "{name}: offset {at}: last record cut short; analyzed up to \
                                 the last whole packet"
                            );
                            self.say(true, text);
                        }
                    }
                }
            }
        }
    }

    /// The point whose pending packet comes next in time (ties: the point named first).
    fn earliest(&self) -> Option<usize> {
        let mut best: Option<(i64, usize)> = None;
        for (p, point) in self.points.iter().enumerate() {
            if let Some(h) = &point.pending
                && best.is_none_or(|(t, _)| h.time_ns < t)
            {
                best = Some((h.time_ns, p));
            }
        }
        best.map(|(_, p)| p)
    }
}

impl Records for MergedCapture {
    /// The merged capture's next record. Its packets carry their merged frame numbers and
    /// times no earlier than the epoch (as a pcapng file's unsigned times read back).
    fn next_record(&mut self) -> Result<Option<Record<'_>>, CaptureError> {
        if !self.started {
            self.started = true;
            for p in 0..self.points.len() {
                self.advance(p);
            }
        }
        // The packet lent last is done with: its point reads on, and the key logs it reads
        // on the way come before any packet.
        if let Some(p) = self.lent.take() {
            self.advance(p);
        }
        if let Some(text) = self.secrets.pop_front() {
            self.out_secrets = text;
            return Ok(Some(Record::TlsKeyLog(&self.out_secrets)));
        }
        let Some(p) = self.earliest() else {
            return Ok(None);
        };
        let Some(head) = self.points[p].pending.take() else {
            return Ok(None);
        };
        // Within a point, files follow one another: one that begins before the previous one
        // ends is said, once per file.
        match self.points[p].last {
            Some((file, end)) if file != head.file && head.time_ns < end => {
                let (a, b) = (&self.map.files[file], &self.map.files[head.file]);
                let text = format!(
                    "{b}: its first packet is older than the last one of {a}: the files \
                     overlap in time or the clock went back; read one after the other"
                );
                self.say(false, text);
            }
            _ => {}
        }
        self.points[p].last = Some((head.file, head.time_ns));
        self.frames += 1;
        // In the map before it is handed out: a frame is cited only after it was read.
        self.map.push(head.file, head.local);
        self.lent = Some(p);
        // The point's reader was not asked again since it read the packet: it lends it.
        let Some(pk) = self.points[p]
            .reader
            .as_ref()
            .and_then(|(_, r)| r.lent_packet())
        else {
            return Err(CaptureError::Damaged {
                offset: self.read_bytes,
                what: "the merge lost the packet it had read".into(),
            });
        };
        Ok(Some(Record::Packet(Packet {
            frame: self.frames,
            time_ns: pk.time_ns.max(0),
            ..pk
        })))
    }

    /// Bytes read of the points' files (decompressed), including each point's next packet.
    fn position(&self) -> u64 {
        self.read_bytes
    }

    /// A file cut short is said in the messages, naming it and the offset.
    fn truncated_at(&self) -> Option<u64> {
        None
    }

    fn files_cut_short(&self) -> u64 {
        self.cut_short
    }

    fn skipped_records(&self) -> u64 {
        self.skipped
    }
}

/// Opens a capture file, decompressed when compressed.
fn open(path: &std::path::Path, max_block: usize) -> Result<CaptureReader<Box<dyn Read>>, String> {
    let (codec, src) = open_sniffed(path)?;
    let src: Box<dyn Read> = match codec {
        Some(codec) => codec.decoder(src),
        None => Box::new(src),
    };
    CaptureReader::open(src, max_block).map_err(|e| e.to_string())
}

/// A record as the oracle compares them: a packet's time (as read, before the merge clamps
/// it), link type, length on the wire, bytes, file and frame number there; or a key log.
#[derive(Debug, PartialEq)]
enum Seen {
    Packet(i64, u32, u32, Vec<u8>, usize, u64),
    Keys(Vec<u8>),
}

/// Checks the merged capture of `points` against its files read alone: the merged records
/// must be what merging the points' records by time (ties: the point named first) gives, a
/// point's files read one after the other and each key log placed as its packet before it
/// is; each packet must carry the next merged frame number, its time no earlier than the
/// epoch, and its file and number there in the frame map when it is handed out; and the
/// records the files skipped and the files cut short must be counted. `Err` says where they
/// differ.
pub(crate) fn merged_as_alone(points: &[Vec<PathBuf>], max_block: usize) -> Result<(), String> {
    // Each point's records read alone, file after file, with each file's index.
    let mut alone: Vec<std::collections::VecDeque<Seen>> = Vec::new();
    let (mut skipped, mut cut_short) = (0, 0);
    let mut file = 0;
    for files in points {
        let mut records = std::collections::VecDeque::new();
        for path in files {
            if let Ok(mut r) = open(path, max_block) {
                while let Ok(Some(record)) = r.next_record() {
                    records.push_back(match record {
                        Record::Packet(p) => Seen::Packet(
                            p.time_ns,
                            p.linktype,
                            p.orig_len,
                            p.data.to_vec(),
                            file,
                            p.frame,
                        ),
                        Record::TlsKeyLog(text) => Seen::Keys(text.to_vec()),
                    });
                }
                skipped += r.skipped_records();
                cut_short += u64::from(r.truncated_at().is_some());
            }
            file += 1;
        }
        alone.push(records);
    }
    // The merge, done the plain way: a point's key logs come as soon as they are at its
    // head, before any packet is chosen.
    let mut want = Vec::new();
    loop {
        for records in alone.iter_mut() {
            while let Some(Seen::Keys(_)) = records.front() {
                want.extend(records.pop_front());
            }
        }
        let next = (0..alone.len())
            .filter_map(|p| match alone[p].front() {
                Some(Seen::Packet(t, ..)) => Some((*t, p)),
                _ => None,
            })
            .min();
        let Some((_, p)) = next else {
            break;
        };
        want.extend(alone[p].pop_front());
        // Key logs read after the packet, before the point's next one, come with it.
        while let Some(Seen::Keys(_)) = alone[p].front() {
            want.extend(alone[p].pop_front());
        }
    }
    let (mut merged, map, _) = MergedCapture::new(points, max_block);
    let mut frames = 0;
    let mut got = Vec::new();
    while let Some(record) = merged.next_record().map_err(|e| e.to_string())? {
        got.push(match record {
            Record::Packet(p) => {
                frames += 1;
                if p.frame != frames {
                    return Err(format!("packet {frames} carries frame {}", p.frame));
                }
                let Some((name, local)) = map.locate(p.frame) else {
                    return Err(format!("frame {frames} is not in the map when handed out"));
                };
                let file = map
                    .files
                    .iter()
                    .position(|f| f == name)
                    .unwrap_or(usize::MAX);
                let Some(Seen::Packet(t, ..)) = want.get(got.len()) else {
                    return Err(format!("frame {frames} is one packet too many"));
                };
                if p.time_ns != (*t).max(0) {
                    return Err(format!("frame {frames}: time {} for {t}", p.time_ns));
                }
                Seen::Packet(*t, p.linktype, p.orig_len, p.data.to_vec(), file, local)
            }
            Record::TlsKeyLog(text) => Seen::Keys(text.to_vec()),
        });
    }
    if let Some(i) = (0..want.len().max(got.len())).find(|&i| want.get(i) != got.get(i)) {
        return Err(format!(
            "record {i}: merged {:?}, alone {:?}",
            got.get(i),
            want.get(i)
        ));
    }
    if merged.skipped_records() != skipped {
        return Err(format!(
            "{} records skipped, {skipped} alone",
            merged.skipped_records()
        ));
    }
    if merged.files_cut_short() != cut_short {
        return Err(format!(
            "{} files cut short, {cut_short} alone",
            merged.files_cut_short()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pcap(linktype: u32, records: &[(u32, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        out.extend_from_slice(&2u16.to_le_bytes());
        out.extend_from_slice(&4u16.to_le_bytes());
        for v in [0u32, 0, 65535, linktype] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for (sec, data) in records {
            for v in [*sec, 7, data.len() as u32, data.len() as u32 + 1] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.extend_from_slice(data);
        }
        out
    }

    /// A pcapng file: one interface of `linktype` in nanoseconds; then, in order, packets
    /// (`Some(time s)`, text) and key logs (`None`, text); a packet whose time is `u64::MAX`
    /// names an interface that does not exist.
    fn pcapng(linktype: u16, records: &[(Option<u64>, &[u8])]) -> Vec<u8> {
        let mut ng = crate::input::testing::Ng {
            big: false,
            out: Vec::new(),
        };
        ng.shb();
        ng.idb(linktype, Some(9));
        for (time, data) in records {
            match time {
                Some(u64::MAX) => ng.epb(5, 0, data),
                Some(t) => ng.epb(0, t * 1_000_000_000, data),
                None => ng.dsb(data),
            }
        }
        ng.out
    }

    /// A record of the merged capture as the tests see it: a packet's time in seconds, link
    /// type, length on the wire, text, merged frame, and the file and frame the map names
    /// for it when it is handed out; or a key log's text.
    #[derive(Debug, PartialEq)]
    enum Seen {
        Packet(i64, u32, u32, String, u64, String, u64),
        Keys(String),
    }

    fn records(m: &mut MergedCapture, map: &FrameMap) -> Vec<Seen> {
        let mut seen = Vec::new();
        while let Some(r) = m.next_record().unwrap() {
            seen.push(match r {
                Record::Packet(p) => {
                    let (file, local) = map.locate(p.frame).expect("entered before handed out");
                    Seen::Packet(
                        p.time_ns / 1_000_000_000,
                        p.linktype,
                        p.orig_len,
                        String::from_utf8_lossy(p.data).into_owned(),
                        p.frame,
                        crate::input::set::file_name(std::path::Path::new(file)),
                        local,
                    )
                }
                Record::TlsKeyLog(text) => Seen::Keys(String::from_utf8_lossy(text).into_owned()),
            });
        }
        seen
    }

    #[test]
    fn points_merge_by_time_and_every_frame_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.pcap");
        let b = dir.path().join("b.pcap");
        let bad = dir.path().join("bad.pcap");
        std::fs::write(&a, pcap(1, &[(1, b"a1"), (3, b"a2"), (5, b"a3")])).unwrap();
        std::fs::write(&b, pcap(101, &[(2, b"b1"), (3, b"b2"), (4, b"b3")])).unwrap();
        std::fs::write(&bad, b"not a capture at all").unwrap();
        let points = vec![vec![a.clone()], vec![bad.clone(), b.clone()]];
        let (mut merged, map, messages) = MergedCapture::new(&points, 1 << 20);
        let seen = records(&mut merged, &map);
        let want: Vec<Seen> = [
            (1, 1, "a1", "a.pcap", 1),
            (2, 101, "b1", "b.pcap", 1),
            // A tie goes to the point named first.
            (3, 1, "a2", "a.pcap", 2),
            (3, 101, "b2", "b.pcap", 2),
            (4, 101, "b3", "b.pcap", 3),
            (5, 1, "a3", "a.pcap", 3),
        ]
        .into_iter()
        .zip(1..)
        .map(|((t, l, d, f, n), frame)| {
            Seen::Packet(t, l, 3, d.to_string(), frame, f.to_string(), n)
        })
        .collect();
        assert_eq!(seen, want);
        assert_eq!(map.locate(0), None);
        assert_eq!(map.locate(7), None);
        // Every byte of the files that were read, as the progress display counts them.
        let read = std::fs::metadata(&a).unwrap().len() + std::fs::metadata(&b).unwrap().len();
        assert_eq!(merged.position(), read);
        assert_eq!((merged.truncated_at(), merged.skipped_records()), (None, 0));
        let messages = messages.lock().unwrap().clone();
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert!(messages[0].0 && messages[0].1.contains("bad.pcap: not a pcap"));
    }

    /// A point's key logs come where its file has them: after the packet before them, before
    /// any packet read after them. A record that names no interface still counts as a frame
    /// of its file, and is counted as skipped.
    #[test]
    fn key_logs_come_in_place_and_skipped_records_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.pcapng");
        let b = dir.path().join("b.pcap");
        let records_a: [(Option<u64>, &[u8]); 5] = [
            (None, b"k0"),
            (Some(1), b"a1"),
            (None, b"k1"),
            (Some(u64::MAX), b"lost"),
            (Some(4), b"a4"),
        ];
        std::fs::write(&a, pcapng(1, &records_a)).unwrap();
        std::fs::write(&b, pcap(1, &[(2, b"b2"), (3, b"b3")])).unwrap();
        let (mut merged, map, messages) = MergedCapture::new(&[vec![a], vec![b]], 1 << 20);
        let seen = records(&mut merged, &map);
        // The pcap writer gives each packet one byte more on the wire than captured.
        let packet = |t, d: &str, frame, f: &str, n| {
            let wire = 2 + u32::from(f.ends_with(".pcap"));
            Seen::Packet(t, 1, wire, d.to_string(), frame, f.to_string(), n)
        };
        let want = vec![
            Seen::Keys("k0".into()),
            packet(1, "a1", 1, "a.pcapng", 1),
            Seen::Keys("k1".into()),
            packet(2, "b2", 2, "b.pcap", 1),
            packet(3, "b3", 3, "b.pcap", 2),
            packet(4, "a4", 4, "a.pcapng", 3),
        ];
        assert_eq!(seen, want);
        assert_eq!(merged.skipped_records(), 1);
        assert!(messages.lock().unwrap().is_empty());
    }

    /// Thousands of packets from three points, over many refills of each point's read buffer
    /// (lent from there): each comes once, in time order, with its own bytes and its file's
    /// frame.
    #[test]
    fn many_packets_keep_their_bytes_and_frames_across_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut points = Vec::new();
        let mut want = Vec::new();
        for p in 0..3u32 {
            let path = dir.path().join(format!("p{p}.pcap"));
            let texts: Vec<(u32, Vec<u8>)> = (0..3000u32)
                .map(|i| {
                    let len = (i * 7 + p * 13) % 900 + 1;
                    let text: Vec<u8> = format!("{p}:{i}:")
                        .bytes()
                        .chain(std::iter::repeat_n(b'x', len as usize))
                        .collect();
                    (i * 3 + p, text)
                })
                .collect();
            let refs: Vec<(u32, &[u8])> = texts.iter().map(|(t, d)| (*t, &d[..])).collect();
            std::fs::write(&path, pcap(1, &refs)).unwrap();
            for (i, (t, d)) in texts.iter().enumerate() {
                want.push((*t, String::from_utf8_lossy(d).into_owned(), p, i as u64 + 1));
            }
            points.push(vec![path]);
        }
        want.sort_by_key(|w| w.0);
        let (mut merged, map, _) = MergedCapture::new(&points, 1 << 20);
        let seen = records(&mut merged, &map);
        assert_eq!(seen.len(), want.len());
        for (i, (s, (t, d, p, n))) in seen.iter().zip(&want).enumerate() {
            let w = Seen::Packet(
                i64::from(*t),
                1,
                d.len() as u32 + 1,
                d.clone(),
                i as u64 + 1,
                format!("p{p}.pcap"),
                *n,
            );
            assert_eq!(s, &w, "record {i}");
        }
    }

    /// Random fleets (one to four points of one to three files: pcap and pcapng, with key
    /// logs, records naming no interface, times that tie and go back, files cut short or not
    /// captures at all) merge as their files read alone say.
    #[test]
    fn random_fleets_merge_as_their_files_read_alone() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || crate::testing::xorshift(&mut rng);
        for seed in 0..60 {
            let mut files: Vec<(usize, Vec<u8>)> = Vec::new();
            let points = 1 + (next() % 4) as usize;
            for point in 0..points {
                for _ in 0..1 + next() % 3 {
                    let n = (next() % 700) as usize;
                    let mut t = next() % 50;
                    let mut texts = Vec::new();
                    for i in 0..n {
                        // Mostly forward, sometimes the same second, now and then back.
                        t = match next() % 10 {
                            0 => t.saturating_sub(3),
                            1..=3 => t,
                            _ => t + 1,
                        };
                        let len = (next() % 80) as usize;
                        let text: Vec<u8> = format!("{seed}/{point}/{i}/")
                            .bytes()
                            .chain(std::iter::repeat_n(b'.', len))
                            .collect();
                        texts.push((t, text));
                    }
                    let mut bytes = match next() % 3 {
                        0 => {
                            let recs: Vec<(u32, &[u8])> =
                                texts.iter().map(|(t, d)| (*t as u32, &d[..])).collect();
                            pcap(1 + (next() % 2) as u32 * 100, &recs)
                        }
                        1 => {
                            let mut recs: Vec<(Option<u64>, &[u8])> = Vec::new();
                            for (t, d) in &texts {
                                match next() % 20 {
                                    0 => recs.push((None, b"CLIENT_RANDOM aa bb")),
                                    1 => recs.push((Some(u64::MAX), b"lost")),
                                    _ => {}
                                }
                                recs.push((Some(*t), &d[..]));
                            }
                            pcapng(1, &recs)
                        }
                        _ => b"neither pcap nor pcapng".to_vec(),
                    };
                    if next() % 5 == 0 {
                        let cut = (next() as usize) % (bytes.len() + 1);
                        bytes.truncate(cut);
                    }
                    files.push((point, bytes));
                }
            }
            let parts: Vec<(usize, &[u8])> = files.iter().map(|(p, b)| (*p, &b[..])).collect();
            if let Err(e) = crate::fuzzing::merge_agrees(&parts, 1 << 20) {
                panic!("seed {seed}: {e}");
            }
        }
    }

    #[test]
    fn the_frame_map_spills_and_reads_back() {
        let map = FrameMap::new(vec!["x".into(), "y".into()], vec![0, 1]);
        let n = TAIL_FRAMES as u64 * 3 + 17;
        for i in 0..n {
            map.push((i % 2) as usize, i * 3 + 1);
        }
        for frame in [1, 2, TAIL_FRAMES as u64, TAIL_FRAMES as u64 + 1, n - 1, n] {
            let i = frame - 1;
            let want = (if i % 2 == 0 { "x" } else { "y" }, i * 3 + 1);
            assert_eq!(map.locate(frame), Some(want), "frame {frame}");
        }
        assert_eq!(map.locate(n + 1), None);
    }

    /// Frames as fleets make them (each point's files one after the other, their numbers
    /// following one another but where a record was skipped, a number past `u32::MAX`
    /// saturated), from 3 points and from 300 (two bytes a point), looked up in any order
    /// after batches of any size (frames still in the fresh slots, moved, written), over more
    /// chunks than the cache holds: every lookup finds what was entered.
    #[test]
    fn the_frame_map_finds_every_frame_whatever_the_points_and_the_order() {
        for (points, files_each, seed) in [(3usize, 2usize, 1u64), (1, 3, 2), (300, 1, 3)] {
            let mut rng = 0x853c_49e6_748f_ea9bu64 ^ seed;
            let mut next = move || crate::testing::xorshift(&mut rng);
            let mut names = Vec::new();
            let mut point_of = Vec::new();
            for p in 0..points {
                for f in 0..files_each {
                    names.push(format!("p{p}f{f}"));
                    point_of.push(p as u32);
                }
            }
            let map = FrameMap::new(names.clone(), point_of);
            // Each point's file and the number of its last frame there.
            let mut at: Vec<(usize, u64)> = (0..points).map(|p| (p * files_each, 0)).collect();
            let mut want: Vec<(usize, u64)> = Vec::new();
            let total = CACHE_CHUNKS * CHUNK_FRAMES * 2 + 333;
            while want.len() < total {
                let batch = 1 + (next() % 900) as usize;
                let mut entries = Vec::new();
                for _ in 0..batch {
                    // A few points at a time take turns, as a capture's busy hosts do.
                    let p = ((next() % 4) as usize + want.len() / 5000) % points;
                    let (file, local) = &mut at[p];
                    match next() % 1000 {
                        0 if *file + 1 < (p + 1) * files_each => (*file, *local) = (*file + 1, 0),
                        1 => *local += 2,
                        2 => *local = u64::from(u32::MAX) - 1,
                        _ => {}
                    }
                    *local += 1;
                    let e = entry(*file, *local);
                    entries.push(e);
                    want.push((e.0 as usize, u64::from(e.1)));
                }
                for &(file, local) in &entries {
                    map.push(file as usize, u64::from(local));
                }
                for _ in 0..8 {
                    let frame = 1 + next() % want.len() as u64;
                    let (f, l) = want[frame as usize - 1];
                    assert_eq!(
                        map.locate(frame),
                        Some((names[f].as_str(), l)),
                        "frame {frame}"
                    );
                }
            }
            assert!(map.state.lock().unwrap().chunk_at.len() > CACHE_CHUNKS + 1);
            for frame in (1..=want.len() as u64).rev().step_by(7) {
                let (f, l) = want[frame as usize - 1];
                assert_eq!(
                    map.locate(frame),
                    Some((names[f].as_str(), l)),
                    "frame {frame}"
                );
            }
            assert_eq!(map.locate(want.len() as u64 + 1), None);
            assert_eq!(map.locate(0), None);
        }
    }

    /// Frames entered by one thread while another looks them up: every frame entered before
    /// the look began is found as it was entered, whether in a fresh slot, moved or written.
    #[test]
    fn frames_entered_while_they_are_looked_up_are_found() {
        let names: Vec<String> = (0..3).map(|f| format!("f{f}")).collect();
        let map = Arc::new(FrameMap::new(names.clone(), vec![0, 1, 2]));
        let total = 300_000u64;
        let of = |i: u64| ((i % 3) as usize, i / 3 + 1);
        // Lookups so far: the writer waits for one after every 1,000 frames, so that the
        // two overlap however the threads are scheduled.
        let looked = Arc::new(AtomicU64::new(0));
        let writer = {
            let (map, looked) = (map.clone(), looked.clone());
            std::thread::spawn(move || {
                let mut seen = 0;
                for i in 0..total {
                    if i % 1000 == 0 {
                        while looked.load(Ordering::Relaxed) == seen {
                            std::thread::yield_now();
                        }
                        seen = looked.load(Ordering::Relaxed);
                    }
                    let (file, local) = of(i);
                    map.push(file, local);
                }
            })
        };
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        loop {
            let entered = map.entered.load(Ordering::Acquire);
            if entered > 0 {
                // The newest frames (most often in a fresh slot) and any other.
                let back = crate::testing::xorshift(&mut rng) % entered.min(600);
                let any = crate::testing::xorshift(&mut rng) % entered;
                for i in [entered - 1 - back, any] {
                    let (file, local) = of(i);
                    assert_eq!(
                        map.locate(i + 1),
                        Some((names[file].as_str(), local)),
                        "frame {}",
                        i + 1
                    );
                }
            }
            looked.fetch_add(1, Ordering::Relaxed);
            if entered == total {
                break;
            }
        }
        writer.join().unwrap();
        assert!(looked.load(Ordering::Relaxed) > total / 1000);
    }
}
