//! Writes a large synthetic capture of interleaved MCP sessions, for benchmarks.
//!
//! Usage: `cargo run --release --example gen-capture -- --size 1GiB --format pcap|pcapng
//! --out FILE [--seed N] [--sessions N] [--mix M] [--expect FILE] [--http2] [--tls 1.3|1.2
//! [--tls-suite aes128|aes256|chacha20] --keylog FILE] [--keylog FILE] [--mss N]`.
//!
//! What the capture holds is described in `workload.rs`; `--mix` picks the traffic mix
//! (`default`, `tiny`, `large`, `sessions`, `storm`, `keep-alive`, `long`, `loaded`; see
//! [`Mix`]). `--expect` writes the expected findings as JSON Lines (the `.expect.jsonl` format
//! of the fixtures, derived from the scenario definition, not from any analysis); a summary
//! goes to standard error. The same arguments always give the same bytes.
//!
//! The wire, the same traffic otherwise (same sessions, events and expected findings, so
//! benchmark rows compare like with like):
//! - `--http2`: every connection speaks HTTP/2, each exchange on a stream of its own; in
//!   cleartext with prior knowledge (h2c), or with `--tls` by ALPN `h2`.
//! - `--tls 1.3`: TLS 1.3 with `--tls-suite` (`aes128`: TLS_AES_128_GCM_SHA256, the
//!   default; `aes256`: TLS_AES_256_GCM_SHA384; `chacha20`: TLS_CHACHA20_POLY1305_SHA256).
//!   `--tls 1.2`: TLS 1.2 ECDHE-RSA-AES128-GCM-SHA256 (`--tls-suite` does not apply). The
//!   secrets derive from `--seed`; `--keylog FILE` is required with `--tls` and receives the
//!   NSS key log lines (`--tls-keylog FILE` of the analyzer reads them).
//! - `--keylog FILE` alone writes an empty key log (cleartext has no secrets), so scripts can
//!   pass it on every row.

mod workload;

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use clap::{Parser, ValueEnum};

use mcp_resume_audit_synth::{HttpVersion, TlsSpec, TlsSuite, Wire};
use workload::{Format, Mix, Workload, write_capture};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum FormatArg {
    Pcap,
    Pcapng,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum TlsArg {
    #[value(name = "1.3")]
    V13,
    #[value(name = "1.2")]
    V12,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum MixArg {
    Default,
    Tiny,
    Large,
    Sessions,
    Storm,
    KeepAlive,
    Long,
    Loaded,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum SuiteArg {
    Aes128,
    Aes256,
    Chacha20,
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
    /// The traffic mix (see workload.rs).
    #[arg(long, value_enum, default_value = "default")]
    mix: MixArg,
    /// Also write the expected findings (JSON Lines) to this file.
    #[arg(long)]
    expect: Option<PathBuf>,
    /// Every connection speaks HTTP/2 (h2c, or ALPN h2 under --tls).
    #[arg(long)]
    http2: bool,
    /// Every connection in TLS of this version; needs --keylog.
    #[arg(long, value_enum, requires = "keylog")]
    tls: Option<TlsArg>,
    /// The TLS 1.3 cipher suite.
    #[arg(long, value_enum, default_value = "aes128")]
    tls_suite: SuiteArg,
    /// Write the TLS secrets here (NSS key log format).
    #[arg(long)]
    keylog: Option<PathBuf>,
    /// Largest TCP payload per packet [default: 1460]; up to 65,000 for the packets of a
    /// loopback capture or of a host that coalesces what it receives (GRO).
    #[arg(long, value_parser = clap::value_parser!(u16).range(8..=65_000))]
    mss: Option<u16>,
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
        mix: match args.mix {
            MixArg::Default => Mix::Default,
            MixArg::Tiny => Mix::Tiny,
            MixArg::Large => Mix::Large,
            MixArg::Sessions => Mix::Sessions,
            MixArg::Storm => Mix::Storm,
            MixArg::KeepAlive => Mix::KeepAlive,
            MixArg::Long => Mix::Long,
            MixArg::Loaded => Mix::Loaded,
        },
        mss: args.mss,
        wire: Wire {
            http: if args.http2 {
                HttpVersion::Http2
            } else {
                HttpVersion::Http1
            },
            tls: args.tls.map(|v| TlsSpec {
                suite: match (v, args.tls_suite) {
                    (TlsArg::V12, _) => TlsSuite::Tls12EcdheRsaAes128Gcm,
                    (TlsArg::V13, SuiteArg::Aes128) => TlsSuite::Tls13Aes128Gcm,
                    (TlsArg::V13, SuiteArg::Aes256) => TlsSuite::Tls13Aes256Gcm,
                    (TlsArg::V13, SuiteArg::Chacha20) => TlsSuite::Tls13ChaCha20Poly1305,
                },
                seed: args.seed,
            }),
        },
    };
    let out = BufWriter::with_capacity(1 << 20, File::create(&args.out)?);
    let mut expect = match &args.expect {
        Some(p) => Some(BufWriter::new(File::create(p)?)),
        None => None,
    };
    let mut key_log: Box<dyn Write> = match &args.keylog {
        Some(p) => Box::new(BufWriter::new(File::create(p)?)),
        None => Box::new(io::sink()),
    };
    let totals = write_capture(
        &w,
        out,
        &mut key_log,
        expect.as_mut().map(|e| e as &mut dyn Write),
    )?;
    key_log.flush()?;
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
