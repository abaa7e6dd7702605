/**
 * Powertools for every function, built here once: the Logger (JSON lines), Metrics (Embedded
 * Metric Format, which CloudWatch Logs turns into metrics with no SDK call and no IAM grant) and
 * the Tracer (X-Ray subsegments for every AWS SDK call and every platform call).
 *
 * Tracing never records a URL: the Tracer's automatic capture of HTTP(S) and fetch is off, because
 * a platform URL can carry a subject's primary key and a download link is a credential. Platform
 * calls are traced by hand, named by operation and annotated with the status only. Outside Lambda
 * (local mode, the CLI, tests) no Tracer is loaded and every call here runs untraced.
 */
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import type { Tracer } from '@aws-lambda-powertools/tracer';
import { SERVICE_NAME } from './metrics.ts';
import type { StepLogger } from './step-deps.ts';

/**
 * The function's tracer, in Lambda only. Loading the X-Ray SDK installs an async hook that follows
 * every promise (its context store), whether or not anything is traced: outside Lambda, where the
 * Tracer would disable itself anyway, that cost a tenth of local mode's CPU for nothing.
 */
export const tracer: Tracer | undefined =
  process.env.AWS_EXECUTION_ENV === undefined
    ? undefined
    : new (await import('@aws-lambda-powertools/tracer')).Tracer({
        serviceName: SERVICE_NAME,
        captureHTTPsRequests: false,
      });

let logger: Logger | undefined;

/** The function's logger: one Powertools Logger per process, as a StepLogger. */
export function functionLogger(): StepLogger {
  logger ??= new Logger({ serviceName: SERVICE_NAME });
  return powertoolsLogger(logger);
}

/** Adapts a Powertools Logger to the StepLogger interface; `child` is the Logger's own createChild. */
export function powertoolsLogger(logger: Logger): StepLogger {
  const log =
    (level: 'info' | 'warn' | 'error' | 'debug') =>
    (message: string, attributes?: Record<string, unknown>) => {
      if (attributes === undefined) logger[level](message);
      else logger[level](message, attributes);
    };
  return {
    info: log('info'),
    warn: log('warn'),
    error: log('error'),
    debug: log('debug'),
    child: (keys) => powertoolsLogger(logger.createChild({ persistentKeys: keys })),
  };
}

/** The function's metrics in `namespace`, under the stack's dimension (and Powertools' `service`). */
export function functionMetrics(namespace: string, stack: string): Metrics {
  return new Metrics({ namespace, serviceName: SERVICE_NAME, defaultDimensions: { Stack: stack } });
}

/** Traces every call of an AWS SDK v3 client (a no-op where tracing is off). Answers the client. */
export function traceClient<T>(client: T): T {
  return tracer === undefined ? client : tracer.captureAWSv3Client(client);
}

/**
 * Runs `work` in a subsegment named `name` under the function's segment, when tracing is on; the
 * subsegment records the error's name (never its message) when `work` throws.
 */
export async function traced<T>(
  name: string,
  work: (annotate: (key: string, value: string | number | boolean) => void) => Promise<T>,
): Promise<T> {
  const parent = tracer?.isTracingEnabled() ? tracer.getSegment() : undefined;
  if (tracer === undefined || parent === undefined) return await work(() => {});
  const subsegment = parent.addNewSubsegment(name);
  tracer.setSegment(subsegment);
  try {
    return await work((key, value) => subsegment.addAnnotation(key, value));
  } catch (error) {
    subsegment.addAnnotation('error', error instanceof Error ? error.name : 'unknown');
    subsegment.addErrorFlag();
    throw error;
  } finally {
    subsegment.close();
    tracer.setSegment(parent);
  }
}
