import { describe, expect, it } from "vitest";

import { readEventStream, SseParser, type SseEvent } from "./sse";

function feed(chunks: string[]): SseEvent[] {
  const p = new SseParser();
  return chunks.flatMap((c) => p.push(c));
}

describe("SseParser", () => {
  it("parses the events the engine sends", () => {
    const events = feed([
      "event: hello\ndata: {}\n\n",
      'event: job\ndata: {"type":"job","job":{"job_id":"a"}}\n\n',
      ": keep-alive\n\n",
      'event: resync\ndata: {"missed":3}\n\n',
    ]);
    expect(events).toEqual([
      { event: "hello", data: "{}" },
      { event: "job", data: '{"type":"job","job":{"job_id":"a"}}' },
      { event: "resync", data: '{"missed":3}' },
    ]);
  });

  it("reassembles events split anywhere across chunks", () => {
    const text = 'event: job\ndata: {"x":1}\n\nevent: metrics\ndata: {"y":2}\n\n';
    for (let size = 1; size <= text.length; size++) {
      const chunks: string[] = [];
      for (let i = 0; i < text.length; i += size) chunks.push(text.slice(i, i + size));
      expect(feed(chunks)).toEqual([
        { event: "job", data: '{"x":1}' },
        { event: "metrics", data: '{"y":2}' },
      ]);
    }
  });

  it("accepts CRLF and CR line ends, even a CRLF split between chunks", () => {
    expect(feed(["event: a\r\ndata: 1\r\n\r\n", "event: b\rdata: 2\r\r"])).toEqual([
      { event: "a", data: "1" },
      { event: "b", data: "2" },
    ]);
    expect(feed(["event: a\r", "\ndata: 1\r", "\n\r", "\n"])).toEqual([{ event: "a", data: "1" }]);
  });

  it("joins multi-line data, defaults the event name, keeps the id", () => {
    expect(feed(["id: 7\ndata: line one\ndata: line two\n\n"])).toEqual([{ event: "message", data: "line one\nline two", id: "7" }]);
  });

  it("takes the value after one optional space, and a field without a colon", () => {
    expect(feed(["data:no-space\ndata:  two-spaces\ndata\n\n"])).toEqual([{ event: "message", data: "no-space\n two-spaces\n" }]);
  });

  it("skips comments, unknown fields and events without data", () => {
    expect(feed([": hi\nretry: 100\nfoo: bar\nevent: empty\n\ndata: x\n\n"])).toEqual([{ event: "message", data: "x" }]);
  });

  it("does not emit an event until its blank line arrives", () => {
    const p = new SseParser();
    expect(p.push("event: job\ndata: {}\n")).toEqual([]);
    expect(p.push("\n")).toEqual([{ event: "job", data: "{}" }]);
  });
});

describe("readEventStream", () => {
  it("decodes UTF-8 split inside a character and reads to the end", async () => {
    const bytes = new TextEncoder().encode('event: job\ndata: {"label":"crème brûlée ✓"}\n\n');
    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        for (const b of bytes) c.enqueue(new Uint8Array([b]));
        c.close();
      },
    });
    const seen: SseEvent[] = [];
    await readEventStream(stream, (e) => seen.push(e));
    expect(seen).toEqual([{ event: "job", data: '{"label":"crème brûlée ✓"}' }]);
  });
});
