//! The command line: arguments, progress display, terminal text and exit status live in
//! [`cli`]; the analysis is the library's.

mod cli;

fn main() -> std::process::ExitCode {
    // SAFETY: mi_option_set stores an option value that mimalloc reads when it next purges;
    // it takes no pointers, and mimalloc documents it as callable at any time.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 10) };
    cli::main()
}

/// Allocator settings for a run on `threads` threads. With more than one, a thread that frees
/// a block of a page its owner gave up does not take the page over (the session stage frees
/// what the workers allocate): peak RSS 2–3 MiB lower on 1 and 2 GiB of the sessions mix with
/// `-j2`, 1 MiB on the default mix, at the same speed and instructions. With one thread it was
/// 2 MiB higher, so it is left as it is.
fn allocator_for_threads(threads: usize) {
    if threads > 1 {
        // SAFETY: mi_option_set stores an option value and takes no pointers (as above).
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PAGE_RECLAIM_ON_FREE, -1) };
    }
}

/// `mi_option_purge_delay` in mimalloc.h (between `eager_commit_delay`, 14, and
/// `use_numa_nodes`, 16); the Rust bindings do not name it.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// `mi_option_page_reclaim_on_free` in mimalloc.h (between `generic_collect`, 34, and
/// `page_full_retain`, 36).
const MI_OPTION_PAGE_RECLAIM_ON_FREE: libmimalloc_sys::mi_option_t = 35;

#[global_allocator]
static GLOBAL: Mimalloc = Mimalloc;

/// mimalloc, asked the way Rust's own `System` allocator asks glibc: through the plain
/// `mi_malloc` family when every block already has the alignment the layout needs, through the
/// `_aligned` family otherwise. The `_aligned` entry points check the alignment on every call:
/// 52 instructions an allocation against about 20 through the plain ones, which took 1.2% off
/// all instructions on the reconnect storm (a resume makes some twenty allocations).
struct Mimalloc;

/// The alignment of every mimalloc block of at least this many bytes (`MI_MAX_ALIGN_SIZE`,
/// `alignof(max_align_t)`); smaller blocks are word-aligned.
const BLOCK_ALIGN: usize = 16;

/// Whether every block the plain entry points give for `size` bytes is aligned to `align`:
/// blocks of 16 bytes or more are 16-aligned, smaller ones 8-aligned, and an alignment no
/// larger than a size under 16 is at most 8.
fn plain(size: usize, align: usize) -> bool {
    align <= BLOCK_ALIGN && align <= size
}

// SAFETY: every block comes from mimalloc and goes back to it (`mi_free` frees blocks of
// either family). The plain entry points are asked only when `plain` holds: mimalloc's size
// classes are multiples of two words from 16 bytes on, so that every block of 16 bytes or more
// is 16-aligned (its allocation path asserts as much) and every smaller one word-aligned; the
// first test below checks it at every size up to 300 bytes. Otherwise the `_aligned` entry
// points are asked for the layout's alignment. Sizes and pointers pass through unchanged.
unsafe impl std::alloc::GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let (size, align) = (layout.size(), layout.align());
        // SAFETY: both take any size and return null or a block of at least `size` bytes.
        unsafe {
            if plain(size, align) {
                libmimalloc_sys::mi_malloc(size).cast()
            } else {
                libmimalloc_sys::mi_malloc_aligned(size, align).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        let (size, align) = (layout.size(), layout.align());
        // SAFETY: as `alloc`, the block zeroed.
        unsafe {
            if plain(size, align) {
                libmimalloc_sys::mi_zalloc(size).cast()
            } else {
                libmimalloc_sys::mi_zalloc_aligned(size, align).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: std::alloc::Layout) {
        // SAFETY: `ptr` is a live block of this allocator (GlobalAlloc's contract).
        unsafe { libmimalloc_sys::mi_free(ptr.cast()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        let align = layout.align();
        // SAFETY: `ptr` is a live block of this allocator; a block kept in place keeps the
        // alignment it had, and a new one has the alignment `alloc` would give it.
        unsafe {
            if plain(new_size, align) {
                libmimalloc_sys::mi_realloc(ptr.cast(), new_size).cast()
            } else {
                libmimalloc_sys::mi_realloc_aligned(ptr.cast(), new_size, align).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::alloc::{GlobalAlloc, Layout};

    #[test]
    fn every_block_has_its_layouts_alignment_and_keeps_its_bytes() {
        let a = super::Mimalloc;
        let mut fill = 0u8;
        let mut held = Vec::new();
        for size in (1..=300).chain([511, 512, 1000, 4096, 5000, 70_000, 1 << 20]) {
            for align in [1, 2, 4, 8, 16, 32, 64, 4096] {
                let layout = Layout::from_size_align(size, align).expect("layout");
                for zeroed in [false, true] {
                    // SAFETY: a layout of non-zero size; the block is written within it and
                    // freed with it below.
                    let p = unsafe {
                        if zeroed {
                            a.alloc_zeroed(layout)
                        } else {
                            a.alloc(layout)
                        }
                    };
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size}, align {align}");
                    // SAFETY: `size` bytes of the block just allocated.
                    let bytes = unsafe { std::slice::from_raw_parts_mut(p, size) };
                    if zeroed {
                        assert!(bytes.iter().all(|&b| b == 0), "size {size}, align {align}");
                    }
                    fill = fill.wrapping_add(1);
                    bytes.fill(fill);
                    // Held a while, so that later blocks come from pages in use.
                    held.push((p, layout, fill));
                }
            }
            for (i, (p, layout, fill)) in held.drain(..).enumerate() {
                let (size, align) = (layout.size(), layout.align());
                // Shrunk and grown in turn.
                let new_size = if i % 2 == 0 {
                    size / 2 + 1
                } else {
                    size * 3 + 5
                };
                // SAFETY: a live block of `layout`, to a non-zero size.
                let q = unsafe { a.realloc(p, layout, new_size) };
                assert!(!q.is_null());
                assert_eq!(
                    q as usize % align,
                    0,
                    "realloc {size} -> {new_size}, {align}"
                );
                let kept = size.min(new_size);
                // SAFETY: the first `kept` bytes are the old block's.
                let bytes = unsafe { std::slice::from_raw_parts(q, kept) };
                assert!(
                    bytes.iter().all(|&b| b == fill),
                    "realloc {size} -> {new_size}"
                );
                let layout = Layout::from_size_align(new_size, align).expect("layout");
                // SAFETY: the live block `realloc` returned, of that layout.
                unsafe { a.dealloc(q, layout) };
            }
        }
    }

    #[test]
    fn plain_blocks_are_asked_for_only_below_the_block_alignment() {
        assert!(super::plain(1, 1));
        assert!(super::plain(24, 16));
        assert!(!super::plain(8, 16));
        assert!(!super::plain(64, 32));
        assert!(super::plain(4096, 16));
    }

    #[test]
    fn the_purge_delay_option_is_the_one_set() {
        // Only `purge_delay` defaults to 1000 among mimalloc's options, and nothing in this
        // test process sets it: a renumbered enum would show here.
        // SAFETY: mi_option_get reads an option value; it takes no pointers.
        let value = unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(value, 1000);
        }
    }

    #[test]
    fn the_page_reclaim_option_is_the_one_set() {
        // Its neighbours have defaults of their own (10,000 and 2), and it defaults to 0: a
        // renumbered enum would show in one of the three.
        let get = |o| {
            // SAFETY: mi_option_get reads an option value; it takes no pointers.
            unsafe { libmimalloc_sys::mi_option_get(o) }
        };
        let at = super::MI_OPTION_PAGE_RECLAIM_ON_FREE;
        let set = |name| std::env::var_os(name).is_some();
        if !set("MIMALLOC_GENERIC_COLLECT") {
            assert_eq!(get(at - 1), 10_000);
        }
        if !set("MIMALLOC_PAGE_RECLAIM_ON_FREE") {
            assert_eq!(get(at), 0);
        }
        if !set("MIMALLOC_PAGE_FULL_RETAIN") {
            assert_eq!(get(at + 1), 2);
        }
    }
}
