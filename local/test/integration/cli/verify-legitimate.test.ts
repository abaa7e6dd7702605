import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CAN_CANCEL,
  CAN_DENY,
  CAN_EXTEND,
  CAN_NOTICE,
  CAN_RETRY,
  type LedgerItem,
  NOTICE_KINDS,
} from '../../../../lambdas/shared/ledger/index.ts';
import { type EvidenceWorld, startEvidenceWorld } from './evidence-world.ts';

/**
 * Every sequence of operator commands (and workflow ends) the ledger's rules allow, played on local
 * data with the real writers; `verify --all` must find nothing after each step. Every sequence of
 * two moves is played on a CCPA request (whose receipt notice adds a kind), every single move on a
 * GDPR one, and longer histories as scripts. A sequence is a path in a tree: each request plays
 * one path, and a path that branches is played again on a new request per branch.
 */
const START = new Date('2026-11-20T08:00:00.000Z');
const STEP_MS = 7 * 3600 * 1000;

/** How long the tree's paths grow, by regulation. */
const TREE_DEPTH = { ccpa: 2, gdpr: 1 } as const;

/** Longer histories, played move by move beside the tree. */
const SCRIPTS: readonly { regulation: 'gdpr' | 'ccpa'; moves: readonly Move[] }[] = [
  { regulation: 'ccpa', moves: ['fail', 'extend', 'retry', 'fail', 'deny'] },
  { regulation: 'ccpa', moves: ['fail', 'extend', 'retry', 'complete', 'notice'] },
  { regulation: 'ccpa', moves: ['fail', 'retry', 'fail', 'retry', 'complete'] },
  { regulation: 'ccpa', moves: ['extend', 'notice', 'fail', 'retry', 'cancel'] },
  { regulation: 'gdpr', moves: ['fail', 'extend', 'notice', 'deny', 'notice'] },
  { regulation: 'gdpr', moves: ['extend', 'complete', 'notice'] },
];

const MOVES = ['fail', 'complete', 'extend', 'retry', 'cancel', 'deny', 'notice'] as const;
type Move = (typeof MOVES)[number];

let world: EvidenceWorld;

beforeAll(async () => {
  world = await startEvidenceWorld(START);
});
afterAll(async () => {
  await world.close();
});

/** The notice kinds the rules allow for the request now. */
function noticeKinds(item: LedgerItem): (typeof NOTICE_KINDS)[number][] {
  const now = new Date();
  return NOTICE_KINDS.filter(
    (kind) => CAN_NOTICE.refusal(item, { kind, at: now.toISOString(), now }) === undefined,
  );
}

/** The moves the rules allow on the request as the ledger holds it. */
function allowedMoves(item: LedgerItem): Move[] {
  const now = new Date();
  const open = item.status === 'received' || item.status === 'running';
  const allowed: Record<Move, boolean> = {
    fail: open,
    complete: open,
    extend: CAN_EXTEND.refusal(item, { reason: 'r', now, noticeAt: now.toISOString() }) === undefined,
    retry: CAN_RETRY.refusal(item) === undefined,
    cancel: CAN_CANCEL.refusal(item) === undefined,
    deny: CAN_DENY.refusal(item) === undefined,
    notice: noticeKinds(item).length > 0,
  };
  return MOVES.filter((move) => allowed[move]);
}

/** Plays one move; an operator command must succeed (exit 0), as the rules allowed it. */
async function play(requestId: string, move: Move): Promise<void> {
  const exit = async (run: Promise<{ exitCode: number }>) => expect((await run).exitCode).toBe(0);
  switch (move) {
    case 'fail':
      return world.fail(requestId);
    case 'complete':
      return world.complete(requestId);
    case 'extend':
      return exit(world.extend(requestId));
    case 'retry':
      return exit(world.retry(requestId));
    case 'cancel':
      return exit(world.cancel(requestId));
    case 'deny':
      return exit(world.deny(requestId));
    case 'notice':
      // Every kind the request calls for now: receipt, extension, response, denial.
      for (const kind of noticeKinds(await world.ledger.require(requestId)))
        await exit(world.notice(requestId, kind));
  }
}

interface Played {
  readonly requestId: string;
  readonly path: readonly Move[];
}

/** A new request with `path` played on it. */
async function replay(regulation: 'gdpr' | 'ccpa', path: readonly Move[]): Promise<string> {
  const { requestId } = await world.submit({ regulation });
  for (const move of path) await play(requestId, move);
  return requestId;
}

type Frontier = { played: Played; regulation: 'gdpr' | 'ccpa'; script?: readonly Move[] }[];

/**
 * Plays the frontier round by round until every path has ended: every allowed move on every path
 * (the next move of a script), then the next manifests and `verify --all`, which must find
 * nothing. Answers the paths played.
 */
async function playRounds(start: Frontier): Promise<string[]> {
  const paths: string[] = [];
  let frontier = start;
  while (frontier.length > 0) {
    const next: Frontier = [];
    for (const { played, regulation, script } of frontier) {
      const moves =
        script === undefined
          ? allowedMoves(await world.ledger.require(played.requestId))
          : script.slice(played.path.length, played.path.length + 1);
      for (const [index, move] of moves.entries()) {
        const requestId = index === 0 ? played.requestId : await replay(regulation, played.path);
        await play(requestId, move);
        const path = [...played.path, move];
        paths.push(`${regulation}: ${path.join(' ')}`);
        const more = path.length < (script === undefined ? TREE_DEPTH[regulation] : script.length);
        if (more) next.push({ played: { requestId, path }, regulation, ...(script ? { script } : {}) });
      }
    }
    frontier = next;
    world.advance(STEP_MS);
    await world.manifests();
    const { exitCode, result } = await world.verifyAll();
    expect(result.findings).toEqual([]);
    expect(exitCode).toBe(0);
  }
  return paths;
}

describe('svc-dsr verify --all on legitimate histories', () => {
  it('finds nothing after any step of longer histories: extensions, retries and denials after failures', async () => {
    // Prepare
    const frontier: Frontier = [];
    for (const { regulation, moves: script } of SCRIPTS) {
      const { requestId } = await world.submit({ regulation });
      frontier.push({ played: { requestId, path: [] }, regulation, script });
    }

    // Act and Assess: verify --all after every round
    const paths = await playRounds(frontier);

    // Assess
    for (const { regulation, moves } of SCRIPTS) expect(paths).toContain(`${regulation}: ${moves.join(' ')}`);
  });

  it('finds nothing after any step of any sequence of two moves the rules allow', async () => {
    // Prepare: a GDPR and a CCPA request through intake, and one denied there (identity not verified).
    const denied = await world.submit({ method: 'unverified' });
    expect(denied.kind).toBe('denied');
    await world.notice(denied.requestId, 'denial');
    const frontier: Frontier = [];
    for (const regulation of ['gdpr', 'ccpa'] as const) {
      const { requestId } = await world.submit({ regulation });
      frontier.push({ played: { requestId, path: [] }, regulation });
    }

    // Act and Assess: verify --all after every round
    const paths = await playRounds(frontier);

    // Assess: the sequences the issue names are among those played.
    for (const named of [
      'ccpa: fail extend',
      'ccpa: fail retry',
      'ccpa: fail deny',
      'ccpa: fail notice',
      'ccpa: cancel notice',
      'ccpa: extend complete',
      'ccpa: complete notice',
      'gdpr: extend',
    ]) {
      expect(paths).toContain(named);
    }
  });
});
