//! The command line itself: sizes with units, limits raised with a warning, completions and
//! the manual page generated from the same definition.

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
