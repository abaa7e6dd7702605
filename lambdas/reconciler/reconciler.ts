// The reconciler: resumes open requests that no execution is moving, or records them failed past a limit.
import { type AuditTrail, sideChainOf } from '#shared/audit';
import { AuditChainClosedError } from '#shared/errors';
import {
  type ExecutionLister,
  type ExecutionLookup,
  type ExecutionStatus,
  isLive,
  type ListedStatus,
  latestExecutionName,
  retryExecutionName,
} from '#shared/executions';
import type { Ledger, LedgerItem, OpenRequest } from '#shared/ledger';
import { type ExportDrain, exportLeftOpen } from '#shared/open-exports';
import type { PlatformGate } from '#shared/platform-gate';
import { settlePart } from '#shared/site-parts';
import { DEFAULT_SITE_ID } from '#shared/sites';
import type { StepLogger } from '#shared/step-deps';
import type { ExecutionInput } from '#shared/step-io';
import { type CursorStore, nextPartition, RECONCILED_STATUSES, type ReconcileCursor } from './cursor.ts';
import {
  type ActionFigures,
  ApiPacer,
  documentedQuotas,
  PACED_ACTIONS,
  type PacedAction,
  type Pacer,
  QUOTA_SHARE,
  shareOf,
} from './quota.ts';

/** The ledger code of a request the reconciler gave up resuming. */
export const STRANDED_CODE = 'stranded';

/** What the reconciler reads and writes: the ledger, the state machine's executions, a clock. */
export interface ReconcilerDeps {
  readonly ledger: Pick<
    Ledger,
    'openRequestsPage' | 'get' | 'require' | 'claimResume' | 'update' | 'reindexOpen' | 'recordSiteResult'
  >;
  /**
   * The audit trail: a request the reconciler records failed, or one the state machine's own
   * failure write ended (no Lambda ran to record it), gets the final record that closes its chain.
   */
  readonly audit: Pick<AuditTrail, 'append'>;
  /** The state machine's executions with one status, a page at a time (ListExecutions). */
  readonly list: ExecutionLister;
  /** One execution's status (DescribeExecution), for a request whose execution no listing named. */
  readonly describe: ExecutionLookup;
  readonly start: (name: string, input: ExecutionInput) => Promise<'started' | 'already_exists'>;
  readonly clock: () => Date;
  readonly logger: StepLogger;
  /** The platform gate: export slots to give back, the circuit to report on. */
  readonly gate: Pick<PlatformGate, 'exportHolders' | 'releaseExport' | 'state'> &
    Partial<Pick<PlatformGate, 'offerFreeSlots'>>;
  /** Publishes the pass's figures as metrics (the stack's stuck-request and platform-down alarms). */
  readonly publish: (metrics: ReconcileMetrics) => void;
  /**
   * Takes the exports that ended requests left open to their end, so their slots can be given
   * back. @default none: such a slot is held
   */
  readonly drain?: ExportDrain;
  /**
   * The gates (and drains) of every configured site but the first, whose are `gate` and `drain`:
   * each site's export slots are freed, drained and handed over on its own gate, and its circuit
   * reported under its id. @default none: the stack serves one site
   */
  readonly sites?: readonly SiteGate[];
  /** The id of the site `gate` and `drain` serve, the first configured. @default DEFAULT_SITE_ID */
  readonly site?: string;
  /** Where a pass that ran out of time stopped, for the next pass to go on from. */
  readonly cursor: CursorStore;
  /**
   * Paces the Step Functions calls under a share of the account's quotas, and backs off when
   * they are throttled. @default half the smaller Regions' documented quotas, on the real clock
   */
  readonly pacer?: Pacer;
}

/** The metrics of one pass. */
export interface ReconcileMetrics {
  /** Open requests found with no running execution: resumed or recorded failed. */
  readonly StuckRequests: number;
  /** How long a circuit has been open (the platform down), the longest of the sites', 0 while all are closed. */
  readonly PlatformDownSeconds: number;
  /** Export slots held after the slots were checked, on all sites. */
  readonly ExportSlotsHeld: number;
  /** With several sites, each one's figures by its id (the Site dimension of the metrics). */
  readonly sites?: Readonly<Record<string, SiteMetrics>>;
}

/** One site's figures of a pass: its own circuit and export slots. */
export interface SiteMetrics {
  readonly PlatformDownSeconds: number;
  readonly ExportSlotsHeld: number;
}

/** A site's gate as the reconciler works it: its slots, its circuit, and the drain of its platform account. */
export interface SiteGate {
  readonly site: string;
  readonly gate: ReconcilerDeps['gate'];
  readonly drain?: ExportDrain;
}

/** The steps during which a request may hold an export slot. */
const SLOT_STEPS = new Set(['exporting', 'archiving']);

export interface ReconcileOptions {
  /** Resumes per request before it is recorded failed (`stranded`) for an operator. */
  readonly maxResumes: number;
  /**
   * A request changed less than this long ago is left alone: intake writes the ledger before it
   * starts the execution, and a retry claims its execution before it starts it.
   */
  readonly graceSeconds: number;
  /**
   * How much time the pass has left, ms: checked before each page, and the pass stops (keeping its
   * cursor) once it is 0 or less. @default no limit: the pass reads every open request
   */
  readonly timeLeftMs?: () => number;
  /** Open requests looked at at once. @default 16 */
  readonly concurrency?: number;
  /** Open requests per page of the open index. @default 100 */
  readonly pageSize?: number;
}

/** What one pass did. */
export interface ReconcileSummary {
  readonly checked: number;
  /** Request ids given a new execution. */
  readonly resumed: readonly string[];
  /** Request ids recorded failed (`stranded`): resumed too often already. */
  readonly stranded: readonly string[];
  /** Requests whose open index key named an older status (the state machine's own failure write). */
  readonly reindexed: number;
  /** Export slots given back: held by requests no longer exporting (ended some way no step saw). */
  readonly slotsFreed: number;
  /** Pages of the open index read. */
  readonly pages: number;
  /** Step Functions calls this pass made, and how many of them were throttled, per action. */
  readonly sfnCalls: Readonly<Record<PacedAction, ActionFigures>>;
  /** Executions the pass's listings named (running, waiting for a redrive, failed, timed out, aborted). */
  readonly listed: number;
  /**
   * True when the pass read to the end of the open index; false when it ran out of time and left a
   * cursor, from which the next pass goes on.
   */
  readonly complete: boolean;
}

/**
 * Finds open requests (received, running) whose latest execution is not running (it ended, timed
 * out, was aborted, or never started) and resumes each with a new execution, which picks up where
 * the last one stopped (every step is idempotent against the ledger). A request resumed
 * `maxResumes` times already is recorded failed instead, so a fault that kills every execution
 * reaches an operator rather than looping. The deadline does not change that choice: a failed
 * request is no nearer its answer than a resumed one.
 *
 * Step Functions' quotas are per account and small (DescribeExecution refills at 15 a second in the
 * largest Regions), so the pass does not ask about each request: it first lists the state
 * machine's executions that are running or waiting for a redrive, and those that failed, timed out
 * or were aborted, with ListExecutions (a thousand a page), and matches each open request's latest
 * execution by its name. Only a request whose execution no listing named (never started, past the
 * history's 90 days, succeeded, or started since) costs a DescribeExecution. Every call is paced
 * under the pacer's share of the quotas; a throttled one backs off and is tried again. The
 * listings get at most half the pass's time: what they did not reach is described one by one.
 *
 * The pass reads the open index a page at a time, shard by shard, looks at `concurrency` requests
 * at once, and publishes its figures after every page, so a pass that runs out of time has already
 * told its alarms what it found. It gives back stale export slots first. Out of time
 * (`timeLeftMs`), or throttled until its time is up, it keeps where it stopped in the cursor (the
 * page under way is read again: what it did there is idempotent) and the next pass goes on from
 * there; a pass that reaches the end clears it, and the next one starts again from the beginning.
 */
export async function reconcile(deps: ReconcilerDeps, options: ReconcileOptions): Promise<ReconcileSummary> {
  const resumed: string[] = [];
  const stranded: string[] = [];
  let reindexed = 0;
  let checked = 0;
  let pages = 0;
  const settledBefore = deps.clock().getTime() - options.graceSeconds * 1000;
  const timeLeft = options.timeLeftMs ?? (() => Number.POSITIVE_INFINITY);
  const pacer = deps.pacer ?? new ApiPacer(shareOf(documentedQuotas(undefined), QUOTA_SHARE.default));
  const callsBefore = pacer.figures();
  const gates: readonly SiteGate[] = [
    {
      site: deps.site ?? DEFAULT_SITE_ID,
      gate: deps.gate,
      ...(deps.drain === undefined ? {} : { drain: deps.drain }),
    },
    ...(deps.sites ?? []),
  ];
  let slotsFreed = 0;
  const held = new Map<SiteGate, number>();
  for (const site of gates) {
    const slots = await freeStaleSlots(deps, site, settledBefore);
    slotsFreed += slots.freed;
    held.set(site, slots.held);
    // A slot that stands free while requests wait (its hand-over found no one awake) goes to them.
    await site.gate.offerFreeSlots?.();
  }
  const publish = async () => {
    const figures = new Map<SiteGate, SiteMetrics>();
    for (const site of gates) {
      const circuit = await site.gate.state();
      figures.set(site, {
        PlatformDownSeconds:
          circuit.opened_at === 0
            ? 0
            : Math.max(0, Math.round((deps.clock().getTime() - circuit.opened_at) / 1000)),
        ExportSlotsHeld: held.get(site) ?? 0,
      });
    }
    const all = [...figures.values()];
    deps.publish({
      StuckRequests: resumed.length + stranded.length,
      PlatformDownSeconds: Math.max(...all.map((each) => each.PlatformDownSeconds)),
      ExportSlotsHeld: all.reduce((sum, each) => sum + each.ExportSlotsHeld, 0),
      ...(deps.sites === undefined || deps.sites.length === 0
        ? {}
        : { sites: Object.fromEntries([...figures].map(([site, each]) => [site.site, each])) }),
    });
  };
  const known = await listExecutions(deps, pacer, halfOf(timeLeft));
  const look: Look = { deps, options, pacer, known, timeLeft, settledBefore };
  let position: ReconcileCursor | undefined = (await deps.cursor.load()) ?? {
    status: RECONCILED_STATUSES[0],
    shard: 0,
  };
  let deferred = 0;
  while (position !== undefined && deferred === 0 && timeLeft() > 0) {
    const { status, shard }: ReconcileCursor = position;
    const page = await deps.ledger.openRequestsPage(status, shard, {
      ...(position.after === undefined ? {} : { after: position.after }),
      pageSize: options.pageSize ?? DEFAULT_PAGE_SIZE,
    });
    pages += 1;
    const outcomes = new Map<string, Outcome>();
    await eachAtMost(options.concurrency ?? DEFAULT_CONCURRENCY, page.items, async (entry) => {
      outcomes.set(entry.request_id, await checkOpenRequest(look, status, entry));
    });
    for (const [requestId, outcome] of outcomes) {
      if (outcome === 'resumed') resumed.push(requestId);
      if (outcome === 'stranded') stranded.push(requestId);
      if (outcome === 'reindexed') reindexed += 1;
      if (outcome === 'deferred') deferred += 1;
    }
    // A page with a request the pass could not look at in time is read again by the next pass.
    if (deferred === 0) {
      checked += page.items.length;
      position = page.next === undefined ? nextPartition(position) : { status, shard, after: page.next };
      await deps.cursor.save(position);
    }
    if (page.items.length > 0) await publish();
  }
  // The pass's last figures, also when it found nothing open: the alarms read figures, not silence.
  await publish();
  const complete = position === undefined;
  const sfnCalls = callsSince(callsBefore, pacer.figures());
  const throttled = PACED_ACTIONS.reduce((sum, action) => sum + sfnCalls[action].throttled, 0);
  const summary = {
    checked,
    resumed,
    stranded,
    reindexed,
    slotsFreed,
    pages,
    sfnCalls,
    listed: known.size,
    complete,
  };
  if (throttled > 0) {
    deps.logger.warn('Step Functions throttled the reconciler; it backed off', {
      throttled,
      deferred,
      complete,
    });
  }
  if (resumed.length + stranded.length > 0) {
    deps.logger.warn('open requests had no running execution', {
      resumed: resumed.length,
      stranded: stranded.length,
      reindexed,
      complete,
    });
  } else deps.logger.info('reconciled', { checked, reindexed, pages, listed: known.size, complete });
  return summary;
}

const DEFAULT_PAGE_SIZE = 100;
const DEFAULT_CONCURRENCY = 16;

/**
 * The statuses a pass lists: the live ones, whose requests it leaves alone, then the ended ones an
 * execution that stopped moving its request usually has. Not SUCCEEDED: every completed request's
 * execution succeeded, so that list is most of the history, and an open request whose execution
 * succeeded is rare enough to be described on its own.
 */
export const LISTED_STATUSES: readonly ListedStatus[] = [
  'RUNNING',
  'PENDING_REDRIVE',
  'FAILED',
  'TIMED_OUT',
  'ABORTED',
];

/**
 * A resume already claimed in the ledger gets this much time past the pass's own to start its
 * execution, so that a throttled StartExecution does not leave a claimed request without one.
 */
const START_GRACE_MS = 20_000;

/** What looking at one open request needs. */
interface Look {
  readonly deps: ReconcilerDeps;
  readonly options: ReconcileOptions;
  readonly pacer: Pacer;
  /** Execution name -> status, from the pass's listings. */
  readonly known: ReadonlyMap<string, ExecutionStatus>;
  readonly timeLeft: () => number;
  readonly settledBefore: number;
}

type Outcome = 'resumed' | 'stranded' | 'reindexed' | 'moved' | 'live' | 'deferred';

/** Half of the time left now, counted down with `timeLeft` (all of it when there is no limit). */
function halfOf(timeLeft: () => number): () => number {
  const half = timeLeft() / 2;
  return Number.isFinite(half) ? () => timeLeft() - half : timeLeft;
}

/**
 * The executions of LISTED_STATUSES by name, listed page by page until the lists end or
 * `timeLeft` runs out; a later list's status wins (an execution listed running that has failed
 * since shows in the failed list, read after it).
 */
async function listExecutions(
  deps: ReconcilerDeps,
  pacer: Pacer,
  timeLeft: () => number,
): Promise<Map<string, ExecutionStatus>> {
  const known = new Map<string, ExecutionStatus>();
  for (const status of LISTED_STATUSES) {
    let nextToken: string | undefined;
    do {
      if (timeLeft() <= 0) return known;
      const token = nextToken;
      const page = await pacer.run('ListExecutions', () => deps.list(status, token), timeLeft);
      if (!page.done) return known;
      for (const execution of page.value.executions) known.set(execution.name, execution.status);
      nextToken = page.value.nextToken;
    } while (nextToken !== undefined);
  }
  return known;
}

function callsSince(
  before: Record<PacedAction, ActionFigures>,
  after: Record<PacedAction, ActionFigures>,
): Record<PacedAction, ActionFigures> {
  const since = (action: PacedAction): ActionFigures => ({
    calls: after[action].calls - before[action].calls,
    throttled: after[action].throttled - before[action].throttled,
  });
  return {
    ListExecutions: since('ListExecutions'),
    DescribeExecution: since('DescribeExecution'),
    StartExecution: since('StartExecution'),
  };
}

/**
 * One open request of the index: reindexed when its index key names an older status, resumed or
 * recorded failed when no execution is moving it, left alone otherwise; deferred when the pass's
 * time ran out before Step Functions could say.
 */
async function checkOpenRequest(
  look: Look,
  status: (typeof RECONCILED_STATUSES)[number],
  entry: OpenRequest,
): Promise<Outcome> {
  const { deps } = look;
  if (entry.status !== status) {
    // Only the state machine's own failure write (RecordFailure could not run) sets a status
    // without moving the index key: no Lambda wrote the final record, so it is written here,
    // before the key moves, so a pass that dies in between finds the request again.
    if (entry.status === 'failed') await closeUnrecordedFailure(deps, entry.request_id);
    return (await deps.ledger.reindexOpen(entry.request_id, entry.status)) ? 'reindexed' : 'moved';
  }
  const item = await deps.ledger.get(entry.request_id);
  if (item === undefined || item.status !== status) return 'moved';
  // A request in parts has no execution of its own: its parts are open requests of their own,
  // reconciled each, and each tells it when it ends.
  if (item.site_results !== undefined) return 'live';
  if (Date.parse(item.updated_at) > look.settledBefore) return 'live';
  const latest = latestExecutionName(item.request_id, item.executions);
  const listed = look.known.get(latest);
  const execution =
    listed === undefined
      ? await look.pacer.run('DescribeExecution', () => deps.describe(latest), look.timeLeft)
      : { done: true as const, value: listed };
  if (!execution.done) return 'deferred';
  if (isLive(execution.value)) return 'live';
  return resumeOrFail(look, item, execution.value);
}

/** Runs `work` on every item, at most `limit` at a time; the first failure is thrown once all settle. */
export async function eachAtMost<T>(limit: number, items: readonly T[], work: (item: T) => Promise<void>) {
  let next = 0;
  const failures: unknown[] = [];
  const worker = async () => {
    while (next < items.length) {
      const item = items[next] as T;
      next += 1;
      try {
        await work(item);
      } catch (error) {
        failures.push(error);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker));
  if (failures.length > 0) throw failures[0];
}

/**
 * Gives back the export slots of requests that no longer export (ended by the state machine's own
 * failure write, cancelled, denied, or gone): a slot taken before `settledBefore` by a request that
 * is not running in its export or archive step. A request that ended with its export still open on
 * the platform keeps the slot, since the platform still counts that export: with a drain, the
 * export is taken to its end (downloaded and discarded once complete, the discard recorded in the
 * request's effects chain) and only then is the slot given back; without one, the slot is held.
 * Answers how many slots it freed and how many are still held.
 */
async function freeStaleSlots(
  deps: ReconcilerDeps,
  site: SiteGate,
  settledBefore: number,
): Promise<{ freed: number; held: number; draining: number }> {
  const holders = Object.entries(await site.gate.exportHolders());
  let freed = 0;
  let draining = 0;
  await eachAtMost(DEFAULT_CONCURRENCY, holders, async ([requestId, takenAt]) => {
    if (takenAt > settledBefore) return;
    const item = await deps.ledger.get(requestId);
    if (item !== undefined && item.status === 'running' && SLOT_STEPS.has(item.step ?? '')) return;
    if (item !== undefined && ENDED.has(item.status) && exportLeftOpen(item)) {
      const drained = await drainLeftExport(deps, site.drain, item).catch((error: unknown) => {
        // The platform down or the download broken: the slot stays held, and the next pass tries
        // again; the rest of the pass goes on.
        deps.logger.warn('an export left open could not be drained; its slot stays held', {
          request_id: requestId,
          error: error instanceof Error ? error.name : 'unknown',
        });
        return false;
      });
      if (!drained) {
        draining += 1;
        return;
      }
    }
    await site.gate.releaseExport(requestId);
    freed += 1;
  });
  if (freed > 0) deps.logger.warn('export slots given back: their requests no longer export', { freed });
  if (draining > 0) {
    deps.logger.info('export slots held for exports left open by ended requests', { draining });
  }
  return { freed, held: holders.length - freed, draining };
}

/** The statuses of a request that ended: an export it left open is the reconciler's to drain. */
const ENDED = new Set(['cancelled', 'denied', 'failed', 'completed']);

/**
 * Takes an export an ended request left open one step towards its end: true once the platform no
 * longer counts it (failed, gone, or downloaded and discarded here), false while it is still being
 * prepared or there is no drain.
 */
async function drainLeftExport(
  deps: ReconcilerDeps,
  drain: ExportDrain | undefined,
  item: LedgerItem,
): Promise<boolean> {
  const exportId = item.export_id;
  if (drain === undefined || exportId === undefined) return false;
  const state = await drain.state(exportId);
  if (state === 'pending') return false;
  const bytes = state === 'completed' ? await drain.discard(exportId) : 0;
  await deps.audit.append(sideChainOf('effects', item.request_id), {
    eventId: `Reconciler:export_drained:${exportId}`,
    step: 'Reconciler',
    action: 'export_drained',
    facts: { export_id: exportId, platform_state: state, discarded_bytes: bytes, status: item.status },
  });
  return true;
}

async function resumeOrFail(
  look: Look,
  item: LedgerItem,
  execution: ExecutionStatus,
): Promise<'resumed' | 'stranded' | 'moved' | 'deferred'> {
  const { deps, options } = look;
  const { request_id: requestId, type, regulation } = item;
  const resumes = item.resumes ?? 0;
  if (resumes >= options.maxResumes || type === undefined || regulation === undefined) {
    const why =
      type === undefined || regulation === undefined
        ? 'it has no type or regulation, so no execution can run it'
        : `it was resumed ${resumes} time(s) already`;
    try {
      await deps.ledger.update(
        requestId,
        {
          status: 'failed',
          error: {
            code: STRANDED_CODE,
            message: `no execution was running this request (the latest, ${latestExecutionName(requestId, item.executions)}, is ${execution.toLowerCase()}) and ${why}; find the cause in its execution history, then run npx svc-dsr retry ${requestId}`,
          },
        },
        [item.status],
      );
      await closeFailedChain(deps, requestId, item.executions, STRANDED_CODE, item.step);
      await settlePart(deps, await deps.ledger.require(requestId));
      return 'stranded';
    } catch (error) {
      if (
        error instanceof Error &&
        (error.name === 'LedgerStateError' || error.name === 'RequestCancelledError')
      )
        return 'moved';
      throw error;
    }
  }
  const claimed = await deps.ledger.claimResume(requestId, {
    status: item.status,
    executions: item.executions,
  });
  if (claimed === undefined) return 'moved';
  // An execution that never started keeps the request id as its name; a later one is a retry's.
  const name =
    execution === 'MISSING' && item.executions === 0
      ? requestId
      : retryExecutionName(requestId, claimed.executions);
  const started = await look.pacer.run(
    'StartExecution',
    () => deps.start(name, { request_id: requestId, type, regulation }),
    () => look.timeLeft() + START_GRACE_MS,
  );
  // Claimed but not started: past the grace period a later pass finds its execution missing.
  return started.done ? 'resumed' : 'deferred';
}

/**
 * Ends the chain of a request the state machine recorded failed by itself: the final record
 * RecordFailure would have written, with the ledger's error code, written by the reconciler.
 */
async function closeUnrecordedFailure(deps: ReconcilerDeps, requestId: string): Promise<void> {
  const item = await deps.ledger.get(requestId);
  if (item === undefined || item.status !== 'failed') return;
  await closeFailedChain(deps, requestId, item.executions, item.error?.code ?? 'unknown', item.step);
  // A site's part failed by the state machine's own write: its request learns it here.
  await settlePart(deps, item);
}

/**
 * Appends the final `request_failed` record of a failure the reconciler records or finds
 * unrecorded. Written once per execution (its eventId); a chain already closed (RecordFailure
 * wrote its record after all) is left as it is.
 */
async function closeFailedChain(
  deps: ReconcilerDeps,
  requestId: string,
  executions: number,
  code: string,
  step: string | undefined,
): Promise<void> {
  try {
    await deps.audit.append(requestId, {
      eventId: `Reconciler:${executions}:${code}`,
      step: 'Reconciler',
      action: 'request_failed',
      facts: { code, step: step ?? null },
      final: true,
    });
  } catch (error) {
    if (!(error instanceof AuditChainClosedError)) throw error;
  }
}
