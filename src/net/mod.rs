//! Network: link → IP → TCP, and per-connection reassembly.
//!
//! - [`decode`]: link layer → IP → TCP segments (no state).
//! - [`tcp`]: reassembly per connection and direction; bytes the capture lost become explicit
//!   gaps.

pub mod decode;
pub mod tcp;
