//! Where a report file goes: a regular file is replaced only once the report is whole (written
//! beside it under a temporary name, then renamed over it), so that a run that fails or is
//! stopped leaves it as it was; anything else that already exists is written in place.
//!
//! Input: the path the user named (`-o`, `--emit-facts`, `--html`).
//! Output: a file to write and, at the end, the step that puts it in place.
//! Invariants: a path that exists and is not a regular file (`/dev/null`, `/dev/stdout`, a
//! named pipe, a terminal) is opened and written, never renamed over: a rename would put a
//! file where the device or pipe was, and the reader at the other end would get nothing.
//! The temporary files being written are listed, so that a run stopped by a signal removes
//! them ([`ReportFile::remove_unfinished`]) rather than leave them beside the targets.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The temporary files of the reports being written, by path.
static UNFINISHED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// A temporary file's place in [`UNFINISHED`], for as long as it is being written.
pub struct Listed(PathBuf);

impl Listed {
    fn new(path: &Path) -> Self {
        if let Ok(mut list) = UNFINISHED.lock() {
            list.push(path.to_path_buf());
        }
        Listed(path.to_path_buf())
    }
}

impl Drop for Listed {
    fn drop(&mut self) {
        if let Ok(mut list) = UNFINISHED.lock()
            && let Some(at) = list.iter().position(|p| *p == self.0)
        {
            list.swap_remove(at);
        }
    }
}

/// Whether `path` names something that exists and is not a regular file (symbolic links
/// followed): the report is then written into it, not renamed over it.
fn written_in_place(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file())
}

/// A report file being written.
pub enum ReportFile {
    /// Written under a temporary name beside the target, renamed over it by [`Self::finish`].
    Replacing(tempfile::NamedTempFile, PathBuf, Listed),
    /// The target itself: a device, a pipe or a terminal.
    InPlace(File),
}

impl ReportFile {
    /// Opens what the report for `path` is written to. The error names the path.
    pub fn create(path: &Path) -> io::Result<Self> {
        if written_in_place(path) {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| named(e, "cannot open", path))?;
            return Ok(ReportFile::InPlace(file));
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let tmp = tempfile::NamedTempFile::new_in(dir)
            .map_err(|e| named(e, "cannot create a file in", dir))?;
        let listed = Listed::new(tmp.path());
        Ok(ReportFile::Replacing(tmp, path.to_path_buf(), listed))
    }

    /// Removes the temporary files of every report still being written: for a run that is
    /// being stopped, which leaves each target as it was and nothing beside it.
    pub fn remove_unfinished() {
        if let Ok(list) = UNFINISHED.lock() {
            for path in list.iter() {
                let _ = std::fs::remove_file(path);
            }
        }
    }

    /// The file to write the report into.
    pub fn file_mut(&mut self) -> &mut File {
        match self {
            ReportFile::Replacing(tmp, _, _) => tmp.as_file_mut(),
            ReportFile::InPlace(f) => f,
        }
    }

    /// Puts the whole report in place: renames it over the target, or does nothing more for a
    /// target written in place.
    pub fn finish(self) -> io::Result<()> {
        match self {
            // Listed until renamed: a signal in between finds the file under one name or
            // the other, and the rename is not undone.
            ReportFile::Replacing(tmp, path, _listed) => tmp
                .persist(&path)
                .map(drop)
                .map_err(|e| named(e.error, "cannot write", &path)),
            ReportFile::InPlace(_) => Ok(()),
        }
    }
}

fn named(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_regular_file_is_replaced_only_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.jsonl");
        std::fs::write(&path, b"old").unwrap();
        assert!(!written_in_place(&path));
        let mut out = ReportFile::create(&path).unwrap();
        out.file_mut().write_all(b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        out.finish().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        // A path that does not exist yet is created the same way.
        let fresh = dir.path().join("fresh.jsonl");
        assert!(!written_in_place(&fresh));
        let mut out = ReportFile::create(&fresh).unwrap();
        out.file_mut().write_all(b"x").unwrap();
        out.finish().unwrap();
        assert_eq!(std::fs::read(&fresh).unwrap(), b"x");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[test]
    fn a_device_is_written_in_place_and_stays_a_device() {
        use std::os::unix::fs::FileTypeExt;
        let null = Path::new("/dev/null");
        assert!(written_in_place(null));
        let mut out = ReportFile::create(null).unwrap();
        assert!(matches!(out, ReportFile::InPlace(_)));
        out.file_mut().write_all(b"{}\n").unwrap();
        out.finish().unwrap();
        assert!(
            std::fs::metadata(null)
                .unwrap()
                .file_type()
                .is_char_device()
        );
    }

    #[test]
    fn a_directory_is_refused_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let Err(e) = ReportFile::create(dir.path()) else {
            panic!("a directory opened for writing");
        };
        assert!(
            e.to_string().contains(&dir.path().display().to_string()),
            "{e}"
        );
    }
}
