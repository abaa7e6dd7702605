/** The `service` of every log line, metric and trace (Powertools adds it as a metric dimension). */
export const SERVICE_NAME = 'svc-dsr';

/** The dimensions of every svc-dsr metric, as Powertools Metrics writes them (powertools.ts) and the alarms read them. */
export function metricDimensions(stack: string): Record<string, string> {
  return { Stack: stack, service: SERVICE_NAME };
}

/** Metric names intake publishes; the stack's OverdueAtIntake alarm watches the first. */
export const INTAKE_METRICS = { overdueAtIntake: 'OverdueAtIntake' } as const;

/**
 * The metric each scheduled pass publishes once per completed run (value 1): its alarm treats
 * missing data as breaching, so a pass that stops running, fails or times out is heard.
 */
export const HEARTBEAT_METRICS = {
  deadlineSweep: 'DeadlineSweepHeartbeat',
  reconciler: 'ReconcilerHeartbeat',
} as const;

/**
 * Metric names StartExport publishes: each start the platform refused for too many open exports
 * (fewer than platformMaxOpenExports); the stack's ExportCapAbovePlatform alarm watches it.
 */
export const EXPORT_METRICS = { platformRefusals: 'PlatformExportRefusals' } as const;

/**
 * The dimension that names a site on the metrics one site's gate has of its own (the reconciler's
 * PlatformDownSeconds and ExportSlotsHeld), beside the stack-wide figures of the same names.
 */
export const SITE_DIMENSION = 'Site';

/** The dimensions of one site's own metrics. */
export function siteMetricDimensions(stack: string, site: string): Record<string, string> {
  return { ...metricDimensions(stack), [SITE_DIMENSION]: site };
}
