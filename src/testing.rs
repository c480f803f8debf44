//! What tests across the crate share.

/// The next number of a xorshift64 sequence seeded by `seed` (which it advances): random
/// enough for the splits and inputs tests make, and the same on every run.
pub(crate) fn xorshift(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}
