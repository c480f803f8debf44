//! Fuzz target: see `mcp_resume_audit_fuzz::merge` for what it feeds and what it checks.
//! Built by `cargo fuzz` (with `--cfg fuzzing`) it is a libFuzzer target; built plainly it
//! replays the files or directories named on its command line.

#![cfg_attr(fuzzing, no_main)]

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| mcp_resume_audit_fuzz::merge(data));

#[cfg(not(fuzzing))]
fn main() -> std::process::ExitCode {
    mcp_resume_audit_fuzz::replay_args(mcp_resume_audit_fuzz::merge)
}
