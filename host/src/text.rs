//! Text from elsewhere — a member cluster's verdict, a server the kubectl
//! plugin asked — made safe to print: every control character (an escape
//! sequence that moves the cursor or retitles a window, a bell, a carriage
//! return that rewrites a row, a newline that forges one) and every
//! bidirectional control is written as its escape instead, so that what
//! another party says is shown, never obeyed, in a terminal or a log.

/// The message of an error answer, as whoever refused said it: verdict's
/// (`error.message`), the API server's (a `Status`), or the start of the
/// text (its first 200 bytes). Not yet escaped: [`printable`] is for where
/// it is shown.
pub fn error_text(body: &[u8]) -> String {
    let message = match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(v) if v["error"]["message"].is_string() => {
            v["error"]["message"].as_str().map(str::to_string)
        }
        Ok(v) if v["kind"] == "Status" => v["message"].as_str().map(str::to_string),
        _ => None,
    };
    message.unwrap_or_else(|| {
        String::from_utf8_lossy(&body[..body.len().min(200)])
            .trim()
            .to_string()
    })
}

/// `text` with every control and bidirectional character escaped.
pub fn printable(text: &str) -> String {
    if !text.chars().any(needs_escape) {
        return text.to_string();
    }
    text.chars()
        .map(|c| {
            if needs_escape(c) {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Control characters, and the invisible ones that reorder text
/// (U+202A–U+202E, U+2066–U+2069).
fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_whose_message_they_are() {
        assert_eq!(
            error_text(br#"{"error": {"code": "not-found", "message": "no set shop/web"}}"#),
            "no set shop/web"
        );
        assert_eq!(
            error_text(br#"{"kind": "Status", "message": "services \"verdict\" not found"}"#),
            r#"services "verdict" not found"#
        );
        assert_eq!(error_text(b"plain words\n"), "plain words");
        assert_eq!(error_text(&[b'x'; 1000]).len(), 200);
    }

    #[test]
    fn controls_are_shown_as_escapes() {
        let hostile = "web\u{1b}]0;title\u{7}\u{1b}[2J\r\nforged\u{202e}";
        let shown = printable(hostile);
        assert!(!shown.chars().any(needs_escape), "{shown:?}");
        assert!(
            shown.contains("\\u{1b}]0;title") && shown.contains("\\n"),
            "{shown}"
        );
        assert_eq!(printable("plain text: ✓"), "plain text: ✓");
    }
}
