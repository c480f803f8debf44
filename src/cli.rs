//! The command-line program: arguments (clap), the progress bar, where the report goes, and
//! the exit status. Everything else is the library's; it takes no terminal types.

use std::io::{BufWriter, IsTerminal, Write};

/// Bytes of report gathered before each write: a reconnect storm's report runs to hundreds of
/// megabytes, and standard output, line-buffered beneath, would otherwise take two system
/// calls per 8 KiB.
const REPORT_BUFFER: usize = 256 << 10;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use mcp_resume_audit::{
    self as driver, AuditOptions, DEFAULT_SESSION_MEMORY, HumanReport, IdPattern, Limits, Options,
    Progress, ReportFile, Retention,
};

/// Audits MCP Streamable HTTP stream resumption in packet captures.
///
/// For every request that resumes an event stream (it carries Last-Event-ID), tells whether
/// the server continued at the next event (correct), silently skipped events (gap_skipped) or
/// silently sent them again (replayed), and points at the frames that prove it.
///
/// Beyond the first id, the whole session is used: the shape of structured ids, events
/// delivered twice, the client's Last-Event-ID against what it was sent, ids leaked between
/// sessions, and what a bad resume broke downstream (see docs/findings.md).
///
/// Exit status, the first that applies: 1 some verdict other than correct, or an error-level
/// finding; 2 an input could not be read, wholly or in part; 3 traffic that may carry MCP was
/// not read (TLS, HTTP/2, packets cut by the snap length); 0 all read, every resume correct.
#[derive(Parser, Debug)]
#[command(name = "mcp-resume-audit", version, about, long_about)]
struct Cli {
    /// Captures (pcap, pcapng) or HAR exports (.har, zlib .zhar), recognized by content, also
    /// compressed (gzip, zstd, lz4, xz); directories (walked recursively); `-` reads standard
    /// input. The files of a ring buffer (dumpcap's or tcpdump's names) are read as one capture.
    #[arg(required = true, value_name = "INPUT")]
    inputs: Vec<PathBuf>,

    /// Read every capture file given (or found in the directories given) as one capture of one
    /// capture point, in the order of their first packets: a rotated set whose names do not
    /// show it.
    #[arg(long)]
    merge: bool,

    /// Every capture input (file, set or directory) is a capture point of one incident — a
    /// client, a proxy, backends: their packets are merged by time and audited together, so a
    /// session seen at several points is one session; each citation names its file.
    #[arg(long)]
    fleet: bool,

    /// The map step alone: write the facts of every input (docs/facts.md) to FILE (`-`:
    /// standard output) instead of a report, for `--reduce` to finish, on this machine or
    /// another (examples/dask/). Options of the session stage (`--sessions`, `--id-pattern`,
    /// `--session-memory`, `--html`, `--format`) belong to the reduce.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["reduce", "output", "html"])]
    emit_facts: Option<PathBuf>,

    /// The reduce step alone: the inputs are facts files written by `--emit-facts` (their
    /// records in any grouping and order); the report is the one the single run on the
    /// captures writes.
    #[arg(long)]
    reduce: bool,

    /// Write the JSON Lines report to FILE instead of standard output (`-`: standard output).
    /// A regular FILE is replaced only when the run is over; a device or a named pipe
    /// (`/dev/null`, `/dev/stdout`) is written into. An input is never overwritten.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,

    /// Threads [default: the number of CPUs].
    #[arg(short = 'j', long = "threads", value_name = "N")]
    threads: Option<usize>,

    /// Connections tracked at once per capture; beyond it, the least recently active is evicted.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_connections)]
    max_connections: usize,

    /// Out-of-order bytes buffered per connection direction before the hole is a gap (a
    /// number of bytes, or with a unit: 512KiB, 4MiB, 1GB).
    #[arg(long, value_name = "SIZE", default_value_t = Size::of(Limits::default().max_out_of_order_bytes))]
    max_out_of_order: Size,

    /// Longest HTTP message head accepted (bytes, or with a unit: 64KiB).
    #[arg(long, value_name = "SIZE", default_value_t = Size::of(Limits::default().max_header_bytes))]
    max_header_bytes: Size,

    /// Longest SSE id/event/retry value kept (bytes, or with a unit: 4KiB).
    #[arg(long, value_name = "SIZE", default_value_t = Size::of(Limits::default().max_sse_field_bytes))]
    max_sse_field: Size,

    /// How event ids are built, when you know: a regular expression matching a whole id, with
    /// a named group `seq` (the counter) and optionally `stream`, e.g.
    /// '(?P<stream>[^_]+)_(?P<seq>\d+)'. Resumes on ids it matches are decided on `seq`.
    #[arg(long, value_name = "REGEX")]
    id_pattern: Option<String>,

    /// Add one {"type":"session"} record per session: its exchanges in capture order, streams
    /// with first and last ids, resumes and findings.
    #[arg(long)]
    sessions: bool,

    /// `json`: JSON Lines (and, when standard error is a terminal, a plain-text account
    /// there); `text`: the plain-text account instead of JSON Lines.
    #[arg(long, value_enum, default_value_t = Format::Json)]
    format: Format,

    /// Memory for the exchanges of sessions not yet audited: a number of MiB, or a size with a
    /// unit (512KiB, 1GiB). Past it, the least recently active sessions are audited early
    /// (counted in `sessions_retired_early`).
    #[arg(long, value_name = "SIZE", default_value_t = SessionMemory(Size::of(DEFAULT_SESSION_MEMORY)))]
    session_memory: SessionMemory,

    /// TLS secrets in NSS key log format (SSLKEYLOGFILE), to decrypt HTTPS; repeatable. Keys
    /// embedded in a pcapng (Decryption Secrets Blocks) are read without it. The SSLKEYLOGFILE
    /// environment variable is not read: name the file here.
    #[arg(long = "tls-keylog", value_name = "FILE")]
    tls_keylog: Vec<PathBuf>,

    /// A server that carries no MCP traffic (IP:PORT, [IPv6]:PORT, IP or :PORT); repeatable.
    /// Its connections that cannot be read are counted as ignored, and do not make the exit
    /// status 3.
    #[arg(long = "ignore-endpoint", value_name = "ADDR")]
    ignore_endpoint: Vec<driver::EndpointFilter>,

    /// Also write the report as one self-contained HTML page to FILE: the summary, and a
    /// timeline per session drawn from the same records as the JSON Lines.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,

    /// No progress bar (one is shown on a terminal for inputs over 64 MiB), and no plain-text
    /// account on standard error beside the JSON Lines.
    #[arg(short, long)]
    quiet: bool,

    /// Print the completion script for SHELL to standard output and exit (the README says
    /// where to put it).
    #[arg(long, value_name = "SHELL", exclusive = true)]
    completions: Option<clap_complete::Shell>,

    /// Print the manual page (roff, section 1) to standard output and exit.
    #[arg(long, exclusive = true)]
    man: bool,
}

/// A size in bytes on the command line: a number of bytes, or one with a unit read by
/// parse-size (`64KiB`, `4MiB` and `1GiB` are powers of 1024; `64KB`, `4MB` and `1GB` powers of
/// 1000).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Size(u64);

impl Size {
    fn of(bytes: usize) -> Size {
        Size(bytes as u64)
    }

    /// As a `usize` (saturating: a limit past the address space is no limit).
    fn bytes(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl std::str::FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Size, String> {
        parse_size::parse_size(s.trim())
            .map(Size)
            .map_err(|e| format!("{e} (give bytes, or a size with a unit: 64KiB, 4MiB, 1GB)"))
    }
}

impl std::fmt::Display for Size {
    /// In the largest binary unit that divides it, as the defaults are given: `4MiB`, `64KiB`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (unit, scale) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
            if self.0 >= scale && self.0.is_multiple_of(scale) {
                return write!(f, "{}{unit}", self.0 / scale);
            }
        }
        write!(f, "{}", self.0)
    }
}

/// `--session-memory`: a bare number is MiB (as it always was), anything else a [`Size`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SessionMemory(Size);

impl std::str::FromStr for SessionMemory {
    type Err = String;
    fn from_str(s: &str) -> Result<SessionMemory, String> {
        let s = s.trim();
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            let mib: u64 = s.parse().map_err(|e| format!("{e}"))?;
            return Ok(SessionMemory(Size(mib.saturating_mul(1 << 20))));
        }
        s.parse().map(SessionMemory)
    }
}

impl std::fmt::Display for SessionMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// `value` raised to `least` when below it, saying so on standard error.
fn at_least(flag: &str, value: usize, least: usize, shown: impl std::fmt::Display) -> usize {
    if value < least {
        eprintln!("warning: {flag} {shown} is below the least accepted; {least} is used");
        least
    } else {
        value
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Json,
    Text,
}

/// Inputs smaller than this are done before a bar would tell anything.
const PROGRESS_MIN_BYTES: u64 = 64 << 20;

/// A bar over the total size of the inputs, when standard error is a terminal, the sizes are
/// known (no standard input) and large enough.
/// The library's progress, drawn as an indicatif bar on standard error.
struct Bar(ProgressBar);

impl Progress for Bar {
    fn advance(&self, bytes: u64) {
        self.0.inc(bytes);
    }
    fn finish(&self) {
        self.0.finish_and_clear();
    }
    fn aside(&self, write: &mut dyn FnMut()) {
        self.0.suspend(write);
    }
}

fn progress_bar(cli: &Cli) -> Option<std::sync::Arc<dyn Progress>> {
    if cli.quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let mut total: u64 = 0;
    for p in &cli.inputs {
        if p.as_os_str() == "-" {
            return None;
        }
        total = total.saturating_add(std::fs::metadata(p).ok()?.len());
    }
    if total <= PROGRESS_MIN_BYTES {
        return None;
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
    ) {
        bar.set_style(style);
    }
    Some(std::sync::Arc::new(Bar(bar)))
}

/// An output path that names an input (the same file, by device and inode, whatever the
/// spelling) is refused before anything is opened for writing: the evidence is never harmed.
fn refuse_to_overwrite_an_input(
    output: &std::path::Path,
    inputs: &[PathBuf],
) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Ok(out) = std::fs::metadata(output) else {
        return Ok(());
    };
    // Files inside an input directory are inputs too.
    for input in &mcp_resume_audit::files_under(inputs) {
        if let Ok(m) = std::fs::metadata(input)
            && m.dev() == out.dev()
            && m.ino() == out.ino()
        {
            anyhow::bail!(
                "refusing to write the report to {}: it is the input {}",
                output.display(),
                input.display()
            );
        }
    }
    Ok(())
}

pub fn main() -> ExitCode {
    stop_cleanly_on_signals();
    match real_main() {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// On Ctrl-C (SIGINT), SIGTERM or SIGHUP, the temporary files of the reports being written are
/// removed before the process ends as that signal would have ended it: each target stays as
/// it was, and nothing is left beside it. The signals are taken over on the thread that
/// answers them, and only once it runs (this waits for it): without it, they keep their
/// default actions.
fn stop_cleanly_on_signals() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    // One that is ignored stays so: `nohup` ignores SIGHUP, a shell ignores SIGINT for the jobs
    // it runs in the background.
    let taken_over: Vec<i32> = [SIGINT, SIGTERM, SIGHUP]
        .into_iter()
        .filter(|&s| !ignored(s))
        .collect();
    let (ready, taken) = std::sync::mpsc::sync_channel(1);
    let watch = move || {
        let signals = signal_hook::iterator::Signals::new(taken_over);
        let _ = ready.send(());
        let Ok(mut signals) = signals else {
            return;
        };
        if let Some(signal) = signals.forever().next() {
            mcp_resume_audit::ReportFile::remove_unfinished();
            // Ends the process as the signal's default action does (its exit status says
            // which signal); were that to fail, with the shell's status for it.
            let _ = signal_hook::low_level::emulate_default_handler(signal);
            std::process::exit(128 + signal);
        }
    };
    if std::thread::Builder::new()
        .name("signals".into())
        .spawn(watch)
        .is_ok()
    {
        let _ = taken.recv();
    }
}

/// Whether `signal` is ignored (its disposition `SIG_IGN`), as the process was started.
fn ignored(signal: i32) -> bool {
    // SAFETY: an all-zero `sigaction` is a valid value of that plain C struct; `sigaction` with
    // a null new action changes nothing and only writes the current one into `old`, which
    // points to a live, writable `sigaction` of the right type.
    let old = unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        (libc::sigaction(signal, std::ptr::null(), &mut old) == 0).then_some(old)
    };
    old.is_some_and(|o| o.sa_sigaction == libc::SIG_IGN)
}

/// `--emit-facts`: the map step, its facts written to `path` (replaced only at the end) or to
/// standard output.
fn emit_facts(
    path: &std::path::Path,
    cli: &Cli,
    opts: &Options,
    mut err: &mut dyn Write,
) -> anyhow::Result<i32> {
    if path.as_os_str() == "-" {
        let mut out = BufWriter::new(std::io::stdout());
        let o = driver::map_run(&cli.inputs, opts, &mut out, &mut err)?;
        out.flush()?;
        stale_keys_warning(opts, &mut err)?;
        return Ok(o.exit_code());
    }
    refuse_to_overwrite_an_input(path, &cli.inputs)?;
    let mut target = ReportFile::create(path)?;
    let mut out = BufWriter::new(target.file_mut());
    let o = driver::map_run(&cli.inputs, opts, &mut out, &mut err)?;
    out.into_inner().map_err(|e| e.into_error())?;
    target.finish()?;
    stale_keys_warning(opts, &mut err)?;
    Ok(o.exit_code())
}

fn real_main() -> anyhow::Result<i32> {
    let cli = Cli::parse();
    if let Some(shell) = cli.completions {
        let mut cmd = Cli::command();
        clap_complete::generate(shell, &mut cmd, "mcp-resume-audit", &mut std::io::stdout());
        return Ok(0);
    }
    if cli.man {
        clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout())?;
        return Ok(0);
    }
    let threads = cli
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    crate::allocator_for_threads(threads);
    let id_pattern = cli.id_pattern.as_deref().map(IdPattern::new).transpose()?;
    let human = match cli.format {
        Format::Text => HumanReport::Instead,
        Format::Json if std::io::stderr().is_terminal() && !cli.quiet => HumanReport::Messages,
        Format::Json => HumanReport::Off,
    };
    let (tls, key_messages) = driver::TlsKeys::from_files(&cli.tls_keylog);
    for (is_error, text) in &key_messages {
        eprintln!("{}: {text}", if *is_error { "error" } else { "warning" });
    }
    if key_messages.iter().any(|(e, _)| *e) {
        return Ok(2);
    }
    let opts = Options {
        tls,
        ignore: cli.ignore_endpoint.clone(),
        threads,
        limits: Limits {
            max_out_of_order_bytes: cli.max_out_of_order.bytes(),
            max_connections: at_least(
                "--max-connections",
                cli.max_connections,
                1,
                cli.max_connections,
            ),
            max_header_bytes: at_least(
                "--max-header-bytes",
                cli.max_header_bytes.bytes(),
                256,
                cli.max_header_bytes,
            ),
            max_sse_field_bytes: at_least(
                "--max-sse-field",
                cli.max_sse_field.bytes(),
                16,
                cli.max_sse_field,
            ),
            ..Limits::default()
        },
        forensic: AuditOptions {
            id_pattern,
            views: cli.sessions,
            ..AuditOptions::default()
        },
        retention: Retention {
            memory_bytes: cli.session_memory.0.bytes(),
        },
        human,
        progress: progress_bar(&cli),
        html: cli.html.clone(),
        merge: cli.merge,
        fleet: cli.fleet,
    };
    // Colour where a terminal shows it, never in a pipe or a file, and never under NO_COLOR
    // (CLICOLOR_FORCE forces it): the library writes styles, these streams keep or drop them.
    // Standard error is taken for each write, never held for the run: the progress bar draws
    // on it from the threads that read the inputs, which would wait for a held lock forever.
    let mut err = anstream::AutoStream::auto(std::io::stderr());
    if let Some(path) = cli.emit_facts.as_deref() {
        return emit_facts(path, &cli, &opts, &mut err);
    }
    let report = |mut out: &mut dyn Write, mut err: &mut dyn Write| {
        if cli.reduce {
            driver::reduce_run(&cli.inputs, &opts, &mut out, &mut err)
        } else {
            driver::run(&cli.inputs, &opts, &mut out, &mut err)
        }
    };
    let outcome = match cli.output.as_deref().filter(|p| p.as_os_str() != "-") {
        Some(path) => {
            refuse_to_overwrite_an_input(path, &cli.inputs)?;
            // A regular file gets the report under a temporary name beside it, renamed at the
            // end: a run that fails or is stopped leaves the target as it was. A device or a
            // pipe (`-o /dev/null`) is written in place.
            let mut target = ReportFile::create(path)?;
            // Only the text account carries styles: JSON Lines skip the stripping pass.
            let file = target.file_mut();
            let inner: Box<dyn Write + '_> = if opts.human == HumanReport::Instead {
                Box::new(anstream::StripStream::new(file))
            } else {
                Box::new(file)
            };
            let mut out = BufWriter::with_capacity(REPORT_BUFFER, inner);
            let o = report(&mut out, &mut err)?;
            out.into_inner().map_err(|e| e.into_error())?;
            target.finish()?;
            o
        }
        None => {
            let stdout = std::io::stdout();
            let inner: Box<dyn Write> = if opts.human == HumanReport::Instead {
                Box::new(anstream::AutoStream::auto(stdout.lock()))
            } else {
                Box::new(stdout.lock())
            };
            let mut out = BufWriter::with_capacity(REPORT_BUFFER, inner);
            let o = report(&mut out, &mut err);
            match o {
                Ok(o) => o,
                // A closed pipe (`| head`) is not an error worth a message.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(0),
                Err(e) => return Err(e.into()),
            }
        }
    };
    stale_keys_warning(&opts, &mut err)?;
    Ok(outcome.exit_code())
}

/// A key log file read back during the run that no longer said what it said when first read
/// (rewritten or cut): the connections that asked for its secrets were not decrypted.
fn stale_keys_warning(opts: &Options, err: &mut impl Write) -> std::io::Result<()> {
    let n = opts.tls.stale();
    if n > 0 {
        writeln!(
            err,
            "warning: a key log file changed during the run: {n} lookup(s) of a TLS \
             connection's secrets found other bytes where its lines had been, and those \
             connections were not decrypted"
        )?;
    }
    Ok(())
}
