// Each step Lambda's timeout, computed from the platform calls and transfers it makes, within Lambda's limit.
import { Duration } from 'aws-cdk-lib';
import { ACTIVITY_READ_BUDGET_SECONDS, ACTIVITY_RETRY } from '../lambdas/build-package/activity.ts';
import { DEFAULTS } from '../lambdas/shared/defaults.ts';
import { STEP_PLATFORM_WORK, type StepName } from '../lambdas/steps.ts';

/** Lambda's longest timeout. */
export const LAMBDA_MAX_TIMEOUT_SECONDS = 900;

/**
 * What a step spends besides its platform calls: the ledger, the audit records, the secrets, the
 * gate's table, and a cold start. The AWS SDK retries these itself; a step that needs longer for
 * them is failing for another reason.
 */
export const STEP_TIMEOUT_MARGIN_SECONDS = 30;

/** A step that moves data whose size grows with the subject keeps at least this for it. */
export const MIN_TRANSFER_SECONDS = 300;

/** The shortest timeout of any step: the ones without platform calls still wake waiters. */
const MIN_STEP_TIMEOUT_SECONDS = 60;

/**
 * The step handler's runs of a step (lambdas/shared/step-handler.ts): a run that meets no platform
 * capacity runs once more (the request has ended meanwhile, or has waited its most).
 */
const RUNS_PER_INVOCATION = 2;
/** Attempts per run: a 429 with a Retry-After up to its cap is waited out once, then tried again. */
const ATTEMPTS_PER_RUN = 2;
/** Sends per platform call: a refused token read afresh (rotated meanwhile) is tried once more. */
const SENDS_PER_CALL = 2;

/** The settings the worst chain is computed from; the functions run with these (their env defaults). */
export interface PlatformTiming {
  /** The abort timeout of one platform call. */
  readonly callTimeoutMs: number;
  /** The longest wait for a rate slot inside the function (platform-gate.ts admit). */
  readonly maxSleepSeconds: number;
  /** The longest Retry-After waited out inside the function. */
  readonly retryAfterCapSeconds: number;
}

export const DEFAULT_PLATFORM_TIMING: PlatformTiming = {
  callTimeoutMs: DEFAULTS.platformTimeoutMs,
  maxSleepSeconds: DEFAULTS.platformMaxSleepSeconds,
  retryAfterCapSeconds: DEFAULTS.retryAfterCapSeconds,
};

/** A step's worst chain, in seconds, and its parts. */
export interface StepChain {
  readonly step: StepName;
  /** One platform call at its worst: every send waits its longest for a slot and times out. */
  readonly callSeconds: number;
  /** The platform calls, retries and waits of one invocation at their worst. */
  readonly chainSeconds: number;
  /** What the timeout must be at least: the chain, the margin, and a transfer's minimum. */
  readonly requiredSeconds: number;
  /** The Lambda timeout the stack gives the step. */
  readonly timeoutSeconds: number;
}

/**
 * The worst chain of one invocation of `step`: RUNS_PER_INVOCATION runs, each of ATTEMPTS_PER_RUN
 * attempts of its platform calls with the Retry-After wait between them; BuildPackage reads
 * activity pages for ACTIVITY_READ_BUDGET_SECONDS plus the last page started, each page tried
 * ACTIVITY_RETRY.attempts times with its backoff (it turns a throttle into a partial context, so
 * its attempt is not repeated). A step whose work grows with the archive gets Lambda's longest
 * timeout, and the chain must leave it MIN_TRANSFER_SECONDS.
 */
export function stepChain(step: StepName, timing: PlatformTiming = DEFAULT_PLATFORM_TIMING): StepChain {
  const work = STEP_PLATFORM_WORK[step];
  const callSeconds = SENDS_PER_CALL * (timing.maxSleepSeconds + timing.callTimeoutMs / 1000);
  const callsSeconds = work.calls * callSeconds;
  let runSeconds: number;
  if (work.reads === true) {
    let backoffs = 0;
    for (let attempt = 1; attempt < ACTIVITY_RETRY.attempts; attempt++) {
      backoffs += Math.max(ACTIVITY_RETRY.backoffMs * 2 ** (attempt - 1), ACTIVITY_RETRY.retryAfterCapMs);
    }
    const lastPageSeconds = ACTIVITY_RETRY.attempts * callSeconds + backoffs / 1000;
    runSeconds = callsSeconds + ACTIVITY_READ_BUDGET_SECONDS + lastPageSeconds;
  } else {
    runSeconds =
      work.calls === 0
        ? 0
        : ATTEMPTS_PER_RUN * callsSeconds + (ATTEMPTS_PER_RUN - 1) * timing.retryAfterCapSeconds;
  }
  const chainSeconds = RUNS_PER_INVOCATION * runSeconds;
  const growsWithSize = work.transfers === true || work.reads === true;
  const requiredSeconds =
    chainSeconds + STEP_TIMEOUT_MARGIN_SECONDS + (growsWithSize ? MIN_TRANSFER_SECONDS : 0);
  const timeoutSeconds = growsWithSize
    ? LAMBDA_MAX_TIMEOUT_SECONDS
    : Math.max(MIN_STEP_TIMEOUT_SECONDS, Math.ceil(requiredSeconds / 10) * 10);
  return { step, callSeconds, chainSeconds, requiredSeconds, timeoutSeconds };
}

/** A step's worst chain is longer than a Lambda may run. */
export class StepTimeoutError extends Error {
  override readonly name = 'StepTimeoutError';
}

/**
 * The Lambda timeout of `step`, from its worst chain; synth refuses a chain Lambda's 15 minutes
 * cannot hold.
 */
export function stepTimeout(step: StepName, timing: PlatformTiming = DEFAULT_PLATFORM_TIMING): Duration {
  const chain = stepChain(step, timing);
  if (chain.requiredSeconds > LAMBDA_MAX_TIMEOUT_SECONDS) {
    throw new StepTimeoutError(
      `svc-dsr: the ${step} step may need ${chain.requiredSeconds} s (its worst chain of platform calls and retries, ${chain.chainSeconds} s, ` +
        `plus ${STEP_TIMEOUT_MARGIN_SECONDS} s of margin${STEP_PLATFORM_WORK[step].transfers || STEP_PLATFORM_WORK[step].reads ? ` and ${MIN_TRANSFER_SECONDS} s for its data` : ''}), ` +
        `more than Lambda's ${LAMBDA_MAX_TIMEOUT_SECONDS} s (received a platform call timeout of ${timing.callTimeoutMs} ms, ` +
        `a slot wait of up to ${timing.maxSleepSeconds} s, a Retry-After cap of ${timing.retryAfterCapSeconds} s). ` +
        'Fix: lower the platform call timeout, the slot wait or the Retry-After cap, or split the step.',
    );
  }
  return Duration.seconds(chain.timeoutSeconds);
}
