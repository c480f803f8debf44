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
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(test)]
mod tests {
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
