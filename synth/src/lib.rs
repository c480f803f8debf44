//! Synthetic captures of MCP Streamable HTTP traffic, for test fixtures and benchmarks.
//!
//! Input: either direct calls on the TCP flow simulator ([`TcpFlow`] over a [`Capture`]), or
//! a [`Scenario`] of MCP sessions ([`SessionSpec`]: `initialize`, notifications, and resume
//! GETs carrying `Last-Event-ID`, each over chosen simulated connections, each connection on
//! a [`Wire`]: HTTP/1.1 or HTTP/2, in cleartext or in TLS 1.3 / TLS 1.2).
//! Output: legacy pcap or pcapng bytes streamed to any `std::io::Write` ([`PcapWriter`],
//! [`PcapngWriter`]), the NSS key log lines of TLS connections
//! ([`Scenario::run_with_key_log`]), and one [`ExpectedResume`] per resume request, derived
//! from the scenario definition by the verdict rules alone (see [`expected_outcome`]), never
//! by analysis: the same for every wire.
//!
//! A scenario holds HTTP messages, not bytes: each is rendered for its connection's wire as
//! the capture is written ([`h2`] frames it for HTTP/2, [`tls`] seals it in records), so the
//! same scenario gives the same traffic on every wire and cleartext HTTP/1.1 is byte for byte
//! what it always was.
//! Invariants: the bytes depend only on the inputs (no clock, no randomness, no hash-map
//! order), so the same scenario always gives the same file; a packet is written as soon as it
//! is made, so memory grows with open connections and scenario size, never with capture size;
//! every IPv4 header and TCP checksum is correct; sequence numbers wrap modulo 2^32.

use std::cmp::Ordering;
use std::io::{self, Write};
use std::net::IpAddr;

pub mod h2;
pub mod malformed;
pub mod tls;

pub use tls::{TlsParams, TlsSession, TlsSuite};

/// 2026-11-09T10:00:00Z in nanoseconds since the Unix epoch: where synthetic time starts.
pub const BASE_TIME_NS: u64 = 1_794_218_400 * NS_PER_SEC;

const NS_PER_SEC: u64 = 1_000_000_000;

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.to_string())
}

// ---------------------------------------------------------------------------------------------
// Capture file writers
// ---------------------------------------------------------------------------------------------

/// Byte order of a capture file (or pcapng section).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteOrder {
    Little,
    Big,
}

impl ByteOrder {
    fn u16_bytes(self, v: u16) -> [u8; 2] {
        match self {
            ByteOrder::Little => v.to_le_bytes(),
            ByteOrder::Big => v.to_be_bytes(),
        }
    }
    fn u32_bytes(self, v: u32) -> [u8; 4] {
        match self {
            ByteOrder::Little => v.to_le_bytes(),
            ByteOrder::Big => v.to_be_bytes(),
        }
    }
    fn put_u16(self, out: &mut Vec<u8>, v: u16) {
        out.extend_from_slice(&self.u16_bytes(v));
    }
    fn put_u32(self, out: &mut Vec<u8>, v: u32) {
        out.extend_from_slice(&self.u32_bytes(v));
    }
}

/// Timestamp resolution of a pcap file or a pcapng interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TsResolution {
    /// Microseconds: pcap magic `a1b2c3d4`, pcapng `if_tsresol` absent (its default, 6).
    Micro,
    /// Nanoseconds: pcap magic `a1b23c4d`, pcapng `if_tsresol` = 9.
    Nano,
}

impl TsResolution {
    fn ns_per_unit(self) -> u64 {
        match self {
            TsResolution::Micro => 1_000,
            TsResolution::Nano => 1,
        }
    }
    /// The time a reader recovers from a timestamp of this resolution.
    pub fn recorded(self, time_ns: u64) -> u64 {
        time_ns - time_ns % self.ns_per_unit()
    }
}

/// Link-layer header types (the `LINKTYPE_*` numbers of pcap and pcapng).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkType {
    /// 0: BSD loopback, a 4-byte address family in the writer's byte order.
    Null,
    /// 1: Ethernet II.
    Ethernet,
    /// 101: raw IP, version from the first nibble.
    Raw,
    /// 113: Linux cooked capture v1.
    LinuxSll,
    /// 228: raw IPv4.
    Ipv4,
    /// 229: raw IPv6.
    Ipv6,
    /// 276: Linux cooked capture v2.
    LinuxSll2,
}

impl LinkType {
    pub fn code(self) -> u16 {
        match self {
            LinkType::Null => 0,
            LinkType::Ethernet => 1,
            LinkType::Raw => 101,
            LinkType::LinuxSll => 113,
            LinkType::Ipv4 => 228,
            LinkType::Ipv6 => 229,
            LinkType::LinuxSll2 => 276,
        }
    }
}

/// Where a frame went in the capture: its 1-based frame number over the whole file and the
/// time a reader recovers for it (`None` for a pcapng simple packet block, which has none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameStamp {
    pub frame: u64,
    pub time_ns: Option<u64>,
}

/// A capture file being written, one packet at a time.
pub trait PacketWriter {
    /// Declares an interface; returns its id within the current section.
    fn add_interface(&mut self, link: LinkType, resolution: TsResolution) -> io::Result<u32>;
    /// Writes one frame; returns the time a reader will recover for it, if the record has one.
    fn write_packet(
        &mut self,
        interface: u32,
        time_ns: u64,
        frame: &[u8],
    ) -> io::Result<Option<u64>>;
    /// Byte order of the records being written now (the host order of a BSD loopback header).
    fn byte_order(&self) -> ByteOrder;
}

/// Global header parameters of a legacy pcap file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcapFormat {
    pub order: ByteOrder,
    pub resolution: TsResolution,
    pub link: LinkType,
    /// Frames longer than this are cut to it (the original length is still recorded).
    pub snaplen: u32,
}

impl PcapFormat {
    pub fn new(order: ByteOrder, resolution: TsResolution, link: LinkType) -> Self {
        PcapFormat {
            order,
            resolution,
            link,
            snaplen: 262_144,
        }
    }
}

/// Legacy pcap writer: one link type and one resolution for the whole file.
pub struct PcapWriter<W: Write> {
    out: W,
    format: PcapFormat,
    record: Vec<u8>,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the global header.
    pub fn new(mut out: W, format: PcapFormat) -> io::Result<Self> {
        let o = format.order;
        let magic = match format.resolution {
            TsResolution::Micro => 0xa1b2_c3d4,
            TsResolution::Nano => 0xa1b2_3c4d,
        };
        let mut head = Vec::with_capacity(24);
        o.put_u32(&mut head, magic);
        o.put_u16(&mut head, 2);
        o.put_u16(&mut head, 4);
        o.put_u32(&mut head, 0); // thiszone
        o.put_u32(&mut head, 0); // sigfigs
        o.put_u32(&mut head, format.snaplen);
        o.put_u32(&mut head, u32::from(format.link.code()));
        out.write_all(&head)?;
        Ok(PcapWriter {
            out,
            format,
            record: Vec::with_capacity(16),
        })
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

impl<W: Write> PacketWriter for PcapWriter<W> {
    fn add_interface(&mut self, link: LinkType, resolution: TsResolution) -> io::Result<u32> {
        if link == self.format.link && resolution == self.format.resolution {
            Ok(0)
        } else {
            Err(invalid(
                "a pcap file has one link type and resolution, set in its header",
            ))
        }
    }

    fn write_packet(
        &mut self,
        interface: u32,
        time_ns: u64,
        frame: &[u8],
    ) -> io::Result<Option<u64>> {
        if interface != 0 {
            return Err(invalid("a pcap file has only interface 0"));
        }
        let secs = u32::try_from(time_ns / NS_PER_SEC)
            .map_err(|_| invalid("time past the range of pcap timestamps"))?;
        let res = self.format.resolution;
        // Below one second, so it fits in u32 at either resolution.
        let frac = ((time_ns % NS_PER_SEC) / res.ns_per_unit()) as u32;
        let orig_len =
            u32::try_from(frame.len()).map_err(|_| invalid("frame longer than 4 GiB"))?;
        let cap_len = orig_len.min(self.format.snaplen);
        let o = self.format.order;
        self.record.clear();
        o.put_u32(&mut self.record, secs);
        o.put_u32(&mut self.record, frac);
        o.put_u32(&mut self.record, cap_len);
        o.put_u32(&mut self.record, orig_len);
        self.out.write_all(&self.record)?;
        self.out.write_all(&frame[..cap_len as usize])?;
        Ok(Some(res.recorded(time_ns)))
    }

    fn byte_order(&self) -> ByteOrder {
        self.format.order
    }
}

const PCAPNG_SHB: u32 = 0x0a0d_0d0a;
const PCAPNG_IDB: u32 = 1;
const PCAPNG_SPB: u32 = 3;
const PCAPNG_EPB: u32 = 6;
const PCAPNG_BOM: u32 = 0x1a2b_3c4d;
const PCAPNG_SNAPLEN: u32 = 262_144;
const OPT_END: u16 = 0;
const OPT_SHB_USERAPPL: u16 = 4;
const OPT_IF_NAME: u16 = 2;
const OPT_IF_TSRESOL: u16 = 9;

/// pcapng writer: sections (each with its own byte order), interfaces with their own link type
/// and resolution, packets as enhanced (EPB) or simple (SPB) packet blocks.
pub struct PcapngWriter<W: Write> {
    out: W,
    order: ByteOrder,
    interfaces: Vec<(LinkType, TsResolution)>,
    simple_packets: bool,
    block: Vec<u8>,
}

impl<W: Write> PcapngWriter<W> {
    /// Writes the first section header block.
    pub fn new(out: W, order: ByteOrder) -> io::Result<Self> {
        let mut w = PcapngWriter {
            out,
            order,
            interfaces: Vec::new(),
            simple_packets: false,
            block: Vec::with_capacity(2048),
        };
        w.write_section_header()?;
        Ok(w)
    }

    /// Starts a new section (possibly of the other byte order); its interfaces start empty.
    pub fn new_section(&mut self, order: ByteOrder) -> io::Result<()> {
        self.order = order;
        self.interfaces.clear();
        self.write_section_header()
    }

    /// From now on, packets on interface 0 are written as simple packet blocks (no timestamp,
    /// no interface id: an SPB always belongs to the section's first interface).
    pub fn set_simple_packets(&mut self, on: bool) {
        self.simple_packets = on;
    }

    pub fn into_inner(self) -> W {
        self.out
    }

    fn begin_block(&mut self, block_type: u32) {
        self.block.clear();
        self.order.put_u32(&mut self.block, block_type);
        self.order.put_u32(&mut self.block, 0); // total length, patched by end_block
    }

    fn put_option(&mut self, code: u16, value: &[u8]) -> io::Result<()> {
        let len = u16::try_from(value.len()).map_err(|_| invalid("pcapng option too long"))?;
        self.order.put_u16(&mut self.block, code);
        self.order.put_u16(&mut self.block, len);
        self.block.extend_from_slice(value);
        self.pad4();
        Ok(())
    }

    fn pad4(&mut self) {
        while !self.block.len().is_multiple_of(4) {
            self.block.push(0);
        }
    }

    fn end_block(&mut self) -> io::Result<()> {
        self.pad4();
        let total = u32::try_from(self.block.len() + 4)
            .map_err(|_| invalid("pcapng block longer than 4 GiB"))?;
        let len_bytes = self.order.u32_bytes(total);
        self.block[4..8].copy_from_slice(&len_bytes);
        self.order.put_u32(&mut self.block, total);
        self.out.write_all(&self.block)
    }

    fn write_section_header(&mut self) -> io::Result<()> {
        self.begin_block(PCAPNG_SHB);
        let o = self.order;
        o.put_u32(&mut self.block, PCAPNG_BOM);
        o.put_u16(&mut self.block, 1);
        o.put_u16(&mut self.block, 0);
        // Section length unknown (-1): the writer streams and never seeks back.
        o.put_u32(&mut self.block, u32::MAX);
        o.put_u32(&mut self.block, u32::MAX);
        self.put_option(OPT_SHB_USERAPPL, b"mcp-resume-audit synth")?;
        self.put_option(OPT_END, &[])?;
        self.end_block()
    }
}

impl<W: Write> PacketWriter for PcapngWriter<W> {
    fn add_interface(&mut self, link: LinkType, resolution: TsResolution) -> io::Result<u32> {
        let id =
            u32::try_from(self.interfaces.len()).map_err(|_| invalid("too many interfaces"))?;
        self.begin_block(PCAPNG_IDB);
        let o = self.order;
        o.put_u16(&mut self.block, link.code());
        o.put_u16(&mut self.block, 0);
        o.put_u32(&mut self.block, PCAPNG_SNAPLEN);
        let name = format!("synth{id}");
        self.put_option(OPT_IF_NAME, name.as_bytes())?;
        if resolution == TsResolution::Nano {
            self.put_option(OPT_IF_TSRESOL, &[9])?;
        }
        self.put_option(OPT_END, &[])?;
        self.end_block()?;
        self.interfaces.push((link, resolution));
        Ok(id)
    }

    fn write_packet(
        &mut self,
        interface: u32,
        time_ns: u64,
        frame: &[u8],
    ) -> io::Result<Option<u64>> {
        let Some(&(_, resolution)) = self.interfaces.get(interface as usize) else {
            return Err(invalid(
                "packet on an interface the section does not declare",
            ));
        };
        let len = u32::try_from(frame.len()).map_err(|_| invalid("frame longer than 4 GiB"))?;
        let o = self.order;
        if self.simple_packets && interface == 0 {
            self.begin_block(PCAPNG_SPB);
            o.put_u32(&mut self.block, len);
            self.block.extend_from_slice(frame);
            self.end_block()?;
            return Ok(None);
        }
        let units = time_ns / resolution.ns_per_unit();
        self.begin_block(PCAPNG_EPB);
        o.put_u32(&mut self.block, interface);
        o.put_u32(&mut self.block, (units >> 32) as u32);
        o.put_u32(&mut self.block, units as u32);
        o.put_u32(&mut self.block, len);
        o.put_u32(&mut self.block, len);
        self.block.extend_from_slice(frame);
        self.end_block()?;
        Ok(Some(resolution.recorded(time_ns)))
    }

    fn byte_order(&self) -> ByteOrder {
        self.order
    }
}

// ---------------------------------------------------------------------------------------------
// Frames: link header, IP, TCP
// ---------------------------------------------------------------------------------------------

/// 802.1Q tagging of an Ethernet frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vlan {
    Untagged,
    /// One 802.1Q tag (TPID 0x8100) with this VLAN id.
    Single(u16),
    /// QinQ: an 802.1ad outer tag (TPID 0x88a8) and an 802.1Q inner tag.
    QinQ {
        outer: u16,
        inner: u16,
    },
}

/// How frames of one interface are framed below IP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkFraming {
    Ethernet {
        vlan: Vlan,
    },
    /// BSD loopback; IPv4 is family 2, IPv6 takes this family number (24, 28 or 30 by OS).
    Null {
        ipv6_family: u32,
    },
    LinuxSll,
    LinuxSll2 {
        interface_index: u32,
    },
    /// LINKTYPE_RAW (101): IPv4 or IPv6.
    RawIp,
    /// LINKTYPE_IPV4 (228): IPv4 only.
    RawIpv4,
    /// LINKTYPE_IPV6 (229): IPv6 only.
    RawIpv6,
}

impl LinkFraming {
    pub fn link_type(self) -> LinkType {
        match self {
            LinkFraming::Ethernet { .. } => LinkType::Ethernet,
            LinkFraming::Null { .. } => LinkType::Null,
            LinkFraming::LinuxSll => LinkType::LinuxSll,
            LinkFraming::LinuxSll2 { .. } => LinkType::LinuxSll2,
            LinkFraming::RawIp => LinkType::Raw,
            LinkFraming::RawIpv4 => LinkType::Ipv4,
            LinkFraming::RawIpv6 => LinkType::Ipv6,
        }
    }
}

/// The two ends of a simulated connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    Client,
    Server,
}

impl Side {
    fn index(self) -> usize {
        match self {
            Side::Client => 0,
            Side::Server => 1,
        }
    }
    pub fn other(self) -> Side {
        match self {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        }
    }
}

const CLIENT_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0xc1, 0x01];
const SERVER_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x5e, 0x01];
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ARPHRD_ETHER: u16 = 1;
// The capture is taken on the server: what the client sends arrives, what the server sends
// leaves.
const PACKET_HOST: u8 = 0;
const PACKET_OUTGOING: u8 = 4;

fn put_link_header(
    out: &mut Vec<u8>,
    framing: LinkFraming,
    order: ByteOrder,
    from: Side,
    ipv6: bool,
) -> io::Result<()> {
    let ethertype = if ipv6 { ETHERTYPE_IPV6 } else { ETHERTYPE_IPV4 };
    let (src_mac, dst_mac) = match from {
        Side::Client => (CLIENT_MAC, SERVER_MAC),
        Side::Server => (SERVER_MAC, CLIENT_MAC),
    };
    let packet_type = match from {
        Side::Client => PACKET_HOST,
        Side::Server => PACKET_OUTGOING,
    };
    match framing {
        LinkFraming::Ethernet { vlan } => {
            out.extend_from_slice(&dst_mac);
            out.extend_from_slice(&src_mac);
            match vlan {
                Vlan::Untagged => {}
                Vlan::Single(id) => {
                    out.extend_from_slice(&0x8100u16.to_be_bytes());
                    out.extend_from_slice(&(id & 0x0fff).to_be_bytes());
                }
                Vlan::QinQ { outer, inner } => {
                    out.extend_from_slice(&0x88a8u16.to_be_bytes());
                    out.extend_from_slice(&(outer & 0x0fff).to_be_bytes());
                    out.extend_from_slice(&0x8100u16.to_be_bytes());
                    out.extend_from_slice(&(inner & 0x0fff).to_be_bytes());
                }
            }
            out.extend_from_slice(&ethertype.to_be_bytes());
        }
        LinkFraming::Null { ipv6_family } => {
            order.put_u32(out, if ipv6 { ipv6_family } else { 2 });
        }
        LinkFraming::LinuxSll => {
            out.extend_from_slice(&u16::from(packet_type).to_be_bytes());
            out.extend_from_slice(&ARPHRD_ETHER.to_be_bytes());
            out.extend_from_slice(&6u16.to_be_bytes());
            out.extend_from_slice(&src_mac);
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(&ethertype.to_be_bytes());
        }
        LinkFraming::LinuxSll2 { interface_index } => {
            out.extend_from_slice(&ethertype.to_be_bytes());
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(&interface_index.to_be_bytes());
            out.extend_from_slice(&ARPHRD_ETHER.to_be_bytes());
            out.push(packet_type);
            out.push(6);
            out.extend_from_slice(&src_mac);
            out.extend_from_slice(&[0, 0]);
        }
        LinkFraming::RawIp => {}
        LinkFraming::RawIpv4 => {
            if ipv6 {
                return Err(invalid("LINKTYPE_IPV4 interface cannot carry IPv6"));
            }
        }
        LinkFraming::RawIpv6 => {
            if !ipv6 {
                return Err(invalid("LINKTYPE_IPV6 interface cannot carry IPv4"));
            }
        }
    }
    Ok(())
}

/// An IPv6 extension header placed between the IPv6 header and TCP (8 bytes of padding
/// options). Ignored on IPv4 flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Ipv6Extension {
    #[default]
    None,
    HopByHop,
    DestinationOptions,
}

/// One end of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub addr: IpAddr,
    pub port: u16,
}

impl Endpoint {
    pub fn new(addr: impl Into<IpAddr>, port: u16) -> Self {
        Endpoint {
            addr: addr.into(),
            port,
        }
    }
}

/// TCP flag bits.
pub mod tcp_flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
}
use tcp_flags::{ACK, FIN, PSH, RST, SYN};

const IPPROTO_TCP: u8 = 6;
const IPPROTO_HOPOPTS: u8 = 0;
const IPPROTO_DSTOPTS: u8 = 60;
const MAX_IP_PAYLOAD: usize = 65_000;

/// Everything of one IP+TCP packet but its payload.
#[derive(Clone, Copy, Debug)]
struct SegmentHead {
    src: Endpoint,
    dst: Endpoint,
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    mss_option: Option<u16>,
    ip_id: u16,
    ipv6_extension: Ipv6Extension,
}

/// Ones'-complement sum of big-endian 16-bit words (an odd trailing byte is padded with zero).
fn sum16(mut acc: u64, bytes: &[u8]) -> u64 {
    let mut pairs = bytes.chunks_exact(2);
    for p in &mut pairs {
        acc += u64::from(u16::from_be_bytes([p[0], p[1]]));
    }
    if let [last] = pairs.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

fn fold_checksum(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

fn put_ip_tcp(out: &mut Vec<u8>, h: &SegmentHead, payload: &[u8]) -> io::Result<()> {
    if payload.len() > MAX_IP_PAYLOAD {
        return Err(invalid("TCP payload too long for one IP packet"));
    }
    let tcp_header_len: usize = if h.mss_option.is_some() { 24 } else { 20 };
    let tcp_len = tcp_header_len + payload.len();
    let mut tcp = [0u8; 24];
    tcp[0..2].copy_from_slice(&h.src.port.to_be_bytes());
    tcp[2..4].copy_from_slice(&h.dst.port.to_be_bytes());
    tcp[4..8].copy_from_slice(&h.seq.to_be_bytes());
    tcp[8..12].copy_from_slice(&h.ack.to_be_bytes());
    tcp[12] = ((tcp_header_len / 4) as u8) << 4;
    tcp[13] = h.flags;
    tcp[14..16].copy_from_slice(&h.window.to_be_bytes());
    if let Some(mss) = h.mss_option {
        tcp[20] = 2;
        tcp[21] = 4;
        tcp[22..24].copy_from_slice(&mss.to_be_bytes());
    }
    let tcp = &mut tcp[..tcp_header_len];
    let pseudo = match (h.src.addr, h.dst.addr) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = (20 + tcp_len) as u16;
            let mut ip = [0u8; 20];
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&total.to_be_bytes());
            ip[4..6].copy_from_slice(&h.ip_id.to_be_bytes());
            ip[6] = 0x40; // don't fragment
            ip[8] = 64;
            ip[9] = IPPROTO_TCP;
            ip[12..16].copy_from_slice(&s.octets());
            ip[16..20].copy_from_slice(&d.octets());
            let ck = fold_checksum(sum16(0, &ip));
            ip[10..12].copy_from_slice(&ck.to_be_bytes());
            out.extend_from_slice(&ip);
            let mut acc = sum16(0, &s.octets());
            acc = sum16(acc, &d.octets());
            acc + u64::from(IPPROTO_TCP) + tcp_len as u64
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let ext = match h.ipv6_extension {
                Ipv6Extension::None => None,
                Ipv6Extension::HopByHop => Some(IPPROTO_HOPOPTS),
                Ipv6Extension::DestinationOptions => Some(IPPROTO_DSTOPTS),
            };
            let ext_len = if ext.is_some() { 8 } else { 0 };
            let mut ip = [0u8; 40];
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&((ext_len + tcp_len) as u16).to_be_bytes());
            ip[6] = ext.unwrap_or(IPPROTO_TCP);
            ip[7] = 64;
            ip[8..24].copy_from_slice(&s.octets());
            ip[24..40].copy_from_slice(&d.octets());
            out.extend_from_slice(&ip);
            if ext.is_some() {
                // Next header TCP, length 0 (8 bytes), one PadN option filling the rest.
                out.extend_from_slice(&[IPPROTO_TCP, 0, 1, 4, 0, 0, 0, 0]);
            }
            let mut acc = sum16(0, &s.octets());
            acc = sum16(acc, &d.octets());
            acc + u64::from(IPPROTO_TCP) + tcp_len as u64
        }
        _ => return Err(invalid("client and server of a flow differ in IP version")),
    };
    let mut acc = sum16(pseudo, tcp);
    acc = sum16(acc, payload);
    let ck = fold_checksum(acc);
    tcp[16..18].copy_from_slice(&ck.to_be_bytes());
    out.extend_from_slice(tcp);
    out.extend_from_slice(payload);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Capture: the timeline packets are written on
// ---------------------------------------------------------------------------------------------

/// A capture being written: the writer, the framing of each interface of the current section,
/// a clock that advances a fixed step per packet, and the frame and connection counters.
pub struct Capture<W: PacketWriter> {
    writer: W,
    interfaces: Vec<LinkFraming>,
    clock_ns: u64,
    step_ns: u64,
    frames: u64,
    streams: u64,
    frame_buf: Vec<u8>,
}

impl<W: PacketWriter> Capture<W> {
    /// `start_ns`: time of the first packet; `step_ns`: time between consecutive packets.
    pub fn new(writer: W, start_ns: u64, step_ns: u64) -> Self {
        Capture {
            writer,
            interfaces: Vec::new(),
            clock_ns: start_ns,
            step_ns,
            frames: 0,
            streams: 0,
            frame_buf: Vec::with_capacity(2048),
        }
    }

    /// Declares an interface in the writer; flows name it by the returned id.
    pub fn add_interface(
        &mut self,
        framing: LinkFraming,
        resolution: TsResolution,
    ) -> io::Result<u32> {
        let id = self.writer.add_interface(framing.link_type(), resolution)?;
        let slot = id as usize;
        if slot == self.interfaces.len() {
            self.interfaces.push(framing);
        } else if self.interfaces.get(slot) != Some(&framing) {
            return Err(invalid("interface redeclared with another framing"));
        }
        Ok(id)
    }

    /// Moves the clock forward (a pause in the traffic).
    pub fn advance(&mut self, ns: u64) {
        self.clock_ns = self.clock_ns.saturating_add(ns);
    }

    pub fn now_ns(&self) -> u64 {
        self.clock_ns
    }

    /// Frames written so far (the number of the last one).
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Connections that have put a packet in the capture so far.
    pub fn connections(&self) -> u64 {
        self.streams
    }

    pub fn writer_mut(&mut self) -> &mut W {
        &mut self.writer
    }

    pub fn into_writer(self) -> W {
        self.writer
    }

    fn next_stream_index(&mut self) -> u64 {
        let i = self.streams;
        self.streams += 1;
        i
    }

    fn emit(
        &mut self,
        interface: u32,
        from: Side,
        head: &SegmentHead,
        payload: &[u8],
    ) -> io::Result<FrameStamp> {
        let Some(&framing) = self.interfaces.get(interface as usize) else {
            return Err(invalid("flow on an interface the capture does not declare"));
        };
        self.frame_buf.clear();
        let ipv6 = head.src.addr.is_ipv6();
        put_link_header(
            &mut self.frame_buf,
            framing,
            self.writer.byte_order(),
            from,
            ipv6,
        )?;
        put_ip_tcp(&mut self.frame_buf, head, payload)?;
        let time_ns = self
            .writer
            .write_packet(interface, self.clock_ns, &self.frame_buf)?;
        self.frames += 1;
        self.clock_ns = self.clock_ns.saturating_add(self.step_ns);
        Ok(FrameStamp {
            frame: self.frames,
            time_ns,
        })
    }
}

impl<W: Write> Capture<PcapngWriter<W>> {
    /// Starts a new pcapng section; interfaces must be declared again (ids restart at 0).
    /// Frame numbers and connection indices go on across sections.
    pub fn new_section(&mut self, order: ByteOrder) -> io::Result<()> {
        self.writer.new_section(order)?;
        self.interfaces.clear();
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// TCP flow simulator
// ---------------------------------------------------------------------------------------------

/// What happens to the segments of one write between the sender and the capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Fate {
    /// Captured once, in order.
    #[default]
    Deliver,
    /// Delivered to the receiver but missing from the capture (its ACK still covers it).
    Drop,
    /// Captured twice: the original and an identical retransmission.
    Duplicate,
    /// Captured as its first half, then a retransmission from its first quarter to its end,
    /// overlapping bytes already seen.
    OverlapRetransmit,
    /// The write's first segment is captured after the segment that follows it (the write's
    /// second segment, or else the next segment the same side sends): reordering.
    SwapWithNext,
}

/// Parameters of one simulated connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowSpec {
    pub interface: u32,
    pub client: Endpoint,
    pub server: Endpoint,
    pub client_isn: u32,
    pub server_isn: u32,
    /// Largest payload per segment; at least 8.
    pub mss: u16,
    pub window: u16,
    pub ipv6_extension: Ipv6Extension,
}

impl FlowSpec {
    pub fn new(interface: u32, client: Endpoint, server: Endpoint) -> Self {
        FlowSpec {
            interface,
            client,
            server,
            client_isn: 0x1000_0000,
            server_isn: 0x7000_0000,
            mss: 1460,
            window: 64_240,
            ipv6_extension: Ipv6Extension::None,
        }
    }
}

/// A request to learn which frame first carried a given byte of a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchId(usize);

#[derive(Clone, Copy, Debug)]
struct Watch {
    side: Side,
    offset: u64,
    hit: Option<FrameStamp>,
}

#[derive(Clone, Debug)]
struct HeldSegment {
    seq: u32,
    offset: u64,
    psh: bool,
    bytes: Vec<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FlowPhase {
    Fresh,
    Established,
    Closed,
}

const RETRANSMIT_DELAY_NS: u64 = 200_000_000;

/// One TCP connection: sequence numbers, acknowledgments, and the capture-side knobs.
pub struct TcpFlow {
    spec: FlowSpec,
    next_seq: [u32; 2],
    sent: [u64; 2],
    ip_id: [u16; 2],
    held: [Vec<HeldSegment>; 2],
    phase: FlowPhase,
    stream_index: Option<u64>,
    watches: Vec<Watch>,
}

impl TcpFlow {
    pub fn new(spec: FlowSpec) -> io::Result<Self> {
        if spec.mss < 8 {
            return Err(invalid("MSS below 8"));
        }
        if spec.client.addr.is_ipv6() != spec.server.addr.is_ipv6() {
            return Err(invalid("client and server of a flow differ in IP version"));
        }
        Ok(TcpFlow {
            next_seq: [spec.client_isn, spec.server_isn],
            sent: [0, 0],
            // Distinct per connection, like a real stack's IP id counters.
            ip_id: [
                (spec.client_isn >> 16) as u16,
                (spec.server_isn >> 16) as u16,
            ],
            held: [Vec::new(), Vec::new()],
            phase: FlowPhase::Fresh,
            stream_index: None,
            watches: Vec::new(),
            spec,
        })
    }

    pub fn spec(&self) -> &FlowSpec {
        &self.spec
    }

    /// Wireshark-style `tcp.stream` index, once the connection has a packet in the capture.
    pub fn stream_index(&self) -> Option<u64> {
        self.stream_index
    }

    /// Sequence number of the next byte `side` sends.
    pub fn next_seq(&self, side: Side) -> u32 {
        self.next_seq[side.index()]
    }

    /// Payload bytes `side` has sent so far (captured or not).
    pub fn sent_bytes(&self, side: Side) -> u64 {
        self.sent[side.index()]
    }

    pub fn is_established(&self) -> bool {
        self.phase == FlowPhase::Established
    }

    /// SYN, SYN-ACK, ACK.
    pub fn handshake<W: PacketWriter>(&mut self, cap: &mut Capture<W>) -> io::Result<()> {
        if self.phase != FlowPhase::Fresh {
            return Err(invalid("handshake on a connection already opened"));
        }
        let c = self.spec.client_isn;
        self.emit(cap, Side::Client, SYN, c, &[], 0)?;
        self.next_seq[0] = c.wrapping_add(1);
        let s = self.spec.server_isn;
        self.emit(cap, Side::Server, SYN | ACK, s, &[], 0)?;
        self.next_seq[1] = s.wrapping_add(1);
        self.emit(cap, Side::Client, ACK, self.next_seq[0], &[], 0)?;
        self.phase = FlowPhase::Established;
        Ok(())
    }

    /// The connection was opened before the capture began: no handshake appears, and the
    /// first bytes either side sends have sequence number ISN + 1.
    pub fn assume_established(&mut self) -> io::Result<()> {
        if self.phase != FlowPhase::Fresh {
            return Err(invalid("connection already opened"));
        }
        self.next_seq = [
            self.spec.client_isn.wrapping_add(1),
            self.spec.server_isn.wrapping_add(1),
        ];
        self.phase = FlowPhase::Established;
        Ok(())
    }

    /// `from` sends `bytes` in segments of at most MSS; the receiver then acknowledges what it
    /// received. `Drop`, `Duplicate` and `OverlapRetransmit` apply to every segment of the
    /// write, `SwapWithNext` to its first.
    pub fn send<W: PacketWriter>(
        &mut self,
        cap: &mut Capture<W>,
        from: Side,
        bytes: &[u8],
        fate: Fate,
    ) -> io::Result<()> {
        if self.phase != FlowPhase::Established {
            return Err(invalid("data on a connection that is not established"));
        }
        let i = from.index();
        let mss = usize::from(self.spec.mss);
        let count = bytes.len().div_ceil(mss);
        for (k, chunk) in bytes.chunks(mss).enumerate() {
            let psh = k + 1 == count;
            let flags = if psh { ACK | PSH } else { ACK };
            let seq = self.next_seq[i];
            let offset = self.sent[i];
            // A chunk is at most MSS (u16), so the casts below are exact.
            self.next_seq[i] = seq.wrapping_add(chunk.len() as u32);
            self.sent[i] = offset.saturating_add(chunk.len() as u64);
            match fate {
                Fate::SwapWithNext if k == 0 => self.held[i].push(HeldSegment {
                    seq,
                    offset,
                    psh,
                    bytes: chunk.to_vec(),
                }),
                Fate::Deliver | Fate::SwapWithNext => {
                    self.emit(cap, from, flags, seq, chunk, offset)?;
                    self.release_held(cap, from)?;
                }
                Fate::Drop => {}
                Fate::Duplicate => {
                    self.emit(cap, from, flags, seq, chunk, offset)?;
                    cap.advance(RETRANSMIT_DELAY_NS);
                    self.emit(cap, from, flags, seq, chunk, offset)?;
                    self.release_held(cap, from)?;
                }
                Fate::OverlapRetransmit => {
                    let half = chunk.len() / 2;
                    let quarter = chunk.len() / 4;
                    if quarter == 0 {
                        self.emit(cap, from, flags, seq, chunk, offset)?;
                    } else {
                        self.emit(cap, from, ACK, seq, &chunk[..half], offset)?;
                        cap.advance(RETRANSMIT_DELAY_NS);
                        let rseq = seq.wrapping_add(quarter as u32);
                        let roff = offset.saturating_add(quarter as u64);
                        self.emit(cap, from, flags, rseq, &chunk[quarter..], roff)?;
                    }
                    self.release_held(cap, from)?;
                }
            }
        }
        if count > 0 {
            let receiver = from.other();
            let seq = self.next_seq[receiver.index()];
            self.emit(cap, receiver, ACK, seq, &[], 0)?;
        }
        Ok(())
    }

    /// Like [`TcpFlow::send`], and remembers which frame first carries the first byte.
    pub fn send_watched<W: PacketWriter>(
        &mut self,
        cap: &mut Capture<W>,
        from: Side,
        bytes: &[u8],
        fate: Fate,
    ) -> io::Result<WatchId> {
        self.send_watched_at(cap, from, bytes, fate, 0)
    }

    /// Like [`TcpFlow::send`], and remembers which frame first carries byte `at` of `bytes`
    /// (the end of a TLS record, say, where a reader can first read what it holds).
    pub fn send_watched_at<W: PacketWriter>(
        &mut self,
        cap: &mut Capture<W>,
        from: Side,
        bytes: &[u8],
        fate: Fate,
        at: usize,
    ) -> io::Result<WatchId> {
        let id = WatchId(self.watches.len());
        self.watches.push(Watch {
            side: from,
            offset: self.sent[from.index()].saturating_add(at as u64),
            hit: None,
        });
        self.send(cap, from, bytes, fate)?;
        Ok(id)
    }

    /// The frame that first carried the watched byte, once one has.
    pub fn watch_hit(&self, id: WatchId) -> Option<FrameStamp> {
        self.watches.get(id.0).and_then(|w| w.hit)
    }

    /// `by` sends FIN, the peer answers FIN-ACK, `by` acknowledges.
    pub fn close<W: PacketWriter>(&mut self, cap: &mut Capture<W>, by: Side) -> io::Result<()> {
        if self.phase != FlowPhase::Established {
            return Err(invalid("close of a connection that is not established"));
        }
        self.flush_held(cap)?;
        let peer = by.other();
        let s = self.next_seq[by.index()];
        self.emit(cap, by, FIN | ACK, s, &[], 0)?;
        self.next_seq[by.index()] = s.wrapping_add(1);
        let t = self.next_seq[peer.index()];
        self.emit(cap, peer, FIN | ACK, t, &[], 0)?;
        self.next_seq[peer.index()] = t.wrapping_add(1);
        self.emit(cap, by, ACK, self.next_seq[by.index()], &[], 0)?;
        self.phase = FlowPhase::Closed;
        Ok(())
    }

    /// `by` aborts the connection with RST.
    pub fn reset<W: PacketWriter>(&mut self, cap: &mut Capture<W>, by: Side) -> io::Result<()> {
        if self.phase != FlowPhase::Established {
            return Err(invalid("reset of a connection that is not established"));
        }
        self.flush_held(cap)?;
        let s = self.next_seq[by.index()];
        self.emit(cap, by, RST | ACK, s, &[], 0)?;
        self.phase = FlowPhase::Closed;
        Ok(())
    }

    /// Writes segments still held back for reordering (at close, or when the capture ends).
    pub fn flush_held<W: PacketWriter>(&mut self, cap: &mut Capture<W>) -> io::Result<()> {
        self.release_held(cap, Side::Client)?;
        self.release_held(cap, Side::Server)
    }

    fn release_held<W: PacketWriter>(
        &mut self,
        cap: &mut Capture<W>,
        side: Side,
    ) -> io::Result<()> {
        if self.held[side.index()].is_empty() {
            return Ok(());
        }
        let held = std::mem::take(&mut self.held[side.index()]);
        for h in &held {
            let flags = if h.psh { ACK | PSH } else { ACK };
            self.emit(cap, side, flags, h.seq, &h.bytes, h.offset)?;
        }
        Ok(())
    }

    /// What `from` acknowledges: everything the peer sent, except from the first segment still
    /// held back in the network (a receiver cannot acknowledge past a hole).
    fn ack_of(&self, from: Side) -> u32 {
        let peer = from.other().index();
        self.held[peer]
            .first()
            .map_or(self.next_seq[peer], |h| h.seq)
    }

    fn emit<W: PacketWriter>(
        &mut self,
        cap: &mut Capture<W>,
        from: Side,
        flags: u8,
        seq: u32,
        payload: &[u8],
        offset: u64,
    ) -> io::Result<FrameStamp> {
        let (src, dst) = match from {
            Side::Client => (self.spec.client, self.spec.server),
            Side::Server => (self.spec.server, self.spec.client),
        };
        let i = from.index();
        let ip_id = self.ip_id[i];
        self.ip_id[i] = ip_id.wrapping_add(1);
        let head = SegmentHead {
            src,
            dst,
            seq,
            ack: if flags & ACK != 0 {
                self.ack_of(from)
            } else {
                0
            },
            flags,
            window: self.spec.window,
            mss_option: (flags & SYN != 0).then_some(self.spec.mss),
            ip_id,
            ipv6_extension: self.spec.ipv6_extension,
        };
        let stamp = cap.emit(self.spec.interface, from, &head, payload)?;
        if self.stream_index.is_none() {
            self.stream_index = Some(cap.next_stream_index());
        }
        if !payload.is_empty() {
            let end = offset.saturating_add(payload.len() as u64);
            for w in &mut self.watches {
                if w.hit.is_none() && w.side == from && (offset..end).contains(&w.offset) {
                    w.hit = Some(stamp);
                }
            }
        }
        Ok(stamp)
    }
}

// ---------------------------------------------------------------------------------------------
// gzip, written by hand so the stream can be flushed after every event
// ---------------------------------------------------------------------------------------------

const CRC32_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

fn crc32_update(crc: u32, data: &[u8]) -> u32 {
    let mut c = !crc;
    for &b in data {
        c = CRC32_TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// Deflate bits, least significant first; Huffman codes go most significant bit first.
struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    acc: u32,
    bits: u32,
}

impl<'a> BitWriter<'a> {
    fn new(out: &'a mut Vec<u8>) -> Self {
        BitWriter {
            out,
            acc: 0,
            bits: 0,
        }
    }
    fn put(&mut self, value: u32, count: u32) {
        self.acc |= value << self.bits;
        self.bits += count;
        while self.bits >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.bits -= 8;
        }
    }
    fn put_code(&mut self, code: u32, len: u32) {
        let reversed = code.reverse_bits() >> (32 - len);
        self.put(reversed, len);
    }
    fn literal(&mut self, b: u8) {
        if b <= 143 {
            self.put_code(0x30 + u32::from(b), 8);
        } else {
            self.put_code(0x190 + u32::from(b - 144), 9);
        }
    }
    fn end_of_block(&mut self) {
        self.put_code(0, 7);
    }
    fn align(&mut self) {
        if self.bits > 0 {
            self.out.push(self.acc as u8);
            self.acc = 0;
            self.bits = 0;
        }
    }
}

const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];

/// A gzip member written in pieces, each ending with a sync flush, the way a server that
/// flushes after every event writes it: the bytes so far always decode to the events so far.
#[derive(Clone, Debug, Default)]
pub struct GzipStream {
    crc: u32,
    size: u32,
    header_written: bool,
}

impl GzipStream {
    pub fn new() -> Self {
        GzipStream::default()
    }

    fn header(&mut self, out: &mut Vec<u8>) {
        if !self.header_written {
            out.extend_from_slice(&GZIP_HEADER);
            self.header_written = true;
        }
    }

    /// Appends `data` as one fixed-Huffman block of literals, then a sync flush.
    pub fn piece(&mut self, data: &[u8], out: &mut Vec<u8>) {
        self.header(out);
        self.crc = crc32_update(self.crc, data);
        self.size = self.size.wrapping_add(data.len() as u32);
        let mut bw = BitWriter::new(out);
        bw.put(0, 1); // not final
        bw.put(1, 2); // fixed Huffman
        for &b in data {
            bw.literal(b);
        }
        bw.end_of_block();
        bw.put(0, 1); // sync flush: an empty stored block
        bw.put(0, 2);
        bw.align();
        out.extend_from_slice(&[0, 0, 0xff, 0xff]);
    }

    /// Appends the final empty block and the trailer (CRC-32 and length).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        self.header(out);
        let mut bw = BitWriter::new(out);
        bw.put(1, 1);
        bw.put(1, 2);
        bw.end_of_block();
        bw.align();
        out.extend_from_slice(&self.crc.to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
    }
}

// ---------------------------------------------------------------------------------------------
// Expected findings
// ---------------------------------------------------------------------------------------------

/// The verdict the analyzer must give a resume, as derived from a scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExpectedVerdict {
    Correct,
    GapSkipped,
    Replayed,
    Rejected,
    Empty,
    Unverifiable,
    CaptureIncomplete,
}

impl ExpectedVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            ExpectedVerdict::Correct => "correct",
            ExpectedVerdict::GapSkipped => "gap_skipped",
            ExpectedVerdict::Replayed => "replayed",
            ExpectedVerdict::Rejected => "rejected",
            ExpectedVerdict::Empty => "empty",
            ExpectedVerdict::Unverifiable => "unverifiable",
            ExpectedVerdict::CaptureIncomplete => "capture_incomplete",
        }
    }
}

/// True for a non-empty run of ASCII digits (of any length).
pub fn is_integer_id(id: &str) -> bool {
    !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())
}

/// Compares two integer ids by value, without parsing (they may exceed every integer type).
fn cmp_decimal(a: &str, b: &str) -> Ordering {
    let a = a.trim_start_matches('0');
    let b = b.trim_start_matches('0');
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// `n + 1` for a decimal string.
fn succ_decimal(n: &str) -> String {
    let mut digits: Vec<u8> = n.trim_start_matches('0').bytes().collect();
    let mut i = digits.len();
    loop {
        if i == 0 {
            digits.insert(0, b'1');
            break;
        }
        i -= 1;
        if digits[i] == b'9' {
            digits[i] = b'0';
        } else {
            digits[i] += 1;
            break;
        }
    }
    String::from_utf8(digits).unwrap_or_default()
}

/// The verdict for a resume whose first event id is known, by the seed's decision boundary.
pub fn classify_ids(last_event_id: &str, first_event_id: &str) -> ExpectedVerdict {
    if !is_integer_id(last_event_id) || !is_integer_id(first_event_id) {
        return ExpectedVerdict::Unverifiable;
    }
    match cmp_decimal(first_event_id, &succ_decimal(last_event_id)) {
        Ordering::Equal => ExpectedVerdict::Correct,
        Ordering::Greater => ExpectedVerdict::GapSkipped,
        Ordering::Less => ExpectedVerdict::Replayed,
    }
}

/// Verdict and first event id a resume must get, from its definition alone.
///
/// A drop at or before the first id (response head, or any event up to the first one with an
/// id) leaves the capture without the bytes that decide, as does a capture that ends before
/// any id arrived; a status response is a refusal (it must be non-2xx); a stream that ends on
/// the wire without an id is empty, unless the client reset it first.
pub fn expected_outcome(resume: &Resume) -> (ExpectedVerdict, Option<String>) {
    let stream = match &resume.response {
        ResumeResponse::CaptureEnds => return (ExpectedVerdict::CaptureIncomplete, None),
        ResumeResponse::Status(_) => return (ExpectedVerdict::Rejected, None),
        ResumeResponse::Stream(s) => s,
    };
    if stream.head_fate == Fate::Drop {
        return (ExpectedVerdict::CaptureIncomplete, None);
    }
    for ev in &stream.events {
        if ev.fate == Fate::Drop {
            return (ExpectedVerdict::CaptureIncomplete, None);
        }
        if let Some(id) = &ev.id {
            return (classify_ids(&resume.last_event_id, id), Some(id.clone()));
        }
    }
    match stream.close {
        StreamClose::Open => (ExpectedVerdict::CaptureIncomplete, None),
        // The client hung up first: nothing shows what the server would have sent.
        StreamClose::ClientReset => (ExpectedVerdict::Unverifiable, None),
        _ => (ExpectedVerdict::Empty, None),
    }
}

/// One line of a `.expect.jsonl` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectedResume {
    /// `Mcp-Session-Id` the resume request carried.
    pub session_id: Option<String>,
    pub verdict: ExpectedVerdict,
    pub last_event_id: String,
    pub first_event_id: Option<String>,
    pub tcp_stream: u64,
    pub request_frame: u64,
    /// Capture time of `request_frame` as a reader recovers it (not written out).
    pub request_time_ns: u64,
}

fn put_json_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 => {
                // Writing into a Vec cannot fail.
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

fn put_json_opt(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => put_json_string(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

impl ExpectedResume {
    /// The record as one JSON line, keys in a fixed order.
    pub fn to_json_line(&self) -> String {
        let mut out = Vec::with_capacity(160);
        out.extend_from_slice(b"{\"session_id\":");
        put_json_opt(&mut out, self.session_id.as_deref());
        out.extend_from_slice(b",\"verdict\":");
        put_json_string(&mut out, self.verdict.as_str());
        out.extend_from_slice(b",\"last_event_id\":");
        put_json_string(&mut out, &self.last_event_id);
        out.extend_from_slice(b",\"first_event_id\":");
        put_json_opt(&mut out, self.first_event_id.as_deref());
        let _ = writeln!(
            out,
            ",\"tcp_stream\":{},\"request_frame\":{}}}",
            self.tcp_stream, self.request_frame
        );
        String::from_utf8(out).unwrap_or_default()
    }
}

/// Writes records as JSON Lines.
pub fn write_expectations<W: Write>(out: &mut W, records: &[ExpectedResume]) -> io::Result<()> {
    for r in records {
        out.write_all(r.to_json_line().as_bytes())?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// MCP scenario layer
// ---------------------------------------------------------------------------------------------

/// How header names are spelled on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HeaderCase {
    /// `last-event-id`, `mcp-session-id`: what the Python client and uvicorn send.
    #[default]
    Lower,
    /// `Last-Event-ID`, `Mcp-Session-Id`.
    Canonical,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LineEnd {
    #[default]
    Lf,
    CrLf,
}

/// Where an `event: message` line goes in each non-priming event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum EventField {
    #[default]
    Omit,
    BeforeId,
    AfterId,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SseStyle {
    pub line_end: LineEnd,
    pub event_field: EventField,
}

/// One SSE event of a stream. Non-priming events carry a `notifications/progress` message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    pub id: Option<String>,
    /// An empty `data:` (the spec's priming event) instead of a message.
    pub priming: bool,
    /// What happens to the chunk carrying this event.
    pub fate: Fate,
}

impl SseEvent {
    pub fn with_id(id: impl Into<String>) -> Self {
        SseEvent {
            id: Some(id.into()),
            priming: false,
            fate: Fate::Deliver,
        }
    }
    pub fn priming(id: impl Into<String>) -> Self {
        SseEvent {
            id: Some(id.into()),
            priming: true,
            fate: Fate::Deliver,
        }
    }
    pub fn without_id() -> Self {
        SseEvent {
            id: None,
            priming: false,
            fate: Fate::Deliver,
        }
    }
    pub fn fate(mut self, fate: Fate) -> Self {
        self.fate = fate;
        self
    }
}

/// How a `200 text/event-stream` response body ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamClose {
    /// The last chunk (`0\r\n\r\n`); the connection stays open for more requests.
    TerminalChunk,
    /// The server closes the connection without a last chunk.
    ServerFin,
    /// The client aborts the connection with RST.
    ClientReset,
    /// Nothing more is captured on the connection.
    Open,
}

/// A `200 OK`, `text/event-stream`, chunked response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventStream {
    pub style: SseStyle,
    pub events: Vec<SseEvent>,
    /// `Content-Encoding: gzip`, flushed after every write.
    pub gzip: bool,
    pub close: StreamClose,
    /// What happens to the segment(s) carrying the response head.
    pub head_fate: Fate,
    /// Delivered events a server write carries, as a loaded server's buffered writes put
    /// several in one chunk (and so in one segment); 0 and 1 write each alone. An event with
    /// another fate is always written alone.
    pub per_write: usize,
}

impl EventStream {
    /// A stream of events carrying these ids, in order.
    pub fn with_ids<S: AsRef<str>>(ids: &[S], close: StreamClose) -> Self {
        EventStream {
            style: SseStyle::default(),
            events: ids
                .iter()
                .map(|id| SseEvent::with_id(id.as_ref()))
                .collect(),
            gzip: false,
            close,
            head_fate: Fate::Deliver,
            per_write: 1,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResumeResponse {
    Stream(EventStream),
    /// A refusal with this non-2xx status and a small JSON-RPC error body.
    Status(u16),
    /// The capture ends before any byte of the response.
    CaptureEnds,
}

/// A GET with `Last-Event-ID`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resume {
    pub last_event_id: String,
    /// Send the session's `Mcp-Session-Id` (when it has one).
    pub send_session_id: bool,
    /// What happens to the request's segments; never `Drop` (the request must be seen).
    pub request_fate: Fate,
    pub response: ResumeResponse,
}

impl Resume {
    pub fn new(last_event_id: impl Into<String>, response: ResumeResponse) -> Self {
        Resume {
            last_event_id: last_event_id.into(),
            send_session_id: true,
            request_fate: Fate::Deliver,
            response,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExchangeKind {
    /// `initialize` POST answered by a chunked event stream: an optional priming event, then
    /// the result (with an optional id), then the last chunk.
    Initialize {
        priming_id: Option<String>,
        result_id: Option<String>,
    },
    /// `notifications/initialized` POST answered by `202 Accepted`.
    InitializedNotification,
    Resume(Resume),
    /// `DELETE` of the session, as a client ends it, answered `200 OK`.
    Terminate,
}

/// One request and its response, on connection `conn` of the session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exchange {
    pub conn: usize,
    pub kind: ExchangeKind,
}

/// What ends a connection after its last exchange (unless a resume stream already ended it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnClose {
    ClientFin,
    ServerFin,
    ClientReset,
    LeaveOpen,
}

/// The HTTP version a connection speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub enum HttpVersion {
    #[default]
    Http1,
    /// HTTP/2: with prior knowledge in cleartext (h2c), or by ALPN `h2` under TLS. Each
    /// exchange of the connection is a stream of its own (1, 3, 5, ...).
    Http2,
}

/// TLS around a connection: the suite, and the seed its randoms and secrets derive from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TlsSpec {
    pub suite: TlsSuite,
    pub seed: u64,
}

/// How a connection's exchanges go on the wire. The default is cleartext HTTP/1.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct Wire {
    pub http: HttpVersion,
    pub tls: Option<TlsSpec>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnSpec {
    pub flow: FlowSpec,
    /// `false`: the capture starts mid-connection (no handshake appears: neither TCP's nor
    /// TLS's nor HTTP/2's prefaces, which happened before it began).
    pub handshake: bool,
    pub close: ConnClose,
    pub wire: Wire,
}

impl ConnSpec {
    pub fn new(flow: FlowSpec) -> Self {
        ConnSpec {
            flow,
            handshake: true,
            close: ConnClose::ClientFin,
            wire: Wire::default(),
        }
    }
}

/// One MCP session: its connections and its exchanges in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSpec {
    /// `Mcp-Session-Id` the server assigns and the client sends back.
    pub session_id: Option<String>,
    pub header_case: HeaderCase,
    /// `Host` header value.
    pub host: String,
    pub path: String,
    /// Style of the `initialize` response stream.
    pub style: SseStyle,
    pub connections: Vec<ConnSpec>,
    pub exchanges: Vec<Exchange>,
    /// Sent as `params.message` of every `notifications/progress` event (none by default):
    /// real servers describe the work there, which sets the size of an event.
    pub progress_message: Option<String>,
}

impl SessionSpec {
    /// Defaults: lowercase names, LF events without `event:`, path `/mcp`, `Host` naming the
    /// first connection's server.
    pub fn new(session_id: Option<&str>, connections: Vec<ConnSpec>) -> Self {
        let host = match connections.first().map(|c| c.flow.server) {
            Some(Endpoint {
                addr: IpAddr::V6(a),
                port,
            }) => format!("[{a}]:{port}"),
            Some(Endpoint { addr, port }) => format!("{addr}:{port}"),
            None => "localhost".to_string(),
        };
        SessionSpec {
            session_id: session_id.map(str::to_string),
            header_case: HeaderCase::Lower,
            host,
            path: "/mcp".to_string(),
            style: SseStyle::default(),
            connections,
            exchanges: Vec::new(),
            progress_message: None,
        }
    }

    /// Puts every connection of the session on this wire.
    pub fn wire(mut self, wire: Wire) -> Self {
        for c in &mut self.connections {
            c.wire = wire;
        }
        self
    }

    pub fn exchange(mut self, conn: usize, kind: ExchangeKind) -> Self {
        self.exchanges.push(Exchange { conn, kind });
        self
    }
}

/// Order in which sessions' steps reach the capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interleave {
    /// One session after the other.
    Sequential,
    /// One step of each session in turn: concurrent connections.
    RoundRobin,
}

const EXCHANGE_GAP_NS: u64 = 150_000_000;
const SERVER_THINK_NS: u64 = 3_000_000;
const EVENT_GAP_NS: u64 = 40_000_000;
const PROTOCOL_VERSION: &str = "2025-11-25";

#[derive(Clone, Debug)]
enum Step {
    Open {
        conn: usize,
        handshake: bool,
        /// TLS `server_name`: the session's host, unless it is an address.
        sni: Option<String>,
    },
    Send {
        conn: usize,
        from: Side,
        msg: Msg,
        /// The exchange is the connection's `stream`-th (HTTP/2 stream `2 * stream + 1`).
        stream: u32,
        fate: Fate,
        /// Index of the resume whose request this is.
        resume: Option<usize>,
    },
    Close {
        conn: usize,
        by: Side,
    },
    Reset {
        conn: usize,
        by: Side,
    },
    Pause(u64),
}

#[derive(Clone, Debug)]
struct PendingResume {
    conn: usize,
    session_id: Option<String>,
    last_event_id: String,
    verdict: ExpectedVerdict,
    first_event_id: Option<String>,
}

/// Sessions turned into packet steps, ready to be written to a capture any number of times.
///
/// A scenario holds its sessions' bytes; a large capture is written as a series of scenarios
/// run on one [`Capture`], whose frame numbers, connection indices and clock carry on from one
/// run to the next.
#[derive(Clone, Debug, Default)]
pub struct Scenario {
    conns: Vec<ConnSpec>,
    scripts: Vec<Vec<Step>>,
    resumes: Vec<PendingResume>,
    progress_tokens: u32,
}

/// HTTP message head under construction, spelling header names per [`HeaderCase`].
struct Head {
    buf: Vec<u8>,
    case: HeaderCase,
}

impl Head {
    fn new(first_line: &str, case: HeaderCase) -> Self {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(first_line.as_bytes());
        buf.extend_from_slice(b"\r\n");
        Head { buf, case }
    }
    fn header(&mut self, canonical: &str, value: &str) {
        match self.case {
            HeaderCase::Lower => self
                .buf
                .extend(canonical.bytes().map(|b| b.to_ascii_lowercase())),
            HeaderCase::Canonical => self.buf.extend_from_slice(canonical.as_bytes()),
        }
        self.buf.extend_from_slice(b": ");
        self.buf.extend_from_slice(value.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }
    fn finish(mut self) -> Vec<u8> {
        self.buf.extend_from_slice(b"\r\n");
        self.buf
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        202 => "Accepted",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        410 => "Gone",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

fn put_sse_event(out: &mut Vec<u8>, style: SseStyle, id: Option<&str>, data: Option<&str>) {
    let eol: &[u8] = match style.line_end {
        LineEnd::Lf => b"\n",
        LineEnd::CrLf => b"\r\n",
    };
    let with_type = data.is_some();
    if with_type && style.event_field == EventField::BeforeId {
        out.extend_from_slice(b"event: message");
        out.extend_from_slice(eol);
    }
    if let Some(id) = id {
        out.extend_from_slice(b"id: ");
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(eol);
    }
    if with_type && style.event_field == EventField::AfterId {
        out.extend_from_slice(b"event: message");
        out.extend_from_slice(eol);
    }
    match data {
        Some(d) => {
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(d.as_bytes());
        }
        None => out.extend_from_slice(b"data:"),
    }
    out.extend_from_slice(eol);
    out.extend_from_slice(eol);
}

fn chunk(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 12);
    let _ = write!(out, "{:x}\r\n", body.len());
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
    out
}

const TERMINAL_CHUNK: &[u8] = b"0\r\n\r\n";

#[derive(Clone, Copy, PartialEq, Eq)]
enum ConnState {
    Unopened,
    Open,
    Ended,
}

/// One HTTP message, or a piece of a chunked body, as the scenario defines it; rendered as
/// HTTP/1.1 or HTTP/2 bytes (and sealed in TLS records) only when the capture is written.
#[derive(Clone, Debug)]
enum Msg {
    /// A request: `Host` first among the headers (HTTP/2 makes it `:authority`).
    Request {
        method: &'static str,
        path: String,
        case: HeaderCase,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
    },
    /// A response head, and its whole body unless the headers say `Transfer-Encoding:
    /// chunked` (then [`Msg::Chunk`]s and a [`Msg::LastChunk`] follow).
    Response {
        status: u16,
        case: HeaderCase,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
    },
    /// One chunk of a chunked body (HTTP/2: one DATA frame, or more past 16 KiB).
    Chunk(Vec<u8>),
    /// The end of a chunked body, after a last chunk of these bytes when there are any.
    LastChunk(Vec<u8>),
}

/// Headers that name HTTP/1.1 connection handling: not sent in HTTP/2 (RFC 9113 §8.2.2).
fn is_connection_specific(name: &str) -> bool {
    name.eq_ignore_ascii_case("connection")
        || name.eq_ignore_ascii_case("transfer-encoding")
        || name.eq_ignore_ascii_case("keep-alive")
}

impl Msg {
    fn chunked(headers: &[(&'static str, String)]) -> bool {
        headers
            .iter()
            .any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v == "chunked")
    }

    /// Appends the message as HTTP/1.1 bytes.
    fn render_http1(&self, out: &mut Vec<u8>) {
        match self {
            Msg::Request {
                method,
                path,
                case,
                headers,
                body,
            } => {
                let mut h = Head::new(&format!("{method} {path} HTTP/1.1"), *case);
                for (n, v) in headers {
                    h.header(n, v);
                }
                out.extend_from_slice(&h.finish());
                out.extend_from_slice(body);
            }
            Msg::Response {
                status,
                case,
                headers,
                body,
            } => {
                let mut h = Head::new(
                    &format!("HTTP/1.1 {status} {}", reason_phrase(*status)),
                    *case,
                );
                for (n, v) in headers {
                    h.header(n, v);
                }
                out.extend_from_slice(&h.finish());
                out.extend_from_slice(body);
            }
            Msg::Chunk(body) => out.extend_from_slice(&chunk(body)),
            Msg::LastChunk(tail) => {
                if !tail.is_empty() {
                    out.extend_from_slice(&chunk(tail));
                }
                out.extend_from_slice(TERMINAL_CHUNK);
            }
        }
    }

    /// Appends the message as HTTP/2 frames on `stream`.
    fn render_http2(&self, stream: u32, scheme: &str, out: &mut Vec<u8>) {
        let lower = |headers: &[(&'static str, String)], skip_host: bool| {
            headers
                .iter()
                .filter(|(n, _)| !is_connection_specific(n))
                .filter(|(n, _)| !(skip_host && n.eq_ignore_ascii_case("host")))
                .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
                .collect::<Vec<_>>()
        };
        match self {
            Msg::Request {
                method,
                path,
                headers,
                body,
                ..
            } => {
                let authority = headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case("host"))
                    .map(|(_, v)| v.as_str())
                    .unwrap_or("localhost");
                let rest = lower(headers, true);
                let mut fields: Vec<(&str, &str)> = vec![
                    (":method", method),
                    (":scheme", scheme),
                    (":authority", authority),
                    (":path", path),
                ];
                fields.extend(rest.iter().map(|(n, v)| (n.as_str(), v.as_str())));
                h2::headers(out, stream, &fields, body.is_empty());
                if !body.is_empty() {
                    h2::data(out, stream, body, true);
                }
            }
            Msg::Response {
                status,
                headers,
                body,
                ..
            } => {
                let chunked = Msg::chunked(headers);
                let status = status.to_string();
                let rest = lower(headers, false);
                let mut fields: Vec<(&str, &str)> = vec![(":status", &status)];
                fields.extend(rest.iter().map(|(n, v)| (n.as_str(), v.as_str())));
                let end = !chunked && body.is_empty();
                h2::headers(out, stream, &fields, end);
                if !body.is_empty() {
                    h2::data(out, stream, body, !chunked);
                }
            }
            Msg::Chunk(body) => h2::data(out, stream, body, false),
            Msg::LastChunk(tail) => h2::data(out, stream, tail, true),
        }
    }
}

/// Builds the steps of one session.
struct SessionScript<'a> {
    spec: &'a SessionSpec,
    base: usize,
    steps: Vec<Step>,
    token: String,
    progress: u32,
    /// The exchange being written is the connection's `stream`-th (0-based).
    stream: u32,
}

impl SessionScript<'_> {
    fn send(&mut self, conn: usize, from: Side, msg: Msg, fate: Fate) {
        self.steps.push(Step::Send {
            conn: self.base + conn,
            from,
            msg,
            stream: self.stream,
            fate,
            resume: None,
        });
    }

    /// The server writes the text of one or more events as one chunk of an event stream,
    /// compressed (and flushed) when the stream is.
    fn write_events(&mut self, conn: usize, gz: &mut Option<GzipStream>, text: &[u8], fate: Fate) {
        let body = match gz {
            Some(g) => {
                let mut packed = Vec::new();
                g.piece(text, &mut packed);
                packed
            }
            None => text.to_vec(),
        };
        self.send(conn, Side::Server, Msg::Chunk(body), fate);
    }

    fn request(&self, method: &'static str, mut headers: Vec<(&'static str, String)>) -> Msg {
        headers.insert(0, ("Host", self.spec.host.clone()));
        Msg::Request {
            method,
            path: self.spec.path.clone(),
            case: self.spec.header_case,
            headers,
            body: Vec::new(),
        }
    }

    fn response(&self, status: u16, headers: Vec<(&'static str, String)>, body: &str) -> Msg {
        Msg::Response {
            status,
            case: self.spec.header_case,
            headers,
            body: body.as_bytes().to_vec(),
        }
    }

    fn post(&self, body: &str, with_session: bool) -> Msg {
        let mut h = vec![
            ("Accept", "application/json, text/event-stream".to_string()),
            ("Content-Type", "application/json".to_string()),
        ];
        if with_session {
            if let Some(sid) = &self.spec.session_id {
                h.push(("Mcp-Session-Id", sid.clone()));
            }
            h.push(("MCP-Protocol-Version", PROTOCOL_VERSION.to_string()));
        }
        h.push(("Content-Length", body.len().to_string()));
        let mut msg = self.request("POST", h);
        if let Msg::Request { body: b, .. } = &mut msg {
            b.extend_from_slice(body.as_bytes());
        }
        msg
    }

    fn stream_head(&self, gzip: bool) -> Msg {
        let mut h = vec![
            ("Cache-Control", "no-cache, no-transform".to_string()),
            ("Connection", "keep-alive".to_string()),
            ("Content-Type", "text/event-stream".to_string()),
        ];
        if let Some(sid) = &self.spec.session_id {
            h.push(("Mcp-Session-Id", sid.clone()));
        }
        if gzip {
            h.push(("Content-Encoding", "gzip".to_string()));
        }
        h.push(("Transfer-Encoding", "chunked".to_string()));
        self.response(200, h, "")
    }

    fn initialize(&mut self, conn: usize, priming_id: Option<&str>, result_id: Option<&str>) {
        let body = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{{\"protocolVersion\":\"{PROTOCOL_VERSION}\",\"capabilities\":{{}},\"clientInfo\":{{\"name\":\"synth-client\",\"version\":\"1.0.0\"}}}}}}"
        );
        let req = self.post(&body, false);
        self.send(conn, Side::Client, req, Fate::Deliver);
        self.steps.push(Step::Pause(SERVER_THINK_NS));
        let head = self.stream_head(false);
        self.send(conn, Side::Server, head, Fate::Deliver);
        let style = self.spec.style;
        if let Some(id) = priming_id {
            let mut ev = Vec::new();
            put_sse_event(&mut ev, style, Some(id), None);
            self.send(conn, Side::Server, Msg::Chunk(ev), Fate::Deliver);
        }
        let result = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{{\"protocolVersion\":\"{PROTOCOL_VERSION}\",\"capabilities\":{{\"tools\":{{\"listChanged\":true}}}},\"serverInfo\":{{\"name\":\"synth-server\",\"version\":\"1.0.0\"}}}}}}"
        );
        let mut ev = Vec::new();
        put_sse_event(&mut ev, style, result_id, Some(&result));
        self.send(conn, Side::Server, Msg::Chunk(ev), Fate::Deliver);
        self.send(
            conn,
            Side::Server,
            Msg::LastChunk(Vec::new()),
            Fate::Deliver,
        );
    }

    fn notification(&mut self, conn: usize) {
        let req = self.post(
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
            true,
        );
        self.send(conn, Side::Client, req, Fate::Deliver);
        self.steps.push(Step::Pause(SERVER_THINK_NS));
        let answer = self.response(202, vec![("Content-Length", "0".to_string())], "");
        self.send(conn, Side::Server, answer, Fate::Deliver);
    }

    fn terminate(&mut self, conn: usize) {
        let mut h = Vec::new();
        if let Some(sid) = &self.spec.session_id {
            h.push(("Mcp-Session-Id", sid.clone()));
        }
        h.push(("MCP-Protocol-Version", PROTOCOL_VERSION.to_string()));
        let req = self.request("DELETE", h);
        self.send(conn, Side::Client, req, Fate::Deliver);
        self.steps.push(Step::Pause(SERVER_THINK_NS));
        let answer = self.response(200, vec![("Content-Length", "0".to_string())], "");
        self.send(conn, Side::Server, answer, Fate::Deliver);
    }

    /// Returns whether the connection is still usable afterwards.
    fn resume(&mut self, conn: usize, r: &Resume, resume_index: usize) -> bool {
        let mut h = vec![("Accept", "text/event-stream".to_string())];
        if r.send_session_id
            && let Some(sid) = &self.spec.session_id
        {
            h.push(("Mcp-Session-Id", sid.clone()));
        }
        h.push(("MCP-Protocol-Version", PROTOCOL_VERSION.to_string()));
        h.push(("Last-Event-ID", r.last_event_id.clone()));
        let msg = self.request("GET", h);
        self.steps.push(Step::Send {
            conn: self.base + conn,
            from: Side::Client,
            msg,
            stream: self.stream,
            fate: r.request_fate,
            resume: Some(resume_index),
        });
        match &r.response {
            ResumeResponse::CaptureEnds => false,
            ResumeResponse::Status(status) => {
                self.steps.push(Step::Pause(SERVER_THINK_NS));
                let body = match status {
                    404 => {
                        "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32001,\"message\":\"Session not found\"}}"
                    }
                    405 => {
                        "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32000,\"message\":\"Method not allowed.\"}}"
                    }
                    _ => {
                        "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32000,\"message\":\"Bad Request: unknown Last-Event-ID\"}}"
                    }
                };
                let mut h = Vec::new();
                if *status == 405 {
                    h.push(("Allow", "POST, DELETE".to_string()));
                }
                h.push(("Content-Type", "application/json".to_string()));
                h.push(("Content-Length", body.len().to_string()));
                let answer = self.response(*status, h, body);
                self.send(conn, Side::Server, answer, Fate::Deliver);
                true
            }
            ResumeResponse::Stream(s) => {
                self.steps.push(Step::Pause(SERVER_THINK_NS));
                let head = self.stream_head(s.gzip);
                self.send(conn, Side::Server, head, s.head_fate);
                let mut gz = s.gzip.then(GzipStream::new);
                let mut text = Vec::new();
                // Delivered events not yet written, and how many.
                let mut pending = Vec::new();
                let mut held = 0;
                for ev in &s.events {
                    self.steps.push(Step::Pause(EVENT_GAP_NS));
                    text.clear();
                    if ev.priming {
                        put_sse_event(&mut text, s.style, ev.id.as_deref(), None);
                    } else {
                        self.progress += 1;
                        let message = match &self.spec.progress_message {
                            Some(m) => {
                                let mut quoted = Vec::with_capacity(m.len() + 2);
                                put_json_string(&mut quoted, m);
                                format!(",\"message\":{}", String::from_utf8_lossy(&quoted))
                            }
                            None => String::new(),
                        };
                        let data = format!(
                            "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":\"{}\",\"progress\":{},\"total\":1000{message}}}}}",
                            self.token, self.progress
                        );
                        put_sse_event(&mut text, s.style, ev.id.as_deref(), Some(&data));
                    }
                    if ev.fate == Fate::Deliver && s.per_write > 1 {
                        pending.extend_from_slice(&text);
                        held += 1;
                        if held == s.per_write {
                            self.write_events(conn, &mut gz, &pending, Fate::Deliver);
                            pending.clear();
                            held = 0;
                        }
                        continue;
                    }
                    if held > 0 {
                        self.write_events(conn, &mut gz, &pending, Fate::Deliver);
                        pending.clear();
                        held = 0;
                    }
                    self.write_events(conn, &mut gz, &text, ev.fate);
                }
                if held > 0 {
                    self.write_events(conn, &mut gz, &pending, Fate::Deliver);
                }
                self.steps.push(Step::Pause(EVENT_GAP_NS));
                match s.close {
                    StreamClose::TerminalChunk => {
                        let mut tail = Vec::new();
                        if let Some(g) = &mut gz {
                            g.finish(&mut tail);
                        }
                        self.send(conn, Side::Server, Msg::LastChunk(tail), Fate::Deliver);
                        true
                    }
                    StreamClose::ServerFin => {
                        self.steps.push(Step::Close {
                            conn: self.base + conn,
                            by: Side::Server,
                        });
                        false
                    }
                    StreamClose::ClientReset => {
                        self.steps.push(Step::Reset {
                            conn: self.base + conn,
                            by: Side::Client,
                        });
                        false
                    }
                    StreamClose::Open => false,
                }
            }
        }
    }
}

impl Scenario {
    pub fn new() -> Self {
        Scenario::default()
    }

    /// Resume requests added so far.
    pub fn resume_count(&self) -> usize {
        self.resumes.len()
    }

    /// Turns a session into steps. Fails on a definition that cannot be captured as stated:
    /// an exchange on a connection that has ended, a resume request dropped from the capture,
    /// a status response that is 2xx, a flow that cannot exist.
    pub fn add_session(&mut self, spec: &SessionSpec) -> io::Result<()> {
        for c in &spec.connections {
            TcpFlow::new(c.flow.clone())?;
        }
        let n = spec.connections.len();
        let mut last_use = vec![None; n];
        for (k, ex) in spec.exchanges.iter().enumerate() {
            let Some(slot) = last_use.get_mut(ex.conn) else {
                return Err(invalid(
                    "exchange on a connection the session does not have",
                ));
            };
            *slot = Some(k);
            if let ExchangeKind::Resume(r) = &ex.kind {
                if r.request_fate == Fate::Drop {
                    return Err(invalid("a resume request must be captured"));
                }
                if let ResumeResponse::Status(s) = r.response
                    && !(300..=599).contains(&s)
                {
                    return Err(invalid("a status response to a resume must be 3xx-5xx"));
                }
            }
        }
        self.progress_tokens += 1;
        let mut script = SessionScript {
            spec,
            base: self.conns.len(),
            steps: Vec::new(),
            token: format!("progress-{}", self.progress_tokens),
            progress: 0,
            stream: 0,
        };
        // `server_name` carries a host name, never an address (RFC 6066 §3).
        let host = spec
            .host
            .rsplit_once(':')
            .map_or(spec.host.as_str(), |h| h.0);
        let sni = (!host.is_empty()
            && !host.starts_with('[')
            && host.parse::<std::net::IpAddr>().is_err())
        .then(|| host.to_string());
        let mut streams = vec![0u32; n];
        let mut state = vec![ConnState::Unopened; n];
        let mut pending = Vec::new();
        for (k, ex) in spec.exchanges.iter().enumerate() {
            let conn = ex.conn;
            let global = script.base + conn;
            match state[conn] {
                ConnState::Unopened => {
                    if k > 0 {
                        script.steps.push(Step::Pause(EXCHANGE_GAP_NS));
                    }
                    script.steps.push(Step::Open {
                        conn: global,
                        handshake: spec.connections[conn].handshake,
                        sni: sni.clone(),
                    });
                    state[conn] = ConnState::Open;
                }
                ConnState::Open => {
                    if k > 0 {
                        script.steps.push(Step::Pause(EXCHANGE_GAP_NS));
                    }
                }
                ConnState::Ended => {
                    return Err(invalid("exchange on a connection that has already ended"));
                }
            }
            script.stream = streams[conn];
            streams[conn] += 1;
            let still_open = match &ex.kind {
                ExchangeKind::Initialize {
                    priming_id,
                    result_id,
                } => {
                    script.initialize(conn, priming_id.as_deref(), result_id.as_deref());
                    true
                }
                ExchangeKind::InitializedNotification => {
                    script.notification(conn);
                    true
                }
                ExchangeKind::Terminate => {
                    script.terminate(conn);
                    true
                }
                ExchangeKind::Resume(r) => {
                    let index = self.resumes.len() + pending.len();
                    let (verdict, first_event_id) = expected_outcome(r);
                    pending.push(PendingResume {
                        conn: global,
                        // The request's Mcp-Session-Id, else the one on the answer's head
                        // (event-stream answers carry it; status answers do not).
                        session_id: if r.send_session_id
                            || matches!(r.response, ResumeResponse::Stream(_))
                        {
                            spec.session_id.clone()
                        } else {
                            None
                        },
                        last_event_id: r.last_event_id.clone(),
                        verdict,
                        first_event_id,
                    });
                    script.resume(conn, r, index)
                }
            };
            if !still_open {
                state[conn] = ConnState::Ended;
            } else if last_use[conn] == Some(k) {
                let step = match spec.connections[conn].close {
                    ConnClose::ClientFin => Some(Step::Close {
                        conn: global,
                        by: Side::Client,
                    }),
                    ConnClose::ServerFin => Some(Step::Close {
                        conn: global,
                        by: Side::Server,
                    }),
                    ConnClose::ClientReset => Some(Step::Reset {
                        conn: global,
                        by: Side::Client,
                    }),
                    ConnClose::LeaveOpen => None,
                };
                if let Some(step) = step {
                    script.steps.push(Step::Pause(SERVER_THINK_NS));
                    script.steps.push(step);
                }
                state[conn] = ConnState::Ended;
            }
        }
        let steps = script.steps;
        self.conns.extend(spec.connections.iter().cloned());
        self.scripts.push(steps);
        self.resumes.extend(pending);
        Ok(())
    }

    /// Writes every session's packets to `cap` and returns the expected findings, ordered by
    /// request time, then frame. Segments still held back for reordering are written last, as
    /// the capture ends. The key log lines of TLS connections are discarded (see
    /// [`Scenario::run_with_key_log`]).
    pub fn run<W: PacketWriter>(
        &self,
        cap: &mut Capture<W>,
        interleave: Interleave,
    ) -> io::Result<Vec<ExpectedResume>> {
        self.run_with_key_log(cap, interleave, &mut io::sink())
    }

    /// [`Scenario::run`], writing the NSS key log lines of every TLS connection to `key_log`
    /// as the connection opens.
    pub fn run_with_key_log<W: PacketWriter>(
        &self,
        cap: &mut Capture<W>,
        interleave: Interleave,
        key_log: &mut dyn Write,
    ) -> io::Result<Vec<ExpectedResume>> {
        let flows = self
            .conns
            .iter()
            .map(|c| TcpFlow::new(c.flow.clone()))
            .collect::<io::Result<Vec<_>>>()?;
        let mut run = Runner {
            conns: &self.conns,
            flows,
            sessions: (0..self.conns.len()).map(|_| None).collect(),
            watches: vec![None; self.resumes.len()],
            key_log,
            opened: 0,
            plain: Vec::with_capacity(4096),
            sealed: Vec::with_capacity(4096),
        };
        match interleave {
            Interleave::Sequential => {
                for script in &self.scripts {
                    for step in script {
                        run.step(step, cap)?;
                    }
                }
            }
            Interleave::RoundRobin => {
                let mut k = 0;
                loop {
                    let mut any = false;
                    for script in &self.scripts {
                        if let Some(step) = script.get(k) {
                            run.step(step, cap)?;
                            any = true;
                        }
                    }
                    if !any {
                        break;
                    }
                    k += 1;
                }
            }
        }
        let Runner {
            mut flows, watches, ..
        } = run;
        for f in &mut flows {
            f.flush_held(cap)?;
        }
        let mut out = Vec::with_capacity(self.resumes.len());
        for (r, w) in self.resumes.iter().zip(&watches) {
            let flow = flows
                .get(r.conn)
                .ok_or_else(|| invalid("resume on an unknown connection"))?;
            let stamp = w
                .and_then(|w| flow.watch_hit(w))
                .ok_or_else(|| invalid("resume request never reached the capture"))?;
            let time = stamp
                .time_ns
                .ok_or_else(|| invalid("resume request in a packet block without a timestamp"))?;
            out.push(ExpectedResume {
                session_id: r.session_id.clone(),
                verdict: r.verdict,
                last_event_id: r.last_event_id.clone(),
                first_event_id: r.first_event_id.clone(),
                tcp_stream: flow.stream_index().unwrap_or(0),
                request_frame: stamp.frame,
                request_time_ns: time,
            });
        }
        out.sort_by_key(|e| (e.request_time_ns, e.request_frame));
        Ok(out)
    }
}

/// The state of one [`Scenario::run`]: the TCP flows, the TLS sessions of the connections
/// open so far, and the buffers messages are rendered and sealed in.
struct Runner<'a> {
    conns: &'a [ConnSpec],
    flows: Vec<TcpFlow>,
    /// The TLS session of each connection opened with TLS.
    sessions: Vec<Option<TlsSession>>,
    watches: Vec<Option<WatchId>>,
    key_log: &'a mut dyn Write,
    /// Connections opened so far in this run (part of each TLS connection's identity).
    opened: u64,
    plain: Vec<u8>,
    sealed: Vec<u8>,
}

impl Runner<'_> {
    fn step<W: PacketWriter>(&mut self, step: &Step, cap: &mut Capture<W>) -> io::Result<()> {
        match step {
            Step::Open {
                conn,
                handshake,
                sni,
            } => self.open(cap, *conn, *handshake, sni.as_deref()),
            Step::Send {
                conn,
                from,
                msg,
                stream,
                fate,
                resume,
            } => {
                let wire = self.wire(*conn)?;
                self.plain.clear();
                match wire.http {
                    HttpVersion::Http1 => msg.render_http1(&mut self.plain),
                    HttpVersion::Http2 => {
                        let scheme = if wire.tls.is_some() { "https" } else { "http" };
                        msg.render_http2(h2::client_stream_id(*stream), scheme, &mut self.plain);
                    }
                }
                let bytes = std::mem::take(&mut self.plain);
                let result = self.send(cap, *conn, *from, &bytes, *fate, *resume);
                self.plain = bytes;
                result
            }
            Step::Close { conn, by } => get_flow(&mut self.flows, *conn)?.close(cap, *by),
            Step::Reset { conn, by } => get_flow(&mut self.flows, *conn)?.reset(cap, *by),
            Step::Pause(ns) => {
                cap.advance(*ns);
                Ok(())
            }
        }
    }

    fn wire(&self, conn: usize) -> io::Result<Wire> {
        self.conns
            .get(conn)
            .map(|c| c.wire)
            .ok_or_else(|| invalid("step on an unknown connection"))
    }

    /// Opens the connection: TCP's handshake, then TLS's flights and HTTP/2's prefaces, all
    /// of which only a connection captured from its start shows.
    fn open<W: PacketWriter>(
        &mut self,
        cap: &mut Capture<W>,
        conn: usize,
        handshake: bool,
        sni: Option<&str>,
    ) -> io::Result<()> {
        let wire = self.wire(conn)?;
        let frames_before = cap.frames();
        let f = get_flow(&mut self.flows, conn)?;
        if handshake {
            f.handshake(cap)?;
        } else {
            f.assume_established()?;
        }
        self.opened += 1;
        if let Some(tls) = wire.tls {
            let spec = f.spec();
            let mut identity = Vec::with_capacity(64);
            for e in [spec.client, spec.server] {
                match e.addr {
                    IpAddr::V4(a) => identity.extend_from_slice(&a.octets()),
                    IpAddr::V6(a) => identity.extend_from_slice(&a.octets()),
                }
                identity.extend_from_slice(&e.port.to_be_bytes());
            }
            identity.extend_from_slice(&spec.client_isn.to_be_bytes());
            identity.extend_from_slice(&spec.server_isn.to_be_bytes());
            identity.extend_from_slice(&frames_before.to_be_bytes());
            identity.extend_from_slice(&self.opened.to_be_bytes());
            let session = TlsSession::new(&TlsParams {
                suite: tls.suite,
                seed: tls.seed,
                connection: identity,
                alpn: match wire.http {
                    HttpVersion::Http1 => "http/1.1",
                    HttpVersion::Http2 => "h2",
                }
                .to_string(),
                sni: sni.map(str::to_string),
            });
            session.write_key_log(self.key_log)?;
            if handshake {
                for (side, bytes) in session.handshake() {
                    f.send(cap, *side, bytes, Fate::Deliver)?;
                }
            }
            self.sessions[conn] = Some(session);
        }
        if wire.http == HttpVersion::Http2 && handshake {
            let mut out = Vec::with_capacity(128);
            h2::client_preface(&mut out);
            self.send(cap, conn, Side::Client, &out, Fate::Deliver, None)?;
            out.clear();
            h2::server_preface(&mut out);
            self.send(cap, conn, Side::Server, &out, Fate::Deliver, None)?;
            out.clear();
            h2::settings_ack(&mut out);
            self.send(cap, conn, Side::Client, &out, Fate::Deliver, None)?;
        }
        Ok(())
    }

    /// Sends plaintext `bytes` on the connection, sealed in TLS records when it has TLS.
    fn send<W: PacketWriter>(
        &mut self,
        cap: &mut Capture<W>,
        conn: usize,
        from: Side,
        bytes: &[u8],
        fate: Fate,
        resume: Option<usize>,
    ) -> io::Result<()> {
        // Where a reader can first read the message: its first byte in the clear; under TLS,
        // the last byte of the first record, which is when that record can be opened.
        let mut readable_at = 0;
        let wire_bytes: &[u8] = match self.sessions.get_mut(conn).and_then(Option::as_mut) {
            Some(session) => {
                self.sealed.clear();
                session.seal(from, bytes, &mut self.sealed);
                if let Some(len) = self.sealed.get(3..5) {
                    readable_at = 5 + usize::from(u16::from_be_bytes([len[0], len[1]])) - 1;
                }
                &self.sealed
            }
            None => bytes,
        };
        let f = get_flow(&mut self.flows, conn)?;
        match resume {
            Some(i) => {
                let w = f.send_watched_at(cap, from, wire_bytes, fate, readable_at)?;
                if let Some(slot) = self.watches.get_mut(i) {
                    *slot = Some(w);
                }
                Ok(())
            }
            None => f.send(cap, from, wire_bytes, fate),
        }
    }
}

fn get_flow(flows: &mut [TcpFlow], conn: usize) -> io::Result<&mut TcpFlow> {
    flows
        .get_mut(conn)
        .ok_or_else(|| invalid("step on an unknown connection"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};
    use pcap_parser::pcapng::Block;
    use pcap_parser::traits::PcapNGPacketBlock;
    use pcap_parser::{PcapBlockOwned, PcapError, create_reader};
    use std::net::{Ipv4Addr, Ipv6Addr};

    // ---- reading captures back, independently of the writer ----

    #[derive(Clone, Debug, PartialEq)]
    struct ReadPacket {
        link: i32,
        time_ns: Option<u64>,
        data: Vec<u8>,
    }

    #[derive(Debug, Default)]
    struct ReadCapture {
        /// (link, nanosecond magic, big endian) of a legacy file.
        pcap_header: Option<(i32, bool, bool)>,
        /// Byte order of each pcapng section.
        sections: Vec<bool>,
        /// (link, if_tsresol) of each pcapng interface, over all sections.
        interfaces: Vec<(i32, u8)>,
        simple_blocks: usize,
        packets: Vec<ReadPacket>,
    }

    fn read_capture(bytes: &[u8]) -> ReadCapture {
        let mut out = ReadCapture::default();
        let mut section_ifaces: Vec<(i32, u8)> = Vec::new();
        let mut reader = create_reader(1 << 16, bytes).expect("capture header");
        loop {
            match reader.next() {
                Ok((consumed, block)) => {
                    match block {
                        PcapBlockOwned::LegacyHeader(h) => {
                            out.pcap_header =
                                Some((h.network.0, h.is_nanosecond_precision(), h.is_bigendian()));
                        }
                        PcapBlockOwned::Legacy(b) => {
                            let (link, nanos, _) = out.pcap_header.expect("header first");
                            let frac_ns = if nanos {
                                u64::from(b.ts_usec)
                            } else {
                                u64::from(b.ts_usec) * 1000
                            };
                            out.packets.push(ReadPacket {
                                link,
                                time_ns: Some(u64::from(b.ts_sec) * NS_PER_SEC + frac_ns),
                                data: b.data.to_vec(),
                            });
                        }
                        PcapBlockOwned::NG(Block::SectionHeader(shb)) => {
                            out.sections.push(shb.big_endian());
                            section_ifaces.clear();
                        }
                        PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => {
                            let entry = (idb.linktype.0, idb.if_tsresol);
                            section_ifaces.push(entry);
                            out.interfaces.push(entry);
                        }
                        PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => {
                            let (link, tsresol) = section_ifaces[epb.if_id as usize];
                            let units = (u64::from(epb.ts_high) << 32) | u64::from(epb.ts_low);
                            let ns_per_unit = NS_PER_SEC / 10u64.pow(u32::from(tsresol));
                            out.packets.push(ReadPacket {
                                link,
                                time_ns: Some(units * ns_per_unit),
                                data: epb.packet_data().to_vec(),
                            });
                        }
                        PcapBlockOwned::NG(Block::SimplePacket(spb)) => {
                            out.simple_blocks += 1;
                            out.packets.push(ReadPacket {
                                link: section_ifaces[0].0,
                                time_ns: None,
                                data: spb.packet_data().to_vec(),
                            });
                        }
                        PcapBlockOwned::NG(other) => panic!("unexpected block {other:?}"),
                    }
                    reader.consume(consumed);
                }
                Err(PcapError::Eof) => break,
                Err(PcapError::Incomplete(_)) => reader.refill().expect("refill"),
                Err(e) => panic!("capture does not parse: {e:?}"),
            }
        }
        out
    }

    #[derive(Clone, Debug, PartialEq)]
    struct Seg {
        src: (IpAddr, u16),
        dst: (IpAddr, u16),
        seq: u32,
        ack: u32,
        syn: bool,
        fin: bool,
        rst: bool,
        has_ack: bool,
        payload: Vec<u8>,
    }

    fn be16(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }

    /// The IP packet inside a frame of this link type.
    fn ip_of(link: i32, data: &[u8]) -> &[u8] {
        match link {
            0 => &data[4..],
            1 => {
                let mut at = 12;
                while matches!(be16(data, at), 0x8100 | 0x88a8) {
                    at += 4;
                }
                &data[at + 2..]
            }
            113 => &data[16..],
            276 => &data[20..],
            101 | 228 | 229 => data,
            other => panic!("link type {other}"),
        }
    }

    /// Decodes with etherparse and checks the IPv4 header and TCP checksums on the way.
    fn decode(link: i32, data: &[u8]) -> Seg {
        let packet = SlicedPacket::from_ip(ip_of(link, data)).expect("IP/TCP parses");
        let (src, dst) = match &packet.net {
            Some(NetSlice::Ipv4(v4)) => {
                let h = v4.header();
                assert_eq!(h.to_header().calc_header_checksum(), h.header_checksum());
                (IpAddr::from(h.source()), IpAddr::from(h.destination()))
            }
            Some(NetSlice::Ipv6(v6)) => {
                let h = v6.header();
                (IpAddr::from(h.source()), IpAddr::from(h.destination()))
            }
            other => panic!("no IP: {other:?}"),
        };
        let Some(TransportSlice::Tcp(tcp)) = &packet.transport else {
            panic!("no TCP");
        };
        let header = tcp.to_header();
        let expected = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => header
                .calc_checksum_ipv4_raw(s.octets(), d.octets(), tcp.payload())
                .unwrap(),
            (IpAddr::V6(s), IpAddr::V6(d)) => header
                .calc_checksum_ipv6_raw(s.octets(), d.octets(), tcp.payload())
                .unwrap(),
            _ => panic!("mixed IP versions"),
        };
        assert_eq!(expected, tcp.checksum(), "TCP checksum");
        Seg {
            src: (src, tcp.source_port()),
            dst: (dst, tcp.destination_port()),
            seq: tcp.sequence_number(),
            ack: tcp.acknowledgment_number(),
            syn: tcp.syn(),
            fin: tcp.fin(),
            rst: tcp.rst(),
            has_ack: tcp.ack(),
            payload: tcp.payload().to_vec(),
        }
    }

    fn decode_all(cap: &ReadCapture) -> Vec<Seg> {
        cap.packets
            .iter()
            .map(|p| decode(p.link, &p.data))
            .collect()
    }

    /// Wireshark-style connection index of every segment: numbered by first packet; a SYN on a
    /// 4-tuple whose previous connection saw FIN or RST starts a new one.
    fn stream_indices(segs: &[Seg]) -> Vec<u64> {
        // (one end, other end, index, FIN or RST seen)
        type Conn = ((IpAddr, u16), (IpAddr, u16), u64, bool);
        let mut table: Vec<Conn> = Vec::new();
        let mut next = 0;
        let mut out = Vec::new();
        for s in segs {
            let found = table
                .iter_mut()
                .rev()
                .find(|(a, b, _, _)| (*a == s.src && *b == s.dst) || (*a == s.dst && *b == s.src));
            let index = match found {
                Some(entry) if !(s.syn && !s.has_ack && entry.3) => {
                    entry.3 |= s.fin || s.rst;
                    entry.2
                }
                _ => {
                    table.push((s.src, s.dst, next, s.fin || s.rst));
                    next += 1;
                    next - 1
                }
            };
            out.push(index);
        }
        out
    }

    /// One direction of one connection as bytes by offset from its lowest sequence number;
    /// `None` where the capture holds nothing. Overlapping copies must agree.
    fn direction_bytes(
        segs: &[Seg],
        idx: &[u64],
        stream: u64,
        from: (IpAddr, u16),
    ) -> Vec<Option<u8>> {
        let mine: Vec<&Seg> = segs
            .iter()
            .zip(idx)
            .filter(|(s, i)| **i == stream && s.src == from && !s.payload.is_empty())
            .map(|(s, _)| s)
            .collect();
        let Some(first) = mine.first() else {
            return Vec::new();
        };
        let base = mine
            .iter()
            .map(|s| s.seq.wrapping_sub(first.seq) as i32)
            .min()
            .unwrap_or(0);
        let base = first.seq.wrapping_add(base as u32);
        let mut out: Vec<Option<u8>> = Vec::new();
        for s in mine {
            let at = s.seq.wrapping_sub(base) as usize;
            if out.len() < at + s.payload.len() {
                out.resize(at + s.payload.len(), None);
            }
            for (k, b) in s.payload.iter().enumerate() {
                match out[at + k] {
                    Some(old) => assert_eq!(old, *b, "retransmission disagrees"),
                    None => out[at + k] = Some(*b),
                }
            }
        }
        out
    }

    fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).position(|w| w == needle)
    }

    fn rfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).rposition(|w| w == needle)
    }

    /// What the bytes of a capture say about one resume, read without the scenario: the
    /// verdict and first id by the same rules, from the reassembled server stream.
    fn judge_from_bytes(
        segs: &[Seg],
        idx: &[u64],
        e: &ExpectedResume,
    ) -> (ExpectedVerdict, Option<String>) {
        let request = &segs[e.request_frame as usize - 1];
        assert!(
            request.payload.starts_with(b"GET "),
            "request_frame holds the GET"
        );
        assert_eq!(idx[e.request_frame as usize - 1], e.tcp_stream);
        // No earlier frame of the connection carries the request's first byte.
        for (k, s) in segs.iter().enumerate().take(e.request_frame as usize - 1) {
            let covers = s.src == request.src
                && idx[k] == e.tcp_stream
                && !s.payload.is_empty()
                && request.seq.wrapping_sub(s.seq) < s.payload.len() as u32;
            assert!(!covers, "frame {} already carried the request", k + 1);
        }
        let server = request.dst;
        let ended = segs
            .iter()
            .zip(idx)
            .any(|(s, i)| *i == e.tcp_stream && (s.fin || s.rst));
        // A reset from the client before any id proves nothing about the server's stream.
        let client_reset = segs
            .iter()
            .zip(idx)
            .any(|(s, i)| *i == e.tcp_stream && s.rst && s.src == request.src);
        let bytes = direction_bytes(segs, idx, e.tcp_stream, server);
        // The resume's response is the last one on its connection in these scenarios.
        let known: Vec<u8> = bytes.iter().map(|b| b.unwrap_or(0)).collect();
        let Some(head_at) = rfind(&known, b"HTTP/1.1 ") else {
            return (ExpectedVerdict::CaptureIncomplete, None);
        };
        let status: u16 = std::str::from_utf8(&known[head_at + 9..head_at + 12])
            .unwrap()
            .parse()
            .unwrap();
        if !(200..300).contains(&status) {
            return (ExpectedVerdict::Rejected, None);
        }
        let body_at = head_at + find(&known[head_at..], b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&known[head_at..body_at]).to_ascii_lowercase();
        let gzip = head.contains("content-encoding: gzip");
        // De-chunk while the bytes are there.
        let mut body = Vec::new();
        let mut at = body_at;
        let mut hole = false;
        let mut last_chunk = false;
        loop {
            let line_end = bytes[at..]
                .windows(2)
                .position(|w| w == [Some(b'\r'), Some(b'\n')]);
            let Some(line_end) = line_end else { break };
            let line: Option<Vec<u8>> = bytes[at..at + line_end].iter().copied().collect();
            let Some(line) = line else {
                hole = true;
                break;
            };
            let size = usize::from_str_radix(std::str::from_utf8(&line).unwrap(), 16).unwrap();
            if size == 0 {
                last_chunk = true;
                break;
            }
            let data_at = at + line_end + 2;
            if data_at + size > bytes.len() {
                break;
            }
            let data: Option<Vec<u8>> = bytes[data_at..data_at + size].iter().copied().collect();
            let Some(data) = data else {
                hole = true;
                break;
            };
            body.extend_from_slice(&data);
            at = data_at + size + 2;
        }
        if gzip {
            let mut d = flate2::Decompress::new(false);
            let mut text = Vec::with_capacity(body.len() * 4 + 64);
            d.decompress_vec(&body[10..], &mut text, flate2::FlushDecompress::Sync)
                .expect("gzip body decodes");
            body = text;
        }
        let text = String::from_utf8(body).unwrap();
        let first_id = text
            .split(['\r', '\n'])
            .find_map(|line| line.strip_prefix("id: "))
            .map(str::to_string);
        match first_id {
            Some(id) => (classify_ids(&e.last_event_id, &id), Some(id)),
            None if hole => (ExpectedVerdict::CaptureIncomplete, None),
            None if last_chunk => (ExpectedVerdict::Empty, None),
            None if client_reset => (ExpectedVerdict::Unverifiable, None),
            None if ended => (ExpectedVerdict::Empty, None),
            None => (ExpectedVerdict::CaptureIncomplete, None),
        }
    }

    fn check_capture_against_expectations(bytes: &[u8], expected: &[ExpectedResume]) {
        let cap = read_capture(bytes);
        let segs = decode_all(&cap);
        let idx = stream_indices(&segs);
        let mut previous = (0, 0);
        for e in expected {
            let time = cap.packets[e.request_frame as usize - 1].time_ns.unwrap();
            assert_eq!(time, e.request_time_ns);
            assert!((time, e.request_frame) > previous, "report order");
            previous = (time, e.request_frame);
            let (verdict, first) = judge_from_bytes(&segs, &idx, e);
            assert_eq!(verdict, e.verdict, "{e:?}");
            assert_eq!(first, e.first_event_id, "{e:?}");
        }
    }

    // ---- scenario used by several tests ----

    fn v4(last: u8, port: u16) -> Endpoint {
        Endpoint::new(Ipv4Addr::new(10, 1, 0, last), port)
    }

    fn flow(interface: u32, port: u16) -> FlowSpec {
        let mut f = FlowSpec::new(interface, v4(2, port), v4(1, 8000));
        f.client_isn = u32::from(port).wrapping_mul(0x9e37_79b9);
        f.server_isn = u32::from(port).wrapping_mul(0x85eb_ca6b);
        f
    }

    fn session(sid: &str, interface: u32, port: u16, resume: Resume) -> SessionSpec {
        SessionSpec::new(
            Some(sid),
            vec![
                ConnSpec::new(flow(interface, port)),
                ConnSpec::new(flow(interface, port + 1)),
            ],
        )
        .exchange(
            0,
            ExchangeKind::Initialize {
                priming_id: Some("0".into()),
                result_id: Some("1".into()),
            },
        )
        .exchange(0, ExchangeKind::InitializedNotification)
        .exchange(1, ExchangeKind::Resume(resume))
    }

    /// Every verdict, every knob, gzip, both styles, interleaved.
    fn sample_sessions(interface: u32) -> Vec<SessionSpec> {
        let mut out = Vec::new();
        let mut s = EventStream::with_ids(&["4418", "4419"], StreamClose::TerminalChunk);
        s.events[0].fate = Fate::OverlapRetransmit;
        let mut r = Resume::new("4417", ResumeResponse::Stream(s));
        r.request_fate = Fate::Duplicate;
        out.push(session("s-correct", interface, 40_000, r));

        let mut s = EventStream::with_ids(&["0", "1"], StreamClose::ServerFin);
        s.style = SseStyle {
            line_end: LineEnd::CrLf,
            event_field: EventField::AfterId,
        };
        s.events[0].fate = Fate::SwapWithNext;
        let mut sess = session(
            "s-replay",
            interface,
            40_010,
            Resume::new("7", ResumeResponse::Stream(s)),
        );
        sess.header_case = HeaderCase::Canonical;
        sess.connections[1].flow.mss = 40;
        sess.connections[1].flow.client_isn = u32::MAX - 30;
        sess.connections[1].flow.server_isn = u32::MAX - 10;
        if let ExchangeKind::Resume(r) = &mut sess.exchanges[2].kind {
            r.request_fate = Fate::SwapWithNext;
        }
        out.push(sess);

        let mut s = EventStream::with_ids(&["50", "51"], StreamClose::ClientReset);
        s.gzip = true;
        s.style.event_field = EventField::BeforeId;
        out.push(session(
            "s-gap",
            interface,
            40_020,
            Resume::new("40", ResumeResponse::Stream(s)),
        ));

        out.push(session(
            "s-rej",
            interface,
            40_030,
            Resume::new("3", ResumeResponse::Status(405)),
        ));
        out.push(session(
            "s-empty",
            interface,
            40_040,
            Resume::new(
                "3",
                ResumeResponse::Stream(EventStream::with_ids::<&str>(
                    &[],
                    StreamClose::TerminalChunk,
                )),
            ),
        ));
        out.push(session(
            "s-opaque",
            interface,
            40_050,
            Resume::new(
                "a_1",
                ResumeResponse::Stream(EventStream::with_ids(&["a_2"], StreamClose::Open)),
            ),
        ));
        let mut s = EventStream::with_ids(&["9", "10"], StreamClose::TerminalChunk);
        s.events.insert(0, SseEvent::without_id());
        s.events[1].fate = Fate::Drop;
        out.push(session(
            "s-drop",
            interface,
            40_060,
            Resume::new("8", ResumeResponse::Stream(s)),
        ));
        let mut s = EventStream::with_ids(&["9"], StreamClose::TerminalChunk);
        s.events[0].fate = Fate::Duplicate;
        s.events.push(SseEvent::with_id("10").fate(Fate::Drop));
        out.push(session(
            "s-late-drop",
            interface,
            40_070,
            Resume::new("8", ResumeResponse::Stream(s)),
        ));
        out.push(session(
            "s-noresp",
            interface,
            40_080,
            Resume::new("8", ResumeResponse::CaptureEnds),
        ));
        out
    }

    fn sample_pcap() -> (Vec<u8>, Vec<ExpectedResume>) {
        let framing = LinkFraming::Ethernet {
            vlan: Vlan::Single(7),
        };
        let format = PcapFormat::new(ByteOrder::Little, TsResolution::Nano, framing.link_type());
        let mut cap = Capture::new(
            PcapWriter::new(Vec::new(), format).unwrap(),
            BASE_TIME_NS,
            61_003,
        );
        let iface = cap.add_interface(framing, TsResolution::Nano).unwrap();
        let mut scenario = Scenario::new();
        for s in sample_sessions(iface) {
            scenario.add_session(&s).unwrap();
        }
        let expected = scenario.run(&mut cap, Interleave::RoundRobin).unwrap();
        (cap.into_writer().into_inner(), expected)
    }

    // ---- capture writers ----

    #[test]
    fn pcap_writer_round_trips_every_byte_order_and_resolution() {
        let times = [
            BASE_TIME_NS,
            BASE_TIME_NS + 1_234_567,
            BASE_TIME_NS + 2 * NS_PER_SEC + 999_999_999,
        ];
        for order in [ByteOrder::Little, ByteOrder::Big] {
            for res in [TsResolution::Micro, TsResolution::Nano] {
                let format = PcapFormat::new(order, res, LinkType::LinuxSll2);
                let mut w = PcapWriter::new(Vec::new(), format).unwrap();
                for (k, t) in times.iter().enumerate() {
                    let frame = vec![k as u8; 30 + k];
                    let recorded = w.write_packet(0, *t, &frame).unwrap();
                    assert_eq!(recorded, Some(res.recorded(*t)));
                }
                assert!(w.write_packet(1, times[0], b"x").is_err());
                let bytes = w.into_inner();
                let cap = read_capture(&bytes);
                assert_eq!(
                    cap.pcap_header,
                    Some((276, res == TsResolution::Nano, order == ByteOrder::Big))
                );
                assert_eq!(cap.packets.len(), 3);
                for (k, (p, t)) in cap.packets.iter().zip(times).enumerate() {
                    assert_eq!(p.time_ns, Some(res.recorded(t)));
                    assert_eq!(p.data, vec![k as u8; 30 + k]);
                }
            }
        }
        // Microseconds drop the sub-microsecond digits; nanoseconds keep them.
        assert_eq!(TsResolution::Micro.recorded(1_999), 1_000);
        assert_eq!(TsResolution::Nano.recorded(1_999), 1_999);
    }

    #[test]
    fn pcap_writer_cuts_frames_to_snaplen_and_refuses_other_link_types() {
        let mut format =
            PcapFormat::new(ByteOrder::Little, TsResolution::Micro, LinkType::Ethernet);
        format.snaplen = 16;
        let mut w = PcapWriter::new(Vec::new(), format).unwrap();
        assert!(w.add_interface(LinkType::Raw, TsResolution::Micro).is_err());
        assert!(
            w.add_interface(LinkType::Ethernet, TsResolution::Nano)
                .is_err()
        );
        assert_eq!(
            w.add_interface(LinkType::Ethernet, TsResolution::Micro)
                .unwrap(),
            0
        );
        w.write_packet(0, BASE_TIME_NS, &[9u8; 40]).unwrap();
        let bytes = w.into_inner();
        assert_eq!(bytes.len(), 24 + 16 + 16);
        // caplen 16, origlen 40
        assert_eq!(&bytes[32..40], &[16, 0, 0, 0, 40, 0, 0, 0]);
    }

    #[test]
    fn pcapng_writer_sections_interfaces_and_packet_blocks_parse_back() {
        let mut w = PcapngWriter::new(Vec::new(), ByteOrder::Little).unwrap();
        assert_eq!(
            w.add_interface(LinkType::Ethernet, TsResolution::Micro)
                .unwrap(),
            0
        );
        assert_eq!(
            w.add_interface(LinkType::Ipv4, TsResolution::Nano).unwrap(),
            1
        );
        let t0 = BASE_TIME_NS + 123_456_789;
        assert_eq!(
            w.write_packet(0, t0, &[1; 61]).unwrap(),
            Some(BASE_TIME_NS + 123_456_000)
        );
        assert_eq!(w.write_packet(1, t0 + 1, &[2; 62]).unwrap(), Some(t0 + 1));
        w.set_simple_packets(true);
        assert_eq!(w.write_packet(0, t0 + 2, &[3; 63]).unwrap(), None);
        // An SPB cannot name interface 1: that packet stays an EPB.
        assert_eq!(w.write_packet(1, t0 + 3, &[4; 64]).unwrap(), Some(t0 + 3));
        w.set_simple_packets(false);
        assert!(w.write_packet(2, t0, &[0; 4]).is_err());
        w.new_section(ByteOrder::Big).unwrap();
        assert!(
            w.write_packet(1, t0, &[0; 4]).is_err(),
            "interfaces restart per section"
        );
        assert_eq!(
            w.add_interface(LinkType::LinuxSll, TsResolution::Nano)
                .unwrap(),
            0
        );
        assert_eq!(w.write_packet(0, t0 + 5, &[5; 5]).unwrap(), Some(t0 + 5));
        let bytes = w.into_inner();
        assert_eq!(bytes.len() % 4, 0);

        let cap = read_capture(&bytes);
        assert_eq!(cap.sections, vec![false, true]);
        assert_eq!(cap.interfaces, vec![(1, 6), (228, 9), (113, 9)]);
        assert_eq!(cap.simple_blocks, 1);
        let got: Vec<(i32, Option<u64>, Vec<u8>)> = cap
            .packets
            .into_iter()
            .map(|p| (p.link, p.time_ns, p.data))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, Some(BASE_TIME_NS + 123_456_000), vec![1; 61]),
                (228, Some(t0 + 1), vec![2; 62]),
                (1, None, vec![3; 63]),
                (228, Some(t0 + 3), vec![4; 64]),
                (113, Some(t0 + 5), vec![5; 5]),
            ]
        );
    }

    // ---- frames ----

    fn one_flow_capture(
        framing: LinkFraming,
        client: IpAddr,
        server: IpAddr,
        ext: Ipv6Extension,
    ) -> (ReadCapture, Vec<u8>) {
        let format = PcapFormat::new(ByteOrder::Big, TsResolution::Micro, framing.link_type());
        let mut cap = Capture::new(
            PcapWriter::new(Vec::new(), format).unwrap(),
            BASE_TIME_NS,
            1_000,
        );
        let iface = cap.add_interface(framing, TsResolution::Micro).unwrap();
        let mut spec = FlowSpec::new(
            iface,
            Endpoint::new(client, 40_001),
            Endpoint::new(server, 8000),
        );
        spec.client_isn = u32::MAX - 5;
        spec.server_isn = 77;
        spec.mss = 100;
        spec.ipv6_extension = ext;
        let mut f = TcpFlow::new(spec).unwrap();
        f.handshake(&mut cap).unwrap();
        let body: Vec<u8> = (0..250u32).map(|i| (i * 7 % 251) as u8).collect();
        f.send(&mut cap, Side::Client, &body, Fate::Deliver)
            .unwrap();
        f.close(&mut cap, Side::Server).unwrap();
        let bytes = cap.into_writer().into_inner();
        (read_capture(&bytes), body)
    }

    #[test]
    fn every_link_framing_reparses_with_valid_checksums_and_intended_sequence_numbers() {
        let c4: IpAddr = Ipv4Addr::new(192, 0, 2, 1).into();
        let s4: IpAddr = Ipv4Addr::new(192, 0, 2, 2).into();
        let c6: IpAddr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1).into();
        let s6: IpAddr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2).into();
        let eth = |vlan| LinkFraming::Ethernet { vlan };
        let cases = [
            (eth(Vlan::Untagged), c4, s4, Ipv6Extension::None),
            (eth(Vlan::Single(42)), c4, s4, Ipv6Extension::None),
            (
                eth(Vlan::QinQ {
                    outer: 100,
                    inner: 42,
                }),
                c6,
                s6,
                Ipv6Extension::None,
            ),
            (eth(Vlan::Untagged), c6, s6, Ipv6Extension::HopByHop),
            (LinkFraming::LinuxSll, c4, s4, Ipv6Extension::None),
            (
                LinkFraming::LinuxSll2 { interface_index: 9 },
                c6,
                s6,
                Ipv6Extension::DestinationOptions,
            ),
            (
                LinkFraming::Null { ipv6_family: 24 },
                c4,
                s4,
                Ipv6Extension::None,
            ),
            (
                LinkFraming::Null { ipv6_family: 30 },
                c6,
                s6,
                Ipv6Extension::None,
            ),
            (LinkFraming::RawIp, c4, s4, Ipv6Extension::None),
            (LinkFraming::RawIp, c6, s6, Ipv6Extension::None),
            (LinkFraming::RawIpv4, c4, s4, Ipv6Extension::None),
            (LinkFraming::RawIpv6, c6, s6, Ipv6Extension::HopByHop),
        ];
        for (framing, c, s, ext) in cases {
            let (cap, body) = one_flow_capture(framing, c, s, ext);
            let segs = decode_all(&cap);
            // SYN, SYN-ACK, ACK, 3 data, ACK, FIN, FIN, ACK
            assert_eq!(segs.len(), 10, "{framing:?}");
            let isn = u32::MAX - 5;
            assert!(segs[0].syn && !segs[0].has_ack && segs[0].seq == isn);
            assert!(
                segs[1].syn
                    && segs[1].has_ack
                    && segs[1].seq == 77
                    && segs[1].ack == isn.wrapping_add(1)
            );
            let data: Vec<&Seg> = segs.iter().filter(|s| !s.payload.is_empty()).collect();
            let seqs: Vec<u32> = data.iter().map(|s| s.seq).collect();
            assert_eq!(
                seqs,
                vec![
                    isn.wrapping_add(1),
                    isn.wrapping_add(101),
                    isn.wrapping_add(201)
                ]
            );
            let joined: Vec<u8> = data.iter().flat_map(|s| s.payload.clone()).collect();
            assert_eq!(joined, body);
            assert_eq!(
                segs[6].ack,
                isn.wrapping_add(251),
                "receiver acknowledges across the wrap"
            );
            assert!(segs[7].fin && segs[7].src.0 == s && segs[7].ack == isn.wrapping_add(251));
            assert!(segs[8].fin && segs[8].src.0 == c && segs[8].ack == 79);
            assert!(!segs[9].fin && segs[9].ack == isn.wrapping_add(252));
            for (p, seg) in cap.packets.iter().zip(&segs) {
                let data = &p.data;
                match framing {
                    LinkFraming::Ethernet { vlan } => {
                        let sliced = SlicedPacket::from_ethernet(data).expect("ethernet");
                        let tags = match vlan {
                            Vlan::Untagged => 0,
                            Vlan::Single(_) => 1,
                            Vlan::QinQ { .. } => 2,
                        };
                        assert_eq!(sliced.link_exts.len(), tags);
                        if let Vlan::QinQ { .. } = vlan {
                            assert_eq!(be16(data, 12), 0x88a8);
                            assert_eq!(be16(data, 14) & 0xfff, 100);
                            assert_eq!(be16(data, 16), 0x8100);
                        }
                    }
                    LinkFraming::LinuxSll => {
                        let sliced = SlicedPacket::from_linux_sll(data).expect("sll");
                        assert!(sliced.transport.is_some());
                        let expected_type = if seg.src.0 == c { 0 } else { 4 };
                        assert_eq!(be16(data, 0), expected_type);
                    }
                    LinkFraming::LinuxSll2 { interface_index } => {
                        assert_eq!(be16(data, 0), if c.is_ipv6() { 0x86dd } else { 0x0800 });
                        assert_eq!(
                            u32::from_be_bytes([data[4], data[5], data[6], data[7]]),
                            interface_index
                        );
                        assert_eq!(be16(data, 8), 1);
                        assert_eq!(data[11], 6);
                    }
                    LinkFraming::Null { ipv6_family } => {
                        // The file is big-endian, so the host order is too.
                        let family = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
                        assert_eq!(family, if c.is_ipv6() { ipv6_family } else { 2 });
                    }
                    _ => {}
                }
                if ext != Ipv6Extension::None {
                    let sliced =
                        SlicedPacket::from_ip(ip_of(framing.link_type().code() as i32, data))
                            .unwrap();
                    let Some(NetSlice::Ipv6(v6)) = sliced.net else {
                        panic!()
                    };
                    assert!(!v6.extensions().is_empty(), "extension header present");
                    let expected_first = if ext == Ipv6Extension::HopByHop {
                        0
                    } else {
                        60
                    };
                    assert_eq!(v6.header().next_header().0, expected_first);
                }
            }
        }
    }

    #[test]
    fn raw_link_types_refuse_the_other_ip_version() {
        let format = PcapFormat::new(ByteOrder::Little, TsResolution::Micro, LinkType::Ipv4);
        let mut cap = Capture::new(
            PcapWriter::new(Vec::new(), format).unwrap(),
            BASE_TIME_NS,
            1,
        );
        let iface = cap
            .add_interface(LinkFraming::RawIpv4, TsResolution::Micro)
            .unwrap();
        let c = Endpoint::new(Ipv6Addr::LOCALHOST, 1);
        let mut f = TcpFlow::new(FlowSpec::new(
            iface,
            c,
            Endpoint::new(Ipv6Addr::LOCALHOST, 2),
        ))
        .unwrap();
        assert!(f.handshake(&mut cap).is_err());
        let mixed = FlowSpec::new(0, c, Endpoint::new(Ipv4Addr::LOCALHOST, 2));
        assert!(TcpFlow::new(mixed).is_err());
    }

    // ---- TCP knobs ----

    /// Client sends `body` with `fate` at MSS 10 on a flow started mid-connection; returns the
    /// decoded segments.
    fn knob_run(fate: Fate, body: &[u8]) -> Vec<Seg> {
        let format = PcapFormat::new(ByteOrder::Little, TsResolution::Nano, LinkType::Raw);
        let mut cap = Capture::new(
            PcapWriter::new(Vec::new(), format).unwrap(),
            BASE_TIME_NS,
            10,
        );
        let iface = cap
            .add_interface(LinkFraming::RawIp, TsResolution::Nano)
            .unwrap();
        let mut spec = FlowSpec::new(iface, v4(2, 5000), v4(1, 80));
        spec.mss = 10;
        spec.client_isn = u32::MAX - 12;
        let mut f = TcpFlow::new(spec).unwrap();
        f.assume_established().unwrap();
        f.send(&mut cap, Side::Client, body, fate).unwrap();
        f.send(&mut cap, Side::Client, b"tail", Fate::Deliver)
            .unwrap();
        f.flush_held(&mut cap).unwrap();
        let bytes = cap.into_writer().into_inner();
        decode_all(&read_capture(&bytes))
    }

    fn client_data(segs: &[Seg]) -> Vec<(u32, Vec<u8>)> {
        segs.iter()
            .filter(|s| s.src.1 == 5000 && !s.payload.is_empty())
            .map(|s| (s.seq.wrapping_sub(u32::MAX - 11), s.payload.clone()))
            .collect()
    }

    #[test]
    fn tcp_knobs_shape_the_captured_segments_as_intended() {
        let body: Vec<u8> = (b'a'..=b'z').chain(b'A'..=b'S').collect(); // 45 bytes
        let ack_after_body = (u32::MAX - 11).wrapping_add(45);

        let segs = knob_run(Fate::Deliver, &body);
        let data = client_data(&segs);
        assert_eq!(
            data.iter().map(|d| d.0).collect::<Vec<_>>(),
            vec![0, 10, 20, 30, 40, 45]
        );
        assert_eq!(
            segs[0].payload,
            body[..10].to_vec(),
            "mid-connection: data comes first"
        );

        let segs = knob_run(Fate::Drop, &body);
        let data = client_data(&segs);
        assert_eq!(data, vec![(45, b"tail".to_vec())]);
        assert_eq!(segs[0].src.1, 80, "the receiver's ACK is all that shows");
        assert_eq!(
            segs[0].ack, ack_after_body,
            "ACK covers the bytes the capture lost"
        );

        let segs = knob_run(Fate::Duplicate, &body);
        let data = client_data(&segs);
        let offsets: Vec<u32> = data.iter().map(|d| d.0).collect();
        assert_eq!(offsets, vec![0, 0, 10, 10, 20, 20, 30, 30, 40, 40, 45]);

        let segs = knob_run(Fate::OverlapRetransmit, &body);
        let data = client_data(&segs);
        let ranges: Vec<(u32, usize)> = data.iter().map(|d| (d.0, d.1.len())).collect();
        assert_eq!(ranges[..4], [(0, 5), (2, 8), (10, 5), (12, 8)]);
        for (off, bytes) in &data[..data.len() - 1] {
            assert_eq!(bytes[..], body[*off as usize..*off as usize + bytes.len()]);
        }

        let segs = knob_run(Fate::SwapWithNext, &body);
        let offsets: Vec<u32> = client_data(&segs).iter().map(|d| d.0).collect();
        assert_eq!(offsets, vec![10, 0, 20, 30, 40, 45]);

        // A one-segment write held back comes after the next write's first segment, and the
        // receiver's ACK in between stops at the hole.
        let segs = knob_run(Fate::SwapWithNext, b"short");
        let offsets: Vec<u32> = client_data(&segs).iter().map(|d| d.0).collect();
        assert_eq!(offsets, vec![5, 0]);
        assert_eq!(segs[0].src.1, 80);
        assert_eq!(segs[0].ack, (u32::MAX - 11), "duplicate ACK at the hole");
    }

    #[test]
    fn flow_state_errors_are_reported_not_panicked() {
        let format = PcapFormat::new(ByteOrder::Little, TsResolution::Micro, LinkType::Raw);
        let mut cap = Capture::new(
            PcapWriter::new(Vec::new(), format).unwrap(),
            BASE_TIME_NS,
            1,
        );
        let mut spec = FlowSpec::new(0, v4(2, 1), v4(1, 2));
        assert!(
            TcpFlow::new(spec.clone())
                .unwrap()
                .handshake(&mut cap)
                .is_err(),
            "no interface yet"
        );
        cap.add_interface(LinkFraming::RawIp, TsResolution::Micro)
            .unwrap();
        spec.mss = 4;
        assert!(TcpFlow::new(spec.clone()).is_err());
        spec.mss = 1460;
        let mut f = TcpFlow::new(spec).unwrap();
        assert!(f.send(&mut cap, Side::Client, b"x", Fate::Deliver).is_err());
        f.handshake(&mut cap).unwrap();
        assert!(f.handshake(&mut cap).is_err());
        f.reset(&mut cap, Side::Client).unwrap();
        assert!(f.close(&mut cap, Side::Client).is_err());
        assert!(f.send(&mut cap, Side::Server, b"x", Fate::Deliver).is_err());
        assert_eq!(cap.frames(), 4);
        assert_eq!(cap.connections(), 1);
    }

    // ---- gzip ----

    #[test]
    fn gzip_pieces_decode_with_flate2_after_every_flush_and_whole() {
        let pieces: [&[u8]; 3] = [
            b"id: 1\ndata: {\"a\":1}\n\n",
            b"",
            &[0u8, 143, 144, 255, 10, 13],
        ];
        let mut gz = GzipStream::new();
        let mut bytes = Vec::new();
        let mut expect = Vec::new();
        for p in pieces {
            gz.piece(p, &mut bytes);
            expect.extend_from_slice(p);
            // Everything written so far decodes to everything put in so far.
            let mut d = flate2::Decompress::new(false);
            let mut out = Vec::with_capacity(expect.len() + 16);
            d.decompress_vec(&bytes[10..], &mut out, flate2::FlushDecompress::Sync)
                .unwrap();
            assert_eq!(out, expect);
            assert!(bytes.ends_with(&[0, 0, 0xff, 0xff]));
        }
        gz.finish(&mut bytes);
        let mut whole = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut whole)
            .expect("complete gzip member with a valid CRC");
        assert_eq!(whole, expect);
        assert_eq!(crc32_update(0, b"123456789"), 0xcbf4_3926);
    }

    // ---- verdict rules ----

    #[test]
    fn classify_ids_follows_the_decision_boundary() {
        use ExpectedVerdict::*;
        let cases = [
            ("4417", "4418", Correct),
            ("4417", "4419", GapSkipped),
            ("4417", "4417", Replayed),
            ("4417", "0", Replayed),
            ("0", "1", Correct),
            ("9", "10", Correct),
            ("99", "100", Correct),
            ("99", "99", Replayed),
            ("0099", "100", Correct),
            ("18446744073709551615", "18446744073709551616", Correct),
            (
                "99999999999999999999999999",
                "100000000000000000000000001",
                GapSkipped,
            ),
            (
                "100000000000000000000000000",
                "99999999999999999999999999",
                Replayed,
            ),
            ("sA_1732_x9f", "sA_1733_k2m", Unverifiable),
            ("12", "13a", Unverifiable),
            ("-1", "0", Unverifiable),
            ("", "1", Unverifiable),
            ("1", "", Unverifiable),
            ("+1", "2", Unverifiable),
            ("١", "2", Unverifiable),
        ];
        for (last, first, verdict) in cases {
            assert_eq!(classify_ids(last, first), verdict, "{last} -> {first}");
        }
        assert_eq!(succ_decimal("0"), "1");
        assert_eq!(succ_decimal("000"), "1");
        assert_eq!(succ_decimal("1999"), "2000");
    }

    #[test]
    fn expected_outcome_covers_every_verdict() {
        use ExpectedVerdict::*;
        let stream = |events: Vec<SseEvent>, close| {
            ResumeResponse::Stream(EventStream {
                style: SseStyle::default(),
                events,
                gzip: false,
                close,
                head_fate: Fate::Deliver,
                per_write: 1,
            })
        };
        let id = |s: &str| SseEvent::with_id(s);
        let cases: Vec<(ResumeResponse, ExpectedVerdict, Option<&str>)> = vec![
            (
                stream(vec![id("11")], StreamClose::Open),
                Correct,
                Some("11"),
            ),
            (
                stream(vec![id("12")], StreamClose::TerminalChunk),
                GapSkipped,
                Some("12"),
            ),
            (
                stream(vec![id("10")], StreamClose::ServerFin),
                Replayed,
                Some("10"),
            ),
            (
                stream(vec![SseEvent::priming("11"), id("12")], StreamClose::Open),
                Correct,
                Some("11"),
            ),
            (
                stream(vec![SseEvent::without_id(), id("3")], StreamClose::Open),
                Replayed,
                Some("3"),
            ),
            (
                stream(vec![id("x")], StreamClose::Open),
                Unverifiable,
                Some("x"),
            ),
            (ResumeResponse::Status(400), Rejected, None),
            (ResumeResponse::Status(405), Rejected, None),
            (stream(vec![], StreamClose::ServerFin), Empty, None),
            (stream(vec![], StreamClose::ClientReset), Unverifiable, None),
            (stream(vec![], StreamClose::TerminalChunk), Empty, None),
            (
                stream(vec![SseEvent::without_id()], StreamClose::TerminalChunk),
                Empty,
                None,
            ),
            (stream(vec![], StreamClose::Open), CaptureIncomplete, None),
            (
                stream(vec![SseEvent::without_id()], StreamClose::Open),
                CaptureIncomplete,
                None,
            ),
            (ResumeResponse::CaptureEnds, CaptureIncomplete, None),
            (
                stream(
                    vec![id("11").fate(Fate::Drop), id("12")],
                    StreamClose::TerminalChunk,
                ),
                CaptureIncomplete,
                None,
            ),
            (
                stream(
                    vec![SseEvent::without_id().fate(Fate::Drop), id("11")],
                    StreamClose::Open,
                ),
                CaptureIncomplete,
                None,
            ),
            (
                stream(vec![id("11"), id("12").fate(Fate::Drop)], StreamClose::Open),
                Correct,
                Some("11"),
            ),
            (
                stream(vec![id("11").fate(Fate::Duplicate)], StreamClose::Open),
                Correct,
                Some("11"),
            ),
            (
                stream(
                    vec![id("11").fate(Fate::SwapWithNext), id("12")],
                    StreamClose::Open,
                ),
                Correct,
                Some("11"),
            ),
            (
                stream(
                    vec![SseEvent::without_id().fate(Fate::Drop)],
                    StreamClose::ServerFin,
                ),
                CaptureIncomplete,
                None,
            ),
        ];
        for (response, verdict, first) in cases {
            let r = Resume::new("10", response.clone());
            assert_eq!(
                expected_outcome(&r),
                (verdict, first.map(str::to_string)),
                "{response:?}"
            );
        }
        let mut head_lost = EventStream::with_ids(&["11"], StreamClose::TerminalChunk);
        head_lost.head_fate = Fate::Drop;
        let r = Resume::new("10", ResumeResponse::Stream(head_lost));
        assert_eq!(expected_outcome(&r), (CaptureIncomplete, None));
    }

    #[test]
    fn expectation_lines_have_the_fixed_keys_and_escape_strings() {
        let e = ExpectedResume {
            session_id: Some("a\"b\\c\u{1}é".into()),
            verdict: ExpectedVerdict::GapSkipped,
            last_event_id: "4417".into(),
            first_event_id: None,
            tcp_stream: 3,
            request_frame: 41,
            request_time_ns: 5,
        };
        let line = e.to_json_line();
        assert_eq!(
            line,
            "{\"session_id\":\"a\\\"b\\\\c\\u0001é\",\"verdict\":\"gap_skipped\",\"last_event_id\":\"4417\",\"first_event_id\":null,\"tcp_stream\":3,\"request_frame\":41}\n"
        );
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["session_id"], "a\"b\\c\u{1}é");
        assert_eq!(v.as_object().unwrap().len(), 6);
        let mut out = Vec::new();
        write_expectations(&mut out, &[e.clone(), e]).unwrap();
        assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 2);
    }

    // ---- scenarios ----

    #[test]
    fn scenario_definitions_that_cannot_be_captured_are_refused() {
        let base = || session("s", 0, 1000, Resume::new("1", ResumeResponse::Status(400)));
        let mut dropped = base();
        if let ExchangeKind::Resume(r) = &mut dropped.exchanges[2].kind {
            r.request_fate = Fate::Drop;
        }
        assert!(Scenario::new().add_session(&dropped).is_err());
        let ok_status = session("s", 0, 1000, Resume::new("1", ResumeResponse::Status(204)));
        assert!(Scenario::new().add_session(&ok_status).is_err());
        let after_end = base().exchange(
            1,
            ExchangeKind::Resume(Resume::new("1", ResumeResponse::CaptureEnds)),
        );
        // The first resume on connection 1 is a status answer: the connection then closes
        // after its last use, so a later use is fine; after a stream that ends it, it is not.
        assert!(Scenario::new().add_session(&after_end).is_ok());
        let ended = session("s", 0, 1000, Resume::new("1", ResumeResponse::CaptureEnds))
            .exchange(1, ExchangeKind::InitializedNotification);
        assert!(Scenario::new().add_session(&ended).is_err());
        let unknown = base().exchange(5, ExchangeKind::InitializedNotification);
        assert!(Scenario::new().add_session(&unknown).is_err());
        let mut s = Scenario::new();
        s.add_session(&base()).unwrap();
        assert_eq!(s.resume_count(), 1);
    }

    /// The sample sessions whose every byte reaches the capture, on one wire.
    fn sample_on_wire(wire: Wire) -> (Vec<u8>, Vec<ExpectedResume>, String) {
        let framing = LinkFraming::Ethernet {
            vlan: Vlan::Untagged,
        };
        let format = PcapFormat::new(ByteOrder::Big, TsResolution::Micro, framing.link_type());
        let mut cap = Capture::new(
            PcapWriter::new(Vec::new(), format).unwrap(),
            BASE_TIME_NS,
            1_000,
        );
        let iface = cap.add_interface(framing, TsResolution::Micro).unwrap();
        let mut scenario = Scenario::new();
        for s in sample_sessions(iface) {
            let lossy = s.exchanges.iter().any(|e| match &e.kind {
                ExchangeKind::Resume(r) => match &r.response {
                    ResumeResponse::Stream(st) => st.events.iter().any(|ev| ev.fate == Fate::Drop),
                    _ => false,
                },
                _ => false,
            });
            if !lossy {
                scenario.add_session(&s.wire(wire)).unwrap();
            }
        }
        let mut keys = Vec::new();
        let expected = scenario
            .run_with_key_log(&mut cap, Interleave::RoundRobin, &mut keys)
            .unwrap();
        (
            cap.into_writer().into_inner(),
            expected,
            String::from_utf8(keys).unwrap(),
        )
    }

    /// Every direction of every connection of a capture, whole: (stream, client side) → bytes.
    fn all_directions(bytes: &[u8]) -> Vec<((u64, bool), Vec<u8>)> {
        let read = read_capture(bytes);
        let segs = decode_all(&read);
        let idx = stream_indices(&segs);
        let mut out = Vec::new();
        let streams = idx.iter().copied().max().map_or(0, |m| m + 1);
        for stream in 0..streams {
            let Some(first) = segs.iter().zip(&idx).find(|(_, i)| **i == stream) else {
                continue;
            };
            // The first packet of a connection is the client's SYN.
            for (client, from) in [(true, first.0.src), (false, first.0.dst)] {
                let dir = direction_bytes(&segs, &idx, stream, from);
                let whole: Option<Vec<u8>> = dir.into_iter().collect();
                out.push(((stream, client), whole.expect("no byte missing")));
            }
        }
        out
    }

    #[test]
    fn tls13_records_carry_the_cleartext_bytes_and_the_same_expectations() {
        let (plain, plain_expected, no_keys) = sample_on_wire(Wire::default());
        assert!(no_keys.is_empty());
        let suite = TlsSuite::Tls13ChaCha20Poly1305;
        let wire = Wire {
            http: HttpVersion::Http1,
            tls: Some(TlsSpec { suite, seed: 3 }),
        };
        let (sealed, sealed_expected, keys) = sample_on_wire(wire);
        assert_eq!(sample_on_wire(wire).0, sealed, "deterministic");
        let verdicts = |e: &[ExpectedResume]| {
            e.iter()
                .map(|r| (r.verdict, r.first_event_id.clone(), r.tcp_stream))
                .collect::<Vec<_>>()
        };
        assert_eq!(verdicts(&sealed_expected), verdicts(&plain_expected));
        let clear = all_directions(&plain);
        let tls = all_directions(&sealed);
        assert_eq!(clear.len(), tls.len());
        let randoms: Vec<&str> = keys
            .lines()
            .filter(|l| l.starts_with("CLIENT_TRAFFIC_SECRET_0 "))
            .map(|l| l.split(' ').nth(1).unwrap())
            .collect();
        assert_eq!(randoms.len() * 2, tls.len(), "one key set per connection");
        for (((stream, client), want), (_, got)) in clear.iter().zip(&tls) {
            // The ClientHello names the client random the key log lines are filed under.
            let hello = &tls[(*stream as usize) * 2].1;
            let random: String = hello[11..43].iter().map(|b| format!("{b:02x}")).collect();
            let lines: String = keys
                .lines()
                .filter(|l| l.split(' ').nth(1) == Some(random.as_str()))
                .map(|l| format!("{l}\n"))
                .collect();
            let (hs, ap) = if *client {
                ("CLIENT_HANDSHAKE_TRAFFIC_SECRET", "CLIENT_TRAFFIC_SECRET_0")
            } else {
                ("SERVER_HANDSHAKE_TRAFFIC_SECRET", "SERVER_TRAFFIC_SECRET_0")
            };
            let hs = tls::tests::key_log_secret(&lines, hs);
            let ap = tls::tests::key_log_secret(&lines, ap);
            let mut plaintext = Vec::new();
            let (mut hs_seq, mut ap_seq, mut in_app) = (0, 0, false);
            for r in tls::tests::records(got) {
                assert!(r.2.len() <= 16_384 + 256);
                if r.0 != 23 {
                    continue;
                }
                let mut inner = if in_app {
                    tls::tests::open13(suite, &ap, ap_seq, &r)
                } else {
                    tls::tests::open13(suite, &hs, hs_seq, &r)
                };
                let content_type = inner.pop().unwrap();
                if in_app {
                    ap_seq += 1;
                } else {
                    hs_seq += 1;
                    // Finished ends the direction's handshake epoch.
                    in_app = inner.first() == Some(&20);
                }
                if content_type == 23 {
                    plaintext.extend(inner);
                }
            }
            assert_eq!(&plaintext, want, "stream {stream}, client {client}");
        }
    }

    #[test]
    fn h2c_carries_each_exchange_on_its_own_stream() {
        let (plain, _, _) = sample_on_wire(Wire::default());
        let wire = Wire {
            http: HttpVersion::Http2,
            tls: None,
        };
        let (framed, _, _) = sample_on_wire(wire);
        let ids = |b: &[u8]| {
            let mut out = Vec::new();
            let mut at = 0;
            // At a line start: not the end of `Mcp-Session-Id: `.
            while let Some(k) = find(&b[at..], b"\nid: ") {
                let start = at + k + 5;
                let end = start
                    + b[start..]
                        .iter()
                        .position(|c| *c == b'\r' || *c == b'\n')
                        .unwrap();
                out.push(String::from_utf8_lossy(&b[start..end]).to_string());
                at = end;
            }
            out
        };
        for (((stream, client), clear), (_, got)) in
            all_directions(&plain).iter().zip(&all_directions(&framed))
        {
            let frames = if *client {
                assert!(got.starts_with(h2::CLIENT_PREFACE));
                h2::tests::frames(&got[h2::CLIENT_PREFACE.len()..])
            } else {
                h2::tests::frames(got)
            };
            assert_eq!(frames[0].0, h2::FRAME_SETTINGS, "stream {stream}");
            let mut data = vec![b'\n'];
            let mut ended = Vec::new();
            for f in &frames {
                assert!(f.3.len() <= h2::MAX_FRAME_PAYLOAD);
                if f.0 == h2::FRAME_HEADERS {
                    assert_eq!(f.2 % 2, 1, "client-initiated streams are odd");
                    let fields = h2::tests::decode_block(&f.3);
                    let first = &fields[0].0;
                    assert_eq!(first, if *client { ":method" } else { ":status" });
                    assert!(fields.iter().all(|(n, _)| *n == n.to_ascii_lowercase()));
                    assert!(!fields.iter().any(|(n, _)| n == "transfer-encoding"));
                    if *client
                        && let Some((_, v)) = fields.iter().find(|(n, _)| n == "last-event-id")
                    {
                        assert!(
                            find(clear, format!("ast-Event-ID: {v}").as_bytes()).is_some()
                                || find(clear, format!("ast-event-id: {v}").as_bytes()).is_some()
                        );
                    }
                }
                if f.0 == h2::FRAME_DATA {
                    data.extend_from_slice(&f.3);
                }
                if f.1 & h2::FLAG_END_STREAM != 0 && f.0 != h2::FRAME_SETTINGS {
                    ended.push(f.2);
                }
            }
            if !*client {
                // Event ids in the same order as in the chunked HTTP/1.1 bodies.
                assert_eq!(ids(&data), ids(clear), "stream {stream}");
            }
            let mut sorted = ended.clone();
            sorted.dedup();
            assert_eq!(sorted, ended, "END_STREAM once per stream");
        }
    }

    #[test]
    fn generation_is_deterministic() {
        let (a, ea) = sample_pcap();
        let (b, eb) = sample_pcap();
        assert_eq!(a, b);
        assert_eq!(ea, eb);
        assert_eq!(ea.len(), 9);
    }

    #[test]
    fn sample_scenario_bytes_agree_with_its_expectations() {
        let (bytes, expected) = sample_pcap();
        let verdicts: Vec<&str> = expected.iter().map(|e| e.verdict.as_str()).collect();
        for v in [
            "correct",
            "replayed",
            "gap_skipped",
            "rejected",
            "empty",
            "unverifiable",
            "capture_incomplete",
        ] {
            assert!(verdicts.contains(&v), "{v} missing from {verdicts:?}");
        }
        check_capture_against_expectations(&bytes, &expected);
        // Connections are numbered in order of first packet: with round-robin interleaving the
        // first connection of every session opens before any second one.
        let streams: Vec<u64> = expected.iter().map(|e| e.tcp_stream).collect();
        assert!(streams.iter().all(|s| *s >= 9));
    }

    #[test]
    fn sample_scenario_in_pcapng_with_two_sections_and_simple_blocks() {
        let mut cap = Capture::new(
            PcapngWriter::new(Vec::new(), ByteOrder::Big).unwrap(),
            BASE_TIME_NS,
            333,
        );
        let sll = cap
            .add_interface(LinkFraming::LinuxSll, TsResolution::Micro)
            .unwrap();
        cap.writer_mut().set_simple_packets(true);
        let mut first = Scenario::new();
        first
            .add_session(
                &SessionSpec::new(Some("x"), vec![ConnSpec::new(flow(sll, 7000))])
                    .exchange(0, ExchangeKind::InitializedNotification),
            )
            .unwrap();
        assert!(
            first
                .run(&mut cap, Interleave::Sequential)
                .unwrap()
                .is_empty()
        );
        cap.writer_mut().set_simple_packets(false);
        cap.new_section(ByteOrder::Little).unwrap();
        let raw = cap
            .add_interface(LinkFraming::RawIpv4, TsResolution::Micro)
            .unwrap();
        let eth = cap
            .add_interface(
                LinkFraming::Ethernet {
                    vlan: Vlan::Untagged,
                },
                TsResolution::Nano,
            )
            .unwrap();
        let mut second = Scenario::new();
        for s in sample_sessions(raw).into_iter().take(3) {
            second.add_session(&s).unwrap();
        }
        for s in sample_sessions(eth).into_iter().skip(3) {
            let mut s = s;
            for c in &mut s.connections {
                c.flow.client.port += 1000;
            }
            second.add_session(&s).unwrap();
        }
        let expected = second.run(&mut cap, Interleave::RoundRobin).unwrap();
        let frames = cap.frames();
        let bytes = cap.into_writer().into_inner();
        let read = read_capture(&bytes);
        assert_eq!(read.sections, vec![true, false]);
        assert_eq!(read.interfaces, vec![(113, 6), (228, 6), (1, 9)]);
        assert_eq!(read.packets.len() as u64, frames);
        assert!(read.simple_blocks > 0);
        assert_eq!(expected.len(), 9);
        check_capture_against_expectations(&bytes, &expected);
    }

    #[test]
    fn a_resume_request_in_a_simple_packet_block_is_refused() {
        let mut cap = Capture::new(
            PcapngWriter::new(Vec::new(), ByteOrder::Little).unwrap(),
            BASE_TIME_NS,
            1,
        );
        let i = cap
            .add_interface(LinkFraming::RawIp, TsResolution::Micro)
            .unwrap();
        cap.writer_mut().set_simple_packets(true);
        let mut s = Scenario::new();
        s.add_session(&session(
            "s",
            i,
            9000,
            Resume::new("1", ResumeResponse::Status(404)),
        ))
        .unwrap();
        assert!(s.run(&mut cap, Interleave::Sequential).is_err());
    }

    /// The checked-in fixtures: parse, checksum-valid, and their expectations agree with what
    /// their bytes show.
    #[test]
    fn checked_in_fixtures_agree_with_their_expectations() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/gen");
        let mut checked = 0;
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .expect("fixtures/gen exists")
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            let Some(stem) = name.strip_suffix(".expect.jsonl") else {
                continue;
            };
            let capture = ["pcap", "pcapng"]
                .iter()
                .map(|ext| dir.join(format!("{stem}.{ext}")))
                .find(|p| p.exists())
                .expect("capture beside its expectations");
            let bytes = std::fs::read(&capture).unwrap();
            let read = read_capture(&bytes);
            let segs = decode_all(&read);
            let idx = stream_indices(&segs);
            let lines = std::fs::read_to_string(&path).unwrap();
            let mut previous = (0, 0);
            for line in lines.lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
                assert_eq!(keys.len(), 6, "{name}: {keys:?}");
                let e = ExpectedResume {
                    session_id: v["session_id"].as_str().map(str::to_string),
                    verdict: match v["verdict"].as_str().unwrap() {
                        "correct" => ExpectedVerdict::Correct,
                        "gap_skipped" => ExpectedVerdict::GapSkipped,
                        "replayed" => ExpectedVerdict::Replayed,
                        "rejected" => ExpectedVerdict::Rejected,
                        "empty" => ExpectedVerdict::Empty,
                        "unverifiable" => ExpectedVerdict::Unverifiable,
                        "capture_incomplete" => ExpectedVerdict::CaptureIncomplete,
                        other => panic!("{name}: verdict {other}"),
                    },
                    last_event_id: v["last_event_id"].as_str().unwrap().to_string(),
                    first_event_id: v["first_event_id"].as_str().map(str::to_string),
                    tcp_stream: v["tcp_stream"].as_u64().unwrap(),
                    request_frame: v["request_frame"].as_u64().unwrap(),
                    request_time_ns: 0,
                };
                let time = read.packets[e.request_frame as usize - 1].time_ns.unwrap();
                assert!((time, e.request_frame) > previous, "{name}: report order");
                previous = (time, e.request_frame);
                let (verdict, first) = judge_from_bytes(&segs, &idx, &e);
                assert_eq!(
                    (verdict, first),
                    (e.verdict, e.first_event_id.clone()),
                    "{name}"
                );
                let request = String::from_utf8_lossy(&segs[e.request_frame as usize - 1].payload)
                    .to_string();
                if let Some(sid) = &e.session_id {
                    // Named by the client's request, or else by the server's answer.
                    let client = segs[e.request_frame as usize - 1].src;
                    let server = segs[e.request_frame as usize - 1].dst;
                    let named_by = |side| {
                        let joined = direction_bytes(&segs, &idx, e.tcp_stream, side);
                        let text: Vec<u8> = joined.iter().map(|b| b.unwrap_or(0)).collect();
                        find(&text, sid.as_bytes()).is_some()
                    };
                    assert!(
                        named_by(client) || named_by(server),
                        "{name}: session id sent"
                    );
                }
                assert!(request.starts_with("GET "));
                checked += 1;
            }
        }
        assert!(checked >= 30, "only {checked} resumes checked");
    }
}
