// The workflow's state as zod schemas: execution input, each step's input and output; no identifiers.
import { z } from 'zod';
import { REQUEST_TYPES } from './request.ts';
import { runRequestIdSchema } from './sites.ts';

/**
 * Workflow state: what the execution input and every step's output may carry. Only request facts
 * and step facts: no primary_key, svc_user_id, names, tokens or links (docs/design.md, "The parts").
 */
export const executionInputSchema = z.strictObject({
  request_id: runRequestIdSchema,
  type: z.enum(REQUEST_TYPES),
  regulation: z.enum(['gdpr', 'ccpa']),
});
export type ExecutionInput = z.infer<typeof executionInputSchema>;

/**
 * Every step is invoked with the request id, and the name of the execution that runs it (whose run
 * number says whether it is still the request's current run); the ledger holds the rest.
 */
export const stepInputSchema = z.looseObject({
  request_id: runRequestIdSchema,
  execution: z.string().min(1).max(80).optional(),
});
export type StepInput = z.infer<typeof stepInputSchema>;

export const resolveOutputSchema = z.strictObject({
  found: z.boolean(),
  /** The ledger already shows an outcome: the execution ends without touching the platform. */
  already_completed: z.boolean(),
});
export type ResolveOutput = z.infer<typeof resolveOutputSchema>;

export const exportStateSchema = z.strictObject({
  export_id: z.string(),
  attempt: z.number().int().positive(),
  status: z.enum(['pending', 'completed', 'failed']),
  polls: z.number().int().nonnegative(),
  wait_seconds: z.number().int().nonnegative(),
  waited_seconds: z.number().int().nonnegative(),
});
export type ExportState = z.infer<typeof exportStateSchema>;

export const archiveOutputSchema = z.strictObject({
  key: z.string(),
  bytes: z.number().int().nonnegative(),
  sha256: z.string(),
  entries: z.number().int().nonnegative(),
});
export type ArchiveOutput = z.infer<typeof archiveOutputSchema>;

/**
 * ArchiveExport's answer: the archive, or a continuation when the copy goes on in another
 * invocation (the state machine runs the step again; the checkpoint itself stays in the ledger).
 */
export const archiveStepOutputSchema = z.union([
  archiveOutputSchema,
  z.strictObject({
    continuation: z.strictObject({
      invocation: z.number().int().positive(),
      bytes: z.number().int().nonnegative(),
      total_bytes: z.number().int().nonnegative(),
    }),
  }),
]);

export const packageOutputSchema = z.strictObject({
  key: z.string(),
  bytes: z.number().int().nonnegative(),
  sha256: z.string(),
  conversation_details: z.enum(['complete', 'partial', 'unavailable']),
});
export type PackageOutput = z.infer<typeof packageOutputSchema>;

export const eraseOutputSchema = z.strictObject({ outcome: z.enum(['deleted', 'already_absent']) });
export type EraseOutput = z.infer<typeof eraseOutputSchema>;

export const verifyErasureOutputSchema = z.strictObject({ verified: z.literal(true) });

/** What CorrectSubject answers: the outcome only; the field names and their evidence stay in the ledger. */
export const correctOutputSchema = z.strictObject({
  outcome: z.enum(['corrected', 'corrected_with_changes']),
});
export type CorrectOutput = z.infer<typeof correctOutputSchema>;

const WORKFLOW_OUTCOMES = ['exported', 'erased', 'corrected', 'corrected_with_changes', 'no_data'] as const;
export const recordOutcomeInputSchema = z.looseObject({
  request_id: runRequestIdSchema,
  outcome: z.enum(WORKFLOW_OUTCOMES),
});
export const recordOutcomeOutputSchema = z.strictObject({
  status: z.literal('completed'),
  outcome: z.enum(WORKFLOW_OUTCOMES),
});

/** What a Catch puts at `$.error`: the ASL error name and the Lambda's cause string. */
export const recordFailureInputSchema = z.looseObject({
  request_id: runRequestIdSchema,
  execution: z.string().min(1).max(80).optional(),
  error: z.looseObject({ Error: z.string(), Cause: z.string().optional() }),
});
export const recordFailureOutputSchema = z.strictObject({
  /** `superseded`: the execution was not the request's current run, so it recorded nothing. */
  status: z.enum(['failed', 'cancelled', 'completed', 'superseded']),
  code: z.string(),
});
