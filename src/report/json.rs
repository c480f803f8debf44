//! JSON text written straight into a byte buffer, for the report's most frequent lines.
//!
//! Input: values of the report's records (strings, integers, times, endpoints).
//! Output: their JSON text appended to a `Vec<u8>`, byte for byte what serde_json's compact
//! serializer writes for the same values (strings escaped as it escapes them), with no heap
//! allocation of its own.
//! Invariants: every function appends one complete JSON value (or, for [`key`], one member's
//! name and colon); none fails.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};

use crate::json_stops;
use crate::net::decode::Endpoint;

/// How serde_json escapes each byte: 0 for none, `u` for `\u00XX`, else the letter after `\`.
static ESCAPE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = b'u';
        i += 1;
    }
    t[0x08] = b'b';
    t[0x09] = b't';
    t[0x0a] = b'n';
    t[0x0c] = b'f';
    t[0x0d] = b'r';
    t[b'"' as usize] = b'"';
    t[b'\\' as usize] = b'\\';
    t
};

/// `s` as a JSON string.
pub fn str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    if json_stops::plain(bytes) {
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        if let Some(word) = bytes[i..].first_chunk::<8>()
            && json_stops::stops(u64::from_le_bytes(*word)) == 0
        {
            i += 8;
            continue;
        }
        let byte = bytes[i];
        let escape = ESCAPE[usize::from(byte)];
        i += 1;
        if escape == 0 {
            continue;
        }
        out.extend_from_slice(&bytes[start..i - 1]);
        start = i;
        if escape == b'u' {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ]);
        } else {
            out.extend_from_slice(&[b'\\', escape]);
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// `s` as a JSON string, or `null`.
#[inline]
pub fn opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => str(out, s),
        None => null(out),
    }
}

#[inline]
pub fn null(out: &mut Vec<u8>) {
    out.extend_from_slice(b"null");
}

/// A member's name and colon, after a comma: `,"name":`, for a name given as a literal of
/// plain ASCII (written as it is, in one piece).
macro_rules! key {
    ($out:expr, $name:literal) => {
        $out.extend_from_slice(concat!(",\"", $name, "\":").as_bytes())
    };
}
pub(crate) use key;

/// The decimal digits of 0 to 99, two by two.
static DIGITS: [[u8; 2]; 100] = {
    let mut t = [[0u8; 2]; 100];
    let mut i = 0;
    while i < 100 {
        t[i] = [b'0' + (i / 10) as u8, b'0' + (i % 10) as u8];
        i += 1;
    }
    t
};

/// The decimal digits of `n`.
pub fn u64(out: &mut Vec<u8>, mut n: u64) {
    // A single digit (a count of none, a schema version) is one byte pushed, not a copy.
    if n < 10 {
        out.push(b'0' + n as u8);
        return;
    }
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    while n >= 100 {
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGITS[(n % 100) as usize]);
        n /= 100;
    }
    if n >= 10 {
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGITS[n as usize]);
    } else {
        i -= 1;
        buf[i] = b'0' + n as u8;
    }
    out.extend_from_slice(&buf[i..]);
}

/// `n`, or `null`.
#[inline]
pub fn opt_u64(out: &mut Vec<u8>, n: Option<u64>) {
    match n {
        Some(n) => u64(out, n),
        None => null(out),
    }
}

/// Any other value, as serde_json writes it (numbers with a fraction, enums).
pub fn value<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    // Writing to memory cannot fail, and the values given here always serialize.
    let _ = serde_json::to_writer(&mut *out, v);
}

/// Two decimal digits of `n` below 100.
fn two(n: u32) -> [u8; 2] {
    DIGITS[(n % 100) as usize]
}

/// The RFC 3339 text of [`super::rfc3339_micros`] for `time_ns`, without quotes.
pub fn time_text(out: &mut Vec<u8>, time_ns: i64) {
    let micros = time_ns.div_euclid(1000);
    let secs = micros.div_euclid(1_000_000);
    let frac = micros.rem_euclid(1_000_000) as u32;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400) as u32;
    // The times of one capture fall on a few days: the last day's text is kept.
    let [y0, y1, y2, y3, _, mo0, mo1, _, d0, d1] = LAST_DAY.with(|last| {
        let (day, text) = last.get();
        if day == Some(days) {
            return text;
        }
        let text = date_text(days);
        last.set((Some(days), text));
        text
    });
    let [h0, h1] = two(sod / 3600);
    let [mi0, mi1] = two(sod / 60 % 60);
    let [s0, s1] = two(sod % 60);
    let [f0, f1] = two(frac / 10_000);
    let [f2, f3] = two(frac / 100 % 100);
    let [f4, f5] = two(frac % 100);
    out.extend_from_slice(&[
        y0, y1, y2, y3, b'-', mo0, mo1, b'-', d0, d1, b'T', h0, h1, b':', mi0, mi1, b':', s0, s1,
        b'.', f0, f1, f2, f3, f4, f5, b'Z',
    ]);
}

thread_local! {
    /// The day [`time_text`] wrote last, and its date's text.
    static LAST_DAY: std::cell::Cell<(Option<i64>, [u8; 10])> =
        const { std::cell::Cell::new((None, [0; 10])) };
}

/// `YYYY-MM-DD` of a day counted from 1970-01-01.
fn date_text(days: i64) -> [u8; 10] {
    let (year, month, day) = civil_from_days(days);
    // Every i64 nanosecond is in the years 1677 to 2262: four digits.
    let year = year as u32;
    let [y0, y1] = two(year / 100);
    let [y2, y3] = two(year % 100);
    let [mo0, mo1] = two(month);
    let [d0, d1] = two(day);
    [y0, y1, y2, y3, b'-', mo0, mo1, b'-', d0, d1]
}

/// The proleptic Gregorian date of a day counted from 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A time as a JSON string of [`time_text`].
#[inline]
pub fn time(out: &mut Vec<u8>, time_ns: i64) {
    out.push(b'"');
    time_text(out, time_ns);
    out.push(b'"');
}

/// Writes the decimal digits of one octet at `at` in `buf`; returns where they end.
fn octet_at(buf: &mut [u8; 24], at: usize, n: u8) -> usize {
    if n >= 100 {
        buf[at] = b'0' + n / 100;
        buf[at + 1] = b'0' + n / 10 % 10;
        buf[at + 2] = b'0' + n % 10;
        at + 3
    } else if n >= 10 {
        buf[at] = b'0' + n / 10;
        buf[at + 1] = b'0' + n % 10;
        at + 2
    } else {
        buf[at] = b'0' + n;
        at + 1
    }
}

/// The dotted text of an IPv4 address (as its `Display` writes it) in `buf`, then `:port`
/// when given; returns the length written. The longest, `255.255.255.255:65535`, is 21 bytes.
fn ipv4_into(buf: &mut [u8; 24], ip: Ipv4Addr, port: Option<u16>) -> usize {
    let [a, b, c, d] = ip.octets();
    let mut at = octet_at(buf, 0, a);
    for n in [b, c, d] {
        buf[at] = b'.';
        at = octet_at(buf, at + 1, n);
    }
    if let Some(mut p) = port {
        buf[at] = b':';
        let digits = match p {
            0..=9 => 1,
            10..=99 => 2,
            100..=999 => 3,
            1000..=9999 => 4,
            _ => 5,
        };
        at += digits + 1;
        for i in 0..digits {
            buf[at - 1 - i] = b'0' + (p % 10) as u8;
            p /= 10;
        }
    }
    at
}

/// The dotted text of an IPv4 address, as its `Display` writes it.
fn ipv4_text(out: &mut Vec<u8>, ip: Ipv4Addr) {
    let mut buf = [0u8; 24];
    let n = ipv4_into(&mut buf, ip, None);
    out.extend_from_slice(&buf[..n]);
}

/// An address as a JSON string of its `Display` text.
pub fn ip(out: &mut Vec<u8>, ip: IpAddr) {
    out.push(b'"');
    match ip {
        IpAddr::V4(v4) => ipv4_text(out, v4),
        // Writing to memory cannot fail.
        IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
    out.push(b'"');
}

/// An endpoint as a JSON string of its `Display` text.
pub fn endpoint(out: &mut Vec<u8>, e: Endpoint) {
    out.push(b'"');
    match e.ip {
        IpAddr::V4(v4) => {
            let mut buf = [0u8; 24];
            let n = ipv4_into(&mut buf, v4, Some(e.port));
            out.extend_from_slice(&buf[..n]);
        }
        // Writing to memory cannot fail.
        IpAddr::V6(_) => {
            let _ = write!(out, "{e}");
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::xorshift;

    fn text(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let mut cases: Vec<String> = vec![
            String::new(),
            "plain".into(),
            "\"".into(),
            "\\".into(),
            "a\"b\\c\nd\te\rf\u{8}g\u{c}h\u{0}i\u{1f}j\u{7f}k".into(),
            "héllo wörld ✓ 𝄞 \u{2028}\u{2029}".into(),
            "0123456789abcdef\"0123456789abcdef\\".into(),
            "exactly8".into(),
            "exactly8\"".into(),
        ];
        for b in 0u8..0x80 {
            cases.push((b as char).to_string());
            cases.push(format!("0123456{}89abcdefgh", b as char));
            cases.push(format!("{}{}", "x".repeat(usize::from(b % 17)), b as char));
        }
        let alphabet: Vec<char> = "ab \"\\\n\t\u{1}\u{1f}\u{7f}é✓𝄞/<>&".chars().collect();
        let mut x = 0x2545_f491_4f6c_dd1d;
        for _ in 0..5000 {
            let len = (xorshift(&mut x) % 40) as usize;
            let s: String = (0..len)
                .map(|_| alphabet[(xorshift(&mut x) % alphabet.len() as u64) as usize])
                .collect();
            cases.push(s);
        }
        for s in cases {
            assert_eq!(
                text(|o| str(o, &s)),
                serde_json::to_string(&s).unwrap(),
                "{s:?}"
            );
        }
    }

    #[test]
    fn integers_are_their_decimal_digits() {
        let mut x = 0x9e37_79b9_7f4a_7c15;
        let mut ns = vec![0, 1, 9, 10, 99, 100, u64::MAX, u64::MAX - 1, 1 << 40];
        for p in 0..20 {
            ns.push(10u64.pow(p));
            ns.push(10u64.pow(p) - 1);
        }
        for _ in 0..10_000 {
            ns.push(xorshift(&mut x));
            ns.push(xorshift(&mut x) % 100_000);
        }
        for n in ns {
            assert_eq!(text(|o| u64(o, n)), n.to_string());
        }
        assert_eq!(text(|o| opt_u64(o, None)), "null");
    }

    #[test]
    fn times_are_jiffs_rfc3339_text() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut instants = vec![
            0,
            -1,
            1,
            999,
            1000,
            -999,
            -1000,
            -1001,
            i64::MIN,
            i64::MIN + 999,
            i64::MIN + 1000,
            i64::MAX,
            i64::MAX - 999,
            951_782_400_000_000_000,
            951_868_799_999_999_999,
            4_107_542_400_000_000_000,
            -2_208_988_800_000_000_000,
        ];
        for _ in 0..50_000 {
            instants.push(xorshift(&mut x) as i64);
            instants.push((xorshift(&mut x) % 4_000_000_000_000_000_000) as i64);
            instants.push(-((xorshift(&mut x) % 4_000_000_000_000_000_000) as i64));
        }
        for ns in instants {
            let floored = i128::from(ns) - i128::from(ns.rem_euclid(1000));
            let t = jiff::Timestamp::from_nanosecond(floored).expect("every i64 is in range");
            assert_eq!(text(|o| time_text(o, ns)), format!("{t:.6}"), "{ns}");
            assert_eq!(text(|o| time(o, ns)), format!("\"{t:.6}\""), "{ns}");
        }
    }

    #[test]
    fn addresses_and_endpoints_are_their_display_text() {
        let mut ips: Vec<IpAddr> = vec![
            "0.0.0.0".parse().unwrap(),
            "255.255.255.255".parse().unwrap(),
            "10.0.0.1".parse().unwrap(),
            "1.20.100.199".parse().unwrap(),
            "::".parse().unwrap(),
            "::1".parse().unwrap(),
            "::ffff:10.1.2.3".parse().unwrap(),
            "::10.1.2.3".parse().unwrap(),
            "2001:db8::8a2e:370:7334".parse().unwrap(),
            "fe80::1:0:0:1".parse().unwrap(),
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap(),
        ];
        let mut x = 0x1234_5678_9abc_def1;
        for _ in 0..5000 {
            ips.push(IpAddr::V4(Ipv4Addr::from(xorshift(&mut x) as u32)));
            ips.push(IpAddr::V6(std::net::Ipv6Addr::from(
                u128::from(xorshift(&mut x)) << 64 | u128::from(xorshift(&mut x)),
            )));
        }
        for (i, addr) in ips.into_iter().enumerate() {
            assert_eq!(text(|o| ip(o, addr)), format!("\"{addr}\""));
            for port in [0, 1, 80, 8000, 65535, (i * 7919 % 65536) as u16] {
                let e = Endpoint { ip: addr, port };
                assert_eq!(text(|o| endpoint(o, e)), format!("\"{e}\""));
            }
        }
    }
}
