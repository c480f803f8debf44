//! Input: files as users have them → packets (captures) or exchanges (HAR).
//!
//! - [`capture`]: pcap / pcapng records → packets (frame number, time, link type, bytes).
//! - [`har`]: HAR exports → exchanges, which join the pipeline after the application layer
//!   (a HAR entry already is an HTTP exchange).
//! - [`compressed`]: gzip, zstd, lz4 and xz streams, recognized by their bytes, decompressed
//!   as they are read.
//! - [`merge`]: many capture points (hosts) merged by time into one capture, with the map
//!   from its frames back to each file's own.
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

    use super::capture::{DSB, DSB_TLS_KEY_LOG, EPB, IDB, SHB, SPB};

    /// A pcapng file written block by block, in either byte order.
    pub(crate) struct Ng {
        pub(crate) big: bool,
        pub(crate) out: Vec<u8>,
    }

    impl Ng {
        fn w32(&self, v: u32) -> [u8; 4] {
            if self.big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        }
        fn w16(&self, v: u16) -> [u8; 2] {
            if self.big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        }
        pub(crate) fn block(&mut self, kind: u32, body: &[u8]) {
            let mut padded = body.to_vec();
            while !padded.len().is_multiple_of(4) {
                padded.push(0);
            }
            let len = 12 + padded.len() as u32;
            let (k, l) = (self.w32(kind), self.w32(len));
            self.out.extend_from_slice(&k);
            self.out.extend_from_slice(&l);
            self.out.extend_from_slice(&padded);
            self.out.extend_from_slice(&l);
        }
        pub(crate) fn shb(&mut self) {
            let mut b = Vec::new();
            b.extend_from_slice(&self.w32(0x1a2b_3c4d));
            b.extend_from_slice(&self.w16(1));
            b.extend_from_slice(&self.w16(0));
            b.extend_from_slice(&[0xff; 8]);
            self.block(SHB, &b);
        }
        /// An interface of `linktype`; `tsresol` as the option writes it (9: nanoseconds).
        pub(crate) fn idb(&mut self, linktype: u16, tsresol: Option<u8>) {
            let mut b = Vec::new();
            b.extend_from_slice(&self.w16(linktype));
            b.extend_from_slice(&[0, 0]);
            b.extend_from_slice(&self.w32(65535));
            if let Some(r) = tsresol {
                b.extend_from_slice(&self.w16(9));
                b.extend_from_slice(&self.w16(1));
                b.extend_from_slice(&[r, 0, 0, 0]);
                b.extend_from_slice(&[0, 0, 0, 0]);
            }
            self.block(IDB, &b);
        }
        /// A packet of interface `if_id`, its time in the interface's units, wholly captured.
        pub(crate) fn epb(&mut self, if_id: u32, ts: u64, data: &[u8]) {
            let mut b = Vec::new();
            b.extend_from_slice(&self.w32(if_id));
            b.extend_from_slice(&self.w32((ts >> 32) as u32));
            b.extend_from_slice(&self.w32(ts as u32));
            b.extend_from_slice(&self.w32(data.len() as u32));
            b.extend_from_slice(&self.w32(data.len() as u32));
            b.extend_from_slice(data);
            self.block(EPB, &b);
        }
        pub(crate) fn spb(&mut self, data: &[u8]) {
            let mut b = Vec::new();
            b.extend_from_slice(&self.w32(data.len() as u32));
            b.extend_from_slice(data);
            self.block(SPB, &b);
        }
        /// A Decryption Secrets Block holding an NSS key log.
        pub(crate) fn dsb(&mut self, text: &[u8]) {
            let mut b = Vec::new();
            b.extend_from_slice(&self.w32(DSB_TLS_KEY_LOG));
            b.extend_from_slice(&self.w32(text.len() as u32));
            b.extend_from_slice(text);
            self.block(DSB, &b);
        }
    }

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
