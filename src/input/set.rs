//! The command line's paths → inputs: directories walked, and the files of one capture point
//! gathered into one capture set, read as one time-ordered capture.
//!
//! Input: paths as given (files, directories, `-`), and whether the user declared them one
//! capture (`--merge`).
//! Output: [`Input`]s in the order of the paths that named them (a set sits where its first
//! file was named), and messages for standard error.
//! Invariants:
//! - A directory is walked recursively, each level in byte order of the names, so the same
//!   tree gives the same inputs; hidden entries (`.name`) are passed over; files in it that are
//!   neither captures nor HARs (by their bytes; a JSON document also by its name, `.har`,
//!   `.zhar`, `.json`) are skipped and counted in one warning.
//! - A set is recognized by names only as the capture tools write them: dumpcap's ring buffer
//!   (`prefix_NNNNN_YYYYmmddHHMMSS.ext`) and tcpdump's `-C`/`-W` suffixes after a capture
//!   extension (`file.pcap`, `file.pcap1`, …), in one directory, each possibly compressed
//!   (`.gz`, `.zst`, `.lz4`, `.xz`: `tcpdump -z gzip` compresses all but the newest). Two files of other names are never joined unless the
//!   user says so.
//! - A file named twice (however spelled) is read once.
//! - The members of a set are read in the order of their first packets' times
//!   ([`CaptureSet::order_by_time`]); when that differs from the order of their names, or when
//!   one file begins before the previous one ends, a warning says so: files are never joined
//!   silently in an order their contents contradict.

use std::collections::{BTreeMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use regex::Regex;

use crate::input::capture::{self, CaptureReader, InputKind};
use crate::input::compressed::Codec;

/// One input of a run: a file (or standard input), or a set of files read as one capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    One(PathBuf),
    Set(CaptureSet),
    /// Capture points of one incident (`--fleet`), merged by time: each a file or a set.
    Points(Vec<CaptureSet>),
}

impl Input {
    /// How the report names it.
    pub fn name(&self) -> String {
        match self {
            Input::One(p) => p.display().to_string(),
            Input::Set(s) => s.name.clone(),
            Input::Points(ps) => ps
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(" + "),
        }
    }
}

/// How a set was recognized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetKind {
    /// dumpcap's ring buffer names.
    Dumpcap,
    /// tcpdump's `-C` / `-W` suffixes.
    Tcpdump,
    /// `--merge`.
    Declared,
}

/// Files of one capture point, read one after the other as one capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureSet {
    /// How the report names the set: a pattern of its files' names, or what `--merge` was
    /// given.
    pub name: String,
    pub kind: SetKind,
    /// In reading order once [`CaptureSet::order_by_time`] has run; in name order before.
    pub members: Vec<PathBuf>,
}

/// What [`plan`] made of the paths.
#[derive(Debug, Default)]
pub struct Plan {
    pub inputs: Vec<Input>,
    /// `(is_error, text)` for standard error.
    pub messages: Vec<(bool, String)>,
}

/// Directory levels walked at most (a guard against symbolic-link loops that the
/// canonical-path check would miss).
const MAX_DEPTH: usize = 32;

/// Gathers every capture input (files and sets; HARs and standard input stay inputs of their
/// own) into one input of capture points, each set's members put in time order first.
pub fn points(inputs: Vec<Input>, max_block: usize) -> (Vec<Input>, Vec<(bool, String)>) {
    let mut points = Vec::new();
    let mut rest = Vec::new();
    let mut messages = Vec::new();
    let mut at = None;
    for (i, input) in inputs.into_iter().enumerate() {
        match input {
            Input::One(p) if p.as_os_str() != "-" && content(&p) != Content::Har => {
                at.get_or_insert(i);
                points.push(CaptureSet {
                    name: p.display().to_string(),
                    kind: SetKind::Declared,
                    members: vec![p],
                });
            }
            Input::Set(mut s) => {
                at.get_or_insert(i);
                messages.extend(s.order_by_time(max_block));
                points.push(s);
            }
            Input::Points(ps) => points.extend(ps),
            other => rest.push(other),
        }
    }
    if points.len() < 2 {
        rest.extend(points.into_iter().map(|s| match s.members.len() {
            1 => Input::One(s.members[0].clone()),
            _ => Input::Set(s),
        }));
        return (rest, messages);
    }
    rest.insert(at.unwrap_or(0).min(rest.len()), Input::Points(points));
    (rest, messages)
}

/// Makes the run's inputs from the command line's paths.
pub fn plan(paths: &[PathBuf], merge: bool) -> Plan {
    let mut plan = Plan::default();
    let mut files: Vec<PathBuf> = Vec::new();
    let mut seen = HashSet::new();
    for path in paths {
        if path.as_os_str() == "-" || !path.is_dir() {
            if path.as_os_str() == "-" || remember(&mut seen, path) {
                files.push(path.clone());
            } else {
                plan.messages.push((
                    false,
                    format!("{}: named more than once; read once", path.display()),
                ));
            }
            continue;
        }
        let mut found = Vec::new();
        let mut skipped = Vec::new();
        walk(path, 0, &mut found, &mut skipped, &mut plan.messages);
        if let Some(first) = skipped.first() {
            plan.messages.push((
                false,
                format!(
                    "{}: {} file(s) that are neither captures nor HARs skipped (first: {})",
                    path.display(),
                    skipped.len(),
                    first.display()
                ),
            ));
        }
        if found.is_empty() {
            plan.messages.push((
                true,
                format!(
                    "{}: no capture or HAR file in this directory",
                    path.display()
                ),
            ));
        }
        for f in found {
            if remember(&mut seen, &f) {
                files.push(f);
            }
        }
    }
    if merge {
        let (members, rest): (Vec<PathBuf>, Vec<PathBuf>) = files
            .into_iter()
            .partition(|p| p.as_os_str() != "-" && !matches!(content(p), Content::Har));
        if members.len() >= 2 {
            let name = paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" + ");
            plan.inputs.push(Input::Set(CaptureSet {
                name,
                kind: SetKind::Declared,
                members,
            }));
        } else {
            plan.inputs.extend(members.into_iter().map(Input::One));
        }
        plan.inputs.extend(rest.into_iter().map(Input::One));
        return plan;
    }
    // Group by the names the capture tools give; a group of one is a file alone.
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    let mut alone: Vec<(usize, PathBuf)> = Vec::new();
    let mut position: std::collections::HashMap<PathBuf, usize> = Default::default();
    for (i, f) in files.into_iter().enumerate() {
        position.insert(f.clone(), i);
        match ring_name(&f) {
            Some(r) => {
                groups
                    .entry(r.key)
                    .or_insert_with(|| (i, r.pattern, r.kind, Vec::new()))
                    .3
                    .push((r.seq, f));
            }
            None => alone.push((i, f)),
        }
    }
    let mut placed: Vec<(usize, Input)> =
        alone.into_iter().map(|(i, f)| (i, Input::One(f))).collect();
    for (_, (first, pattern, kind, mut members)) in groups {
        members.sort();
        // Two files with one number are not one ring (a file and its compressed copy, say):
        // they are read apart, as given.
        if let Some(w) = members.windows(2).find(|w| w[0].0 == w[1].0) {
            plan.messages.push((
                false,
                format!(
                    "{pattern}: {} and {} have the same number in the ring, so the files are \
                     read apart (--merge reads them as one capture)",
                    w[0].1.display(),
                    w[1].1.display()
                ),
            ));
            placed.extend(
                members
                    .into_iter()
                    .map(|(_, p)| (position.get(&p).copied().unwrap_or(first), Input::One(p))),
            );
            continue;
        }
        // A ring buffer numbers its files without holes: a hole is a file that is missing.
        let missing: Vec<u64> = members
            .windows(2)
            .filter(|w| w[1].0 > w[0].0.saturating_add(1))
            .map(|w| w[0].0 + 1)
            .collect();
        if let Some(m) = missing.first().filter(|_| members.len() > 1) {
            plan.messages.push((
                false,
                format!(
                    "{pattern}: the file numbered {m} is missing ({} hole(s) in the numbers): \
                     what it held is read as lost",
                    missing.len()
                ),
            ));
        }
        if members.len() == 1 {
            placed.push((first, Input::One(members.remove(0).1)));
        } else {
            placed.push((
                first,
                Input::Set(CaptureSet {
                    name: pattern,
                    kind,
                    members: members.into_iter().map(|(_, p)| p).collect(),
                }),
            ));
        }
    }
    placed.sort_by_key(|(i, _)| *i);
    plan.inputs = placed.into_iter().map(|(_, x)| x).collect();
    plan
}

/// Files named alike: where the first was named, the set's pattern, its kind, and each
/// file with its number in the ring.
type Group = (usize, String, SetKind, Vec<(u64, PathBuf)>);

/// Every regular file the paths name, directories walked as the inputs are walked, whatever
/// their content: what a run may read, and so must never overwrite.
pub fn files_under(paths: &[PathBuf]) -> Vec<PathBuf> {
    fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() && depth < MAX_DEPTH {
                walk(&p, depth + 1, out);
            } else if p.is_file() {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            walk(p, 0, &mut out);
        } else {
            out.push(p.clone());
        }
    }
    out
}

/// Records a file by its canonical path; false when it was seen already.
fn remember(seen: &mut HashSet<PathBuf>, path: &Path) -> bool {
    seen.insert(std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()))
}

fn walk(
    dir: &Path,
    depth: usize,
    found: &mut Vec<PathBuf>,
    skipped: &mut Vec<PathBuf>,
    messages: &mut Vec<(bool, String)>,
) {
    if depth > MAX_DEPTH {
        messages.push((
            false,
            format!(
                "{}: deeper than {MAX_DEPTH} levels; not walked",
                dir.display()
            ),
        ));
        return;
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            messages.push((
                true,
                format!("{}: cannot read the directory: {e}", dir.display()),
            ));
            return;
        }
    };
    let mut names: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| !e.file_name().as_encoded_bytes().starts_with(b"."))
        .map(|e| e.path())
        .collect();
    names.sort_by(|a, b| {
        a.as_os_str()
            .as_encoded_bytes()
            .cmp(b.as_os_str().as_encoded_bytes())
    });
    for p in names {
        if p.is_dir() {
            walk(&p, depth + 1, found, skipped, messages);
        } else if p.is_file() {
            match content(&p) {
                Content::Capture | Content::Unreadable => found.push(p),
                // A JSON document in a directory is taken for a HAR only by its name: reports
                // and other JSON often sit beside captures.
                Content::Har if har_name(&p) => found.push(p),
                Content::Har | Content::Other => skipped.push(p),
            }
        }
    }
}

/// A name that a HAR export has: `.har`, `.zhar` or `.json`, possibly compressed.
fn har_name(p: &Path) -> bool {
    let name = file_name(p).to_ascii_lowercase();
    let base = ["gz", "zst", "lz4", "xz"]
        .iter()
        .find_map(|c| name.strip_suffix(c).and_then(|b| b.strip_suffix('.')))
        .unwrap_or(&name);
    [".har", ".zhar", ".json"].iter().any(|e| base.ends_with(e))
}

/// What a file holds, by its first bytes (decompressed when compressed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Content {
    Capture,
    Har,
    /// Cannot be opened or decompressed: kept, so that reading it names the error.
    Unreadable,
    Other,
}

fn content(path: &Path) -> Content {
    let Ok(f) = std::fs::File::open(path) else {
        return Content::Unreadable;
    };
    let mut head = [0u8; 8];
    let got = read_up_to(f, &mut head);
    let kind = match Codec::sniff(&head[..got]) {
        Some(codec) => match std::fs::File::open(path) {
            Ok(f) => {
                let mut inner = [0u8; 8];
                let n = read_up_to(codec.decoder(f), &mut inner);
                if n == 0 {
                    return Content::Unreadable;
                }
                capture::sniff(&inner[..n])
            }
            Err(_) => return Content::Unreadable,
        },
        None => capture::sniff(&head[..got]),
    };
    match kind {
        Some(InputKind::Pcap | InputKind::PcapNg) => Content::Capture,
        Some(InputKind::Json | InputKind::Zlib) => Content::Har,
        None => Content::Other,
    }
}

/// Reads until `buf` is full or the input ends (or fails); returns the bytes read.
fn read_up_to(mut r: impl Read, buf: &mut [u8]) -> usize {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    got
}

/// A file name as a ring buffer's writer makes it.
#[derive(Debug, PartialEq, Eq)]
struct RingName {
    /// Files with the same key are one set.
    key: String,
    /// How the report names the set.
    pattern: String,
    kind: SetKind,
    /// The file's number in the ring.
    seq: u64,
}

fn ring_name(path: &Path) -> Option<RingName> {
    static DUMPCAP: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    static TCPDUMP: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    let name = path.file_name()?.to_str()?;
    let (base, comp) = ["gz", "zst", "lz4", "xz"]
        .iter()
        .find_map(|c| {
            name.strip_suffix(c)
                .and_then(|b| b.strip_suffix('.'))
                .map(|b| (b, format!(".{c}")))
        })
        .unwrap_or((name, String::new()));
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => format!("{}/", d.display()),
        _ => String::new(),
    };
    let dumpcap = DUMPCAP.get_or_init(|| {
        // `[0-9]`, not `\d`: the writers number files in ASCII, and Unicode's digit class
        // makes the pattern over ten times slower to build (half a millisecond, at every start).
        Regex::new(r"^(?P<prefix>.+)_(?P<n>[0-9]{5,})_(?P<t>[0-9]{14})(?P<ext>\.[A-Za-z0-9]+)?$")
            .expect("a valid pattern")
    });
    if let Some(c) = dumpcap.captures(base) {
        let prefix = &c["prefix"];
        let ext = c.name("ext").map_or("", |m| m.as_str());
        return Some(RingName {
            key: format!("dumpcap\0{dir}\0{prefix}\0{ext}"),
            pattern: format!("{dir}{prefix}_*{ext}{comp}"),
            kind: SetKind::Dumpcap,
            seq: c["n"].parse().unwrap_or(u64::MAX),
        });
    }
    let tcpdump = TCPDUMP.get_or_init(|| {
        Regex::new(r"^(?i:(?P<stem>.+\.(?:pcapng|pcap|cap|dmp|dump|trc)))(?P<n>[0-9]*)$")
            .expect("a valid pattern")
    });
    let c = tcpdump.captures(base)?;
    let stem = &c["stem"];
    let n = &c["n"];
    Some(RingName {
        key: format!("tcpdump\0{dir}\0{stem}"),
        pattern: format!("{dir}{stem}*"),
        kind: SetKind::Tcpdump,
        // The file without a number is the first (`-C` without `-W`), before `1`.
        seq: if n.is_empty() {
            0
        } else {
            n.parse::<u64>().unwrap_or(u64::MAX)
        },
    })
}

/// The time of a capture file's first packet (decompressed when compressed); `None` when it
/// has none or cannot be read (reading it later names the error).
pub fn first_packet_time(path: &Path, max_block: usize) -> Option<i64> {
    let f = std::fs::File::open(path).ok()?;
    let mut head = [0u8; 8];
    let got = read_up_to(&f, &mut head);
    let src: Box<dyn Read> = match Codec::sniff(&head[..got]) {
        Some(codec) => codec.decoder(std::fs::File::open(path).ok()?),
        None => Box::new(std::fs::File::open(path).ok()?),
    };
    let mut reader = CaptureReader::open(src, max_block).ok()?;
    // The first packets of a pcapng may lack a timestamp (simple packet blocks): look a
    // little further for one.
    for _ in 0..64 {
        match reader.next_packet() {
            Ok(Some(p)) if p.time_ns != 0 => return Some(p.time_ns),
            Ok(Some(_)) => {}
            _ => return None,
        }
    }
    None
}

impl CaptureSet {
    /// Puts the members in the order of their first packets' times (the name order breaks
    /// ties and places files without packets); returns warnings when that differs from the
    /// order of the names.
    pub fn order_by_time(&mut self, max_block: usize) -> Vec<(bool, String)> {
        let mut keyed: Vec<(Option<i64>, usize, PathBuf)> = self
            .members
            .drain(..)
            .enumerate()
            .map(|(i, p)| (first_packet_time(&p, max_block), i, p))
            .collect();
        let by_name: Vec<usize> = keyed.iter().map(|k| k.1).collect();
        // Files with no packet keep their place after the file named before them.
        let mut last = i64::MIN;
        let mut key: Vec<(i64, usize, PathBuf)> = Vec::with_capacity(keyed.len());
        for (t, i, p) in keyed.drain(..) {
            let t = t.unwrap_or(last);
            last = last.max(t);
            key.push((t, i, p));
        }
        key.sort_by_key(|k| (k.0, k.1));
        let order: Vec<usize> = key.iter().map(|k| k.1).collect();
        let mut messages = Vec::new();
        if order != by_name && self.kind != SetKind::Declared {
            messages.push((
                false,
                format!(
                    "{}: files read in the order of their first packets, which differs from the \
                     order of their names (a ring buffer that wrapped, or renamed files): {}",
                    self.name,
                    key.iter()
                        .map(|k| file_name(&k.2))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        self.members = key.into_iter().map(|k| k.2).collect();
        messages
    }
}

/// A path's last component, for messages.
pub fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(s: &str) -> Option<(String, SetKind, u64)> {
        ring_name(Path::new(s)).map(|r| (r.pattern, r.kind, r.seq))
    }

    #[test]
    fn dumpcap_and_tcpdump_names_are_recognized_and_others_are_not() {
        assert_eq!(
            ring("cap/ring_00012_20261201140501.pcapng"),
            Some(("cap/ring_*.pcapng".into(), SetKind::Dumpcap, 12))
        );
        assert_eq!(
            ring("ring_00001_20261201140501.pcap.gz"),
            Some(("ring_*.pcap.gz".into(), SetKind::Dumpcap, 1))
        );
        assert_eq!(
            ring("a_b_123456_20261201140501"),
            Some(("a_b_*".into(), SetKind::Dumpcap, 123_456))
        );
        assert_eq!(
            ring("/x/trace.pcap"),
            Some(("/x/trace.pcap*".into(), SetKind::Tcpdump, 0))
        );
        assert_eq!(
            ring("/x/trace.pcap12.zst"),
            Some(("/x/trace.pcap*".into(), SetKind::Tcpdump, 12))
        );
        assert_eq!(ring("/x/trace.PCAPNG3").map(|r| r.2), Some(3));
        // Digits before the extension are a name, not a ring buffer's number.
        assert_eq!(ring("host1.json"), None);
        assert_eq!(ring("capture1.har"), None);
        assert_eq!(
            ring("ring_0001_20261201140501.pcap").map(|r| r.1),
            Some(SetKind::Tcpdump),
            "four digits are not dumpcap's"
        );
        let (a, b) = (
            ring_name(Path::new("d/trace.pcap1")).unwrap(),
            ring_name(Path::new("e/trace.pcap2")).unwrap(),
        );
        assert_ne!(a.key, b.key, "two directories are two capture points");
        // `tcpdump -C -z gzip` compresses every file but the one being written.
        let (a, b) = (
            ring_name(Path::new("trace.pcap1")).unwrap(),
            ring_name(Path::new("trace.pcap2.gz")).unwrap(),
        );
        assert_eq!(a.key, b.key);
        // The writers number files in ASCII digits; other scripts' digits are part of a name.
        assert_eq!(
            ring("ring_\u{661}\u{662}\u{663}\u{664}\u{665}_20261201140501.pcap").map(|r| r.1),
            Some(SetKind::Tcpdump)
        );
        assert_eq!(ring("trace.pcap\u{661}"), None);
    }
}
