//! HPACK (RFC 7541): the header blocks of one direction of an HTTP/2 connection, decoded.
//!
//! Input: whole header blocks (a HEADERS or PUSH_PROMISE fragment and its CONTINUATIONs,
//! joined), in the order the direction sent them, and the dynamic table bound the receiver
//! advertised (`SETTINGS_HEADER_TABLE_SIZE`).
//! Output: each block's header fields (name, value) in order, through a callback; or one
//! error, after which the caller must treat the direction's table as lost for good.
//! Invariants: nothing is allocated ahead of the bytes of the block (a string's announced
//! length is checked against the bytes left before anything is read); the dynamic table never
//! holds more than `hard_cap` bytes of entries (RFC size, 32 bytes of overhead each), whatever
//! the peer's size updates say; no input panics.
//!
//! Why a decoder of our own rather than a crate (checked Dec 2026):
//! - `hpack` 0.3.0 is unmaintained and panics on the one-byte block `[0x3f]` (a truncated
//!   size update, RUSTSEC-2023-0085); `fluke-hpack` 0.3.1 has the same `unwrap`.
//! - `httlib-hpack` 0.1.3 (last release 2021) reads `buf[total - 1]` past the end of a
//!   truncated multi-byte integer: a panic on hostile input.
//! - `loona-hpack` 0.4.3 fixed the size-update panic, but takes whole blocks only, lets the
//!   peer grow the table without bound unless told otherwise, `assert!`s in
//!   `set_max_table_size`, and rejects a block that ends in a size update.
//!
//! A passive reader needs exactly the part of HPACK that those share and nothing of their
//! encoders: decode whole blocks, bound the table by what we can afford rather than by what
//! the peer says, and fail closed. That is under 300 lines with the RFC's tables.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::LazyLock;

/// Table size every decoder starts with (RFC 9113 section 6.5.2, the setting's default).
pub(crate) const DEFAULT_TABLE_SIZE: usize = 4096;
/// RFC 7541 section 4.1: each entry counts 32 bytes beyond its name and value.
const ENTRY_OVERHEAD: usize = 32;
/// Integers above this are no table size, index or string length a block could use; the
/// bound also keeps the arithmetic far from overflow.
const MAX_INTEGER: usize = 1 << 28;

/// Why a header block could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HpackError {
    /// An integer ran past the block or past `MAX_INTEGER`.
    Integer,
    /// A string longer than the bytes left in the block.
    StringLength,
    /// Huffman data that is not a valid code sequence (EOS, bad padding).
    Huffman,
    /// An index of no table entry.
    Index,
    /// A size update above what this decoder keeps.
    TableSize,
}

/// A decoded field: borrowed from the block when raw, owned when Huffman-coded or indexed.
type Field<'b> = (Cow<'b, [u8]>, Cow<'b, [u8]>);

#[derive(Debug)]
struct Entry {
    name: Box<[u8]>,
    value: Box<[u8]>,
}

impl Entry {
    fn size(&self) -> usize {
        self.name.len() + self.value.len() + ENTRY_OVERHEAD
    }
}

/// The HPACK decoding state of one direction.
#[derive(Debug)]
pub(crate) struct HpackDecoder {
    /// Newest entry first, as the RFC numbers them (index 62 is the front).
    entries: VecDeque<Entry>,
    size: usize,
    max_size: usize,
    /// Largest table this decoder keeps: a size update above it is an error.
    hard_cap: usize,
}

impl HpackDecoder {
    pub(crate) fn new(hard_cap: usize) -> Self {
        HpackDecoder {
            entries: VecDeque::new(),
            size: 0,
            max_size: DEFAULT_TABLE_SIZE.min(hard_cap),
            hard_cap,
        }
    }

    /// Bytes the dynamic table holds (RFC size).
    #[cfg_attr(not(test), allow(dead_code))] // read by the unit tests
    pub(crate) fn table_size(&self) -> usize {
        self.size
    }

    /// Decodes one whole header block, handing each field to `field`. On error the table
    /// may hold part of the block's inserts: the caller stops using this decoder.
    pub(crate) fn decode(
        &mut self,
        block: &[u8],
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let mut pos = 0;
        while let Some(&first) = block.get(pos) {
            if first & 0x80 != 0 {
                let index = decode_integer(block, &mut pos, 7)?;
                let (name, value) = self.lookup(index)?;
                field(name, value);
            } else if first & 0xc0 == 0x40 {
                let (name, value) = self.literal(block, &mut pos, 6)?;
                field(&name, &value);
                self.insert(Entry {
                    name: name.into_owned().into_boxed_slice(),
                    value: value.into_owned().into_boxed_slice(),
                });
            } else if first & 0xe0 == 0x20 {
                // RFC 7541 section 4.2 wants size updates at the block's start only; where one
                // stands changes nothing for a reader, so any place is accepted.
                let size = decode_integer(block, &mut pos, 5)?;
                if size > self.hard_cap {
                    return Err(HpackError::TableSize);
                }
                self.max_size = size;
                self.evict_to(size);
            } else {
                // Without indexing (0000) and never indexed (0001): same layout.
                let (name, value) = self.literal(block, &mut pos, 4)?;
                field(&name, &value);
            }
        }
        Ok(())
    }

    /// A literal field: an indexed or literal name, then a literal value.
    fn literal<'b>(
        &self,
        block: &'b [u8],
        pos: &mut usize,
        prefix: u8,
    ) -> Result<Field<'b>, HpackError> {
        let index = decode_integer(block, pos, prefix)?;
        let name = if index == 0 {
            decode_string(block, pos)?
        } else {
            Cow::Owned(self.lookup(index)?.0.to_vec())
        };
        let value = decode_string(block, pos)?;
        Ok((name, value))
    }

    fn lookup(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        if index == 0 {
            return Err(HpackError::Index);
        }
        if let Some(&(name, value)) = STATIC_TABLE.get(index - 1) {
            return Ok((name.as_bytes(), value.as_bytes()));
        }
        self.entries
            .get(index - 1 - STATIC_TABLE.len())
            .map(|e| (&*e.name, &*e.value))
            .ok_or(HpackError::Index)
    }

    fn insert(&mut self, entry: Entry) {
        let size = entry.size();
        if size > self.max_size {
            // RFC 7541 section 4.4: an entry larger than the table empties it.
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max_size - size);
        self.size += size;
        self.entries.push_front(entry);
    }

    fn evict_to(&mut self, limit: usize) {
        while self.size > limit {
            match self.entries.pop_back() {
                Some(old) => self.size -= old.size(),
                None => {
                    self.size = 0;
                    break;
                }
            }
        }
    }
}

/// RFC 7541 section 5.1: an integer with an N-bit prefix, starting at `block[*pos]`.
fn decode_integer(block: &[u8], pos: &mut usize, prefix: u8) -> Result<usize, HpackError> {
    let mask = (1u16 << prefix) as usize - 1;
    let first = *block.get(*pos).ok_or(HpackError::Integer)?;
    *pos += 1;
    let mut value = usize::from(first) & mask;
    if value < mask {
        return Ok(value);
    }
    let mut shift = 0;
    loop {
        let byte = *block.get(*pos).ok_or(HpackError::Integer)?;
        *pos += 1;
        value += usize::from(byte & 0x7f) << shift;
        if value > MAX_INTEGER {
            return Err(HpackError::Integer);
        }
        if byte & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
        if shift > 28 {
            return Err(HpackError::Integer);
        }
    }
}

/// RFC 7541 section 5.2: a string literal, raw or Huffman-coded.
fn decode_string<'b>(block: &'b [u8], pos: &mut usize) -> Result<Cow<'b, [u8]>, HpackError> {
    let huffman = block.get(*pos).is_some_and(|b| b & 0x80 != 0);
    let len = decode_integer(block, pos, 7)?;
    // The announced length is only believed once the bytes are there.
    let end = pos.checked_add(len).ok_or(HpackError::StringLength)?;
    let raw = block.get(*pos..end).ok_or(HpackError::StringLength)?;
    *pos = end;
    if huffman {
        huffman_decode(raw).map(Cow::Owned)
    } else {
        Ok(Cow::Borrowed(raw))
    }
}

// ----- Huffman code (RFC 7541 Appendix B) -----

/// Code length in bits of each symbol 0..=256 (256 is EOS). The code is canonical: codes of
/// one length are consecutive in symbol order, shorter lengths first, so the lengths define
/// it whole (`tests::huffman_code_matches_the_rfc` checks codes the RFC lists).
#[rustfmt::skip]
const CODE_LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5,
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
    30,
];

const MAX_CODE_LENGTH: usize = 30;
const EOS: u16 = 256;

/// Canonical decoding tables: for each length, the first code, how many codes, and where
/// their symbols start in `symbols`.
struct HuffmanTables {
    first_code: [u32; MAX_CODE_LENGTH + 1],
    count: [u32; MAX_CODE_LENGTH + 1],
    offset: [usize; MAX_CODE_LENGTH + 1],
    symbols: Vec<u16>,
}

static HUFFMAN: LazyLock<HuffmanTables> = LazyLock::new(|| {
    let mut count = [0u32; MAX_CODE_LENGTH + 1];
    for &len in &CODE_LENGTHS {
        if let Some(c) = count.get_mut(usize::from(len)) {
            *c += 1;
        }
    }
    let mut first_code = [0u32; MAX_CODE_LENGTH + 1];
    let mut offset = [0usize; MAX_CODE_LENGTH + 1];
    let (mut code, mut at) = (0u32, 0usize);
    for len in 1..=MAX_CODE_LENGTH {
        first_code[len] = code;
        offset[len] = at;
        code = (code + count[len]) << 1;
        at += count[len] as usize;
    }
    let mut symbols: Vec<u16> = (0..=EOS).collect();
    symbols.sort_by_key(|&s| (CODE_LENGTHS.get(usize::from(s)).copied(), s));
    HuffmanTables {
        first_code,
        count,
        offset,
        symbols,
    }
});

/// Decodes a Huffman-coded string (RFC 7541 section 5.2): EOS inside the data and padding
/// longer than 7 bits or not all ones are errors.
pub(crate) fn huffman_decode(input: &[u8]) -> Result<Vec<u8>, HpackError> {
    let tables = &*HUFFMAN;
    let mut out = Vec::with_capacity(input.len() + input.len() / 2);
    let (mut code, mut len) = (0u32, 0usize);
    for &byte in input {
        for bit in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> bit) & 1);
            len += 1;
            let (first, count) = (tables.first_code[len], tables.count[len]);
            if code >= first && code - first < count {
                let symbol = tables
                    .symbols
                    .get(tables.offset[len] + (code - first) as usize)
                    .copied()
                    .ok_or(HpackError::Huffman)?;
                // Symbols below 256 are bytes; EOS must not appear in the data.
                out.push(u8::try_from(symbol).map_err(|_| HpackError::Huffman)?);
                (code, len) = (0, 0);
            } else if len >= MAX_CODE_LENGTH {
                return Err(HpackError::Huffman);
            }
        }
    }
    // Padding: the most significant bits of EOS (all ones), fewer than 8.
    if len > 7 || code != (1u32 << len) - 1 {
        return Err(HpackError::Huffman);
    }
    Ok(out)
}

// ----- static table (RFC 7541 Appendix A) -----

const STATIC_TABLE: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

// ----- encoding, for tests only -----

/// Test-side HPACK encoding: the representations spelled out, so tests choose exactly what
/// goes on the wire (no encoder-side table is kept).
#[cfg(test)]
pub(crate) mod encode {
    use super::{CODE_LENGTHS, HUFFMAN};

    /// An integer with an N-bit prefix; `flags` fills the bits above the prefix.
    pub(crate) fn integer(out: &mut Vec<u8>, flags: u8, prefix: u8, mut value: usize) {
        let mask = (1usize << prefix) - 1;
        if value < mask {
            out.push(flags | value as u8);
            return;
        }
        out.push(flags | mask as u8);
        value -= mask;
        while value >= 0x80 {
            out.push((value & 0x7f) as u8 | 0x80);
            value >>= 7;
        }
        out.push(value as u8);
    }

    /// The canonical code of a symbol, from the decoder's own tables.
    pub(crate) fn code(symbol: u16) -> (u32, u8) {
        let t = &*HUFFMAN;
        let len = CODE_LENGTHS[usize::from(symbol)];
        let rank = t.symbols[t.offset[usize::from(len)]..]
            .iter()
            .position(|&s| s == symbol)
            .unwrap();
        (t.first_code[usize::from(len)] + rank as u32, len)
    }

    pub(crate) fn huffman(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let (mut acc, mut bits) = (0u64, 0u32);
        for &b in bytes {
            let (code, len) = code(u16::from(b));
            acc = (acc << len) | u64::from(code);
            bits += u32::from(len);
            while bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
            }
        }
        if bits > 0 {
            let pad = 8 - bits;
            out.push(((acc << pad) as u8) | ((1u8 << pad) - 1));
        }
        out
    }

    pub(crate) fn string(out: &mut Vec<u8>, s: &[u8], use_huffman: bool) {
        if use_huffman {
            let coded = huffman(s);
            integer(out, 0x80, 7, coded.len());
            out.extend_from_slice(&coded);
        } else {
            integer(out, 0, 7, s.len());
            out.extend_from_slice(s);
        }
    }

    /// How a literal field is represented.
    #[derive(Clone, Copy, Debug)]
    pub(crate) enum Literal {
        /// With incremental indexing (inserted into the table).
        Indexed,
        Without,
        Never,
    }

    impl Literal {
        fn flags_prefix(self) -> (u8, u8) {
            match self {
                Literal::Indexed => (0x40, 6),
                Literal::Without => (0x00, 4),
                Literal::Never => (0x10, 4),
            }
        }
    }

    /// Indexed field.
    pub(crate) fn indexed(out: &mut Vec<u8>, index: usize) {
        integer(out, 0x80, 7, index);
    }

    /// Literal field with a literal name.
    pub(crate) fn literal(out: &mut Vec<u8>, kind: Literal, name: &str, value: &str, h: bool) {
        let (flags, prefix) = kind.flags_prefix();
        integer(out, flags, prefix, 0);
        string(out, name.as_bytes(), h);
        string(out, value.as_bytes(), h);
    }

    /// Literal field whose name is a table entry.
    pub(crate) fn literal_name(
        out: &mut Vec<u8>,
        kind: Literal,
        name: usize,
        value: &str,
        h: bool,
    ) {
        let (flags, prefix) = kind.flags_prefix();
        integer(out, flags, prefix, name);
        string(out, value.as_bytes(), h);
    }

    pub(crate) fn size_update(out: &mut Vec<u8>, size: usize) {
        integer(out, 0x20, 5, size);
    }
}

#[cfg(test)]
mod tests {
    use super::encode::{self, Literal};
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
            .collect()
    }

    fn fields(d: &mut HpackDecoder, block: &[u8]) -> Result<Vec<(String, String)>, HpackError> {
        let mut out = Vec::new();
        d.decode(block, |n, v| {
            out.push((
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            ))
        })?;
        Ok(out)
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn huffman_code_matches_the_rfc() {
        // Codes as RFC 7541 Appendix B lists them.
        assert_eq!(encode::code(0), (0x1ff8, 13));
        assert_eq!(encode::code(u16::from(b' ')), (0x14, 6));
        assert_eq!(encode::code(u16::from(b'0')), (0x0, 5));
        assert_eq!(encode::code(u16::from(b'a')), (0x3, 5));
        assert_eq!(encode::code(u16::from(b'z')), (0x7b, 7));
        assert_eq!(encode::code(10), (0x3ffffffc, 30));
        assert_eq!(encode::code(255), (0x3ffffee, 26));
        assert_eq!(encode::code(EOS), (0x3fffffff, 30));
        // A complete code: the lengths fill the code space exactly.
        let kraft: u64 = CODE_LENGTHS.iter().map(|&l| 1u64 << (30 - l)).sum();
        assert_eq!(kraft, 1 << 30);
    }

    #[test]
    fn huffman_round_trips_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(huffman_decode(&encode::huffman(&all)).unwrap(), all);
        for b in 0..=255u8 {
            assert_eq!(huffman_decode(&encode::huffman(&[b])).unwrap(), [b]);
        }
    }

    #[test]
    fn huffman_rejects_eos_and_bad_padding() {
        // EOS coded in the data (30 ones, then padding).
        assert_eq!(
            huffman_decode(&[0xff, 0xff, 0xff, 0xff]),
            Err(HpackError::Huffman)
        );
        // Padding of 8 bits.
        let mut coded = encode::huffman(b"a");
        coded.push(0xff);
        assert_eq!(huffman_decode(&coded), Err(HpackError::Huffman));
        // Padding that is not all ones: 'a' is 00011, then 000.
        assert_eq!(huffman_decode(&[0x18]), Err(HpackError::Huffman));
        assert_eq!(huffman_decode(&[]).unwrap(), b"");
    }

    #[test]
    fn integers_of_rfc_appendix_c1() {
        let mut pos = 0;
        assert_eq!(decode_integer(&[0x0a], &mut pos, 5), Ok(10));
        let mut pos = 0;
        assert_eq!(decode_integer(&[0x1f, 0x9a, 0x0a], &mut pos, 5), Ok(1337));
        assert_eq!(pos, 3);
        let mut pos = 0;
        assert_eq!(decode_integer(&[0x2a], &mut pos, 8), Ok(42));
        let mut out = Vec::new();
        encode::integer(&mut out, 0, 5, 1337);
        assert_eq!(out, [0x1f, 0x9a, 0x0a]);
    }

    #[test]
    fn hostile_integers_and_strings_fail_without_panic() {
        for block in [
            &[0x3f][..],                               // truncated size update
            &[0xff][..],                               // truncated index
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff][..], // too many continuation bytes
            &[0xff, 0xff, 0xff, 0xff, 0x7f][..],       // past the integer bound
            &[0x40, 0x7f, 0xff, 0xff, 0xff, 0x0f][..], // a 2^28-byte name announced
            &[0x40, 0x05, b'a'][..],                   // name shorter than announced
            &[0x80][..],                               // index 0
            &[0xbe][..],                               // index 62, empty table
            &[0x3f, 0xe1, 0xff, 0x04][..],             // size update above the cap
        ] {
            let mut d = HpackDecoder::new(65536);
            assert!(fields(&mut d, block).is_err(), "{block:x?}");
        }
    }

    #[test]
    fn rfc_c3_requests_without_huffman() {
        let mut d = HpackDecoder::new(65536);
        let c31 = hex("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d");
        assert_eq!(
            fields(&mut d, &c31).unwrap(),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
            ])
        );
        assert_eq!(d.table_size(), 57);
        let c32 = hex("8286 84be 5808 6e6f 2d63 6163 6865");
        assert_eq!(
            fields(&mut d, &c32).unwrap(),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache"),
            ])
        );
        assert_eq!(d.table_size(), 110);
        let c33 = hex("8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65");
        assert_eq!(
            fields(&mut d, &c33).unwrap(),
            pairs(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value"),
            ])
        );
        assert_eq!(d.table_size(), 164);
    }

    #[test]
    fn rfc_c4_requests_with_huffman() {
        let mut d = HpackDecoder::new(65536);
        let c41 = hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff");
        assert_eq!(fields(&mut d, &c41).unwrap()[3].1, "www.example.com");
        let c42 = hex("8286 84be 5886 a8eb 1064 9cbf");
        assert_eq!(
            fields(&mut d, &c42).unwrap()[4],
            ("cache-control".into(), "no-cache".into())
        );
        let c43 = hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf");
        assert_eq!(
            fields(&mut d, &c43).unwrap(),
            pairs(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value"),
            ])
        );
        assert_eq!(d.table_size(), 164);
        // The test encoder agrees with the RFC's Huffman strings.
        assert_eq!(
            encode::huffman(b"custom-value"),
            hex("25a8 49e9 5bb8 e8b4 bf")
        );
    }

    const COOKIE: &str = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";

    fn c5_third() -> Vec<(String, String)> {
        pairs(&[
            (":status", "200"),
            ("cache-control", "private"),
            ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
            ("location", "https://www.example.com"),
            ("content-encoding", "gzip"),
            ("set-cookie", COOKIE),
        ])
    }

    /// C.5 and C.6 run with the table limited to 256 bytes, so entries are evicted.
    fn small_table_decoder() -> HpackDecoder {
        let mut d = HpackDecoder::new(65536);
        let mut update = Vec::new();
        encode::size_update(&mut update, 256);
        d.decode(&update, |_, _| {}).unwrap();
        d
    }

    #[test]
    fn rfc_c5_responses_without_huffman_evict() {
        let mut d = small_table_decoder();
        let c51 = hex(
            "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 \
             2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 \
             6c65 2e63 6f6d",
        );
        assert_eq!(
            fields(&mut d, &c51).unwrap(),
            pairs(&[
                (":status", "302"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
                ("location", "https://www.example.com"),
            ])
        );
        assert_eq!(d.table_size(), 222);
        let c52 = hex("4803 3330 37c1 c0bf");
        assert_eq!(fields(&mut d, &c52).unwrap()[0].1, "307");
        assert_eq!(d.table_size(), 222);
        let c53 = hex(
            "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d \
             54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 \
             5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e \
             3d31",
        );
        assert_eq!(fields(&mut d, &c53).unwrap(), c5_third());
        assert_eq!(d.table_size(), 215);
    }

    #[test]
    fn rfc_c6_responses_with_huffman_evict() {
        let mut d = small_table_decoder();
        let c61 = hex(
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 \
             2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
        );
        assert_eq!(
            fields(&mut d, &c61).unwrap()[2].1,
            "Mon, 21 Oct 2013 20:13:21 GMT"
        );
        assert_eq!(d.table_size(), 222);
        let c62 = hex("4883 640e ffc1 c0bf");
        assert_eq!(fields(&mut d, &c62).unwrap()[0].1, "307");
        let c63 = hex(
            "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab \
             77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f \
             9587 3160 65c0 03ed 4ee5 b106 3d50 07",
        );
        assert_eq!(fields(&mut d, &c63).unwrap(), c5_third());
        assert_eq!(d.table_size(), 215);
    }

    #[test]
    fn literal_kinds_and_table_bounds() {
        let mut d = HpackDecoder::new(300);
        let mut block = Vec::new();
        encode::literal(&mut block, Literal::Without, "a", "1", false);
        encode::literal(&mut block, Literal::Never, "b", "2", true);
        encode::literal_name(&mut block, Literal::Indexed, 31, "text/event-stream", true);
        encode::indexed(&mut block, 62);
        assert_eq!(
            fields(&mut d, &block).unwrap(),
            pairs(&[
                ("a", "1"),
                ("b", "2"),
                ("content-type", "text/event-stream"),
                ("content-type", "text/event-stream"),
            ])
        );
        // Only the indexed literal went into the table.
        assert_eq!(d.table_size(), 12 + 17 + 32);
        // A size update to 0 empties it; one above the cap is refused.
        let mut zero = Vec::new();
        encode::size_update(&mut zero, 0);
        encode::indexed(&mut zero, 62);
        assert_eq!(fields(&mut d, &zero), Err(HpackError::Index));
        let mut big = Vec::new();
        encode::size_update(&mut big, 301);
        assert_eq!(fields(&mut d, &big), Err(HpackError::TableSize));
        // An entry larger than the table empties it and is not kept.
        let mut d = HpackDecoder::new(300);
        let mut block = Vec::new();
        encode::literal(&mut block, Literal::Indexed, "k", "v", false);
        encode::literal(
            &mut block,
            Literal::Indexed,
            "huge",
            &"x".repeat(4096),
            false,
        );
        encode::indexed(&mut block, 62);
        assert_eq!(fields(&mut d, &block), Err(HpackError::Index));
        assert_eq!(d.table_size(), 0);
    }

    #[test]
    fn table_stays_bounded_under_many_inserts() {
        let mut d = HpackDecoder::new(4096);
        for i in 0..10_000 {
            let mut block = Vec::new();
            encode::literal(
                &mut block,
                Literal::Indexed,
                "n",
                &format!("{i:0100}"),
                false,
            );
            d.decode(&block, |_, _| {}).unwrap();
            assert!(d.table_size() <= DEFAULT_TABLE_SIZE);
        }
        assert!(d.entries.len() <= DEFAULT_TABLE_SIZE / ENTRY_OVERHEAD);
    }
}
