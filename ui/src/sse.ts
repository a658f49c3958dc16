// Server-Sent Events over fetch: EventSource cannot send the Authorization header, so the UI
// reads /api/events as a byte stream and parses it here (the WHATWG event stream format).

export interface SseEvent {
  /** The `event:` field, "message" when absent. */
  event: string;
  /** The `data:` lines joined with "\n". */
  data: string;
  id?: string;
}

/**
 * An incremental parser: feed it text chunks as they arrive (split anywhere, even inside a line
 * or a CRLF), get back the events completed so far. Comments (`:` lines, the keep-alives) and
 * events without data are skipped, as a browser's EventSource does.
 */
export class SseParser {
  private buffer = "";
  private event = "";
  private data: string[] = [];
  private id: string | undefined;
  private lastWasCR = false;

  push(chunk: string): SseEvent[] {
    const out: SseEvent[] = [];
    let text = chunk;
    // A CR at the end of the last chunk and an LF at the start of this one are one line end.
    if (this.lastWasCR && text.startsWith("\n")) text = text.slice(1);
    this.lastWasCR = text.endsWith("\r");
    this.buffer += text;
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this.buffer);
      if (!match) break;
      // A lone CR at the very end may be the first half of a CRLF still to come: it still ends
      // the line (the next chunk's LF is dropped above).
      const line = this.buffer.slice(0, match.index);
      this.buffer = this.buffer.slice(match.index + match[0].length);
      const done = this.line(line);
      if (done) out.push(done);
    }
    return out;
  }

  private line(line: string): SseEvent | null {
    if (line === "") {
      if (this.data.length === 0) {
        this.event = "";
        return null;
      }
      const done: SseEvent = { event: this.event || "message", data: this.data.join("\n") };
      if (this.id !== undefined) done.id = this.id;
      this.event = "";
      this.data = [];
      return done;
    }
    if (line.startsWith(":")) return null;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "event":
        this.event = value;
        break;
      case "data":
        this.data.push(value);
        break;
      case "id":
        if (!value.includes("\0")) this.id = value;
        break;
      default:
        // `retry` and unknown fields: nothing to do for this client.
        break;
    }
    return null;
  }
}

/**
 * Reads one event stream response to its end, calling `onEvent` for each event. Resolves when
 * the server ends the stream; rejects on a network error or when `signal` aborts.
 */
export async function readEventStream(
  body: ReadableStream<Uint8Array>,
  onEvent: (e: SseEvent) => void,
): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const parser = new SseParser();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      for (const e of parser.push(decoder.decode(value, { stream: true }))) onEvent(e);
    }
  } finally {
    reader.releaseLock();
  }
}
