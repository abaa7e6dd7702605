import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { build } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  bundledPackageSettings,
  PACKAGE_PLACEHOLDERS,
  PACKAGE_SETTINGS_DEFINE,
  packageSettingsFromEnv,
} from '../../../../lambdas/build-package/settings.ts';
import { packageSettings, parseStackConfig } from '../../../../lib/config.ts';
import { productionConfig } from '../../../infra/fixtures.ts';

/**
 * The notice texts reach the package step in its code: esbuild replaces PACKAGE_SETTINGS_DEFINE
 * with them when it bundles the step, as lib/dsr-stack.ts tells it to.
 */
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'settings-bundle-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('the bundled package settings', () => {
  it('are none where the code runs unbundled (local mode and tests read the environment)', () => {
    expect(bundledPackageSettings()).toBeUndefined();
    expect(packageSettingsFromEnv(bundledPackageSettings())).toEqual(PACKAGE_PLACEHOLDERS);
  });

  it('are the stack config texts, at their full length, once esbuild bundles the module with the define', async () => {
    // Prepare: every text at 2,000 characters, 13 of them: far past what a 4 KB environment holds.
    const long = (notice: Record<string, string>) =>
      Object.fromEntries(
        Object.entries(notice).map(([key]) => [key, `${key}: ${'é'.repeat(2000 - key.length - 2)}`]),
      );
    const config = parseStackConfig({
      ...productionConfig,
      accessNotice: {
        gdpr: long(productionConfig.accessNotice.gdpr),
        ccpa: long(productionConfig.accessNotice.ccpa),
      },
    });
    const settings = JSON.stringify(packageSettings(config));
    const entry = join(dir, 'entry.ts');
    await writeFile(
      entry,
      `export { bundledPackageSettings, packageSettingsFromEnv } from ${JSON.stringify(
        new URL('../../../../lambdas/build-package/settings.ts', import.meta.url).pathname,
      )};`,
    );
    const outfile = join(dir, 'bundle.mjs');

    // Act
    await build({
      entryPoints: [entry],
      bundle: true,
      format: 'esm',
      platform: 'node',
      outfile,
      logLevel: 'silent',
      define: { [PACKAGE_SETTINGS_DEFINE]: JSON.stringify(settings) },
    });
    const bundled = (await import(pathToFileURL(outfile).href)) as {
      bundledPackageSettings: () => string | undefined;
      packageSettingsFromEnv: (value: string | undefined) => unknown;
    };

    // Assess
    expect(Buffer.byteLength(settings)).toBeGreaterThan(4096 * 10);
    expect(bundled.bundledPackageSettings()).toBe(settings);
    expect(bundled.packageSettingsFromEnv(bundled.bundledPackageSettings())).toEqual(packageSettings(config));
  });
});
