//! The command line: arguments, progress display, terminal text and exit status live in
//! [`cli`]; the analysis is the library's.

mod cli;

fn main() -> std::process::ExitCode {
    // SAFETY: mi_option_set stores an option value that mimalloc reads when it next purges;
    // it takes no pointers, and mimalloc documents it as callable at any time.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 10) };
    cli::main()
}

/// `mi_option_purge_delay` in mimalloc.h (between `eager_commit_delay`, 14, and
/// `use_numa_nodes`, 16); the Rust bindings do not name it.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

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
}
