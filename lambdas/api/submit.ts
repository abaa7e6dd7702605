// Submissions through the API: one request, or a CSV/JSONL/JSON batch with each line's verdict, judged and sent by the same code as `svc-dsr submit`.
import { randomUUID } from 'node:crypto';
import type { z } from 'zod';
import { sendAll } from '#shared/intake-send';
import {
  type Candidate,
  candidatesOf,
  classifyAgainstLedger,
  judgeCandidates,
  readRecorded,
  SubmissionFileError,
} from '#shared/submission';
import { ApiFailure } from './answers.ts';
import type { ApiDeps } from './deps.ts';
import type { batchBodySchema, SubmitAnswer } from './schemas.ts';

/**
 * Judges the candidates as `svc-dsr submit` does (the request schema intake applies, repeats,
 * intake's warnings), reads the ledger for earlier submissions of the valid ones, and unless
 * `dryRun` sends those that are no conflict to the intake queue. Never quotes a line.
 */
async function submitCandidates(
  deps: ApiDeps,
  submitter: string,
  candidates: readonly Candidate[],
  dryRun: boolean,
): Promise<SubmitAnswer> {
  const { bad, duplicates, valid, warnings } = judgeCandidates(
    candidates.map((each) => signed(each, submitter)),
  );
  const { already, conflicts, toSend } = classifyAgainstLedger(valid, await readRecorded(deps.ledger, valid));
  const { sent, failed } =
    dryRun || toSend.length === 0 ? { sent: [], failed: [] } : await sendAll(deps.intake, toSend);
  return {
    dry_run: dryRun,
    lines: candidates.length,
    valid: valid.length,
    bad_lines: bad,
    warnings,
    duplicates,
    already_submitted: already,
    conflicts,
    sent,
    failed,
  };
}

/**
 * The largest `submitted_by` a request holds (lambdas/shared/request.ts): a machine's ARN longer than
 * that is cut, its account and role kept at the start.
 */
const SUBMITTED_BY_MAX = 128;

/**
 * A candidate with the signed-in caller as its `submitted_by`: a submission through the API is on
 * record under the person (or system) who made it, whatever the line says. A line that is not an
 * object is left for the schema to refuse.
 */
function signed(candidate: Candidate, submitter: string): Candidate {
  const { value } = candidate;
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return candidate;
  return { ...candidate, value: { ...value, submitted_by: submitter.slice(0, SUBMITTED_BY_MAX) } };
}

/** One request, as `svc-dsr submit` with flags takes it: a request id is made when none is given. */
export async function submitOne(deps: ApiDeps, submitter: string, body: unknown): Promise<SubmitAnswer> {
  const value =
    body !== null && typeof body === 'object' && !Array.isArray(body) && !('request_id' in body)
      ? { request_id: randomUUID(), ...body }
      : body;
  const submitted = await submitCandidates(deps, submitter, [{ line: 1, value }], false);
  const [bad] = submitted.bad_lines;
  if (bad !== undefined)
    throw new ApiFailure(400, 'invalid', `the request is invalid: ${bad.errors.join('; ')}`);
  const [conflict] = submitted.conflicts;
  if (conflict !== undefined) {
    throw new ApiFailure(
      409,
      'conflict',
      `request ${conflict.request_id} is in the ledger (${conflict.status}) with other content: give this request its own request_id`,
    );
  }
  if (submitted.failed.length > 0) {
    throw new ApiFailure(503, 'send_failed', 'the intake queue did not take the request; send it again');
  }
  return submitted;
}

/** A batch: every line judged; with `dry_run` nothing is sent, else the valid lines are. */
export async function submitBatch(
  deps: ApiDeps,
  submitter: string,
  body: z.infer<typeof batchBodySchema>,
): Promise<SubmitAnswer> {
  let candidates: Candidate[];
  try {
    candidates = candidatesOf(body.content, body.format, 'the batch', 'content');
  } catch (error) {
    if (error instanceof SubmissionFileError) throw new ApiFailure(400, 'invalid', error.message);
    throw error;
  }
  if (candidates.length === 0) throw new ApiFailure(400, 'invalid', 'content: the batch holds no requests');
  return await submitCandidates(deps, submitter, candidates, body.dry_run === true);
}
