//! Asking the processor for memory before it is needed.
//!
//! Input: a value the caller will soon read or write. Output: none; the value's cache lines
//! are on their way into the cache when the call returns.
//! Invariants: only a hint, so it changes no result: it reads nothing the program sees and
//! cannot fault.

/// Bytes of a cache line on the processors the analyzer runs on.
const LINE: usize = 64;

/// Asks for every cache line of `value` to be brought into the cache.
#[inline(always)]
pub(crate) fn prefetch<T>(value: &T) {
    let p = (value as *const T).cast::<u8>();
    for line in 0..lines(std::mem::size_of::<T>()) {
        prefetch_line(p.wrapping_add(line * LINE));
    }
}

/// Asks for the first cache line of `bytes` (most of the strings a record points at fit in
/// one). An empty slice's address points at nothing; asking for it is harmless.
#[inline(always)]
pub(crate) fn prefetch_bytes(bytes: &[u8]) {
    prefetch_line(bytes.as_ptr());
}

/// Cache lines a value of `size` bytes spans from its start.
fn lines(size: usize) -> usize {
    size.div_ceil(LINE)
}

#[inline(always)]
fn prefetch_line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` is a hint: it reads nothing the program sees and never faults,
    // whatever the address (here one inside a live value, or an empty slice's dangling one).
    // The intrinsic is `unsafe` only because it is declared for SSE as a target feature,
    // which every x86_64 processor has.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_asked_for_line_by_line() {
        assert_eq!(lines(0), 0);
        assert_eq!(lines(1), 1);
        assert_eq!(lines(64), 1);
        assert_eq!(lines(65), 2);
        assert_eq!(lines(1024), 16);
        // Any value, of any size, is only a hint.
        prefetch(&());
        prefetch(&[0u8; 4096]);
        prefetch_bytes(&[]);
        prefetch_bytes(b"abc");
    }
}
