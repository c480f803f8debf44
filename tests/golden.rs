//! The whole report of every committed fixture, byte for byte: standard output (with
//! `--sessions`, so the session views are covered too), standard error and the exit status;
//! a capture with a key log beside it (`<stem>.keys`) is read with it.
//!
//! This is the net under refactoring: moving code must change no report byte. The expected
//! outputs live in `tests/golden/`, one file per fixture. When a change of the report is meant
//! (a new field, a new finding), regenerate them with
//!
//! ```sh
//! GOLDEN_UPDATE=1 cargo test --test golden
//! ```
//!
//! and review the diff (`git diff tests/golden/`) line by line before committing it: an
//! unreviewed golden file proves nothing.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn is_input(p: &Path) -> bool {
    matches!(
        p.extension().and_then(|e| e.to_str()),
        Some("pcap" | "pcapng" | "har" | "zhar")
    )
}

/// `fixtures/a/b.pcap` → `tests/golden/a__b.pcap.out`
fn golden_path(root: &Path, input: &Path) -> PathBuf {
    let rel = input.strip_prefix(root.join("fixtures")).unwrap();
    let name = rel.to_string_lossy().replace(['/', '\\'], "__");
    root.join("tests/golden").join(format!("{name}.out"))
}

fn render(root: &Path, input: &Path) -> String {
    let rel = input.strip_prefix(root).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume-audit"))
        .current_dir(root)
        .args(["--sessions", "-j1", "-q"])
        .args(common::key_log_args(rel))
        .arg(rel)
        .output()
        .expect("run the binary");
    format!(
        "exit: {}\n--- stderr\n{}--- stdout\n{}",
        out.status
            .code()
            .map_or("signal".to_string(), |c| c.to_string()),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    )
}

#[test]
fn every_fixture_report_is_unchanged() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let inputs = common::fixture_files(is_input, |_| true);
    assert!(inputs.len() > 100, "fixtures not found: {}", inputs.len());
    let update = std::env::var_os("GOLDEN_UPDATE").is_some();
    let mut differ = Vec::new();
    for input in &inputs {
        let got = render(root, input);
        let path = golden_path(root, input);
        if update {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if got != want {
            let actual = root
                .join("target/golden-actual")
                .join(path.file_name().unwrap());
            std::fs::create_dir_all(actual.parent().unwrap()).unwrap();
            std::fs::write(&actual, &got).unwrap();
            differ.push(format!("{} (now in {})", input.display(), actual.display()));
        }
    }
    // A golden file whose fixture is gone is stale.
    let known: std::collections::BTreeSet<PathBuf> =
        inputs.iter().map(|i| golden_path(root, i)).collect();
    let stale: Vec<_> = std::fs::read_dir(root.join("tests/golden"))
        .map(|rd| rd.flatten().map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|p| !known.contains(p))
        .collect();
    assert!(
        differ.is_empty() && (update || stale.is_empty()),
        "reports changed for {} fixture(s):\n{}\nstale golden files: {stale:?}\n\
         review with diff, then GOLDEN_UPDATE=1 cargo test --test golden",
        differ.len(),
        differ.join("\n")
    );
}
