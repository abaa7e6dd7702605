// Every workflow step by name, with the platform tokens, gate use and platform work each one has.
import { archiveExportStep } from './archive-export/archive-export.ts';
import { buildPackageStep } from './build-package/build-package.ts';
import { checkExportStep } from './check-export/check-export.ts';
import { correctSubjectStep } from './correct-subject/correct-subject.ts';
import { eraseSubjectStep } from './erase-subject/erase-subject.ts';
import { recordFailureStep } from './record-failure/record-failure.ts';
import { recordOutcomeStep } from './record-outcome/record-outcome.ts';
import { resolveSubjectStep } from './resolve-subject/resolve-subject.ts';
import type { PlatformToken } from './shared/platform-schemas.ts';
import type { AnyStep } from './shared/step-handler.ts';
import { startExportStep } from './start-export/start-export.ts';
import { verifyErasureStep } from './verify-erasure/verify-erasure.ts';

/** Every workflow step by name; the state machine and the local runtime both read this list. */
export const STEPS = {
  ResolveSubject: resolveSubjectStep,
  StartExport: startExportStep,
  CheckExport: checkExportStep,
  ArchiveExport: archiveExportStep,
  BuildPackage: buildPackageStep,
  EraseSubject: eraseSubjectStep,
  VerifyErasure: verifyErasureStep,
  CorrectSubject: correctSubjectStep,
  RecordOutcome: recordOutcomeStep,
  RecordFailure: recordFailureStep,
} as const satisfies Record<string, AnyStep>;
export type StepName = keyof typeof STEPS;

/** The directory under lambdas/ of each step's handler, for bundling. */
export const STEP_DIRECTORIES: Readonly<Record<StepName, string>> = {
  ResolveSubject: 'resolve-subject',
  StartExport: 'start-export',
  CheckExport: 'check-export',
  ArchiveExport: 'archive-export',
  BuildPackage: 'build-package',
  EraseSubject: 'erase-subject',
  VerifyErasure: 'verify-erasure',
  CorrectSubject: 'correct-subject',
  RecordOutcome: 'record-outcome',
  RecordFailure: 'record-failure',
};

/**
 * The platform tokens each step's calls need; a step is given these and no other. The export steps
 * also retrieve the user (SSO token) when the platform answers not-found, to tell a subject erased
 * meanwhile from a lost export.
 */
export const STEP_TOKENS: Readonly<Record<StepName, readonly PlatformToken[]>> = {
  ResolveSubject: ['ssoAccessToken'],
  StartExport: ['exportToken', 'ssoAccessToken'],
  CheckExport: ['exportToken', 'ssoAccessToken'],
  ArchiveExport: ['exportToken', 'ssoAccessToken'],
  /** The activity call with the export token (endpoint 8); the account's settings with the SSO token (endpoint 3). */
  BuildPackage: ['exportToken', 'ssoAccessToken'],
  EraseSubject: ['ssoAccessToken'],
  VerifyErasure: ['ssoAccessToken'],
  /** retrieve-user and update-user (endpoints 3 and 4). */
  CorrectSubject: ['ssoAccessToken'],
  RecordOutcome: [],
  RecordFailure: [],
};

/**
 * The platform token of the reconciler: it polls and downloads (to nowhere) the exports that ended
 * requests left open, so the platform stops counting them (shared/open-exports.ts).
 */
export const RECONCILER_TOKENS: readonly PlatformToken[] = ['exportToken'];

/**
 * What each step does with the platform gate (shared/platform-gate.ts): `admits` its platform
 * calls through the rate limit and the circuit; `slots` takes or gives back export slots; `wakes`
 * wakes a request waiting for a slot when it gives one back (shared/export-waiters.ts).
 */
export const STEP_GATE: Readonly<
  Record<StepName, { readonly admits: boolean; readonly slots: boolean; readonly wakes: boolean }>
> = {
  ResolveSubject: { admits: true, slots: false, wakes: false },
  StartExport: { admits: true, slots: true, wakes: false },
  CheckExport: { admits: true, slots: true, wakes: true },
  ArchiveExport: { admits: true, slots: true, wakes: true },
  BuildPackage: { admits: true, slots: false, wakes: false },
  EraseSubject: { admits: true, slots: false, wakes: false },
  VerifyErasure: { admits: true, slots: false, wakes: false },
  CorrectSubject: { admits: true, slots: false, wakes: false },
  RecordOutcome: { admits: false, slots: true, wakes: true },
  RecordFailure: { admits: false, slots: true, wakes: true },
};

/**
 * The most platform calls one attempt of each step makes (each admitted through the gate, each
 * repeated once when the platform refuses a token that has since been rotated), and what else
 * takes a step's time: `reads` the activity pages (BuildPackage, for ACTIVITY_READ_BUDGET_SECONDS),
 * `transfers` the export's download (ArchiveExport, its length grows with the archive). The step
 * Lambdas' timeouts are computed from these (lib/step-timeouts.ts).
 */
export const STEP_PLATFORM_WORK: Readonly<
  Record<StepName, { readonly calls: number; readonly reads?: true; readonly transfers?: true }>
> = {
  ResolveSubject: { calls: 1 },
  // The POST, and retrieve-user when the platform answers not-found (step-guards.ts).
  StartExport: { calls: 2 },
  CheckExport: { calls: 2 },
  // The status for a fresh link (retrieve-user on not-found), then the download.
  ArchiveExport: { calls: 2, transfers: true },
  // retrieve-user for the account's settings, then activity pages (each with its own retries).
  BuildPackage: { calls: 1, reads: true },
  // retrieve-user on a resumed erasure, then the DELETE.
  EraseSubject: { calls: 2 },
  VerifyErasure: { calls: 1 },
  // Read, update, re-read; once more when the re-read finds the profile changed by someone else.
  CorrectSubject: { calls: 6 },
  RecordOutcome: { calls: 0 },
  RecordFailure: { calls: 0 },
};
