import { describe, expect, it } from "vitest";

import { isWebLink, resultView } from "./resultview";

describe("resultView", () => {
  it("shows an image result, its links and the provider's page", () => {
    const view = resultView({
      provider: "replicate",
      result: { text: null, urls: ["https://replicate.delivery/a/out-0.webp", "https://replicate.delivery/a/out-1.webp"], image: "https://replicate.delivery/a/out-0.webp" },
      provider_url: "https://replicate.com/p/abc",
    });
    expect(view).toEqual({
      text: null,
      links: [
        { label: "Open out-0.webp", url: "https://replicate.delivery/a/out-0.webp" },
        { label: "Open out-1.webp", url: "https://replicate.delivery/a/out-1.webp" },
        { label: "Open on replicate", url: "https://replicate.com/p/abc" },
      ],
      image: "https://replicate.delivery/a/out-0.webp",
    });
  });

  it("shows text alone, and nothing when there is nothing", () => {
    expect(resultView({ provider: "openai", result: { text: "The answer is 42.", urls: [], image: null }, provider_url: null })).toEqual({
      text: "The answer is 42.",
      links: [],
      image: null,
    });
    expect(resultView({ provider: "openai", result: null, provider_url: null })).toBeNull();
    expect(resultView({ provider: "openai", result: { text: "  ", urls: [], image: null }, provider_url: null })).toBeNull();
  });

  it("never links or shows anything but web links, and shows only https images", () => {
    const view = resultView({
      provider: "generic",
      result: { text: null, urls: ["javascript:alert(1)", "data:text/html,x", "http://127.0.0.1:9/r.txt"], image: "http://127.0.0.1:9/i.png" },
      provider_url: "file:///etc/passwd",
    });
    expect(view?.links.map((l) => l.url)).toEqual(["http://127.0.0.1:9/i.png", "http://127.0.0.1:9/r.txt"]);
    expect(view?.image).toBeNull();
    expect(isWebLink("https://x.example/a")).toBe(true);
    expect(isWebLink("javascript:x")).toBe(false);
    expect(isWebLink("not a url")).toBe(false);
  });
});
