//! Compressed inputs: gzip, zstd, lz4 and xz, recognized by their magic bytes (never by the
//! file name) and decompressed as a stream.
//!
//! Input: the first bytes of an input, then the input as any `Read`.
//! Output: a `Read` of the decompressed bytes, which the capture and HAR readers take as they
//! would take the file itself.
//! Invariants: memory is the decoder's state only, bounded whatever the stream says: a zstd
//! window past [`MAX_ZSTD_WINDOW`] and an xz dictionary past [`XZ_MEMORY_LIMIT`] are refused
//! as errors, gzip and lz4 need at most 32 KiB and 4 MiB blocks by their formats.
//! Concatenated members (`cat a.gz b.gz`, `pigz`, `zstd` of several frames, `xz` streams) are
//! read one after the other, as their own tools read them.

use std::io::{BufRead, BufReader, Read};

/// Opens a file and reads its first bytes to tell its codec: the file's bytes from the
/// start (what was read put back in front), and the codec when it is compressed. An error
/// says what failed, at which offset; the caller names the file.
pub fn open_sniffed(path: &std::path::Path) -> Result<(Option<Codec>, impl Read + use<>), String> {
    let f = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    sniffed(f)
}

/// Reads the first bytes of `src` to tell its codec: its bytes from the start (what was read
/// put back in front), and the codec when it is compressed.
pub fn sniffed<R: Read>(mut src: R) -> Result<(Option<Codec>, impl Read), String> {
    let mut head = [0u8; 8];
    let got = read_prefix(&mut src, &mut head)
        .map_err(|(got, e)| format!("offset {got}: read error: {e}"))?;
    let codec = Codec::sniff(&head[..got]);
    Ok((codec, std::io::Cursor::new(head[..got].to_vec()).chain(src)))
}

/// Reads from `src` until `buf` is full or the input ends: how many bytes it holds, or the
/// error with the offset it came at. Interrupted reads are tried again.
pub fn read_prefix<R: Read>(src: &mut R, buf: &mut [u8]) -> Result<usize, (usize, std::io::Error)> {
    let mut got = 0;
    while got < buf.len() {
        match src.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err((got, e)),
        }
    }
    Ok(got)
}

/// A compression format recognized by its magic bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    Gzip,
    Zstd,
    Lz4,
    Xz,
}

impl Codec {
    /// Recognizes a compressed stream by its first bytes.
    pub fn sniff(prefix: &[u8]) -> Option<Codec> {
        if prefix.starts_with(&[0x1f, 0x8b]) {
            Some(Codec::Gzip)
        } else if prefix.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Some(Codec::Zstd)
        } else if prefix.starts_with(&[0x04, 0x22, 0x4d, 0x18]) {
            Some(Codec::Lz4)
        } else if prefix.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
            Some(Codec::Xz)
        } else {
            None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Codec::Gzip => "gzip",
            Codec::Zstd => "zstd",
            Codec::Lz4 => "lz4",
            Codec::Xz => "xz",
        }
    }

    /// The decompressed bytes of `src`, a stream in this format.
    pub fn decoder<'a, R: Read + 'a>(self, src: R) -> Box<dyn Read + 'a> {
        match self {
            Codec::Gzip => Box::new(flate2::read::MultiGzDecoder::new(src)),
            Codec::Zstd => match zstd_decoder(src) {
                Ok(d) => Box::new(Zstd(d)),
                Err(e) => Box::new(Failed(Some(e))),
            },
            Codec::Lz4 => Box::new(Frames {
                src: Some(BufReader::new(src)),
                frame: None::<lz4_flex::frame::FrameDecoder<_>>,
                open: |src| Ok(lz4_flex::frame::FrameDecoder::new(src)),
                inner: |f: lz4_flex::frame::FrameDecoder<_>| f.into_inner(),
            }),
            Codec::Xz => match liblzma::stream::Stream::new_stream_decoder(
                XZ_MEMORY_LIMIT,
                liblzma::stream::CONCATENATED,
            ) {
                Ok(stream) => Box::new(liblzma::read::XzDecoder::new_stream(src, stream)),
                Err(e) => Box::new(Failed(Some(std::io::Error::other(e)))),
            },
        }
    }
}

/// The largest zstd window accepted: what `zstd` uses up to level 19 and for `--long` (27).
pub const MAX_ZSTD_WINDOW: u64 = 1 << MAX_ZSTD_WINDOW_LOG;
/// [`MAX_ZSTD_WINDOW`] as libzstd takes it, a power of two.
const MAX_ZSTD_WINDOW_LOG: u32 = 27;

/// libzstd's streaming decoder over `src`, every frame one after the other (skippable frames
/// skipped), refusing a window past [`MAX_ZSTD_WINDOW`] before allocating it.
fn zstd_decoder<R: Read>(
    src: R,
) -> std::io::Result<zstd::stream::read::Decoder<'static, BufReader<R>>> {
    let mut d = zstd::stream::read::Decoder::with_buffer(BufReader::new(src))?;
    d.window_log_max(MAX_ZSTD_WINDOW_LOG)?;
    Ok(d)
}

/// The zstd decoder, its errors said in the input's terms: libzstd calls a window past the
/// limit "too much memory".
struct Zstd<D>(D);

impl<D: Read> Read for Zstd<D> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(out).map_err(|e| {
            if e.to_string().contains("too much memory") {
                std::io::Error::other(format!(
                    "window larger than {} MiB, refused (libzstd: {e})",
                    MAX_ZSTD_WINDOW >> 20
                ))
            } else {
                e
            }
        })
    }
}

/// The most memory the xz decoder may use: `xz -9` needs 65 MiB, and the dictionary a stream
/// declares is allocated as declared, so the bound is kept near that.
pub const XZ_MEMORY_LIMIT: u64 = 80 << 20;

/// Frames one after the other (lz4): a frame ends, and the next begins if bytes remain.
struct Frames<R: Read, F, O, I> {
    /// The compressed input between frames.
    src: Option<BufReader<R>>,
    frame: Option<F>,
    open: O,
    inner: I,
}

impl<R, F, O, I> Read for Frames<R, F, O, I>
where
    R: Read,
    F: Read,
    O: Fn(BufReader<R>) -> std::io::Result<F>,
    I: Fn(F) -> BufReader<R>,
{
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if let Some(f) = self.frame.as_mut() {
                let n = f.read(out)?;
                if n > 0 || out.is_empty() {
                    return Ok(n);
                }
                self.src = self.frame.take().map(&self.inner);
            }
            let Some(mut src) = self.src.take() else {
                return Ok(0);
            };
            if src.fill_buf()?.is_empty() {
                return Ok(0);
            }
            self.frame = Some((self.open)(src)?);
        }
    }
}

/// A decoder that could not be made: its error, once.
struct Failed(Option<std::io::Error>);

impl Read for Failed {
    fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
        match self.0.take() {
            Some(e) => Err(e),
            None => Ok(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    use crate::input::testing::Trickle;

    fn sample() -> Vec<u8> {
        (0..200_000u32)
            .flat_map(|i| (i.wrapping_mul(2_654_435_761) >> (i % 13)).to_le_bytes())
            .collect()
    }

    fn compress(codec: Codec, data: &[u8]) -> Vec<u8> {
        match codec {
            Codec::Gzip => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Codec::Zstd => zstd::bulk::compress(data, 3).unwrap(),
            Codec::Lz4 => {
                let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Codec::Xz => {
                let mut e = liblzma::write::XzEncoder::new(Vec::new(), 1);
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
        }
    }

    fn decode_all(codec: Codec, r: impl Read) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        codec.decoder(r).read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn every_codec_whole_byte_by_byte_and_in_random_pieces_and_concatenated() {
        let data = sample();
        for codec in [Codec::Gzip, Codec::Zstd, Codec::Lz4, Codec::Xz] {
            let packed = compress(codec, &data);
            assert_eq!(Codec::sniff(&packed), Some(codec), "{codec:?}");
            assert!(decode_all(codec, &packed[..]).unwrap() == data, "{codec:?}");
            for sizes in [&[1][..], &[7, 1, 300, 4096, 3][..]] {
                let t = Trickle::new(&packed, sizes);
                assert!(decode_all(codec, t).unwrap() == data, "{codec:?} {sizes:?}");
            }
            // Two members back to back read as their concatenation.
            let mut two = compress(codec, &data[..1000]);
            two.extend_from_slice(&compress(codec, &data[1000..]));
            assert!(
                decode_all(codec, &two[..]).unwrap() == data,
                "{codec:?} twice"
            );
        }
    }

    #[test]
    fn damaged_and_truncated_streams_are_errors_never_panics() {
        let data = sample();
        for codec in [Codec::Gzip, Codec::Zstd, Codec::Lz4, Codec::Xz] {
            let packed = compress(codec, &data);
            // Cut short: an error or fewer bytes, never more and never a panic (an lz4 frame
            // cut inside its end mark has given every byte already).
            for cut in [packed.len() / 2, 8] {
                let r = decode_all(codec, &packed[..cut]);
                assert!(
                    r.is_err() || r.unwrap().len() < data.len(),
                    "{codec:?} {cut}"
                );
            }
            let r = decode_all(codec, &packed[..packed.len() - 1]);
            assert!(r.is_err() || r.unwrap().len() <= data.len(), "{codec:?}");
            // Bytes flipped in the middle: an error or other bytes.
            let mut bad = packed.clone();
            let mid = bad.len() / 2;
            for b in &mut bad[mid..mid + 16] {
                *b ^= 0x5a;
            }
            assert!(
                decode_all(codec, &bad[..]).is_err_and(|e| !e.to_string().is_empty())
                    || decode_all(codec, &bad[..]).unwrap() != data
            );
        }
    }

    /// Frames of another maker (the pure-Rust encoder), skippable frames between frames (as
    /// `zstd` tools write metadata), and a frame of each level read as one stream.
    #[test]
    fn zstd_frames_of_either_maker_and_skippable_frames_read_as_one_stream() {
        let data = sample();
        let mut packed = ruzstd::encoding::compress_to_vec(
            &data[..5000],
            ruzstd::encoding::CompressionLevel::Fastest,
        );
        // A skippable frame: magic 0x184D2A50, its length, then bytes no decoder reads.
        packed.extend_from_slice(&[0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 1, 2, 3]);
        packed.extend_from_slice(&zstd::bulk::compress(&data[5000..9000], 19).unwrap());
        packed.extend_from_slice(&zstd::bulk::compress(&data[9000..], 1).unwrap());
        assert!(decode_all(Codec::Zstd, &packed[..]).unwrap() == data);
        let t = Trickle::new(&packed, &[1, 5, 999]);
        assert!(decode_all(Codec::Zstd, t).unwrap() == data);
        // Bytes after the last frame that begin no frame: an error, after every byte before.
        packed.extend_from_slice(b"not a frame");
        let mut out = Vec::new();
        let e = Codec::Zstd
            .decoder(&packed[..])
            .read_to_end(&mut out)
            .unwrap_err();
        assert!(!e.to_string().is_empty());
        assert!(out.len() <= data.len() && data.starts_with(&out));
    }

    #[test]
    fn a_zstd_window_past_the_limit_is_refused_before_it_is_allocated() {
        // Frame header: magic, descriptor with a window descriptor, window 2^(10 + 31) bytes.
        let frame = [0x28, 0xb5, 0x2f, 0xfd, 0x00, 0xf8, 0, 0, 0, 0];
        let e = decode_all(Codec::Zstd, &frame[..]).unwrap_err();
        assert!(e.to_string().to_lowercase().contains("window"), "{e}");
    }

    #[test]
    fn sniffing_knows_only_the_four_magics() {
        assert_eq!(Codec::sniff(b"\x1f\x8b\x08"), Some(Codec::Gzip));
        assert_eq!(Codec::sniff(b"\xfd7zXZ\0"), Some(Codec::Xz));
        assert_eq!(Codec::sniff(b"\xfd7zXZ"), None);
        assert_eq!(Codec::sniff(b"\xd4\xc3\xb2\xa1"), None);
        assert_eq!(Codec::sniff(b"{"), None);
        assert_eq!(Codec::sniff(b""), None);
    }
}
