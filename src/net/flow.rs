//! The flow table of one capture: which connection a packet belongs to, and its direction.
//!
//! Input: decoded TCP packets in capture order, from the single reader of a capture.
//! Output: per packet a [`FlowPacket`] (connection number, direction, TCP fields), and
//! [`FlowEvent`]s: a connection opens, or ends for the table.
//! Invariants:
//! - Connections are numbered from 0 in order of their first packet, as Wireshark's
//!   `tcp.stream` numbers them; a new SYN on a closed 4-tuple is a new connection.
//! - `Forward` is the direction of a connection's first captured packet.
//! - The table is bounded by its `max_connections` (least recently active evicted first);
//!   connections closed by either side leave it after a quiet minute of capture time.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;

use crate::net::decode::{self, Endpoint};
use crate::net::tcp::TcpFlags;
use crate::record::{Direction, Mark, StreamEnd};

/// The hasher of the per-packet tables (flows by endpoints, connections by stream number):
/// foldhash (its quality variant: the fast one spread 1024 ports in a row over as few as 250
/// of 1024 buckets for some seeds, see `fold_hasher_spreads_nearby_keys`), hashbrown's own
/// default family — one wide multiplication per field where SipHash costs
/// more than the rest of a packet's classification, seeded per process so that a capture
/// cannot be crafted to make endpoints collide.
pub(crate) type FoldHashKey = foldhash::quality::RandomState;

/// A connection as the reader's flow table knows it: 48 bytes, so that with an IPv4 key it
/// fills one cache line of the table (a lookup per packet, among thousands of connections,
/// is a cache miss per line it touches).
struct Flow {
    stream: u64,
    last_seen_ns: i64,
    last_seen_packet: u64,
    /// The SYN's sequence number; valid with [`Flow::SYN_SEQ`].
    syn_seq: u32,
    /// The sequence number of the first packet seen in each direction (valid with
    /// [`Flow::BASE_SEQ`]): a SYN with another one opens a new connection on the same ports,
    /// as Wireshark numbers it, even when the capture began after the old one's handshake.
    base_seq: [u32; 2],
    /// The sequence number after the furthest byte (or SYN, FIN) seen in each direction
    /// (valid with [`Flow::NEXT_SEQ`]).
    next_seq: [u32; 2],
    /// Which of the numbers above are known, which end sent first, FINs and RST.
    bits: u16,
}

impl Flow {
    /// The first packet's source is the `lo` end of the key.
    const FORWARD_IS_LO: u16 = 1;
    /// A FIN was seen from direction 0, 1 (`FIN << d`).
    const FIN: u16 = 1 << 1;
    const RST: u16 = 1 << 3;
    const SYN_SEQ: u16 = 1 << 4;
    /// `BASE_SEQ << d`.
    const BASE_SEQ: u16 = 1 << 5;
    /// `NEXT_SEQ << d`.
    const NEXT_SEQ: u16 = 1 << 7;

    fn new(stream: u64, forward_is_lo: bool, mark: Mark, packet_no: u64) -> Self {
        Flow {
            stream,
            last_seen_ns: mark.time_ns,
            last_seen_packet: packet_no,
            syn_seq: 0,
            base_seq: [0; 2],
            next_seq: [0; 2],
            bits: if forward_is_lo {
                Flow::FORWARD_IS_LO
            } else {
                0
            },
        }
    }

    fn has(&self, bit: u16) -> bool {
        self.bits & bit != 0
    }

    fn forward_is_lo(&self) -> bool {
        self.has(Flow::FORWARD_IS_LO)
    }

    fn fin(&self, d: usize) -> bool {
        self.has(Flow::FIN << d)
    }

    fn rst(&self) -> bool {
        self.has(Flow::RST)
    }

    fn syn_seq(&self) -> Option<u32> {
        self.has(Flow::SYN_SEQ).then_some(self.syn_seq)
    }

    fn base_seq(&self, d: usize) -> Option<u32> {
        self.has(Flow::BASE_SEQ << d).then_some(self.base_seq[d])
    }

    fn next_seq(&self, d: usize) -> Option<u32> {
        self.has(Flow::NEXT_SEQ << d).then_some(self.next_seq[d])
    }
}

/// How far (in sequence numbers) a packet may lie from where its connection stands and still
/// be taken as that connection's by [`Flow::distance`]: a late segment or a retransmission.
const FIT_WINDOW: u32 = 1 << 20;

/// How long (capture time) a connection replaced by a new SYN on its ports keeps the packets
/// that still fit its sequence numbers: a FIN or an ACK recorded after the new SYN.
const REPLACED_PATIENCE_NS: i64 = 1_000_000_000;

/// A connection replaced by a new one on its ports, and where (one already closed keeps its
/// retransmissions apart from the new connection; it is not ended again).
struct Replaced {
    flow: Flow,
    at: Mark,
}

impl Flow {
    fn closed(&self) -> bool {
        self.rst() || (self.fin(0) && self.fin(1))
    }

    fn dir(&self, src_is_lo: bool) -> Direction {
        if src_is_lo == self.forward_is_lo() {
            Direction::Forward
        } else {
            Direction::Reverse
        }
    }

    /// How far the packet lies from where this connection stands in sequence numbers (its
    /// sequence number against the sender's, its acknowledgment against the receiver's), or
    /// `None` when either is more than [`FIT_WINDOW`] away, or neither can be compared. A
    /// side of which no packet was seen yet (a new connection whose SYN-ACK was not captured)
    /// gives no distance, rather than disqualifying the connection.
    fn distance(&self, p: &decode::TcpPacket<'_>, src_is_lo: bool) -> Option<u32> {
        let d = self.dir(src_is_lo).index();
        // `Some(None)`: that side is unknown; `None`: it is known and too far.
        let near = |n: Option<u32>, v: u32| match n {
            None => Some(None),
            Some(n) => {
                let gap = (n.wrapping_sub(v) as i32).unsigned_abs();
                (gap <= FIT_WINDOW).then_some(Some(gap))
            }
        };
        let seq = near(self.next_seq(d), p.seq)?;
        let ack = if p.flags.ack() {
            near(self.next_seq(1 - d), p.ack)?
        } else {
            None
        };
        match (seq, ack) {
            (None, None) => None,
            (s, a) => Some(s.unwrap_or(0).saturating_add(a.unwrap_or(0))),
        }
    }

    /// Whether the packet acknowledges sequence numbers past the receiver's FIN: a FIN ends
    /// its sender's numbers, so nothing of this connection can, and the packet is a new
    /// connection's on the same ports whose handshake the capture lost or holds later.
    fn past_peer_fin(&self, p: &decode::TcpPacket<'_>, src_is_lo: bool) -> bool {
        let peer = 1 - self.dir(src_is_lo).index();
        p.flags.ack()
            && self.fin(peer)
            && self
                .next_seq(peer)
                .is_some_and(|end| p.ack.wrapping_sub(end) as i32 > 0)
    }

    /// Takes the packet into the connection's state.
    fn update(
        &mut self,
        p: &decode::TcpPacket<'_>,
        src_is_lo: bool,
        new_syn: bool,
        mark: Mark,
        packet_no: u64,
    ) -> FlowPacket {
        let dir = self.dir(src_is_lo);
        let d = dir.index();
        if new_syn && !self.has(Flow::SYN_SEQ) {
            self.syn_seq = p.seq;
            self.bits |= Flow::SYN_SEQ;
        }
        if !self.has(Flow::BASE_SEQ << d) {
            self.base_seq[d] = p.seq;
            self.bits |= Flow::BASE_SEQ << d;
        }
        let len = u32::try_from(p.payload.len())
            .unwrap_or(u32::MAX)
            .saturating_add(u32::from(p.flags.syn()) + u32::from(p.flags.fin()));
        let end = p.seq.wrapping_add(len);
        if self
            .next_seq(d)
            .is_none_or(|n| end.wrapping_sub(n) as i32 > 0)
        {
            self.next_seq[d] = end;
            self.bits |= Flow::NEXT_SEQ << d;
        }
        if p.flags.fin() {
            self.bits |= Flow::FIN << d;
        }
        if p.flags.rst() {
            self.bits |= Flow::RST;
        }
        self.last_seen_ns = self.last_seen_ns.max(mark.time_ns);
        self.last_seen_packet = packet_no;
        FlowPacket {
            stream: self.stream,
            dir,
            seq: p.seq,
            ack: p.ack,
            flags: p.flags,
            mark,
        }
    }
}

/// Whether a SYN (or SYN-ACK) starts its sender's numbers elsewhere than the first packet
/// seen from that side (`base`): at that packet's number, or one before it (the handshake
/// recorded after the side's first bytes or acknowledgment), it is that side's own.
fn starts_elsewhere(base: Option<u32>, syn: &decode::TcpPacket<'_>) -> bool {
    base.is_some_and(|s| s != syn.seq && s != syn.seq.wrapping_add(1))
}

/// Canonical key of a 4-tuple, as five words: the two endpoints, lower one first, each as its
/// address in two words (IPv4 in the low 32 bits), then both ports and the IP version. Word
/// compares and one multiply per word are what a lookup per packet can afford; the version
/// keeps IPv4 apart from the IPv6 addresses with the same bits.
#[derive(Clone, Copy, Debug, Eq)]
struct FlowKey([u64; 5]);

impl PartialEq for FlowKey {
    fn eq(&self, other: &Self) -> bool {
        // Without branches or a call to memcmp: this runs on every packet.
        self.0
            .iter()
            .zip(&other.0)
            .fold(0, |diff, (a, b)| diff | (a ^ b))
            == 0
    }
}

impl std::hash::Hash for FlowKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Addresses folded to one word each: equality still compares them whole.
        let [a_hi, a_lo, b_hi, b_lo, rest] = self.0;
        state.write_u64(a_lo ^ a_hi.rotate_left(32));
        state.write_u64(b_lo ^ b_hi.rotate_left(32));
        state.write_u64(rest);
    }
}

fn endpoint_bits(e: &Endpoint) -> (u128, u16) {
    match e.ip {
        IpAddr::V4(ip) => (u128::from(ip.to_bits()), e.port),
        IpAddr::V6(ip) => (ip.to_bits(), e.port),
    }
}

/// The key of a packet's connection, and whether the packet's source is the key's lower end.
fn flow_key(src: &Endpoint, dst: &Endpoint) -> (FlowKey, bool) {
    if let (IpAddr::V4(s), IpAddr::V4(d)) = (src.ip, dst.ip) {
        // An IPv4 end in one word, address above port: its order is the general one's.
        let a = (u64::from(s.to_bits()) << 16) | u64::from(src.port);
        let b = (u64::from(d.to_bits()) << 16) | u64::from(dst.port);
        let src_is_lo = a <= b;
        let (lo, hi) = if src_is_lo { (a, b) } else { (b, a) };
        let key = FlowKey([
            0,
            lo >> 16,
            0,
            hi >> 16,
            (lo & 0xffff) | ((hi & 0xffff) << 16),
        ]);
        return (key, src_is_lo);
    }
    flow_key_general(src, dst)
}

/// [`flow_key`] for any pair of ends, by their addresses as 128-bit words.
fn flow_key_general(src: &Endpoint, dst: &Endpoint) -> (FlowKey, bool) {
    let (a, b) = (endpoint_bits(src), endpoint_bits(dst));
    let src_is_lo = a <= b;
    let (lo, hi) = if src_is_lo { (a, b) } else { (b, a) };
    // Both ends of a decoded packet come from one IP header, so they share the version.
    let v6 = u64::from(src.ip.is_ipv6());
    let key = FlowKey([
        (lo.0 >> 64) as u64,
        lo.0 as u64,
        (hi.0 >> 64) as u64,
        hi.0 as u64,
        u64::from(lo.1) | (u64::from(hi.1) << 16) | (v6 << 32),
    ]);
    (key, src_is_lo)
}

impl FlowKey {
    /// The key of an IPv4 4-tuple in one word: both addresses and both ports.
    fn v4(&self) -> Option<u128> {
        let [a_hi, a_lo, b_hi, b_lo, rest] = self.0;
        (rest >> 32 == 0).then(|| {
            debug_assert!(a_hi == 0 && b_hi == 0);
            (u128::from(a_lo) << 96) | (u128::from(b_lo) << 64) | u128::from(rest)
        })
    }

    fn from_v4(k: u128) -> Self {
        FlowKey([
            0,
            (k >> 96) as u64,
            0,
            (k >> 64) as u64 & 0xffff_ffff,
            k as u64 & 0xffff_ffff,
        ])
    }
}

/// A connection of the table with an IPv4 key: one cache line, aligned to one.
#[repr(align(64))]
struct Slot4 {
    key: u128,
    flow: Flow,
}

/// Connections by their endpoints. IPv4 ones (nearly every capture's) sit in 64-byte slots,
/// key and state in one cache line; IPv6 ones, whose key alone is 40 bytes, in a table of
/// their own.
struct Flows {
    v4: hashbrown::HashTable<Slot4>,
    v6: HashMap<FlowKey, Flow, FoldHashKey>,
    hasher: FoldHashKey,
}

impl Flows {
    fn new() -> Self {
        Flows {
            v4: hashbrown::HashTable::new(),
            v6: HashMap::with_hasher(FoldHashKey::default()),
            hasher: FoldHashKey::default(),
        }
    }

    fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    fn get_mut(&mut self, key: &FlowKey) -> Option<&mut Flow> {
        match key.v4() {
            Some(k) => self
                .v4
                .find_mut(self.hasher.hash_one(k), |s| s.key == k)
                .map(|s| &mut s.flow),
            None => self.v6.get_mut(key),
        }
    }

    fn get(&self, key: &FlowKey) -> Option<&Flow> {
        match key.v4() {
            Some(k) => self
                .v4
                .find(self.hasher.hash_one(k), |s| s.key == k)
                .map(|s| &s.flow),
            None => self.v6.get(key),
        }
    }

    fn remove(&mut self, key: &FlowKey) -> Option<Flow> {
        match key.v4() {
            Some(k) => self
                .v4
                .find_entry(self.hasher.hash_one(k), |s| s.key == k)
                .ok()
                .map(|e| e.remove().0.flow),
            None => self.v6.remove(key),
        }
    }

    /// Adds a connection whose key is not in the table.
    fn insert_new(&mut self, key: FlowKey, flow: Flow) {
        match key.v4() {
            Some(k) => {
                let hasher = &self.hasher;
                self.v4
                    .insert_unique(hasher.hash_one(k), Slot4 { key: k, flow }, |s| {
                        hasher.hash_one(s.key)
                    });
            }
            None => {
                self.v6.insert(key, flow);
            }
        }
    }

    fn retain(&mut self, mut keep: impl FnMut(&Flow) -> bool) {
        self.v4.retain(|s| keep(&s.flow));
        self.v6.retain(|_, f| keep(f));
    }

    fn iter(&self) -> impl Iterator<Item = (FlowKey, &Flow)> {
        self.v4
            .iter()
            .map(|s| (FlowKey::from_v4(s.key), &s.flow))
            .chain(self.v6.iter().map(|(k, f)| (*k, f)))
    }
}

/// What the reader knows of one packet: its connection and direction, and the TCP fields.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FlowPacket {
    pub stream: u64,
    pub dir: Direction,
    pub seq: u32,
    pub ack: u32,
    pub flags: TcpFlags,
    pub mark: Mark,
}

const QUIET_CLOSED_NS: i64 = 60_000_000_000;
pub(crate) const SWEEP_EVERY_PACKETS: u64 = 1 << 16;

/// The single reader of one capture: numbering of connections and their directions.
pub(crate) struct FlowTable {
    flows: Flows,
    replaced: HashMap<FlowKey, Replaced, FoldHashKey>,
    next_stream: u64,
    pub(crate) max_connections: usize,
    pub(crate) evicted: u64,
}

/// What the table tells the connections' owners beside packets.
#[derive(Clone, Copy, Debug)]
pub(crate) enum FlowEvent {
    /// A connection begins: its number, its two endpoints (forward source first), and whether
    /// its first packet is a SYN.
    Open(u64, Endpoint, Endpoint, bool),
    /// The connection is over for the table (evicted, replaced by a new one on the same
    /// 4-tuple, or half-closed and quiet): finish it now.
    End(u64, StreamEnd, Mark),
}

impl FlowTable {
    /// Connections in the table now.
    pub(crate) fn len(&self) -> usize {
        self.flows.len() + self.replaced.len()
    }

    pub(crate) fn new(max_connections: usize) -> Self {
        FlowTable {
            flows: Flows::new(),
            replaced: HashMap::with_hasher(FoldHashKey::default()),
            next_stream: 0,
            max_connections: max_connections.max(1),
            evicted: 0,
        }
    }

    /// Assigns the packet to a connection and returns what is known of it. On a connection's
    /// first packet, `events` is told first: an `End` for a connection replaced by a new one
    /// on the same 4-tuple, then the new connection's `Open`.
    pub(crate) fn classify(
        &mut self,
        p: &decode::TcpPacket<'_>,
        mark: Mark,
        packet_no: u64,
        mut events: impl FnMut(FlowEvent),
    ) -> FlowPacket {
        let (key, src_is_lo) = flow_key(&p.src, &p.dst);
        let new_syn = p.flags.syn() && !p.flags.ack();
        if !self.replaced.is_empty()
            && let Some(msg) =
                self.take_into_replaced(&key, p, src_is_lo, mark, packet_no, &mut events)
        {
            return msg;
        }
        // The common case, a packet of a known connection, costs one lookup.
        if let Some(f) = self.flows.get_mut(&key)
            && !(new_syn
                && (f.closed()
                    || f.syn_seq().is_some_and(|s| s != p.seq)
                    || starts_elsewhere(f.base_seq(usize::from(src_is_lo != f.forward_is_lo())), p)))
            // A SYN-ACK starts its sender's sequence numbers: at another number than the
            // first packet seen from that side, it answers a new SYN (one the capture lost).
            && !(p.flags.syn()
                && p.flags.ack()
                && starts_elsewhere(f.base_seq(usize::from(src_is_lo != f.forward_is_lo())), p))
            && !f.past_peer_fin(p, src_is_lo)
        {
            return f.update(p, src_is_lo, new_syn, mark, packet_no);
        }
        if let Some(old) = self.flows.remove(&key) {
            // Its last packets may still be recorded after this SYN (a retransmitted FIN
            // even once it closed): it ends once they had their time.
            let earlier = self.replaced.insert(
                key,
                Replaced {
                    flow: old,
                    at: mark,
                },
            );
            if let Some(r) = earlier
                && !r.flow.closed()
            {
                events(FlowEvent::End(r.flow.stream, StreamEnd::CaptureEnd, r.at));
            }
        }
        let stream = self.next_stream;
        self.next_stream += 1;
        let mut f = Flow::new(stream, src_is_lo, mark, packet_no);
        let msg = f.update(p, src_is_lo, new_syn, mark, packet_no);
        self.flows.insert_new(key, f);
        events(FlowEvent::Open(stream, p.src, p.dst, new_syn));
        msg
    }

    /// The replaced connection on `key`, when the packet fits its sequence numbers better
    /// than the current one's: the packet is taken into it. A replaced connection whose
    /// patience ran out is ended here (unless it closed) and the packet goes on as usual.
    fn take_into_replaced(
        &mut self,
        key: &FlowKey,
        p: &decode::TcpPacket<'_>,
        src_is_lo: bool,
        mark: Mark,
        packet_no: u64,
        events: &mut impl FnMut(FlowEvent),
    ) -> Option<FlowPacket> {
        let r = self.replaced.get_mut(key)?;
        if mark.time_ns.saturating_sub(r.at.time_ns) > REPLACED_PATIENCE_NS {
            let r = self.replaced.remove(key)?;
            if !r.flow.closed() {
                events(FlowEvent::End(r.flow.stream, StreamEnd::CaptureEnd, r.at));
            }
            return None;
        }
        // A SYN or SYN-ACK belongs to the new handshake.
        if p.flags.syn() {
            return None;
        }
        let old = r.flow.distance(p, src_is_lo)?;
        let current = self.flows.get(key).and_then(|f| f.distance(p, src_is_lo));
        if current.is_some_and(|c| c <= old) {
            return None;
        }
        Some(r.flow.update(p, src_is_lo, false, mark, packet_no))
    }

    /// Keeps the table within bounds; returns the connections to end.
    pub(crate) fn sweep(&mut self, now: Mark, ends: &mut Vec<FlowEvent>) {
        let patience = now.time_ns.saturating_sub(REPLACED_PATIENCE_NS);
        // Over the bound, replaced connections end first: their patience is a courtesy.
        let crowded = self.len() > self.max_connections;
        self.replaced.retain(|_, r| {
            if r.at.time_ns >= patience && !crowded {
                return true;
            }
            if !r.flow.closed() {
                ends.push(FlowEvent::End(r.flow.stream, StreamEnd::CaptureEnd, r.at));
            }
            false
        });
        let cutoff = now.time_ns.saturating_sub(QUIET_CLOSED_NS);
        self.flows.retain(|f| {
            if f.last_seen_ns >= cutoff || !(f.closed() || f.fin(0) || f.fin(1)) {
                return true;
            }
            // Closed by one side only and quiet since: the other side will not close it in
            // the capture (a client that never answers the server's FIN, say). What it sent
            // is all there is; it ends as at the end of the capture.
            if !f.closed() {
                ends.push(FlowEvent::End(f.stream, StreamEnd::CaptureEnd, now));
            }
            false
        });
        if self.flows.len() <= self.max_connections {
            return;
        }
        // Evict the least recently active eighth (closed ones first), so the cost is amortized.
        let target = self.max_connections - self.max_connections / 8;
        let mut by_age: Vec<(bool, u64, FlowKey)> = self
            .flows
            .iter()
            .map(|(k, f)| (!f.closed(), f.last_seen_packet, k))
            .collect();
        by_age.sort_unstable_by_key(|(open, seen, _)| (*open, *seen));
        let excess = self.flows.len().saturating_sub(target);
        for (open, _, key) in by_age.into_iter().take(excess) {
            if let Some(f) = self.flows.remove(&key)
                && open
            {
                self.evicted += 1;
                ends.push(FlowEvent::End(f.stream, StreamEnd::Evicted, now));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn ep(ip: impl Into<IpAddr>, port: u16) -> Endpoint {
        Endpoint {
            ip: ip.into(),
            port,
        }
    }

    #[test]
    fn both_directions_share_a_key_and_tell_which_end_sent() {
        let a = ep(Ipv4Addr::new(10, 0, 0, 2), 40_000);
        let b = ep(Ipv4Addr::new(10, 0, 0, 1), 8000);
        let (k1, a_is_lo) = flow_key(&a, &b);
        let (k2, b_is_lo) = flow_key(&b, &a);
        assert_eq!(k1, k2);
        assert_ne!(a_is_lo, b_is_lo);
        let hasher = FoldHashKey::default();
        assert_eq!(hasher.hash_one(k1), hasher.hash_one(k2));
        // The same address with another port, or the other end's port swapped, is another key.
        assert_ne!(k1, flow_key(&ep(Ipv4Addr::new(10, 0, 0, 2), 40_001), &b).0);
        assert_ne!(
            k1,
            flow_key(
                &ep(Ipv4Addr::new(10, 0, 0, 2), 8000),
                &ep(Ipv4Addr::new(10, 0, 0, 1), 40_000)
            )
            .0
        );
    }

    fn flags(syn: bool, ack: bool, fin: bool) -> TcpFlags {
        TcpFlags::new(syn, ack, fin, false)
    }

    /// A packet of a test: source, destination, sequence and acknowledgment numbers, flags,
    /// payload, and the connection it must be found to belong to.
    type Step<'a> = (Endpoint, Endpoint, u32, u32, TcpFlags, &'a [u8], u64);

    fn event_text(e: FlowEvent) -> String {
        match e {
            FlowEvent::Open(s, ..) => format!("open {s}"),
            FlowEvent::End(s, _, m) => format!("end {s} at {}", m.frame),
        }
    }

    /// Classifies the steps in order (frame `i + 1`, a millisecond apart) with a fresh table,
    /// checking that each is found in its connection; gives the table's events.
    fn classify_steps(steps: &[Step<'_>], case: &str) -> Vec<String> {
        let mut table = FlowTable::new(100);
        let mut events = Vec::new();
        for (i, &(src, dst, seq, ack, flags, payload, stream)) in steps.iter().enumerate() {
            let at = i as u64 + 1;
            let p = decode::TcpPacket {
                src,
                dst,
                seq,
                ack,
                flags,
                payload,
            };
            let mark = Mark::new(at, i64::try_from(at).unwrap() * 1_000_000);
            let got = table.classify(&p, mark, at, |e| events.push(event_text(e)));
            assert_eq!(got.stream, stream, "{case} step {i}");
        }
        events
    }

    #[test]
    fn a_syn_with_another_sequence_number_opens_a_new_connection() {
        // The capture began as the old connection closed (its handshake not captured); the
        // client's SYN then reuses the ports. Wireshark numbers it as a new tcp.stream.
        let client = ep(Ipv4Addr::new(10, 0, 0, 2), 51_700);
        let server = ep(Ipv4Addr::new(10, 0, 0, 1), 8000);
        let packet = |src, dst, seq, flags| decode::TcpPacket {
            src,
            dst,
            seq,
            ack: 0,
            flags,
            payload: b"",
        };
        let mut table = FlowTable::new(100);
        let mut opened = Vec::new();
        let mut run = |p: decode::TcpPacket<'_>, opened: &mut Vec<u64>| {
            let out = table.classify(&p, Mark::default(), 0, |e| {
                if let FlowEvent::Open(stream, ..) = e {
                    opened.push(stream);
                }
            });
            out.stream
        };
        assert_eq!(
            run(
                packet(server, client, 9000, flags(false, true, true)),
                &mut opened
            ),
            0
        );
        assert_eq!(
            run(
                packet(client, server, 1000, flags(false, true, false)),
                &mut opened
            ),
            0
        );
        // The same client's SYN at another sequence number: a new connection.
        assert_eq!(
            run(
                packet(client, server, 5000, flags(true, false, false)),
                &mut opened
            ),
            1
        );
        // Its retransmission is the same connection.
        assert_eq!(
            run(
                packet(client, server, 5000, flags(true, false, false)),
                &mut opened
            ),
            1
        );
        assert_eq!(opened, [0, 1]);
    }

    #[test]
    fn an_old_connections_last_packets_after_a_new_syn_stay_its_own() {
        // The client closed, then reused its port at once; the server's FIN and the client's
        // last ACK were recorded after the new SYN. They fit the old connection's sequence
        // numbers, and the new handshake does not.
        let client = ep(Ipv4Addr::new(10, 0, 0, 2), 51_700);
        let server = ep(Ipv4Addr::new(10, 0, 0, 1), 8000);
        let (ack, fin, syn, synack) = (
            flags(false, true, false),
            flags(false, true, true),
            flags(true, false, false),
            flags(true, true, false),
        );
        let late_close: &[Step<'_>] = &[
            (client, server, 1000, 9000, ack, b"0123456789", 0),
            (server, client, 9000, 1010, ack, b"01234", 0),
            (client, server, 1010, 9005, fin, b"", 0),
            (client, server, 5_000_000, 0, syn, b"", 1),
            // The old connection's server FIN and the client's last ACK.
            (server, client, 9005, 1011, fin, b"", 0),
            (client, server, 1011, 9006, ack, b"", 0),
            // The new handshake and data, even with sequence numbers near the old ones.
            (server, client, 9100, 5_000_001, synack, b"", 1),
            (client, server, 5_000_001, 9101, ack, b"GET", 1),
            (server, client, 9101, 5_000_004, ack, b"", 1),
        ];
        // The client's FIN and the new SYN-ACK were not captured, and the new connection's
        // numbers lie within reach of the old one's. The new side the capture shows decides:
        // the old connection's numbers do not win over a side of the new one never seen.
        let lost_handshake: &[Step<'_>] = &[
            (client, server, 1000, 9000, ack, b"0123456789", 0),
            (server, client, 9000, 1010, ack, b"01234", 0),
            (server, client, 9005, 1011, fin, b"", 0),
            (client, server, 501_000, 0, syn, b"", 1),
            (client, server, 501_001, 509_001, ack, b"", 1),
            (client, server, 501_001, 509_001, ack, b"GET", 1),
            (server, client, 509_001, 501_004, ack, b"200", 1),
            (client, server, 501_004, 509_004, fin, b"", 1),
        ];
        // The client's FIN and the new SYN were not captured: the SYN-ACK, at another
        // number than the server's first, opens the new connection, even within reach of
        // the old one's numbers; the client's last ACK to the old FIN still fits the old.
        let lost_syn: &[Step<'_>] = &[
            (client, server, 1000, 9000, ack, b"0123456789", 0),
            (server, client, 9000, 1010, ack, b"01234", 0),
            (server, client, 9005, 1011, fin, b"", 0),
            (client, server, 1011, 9006, ack, b"", 0),
            (server, client, 509_000, 501_001, synack, b"", 1),
            (client, server, 501_001, 509_001, ack, b"", 1),
            (client, server, 501_001, 509_001, ack, b"GET", 1),
            (server, client, 509_001, 501_004, ack, b"200", 1),
        ];
        // Both sides closed, then the client's last ACK and the new SYN were lost: the
        // server's FIN sent again after the new SYN-ACK is the old connection's, though the
        // new one's numbers lie within reach of it.
        let closed_then_lost_syn: &[Step<'_>] = &[
            (client, server, 1000, 9000, ack, b"0123456789", 0),
            (server, client, 9000, 1010, ack, b"01234", 0),
            (client, server, 1010, 9005, fin, b"", 0),
            (server, client, 9005, 1011, fin, b"", 0),
            (server, client, 509_000, 501_001, synack, b"", 1),
            (server, client, 9005, 1011, fin, b"", 0),
            (client, server, 501_001, 509_001, ack, b"GET", 1),
            (server, client, 509_001, 501_004, ack, b"200", 1),
        ];
        // The client's FIN and the new SYN-ACK were lost, and the new SYN was recorded after
        // the new connection's first bytes: those acknowledge numbers past the server's FIN,
        // which no packet of the old connection can, though they lie within reach of its
        // numbers; the late SYN, one before them, is the new connection's own.
        let past_fin: &[Step<'_>] = &[
            (client, server, 1000, 9000, ack, b"0123456789", 0),
            (server, client, 9000, 1010, ack, b"01234", 0),
            (server, client, 9005, 1010, fin, b"", 0),
            (client, server, 1010, 9006, ack, b"", 0),
            (client, server, 501_001, 509_001, ack, b"GET", 1),
            (client, server, 501_000, 0, syn, b"", 1),
            (server, client, 509_001, 501_004, ack, b"200", 1),
            (client, server, 1010, 9006, ack, b"", 0),
        ];
        for (case, steps) in [
            late_close,
            lost_handshake,
            lost_syn,
            closed_then_lost_syn,
            past_fin,
        ]
        .into_iter()
        .enumerate()
        {
            let events = classify_steps(steps, &format!("case {case}"));
            // Closed, or still within its patience: no end to announce yet.
            assert_eq!(events, ["open 0", "open 1"], "case {case}");
        }

        // Replaced before it closed, and never heard from again: it ends where the new SYN
        // replaced it, once its patience ran out.
        let mut table = FlowTable::new(100);
        let mut events = Vec::new();
        let mut push = |e| events.push(event_text(e));
        let p = |src, dst, seq, f| decode::TcpPacket {
            src,
            dst,
            seq,
            ack: 0,
            flags: f,
            payload: b"",
        };
        table.classify(
            &p(client, server, 1000, flags(false, false, false)),
            Mark::new(1, 0),
            1,
            &mut push,
        );
        table.classify(
            &p(client, server, 7000, flags(true, false, false)),
            Mark::new(2, 10),
            2,
            &mut push,
        );
        let mut ends = Vec::new();
        table.sweep(Mark::new(3, 20), &mut ends);
        assert!(ends.is_empty());
        table.sweep(Mark::new(4, 20 + REPLACED_PATIENCE_NS), &mut ends);
        assert!(matches!(ends[..], [FlowEvent::End(0, StreamEnd::CaptureEnd, m)] if m.frame == 2));
        assert_eq!(events, ["open 0", "open 1"]);
    }

    #[test]
    fn a_handshake_recorded_after_the_first_packets_stays_their_connection() {
        // The SYN-ACK (and the SYN) recorded after a side's first packet, at one before its
        // number: the connection's own handshake, not a new connection's.
        let client = ep(Ipv4Addr::new(10, 0, 0, 2), 51_700);
        let server = ep(Ipv4Addr::new(10, 0, 0, 1), 8000);
        let (ack, syn, synack) = (
            flags(false, true, false),
            flags(true, false, false),
            flags(true, true, false),
        );
        let steps: &[Step<'_>] = &[
            (client, server, 7001, 3001, ack, b"POST", 0),
            (server, client, 3001, 7005, ack, b"", 0),
            (server, client, 3000, 7001, synack, b"", 0),
            (client, server, 7000, 0, syn, b"", 0),
            (server, client, 3001, 7005, ack, b"200", 0),
        ];
        assert_eq!(classify_steps(steps, "late handshake"), ["open 0"]);
    }

    #[test]
    fn connections_closed_by_one_side_end_after_a_quiet_minute() {
        let mut table = FlowTable {
            flows: Flows::new(),
            replaced: HashMap::with_hasher(FoldHashKey::default()),
            next_stream: 0,
            max_connections: 100,
            evicted: 0,
        };
        let flow = |stream, fin: [bool; 2], rst: bool, seen_ns| {
            let mut f = Flow::new(stream, true, Mark::new(1, seen_ns), 0);
            for (set, bit) in [
                (fin[0], Flow::FIN),
                (fin[1], Flow::FIN << 1),
                (rst, Flow::RST),
            ] {
                if set {
                    f.bits |= bit;
                }
            }
            f
        };
        let key = |port| {
            flow_key(
                &ep(Ipv4Addr::new(10, 0, 0, 2), port),
                &ep(Ipv4Addr::new(10, 0, 0, 1), 80),
            )
            .0
        };
        let minute = QUIET_CLOSED_NS;
        table
            .flows
            .insert_new(key(1), flow(1, [false, true], false, 0));
        table
            .flows
            .insert_new(key(2), flow(2, [true, true], false, 0));
        table
            .flows
            .insert_new(key(3), flow(3, [false, false], false, 0));
        table
            .flows
            .insert_new(key(4), flow(4, [true, false], false, minute));
        table
            .flows
            .insert_new(key(5), flow(5, [false, false], true, 0));
        let mut ends = Vec::new();
        table.sweep(Mark::new(9, minute + 1), &mut ends);
        // Half-closed and quiet: ended. Closed: gone (the shard ended it already). Open, or
        // half-closed but heard from within the minute: kept.
        let ended: Vec<u64> = ends
            .iter()
            .map(|e| match e {
                FlowEvent::End(s, StreamEnd::CaptureEnd, _) => *s,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(ended, [1]);
        let mut left: Vec<u64> = table.flows.iter().map(|(_, f)| f.stream).collect();
        left.sort_unstable();
        assert_eq!(left, [3, 4]);
        assert_eq!(table.evicted, 0);
    }

    #[test]
    fn ipv4_and_ipv6_with_the_same_bits_are_different_connections() {
        let v4 = flow_key(
            &ep(Ipv4Addr::new(0, 0, 0, 1), 1),
            &ep(Ipv4Addr::new(0, 0, 0, 2), 2),
        );
        let v6 = flow_key(
            &ep(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 1), 1),
            &ep(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 2), 2),
        );
        assert_ne!(v4.0, v6.0);
    }

    #[test]
    fn ipv4_ends_keyed_in_words_as_in_the_general_key() {
        // Addresses and ports drawn from a few values each, so that equal addresses (and equal
        // ports) on both ends are common: the key and which end is the lower must not depend on
        // which way it was computed.
        let mut seed = 0xbb67_ae85_84ca_a73bu64;
        let mut next = move || crate::testing::xorshift(&mut seed);
        let mut pick = move || {
            let ips = [0x0a00_0001u32, 0x0a00_0002, 0xc0a8_ffff, 0xffff_ffff, 0];
            let ports = [0u16, 1, 8000, 40_000, 65_535];
            let ip = ips[next() as usize % ips.len()];
            let port = ports[next() as usize % ports.len()];
            ep(Ipv4Addr::from_bits(ip), port)
        };
        for _ in 0..10_000 {
            let (a, b) = (pick(), pick());
            assert_eq!(flow_key(&a, &b), flow_key_general(&a, &b), "{a} {b}");
        }
    }

    #[test]
    fn ipv4_keys_fold_into_one_word_and_back_and_ipv6_keys_do_not() {
        let a = ep(Ipv4Addr::new(192, 168, 255, 254), 65_535);
        let b = ep(Ipv4Addr::new(10, 0, 0, 1), 1);
        let (k, _) = flow_key(&a, &b);
        let word = k.v4().expect("an IPv4 key");
        assert_eq!(FlowKey::from_v4(word), k);
        // Every part of the key is in the word: another port or address is another word.
        for other in [
            ep(Ipv4Addr::new(192, 168, 255, 254), 65_534),
            ep(Ipv4Addr::new(192, 168, 255, 253), 65_535),
        ] {
            assert_ne!(flow_key(&other, &b).0.v4(), Some(word));
        }
        let v6 = flow_key(
            &ep(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 1), 1),
            &ep(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 2), 2),
        );
        assert_eq!(v6.0.v4(), None);
        // An IPv4 connection's slot is one cache line.
        assert_eq!(std::mem::size_of::<Slot4>(), 64);
    }

    #[test]
    fn both_tables_find_update_and_drop_their_connections() {
        let mut flows = Flows::new();
        let v4 = flow_key(
            &ep(Ipv4Addr::new(10, 0, 0, 2), 40_000),
            &ep(Ipv4Addr::new(10, 0, 0, 1), 8000),
        )
        .0;
        let v6 = flow_key(
            &ep(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2), 40_000),
            &ep(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1), 8000),
        )
        .0;
        flows.insert_new(v4, Flow::new(0, true, Mark::new(1, 0), 1));
        flows.insert_new(v6, Flow::new(1, false, Mark::new(2, 0), 2));
        assert_eq!(flows.len(), 2);
        assert_eq!(flows.get(&v4).map(|f| f.stream), Some(0));
        assert_eq!(flows.get(&v6).map(|f| f.stream), Some(1));
        if let Some(f) = flows.get_mut(&v6) {
            f.bits |= Flow::RST;
        }
        let mut keys: Vec<(u64, FlowKey)> = flows.iter().map(|(k, f)| (f.stream, k)).collect();
        keys.sort_unstable_by_key(|(s, _)| *s);
        assert_eq!(keys, [(0, v4), (1, v6)]);
        flows.retain(|f| !f.rst());
        assert!(flows.get(&v6).is_none());
        assert_eq!(flows.remove(&v4).map(|f| f.stream), Some(0));
        assert_eq!(flows.len(), 0);
    }

    #[test]
    fn fold_hasher_spreads_nearby_keys() {
        // Keys differing in one port must land in different low bits (the bucket index) and
        // high bits (the control byte) almost always.
        let h = FoldHashKey::default();
        let server = ep(Ipv4Addr::new(10, 0, 0, 1), 8000);
        let mut low = std::collections::HashSet::new();
        let mut high = std::collections::HashSet::new();
        for port in 30_000..31_024u16 {
            let k = flow_key(&ep(Ipv4Addr::new(10, 1, 0, 1), port), &server).0;
            // IPv4 connections are found by their one-word key.
            let v = h.hash_one(k.v4().expect("an IPv4 key"));
            low.insert(v & 1023);
            high.insert(v >> 57);
        }
        assert!(
            low.len() > 600,
            "{} distinct bucket indices of 1024",
            low.len()
        );
        assert!(
            high.len() >= 120,
            "{} distinct control bytes of 128",
            high.len()
        );
    }
}
