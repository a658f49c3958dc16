import { describe, expect, it } from "vitest";

import { ApiError } from "./api";
import { accepted, cancellable, confirmQuestion, refused } from "./cancel";

describe("cancel", () => {
  it("is offered only while the job runs", () => {
    expect(cancellable("running")).toBe(true);
    expect(cancellable("queued")).toBe(true);
    expect(cancellable("unknown")).toBe(true);
    for (const done of ["succeeded", "failed", "canceled", "needs_input", "ended"] as const) expect(cancellable(done)).toBe(false);
  });

  it("asks before sending, naming the provider and the job", () => {
    expect(confirmQuestion("replicate", "flux-schnell")).toMatch(/^Ask replicate to cancel flux-schnell\?/);
  });

  it("shows the provider's answer, and its refusal as it was answered", () => {
    expect(accepted({ requested: true, answer: "accepted (status canceled)" }, "replicate")).toEqual({
      step: "answered",
      ok: true,
      text: "replicate answered: accepted (status canceled). The job ends when replicate says so.",
    });
    const words = "the provider answered 400: Prediction is already finishing";
    expect(refused(new ApiError(502, words), "replicate")).toEqual({ step: "answered", ok: false, text: `replicate refused: ${words}` });
    expect(refused(new ApiError(409, "the job is already finished (succeeded)"), "openai").text).toBe(
      "Not sent: the job is already finished (succeeded).",
    );
    expect(refused(new ApiError(501, "the provider has no cancel for this kind of job"), "generic").text).toContain("no cancel");
    expect(refused(new ApiError(0, "NeverMiss is not answering"), "fal").text).toBe("Cancel failed: NeverMiss is not answering");
  });
});
