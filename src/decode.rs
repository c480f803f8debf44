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

use crate::tcp::TcpFlags;

/// One end of a TCP connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    pub ip: IpAddr,
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
    pub src: Endpoint,
    pub dst: Endpoint,
    pub seq: u32,
    pub ack: u32,
    pub flags: TcpFlags,
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
pub fn decode(linktype: u32, data: &[u8]) -> Result<TcpPacket<'_>, Skip> {
    let ip = link_payload(linktype, data)?;
    tcp_in_ip(ip)
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
    // Fast reject before the full parse: the protocol field of a plain IPv4 header.
    if let Some(&first) = ip.first()
        && first >> 4 == 4
        && ip.len() >= 20
        && ip[9] != 6
    {
        return Err(Skip::NotTcp);
    }
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
        flags: TcpFlags {
            syn: tcp.syn(),
            ack: tcp.ack(),
            fin: tcp.fin(),
            rst: tcp.rst(),
        },
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
        assert!(p.flags.ack && !p.flags.syn && !p.flags.fin && !p.flags.rst);
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
}
