//! Text is text: what a provider or a sender wrote (a label, an error, a result) is shown, never
//! obeyed. Control characters could forge a log line (a newline and a fake timestamp) or an
//! e-mail header; bidirectional overrides make "evil" read "live". Each way out has its rule:
//! - the log: every such character escaped (`escaped`: `\n`, `\u{202e}`), so one event is one
//!   line and what was sent can still be read;
//! - a title or an e-mail subject: one line, such characters removed (`one_line`);
//! - a notification's text: line breaks kept, the rest removed (`shown`).
//!
//! The UI shows them visibly instead (ui/src/format.ts, `visible`).

use std::borrow::Cow;

/// Whether `c` changes how text around it is laid out or read rather than being a letter: a
/// control character (C0, DEL, C1), a bidirectional mark, embedding, override or isolate, or a
/// line or paragraph separator.
pub fn is_layout_control(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
}

/// Every layout control escaped as Rust writes it (`\n`, `\t`, `\u{202e}`), and `\` as `\\` where
/// there is one to escape (so an escape cannot be forged either); the text itself when there is
/// none.
pub fn escaped(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_layout_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c == '\\' {
            out.push_str("\\\\");
        } else if is_layout_control(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// One line: line breaks and tabs as one space, every other layout control removed.
pub fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '\n' | '\r' | '\t' | '\u{2028}' | '\u{2029}') {
            if !out.ends_with(' ') {
                out.push(' ');
            }
        } else if !is_layout_control(c) {
            out.push(c);
        }
    }
    out
}

/// Text shown in a notification's body: its line breaks kept, every other layout control removed.
pub fn shown(text: &str) -> String {
    text.chars().filter(|c| *c == '\n' || !is_layout_control(*c)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forged_line_and_a_reversed_word_stay_visible_text() {
        let forged = "nightly\n2026-12-03T10:00:00Z  WARN nevermiss: fake";
        assert_eq!(escaped(forged), "nightly\\n2026-12-03T10:00:00Z  WARN nevermiss: fake");
        assert_eq!(escaped("\u{202E}live"), "\\u{202e}live");
        assert_eq!(escaped("a\\nb\n"), "a\\\\nb\\n", "a written backslash cannot pass for an escape");
        assert!(matches!(escaped("plain ünïcode"), Cow::Borrowed(_)));
        assert_eq!(one_line("Failed:\r\nBcc: x@evil\u{202E}"), "Failed: Bcc: x@evil");
        assert_eq!(shown("line one\nline\u{0007} two\u{2066}"), "line one\nline two");
    }
}
