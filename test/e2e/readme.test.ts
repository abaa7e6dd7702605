/**
 * README.md and docs/cli.md as a new user reads them on a fresh clone: the README stays short,
 * every file, script and command they name exists, the sample files are read by the commands they
 * are meant for, and the manual's walk through the CLI against local mode runs as pasted.
 */
import { access, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, runProcess } from '../helpers/cli.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
let readme: string;
let manual: string;
let workdir: string;

beforeAll(async () => {
  readme = await readFile(join(ROOT, 'README.md'), 'utf8');
  manual = await readFile(join(ROOT, 'docs/cli.md'), 'utf8');
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

/** The repository paths a text names: `docs/cli.md`, `local/`, `.ci/run`..., not parts of other paths. */
function namedPaths(text: string): Set<string> {
  const paths = text.matchAll(
    /(?<![\w/.~$-])((?:\.ci|bin|lib|lambdas|local|test|bench|docs|examples)\/(?:[\w.-]+\/?)*)/g,
  );
  return new Set([...paths].map((match) => (match[1] ?? '').replace(/[./]+$/, '')));
}

describe('README.md', () => {
  it('is read in five minutes: at most 150 lines', () => {
    expect(readme.split('\n').length).toBeLessThanOrEqual(150);
  });

  it('names only files and folders that exist, and indexes every doc and local/README.md', async () => {
    const named = namedPaths(readme);
    expect(named.size).toBeGreaterThan(20);
    for (const path of named) await expect(access(join(ROOT, path)), path).resolves.toBeUndefined();
    const docs = (await readdir(join(ROOT, 'docs'))).filter((name) => name.endsWith('.md'));
    for (const doc of [...docs.map((name) => `docs/${name}`), 'local/README.md']) {
      expect(named, doc).toContain(doc);
    }
  });

  it('names only npm scripts and svc-dsr commands that exist', async () => {
    const { scripts } = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as {
      scripts: Record<string, string>;
    };
    const runs = [...readme.matchAll(/\bnpm run ([\w:-]+)/g)].map((match) => match[1] ?? '');
    expect(runs.length).toBeGreaterThan(0);
    for (const script of runs) expect(Object.keys(scripts), script).toContain(script);
    for (const script of ['start', 'test']) expect(readme).toContain(`npm ci && npm ${script}`);

    const help = await runScript('npx svc-dsr --help', ROOT);
    expect(help.code, help.stderr).toBe(0);
    const commands = new Set([...help.stdout.matchAll(/^ {2}([a-z-]+) /gm)].map((match) => match[1] ?? ''));
    // The commands in its code: the fenced blocks and the inline code spans.
    const code = [...readme.matchAll(/```sh\n([\s\S]*?)```|`([^`\n]+)`/g)].map(
      (match) => match[1] ?? match[2] ?? '',
    );
    const used = code.flatMap((text) =>
      [...text.matchAll(/\bsvc-dsr (?:--\w+ )?([a-z][a-z-]*)\b/g)].map((match) => match[1] ?? ''),
    );
    expect(used).toEqual(expect.arrayContaining(['local', 'submit', 'list', 'report', 'verify']));
    for (const command of used) expect(commands, command).toContain(command);
  }, 60_000);
});

describe('docs/cli.md', () => {
  it('names only files that exist in the repository', async () => {
    const named = namedPaths(manual);
    for (const sample of [
      'examples/requests.jsonl',
      'examples/requests.csv',
      'examples/correction.jsonl',
      'examples/faults.json',
    ]) {
      expect(named).toContain(sample);
    }
    for (const path of named) await expect(access(join(ROOT, path)), path).resolves.toBeUndefined();
  });

  it('ships request files that submit accepts', async () => {
    // Every `submit --file` line of the manual and the README, as a dry run from the clone's root.
    const submits = [
      ...`${manual}\n${readme}`.matchAll(/^npx svc-dsr submit (?:.* )?--file (examples\/\S+).*$/gm),
    ];
    expect(submits.length).toBeGreaterThanOrEqual(4);
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
    const block = /A walk through the CLI against local mode:\n\n```sh\n([\s\S]*?)```/.exec(manual)?.[1];
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
