// Settings, "Channels": where notifications go. Each channel with its switch, outcomes, summary
// size, quiet hours and its kind's fields (secrets write-only), saved on its own; a test send;
// removal; and a form to add one. The logic is in channels.ts.

import { useEffect, useRef, useState } from "preact/hooks";

import { errorText, get, NOTHING_SAVED, saveRefusal, send } from "../api";
import {
  ADDABLE_KINDS,
  type Channel,
  type ChannelForm,
  type ChannelKind,
  type EmailTls,
  fieldsOf,
  type FieldSpec,
  formChanged,
  formOf,
  inputOf,
  kindName,
  lastErrorText,
  lastSeenText,
  nameError,
  newForm,
  newWebhookSecret,
  OUTCOMES,
  removedText,
  type SecretKey,
  secretState,
  TLS_CHOICES,
  talliesText,
  type TextKey,
  unplacedErrors,
} from "../channels";
import type { ChannelList } from "../generated/ChannelList";
import type { ChannelRemoved } from "../generated/ChannelRemoved";
import type { ChannelTestResult } from "../generated/ChannelTestResult";
import { metrics as metricsStore } from "../live";
import { useStore } from "../store";
import { CopyButton, Notice, useNow } from "./common";

export function ChannelsCard() {
  const metrics = useStore(metricsStore);
  const [channels, setChannels] = useState<Channel[] | null>(null);
  const [error, setError] = useState("");
  const [notice, setNotice] = useState("");
  const [adding, setAdding] = useState(false);
  const now = useNow(15_000);

  const load = () =>
    get<ChannelList>("/api/channels")
      .then((l) => (setChannels(l.channels), setError("")))
      .catch((e) => setError(errorText(e)));
  // The tallies move with the metrics (a send changes both): reloaded at most every 5 s.
  const last = useRef(0);
  useEffect(() => {
    const wait = Math.max(0, 5_000 - (Date.now() - last.current));
    const t = setTimeout(() => {
      last.current = Date.now();
      void load();
    }, wait);
    return () => clearTimeout(t);
  }, [metrics]);

  const saved = (c: Channel) => {
    setNotice("");
    setChannels((list) => (list?.some((x) => x.name === c.name) ? list.map((x) => (x.name === c.name ? c : x)) : [...(list ?? []), c]));
  };

  return (
    <div class="card" data-testid="channels-card">
      <h2>Channels</h2>
      <p class="muted small">
        Where notifications go. Each channel gets every finished job it announces once, retried with backoff until it takes it; when more
        are due at once than its summary size, they go as one summary. Secrets (signing secrets, tokens, passwords, Slack and Discord
        addresses) go to the secret store and only show as set.
      </p>
      {error && (
        <Notice level="error" title="Cannot load the channels">
          {error}
        </Notice>
      )}
      {notice && (
        <Notice level="ok" testId="channel-removed">
          {notice}
        </Notice>
      )}
      {channels === null && !error && <p class="muted">Loading…</p>}
      {channels?.length === 0 && <p class="muted">No channels yet: finished jobs are not announced anywhere.</p>}
      {channels?.map((c) => (
        <ChannelBlock
          key={c.name}
          channel={c}
          now={now}
          onSaved={saved}
          onRemoved={(r) => {
            setChannels((list) => (list ?? []).filter((x) => x.name !== r.removed));
            setNotice(removedText(r.removed, r.dropped));
          }}
        />
      ))}
      {adding ? (
        <AddChannel
          taken={(channels ?? []).map((c) => c.name)}
          onAdded={(c) => (saved(c), setAdding(false))}
          onCancel={() => setAdding(false)}
        />
      ) : (
        <div class="provider-block">
          <button type="button" class="btn" data-testid="add-channel" onClick={() => (setAdding(true), setNotice(""))}>
            Add a channel
          </button>
          <p class="hint">A hub's devices are added on the hub, with <code>nevermiss devices add NAME</code>.</p>
        </div>
      )}
    </div>
  );
}

/** Saving a channel: the PUT, with the form's own checks first and the server's refusals by field. */
function useSave(onSaved: (c: Channel) => void) {
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  const save = async (name: string, form: ChannelForm, localErrors: Record<string, string> = {}): Promise<Channel | null> => {
    const { input, errors: formErrors } = inputOf(form);
    const all = { ...localErrors, ...formErrors };
    setError("");
    if (Object.keys(all).length) {
      setErrors(all);
      setError(NOTHING_SAVED);
      return null;
    }
    setBusy(true);
    try {
      const c = await send<Channel>("PUT", `/api/channels/${encodeURIComponent(name)}`, input);
      setErrors({});
      onSaved(c);
      return c;
    } catch (e) {
      const refusal = saveRefusal(e);
      setErrors(refusal.fields);
      setError([refusal.message, ...unplacedErrors(refusal.fields, form.kind)].join(" "));
      return null;
    } finally {
      setBusy(false);
    }
  };
  return { errors, setErrors, error, setError, busy, save };
}

function ChannelBlock({
  channel,
  now,
  onSaved,
  onRemoved,
}: {
  channel: Channel;
  now: number;
  onSaved: (c: Channel) => void;
  onRemoved: (r: ChannelRemoved) => void;
}) {
  const [form, setForm] = useState<ChannelForm>(() => formOf(channel));
  const base = useRef(formOf(channel));
  const [done, setDone] = useState("");
  const [test, setTest] = useState<ChannelTestResult | null>(null);
  const [testing, setTesting] = useState(false);
  const { errors, setErrors, error, setError, busy, save } = useSave(onSaved);

  // A reloaded channel (new tallies, or saved elsewhere) replaces the form unless it is being edited.
  useEffect(() => {
    const fresh = formOf(channel);
    if (!formChanged(base.current, form)) setForm(fresh);
    base.current = fresh;
  }, [channel]);

  const dirty = formChanged(base.current, form);
  const id = `ch-${channel.name}`;

  const submit = async (e: Event) => {
    e.preventDefault();
    setDone("");
    const c = await save(channel.name, form);
    if (c) {
      base.current = formOf(c);
      setForm(formOf(c));
      setDone("Saved.");
    }
  };

  // The switch saves at once, with what is stored (an edit in progress stays in the form).
  const [switching, setSwitching] = useState<boolean | null>(null);
  const toggle = async () => {
    setDone("");
    setSwitching(!channel.enabled);
    const c = await save(channel.name, { ...formOf(channel), enabled: !channel.enabled });
    if (c) setForm({ ...form, enabled: c.enabled });
    setSwitching(null);
  };
  const enabled = switching ?? channel.enabled;

  const sendTest = async () => {
    setTesting(true);
    setTest(null);
    try {
      setTest(await send<ChannelTestResult>("POST", `/api/channels/${encodeURIComponent(channel.name)}/test`));
    } catch (e) {
      setTest({ ok: false, answer: errorText(e) });
    } finally {
      setTesting(false);
    }
  };

  const remove = async () => {
    const what = channel.pending > 0 ? ` The ${channel.pending} notifications waiting for it are dropped.` : "";
    if (!confirm(`Remove the channel '${channel.name}'?${what}`)) return;
    try {
      onRemoved(await send<ChannelRemoved>("DELETE", `/api/channels/${encodeURIComponent(channel.name)}`));
    } catch (e) {
      setError(errorText(e));
    }
  };

  const lastError = lastErrorText(channel, now);
  return (
    <form class="provider-block channel-block" data-channel={channel.name} data-kind={channel.kind} onSubmit={submit} noValidate>
      <h3 class="channel-head">
        <span>{channel.name}</span>
        <span class="badge">{kindName(channel.kind)}</span>
        {channel.failing && <span class="health health-misconfigured">failing</span>}
        <label class="check switch">
          <input
            type="checkbox"
            checked={enabled}
            disabled={busy}
            onChange={toggle}
            aria-label={`Channel ${channel.name} on`}
            data-testid={`channel-enabled-${channel.name}`}
          />
          {enabled ? "On" : "Off"}
        </label>
      </h3>
      <p class="muted small" data-testid={`channel-tallies-${channel.name}`}>
        {talliesText(channel)}
        {channel.kind === "device" && ` · ${lastSeenText(channel, now)}`}
      </p>
      {lastError && (
        <p class="bad-text small" data-testid={`channel-last-error-${channel.name}`}>
          {lastError}
        </p>
      )}
      {channel.kind === "device" && <p class="hint">A device of this hub: it shows the notifications itself. <code>nevermiss devices revoke {channel.name}</code> removes it.</p>}
      <ChannelFields id={id} form={form} channel={channel} errors={errors} onChange={(f, key) => (setForm(f), setDone(""), key && clearError(errors, setErrors, key))} />
      <div class="input-row channel-actions">
        <button class="btn small primary" type="submit" disabled={busy || !dirty} data-testid={`save-channel-${channel.name}`}>
          {busy ? "Saving…" : "Save"}
        </button>
        {dirty && (
          <button type="button" class="btn small" onClick={() => (setForm(base.current), setErrors({}), setError(""))}>
            Discard changes
          </button>
        )}
        <button
          type="button"
          class="btn small"
          disabled={testing}
          onClick={sendTest}
          data-testid={`test-channel-${channel.name}`}
          title={dirty ? "Sends with the saved settings, not the changes above" : "Sends a test notification now"}
        >
          {testing ? "Sending…" : "Send test"}
        </button>
        <button type="button" class="btn small link" onClick={remove} data-testid={`remove-channel-${channel.name}`}>
          Remove
        </button>
        {done && <span class="ok-text small">{done}</span>}
        {error && (
          <span class="bad-text small" data-testid={`channel-error-${channel.name}`}>
            {error}
          </span>
        )}
      </div>
      {test && (
        <p class="small" data-testid={`channel-test-${channel.name}`} data-ok={String(test.ok)}>
          <span class={test.ok ? "ok-text" : "bad-text"}>{test.ok ? "✓ It took the test. It answered:" : "✗ The test failed:"}</span>{" "}
          <code class="answer">{test.answer || "(nothing)"}</code>
        </p>
      )}
    </form>
  );
}

function AddChannel({ taken, onAdded, onCancel }: { taken: string[]; onAdded: (c: Channel) => void; onCancel: () => void }) {
  const [form, setForm] = useState<ChannelForm>(() => newForm("webhook"));
  const { errors, setErrors, error, setError, busy, save } = useSave(onAdded);
  const id = "ch-new";

  const submit = async (e: Event) => {
    e.preventDefault();
    const name = form.name.trim();
    const bad = nameError(name, taken);
    await save(name, { ...form, name }, bad ? { name: bad } : {});
  };

  return (
    <form class="provider-block" data-testid="add-channel-form" onSubmit={submit} noValidate>
      <h3>Add a channel</h3>
      <div class="fields">
        <div class={`field ${errors.name ? "has-error" : ""}`}>
          <label for={`${id}-name`}>Name</label>
          <input
            id={`${id}-name`}
            name="name"
            value={form.name}
            autocomplete="off"
            spellcheck={false}
            placeholder="phone"
            aria-invalid={!!errors.name}
            aria-describedby={`${id}-name-e`}
            onInput={(e) => (setForm({ ...form, name: (e.target as HTMLInputElement).value }), clearError(errors, setErrors, "name"))}
          />
          <FieldNote id={`${id}-name-e`} error={errors.name} testId="channel-field-error-name" hint="Lower-case letters, digits, - and _." />
        </div>
        <div class={`field ${errors.kind ? "has-error" : ""}`}>
          <label for={`${id}-kind`}>Kind</label>
          <select
            id={`${id}-kind`}
            name="kind"
            value={form.kind}
            onChange={(e) => {
              const kind = (e.target as HTMLSelectElement).value as ChannelKind;
              setForm({ ...newForm(kind), name: form.name, outcomes: form.outcomes, summary_after: form.summary_after });
              setErrors({});
              setError("");
            }}
          >
            {ADDABLE_KINDS.map((k) => (
              <option value={k.value}>{k.label}</option>
            ))}
          </select>
          <FieldNote error={errors.kind} testId="channel-field-error-kind" hint="Devices are added on the hub (nevermiss devices add NAME)." />
        </div>
      </div>
      <ChannelFields id={id} form={form} channel={null} errors={errors} onChange={(f, key) => (setForm(f), key && clearError(errors, setErrors, key))} />
      <div class="input-row channel-actions">
        <button class="btn small primary" type="submit" disabled={busy} data-testid="save-new-channel">
          {busy ? "Adding…" : "Add the channel"}
        </button>
        <button type="button" class="btn small link" onClick={onCancel}>
          Cancel
        </button>
        {error && (
          <span class="bad-text small" data-testid="add-channel-error">
            {error}
          </span>
        )}
      </div>
    </form>
  );
}

function clearError(errors: Record<string, string>, setErrors: (e: Record<string, string>) => void, key: string) {
  if (!errors[key]) return;
  const rest = { ...errors };
  delete rest[key];
  setErrors(rest);
}

function FieldNote({ id, error, hint, testId }: { id?: string; error: string | undefined; hint: string; testId: string }) {
  return error ? (
    <p class="field-error" id={id} data-testid={testId}>
      {error}
    </p>
  ) : (
    <p class="hint" id={id}>
      {hint}
    </p>
  );
}

/** What every channel has (outcomes, summary size, quiet hours), then its kind's own fields. */
function ChannelFields({
  id,
  form,
  channel,
  errors,
  onChange,
}: {
  id: string;
  form: ChannelForm;
  channel: Channel | null;
  errors: Record<string, string>;
  onChange: (f: ChannelForm, key?: string) => void;
}) {
  const [shown, setShown] = useState<Partial<Record<SecretKey, boolean>>>({});
  const value = (e: Event) => (e.target as HTMLInputElement).value;
  const checked = (e: Event) => (e.target as HTMLInputElement).checked;

  const text = (f: FieldSpec) => {
    const key = f.key as TextKey;
    return (
      <div class={`field ${errors[key] ? "has-error" : ""} ${f.wide ? "wide" : ""}`} data-field={key}>
        <label for={`${id}-${key}`}>{f.label}</label>
        <div class="input-row">
          <input
            id={`${id}-${key}`}
            name={key}
            value={form.text[key]}
            placeholder={f.placeholder}
            inputMode={f.numeric ? "numeric" : undefined}
            autocomplete="off"
            spellcheck={false}
            aria-invalid={!!errors[key]}
            aria-describedby={`${id}-${key}-e`}
            onInput={(e) => onChange({ ...form, text: { ...form.text, [key]: value(e) } }, key)}
          />
        </div>
        <FieldNote id={`${id}-${key}-e`} error={errors[key]} hint={f.hint} testId={`channel-field-error-${key}`} />
      </div>
    );
  };

  const secret = (f: FieldSpec) => {
    const key = f.key as SecretKey;
    const set = !!channel && channel.kind === form.kind && channel.secrets_set.includes(key);
    const cleared = !!form.clear[key];
    const typed = form.secrets[key] ?? "";
    const inputProps = {
      id: `${id}-${key}`,
      name: key,
      class: "mono",
      value: typed,
      disabled: cleared,
      autocomplete: "new-password",
      spellcheck: false,
      placeholder: set ? "unchanged" : f.required ? (f.placeholder ?? "required") : "not set",
      "aria-invalid": !!errors[key],
      "aria-describedby": `${id}-${key}-e`,
      onInput: (e: Event) => onChange({ ...form, secrets: { ...form.secrets, [key]: value(e) } }, key),
    };
    return (
      <div class={`field ${errors[key] ? "has-error" : ""} ${f.wide ? "wide" : ""}`} data-field={key} data-secret-field={key}>
        <label for={`${id}-${key}`}>{f.label}</label>
        <div class="input-row">
          <span class={`secret-state ${set && !cleared ? "set" : ""}`} data-testid={`channel-secret-${key}`}>
            {secretState(channel, form, key)}
          </span>
          {shown[key] ? <input type="text" {...inputProps} /> : <input type="password" {...inputProps} />}
          {key === "secret" && !cleared && (
            <button
              type="button"
              class="btn small"
              onClick={() => (setShown({ ...shown, secret: true }), onChange({ ...form, secrets: { ...form.secrets, secret: newWebhookSecret() } }, key))}
            >
              Generate
            </button>
          )}
          {shown[key] && typed && <CopyButton text={typed} />}
          {set && (
            <button
              type="button"
              class="btn small link"
              data-testid={`channel-clear-${key}`}
              onClick={() => onChange({ ...form, clear: { ...form.clear, [key]: !cleared }, secrets: { ...form.secrets, [key]: "" } }, key)}
            >
              {cleared ? "Keep it" : "Clear"}
            </button>
          )}
        </div>
        <FieldNote
          id={`${id}-${key}-e`}
          error={errors[key]}
          testId={`channel-field-error-${key}`}
          hint={`${shown[key] && typed ? "Copy it now for your receiver: after saving it is not shown again. " : ""}${f.hint}${set ? " Leave it empty to keep the stored one." : ""}`}
        />
      </div>
    );
  };

  const tls = (
    <div class="field" data-field="tls">
      <label for={`${id}-tls`}>Encryption</label>
      <select id={`${id}-tls`} name="tls" value={form.tls} onChange={(e) => onChange({ ...form, tls: (e.target as HTMLSelectElement).value as EmailTls })}>
        {TLS_CHOICES.map((c) => (
          <option value={c.value}>{c.label}</option>
        ))}
      </select>
      <FieldNote error={errors.tls} hint="How NeverMiss talks to the mail server." testId="channel-field-error-tls" />
    </div>
  );

  return (
    <div class="fields">
      <fieldset class={`field wide checks-field ${errors.outcomes ? "has-error" : ""}`} data-field="outcomes">
        <legend>Announce jobs that</legend>
        <div class="checks">
          {OUTCOMES.map((o) => (
            <label class="check">
              <input
                type="checkbox"
                name={`outcome-${o.value}`}
                checked={form.outcomes.includes(o.value)}
                onChange={(e) => {
                  const on = checked(e);
                  const outcomes = OUTCOMES.map((x) => x.value).filter((x) => (x === o.value ? on : form.outcomes.includes(x)));
                  onChange({ ...form, outcomes }, "outcomes");
                }}
              />
              {o.label}
            </label>
          ))}
        </div>
        <FieldNote error={errors.outcomes} hint={form.outcomes.length ? "The others are still recorded, only not announced here." : "None: this channel announces nothing."} testId="channel-field-error-outcomes" />
      </fieldset>
      <div class={`field ${errors.summary_after ? "has-error" : ""}`} data-field="summary_after">
        <label for={`${id}-summary_after`}>Summarize when more than</label>
        <div class="input-row">
          <input
            id={`${id}-summary_after`}
            name="summary_after"
            value={form.summary_after}
            inputMode="numeric"
            aria-invalid={!!errors.summary_after}
            aria-describedby={`${id}-summary_after-e`}
            onInput={(e) => onChange({ ...form, summary_after: value(e) }, "summary_after")}
          />
          <span class="unit">are due at once</span>
        </div>
        <FieldNote id={`${id}-summary_after-e`} error={errors.summary_after} hint="They then go as one summary. 0: never summarize." testId="channel-field-error-summary_after" />
      </div>
      <fieldset class={`field checks-field ${errors.quiet_hours ? "has-error" : ""}`} data-field="quiet_hours">
        <legend>Quiet hours</legend>
        <div class="input-row">
          <label class="check">
            <input type="checkbox" name="quiet" checked={form.quiet} onChange={(e) => onChange({ ...form, quiet: checked(e) }, "quiet_hours")} />
            From
          </label>
          <input
            type="time"
            aria-label="Quiet hours start"
            name="quiet_from"
            value={form.quiet_from}
            disabled={!form.quiet}
            onInput={(e) => onChange({ ...form, quiet_from: value(e) }, "quiet_hours")}
          />
          <span class="unit">to</span>
          <input
            type="time"
            aria-label="Quiet hours end"
            name="quiet_to"
            value={form.quiet_to}
            disabled={!form.quiet}
            onInput={(e) => onChange({ ...form, quiet_to: value(e) }, "quiet_hours")}
          />
        </div>
        <label class="check">
          <input
            type="checkbox"
            name="urgent_breaks_through"
            checked={form.urgent_breaks_through}
            disabled={!form.quiet}
            onChange={(e) => onChange({ ...form, urgent_breaks_through: checked(e) }, "quiet_hours")}
          />
          Urgent ones break through (failed, stuck, waiting for input)
        </label>
        <FieldNote error={errors.quiet_hours} hint="This machine's local time. Notifications wait until the quiet hours end." testId="channel-field-error-quiet_hours" />
      </fieldset>
      {fieldsOf(form.kind).map((f) => (f.key === "tls" ? tls : f.secret ? secret(f) : text(f)))}
    </div>
  );
}
