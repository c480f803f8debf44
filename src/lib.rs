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
/// Entry points for the fuzz crate (`fuzz/`), which reaches the library only through what it
/// exports. Not an API: no stability, no documentation promises.
#[doc(hidden)]
pub mod fuzzing {
    use crate::app::h2::Http2Connection;
    use crate::record::{Direction, HttpSink, Limits, Mark, StreamEnd};

    /// `app::h2::Http2Connection` (crate-private) behind a public face.
    pub struct Http2Fuzz(Http2Connection);

    impl Http2Fuzz {
        /// `upgraded`: `Some((client, stream1_exchange))` as after `Upgrade: h2c`.
        pub fn new(limits: &Limits, upgraded: Option<(Direction, u32)>) -> Self {
            Http2Fuzz(match upgraded {
                Some((client, exchange)) => Http2Connection::upgraded(limits, client, exchange),
                None => Http2Connection::new(limits),
            })
        }
        pub fn data<S: HttpSink>(
            &mut self,
            dir: Direction,
            bytes: &[u8],
            mark: Mark,
            sink: &mut S,
        ) {
            self.0.data(dir, bytes, mark, sink);
        }
        pub fn gap<S: HttpSink>(&mut self, dir: Direction, len: u64, mark: Mark, sink: &mut S) {
            self.0.gap(dir, len, mark, sink);
        }
        pub fn end<S: HttpSink>(
            &mut self,
            dir: Direction,
            how: StreamEnd,
            mark: Mark,
            sink: &mut S,
        ) {
            self.0.end(dir, how, mark, sink);
        }
        pub fn client_direction(&self) -> Option<Direction> {
            self.0.client_direction()
        }
        pub fn is_abandoned(&self) -> bool {
            self.0.is_abandoned()
        }
    }
}
