//! TCP reassembly: the two byte streams of one connection, rebuilt from segments.
//!
//! Input: the segments of one connection in capture order, each with the direction it
//! travelled ([`Direction::Forward`] is the direction of the first packet seen).
//! Output: per direction, calls on a [`StreamSink`]: in-order `data`, an explicit `gap` for every
//! run of bytes the capture does not hold, then exactly one `end`.
//! Invariants:
//! - every byte position of a direction, from its start to its end, is reported exactly once,
//!   either as data or inside a gap; bytes are never glued across a hole;
//! - when two captured copies of a position disagree, the first one captured wins;
//! - buffered out-of-order bytes of a direction never cost more than
//!   `Limits::max_out_of_order_bytes` (each buffered piece is charged [`PIECE_COST_BYTES`] on
//!   top of its length, so many tiny pieces cannot exceed the bound either);
//! - in-order segments go to the sink straight from the caller's buffer, without a copy.
//!
//! Positions are u64 offsets from the start of each direction; a 32-bit sequence number is read
//! as the position nearest to the next expected one (signed 32-bit distance), which follows the
//! stream across any number of wraps.
//!
//! A hole is declared a gap, in its place, when the capture cannot fill it any more:
//! - the other direction acknowledged bytes past the start of the hole (the receiver got what
//!   the capture missed) and captured bytes follow the hole, or the FIN closes it, and
//!   [`REORDER_PATIENCE`] more segments of the connection went by without filling it: a
//!   capture host with several queues records a segment after the acknowledgment of the bytes
//!   that followed it, so an acknowledged hole is not yet a lost one;
//! - the out-of-order buffer would exceed its limit (counted in [`TcpStats::overflows`]);
//! - a RST arrives, or the caller calls [`TcpConnection::finish`].
//!
//! Across directions, the capture order is kept unless a segment acknowledges bytes of the
//! other direction that were not delivered yet (the answer captured before its request, as
//! the same hosts record it): its bytes are then held back until the other direction has
//! delivered what it acknowledges (or reported it as a gap), for at most [`REORDER_PATIENCE`]
//! segments and within the out-of-order budget, so each direction's bytes reach the sink
//! after the bytes of the other direction they answer. Only one direction holds at a time.
//!
//! A hole before a FIN is left open until one of these happens, because a real loss on the wire
//! is retransmitted after the FIN and the capture then holds the bytes. When the FIN itself was
//! not captured, a trailing gap found through acknowledgements may count the FIN's sequence slot
//! as one missing byte: the capture cannot tell the two apart.

use std::collections::{BTreeMap, VecDeque};

use crate::record::{Direction, Limits, Mark, StreamEnd, StreamSink};

/// Control bits of a TCP header that reassembly looks at, kept as the header's flags byte
/// holds them. One byte rather than four flags: the reader copies a decoded packet's flags
/// right after the decoder wrote them, and a four-byte read of four one-byte writes waited
/// until they reached the cache.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpFlags(u8);

impl TcpFlags {
    const FIN: u8 = 0x01;
    const SYN: u8 = 0x02;
    const RST: u8 = 0x04;
    const ACK: u8 = 0x10;

    /// The four bits of a TCP header's flags byte (its 14th) that matter here.
    pub const fn from_header_byte(byte: u8) -> TcpFlags {
        TcpFlags(byte & (Self::FIN | Self::SYN | Self::RST | Self::ACK))
    }

    /// The flags with each of the four bits set or not.
    pub const fn new(syn: bool, ack: bool, fin: bool, rst: bool) -> TcpFlags {
        TcpFlags(
            (syn as u8 * Self::SYN)
                | (ack as u8 * Self::ACK)
                | (fin as u8 * Self::FIN)
                | (rst as u8 * Self::RST),
        )
    }

    /// SYN: opens a direction.
    pub const fn syn(self) -> bool {
        self.0 & Self::SYN != 0
    }

    /// ACK: the acknowledgment number is valid.
    pub const fn ack(self) -> bool {
        self.0 & Self::ACK != 0
    }

    /// FIN: the sender closed its direction.
    pub const fn fin(self) -> bool {
        self.0 & Self::FIN != 0
    }

    /// RST: the connection was reset.
    pub const fn rst(self) -> bool {
        self.0 & Self::RST != 0
    }

    /// ACK, and neither SYN, FIN nor RST.
    pub const fn ack_alone(self) -> bool {
        self.0 == Self::ACK
    }

    /// The same flags with ACK set or cleared.
    pub const fn with_ack(self, ack: bool) -> TcpFlags {
        TcpFlags::new(self.syn(), ack, self.fin(), self.rst())
    }

    /// The same flags with FIN set or cleared.
    pub const fn with_fin(self, fin: bool) -> TcpFlags {
        TcpFlags::new(self.syn(), self.ack(), fin, self.rst())
    }
}

impl std::fmt::Debug for TcpFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpFlags")
            .field("syn", &self.syn())
            .field("ack", &self.ack())
            .field("fin", &self.fin())
            .field("rst", &self.rst())
            .finish()
    }
}

/// One captured TCP segment of a connection.
#[derive(Clone, Copy, Debug)]
pub struct TcpSegment<'a> {
    /// Sequence number of the first payload byte.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// The control bits.
    pub flags: TcpFlags,
    /// The payload as captured.
    pub payload: &'a [u8],
    /// The frame that carried the segment.
    pub mark: Mark,
}

/// Counters over both directions of one connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpStats {
    /// Gaps reported to the sink.
    pub gaps: u64,
    /// Bytes inside those gaps.
    pub gap_bytes: u64,
    /// Captured bytes dropped because their position was already delivered or buffered.
    pub retransmitted_bytes: u64,
    /// Segments buffered because bytes before them were missing.
    pub out_of_order_segments: u64,
    /// Holes given up as gaps because the out-of-order buffer was full.
    pub overflows: u64,
}

impl TcpStats {
    fn add(&mut self, other: &TcpStats) {
        self.gaps = self.gaps.saturating_add(other.gaps);
        self.gap_bytes = self.gap_bytes.saturating_add(other.gap_bytes);
        self.retransmitted_bytes = self
            .retransmitted_bytes
            .saturating_add(other.retransmitted_bytes);
        self.out_of_order_segments = self
            .out_of_order_segments
            .saturating_add(other.out_of_order_segments);
        self.overflows = self.overflows.saturating_add(other.overflows);
    }
}

/// What one buffered piece costs against `Limits::max_out_of_order_bytes` besides its bytes:
/// roughly its map entry and vector header, so a flood of one-byte segments stays bounded.
pub const PIECE_COST_BYTES: usize = 64;

/// Segments of a connection that may go by before an acknowledged hole is given up as a gap,
/// or before a segment held for the other direction's bytes is let through: reordering by a
/// capture host spans a few packets, real loss is never filled.
pub const REORDER_PATIENCE: u64 = 8;

/// A segment held back because it acknowledges bytes of the other direction not delivered
/// yet.
#[derive(Debug)]
struct HeldSegment {
    seq: u32,
    flags: TcpFlags,
    payload: Vec<u8>,
    mark: Mark,
    /// The other direction's position its acknowledgment reaches.
    needs: u64,
    /// The connection's segment count when it was held.
    since: u64,
}

impl HeldSegment {
    fn cost(&self) -> usize {
        self.payload.len().saturating_add(PIECE_COST_BYTES)
    }
}

/// The segments a connection holds back, per direction: boxed on the first one held, since
/// most connections never hold any, and inline the two queues made every connection 56
/// bytes larger.
#[derive(Debug, Default)]
struct Held(Option<Box<[VecDeque<HeldSegment>; 2]>>);

impl Held {
    fn is_empty(&self, d: usize) -> bool {
        self.0.as_ref().is_none_or(|q| q[d].is_empty())
    }

    fn iter(&self, d: usize) -> impl Iterator<Item = &HeldSegment> {
        self.0.iter().flat_map(move |q| q[d].iter())
    }

    fn front(&self, d: usize) -> Option<&HeldSegment> {
        self.0.as_ref()?[d].front()
    }

    fn push_back(&mut self, d: usize, h: HeldSegment) {
        self.0.get_or_insert_with(Default::default)[d].push_back(h);
    }

    fn pop_front(&mut self, d: usize) -> Option<HeldSegment> {
        self.0.as_mut()?[d].pop_front()
    }
}

/// Bytes captured ahead of a hole, kept until the hole closes or becomes a gap.
#[derive(Debug)]
struct OutOfOrderPiece {
    bytes: Vec<u8>,
    mark: Mark,
}

impl OutOfOrderPiece {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }
    fn cost(&self) -> usize {
        self.bytes.len().saturating_add(PIECE_COST_BYTES)
    }
}

/// One direction of the connection.
#[derive(Debug)]
struct HalfStream {
    dir: Direction,
    max_pending_cost: usize,
    /// The start of the stream is known (from a SYN, a SYN-ACK, or the first data captured).
    started: bool,
    /// The start came from the handshake, so position 0 is the first byte ever sent.
    from_start: bool,
    ended: bool,
    /// Sequence number of position 0.
    origin_seq: u32,
    /// Next position to deliver; everything before it was delivered or gapped.
    next: u64,
    /// Highest position the other direction acknowledged.
    acked_to: u64,
    /// Position of the FIN, once captured; nothing at or after it is delivered.
    fin_at: Option<u64>,
    fin_mark: Mark,
    /// Out-of-order pieces by position: each starts after `next`, none overlap, all end at or
    /// before `fin_at`.
    pending: BTreeMap<u64, OutOfOrderPiece>,
    pending_cost: usize,
    /// Boxed when first counted: most directions of a clean capture count nothing, and inline
    /// the counters made each direction 32 bytes larger.
    stats: Option<Box<TcpStats>>,
    /// An acknowledged hole waiting to be given up: (`next` when it was seen, the
    /// connection's segment count then, the segment that revealed it).
    /// Boxed: holes are rare, and inline it made each direction 32 bytes larger.
    hole_seen: Option<Box<(u64, u64, Mark)>>,
    /// The connection's segment count, as of the segment being handled.
    now: u64,
    /// What a capture that began mid-connection shows before this direction's data; boxed
    /// when first seen (a connection captured from its handshake never has any).
    pre: Option<Box<PreStart>>,
}

/// Before a capture that began mid-connection shows a direction's data.
#[derive(Debug, Default)]
struct PreStart {
    /// The sequence number of the direction's first pure ACK, and the highest acknowledgment
    /// the other side sent. Together they can prove that bytes before the first captured one
    /// were sent and lost.
    anchor: Option<u32>,
    acked: Option<u32>,
    /// The lowest acknowledgment the other side sent before this direction showed a packet:
    /// the anchor when this direction showed no pure ACK either (its handshake and its
    /// acknowledgments were lost).
    first_acked: Option<u32>,
}

/// Bytes between a mid-connection anchor and the first captured byte taken as lost at most:
/// past it, the anchor is an old segment rather than the start of a hole.
const MAX_ANCHORED_HOLE: u32 = 16 << 20;

impl HalfStream {
    fn new(dir: Direction, max_pending_cost: usize) -> Self {
        HalfStream {
            dir,
            max_pending_cost,
            started: false,
            from_start: false,
            ended: false,
            origin_seq: 0,
            next: 0,
            acked_to: 0,
            fin_at: None,
            fin_mark: Mark::default(),
            pending: BTreeMap::new(),
            pending_cost: 0,
            stats: None,
            hole_seen: None,
            now: 0,
            pre: None,
        }
    }

    fn start_at(&mut self, first_byte_seq: u32, from_start: bool) {
        self.started = true;
        self.from_start = from_start;
        self.origin_seq = first_byte_seq;
        self.next = 0;
        self.acked_to = 0;
    }

    /// Position of `seq`, taken as the one nearest to `next`; negative before the start.
    fn position(&self, seq: u32) -> i128 {
        // Truncation is the point: sequence numbers are positions modulo 2^32.
        let next_seq = self.origin_seq.wrapping_add(self.next as u32);
        let distance = seq.wrapping_sub(next_seq) as i32;
        i128::from(self.next) + i128::from(distance)
    }

    /// The other direction acknowledged everything before `ack`.
    fn on_ack<S: StreamSink>(&mut self, ack: u32, mark: Mark, sink: &mut S) {
        if !self.started {
            let pre = self.pre.get_or_insert_with(Default::default);
            if pre.acked.is_none_or(|k| ack.wrapping_sub(k) as i32 > 0) {
                pre.acked = Some(ack);
            }
            if pre
                .first_acked
                .is_none_or(|k| (ack.wrapping_sub(k) as i32) < 0)
            {
                pre.first_acked = Some(ack);
            }
        }
        if !self.started || self.ended {
            return;
        }
        let acked = self.position(ack);
        if acked > i128::from(self.acked_to) {
            self.acked_to = u64::try_from(acked).unwrap_or(u64::MAX);
            self.reveal_acked_holes(mark, sink);
            self.end_if_complete(sink);
        }
    }

    fn on_segment<S: StreamSink>(&mut self, seg: &TcpSegment<'_>, sink: &mut S) {
        if self.ended {
            return;
        }
        let data_seq = if seg.flags.syn() {
            if self.started {
                // A retransmitted SYN (or a late one after the SYN-ACK anchored this side).
                return;
            }
            let first = seg.seq.wrapping_add(1);
            self.start_at(first, true);
            first
        } else {
            if !self.started {
                if seg.payload.is_empty() && !seg.flags.fin() {
                    self.pre
                        .get_or_insert_with(Default::default)
                        .anchor
                        .get_or_insert(seg.seq);
                    return;
                }
                // Mid-stream: the first captured byte is position 0, unless the capture shows
                // bytes of this direction before it were sent and lost (see `lost_before`).
                match self.lost_before(Some(seg.seq)) {
                    Some((anchor, acked)) => {
                        self.start_at(anchor, false);
                        self.acked_to = u64::from(acked.wrapping_sub(anchor));
                    }
                    // Its own pure ACK (or, without one, the peer's lowest acknowledgment)
                    // stood before this segment by more than a keep-alive probe's byte: the
                    // bytes between were sent, captured late or not at all, and wait as a
                    // hole.
                    None => match self.pre_anchor().filter(|&a| {
                        let span = seg.seq.wrapping_sub(a);
                        span > 1 && span <= MAX_ANCHORED_HOLE
                    }) {
                        Some(anchor) => self.start_at(anchor, false),
                        None => self.start_at(seg.seq, false),
                    },
                }
            }
            seg.seq
        };
        let start = self.position(data_seq);
        let end = start + seg.payload.len() as i128;
        if seg.flags.fin() {
            self.set_fin(end, seg.mark);
        }
        self.accept(start, seg.payload, seg.mark, sink);
        self.reveal_acked_holes(seg.mark, sink);
        self.end_if_complete(sink);
    }

    /// The sequence number this direction stood at before its first captured byte, as far as
    /// the capture shows: its first pure ACK, or else the other side's lowest acknowledgment.
    fn pre_anchor(&self) -> Option<u32> {
        let pre = self.pre.as_deref()?;
        pre.anchor.or(pre.first_acked)
    }

    /// In a capture that began mid-connection (or lost this direction's handshake), before
    /// this direction's first captured byte (at `first`, if any): the sequence number of its
    /// first pure ACK (or, without one, the other side's lowest acknowledgment) and the other
    /// side's highest acknowledgment, when the latter is more than one byte past the former (a
    /// keep-alive probe sits one byte back) and not past `first`. The bytes between were sent
    /// (the peer acknowledged them) and the capture lost them.
    fn lost_before(&self, first: Option<u32>) -> Option<(u32, u32)> {
        let anchor = self.pre_anchor()?;
        let acked = self.pre.as_ref()?.acked?;
        let span = acked.wrapping_sub(anchor);
        (span > 1
            && span <= MAX_ANCHORED_HOLE
            && first.is_none_or(|f| f.wrapping_sub(acked) as i32 >= 0))
        .then_some((anchor, acked))
    }

    fn set_fin(&mut self, fin_position: i128, mark: Mark) {
        if self.fin_at.is_some() {
            return;
        }
        // A FIN before bytes already delivered makes no sense on the wire; end where we are.
        let fin = u64::try_from(fin_position.max(i128::from(self.next))).unwrap_or(u64::MAX);
        self.fin_at = Some(fin);
        self.fin_mark = mark;
        // Drop buffered bytes at or after the FIN: nothing is sent after it.
        let beyond = self.pending.split_off(&fin);
        for piece in beyond.values() {
            self.pending_cost = self.pending_cost.saturating_sub(piece.cost());
        }
        if let Some(mut last) = self.pending.last_entry() {
            let keep = usize::try_from(fin.saturating_sub(*last.key())).unwrap_or(usize::MAX);
            let piece = last.get_mut();
            let cut = piece.bytes.len().saturating_sub(keep);
            if cut > 0 {
                piece.bytes.truncate(keep);
                self.pending_cost = self.pending_cost.saturating_sub(cut);
            }
        }
    }

    /// Takes the captured bytes at `start`: delivers, buffers, or drops what is known already.
    fn accept<S: StreamSink>(&mut self, start: i128, bytes: &[u8], mark: Mark, sink: &mut S) {
        let mut start = start;
        let mut bytes = bytes;
        if let Some(fin) = self.fin_at {
            let room = (i128::from(fin) - start).clamp(0, bytes.len() as i128);
            bytes = bytes.get(..room as usize).unwrap_or(&[]);
        }
        loop {
            let next = i128::from(self.next);
            if start < next {
                let known = usize::try_from(next - start)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                self.count_retransmitted(known);
                bytes = bytes.get(known..).unwrap_or(&[]);
                start = next;
            }
            if bytes.is_empty() {
                return;
            }
            let Ok(seg_start) = u64::try_from(start) else {
                return;
            };
            if seg_start == self.next {
                self.deliver_in_order(bytes, mark, sink);
                return;
            }
            let seg_end = seg_start.saturating_add(bytes.len() as u64);
            let (new_bytes, new_pieces) = self.uncovered(seg_start, seg_end);
            if new_bytes == 0 {
                self.count_retransmitted(bytes.len());
                return;
            }
            let cost = usize::try_from(new_bytes)
                .unwrap_or(usize::MAX)
                .saturating_add(new_pieces.saturating_mul(PIECE_COST_BYTES));
            if self.pending_cost.saturating_add(cost) <= self.max_pending_cost {
                self.count_retransmitted(
                    bytes
                        .len()
                        .saturating_sub(usize::try_from(new_bytes).unwrap_or(usize::MAX)),
                );
                self.insert_uncovered(seg_start, bytes, mark);
                self.stats_mut().out_of_order_segments += 1;
                return;
            }
            // No room: give up the oldest hole, which also lets buffered bytes after it flow.
            self.stats_mut().overflows += 1;
            let hole_end = match self.pending.first_key_value() {
                Some((&first, _)) if first < seg_start => first,
                _ => seg_start,
            };
            self.gap_to(hole_end, mark, sink);
        }
    }

    /// `bytes` start at `next`. Buffered pieces inside their range win over them (first
    /// captured copy), and pieces that become contiguous follow.
    fn deliver_in_order<S: StreamSink>(&mut self, bytes: &[u8], mark: Mark, sink: &mut S) {
        let mut rest = bytes;
        while !rest.is_empty() {
            let rest_end = self.next.saturating_add(rest.len() as u64);
            let piece_start = match self.pending.first_key_value() {
                Some((&piece_start, _)) if piece_start < rest_end => piece_start,
                _ => {
                    self.emit_data(rest, mark, sink);
                    return self.drain_contiguous(sink);
                }
            };
            let before = usize::try_from(piece_start.saturating_sub(self.next))
                .unwrap_or(usize::MAX)
                .min(rest.len());
            if before > 0 {
                self.emit_data(rest.get(..before).unwrap_or(&[]), mark, sink);
                rest = rest.get(before..).unwrap_or(&[]);
            }
            // `next` is now at the piece; the piece's copy of the overlap is kept.
            let Some((_, piece)) = self.pending.pop_first() else {
                break;
            };
            self.pending_cost = self.pending_cost.saturating_sub(piece.cost());
            let overlap = piece.bytes.len().min(rest.len());
            self.count_retransmitted(overlap);
            rest = rest.get(overlap..).unwrap_or(&[]);
            self.emit_data(&piece.bytes, piece.mark, sink);
        }
        self.drain_contiguous(sink);
    }

    /// Delivers buffered pieces that start at or before `next`.
    fn drain_contiguous<S: StreamSink>(&mut self, sink: &mut S) {
        while let Some((&piece_start, _)) = self.pending.first_key_value() {
            if piece_start > self.next {
                return;
            }
            let Some((_, piece)) = self.pending.pop_first() else {
                return;
            };
            self.pending_cost = self.pending_cost.saturating_sub(piece.cost());
            let already = usize::try_from(self.next - piece_start).unwrap_or(usize::MAX);
            if let Some(tail) = piece.bytes.get(already..) {
                self.emit_data(tail, piece.mark, sink);
            }
        }
    }

    /// Bytes of `[start, end)` not yet buffered, and how many pieces they would form.
    fn uncovered(&self, start: u64, end: u64) -> (u64, usize) {
        let mut bytes = 0u64;
        let mut pieces = 0usize;
        let mut cursor = start;
        while cursor < end {
            match self.piece_around(cursor, end) {
                Ok(covered_to) => cursor = covered_to,
                Err(free_to) => {
                    bytes += free_to - cursor;
                    pieces += 1;
                    cursor = free_to;
                }
            }
        }
        (bytes, pieces)
    }

    fn insert_uncovered(&mut self, start: u64, bytes: &[u8], mark: Mark) {
        let end = start.saturating_add(bytes.len() as u64);
        let mut cursor = start;
        while cursor < end {
            match self.piece_around(cursor, end) {
                Ok(covered_to) => cursor = covered_to,
                Err(free_to) => {
                    let from = usize::try_from(cursor - start).unwrap_or(usize::MAX);
                    let to = usize::try_from(free_to - start).unwrap_or(usize::MAX);
                    let piece = OutOfOrderPiece {
                        bytes: bytes.get(from..to).unwrap_or(&[]).to_vec(),
                        mark,
                    };
                    self.pending_cost = self.pending_cost.saturating_add(piece.cost());
                    self.pending.insert(cursor, piece);
                    cursor = free_to;
                }
            }
        }
    }

    /// At `cursor` (below `limit`): `Ok(end)` when a buffered piece covers it up to `end`,
    /// `Err(end)` when it is free up to `end` (the next piece or `limit`).
    fn piece_around(&self, cursor: u64, limit: u64) -> Result<u64, u64> {
        if let Some((&piece_start, piece)) = self.pending.range(..=cursor).next_back() {
            let piece_end = piece_start.saturating_add(piece.len());
            if piece_end > cursor {
                return Ok(piece_end);
            }
        }
        let free_to = match self.pending.range(cursor..).next() {
            Some((&piece_start, _)) => piece_start.min(limit),
            None => limit,
        };
        Err(free_to)
    }

    /// Holes the other direction acknowledged become gaps once something follows them in the
    /// capture (buffered bytes or the FIN); a hole at the tail waits, since the bytes may still
    /// be captured and the acknowledgement may count an uncaptured FIN.
    #[inline]
    fn reveal_acked_holes<S: StreamSink>(&mut self, mark: Mark, sink: &mut S) {
        // Asked after every segment and acknowledgment; nearly always nothing acknowledged is
        // missing, which this inline test tells before the call.
        if self.acked_to > self.next {
            self.reveal_holes(mark, sink);
        }
    }

    #[inline(never)]
    fn reveal_holes<S: StreamSink>(&mut self, mark: Mark, sink: &mut S) {
        loop {
            let acked = match self.fin_at {
                Some(fin) => self.acked_to.min(fin),
                None => self.acked_to,
            };
            if acked <= self.next {
                return;
            }
            let hole_end = match (self.pending.first_key_value(), self.fin_at) {
                (Some((&piece_start, _)), _) => piece_start.min(acked),
                (None, Some(_)) => acked,
                (None, None) => return,
            };
            if hole_end <= self.next {
                return;
            }
            // The gap is reported where the capture revealed it, which is what proves it.
            let revealed = match self.hole_seen.as_deref() {
                Some(&(at, since, revealed)) if at == self.next => {
                    if self.now.saturating_sub(since) < REORDER_PATIENCE {
                        return;
                    }
                    revealed
                }
                _ => {
                    self.hole_seen = Some(Box::new((self.next, self.now, mark)));
                    return;
                }
            };
            self.hole_seen = None;
            self.gap_to(hole_end, revealed, sink);
        }
    }

    /// Delivers what is buffered before position `to`, which the peer acknowledged in a
    /// segment held for it until now, giving up the holes between as gaps. With `tail`, so is
    /// the rest up to `to`: the peer received those bytes before it sent what waited for them,
    /// so what the peer sent must not be read as if they had never been sent (an answer read
    /// after a lost request would be paired with the request before it).
    fn settle_to<S: StreamSink>(&mut self, to: u64, tail: bool, mark: Mark, sink: &mut S) {
        while self.started && !self.ended && self.next < to {
            let piece_start = match self.pending.first_key_value() {
                Some((&start, _)) if start < to => start,
                _ => {
                    // A FIN's position is not a byte (when the FIN is not captured, its loss is
                    // counted as one); an acknowledgment far beyond anything sent is no
                    // evidence of bytes.
                    let end = self.fin_at.map_or(to, |fin| to.min(fin));
                    if tail && end > self.next && end - self.next <= u64::from(MAX_ANCHORED_HOLE) {
                        self.hole_seen = None;
                        self.gap_to(end, mark, sink);
                    }
                    return;
                }
            };
            let before = self.next;
            // Reported where the capture revealed it, when it did.
            let at = match self.hole_seen.take().map(|h| *h) {
                Some((at, _, revealed)) if at == self.next => revealed,
                _ => mark,
            };
            self.gap_to(piece_start, at, sink);
            if self.next == before {
                return;
            }
        }
    }

    /// Reports `[next, to)` as missing, then delivers what became contiguous.
    fn gap_to<S: StreamSink>(&mut self, to: u64, mark: Mark, sink: &mut S) {
        if to > self.next {
            let len = to - self.next;
            sink.gap(self.dir, len, mark);
            let stats = self.stats_mut();
            stats.gaps += 1;
            stats.gap_bytes = stats.gap_bytes.saturating_add(len);
            self.next = to;
        }
        self.drain_contiguous(sink);
    }

    fn emit_data<S: StreamSink>(&mut self, bytes: &[u8], mark: Mark, sink: &mut S) {
        if bytes.is_empty() {
            return;
        }
        sink.data(self.dir, bytes, mark);
        self.next = self.next.saturating_add(bytes.len() as u64);
    }

    fn count_retransmitted(&mut self, bytes: usize) {
        if bytes > 0 {
            let stats = self.stats_mut();
            stats.retransmitted_bytes = stats.retransmitted_bytes.saturating_add(bytes as u64);
        }
    }

    fn stats_mut(&mut self) -> &mut TcpStats {
        self.stats.get_or_insert_with(Default::default)
    }

    fn end_if_complete<S: StreamSink>(&mut self, sink: &mut S) {
        if !self.ended && self.fin_at == Some(self.next) {
            let mark = self.fin_mark;
            self.end(StreamEnd::Fin, mark, sink);
        }
    }

    /// Everything still open becomes final: holes before buffered bytes are gaps, buffered
    /// bytes are delivered, the tail up to the FIN (or the last acknowledged byte) is a gap,
    /// and the direction ends — with `Fin` when the FIN was captured, else with `how`.
    fn flush_and_end<S: StreamSink>(&mut self, how: StreamEnd, mark: Mark, sink: &mut S) {
        if self.ended {
            return;
        }
        if !self.started
            && let Some((anchor, acked)) = self.lost_before(None)
        {
            // Nothing of this direction was captured, but its peer acknowledged bytes of it.
            self.start_at(anchor, false);
            self.acked_to = u64::from(acked.wrapping_sub(anchor));
        }
        if self.started {
            // A hole the capture revealed earlier is reported where it was revealed.
            let mut first = match self.hole_seen.take().map(|h| *h) {
                Some((at, _, revealed)) if at == self.next => revealed,
                _ => mark,
            };
            while let Some((&piece_start, _)) = self.pending.first_key_value() {
                self.gap_to(piece_start, first, sink);
                first = mark;
            }
            let tail = self.fin_at.unwrap_or(self.acked_to);
            self.gap_to(tail, mark, sink);
        }
        self.end_if_complete(sink);
        self.end(how, mark, sink);
    }

    fn end<S: StreamSink>(&mut self, how: StreamEnd, mark: Mark, sink: &mut S) {
        if self.ended {
            return;
        }
        self.ended = true;
        self.pending.clear();
        self.pending_cost = 0;
        sink.end(self.dir, how, mark);
    }
}

/// How far past its direction's position an empty segment may stand and still be taken to
/// show bytes sent and not captured; further, it is more likely a stray than a loss.
const UNSEEN_REACH: u32 = 1 << 24;

/// How many of the peer's last bytes given (up to `peer_next`) a segment carrying `payload`
/// and acknowledging up to `needs` was sent before, when it carries bytes and that is some
/// but not an implausible number ([`StreamSink::before_peer`]).
fn unacked_by(payload: &[u8], needs: u64, peer_next: u64) -> Option<u64> {
    let unacked = peer_next.saturating_sub(needs);
    (!payload.is_empty() && needs > 0 && (1..=u64::from(UNSEEN_REACH)).contains(&unacked))
        .then_some(unacked)
}

/// Reassembly state of one TCP connection, both directions.
#[derive(Debug)]
pub struct TcpConnection {
    /// Forward, then Reverse.
    halves: [HalfStream; 2],
    any_seen: bool,
    first_was_syn: bool,
    /// Segments seen.
    segments: u64,
    /// Segments held back per direction (only one direction holds at a time), and their cost
    /// against `Limits::max_out_of_order_bytes` (which each half keeps).
    held: Held,
    held_cost: usize,
    /// Per direction, where it stood when an empty segment last showed bytes sent past it
    /// and not captured (so far): said once per position.
    unseen_said: [Option<u64>; 2],
}

impl TcpConnection {
    /// A connection with nothing seen yet; out-of-order bytes are buffered up to
    /// `limits.max_out_of_order_bytes` per direction.
    pub fn new(limits: &Limits) -> Self {
        let max = limits.max_out_of_order_bytes;
        TcpConnection {
            halves: [
                HalfStream::new(Direction::Forward, max),
                HalfStream::new(Direction::Reverse, max),
            ],
            any_seen: false,
            first_was_syn: false,
            segments: 0,
            held: Default::default(),
            held_cost: 0,
            unseen_said: [None; 2],
        }
    }

    /// One segment of this connection in capture order; `dir` says which way it travelled
    /// (Forward = direction of the first packet seen for the connection).
    pub fn segment<S: StreamSink>(&mut self, dir: Direction, seg: &TcpSegment<'_>, sink: &mut S) {
        if !self.any_seen {
            self.any_seen = true;
            self.first_was_syn = seg.flags.syn();
        }
        self.segments += 1;
        for half in &mut self.halves {
            half.now = self.segments;
        }
        let d = dir.index();
        let o = dir.other().index();
        let [forward, reverse] = &mut self.halves;
        let (this, other) = match dir {
            Direction::Forward => (forward, reverse),
            Direction::Reverse => (reverse, forward),
        };
        if seg.payload.is_empty()
            && !(seg.flags.syn() || seg.flags.fin() || seg.flags.rst())
            && this.started
            && !this.ended
            && self.unseen_said[d] != Some(this.next)
        {
            // An empty segment's sequence number is where its sender stood: bytes before it
            // that the capture neither gave nor holds were sent and not captured (so far).
            let at = this.position(seg.seq);
            let ahead = at - i128::from(this.next);
            let held = self
                .held
                .iter(d)
                .any(|h| this.position(h.seq) + h.payload.len() as i128 >= at);
            if ahead > 0 && ahead <= i128::from(UNSEEN_REACH) && !held {
                self.unseen_said[d] = Some(this.next);
                sink.sent_unseen(dir, seg.mark);
            }
        }
        if seg.flags.ack() {
            if seg.flags.syn() && !other.started && !other.ended {
                // A SYN-ACK acknowledges exactly the peer's SYN: the peer's data starts there.
                other.start_at(seg.ack, true);
            }
            other.on_ack(seg.ack, seg.mark, sink);
        }
        if seg.flags.rst() {
            // The receiver discards everything on RST; the payload of a RST is not stream data.
            self.release(usize::MAX, seg.mark, sink);
            let [forward, reverse] = &mut self.halves;
            let (this, other) = match dir {
                Direction::Forward => (forward, reverse),
                Direction::Reverse => (reverse, forward),
            };
            if this.started && !this.ended && this.fin_at.is_none() {
                // A RST carries its sender's next sequence number: bytes before it were sent,
                // and those the capture does not hold were lost. One byte short may be a FIN
                // that was lost rather than a byte, and says nothing.
                let at = this.position(seg.seq);
                let ahead = at - i128::from(this.next);
                if ahead > 1 && ahead <= i128::from(UNSEEN_REACH) {
                    this.acked_to = this.acked_to.max(u64::try_from(at).unwrap_or(0));
                }
            }
            this.flush_and_end(StreamEnd::Rst, seg.mark, sink);
            other.flush_and_end(StreamEnd::Rst, seg.mark, sink);
            return;
        }
        let carries = !seg.payload.is_empty() || seg.flags.fin();
        let needs = (seg.flags.ack() && other.started && !other.ended && !this.ended)
            .then(|| other.position(seg.ack))
            .and_then(|p| u64::try_from(p).ok())
            .unwrap_or(0);
        if needs > other.next && !self.held.is_empty(o) {
            // This segment acknowledges what the other direction holds: those bytes were
            // received, so they go first (after what the capture holds of the bytes they
            // answer), even if what they waited for is still missing.
            self.release_direction(o, usize::MAX, seg.mark, sink);
        }
        let other = &self.halves[o];
        let cost = seg.payload.len().saturating_add(PIECE_COST_BYTES);
        let hold = carries
            && !seg.flags.syn()
            && self.held.is_empty(o)
            && (!self.held.is_empty(d) || needs > other.next)
            && self.held_cost.saturating_add(cost) <= self.halves[0].max_pending_cost;
        if hold {
            self.held_cost += cost;
            self.held.push_back(
                d,
                HeldSegment {
                    seq: seg.seq,
                    flags: seg.flags,
                    payload: seg.payload.to_vec(),
                    mark: seg.mark,
                    needs,
                    since: self.segments,
                },
            );
        } else {
            if carries && !self.held.is_empty(d) {
                // No byte overtakes what its direction holds.
                self.release_direction(d, usize::MAX, seg.mark, sink);
            }
            if let Some(unacked) = unacked_by(seg.payload, needs, self.halves[o].next) {
                sink.before_peer(dir, seg.mark, unacked);
            }
            let this = &mut self.halves[d];
            this.on_segment(seg, sink);
        }
        self.release(0, seg.mark, sink);
        for half in &mut self.halves {
            if half.started && !half.ended {
                half.reveal_acked_holes(seg.mark, sink);
                half.end_if_complete(sink);
            }
        }
    }

    /// Takes a segment that only acknowledges, when [`segment`](Self::segment) would change
    /// nothing but the count of segments and how far the other direction is acknowledged, and
    /// would give the sink nothing: often about half of a capture's frames are such
    /// acknowledgments. Any other segment is left for `segment`: false, and nothing changed.
    ///
    /// Why each step of `segment` is idle then: no SYN, FIN or RST and no payload; nothing held
    /// in either direction (none to release or to hold back); both directions started and
    /// open; the sender stands where its captured bytes end (nothing sent unseen); the
    /// acknowledgment is not past the other direction's captured bytes, and no direction's
    /// acknowledged bytes run past what it delivered (no hole to reveal). A direction open
    /// with its FIN at its delivered end cannot be: every segment ends it then.
    #[inline]
    pub fn quiet_ack(&mut self, dir: Direction, seg: &TcpSegment<'_>) -> bool {
        if !seg.flags.ack_alone()
            || !seg.payload.is_empty()
            || !self.held.is_empty(0)
            || !self.held.is_empty(1)
        {
            return false;
        }
        let [forward, reverse] = &mut self.halves;
        let (this, other) = match dir {
            Direction::Forward => (forward, reverse),
            Direction::Reverse => (reverse, forward),
        };
        if !this.started || this.ended || !other.started || other.ended {
            return false;
        }
        let acked = other.position(seg.ack);
        if this.position(seg.seq) != i128::from(this.next)
            || acked > i128::from(other.next)
            || this.acked_to > this.next
            || other.acked_to > other.next
        {
            return false;
        }
        if acked > i128::from(other.acked_to) {
            other.acked_to = u64::try_from(acked).unwrap_or(u64::MAX);
        }
        self.segments += 1;
        for half in &mut self.halves {
            half.now = self.segments;
        }
        true
    }

    /// Lets held segments through: those whose acknowledged bytes the other direction has
    /// delivered, those held for [`REORDER_PATIENCE`] segments, and the first `force` of each
    /// direction regardless.
    #[inline]
    fn release<S: StreamSink>(&mut self, force: usize, mark: Mark, sink: &mut S) {
        for d in 0..2 {
            // Checked here, inline: nearly every segment asks, and nearly always nothing is
            // held.
            if !self.held.is_empty(d) {
                self.release_direction(d, force, mark, sink);
            }
        }
    }

    fn release_direction<S: StreamSink>(
        &mut self,
        d: usize,
        force: usize,
        mark: Mark,
        sink: &mut S,
    ) {
        let mut forced = 0;
        loop {
            let other = &self.halves[1 - d];
            let Some(front) = self.held.front(d) else {
                return;
            };
            let waited_out = self.segments.saturating_sub(front.since) >= REORDER_PATIENCE;
            let due = other.ended || other.next >= front.needs || waited_out;
            if !due {
                if forced >= force {
                    return;
                }
                forced += 1;
            }
            let Some(h) = self.held.pop_front(d) else {
                return;
            };
            self.held_cost = self.held_cost.saturating_sub(h.cost());
            // What it acknowledges of the other direction and the capture holds goes first;
            // holes before it are given up, and so is the rest once the wait is over (a
            // segment let through early may still be followed by those bytes).
            self.halves[1 - d].settle_to(h.needs, waited_out, mark, sink);
            let other = &self.halves[1 - d];
            if other.next < h.needs && !other.ended {
                // Let through by the peer's acknowledgment before the wait is over, still
                // ahead of bytes it acknowledges.
                // How far past the peer's bytes given it reaches; 0 when implausibly far.
                let unseen = Some(h.needs - other.next)
                    .filter(|&n| n <= u64::from(UNSEEN_REACH))
                    .unwrap_or(0);
                sink.ahead_of_peer(self.halves[d].dir, h.mark, unseen);
            } else if h.needs > 0 && other.next == h.needs {
                sink.after_peer(self.halves[d].dir, h.mark);
            } else if let Some(unacked) = unacked_by(&h.payload, h.needs, other.next) {
                sink.before_peer(self.halves[d].dir, h.mark, unacked);
            }
            let seg = TcpSegment {
                seq: h.seq,
                ack: 0,
                flags: h.flags.with_ack(false),
                payload: &h.payload,
                mark: h.mark,
            };
            self.halves[d].on_segment(&seg, sink);
        }
    }

    /// The capture ended or the connection is dropped: flush what is buffered (holes become
    /// gaps) and end every direction not ended yet with `how` (with `Fin` when the FIN of that
    /// direction was captured, since every byte before it is then accounted for).
    pub fn finish<S: StreamSink>(&mut self, how: StreamEnd, mark: Mark, sink: &mut S) {
        self.release(usize::MAX, mark, sink);
        for half in &mut self.halves {
            half.flush_and_end(how, mark, sink);
        }
    }

    /// Both directions have ended (FIN delivered on both, or RST).
    pub fn is_closed(&self) -> bool {
        self.halves.iter().all(|half| half.ended)
    }

    /// The first packet seen was a SYN (so each direction's bytes are seen from their start).
    pub fn syn_seen(&self) -> bool {
        self.first_was_syn
    }

    /// The first byte delivered for `dir` is the first byte its sender ever sent (its SYN, or
    /// the SYN-ACK acknowledging it, was captured) rather than a mid-stream byte.
    pub fn seen_from_start(&self, dir: Direction) -> bool {
        self.half(dir).from_start
    }

    /// Bytes of `dir` delivered or reported as gaps so far.
    pub fn position(&self, dir: Direction) -> u64 {
        self.half(dir).next
    }

    fn half(&self, dir: Direction) -> &HalfStream {
        let [forward, reverse] = &self.halves;
        match dir {
            Direction::Forward => forward,
            Direction::Reverse => reverse,
        }
    }

    /// Counters of both directions together.
    pub fn stats(&self) -> TcpStats {
        let mut total = TcpStats::default();
        for half in &self.halves {
            if let Some(stats) = &half.stats {
                total.add(stats);
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Direction::{Forward, Reverse};
    use proptest::prelude::*;

    /// The flags byte as a header carries it: the four bits read, the others (PSH, URG, ECE,
    /// CWR) ignored, so that an acknowledgment with PSH set is still an acknowledgment alone.
    #[test]
    fn flags_read_from_the_header_byte() {
        let psh_ack = TcpFlags::from_header_byte(0x18);
        assert!(psh_ack.ack() && psh_ack.ack_alone());
        assert!(!(psh_ack.syn() || psh_ack.fin() || psh_ack.rst()));
        let syn_ack = TcpFlags::from_header_byte(0x12 | 0xc0);
        assert!(syn_ack.syn() && syn_ack.ack() && !syn_ack.ack_alone());
        assert_eq!(syn_ack, TcpFlags::new(true, true, false, false));
        let fin_rst = TcpFlags::from_header_byte(0x05);
        assert!(fin_rst.fin() && fin_rst.rst() && !fin_rst.ack());
        assert_eq!(
            fin_rst.with_ack(true).with_fin(false),
            TcpFlags::from_header_byte(0x14)
        );
        for byte in 0..=u8::MAX {
            let f = TcpFlags::from_header_byte(byte);
            assert_eq!(
                f,
                TcpFlags::new(f.syn(), f.ack(), f.fin(), f.rst()),
                "{byte:#04x}"
            );
        }
    }

    #[derive(Clone, Debug, PartialEq, Eq)]
    enum Event {
        Data(Vec<u8>),
        Gap(u64),
        End(StreamEnd),
    }

    /// Records what a direction receives, merging adjacent data, and checks the sink contract.
    #[derive(Debug, Default)]
    struct Recorder {
        events: [Vec<Event>; 2],
        gap_marks: [Vec<Mark>; 2],
        end_marks: [Option<Mark>; 2],
        /// The directions of the data calls, in the order they came.
        data_order: Vec<Direction>,
        /// Each `ahead_of_peer` call: its direction, the data bytes that direction had been
        /// given before it, and the bytes of the other direction it acknowledged past those.
        ahead: Vec<(Direction, usize, u64)>,
        /// Each `after_peer` call: its direction, and the data bytes the other direction had
        /// been given before it.
        after: Vec<(Direction, usize)>,
        /// Each `sent_unseen` call: its direction, and the data bytes it had been given.
        unseen: Vec<(Direction, usize)>,
        /// Each `before_peer` call: its direction, the data bytes the other direction had
        /// been given, and how many of the other direction's last bytes it came before.
        before: Vec<(Direction, usize, u64)>,
    }

    impl Recorder {
        fn of(&self, dir: Direction) -> &[Event] {
            &self.events[dir.index()]
        }
        fn given(&self, dir: Direction) -> usize {
            self.of(dir)
                .iter()
                .map(|e| match e {
                    Event::Data(d) => d.len(),
                    _ => 0,
                })
                .sum()
        }
        fn open(&mut self, dir: Direction) -> &mut Vec<Event> {
            let events = &mut self.events[dir.index()];
            assert!(
                !matches!(events.last(), Some(Event::End(_))),
                "{dir:?}: call after end"
            );
            events
        }
    }

    impl StreamSink for Recorder {
        fn data(&mut self, dir: Direction, bytes: &[u8], _mark: Mark) {
            assert!(!bytes.is_empty(), "empty data call");
            if self.data_order.last() != Some(&dir) {
                self.data_order.push(dir);
            }
            let events = self.open(dir);
            match events.last_mut() {
                Some(Event::Data(run)) => run.extend_from_slice(bytes),
                _ => events.push(Event::Data(bytes.to_vec())),
            }
        }
        fn gap(&mut self, dir: Direction, len: u64, mark: Mark) {
            assert!(len > 0, "empty gap");
            self.open(dir).push(Event::Gap(len));
            self.gap_marks[dir.index()].push(mark);
        }
        fn end(&mut self, dir: Direction, how: StreamEnd, mark: Mark) {
            self.open(dir).push(Event::End(how));
            self.end_marks[dir.index()] = Some(mark);
        }
        fn ahead_of_peer(&mut self, dir: Direction, _mark: Mark, unseen: u64) {
            self.ahead.push((dir, self.given(dir), unseen));
        }
        fn after_peer(&mut self, dir: Direction, _mark: Mark) {
            self.after.push((dir, self.given(dir.other())));
        }
        fn sent_unseen(&mut self, dir: Direction, _mark: Mark) {
            self.unseen.push((dir, self.given(dir)));
        }
        fn before_peer(&mut self, dir: Direction, _mark: Mark, unacked: u64) {
            self.before.push((dir, self.given(dir.other()), unacked));
        }
    }

    fn flags(spec: &str) -> TcpFlags {
        TcpFlags::new(
            spec.contains('S'),
            spec.contains('A'),
            spec.contains('F'),
            spec.contains('R'),
        )
    }

    fn data(bytes: &[u8]) -> Event {
        Event::Data(bytes.to_vec())
    }

    /// A connection fed frame by frame; frame numbers count from 1.
    struct Wire {
        conn: TcpConnection,
        rec: Recorder,
        frame: u64,
    }

    impl Wire {
        fn new(max_out_of_order_bytes: usize) -> Self {
            let limits = Limits {
                max_out_of_order_bytes,
                ..Limits::default()
            };
            Wire {
                conn: TcpConnection::new(&limits),
                rec: Recorder::default(),
                frame: 0,
            }
        }
        fn send(&mut self, dir: Direction, seq: u32, ack: u32, spec: &str, payload: &[u8]) -> Mark {
            self.frame += 1;
            let mark = Mark::new(self.frame, self.frame as i64 * 1_000);
            let seg = TcpSegment {
                seq,
                ack,
                flags: flags(spec),
                payload,
                mark,
            };
            self.conn.segment(dir, &seg, &mut self.rec);
            mark
        }
        /// Segments that carry nothing, until what waits for reordering is given up; the
        /// mark of the last one.
        fn wait(&mut self) -> Mark {
            let mut mark = Mark::default();
            for _ in 0..REORDER_PATIENCE {
                mark = self.send(Forward, 0, 0, "", b"");
            }
            mark
        }
        fn finish(&mut self, how: StreamEnd) -> Mark {
            self.frame += 1;
            let mark = Mark::new(self.frame, 0);
            self.conn.finish(how, mark, &mut self.rec);
            mark
        }
        /// Client (Forward) ISN 1000, server (Reverse) ISN 5000: data at 1001 and 5001.
        fn handshake(&mut self) {
            self.send(Forward, 1000, 0, "S", b"");
            self.send(Reverse, 5000, 1001, "SA", b"");
            self.send(Forward, 1001, 5001, "A", b"");
        }
    }

    const TEXT: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN";

    #[test]
    fn in_order_with_handshake() {
        let mut w = Wire::new(1 << 20);
        w.handshake();
        let request = b"GET /mcp HTTP/1.1\r\nHost: a\r\n\r\n";
        let response = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        let rq = request.len() as u32;
        let rs = response.len() as u32;
        w.send(Forward, 1001, 5001, "A", request);
        w.send(Reverse, 5001, 1001 + rq, "A", response);
        let fin = w.send(Forward, 1001 + rq, 5001 + rs, "FA", b"");
        assert_eq!(
            w.rec.of(Forward),
            [data(request), Event::End(StreamEnd::Fin)]
        );
        assert_eq!(w.rec.end_marks[0], Some(fin));
        assert!(!w.conn.is_closed());
        w.send(Reverse, 5001 + rs, 1002 + rq, "FA", b"");
        w.send(Forward, 1002 + rq, 5002 + rs, "A", b"");
        assert_eq!(
            w.rec.of(Reverse),
            [data(response), Event::End(StreamEnd::Fin)]
        );
        assert!(w.conn.is_closed());
        assert!(w.conn.syn_seen());
        assert!(w.conn.seen_from_start(Forward) && w.conn.seen_from_start(Reverse));
        assert_eq!(w.conn.stats(), TcpStats::default());
        // Finishing a closed connection changes nothing (the recorder rejects a second end).
        w.finish(StreamEnd::CaptureEnd);
        assert_eq!(w.rec.of(Reverse).len(), 2);
    }

    #[test]
    fn mid_stream_start_in_both_directions() {
        let mut w = Wire::new(1 << 20);
        // The server's stream is already running; Forward is the server here.
        w.send(Forward, 0xdead_0000, 777, "A", b"data: 1\n\n");
        // A keep-alive probe, one byte before what the server acknowledged, does not fix
        // where the client's bytes start.
        w.send(Reverse, 776, 0xdead_0009, "A", b"");
        w.send(Reverse, 777, 0xdead_0009, "A", b"GET");
        w.send(Forward, 0xdead_0009, 780, "A", b"data: 2\n\n");
        // Bytes from before the first captured one cannot be placed: dropped and counted.
        w.send(Forward, 0xdead_0000 - 4, 780, "A", b"xxxx");
        assert_eq!(w.rec.of(Forward), [data(b"data: 1\n\ndata: 2\n\n")]);
        assert_eq!(w.rec.of(Reverse), [data(b"GET")]);
        assert!(!w.conn.syn_seen());
        assert!(!w.conn.seen_from_start(Forward) && !w.conn.seen_from_start(Reverse));
        assert_eq!(w.conn.stats().retransmitted_bytes, 4);
        w.finish(StreamEnd::CaptureEnd);
        assert_eq!(
            w.rec.of(Reverse),
            [data(b"GET"), Event::End(StreamEnd::CaptureEnd)]
        );
    }

    #[test]
    fn a_pure_ack_behind_what_the_peer_acknowledged_shows_bytes_the_capture_lost() {
        // The capture begins mid-connection; the server's pure ACK says its next byte is 500,
        // the client acknowledges up to 800, and the first server byte captured is 800: the
        // 300 bytes between were sent and lost.
        let mut w = Wire::new(1 << 20);
        w.send(Forward, 100, 500, "AP", b"GET");
        w.send(Reverse, 500, 103, "A", b"");
        w.send(Forward, 103, 800, "A", b"");
        w.send(Reverse, 800, 103, "AP", b"id: 2\n\n");
        w.finish(StreamEnd::CaptureEnd);
        assert_eq!(
            w.rec.of(Reverse),
            [
                Event::Gap(300),
                data(b"id: 2\n\n"),
                Event::End(StreamEnd::CaptureEnd)
            ]
        );
        // Nothing of the server's captured at all, then a reset: the acknowledged bytes are
        // still a gap, not an answer that never came.
        let mut w = Wire::new(1 << 20);
        w.send(Forward, 100, 500, "AP", b"GET");
        w.send(Reverse, 500, 103, "A", b"");
        w.send(Forward, 103, 950, "A", b"");
        w.send(Forward, 103, 950, "AR", b"");
        assert_eq!(
            w.rec.of(Reverse),
            [Event::Gap(450), Event::End(StreamEnd::Rst)]
        );
    }

    #[test]
    fn a_server_whose_handshake_and_answer_were_lost_still_shows_the_answer_missing() {
        // The SYN-ACK and every server packet before its FIN were lost; the client's
        // acknowledgments went from the server's first byte to past its answer. The FIN,
        // the first server packet captured, comes after a gap of the answer's size: the
        // server closed after answering, not without an answer.
        let mut w = Wire::new(1 << 20);
        w.send(Forward, 1000, 0, "S", b"");
        w.send(Forward, 1001, 5001, "A", b"");
        w.send(Forward, 1001, 5001, "AP", b"GET");
        w.send(Forward, 1004, 5177, "A", b"");
        w.send(Reverse, 5177, 1004, "AF", b"");
        w.send(Forward, 1004, 5178, "AF", b"");
        w.send(Reverse, 5178, 1005, "A", b"");
        w.finish(StreamEnd::CaptureEnd);
        assert_eq!(
            w.rec.of(Reverse),
            [Event::Gap(176), Event::End(StreamEnd::Fin)]
        );
        // Acknowledgments that never moved show nothing lost.
        let mut w = Wire::new(1 << 20);
        w.send(Forward, 1000, 0, "S", b"");
        w.send(Forward, 1001, 5001, "A", b"");
        w.send(Forward, 1001, 5001, "AP", b"GET");
        w.send(Reverse, 5001, 1004, "AF", b"");
        w.finish(StreamEnd::CaptureEnd);
        assert_eq!(w.rec.of(Reverse), [Event::End(StreamEnd::Fin)]);
    }

    #[test]
    fn a_fin_recorded_before_the_answer_it_follows_waits_for_it() {
        // The SYN-ACK was lost; the server's pure ACK says it stands at its first byte, and
        // its FIN was recorded before its answer. The answer is read, then the FIN.
        let mut w = Wire::new(1 << 20);
        w.send(Forward, 1000, 0, "S", b"");
        w.send(Forward, 1001, 5001, "A", b"");
        w.send(Forward, 1001, 5001, "AP", b"GET");
        w.send(Reverse, 5001, 1004, "A", b"");
        w.send(Reverse, 5007, 1004, "AF", b"");
        w.send(Reverse, 5001, 1004, "AP", b"answer");
        w.finish(StreamEnd::CaptureEnd);
        assert_eq!(
            w.rec.of(Reverse),
            [data(b"answer"), Event::End(StreamEnd::Fin)]
        );
    }

    #[test]
    fn a_fin_first_of_its_side_after_the_peers_acknowledgment_shows_the_bytes_before_it() {
        // The SYN-ACK and the answer were lost, and the server's FIN is the first of its
        // packets captured: the client's acknowledgment of the SYN stood 6 bytes before it, so
        // those were sent and lost, and the stream does not end without them.
        let mut w = Wire::new(1 << 20);
        w.send(Forward, 1000, 0, "S", b"");
        w.send(Forward, 1001, 5001, "A", b"");
        w.send(Forward, 1001, 5001, "AP", b"GET");
        w.send(Reverse, 5007, 1004, "AF", b"");
        w.send(Reverse, 5001, 1004, "A", b"");
        w.finish(StreamEnd::CaptureEnd);
        assert_eq!(
            w.rec.of(Reverse),
            [Event::Gap(6), Event::End(StreamEnd::Fin)]
        );
    }

    #[test]
    fn a_reset_past_the_bytes_captured_shows_them_lost() {
        // The server's last 6 bytes were lost and its RST stands past them: a gap before the
        // end. A RST one byte past may follow a lost FIN and shows nothing; one at the
        // position reached shows nothing either.
        for (rst_seq, expect) in [
            (
                5013u32,
                vec![data(b"answer"), Event::Gap(6), Event::End(StreamEnd::Rst)],
            ),
            (5008, vec![data(b"answer"), Event::End(StreamEnd::Rst)]),
            (5007, vec![data(b"answer"), Event::End(StreamEnd::Rst)]),
        ] {
            let mut w = Wire::new(1 << 20);
            w.handshake();
            w.send(Forward, 1001, 5001, "AP", b"GET");
            w.send(Reverse, 5001, 1004, "AP", b"answer");
            w.send(Reverse, rst_seq, 1004, "AR", b"");
            assert_eq!(w.rec.of(Reverse), expect, "RST at {rst_seq}");
        }
    }

    #[test]
    fn reordered_segments_are_delivered_when_the_hole_closes() {
        let mut w = Wire::new(1 << 20);
        w.handshake();
        let part = |i: usize| &TEXT[i * 10..i * 10 + 10];
        for i in [1usize, 3, 2] {
            w.send(Forward, 1001 + 10 * i as u32, 5001, "A", part(i));
        }
        assert_eq!(w.rec.of(Forward), []);
        w.send(Forward, 1001, 5001, "A", part(0));
        assert_eq!(w.rec.of(Forward), [data(&TEXT[..40])]);
        let stats = w.conn.stats();
        assert_eq!(stats.out_of_order_segments, 3);
        assert_eq!(stats.gaps, 0);
        assert_eq!(stats.retransmitted_bytes, 0);
    }

    #[test]
    fn duplicates_and_retransmissions_are_dropped_and_counted() {
        let mut w = Wire::new(1 << 20);
        w.handshake();
        let (a, b, c) = (&TEXT[..10], &TEXT[10..25], &TEXT[25..40]);
        w.send(Forward, 1031 - 5, 5001, "A", c); // out of order
        w.send(Forward, 1026, 5001, "A", c); // duplicate of a buffered segment
        w.send(Forward, 1001, 5001, "A", a);
        w.send(Forward, 1001, 5001, "A", a);
        w.send(Forward, 1011, 5001, "A", b);
        w.send(Forward, 1001, 5001, "A", a);
        w.send(Forward, 1011, 5001, "A", b);
        assert_eq!(w.rec.of(Forward), [data(&TEXT[..40])]);
        let stats = w.conn.stats();
        assert_eq!(stats.retransmitted_bytes, 15 + 10 + 10 + 15);
        assert_eq!(stats.out_of_order_segments, 1);
    }

    #[test]
    fn overlapping_copies_keep_the_first_captured_bytes() {
        let mut w = Wire::new(1 << 20);
        w.handshake();
        let at = |pos: u32| 1001 + pos;
        w.send(Forward, at(0), 5001, "A", &TEXT[..8]);
        // [5, 12) overlaps delivered bytes at its front.
        w.send(Forward, at(5), 5001, "A", b"XXX89ab");
        // [15, 18) buffered; then [13, 20) overlaps it in its middle.
        w.send(Forward, at(15), 5001, "A", &TEXT[15..18]);
        w.send(Forward, at(13), 5001, "A", b"de\x00\x00\x00ij");
        assert_eq!(w.rec.of(Forward), [data(&TEXT[..12])]);
        // [12, 16) closes the hole and overlaps the buffered [13, 15) and [15, 18).
        w.send(Forward, at(12), 5001, "A", b"cZZZ");
        // [18, 22) overlaps the buffered tail [18, 20) at its front.
        w.send(Forward, at(18), 5001, "A", b"YYkl");
        assert_eq!(w.rec.of(Forward), [data(&TEXT[..22])]);
        let stats = w.conn.stats();
        assert_eq!(stats.retransmitted_bytes, 3 + 3 + 3 + 2);
        assert_eq!(stats.gaps, 0);
    }

    #[test]
    fn sequence_numbers_wrap_at_2_pow_32() {
        for isn in [u32::MAX - 5, u32::MAX, u32::MAX - 10] {
            let mut w = Wire::new(1 << 20);
            w.send(Forward, isn, 0, "S", b"");
            w.send(Reverse, 9, isn.wrapping_add(1), "SA", b"");
            let seq = |pos: u32| isn.wrapping_add(1).wrapping_add(pos);
            w.send(Forward, seq(20), 10, "A", &TEXT[20..30]);
            w.send(Forward, seq(0), 10, "A", &TEXT[..10]);
            w.send(Reverse, 10, seq(10), "A", b"");
            w.send(Forward, seq(10), 10, "A", &TEXT[10..20]);
            w.send(Forward, seq(30), 10, "FA", b"");
            assert_eq!(
                w.rec.of(Forward),
                [data(&TEXT[..30]), Event::End(StreamEnd::Fin)],
                "isn {isn}"
            );
            assert_eq!(w.conn.stats().gaps, 0);
        }
    }

    #[test]
    fn positions_keep_counting_across_many_wraps() {
        let mut w = Wire::new(1 << 20);
        w.handshake();
        let step: u64 = 1 << 30;
        for round in 0..10u64 {
            let hole_end = round * (step + 1) + step;
            let seq = 1001u32.wrapping_add(hole_end as u32);
            w.send(Forward, seq, 5001, "A", b"x");
            // The receiver acknowledges past the hole: the capture missed those bytes.
            w.send(Reverse, 5001, seq.wrapping_add(1), "A", b"");
            w.wait();
        }
        assert_eq!(w.conn.position(Forward), 10 * (step + 1));
        let stats = w.conn.stats();
        assert_eq!((stats.gaps, stats.gap_bytes), (10, 10 * step));
        let expected: Vec<Event> = (0..10)
            .flat_map(|_| [Event::Gap(step), data(b"x")])
            .collect();
        assert_eq!(w.rec.of(Forward), expected);
    }

    #[test]
    fn reverse_ack_reveals_a_hole() {
        let mut w = Wire::new(1 << 20);
        w.handshake();
        w.send(Forward, 1001, 5001, "A", &TEXT[..10]);
        w.send(Forward, 1021, 5001, "A", &TEXT[20..30]); // [10, 20) never captured
        assert_eq!(w.rec.of(Forward), [data(&TEXT[..10])]);
        // An ACK without the ACK flag means nothing.
        w.send(Reverse, 5001, 1031, "", b"");
        assert_eq!(w.rec.of(Forward).len(), 1);
        let ack = w.send(Reverse, 5001, 1031, "A", b"");
        // The hole may be reordering by the capture host: it waits a few segments.
        assert_eq!(w.rec.of(Forward), [data(&TEXT[..10])]);
        w.wait();
        assert_eq!(
            w.rec.of(Forward),
            [data(&TEXT[..10]), Event::Gap(10), data(&TEXT[20..30])]
        );
        // Reported where the acknowledgment revealed it.
        assert_eq!(w.rec.gap_marks[0], [ack]);
        // A tail hole that was acknowledged waits for what follows it.
        w.send(Reverse, 5001, 1041, "A", b"");
        w.wait();
        assert_eq!(w.rec.of(Forward).len(), 3);
        // A stale ACK changes nothing.
        w.send(Reverse, 5001, 1011, "A", b"");
        let next = w.send(Forward, 1041, 5001, "A", &TEXT[40..45]);
        w.wait();
        assert_eq!(
            w.rec.of(Forward),
            [
                data(&TEXT[..10]),
                Event::Gap(10),
                data(&TEXT[20..30]),
                Event::Gap(10),
                data(&TEXT[40..45]),
            ]
        );
        assert_eq!(w.rec.gap_marks[0], [ack, next]);
        assert_eq!(w.conn.stats().gap_bytes, 20);
    }

    #[test]
    fn out_of_order_overflow_gives_up_the_oldest_hole() {
        let limit = 2 * (10 + PIECE_COST_BYTES);
        let mut w = Wire::new(limit);
        w.handshake();
        w.send(Forward, 1011, 5001, "A", &TEXT[10..20]);
        w.send(Forward, 1021, 5001, "A", &TEXT[20..30]);
        assert_eq!(w.rec.of(Forward), []);
        let third = w.send(Forward, 1041, 5001, "A", &TEXT[40..50]);
        assert_eq!(w.rec.of(Forward), [Event::Gap(10), data(&TEXT[10..30])]);
        assert_eq!(w.rec.gap_marks[0], [third]);
        let stats = w.conn.stats();
        assert_eq!((stats.overflows, stats.out_of_order_segments), (1, 3));
        let end = w.finish(StreamEnd::CaptureEnd);
        assert_eq!(
            w.rec.of(Forward),
            [
                Event::Gap(10),
                data(&TEXT[10..30]),
                Event::Gap(10),
                data(&TEXT[40..50]),
                Event::End(StreamEnd::CaptureEnd),
            ]
        );
        assert_eq!(w.rec.gap_marks[0], [third, end]);
        assert_eq!(w.rec.of(Reverse), [Event::End(StreamEnd::CaptureEnd)]);
    }

    #[test]
    fn zero_limit_turns_every_hole_into_a_gap_at_once() {
        let mut w = Wire::new(0);
        w.handshake();
        w.send(Forward, 1011, 5001, "A", &TEXT[10..20]);
        assert_eq!(w.rec.of(Forward), [Event::Gap(10), data(&TEXT[10..20])]);
        // The missing bytes arriving late are behind the stream now.
        w.send(Forward, 1001, 5001, "A", &TEXT[..10]);
        assert_eq!(w.conn.stats().retransmitted_bytes, 10);
        assert_eq!(w.conn.stats().overflows, 1);
    }

    #[test]
    fn a_flood_of_tiny_segments_stays_within_the_limit() {
        let limit = 1000;
        let mut w = Wire::new(limit);
        w.handshake();
        for i in 0..500u32 {
            w.send(Forward, 1003 + 2 * i, 5001, "A", b"z");
            assert!(w.conn.halves[0].pending_cost <= limit);
        }
        let stats = w.conn.stats();
        assert!(stats.overflows > 0);
        w.finish(StreamEnd::CaptureEnd);
        let delivered: usize = w
            .rec
            .of(Forward)
            .iter()
            .map(|e| match e {
                Event::Data(run) => run.len(),
                _ => 0,
            })
            .sum();
        let stats = w.conn.stats();
        assert_eq!(delivered as u64 + stats.gap_bytes, 1001);
    }

    #[test]
    fn fin_waits_for_a_retransmission_that_fills_the_hole() {
        let mut w = Wire::new(1 << 20);
        w.handshake();
        w.send(Forward, 1001, 5001, "A", &TEXT[..10]);
        w.send(Forward, 1021, 5001, "A", &TEXT[20..30]);
        let fin = w.send(Forward, 1031, 5001, "FA", b"");
        assert_eq!(w.rec.of(Forward), [data(&TEXT[..10])]);
        w.send(Forward, 1011, 5001, "A", &TEXT[10..20]);
        assert_eq!(
            w.rec.of(Forward),
            [data(&TEXT[..30]), Event::End(StreamEnd::Fin)]
        );
        assert_eq!(w.rec.end_marks[0], Some(fin));
        // Bytes after the FIN position are ignored.
        w.send(Forward, 1031, 5001, "A", b"late");
        assert_eq!(w.rec.of(Forward).len(), 2);
        assert_eq!(w.conn.stats().gaps, 0);
    }

    #[test]
    fn fin_with_holes_ends_once_the_peer_acknowledges_it() {
        let mut w = Wire::new(1 << 20);
        w.handshake();
        w.send(Forward, 1001, 5001, "A", &TEXT[..10]);
        // Data and FIN in one segment after a hole; the FIN drops buffered bytes beyond it.
        w.send(Forward, 1036, 5001, "A", &TEXT[35..45]);
        w.send(Forward, 1021, 5001, "FA", &TEXT[20..30]);
        assert_eq!(w.conn.halves[0].pending_cost, 10 + PIECE_COST_BYTES);
        assert_eq!(w.rec.of(Forward), [data(&TEXT[..10])]);
        let ack = w.send(Reverse, 5001, 1032, "A", b"");
        w.wait();
        assert_eq!(
            w.rec.of(Forward),
            [
                data(&TEXT[..10]),
                Event::Gap(10),
                data(&TEXT[20..30]),
                Event::End(StreamEnd::Fin)
            ]
        );
        assert_eq!(w.rec.gap_marks[0], [ack]);
    }

    #[test]
    fn fin_after_an_uncaptured_tail() {
        let mut w = Wire::new(1 << 20);
        w.handshake();
        w.send(Forward, 1001, 5001, "A", &TEXT[..10]);
        w.send(Forward, 1031, 5001, "FA", b"");
        w.send(Reverse, 5001, 1032, "A", b"");
        w.wait();
        assert_eq!(
            w.rec.of(Forward),
            [
                data(&TEXT[..10]),
                Event::Gap(20),
                Event::End(StreamEnd::Fin)
            ]
        );

        // Without any acknowledgement, the end of the capture closes the hole; the FIN was
        // seen, so the direction ends with it.
        let mut w = Wire::new(1 << 20);
        w.handshake();
        w.send(Forward, 1001, 5001, "A", &TEXT[..10]);
        w.send(Forward, 1031, 5001, "FA", b"");
        w.finish(StreamEnd::CaptureEnd);
        assert_eq!(
            w.rec.of(Forward),
            [
                data(&TEXT[..10]),
                Event::Gap(20),
                Event::End(StreamEnd::Fin)
            ]
        );
        assert_eq!(w.rec.of(Reverse), [Event::End(StreamEnd::CaptureEnd)]);
    }

    #[test]
    fn rst_flushes_and_ends_both_directions() {
        let mut w = Wire::new(1 << 20);
        w.handshake();
        w.send(Forward, 1001, 5001, "A", b"GET");
        w.send(Reverse, 5001, 1004, "A", &TEXT[..10]);
        w.send(Reverse, 5021, 1004, "A", &TEXT[20..30]);
        // RST with ACK: the client got the server's bytes up to 40.
        let rst = w.send(Forward, 1004, 5041, "RA", b"ignored");
        assert_eq!(
            w.rec.of(Forward),
            [data(b"GET"), Event::End(StreamEnd::Rst)]
        );
        assert_eq!(
            w.rec.of(Reverse),
            [
                data(&TEXT[..10]),
                Event::Gap(10),
                data(&TEXT[20..30]),
                Event::Gap(10),
                Event::End(StreamEnd::Rst)
            ]
        );
        assert_eq!(w.rec.end_marks, [Some(rst), Some(rst)]);
        assert!(w.conn.is_closed());
        // Anything later is ignored; the recorder rejects calls after an end.
        w.send(Reverse, 5031, 1004, "A", &TEXT[30..40]);
        w.send(Forward, 1004, 5041, "FA", b"");
        w.finish(StreamEnd::CaptureEnd);
        assert_eq!(w.rec.of(Reverse).len(), 5);
    }

    #[test]
    fn rst_before_any_data_ends_both_directions() {
        let mut w = Wire::new(1 << 20);
        w.send(Forward, 1000, 0, "S", b"");
        w.send(Reverse, 0, 1001, "RA", b"");
        assert_eq!(w.rec.of(Forward), [Event::End(StreamEnd::Rst)]);
        assert_eq!(w.rec.of(Reverse), [Event::End(StreamEnd::Rst)]);
        assert_eq!(w.conn.stats(), TcpStats::default());
    }

    #[test]
    fn finish_flushes_buffered_data() {
        let mut w = Wire::new(1 << 20);
        w.handshake();
        w.send(Forward, 1001, 5001, "A", &TEXT[..10]);
        w.send(Forward, 1021, 5001, "A", &TEXT[20..25]);
        w.send(Forward, 1031, 5001, "A", &TEXT[30..40]);
        let end = w.finish(StreamEnd::CaptureEnd);
        assert_eq!(
            w.rec.of(Forward),
            [
                data(&TEXT[..10]),
                Event::Gap(10),
                data(&TEXT[20..25]),
                Event::Gap(5),
                data(&TEXT[30..40]),
                Event::End(StreamEnd::CaptureEnd)
            ]
        );
        assert_eq!(w.rec.gap_marks[0], [end, end]);
        assert_eq!(w.rec.of(Reverse), [Event::End(StreamEnd::CaptureEnd)]);
        assert!(w.conn.is_closed());
    }

    #[test]
    fn syn_retransmissions_are_ignored() {
        let mut w = Wire::new(1 << 20);
        w.send(Forward, 1000, 0, "S", b"");
        w.send(Forward, 1000, 0, "S", b"");
        w.send(Reverse, 5000, 1001, "SA", b"");
        w.send(Reverse, 5000, 1001, "SA", b"");
        w.send(Forward, 1001, 5001, "A", b"abc");
        w.send(Forward, 1000, 0, "S", b"");
        w.send(Reverse, 5001, 1004, "A", b"def");
        assert_eq!(w.rec.of(Forward), [data(b"abc")]);
        assert_eq!(w.rec.of(Reverse), [data(b"def")]);
        assert_eq!(w.conn.stats(), TcpStats::default());
    }

    #[test]
    fn a_segment_captured_after_the_ack_of_later_bytes_is_no_loss() {
        // A multi-queue capture host: the response head [0, 10) is recorded after the body
        // [10, 20) and after the client's acknowledgment of both.
        let mut w = Wire::new(1 << 20);
        w.handshake();
        w.send(Reverse, 5001, 1001, "A", b"GET");
        w.send(Forward, 1011, 5004, "A", &TEXT[10..20]);
        w.send(Reverse, 5004, 1021, "A", b"");
        w.send(Forward, 1001, 5004, "A", &TEXT[..10]);
        w.wait();
        assert_eq!(w.rec.of(Forward), [data(&TEXT[..20])]);
        assert_eq!(w.conn.stats().gaps, 0);
    }

    #[test]
    fn an_answer_captured_before_its_request_follows_it() {
        let mut w = Wire::new(1 << 20);
        w.handshake();
        // The answer acknowledges the request, which the capture holds only afterwards.
        w.send(Forward, 1001, 5004, "A", b"answer");
        assert_eq!(w.rec.of(Forward), []);
        w.send(Reverse, 5001, 1001, "A", b"ask");
        assert_eq!(w.rec.of(Reverse), [data(b"ask")]);
        assert_eq!(w.rec.of(Forward), [data(b"answer")]);
        assert_eq!(w.rec.data_order, [Reverse, Forward]);
        // Later bytes of the answer do not overtake what is held, nor wait once it is out.
        w.send(Forward, 1007, 5004, "A", b"more");
        assert_eq!(w.rec.of(Forward), [data(b"answermore")]);
        assert_eq!(w.conn.stats().gaps, 0);
    }

    #[test]
    fn a_request_waiting_for_lost_bytes_goes_before_the_answer_to_it() {
        let mut w = Wire::new(1 << 20);
        w.handshake();
        w.send(Reverse, 5001, 1001, "A", b"one");
        w.send(Forward, 1001, 5004, "A", b"first"); // then [5, 10) of the answer is lost
        // The second request acknowledges the lost bytes: it waits for them.
        w.send(Reverse, 5004, 1011, "A", b"two");
        assert_eq!(w.rec.of(Reverse), [data(b"one")]);
        // The next answer acknowledges the second request: the request was received, so it
        // goes first, and the answer after it.
        w.send(Forward, 1011, 5007, "A", b"second");
        assert_eq!(w.rec.of(Reverse), [data(b"onetwo")]);
        w.wait();
        assert_eq!(
            w.rec.of(Forward),
            [data(b"first"), Event::Gap(5), data(b"second")]
        );
        assert_eq!(w.rec.data_order, [Reverse, Forward, Reverse, Forward]);
    }

    #[test]
    fn an_answer_let_through_by_its_acknowledgment_says_it_is_ahead_of_what_it_answers() {
        let mut w = Wire::new(1 << 20);
        w.handshake();
        // The answer acknowledges three bytes of the client the capture lacks: it waits.
        w.send(Forward, 1001, 5004, "A", b"answer");
        assert_eq!(w.rec.of(Forward), []);
        // The client acknowledges the answer before the wait is over: the answer was
        // received, so it goes through, said to be ahead of the bytes it answers.
        w.send(Reverse, 5004, 1007, "A", b"");
        assert_eq!(w.rec.of(Forward), [data(b"answer")]);
        assert_eq!(w.rec.ahead, [(Forward, 0, 3)]);
        // Those bytes are given up only once the wait is over: they may still come.
        w.send(Reverse, 5004, 1007, "A", b"ask-it");
        assert_eq!(w.rec.of(Reverse), []);
        w.wait();
        assert_eq!(w.rec.of(Reverse), [Event::Gap(3), data(b"ask-it")]);
        // An answer to bytes the capture shows is ahead of nothing.
        w.send(Forward, 1007, 5010, "A", b"second");
        assert_eq!(w.rec.of(Forward), [data(b"answersecond")]);
        assert_eq!(w.rec.ahead, [(Forward, 0, 3)]);
    }

    #[test]
    fn an_answer_held_for_the_bytes_it_acknowledges_says_it_came_after_them() {
        let mut w = Wire::new(1 << 20);
        w.handshake();
        // Recorded before the three bytes of the client it acknowledges: it waits for them,
        // and goes after them, said to be sent after every byte the client gave.
        w.send(Forward, 1001, 5004, "A", b"answer");
        assert_eq!(w.rec.of(Forward), []);
        w.send(Reverse, 5001, 1001, "A", b"ask");
        assert_eq!(w.rec.of(Forward), [data(b"answer")]);
        assert_eq!(w.rec.after, [(Forward, 3)]);
        assert_eq!(w.rec.ahead, []);
        // Held for bytes it acknowledges when more came with them: not after all of it.
        w.send(Forward, 1007, 5010, "A", b"second");
        w.send(Reverse, 5004, 1007, "A", b"again-and-more");
        assert_eq!(w.rec.of(Forward), [data(b"answersecond")]);
        assert_eq!(w.rec.after, [(Forward, 3)]);
        // In order, nothing is held and nothing said.
        w.send(Forward, 1013, 5018, "A", b"third");
        assert_eq!(w.rec.after, [(Forward, 3)]);
    }

    #[test]
    fn an_answer_sent_before_the_peers_last_bytes_says_how_many() {
        let mut w = Wire::new(1 << 20);
        w.handshake();
        w.send(Reverse, 5001, 1001, "A", b"ask");
        w.send(Reverse, 5004, 1001, "A", b"more");
        // Sent when the server had the first three bytes only: said before its bytes, with
        // the four it had not received.
        w.send(Forward, 1001, 5004, "A", b"answer");
        assert_eq!(w.rec.of(Forward), [data(b"answer")]);
        assert_eq!(w.rec.before, [(Forward, 7, 4)]);
        // Held for bytes it acknowledges, and let through once they came with one more.
        w.send(Forward, 1007, 5013, "A", b"second");
        w.send(Reverse, 5008, 1007, "A", b"again!");
        assert_eq!(w.rec.of(Forward), [data(b"answersecond")]);
        assert_eq!(w.rec.before, [(Forward, 7, 4), (Forward, 13, 1)]);
        // Acknowledging all the peer gave, or carrying nothing, says nothing.
        w.send(Forward, 1013, 5014, "A", b"third");
        w.send(Forward, 1018, 5008, "A", b"");
        assert_eq!(w.rec.before.len(), 2);
        assert_eq!(w.rec.after, []);
    }

    #[test]
    fn an_acknowledgment_past_bytes_not_captured_says_they_were_sent() {
        let mut w = Wire::new(1 << 20);
        w.handshake();
        w.send(Reverse, 5001, 1001, "A", b"ask");
        // The client's next request was not captured; its empty acknowledgment stands past
        // it: said once, however many such acknowledgments follow.
        w.send(Reverse, 5010, 1001, "A", b"");
        w.send(Reverse, 5010, 1001, "A", b"");
        assert_eq!(w.rec.unseen, [(Reverse, 3)]);
        // The request came late after all: the next one past it is said again.
        w.send(Reverse, 5004, 1001, "A", b"again!");
        w.send(Reverse, 5020, 1001, "A", b"");
        assert_eq!(w.rec.unseen, [(Reverse, 3), (Reverse, 9)]);
        // Acknowledgments where the sender stands, or behind it (a keep-alive), say nothing.
        w.send(Forward, 1001, 5010, "A", b"");
        w.send(Forward, 1000, 5010, "A", b"");
        assert_eq!(w.rec.unseen.len(), 2);
    }

    #[test]
    fn an_answer_to_bytes_never_captured_is_let_through() {
        let mut w = Wire::new(1 << 20);
        w.handshake();
        w.send(Forward, 1001, 5004, "A", b"answer");
        let last = w.wait();
        assert_eq!(w.rec.of(Forward), [data(b"answer")]);
        // The bytes it answers were received, so they are missing, and said so before it:
        // what reads the answer must know that something was asked after what it holds.
        assert_eq!(w.rec.of(Reverse), [Event::Gap(3)]);
        w.finish(StreamEnd::CaptureEnd);
        assert_eq!(
            w.rec.of(Reverse),
            [Event::Gap(3), Event::End(StreamEnd::CaptureEnd)]
        );
        assert!(last.frame > 0);
    }

    #[test]
    fn syn_ack_fixes_the_start_of_a_peer_whose_syn_was_missed() {
        let mut w = Wire::new(1 << 20);
        // Forward is the server: its SYN-ACK is the first packet captured.
        w.send(Forward, 5000, 1001, "SA", b"");
        // The client's first data segment [0, 10) was missed; [10, 20) must not become the start.
        w.send(Reverse, 1011, 5001, "A", &TEXT[10..20]);
        assert_eq!(w.rec.of(Reverse), []);
        // The answer acknowledges bytes not captured yet: it waits for them.
        w.send(Forward, 5001, 1021, "A", b"ok");
        assert_eq!(w.rec.of(Forward), []);
        w.wait();
        assert_eq!(w.rec.of(Reverse), [Event::Gap(10), data(&TEXT[10..20])]);
        assert_eq!(w.rec.of(Forward), [data(b"ok")]);
        assert!(w.conn.syn_seen());
        assert!(w.conn.seen_from_start(Reverse));
    }

    #[test]
    fn syn_payload_and_fin_only_start() {
        // Data carried on a SYN starts at ISN + 1.
        let mut w = Wire::new(1 << 20);
        w.send(Forward, 1000, 0, "S", b"hi");
        w.send(Forward, 1003, 0, "", b"!");
        assert_eq!(w.rec.of(Forward), [data(b"hi!")]);
        // A FIN alone, with no SYN seen and no acknowledgment of its side, starts and ends a
        // direction with no bytes.
        w.send(Reverse, 42, 0, "F", b"");
        assert_eq!(w.rec.of(Reverse), [Event::End(StreamEnd::Fin)]);
    }

    /// Deterministic xorshift for building segment plans inside proptests.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }
        fn below(&mut self, n: u64) -> u64 {
            if n == 0 { 0 } else { self.next() % n }
        }
        fn chance(&mut self, one_in: u64) -> bool {
            self.below(one_in) == 0
        }
    }

    #[derive(Clone, Copy, Debug)]
    enum Planned {
        Data(Direction, usize, usize),
        Fin(Direction),
        /// The receiver of `Direction` acknowledges up to this offset of its peer's stream.
        Ack(Direction, u64),
    }

    /// Cuts both streams into segments whose neighbours may overlap, duplicates some, and
    /// reorders them within a window; FINs take part in the reordering.
    fn plan(lens: [usize; 2], rng: &mut XorShift) -> Vec<Planned> {
        let mut per_dir: [Vec<Planned>; 2] = [Vec::new(), Vec::new()];
        for dir in [Forward, Reverse] {
            let len = lens[dir.index()];
            let items = &mut per_dir[dir.index()];
            let mut at = 0usize;
            while at < len {
                let cut = (at + 1 + rng.below(120) as usize).min(len);
                let start = at.saturating_sub(rng.below(12) as usize);
                let end = (cut + rng.below(12) as usize).min(len);
                items.push(Planned::Data(dir, start, end));
                if rng.chance(4) {
                    items.push(Planned::Data(dir, start, end));
                }
                at = cut;
            }
            items.push(Planned::Fin(dir));
        }
        // Interleave the two directions at random, keeping each one's order...
        let [forward, reverse] = per_dir;
        let (mut forward, mut reverse) = (
            forward.into_iter().peekable(),
            reverse.into_iter().peekable(),
        );
        let mut plan = Vec::new();
        while forward.peek().is_some() || reverse.peek().is_some() {
            let pick_forward =
                reverse.peek().is_none() || (forward.peek().is_some() && rng.chance(2));
            plan.extend(if pick_forward {
                forward.next()
            } else {
                reverse.next()
            });
        }
        // ...then move items within a window.
        let n = plan.len();
        for i in 0..n {
            let j = i + rng.below((n - i).min(6) as u64) as usize;
            plan.swap(i, j);
        }
        plan
    }

    /// A SYN and its SYN-ACK: each direction's bytes start after its initial number.
    fn handshake(w: &mut Wire, isn: [u32; 2]) {
        w.send(Forward, isn[0], 0, "S", b"");
        w.send(Reverse, isn[1], isn[0].wrapping_add(1), "SA", b"");
    }

    /// Feeds a SYN, a SYN-ACK, then the plan; returns what each direction received.
    fn run(
        streams: [&[u8]; 2],
        isn: [u32; 2],
        plan: &[Planned],
        max_out_of_order_bytes: usize,
    ) -> (Recorder, TcpStats) {
        let mut w = Wire::new(max_out_of_order_bytes);
        let first = |dir: Direction| isn[dir.index()].wrapping_add(1);
        handshake(&mut w, isn);
        for item in plan {
            match *item {
                Planned::Data(dir, start, end) => {
                    let seq = first(dir).wrapping_add(start as u32);
                    let payload = &streams[dir.index()][start..end];
                    w.send(dir, seq, first(dir.other()), "A", payload);
                }
                Planned::Fin(dir) => {
                    let seq = first(dir).wrapping_add(streams[dir.index()].len() as u32);
                    w.send(dir, seq, first(dir.other()), "FA", b"");
                }
                Planned::Ack(dir, upto) => {
                    let ack = first(dir.other()).wrapping_add(upto as u32);
                    // The acknowledging side sends from where its own stream starts.
                    w.send(dir, first(dir), ack, "A", b"");
                }
            }
        }
        w.finish(StreamEnd::CaptureEnd);
        let stats = w.conn.stats();
        (w.rec, stats)
    }

    /// A segment of [`quiet_plan`]: direction, sequence and acknowledgment offsets (from each
    /// direction's first byte), flags, and the payload's range in its stream.
    type Sent = (Direction, u32, u32, &'static str, usize, usize);

    /// Data cut into segments (some lost, some repeated, some moved), with acknowledgments
    /// between them: most from where their sender stands and up to what the other side sent
    /// last (the ones [`TcpConnection::quiet_ack`] may take), the others anywhere near.
    fn quiet_plan(lens: [usize; 2], rng: &mut XorShift) -> Vec<Sent> {
        let mut plan = Vec::new();
        let mut sent = [0usize; 2];
        let mut fin = [false; 2];
        for _ in 0..rng.below(60) {
            let dir = if rng.chance(2) { Forward } else { Reverse };
            let (d, o) = (dir.index(), dir.other().index());
            let near = |rng: &mut XorShift, at: usize| {
                (at as u32)
                    .wrapping_add(rng.below(5) as u32)
                    .wrapping_sub(2)
            };
            match rng.below(8) {
                0..=2 if sent[d] < lens[d] => {
                    let end = (sent[d] + 1 + rng.below(40) as usize).min(lens[d]);
                    let start = sent[d].saturating_sub(rng.below(3) as usize);
                    if !rng.chance(20) {
                        plan.push((dir, start as u32, sent[o] as u32, "A", start, end));
                    }
                    sent[d] = end;
                }
                3 if !fin[d] && rng.chance(12) => {
                    fin[d] = true;
                    plan.push((dir, sent[d] as u32, sent[o] as u32, "FA", 0, 0));
                }
                4 => {
                    let (seq, ack) = (near(rng, sent[d]), near(rng, sent[o]));
                    plan.push((dir, seq, ack, "A", 0, 0));
                }
                // From where the connection has its sender, acknowledging up to a few bytes
                // short of what it delivered of the other side (the offset back is `ack`):
                // whatever is held, lost or waiting then.
                5 => plan.push((dir, 0, rng.below(3) as u32, "Q", 0, 0)),
                // The same with RST, rarely: it ends both directions.
                6 if rng.chance(10) => plan.push((dir, 0, 0, "QR", 0, 0)),
                _ => plan.push((dir, sent[d] as u32, sent[o] as u32, "A", 0, 0)),
            }
            if rng.chance(10) && plan.len() > 1 {
                let (i, last) = (rng.below(plan.len() as u64) as usize, plan.len() - 1);
                plan.swap(i, last);
            }
        }
        plan
    }

    /// Runs `plan` after a handshake through `segment` alone and through `quiet_ack` first,
    /// and checks after every segment that the two connections and what their sinks got are
    /// the same. Returns how many segments `quiet_ack` took.
    fn quiet_matches_segment(
        streams: [&[u8]; 2],
        isn: [u32; 2],
        plan: &[Sent],
        limit: usize,
    ) -> u64 {
        let (mut general, mut quick) = (Wire::new(limit), Wire::new(limit));
        handshake(&mut general, isn);
        handshake(&mut quick, isn);
        let first = |dir: Direction| isn[dir.index()].wrapping_add(1);
        let mut taken = 0;
        for (i, &(dir, seq, ack, spec, from, to)) in plan.iter().enumerate() {
            let payload = &streams[dir.index()][from..to];
            let (seq, ack, spec) = if spec.starts_with('Q') {
                let [this, other] = [dir, dir.other()].map(|d| &general.conn.halves[d.index()]);
                let at = |h: &HalfStream, back: u64| {
                    h.origin_seq
                        .wrapping_add(h.next.saturating_sub(back) as u32)
                };
                let spec = if spec == "QR" { "RA" } else { "A" };
                (at(this, 0), at(other, u64::from(ack)), spec)
            } else {
                let seq = first(dir).wrapping_add(seq);
                (seq, first(dir.other()).wrapping_add(ack), spec)
            };
            let mark = general.send(dir, seq, ack, spec, payload);
            // The frame `finish` marks the ends with, as `send` would have counted it.
            quick.frame += 1;
            let seg = TcpSegment {
                seq,
                ack,
                flags: flags(spec),
                payload,
                mark,
            };
            if quick.conn.quiet_ack(dir, &seg) {
                taken += 1;
            } else {
                quick.conn.segment(dir, &seg, &mut quick.rec);
            }
            assert_eq!(
                format!("{:?}", general.conn),
                format!("{:?}", quick.conn),
                "segment {i}"
            );
            assert_eq!(
                format!("{:?}", general.rec),
                format!("{:?}", quick.rec),
                "segment {i}"
            );
        }
        general.finish(StreamEnd::CaptureEnd);
        quick.finish(StreamEnd::CaptureEnd);
        assert_eq!(
            format!("{:?}", general.rec),
            format!("{:?}", quick.rec),
            "at the end"
        );
        taken
    }

    #[test]
    fn quiet_acknowledgments_are_taken_and_change_what_segment_would() {
        let streams: [&[u8]; 2] = [&[7; 300], &[9; 300]];
        let (mut taken, mut declined) = (0, 0);
        for seed in 1..=2_000u64 {
            let mut rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let plan = quiet_plan([300, 300], &mut rng);
            let isn = [rng.next() as u32, rng.next() as u32];
            let limit = [0, 100, 4 << 20][seed as usize % 3];
            let quiet = quiet_matches_segment(streams, isn, &plan, limit);
            let acks = plan
                .iter()
                .filter(|s| matches!(s.3, "A" | "Q") && s.4 == s.5)
                .count() as u64;
            taken += quiet;
            declined += acks - quiet;
        }
        // Both ways are exercised (about 9,000 and 28,000: after a loss, acknowledgments run
        // ahead of what their peer delivered until the hole is given up).
        assert!(
            taken > 5_000 && declined > 5_000,
            "taken {taken}, declined {declined}"
        );
    }

    proptest! {
        #[test]
        fn quiet_acknowledgments_match_segment_on_any_plan(
            forward in proptest::collection::vec(any::<u8>(), 0..400),
            reverse in proptest::collection::vec(any::<u8>(), 0..400),
            isn in any::<[u32; 2]>(),
            seed in 1u64..,
            limit in prop_oneof![Just(0usize), Just(100), Just(4 << 20)],
        ) {
            let mut rng = XorShift(seed);
            let plan = quiet_plan([forward.len(), reverse.len()], &mut rng);
            quiet_matches_segment([&forward, &reverse], isn, &plan, limit);
        }

        #[test]
        fn reordered_duplicated_overlapping_segments_rebuild_both_streams(
            forward in proptest::collection::vec(any::<u8>(), 0..1500),
            reverse in proptest::collection::vec(any::<u8>(), 0..1500),
            isn in any::<[u32; 2]>(),
            seed in 1u64..,
        ) {
            let mut rng = XorShift(seed);
            let plan = plan([forward.len(), reverse.len()], &mut rng);
            let (rec, stats) = run([&forward, &reverse], isn, &plan, 4 << 20);
            for (dir, bytes) in [(Forward, &forward), (Reverse, &reverse)] {
                let mut expected = Vec::new();
                if !bytes.is_empty() {
                    expected.push(Event::Data(bytes.clone()));
                }
                expected.push(Event::End(StreamEnd::Fin));
                prop_assert_eq!(rec.of(dir), &expected[..], "{:?}", dir);
            }
            prop_assert_eq!(stats.gaps, 0);
            prop_assert_eq!(stats.overflows, 0);
        }

        #[test]
        fn lost_segments_become_gaps_of_the_right_size(
            forward in proptest::collection::vec(any::<u8>(), 0..1500),
            reverse in proptest::collection::vec(any::<u8>(), 0..1500),
            isn in any::<[u32; 2]>(),
            seed in 1u64..,
            limit in prop_oneof![Just(0usize), Just(300), Just(4 << 20)],
        ) {
            let mut rng = XorShift(seed);
            let streams: [&[u8]; 2] = [&forward, &reverse];
            let mut plan = plan([forward.len(), reverse.len()], &mut rng);
            // Lose some data segments (the FINs stay) and add acknowledgements the receivers
            // could truthfully send, anywhere in capture order.
            plan.retain(|item| !matches!(item, Planned::Data(..)) || !rng.chance(3));
            for _ in 0..rng.below(6) {
                let dir = if rng.chance(2) { Forward } else { Reverse };
                let peer_len = streams[dir.other().index()].len() as u64;
                let at = rng.below(plan.len() as u64 + 1) as usize;
                plan.insert(at, Planned::Ack(dir, rng.below(peer_len + 2)));
            }
            let (rec, _) = run(streams, isn, &plan, limit);
            for dir in [Forward, Reverse] {
                let original = streams[dir.index()];
                let events = rec.of(dir);
                prop_assert_eq!(events.last(), Some(&Event::End(StreamEnd::Fin)));
                let mut position = 0usize;
                for event in events {
                    match event {
                        Event::Data(run) => {
                            let end = position + run.len();
                            prop_assert!(end <= original.len());
                            prop_assert_eq!(&original[position..end], &run[..]);
                            position = end;
                        }
                        Event::Gap(len) => position += *len as usize,
                        Event::End(_) => {}
                    }
                }
                prop_assert_eq!(position, original.len(), "{:?}", dir);
            }
        }
    }
}
