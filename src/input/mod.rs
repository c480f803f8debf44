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

pub mod capture;
pub mod compressed;
pub mod har;
pub mod merge;
pub mod set;
