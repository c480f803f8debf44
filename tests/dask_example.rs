//! The Dask example (examples/dask/audit_fleet.py) against the single run: captures mapped in
//! parallel on a LocalCluster (loopback only), facts grouped by session id by Dask, reduced by
//! the binary, and the report compared byte for byte with the single run's.
//!
//! Runs when a Python with `dask[distributed]` is found: `$DASK_PYTHON`, or the virtual
//! environment `.ci/run` makes in `target/dask-venv`; otherwise it says so and passes.

use std::path::{Path, PathBuf};
use std::process::Command;

fn dask_python(root: &Path) -> Option<PathBuf> {
    let candidates = std::env::var_os("DASK_PYTHON")
        .map(PathBuf::from)
        .into_iter()
        .chain([root.join("target/dask-venv/bin/python")]);
    for py in candidates {
        let ok = Command::new(&py)
            .args(["-c", "import dask.bag, dask.distributed"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(py);
        }
    }
    None
}

#[test]
fn dask_map_group_reduce_equals_the_single_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let Some(python) = dask_python(root) else {
        eprintln!("skipped: no Python with dask[distributed] (set DASK_PYTHON or run .ci/run)");
        return;
    };
    let mut captures: Vec<String> = vec![
        "fixtures/forensic/cross-session-leak.pcap".into(),
        "fixtures/har/mixed.har".into(),
    ];
    let mut generated: Vec<String> = std::fs::read_dir(root.join("fixtures/gen"))
        .unwrap()
        .flatten()
        .map(|e| format!("fixtures/gen/{}", e.file_name().to_string_lossy()))
        .filter(|p| p.ends_with(".pcap") || p.ends_with(".pcapng"))
        .collect();
    generated.sort();
    captures.extend(generated.into_iter().take(10));
    let work = tempfile::tempdir().unwrap();
    let report = work.path().join("report.jsonl");
    let out = Command::new(python)
        .current_dir(root)
        // Dask's workers spill and lock under its temporary directory: inside `work`, so that
        // it goes with the test rather than staying in the system's.
        .env("DASK_TEMPORARY_DIRECTORY", work.path().join("dask"))
        .arg("examples/dask/audit_fleet.py")
        .arg("--bin")
        .arg(env!("CARGO_BIN_EXE_mcp-resume-audit"))
        .arg("--workdir")
        .arg(work.path().join("facts"))
        .arg("--report")
        .arg(&report)
        .args(["--workers", "2", "--check", "--reduce-arg=--sessions"])
        .args(&captures)
        .output()
        .expect("run the example");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("check: identical to the single run"),
        "exit {:?}: {err}",
        out.status.code()
    );
    assert_ne!(out.status.code(), Some(4));
    // The comparison is of a report with something in it: resumes, a leak, several sessions.
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(text.matches("\"type\":\"resume\"").count() > 5, "{text}");
    assert!(text.contains("\"cross_session_leak\""));
    let groups: usize = err
        .split("groups: ")
        .nth(1)
        .and_then(|s| s.split(';').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(
        groups > captures.len(),
        "facts were grouped by session: {err}"
    );
    // Every facts file was grouped by Dask: one group file per (capture, session).
    let files = std::fs::read_dir(work.path().join("facts"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("group-"))
        .count();
    assert_eq!(files, groups);
}
