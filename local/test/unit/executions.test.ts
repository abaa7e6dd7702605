import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openExecutions, type Registry } from '#local/runtime/executions';
import { LocalStateMachine } from '#local/runtime/sfn-runner';
import { ConfigurationError } from '../../../lambdas/shared/errors.ts';

const STATE_MACHINE_ARN = 'arn:aws:states:us-east-1:000000000000:stateMachine:Outcomes';

/** Succeeds with its input, or fails with Boom when the input asks it to. */
const machine = new LocalStateMachine(
  {
    logicalId: 'Outcomes',
    definition: {
      StartAt: 'Which',
      States: {
        Which: {
          Type: 'Choice',
          Choices: [{ Variable: '$.fail', BooleanEquals: true, Next: 'Fail' }],
          Default: 'Done',
        },
        Done: { Type: 'Pass', End: true },
        Fail: { Type: 'Fail', Error: 'Boom', Cause: 'the input asked for it' },
      },
    },
    functions: new Map(),
  },
  { handlers: {} },
);

let dataDir: string;
let opened: Registry[];

beforeEach(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'executions-'));
  opened = [];
});

afterEach(async () => {
  for (const registry of opened) await registry.close({ timeoutMs: 1_000 });
  await rm(dataDir, { recursive: true, force: true });
});

async function open(withDataDir: boolean): Promise<Registry> {
  const registry = await openExecutions({
    machine,
    stateMachineArn: STATE_MACHINE_ARN,
    ...(withDataDir ? { dataDir } : {}),
  });
  opened.push(registry);
  return registry;
}

/** The record a killed run leaves: still RUNNING. */
async function writeInterrupted(name: string): Promise<void> {
  const record = {
    name,
    executionArn: `${STATE_MACHINE_ARN.replace(':stateMachine:', ':execution:')}:${name}`,
    input: {},
    status: 'RUNNING',
    startDate: '2026-01-02T03:04:05.000Z',
    events: [],
  };
  await writeFile(join(dataDir, `${name}.json`), JSON.stringify(record));
}

describe('Registry.results', () => {
  it.each([
    ['in memory', false],
    ['with a data directory', true],
  ])(
    'returns what each execution came to, oldest first, once all have ended (%s)',
    async (_, withDataDir) => {
      // Prepare
      const registry = await open(withDataDir);
      await registry.start('first', { fail: false, n: 1 });
      await registry.start('second', { fail: true });

      // Act
      const results = await registry.results();

      // Assess
      expect([...results.keys()]).toEqual(['first', 'second']);
      expect(results.get('first')).toMatchObject({ status: 'SUCCEEDED', output: { fail: false, n: 1 } });
      expect(results.get('second')).toMatchObject({
        status: 'FAILED',
        error: 'Boom',
        cause: 'the input asked for it',
      });
      expect(results.get('second')).not.toHaveProperty('output');
      expect(results.get('second')?.events.at(-1)?.type).toBe('ExecutionFailed');
    },
  );

  it('leaves out an interrupted execution nobody restarted', async () => {
    // Prepare
    await writeInterrupted('killed');
    const registry = await open(true);
    await registry.start('fresh', {});

    // Act
    const results = await registry.results();

    // Assess
    expect(registry.interrupted.map((record) => record.name)).toEqual(['killed']);
    expect([...results.keys()]).toEqual(['fresh']);
  });
});

describe('Registry.close', () => {
  it('closes once, and refuses to restart an interrupted execution afterwards', async () => {
    // Prepare
    await writeInterrupted('killed');
    const registry = await open(true);

    // Act
    const closing = registry.close();
    const again = registry.close();
    await closing;
    const restart = await registry.restart('killed').then(
      () => undefined,
      (error: unknown) => error,
    );

    // Assess
    expect(again).toBe(closing);
    expect(registry.closing).toBe(true);
    expect(restart).toBeInstanceOf(ConfigurationError);
    expect(String(Object(restart).message)).toContain('the executions are closing');
  });
});
