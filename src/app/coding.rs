//! Content codings of HTTP bodies (gzip, x-gzip, deflate), decoded incrementally; shared by
//! every HTTP version.
//!
//! Input: the body bytes of one message as they arrive, in any split.
//! Output: decoded bytes through a callback, or one error when the data does not decode.
//! Invariants: output never depends on how the input is split; state is bounded (a fixed
//! inflate window, no buffered input beyond the gzip header fields being skipped); work is
//! proportional to the bytes given times the deflate expansion ratio.

use std::cell::Cell;

use flate2::{Decompress, FlushDecompress, Status};

/// Output buffer of the content decoders.
const DECODE_BUFFER_BYTES: usize = 16 * 1024;

thread_local! {
    /// The output buffer of every decoder on the thread, taken for the length of one call: it
    /// holds nothing between calls, and one per decoder put 16 KiB into every compressed body
    /// open at once (an event stream's lasts as long as the stream).
    static OUT: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ContentCoding {
    Identity,
    Gzip,
    Deflate,
    /// br, zstd, compress, layered codings: nothing of the body can be read.
    Unsupported,
}

impl ContentCoding {
    pub(crate) fn parse(value: &str) -> ContentCoding {
        let mut codings = value
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"));
        match (codings.next(), codings.next()) {
            (None, _) => ContentCoding::Identity,
            (Some(c), None)
                if c.eq_ignore_ascii_case("gzip") || c.eq_ignore_ascii_case("x-gzip") =>
            {
                ContentCoding::Gzip
            }
            (Some(c), None) if c.eq_ignore_ascii_case("deflate") => ContentCoding::Deflate,
            _ => ContentCoding::Unsupported,
        }
    }
}

const GZIP_FLAG_HCRC: u8 = 0x02;
const GZIP_FLAG_EXTRA: u8 = 0x04;
const GZIP_FLAG_NAME: u8 = 0x08;
const GZIP_FLAG_COMMENT: u8 = 0x10;
const GZIP_FLAG_RESERVED: u8 = 0xE0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DecodeState {
    /// Gzip member header: bytes of its fixed 10-byte part read so far.
    GzipFixed {
        have: usize,
    },
    /// Gzip FEXTRA length: bytes read and the value so far.
    GzipExtraLen {
        have: usize,
        len: usize,
    },
    GzipExtra {
        remaining: usize,
    },
    GzipName,
    GzipComment,
    GzipHeaderCrc {
        remaining: usize,
    },
    /// Deflate body: waiting for its first two bytes to tell zlib from raw deflate.
    DeflateSniff {
        first: Option<u8>,
    },
    Inflate,
    /// Gzip CRC-32 and size trailer: skipped, not checked (the HTTP framing bounds the body).
    GzipTrailer {
        remaining: usize,
    },
    /// A gzip member ended; another one may follow.
    GzipMemberEnd,
    /// The compressed stream is over; anything after it is ignored.
    Done,
}

/// Incremental gzip / deflate decoder of one response body.
pub(crate) struct ContentDecoder {
    gzip: bool,
    state: DecodeState,
    fixed: [u8; 10],
    flags: u8,
    inflate: Decompress,
    fed_any: bool,
}

impl ContentDecoder {
    pub(crate) fn gzip() -> Self {
        Self::with_state(true, DecodeState::GzipFixed { have: 0 })
    }

    pub(crate) fn deflate() -> Self {
        Self::with_state(false, DecodeState::DeflateSniff { first: None })
    }

    fn with_state(gzip: bool, state: DecodeState) -> Self {
        ContentDecoder {
            gzip,
            state,
            fixed: [0; 10],
            flags: 0,
            inflate: Decompress::new(false),
            fed_any: false,
        }
    }

    /// True when the compressed stream ended cleanly (or never began: an empty body).
    pub(crate) fn at_end(&self) -> bool {
        !self.fed_any || matches!(self.state, DecodeState::Done | DecodeState::GzipMemberEnd)
    }

    /// Decodes `input`, handing decoded bytes to `emit`. `Err` on data that does not decode.
    pub(crate) fn feed(&mut self, input: &[u8], emit: impl FnMut(&[u8])) -> Result<(), ()> {
        // A call made from `emit` (none is) would find the buffer taken and use one of its own.
        let mut out = OUT.take();
        out.resize(DECODE_BUFFER_BYTES, 0);
        let result = self.feed_with(input, &mut out, emit);
        OUT.set(out);
        result
    }

    fn feed_with(
        &mut self,
        mut input: &[u8],
        out: &mut [u8],
        mut emit: impl FnMut(&[u8]),
    ) -> Result<(), ()> {
        if !input.is_empty() {
            self.fed_any = true;
        }
        while !input.is_empty() {
            let used = match self.state {
                DecodeState::GzipFixed { have } => {
                    let take = (self.fixed.len() - have).min(input.len());
                    let (src, dst) = (
                        input.get(..take).ok_or(())?,
                        self.fixed.get_mut(have..have + take).ok_or(())?,
                    );
                    dst.copy_from_slice(src);
                    let have = have + take;
                    self.state = if have < self.fixed.len() {
                        DecodeState::GzipFixed { have }
                    } else {
                        let [id1, id2, method, flags, ..] = self.fixed;
                        if id1 != 0x1f
                            || id2 != 0x8b
                            || method != 8
                            || flags & GZIP_FLAG_RESERVED != 0
                        {
                            return Err(());
                        }
                        self.flags = flags;
                        self.inflate.reset(false);
                        self.after_extra_field(flags & GZIP_FLAG_EXTRA != 0)
                    };
                    take
                }
                DecodeState::GzipExtraLen { have, len } => {
                    let b = usize::from(*input.first().ok_or(())?);
                    let len = len | (b << (8 * have));
                    self.state = if have == 0 {
                        DecodeState::GzipExtraLen { have: 1, len }
                    } else {
                        DecodeState::GzipExtra { remaining: len }
                    };
                    1
                }
                DecodeState::GzipExtra { remaining } => {
                    let take = remaining.min(input.len());
                    self.state = if take == remaining {
                        self.after_extra_field(false)
                    } else {
                        DecodeState::GzipExtra {
                            remaining: remaining - take,
                        }
                    };
                    take
                }
                DecodeState::GzipName | DecodeState::GzipComment => {
                    match memchr::memchr(0, input) {
                        Some(k) => {
                            self.state = if self.state == DecodeState::GzipName {
                                self.after_name()
                            } else {
                                self.after_comment()
                            };
                            k + 1
                        }
                        None => input.len(),
                    }
                }
                DecodeState::GzipHeaderCrc { remaining } => {
                    let take = remaining.min(input.len());
                    self.state = if take == remaining {
                        DecodeState::Inflate
                    } else {
                        DecodeState::GzipHeaderCrc {
                            remaining: remaining - take,
                        }
                    };
                    take
                }
                DecodeState::DeflateSniff { first: None } => match input {
                    [b0, b1, ..] => {
                        self.inflate.reset(is_zlib_header(*b0, *b1));
                        self.state = DecodeState::Inflate;
                        0
                    }
                    [b0] => {
                        self.state = DecodeState::DeflateSniff { first: Some(*b0) };
                        1
                    }
                    [] => 0,
                },
                DecodeState::DeflateSniff { first: Some(b0) } => {
                    let b1 = *input.first().ok_or(())?;
                    self.inflate.reset(is_zlib_header(b0, b1));
                    self.state = DecodeState::Inflate;
                    self.inflate_some(&[b0], out, &mut emit)?;
                    0
                }
                DecodeState::Inflate => self.inflate_some(input, out, &mut emit)?,
                DecodeState::GzipTrailer { remaining } => {
                    let take = remaining.min(input.len());
                    self.state = if take == remaining {
                        DecodeState::GzipMemberEnd
                    } else {
                        DecodeState::GzipTrailer {
                            remaining: remaining - take,
                        }
                    };
                    take
                }
                DecodeState::GzipMemberEnd => {
                    // Another member may follow; anything else is trailing padding.
                    self.state = if input.first() == Some(&0x1f) {
                        DecodeState::GzipFixed { have: 0 }
                    } else {
                        DecodeState::Done
                    };
                    0
                }
                DecodeState::Done => input.len(),
            };
            input = input.get(used..).unwrap_or_default();
        }
        Ok(())
    }

    fn after_extra_field(&self, has_extra: bool) -> DecodeState {
        if has_extra {
            DecodeState::GzipExtraLen { have: 0, len: 0 }
        } else if self.flags & GZIP_FLAG_NAME != 0 {
            DecodeState::GzipName
        } else {
            self.after_name()
        }
    }

    fn after_name(&self) -> DecodeState {
        if self.flags & GZIP_FLAG_COMMENT != 0 {
            DecodeState::GzipComment
        } else {
            self.after_comment()
        }
    }

    fn after_comment(&self) -> DecodeState {
        if self.flags & GZIP_FLAG_HCRC != 0 {
            DecodeState::GzipHeaderCrc { remaining: 2 }
        } else {
            DecodeState::Inflate
        }
    }

    /// Runs the inflater over `input` until it needs more input or the stream ends; returns
    /// the input bytes it consumed.
    fn inflate_some(
        &mut self,
        input: &[u8],
        out: &mut [u8],
        emit: &mut impl FnMut(&[u8]),
    ) -> Result<usize, ()> {
        let mut consumed = 0;
        loop {
            let rest = input.get(consumed..).unwrap_or_default();
            let (in_before, out_before) = (self.inflate.total_in(), self.inflate.total_out());
            let status = self.inflate.decompress(rest, out, FlushDecompress::None);
            let used = usize::try_from(self.inflate.total_in() - in_before).map_err(|_| ())?;
            let produced =
                usize::try_from(self.inflate.total_out() - out_before).map_err(|_| ())?;
            // Bytes decoded before bad data are delivered too, so the answer does not depend
            // on where the input was cut.
            if produced > 0 {
                emit(out.get(..produced).ok_or(())?);
            }
            let status = status.map_err(|_| ())?;
            consumed += used;
            if status == Status::StreamEnd {
                self.state = if self.gzip {
                    DecodeState::GzipTrailer { remaining: 8 }
                } else {
                    DecodeState::Done
                };
                return Ok(consumed);
            }
            if used == 0 && produced == 0 {
                // No progress with input left over means the inflater is stuck.
                return if consumed == 0 && !input.is_empty() {
                    Err(())
                } else {
                    Ok(consumed)
                };
            }
            if consumed >= input.len() && produced < out.len() {
                return Ok(consumed);
            }
        }
    }
}

/// RFC 1950 header check: deflate method, window at most 32 KiB, header checksum.
pub(crate) fn is_zlib_header(cmf: u8, flg: u8) -> bool {
    cmf & 0x0f == 8 && cmf >> 4 <= 7 && ((u16::from(cmf) << 8) | u16::from(flg)) % 31 == 0
}
