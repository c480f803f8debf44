//! mcp-resume-audit: finds, in packet captures, every reconnect of an MCP Streamable HTTP
//! session and tells whether the server resumed correctly, silently skipped events, or
//! silently replayed them.
//!
//! The stages, in pipeline order (each module's header states its input, output and
//! invariants):
//!
//! - [`capture`]: pcap / pcapng files → packets (frame number, time, link type, bytes)
//! - [`har`]: HAR exports → exchanges, fed straight to [`session`] (a HAR entry is an exchange)
//! - [`decode`]: link layer → IP → TCP segments
//! - [`tcp`]: per-connection reassembly, both directions; missing bytes become explicit gaps
//! - [`http1`]: HTTP/1.1 exchanges with content-decoded bodies
//! - [`sse`]: events of a `text/event-stream` body
//! - [`session`]: resumes paired with their first event id; per-exchange stream facts
//! - [`sessions`]: the session stage: evidence across the connections and sessions of an
//!   input (id shapes, re-delivery, cursor audit, cross-session leaks, symptoms)
//! - [`verdict`]: pure decision functions
//! - [`report`]: JSON Lines records and the summary
//! - [`spool`]: one input's records on their way out, put in report order
//! - [`pipeline`]: the driver that runs the stages over many inputs in parallel
//!
//! [`record`] holds the small records and sink traits the stages hand each other;
//! [`idshape`] and [`jsonrpc`] are the pure helpers the session checks use;
//! [`synth`] writes synthetic captures (fixtures and benchmarks).

pub mod capture;
pub mod decode;
pub mod har;
pub mod http1;
pub mod idshape;
pub mod jsonrpc;
pub mod pipeline;
pub mod record;
pub mod report;
pub mod session;
pub mod sessions;
pub mod spool;
pub mod sse;
pub mod synth;
pub mod tcp;
pub mod verdict;
