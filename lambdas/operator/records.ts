/**
 * What every operator command shares: the clients and names it works with, its refusals, and the
 * locked audit record that names who acted.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import type { SFNClient } from '@aws-sdk/client-sfn';
import { AuditTrail } from '#shared/audit';
import type { Ledger } from '#shared/ledger';
import type { RefusalCode } from './commands.ts';

/** The stack's resources the operator changes touch. */
export interface OperatorNames {
  readonly ArchiveBucketName: string;
  readonly AuditBucketName: string;
  readonly StateMachineArn: string;
}

/** What the operator changes work with. */
export interface OperatorDeps {
  readonly ledger: Ledger;
  readonly s3: S3Client;
  readonly sfn: SFNClient;
  readonly names: OperatorNames;
  readonly clock: () => Date;
}

/** A change the function refuses, with a code the CLI maps to its exit status. */
export class OperatorRefusal extends Error {
  override readonly name = 'OperatorRefusal';
  constructor(
    readonly code: RefusalCode,
    message: string,
  ) {
    super(message);
  }
}

/** A command that passed the schema but says something impossible (a notice given in the future). */
export class OperatorInputError extends Error {
  override readonly name = 'OperatorInputError';
}

/**
 * Appends an operator action to the request's audit chain, after the ledger change it records,
 * with who acted (`operator`, the caller's principal) and why (`reason`). Operator records carry no
 * subject, so no HMAC key is needed. A failure is a refusal that says the change stands but its
 * audit record is missing.
 */
export async function recordAction(
  deps: OperatorDeps,
  operator: string,
  requestId: string,
  event: {
    eventId: string;
    action: string;
    facts: Record<string, string | number | boolean | null>;
    reason?: string;
    final?: boolean;
  },
  options: { acceptClosedBy?: string; chain?: string; done?: string } = {},
): Promise<'appended' | 'closed'> {
  const chain = options.chain ?? requestId;
  const trail = new AuditTrail(
    { s3: deps.s3, bucket: deps.names.AuditBucketName },
    {
      hmacKey: () => {
        throw new Error('operator records carry no subject');
      },
      heads: deps.ledger,
    },
  );
  try {
    // Who acted and why go into the record itself: the ledger's copy of the reason can change.
    const { reason, ...rest } = event;
    const facts = { ...rest.facts, operator, reason: reason ?? null };
    await trail.append(chain, { ...rest, facts, step: 'Operator' });
    return 'appended';
  } catch (error) {
    // The workflow may have closed the chain first with a final record of the same change (its
    // own record of the cancellation): the change is then on record, and that is no failure.
    if (options.acceptClosedBy !== undefined) {
      const last = (await trail.list(chain).catch(() => [])).at(-1);
      if (last?.final === true && last.action === options.acceptClosedBy) return 'closed';
    }
    throw new OperatorRefusal(
      'unrecorded',
      `${options.done ?? `the ledger change for ${requestId} is made`}, but its audit record (${event.action}) could not be written: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
}
