//! What the integration tests share: finding the committed fixtures.

use std::path::{Path, PathBuf};

/// Every file under `fixtures/` (recursively) for which `keep` says yes, sorted; folders for
/// which `enter` says no are not visited.
pub fn fixture_files(keep: impl Fn(&Path) -> bool, enter: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut found = Vec::new();
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                if enter(&p) {
                    dirs.push(p);
                }
            } else if keep(&p) {
                found.push(p);
            }
        }
    }
    found.sort();
    found
}

/// `--tls-keylog <stem>.keys` when the capture has a key log beside it.
#[allow(dead_code)]
pub fn key_log_args(capture: &Path) -> Vec<String> {
    let keys = capture.with_extension("keys");
    if keys.exists() {
        vec!["--tls-keylog".into(), keys.display().to_string()]
    } else {
        Vec::new()
    }
}
