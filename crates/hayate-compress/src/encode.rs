//! Encoders for br (the pure-Rust `brotli` crate), zstd and gzip (`flate2`),
//! one-shot for stored variants and incremental for streamed bodies.
//!
//! Levels are per coding; [`Levels::STATIC`] is for compress-once variants
//! built in the background, [`Levels::DYNAMIC`] for bodies compressed while
//! they are sent.

use std::io::{self, Write};

use hayate_core::Coding;

/// A compression level for each coding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Levels {
    /// Brotli quality, 0-11.
    pub br: u32,
    /// Zstandard level, 1-22.
    pub zstd: i32,
    /// Gzip level, 1-9.
    pub gzip: u32,
}

impl Levels {
    /// Compress-once variants: the smallest output, paid once per file.
    ///
    /// Measured with `cargo run --release -p hayate-compress --example
    /// levels -- FILE` on 100 KiB of minified JavaScript (rustdoc's
    /// search.js + main.js), CPU time of one thread on the shared 2-core VM:
    ///
    /// | coding | level | bytes | ms | | level | bytes | ms |
    /// |---|---|---|---|---|---|---|---|
    /// | br | 11 | 21,425 | 228 | | 9 | 22,909 | 31 |
    /// | zstd | 19 | 22,580 | 127 | | 22 | 22,580 | 532 |
    /// | gzip | 9 | 23,977 | 4.3 | | 6 | 23,999 | 3.6 |
    ///
    /// A quarter of a second once per file, off the request path, buys 7 %
    /// over br 9; zstd 22 costs four times zstd 19 for nothing.
    pub const STATIC: Levels = Levels {
        br: 11,
        zstd: 19,
        gzip: 9,
    };

    /// Streamed (proxied) bodies: fast levels, paid per response. Same
    /// file: br 4 25,382 B in 3.6 ms (br 5: 23,378 B, 4.9 ms), zstd 3
    /// 26,224 B in 0.7 ms, gzip 5 24,241 B in 2.1 ms (gzip 6: 23,999 B,
    /// 3.6 ms); on 30 KB of Markdown br 4 and gzip 5 both take ~1.1 ms and
    /// br 4 is 2 % larger, br 5 6 % smaller for 60 % more CPU.
    pub const DYNAMIC: Levels = Levels {
        br: 4,
        zstd: 3,
        gzip: 5,
    };

    /// The level of `coding` (0 for identity).
    pub fn get(&self, coding: Coding) -> i32 {
        match coding {
            Coding::Br => self.br as i32,
            Coding::Zstd => self.zstd,
            Coding::Gzip => self.gzip as i32,
            Coding::Identity => 0,
        }
    }

    /// These levels with `coding` set to `level`, clamped to its range.
    pub fn with(mut self, coding: Coding, level: i32) -> Levels {
        match coding {
            Coding::Br => self.br = level.clamp(0, 11) as u32,
            Coding::Zstd => self.zstd = level.clamp(1, 22),
            Coding::Gzip => self.gzip = level.clamp(1, 9) as u32,
            Coding::Identity => {}
        }
        self
    }
}

/// Brotli window (log2 bytes) of stored variants: the format's default.
const BR_WINDOW_STATIC: u32 = 22;
/// Brotli and zstd window of streamed bodies: 256 KiB keeps each
/// concurrent stream's encoder state small (a 4 MiB window would cost that
/// much per response in flight).
const STREAM_WINDOW: u32 = 18;
/// Brotli's internal output buffer.
const BR_BUFFER: usize = 16 * 1024;

/// An incremental encoder writing into an in-memory buffer that the caller
/// drains with [`Encoder::take_output`].
pub enum Encoder {
    /// Brotli.
    Br(Box<brotli::CompressorWriter<Vec<u8>>>),
    /// Zstandard.
    Zstd(Box<zstd::stream::write::Encoder<'static, Vec<u8>>>),
    /// Gzip.
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Encoder::Br(_) => "Encoder(br)",
            Encoder::Zstd(_) => "Encoder(zstd)",
            Encoder::Gzip(_) => "Encoder(gzip)",
        })
    }
}

impl Encoder {
    /// An encoder for `coding` at `level`; `streaming` picks a small window.
    /// Identity has no encoder.
    pub fn new(coding: Coding, level: i32, streaming: bool) -> io::Result<Encoder> {
        let levels = Levels::DYNAMIC.with(coding, level);
        Ok(match coding {
            Coding::Br => {
                let window = if streaming {
                    STREAM_WINDOW
                } else {
                    BR_WINDOW_STATIC
                };
                Encoder::Br(Box::new(brotli::CompressorWriter::new(
                    Vec::new(),
                    BR_BUFFER,
                    levels.br,
                    window,
                )))
            }
            Coding::Zstd => {
                let mut e = zstd::stream::write::Encoder::new(Vec::new(), levels.zstd)?;
                if streaming {
                    e.window_log(STREAM_WINDOW)?;
                }
                Encoder::Zstd(Box::new(e))
            }
            Coding::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(levels.gzip),
            )),
            Coding::Identity => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "identity has no encoder",
                ))
            }
        })
    }

    /// Feeds input.
    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            Encoder::Br(e) => e.write_all(data),
            Encoder::Zstd(e) => e.write_all(data),
            Encoder::Gzip(e) => e.write_all(data),
        }
    }

    /// Makes everything written so far decodable by the client (a sync
    /// flush), at some cost in ratio.
    pub fn flush(&mut self) -> io::Result<()> {
        match self {
            Encoder::Br(e) => e.flush(),
            Encoder::Zstd(e) => e.flush(),
            Encoder::Gzip(e) => e.flush(),
        }
    }

    /// Bytes produced so far and not yet taken.
    pub fn output_len(&mut self) -> usize {
        self.sink().len()
    }

    /// Takes the bytes produced so far.
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(self.sink())
    }

    /// Ends the stream; returns the bytes not yet taken.
    pub fn finish(self) -> io::Result<Vec<u8>> {
        match self {
            Encoder::Br(e) => Ok(e.into_inner()),
            Encoder::Zstd(e) => e.finish(),
            Encoder::Gzip(e) => e.finish(),
        }
    }

    fn sink(&mut self) -> &mut Vec<u8> {
        // The encoders only ever append to their sink, so draining it
        // between writes is safe.
        match self {
            Encoder::Br(e) => e.get_mut(),
            Encoder::Zstd(e) => e.get_mut(),
            Encoder::Gzip(e) => e.get_mut(),
        }
    }
}

/// Compresses `data` in one go (stored variants).
pub fn compress(coding: Coding, level: i32, data: &[u8]) -> io::Result<Vec<u8>> {
    let mut e = Encoder::new(coding, level, false)?;
    e.write(data)?;
    let mut out = e.take_output();
    out.extend_from_slice(&e.finish()?);
    Ok(out)
}

/// Decodes `data` (tests and tools; hayate never decodes on the hot path).
pub fn decompress(coding: Coding, data: &[u8]) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    match coding {
        Coding::Br => {
            brotli::Decompressor::new(data, 4096).read_to_end(&mut out)?;
        }
        Coding::Zstd => {
            zstd::stream::read::Decoder::new(data)?.read_to_end(&mut out)?;
        }
        Coding::Gzip => {
            flate2::read::GzDecoder::new(data).read_to_end(&mut out)?;
        }
        Coding::Identity => out.extend_from_slice(data),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| b"function hayate(x) { return x * 2; }\n"[i % 37] ^ ((i / 997) as u8 % 3))
            .collect()
    }

    #[test]
    fn one_shot_round_trips_for_every_coding_and_size() {
        for coding in Coding::COMPRESSED {
            for level in [Levels::STATIC.get(coding), Levels::DYNAMIC.get(coding)] {
                for n in [0, 1, 255, 256, 1023, 1024, 1025, 100_000] {
                    let data = sample(n);
                    let packed = compress(coding, level, &data).unwrap();
                    assert_eq!(decompress(coding, &packed).unwrap(), data, "{coding:?} {n}");
                    if n >= 1024 {
                        assert!(packed.len() < n / 2, "{coding:?} {n}: {}", packed.len());
                    }
                }
            }
        }
    }

    #[test]
    fn streaming_with_flushes_round_trips_and_each_flush_is_decodable() {
        for coding in Coding::COMPRESSED {
            let mut e = Encoder::new(coding, Levels::DYNAMIC.get(coding), true).unwrap();
            let mut sent = Vec::new();
            let mut input = Vec::new();
            for i in 0..50 {
                let chunk = sample(100 + i * 37);
                e.write(&chunk).unwrap();
                input.extend_from_slice(&chunk);
                if i % 7 == 0 {
                    e.flush().unwrap();
                    sent.extend(e.take_output());
                    // Everything written so far can be decoded already.
                    let partial = decode_prefix(coding, &sent);
                    assert_eq!(partial, input, "{coding:?} after chunk {i}");
                }
            }
            sent.extend(e.take_output());
            sent.extend(e.finish().unwrap());
            assert_eq!(decompress(coding, &sent).unwrap(), input, "{coding:?}");
        }
    }

    /// Decodes as much of an unfinished stream as possible.
    fn decode_prefix(coding: Coding, data: &[u8]) -> Vec<u8> {
        use std::io::Read;
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        let mut reader: Box<dyn Read + '_> = match coding {
            Coding::Br => Box::new(brotli::Decompressor::new(data, 4096)),
            Coding::Zstd => Box::new(zstd::stream::read::Decoder::new(data).unwrap()),
            Coding::Gzip => Box::new(flate2::read::GzDecoder::new(data)),
            Coding::Identity => Box::new(data),
        };
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        out
    }

    #[test]
    fn levels_clamp_to_each_codings_range() {
        let l = Levels::STATIC
            .with(Coding::Br, 40)
            .with(Coding::Zstd, -5)
            .with(Coding::Gzip, 0);
        assert_eq!((l.br, l.zstd, l.gzip), (11, 1, 1));
        assert!(Encoder::new(Coding::Identity, 0, true).is_err());
    }
}
