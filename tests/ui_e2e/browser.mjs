// The browser half of tests/ui_e2e: Playwright (playwright-core, from ui/node_modules) drives
// Debian's Chromium against the engine the Rust half started. When the test needs the engine to
// do something (a signed delivery, a restart), this script prints `STEP <name>` and waits for one
// JSON line on stdin. Screenshots go to NM_ARTIFACTS. Any failure exits non-zero with the reason.

import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const UI_DIR = env("NM_UI_DIR");
const ARTIFACTS = env("NM_ARTIFACTS");
// The README's and the book's pictures (tests/ui_e2e/main.rs, DOC_SHOTS).
const DOC_SHOTS = env("NM_DOC_SHOTS");
const CHROMIUM = env("NM_CHROMIUM");
const TOKEN = env("NM_TOKEN");
let base = env("NM_URL");

const requireFromUi = createRequire(join(UI_DIR, "package.json"));
const { chromium } = requireFromUi("playwright-core");
// axe-core's checker, run inside the page (page.evaluate is not subject to the page's CSP, so
// the CSP stays as strict as the app ships it).
const AXE_SOURCE = readFileSync(requireFromUi.resolve("axe-core/axe.min.js"), "utf8");

const WAIT = 30_000;
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

/** Asks the Rust half to do `name`; returns its JSON answer. */
async function step(name) {
  process.stdout.write(`STEP ${name}\n`);
  const { value, done } = await lines.next();
  if (done) throw new Error(`no answer to ${name}`);
  const answer = JSON.parse(value);
  if (!answer.ok) throw new Error(`${name} failed on the engine side: ${answer.error}`);
  return answer;
}

function check(cond, what) {
  if (!cond) throw new Error(`expected: ${what}`);
}

const shot = (page, name) => page.screenshot({ path: join(ARTIFACTS, name), fullPage: true });

// ---- accessibility: axe-core on every screen, in both themes ----
// WCAG 2.0 and 2.1, levels A and AA, and axe's best practices. Every violation is printed; the
// serious and critical ones fail the run (after it ends, so one run names them all).
const AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"];
const BLOCKING = new Set(["serious", "critical"]);
const axeBlocking = [];
const axeSummary = [];

/** Waits for two frames: what a change of the colour scheme restyles is then painted. */
const settled = (page) => page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));

const VIEWPORT = { width: 1280, height: 800 };

/**
 * Runs axe-core on the page as it is now, under the OS's light then dark scheme (the page must
 * follow it). Also checks that the screen has exactly one h1 (axe asks for at least one) and that
 * it reflows at 200% zoom (1280 px at 200% is 640 CSS px wide): no sideways scrolling of the page
 * itself (a wide table scrolls inside its own frame).
 */
async function audit(page, screen) {
  const headings = await page.locator("h1").count();
  check(headings === 1, `${screen}: exactly one h1, got ${headings}`);
  await page.setViewportSize({ width: VIEWPORT.width / 2, height: VIEWPORT.height / 2 });
  await settled(page);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
  if (overflow > 1) problems.push(`${screen}: at 200% zoom the page scrolls sideways by ${overflow} px`);
  await page.setViewportSize(VIEWPORT);
  for (const scheme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme: scheme });
    await settled(page);
    const shown = await page.evaluate(() => [document.documentElement.dataset.theme, getComputedStyle(document.documentElement).colorScheme]);
    check(shown[0] === scheme && shown[1] === scheme, `${screen}: the page follows the OS's ${scheme} scheme, got theme ${shown[0]}, color-scheme ${shown[1]}`);
    if (!(await page.evaluate(() => typeof window.axe === "object"))) await page.evaluate(AXE_SOURCE);
    const violations = await page.evaluate(async (tags) => {
      const found = await window.axe.run(document, { runOnly: { type: "tag", values: tags }, resultTypes: ["violations"] });
      return found.violations.map((v) => ({
        id: v.id,
        impact: v.impact,
        help: v.help,
        nodes: v.nodes.length,
        targets: v.nodes.slice(0, 3).map((n) => n.target.join(" ")),
      }));
    }, AXE_TAGS);
    const where = `${screen} (${scheme})`;
    axeSummary.push(`${where}: ${violations.length} violation(s)${violations.length ? `: ${violations.map((v) => `${v.id} ${v.impact}`).join(", ")}` : ""}`);
    for (const v of violations) {
      const line = `axe ${where}: ${v.id} (${v.impact}, ${v.nodes} node(s)): ${v.help}; ${v.targets.join(" | ")}`;
      console.log(line);
      if (BLOCKING.has(v.impact)) axeBlocking.push(line);
    }
  }
  await page.emulateMedia({ colorScheme: null });
  await settled(page);
}

/** Screenshots of the page in both themes: `<name>-light.png`, `<name>-dark.png`. */
async function shotBothThemes(page, name) {
  for (const scheme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme: scheme });
    await settled(page);
    await shot(page, `${name}-${scheme}.png`);
  }
  await page.emulateMedia({ colorScheme: null });
  await settled(page);
}

// ---- the keyboard ----
/** What has the focus: its tag, test id, name and text, for the checks and their messages. */
const focused = (page) =>
  page.evaluate(() => {
    const el = document.activeElement;
    return { tag: el?.tagName ?? "", testid: el?.getAttribute("data-testid") ?? "", name: el?.getAttribute("name") ?? "", text: (el?.textContent ?? "").trim().slice(0, 80) };
  });
const focusMatches = (page, selector) => page.evaluate((sel) => document.activeElement?.matches(sel) ?? false, selector);

/** Checks that the focus lands on `selector` (Preact moves it after the next paint, so it may take a frame). */
async function focusLands(page, selector, what) {
  await page
    .waitForFunction((sel) => document.activeElement?.matches(sel) ?? false, selector, { timeout: 5_000 })
    .catch(async () => {
      throw new Error(`expected: ${what}; the focus is on ${JSON.stringify(await focused(page))}`);
    });
}

/** Presses Tab (or Shift+Tab) until the focus is on `selector`; fails after `max` presses. */
async function tabTo(page, selector, { back = false, max = 80 } = {}) {
  for (let i = 0; i < max; i++) {
    if (await focusMatches(page, selector)) return;
    await page.keyboard.press(back ? "Shift+Tab" : "Tab");
  }
  const at = await focused(page);
  throw new Error(`expected: Tab reaches ${selector} within ${max} presses; the focus is on ${JSON.stringify(at)}`);
}

/** Waits for the focus to be on the screen's h1 reading `text`, as it should be after a navigation. */
async function focusOnHeading(page, text) {
  const onHeading = () =>
    page.waitForFunction((t) => document.activeElement?.tagName === "H1" && document.activeElement.textContent.includes(t), text, { timeout: 5_000 });
  await onHeading().catch(async () => {
    throw new Error(`expected: the focus on the new screen's heading "${text}"; it is on ${JSON.stringify(await focused(page))}`);
  });
}

/** Changes a focused <select> with the arrow keys, as a keyboard user does, until it shows `value`. */
async function arrowSelect(page, value) {
  await page.keyboard.press("Home");
  for (let i = 0; i < 12 && (await page.evaluate(() => document.activeElement.value)) !== value; i++) await page.keyboard.press("ArrowDown");
  check((await page.evaluate(() => document.activeElement.value)) === value, `the select reached ${value} by the arrow keys`);
}

const profile = mkdtempSync(join(tmpdir(), "nevermiss-ui-e2e-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: CHROMIUM,
  headless: true,
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
  viewport: VIEWPORT,
  permissions: ["clipboard-read", "clipboard-write"],
});
const problems = [];
let page;
try {
  page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(WAIT);
  // A CSP violation or a script error is a failure, wherever it shows (refusals the page shows
  // are not: a 4xx, and the 502 of a cancel the provider refused).
  // (The result's image is on a host that never resolves, `.example.invalid`: its failed load is
  // not a problem; the CSP refusing it would be, and names the page, not the image, as its location.)
  page.on("console", (m) => {
    const unresolvable = (m.location()?.url ?? "").includes(".example.invalid/");
    if (m.type() === "error" && !/status of (4\d\d|502)/.test(m.text()) && !unresolvable) problems.push(`console: ${m.text()}`);
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));

  // ---- without the token, the page asks for it and refuses a wrong one ----
  await page.goto(`${base}/`);
  await page.locator('[data-testid="token-prompt"]').waitFor();
  await page.locator('[data-testid="token-prompt"] input').fill("not-the-token");
  await page.locator('[data-testid="token-prompt"] button[type="submit"]').click();
  await page.locator('[data-testid="token-prompt"] .field-error').waitFor();
  await audit(page, "token prompt");

  // ---- `nevermiss open`'s address: a one-time code, exchanged for the token once ----
  const issued = await fetch(`${base}/api/ui-codes`, { method: "POST", headers: { Authorization: `Bearer ${TOKEN}` } });
  const { code } = await issued.json();
  const codePage = await context.newPage();
  await codePage.goto(`${base}/#code=${code}`);
  await codePage.locator('[data-testid="jobs-empty"]').waitFor();
  check(!codePage.url().includes(code), "the code is taken out of the address");
  await codePage.close();
  const spent = await fetch(`${base}/api/ui-codes/redeem`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ code }),
  });
  check(spent.status === 401, `a spent code is refused, got ${spent.status}`);
  // A spent link, opened again (a reload, an old tab): the page says so and what to run.
  const spentPage = await context.newPage();
  await spentPage.goto(`${base}/#code=${code}`);
  await spentPage.locator('[data-testid="code-expired"]', { hasText: "nevermiss open" }).waitFor();
  await spentPage.close();

  // ---- first launch: the empty state says what to do; the token leaves the address ----
  await page.goto(`${base}/#token=${TOKEN}`);
  await page.locator('[data-testid="jobs-empty"]').waitFor();
  await page.locator('[data-testid="guide"]').waitFor();
  check(!page.url().includes(TOKEN), "the token is taken out of the address");
  await page.locator('[data-testid="connection"]', { hasText: "live" }).waitFor();
  const webhookUrl = await page.locator('[data-testid="webhook-url"]').textContent();
  check(/^http:\/\/127\.0\.0\.1:\d+\/hooks\/generic$/.test(webhookUrl ?? ""), `a webhook URL for generic, got ${webhookUrl}`);
  await shot(page, "ui-first-launch.png");
  await audit(page, "jobs, first launch (with the guide)");

  // ---- the guided start: a signed test delivery, seen arriving ----
  await page.locator('[data-testid="nav-start"]').click();
  await page.locator('[data-testid="send-test"]:not([disabled])').click();
  await page.locator('[data-testid="test-arrived"]').waitFor();
  check((await page.locator('[data-testid="test-arrived"]').textContent()).includes("succeeded"), "the test job arrived succeeded");
  await shot(page, "ui-guide-test-delivery.png");
  await audit(page, "get started");

  // ---- each provider's way in: a URL token for a sender that signs nothing, none for one only polled ----
  const provider = page.locator('[data-testid="guide-provider"]');
  await provider.selectOption("runpod");
  await page.locator('[data-testid="webhook-url"]', { hasText: "/hooks/runpod/<webhook secret>" }).waitFor();
  await page.locator('[data-secrets="runpod"] [data-testid="generate-secret"]').click();
  const tokenUrl = await page.locator('[data-testid="token-url-runpod"]').textContent();
  check(/\/hooks\/runpod\/nmsec_[0-9a-f]{64}$/.test(tokenUrl ?? ""), `runpod's URL to paste carries its new token, got ${tokenUrl}`);
  await provider.selectOption("groq");
  await page.locator('[data-testid="webhook-url-none"]').waitFor();
  check((await page.locator('[data-testid="webhook-url"]').count()) === 0, "no webhook URL for groq, which is only polled");
  check(
    (await page.locator('[data-secrets="groq"] [data-webhooks="none"]').textContent()).includes("sends no webhooks"),
    "groq's webhook secret field says it needs none",
  );
  // A key set there turns discovery on, and says so where the key was set.
  await page.locator('[data-secret="groq.api_key"] button', { hasText: "Set" }).click();
  await page.locator('[id="s-groq.api_key"]').fill("gsk_set_in_the_guide");
  await page.locator('[data-testid="save-secret-groq.api_key"]').click();
  const note = await page.locator('[data-testid="discovery-note-groq"]').textContent();
  check(note.includes("Discovery is on for groq") && note.includes("groq.discover off"), `the guide says discovery is on, got ${note}`);
  await step("discovery-turned-on");
  await provider.selectOption("generic");
  await page.locator('[data-testid="nav-jobs"]').click();
  await page.locator('[data-testid="jobs-table"]').waitFor();

  // ---- jobs appear live after a signed delivery (no reload: a marker on window survives) ----
  await page.evaluate(() => (window.__noReload = true));
  await step("deliver-first");
  const row = page.locator('tr[data-job="generic/ui-job-1"]');
  await row.waitFor();
  await row.locator('[data-state="running"]').waitFor();
  check((await row.textContent()).includes("nightly crawl"), "the row shows the label");

  await step("deliver-duplicate-and-finish");
  await row.locator('[data-state="succeeded"]').waitFor();
  await row.locator('[data-source="push"]').waitFor();
  check(await page.evaluate(() => window.__noReload === true), "the job arrived without a page reload");
  await shot(page, "ui-jobs-live.png");

  // ---- filters and search ----
  // Typed the moment the search box appears (before the view's first paint has run its effects),
  // the search is kept (an effect run at mount used to empty the box).
  await page.locator('[data-testid="nav-metrics"]').click();
  await page.locator('[data-testid="search"]').waitFor({ state: "detached" });
  await page.evaluate(() => {
    const typeOnSight = new MutationObserver(() => {
      const box = document.querySelector('[data-testid="search"]');
      if (box) {
        typeOnSight.disconnect();
        box.value = "crawl";
        box.dispatchEvent(new Event("input", { bubbles: true }));
      }
    });
    typeOnSight.observe(document.body, { childList: true, subtree: true });
    document.querySelector('[data-testid="nav-jobs"]').click();
  });
  await page.waitForFunction(() => location.hash.includes("q=crawl"));
  check((await page.locator('[data-testid="search"]').inputValue()) === "crawl", "what was typed as the search box appeared is kept");
  await row.waitFor();
  await page.locator('[data-testid="search"]').fill("no-such-job");
  await page.locator('[data-testid="jobs-empty-filtered"]').waitFor();
  await page.locator('[data-testid="search"]').fill("crawl");
  await row.waitFor();
  await page.locator('[data-testid="state-filter-succeeded"]').click();
  await row.waitFor();
  await page.locator('[data-testid="clear-filters"], [data-testid="state-filter-all"]').first().click();

  // ---- the timeline shows the duplicate as a duplicate, with its raw request ----
  await row.click();
  await page.locator('[data-testid="job-detail"]').waitFor();

  // ---- what the job produced: its text, its links, its image (allowed by the CSP) ----
  const result = page.locator('[data-testid="job-result"]');
  await result.waitFor();
  check((await result.locator('[data-testid="result-text"]').textContent()).includes("42 pages crawled"), "the result's text is shown");
  const hrefs = await result.locator('[data-testid="result-links"] a').evaluateAll((els) => els.map((e) => e.getAttribute("href")));
  check(
    JSON.stringify(hrefs) === JSON.stringify(["https://results.example.invalid/shot.png", "https://results.example.invalid/crawl.jsonl"]),
    `the result's links, got ${hrefs}`,
  );
  const src = await result.locator('[data-testid="result-image"]').getAttribute("src");
  check(src === "https://results.example.invalid/shot.png", `the image is shown, got ${src}`);
  const events = page.locator('[data-testid="timeline-event"]');
  await events.nth(2).waitFor();
  const outcomes = await events.evaluateAll((els) => els.map((e) => e.getAttribute("data-outcome")));
  check(JSON.stringify(outcomes) === JSON.stringify(["applied", "duplicate", "applied"]), `outcomes applied, duplicate, applied; got ${outcomes}`);
  const duplicate = events.nth(1);
  check((await duplicate.locator('[data-outcome="duplicate"]').textContent()).trim() === "duplicate", "the badge reads duplicate");
  await duplicate.locator('[data-testid="show-request"]').click();
  await duplicate.locator('[data-testid="request-headers"]').waitFor();
  const headers = await duplicate.locator('[data-testid="request-headers"]').textContent();
  check(headers.includes("x-agent-signature"), "the raw headers are shown");
  const body = await duplicate.locator('[data-testid="request-body"]').textContent();
  check(body.includes('"deliveryId": "d-1"'), `the raw body is shown, got ${body}`);
  await shot(page, "ui-job-detail.png");
  await audit(page, "a job's view (request shown)");
  await shotBothThemes(page, "job");

  // ---- a job NeverMiss does not watch: said so, on a screen of its own ----
  await page.goto(`${base}/#/jobs/generic/no-such-job`);
  await page.locator('[data-testid="job-missing"]').waitFor();
  await audit(page, "a job's view (no such job)");
  await page.goto(`${base}/#/jobs/generic/ui-job-1`);
  await page.locator('[data-testid="job-detail"]').waitFor();

  // ---- copy id ----
  await page.locator('[data-testid="copy-id"]').click();
  await page.locator('[data-testid="copy-id"]', { hasText: "Copied" }).waitFor();
  const copied = await page.evaluate(() => navigator.clipboard.readText());
  check(copied === "ui-job-1", `the id is on the clipboard, got ${copied}`);

  // ---- poll now: no status API is set for generic, and the page says so ----
  await page.locator('[data-testid="poll-now"]').click();
  const pollResult = page.locator('[data-testid="poll-result"]');
  await pollResult.waitFor();
  check((await pollResult.textContent()).includes("base URL"), `poll now says why it could not poll, got ${await pollResult.textContent()}`);

  // ---- cancel: asked in the window first, then the provider's answer; a refusal as answered ----
  await step("replicate-jobs");
  // A click the moment Cancel appears, before the view's first paint has run its effects, opens
  // the question, and the question stays (an effect run at mount used to put Cancel back: a quick
  // keyboard user pressed Enter and saw nothing).
  await page.evaluate(() => {
    const clickOnSight = new MutationObserver(() => {
      const cancel = document.querySelector('[data-testid="cancel-job"]');
      if (cancel) {
        clickOnSight.disconnect();
        cancel.click();
      }
    });
    clickOnSight.observe(document.body, { childList: true, subtree: true });
    location.hash = "#/jobs/replicate/ui-cancel-1";
  });
  await page.locator('[data-testid="cancel-confirm"]').waitFor();
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(r, 200)))));
  check(await page.locator('[data-testid="cancel-confirm"]').isVisible(), "a click as soon as Cancel appears keeps its question open");
  await page.locator('[data-testid="cancel-no"]').click();
  await page.locator('[data-testid="job-detail"] [data-state="running"]').first().waitFor();
  await page.locator('[data-testid="cancel-job"]').click();
  await page.locator('[data-testid="cancel-confirm"]').waitFor();
  check((await page.locator('[data-testid="cancel-confirm"]').textContent()).includes("Ask replicate to cancel"), "the question names the provider");
  await audit(page, "a job's view (cancel asked)");
  await page.locator('[data-testid="cancel-no"]').click();
  await page.locator('[data-testid="cancel-job"]').waitFor();
  check((await page.locator('[data-testid="cancel-answer"]').count()) === 0, "keeping it running sends nothing");
  await page.locator('[data-testid="cancel-job"]').click();
  await page.locator('[data-testid="cancel-yes"]').click();
  const cancelAnswer = page.locator('[data-testid="cancel-answer"]');
  await cancelAnswer.waitFor();
  check((await cancelAnswer.textContent()).includes("replicate answered: accepted (status canceled)"), `the answer is shown, got ${await cancelAnswer.textContent()}`);
  await page.locator('[data-testid="job-detail"] [data-state="canceled"]').first().waitFor();
  await page.locator('[data-testid="timeline-event"][data-outcome="requested"]').waitFor();
  // The job's page on Replicate (its `urls.web`) is linked from the job view.
  const onProvider = page.locator('[data-testid="job-result"] [data-testid="result-links"] a', { hasText: "Open on replicate" });
  await onProvider.waitFor();
  const providerHref = await onProvider.getAttribute("href");
  check(providerHref.startsWith("https://replicate.com/p/"), `the provider's page is linked, got ${providerHref}`);
  await shot(page, "ui-cancel.png");
  await page.goto(`${base}/#/jobs/replicate/ui-refuse-1`);
  await page.locator('[data-testid="job-detail"] [data-state="running"]').first().waitFor();
  await page.locator('[data-testid="cancel-job"]').click();
  await page.locator('[data-testid="cancel-yes"]').click();
  await cancelAnswer.waitFor();
  const refusedText = await cancelAnswer.textContent();
  check(refusedText.includes("replicate refused: the provider answered 400: Prediction is already finishing"), `the refusal as answered, got ${refusedText}`);
  // Opened from a notification's "Cancel…" button (ntfy): the question is asked at once, and
  // nothing is sent until it is answered.
  await page.goto(`${base}/#/jobs/replicate/ui-refuse-1?ask=cancel`);
  await page.locator('[data-testid="cancel-confirm"]').waitFor();
  await page.locator('[data-testid="cancel-no"]').click();
  await page.locator('[data-testid="cancel-job"]').waitFor();

  // ---- Get started tests each provider its own way: one of the user's jobs, asked of it ----
  await page.locator('[data-testid="nav-start"]').click();
  await page.locator('[data-testid="guide-provider"]').selectOption("replicate");
  check((await page.locator('[data-testid="send-test"]').count()) === 0, "no generic test delivery offered for replicate");
  await page.locator('[data-testid="provider-test-id"]').fill("ui-refuse-1");
  await page.locator('[data-testid="provider-test-send"]').click();
  const asked = page.locator('[data-testid="provider-test-ok"]');
  await asked.waitFor();
  check((await asked.textContent()).includes("running"), `the guide shows what replicate answered, got ${await asked.textContent()}`);
  await page.locator('[data-testid="guide-provider"]').selectOption("generic");

  // ---- track a job from the form: it joins the list live ----
  await page.locator('[data-testid="nav-jobs"]').click();
  await page.locator('[data-testid="track-toggle"]').click();
  await page.locator('[data-testid="track-form"] input[name="job_id"]').fill("tracked-in-ui");
  await page.locator('[data-testid="track-form"] input[name="label"]').fill("from the form");
  await page.locator('[data-testid="track-form"] button[type="submit"]').click();
  await page.locator('[data-testid="track-ok"]', { hasText: "Now tracking generic/tracked-in-ui" }).waitFor();
  await page.locator('tr[data-job="generic/tracked-in-ui"]', { hasText: "from the form" }).waitFor();
  await page.locator('[data-testid="track-form"] input[name="job_id"]').fill("");
  await page.locator('[data-testid="track-form"] button[type="submit"]').click();
  await page.locator('[data-testid="track-error"]').waitFor();

  // ---- a phone's width (360 px): the jobs list as cards, nothing cut, nothing to scroll sideways ----
  await page.locator('[data-testid="nav-jobs"]').click();
  await page.locator('tr[data-job="generic/tracked-in-ui"]').waitFor();
  await page.setViewportSize({ width: 360, height: 740 });
  await settled(page);
  const phone = await page.evaluate(() => {
    const wrap = document.querySelector(".table-wrap");
    const row = document.querySelector('tr[data-job="generic/tracked-in-ui"]');
    const inside = (el) => {
      const r = el.getBoundingClientRect();
      return r.width > 0 && r.left >= 0 && r.right <= document.documentElement.clientWidth + 1;
    };
    return {
      page: document.documentElement.scrollWidth - document.documentElement.clientWidth,
      table: wrap.scrollWidth - wrap.clientWidth,
      shown: [".job-cell", ".col-provider", ".col-time", ".col-state"].every((c) => inside(row.querySelector(c))),
    };
  });
  check(phone.page <= 1 && phone.table <= 1, `at 360 px nothing scrolls sideways, got page ${phone.page} px, table ${phone.table} px`);
  check(phone.shown, "at 360 px a job's state, name, provider and age are all in view");
  await shot(page, "ui-jobs-phone.png");
  await page.setViewportSize(VIEWPORT);

  // ---- untrack: asked in the window first; then the job is gone from its view and the list ----
  await page.goto(`${base}/#/jobs/generic/tracked-in-ui`);
  await page.locator('[data-testid="untrack-job"]').click();
  await page.locator('[data-testid="untrack-confirm"]').waitFor();
  check((await page.locator('[data-testid="untrack-confirm"]').textContent()).includes("from the form"), "the question names the job");
  await audit(page, "a job's view (untrack asked)");
  await page.keyboard.press("Escape");
  await page.locator('[data-testid="untrack-job"]').waitFor();
  await page.locator('[data-testid="untrack-job"]').click();
  await page.locator('[data-testid="untrack-yes"]').click();
  await page.locator('[data-testid="jobs-screen"]').waitFor();
  await page.locator('tr[data-job="generic/tracked-in-ui"]').waitFor({ state: "detached" });
  await page.goto(`${base}/#/jobs/generic/tracked-in-ui`);
  await page.locator('[data-testid="job-missing"]').waitFor();

  // ---- the keyboard alone (page.keyboard, no clicks): shortcuts, the shortcut list, then track
  // a job from the form, open it from the list and cancel it ----
  await page.keyboard.press("g");
  await page.keyboard.press("m");
  await page.locator('[data-testid="metrics-screen"]').waitFor();
  await focusOnHeading(page, "Metrics");
  await page.keyboard.press("g");
  await page.keyboard.press("j");
  await page.locator('[data-testid="jobs-screen"]').waitFor();
  await focusOnHeading(page, "Jobs");
  await page.keyboard.press("?");
  const shortcuts = page.getByRole("dialog", { name: "Keyboard shortcuts" });
  await shortcuts.waitFor();
  check((await shortcuts.getAttribute("aria-modal")) === "true", "the shortcut list is a modal dialog");
  await focusLands(page, '[role="dialog"] *', "the shortcut list takes the focus");
  await page.keyboard.press("Tab");
  await focusLands(page, '[role="dialog"] *', "Tab stays inside the shortcut list");
  await audit(page, "the shortcut list");
  await page.keyboard.press("Escape");
  await shortcuts.waitFor({ state: "detached" });
  await focusOnHeading(page, "Jobs"); // where it was before the list opened

  await tabTo(page, '[data-testid="track-toggle"]');
  await page.keyboard.press("Enter");
  await focusLands(page, '[data-testid="track-form"] select[name="provider"]', "the form's first field takes the focus");
  await arrowSelect(page, "replicate");
  await page.keyboard.press("Tab");
  await focusLands(page, 'input[name="job_id"]', "Tab goes from the provider to the job id");
  await page.keyboard.type("ui-keyboard-1");
  await page.keyboard.press("Tab");
  await page.keyboard.type("walked by keyboard");
  await page.keyboard.press("Enter");
  await page.locator('[data-testid="track-ok"]', { hasText: "Now tracking replicate/ui-keyboard-1" }).waitFor();
  const walked = page.locator('tr[data-job="replicate/ui-keyboard-1"]');
  await walked.waitFor();
  await tabTo(page, 'tr[data-job="replicate/ui-keyboard-1"] .job-cell a:not(.group-badge)');
  await page.keyboard.press("Enter");
  await page.locator('[data-testid="job-detail"]').waitFor();
  await focusOnHeading(page, "walked by keyboard");
  await tabTo(page, '[data-testid="cancel-job"]');
  await page.keyboard.press("Enter");
  await page.locator('[data-testid="cancel-confirm"]').waitFor();
  await focusLands(page, '[data-testid="cancel-no"]', "the cancel's question takes the focus on its safe answer");
  await page.keyboard.press("Escape");
  await page.locator('[data-testid="cancel-confirm"]').waitFor({ state: "detached" });
  await focusLands(page, '[data-testid="cancel-job"]', "Escape keeps the job running and gives the focus back to Cancel");
  await page.keyboard.press("Enter");
  await page.locator('[data-testid="cancel-confirm"]').waitFor();
  await focusLands(page, '[data-testid="cancel-no"]', "asked again, the question takes the focus again");
  await page.keyboard.press("Shift+Tab");
  await focusLands(page, '[data-testid="cancel-yes"]', "Shift+Tab reaches Yes, cancel it");
  await page.keyboard.press("Enter");
  await cancelAnswer.waitFor();
  check((await cancelAnswer.textContent()).includes("replicate answered: accepted"), `the answer is shown, got ${await cancelAnswer.textContent()}`);
  await focusLands(page, ".cancel-answer", "the focus follows to the answer");
  await page.locator('[data-testid="job-detail"] [data-state="canceled"]').first().waitFor();
  await tabTo(page, '[data-testid="poll-now"]', { back: true });
  await page.keyboard.press("Enter");
  await page.locator('[data-testid="poll-result"]').waitFor();

  // ---- the theme: as the OS, or forced from Settings (kept in this browser) ----
  await page.keyboard.press("g");
  await page.keyboard.press("s");
  await page.locator('[data-testid="settings-screen"]').waitFor();
  await focusOnHeading(page, "Settings");
  const themeShown = () => page.evaluate(() => document.documentElement.dataset.theme);
  await page.emulateMedia({ colorScheme: "light" });
  await tabTo(page, "#f-theme");
  await arrowSelect(page, "dark");
  check((await themeShown()) === "dark", "Dark, chosen under a light OS, shows at once");
  await page.reload();
  await page.locator('[data-testid="settings-screen"]').waitFor();
  check((await themeShown()) === "dark", "the forced theme is kept over a reload");
  await page.locator("#f-theme").selectOption("system");
  check((await themeShown()) === "light", "As the system: light under a light OS");
  await page.emulateMedia({ colorScheme: "dark" });
  await page.waitForFunction(() => document.documentElement.dataset.theme === "dark");
  await page.emulateMedia({ colorScheme: null });
  await page.locator('[data-testid="nav-jobs"]').click();

  // ---- groups: a sweep's progress, its jobs filtered, its end ----
  await step("group-sweep");
  const sweep = page.locator('[data-testid="group"][data-group="ui-sweep"]');
  await sweep.filter({ hasText: "1 of 3 done · 1 failed" }).waitFor();
  await sweep.click();
  await page.locator('[data-testid="group-filter"]', { hasText: "ui-sweep" }).waitFor();
  check(page.url().includes("group=ui-sweep"), `the filter is in the address, got ${page.url()}`);
  await page.waitForFunction(() => document.querySelectorAll('tr[data-job]').length === 3);
  const sweepRows = await page.locator("tr[data-job]").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-job")).sort());
  check(JSON.stringify(sweepRows) === JSON.stringify(["generic/ui-g-1", "generic/ui-g-2", "generic/ui-g-3"]), `only the sweep's jobs, got ${sweepRows}`);
  check((await page.locator('[data-testid="job-group"]').count()) === 3, "each row names its group");
  await step("group-sweep-done");
  await page.locator('tr[data-job="generic/ui-g-2"] [data-state="succeeded"]').waitFor();
  await page.locator('[data-testid="group-filter"]').click();
  await sweep.filter({ hasText: "all 3 done · 1 failed" }).waitFor();
  await shot(page, "ui-groups.png");
  await audit(page, "jobs (groups, finished and failed jobs)");
  // Reduced motion asked by the OS: a job that just changed is marked without the fade.
  const freshAnimation = () =>
    page.evaluate(() => {
      const row = document.querySelector("tr[data-job]");
      row.classList.add("fresh");
      const name = getComputedStyle(row).animationName;
      row.classList.remove("fresh");
      return name;
    });
  check((await freshAnimation()) === "fresh", "a changed row fades in by default");
  await page.emulateMedia({ reducedMotion: "reduce" });
  check((await freshAnimation()) === "none", "no fade when the OS asks for reduced motion");
  await page.emulateMedia({ reducedMotion: null });
  await shotBothThemes(page, "jobs");

  // ---- settings: a bad polling interval is refused next to the field; good ones survive a restart ----
  await page.locator('[data-testid="nav-settings"]').click();
  await page.locator('[data-testid="settings-screen"]').waitFor();
  // In sections: the providers set up first, the others folded away under their own heading.
  check((await page.locator('[data-testid="settings-sections"] a').count()) >= 5, "the settings' sections are linked at the top");
  const folded = page.locator('[data-testid="other-providers"]');
  check((await folded.locator('[data-provider="fal"]').count()) === 1, "fal, with nothing set, is among the other providers");
  check((await folded.locator('[data-provider="replicate"]').count()) === 0, "replicate, set up, is not folded away");
  check(!(await page.locator('[data-provider="fal"]').isVisible()), "the other providers start folded");
  // A recipe refused at start is said here, with its file and key.
  const refusedRecipes = page.locator('[data-testid="refused-recipes"]');
  await refusedRecipes.waitFor();
  check((await refusedRecipes.textContent()).includes("typo.toml:") && (await refusedRecipes.textContent()).includes(": read.colour: unknown field"), "a refused recipe is shown with its file and key");
  await page.locator("#f-poll_interval_secs").fill("2");
  await page.locator('[data-testid="save-settings"]').click();
  const refusal = page.locator('[data-field="poll_interval_secs"] [data-testid="error-poll_interval_secs"]');
  await refusal.waitFor();
  check((await refusal.textContent()).includes("at least 5s"), "the refusal says the minimum, as people write it");
  await shot(page, "ui-settings-refused.png");
  await audit(page, "settings (a value refused)");
  await shotBothThemes(page, "settings");

  // Plain seconds and durations as people write them are both taken.
  check((await page.locator("#f-stuck_threshold_secs").inputValue()) === "30m", "the stuck threshold shows as 30m, not 1800");
  await page.locator("#f-poll_interval_secs").fill("45");
  await page.locator("#f-sla_secs").fill("10m");
  // Discovery is offered for Replicate only (it can list its jobs), off until turned on.
  const discover = page.locator('[data-field="replicate.discover"] select');
  check((await discover.inputValue()) === "off", "Replicate discovery starts off");
  check((await page.locator('[data-field="generic.discover"]').count()) === 0, "no discovery choice for a provider that cannot list its jobs");
  await discover.selectOption("on");
  // The desktop's sounds start off; an urgent one is chosen from the sound theme's names.
  const urgentSound = page.locator('[data-field="sound_urgent"] select');
  check((await urgentSound.inputValue()) === "off", "the urgent sound starts off");
  check((await page.locator('[data-field="sound_normal"] select').inputValue()) === "off", "the other sound starts off");
  await urgentSound.selectOption("dialog-warning");
  await page.locator('[data-testid="save-settings"]').click();
  await page.locator('[data-testid="settings-saved"]').waitFor();
  check((await refusal.count()) === 0, "the refusal is gone once the value is good");

  // The page leaves the engine before it stops: its live stream would otherwise try to reconnect
  // to the stopped one, and each refused connection is a console error (a test's doing, not the page's).
  await page.goto("about:blank");
  const restarted = await step("restart");
  base = restarted.url;
  await page.goto(`${base}/#token=${TOKEN}&view=/settings`);
  await page.locator('[data-testid="settings-screen"]').waitFor();
  check((await page.locator("#f-poll_interval_secs").inputValue()) === "45s", "the polling interval survived the restart, shown as 45s");
  check((await page.locator("#f-sla_secs").inputValue()) === "10m", "the SLA survived the restart, shown as 10m");
  check((await page.locator('[data-field="replicate.discover"] select').inputValue()) === "on", "Replicate discovery stayed on after the restart");
  check((await page.locator('[data-field="sound_urgent"] select').inputValue()) === "dialog-warning", "the urgent sound stayed chosen after the restart");
  await shot(page, "ui-settings-after-restart.png");

  // ---- channels: a webhook with a bad address is refused next to the field; fixed, it is listed ----
  await page.locator('[data-testid="add-channel"]').click();
  const add = page.locator('[data-testid="add-channel-form"]');
  await add.locator("#ch-new-name").fill("ops-hook");
  await add.locator("#ch-new-kind").selectOption("webhook");
  await add.locator("#ch-new-url").fill("not an address");
  await add.getByRole("button", { name: "Generate" }).click();
  check((await add.locator("#ch-new-secret").inputValue()).startsWith("whsec_"), "a Standard Webhooks secret is generated");
  await add.locator('[data-testid="save-new-channel"]').click();
  const urlRefusal = add.locator('[data-field="url"] [data-testid="channel-field-error-url"]');
  await urlRefusal.waitFor();
  check((await urlRefusal.textContent()).includes("http://"), "the refusal says the address must be http(s)");
  check((await page.locator('[data-channel="ops-hook"]').count()) === 0, "a refused channel is not listed");
  await shot(page, "ui-channel-refused.png");
  await add.locator("#ch-new-url").fill("http://127.0.0.1:9/hooks/nevermiss");
  await add.locator('[data-testid="save-new-channel"]').click();
  const listed = page.locator('[data-channel="ops-hook"]');
  await listed.waitFor();
  check((await listed.locator("#ch-ops-hook-url").inputValue()) === "http://127.0.0.1:9/hooks/nevermiss", "the channel is listed with its address");
  check((await listed.locator('[data-testid="channel-secret-secret"]').textContent()) === "set", "its signing secret shows only as set");
  check((await listed.locator("#ch-ops-hook-secret").inputValue()) === "", "the secret's value is never shown back");
  check((await page.locator('[data-testid="add-channel-form"]').count()) === 0, "the add form closes once the channel is added");
  await shot(page, "ui-channels.png");

  // ---- refused: a delivery with a bad signature, listed with its cause ----
  await step("deliver-bad-signature");
  await page.locator('[data-testid="nav-refused"]').click();
  await page.locator('[data-testid="refused"] [data-refusal]').first().waitFor();
  // Its request opens from the keyboard too.
  await page.locator('[data-testid="refusal-toggle"]').first().focus();
  await page.keyboard.press("Enter");
  await page.locator('[data-testid="refused"] pre.raw').first().waitFor();
  check((await page.locator('[data-testid="refusal-toggle"]').first().getAttribute("aria-expanded")) === "true", "the toggle says it is open");
  await shot(page, "ui-refused.png");
  await audit(page, "refused");

  // ---- text is text: a label with a right-to-left override shows the override, not "live" ----
  await step("deliver-reversed-label");
  await page.locator('[data-testid="nav-jobs"]').click();
  const reversed = page.locator('[data-job="generic/ui-reversed"] .job-label');
  await reversed.waitFor();
  const shown = await reversed.textContent();
  check(shown === "[U+202E]evil", `a label's bidirectional override is shown, not applied (shown: ${JSON.stringify(shown)})`);

  // ---- metrics: the counters the deliveries moved ----
  await page.locator('[data-testid="nav-metrics"]').click();
  await page.locator('[data-testid="metrics-screen"]').waitFor();
  await page.locator('[data-metric="duplicates"] .tile-value', { hasText: "1" }).waitFor();
  await page.locator('[data-testid="chart-deliveries"] canvas').waitFor();
  // The three cancels asked above (two accepted, one by the keyboard alone; one refused) are in
  // their hour's chart.
  await page.locator('[data-testid="chart-cancels"] canvas').waitFor();
  await page.locator('[data-testid="chart-cancels-card"] h3', { hasText: "(3 in this window)" }).waitFor();
  await shot(page, "ui-metrics.png");
  await audit(page, "metrics");
  await shotBothThemes(page, "metrics");

  // A job whose provider has no API key: tracked, and said at once that it cannot be polled.
  await page.locator('[data-testid="nav-jobs"]').click();
  await page.locator('[data-testid="track-toggle"]').click();
  await page.locator('[data-testid="track-form"] select[name="provider"]').selectOption("anthropic");
  await page.locator('[data-testid="track-form"] input[name="job_id"]').fill("msgbatch_ui_nokey");
  await page.locator('[data-testid="track-form"] input[name="group"]').fill("ui-nokey");
  await page.locator('[data-testid="track-form"] button[type="submit"]').click();
  const trackProblem = page.locator('[data-testid="track-problem"]');
  await trackProblem.waitFor();
  check((await trackProblem.textContent()).includes("no API key"), `the track form says why it cannot be polled, got ${await trackProblem.textContent()}`);
  await page.locator('tr[data-job="anthropic/msgbatch_ui_nokey"]').waitFor();
  await page.goto(`${base}/#/jobs/anthropic/msgbatch_ui_nokey`);
  await page.locator('[data-testid="provider-problem"]').waitFor();
  await page.locator('[data-testid="detail-group"]', { hasText: "ui-nokey" }).waitFor();
  // Every screen says it too (the banner of problems), naming the provider.
  await page.locator('[data-provider-warning="anthropic"]').waitFor();
  // The Metrics screen answers first whether anything is not watched.
  await page.locator('[data-testid="nav-metrics"]').click();
  await page.locator('[data-testid="watch-summary"]', { hasText: "anthropic: its jobs cannot be polled" }).waitFor();
  check(/unfinished jobs?, \d+ problems?/.test(await page.locator('[data-testid="watch-summary"] strong').textContent()), "the summary counts the problems");

  // ---- the README's and the book's pictures: the fixed data set, on an engine of its own ----
  // The viewport only (what a reader sees first), in both themes; the clock of the page is the
  // real one, and the data set's times are relative to now, so every run reads the same.
  {
    const docs = await step("docs-data");
    const docsPage = await context.newPage();
    docsPage.setDefaultTimeout(WAIT);
    // Each picture as tall as its screen's content with this data set (no empty band below).
    const docShot = async (name, height) => {
      await docsPage.setViewportSize({ width: VIEWPORT.width, height });
      for (const scheme of ["light", "dark"]) {
        await docsPage.emulateMedia({ colorScheme: scheme });
        await settled(docsPage);
        await docsPage.screenshot({ path: join(DOC_SHOTS, `${name}-${scheme}.png`) });
      }
      await docsPage.emulateMedia({ colorScheme: null });
    };
    await docsPage.goto(`${docs.url}/#token=${docs.token}`);
    await docsPage.locator('[data-testid="jobs-table"]').waitFor();
    for (const job of ["generic/nightly-crawl-1204", "generic/embed-shard-3", "generic/render-trailer", "replicate/q8hdrx3n2srm80ckv7ws6y1bgr", "generic/eval-sweep-7-seed-2"]) {
      await docsPage.locator(`tr[data-job="${job}"]`).waitFor();
    }
    await docsPage.locator('[data-testid="connection"]', { hasText: "live" }).waitFor();
    await docsPage.mouse.move(VIEWPORT.width - 1, 1);
    await docShot("jobs", 660);
    await docsPage.goto(`${docs.url}/#/jobs/generic/nightly-crawl-1204`);
    await docsPage.locator('[data-testid="job-result"]').waitFor();
    await docsPage.locator('[data-testid="timeline-event"]').nth(2).waitFor();
    await docShot("job", 520);
    await docsPage.close();
  }

  console.log(`axe, per screen:\n  ${axeSummary.join("\n  ")}`);
  if (axeBlocking.length) problems.push(`axe found ${axeBlocking.length} serious or critical violation(s):\n${axeBlocking.join("\n")}`);
  if (problems.length) throw new Error(`the page reported problems:\n${problems.join("\n")}`);
  console.log("browser: all checks passed");
} catch (e) {
  if (page) await shot(page, "ui-failure.png").catch(() => {});
  console.error(`browser: ${e.stack ?? e}`);
  if (problems.length) console.error(problems.join("\n"));
  process.exitCode = 1;
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
  process.stdin.destroy();
}
