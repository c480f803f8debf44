//! Writes the malformed corpus: `cargo run --example gen-malformed -- fixtures/malformed`.
//!
//! With `--large DIR` it writes instead the inputs too large to commit, for measurements:
//! `flood-100000.pcap` (100,000 connections that never close), `sse-line-100mb.pcap` (a
//! 100 MB SSE line without a line break) and `http-header-1mb.pcap`.
//! The builders are in `src/synth/malformed.rs`; the same calls give the same bytes.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::process::ExitCode;

use mcp_resume_audit_synth::malformed;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gen-malformed: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag, dir] if flag == "--large" => {
            let dir = PathBuf::from(dir);
            std::fs::create_dir_all(&dir)?;
            let open = |name: &str| File::create(dir.join(name)).map(BufWriter::new);
            malformed::connection_flood(open("flood-100000.pcap")?, 100_000)?;
            malformed::endless_sse_line(open("sse-line-100mb.pcap")?, 100 << 20)?;
            malformed::huge_header(open("http-header-1mb.pcap")?, 1 << 20)?;
            eprintln!("wrote the large inputs under {}", dir.display());
        }
        [dir] => {
            let dir = PathBuf::from(dir);
            std::fs::create_dir_all(&dir)?;
            let files = malformed::corpus()?;
            for (name, bytes) in &files {
                std::fs::write(dir.join(name), bytes)?;
            }
            eprintln!("wrote {} files under {}", files.len(), dir.display());
        }
        _ => {
            eprintln!("usage: gen-malformed DIR | gen-malformed --large DIR");
            return Err(std::io::Error::other("bad arguments"));
        }
    }
    Ok(())
}
