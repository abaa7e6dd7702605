import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { section, withSection } from '../../../bench/results.ts';

const facts = { at: new Date('2026-11-27T18:00:00.000Z'), machine: '2 cores (test), Node v24.0.0' };

describe('withSection', () => {
  it('starts the file with its header and adds a dated section with what the run printed', () => {
    // Act
    const text = withSection('', 'cli', ['svc-dsr --version  0.09 s', '\u001b[32mok\u001b[39m'], facts);

    // Assess
    expect(text.startsWith('# Benchmark results')).toBe(true);
    expect(text).toContain('## cli\n\nMeasured 2026-11-27T18:00:00.000Z on 2 cores (test), Node v24.0.0.');
    expect(text).toContain('```text\nsvc-dsr --version  0.09 s\nok\n```');
  });

  it('replaces the section it ran and keeps the others, in their places', () => {
    // Prepare
    const first = withSection(withSection('', 'copy', ['copy 1'], facts), 'cli', ['cli 1'], facts);
    const later = { ...facts, at: new Date('2026-12-01T08:00:00.000Z') };

    // Act
    const text = withSection(first, 'copy', ['copy 2'], later);

    // Assess
    expect(text).not.toContain('copy 1');
    expect(text).toContain('copy 2');
    expect(text).toContain('cli 1');
    expect(text.indexOf('## copy')).toBeLessThan(text.indexOf('## cli'));
    expect(text).toContain('Measured 2026-12-01T08:00:00.000Z');
    expect(text.match(/## copy/g)).toHaveLength(1);
  });

  it('keeps a printed fence from ending the block early', () => {
    // Act
    const text = withSection('', 'x', ['```', 'after'], facts);

    // Assess
    expect(text).toContain("```text\n'''\nafter\n```");
  });
});

describe('section', () => {
  const dirs: string[] = [];
  afterEach(async () => {
    vi.restoreAllMocks();
    await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
  });

  it('records what a section printed, and a failed section with its error instead of an older figure', async () => {
    // Prepare
    const dir = await mkdtemp(join(tmpdir(), 'bench-results-'));
    dirs.push(dir);
    const file = join(dir, 'RESULTS.md');
    await writeFile(file, withSection('', 'gate', ['an older figure'], facts));
    vi.spyOn(console, 'log').mockImplementation(() => {});

    // Act
    await section('cli', async () => console.log('status', 0.24), file);
    await expect(
      section(
        'gate',
        async () => {
          console.log('day 1.0');
          throw new Error('out of time');
        },
        file,
      ),
    ).rejects.toThrow('out of time');

    // Assess
    const text = await readFile(file, 'utf8');
    expect(text).toContain('status 0.24');
    expect(text).toContain('day 1.0\nFAILED: out of time');
    expect(text).not.toContain('an older figure');
  });
});
