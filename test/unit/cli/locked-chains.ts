/**
 * Audit chains that lock what a ledger item says, as the workflow and the operator commands write
 * them (docs/audit.md, "Which record locks each ledger field"), served by a mocked S3 client: the
 * evidence `svc-dsr report` checks each row against. A test that wants a disagreement edits the
 * item after its chain was made, as an insider editing the ledger would.
 */
import {
  GetObjectCommand,
  ListObjectsV2Command,
  type ListObjectsV2CommandInput,
  NoSuchKey,
  type S3Client,
} from '@aws-sdk/client-s3';
import type { AwsClientStub } from 'aws-sdk-client-mock';
import {
  AUDIT_PREFIX,
  AUDIT_SCHEMA,
  type AuditRecord,
  auditRecordKey,
  factDigest,
  noticesChainOf,
  recordHash,
} from '#shared/audit';
import type { LedgerItem } from '#shared/ledger';
import { s3Body } from './helpers.ts';

/** One chain: its id (`<request_id>` or `<request_id>.notices`) and its records by seq. */
export interface LockedChain {
  readonly chainId: string;
  readonly records: readonly AuditRecord[];
}

type Facts = AuditRecord['facts'];
interface Unsealed {
  readonly step: string;
  readonly action: string;
  readonly at: string;
  readonly facts: Facts;
  readonly final?: boolean;
}

/** Seals the records of one chain: seq, event id, links and hashes. */
function seal(chainId: string, entries: readonly Unsealed[]): AuditRecord[] {
  const records: AuditRecord[] = [];
  for (const [seq, entry] of entries.entries()) {
    const unsealed = {
      schema: AUDIT_SCHEMA,
      request_id: chainId,
      seq,
      event_id: `${entry.step}:${entry.action}:${seq}`,
      step: entry.step,
      action: entry.action,
      at: new Date(entry.at).toISOString(),
      facts: entry.facts,
      final: entry.final ?? false,
      prev_hash: records.at(-1)?.hash ?? null,
    } satisfies Omit<AuditRecord, 'hash'>;
    records.push({ ...unsealed, hash: recordHash(unsealed) });
  }
  return records;
}

/** Only the facts that are set: a record holds no undefined. */
function facts(fields: Record<string, string | number | boolean | null | undefined>): Facts {
  return Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined)) as Facts;
}

/** The final record a status ends the chain with, or none while the request is open. */
function finalRecord(item: LedgerItem, at: string): Unsealed | undefined {
  const completedAt = item.completed_at;
  switch (item.status) {
    case 'completed':
      return {
        step: 'RecordOutcome',
        action: 'request_completed',
        at: completedAt ?? at,
        facts: facts({ outcome: item.outcome, completed_at: completedAt }),
        final: true,
      };
    case 'failed':
      return {
        step: 'RecordFailure',
        action: 'request_failed',
        at,
        facts: facts({ code: item.error?.code }),
        final: true,
      };
    case 'cancelled':
      return {
        step: 'Operator',
        action: 'request_cancelled',
        at: completedAt ?? at,
        facts: facts({ reason: item.cancel_reason, completed_at: completedAt }),
        final: true,
      };
    case 'denied':
      return {
        step: 'Operator',
        action: 'request_denied',
        at: completedAt ?? at,
        facts: facts({ reason_code: item.denial?.code, completed_at: completedAt }),
        final: true,
      };
    case 'rejected':
      return {
        step: 'Intake',
        action: 'request_rejected',
        at: item.created_at,
        facts: facts({
          errors: item.rejection_errors?.length ?? 0,
          errors_sha256: factDigest(item.rejection_errors ?? []),
        }),
        final: true,
      };
    default:
      return undefined;
  }
}

/** The chains that lock `item`: its own (intake, extension, end) and its notices, when it has any. */
export function chainsFor(item: LedgerItem): LockedChain[] {
  const own: Unsealed[] = [];
  const receivedAt = item.received_at;
  if (receivedAt !== undefined) {
    own.push({
      step: 'Intake',
      action: 'request_received',
      at: receivedAt,
      facts: facts({
        type: item.type,
        regulation: item.regulation,
        received_at: receivedAt,
        due_at: item.extended ? item.original_due_at : item.due_at,
        confirm_by: item.confirm_by,
        verification_method: item.verification?.method,
        verified_at: item.verification?.verified_at,
        reference_sha256: item.reference === undefined ? null : factDigest(item.reference),
        channel: item.channel,
      }),
    });
    if (item.extended) {
      own.push({
        step: 'Operator',
        action: 'deadline_extended',
        at: receivedAt,
        facts: facts({
          due_at: item.due_at,
          previous_due_at: item.original_due_at,
          reason: item.extension_reason,
        }),
      });
    }
  }
  const end = finalRecord(item, receivedAt ?? item.created_at);
  if (end !== undefined) own.push(end);
  const notices: Unsealed[] = [];
  for (const kind of ['receipt', 'extension', 'response', 'denial'] as const) {
    const notice = item[`notice_${kind}`];
    if (notice === undefined) continue;
    notices.push({
      step: 'Operator',
      action: 'notice_given',
      at: notice.recorded_at,
      facts: facts({ kind, channel: notice.channel, given_at: notice.at, template: notice.template }),
    });
  }
  return [
    { chainId: item.request_id, records: seal(item.request_id, own) },
    ...(notices.length === 0
      ? []
      : [
          {
            chainId: noticesChainOf(item.request_id),
            records: seal(noticesChainOf(item.request_id), notices),
          },
        ]),
  ];
}

/**
 * Makes the mocked S3 client serve `chains` as the audit bucket: ListObjectsV2 by prefix (each
 * record stored when it says it was written) and by folder, GetObject of each record, NoSuchKey
 * for any other key.
 */
export function serveChains(s3Mock: AwsClientStub<S3Client>, chains: readonly LockedChain[]): void {
  const stored = new Map<string, AuditRecord>();
  for (const chain of chains)
    for (const record of chain.records) stored.set(auditRecordKey(chain.chainId, record.seq), record);
  s3Mock.on(ListObjectsV2Command).callsFake((input: ListObjectsV2CommandInput) => {
    const prefix = input.Prefix ?? '';
    if (input.Delimiter === '/' && prefix === AUDIT_PREFIX) {
      return { CommonPrefixes: chains.map((chain) => ({ Prefix: `${AUDIT_PREFIX}${chain.chainId}/` })) };
    }
    return {
      Contents: [...stored.entries()]
        .filter(([key]) => key.startsWith(prefix))
        .map(([key, record]) => ({ Key: key, LastModified: new Date(record.at) })),
    };
  });
  s3Mock.on(GetObjectCommand).callsFake((input: { Key?: string }) => {
    const record = stored.get(input.Key ?? '');
    if (record === undefined)
      throw new NoSuchKey({ message: 'The specified key does not exist.', $metadata: {} });
    return { Body: s3Body(Buffer.from(`${JSON.stringify(record, null, 2)}\n`)) };
  });
}
