//! Where a JSON container ends: quotes, escapes and brackets followed 64 bytes at a time.
//!
//! Input: the bytes of one container (`{…}` or `[…]`) from its opening bracket on, in as many
//! pieces as the reader gives. Output: the index of its closing bracket in the piece that holds
//! it, or the first bracket that does not match (or nests too deep), or "more" (state kept for
//! the next piece).
//! Invariants:
//! - The same answer as a byte-by-byte reading ([`Nesting::bytes`], kept as the reference and
//!   for pieces shorter than a block): a `"` outside a string opens one; inside, `\` escapes
//!   the next byte and `"` closes it; outside strings `{`/`[` open and `}`/`]` close, each
//!   closer matching its opener; every other byte is stepped over (the grammar is serde_json's
//!   to judge later).
//! - A block is classified by vector compares: masks of quotes, backslashes and brackets;
//!   escaped bytes by carry arithmetic over backslash runs; the bytes inside strings as the
//!   running parity of the unescaped quotes. A backslash outside a string (never in valid JSON)
//!   escapes nothing in the byte-wise reading, so a block holding one is read byte by byte
//!   instead. Only brackets outside strings are looked at one by one.
//! - The compares are AVX2's and the parity one carry-less multiplication when the CPU has both
//!   (asked at run time), SSE2's (part of every x86-64) and shifts otherwise: one answer.
//!
//! Why: the reading thread of a HAR finds each entry's end before the entry threads read it;
//! bodies held as JSON strings escape a byte every few dozen (an event stream's line ends and
//! quotes), and a scan that stops at every escape made that thread the slowest of the run.

/// Deepest nesting followed (serde_json bounds it again inside entries).
pub const MAX_DEPTH: usize = 512;

/// What one piece of a container gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// The container closes at this index of the piece.
    Ended(usize),
    /// The piece is read through; the container goes on.
    More,
    /// The byte at this index breaks the nesting.
    Bad(usize, &'static str),
}

/// The reading state between pieces of one container.
#[derive(Debug, Default)]
pub struct Nesting {
    /// The closer each open bracket waits for, innermost last.
    closers: Vec<u8>,
    in_string: bool,
    /// The next byte is escaped (a backslash ended the previous piece, inside a string).
    escaped: bool,
}

/// What a bracket that does not match its opener is called.
pub const UNBALANCED: &str = "unbalanced brackets";
/// What an opener past [`MAX_DEPTH`] is called.
pub const TOO_DEEP: &str = "nesting deeper than 512 levels";

impl Nesting {
    /// Ready for a new container (the allocation of the bracket stack is kept).
    pub fn reset(&mut self) {
        self.closers.clear();
        self.in_string = false;
        self.escaped = false;
    }

    /// Whether the last piece ended inside a string.
    pub fn in_string(&self) -> bool {
        self.in_string
    }

    /// Reads the next piece of the container.
    pub fn feed(&mut self, piece: &[u8]) -> Step {
        self.feed_as(piece, Reading::Blocks)
    }

    /// [`Self::feed`], the blocks read as `reading` says.
    fn feed_as(&mut self, piece: &[u8], reading: Reading) -> Step {
        if reading == Reading::Bytes {
            return self.bytes(piece);
        }
        // Whole blocks where the target has the compares, the rest byte by byte.
        #[cfg(target_arch = "x86_64")]
        let at = match self.blocks(piece, reading == Reading::Blocks) {
            Ok(at) => at,
            Err(step) => return step,
        };
        #[cfg(not(target_arch = "x86_64"))]
        let at = 0;
        match self.bytes(piece.get(at..).unwrap_or_default()) {
            Step::More => Step::More,
            Step::Ended(i) => Step::Ended(at + i),
            Step::Bad(i, what) => Step::Bad(at + i, what),
        }
    }

    /// Reads the whole 64-byte blocks at the start of `piece`: the bytes they hold when the
    /// container goes on past them, or where it ends or breaks (`Err`). With AVX2 and
    /// carry-less multiplication when `wide` asks for them and the CPU has them, with SSE2
    /// otherwise.
    #[cfg(target_arch = "x86_64")]
    fn blocks(&mut self, piece: &[u8], wide: bool) -> Result<usize, Step> {
        if wide && wide::available() {
            // SAFETY: `blocks_wide` is compiled for AVX2 and PCLMULQDQ, and runs only here,
            // where `wide::available` has found both on this CPU.
            return unsafe { self.blocks_wide(piece) };
        }
        self.blocks_with(piece, classify, prefix_xor)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,pclmulqdq")]
    fn blocks_wide(&mut self, piece: &[u8]) -> Result<usize, Step> {
        self.blocks_with(piece, |b| wide::classify(b), |x| wide::prefix_xor(x))
    }

    /// [`Self::blocks`] with the given block compares and prefix parity, inlined into each
    /// caller so that they compile with its CPU features.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn blocks_with(
        &mut self,
        piece: &[u8],
        classify: impl Fn(&[u8; 64]) -> (u64, u64, u64),
        prefix_xor: impl Fn(u64) -> u64,
    ) -> Result<usize, Step> {
        let mut at = 0;
        while let Some(block) = piece.get(at..).and_then(<[u8]>::first_chunk::<64>) {
            match self.block(block, classify(block), &prefix_xor) {
                Step::More => at += 64,
                Step::Ended(i) => return Err(Step::Ended(at + i)),
                Step::Bad(i, what) => return Err(Step::Bad(at + i, what)),
            }
        }
        Ok(at)
    }

    /// The reference reading, one byte at a time.
    pub fn bytes(&mut self, piece: &[u8]) -> Step {
        for (i, &b) in piece.iter().enumerate() {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' | b'}' | b']' => {
                    if let Some(step) = self.bracket(b, i) {
                        return step;
                    }
                }
                _ => {}
            }
        }
        Step::More
    }

    /// A bracket outside strings at index `i`: `Some` when the container ends or breaks there.
    fn bracket(&mut self, b: u8, i: usize) -> Option<Step> {
        match b {
            b'{' | b'[' => {
                if self.closers.len() >= MAX_DEPTH {
                    return Some(Step::Bad(i, TOO_DEEP));
                }
                self.closers.push(if b == b'{' { b'}' } else { b']' });
                None
            }
            _ => {
                if self.closers.pop() != Some(b) {
                    return Some(Step::Bad(i, UNBALANCED));
                }
                self.closers.is_empty().then_some(Step::Ended(i))
            }
        }
    }

    /// One block, given its masks of quotes, backslashes and brackets.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn block(
        &mut self,
        block: &[u8; 64],
        (quote, backslash, bracket): (u64, u64, u64),
        prefix_xor: impl Fn(u64) -> u64,
    ) -> Step {
        let mut carry = u64::from(self.escaped);
        let escaped = escaped_bytes(backslash, &mut carry);
        let mut inside = prefix_xor(quote & !escaped);
        if self.in_string {
            inside = !inside;
        }
        if backslash & !inside != 0 {
            // A backslash outside a string escapes nothing there: read byte by byte.
            return self.bytes(block);
        }
        let mut outside = bracket & !inside;
        while outside != 0 {
            let i = outside.trailing_zeros() as usize;
            outside &= outside - 1;
            if let Some(step) = self.bracket(block[i], i) {
                return step;
            }
        }
        self.in_string = inside >> 63 != 0;
        self.escaped = carry != 0;
        Step::More
    }
}

/// Bit `i` set when byte `i` is a quote or a backslash: where a string's plain text stops.
#[cfg(target_arch = "x86_64")]
pub fn string_stops(block: &[u8; 64]) -> u64 {
    use safe_arch::{
        bitor_m128i, cmp_eq_mask_i8_m128i, load_unaligned_m128i, move_mask_i8_m128i,
        set_splat_i8_m128i,
    };
    let (quote, backslash) = (
        set_splat_i8_m128i(b'"' as i8),
        set_splat_i8_m128i(b'\\' as i8),
    );
    let mut mask = 0;
    for (k, part) in block.as_chunks::<16>().0.iter().enumerate() {
        let v = load_unaligned_m128i(part);
        let stops = bitor_m128i(
            cmp_eq_mask_i8_m128i(v, quote),
            cmp_eq_mask_i8_m128i(v, backslash),
        );
        mask |= u64::from(move_mask_i8_m128i(stops) as u16) << (16 * k);
    }
    mask
}

/// Bit `i` set when byte `i` is a quote, a backslash, a bracket (`{`, `}`, `[`, `]`).
#[cfg(target_arch = "x86_64")]
fn classify(block: &[u8; 64]) -> (u64, u64, u64) {
    use safe_arch::{
        bitor_m128i, cmp_eq_mask_i8_m128i, load_unaligned_m128i, move_mask_i8_m128i,
        set_splat_i8_m128i,
    };
    let splat = |b: u8| set_splat_i8_m128i(b as i8);
    let (quote, backslash, open, close, bit5) = (
        splat(b'"'),
        splat(b'\\'),
        splat(b'{'),
        splat(b'}'),
        splat(0x20),
    );
    let mask = |m| u64::from(move_mask_i8_m128i(m) as u16);
    let mut masks = (0u64, 0u64, 0u64);
    for (k, part) in block.as_chunks::<16>().0.iter().enumerate() {
        let v = load_unaligned_m128i(part);
        let shift = 16 * k;
        masks.0 |= mask(cmp_eq_mask_i8_m128i(v, quote)) << shift;
        masks.1 |= mask(cmp_eq_mask_i8_m128i(v, backslash)) << shift;
        // `[` and `]` are `{` and `}` with bit 5 clear; no other byte becomes either with it set.
        let folded = bitor_m128i(v, bit5);
        let brackets = bitor_m128i(
            cmp_eq_mask_i8_m128i(folded, open),
            cmp_eq_mask_i8_m128i(folded, close),
        );
        masks.2 |= mask(brackets) << shift;
    }
    masks
}

/// The block compares in AVX2 (32 bytes at a time) and the prefix parity as one carry-less
/// multiplication, for CPUs that have both (Intel's since 2013, AMD's since 2015).
#[cfg(target_arch = "x86_64")]
pub mod wide {
    use std::arch::x86_64::{
        __m256i, _mm_clmulepi64_si128, _mm_cvtsi128_si64, _mm_set_epi64x, _mm256_cmpeq_epi8,
        _mm256_movemask_epi8, _mm256_or_si256, _mm256_set_m128i, _mm256_set1_epi8,
    };

    /// Whether this CPU has what this module's functions use (looked up once).
    pub fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }

    /// [`super::classify`], 32 bytes at a time.
    #[target_feature(enable = "avx2")]
    pub fn classify(block: &[u8; 64]) -> (u64, u64, u64) {
        let splat = |b: u8| _mm256_set1_epi8(b as i8);
        let mask = |m: __m256i| u64::from(_mm256_movemask_epi8(m) as u32);
        let mut masks = (0u64, 0u64, 0u64);
        for (k, part) in block.as_chunks::<32>().0.iter().enumerate() {
            let v = load(part);
            let shift = 32 * k;
            masks.0 |= mask(_mm256_cmpeq_epi8(v, splat(b'"'))) << shift;
            masks.1 |= mask(_mm256_cmpeq_epi8(v, splat(b'\\'))) << shift;
            // `[` and `]` folded onto `{` and `}`, as in [`super::classify`].
            let folded = _mm256_or_si256(v, splat(0x20));
            let brackets = _mm256_or_si256(
                _mm256_cmpeq_epi8(folded, splat(b'{')),
                _mm256_cmpeq_epi8(folded, splat(b'}')),
            );
            masks.2 |= mask(brackets) << shift;
        }
        masks
    }

    /// [`super::string_stops`], 32 bytes at a time.
    #[target_feature(enable = "avx2")]
    pub fn string_stops(block: &[u8; 64]) -> u64 {
        let mut mask = 0;
        for (k, part) in block.as_chunks::<32>().0.iter().enumerate() {
            let v = load(part);
            let stops = _mm256_or_si256(
                _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'"' as i8)),
                _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'\\' as i8)),
            );
            mask |= u64::from(_mm256_movemask_epi8(stops) as u32) << (32 * k);
        }
        mask
    }

    /// 32 bytes as one vector: two safe 16-byte loads joined, since the 32-byte load takes a
    /// raw pointer.
    #[target_feature(enable = "avx2")]
    fn load(part: &[u8; 32]) -> __m256i {
        let (low, high) = part.split_at(16);
        let half = |h: &[u8]| safe_arch::load_unaligned_m128i(h.try_into().expect("16 bytes")).0;
        _mm256_set_m128i(half(high), half(low))
    }

    /// [`super::prefix_xor`]: the product of `x` and all ones, without carries.
    #[target_feature(enable = "pclmulqdq")]
    pub fn prefix_xor(x: u64) -> u64 {
        let product = _mm_clmulepi64_si128::<0>(_mm_set_epi64x(0, x as i64), _mm_set_epi64x(0, -1));
        _mm_cvtsi128_si64(product) as u64
    }
}

/// Bits of the bytes a backslash escapes: those after an odd run of backslashes. `carry` comes
/// in as 1 when the block's first byte is escaped and goes out as that for the next block.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn escaped_bytes(backslash: u64, carry: &mut u64) -> u64 {
    const EVEN: u64 = 0x5555_5555_5555_5555;
    // An escaped backslash escapes nothing.
    let backslash = backslash & !*carry;
    let follows = (backslash << 1) | *carry;
    // Runs that start on an odd bit, then adding each run to its start carries past its end:
    // the bit after a run lands on an even bit exactly when the run started on the other parity
    // of its length.
    let odd_starts = backslash & !EVEN & !follows;
    let (even_runs, overflow) = odd_starts.overflowing_add(backslash);
    *carry = u64::from(overflow);
    (EVEN ^ (even_runs << 1)) & follows
}

/// Bit `i` is the parity of bits `0..=i`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefix_xor(mut x: u64) -> u64 {
    for shift in [1, 2, 4, 8, 16, 32] {
        x ^= x << shift;
    }
    x
}

/// How [`Nesting`] reads a piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    /// Byte by byte ([`Nesting::bytes`]).
    Bytes,
    /// A block at a time with SSE2 compares whatever the CPU has, the rest byte by byte.
    NarrowBlocks,
    /// A block at a time with the widest compares the CPU has (as [`Nesting::feed`]).
    Blocks,
}

/// Reads `doc` as one container (opening at `doc[0]`) in pieces of the given sizes, cycled, as
/// `reading` says: the answer, indexes counted from `doc[0]`, and whether the document ended
/// inside a string.
pub fn read_in_pieces(doc: &[u8], pieces: &[usize], reading: Reading) -> (Step, bool) {
    let mut n = Nesting::default();
    let mut at = 0;
    for &size in pieces.iter().cycle() {
        let len = size.clamp(1, doc.len().saturating_sub(at).max(1));
        let Some(piece) = doc.get(at..at + len) else {
            break;
        };
        match n.feed_as(piece, reading) {
            Step::More => at += len,
            Step::Ended(i) => return (Step::Ended(at + i), false),
            Step::Bad(i, what) => return (Step::Bad(at + i, what), false),
        }
    }
    (Step::More, n.in_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(doc: &[u8], pieces: &[usize], blocks: bool) -> (Step, bool) {
        let reading = if blocks {
            Reading::Blocks
        } else {
            Reading::Bytes
        };
        read_in_pieces(doc, pieces, reading)
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            crate::testing::xorshift(&mut self.0)
        }
    }

    /// Containers rich in what the block reading must get right: runs of backslashes of every
    /// length, quotes escaped and not, brackets inside and outside strings, backslashes
    /// outside strings, blocks cut anywhere.
    fn document(rng: &mut Rng) -> Vec<u8> {
        let alphabet: &[&[u8]] = &[
            b"\\",
            b"\\\\",
            b"\\\"",
            b"\"",
            b"{",
            b"}",
            b"[",
            b"]",
            b"x",
            b"xxxxxxxxxxxxxxxx",
            b" ",
            b"\\n",
            b"\":\"",
            b"{\"a\":\"",
            b"\"},",
            b"\\\\\\\"",
            b"\xff",
        ];
        let len = rng.next() % 400;
        let mut doc = b"{".to_vec();
        for _ in 0..len {
            doc.extend_from_slice(alphabet[(rng.next() % alphabet.len() as u64) as usize]);
        }
        doc.extend_from_slice(b"}]}}}}");
        doc
    }

    #[test]
    fn blocks_read_what_bytes_read() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut ended = 0;
        for _ in 0..20_000 {
            let doc = document(&mut rng);
            let want = whole(&doc, &[usize::MAX], false);
            let cuts = [
                vec![usize::MAX],
                vec![1],
                vec![63, 64, 65],
                vec![
                    (rng.next() % 200) as usize + 1,
                    (rng.next() % 90) as usize + 1,
                ],
            ];
            for pieces in &cuts {
                assert_eq!(
                    whole(&doc, pieces, true),
                    want,
                    "{:?} in {pieces:?}",
                    String::from_utf8_lossy(&doc)
                );
                assert_eq!(whole(&doc, pieces, false), want);
                // SSE2 blocks, which CPUs without AVX2 read with.
                assert_eq!(read_in_pieces(&doc, pieces, Reading::NarrowBlocks), want);
            }
            ended += usize::from(matches!(want.0, Step::Ended(_)));
        }
        // Both outcomes are exercised.
        assert!(ended > 2_000 && ended < 18_000, "{ended}");
    }

    #[test]
    fn valid_json_ends_at_its_last_bracket() {
        let inner = "{\"a\":\"b\\\\\",\"c\":[1,{\"d\":\"}]\\\"{[\"}],\"e\":\"\\\\\\\\\\\"\"}";
        for pad in 0..130 {
            let doc = format!("[{}{inner},{inner}] tail", " ".repeat(pad));
            let end = doc.len() - " tail".len() - 1;
            assert_eq!(
                whole(doc.as_bytes(), &[usize::MAX], true).0,
                Step::Ended(end)
            );
            assert_eq!(whole(doc.as_bytes(), &[7], true).0, Step::Ended(end));
        }
    }

    #[test]
    fn breaks_are_named_at_their_byte() {
        let doc = format!("{{\"a\":[{}\"x\"}}", " ".repeat(100));
        assert_eq!(
            whole(doc.as_bytes(), &[usize::MAX], true).0,
            Step::Bad(doc.len() - 1, UNBALANCED)
        );
        let deep = "[".repeat(MAX_DEPTH + 1);
        assert_eq!(
            whole(deep.as_bytes(), &[usize::MAX], true).0,
            Step::Bad(MAX_DEPTH, TOO_DEEP)
        );
        let open = format!("{{\"a\":\"{}", "\\\"".repeat(50));
        assert_eq!(
            whole(open.as_bytes(), &[usize::MAX], true),
            (Step::More, true)
        );
    }
}
