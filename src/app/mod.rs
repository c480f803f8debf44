//! Application layer: what a connection speaks, and the parsers that read it.
//!
//! - [`http1`]: HTTP/1.1 exchanges with content-decoded bodies.
//! - [`sse`]: events of a `text/event-stream` body.
//! - [`jsonrpc`]: the few JSON-RPC members the session checks read out of event data.
//! - [`tls`]: TLS decryption with logged secrets, below the HTTP parser.

pub mod coding;
pub mod http1;
pub mod jsonrpc;
pub mod sse;
pub mod tls;
