//! What the parser tests of this layer share: a recording [`HttpSink`], transcripts of
//! byte-stream calls, and the ways of cutting them (whole, byte by byte, at seeded random
//! points) under which every parser must give one answer.

use crate::record::{
    Anomaly, BodyEnd, Direction, HttpSink, Mark, RequestHead, ResponseHead, StreamEnd,
};

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    Request(RequestHead),
    Response(ResponseHead),
    Body(u32, Vec<u8>, Mark),
    BodyGap(u32, u64, Mark),
    BodyEnd(u32, BodyEnd, Mark),
    Anomaly(Anomaly, Mark),
}

/// Records sink calls, merging adjacent body pieces of one exchange and one mark (how
/// a body is cut into calls depends on how the input was cut).
#[derive(Default)]
pub(crate) struct Recorder {
    pub(crate) events: Vec<Event>,
    /// Answers [`HttpSink::request_named`] from the requests recorded, as the exchange
    /// tracker does; otherwise it does not know, as a sink need not.
    pub(crate) knows_requests: bool,
}

impl HttpSink for Recorder {
    fn request(&mut self, head: RequestHead) {
        self.events.push(Event::Request(head));
    }
    fn response(&mut self, head: ResponseHead) {
        self.events.push(Event::Response(head));
    }
    fn request_named(&self, exchange: u32, session_id: &[u8]) -> bool {
        self.knows_requests
            && self.events.iter().any(|e| {
                matches!(e, Event::Request(h) if h.exchange == exchange
                    && h.session_id.as_deref().map(str::as_bytes) == Some(session_id))
            })
    }
    fn body(&mut self, exchange: u32, bytes: &[u8], mark: Mark) {
        assert!(!bytes.is_empty(), "empty body piece");
        if let Some(Event::Body(e, acc, m)) = self.events.last_mut()
            && *e == exchange
            && *m == mark
        {
            acc.extend_from_slice(bytes);
            return;
        }
        self.events
            .push(Event::Body(exchange, bytes.to_vec(), mark));
    }
    fn body_gap(&mut self, exchange: u32, len: u64, mark: Mark) {
        self.events.push(Event::BodyGap(exchange, len, mark));
    }
    fn body_end(&mut self, exchange: u32, how: BodyEnd, mark: Mark) {
        self.events.push(Event::BodyEnd(exchange, how, mark));
    }
    fn anomaly(&mut self, what: Anomaly, mark: Mark) {
        self.events.push(Event::Anomaly(what, mark));
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Step {
    Data(Direction, Vec<u8>),
    Gap(Direction, u64),
    End(Direction, StreamEnd),
    /// The direction's next data (in its own step's frame) was sent after bytes of the
    /// other one not captured: this many past those given, when known (else 0).
    Ahead(Direction, u64),
    /// The direction's next data was recorded at the frame given (earlier than its place);
    /// `true`: it was sent after every byte of the other direction given so far.
    Late(Direction, u64, bool),
    /// The direction's next data was sent before the last bytes given of the other one (this
    /// many) had arrived.
    Before(Direction, u64),
}

pub(crate) fn data(dir: Direction, bytes: impl AsRef<[u8]>) -> Step {
    Step::Data(dir, bytes.as_ref().to_vec())
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Split {
    Whole,
    Bytewise,
    Random(u64),
}

pub(crate) struct XorShift(pub(crate) u64);

impl XorShift {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
