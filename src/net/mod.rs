//! Network: link → IP → TCP, and per-connection reassembly.
//!
//! - [`decode`]: link layer → IP → TCP segments (no state).
//! - [`flow`]: the flow table of a capture: connection numbers (`tcp.stream`) and directions.
//! - [`tcp`]: reassembly per connection and direction; bytes the capture lost become explicit
//!   gaps.

pub mod decode;
pub mod flow;
pub mod tcp;
