//! The command line itself: sizes with units, limits raised with a warning, completions and
//! the manual page generated from the same definition, the progress bar on a terminal.

use std::path::Path;
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mcp-resume-audit"))
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
        .args(args)
        .output()
        .expect("run the binary")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const FIXTURE: &str = "fixtures/gen/verdict-correct.pcap";

#[test]
fn sizes_take_units_and_give_the_same_report() {
    let plain = run(&[
        "-q",
        "--max-out-of-order",
        "4194304",
        "--max-header-bytes",
        "65536",
        "--session-memory",
        "32",
        FIXTURE,
    ]);
    let units = run(&[
        "-q",
        "--max-out-of-order",
        "4MiB",
        "--max-header-bytes",
        "64KiB",
        "--session-memory",
        "32MiB",
        FIXTURE,
    ]);
    assert_eq!(plain.status.code(), Some(0), "{}", text(&plain.stderr));
    assert_eq!(units.status.code(), Some(0), "{}", text(&units.stderr));
    assert_eq!(plain.stdout, units.stdout);
    assert!(units.stderr.is_empty(), "{}", text(&units.stderr));
}

#[test]
fn a_size_that_is_not_one_is_refused_by_name() {
    for (flag, value) in [
        ("--max-out-of-order", "4 parsecs"),
        ("--max-header-bytes", "64XB"),
        ("--session-memory", "lots"),
    ] {
        let out = run(&["-q", flag, value, FIXTURE]);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}");
        let err = text(&out.stderr);
        assert!(err.contains(flag) && err.contains(value), "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn a_limit_below_the_least_is_raised_and_said() {
    let out = run(&[
        "-q",
        "--max-header-bytes",
        "100",
        "--max-sse-field",
        "1",
        "--max-connections",
        "0",
        FIXTURE,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    for want in [
        "warning: --max-header-bytes 100 is below the least accepted; 256 is used",
        "warning: --max-sse-field 1 is below the least accepted; 16 is used",
        "warning: --max-connections 0 is below the least accepted; 1 is used",
    ] {
        assert!(err.contains(want), "{err}");
    }
    // A limit at the least is no news.
    let out = run(&["-q", "--max-header-bytes", "256", FIXTURE]);
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
}

#[test]
fn completions_and_the_manual_come_from_the_flags() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = run(&["--completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = text(&out.stdout);
        assert!(script.contains("max-out-of-order"), "{shell}: {script}");
        assert!(script.contains("tls-keylog"), "{shell}");
    }
    let out = run(&["--man"]);
    assert_eq!(out.status.code(), Some(0));
    let man = text(&out.stdout);
    assert!(man.contains(".TH mcp-resume-audit 1"), "{man}");
    assert!(man.contains("max\\-out\\-of\\-order"), "{man}");
    // Either stands alone: with an input it is refused.
    assert_eq!(run(&["--man", FIXTURE]).status.code(), Some(2));
}

/// Reads a named pipe to its end on a thread of its own; `None` if nothing opened it for
/// writing within the time given (the run replaced the pipe instead of writing into it).
fn read_fifo(path: &Path) -> std::sync::mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        if let Ok(bytes) = std::fs::read(&path) {
            let _ = tx.send(bytes);
        }
    });
    rx
}

#[test]
fn named_pipes_and_devices_are_written_into_never_replaced() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().expect("a temporary folder");
    let pipe = |name: &str| {
        let p = dir.path().join(name);
        let made = Command::new("mkfifo").arg(&p).status().expect("mkfifo");
        assert!(made.success());
        p
    };
    let (report, html, facts) = (pipe("report"), pipe("page"), pipe("facts"));
    let wanted = run(&["-q", FIXTURE]);
    assert!(!wanted.stdout.is_empty());

    let (report_rx, html_rx) = (read_fifo(&report), read_fifo(&html));
    let out = run(&[
        "-q",
        "-o",
        report.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
        FIXTURE,
    ]);
    assert_eq!(
        out.status.code(),
        wanted.status.code(),
        "{}",
        text(&out.stderr)
    );
    let wait = std::time::Duration::from_secs(60);
    assert_eq!(
        report_rx
            .recv_timeout(wait)
            .expect("the report in the pipe"),
        wanted.stdout
    );
    let page = html_rx.recv_timeout(wait).expect("the page in the pipe");
    assert!(text(&page).contains("</html>"));

    let facts_rx = read_fifo(&facts);
    let out = run(&["-q", "--emit-facts", facts.to_str().unwrap(), FIXTURE]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !facts_rx
            .recv_timeout(wait)
            .expect("the facts in the pipe")
            .is_empty()
    );

    for p in [&report, &html, &facts] {
        assert!(
            std::fs::metadata(p).unwrap().file_type().is_fifo(),
            "{}",
            p.display()
        );
    }
    // Nothing else was left beside them (no temporary file).
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);

    let null = run(&["-q", "-o", "/dev/null", FIXTURE]);
    assert_eq!(null.status.code(), wanted.status.code());
    let null_type = std::fs::metadata("/dev/null").unwrap().file_type();
    assert!(null_type.is_char_device());
}

/// A file of 65 MiB of zeros in `dir`, past the size under which no progress bar is drawn, and
/// not a capture; sparse, so nothing is written to the disk.
fn sparse_non_capture(dir: &Path) -> std::path::PathBuf {
    let big = dir.join("zeros.pcap");
    std::fs::File::create(&big)
        .and_then(|f| f.set_len(65 << 20))
        .expect("a sparse file");
    big
}

/// Runs the analyzer with `args` on a terminal (`script`, from util-linux) and gives what the
/// terminal showed, ending with `rc=` and the exit status. The run is killed after two
/// minutes, so one that stalls fails its test rather than hanging it.
fn on_a_terminal(args: &[&Path]) -> String {
    let bin = env!("CARGO_BIN_EXE_mcp-resume-audit");
    let args: Vec<String> = args.iter().map(|a| format!("'{}'", a.display())).collect();
    let command = format!(
        "timeout -s KILL 120 '{bin}' {}; echo \"rc=$?\"",
        args.join(" ")
    );
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script (util-linux) runs the analyzer on a terminal");
    text(&out.stdout)
}

/// With standard error on a terminal, the progress bar is drawn by the threads that read the
/// inputs: several inputs read at once must neither wait on one another for it nor on the
/// messages' stream.
#[test]
fn the_progress_bar_over_several_inputs_read_at_once_lets_the_run_finish() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let big = sparse_non_capture(dir.path());
    let (report, wanted) = (dir.path().join("tty.jsonl"), dir.path().join("q.jsonl"));
    let quiet = run(&[
        "-q",
        "-j2",
        big.to_str().unwrap(),
        FIXTURE,
        "-o",
        wanted.to_str().unwrap(),
    ]);
    assert_eq!(quiet.status.code(), Some(2), "{}", text(&quiet.stderr));
    let shown = on_a_terminal(&[
        Path::new("-j2"),
        &big,
        Path::new(FIXTURE),
        Path::new("-o"),
        &report,
    ]);
    // The bar was drawn (its total), the unreadable input named, and the run ended as the
    // quiet one did, with the same report.
    assert!(shown.contains("65.00 MiB"), "{shown}");
    assert!(
        shown.contains("zeros.pcap: offset 0: not a capture"),
        "{shown}"
    );
    assert!(shown.contains("rc=2"), "{shown}");
    assert_eq!(
        std::fs::read(&report).unwrap(),
        std::fs::read(&wanted).unwrap()
    );
}

/// Messages written while inputs are still being read (`--emit-facts` says each input's as it
/// ends) put the progress bar aside first: neither is drawn over the other.
#[test]
fn messages_during_the_run_do_not_share_the_progress_bar_line() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let big = sparse_non_capture(dir.path());
    // The fixture first: the bar is drawn when it is read, before the second input's error.
    let facts = dir.path().join("facts");
    let shown = on_a_terminal(&[Path::new("--emit-facts"), &facts, Path::new(FIXTURE), &big]);
    assert!(shown.contains("65.00 MiB"), "{shown}");
    assert!(shown.contains("rc=2"), "{shown}");
    let error = shown
        .split(['\r', '\n'])
        .find(|line| line.contains("zeros.pcap: offset 0: not a capture"))
        .expect("the unreadable input named");
    assert!(!error.contains("MiB"), "{error:?}");
}

/// Whether this process ignores `number`, as a run it starts does too (`SigIgn` of
/// `/proc/self/status`): a shell ignores SIGINT in the jobs it runs in the background, `nohup`
/// ignores SIGHUP.
fn ignored_here(number: u32) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|mask| mask >> (number - 1) & 1 == 1)
}

/// Starts a run whose report replaces `target` (written first, with [`BEFORE`]) and that waits
/// on standard input, never written, so that it is mid-run whatever the machine; `wrapper`
/// runs it (`nohup`). Returns once its temporary report is beside the target.
fn run_waiting(dir: &Path, target: &Path, wrapper: Option<&str>) -> std::process::Child {
    std::fs::write(target, BEFORE).unwrap();
    let bin = env!("CARGO_BIN_EXE_mcp-resume-audit");
    let mut command = match wrapper {
        Some(w) => {
            let mut c = Command::new(w);
            c.arg(bin);
            c
        }
        None => Command::new(bin),
    };
    let child = command
        .args(["-q", "-o", target.to_str().unwrap(), "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run the binary");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::read_dir(dir).unwrap().count() < 2 {
        assert!(std::time::Instant::now() < deadline, "no temporary report");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child
}

const BEFORE: &[u8] = b"the report before\n";

fn send(signal: &str, child: &std::process::Child) {
    let sent = Command::new("kill")
        .args([format!("-{signal}"), child.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
}

/// A run stopped by a signal while its report is being written leaves the target as it was and
/// nothing beside it (no temporary file), and ends as the signal ends a process. A signal this
/// test's process ignores (and so the run, from it) is left ignored: the run goes on.
#[test]
fn a_run_stopped_by_a_signal_leaves_nothing_beside_its_report() {
    use std::os::unix::process::ExitStatusExt;
    for (signal, number) in [("TERM", 15), ("INT", 2), ("HUP", 1)] {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let target = dir.path().join("report.jsonl");
        let mut child = run_waiting(dir.path(), &target, None);
        // Held open while the run is waited for (`wait` would close it: an end of input).
        let _input = child.stdin.take();
        send(signal, &child);
        if ignored_here(number as u32) {
            std::thread::sleep(std::time::Duration::from_millis(300));
            assert!(child.try_wait().unwrap().is_none(), "SIG{signal} ignored");
            child.kill().unwrap();
            child.wait().unwrap();
            continue;
        }
        let status = child.wait().expect("the run ends");
        assert_eq!(status.signal(), Some(number), "SIG{signal}: {status:?}");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["report.jsonl"], "SIG{signal}");
        assert!(
            std::fs::read(&target).unwrap() == BEFORE,
            "SIG{signal}: the target changed"
        );
    }
}

/// Under `nohup` a hang-up does not stop the run: the signal it ignores stays ignored.
#[test]
fn a_run_under_nohup_outlives_a_hang_up() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let target = dir.path().join("report.jsonl");
    let mut child = run_waiting(dir.path(), &target, Some("nohup"));
    let input = child.stdin.take();
    send("HUP", &child);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "stopped by SIGHUP");
    // Its input ends, empty (not a capture): the run finishes as such a run does, its report
    // in place of the old one and nothing left beside it.
    drop(input);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(2), "{status:?}");
    assert_ne!(std::fs::read(&target).unwrap(), BEFORE);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}
