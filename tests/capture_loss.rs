//! Capture loss never makes an accusation: every committed capture, analyzed whole and again
//! after the losses a busy capture host produces — packets dropped, duplicated or reordered,
//! the snap length cut, the capture cut short, the capture split in two files — must give,
//! for each resume found in both runs, the same verdict or `capture_incomplete`, and no
//! finding, no cursor claim and no id shape that the loss-free run does not have.
//!
//! The losses are applied to the packet records of the committed files (pcap and pcapng), so
//! the analyzer sees what it would see from a real lossy capture, not a hand-made pattern.
//! One relaxation: a verdict that the loss-free run decided from session evidence (an id
//! shape, a re-delivery, a resume acknowledgment) may become `unverifiable` when the loss
//! took that evidence away: saying less is never an accusation.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use mcp_resume_audit::stages::{BodyEnd, Endpoint};
use mcp_resume_audit::{
    CursorStatus, FindingKind, InputReport, Options, ResumeRecord, Severity, TlsKeys, Verdict,
    analyze_reader,
};

// ---------------------------------------------------------------------------------------------
// Capture files as records.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    Little,
    Big,
}

impl Order {
    fn u32(self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        match self {
            Order::Little => u32::from_le_bytes(a),
            Order::Big => u32::from_be_bytes(a),
        }
    }
    fn put(self, v: u32) -> [u8; 4] {
        match self {
            Order::Little => v.to_le_bytes(),
            Order::Big => v.to_be_bytes(),
        }
    }
}

/// One record of a capture file: a packet (which losses may touch) or any other pcapng block
/// (which stays where it is).
#[derive(Clone, Debug)]
struct Block {
    bytes: Vec<u8>,
    packet: bool,
    order: Order,
}

#[derive(Clone, Debug)]
enum Format {
    /// The 24-byte global header, the byte order.
    Pcap(Vec<u8>, Order),
    Pcapng,
}

#[derive(Clone, Debug)]
struct Capture {
    format: Format,
    blocks: Vec<Block>,
}

impl Capture {
    fn parse(bytes: &[u8]) -> Capture {
        let magic = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        if magic == 0x0A0D_0D0A {
            return Capture::parse_pcapng(bytes);
        }
        let order = match magic {
            0xa1b2_c3d4 | 0xa1b2_3c4d => Order::Little,
            0xd4c3_b2a1 | 0x4d3c_b2a1 => Order::Big,
            m => panic!("not a capture: magic {m:#x}"),
        };
        let mut blocks = Vec::new();
        let mut at = 24;
        while at + 16 <= bytes.len() {
            let incl = order.u32(&bytes[at + 8..]) as usize;
            let end = (at + 16 + incl).min(bytes.len());
            blocks.push(Block {
                bytes: bytes[at..end].to_vec(),
                packet: true,
                order,
            });
            at = end;
        }
        Capture {
            format: Format::Pcap(bytes[..24].to_vec(), order),
            blocks,
        }
    }

    fn parse_pcapng(bytes: &[u8]) -> Capture {
        let mut blocks = Vec::new();
        let mut at = 0;
        let mut order = Order::Little;
        while at + 12 <= bytes.len() {
            let kind_le =
                u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
            if kind_le == 0x0A0D_0D0A {
                order = if u32::from_le_bytes([
                    bytes[at + 8],
                    bytes[at + 9],
                    bytes[at + 10],
                    bytes[at + 11],
                ]) == 0x1A2B_3C4D
                {
                    Order::Little
                } else {
                    Order::Big
                };
            }
            let kind = order.u32(&bytes[at..]);
            let len = order.u32(&bytes[at + 4..]) as usize;
            if len < 12 || at + len > bytes.len() {
                break;
            }
            blocks.push(Block {
                bytes: bytes[at..at + len].to_vec(),
                packet: matches!(kind, 3 | 6),
                order,
            });
            at += len;
        }
        Capture {
            format: Format::Pcapng,
            blocks,
        }
    }

    fn write(&self) -> Vec<u8> {
        let mut out = match &self.format {
            Format::Pcap(h, _) => h.clone(),
            Format::Pcapng => Vec::new(),
        };
        for b in &self.blocks {
            out.extend_from_slice(&b.bytes);
        }
        out
    }

    /// The header (and, for pcapng, every block that is not a packet) with `blocks`.
    fn with_blocks(&self, keep: impl Fn(usize, &Block) -> bool) -> Capture {
        Capture {
            format: self.format.clone(),
            blocks: self
                .blocks
                .iter()
                .enumerate()
                .filter(|(i, b)| !b.packet || keep(*i, b))
                .map(|(_, b)| b.clone())
                .collect(),
        }
    }

    fn packets(&self) -> Vec<usize> {
        (0..self.blocks.len())
            .filter(|&i| self.blocks[i].packet)
            .collect()
    }
}

/// Cuts a packet record to `snap` captured bytes, as a capture with that snap length holds it.
fn cut_block(b: &Block, snap: usize, pcap: bool) -> Block {
    let o = b.order;
    if pcap {
        let incl = o.u32(&b.bytes[8..]) as usize;
        if incl <= snap {
            return b.clone();
        }
        let mut bytes = b.bytes[..16 + snap].to_vec();
        bytes[8..12].copy_from_slice(&o.put(snap as u32));
        return Block { bytes, ..b.clone() };
    }
    if o.u32(&b.bytes) != 6 || b.bytes.len() < 32 {
        return b.clone();
    }
    let cap = o.u32(&b.bytes[20..]) as usize;
    if cap <= snap || 28 + cap > b.bytes.len() {
        return b.clone();
    }
    let padded = |n: usize| n.div_ceil(4) * 4;
    let mut bytes = b.bytes[..28].to_vec();
    bytes[20..24].copy_from_slice(&o.put(snap as u32));
    bytes.extend_from_slice(&b.bytes[28..28 + snap]);
    bytes.resize(28 + padded(snap), 0);
    // Options are left out: only the packet matters here.
    bytes.extend_from_slice(&[0; 4]);
    let len = bytes.len() as u32;
    bytes[4..8].copy_from_slice(&o.put(len));
    Block { bytes, ..b.clone() }
}

// ---------------------------------------------------------------------------------------------
// Losses.

/// A small deterministic generator (xorshift64*), so that a failing seed can be replayed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[derive(Clone, Copy, Debug)]
enum Loss {
    Drop,
    Duplicate,
    Reorder,
    Snap,
    CutShort,
    Split,
    /// Drop, duplicate and reorder at once.
    Mixed,
}

const LOSSES: [Loss; 7] = [
    Loss::Drop,
    Loss::Duplicate,
    Loss::Reorder,
    Loss::Snap,
    Loss::CutShort,
    Loss::Split,
    Loss::Mixed,
];

fn drop_some(c: &Capture, rng: &mut Rng) -> Capture {
    let p = c.packets();
    let n = 1 + rng.below(3);
    let gone: BTreeSet<usize> = (0..n).map(|_| p[rng.below(p.len())]).collect();
    c.with_blocks(|i, _| !gone.contains(&i))
}

fn duplicate_some(c: &Capture, rng: &mut Rng) -> Capture {
    let p = c.packets();
    let n = 1 + rng.below(3);
    let twice: BTreeSet<usize> = (0..n).map(|_| p[rng.below(p.len())]).collect();
    let mut blocks = Vec::new();
    for (i, b) in c.blocks.iter().enumerate() {
        blocks.push(b.clone());
        if twice.contains(&i) {
            blocks.push(b.clone());
        }
    }
    Capture {
        format: c.format.clone(),
        blocks,
    }
}

/// Swaps neighbouring packets (never across another pcapng block), as multi-queue capture
/// hosts record them: a segment after the one that followed it, an ACK before the data.
fn reorder_some(c: &Capture, rng: &mut Rng) -> Capture {
    let mut out = c.clone();
    let n = 1 + rng.below(4);
    for _ in 0..n {
        if out.blocks.len() < 2 {
            break;
        }
        let i = rng.below(out.blocks.len() - 1);
        if out.blocks[i].packet && out.blocks[i + 1].packet {
            out.blocks.swap(i, i + 1);
        }
    }
    out
}

fn apply(c: &Capture, loss: Loss, rng: &mut Rng) -> Vec<Capture> {
    let pcap = matches!(c.format, Format::Pcap(..));
    match loss {
        Loss::Drop => vec![drop_some(c, rng)],
        Loss::Duplicate => vec![duplicate_some(c, rng)],
        Loss::Reorder => vec![reorder_some(c, rng)],
        Loss::Mixed => {
            let a = drop_some(c, rng);
            let b = duplicate_some(&a, rng);
            vec![reorder_some(&b, rng)]
        }
        Loss::Snap => {
            // Long enough for the headers of any link type, short enough to cut payloads.
            let snap = 80 + rng.below(400);
            let mut out = c.clone();
            for b in &mut out.blocks {
                if b.packet {
                    *b = cut_block(b, snap, pcap);
                }
            }
            if let Format::Pcap(h, o) = &mut out.format {
                let o = *o;
                h[16..20].copy_from_slice(&o.put(snap as u32));
            }
            vec![out]
        }
        Loss::CutShort => {
            let p = c.packets();
            let keep = p[rng.below(p.len())];
            vec![c.with_blocks(|i, _| i < keep)]
        }
        Loss::Split => {
            let p = c.packets();
            let at = p[rng.below(p.len())];
            vec![c.with_blocks(|i, _| i < at), c.with_blocks(|i, _| i >= at)]
        }
    }
}

// ---------------------------------------------------------------------------------------------
// What a run claims.

/// A resume, named by what loss cannot change: its connection's endpoints, its HTTP/2
/// stream, the `Last-Event-ID` sent, and its rank among the resumes that share these (the
/// frame and time of a request change when the packet that began it is lost).
type ResumeKey = (String, String, Option<u32>, String, usize);

fn key(r: &ResumeRecord, seen: &mut BTreeMap<ResumeKey, usize>) -> ResumeKey {
    let ep = |e: &Option<Endpoint>| e.as_ref().map(|e| e.to_string()).unwrap_or_default();
    let mut k = (
        ep(&r.connection.client),
        ep(&r.connection.server),
        r.h2_stream,
        r.last_event_id.clone(),
        0,
    );
    let n = seen.entry(k.clone()).or_insert(0);
    k.4 = *n;
    *n += 1;
    k
}

#[derive(Debug)]
struct Claim {
    verdict: Verdict,
    from_evidence: bool,
    cursor: Option<CursorStatus>,
    id_shape: Option<String>,
    findings: BTreeSet<String>,
}

#[derive(Debug, Default)]
struct Claims {
    resumes: BTreeMap<ResumeKey, Claim>,
    /// Findings tied to no resume: (kind, session).
    loose: BTreeSet<String>,
}

fn claims(reports: &[InputReport]) -> Claims {
    let mut c = Claims::default();
    let mut seen = BTreeMap::new();
    for rep in reports {
        let mut resumes: Vec<&ResumeRecord> = rep.resumes.iter().collect();
        resumes.sort_by_key(|r| (r.request.time_ns, r.request.frame));
        for r in resumes {
            let f = &r.forensic;
            c.resumes.insert(
                key(r, &mut seen),
                Claim {
                    verdict: r.decision.verdict,
                    from_evidence: f.evidence.is_some() || f.id_shape.is_some(),
                    cursor: f.cursor.as_ref().map(|c| c.status),
                    id_shape: f.id_shape.clone(),
                    findings: f
                        .findings
                        .iter()
                        // A note that names the capture's loss accuses nobody.
                        .filter(|f| {
                            !(f.kind == FindingKind::DuplicateDelivery
                                && f.severity == Severity::Info)
                        })
                        .map(|f| match f.kind.as_str() {
                            // The cursor's own claim is compared as its status; the id it
                            // quotes is the latest seen, which loss may change.
                            k @ ("cursor_stale" | "cursor_ahead") => k.to_string(),
                            k => format!("{k} {:?}", f.id),
                        })
                        .collect(),
                },
            );
        }
        for f in &rep.findings {
            c.loose.insert(format!(
                "{} {}",
                f.kind.as_str(),
                f.session_id.as_deref().unwrap_or("-")
            ));
        }
    }
    c
}

/// What the lossy run claims beyond the loss-free one.
fn excess(base: &Claims, lossy: &Claims) -> Vec<String> {
    let mut bad = Vec::new();
    for (k, l) in &lossy.resumes {
        let Some(b) = base.resumes.get(k) else {
            // A split's second file may begin with a retransmission of a request whose first
            // copy ended the first file: each file then shows the resume, and the second
            // one's copy says what the whole capture says of it.
            let again = (0..k.4).any(|n| {
                let mut earlier = k.clone();
                earlier.4 = n;
                base.resumes
                    .get(&earlier)
                    .is_some_and(|b| b.verdict == l.verdict)
            });
            if l.verdict != Verdict::CaptureIncomplete && !again {
                bad.push(format!(
                    "{k:?}: a resume the whole capture lacks, {:?}",
                    l.verdict
                ));
            }
            continue;
        };
        let verdict_ok = l.verdict == b.verdict
            || l.verdict == Verdict::CaptureIncomplete
            || (b.from_evidence && l.verdict == Verdict::Unverifiable);
        if !verdict_ok {
            bad.push(format!(
                "{k:?}: verdict {:?} became {:?}",
                b.verdict, l.verdict
            ));
        }
        // `consistent` accuses nobody; `stale` and `ahead` are claims about the client.
        let cursor_ok = match l.cursor {
            None | Some(CursorStatus::NotSeen | CursorStatus::Consistent) => true,
            other => other == b.cursor,
        };
        if !cursor_ok {
            bad.push(format!(
                "{k:?}: cursor {:?} became {:?}",
                b.cursor, l.cursor
            ));
        }
        // How a shape is displayed depends on the streams seen; that one is claimed at all
        // is what counts.
        if l.id_shape.is_some() && b.id_shape.is_none() {
            bad.push(format!(
                "{k:?}: id shape {:?} became {:?}",
                b.id_shape, l.id_shape
            ));
        }
        for f in l.findings.difference(&b.findings) {
            // A resumed stream that re-sent ids the session had delivered is `replayed`
            // when the capture shows them at or before Last-Event-ID; a loss that hides the
            // cursor's delivery leaves the same fact as a warning that the ids came twice.
            if b.verdict == Verdict::Replayed && f.starts_with("duplicate_delivery ") {
                continue;
            }
            bad.push(format!("{k:?}: new finding {f}"));
        }
    }
    for f in lossy.loose.difference(&base.loose) {
        bad.push(format!("new finding {f}"));
    }
    bad
}

fn options(capture: &Path) -> Options {
    let keys: Vec<PathBuf> = common::key_log_args(capture)
        .into_iter()
        .skip(1)
        .map(PathBuf::from)
        .collect();
    let (tls, _) = TlsKeys::from_files(&keys);
    Options {
        tls,
        forensic: mcp_resume_audit::AuditOptions {
            views: true,
            ..Default::default()
        },
        ..Options::default()
    }
}

/// What the session views say against the capture: a stream whose framing a hole broke
/// counts that hole.
fn view_faults(reports: &[InputReport]) -> Vec<String> {
    let mut bad = Vec::new();
    for rep in reports {
        for v in &rep.views {
            for x in &v.exchanges {
                let lost_sync = matches!(x.end, Some((BodyEnd::LostSync, _)));
                if lost_sync && x.stream().is_some_and(|s| s.gaps == 0) {
                    bad.push(format!(
                        "session {}: a stream that lost sync shows no gap",
                        v.session_id
                    ));
                }
            }
        }
    }
    bad
}

fn analyze(parts: &[Capture], opts: &Options) -> Claims {
    analyze_with_faults(parts, opts).0
}

fn analyze_with_faults(parts: &[Capture], opts: &Options) -> (Claims, Vec<String>) {
    let reports: Vec<InputReport> = parts
        .iter()
        .enumerate()
        .map(|(i, c)| analyze_reader(&format!("part{i}"), &c.write()[..], opts))
        .collect();
    (claims(&reports), view_faults(&reports))
}

fn is_capture(p: &Path) -> bool {
    matches!(
        p.extension().and_then(|e| e.to_str()),
        Some("pcap" | "pcapng")
    )
}

/// Seeds per kind of loss and capture; `CAPTURE_LOSS_SEEDS` asks for more, and
/// `CAPTURE_LOSS_FROM` skips those below it (to go on where a long run stopped).
fn seeds() -> std::ops::Range<u64> {
    let var = |name: &str| std::env::var(name).ok().and_then(|s| s.parse().ok());
    let end = var("CAPTURE_LOSS_SEEDS").unwrap_or(6);
    var("CAPTURE_LOSS_FROM").unwrap_or(0).min(end)..end
}

#[test]
fn capture_loss_never_adds_an_accusation() {
    let captures = common::fixture_files(is_capture, |d| {
        !d.ends_with("malformed") && !d.ends_with("fuzz")
    });
    assert!(
        captures.len() > 60,
        "fixtures not found: {}",
        captures.len()
    );
    assert!(
        captures
            .iter()
            .any(|p| p.to_string_lossy().contains("tls-real"))
    );
    assert!(
        captures
            .iter()
            .any(|p| p.to_string_lossy().contains("h2-real"))
    );
    let only = std::env::var("CAPTURE_LOSS_ONLY").ok();
    let mut failures = Vec::new();
    let mut runs = 0u64;
    let mut resumes = 0usize;
    for path in &captures {
        if only
            .as_deref()
            .is_some_and(|o| !path.to_string_lossy().contains(o))
        {
            continue;
        }
        let bytes = std::fs::read(path).unwrap();
        let whole = Capture::parse(&bytes);
        if whole.packets().is_empty() {
            continue;
        }
        let opts = options(path);
        let base = analyze(std::slice::from_ref(&whole), &opts);
        resumes += base.resumes.len();
        for loss in LOSSES {
            for seed in seeds() {
                runs += 1;
                failures.extend(one_loss(path, &whole, &base, &opts, loss, seed));
            }
        }
    }
    assert!(
        only.is_some() || resumes > 100,
        "too few resumes: {resumes}"
    );
    assert!(
        failures.is_empty(),
        "{} of {runs} lossy runs claim more than the whole capture:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// What the capture at `path` (`whole`, analyzed as `base`) claims beyond `base` after the
/// loss of `seed`; `CAPTURE_LOSS_DUMP` names a folder to write the lossy files to.
fn one_loss(
    path: &Path,
    whole: &Capture,
    base: &Claims,
    opts: &Options,
    loss: Loss,
    seed: u64,
) -> Vec<String> {
    let mut rng = Rng::new(seed * 31 + loss as u64 + 1);
    let parts = apply(whole, loss, &mut rng);
    let (lossy, faults) = analyze_with_faults(&parts, opts);
    if let Ok(dir) = std::env::var("CAPTURE_LOSS_DUMP") {
        let stem = path.file_stem().unwrap().to_string_lossy();
        for (i, p) in parts.iter().enumerate() {
            let ext = path.extension().unwrap().to_string_lossy();
            let out = format!("{dir}/{stem}.{loss:?}.{seed}.{i}.{ext}");
            std::fs::write(out, p.write()).unwrap();
        }
    }
    let name = path
        .strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(path)
        .display()
        .to_string();
    excess(base, &lossy)
        .into_iter()
        .chain(faults)
        .map(|b| format!("{name} {loss:?} seed {seed}: {b}"))
        .collect()
}

/// Losses that long runs (`CAPTURE_LOSS_SEEDS` in the thousands) once found to claim more
/// than the whole capture, each run at its seed so that it stays mended:
/// - a reused client port whose old connection's client FIN and new SYN-ACK were lost (the
///   resume request was read into the old connection: `replayed` became `rejected`);
/// - a TLS connection whose server handshake was lost, still open when its session was
///   audited at the client's DELETE (the id it delivered was missed: `cursor_stale`);
/// - a resume request recorded before the delivery of its Last-Event-ID (a `cursor_ahead`
///   against a cursor the client was given);
/// - a lost answer, and the next answer recorded before the request it acknowledges (it went
///   to the request whose answer was lost: `replayed` became `empty`);
/// - a resume request and its answer lost, shown only by the client's next acknowledgment
///   (a `cursor_lost` for the standalone stream's next GET);
/// - a lost request, and the next answer recorded after a later request that it does not
///   acknowledge (it went to that request: `correct` became `unverifiable`, said of an
///   answer that was not the resume's);
/// - a reused client port that lost the old connection's client FIN and the new SYN (the
///   SYN-ACK was taken into the old connection: `replayed` became `rejected`);
/// - a server whose SYN-ACK and answer were lost, its FIN the first of its packets captured
///   (the acknowledged answer was not counted missing: `empty` became `rejected`), or its
///   FIN recorded before its answer (the answer fell before the stream's start);
/// - a replay of UUID ids whose Last-Event-ID delivery was lost (the re-sent ids are then a
///   `duplicate_delivery` warning, the fact the whole capture calls `replayed`).
/// - a stream's last event lost, its RST recorded before the client's acknowledgment of it
///   (the cursor the event delivered was called `cursor_ahead`: the RST's sequence number
///   shows the bytes were sent);
/// - a request recorded twice and its answer after the client's next acknowledgment
///   (`correct` became `rejected`).
/// - a stream's last event lost with every later packet of its connection, the client's
///   resume on a new connection naming that event (`cursor_ahead`: the stream showed no end,
///   so its last bytes may have been lost without a trace).
/// - a server whose SYN-ACK and answer were lost and whose FIN was recorded before its own
///   pure ACK (`empty` became `rejected`: the client's acknowledgment of the SYN stood before
///   the FIN).
/// - a keep-alive connection that lost a request, the server's bytes before the next answer
///   and the resume's answer head, that answer recorded after the resume request though it
///   acknowledges only the bytes before it (it went to the resume: `correct` became
///   `unverifiable`).
#[test]
fn losses_once_found_by_long_runs_claim_nothing_more() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut failures = Vec::new();
    for (name, loss, seeds) in [
        (
            "gen/tcp-port-reuse.pcap",
            Loss::Mixed,
            &[432, 819, 870, 1072, 1319][..],
        ),
        ("tls-real/py-tls13-chacha20.pcap", Loss::Drop, &[631]),
        ("real/rmcp.pcap", Loss::Reorder, &[1148]),
        ("real/rmcp.pcap", Loss::Mixed, &[437, 805, 879, 980]),
        ("real/rmcp.pcap", Loss::Drop, &[1379]),
        ("gen/tcp-keep-alive.pcap", Loss::Mixed, &[1141, 1187]),
        (
            "gen/tcp-port-reuse.pcap",
            Loss::Drop,
            &[1505, 2216, 2534, 2720],
        ),
        ("gen/tcp-port-reuse.pcap", Loss::Mixed, &[2672]),
        ("gen/verdict-empty.pcap", Loss::Drop, &[2204]),
        ("gen/verdict-empty.pcap", Loss::Mixed, &[3679]),
        ("forensic/replay-uuid-ids.pcap", Loss::Mixed, &[1956]),
        ("real-tool/loopback-v4.pcap", Loss::Mixed, &[3054, 3731]),
        ("real-tool/loopback-v4-any.pcap", Loss::Mixed, &[3054, 3731]),
        ("real/conformance-sse-retry.pcap", Loss::Mixed, &[4361]),
        ("forensic/shape-event-n.pcap", Loss::Mixed, &[17665]),
        ("forensic/shape-request-streams.pcap", Loss::Mixed, &[17665]),
        ("gen/verdict-empty.pcap", Loss::Mixed, &[16226]),
        ("gen/tcp-port-reuse.pcap", Loss::Mixed, &[16238]),
        ("real/py-client-rmcp-server.pcap", Loss::Mixed, &[23031]),
        ("gen/tcp-port-reuse.pcap", Loss::Mixed, &[24988]),
        ("real/ts-sdk-v6.pcapng", Loss::Mixed, &[24977]),
        ("gen/tcp-keep-alive.pcap", Loss::Mixed, &[33482, 40006]),
    ] {
        let path = root.join(name);
        let whole = Capture::parse(&std::fs::read(&path).unwrap());
        let opts = options(&path);
        let base = analyze(std::slice::from_ref(&whole), &opts);
        assert!(!base.resumes.is_empty(), "{name}: no resume");
        for &seed in seeds {
            failures.extend(one_loss(&path, &whole, &base, &opts, loss, seed));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The loss operations themselves: a capture written back unchanged is byte-identical, and
/// each loss changes what it says it changes.
#[test]
fn losses_do_what_they_say() {
    let captures = common::fixture_files(is_capture, |d| {
        !d.ends_with("malformed") && !d.ends_with("fuzz")
    });
    for path in captures {
        let bytes = std::fs::read(&path).unwrap();
        let c = Capture::parse(&bytes);
        assert_eq!(c.write(), bytes, "{}", path.display());
        let n = c.packets().len();
        let mut rng = Rng::new(7);
        assert!(drop_some(&c, &mut rng).packets().len() < n);
        assert!(duplicate_some(&c, &mut rng).packets().len() > n);
        let cut = apply(&c, Loss::Snap, &mut rng).remove(0);
        assert_eq!(cut.packets().len(), n);
        assert!(cut.write().len() <= bytes.len());
        let split = apply(&c, Loss::Split, &mut rng);
        assert_eq!(split[0].packets().len() + split[1].packets().len(), n);
    }
}

/// Every single packet of a few real captures dropped in turn, and every pair of neighbouring
/// packets swapped in turn (a segment recorded after the acknowledgment of what followed it,
/// an answer before its request): the losses behind the failures this check was written
/// for — a cursor_ahead after a stream that lost sync, a response head lost to reordering —
/// tried exhaustively rather than by seed.
#[test]
fn every_single_drop_and_swap_of_real_captures() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut failures = Vec::new();
    let mut runs = 0;
    for name in [
        "real/rmcp.pcap",
        "real/py-client-rmcp-server.pcap",
        "real/ts-client-py-server.pcap",
        "real-tool/loopback-v4.pcap",
        "forensic/cursor-stale-ahead.pcap",
        "h2-real/py-h2c-prior.pcap",
    ] {
        let path = root.join(name);
        let whole = Capture::parse(&std::fs::read(&path).unwrap());
        let opts = options(&path);
        let base = analyze(std::slice::from_ref(&whole), &opts);
        assert!(!base.resumes.is_empty(), "{name}: no resume");
        let packets = whole.packets();
        for (n, &i) in packets.iter().enumerate() {
            let dropped = whole.with_blocks(|j, _| j != i);
            let mut swapped = whole.clone();
            if let Some(&next) = packets.get(n + 1)
                && next == i + 1
            {
                swapped.blocks.swap(i, next);
            }
            for (how, c) in [("drop", dropped), ("swap", swapped)] {
                runs += 1;
                let (lossy, faults) = analyze_with_faults(std::slice::from_ref(&c), &opts);
                for b in excess(&base, &lossy).into_iter().chain(faults) {
                    failures.push(format!("{name} {how} packet {}: {b}", n + 1));
                }
            }
        }
    }
    assert!(runs > 500, "{runs}");
    assert!(
        failures.is_empty(),
        "{} claims beyond the whole capture:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The failure this check began with: a multi-queue capture host records the segment that
/// begins a response after later segments of it and after the client's acknowledgment of
/// them. In real captures, the packet holding each resume's response head is moved two and
/// three places later; every verdict must stay what it was (the head was only late, never
/// lost), and no claim may appear.
#[test]
fn a_response_head_recorded_after_the_ack_of_later_bytes_is_not_lost() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut moved = 0;
    for name in [
        "real/py-counter.pcap",
        "real/py-evicting.pcap",
        "real/rmcp.pcap",
        "real/ts-sdk.pcap",
        "real-tool/loopback-v4.pcap",
    ] {
        let path = root.join(name);
        let whole = Capture::parse(&std::fs::read(&path).unwrap());
        let opts = options(&path);
        let report = analyze_reader(name, &whole.write()[..], &opts);
        let base = claims(std::slice::from_ref(&report));
        let packets = whole.packets();
        for r in &report.resumes {
            let Some(head) = r.response.map(|m| m.frame) else {
                continue;
            };
            let Some(&at) = usize::try_from(head - 1).ok().and_then(|i| packets.get(i)) else {
                continue;
            };
            for by in [2, 3] {
                let mut c = whole.clone();
                if at + by >= c.blocks.len() {
                    continue;
                }
                let b = c.blocks.remove(at);
                c.blocks.insert(at + by, b);
                moved += 1;
                let lossy = analyze(std::slice::from_ref(&c), &opts);
                let bad = excess(&base, &lossy);
                assert!(
                    bad.is_empty(),
                    "{name}, head at frame {head} moved by {by}: {bad:?}"
                );
                for (k, l) in &lossy.resumes {
                    assert_eq!(
                        Some(l.verdict),
                        base.resumes.get(k).map(|b| b.verdict),
                        "{name}, head at frame {head} moved by {by}: {k:?}"
                    );
                }
            }
        }
    }
    assert!(moved >= 20, "{moved}");
}
