//! TLS record framing: records rebuilt from a byte stream cut anywhere, and the search for a
//! record boundary after bytes were lost.
//!
//! Input: one direction's in-order bytes, in slices of any size.
//! Output: whole records (5-byte header and body), one at a time, from a [`RecordAssembler`];
//! for resynchronisation, [`find_boundary`] names the first offset of a buffer that plausibly
//! starts a record.
//! Invariants: pure framing, no state machine and no crypto; a length field above
//! [`MAX_CIPHERTEXT_LEN`] is a protocol error, never an allocation: the assembler holds at
//! most one record (header plus at most that many bytes).

/// Record header length: type, version, length.
pub(crate) const HEADER_LEN: usize = 5;
/// Longest record body RFC 5246 allows (2^14 + 2048); longer is a protocol error.
pub(crate) const MAX_CIPHERTEXT_LEN: usize = (1 << 14) + 2048;
/// Longest body a record found by resynchronisation may have: RFC 8446 caps protected records
/// at 2^14 + 256, and TLS 1.2 AEAD records stay well under it, so a larger length is more
/// likely a false header.
pub(crate) const MAX_RESYNC_RECORD_LEN: usize = (1 << 14) + 256;

pub(crate) const CHANGE_CIPHER_SPEC: u8 = 20;
pub(crate) const ALERT: u8 = 21;
pub(crate) const HANDSHAKE: u8 = 22;
pub(crate) const APPLICATION_DATA: u8 = 23;
pub(crate) const HEARTBEAT: u8 = 24;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecordHeader {
    pub content_type: u8,
    pub version: u16,
    /// Body length.
    pub len: usize,
}

impl RecordHeader {
    /// Reads the first five bytes; `None` when fewer are given.
    pub(crate) fn parse(bytes: &[u8]) -> Option<RecordHeader> {
        let h = bytes.get(..HEADER_LEN)?;
        Some(RecordHeader {
            content_type: h[0],
            version: u16::from_be_bytes([h[1], h[2]]),
            len: usize::from(u16::from_be_bytes([h[3], h[4]])),
        })
    }

    /// A header the framing accepts in a stream it follows: a known content type, an SSL 3 or
    /// TLS version, a length within bounds.
    pub(crate) fn is_valid(&self) -> bool {
        (CHANGE_CIPHER_SPEC..=HEARTBEAT).contains(&self.content_type)
            && self.version >> 8 == 3
            && self.len <= MAX_CIPHERTEXT_LEN
    }

    /// A header worth trying after a loss: stricter than [`Self::is_valid`], so random bytes
    /// rarely pass (about one offset in 2^24 of uniformly random bytes).
    pub(crate) fn is_plausible(&self) -> bool {
        (CHANGE_CIPHER_SPEC..=APPLICATION_DATA).contains(&self.content_type)
            && (0x0301..=0x0303).contains(&self.version)
            && self.len > 0
            && self.len <= MAX_RESYNC_RECORD_LEN
    }
}

/// Rebuilds records from a byte stream cut anywhere.
#[derive(Debug, Default)]
pub(crate) struct RecordAssembler {
    buf: Vec<u8>,
}

/// What [`RecordAssembler::feed`] reached.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Framed {
    /// A whole record is ready in [`RecordAssembler::record`].
    Record,
    /// The input is used up inside a record.
    NeedMore,
    /// The header is not a TLS record header (or its length is out of bounds).
    Invalid(RecordHeader),
}

impl RecordAssembler {
    /// Takes bytes from the front of `input` until a record is whole or `input` is empty.
    /// After [`Framed::Record`], read [`Self::record`] and call [`Self::clear`].
    pub(crate) fn feed(&mut self, input: &mut &[u8]) -> Framed {
        if self.buf.len() < HEADER_LEN {
            let take = (HEADER_LEN - self.buf.len()).min(input.len());
            self.buf.extend_from_slice(&input[..take]);
            *input = &input[take..];
            if self.buf.len() < HEADER_LEN {
                return Framed::NeedMore;
            }
        }
        let Some(header) = RecordHeader::parse(&self.buf) else {
            return Framed::NeedMore;
        };
        if !header.is_valid() {
            return Framed::Invalid(header);
        }
        let want = HEADER_LEN + header.len;
        // Bounded by the valid length: the record's room at once, not by doubling.
        self.buf.reserve_exact(want - self.buf.len());
        let take = (want - self.buf.len()).min(input.len());
        self.buf.extend_from_slice(&input[..take]);
        *input = &input[take..];
        if self.buf.len() == want {
            Framed::Record
        } else {
            Framed::NeedMore
        }
    }

    /// Drops the record being rebuilt, and its memory.
    pub(crate) fn clear(&mut self) {
        self.buf = Vec::new();
    }

    /// Takes the whole record after [`Framed::Record`], leaving the assembler empty and
    /// holding no memory.
    pub(crate) fn take_record(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// The length of the record `input` starts with, when nothing is being rebuilt and the
    /// whole record (with a header [`Self::feed`] accepts) is in `input`: it can be read from
    /// there without being rebuilt.
    pub(crate) fn whole_record(&self, input: &[u8]) -> Option<usize> {
        if !self.buf.is_empty() {
            return None;
        }
        let header = RecordHeader::parse(input)?;
        let len = HEADER_LEN + header.len;
        (header.is_valid() && input.len() >= len).then_some(len)
    }

    /// Bytes of the record being rebuilt.
    pub(crate) fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Bytes still missing from the record being rebuilt, once its header is known.
    pub(crate) fn missing(&self) -> Option<usize> {
        let header = RecordHeader::parse(&self.buf)?;
        Some((HEADER_LEN + header.len).saturating_sub(self.buf.len()))
    }
}

/// What [`find_boundary`] found in a buffer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Boundary {
    /// A plausible record starts here, and its whole body is in the buffer.
    Candidate(usize),
    /// Whether a record starts here cannot be told before more bytes arrive; nothing earlier
    /// (from the search start) can start one.
    NeedMore(usize),
}

/// The first offset at or after `from` where a plausible record starts: its header is
/// plausible and either the next header, right after its body, is plausible too, or its
/// body ends exactly at one of `segment_ends` (sorted offsets of `buf` where a TCP segment
/// ended, as records usually do). Segment ends rather than the end of `buf`, so the answer
/// does not depend on how a segment's bytes were cut into calls.
pub(crate) fn find_boundary(buf: &[u8], from: usize, segment_ends: &[usize]) -> Boundary {
    let mut at = from;
    while at < buf.len() {
        let Some(header) = RecordHeader::parse(&buf[at..]) else {
            return Boundary::NeedMore(at);
        };
        if header.is_plausible() {
            let end = at + HEADER_LEN + header.len;
            if segment_ends.binary_search(&end).is_ok() {
                return Boundary::Candidate(at);
            }
            if end >= buf.len() {
                return Boundary::NeedMore(at);
            }
            match RecordHeader::parse(&buf[end..]) {
                None => return Boundary::NeedMore(at),
                Some(next) if next.is_plausible() => return Boundary::Candidate(at),
                Some(_) => {}
            }
        }
        at += 1;
    }
    Boundary::NeedMore(buf.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ty: u8, len: usize) -> Vec<u8> {
        let mut r = vec![ty, 3, 3];
        r.extend_from_slice(&(len as u16).to_be_bytes());
        r.extend((0..len).map(|i| (i * 7 + 1) as u8));
        r
    }

    /// The records of `stream` cut at `cuts`, read as the TLS layer reads them: a record
    /// wholly within an input taken from it ([`RecordAssembler::whole_record`]), the others
    /// rebuilt; with `rebuild_all`, every record rebuilt.
    fn collect_with(
        stream: &[u8],
        cuts: &[usize],
        rebuild_all: bool,
    ) -> Result<Vec<Vec<u8>>, RecordHeader> {
        let mut a = RecordAssembler::default();
        let mut out = Vec::new();
        let mut last = 0;
        for &cut in cuts.iter().chain(std::iter::once(&stream.len())) {
            let mut input = &stream[last..cut];
            last = cut;
            loop {
                if let Some(len) = a.whole_record(input).filter(|_| !rebuild_all) {
                    assert_eq!(a.buffered(), 0);
                    out.push(input[..len].to_vec());
                    input = &input[len..];
                    continue;
                }
                match a.feed(&mut input) {
                    Framed::Record => {
                        out.push(a.take_record());
                        // Between records the assembler holds no memory.
                        assert_eq!((a.buffered(), a.buf.capacity()), (0, 0));
                    }
                    Framed::NeedMore => break,
                    Framed::Invalid(h) => return Err(h),
                }
            }
        }
        Ok(out)
    }

    fn collect(stream: &[u8], cuts: &[usize]) -> Result<Vec<Vec<u8>>, RecordHeader> {
        let rebuilt = collect_with(stream, cuts, true);
        let taken = collect_with(stream, cuts, false);
        assert_eq!(rebuilt, taken, "cuts {cuts:?}");
        taken
    }

    #[test]
    fn records_whole_byte_by_byte_and_at_random_splits() {
        let records = [
            record(22, 100),
            record(20, 1),
            record(23, 0),
            record(23, MAX_CIPHERTEXT_LEN),
        ];
        let stream: Vec<u8> = records.concat();
        let expected: Vec<Vec<u8>> = records.to_vec();
        assert_eq!(collect(&stream, &[]).unwrap(), expected);
        let every: Vec<usize> = (1..stream.len()).collect();
        assert_eq!(collect(&stream, &every).unwrap(), expected);
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..50 {
            let mut cuts: Vec<usize> = (0..8)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    (seed % stream.len() as u64) as usize
                })
                .collect();
            cuts.sort();
            assert_eq!(collect(&stream, &cuts).unwrap(), expected);
        }
    }

    #[test]
    fn hostile_lengths_and_types_are_errors_not_allocations() {
        let mut too_long = vec![23, 3, 3];
        too_long.extend_from_slice(&((MAX_CIPHERTEXT_LEN + 1) as u16).to_be_bytes());
        assert!(collect(&too_long, &[]).is_err());
        assert!(collect(&[0x47, 0x45, 0x54, 0x20, 0x2f], &[]).is_err());
        let mut a = RecordAssembler::default();
        let mut input: &[u8] = &[23, 3, 3, 0xff, 0xff, 1, 2];
        assert!(matches!(a.feed(&mut input), Framed::Invalid(_)));
        assert!(a.buffered() <= HEADER_LEN);
    }

    #[test]
    fn boundary_needs_a_chain_of_two_or_a_segment_end() {
        let mut buf = vec![0x17, 0x03, 0x03, 0x00]; // a header cut short, as after a loss
        buf.extend_from_slice(&[9, 9, 9]);
        let start = buf.len();
        buf.extend(record(23, 40));
        // Its end is the end of the bytes so far, but not known to end a segment: wait.
        assert_eq!(find_boundary(&buf, 0, &[]), Boundary::NeedMore(start));
        assert_eq!(
            find_boundary(&buf, 0, &[buf.len()]),
            Boundary::Candidate(start)
        );
        buf.extend(record(23, 3));
        assert_eq!(find_boundary(&buf, 0, &[]), Boundary::Candidate(start));
        // A plausible header whose successor is not plausible is passed over.
        let mut fake = record(23, 2);
        fake.extend_from_slice(&[0xff; 10]);
        fake.extend(record(21, 2));
        assert_eq!(
            find_boundary(&fake, 0, &[fake.len()]),
            Boundary::Candidate(17)
        );
        // A record not yet whole must wait.
        let partial = &record(23, 40)[..20];
        assert_eq!(find_boundary(partial, 0, &[20]), Boundary::NeedMore(0));
        assert_eq!(find_boundary(&[0xff, 0xff], 0, &[]), Boundary::NeedMore(0));
        assert_eq!(find_boundary(&[0xff; 9], 0, &[]), Boundary::NeedMore(5));
    }
}
