//! Protocol detection: the one place that decides what a connection speaks.
//!
//! Input: the first bytes of the direction that speaks first.
//! Output: [`Detection`]: more bytes needed, or the protocol to hand the connection to.
//! Invariants: the decision depends on the bytes only, never on how they were cut into calls;
//! at most [`MAX_DETECT_BYTES`] are ever needed; anything that is neither TLS nor the HTTP/2
//! preface goes to the HTTP/1.1 parser, which resynchronizes mid-connection and gives up at
//! once on a connection that begins with something else (counted as not HTTP).

/// The client connection preface of HTTP/2 with prior knowledge (RFC 9113 section 3.4).
pub(crate) const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// No decision needs more bytes than the HTTP/2 preface.
pub(crate) const MAX_DETECT_BYTES: usize = H2_PREFACE.len();

/// What a connection speaks, as far as its first bytes tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// HTTP/1.1, or something the HTTP/1.1 parser will recognize as not HTTP.
    Http1,
    /// HTTP/2 with prior knowledge: the client preface.
    Http2,
    /// A TLS handshake: a handshake record holding a ClientHello (from the SYN), or, in a
    /// connection whose start was not captured, the header of a TLS record.
    Tls,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Detection {
    NeedMore,
    Decided(Protocol),
}

/// Whether `b` begins like a TLS record header of one of `content_types`, legacy version
/// major 3, minor 0 (SSL 3) to 4: `None` while fewer than three bytes leave it open.
fn tls_record_header(b: &[u8], content_types: std::ops::RangeInclusive<u8>) -> Option<bool> {
    let fits = |i: usize, ok: &dyn Fn(u8) -> bool| b.get(i).is_none_or(|&v| ok(v));
    if !(fits(0, &|t| content_types.contains(&t)) && fits(1, &|v| v == 3) && fits(2, &|v| v <= 4)) {
        return Some(false);
    }
    (b.len() >= 3).then_some(true)
}

/// Decides from the first bytes `first` of the direction that spoke first.
pub(crate) fn detect(first: &[u8], _from_start: bool) -> Detection {
    use Detection::*;
    if first.is_empty() {
        return NeedMore;
    }
    // A TLS record header: a ClientHello from the SYN, or another record where the capture
    // lost the handshake or began mid-connection (then the TLS layer has no handshake to read
    // it by, and says so). HTTP begins with a letter, a digit or a line end, none of which is
    // 20-23.
    if tls_record_header(first, 0x14..=0x17) != Some(false) {
        return if first.len() >= 5 {
            Decided(Protocol::Tls)
        } else {
            NeedMore
        };
    }
    let n = first.len().min(H2_PREFACE.len());
    if first[..n] == H2_PREFACE[..n] {
        return if n == H2_PREFACE.len() {
            Decided(Protocol::Http2)
        } else {
            NeedMore
        };
    }
    Decided(Protocol::Http1)
}

/// Decides the plaintext of a TLS connection, where the server may speak first: besides what
/// [`detect`] knows, a first SETTINGS frame on stream 0 (the server's HTTP/2 preface, sent
/// as soon as the handshake allows) is HTTP/2.
pub(crate) fn detect_plaintext(first: &[u8]) -> Detection {
    // Frame header: 24-bit length (a multiple of 6 for SETTINGS), type 4, flags 0, stream 0.
    let settings = |h: &[u8]| {
        let len = u32::from_be_bytes([0, h[0], h[1], h[2]]);
        len.is_multiple_of(6) && len <= 16_384 && h[3] == 4 && h[4] == 0 && h[5..9] == [0, 0, 0, 0]
    };
    match first.get(..9) {
        Some(h) if settings(h) => Detection::Decided(Protocol::Http2),
        // HTTP/1.1 begins with a token or a line end, never with a zero byte.
        None if first.first() == Some(&0) => Detection::NeedMore,
        _ => detect(first, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT_HELLO: &[u8] = &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc];

    /// The decision for `bytes` fed one more byte at a time, as a reader with tiny segments
    /// would see it: every prefix either needs more or gives the whole input's answer.
    fn decided(bytes: &[u8], from_start: bool) -> Detection {
        let whole = detect(bytes, from_start);
        for n in 1..bytes.len() {
            match detect(&bytes[..n], from_start) {
                Detection::NeedMore => {}
                d => {
                    assert_eq!(d, whole, "prefix {n} of {bytes:?} decided early");
                    return d;
                }
            }
        }
        whole
    }

    #[test]
    fn each_protocol_from_its_first_bytes() {
        use Detection::Decided;
        assert_eq!(decided(CLIENT_HELLO, true), Decided(Protocol::Tls));
        let mut preface = H2_PREFACE.to_vec();
        preface.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        assert_eq!(decided(&preface, true), Decided(Protocol::Http2));
        assert_eq!(decided(&preface, false), Decided(Protocol::Http2));
        assert_eq!(
            decided(b"GET / HTTP/1.1\r\n", true),
            Decided(Protocol::Http1)
        );
        assert_eq!(
            decided(b"POST /mcp HTTP/1.1", true),
            Decided(Protocol::Http1)
        );
        // "PRI" that is not the preface: HTTP/1.1 (whose parser judges it).
        assert_eq!(
            decided(b"PRI * HTTP/1.1\r\n", true),
            Decided(Protocol::Http1)
        );
        assert_eq!(
            decided(b"SSH-2.0-OpenSSH\r\n", true),
            Decided(Protocol::Http1)
        );
    }

    #[test]
    fn tls_mid_connection_by_record_header() {
        use Detection::*;
        // Application data record, TLS 1.2 version field.
        assert_eq!(
            decided(&[0x17, 0x03, 0x03, 0x00, 0x20, 0xaa], false),
            Decided(Protocol::Tls)
        );
        // From the SYN, a record other than a ClientHello first is TLS whose handshake the
        // capture lost (or whose server spoke first).
        assert_eq!(
            decided(&[0x17, 0x03, 0x03, 0x00, 0x20, 0xaa], true),
            Decided(Protocol::Tls)
        );
        assert_eq!(
            decided(&[0x16, 0x03, 0x03, 0x00, 0x20, 0x02], true),
            Decided(Protocol::Tls)
        );
        assert_eq!(decided(&[0x16, 0x07], true), Decided(Protocol::Http1));
        assert_eq!(detect(&[0x16, 0x03], true), NeedMore);
        assert_eq!(detect(&[0x17], false), NeedMore);
        assert_eq!(detect(&[0x17, 0x04], false), Decided(Protocol::Http1));
    }

    #[test]
    fn plaintext_of_tls_by_the_server_preface_too() {
        use Detection::*;
        let settings = [0, 0, 12, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100];
        assert_eq!(detect_plaintext(&settings), Decided(Protocol::Http2));
        for n in 1..9 {
            assert_eq!(detect_plaintext(&settings[..n]), NeedMore);
        }
        assert_eq!(
            detect_plaintext(b"HTTP/1.1 200 OK\r\n"),
            Decided(Protocol::Http1)
        );
        assert_eq!(detect_plaintext(H2_PREFACE), Decided(Protocol::Http2));
        // A SETTINGS ACK or another frame first is not a server preface.
        assert_eq!(
            detect_plaintext(&[0, 0, 0, 4, 1, 0, 0, 0, 0]),
            Decided(Protocol::Http1)
        );
    }

    #[test]
    fn never_needs_more_than_the_preface() {
        // Every input of MAX_DETECT_BYTES bytes is decided.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let mut b = [0u8; MAX_DETECT_BYTES];
            for v in &mut b {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *v = (x % 24) as u8 + if x & 64 == 0 { 0 } else { 0x40 };
            }
            for from_start in [false, true] {
                assert_ne!(detect(&b, from_start), Detection::NeedMore, "{b:?}");
            }
        }
        for from_start in [false, true] {
            assert_ne!(detect(H2_PREFACE, from_start), Detection::NeedMore);
        }
    }
}
