//! Many capture points read as one capture: their packets merged by time, as `mergecap` merges
//! files, so that one flow table and one session stage see a session wherever it was captured.
//!
//! Input: capture points, each its files in reading order (one file, or a ring buffer), each
//! file possibly compressed.
//! Output: [`MergedCapture`], a `Read` of one pcapng stream holding every packet of every
//! point in time order (ties: the point named first), Decryption Secrets Blocks passed on as
//! they come; and a [`FrameMap`] that says, for each frame of that stream, which file it came
//! from and its number there, so the report cites the file a person opens.
//! Invariants:
//! - A TCP connection seen at two points (the same addresses and ports) is one connection of
//!   the merged capture: its second copy of each segment is a retransmission to reassembly
//!   (the first captured copy wins) and a copy that only one point holds fills the other's
//!   hole. Connections with other addresses or ports (each side of a proxy, a NAT) stay
//!   distinct connections.
//! - Memory: one read buffer and one pending packet per point. The frame map is 8 bytes per
//!   packet in an unnamed temporary file, with the last 64 KiB in memory and 256 KiB of it
//!   read back, in blocks, for the report's citations.
//! - A file that cannot be read is an error naming it; the other files and points go on.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::input::capture::{CaptureReader, Record};
use crate::input::compressed::open_sniffed;

/// A file that cannot be read is not fatal: its error, for standard error.
pub type Messages = Arc<Mutex<Vec<(bool, String)>>>;

/// Which file each frame of the merged stream came from, and its number there.
#[derive(Debug)]
pub struct FrameMap {
    /// Every file of every point, in the order points and their files were given.
    pub files: Vec<String>,
    state: Mutex<MapState>,
}

#[derive(Debug, Default)]
struct MapState {
    /// Entries of frames `1..=flushed` live in `spill`; later ones in `tail`.
    spill: Option<std::fs::File>,
    flushed: u64,
    tail: Vec<u8>,
    /// The file could not be written: later frames are cited without their file.
    broken: bool,
    /// Blocks of `spill` read back, at `block % CACHE_BLOCKS`: the report cites a few frames
    /// near one another for each record, so most lookups find their block here.
    cache: Vec<u8>,
    /// What each cache slot holds: its block's number plus one (0: nothing), and how many of
    /// its bytes were read (a block at the end of the file is read again once it has grown).
    cached: Vec<(u64, usize)>,
}

/// Entries kept in memory before they go to the temporary file.
const TAIL_ENTRIES: usize = 8192;
/// One entry: the file's index (u32) and the frame's number in it (u32, saturated).
const ENTRY: usize = 8;
/// Bytes of the temporary file read back at once.
const BLOCK_BYTES: usize = 4096;
/// Blocks of the temporary file kept read back (256 KiB).
const CACHE_BLOCKS: usize = 64;

impl FrameMap {
    fn new(files: Vec<String>) -> Self {
        FrameMap {
            files,
            state: Mutex::new(MapState::default()),
        }
    }

    /// Appends the entries of the next frames (as [`entry`] makes them), under one lock.
    fn extend(&self, entries: &[u8]) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        s.tail.extend_from_slice(entries);
        if s.tail.len() >= TAIL_ENTRIES * ENTRY {
            s.flush();
        }
    }

    #[cfg(test)]
    fn push(&self, file: usize, local: u64) {
        self.extend(&entry(file, local));
    }

    /// The file (its name) and number there of frame `frame` (1-based) of the merged stream.
    pub fn locate(&self, frame: u64) -> Option<(&str, u64)> {
        let mut s = self.state.lock().ok()?;
        let i = frame.checked_sub(1)?;
        let e = if i >= s.flushed {
            let at = usize::try_from(i - s.flushed).ok()? * ENTRY;
            <[u8; ENTRY]>::try_from(s.tail.get(at..at + ENTRY)?).ok()?
        } else {
            s.spilled(i)?
        };
        let file = u32::from_le_bytes([e[0], e[1], e[2], e[3]]) as usize;
        let local = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
        Some((self.files.get(file)?.as_str(), u64::from(local)))
    }
}

/// The map's entry of a frame: the file's index, then the frame's number there.
fn entry(file: usize, local: u64) -> [u8; ENTRY] {
    let mut e = [0u8; ENTRY];
    e[..4].copy_from_slice(&u32::try_from(file).unwrap_or(u32::MAX).to_le_bytes());
    e[4..].copy_from_slice(&u32::try_from(local).unwrap_or(u32::MAX).to_le_bytes());
    e
}

impl MapState {
    fn flush(&mut self) {
        if self.broken {
            return;
        }
        if self.spill.is_none() {
            match tempfile::tempfile() {
                Ok(f) => self.spill = Some(f),
                Err(_) => {
                    self.broken = true;
                    return;
                }
            }
        }
        let n = (self.tail.len() / ENTRY) as u64;
        match self.spill.as_mut().map(|f| f.write_all(&self.tail)) {
            Some(Ok(())) => {
                self.flushed += n;
                self.tail.clear();
            }
            _ => self.broken = true,
        }
    }

    /// Entry `i` (0-based), which is in the temporary file: from the cache, or read back
    /// with its block.
    fn spilled(&mut self, i: u64) -> Option<[u8; ENTRY]> {
        use std::os::unix::fs::FileExt;
        let at = i.checked_mul(ENTRY as u64)?;
        let block = at / BLOCK_BYTES as u64;
        let within = (at % BLOCK_BYTES as u64) as usize;
        let slot = (block % CACHE_BLOCKS as u64) as usize;
        if self.cached.is_empty() {
            self.cache = vec![0; CACHE_BLOCKS * BLOCK_BYTES];
            self.cached = vec![(0, 0); CACHE_BLOCKS];
        }
        let (tag, len) = *self.cached.get(slot)?;
        if tag != block + 1 || len < within + ENTRY {
            let start = block * BLOCK_BYTES as u64;
            let end = self.flushed.checked_mul(ENTRY as u64)?;
            let len = usize::try_from(end.checked_sub(start)?)
                .ok()?
                .min(BLOCK_BYTES);
            let f = self.spill.as_ref()?;
            let to = self
                .cache
                .get_mut(slot * BLOCK_BYTES..slot * BLOCK_BYTES + len)?;
            if f.read_exact_at(to, start).is_err() {
                self.cached[slot] = (0, 0);
                return None;
            }
            self.cached[slot] = (block + 1, len);
        }
        let from = slot * BLOCK_BYTES + within;
        <[u8; ENTRY]>::try_from(self.cache.get(from..from + ENTRY)?).ok()
    }
}

/// A capture point being read: its files, the one open now and its next packet.
struct Point {
    files: Vec<(usize, PathBuf)>,
    next_file: usize,
    reader: Option<(usize, CaptureReader<Box<dyn Read>>)>,
    pending: Option<Pending>,
    /// The buffer of the packet written last, to be filled again.
    spare: Vec<u8>,
    /// The file read before, and the time of its last packet (for the overlap warning).
    last: Option<(usize, i64)>,
}

struct Pending {
    time_ns: i64,
    linktype: u32,
    orig_len: u32,
    data: Vec<u8>,
    file: usize,
    local: u64,
}

/// The merged capture: a pcapng stream, made as it is read.
pub struct MergedCapture {
    points: Vec<Point>,
    map: Arc<FrameMap>,
    messages: Messages,
    max_block: usize,
    out: Vec<u8>,
    at: usize,
    /// Entries of the frames written to `out` and not yet in the map: they go to it together,
    /// before the bytes of those frames are read.
    entries: Vec<u8>,
    /// Interface ids given so far, by link type.
    interfaces: Vec<u32>,
    started: bool,
}

impl MergedCapture {
    /// `points`: each point's files in reading order.
    pub fn new(points: &[Vec<PathBuf>], max_block: usize) -> (Self, Arc<FrameMap>, Messages) {
        let mut names = Vec::new();
        let mut ps = Vec::new();
        for files in points {
            let mut fs = Vec::new();
            for f in files {
                fs.push((names.len(), f.clone()));
                names.push(f.display().to_string());
            }
            ps.push(Point {
                files: fs,
                next_file: 0,
                reader: None,
                pending: None,
                spare: Vec::new(),
                last: None,
            });
        }
        let map = Arc::new(FrameMap::new(names));
        let messages: Messages = Arc::default();
        let m = MergedCapture {
            points: ps,
            map: map.clone(),
            messages: messages.clone(),
            max_block,
            out: Vec::new(),
            at: 0,
            entries: Vec::new(),
            interfaces: Vec::new(),
            started: false,
        };
        (m, map, messages)
    }

    fn say(&self, is_error: bool, text: String) {
        if let Ok(mut m) = self.messages.lock() {
            m.push((is_error, text));
        }
    }

    /// Makes point `p`'s next packet pending (writing any secrets it passes), opening its next
    /// file when one ends.
    fn advance(&mut self, p: usize) {
        loop {
            if self.points[p].reader.is_none() {
                let point = &mut self.points[p];
                let Some((file, path)) = point.files.get(point.next_file).cloned() else {
                    return;
                };
                point.next_file += 1;
                match open(&path, self.max_block) {
                    Ok(r) => self.points[p].reader = Some((file, r)),
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
            let next = match reader.next_record() {
                Ok(Some(Record::Packet(pk))) => {
                    let mut data = std::mem::take(&mut point.spare);
                    data.clear();
                    data.extend_from_slice(pk.data);
                    Some(Pending {
                        time_ns: pk.time_ns,
                        linktype: pk.linktype,
                        orig_len: pk.orig_len,
                        data,
                        file,
                        local: pk.frame,
                    })
                }
                Ok(Some(Record::TlsKeyLog(text))) => {
                    let text = text.to_vec();
                    self.write_secrets(&text);
                    continue;
                }
                Ok(None) => None,
                Err(e) => {
                    let name = &self.map.files[file];
                    let text = format!("{name}: {e}; analyzed up to there");
                    self.say(true, text);
                    None
                }
            };
            match next {
                Some(pk) => {
                    self.points[p].pending = Some(pk);
                    return;
                }
                None => {
                    if let Some((_, r)) = self.points[p].reader.take()
                        && let Some(at) = r.truncated_at()
                    {
                        let name = &self.map.files[file];
                        let text = format!(
                            "{name}: offset {at}: last record cut short; analyzed up to the \
                             last whole packet"
                        );
                        self.say(true, text);
                    }
                }
            }
        }
    }

    fn write_block(&mut self, kind: u32, body: &[u8]) {
        self.write_block_of(kind, body, &[]);
    }

    /// Writes a block whose body is `head` then `data`.
    fn write_block_of(&mut self, kind: u32, head: &[u8], data: &[u8]) {
        let body = head.len() + data.len();
        let pad = (4 - body % 4) % 4;
        let len = (12 + body + pad) as u32;
        self.out.extend_from_slice(&kind.to_le_bytes());
        self.out.extend_from_slice(&len.to_le_bytes());
        self.out.extend_from_slice(head);
        self.out.extend_from_slice(data);
        self.out.extend_from_slice(&[0; 3][..pad]);
        self.out.extend_from_slice(&len.to_le_bytes());
    }

    fn write_secrets(&mut self, text: &[u8]) {
        self.start();
        let mut body = Vec::with_capacity(8 + text.len());
        body.extend_from_slice(&0x544c_534bu32.to_le_bytes());
        body.extend_from_slice(&(text.len() as u32).to_le_bytes());
        body.extend_from_slice(text);
        self.write_block(0x0000_000A, &body);
    }

    fn start(&mut self) {
        if self.started {
            return;
        }
        self.started = true;
        let mut shb = Vec::new();
        shb.extend_from_slice(&0x1a2b_3c4du32.to_le_bytes());
        shb.extend_from_slice(&1u16.to_le_bytes());
        shb.extend_from_slice(&0u16.to_le_bytes());
        shb.extend_from_slice(&[0xff; 8]);
        self.write_block(0x0A0D_0D0A, &shb);
    }

    fn interface(&mut self, linktype: u32) -> u32 {
        if let Some(i) = self.interfaces.iter().position(|&l| l == linktype) {
            return i as u32;
        }
        let mut idb = Vec::new();
        idb.extend_from_slice(&(linktype as u16).to_le_bytes());
        idb.extend_from_slice(&0u16.to_le_bytes());
        idb.extend_from_slice(&0u32.to_le_bytes());
        // if_tsresol: nanoseconds, then the end of options.
        idb.extend_from_slice(&9u16.to_le_bytes());
        idb.extend_from_slice(&1u16.to_le_bytes());
        idb.extend_from_slice(&[9, 0, 0, 0]);
        idb.extend_from_slice(&[0, 0, 0, 0]);
        self.write_block(0x0000_0001, &idb);
        self.interfaces.push(linktype);
        (self.interfaces.len() - 1) as u32
    }

    /// Writes the earliest pending packet; false when every point is done.
    fn next_packet(&mut self) -> bool {
        if !self.started {
            self.start();
            for p in 0..self.points.len() {
                self.advance(p);
            }
        }
        let Some(p) = (0..self.points.len())
            .filter(|&p| self.points[p].pending.is_some())
            .min_by_key(|&p| self.points[p].pending.as_ref().map(|x| (x.time_ns, p)))
        else {
            return false;
        };
        let Some(pk) = self.points[p].pending.take() else {
            return false;
        };
        // Within a point, files follow one another: one that begins before the previous
        // one ends is said, once per file.
        match self.points[p].last {
            Some((file, end)) if file != pk.file && pk.time_ns < end => {
                let (a, b) = (&self.map.files[file], &self.map.files[pk.file]);
                let text = format!(
                    "{b}: its first packet is older than the last one of {a}: the files \
                     overlap in time or the clock went back; read one after the other"
                );
                self.say(false, text);
            }
            _ => {}
        }
        self.points[p].last = Some((pk.file, pk.time_ns));
        let iface = self.interface(pk.linktype);
        let ts = pk.time_ns.max(0) as u64;
        let mut head = [0u8; 20];
        head[..4].copy_from_slice(&iface.to_le_bytes());
        head[4..8].copy_from_slice(&((ts >> 32) as u32).to_le_bytes());
        head[8..12].copy_from_slice(&(ts as u32).to_le_bytes());
        head[12..16].copy_from_slice(&(pk.data.len() as u32).to_le_bytes());
        head[16..].copy_from_slice(&pk.orig_len.to_le_bytes());
        self.write_block_of(0x0000_0006, &head, &pk.data);
        self.entries.extend_from_slice(&entry(pk.file, pk.local));
        self.points[p].spare = pk.data;
        self.advance(p);
        true
    }
}

impl Read for MergedCapture {
    /// Fills `buf` with as many packets as it takes, their frames entered in the map together
    /// before any of their bytes is handed out (a frame is cited only after it was read).
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // What was handed out goes; what was not stays in front.
        self.out.drain(..self.at);
        self.at = 0;
        while self.out.len() - self.at < buf.len() && self.next_packet() {}
        if !self.entries.is_empty() {
            self.map.extend(&self.entries);
            self.entries.clear();
        }
        let n = buf.len().min(self.out.len() - self.at);
        buf[..n].copy_from_slice(&self.out[self.at..self.at + n]);
        self.at += n;
        Ok(n)
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

    fn read_all(mut r: impl Read, piece: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = vec![0; piece];
        loop {
            match r.read(&mut buf) {
                Ok(0) => return out,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => panic!("{e}"),
            }
        }
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
        let (merged, map, messages) = MergedCapture::new(&points, 1 << 20);
        let whole = read_all(merged, 1 << 16);
        // Byte by byte and in odd pieces: the same stream.
        for piece in [1, 7, 333] {
            let (m, _, _) = MergedCapture::new(&points, 1 << 20);
            assert_eq!(read_all(m, piece), whole, "pieces of {piece}");
        }
        let mut r = CaptureReader::open(&whole[..], 1 << 20).unwrap();
        let mut seen = Vec::new();
        while let Some(p) = r.next_packet().unwrap() {
            let (file, local) = map.locate(p.frame).unwrap();
            seen.push((
                p.time_ns / 1_000_000_000,
                p.linktype,
                p.orig_len,
                String::from_utf8_lossy(p.data).into_owned(),
                crate::input::set::file_name(std::path::Path::new(file)),
                local,
            ));
        }
        let want: Vec<(i64, u32, u32, String, String, u64)> = [
            (1, 1, "a1", "a.pcap", 1),
            (2, 101, "b1", "b.pcap", 1),
            // A tie goes to the point named first.
            (3, 1, "a2", "a.pcap", 2),
            (3, 101, "b2", "b.pcap", 2),
            (4, 101, "b3", "b.pcap", 3),
            (5, 1, "a3", "a.pcap", 3),
        ]
        .into_iter()
        .map(|(t, l, d, f, n)| (t, l, 3, d.to_string(), f.to_string(), n))
        .collect();
        assert_eq!(seen, want);
        assert_eq!(map.locate(0), None);
        assert_eq!(map.locate(7), None);
        let messages = messages.lock().unwrap().clone();
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert!(messages[0].0 && messages[0].1.contains("bad.pcap: not a pcap"));
    }

    #[test]
    fn the_frame_map_spills_and_reads_back() {
        let map = FrameMap::new(vec!["x".into(), "y".into()]);
        let n = TAIL_ENTRIES as u64 * 3 + 17;
        for i in 0..n {
            map.push((i % 2) as usize, i * 3 + 1);
        }
        for frame in [1, 2, TAIL_ENTRIES as u64, TAIL_ENTRIES as u64 + 1, n - 1, n] {
            let i = frame - 1;
            let want = (if i % 2 == 0 { "x" } else { "y" }, i * 3 + 1);
            assert_eq!(map.locate(frame), Some(want), "frame {frame}");
        }
        assert_eq!(map.locate(n + 1), None);
    }

    /// Entries come in batches of any size, so the file can end within a block that was read
    /// back; lookups in any order, over more blocks than the cache holds, and of a block read
    /// back before the file grew past it, all find what was entered.
    #[test]
    fn the_frame_map_reads_back_through_its_cache_whatever_the_order() {
        let names: Vec<String> = (0..7).map(|i| format!("f{i}")).collect();
        let map = FrameMap::new(names.clone());
        let want = |i: u64| {
            (
                names[(i % 7) as usize].as_str(),
                i.wrapping_mul(2_654_435_761) >> 40,
            )
        };
        let mut rng = 0x853c_49e6_748f_ea9bu64;
        let mut next = move || crate::testing::xorshift(&mut rng);
        let mut entered = 0u64;
        let total = (CACHE_BLOCKS * BLOCK_BYTES / ENTRY) as u64 * 3;
        let mut spilled_lookups = 0;
        while entered < total {
            let batch = 1 + next() % 700;
            let mut entries = Vec::new();
            for i in entered..entered + batch {
                let (file, local) = want(i);
                let file = names.iter().position(|n| n == file).unwrap();
                entries.extend_from_slice(&entry(file, local));
            }
            map.extend(&entries);
            entered += batch;
            // The newest spilled entries (the last block, maybe cut), then some anywhere.
            let flushed = map.state.lock().unwrap().flushed;
            let mut frames: Vec<u64> = (0..4).map(|k| flushed.saturating_sub(k)).collect();
            frames.extend((0..8).map(|_| 1 + next() % entered));
            for frame in frames.into_iter().filter(|&f| f >= 1) {
                spilled_lookups += u64::from(frame <= flushed);
                assert_eq!(map.locate(frame), Some(want(frame - 1)), "frame {frame}");
            }
        }
        assert!(spilled_lookups > 1000, "{spilled_lookups}");
        for frame in (1..=entered).rev().step_by(97) {
            assert_eq!(map.locate(frame), Some(want(frame - 1)), "frame {frame}");
        }
        assert_eq!(map.locate(entered + 1), None);
    }
}
