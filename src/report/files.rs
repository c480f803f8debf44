//! Citations into a capture set or a merged run: the file a frame is in, and its number in that
//! file, so that Wireshark opens the right file at the right frame.
//!
//! Input: frame numbers as the pipeline carries them (a set's: [`crate::record::member_frame`];
//! a merged run's: its merged capture's), and how to name them ([`FrameNames`]), given for the
//! writing of one record.
//! Output: `(file, frame)` for the report; a lone file's frames have no file and stay as they
//! are, so the report of one file is unchanged.
//! Invariants: the names are installed only for the length of one call ([`with_files`]) on the
//! writing thread, so records of different inputs written on one thread never mix them.

use std::cell::RefCell;
use std::sync::Arc;

use crate::record::member_frame;

/// How the frames of an input made of several files are named.
pub trait FrameNames: Send + Sync {
    /// The file holding `frame` and the frame's number there; `None` when it cannot be told.
    fn locate(&self, frame: u64) -> Option<(String, u64)>;
    /// Every file, in the order they were read (or given).
    fn files(&self) -> Vec<String>;
}

/// A capture set's files in reading order: frames carry their member's number.
pub struct SetFiles(pub Vec<String>);

impl FrameNames for SetFiles {
    fn locate(&self, frame: u64) -> Option<(String, u64)> {
        let (member, local) = member_frame(frame);
        let name = self.0.get(usize::try_from(member).ok()?.checked_sub(1)?)?;
        Some((name.clone(), local))
    }
    fn files(&self) -> Vec<String> {
        self.0.clone()
    }
}

thread_local! {
    static FILES: RefCell<Option<Arc<dyn FrameNames>>> = const { RefCell::new(None) };
}

/// Runs `f` with the names of the input's files (`None`: the input is one file) known to the
/// record writers.
pub fn with_files<R>(files: Option<&Arc<dyn FrameNames>>, f: impl FnOnce() -> R) -> R {
    let before = FILES.with(|c| c.replace(files.cloned()));
    let r = f();
    FILES.with(|c| *c.borrow_mut() = before);
    r
}

/// The file a frame is in (`None` for a lone file) and the frame's number in that file.
pub fn locate(frame: u64) -> (Option<String>, u64) {
    let named = FILES.with(|c| c.borrow().as_ref().map(|n| n.locate(frame)));
    match named {
        Some(Some((file, local))) => (Some(file), local),
        Some(None) => (None, frame),
        None => match member_frame(frame) {
            (0, _) => (None, frame),
            (member, local) => (Some(format!("file {member}")), local),
        },
    }
}

/// True when the frame is in an input made of several files.
pub fn in_set(frame: u64) -> bool {
    locate(frame).0.is_some()
}

/// "frame N" or "frame N of FILE".
pub fn frame_text(frame: u64) -> String {
    match locate(frame) {
        (None, f) => format!("frame {f}"),
        (Some(file), f) => format!("frame {f} of {file}"),
    }
}

/// A finding's sentence with its frame numbers ("frame N", "frames N and M") said as
/// [`frame_text`] says them; unchanged (and not copied) for a lone file.
pub fn detail_text(detail: &str) -> std::borrow::Cow<'_, str> {
    static FRAMES: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    if FILES.with(|c| c.borrow().is_none()) {
        return detail.into();
    }
    let re = FRAMES.get_or_init(|| {
        regex::Regex::new(r"(?-u:\b)frames? ([0-9]+)(?: and ([0-9]+))?").expect("a valid pattern")
    });
    re.replace_all(detail, |c: &regex::Captures<'_>| {
        let one = |m: Option<regex::Match<'_>>| {
            m.and_then(|m| m.as_str().parse::<u64>().ok())
                .map(frame_text)
        };
        match (one(c.get(1)), one(c.get(2))) {
            (Some(a), Some(b)) => format!("{a} and {b}"),
            (Some(a), None) => a,
            _ => c[0].to_string(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::MEMBER_SHIFT;

    #[test]
    fn a_lone_file_keeps_its_frames_and_a_set_names_the_file() {
        assert_eq!(locate(17), (None, 17));
        let files: Arc<dyn FrameNames> =
            Arc::new(SetFiles(vec!["a.pcap".to_string(), "b.pcap".to_string()]));
        let second = (2 << MEMBER_SHIFT) | 5;
        with_files(Some(&files), || {
            assert_eq!(locate(second), (Some("b.pcap".into()), 5));
            assert_eq!(locate((1 << MEMBER_SHIFT) | 1), (Some("a.pcap".into()), 1));
            assert_eq!(frame_text(second), "frame 5 of b.pcap");
            assert_eq!(frame_text(9), "frame 9");
            assert_eq!(
                detail_text(&format!(
                    "frames {second} and 9; id 1099511627781 at frame {second}"
                )),
                "frame 5 of b.pcap and frame 9; id 1099511627781 at frame 5 of b.pcap"
            );
        });
        // A lone file's sentences are left as they are.
        assert_eq!(detail_text("frame 2199023255557"), "frame 2199023255557");
        // Outside the call the names are gone, and the number still says which file.
        assert_eq!(locate(second), (Some("file 2".into()), 5));
    }
}
