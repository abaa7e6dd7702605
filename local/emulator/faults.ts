/**
 * The fault profile: injected platform failures per endpoint, the rate limit and the outage window,
 * validated with zod under the names the fault file uses.
 */
import { z } from 'zod';
import { loadJsonFile, type ParseOutcome, parseWith } from './config-file.ts';
import { unknownKeys } from './rules.ts';
import { MAX_STREAM_ENTRY_BYTES } from './zip.ts';

export const FAULT_KINDS = ['500', '502', '503', '429', 'timeout', 'reset'] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

/** Answers the rate_limit and outage settings give, as the call log names them. */
export const LIMIT_ANSWERS = ['outage', 'rate_limit', 'open_exports'] as const;
export type LimitAnswer = (typeof LIMIT_ANSWERS)[number];

export const EXPORT_ID_SHAPES = [
  'id_number',
  'id_string',
  'export_id',
  'exportId',
  'data.id',
  'bare_number',
  'bare_string',
] as const;
export type ExportIdShape = (typeof EXPORT_ID_SHAPES)[number];

const rate = z
  .number()
  .min(0, { error: 'must be between 0 and 1 (a probability)' })
  .max(1, { error: 'must be between 0 and 1 (a probability)' });
const count = z.number().int({ error: 'must be a whole number' }).min(0, { error: 'must not be negative' });

const positive = z.number().positive({ error: 'must be greater than 0' });
const atLeastOne = count.min(1, { error: 'must be at least 1' });

const rateLimitKeys = ['requests_per_second', 'burst', 'max_open_exports'];
/**
 * The platform's capacity: a token bucket for requests (refilled at requests_per_second, holding
 * at most burst) and a cap on exports started and not yet downloaded, failed or expired.
 */
const rateLimitSchema = z.strictObject(
  {
    requests_per_second: positive.optional(),
    burst: atLeastOne.optional(),
    max_open_exports: atLeastOne.optional(),
  },
  { error: unknownKeys(rateLimitKeys) },
);
export type RateLimit = z.infer<typeof rateLimitSchema>;

/** A window, counted from the emulator's start, during which every platform endpoint answers 503. */
const outageSchema = z.strictObject(
  { after_seconds: count, duration_seconds: positive },
  { error: unknownKeys(['after_seconds', 'duration_seconds']) },
);
export type Outage = z.infer<typeof outageSchema>;

const faultShape = {
  seed: z.number().int({ error: 'must be a whole number' }),
  error_rate: rate,
  errors: z
    .array(z.enum(FAULT_KINDS, { error: `must be one of ${FAULT_KINDS.join(', ')}` }))
    .min(1, { error: 'must list at least one error kind' }),
  retry_after_seconds: count,
  export_ready_after_polls: count,
  export_failure_rate: rate,
  truncate_download_rate: rate,
  link_ttl_seconds: count.min(1, { error: 'must be at least 1 second' }),
  timeout_ms: count.max(600_000, { error: 'must be at most 600000 (10 minutes)' }),
  export_id_shape: z.enum(EXPORT_ID_SHAPES, { error: `must be one of ${EXPORT_ID_SHAPES.join(', ')}` }),
  export_padding_bytes: count.max(MAX_STREAM_ENTRY_BYTES, {
    error: `must be at most ${MAX_STREAM_ENTRY_BYTES} (the archive is written without ZIP64)`,
  }),
  paths: z.array(z.string().startsWith('/', { error: 'must be a path prefix starting with /' })),
  export_outcomes: z.array(z.enum(['completed', 'failed'], { error: 'must be "completed" or "failed"' })),
  rate_limit: rateLimitSchema.nullable(),
  outage: outageSchema.nullable(),
};

/** A fault profile with every key present, as the emulator holds it (and saves it in a snapshot). */
export const resolvedFaultsSchema = z.strictObject(faultShape, {
  error: unknownKeys(Object.keys(faultShape)),
});

/** A fault profile as written in a file or sent to PUT /_emulator/faults; every key is optional. */
export const faultProfileSchema = resolvedFaultsSchema.partial();
export type FaultProfile = z.infer<typeof faultProfileSchema>;

/** A profile with every default filled in: what the emulator actually does. */
export type ResolvedFaults = z.infer<typeof resolvedFaultsSchema>;

export const DEFAULT_FAULTS: ResolvedFaults = {
  seed: 1,
  error_rate: 0,
  errors: ['500', '503', '429', 'timeout', 'reset'],
  retry_after_seconds: 1,
  export_ready_after_polls: 2,
  export_failure_rate: 0,
  truncate_download_rate: 0,
  link_ttl_seconds: 5_184_000,
  timeout_ms: 30_000,
  export_id_shape: 'id_number',
  export_padding_bytes: 0,
  paths: ['/'],
  export_outcomes: [],
  rate_limit: null,
  outage: null,
};

export function resolveFaults(profile: FaultProfile | undefined): ResolvedFaults {
  const resolved = { ...DEFAULT_FAULTS };
  for (const [key, value] of Object.entries(profile ?? {})) {
    if (value !== undefined) Reflect.set(resolved, key, value);
  }
  return structuredClone(resolved);
}

/** Validates a fault profile already in memory (the control API's PUT /_emulator/faults). */
export function parseFaultProfile(document: unknown): ParseOutcome<FaultProfile> {
  return parseWith(faultProfileSchema, document);
}

/** Reads and validates a fault profile file; throws EmulatorConfigError naming each bad field. */
export function loadFaultsFile(path: string): Promise<FaultProfile> {
  return loadJsonFile(path, 'Emulator fault profile', faultProfileSchema, 'Fault profile');
}
