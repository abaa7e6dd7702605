/** Where a metric goes: its CloudWatch namespace and dimensions. */
export interface MetricTarget {
  readonly namespace: string;
  readonly dimensions: Readonly<Record<string, string>>;
}

/**
 * One CloudWatch Embedded Metric Format line carrying `values` (counts) at `at`: CloudWatch Logs
 * turns it into metrics, with no SDK call and no IAM permission.
 */
export function embeddedMetricsLine(
  target: MetricTarget,
  values: Readonly<Record<string, number>>,
  at: Date,
): string {
  return JSON.stringify({
    _aws: {
      Timestamp: at.getTime(),
      CloudWatchMetrics: [
        {
          Namespace: target.namespace,
          Dimensions: [Object.keys(target.dimensions)],
          Metrics: Object.keys(values).map((name) => ({ Name: name, Unit: 'Count' })),
        },
      ],
    },
    ...target.dimensions,
    ...values,
  });
}

/** Metric names intake publishes; the stack's OverdueAtIntake alarm watches the first. */
export const INTAKE_METRICS = { overdueAtIntake: 'OverdueAtIntake' } as const;
