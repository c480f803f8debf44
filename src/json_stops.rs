//! The bytes a JSON string cannot hold as they are: a quote, a backslash, a control byte.
//!
//! Input: bytes. Output: where such bytes are, or whether there are any.
//! Invariants: exact answers (no byte is missed, none is taken for one); shared by the reader
//! of HAR entries, which looks for a string's end, and the report's writer, which escapes.

/// Bit `k` set when byte `k` of `block` is a quote, a backslash or a control byte (exact).
#[cfg(target_arch = "x86_64")]
pub fn stops16(block: &[u8; 16]) -> u32 {
    use safe_arch::{
        bitor_m128i, cmp_eq_mask_i8_m128i, load_unaligned_m128i, max_u8_m128i, move_mask_i8_m128i,
        set_splat_i8_m128i,
    };
    let splat = |b: u8| set_splat_i8_m128i(b as i8);
    let v = load_unaligned_m128i(block);
    // A byte is below 0x20 exactly when its unsigned maximum with 0x1F is 0x1F.
    let control = cmp_eq_mask_i8_m128i(max_u8_m128i(v, splat(0x1F)), splat(0x1F));
    let quote = cmp_eq_mask_i8_m128i(v, splat(b'"'));
    let backslash = cmp_eq_mask_i8_m128i(v, splat(b'\\'));
    move_mask_i8_m128i(bitor_m128i(bitor_m128i(quote, backslash), control)) as u32
}

/// The high bit of each byte of `w` that is a quote, a backslash or a control byte. The lowest
/// one set is exact; above it a borrow may set more, so the word has one exactly when this is
/// not zero.
pub fn stops(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_bytes = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    zero_bytes(w ^ (ONES * u64::from(b'"')))
        | zero_bytes(w ^ (ONES * u64::from(b'\\')))
        | (w.wrapping_sub(ONES * 0x20) & !w & HIGH)
}

/// True when `bytes` holds no quote, backslash or control byte. Blocks of 16 (or words of 8,
/// or two halves of 4) cover it, the last one overlapping the one before where the length is
/// not a multiple, so that no byte is looked at alone but in strings of up to three.
pub fn plain(bytes: &[u8]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if let Some(last) = bytes.last_chunk::<16>() {
        let mut rest = bytes;
        while let Some((block, after)) = rest.split_first_chunk::<16>()
            && !after.is_empty()
        {
            if stops16(block) != 0 {
                return false;
            }
            rest = after;
        }
        return stops16(last) == 0;
    }
    if let Some(last) = bytes.last_chunk::<8>() {
        let mut rest = bytes;
        while let Some((word, after)) = rest.split_first_chunk::<8>()
            && !after.is_empty()
        {
            if stops(u64::from_le_bytes(*word)) != 0 {
                return false;
            }
            rest = after;
        }
        return stops(u64::from_le_bytes(*last)) == 0;
    }
    // Four to seven bytes: the first four and the last four, as one word.
    if let (Some(first), Some(last)) = (bytes.first_chunk::<4>(), bytes.last_chunk::<4>()) {
        let word =
            u64::from(u32::from_le_bytes(*first)) | (u64::from(u32::from_le_bytes(*last)) << 32);
        return stops(word) == 0;
    }
    bytes.iter().all(|&b| b >= 0x20 && b != b'"' && b != b'\\')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What each of the scans must say, byte by byte.
    fn is_stop(b: u8) -> bool {
        b < 0x20 || b == b'"' || b == b'\\'
    }

    #[test]
    fn a_stop_is_found_at_every_place_and_length() {
        for len in 0..=41 {
            let mut bytes: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            assert!(plain(&bytes), "plain, {len} bytes");
            for at in 0..len {
                let was = bytes[at];
                for b in 0..=255u8 {
                    bytes[at] = b;
                    assert_eq!(!plain(&bytes), is_stop(b), "{b:#04x} at {at} of {len}");
                }
                bytes[at] = was;
            }
        }
    }

    #[test]
    fn the_word_and_block_scans_agree_with_the_bytes() {
        for b in 0..=255u8 {
            for at in 0..8 {
                let mut w = [b'x'; 8];
                w[at] = b;
                let s = stops(u64::from_le_bytes(w));
                assert_eq!(s != 0, is_stop(b), "{b} at {at}");
                if is_stop(b) {
                    assert_eq!(s.trailing_zeros() as usize / 8, at);
                }
            }
            #[cfg(target_arch = "x86_64")]
            for at in 0..16 {
                let mut block = [b'x'; 16];
                block[at] = b;
                let want = if is_stop(b) { 1 << at } else { 0 };
                assert_eq!(stops16(&block), want, "{b} at {at}");
            }
        }
    }
}
