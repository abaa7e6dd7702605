/**
 * README.md as a new user reads it on a fresh clone: every file it names exists and is read by the
 * command it is meant for, and its walk through the CLI against local mode runs as pasted.
 */
import { access, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadAwsFaultsFile } from '@svc-dsr/local/aws/aws-faults';
import { loadFaultsFile } from '@svc-dsr/local/emulator/faults';
import { loadStateFile } from '@svc-dsr/local/emulator/state';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, runProcess } from '../helpers/cli.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
let readme: string;
let workdir: string;

beforeAll(async () => {
  readme = await readFile(join(ROOT, 'README.md'), 'utf8');
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-readme-'));
});

afterAll(async () => {
  await rm(workdir, { recursive: true, force: true });
});

/**
 * Runs a bash script in `cwd` where `npx svc-dsr` is this clone's CLI, as it is after `npm ci`;
 * answers the exit code and what it printed.
 */
function runScript(script: string, cwd: string) {
  const prelude = `npx() { if [ "$1" = svc-dsr ]; then shift; node ${JSON.stringify(CLI)} "$@"; else command npx "$@"; fi; }\n`;
  return runProcess('bash', ['-c', `${prelude}${script}`], { cwd, timeoutMs: 110_000 });
}

describe('README.md', () => {
  it('names only files that exist in the repository', async () => {
    const named = new Set(
      [
        ...readme.matchAll(/\b((?:examples|docs|local\/emulator)\/[\w./-]+\.(?:jsonl|json|csv|md|sh))\b/g),
      ].map((match) => match[1] ?? ''),
    );
    for (const sample of ['examples/requests.jsonl', 'examples/requests.csv', 'examples/faults.json']) {
      expect(named).toContain(sample);
    }
    for (const path of named) await expect(access(join(ROOT, path)), path).resolves.toBeUndefined();
  });

  it('ships sample files that the commands they are for accept', async () => {
    await expect(loadFaultsFile(join(ROOT, 'examples/faults.json'))).resolves.toMatchObject({ seed: 7 });
    await expect(loadAwsFaultsFile(join(ROOT, 'examples/aws-faults.json'))).resolves.toMatchObject({
      throttle_rate: 0.05,
    });
    await expect(loadStateFile(join(ROOT, 'local/emulator/sample-state.json'))).resolves.toBeDefined();
    // Every `submit --file` line of the README, as a dry run from the clone's root.
    const submits = [...readme.matchAll(/^npx svc-dsr submit (?:.* )?--file (examples\/\S+).*$/gm)];
    expect(submits.length).toBeGreaterThanOrEqual(3);
    for (const [, file] of submits) {
      const result = await runScript(`npx svc-dsr submit --file ${file} --dry-run`, ROOT);
      // A clean dry run says only what it leaves to intake (the stack's verification methods).
      expect(result.stderr, file).toMatch(
        /^dry run: verification\.method and the age of verified_at are checked at intake[^\n]*\n$/,
      );
      expect(result.code, file).toBe(0);
    }
  }, 60_000);

  it('runs its walk through the CLI against local mode, line by line as pasted', async () => {
    const block = /A walk through the CLI against local mode:\n\n```sh\n([\s\S]*?)```/.exec(readme)?.[1];
    expect(block).toBeDefined();
    const lines = (block ?? '')
      .replace(/\\\n/g, ' ')
      .split('\n')
      .filter((line) => line.trim() !== '');
    expect(lines[0]).toMatch(/^npx svc-dsr local --serve &/);
    // What a person does between the lines: wait for "serving:", and run status again until completed.
    // The clone's root as the commands see it: its examples, and a data dir of its own. The serving
    // local mode (a child of the backgrounded shell function) is stopped by its pid at the end.
    const script = [
      'set -e',
      `ln -s ${JSON.stringify(join(ROOT, 'examples'))} examples`,
      `trap 'kill $(node -p "require(\\"./.svc-dsr/endpoints.json\\").pid") 2>/dev/null; wait' EXIT`,
      `${(lines[0] ?? '').replace(/&.*$/, '')} 2>serve.log &`,
      'until grep -q "serving:" serve.log; do sleep 0.5; done',
      ...lines
        .slice(1)
        .flatMap((line) =>
          line.startsWith('npx svc-dsr status')
            ? [line, `until ${line.replace(/#.*$/, '')} | grep -q "^status *completed"; do sleep 0.5; done`]
            : [line],
        ),
      'test -s alice.zip',
    ].join('\n');
    const result = await runScript(script, workdir);
    expect(result.stderr).not.toContain('Error');
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain('request_id,');
  }, 120_000);
});
