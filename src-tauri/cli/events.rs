//! The instance's live event stream (`GET /api/events`, Server-Sent Events), read event by event.

use anyhow::Context;

use nevermiss_engine::changes::Change;

/// One Server-Sent Event of the instance's stream, as `wait` needs it.
pub enum Event {
    Hello,
    /// Boxed: a change carries a whole job or the metrics, the other events nothing.
    Change(Box<Change>),
    Resync,
    Other,
}

/// The instance's event stream, read event by event from the response body.
pub struct Events {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl Events {
    pub fn new(response: reqwest::Response) -> Events {
        Events { response, buffer: Vec::new() }
    }

    pub async fn until_hello(&mut self) -> anyhow::Result<()> {
        loop {
            match self.next().await? {
                Some(Event::Hello) => return Ok(()),
                Some(_) => continue,
                None => anyhow::bail!("the event stream ended before it began"),
            }
        }
    }

    /// The next event; `None` when the stream ended (the instance stopped).
    pub async fn next(&mut self) -> anyhow::Result<Option<Event>> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
                if let Some(event) = parse_block(&String::from_utf8_lossy(&block)) {
                    return Ok(Some(event));
                }
                continue;
            }
            match self.response.chunk().await.context("the event stream broke")? {
                Some(chunk) => self.buffer.extend_from_slice(&chunk),
                None => return Ok(None),
            }
        }
    }
}

/// An event from one SSE block (`event:` and `data:` lines); `None` for a comment (keep-alive).
fn parse_block(block: &str) -> Option<Event> {
    let (mut name, mut data) = (None, String::new());
    for line in block.lines() {
        if let Some(value) = line.strip_prefix("event:") {
            name = Some(value.trim().to_owned());
        } else if let Some(value) = line.strip_prefix("data:") {
            data.push_str(value.strip_prefix(' ').unwrap_or(value));
        }
    }
    Some(match name?.as_str() {
        "hello" => Event::Hello,
        "resync" => Event::Resync,
        "job" | "metrics" | "untracked" => {
            serde_json::from_str(&data).map(|change| Event::Change(Box::new(change))).unwrap_or(Event::Other)
        }
        _ => Event::Other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_events() {
        assert!(matches!(parse_block("event: hello\ndata: {}\n"), Some(Event::Hello)));
        assert!(parse_block(": keep-alive\n").is_none());
        assert!(matches!(parse_block("event: resync\ndata: {\"missed\":3}\n"), Some(Event::Resync)));
        assert!(matches!(parse_block("event: mystery\ndata: 1\n"), Some(Event::Other)));
    }
}
