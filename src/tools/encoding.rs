//! Text encodings of files in the workspace: detection, decoding that never
//! replaces a byte with U+FFFD behind the caller's back, and encoding back so
//! that the bytes an edit did not touch stay byte-identical.
//!
//! Detection, in order: a byte-order mark (UTF-8, UTF-16LE, UTF-16BE); a NUL
//! byte in the head means binary; valid UTF-8; otherwise `chardetng` (the
//! detector Firefox uses) guesses a legacy encoding, which must then decode
//! the file without a single malformed sequence. UTF-16 without a BOM is
//! treated as binary: nothing reliable tells it apart.
//!
//! Not here: reading files or deciding what a tool shows.

use std::io::Read;

use encoding_rs::{DecoderResult, Encoding, UTF_8, UTF_16BE, UTF_16LE};

/// Bytes looked at for a NUL (binary) and for image/PDF signatures, as
/// ripgrep and git look at the head of a file.
pub const SNIFF_BYTES: usize = 8192;

/// Size of one read while streaming a file.
pub const CHUNK_BYTES: usize = 64 * 1024;

const BOM_UTF8: &[u8] = &[0xEF, 0xBB, 0xBF];
const BOM_UTF16LE: &[u8] = &[0xFF, 0xFE];
const BOM_UTF16BE: &[u8] = &[0xFE, 0xFF];

/// The encoding of a text file, as written on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextEncoding {
    Utf8,
    /// UTF-8 starting with the bytes EF BB BF.
    Utf8Bom,
    /// UTF-16 little-endian starting with FF FE.
    Utf16LeBom,
    /// UTF-16 big-endian starting with FE FF.
    Utf16BeBom,
    /// A legacy (non-Unicode) encoding guessed by `chardetng`, e.g.
    /// windows-1252 for Latin-1 sources.
    Legacy(&'static Encoding),
}

impl TextEncoding {
    /// A name for people and models, e.g. `UTF-8 with BOM`, `windows-1252`.
    pub fn name(&self) -> String {
        match self {
            Self::Utf8 => "UTF-8".into(),
            Self::Utf8Bom => "UTF-8 with BOM".into(),
            Self::Utf16LeBom => "UTF-16LE with BOM".into(),
            Self::Utf16BeBom => "UTF-16BE with BOM".into(),
            Self::Legacy(enc) if enc.is_single_byte() => {
                format!("{} (legacy single-byte encoding, detected)", enc.name())
            }
            Self::Legacy(enc) => format!("{} (legacy encoding, detected)", enc.name()),
        }
    }

    /// The byte-order mark this encoding writes first (empty for none).
    pub fn bom(&self) -> &'static [u8] {
        match self {
            Self::Utf8Bom => BOM_UTF8,
            Self::Utf16LeBom => BOM_UTF16LE,
            Self::Utf16BeBom => BOM_UTF16BE,
            Self::Utf8 | Self::Legacy(_) => &[],
        }
    }

    /// The `encoding_rs` decoder's encoding.
    fn codec(&self) -> &'static Encoding {
        match self {
            Self::Utf8 | Self::Utf8Bom => UTF_8,
            Self::Utf16LeBom => UTF_16LE,
            Self::Utf16BeBom => UTF_16BE,
            Self::Legacy(enc) => enc,
        }
    }

    /// Whether `\n` in the text is always the byte 0x0A on disk (true for
    /// UTF-8 and every legacy encoding `chardetng` returns).
    pub fn ascii_compatible(&self) -> bool {
        !matches!(self, Self::Utf16LeBom | Self::Utf16BeBom)
    }

    /// `text` as bytes in this encoding, BOM first. Fails on the first
    /// character a legacy encoding cannot represent (never writes a `?` or a
    /// numeric character reference in its place).
    pub fn encode(&self, text: &str) -> Result<Vec<u8>, Unmappable> {
        let mut out = self.bom().to_vec();
        match self {
            Self::Utf8 | Self::Utf8Bom => out.extend_from_slice(text.as_bytes()),
            // encoding_rs encodes UTF-16 as UTF-8 (the WHATWG rule for
            // forms), so UTF-16 is encoded here.
            Self::Utf16LeBom => out.extend(text.encode_utf16().flat_map(u16::to_le_bytes)),
            Self::Utf16BeBom => out.extend(text.encode_utf16().flat_map(u16::to_be_bytes)),
            Self::Legacy(enc) => {
                let (bytes, _, had_errors) = enc.encode(text);
                if had_errors {
                    let ch = text
                        .chars()
                        .find(|c| enc.encode(c.encode_utf8(&mut [0; 4])).2)
                        .unwrap_or(char::REPLACEMENT_CHARACTER);
                    return Err(Unmappable {
                        ch,
                        encoding: enc.name(),
                    });
                }
                out.extend_from_slice(&bytes);
            }
        }
        Ok(out)
    }
}

/// A character the file's encoding cannot represent.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the character {ch:?} (U+{:04X}) cannot be written in {encoding}", *ch as u32)]
pub struct Unmappable {
    pub ch: char,
    pub encoding: &'static str,
}

/// What the head of a file says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniffed {
    /// A byte-order mark fixes the encoding.
    Bom(TextEncoding),
    /// An image or a PDF, with its MIME type.
    Media(&'static str),
    /// A NUL byte without a UTF-16 BOM.
    Binary,
    /// Text of an encoding still to be detected from the whole file.
    Unknown,
}

/// Classifies a file by its first bytes (at least [`SNIFF_BYTES`] of them,
/// or the whole file when shorter).
pub fn sniff(head: &[u8]) -> Sniffed {
    if head.starts_with(BOM_UTF8) {
        return Sniffed::Bom(TextEncoding::Utf8Bom);
    }
    if head.starts_with(BOM_UTF16LE) {
        return Sniffed::Bom(TextEncoding::Utf16LeBom);
    }
    if head.starts_with(BOM_UTF16BE) {
        return Sniffed::Bom(TextEncoding::Utf16BeBom);
    }
    let window = &head[..head.len().min(SNIFF_BYTES)];
    // Media is a PDF, or an image whose head is not UTF-8 text (see below):
    // a text head that does not open like a PDF decides without running
    // every signature matcher of `infer` (most reads are of source text).
    if !window.starts_with(b"%PDF") && is_utf8_text(window) {
        return Sniffed::Unknown;
    }
    if let Some(kind) = infer::get(window) {
        let mime = kind.mime_type();
        // Some image signatures are two or three printable bytes ("BM" for
        // BMP, "GIF"): a head that reads as UTF-8 text is text.
        if mime == "application/pdf" || (mime.starts_with("image/") && !is_utf8_text(window)) {
            return Sniffed::Media(mime);
        }
    }
    if window.contains(&0) {
        return Sniffed::Binary;
    }
    Sniffed::Unknown
}

/// No NUL, and valid UTF-8 except maybe a character cut at the end.
fn is_utf8_text(head: &[u8]) -> bool {
    !head.contains(&0)
        && match std::str::from_utf8(head) {
            Ok(_) => true,
            Err(e) => e.error_len().is_none(),
        }
}

/// Why a file is not text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotText {
    /// A NUL byte in the head.
    Binary,
    /// An image or PDF.
    Media(&'static str),
    /// No supported encoding decodes it without a malformed sequence.
    Undecodable { reason: String },
}

/// Decoded text and the encoding to write it back in.
#[derive(Debug, Clone)]
pub struct Decoded {
    /// The text without the BOM.
    pub text: String,
    pub encoding: TextEncoding,
}

/// Decodes a whole file held in memory. Never replaces a malformed byte.
pub fn decode(bytes: &[u8]) -> Result<Decoded, NotText> {
    let encoding = match sniff(bytes) {
        Sniffed::Bom(enc) => enc,
        Sniffed::Media(mime) => return Err(NotText::Media(mime)),
        Sniffed::Binary => return Err(NotText::Binary),
        Sniffed::Unknown => match std::str::from_utf8(bytes) {
            Ok(text) => {
                return Ok(Decoded {
                    text: text.to_string(),
                    encoding: TextEncoding::Utf8,
                });
            }
            Err(_) => {
                let mut detector = chardetng::EncodingDetector::new();
                detector.feed(bytes, true);
                legacy(detector.guess(None, false))?
            }
        },
    };
    let body = &bytes[encoding.bom().len()..];
    match encoding
        .codec()
        .decode_without_bom_handling_and_without_replacement(body)
    {
        Some(text) => Ok(Decoded {
            text: text.into_owned(),
            encoding,
        }),
        None => Err(NotText::Undecodable {
            reason: format!("it is not valid {}", encoding.name()),
        }),
    }
}

fn legacy(enc: &'static Encoding) -> Result<TextEncoding, NotText> {
    if enc == UTF_8 || enc == UTF_16LE || enc == UTF_16BE {
        return Err(NotText::Undecodable {
            reason: "it is neither valid UTF-8 nor a legacy encoding".into(),
        });
    }
    Ok(TextEncoding::Legacy(enc))
}

/// Detects the encoding of a file by streaming it: BOM, binary and media
/// from the head, then UTF-8 validity of the whole file, then `chardetng`
/// over the whole file. Memory stays at one chunk.
pub fn detect_stream<R: Read>(
    mut open: impl FnMut() -> std::io::Result<R>,
) -> std::io::Result<Result<TextEncoding, NotText>> {
    let mut reader = open()?;
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    (&mut reader)
        .take(SNIFF_BYTES as u64)
        .read_to_end(&mut head)?;
    match sniff(&head) {
        Sniffed::Bom(enc) => return Ok(Ok(enc)),
        Sniffed::Media(mime) => return Ok(Err(NotText::Media(mime))),
        Sniffed::Binary => return Ok(Err(NotText::Binary)),
        Sniffed::Unknown => {}
    }
    // Pass 1: is the whole file UTF-8? An incomplete sequence at a chunk's
    // end is carried into the next chunk.
    let mut carry = head;
    let mut chunk = vec![0u8; CHUNK_BYTES];
    let valid_utf8 = loop {
        let n = reader.read(&mut chunk)?;
        carry.extend_from_slice(&chunk[..n]);
        match std::str::from_utf8(&carry) {
            Ok(_) => carry.clear(),
            Err(e) if e.error_len().is_none() && n > 0 => {
                let rest = carry.split_off(e.valid_up_to());
                carry = rest;
            }
            Err(_) => break false,
        }
        if n == 0 {
            break carry.is_empty();
        }
    };
    if valid_utf8 {
        return Ok(Ok(TextEncoding::Utf8));
    }
    // Pass 2: the legacy encoding that fits the whole file best.
    let mut reader = open()?;
    let mut detector = chardetng::EncodingDetector::new();
    loop {
        let n = reader.read(&mut chunk)?;
        detector.feed(&chunk[..n], n == 0);
        if n == 0 {
            break;
        }
    }
    Ok(legacy(detector.guess(None, false)))
}

/// Streams a file's text in `encoding` (after its BOM) to `sink`, chunk by
/// chunk, until the file ends or `sink` returns false (then after the rest
/// of the chunk read last, so the reader stands where the text given ends). A malformed sequence
/// stops with [`NotText::Undecodable`]: nothing is replaced.
pub fn decode_stream<R: Read>(
    mut reader: R,
    encoding: TextEncoding,
    mut sink: impl FnMut(&str) -> bool,
) -> std::io::Result<Result<(), NotText>> {
    let mut bom = vec![0u8; encoding.bom().len()];
    reader.read_exact(&mut bom)?;
    let mut decoder = encoding.codec().new_decoder_without_bom_handling();
    let mut chunk = vec![0u8; CHUNK_BYTES];
    let mut text = String::new();
    let mut stop = false;
    loop {
        let n = reader.read(&mut chunk)?;
        let last = n == 0;
        let mut src = &chunk[..n];
        loop {
            text.clear();
            let need = decoder
                .max_utf8_buffer_length_without_replacement(src.len())
                .unwrap_or(CHUNK_BYTES * 3);
            text.reserve(need);
            let (result, read) = decoder.decode_to_string_without_replacement(src, &mut text, last);
            src = &src[read..];
            if !text.is_empty() && !sink(&text) {
                stop = true;
            }
            match result {
                DecoderResult::InputEmpty => break,
                DecoderResult::OutputFull => continue,
                DecoderResult::Malformed(_, _) => {
                    return Ok(Err(NotText::Undecodable {
                        reason: format!("it is not valid {}", encoding.name()),
                    }));
                }
            }
        }
        if last || stop {
            return Ok(Ok(()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_each_encoding_byte_exactly() {
        let cases: Vec<Vec<u8>> = vec![
            b"plain\n".to_vec(),
            [BOM_UTF8, "caf\u{e9}\r\n".as_bytes()].concat(),
            [
                BOM_UTF16LE,
                &"h\u{e9}\n"
                    .encode_utf16()
                    .flat_map(u16::to_le_bytes)
                    .collect::<Vec<_>>(),
            ]
            .concat(),
            [
                BOM_UTF16BE,
                &"h\u{e9}\n"
                    .encode_utf16()
                    .flat_map(u16::to_be_bytes)
                    .collect::<Vec<_>>(),
            ]
            .concat(),
            b"Fran\xe7ais \xe9t\xe9 na\xefve gar\xe7on d\xe9j\xe0\n".to_vec(),
        ];
        for bytes in cases {
            let d = decode(&bytes).unwrap();
            assert!(!d.text.contains('\u{fffd}'), "{:?}", d.encoding);
            assert_eq!(
                d.encoding.encode(&d.text).unwrap(),
                bytes,
                "{:?}",
                d.encoding
            );
        }
    }

    #[test]
    fn latin1_is_detected_as_legacy_and_binary_as_binary() {
        let d = decode(b"Fran\xe7ais \xe9t\xe9 na\xefve\n").unwrap();
        assert!(matches!(d.encoding, TextEncoding::Legacy(_)));
        assert_eq!(d.text, "Fran\u{e7}ais \u{e9}t\u{e9} na\u{ef}ve\n");
        assert_eq!(decode(b"ab\0cd").unwrap_err(), NotText::Binary);
    }

    #[test]
    fn short_image_signatures_in_text_stay_text() {
        assert_eq!(sniff(b"BMW and GIF files\n"), Sniffed::Unknown);
        assert_eq!(
            sniff(b"GIF89a\x01\x00\x01\x00\x80\x00\x00"),
            Sniffed::Media("image/gif")
        );
        assert_eq!(sniff(b"%PDF-1.7\n"), Sniffed::Media("application/pdf"));
    }

    #[test]
    fn unmappable_character_is_refused() {
        let e = TextEncoding::Legacy(encoding_rs::WINDOWS_1252)
            .encode("a\u{4e2d}")
            .unwrap_err();
        assert_eq!(e.ch, '\u{4e2d}');
    }

    #[test]
    fn streaming_detection_agrees_with_whole_file_detection() {
        let mut big = "\u{e9}".repeat(CHUNK_BYTES);
        big.push('x');
        let bytes = big.into_bytes();
        let enc = detect_stream(|| Ok(std::io::Cursor::new(bytes.clone())))
            .unwrap()
            .unwrap();
        assert_eq!(enc, TextEncoding::Utf8);
        let mut text = String::new();
        decode_stream(std::io::Cursor::new(bytes.clone()), enc, |s| {
            text.push_str(s);
            true
        })
        .unwrap()
        .unwrap();
        assert_eq!(text.as_bytes(), &bytes[..]);
    }
}
