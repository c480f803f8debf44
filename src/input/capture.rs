//! Capture files in: legacy pcap and pcapng, recognized by their magic bytes.
//!
//! Input: any `Read` (a file, stdin, a byte slice).
//! Output: [`Packet`]s in file order: frame number (1-based over the whole file, every record
//! counted, as Wireshark counts), capture time in nanoseconds since the epoch, link type, the
//! captured bytes, and the byte offset of the record in the file.
//! Invariants: memory is one read buffer that grows only as far as the largest record actually
//! present, and never past `Limits::max_block_bytes`; a length field is checked against that
//! limit before any byte is waited for. A record cut short at the end of the file ends the
//! packets and is reported by [`CaptureReader::truncated_at`]; damage in the middle is an
//! error naming the offset, after which no more packets come.
//!
//! pcap-parser reads the file and section headers and the interface descriptions; the packet
//! records themselves (legacy records, EPB, SPB) are framed here, because they are the hot path
//! and their layout is fixed.

use std::io::Read;

use pcap_parser::pcapng::Block;

/// The kinds of input recognized by content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    Pcap,
    PcapNg,
    /// A JSON document (a HAR export, if anything).
    Json,
    /// A zlib stream (mitmproxy writes `.zhar` files as a zlib-compressed HAR).
    Zlib,
}

/// Recognizes an input by its first bytes; `None` when it is none of the known kinds.
pub fn sniff(prefix: &[u8]) -> Option<InputKind> {
    const PCAP_MAGICS: [[u8; 4]; 4] = [
        [0xd4, 0xc3, 0xb2, 0xa1],
        [0xa1, 0xb2, 0xc3, 0xd4],
        [0x4d, 0x3c, 0xb2, 0xa1],
        [0xa1, 0xb2, 0x3c, 0x4d],
    ];
    if prefix.len() >= 4 {
        let m = [prefix[0], prefix[1], prefix[2], prefix[3]];
        if PCAP_MAGICS.contains(&m) {
            return Some(InputKind::Pcap);
        }
        if m == [0x0a, 0x0d, 0x0d, 0x0a] {
            return Some(InputKind::PcapNg);
        }
    }
    // zlib header: deflate with a window of 32 KiB (0x78), and the check bits of RFC 1950.
    if let [0x78, b1, ..] = prefix
        && (0x78 * 256 + u32::from(*b1)) % 31 == 0
    {
        return Some(InputKind::Zlib);
    }
    let text = prefix.strip_prefix(b"\xef\xbb\xbf").unwrap_or(prefix);
    match text.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => Some(InputKind::Json),
        _ => None,
    }
}

/// One captured packet, borrowed from the reader's buffer until the next call.
#[derive(Clone, Copy, Debug)]
pub struct Packet<'a> {
    pub frame: u64,
    pub time_ns: i64,
    /// Link-layer header type (LINKTYPE_* value).
    pub linktype: u32,
    pub data: &'a [u8],
    /// Length of the packet on the wire (may exceed `data.len()` when the snap length cut it).
    pub orig_len: u32,
    /// Byte offset of the record in the file.
    pub offset: u64,
}

/// Why a capture cannot be read (further).
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("not a pcap or pcapng capture (unrecognized magic bytes)")]
    NotACapture,
    #[error("offset {offset}: {what}")]
    Damaged { offset: u64, what: String },
    #[error("offset {offset}: read error: {source}")]
    Io {
        offset: u64,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Endian {
    Little,
    Big,
}

impl Endian {
    fn u32(self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        match self {
            Endian::Little => u32::from_le_bytes(a),
            Endian::Big => u32::from_be_bytes(a),
        }
    }
}

/// A pcapng interface: what its packets' link type and clock are.
#[derive(Clone, Copy, Debug)]
struct Interface {
    linktype: u32,
    /// Timestamp units per second.
    units_per_sec: u64,
    offset_sec: i64,
}

enum Format {
    Pcap {
        endian: Endian,
        nanos: bool,
        linktype: u32,
    },
    PcapNg {
        endian: Endian,
        interfaces: Vec<Interface>,
    },
}

pub(super) const SHB: u32 = 0x0A0D_0D0A;
pub(super) const IDB: u32 = 0x0000_0001;
pub(super) const SPB: u32 = 0x0000_0003;
pub(super) const EPB: u32 = 0x0000_0006;
const OBSOLETE_PB: u32 = 0x0000_0002;
/// Decryption Secrets Block (`editcap --inject-secrets`).
pub(super) const DSB: u32 = 0x0000_000A;
/// Its secrets type for an NSS key log ("TLSK").
pub(super) const DSB_TLS_KEY_LOG: u32 = 0x544c_534b;
/// Interfaces a section may declare; more is treated as damage (each costs a few bytes only,
/// but an unbounded list would let a hostile file grow memory without packets).
const MAX_INTERFACES: usize = 65_536;

/// Streaming reader over a capture.
pub struct CaptureReader<R: Read> {
    src: R,
    buf: Vec<u8>,
    /// Unconsumed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    /// File offset of `buf[start]`.
    offset: u64,
    eof: bool,
    format: Format,
    frame: u64,
    max_block: usize,
    truncated_at: Option<u64>,
    /// Packets dropped because they named an interface that does not exist, and the like.
    skipped_records: u64,
    /// The packet [`Self::next_record_lent`] gave last, while its bytes are in the buffer.
    lent: Option<Found>,
}

/// Bytes asked of the file at a time. Small enough that what a read copied is still in the
/// core's second-level cache when the records are parsed: with 1 MiB, `-j1` on the default
/// mix spent 8–10% more CPU (perf stat, 5 runs each, 64 and 128 KiB alike).
const READ_CHUNK: usize = 128 << 10;

impl<R: Read> CaptureReader<R> {
    /// Reads the file header. `max_block` bounds the size of any single record.
    pub fn open(src: R, max_block: usize) -> Result<Self, CaptureError> {
        let mut r = CaptureReader {
            src,
            buf: vec![0; READ_CHUNK],
            start: 0,
            end: 0,
            offset: 0,
            eof: false,
            format: Format::Pcap {
                endian: Endian::Little,
                nanos: false,
                linktype: 0,
            },
            frame: 0,
            max_block: max_block.max(64),
            truncated_at: None,
            skipped_records: 0,
            lent: None,
        };
        r.fill(4)?;
        match sniff(r.avail()) {
            Some(InputKind::Pcap) => r.read_pcap_header()?,
            Some(InputKind::PcapNg) => {
                r.format = Format::PcapNg {
                    endian: Endian::Little,
                    interfaces: Vec::new(),
                };
            }
            _ => return Err(CaptureError::NotACapture),
        }
        Ok(r)
    }

    /// Where a record cut short by the end of the file began, if one was.
    pub fn truncated_at(&self) -> Option<u64> {
        self.truncated_at
    }

    /// Records that were skipped without being packets (unknown interface, obsolete blocks).
    pub fn skipped_records(&self) -> u64 {
        self.skipped_records
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> u64 {
        self.offset
    }

    fn avail(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Ensures `want` bytes are buffered unless the file ends first. Returns whether they are.
    /// Asked twice per record, and mostly answered from the buffer: that check is inlined.
    #[inline]
    fn fill(&mut self, want: usize) -> Result<bool, CaptureError> {
        if self.end - self.start >= want {
            return Ok(true);
        }
        self.refill(want)
    }

    /// [`Self::fill`] when the buffer holds too few bytes: reads until it does or the file ends.
    fn refill(&mut self, want: usize) -> Result<bool, CaptureError> {
        while self.end - self.start < want && !self.eof {
            if self.buf.len() - self.start < want {
                // Compact, then grow if the record is larger than the buffer; `want` was
                // checked against `max_block` by every caller.
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
                if self.buf.len() < want {
                    self.buf.resize(want.next_power_of_two().max(READ_CHUNK), 0);
                }
            }
            if self.end == self.buf.len() {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            let n = loop {
                match self.src.read(&mut self.buf[self.end..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        return Err(CaptureError::Io {
                            offset: self.offset + (self.end - self.start) as u64,
                            source: e,
                        });
                    }
                }
            };
            if n == 0 {
                self.eof = true;
            }
            self.end += n;
        }
        Ok(self.end - self.start >= want)
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        self.offset += n as u64;
    }

    fn damaged(&self, what: impl Into<String>) -> CaptureError {
        CaptureError::Damaged {
            offset: self.offset,
            what: what.into(),
        }
    }

    fn read_pcap_header(&mut self) -> Result<(), CaptureError> {
        if !self.fill(24)? {
            return Err(self.damaged("pcap file header cut short"));
        }
        let header = match pcap_parser::parse_pcap_header(self.avail()) {
            Ok((_, h)) => h,
            Err(_) => return Err(self.damaged("unreadable pcap file header")),
        };
        self.format = Format::Pcap {
            endian: if header.is_bigendian() {
                Endian::Big
            } else {
                Endian::Little
            },
            nanos: header.is_nanosecond_precision(),
            linktype: header.network.0 as u32,
        };
        self.consume(24);
        Ok(())
    }

    /// The next packet, or `None` at the end of the file (a final record cut short ends the
    /// packets too; see [`Self::truncated_at`]). Embedded secrets are passed over.
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, CaptureError> {
        if let Some(p) = self.buffered_packet() {
            return Ok(Some(self.packet_of::<false>(p)));
        }
        loop {
            match self.next_found()? {
                Next::Packet(p) => return Ok(Some(self.packet_of::<false>(p))),
                Next::End => return Ok(None),
                Next::Secrets(..) | Next::Again => {}
            }
        }
    }

    /// The next packet or embedded key log, in file order, or `None` at the end of the file.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, CaptureError> {
        self.record::<false>()
    }

    /// [`Self::next_record`], and a packet it gives is lent again by [`Self::lent_packet`]
    /// until the next call: its bytes stay where they are in the buffer until then, so a
    /// reader of several captures at once can hold each one's next packet without a copy.
    pub fn next_record_lent(&mut self) -> Result<Option<Record<'_>>, CaptureError> {
        self.lent = None;
        self.record::<true>()
    }

    /// The packet the last call of [`Self::next_record_lent`] gave, again; `None` when it gave
    /// anything else.
    pub fn lent_packet(&self) -> Option<Packet<'_>> {
        let p = self.lent.as_ref()?;
        Some(Packet {
            frame: self.frame,
            time_ns: p.time_ns,
            linktype: p.linktype,
            data: self.buf.get(p.data_start..p.data_start + p.data_len)?,
            orig_len: p.orig_len,
            offset: p.offset,
        })
    }

    /// [`Self::next_record`], the packet kept to be lent again when `LEND`.
    #[inline]
    fn record<const LEND: bool>(&mut self) -> Result<Option<Record<'_>>, CaptureError> {
        if let Some(p) = self.buffered_packet() {
            return Ok(Some(Record::Packet(self.packet_of::<LEND>(p))));
        }
        loop {
            match self.next_found()? {
                Next::Packet(p) => return Ok(Some(Record::Packet(self.packet_of::<LEND>(p)))),
                Next::Secrets(start, len) => {
                    return Ok(Some(Record::TlsKeyLog(&self.buf[start..start + len])));
                }
                Next::End => return Ok(None),
                Next::Again => {}
            }
        }
    }

    fn next_found(&mut self) -> Result<Next, CaptureError> {
        match self.format {
            Format::Pcap {
                endian,
                nanos,
                linktype,
            } => self.next_pcap_record(endian, nanos, linktype),
            Format::PcapNg { endian, .. } => self.next_pcapng_block(endian),
        }
    }

    fn packet_of<const LEND: bool>(&mut self, p: Found) -> Packet<'_> {
        self.frame += 1;
        if LEND {
            self.lent = Some(p);
        }
        Packet {
            frame: self.frame,
            time_ns: p.time_ns,
            linktype: p.linktype,
            data: &self.buf[p.data_start..p.data_start + p.data_len],
            orig_len: p.orig_len,
            offset: p.offset,
        }
    }

    /// Called when fewer bytes than a whole record remain: at the end of the file, that is a
    /// record cut short; the packets end there.
    fn cut_short(&mut self) -> Next {
        if self.end > self.start {
            self.truncated_at = Some(self.offset);
        }
        Next::End
    }

    /// The next record when it is a pcap packet the buffer holds whole: see
    /// [`Self::buffered_pcap_record`].
    #[inline]
    fn buffered_packet(&mut self) -> Option<Found> {
        match self.format {
            Format::Pcap {
                endian,
                nanos,
                linktype,
            } => self.buffered_pcap_record(endian, nanos, linktype),
            Format::PcapNg { .. } => None,
        }
    }

    /// A pcap record whose bytes the buffer holds whole, taken without a read or an error to
    /// carry: nearly every record. `None` (nothing taken) for the rest, which
    /// [`Self::next_pcap_record`] reads, reporting what is wrong with them.
    #[inline]
    fn buffered_pcap_record(
        &mut self,
        endian: Endian,
        nanos: bool,
        linktype: u32,
    ) -> Option<Found> {
        let avail = self.buf.get(self.start..self.end)?;
        let h: &[u8; 16] = avail.first_chunk()?;
        // The four fields read in the file's byte order, with one test of that order.
        let word = |at: usize| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
        let mut fields = [word(0), word(4), word(8), word(12)];
        if matches!(endian, Endian::Big) {
            fields = fields.map(u32::swap_bytes);
        }
        let [ts_sec, ts_frac, caplen, orig_len] = fields;
        let caplen = caplen as usize;
        if caplen > self.max_block || avail.len() - 16 < caplen {
            return None;
        }
        Some(self.take_pcap_record([ts_sec, ts_frac, orig_len], caplen, nanos, linktype))
    }

    /// Takes the pcap record at the buffer's start, whose header fields (seconds, fraction,
    /// original length) were read and whose `caplen` bytes of data are buffered.
    #[inline]
    fn take_pcap_record(
        &mut self,
        [ts_sec, ts_frac, orig_len]: [u32; 3],
        caplen: usize,
        nanos: bool,
        linktype: u32,
    ) -> Found {
        let frac_ns = if nanos {
            ts_frac as i64
        } else {
            ts_frac as i64 * 1000
        };
        let rec = Found {
            time_ns: (ts_sec as i64) * 1_000_000_000 + frac_ns,
            linktype,
            data_start: self.start + 16,
            data_len: caplen,
            orig_len,
            offset: self.offset,
        };
        self.consume(16 + caplen);
        rec
    }

    #[inline]
    fn next_pcap_record(
        &mut self,
        endian: Endian,
        nanos: bool,
        linktype: u32,
    ) -> Result<Next, CaptureError> {
        if !self.fill(16)? {
            return Ok(self.cut_short());
        }
        let h = self.avail();
        let ts_sec = endian.u32(&h[0..4]);
        let ts_frac = endian.u32(&h[4..8]);
        let caplen = endian.u32(&h[8..12]) as usize;
        let orig_len = endian.u32(&h[12..16]);
        if caplen > self.max_block {
            return Err(self.damaged(format!(
                "pcap record of {caplen} bytes exceeds the {} byte limit",
                self.max_block
            )));
        }
        if !self.fill(16 + caplen)? {
            return Ok(self.cut_short());
        }
        let rec = self.take_pcap_record([ts_sec, ts_frac, orig_len], caplen, nanos, linktype);
        Ok(Next::Packet(rec))
    }

    fn next_pcapng_block(&mut self, section_endian: Endian) -> Result<Next, CaptureError> {
        if !self.fill(12)? {
            return Ok(self.cut_short());
        }
        let h = self.avail();
        let raw_type = [h[0], h[1], h[2], h[3]];
        let endian = if raw_type == [0x0a, 0x0d, 0x0d, 0x0a] {
            // A section header carries its own byte order.
            match [h[8], h[9], h[10], h[11]] {
                [0x4d, 0x3c, 0x2b, 0x1a] => Endian::Little,
                [0x1a, 0x2b, 0x3c, 0x4d] => Endian::Big,
                _ => return Err(self.damaged("pcapng section header with bad byte-order magic")),
            }
        } else {
            section_endian
        };
        let block_type = endian.u32(&h[0..4]);
        let block_len = endian.u32(&h[4..8]) as usize;
        if block_len < 12 || !block_len.is_multiple_of(4) {
            return Err(self.damaged(format!("pcapng block with bad length {block_len}")));
        }
        if block_len > self.max_block {
            return Err(self.damaged(format!(
                "pcapng block of {block_len} bytes exceeds the {} byte limit",
                self.max_block
            )));
        }
        if !self.fill(block_len)? {
            return Ok(self.cut_short());
        }
        let block = &self.buf[self.start..self.start + block_len];
        if endian.u32(&block[block_len - 4..]) != block_len as u32 {
            return Err(
                self.damaged("pcapng block whose trailing length differs from its leading one")
            );
        }
        let offset = self.offset;
        let next = match block_type {
            EPB => self.enhanced_packet(endian, block_len, offset)?,
            SPB => self.simple_packet(endian, block_len, offset)?,
            SHB | IDB => {
                self.section_or_interface(endian, block_type, block_len)?;
                Next::Again
            }
            // The obsolete Packet Block is not written by current tools.
            OBSOLETE_PB => self.unreadable_packet(),
            DSB => self.secrets(endian, block_len),
            _ => Next::Again,
        };
        // The packet's bytes stay valid in the buffer: consuming only moves `start`, and nothing
        // is overwritten before the next `fill`.
        self.consume(block_len);
        Ok(next)
    }

    fn section_or_interface(
        &mut self,
        endian: Endian,
        block_type: u32,
        block_len: usize,
    ) -> Result<(), CaptureError> {
        let block = &self.buf[self.start..self.start + block_len];
        let parsed = match endian {
            Endian::Little => pcap_parser::pcapng::parse_block_le(block),
            Endian::Big => pcap_parser::pcapng::parse_block_be(block),
        };
        match (block_type, parsed) {
            (SHB, Ok((_, Block::SectionHeader(_)))) => {
                self.format = Format::PcapNg {
                    endian,
                    interfaces: Vec::new(),
                };
                Ok(())
            }
            (IDB, Ok((_, Block::InterfaceDescription(idb)))) => {
                let units_per_sec = ts_units_per_sec(idb.if_tsresol).ok_or_else(|| {
                    self.damaged(format!(
                        "interface with unusable time resolution {:#x}",
                        idb.if_tsresol
                    ))
                })?;
                let iface = Interface {
                    linktype: idb.linktype.0 as u32,
                    units_per_sec,
                    offset_sec: idb.if_tsoffset,
                };
                let too_many = self.damaged("more than 65536 interfaces in one section");
                if let Format::PcapNg { interfaces, .. } = &mut self.format {
                    if interfaces.len() >= MAX_INTERFACES {
                        return Err(too_many);
                    }
                    interfaces.push(iface);
                }
                Ok(())
            }
            _ => Err(self.damaged(if block_type == SHB {
                "unreadable pcapng section header"
            } else {
                "unreadable pcapng interface description"
            })),
        }
    }

    /// A Decryption Secrets Block: its NSS key log, if that is what it holds (other secrets
    /// types are passed over).
    fn secrets(&self, endian: Endian, block_len: usize) -> Next {
        let b = &self.buf[self.start..self.start + block_len];
        if block_len < 20 || endian.u32(&b[8..12]) != DSB_TLS_KEY_LOG {
            return Next::Again;
        }
        let len = (endian.u32(&b[12..16]) as usize).min(block_len - 20);
        Next::Secrets(self.start + 16, len)
    }

    /// A packet record that cannot be read (no interface to give it a link type, or an obsolete
    /// block): it still counts as a frame, as Wireshark counts it, so later frame numbers match.
    fn unreadable_packet(&mut self) -> Next {
        self.skipped_records += 1;
        self.frame += 1;
        Next::Again
    }

    fn interface(&self, id: u32) -> Option<Interface> {
        match &self.format {
            Format::PcapNg { interfaces, .. } => interfaces.get(id as usize).copied(),
            Format::Pcap { .. } => None,
        }
    }

    fn enhanced_packet(
        &mut self,
        endian: Endian,
        block_len: usize,
        offset: u64,
    ) -> Result<Next, CaptureError> {
        let b = &self.buf[self.start..self.start + block_len];
        if block_len < 32 {
            return Err(self.damaged("enhanced packet block too short"));
        }
        let if_id = endian.u32(&b[8..12]);
        let ts = ((endian.u32(&b[12..16]) as u64) << 32) | endian.u32(&b[16..20]) as u64;
        let caplen = endian.u32(&b[20..24]) as usize;
        let orig_len = endian.u32(&b[24..28]);
        if caplen > block_len - 32 {
            return Err(self.damaged(format!(
                "enhanced packet block claims {caplen} captured bytes in a {block_len} byte block"
            )));
        }
        let Some(iface) = self.interface(if_id) else {
            return Ok(self.unreadable_packet());
        };
        Ok(Next::Packet(Found {
            time_ns: iface.time_ns(ts),
            linktype: iface.linktype,
            data_start: self.start + 28,
            data_len: caplen,
            orig_len,
            offset,
        }))
    }

    fn simple_packet(
        &mut self,
        endian: Endian,
        block_len: usize,
        offset: u64,
    ) -> Result<Next, CaptureError> {
        let b = &self.buf[self.start..self.start + block_len];
        if block_len < 16 {
            return Err(self.damaged("simple packet block too short"));
        }
        let orig_len = endian.u32(&b[8..12]);
        let caplen = (orig_len as usize).min(block_len - 16);
        let Some(iface) = self.interface(0) else {
            return Ok(self.unreadable_packet());
        };
        Ok(Next::Packet(Found {
            // A simple packet block has no timestamp.
            time_ns: 0,
            linktype: iface.linktype,
            data_start: self.start + 12,
            data_len: caplen,
            orig_len,
            offset,
        }))
    }
}

impl Interface {
    fn time_ns(&self, ts: u64) -> i64 {
        let units = self.units_per_sec.max(1);
        let secs = ts / units;
        let frac = ts % units;
        let frac_ns = (frac as u128 * 1_000_000_000 / units as u128) as i64;
        (secs as i64)
            .saturating_add(self.offset_sec)
            .saturating_mul(1_000_000_000)
            .saturating_add(frac_ns)
    }
}

/// Units per second for a pcapng `if_tsresol` value: 10^n, or 2^n when the high bit is set.
fn ts_units_per_sec(tsresol: u8) -> Option<u64> {
    let n = (tsresol & 0x7f) as u32;
    if tsresol & 0x80 == 0 {
        10u64.checked_pow(n)
    } else {
        1u64.checked_shl(n).filter(|_| n < 64)
    }
}

#[derive(Clone, Copy)]
struct Found {
    time_ns: i64,
    linktype: u32,
    data_start: usize,
    data_len: usize,
    orig_len: u32,
    offset: u64,
}

enum Next {
    Packet(Found),
    /// A Decryption Secrets Block's NSS key log: where its bytes sit in the buffer.
    Secrets(usize, usize),
    Again,
    End,
}

/// Where the driver takes a capture's records from: one file's reader, or the packets of
/// several capture points merged by time (`crate::input::merge`).
pub trait Records {
    /// The next packet or embedded key log, or `None` at the end.
    fn next_record(&mut self) -> Result<Option<Record<'_>>, CaptureError>;
    /// Bytes of the input consumed so far (for a progress display).
    fn position(&self) -> u64;
    /// Where a record cut short by the end of the input began, if one was.
    fn truncated_at(&self) -> Option<u64>;
    /// Files of the input whose last record was cut short (counted as `truncated_record`).
    fn files_cut_short(&self) -> u64 {
        u64::from(self.truncated_at().is_some())
    }
    /// Records passed over without being packets (see [`CaptureReader::skipped_records`]).
    fn skipped_records(&self) -> u64;
}

impl<R: Read> Records for CaptureReader<R> {
    fn next_record(&mut self) -> Result<Option<Record<'_>>, CaptureError> {
        CaptureReader::next_record(self)
    }
    fn position(&self) -> u64 {
        CaptureReader::position(self)
    }
    fn truncated_at(&self) -> Option<u64> {
        CaptureReader::truncated_at(self)
    }
    fn skipped_records(&self) -> u64 {
        CaptureReader::skipped_records(self)
    }
}

/// What a capture holds, in file order: packets, and the TLS secrets embedded between them.
#[derive(Debug)]
pub enum Record<'a> {
    Packet(Packet<'a>),
    /// An NSS key log from a pcapng Decryption Secrets Block.
    TlsKeyLog(&'a [u8]),
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::input::testing::{Ng, Trickle};

    #[derive(Debug, PartialEq)]
    struct Seen {
        frame: u64,
        time_ns: i64,
        linktype: u32,
        data: Vec<u8>,
        offset: u64,
    }

    fn read_all<R: Read>(r: R, max_block: usize) -> (Vec<Seen>, Result<(), String>, Option<u64>) {
        let mut reader = match CaptureReader::open(r, max_block) {
            Ok(r) => r,
            Err(e) => return (Vec::new(), Err(e.to_string()), None),
        };
        let mut seen = Vec::new();
        loop {
            match reader.next_packet() {
                Ok(Some(p)) => seen.push(Seen {
                    frame: p.frame,
                    time_ns: p.time_ns,
                    linktype: p.linktype,
                    data: p.data.to_vec(),
                    offset: p.offset,
                }),
                Ok(None) => return (seen, Ok(()), reader.truncated_at()),
                Err(e) => return (seen, Err(e.to_string()), reader.truncated_at()),
            }
        }
    }

    /// Reads `bytes` whole, byte by byte and in pseudo-random pieces; all must agree.
    fn read_every_way(bytes: &[u8]) -> (Vec<Seen>, Result<(), String>, Option<u64>) {
        let whole = read_all(bytes, 1 << 20);
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let random: Vec<usize> = (0..64)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed % 23) as usize + 1
            })
            .collect();
        for sizes in [vec![1], random, vec![7, 1, 300]] {
            let t = Trickle::new(bytes, &sizes);
            assert_eq!(read_all(t, 1 << 20), whole);
        }
        whole
    }

    fn pcap(
        big_endian: bool,
        nanos: bool,
        linktype: u32,
        records: &[(u32, u32, &[u8])],
    ) -> Vec<u8> {
        let magic: u32 = if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 };
        let w32 = |v: u32| {
            if big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let w16 = |v: u16| {
            if big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let mut out = Vec::new();
        out.extend_from_slice(&w32(magic));
        out.extend_from_slice(&w16(2));
        out.extend_from_slice(&w16(4));
        out.extend_from_slice(&w32(0));
        out.extend_from_slice(&w32(0));
        out.extend_from_slice(&w32(65535));
        out.extend_from_slice(&w32(linktype));
        for (sec, frac, data) in records {
            out.extend_from_slice(&w32(*sec));
            out.extend_from_slice(&w32(*frac));
            out.extend_from_slice(&w32(data.len() as u32));
            out.extend_from_slice(&w32(data.len() as u32));
            out.extend_from_slice(data);
        }
        out
    }

    /// A packet read with `next_record_lent` is lent again, bytes and all, until the next
    /// call, over records that make the reader read more and move its buffer; anything else
    /// (a key log, the end) lends nothing.
    #[test]
    fn a_packet_is_lent_until_the_next_call() {
        let mut ng = Ng {
            big: false,
            out: Vec::new(),
        };
        ng.shb();
        ng.idb(1, None);
        let datas: Vec<Vec<u8>> = (0..400u32)
            .map(|i| (0..(i * 37 % 1500 + 1)).map(|k| (k ^ i) as u8).collect())
            .collect();
        for (i, d) in datas.iter().enumerate() {
            if i % 50 == 7 {
                ng.dsb(b"CLIENT_RANDOM 00 11");
            }
            ng.epb(0, 1_000 + i as u64, d);
        }
        for sizes in [&[1usize << 20][..], &[3, 700, 64, 1]] {
            let src = Trickle::new(&ng.out, sizes);
            let mut r = CaptureReader::open(src, 1 << 20).unwrap();
            let mut packets = 0;
            loop {
                let lent = match r.next_record_lent().unwrap() {
                    Some(Record::Packet(p)) => Some((p.frame, p.time_ns, p.data.to_vec())),
                    Some(Record::TlsKeyLog(_)) => None,
                    None => break,
                };
                let again = r
                    .lent_packet()
                    .map(|p| (p.frame, p.time_ns, p.data.to_vec()));
                assert_eq!(again, lent);
                if let Some((frame, _, data)) = lent {
                    assert_eq!(data, datas[packets]);
                    packets += 1;
                    assert_eq!(frame, packets as u64);
                }
            }
            assert_eq!(packets, datas.len());
            assert!(r.lent_packet().is_none());
            // The plain call lends nothing.
            let mut r = CaptureReader::open(Trickle::new(&ng.out, sizes), 1 << 20).unwrap();
            assert!(matches!(r.next_record(), Ok(Some(Record::Packet(_)))));
            assert!(r.lent_packet().is_none());
        }
    }

    #[test]
    fn legacy_pcap_in_both_byte_orders_and_resolutions() {
        for big in [false, true] {
            for nanos in [false, true] {
                let bytes = pcap(
                    big,
                    nanos,
                    1,
                    &[(10, 5, b"abc"), (11, 999, b""), (12, 0, b"xyz12")],
                );
                assert_eq!(sniff(&bytes), Some(InputKind::Pcap));
                let (seen, res, trunc) = read_every_way(&bytes);
                assert_eq!(res, Ok(()));
                assert_eq!(trunc, None);
                let unit = if nanos { 1 } else { 1000 };
                assert_eq!(seen.len(), 3);
                assert_eq!(seen[0].time_ns, 10_000_000_000 + 5 * unit);
                assert_eq!(seen[1].time_ns, 11_000_000_000 + 999 * unit);
                assert_eq!(seen[1].data, b"");
                assert_eq!(seen[2].data, b"xyz12");
                assert_eq!(seen.iter().map(|s| s.frame).collect::<Vec<_>>(), [1, 2, 3]);
                assert_eq!(seen[0].offset, 24);
                assert_eq!(seen[1].offset, 24 + 16 + 3);
                assert!(seen.iter().all(|s| s.linktype == 1));
            }
        }
    }

    #[test]
    fn records_across_many_reads_and_one_larger_than_a_read_come_out_whole() {
        // Several read chunks of records of every small size, one record three times as large
        // as a read in the middle (the buffer must grow for it) and more after it.
        let datas: Vec<Vec<u8>> = (0..3_000u32)
            .map(|i| {
                let len = if i == 1_500 {
                    3 * READ_CHUNK + 7
                } else {
                    (i as usize * 37) % 1_500
                };
                (0..len).map(|j| (i as usize + j) as u8).collect()
            })
            .collect();
        let records: Vec<(u32, u32, &[u8])> = datas
            .iter()
            .enumerate()
            .map(|(i, d)| (i as u32, 0, d.as_slice()))
            .collect();
        let bytes = pcap(false, false, 1, &records);
        assert!(bytes.len() > 6 * READ_CHUNK);
        let (seen, res, trunc) = read_every_way(&bytes);
        assert_eq!(res, Ok(()));
        assert_eq!(trunc, None);
        assert_eq!(seen.len(), datas.len());
        let mut offset = 24;
        for (s, d) in seen.iter().zip(&datas) {
            assert_eq!(&s.data, d, "frame {}", s.frame);
            assert_eq!(s.offset, offset);
            offset += 16 + d.len() as u64;
        }
    }

    #[test]
    fn truncated_pcap_ends_at_the_last_whole_record() {
        let bytes = pcap(false, false, 1, &[(1, 0, b"first"), (2, 0, b"second")]);
        for cut in [bytes.len() - 1, bytes.len() - 6, 24 + 16 + 5 + 3] {
            let (seen, res, trunc) = read_every_way(&bytes[..cut]);
            assert_eq!(res, Ok(()));
            assert_eq!(seen.len(), 1);
            assert_eq!(trunc, Some(24 + 16 + 5));
        }
        let (_, res, _) = read_every_way(&bytes[..10]);
        assert!(res.unwrap_err().contains("header cut short"));
    }

    #[test]
    fn absurd_record_length_is_refused_before_reading() {
        let mut bytes = pcap(false, false, 1, &[(1, 0, b"ok")]);
        bytes.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        let (seen, res, _) = read_every_way(&bytes);
        assert_eq!(seen.len(), 1);
        let e = res.unwrap_err();
        assert!(e.contains("offset 42") && e.contains("exceeds"), "{e}");
    }

    #[test]
    fn pcapng_sections_interfaces_and_resolutions() {
        let mut ng = Ng {
            big: false,
            out: Vec::new(),
        };
        ng.shb();
        ng.idb(1, None); // microseconds by default
        ng.idb(276, Some(9)); // nanoseconds
        ng.epb(0, 1_000_000, b"eth");
        ng.epb(1, 2_000_000_123, b"sll2");
        ng.epb(7, 5, b"no such interface");
        ng.spb(b"simple");
        let mut second = Ng {
            big: true,
            out: Vec::new(),
        };
        second.shb();
        second.idb(101, Some(0x80 | 10)); // 2^10 units per second
        second.epb(0, 3 * 1024 + 512, b"raw");
        ng.out.extend_from_slice(&second.out);
        assert_eq!(sniff(&ng.out), Some(InputKind::PcapNg));
        let (seen, res, trunc) = read_every_way(&ng.out);
        assert_eq!(res, Ok(()));
        assert_eq!(trunc, None);
        let summary: Vec<(u64, u32, i64, &[u8])> = seen
            .iter()
            .map(|s| (s.frame, s.linktype, s.time_ns, s.data.as_slice()))
            .collect();
        assert_eq!(
            summary,
            vec![
                (1, 1, 1_000_000_000, &b"eth"[..]),
                (2, 276, 2_000_000_123, &b"sll2"[..]),
                // frame 3 named an interface that does not exist: counted, not returned
                (4, 1, 0, &b"simple"[..]),
                (5, 101, 3_500_000_000, &b"raw"[..]),
            ]
        );
    }

    #[test]
    fn damaged_pcapng_blocks_are_named_by_offset() {
        let mut ng = Ng {
            big: false,
            out: Vec::new(),
        };
        ng.shb();
        ng.idb(1, None);
        ng.epb(0, 1, b"ok");
        let good_len = ng.out.len() as u64;
        // A block whose length is not a multiple of four.
        let mut bad = ng.out.clone();
        bad.extend_from_slice(&EPB.to_le_bytes());
        bad.extend_from_slice(&13u32.to_le_bytes());
        bad.extend_from_slice(&[0; 8]);
        let (seen, res, _) = read_every_way(&bad);
        assert_eq!(seen.len(), 1);
        assert_eq!(
            res.unwrap_err(),
            format!("offset {good_len}: pcapng block with bad length 13")
        );
        // Trailing length that differs from the leading one.
        let mut bad = ng.out.clone();
        let mut other = Ng {
            big: false,
            out: Vec::new(),
        };
        other.epb(0, 2, b"tail");
        let n = other.out.len();
        other.out[n - 4] ^= 4;
        bad.extend_from_slice(&other.out);
        let (_, res, _) = read_every_way(&bad);
        assert!(res.unwrap_err().contains("trailing length"));
        // Captured length larger than the block.
        let mut bad = ng.out.clone();
        let mut liar = Ng {
            big: false,
            out: Vec::new(),
        };
        liar.epb(0, 2, b"tail");
        liar.out[20..24].copy_from_slice(&4000u32.to_le_bytes());
        bad.extend_from_slice(&liar.out);
        let (_, res, _) = read_every_way(&bad);
        assert!(res.unwrap_err().contains("claims 4000"));
        // A truncated final block is a truncation, not damage.
        let cut = &ng.out[..ng.out.len() - 3];
        let (seen, res, trunc) = read_every_way(cut);
        assert_eq!((seen.len(), res, trunc.is_some()), (0, Ok(()), true));
    }

    #[test]
    fn not_a_capture() {
        assert_eq!(sniff(b"GET / HTTP/1.1"), None);
        assert_eq!(sniff(b"  {\"log\": {}}"), Some(InputKind::Json));
        assert_eq!(sniff(b"\xef\xbb\xbf{"), Some(InputKind::Json));
        for level in [0x01, 0x5e, 0x9c, 0xda] {
            assert_eq!(sniff(&[0x78, level, 0]), Some(InputKind::Zlib));
        }
        assert_eq!(sniff(&[0x78, 0x9d]), None);
        let (_, res, _) = read_all(&b"hello world"[..], 1 << 20);
        assert!(res.unwrap_err().contains("not a pcap"));
        let (_, res, _) = read_all(&b""[..], 1 << 20);
        assert!(res.is_err());
    }

    #[test]
    fn ts_resolution_values() {
        assert_eq!(ts_units_per_sec(6), Some(1_000_000));
        assert_eq!(ts_units_per_sec(9), Some(1_000_000_000));
        assert_eq!(ts_units_per_sec(0x80 | 10), Some(1024));
        assert_eq!(ts_units_per_sec(20), None);
        assert_eq!(ts_units_per_sec(0x80 | 64), None);
    }
}
