/**
 * Local mode, assembled: the services thread (emulator and AWS stand-ins), the synthesized template
 * run as a state machine, the intake poller and the Step Functions shim, on one data dir. `npm start`
 * and `svc-dsr local` start it here.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { SFNClient } from '@aws-sdk/client-sfn';
import { SendMessageBatchCommand } from '@aws-sdk/client-sqs';
import { z } from 'zod';
import { writeLocalEndpoints } from '../bin/cli/local-endpoints.ts';
import { sfnStarter } from '../lambdas/intake/aws.ts';
import type { IntakeResult } from '../lambdas/intake/intake.ts';
import { sfnLister, sfnLookup } from '../lambdas/reconciler/aws.ts';
import { memoryCursor } from '../lambdas/reconciler/cursor.ts';
import { ApiPacer, documentedQuotas, QUOTA_SHARE, shareOf } from '../lambdas/reconciler/quota.ts';
import { type ReconcilerDeps, type ReconcileSummary, reconcile } from '../lambdas/reconciler/reconciler.ts';
import { CALLERS, runAsCaller } from '../lambdas/shared/call-recorder.ts';
import { awsTransientError } from '../lambdas/shared/errors.ts';
import { LATE_MS } from '../lambdas/shared/platform-gate.ts';
import { CACHED_MIDDLEWARE, prepareSdkClient } from '../lambdas/shared/sdk-clients.ts';
import { type SecretValues, secretValuesSchema } from '../lambdas/shared/secrets.ts';
import type { AwsFaults } from './aws/aws-faults.ts';
import type { AwsStandIns } from './aws/aws-standins.ts';
import type { LocalEvent } from './aws/events-standin.ts';
import type { SfnShim } from './aws/sfn-shim.ts';
import { MAX_BODY_BYTES } from './aws/sqs/limits.ts';
import { acquireDataDirLock, type DataDirLock } from './data-dir-lock.ts';
import { type FaultProfile, type RateLimit, resolvedFaultsSchema } from './emulator/faults.ts';
import type { RunningEmulator } from './emulator/server.ts';
import { type EmulatorState, loadStateFile, stateSites } from './emulator/state.ts';
import {
  API_CALLER,
  type ApiEndpoint,
  localApiDeps,
  localConsole,
  localSigningKey,
  startApiEndpoint,
} from './runtime/api-endpoint.ts';
import { pollWithSchedule, SqsPoller } from './runtime/event-source.ts';
import {
  localOperatorDeps,
  type OperatorEndpoint,
  startOperatorEndpoint,
} from './runtime/operator-endpoint.ts';
import { configuredSitesOf, siteTokensOf } from './runtime/site-accounts.ts';
import { startLocalStatusEvents } from './runtime/status-events.ts';
import {
  INTAKE_QUEUE,
  jsonLogger,
  LOCAL_NAMES,
  type LocalWorkflow,
  startLocalWorkflow,
} from './runtime/workflow.ts';
import { collectGarbage, type LocalServices, startLocalServices } from './threads/services-thread.ts';
import { synthesizeTemplateOnThread } from './threads/template-thread.ts';

export const SAMPLE_STATE_FILE = fileURLToPath(new URL('./emulator/sample-state.json', import.meta.url));
export const LOCAL_STATE_MACHINE_ARN = 'arn:aws:states:us-east-1:000000000000:stateMachine:svc-dsr-local';

export interface LocalModeOptions {
  /** Everything local mode keeps: ledger, archives, audit records, execution histories, platform state. */
  readonly dataDir: string;
  /** Initial platform state, used when the data dir has no platform state yet. @default the sample state */
  readonly platformState?: EmulatorState;
  readonly faults?: FaultProfile;
  /** How long every Wait lasts locally, in ms: the definition still says how long AWS would wait. @default 10 */
  readonly waitMs?: number;
  /** Step environment overrides, as Lambda env strings (poll schedule, attempts...). */
  readonly env?: Readonly<Record<string, string>>;
  readonly logSink?: (line: string) => void;
  /** Throttles a seeded share of the AWS calls (`--aws-faults`, see aws-faults.ts). @default none */
  readonly awsFaults?: AwsFaults;
  /** How often a serving local mode runs the reconciler, in seconds. @default 60 */
  readonly reconcileSeconds?: number;
  /** Resumes per request before the reconciler records it failed. @default 3 */
  readonly reconcileMaxResumes?: number;
  /** Sees each status event as the local bus keeps it (`--serve` prints them). */
  readonly onEvent?: (event: LocalEvent) => void;
  /** The command the data dir's lock names as its owner. @default this process's command line */
  readonly command?: string;
  /** The data dir's lock, when the caller already holds it (`npm start` takes it before emptying the dir). @default taken here */
  readonly lock?: DataDirLock;
  /**
   * The stack configuration, as cdk.json holds it under `context["svc-dsr"]`: the stack is
   * synthesized with it, so the verification gate, the package texts, the sweep and every other
   * setting run here as deployed. @default none (the defaults and placeholders)
   */
  readonly stackConfig?: unknown;
}

/** The reconciler's caller name, as its Lambda's in the IAM proof. */
export const RECONCILER_CALLER = 'Reconciler';
/** A request that changed this recently is left to the intake or retry that is starting its execution. */
const RECONCILE_GRACE_SECONDS = 30;

/** What became of one submitted line. */
export type LineOutcome =
  | {
      readonly line: number;
      readonly kind: 'accepted' | 'duplicate' | 'conflict' | 'rejected' | 'denied';
      readonly requestId: string;
      readonly reason?: string;
    }
  | { readonly line: number; readonly kind: 'quarantined'; readonly reason: string };

/** The whole product on one machine, with its state under `dataDir`. */
export interface LocalMode {
  readonly dataDir: string;
  readonly emulator: RunningEmulator;
  /** The API on loopback, as API Gateway serves it in AWS, with local sign-in codes (docs/console-api.md). */
  readonly api: ApiEndpoint;
  readonly aws: AwsStandIns;
  readonly shim: SfnShim;
  readonly workflow: LocalWorkflow;
  /**
   * A full garbage collection on this thread and on the services thread, for measurements
   * (`npm run bench` reads RSS after it); resolves with the heap in use of both, in bytes.
   */
  collectGarbage(): Promise<number>;
  /** Where a stored S3 object lives on disk. */
  pathOf(bucket: string, key: string): string;
  /** Sends lines through the intake queue, lets intake consume them, and reports each line's fate. */
  submit(lines: readonly string[]): Promise<LineOutcome[]>;
  /** Drains the intake queue and waits until no execution is running. */
  idle(): Promise<void>;
  /**
   * Polls the intake queue continuously, as Lambda's event source mapping does, and runs the
   * reconciler every `reconcileSeconds` and the deadline sweep every `deadlineSweepMinutes`, as
   * their schedules do in AWS; returns a stop function.
   */
  pollContinuously(onError: (error: unknown) => void): () => Promise<void>;
  /**
   * One pass of the reconciler: resumes open requests that no execution is running (`maxResumes`
   * overrides the mode's limit for this pass).
   */
  reconcile(options?: { graceSeconds?: number; maxResumes?: number }): Promise<ReconcileSummary>;
  /**
   * Stops everything it started. Executions still running after `graceMs` (default 5000) are left
   * RUNNING in their records, as a killed process leaves them: the next start resumes them.
   */
  close(options?: { readonly graceMs?: number }): Promise<void>;
}

/**
 * Starts local mode: the platform emulator, the AWS stand-ins on disk, the synthesized state
 * machine behind the Step Functions shim, and the SQS event-source poller. On a data dir left by a
 * killed run it restarts the executions that were running; every step is idempotent against the
 * ledger, so nothing is done twice.
 */
export async function startLocalMode(options: LocalModeOptions): Promise<LocalMode> {
  const dataDir = resolve(options.dataDir);
  // One owner per data dir (data-dir-lock.ts): a second one would break the first one's stores.
  const lock =
    options.lock ?? (await acquireDataDirLock(dataDir, options.command ?? process.argv.slice(1).join(' ')));
  try {
    const mode = await startLocalModeLocked(options, dataDir);
    return {
      ...mode,
      async close(closeOptions) {
        try {
          await mode.close(closeOptions);
        } finally {
          await lock.release();
        }
      },
    };
  } catch (error) {
    await lock.release();
    throw error;
  }
}

async function startLocalModeLocked(given: LocalModeOptions, dataDir: string): Promise<LocalMode> {
  await mkdir(dataDir, { recursive: true });
  const options = { ...given, stackConfig: await keptStackConfig(dataDir, given.stackConfig) };
  // The stack is synthesized on a thread of its own while the services start (see template-thread.ts).
  const synthesized = synthesizeTemplateOnThread(options.stackConfig ?? {});
  const state = options.platformState ?? (await loadStateFile(SAMPLE_STATE_FILE));
  const sites = configuredSitesOf(options.stackConfig);
  // The emulator and the stand-ins get a thread of their own: everything below talks to them over HTTP.
  const {
    emulator,
    aws,
    ledgerStream,
    collectGarbage: collectServicesGarbage,
  } = await startLocalServices({
    emulator: {
      persistPath: join(dataDir, 'platform.json'),
      state,
      ...(options.faults ? { faults: options.faults } : {}),
      // With several sites, one account per configured site, each with its own tokens.
      ...(sites === undefined
        ? await platformTokens(dataDir)
        : { sites: await siteAccounts(dataDir, sites, state) }),
    },
    aws: {
      dynamoPath: join(dataDir, 'ledger'),
      s3Root: join(dataDir, 's3'),
      sqsRoot: join(dataDir, 'sqs'),
      ...(options.awsFaults ? { faults: options.awsFaults } : {}),
    },
    ledgerStream: { table: LOCAL_NAMES.table },
  }).catch(async (error: unknown) => {
    await synthesized.catch(() => {});
    throw error;
  });
  const template = await synthesized.catch(async (error: unknown) => {
    await Promise.all([emulator.close(), aws.close()]);
    throw error;
  });
  // What has started, stopped newest first if a later part fails: a half-started local mode
  // must not keep the process alive after the error.
  const started: (() => Promise<unknown>)[] = [() => emulator.close(), () => aws.close()];
  try {
    return await assembleLocalMode(
      options,
      dataDir,
      { emulator, aws, ledgerStream, collectGarbage: collectServicesGarbage },
      template,
      started,
    );
  } catch (error) {
    for (const stop of started.reverse()) await stop().catch(() => undefined);
    throw error;
  }
}

/**
 * Local mode's own work (the summary's reads, the reconciler's pass at start), retried with backoff
 * while AWS answers transiently: `--aws-faults` throttles any share of the calls, and in AWS a
 * throttled reconciler pass is simply run again by its schedule. Gives up after 10 tries.
 */
export async function retriedThroughFaults<T>(
  read: () => Promise<T>,
  sleep: (ms: number) => Promise<unknown> = delay,
): Promise<T> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await read();
    } catch (error) {
      if (attempt >= 10 || awsTransientError(error) === undefined) throw error;
      await sleep(50 * 2 ** Math.min(attempt, 5));
    }
  }
}

/** The share of a second allowed for delays between the gate's check and the emulator's count. */
const LOCAL_DELAY_SHARE = 0.05;

/**
 * The platform gate's settings for the emulator's limits, as an operator sets them for a platform's
 * published ones. A call may go up to LATE_MS after its slot, so the calls in any one second are at
 * most `rate * (1 + LATE_MS / 1000) + burst`: the rate and burst keep that within the platform's
 * rate, with a further 5% for the time between the gate's check and the emulator's count, which
 * here is spent on event loops that share two cores with every step. With its cap on open
 * exports. An emulator without limits gets a gate that rarely has anyone wait.
 */
export function gateSettingsFor(limit: RateLimit | null | undefined): Record<string, string> {
  const platformRate = limit?.requests_per_second;
  const stretch = 1 + LATE_MS / 1000 + LOCAL_DELAY_SHARE;
  const rate = platformRate === undefined ? 1_000 : Math.max(1, Math.floor((platformRate - 1) / stretch));
  const burst = platformRate === undefined ? 1_000 : Math.max(1, Math.floor(platformRate - rate * stretch));
  return {
    // A function here is a call in this process, where waiting for a slot costs nothing, while
    // each Step Functions Wait costs a run of the step: wait in the function for up to 30 s.
    PLATFORM_MAX_SLEEP_SECONDS: '30',
    PLATFORM_REQUESTS_PER_SECOND: String(rate),
    PLATFORM_BURST: String(burst),
    PLATFORM_MAX_OPEN_EXPORTS: String(limit?.max_open_exports ?? 1_000),
  };
}

/**
 * The rate limit the emulator enforces: the one `--faults` gave, or, on a data dir started before
 * without it, the profile its snapshot kept. The gate follows what the platform does, not the flag.
 */
async function emulatorRateLimit(emulatorUrl: string): Promise<RateLimit | null> {
  const answer = await fetch(`${emulatorUrl}/_emulator/faults`);
  if (!answer.ok) throw new Error(`the emulator did not give its fault profile (HTTP ${answer.status})`);
  return resolvedFaultsSchema.parse(await answer.json()).rate_limit;
}

/** The part of startLocalMode after the services and the template: records in `started` what it starts. */
async function assembleLocalMode(
  options: LocalModeOptions,
  dataDir: string,
  { emulator, aws: services, ledgerStream, collectGarbage: collectServicesGarbage }: LocalServices,
  template: Record<string, unknown>,
  started: (() => Promise<unknown>)[],
): Promise<LocalMode> {
  const secrets = await localSecrets(dataDir, emulator);
  // Every ledger write from here on goes through the ledger's stream, as in AWS.
  const statusEvents = await startLocalStatusEvents(
    dataDir,
    services,
    LOCAL_NAMES.table,
    jsonLogger(options.logSink ?? (() => {})),
    options.onEvent,
    ledgerStream,
  );
  started.push(() => statusEvents.close());
  const { aws } = statusEvents;

  const workflow = await startLocalWorkflow({
    aws,
    platform: emulator,
    template,
    secrets,
    // Every site but the first has its tokens under its own secret names, as the stack makes them.
    siteTokens: siteTokensOf(configuredSitesOf(options.stackConfig) ?? [], emulator.sites),
    waitMs: options.waitMs ?? 10,
    env: { ...gateSettingsFor(await emulatorRateLimit(emulator.url)), ...options.env },
    ...(options.logSink ? { logSink: options.logSink } : {}),
    ...(options.awsFaults ? { awsFaults: options.awsFaults } : {}),
    stateMachineArn: LOCAL_STATE_MACHINE_ARN,
    executionsDir: join(dataDir, 'executions'),
  });
  started.push(() => workflow.close());
  // The workflow's executions behind the Step Functions API: intake, the reconciler and the CLI
  // start and look them up over HTTP, as they do in AWS.
  const { shim } = workflow;
  // One client for every call to the shim: a client per call would open a connection per request.
  const sfn = sfnClient(shim.endpoint, aws);
  started.push(async () => sfn.destroy());
  for (const interrupted of workflow.executions.interrupted)
    await workflow.executions.restart(interrupted.name);
  const reconcileNow = reconcilerOf(workflow, sfn, options);
  // Requests left open by a killed run with no execution to finish them are resumed. Nothing else
  // runs yet, so no request needs a grace period.
  await retriedThroughFaults(() => reconcileNow(0));
  // The deadline sweep's schedule, as in AWS: at start, then every deadlineSweepMinutes while serving.
  await retriedThroughFaults(() => workflow.sweep());

  const outcomes = new Map<string, IntakeResult>();
  const intake = workflow.intakeWith(sfnStarter(sfn, shim.stateMachineArn), (message, result) =>
    outcomes.set(message.messageId, result),
  );
  const poller = new SqsPoller(workflow.sqs, workflow.queueUrls.intake, intake);
  // The operator function behind its URL: the CLI's cancel, deny, extend, retry, notice and
  // package hand-outs reach the same handler as in AWS.
  const operator = await startOperatorEndpoint(localOperatorDeps(workflow, sfn), {
    accessKeyId: aws.credentials.accessKeyId,
    logger: jsonLogger(options.logSink ?? (() => {})),
  });
  started.push(() => operator.close());
  // The API function behind API Gateway: tokens signed by the data dir's key stand for the user pool's.
  const api = await startApiEndpoint(
    localApiDeps(workflow, sfn, jsonLogger(options.logSink ?? (() => {}))),
    await localSigningKey(dataDir),
    { caller: API_CALLER, console: await localConsole(dataDir, workflow.timeZone) },
  );
  started.push(() => api.close());
  await publishEndpoints(dataDir, aws, workflow, emulator, operator, api);

  return {
    dataDir,
    emulator,
    api,
    aws,
    shim,
    workflow,
    pathOf: (bucket, key) => join(dataDir, 's3', bucket, ...key.split('/')),
    async collectGarbage() {
      const servicesHeap = await collectServicesGarbage();
      collectGarbage();
      return servicesHeap + process.memoryUsage().heapUsed;
    },
    submit: (lines) => submitLines(workflow, poller, outcomes, lines),
    async idle() {
      await poller.drain();
      await workflow.executions.idle();
      await statusEvents.drained();
    },
    reconcile: (reconcileOptions) =>
      reconcileNow(reconcileOptions?.graceSeconds ?? RECONCILE_GRACE_SECONDS, reconcileOptions?.maxResumes),
    pollContinuously: (onError) =>
      pollWithSchedule(
        poller,
        [
          {
            every: (options.reconcileSeconds ?? 60) * 1000,
            run: () => reconcileNow(RECONCILE_GRACE_SECONDS),
          },
          { every: workflow.sweepEveryMs, run: () => workflow.sweep() },
        ],
        onError,
      ),
    async close(closeOptions) {
      await api.close();
      await operator.close();
      // The workflow closes its executions, then the shim.
      await workflow.close(closeOptions);
      sfn.destroy();
      await statusEvents.close();
      await aws.close();
      await emulator.close();
    },
  };
}

/**
 * The reconciler's code, as it runs in AWS, over the workflow's ledger and the Step Functions API: a
 * pass with a grace period in seconds, resuming at most `resumes` requests.
 */
function reconcilerOf(
  workflow: LocalWorkflow,
  sfn: SFNClient,
  options: LocalModeOptions,
): (graceSeconds: number, resumes?: number) => Promise<ReconcileSummary> {
  const { stateMachineArn } = workflow.shim;
  const deps: ReconcilerDeps = {
    ledger: workflow.ledger,
    audit: workflow.audit,
    list: sfnLister(sfn, stateMachineArn),
    describe: sfnLookup(sfn, stateMachineArn),
    start: sfnStarter(sfn, stateMachineArn),
    // Paced as the Lambda paces it in the Region of the local ARNs, with the stack's default share.
    pacer: new ApiPacer(shareOf(documentedQuotas(stateMachineArn.split(':')[3]), QUOTA_SHARE.default)),
    clock: () => new Date(),
    logger: jsonLogger(options.logSink ?? (() => {})),
    gate: workflow.gate,
    drain: workflow.exportDrain,
    site: workflow.site,
    sites: workflow.siteGates,
    // CloudWatch has no place here; the figures are in the summary the pass returns.
    publish: () => {},
    // Local passes have no time limit and always finish, so they leave no cursor to keep.
    cursor: memoryCursor(),
  };
  const maxResumes = options.reconcileMaxResumes ?? 3;
  return (graceSeconds, resumes = maxResumes) =>
    runAsCaller(RECONCILER_CALLER, () => reconcile(deps, { maxResumes: resumes, graceSeconds }));
}

/** What `svc-dsr local --serve` publishes for the other commands: the endpoints and the stack's outputs. */
async function publishEndpoints(
  dataDir: string,
  aws: AwsStandIns,
  workflow: LocalWorkflow,
  emulator: LocalServices['emulator'],
  operator: OperatorEndpoint,
  api: ApiEndpoint,
): Promise<void> {
  await writeLocalEndpoints(dataDir, {
    region: aws.region,
    credentials: aws.credentials,
    endpoints: { ...aws.endpoints, sfn: workflow.shim.endpoint },
    outputs: {
      IntakeQueueUrl: workflow.queueUrls.intake,
      QuarantineQueueUrl: workflow.queueUrls.quarantine,
      LedgerTableName: LOCAL_NAMES.table,
      ArchiveBucketName: LOCAL_NAMES.archiveBucket,
      AuditBucketName: LOCAL_NAMES.auditBucket,
      StateMachineArn: workflow.shim.stateMachineArn,
      TimeZone: workflow.timeZone,
      OperatorUrl: operator.url,
      ApiUrl: api.url,
    },
    pid: process.pid,
    platform: { url: emulator.url, spot_id: emulator.spotId },
  });
}

/** How long a submission waits for intake's redeliveries: every receive before the dead-letter queue. */
const INTAKE_REDELIVERY_WAIT_MS = (INTAKE_QUEUE.visibilitySeconds * INTAKE_QUEUE.maxReceives + 10) * 1000;

/**
 * Sends the lines to the intake queue in batches of ten, as `svc-dsr submit` would, lets intake take
 * each batch, and gives each line's outcome in line order.
 */
async function submitLines(
  workflow: LocalWorkflow,
  poller: SqsPoller,
  outcomes: ReadonlyMap<string, IntakeResult>,
  lines: readonly string[],
): Promise<LineOutcome[]> {
  const sent: { line: number; messageId: string }[] = [];
  const outcomesByLine: LineOutcome[] = [];
  const entries: { line: number; body: string }[] = [];
  lines.forEach((body, index) => {
    if (body.trim() === '') return;
    const bytes = Buffer.byteLength(body, 'utf8');
    // SQS refuses a message past its size limit; sent in a batch, it would fail the whole call.
    if (bytes > MAX_BODY_BYTES) {
      outcomesByLine.push({
        line: index + 1,
        kind: 'quarantined',
        reason: `the queue refused it: it is ${bytes} bytes, and a message may hold at most ${MAX_BODY_BYTES}`,
      });
    } else entries.push({ line: index + 1, body });
  });
  for (let start = 0; start < entries.length; start += 10) {
    const batch = entries.slice(start, start + 10);
    // The privacy team's submission, as `svc-dsr submit` would send it.
    const { Successful = [], Failed = [] } = await runAsCaller(CALLERS.cli, () =>
      workflow.sqs.send(
        new SendMessageBatchCommand({
          QueueUrl: workflow.queueUrls.intake,
          Entries: batch.map(({ line, body }) => ({ Id: String(line), MessageBody: body })),
        }),
      ),
    );
    for (const failed of Failed) {
      outcomesByLine.push({
        line: Number(failed.Id),
        kind: 'quarantined',
        reason: `the queue refused it: ${failed.Message ?? failed.Code}`,
      });
    }
    for (const ok of Successful) sent.push({ line: Number(ok.Id), messageId: ok.MessageId ?? '' });
    await poller.drain();
  }
  await poller.drain();
  // A message whose intake failed (a throttled ledger write, say) is received again once its
  // visibility timeout has passed, as Lambda's event source would: wait for those, up to the
  // receives the queue allows before it moves a message to its dead-letter queue.
  const deadline = Date.now() + INTAKE_REDELIVERY_WAIT_MS;
  const unreported = () => sent.some(({ messageId }) => !outcomes.has(messageId));
  while (unreported() && Date.now() < deadline) await poller.pollOnce(1);
  for (const { line, messageId } of sent) {
    const result = outcomes.get(messageId);
    if (result === undefined) {
      throw new Error(
        `line ${line} was sent but intake never took it: after ${INTAKE_REDELIVERY_WAIT_MS / 1000} s of retries it is in the intake dead-letter queue, or still being retried`,
      );
    }
    outcomesByLine.push({ line, ...result });
  }
  return outcomesByLine.sort((a, b) => a.line - b.line);
}

function sfnClient(endpoint: string, aws: AwsStandIns): SFNClient {
  return prepareSdkClient(
    new SFNClient({ region: aws.region, endpoint, credentials: aws.credentials, ...CACHED_MIDDLEWARE }),
  );
}

/**
 * The stack configuration a data dir runs with: the one given, kept in the data dir, or without
 * one the one it was started with before, so a data dir of several sites (`npm start`'s) served
 * again without --config still runs each site's parts. Undefined: the defaults.
 */
async function keptStackConfig(dataDir: string, given: unknown): Promise<unknown> {
  const path = join(dataDir, 'stack-config.json');
  if (given !== undefined) {
    await writeFile(path, `${JSON.stringify(given)}\n`, { mode: 0o600 });
    return given;
  }
  try {
    return JSON.parse(await readFile(path, 'utf8'));
  } catch {
    return undefined;
  }
}

const tokensSchema = z.object({ sso_access_token: z.string(), export_token: z.string() });

/**
 * One emulator account per configured site, by its spot id: its data from the state document's
 * site of that spot id (empty where it has none), its tokens the document's, else ones kept in
 * the data dir so a restarted platform accepts the same ones.
 */
async function siteAccounts(
  dataDir: string,
  sites: readonly { spotId: string }[],
  state: EmulatorState,
): Promise<{ spotId: string; ssoAccessToken: string; exportToken: string }[]> {
  const inState = stateSites(state);
  const accounts = [];
  for (const site of sites) {
    const given = inState.find((each) => each.spotId === site.spotId);
    const kept = await platformTokens(dataDir, site.spotId);
    accounts.push({
      spotId: site.spotId,
      ssoAccessToken: given?.ssoAccessToken ?? kept.ssoAccessToken,
      exportToken: given?.exportToken ?? kept.exportToken,
    });
  }
  return accounts;
}

/** The emulator's tokens, kept in the data dir so a restarted platform accepts the same ones. */
async function platformTokens(
  dataDir: string,
  spotId?: string,
): Promise<{ ssoAccessToken: string; exportToken: string }> {
  const path = join(
    dataDir,
    spotId === undefined
      ? 'platform-tokens.json'
      : `platform-tokens-${spotId.replace(/[^A-Za-z0-9_-]/g, '_')}.json`,
  );
  try {
    const tokens = tokensSchema.parse(JSON.parse(await readFile(path, 'utf8')));
    return { ssoAccessToken: tokens.sso_access_token, exportToken: tokens.export_token };
  } catch {
    const tokens = {
      sso_access_token: randomBytes(24).toString('base64url'),
      export_token: randomBytes(24).toString('base64url'),
    };
    await writeFile(path, `${JSON.stringify(tokens)}\n`, { mode: 0o600 });
    return { ssoAccessToken: tokens.sso_access_token, exportToken: tokens.export_token };
  }
}

/** The secrets' values, with an audit HMAC key that lives as long as the data dir. */
async function localSecrets(dataDir: string, emulator: RunningEmulator): Promise<SecretValues> {
  const path = join(dataDir, 'audit-hmac-key');
  let key: string;
  try {
    key = (await readFile(path, 'utf8')).trim();
  } catch {
    key = randomBytes(32).toString('hex');
    await writeFile(path, `${key}\n`, { mode: 0o600 });
  }
  return secretValuesSchema.parse({
    ssoAccessToken: emulator.ssoAccessToken,
    exportToken: emulator.exportToken,
    auditHmacKey: key,
  });
}
