//! TLS decryption: the layer between TCP reassembly and the HTTP parser.
//!
//! Input: the [`crate::record::StreamSink`] calls of one TCP connection, and the TLS secrets
//! known so far ([`KeyLog`], from NSS key log files or pcapng Decryption Secrets Blocks).
//! Output: the same `StreamSink` calls on a child, carrying the decrypted application data,
//! and [`TlsFacts`] on what was negotiated and how much could be read.
//! Invariants: no byte that failed authentication is forwarded; every bound is a constant of
//! its module, never a length field of the input; no input panics.
//!
//! - [`keylog`]: NSS key log lines, by client random.
//! - [`framing`]: records rebuilt from a byte stream, and boundary search after a loss.
//! - [`handshake`]: handshake messages rebuilt across records; hello facts.
//! - [`crypto`]: suites, key schedules (TLS 1.2 PRF, TLS 1.3 HKDF), AEAD record protection.
//! - [`connection`]: the per-connection state machine, [`TlsConnection`].

pub(crate) mod connection;
pub(crate) mod crypto;
pub(crate) mod framing;
pub(crate) mod handshake;
pub(crate) mod keylog;
#[cfg(test)]
mod rfc8448;

pub(crate) use connection::{TlsConnection, TlsFacts, TlsStatus};
pub(crate) use crypto::cipher_suite_name;
pub(crate) use keylog::{KeyLog, KeySource};
