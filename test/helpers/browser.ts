/**
 * A real browser for the console's tests: Debian's Chromium driven by playwright-core (which
 * downloads no browser), and axe-core's check of a page through @axe-core/playwright.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import AxeBuilder from '@axe-core/playwright';
import { type Browser, chromium, type Page } from 'playwright-core';
import { CHROMIUM_MISSING, chromiumPath } from './chromium.ts';

/** Where screenshots go: test artifacts, never committed (test-output/ is ignored). */
export const SCREENSHOTS = join(process.cwd(), 'test-output', 'console');

export async function launchChromium(): Promise<Browser> {
  const executablePath = chromiumPath();
  if (executablePath === undefined) throw new Error(CHROMIUM_MISSING);
  return await chromium.launch({
    executablePath,
    args: [
      ...(process.getuid?.() === 0 ? ['--no-sandbox'] : []),
      // Nothing but loopback: every other host name resolves to nothing.
      '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1',
    ],
  });
}

/** axe-core's serious and critical violations on the page as it stands, one line each. */
export async function seriousViolations(page: Page): Promise<string[]> {
  const results = await new AxeBuilder({ page })
    .withTags(['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa'])
    .analyze();
  return results.violations
    .filter((violation) => violation.impact === 'serious' || violation.impact === 'critical')
    .map(
      (violation) =>
        `${violation.id}: ${violation.help} (${violation.nodes.map((node) => node.target.join(' ')).join('; ')})`,
    );
}

/** A screenshot of the whole page as a test artifact. */
export async function keepScreenshot(page: Page, name: string): Promise<void> {
  await mkdir(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
}
