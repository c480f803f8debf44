//! Input: files as users have them → packets (captures) or exchanges (HAR).
//!
//! - [`capture`]: pcap / pcapng records → packets (frame number, time, link type, bytes).
//! - [`har`]: HAR exports → exchanges, which join the pipeline after the application layer
//!   (a HAR entry already is an HTTP exchange).
//! - [`compressed`]: gzip, zstd, lz4 and xz streams, recognized by their bytes, decompressed
//!   as they are read.
//! - [`merge`]: many capture points (hosts) merged by time into one capture stream, with the
//!   map from its frames back to each file's own.
//! - [`set`]: the command line's paths → inputs: directories walked, files of one capture
//!   point (a rotated ring buffer, or `--merge`) gathered into one capture set.

mod body_text;
pub mod capture;
pub mod compressed;
pub mod har;
pub mod merge;
pub(crate) mod nesting;
pub mod set;

/// What the reader tests of this layer share.
#[cfg(test)]
pub(crate) mod testing {
    use std::io::Read;

    /// A reader that gives its bytes in pieces of the given sizes (cycled), to exercise every
    /// refill path of a reader built on it.
    pub(crate) struct Trickle<'a> {
        data: &'a [u8],
        sizes: &'a [usize],
        i: usize,
    }

    impl<'a> Trickle<'a> {
        pub(crate) fn new(data: &'a [u8], sizes: &'a [usize]) -> Self {
            Trickle { data, sizes, i: 0 }
        }
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let want = self.sizes[self.i % self.sizes.len()].max(1);
            self.i += 1;
            let n = want.min(out.len()).min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }
}
