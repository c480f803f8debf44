//! Input: files as users have them → packets (captures) or exchanges (HAR).
//!
//! - [`capture`]: pcap / pcapng records → packets (frame number, time, link type, bytes).
//! - [`har`]: HAR exports → exchanges, which join the pipeline after the application layer
//!   (a HAR entry already is an HTTP exchange).

pub mod capture;
pub mod har;
