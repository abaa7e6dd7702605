import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { AwsFaults } from '#local/aws/aws-faults';
import { type AwsStandIns, startAwsStandIns } from '#local/aws/aws-standins';
import { type FaultProfile, faultProfileSchema } from '#local/emulator/faults';
import { type RunningEmulator, startEmulator } from '#local/emulator/server';
import { type EmulatorState, emulatorStateSchema } from '#local/emulator/state';
import { gateSettingsFor } from '#local/local-mode';
import { SqsPoller } from '#local/runtime/event-source';
import { type LocalWorkflow, type LocalWorkflowOptions, startLocalWorkflow } from '#local/runtime/workflow';
import type { IntakeDeps } from '../../../lambdas/intake/intake.ts';
import { synthesizeTemplate } from '../../../lib/template.ts';
import { configuredSitesOf, siteTokensOf } from '../../runtime/site-accounts.ts';

const SAMPLE_STATE = fileURLToPath(new URL('../../emulator/sample-state.json', import.meta.url));

/** Tokens the scans look for: fixed, so a leak is findable. */
export const TEST_SSO_TOKEN = 'test-sso-token-7f3a9c51e2';
export const TEST_EXPORT_TOKEN = 'test-export-token-b84d20e6f1';

export interface Harness {
  readonly emulator: RunningEmulator;
  readonly aws: AwsStandIns;
  readonly workflow: LocalWorkflow;
  readonly poller: SqsPoller;
  readonly logs: string[];
  /** Calls the emulator's control API. */
  control(method: string, path: string, body?: unknown): Promise<unknown>;
  close(): Promise<void>;
}

/** A platform with `count` users, u-0 ... */
export function usersState(count: number): EmulatorState {
  return emulatorStateSchema.parse({
    spot_id: 'sp_test',
    conversations: [{ id: 'conv-1', url: 'https://example.com/a', title: 'A' }],
    users: Array.from({ length: count }, (_, index) => ({
      primary_key: `u-${index}`,
      user_name: `user_${index}`,
    })),
    comments: [],
    votes: [],
  });
}

export async function sampleState(): Promise<EmulatorState> {
  return emulatorStateSchema.parse(JSON.parse(await readFile(SAMPLE_STATE, 'utf8')));
}

export async function startHarness(
  options: {
    faults?: Partial<FaultProfile>;
    env?: Record<string, string>;
    state?: EmulatorState;
    /** The steps' fetch, given the real one: lets a test stand between the steps and the platform. */
    fetch?: (real: typeof fetch) => typeof fetch;
    /** Throttles a seeded share of the AWS calls, as `svc-dsr local --aws-faults` does. */
    awsFaults?: AwsFaults;
    /** Replaces step Lambdas, given the real ones. */
    stepOverrides?: LocalWorkflowOptions['stepOverrides'];
    /** Stands between the state machine's direct DynamoDB calls and the ledger. */
    dynamoIntegration?: LocalWorkflowOptions['dynamoIntegration'];
    /** The secrets' values. @default the emulator's tokens and a random key */
    secrets?: LocalWorkflowOptions['secrets'];
    /** The stack configuration the template is synthesized with. @default none (placeholders) */
    config?: unknown;
    /** How intake starts executions. @default in-process */
    intakeStarter?: IntakeDeps['startExecution'];
  } = {},
): Promise<Harness> {
  const faults = faultProfileSchema.parse({ export_ready_after_polls: 2, ...options.faults });
  const state = options.state ?? (await sampleState());
  const emulator = await startEmulator({
    state,
    faults,
    // A state of several sites gives each site's tokens in its own entry.
    ...(state.sites === undefined ? { ssoAccessToken: TEST_SSO_TOKEN, exportToken: TEST_EXPORT_TOKEN } : {}),
  });
  const aws = await startAwsStandIns(options.awsFaults ? { faults: options.awsFaults } : {});
  const logs: string[] = [];
  // Each configured site but the first gets the tokens of the emulator's site with its spot id.
  const siteTokens = siteTokensOf(configuredSitesOf(options.config) ?? [], emulator.sites);
  const workflow = await startLocalWorkflow({
    aws,
    platform: emulator,
    siteTokens,
    template: synthesizeTemplate(options.config ?? {}),
    // The platform gate set for the emulator's limits, as local mode sets it.
    env: { ...gateSettingsFor(faults.rate_limit), PLATFORM_TIMEOUT_MS: '1000', ...options.env },
    logSink: (line) => logs.push(line),
    ...(options.fetch ? { fetch: options.fetch(globalThis.fetch) } : {}),
    ...(options.awsFaults ? { awsFaults: options.awsFaults } : {}),
    ...(options.stepOverrides ? { stepOverrides: options.stepOverrides } : {}),
    ...(options.dynamoIntegration ? { dynamoIntegration: options.dynamoIntegration } : {}),
    ...(options.secrets ? { secrets: options.secrets } : {}),
  });
  const intake = options.intakeStarter ? workflow.intakeWith(options.intakeStarter) : workflow.intake;
  const poller = new SqsPoller(workflow.sqs, workflow.queueUrls.intake, intake);
  return {
    emulator,
    aws,
    workflow,
    poller,
    logs,
    async control(method, path, body) {
      const response = await fetch(`${emulator.url}/_emulator/${path}`, {
        method,
        headers: body === undefined ? {} : { 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return response.json();
    },
    async close() {
      await workflow.close();
      await aws.close();
      await emulator.close();
    },
  };
}

/** A valid request for `primaryKey`. */
export function requestFor(primaryKey: string, overrides: Record<string, unknown> = {}) {
  return {
    request_id: randomUUID(),
    type: 'access',
    regulation: 'gdpr',
    primary_key: primaryKey,
    received_at: '2026-11-20T09:00:00Z',
    verification: { method: 'email_link', verified_by: 'privacy-team', verified_at: '2026-11-20T09:05:00Z' },
    ...overrides,
  };
}
