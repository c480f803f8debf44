//! Application layer: what a connection speaks, and the parsers that read it.
//!
//! - [`http1`]: HTTP/1.1 exchanges with content-decoded bodies.
//! - [`h2`]: HTTP/2 streams as the same exchanges (framing, HPACK, lost-byte recovery).
//! - [`sse`]: events of a `text/event-stream` body.
//! - [`jsonrpc`]: the few JSON-RPC members the session checks read out of event data.

pub mod coding;
pub mod h2;
pub mod http1;
pub mod jsonrpc;
pub mod sse;
