//! Text from a serve, made safe to print for a human: what the server stores was written by whoever
//! called it (an audit record's path id, an executor's name, an event's summary), and a newline or an
//! escape sequence in it would forge lines or rewrite the terminal. One function, used by every
//! human-readable output of the command line and by this client's own error messages.

use std::borrow::Cow;

/// `text` with every control character written out as an escape: `\n`, `\r`, `\t`, `\x1b`, `\u{9b}`
/// (C0, DEL and C1), and the bidirectional overrides and isolates (U+202A to U+202E, U+2066 to
/// U+2069), which reorder what a terminal shows. Everything else, borrowed as it is.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(unsafe_to_print) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 && unsafe_to_print(c) => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if unsafe_to_print(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn unsafe_to_print(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn control_characters_are_written_out_and_the_rest_is_kept() {
        assert!(matches!(printable("plain text, é, 日本"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(printable("a\nb\r\tc"), "a\\nb\\r\\tc");
        assert_eq!(printable("x\x1b[2Ky\x07\x7f"), "x\\x1b[2Ky\\x07\\x7f");
        assert_eq!(printable("\u{9b}31m \u{202e}txt.exe"), "\\u{9b}31m \\u{202e}txt.exe");
        assert_eq!(printable("\0"), "\\x00");
    }
}
