import { describe, expect, it } from 'vitest';
import { heldUntilReady } from '#local/cli/local';

describe('heldUntilReady (the status lines of local --serve)', () => {
  it('writes the changes that came while local mode started after its serving line, in order', () => {
    // Prepare: a restart resumed two executions, which ended before local mode was ready.
    const written: string[] = [];
    const changes = heldUntilReady((text) => written.push(text), true);

    // Act
    changes.line('running -> completed\n');
    changes.line('running -> failed\n');
    written.push('serving: ...\n');
    changes.ready();
    changes.line('new -> received\n');

    // Assess
    expect(written).toEqual([
      'serving: ...\n',
      'running -> completed\n',
      'running -> failed\n',
      'new -> received\n',
    ]);
  });

  it('drops the early ones when a run with requests shows its own progress for them', () => {
    const written: string[] = [];
    const changes = heldUntilReady((text) => written.push(text), false);
    changes.line('running -> completed\n');
    changes.ready();
    changes.line('new -> received\n');
    expect(written).toEqual(['new -> received\n']);
  });
});
