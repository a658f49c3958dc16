// Cancel from the job view: which jobs offer it, the confirmation asked in the window, and what
// the answer says. The request goes to the provider's own cancel call
// (`POST /api/jobs/{provider}/{job_id}/cancel`); the job's end then comes like any other.

import { ApiError, errorText } from "./api";
import type { CancelAnswer } from "./generated/CancelAnswer";
import type { JobState } from "./generated/JobState";

/** The states a cancel can still change (NeverMiss answers 409 for the others). */
const RUNNING: readonly JobState[] = ["unknown", "queued", "running"];

/** Whether the job view offers Cancel for a job in this state. */
export function cancellable(state: JobState): boolean {
  return RUNNING.includes(state);
}

/** What the request got: accepted, or not (with why, as answered). */
export type Answered = { step: "answered"; ok: boolean; text: string };

/** Where the Cancel action stands: offered, asking to confirm, sent, then answered. */
export type CancelStep = { step: "offered" } | { step: "confirming" } | { step: "sending" } | Answered;

export const OFFERED: CancelStep = { step: "offered" };

/** The question asked before anything is sent. */
export function confirmQuestion(provider: string, label: string): string {
  return `Ask ${provider} to cancel ${label}? The provider stops it if it still can; NeverMiss then shows how it ended.`;
}

/** The answer of an accepted request, as shown. */
export function accepted(answer: CancelAnswer, provider: string): Answered {
  return { step: "answered", ok: true, text: `${provider} answered: ${answer.answer}. The job ends when ${provider} says so.` };
}

/** A request that was not accepted, as answered: the provider's own words when it refused. */
export function refused(e: unknown, provider: string): Answered {
  if (e instanceof ApiError) {
    const reason = e.message;
    switch (e.status) {
      case 502:
        return { step: "answered", ok: false, text: `${provider} refused: ${reason}` };
      case 409:
        return { step: "answered", ok: false, text: `Not sent: ${reason}.` };
      case 501:
        return { step: "answered", ok: false, text: `Not sent: ${reason}.` };
      case 403:
        return { step: "answered", ok: false, text: `Not allowed: ${reason}.` };
    }
  }
  return { step: "answered", ok: false, text: `Cancel failed: ${errorText(e)}` };
}
