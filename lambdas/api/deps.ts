// What the API's handler works with: the operator's own dependencies, a logger, and the intake queue that submissions go to.
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type { IntakeTarget } from '#shared/intake-send';
import type { StepLogger } from '#shared/step-deps';
import type { OperatorDeps } from '../operator/records.ts';
import type { CallerThrottle } from './throttle.ts';

export interface ApiDeps extends OperatorDeps {
  readonly logger: StepLogger;
  /** The intake queue: a submission through the API goes where `svc-dsr submit` sends it. */
  readonly intake: IntakeTarget;
  /** Each person's share of the API (throttle.ts). */
  readonly throttle: CallerThrottle;
  /** Whose systems the `/iam` routes answer: this account, and with `organization` that AWS organisation. */
  readonly account: { readonly accountId: string; readonly organization?: string };
  /** What the report and verify routes read beyond the operator's deps. */
  readonly evidence: {
    /** The report's Scan of the ledger and its consistent re-reads. */
    readonly dynamo: DynamoDBDocumentClient;
    readonly ledgerTableName: string;
    /** The controller's time zone, the report's days. */
    readonly timeZone: string;
    /** Days each type's archive is kept: an archive gone after them expired by policy. */
    readonly accessArchiveRetentionDays?: number;
    readonly erasureArchiveRetentionDays?: number;
  };
}
