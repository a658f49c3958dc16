// The Refused screen's words: what each kind of refusal means, and a one-line summary of the
// kept refusals (how many of each kind), newest kind first.

import type { Refusal } from "./generated/Refusal";
import type { RefusalKind } from "./generated/RefusalKind";

export const KIND_LABEL: Record<RefusalKind, string> = {
  missing_header: "missing signature header",
  bad_signature: "signature does not match",
  expired: "timestamp too old or too new",
  unknown_provider: "unknown provider in the URL",
  not_configured: "no webhook secret set",
  bad_secret: "webhook secret unusable",
  unverifiable: "could not verify now",
  foreign_account: "another account's webhook",
};

/** `3 signature does not match, 1 unknown provider in the URL`, most frequent first. */
export function summary(refused: Refusal[]): string {
  const counts = new Map<RefusalKind, number>();
  for (const r of refused) counts.set(r.kind, (counts.get(r.kind) ?? 0) + 1);
  return [...counts.entries()]
    .sort((a, b) => b[1] - a[1])
    .map(([kind, n]) => `${n} ${KIND_LABEL[kind]}`)
    .join(", ");
}

/** Headers as `name: value` lines, sorted by name (values already masked by the engine). */
export function headerLines(headers: Record<string, string>): string {
  return Object.keys(headers)
    .sort()
    .map((name) => `${name}: ${headers[name]}`)
    .join("\n");
}
