//! The command line: arguments, progress display, terminal text and exit status live in
//! [`cli`]; the analysis is the library's.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
