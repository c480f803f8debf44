//! Writes a large synthetic capture of interleaved MCP sessions, for benchmarks.
//!
//! Usage: `cargo run --release --example gen-capture -- --size 1GiB --format pcap|pcapng
//! --out FILE [--seed N] [--sessions N] [--expect FILE]`.
//!
//! What the capture holds is described in `workload.rs`. `--expect` writes the expected
//! findings as JSON Lines (the `.expect.jsonl` format of the fixtures, derived from the
//! scenario definition, not from any analysis); a summary goes to standard error. The same
//! arguments always give the same bytes.

mod workload;

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use clap::{Parser, ValueEnum};

use workload::{Format, Workload, write_capture};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum FormatArg {
    Pcap,
    Pcapng,
}

/// Writes a deterministic synthetic capture of interleaved MCP sessions.
#[derive(Parser, Debug)]
struct Args {
    /// Approximate size of the capture: bytes, or with a unit (KiB, MiB, GiB, KB, MB, GB).
    #[arg(long, value_parser = parse_size)]
    size: u64,
    #[arg(long, value_enum, default_value = "pcap")]
    format: FormatArg,
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Sessions open at once (per batch); by default 256, fewer for small captures.
    #[arg(long)]
    sessions: Option<usize>,
    /// Also write the expected findings (JSON Lines) to this file.
    #[arg(long)]
    expect: Option<PathBuf>,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let num: f64 = num.parse().map_err(|_| format!("bad size {s:?}"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        other => return Err(format!("unknown size unit {other:?}")),
    };
    Ok((num * mult) as u64)
}

fn main() -> io::Result<()> {
    let args = Args::parse();
    let w = Workload {
        size: args.size,
        format: match args.format {
            FormatArg::Pcap => Format::Pcap,
            FormatArg::Pcapng => Format::Pcapng,
        },
        seed: args.seed,
        sessions: args.sessions,
    };
    let out = BufWriter::with_capacity(1 << 20, File::create(&args.out)?);
    let mut expect = match &args.expect {
        Some(p) => Some(BufWriter::new(File::create(p)?)),
        None => None,
    };
    let totals = write_capture(&w, out, expect.as_mut().map(|e| e as &mut dyn Write))?;
    if let Some(mut e) = expect {
        e.flush()?;
    }
    eprintln!(
        "{}: {} bytes, {} frames, {} batches, {} sessions, {} resumes, {} events; verdicts {:?}",
        args.out.display(),
        totals.bytes,
        totals.frames,
        totals.batches,
        totals.sessions,
        totals.resumes,
        totals.events,
        totals.verdicts
    );
    Ok(())
}
