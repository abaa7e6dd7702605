import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localStackConfig } from '../../../bin/cli/stack-config.ts';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'stack-config-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const settings = { stage: 'dev', verification: { methods: { id_document: { acceptedFor: ['access'] } } } };

describe('localStackConfig', () => {
  it('reads context "svc-dsr" of cdk.json in the working directory, as cdk synth does', async () => {
    const cwd = join(dir, 'project');
    await rm(cwd, { recursive: true, force: true });
    await mkdir(cwd);
    await writeFile(join(cwd, 'cdk.json'), JSON.stringify({ app: 'x', context: { 'svc-dsr': settings } }));

    expect(await localStackConfig(undefined, cwd)).toEqual({
      config: settings,
      source: join(cwd, 'cdk.json'),
    });
  });

  it('takes the defaults when the working directory has no cdk.json', async () => {
    expect(await localStackConfig(undefined, join(dir, 'nowhere'))).toEqual({ config: undefined });
  });

  it('reads --config as a cdk.json, or as the settings object itself', async () => {
    await writeFile(join(dir, 'other-cdk.json'), JSON.stringify({ context: { 'svc-dsr': settings } }));
    await writeFile(join(dir, 'settings.json'), JSON.stringify(settings));

    expect((await localStackConfig('other-cdk.json', dir)).config).toEqual(settings);
    expect((await localStackConfig('settings.json', dir)).config).toEqual(settings);
  });

  it('refuses a --config file it cannot read or that is not a JSON object (exit 2)', async () => {
    await writeFile(join(dir, 'broken.json'), '{"stage":');
    await writeFile(join(dir, 'list.json'), '[]');

    await expect(localStackConfig('missing.json', dir)).rejects.toMatchObject({ exitCode: 2 });
    await expect(localStackConfig('broken.json', dir)).rejects.toThrow(/is not JSON/);
    await expect(localStackConfig('list.json', dir)).rejects.toThrow(/does not hold a JSON object/);
  });
});
