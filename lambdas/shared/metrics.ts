/** The `service` of every log line, metric and trace (Powertools adds it as a metric dimension). */
export const SERVICE_NAME = 'svc-dsr';

/** The dimensions of every svc-dsr metric, as Powertools Metrics writes them (powertools.ts) and the alarms read them. */
export function metricDimensions(stack: string): Record<string, string> {
  return { Stack: stack, service: SERVICE_NAME };
}

/** Metric names intake publishes; the stack's OverdueAtIntake alarm watches the first. */
export const INTAKE_METRICS = { overdueAtIntake: 'OverdueAtIntake' } as const;
