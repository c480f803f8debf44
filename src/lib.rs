//! mcp-resume-audit: finds, in packet captures, every reconnect of an MCP Streamable HTTP
//! session and tells whether the server resumed correctly, silently skipped events, or
//! silently replayed them.

pub mod app;
pub mod audit;
pub mod driver;
pub mod exchange;
pub mod input;
pub mod net;
pub mod record;
pub mod report;
