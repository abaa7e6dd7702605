/**
 * The ledger's vocabulary and layout: statuses, steps and outcomes, the item's schema, the sharded
 * open-by-due index and the audit chain heads an item keeps.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import type { SideChainKind } from '../audit-chains.ts';
import { CORRECTABLE_FIELDS } from '../profile-fields.ts';
import { REQUEST_TYPES } from '../request.ts';
import { siteResultSchema } from '../site-outcomes.ts';
import { siteIdSchema } from '../sites.ts';
import { DENIAL_CODES, NOTICE_KINDS, OUTCOMES, STATUSES } from '../vocabulary.ts';

export { DENIAL_CODES, NOTICE_KINDS, OUTCOMES, STATUSES };

export type DenialCode = (typeof DENIAL_CODES)[number];
export type NoticeKind = (typeof NOTICE_KINDS)[number];
export const STEPS = ['resolving', 'exporting', 'archiving', 'erasing', 'verifying', 'correcting'] as const;
export const ERASURE_EVIDENCE = ['delete_answer', 'not_found_after_interrupted_delete'] as const;
export type ErasureEvidence = (typeof ERASURE_EVIDENCE)[number];
export const EXPORT_START_OUTCOMES = [
  'in_flight',
  'accepted',
  'refused',
  'uncertain',
  'interrupted',
] as const;
export type Status = (typeof STATUSES)[number];

/** Statuses a request is still moving through; every other status is terminal. */
const MOVING_STATUSES: readonly Status[] = ['received', 'running'];

/**
 * The terminal statuses: each ends the request's audit chain with a final record (only an
 * operator's retry of a `failed` request opens a new segment after it).
 */
export const TERMINAL_STATUSES: readonly Status[] = STATUSES.filter(
  (status) => !MOVING_STATUSES.includes(status),
);

/** True for a status that ends the request's audit chain. */
export function isTerminal(status: Status): boolean {
  return TERMINAL_STATUSES.includes(status);
}
export type Step = (typeof STEPS)[number];
export type Outcome = (typeof OUTCOMES)[number];

/**
 * Statuses of a request the subject is still owed an answer on: `failed` too, since an operator
 * retries it. Only these are in the open index.
 */
export const OWED_STATUSES = ['received', 'running', 'failed'] as const satisfies readonly Status[];
export type OwedStatus = (typeof OWED_STATUSES)[number];

/**
 * Name of the sparse index of open requests by due date. Its partition key is `open_shard`
 * (`<status>#<shard>`), set only while the request is owed an answer, so a mass of requests with
 * one status, or with one due date, spreads over OPEN_INDEX_SHARDS partitions instead of one.
 */
export const OPEN_DUE_INDEX = 'open-by-due';
/** The index the ledger lists by status and due date (the open index; the old name is kept for its users). */
export const STATUS_DUE_INDEX = OPEN_DUE_INDEX;
/** The status/due index of ledgers created before the open index: kept only during their migration (docs/deploy.md). */
export const LEGACY_STATUS_DUE_INDEX = 'by-status-due';

/** The open index's partition key attribute. */
export const OPEN_SHARD_ATTRIBUTE = 'open_shard';
/** Partitions each status is spread over. Changing it needs every open item rewritten. */
export const OPEN_INDEX_SHARDS = 16;
/** The attributes the open index carries besides its keys: what `svc-dsr list` and the deadline sweep read. */
export const OPEN_INDEX_ATTRIBUTES = [
  'status',
  'step',
  'outcome',
  'type',
  'regulation',
  'reference',
  'received_at',
  'extended',
] as const;

/** The shard of a request: a stable hash of its id, 0 to OPEN_INDEX_SHARDS - 1. */
export function openShardOf(requestId: string): number {
  return createHash('sha256').update(requestId, 'utf8').digest().readUInt32BE(0) % OPEN_INDEX_SHARDS;
}

/** The open index key of a request with this status: `<status>#<shard>`, or undefined once it is no longer owed. */
export function openShardKey(requestId: string, status: Status): string | undefined {
  return isOwed(status) ? `${status}#${openShardOf(requestId)}` : undefined;
}

/**
 * Name of the sparse index of ended requests not yet minimised, by end time: its partition key
 * `ended_shard` (`ended#<shard>`) is set when a request ends with a status the retention pass
 * minimises, and removed when it is minimised, so that pass reads only the requests due, never the
 * ledger's history.
 */
export const ENDED_INDEX = 'ended-by-time';
/** The ended index's partition key attribute. */
export const ENDED_SHARD_ATTRIBUTE = 'ended_shard';
/** The statuses whose requests the retention pass minimises (rules.ts MINIMISABLE_STATUSES). */
const RETAINED_STATUSES: readonly Status[] = ['completed', 'cancelled', 'rejected', 'denied'];

/** The ended index key of a request with this status: `ended#<shard>`, or undefined while it is not ended. */
export function endedShardKey(requestId: string, status: Status): string | undefined {
  return RETAINED_STATUSES.includes(status) ? `ended#${openShardOf(requestId)}` : undefined;
}

/** True for a status the subject is still owed an answer on (in the open index). */
export function isOwed(status: Status): status is OwedStatus {
  return (OWED_STATUSES as readonly Status[]).includes(status);
}

/** A notice given to the subject: how, when, the team's reference, and when it was recorded. */
export const noticeSchema = z.object({
  channel: z.string(),
  at: z.string(),
  reference: z.string().optional(),
  recorded_at: z.string(),
  /** The template the notice was written from; its record keeps the values filled in. */
  template: z.string().optional(),
});
export type Notice = z.infer<typeof noticeSchema>;

const archiveFacts = z.object({
  key: z.string(),
  bytes: z.number().int().nonnegative(),
  sha256: z.string(),
  version_id: z.string().optional(),
  verified_at: z.string(),
  entries: z.number().int().nonnegative(),
});
export type ArchiveFacts = z.infer<typeof archiveFacts>;

/**
 * A copy into the archive that goes on across ArchiveExport invocations (docs/design.md, "Copies
 * longer than one invocation"): the S3 multipart upload and how far it got. Step facts only: the
 * download link is asked for afresh by every invocation and never kept. Removed once the archive
 * is recorded, or its upload aborted.
 */
const archiveCopyFacts = z.object({
  /** The archive key the upload writes (its export attempt's). */
  key: z.string(),
  upload_id: z.string().min(1),
  part_size: z.number().int().positive(),
  /** Parts 1 to `parts` are in S3; the copy goes on at byte `parts * part_size`. */
  parts: z.number().int().nonnegative(),
  /** The CRC32 of those parts' CRC32s (big-endian, joined): ListParts must give it back. */
  parts_crc32: z.number().int().nonnegative().max(0xffffffff),
  /** The archive's size, as the first download announced it. */
  total_bytes: z.number().int().positive(),
  /** The run (execution number) the invocations below were counted in. */
  run: z.number().int().nonnegative(),
  /** ArchiveExport invocations in that run that worked on this copy: the state machine bounds them. */
  invocations: z.number().int().positive(),
  /** Set once the upload is complete: what remains is to prove the stored object (one read). */
  completed: z.object({ checksum_crc32: z.string(), version_id: z.string().optional() }).optional(),
});
export type ArchiveCopyFacts = z.infer<typeof archiveCopyFacts>;

/** The subject's own package (an access request's), built beside the archive from it. */
const subjectPackageFacts = z.object({
  key: z.string(),
  bytes: z.number().int().nonnegative(),
  sha256: z.string(),
  version_id: z.string().optional(),
  /** The name it downloads as, e.g. your-data-2026-11-23.zip. */
  file_name: z.string(),
  built_at: z.string(),
  /** Whether the conversation details came from the activity call, and why not when they did not. */
  conversation_details: z.enum(['complete', 'partial', 'unavailable']),
  conversation_details_reason: z.string().optional(),
  /** The error name that ended the activity reading early, when one did. */
  activity_failure: z.string().optional(),
  /** Where the notification settings came from: the account (retrieve-user), the export, or nowhere. */
  settings_source: z.enum(['account', 'export', 'unavailable']).optional(),
  /** Why the account could not be read, when it could not (an error name, or SubjectNotFound). */
  account_failure: z.string().optional(),
  /**
   * The settings the package states that were still on their placeholder when it was built, by
   * their stack configuration names (`controllerName`, `accessNotice.gdpr.purposes`...): local mode
   * without a configuration builds such a package, which is no answer to give a subject.
   */
  placeholder_texts: z.array(z.string()).optional(),
  /**
   * A request over several sites: each site's part of the package, in the request's order, and
   * whether that site held data (its package is in the folder sites/<site>/) or none.
   */
  sites: z.array(z.object({ site: z.string(), held_data: z.boolean() })).optional(),
});
export type SubjectPackageFacts = z.infer<typeof subjectPackageFacts>;

/** What a correction did, field by field, without the values. */
const correctionFacts = z.object({
  outcome: z.enum(['corrected', 'corrected_with_changes']),
  /** Fields whose re-read value is not the one requested: the platform altered them (a taken user_name). */
  altered: z.array(z.enum(CORRECTABLE_FIELDS)),
  /** Update attempts: 2 when the re-read found the profile changed by someone else and it was done again. */
  attempts: z.number().int().positive(),
  /**
   * The corrected e-mail went to the platform as unverified (email_verified false): the subject has
   * not proved control of the new address. Never the address itself.
   */
  email_sent_unverified: z.literal(true).optional(),
  at: z.string(),
});
export type CorrectionFacts = z.infer<typeof correctionFacts>;

/** One request in the ledger. Identifiers live here and nowhere in workflow state. */
export const ledgerItemSchema = z.object({
  request_id: z.string(),
  fingerprint: z.string(),
  status: z.enum(STATUSES),
  step: z.enum(STEPS).optional(),
  outcome: z.enum(OUTCOMES).optional(),
  type: z.enum(REQUEST_TYPES).optional(),
  regulation: z.enum(['gdpr', 'ccpa']).optional(),
  primary_key: z.string().optional(),
  /** The sites the request covers, in the configuration's order; none recorded: the default site alone. */
  sites: z.array(siteIdSchema).optional(),
  /** A site's part of a request (sites.ts siteRequestId): the site it runs on. */
  site: siteIdSchema.optional(),
  /** A site's part of a request: the request it is part of. */
  parent_request_id: z.string().optional(),
  /**
   * A request that runs in parts, one per site: where each part stands, by site id
   * (site-outcomes.ts); the request's status and outcome are derived from them.
   */
  site_results: z.record(siteIdSchema, siteResultSchema).optional(),
  /** A correction's field names: kept for as long as the request is. */
  correction_fields: z.array(z.enum(CORRECTABLE_FIELDS)).optional(),
  /**
   * A correction's new values, from intake until CorrectSubject has applied them: removed by that
   * step, and by any change that ends the request (docs/security.md "Correction values").
   */
  correction_values: z.partialRecord(z.enum(CORRECTABLE_FIELDS), z.string()).optional(),
  /** What a correction did, per field: never the values (the audit records hold their HMACs). */
  correction: correctionFacts.optional(),
  received_at: z.string().optional(),
  verification: z.object({ method: z.string(), verified_by: z.string(), verified_at: z.string() }).optional(),
  reference: z.string().optional(),
  submitted_by: z.string().optional(),
  /** How the request was made (§7101 manner): a REQUEST_CHANNELS value, absent on older items. */
  channel: z.string().optional(),
  due_at: z.string().optional(),
  extension_limit_at: z.string().optional(),
  confirm_by: z.string().nullable().optional(),
  /** Set when the request was already past its due date when intake received it. */
  overdue_at_intake: z.boolean().optional(),
  /**
   * What intake warned of in the request it accepted (INTAKE_WARNINGS, e.g.
   * `primary_key_mixed_scripts`); strings, so a code added later still reads.
   */
  intake_warnings: z.array(z.string()).optional(),
  extended: z.boolean().default(false),
  /** The due date before the extension (the extension record's `previous_due_at`): the GDPR denial notice stays due by it. */
  original_due_at: z.string().optional(),
  extension_reason: z.string().optional(),
  svc_user_id: z.string().optional(),
  export_id: z.string().optional(),
  export_attempts: z.number().int().nonnegative().default(0),
  /** Attempts spent before the last operator retry: each retry gets a fresh attempt budget. */
  export_attempts_base: z.number().int().nonnegative().default(0),
  export_status: z.enum(['starting', 'pending', 'completed', 'failed']).optional(),
  /**
   * How the last export start went, apart from the count: `in_flight` while its POST is out,
   * `accepted` with an export id, `refused` when it never reached the platform or was turned away
   * before an export began (not counted), `uncertain` when it may have started one (no answer, a
   * reset, a 5xx), `interrupted` when the process died with the POST in flight (counted: it may
   * have reached the platform).
   */
  export_start: z.enum(EXPORT_START_OUTCOMES).optional(),
  /** Export starts that did not reach the platform or were refused before any export began (not attempts). */
  export_starts_refused: z.number().int().nonnegative().optional(),
  /** Waits for platform capacity (rate, export slot, outage) since the subject was last resolved. */
  platform_waits: z.number().int().nonnegative().optional(),
  /** Of those, the waits for a free export slot: they alone set how long the next one lasts. */
  export_slot_waits: z.number().int().nonnegative().optional(),
  export_polls: z.number().int().nonnegative().default(0),
  export_waited_seconds: z.number().int().nonnegative().default(0),
  export_started_at: z.string().optional(),
  archive: archiveFacts.optional(),
  archive_copy: archiveCopyFacts.optional(),
  /** When an erasure request's archive was deleted, once the erasure was verified (the facts stay). */
  archive_deleted_at: z.string().optional(),
  subject_package: subjectPackageFacts.optional(),
  erasure: z
    .object({
      outcome: z.enum(['deleted', 'already_absent']),
      /** The DELETE's HTTP status, or the retrieve's when an interrupted DELETE is confirmed by it. */
      platform_status: z.number(),
      /** How the outcome is known: the DELETE's own answer, or a not-found after an interrupted DELETE. */
      evidence: z.enum(ERASURE_EVIDENCE).optional(),
      at: z.string(),
    })
    .optional(),
  erasure_verification: z.object({ platform_answer: z.literal('not_found'), at: z.string() }).optional(),
  error: z.object({ code: z.string(), message: z.string() }).optional(),
  /** Failures after the first, from a redriven execution: `error` keeps the one that failed the request. */
  later_errors: z.array(z.object({ code: z.string(), message: z.string(), at: z.string() })).optional(),
  rejection_errors: z.array(z.string()).optional(),
  cancel_reason: z.string().optional(),
  /** The notices given to the subject, one field per kind (the latest; the audit trail keeps each). */
  notice_receipt: noticeSchema.optional(),
  notice_extension: noticeSchema.optional(),
  notice_response: noticeSchema.optional(),
  notice_denial: noticeSchema.optional(),
  /** Why a valid request was denied (status `denied`): the code, and the operator's words if any. */
  denial: z.object({ code: z.enum(DENIAL_CODES), reason: z.string().optional(), at: z.string() }).optional(),
  duplicates: z.number().int().nonnegative().default(0),
  conflicts: z.number().int().nonnegative().default(0),
  executions: z.number().int().nonnegative().default(0),
  /** How often the reconciler started a new execution for a request left open without one. */
  resumes: z.number().int().nonnegative().optional(),
  created_at: z.string(),
  updated_at: z.string(),
  completed_at: z.string().optional(),
  /** When the request failed (its retention starts here); removed when it moves on (a retry). */
  failed_at: z.string().optional(),
  /** The hash of the last record of the request's audit chain, set with every append. */
  audit_head: z.string().optional(),
  /** How many records the request's audit chain has, set with every append. */
  audit_count: z.number().int().nonnegative().optional(),
  /** When the last audit record was written: the daily manifest locks the chains that changed on a day. */
  audit_at: z.string().optional(),
  /** The head of the request's notices chain (`audit/<request_id>.notices/`), kept as `audit_head` is. */
  notices_audit_head: z.string().optional(),
  /** How many records the notices chain has. */
  notices_audit_count: z.number().int().nonnegative().optional(),
  /** When the last notices record was written: the daily manifest locks it as it locks the request's chain. */
  notices_audit_at: z.string().optional(),
  /** The head of the request's packages chain (`audit/<request_id>.packages/`): one record per hand-out. */
  packages_audit_head: z.string().optional(),
  /** How many records the packages chain has: how many times the archive was handed out. */
  packages_audit_count: z.number().int().nonnegative().optional(),
  /** When the last hand-out was recorded. */
  packages_audit_at: z.string().optional(),
  /**
   * The head of the request's effects chain (`audit/<request_id>.effects/`): a platform side effect
   * (an export started, a DELETE) made by an execution after the request had ended meanwhile, when
   * the request's own chain was already closed by its final record.
   */
  effects_audit_head: z.string().optional(),
  /** How many records the effects chain has. */
  effects_audit_count: z.number().int().nonnegative().optional(),
  /** When the last effects record was written. */
  effects_audit_at: z.string().optional(),
  /**
   * When the retention pass replaced the fields that name the subject or a person (MINIMISED_FIELDS)
   * with their keyed hashes; the §7101 facts stay as they were.
   */
  minimised_at: z.string().optional(),
});
export type LedgerItem = z.infer<typeof ledgerItemSchema>;

/** The times a ledger scan can select on: when a request was created, or when a chain last changed. */
export type LedgerTimeField = 'created_at' | 'audit_at' | SideChain['fields']['at'];

/**
 * A side chain of a request (`audit/<request_id>.<kind>/`) as the ledger anchors it: the fields of
 * its item that keep the chain's head, as `audit_head`, `audit_count` and `audit_at` keep the
 * request's own, and when the bucket must hold it. A side chain has no final record.
 */
export interface SideChain {
  readonly kind: SideChainKind;
  readonly fields: {
    readonly head: 'notices_audit_head' | 'packages_audit_head' | 'effects_audit_head';
    readonly count: 'notices_audit_count' | 'packages_audit_count' | 'effects_audit_count';
    readonly at: 'notices_audit_at' | 'packages_audit_at' | 'effects_audit_at';
  };
  /** What its records are, for messages: "the ledger records <what>". */
  readonly what: string;
  /** Whether the ledger says the chain exists, so the bucket must hold it. */
  readonly required: (item: LedgerItem) => boolean;
}

/**
 * The side chains, each anchored as the request's own chain is: the ledger head written with every
 * append, the daily manifest, and `svc-dsr verify`.
 */
export const SIDE_CHAINS: readonly SideChain[] = [
  {
    kind: 'notices',
    fields: { head: 'notices_audit_head', count: 'notices_audit_count', at: 'notices_audit_at' },
    what: 'notices to the subject',
    // A notice is written to the ledger before its record: the notice fields require the chain too.
    required: (item) =>
      item.notices_audit_count !== undefined ||
      item.notice_receipt !== undefined ||
      item.notice_response !== undefined ||
      item.notice_denial !== undefined,
  },
  {
    kind: 'packages',
    fields: { head: 'packages_audit_head', count: 'packages_audit_count', at: 'packages_audit_at' },
    what: 'package hand-outs',
    // The hand-out record comes first and its ledger head after it: the head's count is the hand-outs.
    required: (item) => item.packages_audit_count !== undefined,
  },
  {
    kind: 'effects',
    fields: { head: 'effects_audit_head', count: 'effects_audit_count', at: 'effects_audit_at' },
    what: 'platform side effects made after the request ended',
    required: (item) => item.effects_audit_count !== undefined,
  },
];

/** The ledger fields that keep the head of a chain: the request's own, or one of its side chains. */
export function chainHeadFields(side: SideChainKind | undefined): {
  readonly head: 'audit_head' | SideChain['fields']['head'];
  readonly count: 'audit_count' | SideChain['fields']['count'];
  readonly at: 'audit_at' | SideChain['fields']['at'];
} {
  return (
    SIDE_CHAINS.find((chain) => chain.kind === side)?.fields ?? {
      head: 'audit_head',
      count: 'audit_count',
      at: 'audit_at',
    }
  );
}

/** An open request as the open index holds it: what listing and the deadline sweep need, no identifiers. */
export const openRequestSchema = ledgerItemSchema.pick({
  request_id: true,
  status: true,
  step: true,
  outcome: true,
  type: true,
  regulation: true,
  reference: true,
  received_at: true,
  due_at: true,
  extended: true,
});
export type OpenRequest = z.infer<typeof openRequestSchema>;

/** Fields a step may set; `undefined` leaves a field alone, `null` removes it. */
export type LedgerPatch = { [K in keyof LedgerItem]?: LedgerItem[K] | null };

export type CreateResult =
  | { readonly created: true; readonly item: LedgerItem }
  | { readonly created: false; readonly existing: LedgerItem };
