//! HTTP/2 framing (RFC 9113 sections 3.4, 4 and 6): one direction's bytes cut into frames.
//!
//! Input: the in-order bytes of one direction in any split, the largest frame the peer
//! allows (`SETTINGS_MAX_FRAME_SIZE`), and gaps.
//! Output: [`FrameEvent`]s — the client preface, each frame's header, its content in pieces
//! (the pad length, padding, HEADERS priority fields and PUSH_PROMISE promised stream id
//! taken off, so content is DATA bytes or a header block fragment), and its end; frames
//! longer than allowed or with impossible padding are reported and skipped by their length.
//! After lost framing, [`Resync`] finds the next plausible frame start.
//! Invariants: events do not depend on how the input is cut (content pieces may be cut
//! differently, their concatenation is the same); nothing is allocated from a length field:
//! content is handed out as sub-slices of the input, only the 9-byte header and at most 10
//! prefix bytes are buffered; the resync window is a fixed size. Pure framing: no stream or
//! HPACK state lives here.

use crate::record::Mark;

pub(crate) const FRAME_HEADER_LEN: usize = 9;
pub(crate) const CLIENT_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// RFC 9113 section 6.5.2: the initial and smallest allowed SETTINGS_MAX_FRAME_SIZE.
pub(crate) const DEFAULT_MAX_FRAME_SIZE: u32 = 16_384;
/// The largest frame length a 24-bit field can state.
pub(crate) const MAX_FRAME_SIZE_LIMIT: u32 = (1 << 24) - 1;
/// Frames longer than this are not believed while searching for a frame start, so the
/// search window stays small whatever the peers allowed.
pub(crate) const RESYNC_MAX_FRAME: u32 = 64 * 1024;
/// Bytes the search holds at most: a candidate, its content, and the header after it.
const RESYNC_WINDOW: usize = RESYNC_MAX_FRAME as usize + 2 * FRAME_HEADER_LEN;

pub(crate) const FLAG_END_STREAM: u8 = 0x1;
pub(crate) const FLAG_ACK: u8 = 0x1;
pub(crate) const FLAG_END_HEADERS: u8 = 0x4;
pub(crate) const FLAG_PADDED: u8 = 0x8;
pub(crate) const FLAG_PRIORITY: u8 = 0x20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum FrameType {
    Data,
    Headers,
    Priority,
    RstStream,
    Settings,
    PushPromise,
    Ping,
    GoAway,
    WindowUpdate,
    Continuation,
    Unknown(u8),
}

impl FrameType {
    pub(crate) fn from_byte(b: u8) -> FrameType {
        match b {
            0 => FrameType::Data,
            1 => FrameType::Headers,
            2 => FrameType::Priority,
            3 => FrameType::RstStream,
            4 => FrameType::Settings,
            5 => FrameType::PushPromise,
            6 => FrameType::Ping,
            7 => FrameType::GoAway,
            8 => FrameType::WindowUpdate,
            9 => FrameType::Continuation,
            other => FrameType::Unknown(other),
        }
    }

    #[cfg_attr(not(test), allow(dead_code))] // read by the unit tests
    pub(crate) fn to_byte(self) -> u8 {
        match self {
            FrameType::Data => 0,
            FrameType::Headers => 1,
            FrameType::Priority => 2,
            FrameType::RstStream => 3,
            FrameType::Settings => 4,
            FrameType::PushPromise => 5,
            FrameType::Ping => 6,
            FrameType::GoAway => 7,
            FrameType::WindowUpdate => 8,
            FrameType::Continuation => 9,
            FrameType::Unknown(b) => b,
        }
    }

    /// Flags the type defines; others are meaningless (and, while resynchronizing, a sign
    /// that the bytes are not a frame header).
    fn defined_flags(self) -> u8 {
        match self {
            FrameType::Data => FLAG_END_STREAM | FLAG_PADDED,
            FrameType::Headers => FLAG_END_STREAM | FLAG_END_HEADERS | FLAG_PADDED | FLAG_PRIORITY,
            FrameType::Settings | FrameType::Ping => FLAG_ACK,
            FrameType::PushPromise => FLAG_END_HEADERS | FLAG_PADDED,
            FrameType::Continuation => FLAG_END_HEADERS,
            _ => 0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    pub(crate) length: u32,
    pub(crate) kind: FrameType,
    pub(crate) flags: u8,
    /// Stream id with the reserved bit cleared.
    pub(crate) stream: u32,
    /// The reserved bit was set (senders must not; receivers ignore it).
    pub(crate) reserved: bool,
}

impl FrameHeader {
    pub(crate) fn parse(b: [u8; FRAME_HEADER_LEN]) -> FrameHeader {
        let [l0, l1, l2, kind, flags, s0, s1, s2, s3] = b;
        let stream = u32::from_be_bytes([s0, s1, s2, s3]);
        FrameHeader {
            length: u32::from_be_bytes([0, l0, l1, l2]),
            kind: FrameType::from_byte(kind),
            flags,
            stream: stream & 0x7fff_ffff,
            reserved: stream & 0x8000_0000 != 0,
        }
    }

    pub(crate) fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// Bytes of fields before the content: pad length, priority, promised stream id.
    fn prefix_len(&self) -> u32 {
        let padded = u32::from(self.has(FLAG_PADDED));
        match self.kind {
            FrameType::Data => padded,
            FrameType::Headers => padded + if self.has(FLAG_PRIORITY) { 5 } else { 0 },
            FrameType::PushPromise => padded + 4,
            _ => 0,
        }
    }
}

/// What the reader found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FrameEvent<'a> {
    /// The client connection preface, whole.
    Preface,
    /// The bytes at the start of the direction are neither the client preface nor a frame
    /// header: not HTTP/2. Nothing follows.
    NotHttp2,
    /// A frame header; its content, then `End`, follow (or `Malformed`).
    Begin(FrameHeader),
    /// Content bytes of the current frame.
    Content(&'a [u8]),
    /// The frame (padding included) is over.
    End(FrameHeader),
    /// A frame longer than the peer allows, or too short for the fields its flags announce:
    /// no `Begin`, the frame is skipped by its length.
    Oversized(FrameHeader),
    /// After `Begin`: the frame's padding or prefix fields do not fit its length. The rest of
    /// the frame is skipped and no `End` follows.
    Malformed(FrameHeader),
}

/// What a gap did to the framing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GapEffect {
    /// The gap lies inside the current frame; framing goes on. `content_lost`: content bytes
    /// missing (`None` when the pad length was lost, so the count is unknown).
    InFrame {
        frame: FrameHeader,
        content_lost: Option<u64>,
    },
    /// Inside a frame being skipped anyway.
    InSkipped,
    /// The gap may hold frame headers: framing is lost, and the reader waits for `resume`.
    Lost,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadState {
    /// Nothing read yet: the client preface or a frame header comes next.
    Start,
    Preface {
        matched: usize,
    },
    Header {
        buf: [u8; FRAME_HEADER_LEN],
        have: usize,
    },
    Prefix {
        header: FrameHeader,
        buf: [u8; 10],
        have: usize,
    },
    Content {
        header: FrameHeader,
        remaining: u32,
        padding: u32,
    },
    Padding {
        header: FrameHeader,
        remaining: u32,
    },
    /// Bytes of a frame not followed; `end`: the frame whose `End` is due afterwards.
    Skip {
        end: Option<FrameHeader>,
        remaining: u32,
    },
    /// Not HTTP/2, or framing lost: bytes are consumed silently.
    Dead,
}

/// The frame reader of one direction.
#[derive(Clone, Debug)]
pub(crate) struct FrameReader {
    state: ReadState,
    /// Largest frame length the peer allows this direction to send.
    pub(crate) max_frame_size: u32,
    /// A frame header's first byte was in the input of the last [`Self::next`].
    header_began: bool,
}

impl FrameReader {
    pub(crate) fn new() -> Self {
        FrameReader {
            state: ReadState::Start,
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            header_began: false,
        }
    }

    /// Whether a frame header began in the input of the last [`Self::next`] (the first
    /// byte of a frame can follow a skipped one in the same input, which [`Self::next`]
    /// reads on without an event between them).
    pub(crate) fn header_began(&self) -> bool {
        self.header_began
    }

    /// True between frames (or before the first): the next byte starts a frame header.
    #[cfg_attr(not(test), allow(dead_code))] // read by the unit tests
    pub(crate) fn at_frame_start(&self) -> bool {
        matches!(
            self.state,
            ReadState::Start | ReadState::Header { have: 0, .. }
        )
    }

    /// True when framing was lost or the stream is not HTTP/2.
    #[cfg_attr(not(test), allow(dead_code))] // read by the unit tests
    pub(crate) fn is_dead(&self) -> bool {
        self.state == ReadState::Dead
    }

    /// Framing was found again: the next byte starts a frame header.
    pub(crate) fn resume(&mut self) {
        self.state = header_state();
    }

    /// Consumes a prefix of `input` and returns its length with the next event. `None`
    /// means every byte was consumed and more input is needed for the next event.
    pub(crate) fn next<'a>(&mut self, input: &'a [u8]) -> (usize, Option<FrameEvent<'a>>) {
        let mut used = 0;
        self.header_began = false;
        loop {
            let rest = input.get(used..).unwrap_or_default();
            match &mut self.state {
                ReadState::Start => match rest.first() {
                    None => return (used, None),
                    // A frame header starting with `P` would announce a frame of over 5 MB,
                    // beyond any first SETTINGS frame: the byte tells the two apart.
                    Some(&b'P') => self.state = ReadState::Preface { matched: 0 },
                    Some(_) => self.state = header_state(),
                },
                ReadState::Preface { matched } => {
                    let want = CLIENT_PREFACE.get(*matched..).unwrap_or_default();
                    let take = want.len().min(rest.len());
                    if rest.get(..take) != want.get(..take) {
                        self.state = ReadState::Dead;
                        return (input.len(), Some(FrameEvent::NotHttp2));
                    }
                    used += take;
                    *matched += take;
                    if *matched < CLIENT_PREFACE.len() {
                        return (used, None);
                    }
                    self.state = header_state();
                    return (used, Some(FrameEvent::Preface));
                }
                ReadState::Header { buf, have } => {
                    let take = (FRAME_HEADER_LEN - *have).min(rest.len());
                    self.header_began |= *have == 0 && take > 0;
                    if let (Some(dst), Some(src)) =
                        (buf.get_mut(*have..*have + take), rest.get(..take))
                    {
                        dst.copy_from_slice(src);
                    }
                    *have += take;
                    used += take;
                    if *have < FRAME_HEADER_LEN {
                        return (used, None);
                    }
                    let header = FrameHeader::parse(*buf);
                    return (used, Some(self.begin(header)));
                }
                ReadState::Prefix { header, buf, have } => {
                    let header = *header;
                    let need = header.prefix_len() as usize;
                    let take = need.saturating_sub(*have).min(rest.len());
                    if let (Some(dst), Some(src)) =
                        (buf.get_mut(*have..*have + take), rest.get(..take))
                    {
                        dst.copy_from_slice(src);
                    }
                    *have += take;
                    used += take;
                    if *have < need {
                        return (used, None);
                    }
                    let padding = if header.has(FLAG_PADDED) {
                        u32::from(buf[0])
                    } else {
                        0
                    };
                    let after_prefix = header.length - header.prefix_len();
                    if padding > after_prefix {
                        self.state = ReadState::Skip {
                            end: None,
                            remaining: after_prefix,
                        };
                        return (used, Some(FrameEvent::Malformed(header)));
                    }
                    self.state = ReadState::Content {
                        header,
                        remaining: after_prefix - padding,
                        padding,
                    };
                }
                ReadState::Content {
                    header,
                    remaining,
                    padding,
                } => {
                    if *remaining == 0 {
                        let (header, padding) = (*header, *padding);
                        // Most frames have no padding: they end here. The header is not
                        // moved to the next state only to be read back from it at once (a
                        // read that waited for the writes just made).
                        if padding == 0 {
                            self.state = header_state();
                            return (used, Some(FrameEvent::End(header)));
                        }
                        self.state = ReadState::Padding {
                            header,
                            remaining: padding,
                        };
                        continue;
                    }
                    if rest.is_empty() {
                        return (used, None);
                    }
                    let take = (*remaining as usize).min(rest.len());
                    *remaining -= take as u32;
                    let piece = rest.get(..take).unwrap_or_default();
                    return (used + take, Some(FrameEvent::Content(piece)));
                }
                ReadState::Padding { header, remaining } => {
                    if *remaining == 0 {
                        let header = *header;
                        self.state = header_state();
                        return (used, Some(FrameEvent::End(header)));
                    }
                    if rest.is_empty() {
                        return (used, None);
                    }
                    let take = (*remaining as usize).min(rest.len());
                    *remaining -= take as u32;
                    used += take;
                }
                ReadState::Skip { end, remaining } => {
                    if *remaining == 0 {
                        let end = *end;
                        self.state = header_state();
                        if let Some(header) = end {
                            return (used, Some(FrameEvent::End(header)));
                        }
                        continue;
                    }
                    if rest.is_empty() {
                        return (used, None);
                    }
                    let take = (*remaining as usize).min(rest.len());
                    *remaining -= take as u32;
                    used += take;
                }
                ReadState::Dead => return (input.len(), None),
            }
        }
    }

    fn begin(&mut self, header: FrameHeader) -> FrameEvent<'static> {
        if header.length > self.max_frame_size {
            self.state = ReadState::Skip {
                end: None,
                remaining: header.length,
            };
            return FrameEvent::Oversized(header);
        }
        let prefix = header.prefix_len();
        if prefix > header.length {
            self.state = ReadState::Skip {
                end: None,
                remaining: header.length,
            };
            return FrameEvent::Oversized(header);
        }
        self.state = if prefix > 0 {
            ReadState::Prefix {
                header,
                buf: [0; 10],
                have: 0,
            }
        } else {
            ReadState::Content {
                header,
                remaining: header.length,
                padding: 0,
            }
        };
        FrameEvent::Begin(header)
    }

    /// `len` bytes are missing at this point.
    pub(crate) fn gap(&mut self, len: u64) -> GapEffect {
        if len == 0 {
            return GapEffect::InSkipped;
        }
        let effect = match &mut self.state {
            ReadState::Content {
                header,
                remaining,
                padding,
            } => {
                let (header, content, pad) = (*header, u64::from(*remaining), u64::from(*padding));
                if len <= content {
                    *remaining -= len as u32;
                    GapEffect::InFrame {
                        frame: header,
                        content_lost: Some(len),
                    }
                } else if len <= content + pad {
                    self.state = ReadState::Padding {
                        header,
                        remaining: (content + pad - len) as u32,
                    };
                    GapEffect::InFrame {
                        frame: header,
                        content_lost: Some(content),
                    }
                } else {
                    GapEffect::Lost
                }
            }
            ReadState::Padding { header, remaining } if len <= u64::from(*remaining) => {
                *remaining -= len as u32;
                GapEffect::InFrame {
                    frame: *header,
                    content_lost: Some(0),
                }
            }
            ReadState::Prefix { header, have, .. } => {
                // The frame's end is still known, but not where its content ends.
                let header = *header;
                let left = u64::from(header.length) - *have as u64;
                if len <= left {
                    self.state = ReadState::Skip {
                        end: Some(header),
                        remaining: (left - len) as u32,
                    };
                    GapEffect::InFrame {
                        frame: header,
                        content_lost: None,
                    }
                } else {
                    GapEffect::Lost
                }
            }
            ReadState::Skip { remaining, .. } if len <= u64::from(*remaining) => {
                *remaining -= len as u32;
                GapEffect::InSkipped
            }
            ReadState::Dead => return GapEffect::Lost,
            _ => GapEffect::Lost,
        };
        if effect == GapEffect::Lost {
            self.state = ReadState::Dead;
        }
        effect
    }
}

fn header_state() -> ReadState {
    ReadState::Header {
        buf: [0; FRAME_HEADER_LEN],
        have: 0,
    }
}

/// Which side sent the bytes being searched, when known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sender {
    Client,
    Server,
}

/// Could these 9 bytes begin a frame that `sender` sent? Known type, flags the type
/// defines, the reserved bit clear, a length the type allows within `max_frame_size`, a
/// stream id the type allows (zero or not; client-initiated streams are odd).
pub(crate) fn plausible(h: &FrameHeader, sender: Option<Sender>, max_frame_size: u32) -> bool {
    if h.reserved || h.length > max_frame_size || h.flags & !h.kind.defined_flags() != 0 {
        return false;
    }
    let odd = h.stream % 2 == 1;
    match h.kind {
        FrameType::Data | FrameType::Headers | FrameType::Continuation => {
            odd && h.length >= h.prefix_len()
        }
        FrameType::Priority => h.stream != 0 && h.length == 5,
        FrameType::RstStream => h.stream != 0 && h.length == 4,
        FrameType::Settings => {
            h.stream == 0
                && if h.has(FLAG_ACK) {
                    h.length == 0
                } else {
                    h.length.is_multiple_of(6)
                }
        }
        FrameType::PushPromise => sender != Some(Sender::Client) && odd && h.length >= 4,
        FrameType::Ping => h.stream == 0 && h.length == 8,
        FrameType::GoAway => h.stream == 0 && h.length >= 8,
        FrameType::WindowUpdate => h.length == 4,
        FrameType::Unknown(_) => false,
    }
}

/// The search for the next frame start after lost framing, over a bounded window.
///
/// A candidate is accepted when its header is plausible and either the header right after
/// its frame is plausible too (a chain of two) or its frame ends exactly where a run of
/// bytes with one [`Mark`] ends (senders often end a packet with a frame). Decisions depend
/// on marks, never on how the bytes of one mark are cut into calls.
#[derive(Debug, Default)]
pub(crate) struct Resync {
    bytes: Vec<u8>,
    /// Start offset and mark of each run of bytes sharing a mark, in order.
    segments: Vec<(usize, Mark)>,
    /// Offsets before this were ruled out.
    scan: usize,
    /// Bytes ruled out and dropped since the search began.
    skipped: u64,
}

/// The bytes from the frame start found on, with their marks, to be read as frames.
pub(crate) type Replay = Vec<(Mark, Vec<u8>)>;

impl Resync {
    /// Bytes dropped so far as not being frames.
    pub(crate) fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Adds bytes and searches. Returns how many bytes of `input` were taken, and the bytes
    /// to replay when a frame start was found; the caller reads `input[taken..]` after them.
    pub(crate) fn push(
        &mut self,
        input: &[u8],
        mark: Mark,
        plausible: impl Fn(&FrameHeader) -> bool,
    ) -> (usize, Option<Replay>) {
        let mut taken = 0;
        while taken < input.len() {
            let room = RESYNC_WINDOW.saturating_sub(self.bytes.len()).max(1);
            let rest = input.get(taken..).unwrap_or_default();
            let piece = rest.get(..room).unwrap_or(rest);
            if self.segments.last().is_none_or(|&(_, m)| m != mark) {
                self.segments.push((self.bytes.len(), mark));
            }
            self.bytes.extend_from_slice(piece);
            taken += piece.len();
            if let Some(start) = self.search(&plausible) {
                return (taken, Some(self.replay_from(start)));
            }
            self.trim();
        }
        (taken, None)
    }

    /// The first accepted candidate at or after `scan`; leaves `scan` at the first undecided
    /// one.
    fn search(&mut self, plausible: &impl Fn(&FrameHeader) -> bool) -> Option<usize> {
        let header_at = |bytes: &[u8], at: usize| -> Option<FrameHeader> {
            let b: [u8; FRAME_HEADER_LEN] =
                bytes.get(at..at + FRAME_HEADER_LEN)?.try_into().ok()?;
            Some(FrameHeader::parse(b))
        };
        while let Some(h) = header_at(&self.bytes, self.scan) {
            let i = self.scan;
            if !plausible(&h) || h.length > RESYNC_MAX_FRAME {
                self.scan += 1;
                continue;
            }
            let next = i + FRAME_HEADER_LEN + h.length as usize;
            if self
                .segments
                .binary_search_by_key(&next, |&(s, _)| s)
                .is_ok()
            {
                return Some(i);
            }
            match header_at(&self.bytes, next) {
                Some(after) if plausible(&after) => return Some(i),
                Some(_) => self.scan += 1,
                None => return None,
            }
        }
        None
    }

    /// Drops the bytes already ruled out.
    fn trim(&mut self) {
        let cut = self.scan.min(self.bytes.len());
        if cut == 0 {
            return;
        }
        self.bytes.drain(..cut);
        self.skipped += cut as u64;
        self.scan = 0;
        let keep_from = self
            .segments
            .iter()
            .rposition(|&(s, _)| s <= cut)
            .unwrap_or(0);
        self.segments.drain(..keep_from);
        for (s, _) in &mut self.segments {
            *s = s.saturating_sub(cut);
        }
    }

    fn replay_from(&mut self, start: usize) -> Replay {
        self.skipped += start as u64;
        let mut out = Vec::new();
        for (k, &(s, mark)) in self.segments.iter().enumerate() {
            let end = self
                .segments
                .get(k + 1)
                .map_or(self.bytes.len(), |&(e, _)| e);
            let from = s.max(start);
            if from < end
                && let Some(bytes) = self.bytes.get(from..end)
            {
                out.push((mark, bytes.to_vec()));
            }
        }
        self.bytes.clear();
        self.segments.clear();
        self.scan = 0;
        out
    }
}

/// Test-side frame encoding.
#[cfg(test)]
pub(crate) mod encode {
    use super::FrameType;

    pub(crate) fn frame(kind: FrameType, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut out = len.to_be_bytes()[1..].to_vec();
        out.push(kind.to_byte());
        out.push(flags);
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// A payload with a pad length byte in front and `pad` zero bytes behind.
    pub(crate) fn padded(payload: &[u8], pad: u8) -> Vec<u8> {
        let mut out = vec![pad];
        out.extend_from_slice(payload);
        out.extend(std::iter::repeat_n(0, usize::from(pad)));
        out
    }

    pub(crate) fn settings(values: &[(u16, u32)]) -> Vec<u8> {
        let payload: Vec<u8> = values
            .iter()
            .flat_map(|(id, v)| {
                let mut e = id.to_be_bytes().to_vec();
                e.extend_from_slice(&v.to_be_bytes());
                e
            })
            .collect();
        frame(FrameType::Settings, 0, 0, &payload)
    }
}

#[cfg(test)]
mod tests {
    use super::encode::{frame, padded, settings};
    use super::*;

    #[derive(Debug, PartialEq, Eq)]
    enum Ev {
        Preface,
        NotHttp2,
        Begin(FrameHeader),
        Content(Vec<u8>),
        End(FrameHeader),
        Oversized(FrameHeader),
        Malformed(FrameHeader),
    }

    /// Reads `input` cut into pieces of the given sizes (cycled), merging content pieces.
    fn read(input: &[u8], cuts: &[usize]) -> Vec<Ev> {
        let mut reader = FrameReader::new();
        let mut events: Vec<Ev> = Vec::new();
        let mut rest = input;
        let mut k = 0;
        while !rest.is_empty() {
            let n = cuts[k % cuts.len()].clamp(1, rest.len());
            k += 1;
            let (mut piece, tail) = rest.split_at(n);
            rest = tail;
            loop {
                let (used, ev) = reader.next(piece);
                piece = &piece[used..];
                let Some(ev) = ev else {
                    assert!(piece.is_empty());
                    break;
                };
                match ev {
                    FrameEvent::Content(c) => {
                        assert!(!c.is_empty());
                        if let Some(Ev::Content(acc)) = events.last_mut() {
                            acc.extend_from_slice(c);
                        } else {
                            events.push(Ev::Content(c.to_vec()));
                        }
                    }
                    FrameEvent::Preface => events.push(Ev::Preface),
                    FrameEvent::NotHttp2 => events.push(Ev::NotHttp2),
                    FrameEvent::Begin(h) => events.push(Ev::Begin(h)),
                    FrameEvent::End(h) => events.push(Ev::End(h)),
                    FrameEvent::Oversized(h) => events.push(Ev::Oversized(h)),
                    FrameEvent::Malformed(h) => events.push(Ev::Malformed(h)),
                }
            }
        }
        events
    }

    /// Whole, byte by byte and at pseudo-random cuts: one answer.
    fn read_all_ways(input: &[u8]) -> Vec<Ev> {
        let whole = read(input, &[usize::MAX]);
        assert_eq!(read(input, &[1]), whole, "byte by byte");
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..6 {
            let cuts: Vec<usize> = (0..17)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    1 + (x % 23) as usize
                })
                .collect();
            assert_eq!(read(input, &cuts), whole, "cuts {cuts:?}");
        }
        whole
    }

    fn h(kind: FrameType, flags: u8, stream: u32, length: u32) -> FrameHeader {
        FrameHeader {
            length,
            kind,
            flags,
            stream,
            reserved: false,
        }
    }

    #[test]
    fn preface_settings_and_frames_of_every_shape() {
        let mut input = CLIENT_PREFACE.to_vec();
        input.extend(settings(&[(1, 4096), (5, 32768)]));
        input.extend(frame(FrameType::Settings, FLAG_ACK, 0, b""));
        // HEADERS with padding and priority: 1 pad length + 5 priority + block + 2 padding.
        let mut p = vec![2];
        p.extend_from_slice(&[0x80, 0, 0, 3, 15]);
        p.extend_from_slice(b"blk");
        p.extend_from_slice(&[0, 0]);
        input.extend(frame(
            FrameType::Headers,
            FLAG_PADDED | FLAG_PRIORITY,
            1,
            &p,
        ));
        input.extend(frame(FrameType::Continuation, FLAG_END_HEADERS, 1, b"more"));
        input.extend(frame(FrameType::Data, FLAG_PADDED, 1, &padded(b"hello", 3)));
        input.extend(frame(FrameType::Data, FLAG_END_STREAM, 1, b""));
        let mut pp = vec![0, 0, 0, 2];
        pp.extend_from_slice(b"push");
        input.extend(frame(FrameType::PushPromise, FLAG_END_HEADERS, 1, &pp));
        input.extend(frame(FrameType::Unknown(0xfa), 0xff, 7, b"ignored"));
        let events = read_all_ways(&input);
        let expected = vec![
            Ev::Preface,
            Ev::Begin(h(FrameType::Settings, 0, 0, 12)),
            Ev::Content(vec![0, 1, 0, 0, 16, 0, 0, 5, 0, 0, 128, 0]),
            Ev::End(h(FrameType::Settings, 0, 0, 12)),
            Ev::Begin(h(FrameType::Settings, FLAG_ACK, 0, 0)),
            Ev::End(h(FrameType::Settings, FLAG_ACK, 0, 0)),
            Ev::Begin(h(FrameType::Headers, FLAG_PADDED | FLAG_PRIORITY, 1, 11)),
            Ev::Content(b"blk".to_vec()),
            Ev::End(h(FrameType::Headers, FLAG_PADDED | FLAG_PRIORITY, 1, 11)),
            Ev::Begin(h(FrameType::Continuation, FLAG_END_HEADERS, 1, 4)),
            Ev::Content(b"more".to_vec()),
            Ev::End(h(FrameType::Continuation, FLAG_END_HEADERS, 1, 4)),
            Ev::Begin(h(FrameType::Data, FLAG_PADDED, 1, 9)),
            Ev::Content(b"hello".to_vec()),
            Ev::End(h(FrameType::Data, FLAG_PADDED, 1, 9)),
            Ev::Begin(h(FrameType::Data, FLAG_END_STREAM, 1, 0)),
            Ev::End(h(FrameType::Data, FLAG_END_STREAM, 1, 0)),
            Ev::Begin(h(FrameType::PushPromise, FLAG_END_HEADERS, 1, 8)),
            Ev::Content(b"push".to_vec()),
            Ev::End(h(FrameType::PushPromise, FLAG_END_HEADERS, 1, 8)),
            Ev::Begin(h(FrameType::Unknown(0xfa), 0xff, 7, 7)),
            Ev::Content(b"ignored".to_vec()),
            Ev::End(h(FrameType::Unknown(0xfa), 0xff, 7, 7)),
        ];
        assert_eq!(events, expected);
    }

    #[test]
    fn bad_preface_is_not_http2() {
        assert_eq!(
            read_all_ways(b"PRI * HTTP/1.1\r\n\r\nxx"),
            vec![Ev::NotHttp2]
        );
    }

    #[test]
    fn oversized_and_malformed_frames_are_skipped_by_length() {
        let mut input = frame(FrameType::Data, 0, 1, &vec![7; 20_000]);
        input.extend(frame(FrameType::Data, FLAG_PADDED, 3, &[9, 1, 2]));
        input.extend(frame(FrameType::Headers, FLAG_PRIORITY, 5, &[0, 0]));
        input.extend(frame(FrameType::Ping, 0, 0, &[1; 8]));
        let events = read_all_ways(&input);
        assert_eq!(
            events,
            vec![
                Ev::Oversized(h(FrameType::Data, 0, 1, 20_000)),
                Ev::Begin(h(FrameType::Data, FLAG_PADDED, 3, 3)),
                Ev::Malformed(h(FrameType::Data, FLAG_PADDED, 3, 3)),
                Ev::Oversized(h(FrameType::Headers, FLAG_PRIORITY, 5, 2)),
                Ev::Begin(h(FrameType::Ping, 0, 0, 8)),
                Ev::Content(vec![1; 8]),
                Ev::End(h(FrameType::Ping, 0, 0, 8)),
            ]
        );
    }

    #[test]
    fn gaps_inside_a_frame_keep_framing() {
        let data = frame(FrameType::Data, FLAG_PADDED, 1, &padded(b"0123456789", 4));
        let mut r = FrameReader::new();
        let (used, ev) = r.next(&data[..12]);
        assert_eq!(
            (used, ev),
            (
                9,
                Some(FrameEvent::Begin(h(FrameType::Data, FLAG_PADDED, 1, 15)))
            )
        );
        assert_eq!(r.next(&data[9..12]), (3, Some(FrameEvent::Content(b"01"))));
        // 9 bytes missing: the last 8 content bytes and one of padding.
        let effect = r.gap(9);
        assert_eq!(
            effect,
            GapEffect::InFrame {
                frame: h(FrameType::Data, FLAG_PADDED, 1, 15),
                content_lost: Some(8)
            }
        );
        assert_eq!(
            r.next(&data[21..]),
            (
                3,
                Some(FrameEvent::End(h(FrameType::Data, FLAG_PADDED, 1, 15)))
            )
        );
        assert!(r.at_frame_start());
        assert_eq!(r.gap(1), GapEffect::Lost);
        assert!(r.is_dead());
        r.resume();
        assert!(r.at_frame_start());
    }

    fn plausible_server(h: &FrameHeader) -> bool {
        plausible(h, Some(Sender::Server), DEFAULT_MAX_FRAME_SIZE)
    }

    #[test]
    fn resync_needs_a_chain_of_two() {
        let body = b"data: \x00\x00\x05\x00\x00\x00\x00\x00\x03 fake header in the body\n\n";
        let mut stream = body.to_vec();
        let start = stream.len();
        stream.extend(frame(FrameType::Data, 0, 3, b"abc"));
        stream.extend(frame(FrameType::Data, FLAG_END_STREAM, 3, b"de"));
        let mark = Mark::new(5, 0);
        // Cut anywhere, the same start is found.
        for cut in [1, 3, 7, stream.len()] {
            let mut r = Resync::default();
            let mut found = None;
            for piece in stream.chunks(cut) {
                let (_, replay) = r.push(piece, mark, plausible_server);
                if let Some(replay) = replay {
                    found = Some((replay, r.skipped()));
                    break;
                }
            }
            let (replay, skipped) = found.expect("found");
            assert_eq!(skipped, start as u64);
            assert_eq!(replay[0].1[..12], frame(FrameType::Data, 0, 3, b"abc")[..]);
        }
    }

    #[test]
    fn resync_accepts_a_frame_ending_with_its_packet() {
        let mut r = Resync::default();
        let junk = b"xyz";
        let f = frame(FrameType::Data, 0, 1, b"abc");
        let mut first = junk.to_vec();
        first.extend(&f);
        // The same mark continues: undecided.
        let (_, replay) = r.push(&first, Mark::new(1, 0), plausible_server);
        assert!(replay.is_none());
        // A new packet begins right where the frame ended.
        let (taken, replay) = r.push(b"zz", Mark::new(2, 0), plausible_server);
        let replay = replay.expect("frame ending a packet");
        assert_eq!(taken, 2);
        assert_eq!(
            replay,
            vec![(Mark::new(1, 0), f), (Mark::new(2, 0), b"zz".to_vec())]
        );
    }

    #[test]
    fn resync_window_is_bounded() {
        let mut r = Resync::default();
        let noise = vec![0xffu8; 1 << 20];
        let (taken, replay) = r.push(&noise, Mark::new(1, 0), plausible_server);
        assert_eq!((taken, replay), (noise.len(), None));
        assert!(r.bytes.len() <= RESYNC_WINDOW);
        assert!(r.bytes.capacity() <= 2 * RESYNC_WINDOW);
    }

    #[test]
    fn plausibility_rules() {
        let ok = |hd: FrameHeader, s| plausible(&hd, s, DEFAULT_MAX_FRAME_SIZE);
        assert!(ok(
            h(FrameType::Data, FLAG_END_STREAM, 9, 100),
            Some(Sender::Server)
        ));
        assert!(!ok(h(FrameType::Data, 0x2, 9, 100), None), "undefined flag");
        assert!(!ok(h(FrameType::Data, 0, 8, 100), None), "even stream");
        assert!(!ok(h(FrameType::Data, 0, 9, 20_000), None), "too long");
        assert!(!ok(h(FrameType::Settings, 0, 0, 7), None));
        assert!(!ok(h(FrameType::Settings, FLAG_ACK, 0, 6), None));
        assert!(ok(h(FrameType::Settings, 0, 0, 12), None));
        assert!(!ok(h(FrameType::Ping, 0, 1, 8), None));
        assert!(!ok(
            h(FrameType::PushPromise, FLAG_END_HEADERS, 1, 8),
            Some(Sender::Client)
        ));
        assert!(!ok(h(FrameType::Unknown(10), 0, 0, 0), None));
        let mut r = h(FrameType::WindowUpdate, 0, 0, 4);
        assert!(ok(r, None));
        r.reserved = true;
        assert!(!ok(r, None));
    }
}
