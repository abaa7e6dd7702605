import { z } from 'zod';

/** Stack configuration, from cdk.json context (`svc-dsr` key) or stack props; validated at synth. */
export const stackConfigSchema = z.strictObject({
  spotId: z.string().min(1).default('sp_demo'),
  platformBaseUrl: z.url({ protocol: /^https$/ }).default('https://api.example-platform.invalid/api'),
  platformExportUrl: z.url({ protocol: /^https$/ }).default('https://export.example-platform.invalid'),
  platformActivityUrl: z.url({ protocol: /^https$/ }).default('https://activity.example-platform.invalid'),
  downloadAllowedHosts: z.array(z.string().min(1)).min(1).default(['*.example-platform.invalid']),
  /** Name of an existing Secrets Manager secret; a new empty one is created when omitted. */
  platformSecretName: z.string().min(1).optional(),
  pollInitialSeconds: z.number().int().positive().default(30),
  pollMaxSeconds: z.number().int().positive().default(1800),
  pollBudgetSeconds: z
    .number()
    .int()
    .positive()
    .default(72 * 3600),
  exportMaxAttempts: z.number().int().min(1).max(10).default(3),
  accessArchiveRetentionDays: z.number().int().positive().default(90),
  erasureArchiveRetentionDays: z.number().int().positive().default(30),
  auditRetentionMonths: z.number().int().min(24).default(24),
  alarmEmail: z.email().optional(),
});
export type StackConfig = z.infer<typeof stackConfigSchema>;

/** Validates the raw configuration; the error names each key, what it received and the fix. */
export function parseStackConfig(raw: unknown): StackConfig {
  const parsed = stackConfigSchema.safeParse(raw ?? {});
  if (parsed.success) return parsed.data;
  const problems = parsed.error.issues.map((issue) => {
    const key = issue.path.join('.') || '(config)';
    const received =
      raw !== null && typeof raw === 'object' && issue.path.length > 0
        ? JSON.stringify(valueAt(raw, issue.path))
        : 'n/a';
    return `svc-dsr config "${key}": ${issue.message} (received ${received}); set it in cdk.json under context."svc-dsr".${key}`;
  });
  throw new Error(problems.join('\n'));
}

function valueAt(value: unknown, path: readonly PropertyKey[]): unknown {
  let current: unknown = value;
  for (const key of path) {
    if (current === null || typeof current !== 'object') return undefined;
    current = Reflect.get(current, key);
  }
  return current;
}
