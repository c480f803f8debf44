//! The ids of a resumed stream, kept to find the ones it delivers twice.
//!
//! Ids are appended (not looked up) as they come, so that a stream's writes stay sequential;
//! duplicates are found once, when the stream ends. Thousands of long resumed streams can be
//! open at once, so each id is packed into a few bytes of one buffer:
//! - a byte that gives the lengths of the two numbers after it: its mark's frame and time, as
//!   differences from the id before's (zigzag-coded, least significant byte first, without
//!   the high bytes that are zero: a stream's events come a few frames and microseconds
//!   apart);
//! - then a byte that says what the id is: a decimal integer written without leading zeros,
//!   with the length of its difference from the integer before, which follows (its text is
//!   its value; a counter's next id takes one byte); or the id's bytes (at most
//!   [`MAX_TEXT`]), after their length in two bytes, and the hash of the whole id when it was
//!   longer.
//!
//! Whichever way an id is packed, it unpacks to the same hash, mark and text.

use super::{DupId, MAX_DUPS, MAX_SEEN_IDS, MAX_TEXT, cut_text, fact_hash};
use crate::record::Mark;

/// Room the buffer starts with: most resumed streams end after a few ids.
const FIRST_ROOM: usize = 64;

/// The packed ids of one resumed stream (see the module's documentation).
#[derive(Debug, Default)]
pub(super) struct SeenIds {
    log: Vec<u8>,
    /// Ids remembered.
    count: usize,
    /// An id so far was not an integer above the one before it. While every id rises, none
    /// repeats an earlier one (distinct values are distinct texts), and nothing is unpacked.
    unordered: bool,
    /// The value of the last id remembered, while they rise.
    last: u64,
    /// The mark of the last id remembered, which the next one's is packed against.
    prev_mark: Mark,
    /// The last integer packed as one, which the next one's value is packed against.
    prev_int: u64,
}

/// Room for an entry's numbers: the lengths' byte, two words, the id's byte, a word.
const ENTRY: usize = 1 + 8 + 8 + 1 + 8;

/// The id byte of an integer: this bit, and the length of its difference in the low four.
const ID_INT: u8 = 0x80;
/// The id byte of an id's bytes, cut at [`MAX_TEXT`]: the whole id's hash follows them.
const ID_CUT: u8 = 0x01;
/// The id byte of an id's bytes, whole.
const ID_TEXT: u8 = 0x00;

impl SeenIds {
    /// Remembers an id (`value`: its value when it is a decimal integer that fits 64 bits;
    /// `hash`: [`fact_hash`] of the whole id); false when the cap is reached.
    pub(super) fn push(&mut self, hash: u64, id: &[u8], value: Option<u64>, mark: Mark) -> bool {
        if self.count >= MAX_SEEN_IDS {
            return false;
        }
        debug_assert_eq!(hash, fact_hash(&[id]));
        match value {
            Some(v) if self.count == 0 || v > self.last => self.last = v,
            _ => self.unordered = true,
        }
        if self.log.capacity() == 0 {
            self.log.reserve_exact(FIRST_ROOM);
        }
        // Marks are two's complement differences: a capture's clock may step back.
        let frame = zigzag(mark.frame.wrapping_sub(self.prev_mark.frame) as i64);
        let time = zigzag(mark.time_ns.wrapping_sub(self.prev_mark.time_ns));
        self.prev_mark = mark;
        let canonical = id.len() == 1 || id.first() != Some(&b'0');
        let int = value.filter(|_| canonical);
        let (kind, delta) = match int {
            Some(v) => {
                let delta = zigzag(v.wrapping_sub(self.prev_int) as i64);
                self.prev_int = v;
                (ID_INT | len_of(delta), delta)
            }
            None if id.len() > MAX_TEXT => (ID_CUT, 0),
            None => (ID_TEXT, 0),
        };
        // The numbers go in as whole words, each cut to its length by where the next begins;
        // the entry is copied to the log whole, then cut to its length.
        let mut entry = [0u8; ENTRY];
        entry[0] = len_of(frame) | (len_of(time) << 4);
        let mut at = 1;
        for v in [frame, time] {
            entry[at..at + 8].copy_from_slice(&v.to_le_bytes());
            at += usize::from(len_of(v));
        }
        entry[at] = kind;
        at += 1;
        if int.is_some() {
            entry[at..at + 8].copy_from_slice(&delta.to_le_bytes());
            at += usize::from(len_of(delta));
        }
        let end = self.log.len() + at;
        self.log.extend_from_slice(&entry);
        self.log.truncate(end);
        if int.is_none() {
            let cut = id.get(..MAX_TEXT).unwrap_or(id);
            // At most MAX_TEXT bytes: two bytes hold the length.
            self.log
                .extend_from_slice(&(cut.len() as u16).to_le_bytes());
            self.log.extend_from_slice(cut);
            if kind == ID_CUT {
                self.log.extend_from_slice(&hash.to_le_bytes());
            }
        }
        self.count += 1;
        true
    }

    /// Each id delivered again, with its first delivery and the repeat, in stream order.
    pub(super) fn duplicates(&self) -> Vec<DupId> {
        if !self.unordered {
            return Vec::new();
        }
        let ids = self.unpack();
        // (hash, position) pairs are distinct, so an unstable sort gives the stable order.
        let mut order: Vec<(u64, u32)> = ids.iter().zip(0u32..).map(|(e, i)| (e.0, i)).collect();
        order.sort_unstable();
        let mut dups = Vec::new();
        for w in order.windows(2) {
            let (Some(a), Some(b)) = (ids.get(w[0].1 as usize), ids.get(w[1].1 as usize)) else {
                continue;
            };
            if a.0 == b.0 {
                let text = match a.2 {
                    Text::Int(v) => v.to_string(),
                    Text::Bytes(at, len) => cut_text(self.log.get(at..at + len).unwrap_or(&[])),
                };
                dups.push((
                    w[1].1,
                    DupId {
                        text,
                        first: a.1,
                        again: b.1,
                    },
                ));
            }
        }
        dups.sort_by_key(|d| d.0);
        dups.into_iter().take(MAX_DUPS).map(|d| d.1).collect()
    }

    /// Every id remembered, in order: its hash, mark and text.
    fn unpack(&self) -> Vec<(u64, Mark, Text)> {
        let mut ids = Vec::with_capacity(self.count);
        let mut r = Reader {
            log: &self.log,
            at: 0,
        };
        let mut mark = Mark::default();
        let mut int = 0u64;
        while r.at < self.log.len() {
            let Some(lens) = r.byte() else {
                break;
            };
            let (Some(frame), Some(time), Some(kind)) =
                (r.number(lens & 0x0f), r.number(lens >> 4), r.byte())
            else {
                break;
            };
            mark.frame = mark.frame.wrapping_add(unzigzag(frame) as u64);
            mark.time_ns = mark.time_ns.wrapping_add(unzigzag(time));
            if kind & ID_INT != 0 {
                let Some(delta) = r.number(kind & 0x0f) else {
                    break;
                };
                int = int.wrapping_add(unzigzag(delta) as u64);
                // Unpacked only when ids came out of order: rare enough for a string.
                let hash = fact_hash(&[int.to_string().as_bytes()]);
                ids.push((hash, mark, Text::Int(int)));
                continue;
            }
            let Some(len) = r.take(2).and_then(|b| <[u8; 2]>::try_from(b).ok()) else {
                break;
            };
            let len = usize::from(u16::from_le_bytes(len));
            let at = r.at;
            let Some(bytes) = r.take(len) else {
                break;
            };
            let hash = if kind == ID_CUT {
                match r.take(8).and_then(|b| <[u8; 8]>::try_from(b).ok()) {
                    Some(h) => u64::from_le_bytes(h),
                    None => break,
                }
            } else {
                fact_hash(&[bytes])
            };
            ids.push((hash, mark, Text::Bytes(at, len)));
        }
        ids
    }
}

/// Where an unpacked id's text is.
#[derive(Clone, Copy, Debug)]
enum Text {
    /// An integer written without leading zeros: its text is its value.
    Int(u64),
    /// The id's bytes in the log: offset and length.
    Bytes(usize, usize),
}

/// Reads the log from `at`.
struct Reader<'a> {
    log: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.log.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    /// A number of `len` bytes (at most 8), least significant first.
    fn number(&mut self, len: u8) -> Option<u64> {
        let b = self.take(usize::from(len).min(8))?;
        let mut word = [0; 8];
        word.get_mut(..b.len())?.copy_from_slice(b);
        Some(u64::from_le_bytes(word))
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let b = self.log.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(b)
    }
}

/// Bytes `v` takes without its high zero bytes (none for zero).
fn len_of(v: u64) -> u8 {
    (64 - v.leading_zeros()).div_ceil(8) as u8
}

/// Small magnitudes of either sign to small numbers: 0, -1, 1, -2 … to 0, 1, 2, 3 ….
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What the stream's ids would give kept whole: each (hash, mark, text) as it came.
    fn model(ids: &[(Vec<u8>, Mark)]) -> Vec<DupId> {
        let kept: Vec<(u64, Mark, &[u8])> = ids
            .iter()
            .take(MAX_SEEN_IDS)
            .map(|(id, m)| (fact_hash(&[id]), *m, id.get(..MAX_TEXT).unwrap_or(id)))
            .collect();
        let mut pairs = Vec::new();
        for (j, b) in kept.iter().enumerate() {
            // The repeat is paired with the delivery of the same id just before it.
            if let Some(a) = kept[..j].iter().rev().find(|a| a.0 == b.0) {
                pairs.push(DupId {
                    text: cut_text(a.2),
                    first: a.1,
                    again: b.1,
                });
            }
        }
        pairs.truncate(MAX_DUPS);
        pairs
    }

    fn seen(ids: &[(Vec<u8>, Mark)]) -> (SeenIds, Vec<bool>) {
        let mut s = SeenIds::default();
        let kept = ids
            .iter()
            .map(|(id, m)| {
                let digits = !id.is_empty() && id.iter().all(u8::is_ascii_digit);
                let value = digits
                    .then(|| std::str::from_utf8(id).ok()?.parse::<u64>().ok())
                    .flatten();
                s.push(fact_hash(&[id]), id, value, *m)
            })
            .collect();
        (s, kept)
    }

    fn id_strategy() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            // Counters, most of them small, leading zeros and the largest values among them.
            (0u64..40).prop_map(|v| v.to_string().into_bytes()),
            (0u64..40).prop_map(|v| format!("0{v}").into_bytes()),
            prop_oneof![
                Just(0u64),
                Just(u64::MAX),
                Just(u64::MAX - 1),
                Just(1 << 63)
            ]
            .prop_map(|v| v.to_string().into_bytes()),
            // Past 64 bits: digits with no value.
            Just(b"18446744073709551616".to_vec()),
            // Opaque and structured ids, some longer than the text kept, some not UTF-8.
            "[a-c_0-9]{1,6}".prop_map(String::into_bytes),
            (250usize..270, any::<u8>()).prop_map(|(n, b)| vec![b'a' + b % 3; n]),
            proptest::collection::vec(any::<u8>(), 0..4),
        ]
    }

    fn mark_strategy() -> impl Strategy<Value = Mark> {
        prop_oneof![
            (0u64..1_000_000, -5_000_000_000i64..5_000_000_000).prop_map(|(f, t)| Mark::new(f, t)),
            Just(Mark::new(u64::MAX, i64::MIN)),
            Just(Mark::new(0, i64::MAX)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Packed or not, the same duplicates with the same marks and texts.
        #[test]
        fn packed_ids_give_the_duplicates_kept_ids_would(
            ids in proptest::collection::vec((id_strategy(), mark_strategy()), 0..60),
        ) {
            let (s, kept) = seen(&ids);
            prop_assert!(kept.iter().all(|k| *k));
            let unpacked = s.unpack();
            prop_assert_eq!(unpacked.len(), ids.len());
            for ((hash, mark, _), (id, m)) in unpacked.iter().zip(&ids) {
                prop_assert_eq!(*hash, fact_hash(&[id]));
                prop_assert_eq!(mark, m);
            }
            let got = s.duplicates();
            let want = model(&ids);
            // While integers rise, nothing repeats and nothing is unpacked.
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                prop_assert_eq!(&g.text, &w.text);
                prop_assert_eq!(g.first, w.first);
                prop_assert_eq!(g.again, w.again);
            }
        }
    }

    #[test]
    fn past_the_cap_ids_are_refused_and_earlier_ones_kept() {
        let ids: Vec<(Vec<u8>, Mark)> = (0..MAX_SEEN_IDS as u64 + 3)
            .map(|i| {
                (
                    (i % 5).to_string().into_bytes(),
                    Mark::new(10 + i, 1_000 * i as i64),
                )
            })
            .collect();
        let (s, kept) = seen(&ids);
        assert_eq!(kept.iter().filter(|k| **k).count(), MAX_SEEN_IDS);
        assert!(!kept[MAX_SEEN_IDS]);
        let dups = s.duplicates();
        assert_eq!(dups.len(), MAX_DUPS);
        assert_eq!(dups[0].text, "0");
        assert_eq!((dups[0].first.frame, dups[0].again.frame), (10, 15));
    }

    #[test]
    fn a_rising_counter_takes_a_few_bytes_an_id() {
        let ids: Vec<(Vec<u8>, Mark)> = (1..=1000u64)
            .map(|i| {
                (
                    i.to_string().into_bytes(),
                    Mark::new(100 + 2 * i, 20_000 * i as i64),
                )
            })
            .collect();
        let (s, _) = seen(&ids);
        // The lengths' byte, the frame's step one byte, the time's two, the id's byte, the
        // counter's step one.
        assert_eq!(s.log.len(), 6 * 1000, "{} bytes", s.log.len());
        assert!(s.duplicates().is_empty());
    }
}
