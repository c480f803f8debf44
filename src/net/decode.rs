//! Link layer → IP → TCP.
//!
//! Input: one captured packet's bytes and its link type.
//! Output: a [`TcpPacket`] (endpoints, sequence and acknowledgment numbers, flags, the payload
//! bytes the capture holds), or the reason the packet carries no TCP we can follow.
//! Invariants: never reads past the captured bytes; a payload cut by the snap length is handed
//! on as far as it was captured (the reassembler sees the rest as missing, so it becomes a gap
//! rather than being glued over); IP fragments are not reassembled and are counted instead.

use std::net::IpAddr;

use etherparse::{IpNumber, LaxIpSlice, TcpSlice};

use crate::net::tcp::TcpFlags;

/// One end of a TCP connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    /// The IP address.
    pub ip: IpAddr,
    /// The TCP port.
    pub port: u16,
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ip {
            IpAddr::V4(ip) => write!(f, "{ip}:{}", self.port),
            IpAddr::V6(ip) => write!(f, "[{ip}]:{}", self.port),
        }
    }
}

/// A decoded TCP segment, borrowing the payload from the packet.
#[derive(Clone, Copy, Debug)]
pub struct TcpPacket<'a> {
    /// The sender.
    pub src: Endpoint,
    /// The receiver.
    pub dst: Endpoint,
    /// Sequence number of the first payload byte (of the SYN itself on a SYN).
    pub seq: u32,
    /// Acknowledgment number (meaningful when `flags.ack()`).
    pub ack: u32,
    /// The control bits.
    pub flags: TcpFlags,
    /// The payload as captured (shorter than sent when the snap length cut the frame).
    pub payload: &'a [u8],
}

/// Why a packet yields no TCP segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Skip {
    /// A link type this tool does not read.
    UnsupportedLinkType,
    /// Not IP, or IP carrying something other than TCP.
    NotTcp,
    /// An IP fragment (fragments are not reassembled).
    IpFragment,
    /// Link, IP or TCP header cut short or invalid.
    Malformed,
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: [u16; 3] = [0x8100, 0x88a8, 0x9100];
/// VLAN tags followed before giving up (QinQ uses two; more are unusual).
const MAX_VLAN_TAGS: usize = 4;

/// Link types read (LINKTYPE_* values).
#[allow(missing_docs)] // the names are the registry's own: LINKTYPE_<name>
pub mod linktype {
    pub const NULL: u32 = 0;
    pub const ETHERNET: u32 = 1;
    pub const RAW_DLT12: u32 = 12;
    pub const RAW_DLT14: u32 = 14;
    pub const RAW: u32 = 101;
    pub const LOOP: u32 = 108;
    pub const LINUX_SLL: u32 = 113;
    pub const IPV4: u32 = 228;
    pub const IPV6: u32 = 229;
    pub const LINUX_SLL2: u32 = 276;
}

/// Decodes a packet down to TCP.
#[inline]
pub fn decode(linktype: u32, data: &[u8]) -> Result<TcpPacket<'_>, Skip> {
    if linktype == linktype::ETHERNET
        && let Some(p) = ethernet_ipv4_tcp(data)
    {
        return Ok(p);
    }
    decode_any(linktype, data)
}

/// Every link type and IP layout: what [`ethernet_ipv4_tcp`] leaves. Kept out of line, so
/// that the frames nearly every capture is made of pay for none of its branches.
#[inline(never)]
fn decode_any(linktype: u32, data: &[u8]) -> Result<TcpPacket<'_>, Skip> {
    let ip = link_payload(linktype, data)?;
    tcp_in_ip(ip)
}

/// The frame most captures hold, read at fixed offsets in one pass: Ethernet II with no VLAN
/// tag, IPv4 (options allowed) that is no fragment, TCP. `None` for anything else, which
/// [`decode_any`] then reads; it gives these frames the same answer, only slower.
#[inline(always)]
fn ethernet_ipv4_tcp(data: &[u8]) -> Option<TcpPacket<'_>> {
    // Ethernet header (14 bytes), then the fixed part of the IPv4 header (20).
    let h: &[u8; 34] = data.first_chunk()?;
    let vihl = h[14];
    // EtherType IPv4, version 4, the more-fragments bit and the fragment offset clear,
    // protocol TCP: one test for the frames this path takes.
    if [h[12], h[13]] != [0x08, 0x00] || vihl >> 4 != 4 || (h[20] & 0x3f) | h[21] != 0 || h[23] != 6
    {
        return None;
    }
    let ip = &data[14..];
    let header_len = usize::from(vihl & 0x0f) * 4;
    if header_len < 20 || header_len > ip.len() {
        return None;
    }
    // A total length that lies falls back to the captured bytes, as on the general path.
    let total = usize::from(u16::from_be_bytes([h[16], h[17]]));
    let end = if total < header_len || total > ip.len() {
        ip.len()
    } else {
        total
    };
    let t = &ip[header_len..end];
    let th: &[u8; 20] = t.first_chunk()?;
    let data_offset = usize::from(th[12] >> 4) * 4;
    if data_offset < 20 || data_offset > t.len() {
        return None;
    }
    let src = IpAddr::from([h[26], h[27], h[28], h[29]]);
    let dst = IpAddr::from([h[30], h[31], h[32], h[33]]);
    Some(segment(src, dst, th, &t[data_offset..]))
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Strips the link-layer header; returns the IP packet (or `NotTcp` for other protocols).
fn link_payload(linktype: u32, data: &[u8]) -> Result<&[u8], Skip> {
    use linktype::*;
    match linktype {
        ETHERNET => {
            let mut ethertype = be16(data, 12).ok_or(Skip::Malformed)?;
            let mut at = 14;
            let mut tags = 0;
            while ETHERTYPE_VLAN.contains(&ethertype) {
                tags += 1;
                if tags > MAX_VLAN_TAGS {
                    return Err(Skip::Malformed);
                }
                ethertype = be16(data, at + 2).ok_or(Skip::Malformed)?;
                at += 4;
            }
            ip_by_ethertype(ethertype, data.get(at..).ok_or(Skip::Malformed)?)
        }
        LINUX_SLL => {
            let proto = be16(data, 14).ok_or(Skip::Malformed)?;
            ip_by_ethertype(proto, data.get(16..).ok_or(Skip::Malformed)?)
        }
        LINUX_SLL2 => {
            let proto = be16(data, 0).ok_or(Skip::Malformed)?;
            ip_by_ethertype(proto, data.get(20..).ok_or(Skip::Malformed)?)
        }
        NULL | LOOP => {
            let fam = data.get(..4).ok_or(Skip::Malformed)?;
            let fam = [fam[0], fam[1], fam[2], fam[3]];
            // NULL stores the family in the capturing host's byte order; LOOP in network order.
            let family = if linktype == LOOP || (fam[0] == 0 && fam[1] == 0) {
                u32::from_be_bytes(fam)
            } else {
                u32::from_le_bytes(fam)
            };
            match family {
                2 | 24 | 28 | 30 => Ok(&data[4..]),
                _ => Err(Skip::NotTcp),
            }
        }
        RAW | RAW_DLT12 | RAW_DLT14 | IPV4 | IPV6 => Ok(data),
        _ => Err(Skip::UnsupportedLinkType),
    }
}

fn ip_by_ethertype(ethertype: u16, rest: &[u8]) -> Result<&[u8], Skip> {
    match ethertype {
        ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => Ok(rest),
        _ => Err(Skip::NotTcp),
    }
}

fn tcp_in_ip(ip: &[u8]) -> Result<TcpPacket<'_>, Skip> {
    match plain_ip(ip) {
        Some(Ok((src, dst, segment))) => tcp_segment(src, dst, segment),
        Some(Err(skip)) => Err(skip),
        None => tcp_in_ip_general(ip),
    }
}

/// The common case read at fixed offsets: IPv4 (options allowed) and IPv6 directly followed
/// by TCP. `None` hands everything else (extension headers, IPsec, jumbograms, damage) to the
/// general parser, which gives the same answer for these cases too, only slower.
#[allow(clippy::type_complexity)]
fn plain_ip(ip: &[u8]) -> Option<Result<(IpAddr, IpAddr, &[u8]), Skip>> {
    let first = *ip.first()?;
    match first >> 4 {
        4 => {
            let header_len = usize::from(first & 0x0f) * 4;
            if ip.len() < 20 || header_len < 20 || header_len > ip.len() {
                return None;
            }
            let more_fragments = ip[6] & 0x20 != 0;
            let fragment_offset = u16::from_be_bytes([ip[6] & 0x1f, ip[7]]);
            if more_fragments || fragment_offset != 0 {
                return Some(Err(Skip::IpFragment));
            }
            match ip[9] {
                6 => {}
                // IPsec authentication headers may wrap TCP: the general parser reads them.
                51 => return None,
                _ => return Some(Err(Skip::NotTcp)),
            }
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            // A total length that lies (shorter than the header, or longer than what was
            // captured) falls back to the captured bytes, as the general parser does.
            let end = if total < header_len || total > ip.len() {
                ip.len()
            } else {
                total
            };
            let src = IpAddr::from([ip[12], ip[13], ip[14], ip[15]]);
            let dst = IpAddr::from([ip[16], ip[17], ip[18], ip[19]]);
            Some(Ok((src, dst, &ip[header_len..end])))
        }
        6 => {
            if ip.len() < 40 || ip[6] != 6 {
                return None;
            }
            let payload_len = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            if payload_len == 0 {
                return None;
            }
            let end = (40 + payload_len).min(ip.len());
            let mut src = [0u8; 16];
            src.copy_from_slice(&ip[8..24]);
            let mut dst = [0u8; 16];
            dst.copy_from_slice(&ip[24..40]);
            Some(Ok((IpAddr::from(src), IpAddr::from(dst), &ip[40..end])))
        }
        _ => None,
    }
}

fn tcp_segment(src: IpAddr, dst: IpAddr, t: &[u8]) -> Result<TcpPacket<'_>, Skip> {
    let th: &[u8; 20] = t.first_chunk().ok_or(Skip::Malformed)?;
    let data_offset = usize::from(th[12] >> 4) * 4;
    if data_offset < 20 || data_offset > t.len() {
        return Err(Skip::Malformed);
    }
    Ok(segment(src, dst, th, &t[data_offset..]))
}

/// The segment whose fixed TCP header is `th` (read as one array, with no check a field) and
/// whose payload is `payload`.
#[inline(always)]
fn segment<'a>(src: IpAddr, dst: IpAddr, th: &[u8; 20], payload: &'a [u8]) -> TcpPacket<'a> {
    let word = |at: usize| u32::from_be_bytes([th[at], th[at + 1], th[at + 2], th[at + 3]]);
    let flags = th[13];
    TcpPacket {
        src: Endpoint {
            ip: src,
            port: u16::from_be_bytes([th[0], th[1]]),
        },
        dst: Endpoint {
            ip: dst,
            port: u16::from_be_bytes([th[2], th[3]]),
        },
        seq: word(4),
        ack: word(8),
        flags: TcpFlags::from_header_byte(flags),
        payload,
    }
}

/// Every IP layout etherparse reads: extension headers, authentication headers, jumbograms.
fn tcp_in_ip_general(ip: &[u8]) -> Result<TcpPacket<'_>, Skip> {
    let (slice, _ext_err) = LaxIpSlice::from_slice(ip).map_err(|_| Skip::Malformed)?;
    if slice.is_fragmenting_payload() {
        return Err(Skip::IpFragment);
    }
    let payload = slice.payload();
    if payload.ip_number != IpNumber::TCP {
        return Err(Skip::NotTcp);
    }
    let src_ip = slice.source_addr();
    let dst_ip = slice.destination_addr();
    let tcp = TcpSlice::from_slice(payload.payload).map_err(|_| Skip::Malformed)?;
    Ok(TcpPacket {
        src: Endpoint {
            ip: src_ip,
            port: tcp.source_port(),
        },
        dst: Endpoint {
            ip: dst_ip,
            port: tcp.destination_port(),
        },
        seq: tcp.sequence_number(),
        ack: tcp.acknowledgment_number(),
        flags: TcpFlags::new(tcp.syn(), tcp.ack(), tcp.fin(), tcp.rst()),
        payload: tcp.payload(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    fn tcp_v4(payload: &[u8]) -> Vec<u8> {
        let b = PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 8080, 1000, 65535)
            .ack(77)
            .psh();
        let mut out = Vec::new();
        b.write(&mut out, payload).unwrap();
        out
    }

    fn check(p: &TcpPacket<'_>, payload: &[u8]) {
        assert_eq!(p.src.to_string(), "10.0.0.1:40000");
        assert_eq!(p.dst.to_string(), "10.0.0.2:8080");
        assert_eq!(p.seq, 1000);
        assert_eq!(p.ack, 77);
        assert!(p.flags.ack() && !p.flags.syn() && !p.flags.fin() && !p.flags.rst());
        assert_eq!(p.payload, payload);
    }

    #[test]
    fn every_link_type_reaches_the_same_segment() {
        let ip = tcp_v4(b"GET / HTTP/1.1\r\n\r\n");
        let mut eth = vec![0u8; 12];
        eth.extend_from_slice(&[0x08, 0x00]);
        eth.extend_from_slice(&ip);
        let mut qinq = vec![0u8; 12];
        qinq.extend_from_slice(&[0x88, 0xa8, 0, 1, 0x81, 0x00, 0, 2, 0x08, 0x00]);
        qinq.extend_from_slice(&ip);
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&[0x08, 0x00]);
        sll.extend_from_slice(&ip);
        let mut sll2 = vec![0x08, 0x00];
        sll2.extend_from_slice(&[0u8; 18]);
        sll2.extend_from_slice(&ip);
        let mut null_le = vec![2, 0, 0, 0];
        null_le.extend_from_slice(&ip);
        let mut null_be = vec![0, 0, 0, 2];
        null_be.extend_from_slice(&ip);
        for (lt, frame) in [
            (linktype::ETHERNET, &eth),
            (linktype::ETHERNET, &qinq),
            (linktype::LINUX_SLL, &sll),
            (linktype::LINUX_SLL2, &sll2),
            (linktype::NULL, &null_le),
            (linktype::NULL, &null_be),
            (linktype::RAW, &ip),
            (linktype::IPV4, &ip),
        ] {
            let p = decode(lt, frame).unwrap_or_else(|e| panic!("linktype {lt}: {e:?}"));
            check(&p, b"GET / HTTP/1.1\r\n\r\n");
        }
    }

    #[test]
    fn ipv6_with_extension_header() {
        let b = PacketBuilder::ipv6([0; 16], [1; 16], 64)
            .tcp(1, 2, 3, 100)
            .ack(4);
        let mut v6 = Vec::new();
        b.write(&mut v6, b"hi").unwrap();
        // Insert a Hop-by-Hop header (8 bytes) between the IPv6 header and TCP.
        let mut with_ext = v6[..40].to_vec();
        with_ext[6] = 0; // next header: hop-by-hop
        let payload_len = u16::from_be_bytes([v6[4], v6[5]]) + 8;
        with_ext[4..6].copy_from_slice(&payload_len.to_be_bytes());
        with_ext.extend_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]);
        with_ext.extend_from_slice(&v6[40..]);
        let p = decode(linktype::RAW, &with_ext).unwrap();
        assert_eq!(p.payload, b"hi");
        assert_eq!(p.src.port, 1);
        assert!(p.src.to_string().starts_with("[::]"));
    }

    #[test]
    fn what_is_not_followed_says_why() {
        let udp = {
            let mut out = Vec::new();
            PacketBuilder::ipv4([1, 1, 1, 1], [2, 2, 2, 2], 9)
                .udp(1, 2)
                .write(&mut out, b"x")
                .unwrap();
            out
        };
        assert_eq!(decode(linktype::RAW, &udp).unwrap_err(), Skip::NotTcp);
        assert_eq!(decode(999, &udp).unwrap_err(), Skip::UnsupportedLinkType);
        assert_eq!(
            decode(linktype::ETHERNET, &[0; 5]).unwrap_err(),
            Skip::Malformed
        );
        let mut frag = tcp_v4(b"abc");
        frag[6] |= 0x20; // more fragments
        assert_eq!(decode(linktype::RAW, &frag).unwrap_err(), Skip::IpFragment);
        let truncated_tcp = &tcp_v4(b"")[..30];
        assert_eq!(
            decode(linktype::RAW, truncated_tcp).unwrap_err(),
            Skip::Malformed
        );
    }

    #[test]
    fn snap_length_cut_keeps_the_captured_part() {
        let ip = tcp_v4(b"0123456789");
        let cut = &ip[..ip.len() - 4];
        let p = decode(linktype::RAW, cut).unwrap();
        assert_eq!(p.payload, b"012345");
    }

    #[test]
    fn any_prefix_of_a_packet_is_decoded_or_refused_without_panic() {
        let ip = tcp_v4(b"payload");
        for lt in [
            linktype::ETHERNET,
            linktype::LINUX_SLL2,
            linktype::RAW,
            linktype::NULL,
        ] {
            for n in 0..ip.len() {
                let _ = decode(lt, &ip[..n]);
            }
        }
    }

    /// Summarizes a decode result for comparison between the two parsers.
    fn outcome(r: Result<TcpPacket<'_>, Skip>) -> String {
        match r {
            Ok(p) => format!(
                "{} {} {} {} {:?} {:?}",
                p.src, p.dst, p.seq, p.ack, p.flags, p.payload
            ),
            Err(s) => format!("{s:?}"),
        }
    }

    /// `base` with up to three of its first `reach` bytes (the headers, where two parsers could
    /// disagree) overwritten, and cut short one time in four.
    fn damaged(base: &[u8], reach: usize, next: &mut impl FnMut() -> u64) -> Vec<u8> {
        let mut p = base.to_vec();
        for _ in 0..(next() % 4) {
            let at = (next() as usize) % p.len().min(reach);
            p[at] = next() as u8;
        }
        if next().is_multiple_of(4) {
            let keep = (next() as usize) % (p.len() + 1);
            p.truncate(keep);
        }
        p
    }

    #[test]
    fn ethernet_frames_read_in_one_pass_agree_with_the_general_parser() {
        // Ethernet II frames of IPv4 and TCP (with and without IP options), a few header bytes
        // flipped and sometimes cut short: the one-pass reading, where it answers, and the
        // layer-by-layer one must give what etherparse gives.
        let mut frames = Vec::new();
        for options in [0usize, 8] {
            let mut ip = tcp_v4(b"GET /mcp HTTP/1.1\r\n\r\n");
            if options > 0 {
                ip[0] = 0x40 | (5 + options / 4) as u8;
                ip.splice(20..20, std::iter::repeat_n(1u8, options));
                let total = ip.len() as u16;
                ip[2..4].copy_from_slice(&total.to_be_bytes());
            }
            let mut frame = vec![0u8; 12];
            frame.extend_from_slice(&[0x08, 0x00]);
            frame.extend_from_slice(&ip);
            frames.push(frame);
        }
        let mut seed = 0x6a09_e667_f3bc_c909u64;
        let mut next = move || crate::testing::xorshift(&mut seed);
        let mut one_pass = 0;
        for base in &frames {
            for _ in 0..20_000 {
                let p = damaged(base, 78, &mut next);
                if ethernet_ipv4_tcp(&p).is_some() {
                    one_pass += 1;
                }
                let general = link_payload(linktype::ETHERNET, &p).and_then(tcp_in_ip_general);
                assert_eq!(
                    outcome(decode(linktype::ETHERNET, &p)),
                    outcome(general),
                    "frame {p:02x?}"
                );
                assert_eq!(
                    outcome(decode(linktype::ETHERNET, &p)),
                    outcome(decode_any(linktype::ETHERNET, &p)),
                    "frame {p:02x?}"
                );
            }
        }
        assert!(one_pass > 15_000, "one pass taken only {one_pass} times");
    }

    #[test]
    fn fixed_offset_reading_agrees_with_the_general_parser() {
        let v4 = tcp_v4(b"GET /mcp HTTP/1.1\r\n\r\n");
        let v6 = {
            let mut out = Vec::new();
            PacketBuilder::ipv6([1; 16], [2; 16], 64)
                .tcp(5000, 443, 7, 9)
                .syn()
                .write(&mut out, b"hello")
                .unwrap();
            out
        };
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || crate::testing::xorshift(&mut seed);
        let mut fast_paths = 0;
        for base in [&v4, &v6] {
            for _ in 0..20_000 {
                let p = damaged(base, 64, &mut next);
                if plain_ip(&p).is_some() {
                    fast_paths += 1;
                }
                assert_eq!(
                    outcome(tcp_in_ip(&p)),
                    outcome(tcp_in_ip_general(&p)),
                    "packet {p:02x?}"
                );
            }
        }
        assert!(
            fast_paths > 20_000,
            "fast path taken only {fast_paths} times"
        );
    }
}
