import { describe, expect, it } from "vitest";

import { ApiError, NOTHING_SAVED, saveRefusal } from "./api";

describe("saveRefusal", () => {
  it("marks the fields the API refused and says nothing was saved", () => {
    const refused = new ApiError(400, "the channel was refused", { url: "must be an http(s) URL" });
    expect(saveRefusal(refused)).toEqual({ fields: { url: "must be an http(s) URL" }, message: NOTHING_SAVED });
  });

  it("says what went wrong when no field is to blame", () => {
    expect(saveRefusal(new ApiError(503, "the secret store refused it"))).toEqual({ fields: {}, message: "the secret store refused it" });
    expect(saveRefusal(new TypeError("Failed to fetch"))).toEqual({ fields: {}, message: "Failed to fetch" });
    expect(saveRefusal("offline")).toEqual({ fields: {}, message: "offline" });
  });
});
