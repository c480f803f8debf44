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
