// The Refused screen: the last requests the receiver refused before reading them (a bad or
// missing signature, a timestamp out of tolerance, an unknown provider, a provider it could not
// verify for), newest first, each with its likely cause in words and the request as it came
// (credentials masked by the engine). Bounded by the engine (`kept`).

import { useEffect, useState } from "preact/hooks";

import { ApiError, get } from "../api";
import { dateTime } from "../format";
import type { Refusal } from "../generated/Refusal";
import type { RefusedList } from "../generated/RefusedList";
import { headerLines, KIND_LABEL, summary } from "../refusedview";

export function Refused() {
  const [list, setList] = useState<RefusedList | null>(null);
  const [error, setError] = useState("");
  const [open, setOpen] = useState<number | null>(null);
  const load = () =>
    get<RefusedList>("/api/refused")
      .then((l) => {
        setList(l);
        setError("");
      })
      .catch((e) => setError(e instanceof ApiError ? e.message : String(e)));
  useEffect(() => {
    load();
  }, []);

  return (
    <section class="refused" data-testid="refused">
      <div class="section-head">
        <h1 tabIndex={-1}>Refused requests</h1>
        <button type="button" class="btn" onClick={load}>
          Refresh
        </button>
      </div>
      <p class="muted">
        Requests to the webhook receiver that were refused before they were read: no job was touched. The last {list?.kept ?? 200} are kept,
        with what most likely went wrong.
      </p>
      {error && <p class="field-error">{error}</p>}
      {list && list.refused.length === 0 && <p data-testid="refused-empty">Nothing refused. Every request that arrived was verified.</p>}
      {list && list.refused.length > 0 && (
        <>
          <p data-testid="refused-summary">{summary(list.refused)}</p>
          <div class="table-wrap">
            <table class="refused-table">
              <thead>
                <tr>
                  <th>When</th>
                  <th>Hook</th>
                  <th>Answer</th>
                  <th>Why</th>
                </tr>
              </thead>
              <tbody>
                {list.refused.map((r) => (
                  <Row key={r.id} refusal={r} open={open === r.id} onToggle={() => setOpen(open === r.id ? null : r.id)} />
                ))}
              </tbody>
            </table>
          </div>
        </>
      )}
    </section>
  );
}

function Row({ refusal: r, open, onToggle }: { refusal: Refusal; open: boolean; onToggle: () => void }) {
  return (
    <>
      <tr data-refusal={r.kind} class="clickable" onClick={onToggle}>
        <td>
          {/* The row opens on a click anywhere; this button is the same for the keyboard and screen readers. */}
          <button
            type="button"
            class="btn small link"
            aria-expanded={open}
            data-testid="refusal-toggle"
            onClick={(e) => {
              e.stopPropagation();
              onToggle();
            }}
          >
            {open ? "Hide" : "Show"} <span class="visually-hidden">the request of</span> {dateTime(r.received_at)}
          </button>
        </td>
        <td>
          <code>/hooks/{r.provider}</code>
        </td>
        <td>
          <span class="badge">{r.status}</span> {KIND_LABEL[r.kind]}
        </td>
        <td data-testid="refusal-cause">{r.cause}</td>
      </tr>
      {open && (
        <tr>
          <td colSpan={4}>
            <p class="muted">Answered: {r.error}</p>
            <pre class="raw">{headerLines(r.headers)}</pre>
            <pre class="raw">
              {r.body}
              {r.body_truncated ? `\n… (${r.body_length} bytes in all)` : ""}
            </pre>
          </td>
        </tr>
      )}
    </>
  );
}
