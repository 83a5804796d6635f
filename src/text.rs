//! How a client string is repeated in a message: a short prefix, never the
//! whole (a leaf used by every layer's errors).

use std::fmt;

/// Bytes of a client string an error message repeats (the rest is elided
/// with its length).
pub const ECHO_PREFIX_BYTES: usize = 64;

/// A client string as an error message shows it: at most
/// [`ECHO_PREFIX_BYTES`] (cut on a character boundary), then `…` and the
/// full length.
pub struct Shown<'a>(pub &'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        if s.len() <= ECHO_PREFIX_BYTES {
            return f.write_str(s);
        }
        let mut end = ECHO_PREFIX_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        write!(f, "{}… ({} bytes)", &s[..end], s.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_keeps_a_short_prefix_on_a_char_boundary() {
        assert_eq!(Shown("abc").to_string(), "abc");
        let long = "é".repeat(100);
        let shown = Shown(&long).to_string();
        assert_eq!(shown, format!("{}… (200 bytes)", "é".repeat(32)));
    }
}
