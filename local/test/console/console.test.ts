/**
 * The privacy console as a person reaches it: `svc-dsr local --serve` prints its address and the
 * sign-in codes, and Debian's Chromium signs in and does the daily tasks through the page alone.
 * Every page is checked with axe-core; screenshots are kept in test-output/console/.
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RECORD_COLUMNS } from '../../../lambdas/shared/evidence/record-columns.ts';
import { keepScreenshot, launchChromium, seriousViolations } from '../../../test/helpers/browser.ts';
import { killServer, type ServingLocal, serveLocal } from '../../../test/helpers/cli.ts';

let workdir: string;
let server: ServingLocal;
let browser: Browser;
let api = '';
let consoleUrl = '';
const codes = new Map<string, string>();
/** Every URL a page of these tests asked for or went to, and what its storage held at the end. */
const seenUrls: string[] = [];

const KEYS = { first: 'u-alice', batch: 'u-chloe' };
/** A reference a hostile or careless person typed: the page must show it as text. */
const HOSTILE_REFERENCE = '<script>window.__pwned=1</script>';

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-console-'));
  const faults = join(workdir, 'faults.json');
  // The first six export attempts fail: the first two access requests each fail after three.
  await writeFile(faults, JSON.stringify({ export_outcomes: Array(6).fill('failed') }));
  server = await serveLocal(join(workdir, 'data'), ['--faults', faults]);
  for (let attempt = 0; !server.stderr().includes('trade one for a token'); attempt++) {
    if (attempt > 80) throw new Error(`no sign-in codes printed: ${server.stderr()}`);
    await delay(250);
  }
  const text = server.stderr();
  api = /the API at (http:\/\/127\.0\.0\.1:\d+)/.exec(text)?.[1] ?? '';
  consoleUrl = /the privacy console at (\S+)/.exec(text)?.[1] ?? '';
  for (const [, role, code] of text.matchAll(/^ {2}(privacy-team|auditor): (\S+)$/gm))
    codes.set(role ?? '', code ?? '');
  browser = await launchChromium();
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await killServer(server, 'SIGTERM');
  await rm(workdir, { recursive: true, force: true });
});

async function openPage(context: BrowserContext): Promise<Page> {
  const page = await context.newPage();
  page.on('request', (request) => seenUrls.push(request.url()));
  page.on('framenavigated', (frame) => seenUrls.push(frame.url()));
  return page;
}

async function signIn(page: Page, role: 'privacy-team' | 'auditor', username: string): Promise<void> {
  await page.goto(consoleUrl);
  await page.getByLabel('Your name').fill(username);
  await page.getByLabel('One-time code').fill(codes.get(role) ?? '');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Today' }).waitFor();
}

async function accessible(page: Page, name: string): Promise<void> {
  await keepScreenshot(page, name);
  expect(await seriousViolations(page), name).toEqual([]);
}

/** Opens a request's page, reloading until its status reads `status`. */
async function untilStatus(page: Page, requestId: string, status: string): Promise<void> {
  let shown = '';
  // The page reads a request on its way again by itself: this only opens it and watches.
  if (!page.url().endsWith(`#/requests/${requestId}`))
    await page.goto(`${consoleUrl}#/requests/${requestId}`);
  await page.getByRole('heading', { name: 'Timeline' }).waitFor();
  for (let attempt = 0; attempt < 120; attempt++) {
    shown = await page.locator('.facts div', { hasText: 'Status' }).locator('dd').innerText();
    if (shown.startsWith(status)) return;
    await delay(500);
  }
  throw new Error(`request ${requestId} never showed ${status}: it shows ${shown}`);
}

async function act(
  page: Page,
  action: string,
  fill: (page: Page) => Promise<void>,
  confirm: RegExp,
): Promise<string> {
  await page.getByRole('button', { name: `${action}…` }).click();
  await fill(page);
  await page
    .getByRole('button', { name: 'Review' })
    .click()
    .catch(async (error: unknown) => {
      await keepScreenshot(page, `failed-${action}`);
      throw new Error(`${String(error)}; the page read: ${await page.locator('main').innerText()}`);
    });
  const consequence = await page.locator('.consequence').innerText();
  await page.getByRole('button', { name: confirm }).click();
  await page
    .locator('p.done[role="status"]', {
      hasText: action === 'Hand out the package' ? 'Package handed out' : `${action}: done`,
    })
    .waitFor();
  return consequence;
}

async function timelineOf(requestId: string, token: string): Promise<string> {
  const answer = await fetch(`${api}/requests/${requestId}/timeline`, {
    headers: { authorization: `Bearer ${token}` },
  });
  return await answer.text();
}

describe('the privacy console in a real browser', () => {
  let firstId = '';
  let batchId = '';
  let janeToken = '';

  it('signs the privacy team in and does the daily tasks through the page alone', async () => {
    // Prepare
    const context = await browser.newContext();
    const page = await openPage(context);
    await page.goto(consoleUrl);
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    await accessible(page, 'sign-in');

    // Act: sign in, then submit one request by form (the first attempt fails on the network and keeps what was typed)
    await signIn(page, 'privacy-team', 'jane');
    await accessible(page, 'today');
    janeToken = (await page.evaluate<string | null>("sessionStorage.getItem('svc-dsr-token')")) ?? '';
    await page.getByRole('link', { name: 'New request' }).click();
    await page.getByRole('heading', { name: 'New request' }).waitFor();
    await accessible(page, 'new-request');
    await page.getByLabel("Subject's primary key").fill(KEYS.first);
    await page.getByLabel('Reference (optional)').fill(HOSTILE_REFERENCE);
    let refused = false;
    await page.route('**/requests', async (route) => {
      if (!refused && route.request().method() === 'POST') {
        refused = true;
        await route.abort('connectionreset');
      } else await route.continue();
    });
    await page.getByRole('button', { name: 'Send the request' }).click();
    await page.getByRole('alert').filter({ hasText: 'cannot be reached' }).waitFor();
    const kept = await page.getByLabel("Subject's primary key").inputValue();
    await page.getByRole('button', { name: 'Send the request' }).click();
    const sent = page.locator('p.done', { hasText: 'Sent: request' });
    await sent.waitFor();
    firstId = (await sent.getByRole('link').getAttribute('href'))?.replace('#/requests/', '') ?? '';

    // Act: a batch with one bad line, judged before anything is sent
    batchId = randomUUID();
    const received = new Date(Date.now() - 86_400_000).toISOString();
    const good = {
      request_id: batchId,
      type: 'access',
      regulation: 'ccpa',
      primary_key: KEYS.batch,
      received_at: received,
      verification: { method: 'email_link', verified_by: 'jane', verified_at: received },
      reference: 'BATCH-1',
    };
    const bad = { ...good, request_id: randomUUID(), type: 'forget-me' };
    await page.getByLabel('File (.csv, .jsonl or .json)').setInputFiles({
      name: 'batch.jsonl',
      mimeType: 'application/x-ndjson',
      buffer: Buffer.from(`${JSON.stringify(good)}\n${JSON.stringify(bad)}\n`),
    });
    await page.getByRole('button', { name: 'Check every line' }).click();
    await page.getByText('2 line(s): 1 valid, 1 refused; nothing sent yet.').waitFor();
    const verdicts = await page.locator('table', { hasText: "Each line's verdict" }).innerText();
    await accessible(page, 'batch-verdicts');
    await page.getByRole('button', { name: 'Send the 1 valid line(s)' }).click();
    await page.getByText('; 1 sent.').waitFor();

    // Act: the batch's request fails too (the last three failed attempts are its own); deny it
    await untilStatus(page, batchId, 'failed');
    const receiptOwed = await page.locator('.notices li.owed').innerText();
    await act(
      page,
      'Deny',
      async (p) => {
        await p.getByLabel('Ground').selectOption('identity_not_verified');
        await p.getByLabel('Reason', { exact: true }).fill('the account login did not match');
      },
      /Confirm: deny/,
    );
    await untilStatus(page, batchId, 'denied');

    // Act: the first request failed first; extend it, retry it, follow it to its end, hand out its package, record the response
    await untilStatus(page, firstId, 'failed');
    const shownReference = await page
      .locator('.facts div', { hasText: 'Reference' })
      .locator('dd')
      .innerText();
    await accessible(page, 'request-failed');
    const extended = await act(
      page,
      'Extend the deadline',
      async (p) => {
        await p.getByLabel('Reason').fill('the platform export keeps failing');
        await p.getByLabel('Notice reference (optional)').fill('LETTER-7');
      },
      /Confirm: extend/,
    );
    await act(
      page,
      'Retry',
      async (p) => p.getByLabel('Reason (optional)').fill('platform fixed'),
      /Confirm: retry/,
    );
    await untilStatus(page, firstId, 'completed');
    await act(
      page,
      'Hand out the package',
      async (p) => p.getByLabel('Link valid for (minutes)').fill('15'),
      /Confirm: hand out/,
    );
    const link = await page.getByRole('link', { name: /Download your-data-/ }).getAttribute('href');
    await act(
      page,
      'Record a notice',
      async (p) => {
        await p.getByLabel('Notice', { exact: true }).selectOption('response');
      },
      /Confirm: record a notice/,
    );
    await page.locator('.notices', { hasText: 'response: given by email' }).waitFor();
    const notices = await page.locator('.notices').innerText();
    await accessible(page, 'request-completed');

    // Act: the list, the report
    await page.goto(`${consoleUrl}#/requests?type=access`);
    await page.getByRole('button', { name: 'Next page' }).waitFor();
    await accessible(page, 'requests');
    await page.goto(`${consoleUrl}#/report`);
    await page
      .getByRole('heading', { name: '§7102 metrics' })
      .or(page.getByText('§7102 metrics'))
      .first()
      .waitFor();
    await accessible(page, 'report');
    const [download] = await Promise.all([
      page.waitForEvent('download'),
      page.getByRole('link', { name: /Download the §7101 records/ }).click(),
    ]);
    const csv = await readFile((await download.path()) ?? '', 'utf8');
    const storage = await page.evaluate<string>('JSON.stringify({ ...sessionStorage, ...localStorage })');
    await context.close();

    // Assess
    expect(kept).toBe(KEYS.first);
    // The file `svc-dsr report --format csv --table records` writes: its columns, a row per request.
    expect(csv.split('\r\n')[0]).toBe(RECORD_COLUMNS.join(','));
    expect(csv).toContain(firstId);
    expect(csv).toContain(batchId);
    expect(csv).toContain('identity_not_verified');
    expect(verdicts).toMatch(/2\s+\S+\s+refused\s+type/);
    expect(shownReference).toBe(HOSTILE_REFERENCE);
    expect(receiptOwed).toMatch(/^receipt: due by \d{4}-\d\d-\d\d/);
    expect(extended).toContain('moves out');
    expect(notices).toMatch(/extension: given by email/);
    expect(link).toMatch(/^http:\/\/127\.0\.0\.1:\d+\//);
    const first = await timelineOf(firstId, janeToken);
    for (const action of ['deadline_extended', 'request_retried', 'package_handed_out', 'notice_given']) {
      expect(first, action).toMatch(
        new RegExp(`"action":"${action}"[^}]*"operator":"console:jane \\(sub local-jane\\)"`),
      );
    }
    expect(await timelineOf(batchId, janeToken)).toContain('"operator":"console:jane (sub local-jane)"');
    const seen = [...seenUrls, storage].join('\n');
    for (const key of Object.values(KEYS)) expect(seen).not.toContain(key);
  }, 240_000);

  it('shows an auditor the same requests and the report with no action, and the API refuses an action forced from the page', async () => {
    // Prepare
    const context = await browser.newContext();
    const page = await openPage(context);
    await signIn(page, 'auditor', 'avery');

    // Act
    await page.goto(`${consoleUrl}#/requests/${firstId}`);
    await page
      .getByRole('heading', { name: 'Timeline' })
      .waitFor()
      .catch(async (error: unknown) => {
        throw new Error(`${String(error)}; the page read: ${await page.locator('body').innerText()}`);
      });
    const buttons = await page.getByRole('button').allInnerTexts();
    const text = await page.locator('main').innerText();
    await accessible(page, 'auditor-request');
    const nav = await page.getByRole('navigation', { name: 'Pages' }).innerText();
    await page.goto(`${consoleUrl}#/report`);
    await page.getByText('§7102 metrics').first().waitFor();
    await accessible(page, 'auditor-report');
    // Scripts given to the page are text: this file is type-checked with Node's types, not the DOM's.
    const forced = await page.evaluate<{ status: number; body: string }>(`(async () => {
      const answer = await fetch('/requests/${firstId}/cancel', {
        method: 'POST',
        headers: { authorization: 'Bearer ' + sessionStorage.getItem('svc-dsr-token'), 'content-type': 'application/json' },
        body: JSON.stringify({ reason: 'forced from the console' }),
      });
      return { status: answer.status, body: await answer.text() };
    })()`);
    await context.close();

    // Assess
    expect(
      buttons.filter((label) => /Retry|Extend|Deny|Cancel|Hand out|Record a notice/.test(label)),
    ).toEqual([]);
    expect(text).not.toContain('Actions');
    expect(text).not.toContain(KEYS.first);
    expect(nav).not.toContain('New request');
    expect(forced.status).toBe(403);
    expect(forced.body).toContain('forbidden');
  }, 120_000);

  it('runs no script a page did not ship: a reference holding <script> is text, and an injected inline script is blocked', async () => {
    // Prepare
    const context = await browser.newContext();
    const page = await openPage(context);
    const violations: string[] = [];
    page.on('console', (message) => {
      if (/Content Security Policy/i.test(message.text())) violations.push(message.text());
    });

    // Act
    await page.goto(consoleUrl);
    const blocked = await page.evaluate<{ flagged: boolean; pwned: number | null }>(`(async () => {
      const flagged = new Promise((resolve) => {
        document.addEventListener('securitypolicyviolation', () => resolve(true), { once: true });
        setTimeout(() => resolve(false), 2000);
      });
      const script = document.createElement('script');
      script.textContent = 'window.__pwned = 2';
      document.body.append(script);
      const image = document.createElement('div');
      image.innerHTML = '<img src="data:," onerror="window.__pwned = 3">';
      document.body.append(image);
      return { flagged: await flagged, pwned: window.__pwned ?? null };
    })()`);
    const headers = (await page.request.get(consoleUrl)).headers();
    await context.close();

    // Assess
    expect(blocked).toEqual({ flagged: true, pwned: null });
    expect(headers['content-security-policy']).toContain("script-src 'self'");
    expect(headers['content-security-policy']).not.toContain('unsafe-inline');
    expect(headers['content-security-policy']).toContain("frame-ancestors 'none'");
    expect(headers['referrer-policy']).toBe('no-referrer');
  }, 60_000);

  it('is operable from the keyboard alone, and says so when the API is slow', async () => {
    // Prepare: the privacy team's session of the first test; the list's first answer held back 4 s
    const context = await browser.newContext();
    await context.addInitScript(`sessionStorage.setItem('svc-dsr-token', ${JSON.stringify(janeToken)})`);
    const page = await openPage(context);
    let held = false;
    await page.route(/\/requests\?/, async (route) => {
      if (!held) {
        held = true;
        await delay(4000);
      }
      await route.continue();
    });
    await page.goto(`${consoleUrl}#/report`);
    await page.getByRole('heading', { name: /^Report/ }).waitFor();

    // Act: Tab to the Requests link and press Enter; then to a request's link the same way
    const focused: string[] = [];
    for (let presses = 0; presses < 10; presses++) {
      await page.keyboard.press('Tab');
      const name = await page.evaluate<string>('document.activeElement?.textContent ?? ""');
      focused.push(name.trim());
      if (name.trim() === 'Requests') break;
    }
    await page.keyboard.press('Enter');
    const slow = await page.getByText('Still waiting for the API').innerText({ timeout: 10_000 });
    await page.getByRole('button', { name: 'Apply filters' }).waitFor();
    await page.getByLabel('Status').focus();
    await page.keyboard.press('Tab');
    const next = await page.evaluate<string>(
      'document.activeElement?.previousElementSibling?.textContent ?? ""',
    );
    await context.close();

    // Assess
    expect(focused[0]).toBe('Skip to the page');
    expect(focused.at(-1)).toBe('Requests');
    expect(slow).toContain('keeps what you typed');
    expect(next).toBe('Type');
  }, 60_000);

  it('reads on a narrow screen and at 200% zoom without scrolling sideways, on every page', async () => {
    // Prepare: the privacy team's session of the first test, in a phone-wide window
    const context = await browser.newContext({ viewport: { width: 320, height: 720 } });
    await context.addInitScript(`sessionStorage.setItem('svc-dsr-token', ${JSON.stringify(janeToken)})`);
    const page = await openPage(context);
    const pages = {
      today: 'Today',
      requests: 'Requests',
      [`requests/${firstId}`]: 'Timeline',
      new: 'New request',
      report: 'Audit manifests',
    };

    // Act
    const overflows: Record<string, number> = {};
    for (const [path, heading] of Object.entries(pages)) {
      await page.goto(`${consoleUrl}#/${path}`);
      await page.getByRole('heading', { name: heading }).waitFor();
      overflows[path] = await page.evaluate<number>(
        'document.documentElement.scrollWidth - document.documentElement.clientWidth',
      );
      await keepScreenshot(page, `narrow-${path.split('/')[0]}`);
    }
    // 200% zoom of a 640-pixel window: the same 320 CSS pixels, text twice the size
    await page.setViewportSize({ width: 640, height: 720 });
    await page.evaluate("document.documentElement.style.zoom = '2'");
    const zoomed = await page.evaluate<number>(
      'document.documentElement.scrollWidth - document.documentElement.clientWidth',
    );
    await keepScreenshot(page, 'report-zoomed');
    await context.close();

    // Assess
    expect(overflows).toEqual(Object.fromEntries(Object.keys(pages).map((path) => [path, 0])));
    expect(zoomed).toBeLessThanOrEqual(0);
  }, 60_000);
});
