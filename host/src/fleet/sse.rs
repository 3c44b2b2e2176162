//! Server-Sent Events read from bytes as they arrive, with a bound on
//! each event: a member that sends one endless line, or an event larger
//! than the bound, is an error, not a buffer that grows. (The crates that
//! parse SSE keep whatever a line holds until it ends.)

/// One thing read from a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A comment line (verdict's heartbeats): the member is there.
    Comment,
    /// A whole event.
    Event {
        /// Its `event:` field (`message` when none).
        kind: String,
        /// Its `id:` field.
        id: Option<String>,
        /// Its `data:` lines, joined by newlines.
        data: String,
    },
}

/// A line or an event past the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an event of the stream is larger than {0} bytes")]
pub struct TooLarge(pub usize);

/// The parser's state between chunks.
#[derive(Debug)]
pub struct Parser {
    max: usize,
    line: Vec<u8>,
    kind: String,
    id: Option<String>,
    data: String,
    /// Whether any field of the event under way was read.
    started: bool,
    /// The last byte was `\r`: a `\n` right after it ends nothing more.
    after_cr: bool,
}

impl Parser {
    /// Events and lines of at most `max` bytes.
    pub fn new(max: usize) -> Self {
        Self {
            max,
            line: Vec::new(),
            kind: String::new(),
            id: None,
            data: String::new(),
            started: false,
            after_cr: false,
        }
    }

    /// Read a chunk; what it completes is pushed to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<Item>) -> Result<(), TooLarge> {
        for &byte in chunk {
            match byte {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    self.end_line(out)?;
                }
                _ => {
                    self.after_cr = false;
                    if self.line.len() + self.data.len() >= self.max {
                        return Err(TooLarge(self.max));
                    }
                    self.line.push(byte);
                }
            }
        }
        Ok(())
    }

    fn end_line(&mut self, out: &mut Vec<Item>) -> Result<(), TooLarge> {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            if self.started {
                out.push(Item::Event {
                    kind: if self.kind.is_empty() {
                        "message".into()
                    } else {
                        std::mem::take(&mut self.kind)
                    },
                    id: self.id.take(),
                    data: std::mem::take(&mut self.data),
                });
                self.kind.clear();
                self.started = false;
            }
            return Ok(());
        }
        let line = String::from_utf8_lossy(&line);
        if line.starts_with(':') {
            out.push(Item::Comment);
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        self.started = true;
        match field {
            "event" => self.kind = value.to_string(),
            "id" if !value.contains('\0') => self.id = Some(value.to_string()),
            "data" => {
                if self.data.len() + value.len() + 1 > self.max {
                    return Err(TooLarge(self.max));
                }
                if !self.data.is_empty() {
                    self.data.push('\n');
                }
                self.data.push_str(value);
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(chunks: &[&[u8]], max: usize) -> Result<Vec<Item>, TooLarge> {
        let mut parser = Parser::new(max);
        let mut out = Vec::new();
        for chunk in chunks {
            parser.feed(chunk, &mut out)?;
        }
        Ok(out)
    }

    #[test]
    fn events_split_anywhere_read_whole() {
        let text =
            b"id: 7\nevent: verdict\ndata: {\"a\":\ndata: 1}\n\n: heartbeat\n\ndata: x\r\n\r\n";
        let whole = parse(&[text], 1024).unwrap();
        assert_eq!(
            whole,
            [
                Item::Event {
                    kind: "verdict".into(),
                    id: Some("7".into()),
                    data: "{\"a\":\n1}".into()
                },
                Item::Comment,
                Item::Event {
                    kind: "message".into(),
                    id: None,
                    data: "x".into()
                },
            ]
        );
        // Byte by byte, the same.
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(parse(&bytes, 1024).unwrap(), whole);
    }

    #[test]
    fn an_endless_line_or_a_large_event_is_refused() {
        let endless = vec![b'a'; 10_000];
        assert_eq!(parse(&[&endless], 4096), Err(TooLarge(4096)));
        let many_lines = "data: 0123456789\n".repeat(1000);
        assert_eq!(parse(&[many_lines.as_bytes()], 4096), Err(TooLarge(4096)));
        // Garbage that is not SSE yields nothing, and no error within the bound.
        assert_eq!(parse(&[b"<html>\n\n"], 4096).unwrap().len(), 1);
    }
}
