/**
 * The stack's outputs, one schema for the three parts that meet at them: the stack writes them
 * (`cdk deploy --outputs-file`), the CLI's AWS target reads them, and local mode writes the same
 * names for its stand-ins. Plain zod, no CDK, so the CLI loads it without the construct library.
 */
import { z } from 'zod';

const name = z.string().min(1);
/** A count of days, written by CloudFormation as a string. */
const days = z.coerce.number().int().positive();

/** Every output the stack writes, by its CloudFormation output name. */
export const stackOutputsSchema = z.object({
  IntakeQueueUrl: name,
  IntakeDeadLetterQueueUrl: name,
  QuarantineQueueUrl: name,
  LedgerTableName: name,
  ArchiveBucketName: name,
  AuditBucketName: name,
  StateMachineArn: name,
  SsoTokenSecretArn: name,
  ExportTokenSecretArn: name,
  AuditKeySecretArn: name,
  DataKeyArn: name,
  AlarmTopicArn: name,
  Region: name,
  /** The controller's IANA time zone (stack config `timeZone`); report date ranges are cut in it. */
  TimeZone: name,
  /**
   * Days the archive bucket keeps each type's archives (stack config `accessArchiveRetentionDays`,
   * `erasureArchiveRetentionDays`): `verify` reads an archive gone after its retention as expired
   * by policy. Without them, every archive gone from the bucket is a finding.
   */
  AccessArchiveRetentionDays: days,
  ErasureArchiveRetentionDays: days,
  EventBusArn: name,
  /** The operator function's URL (AWS_IAM auth): every change an operator makes goes through it. */
  OperatorUrl: z.url(),
  /** The API's URL (docs/console-api.md): people with the user pool's tokens, systems on its /iam routes. */
  ApiUrl: z.url(),
  /** The user pool people sign in to the API with, and the console's app client of it. */
  UserPoolId: name,
  UserPoolClientId: name,
});

/** An output's name. */
export type StackOutputName = keyof z.input<typeof stackOutputsSchema>;

/**
 * The outputs the CLI needs: the names of what it reads and writes, the rest optional, so a file
 * from an older stack (or local mode, which has no alarms or keys) still serves.
 */
export const stackNamesSchema = stackOutputsSchema
  .pick({
    IntakeQueueUrl: true,
    QuarantineQueueUrl: true,
    LedgerTableName: true,
    ArchiveBucketName: true,
    AuditBucketName: true,
    StateMachineArn: true,
  })
  .extend(
    stackOutputsSchema
      .pick({
        TimeZone: true,
        AccessArchiveRetentionDays: true,
        ErasureArchiveRetentionDays: true,
        Region: true,
        OperatorUrl: true,
        ApiUrl: true,
      })
      .partial().shape,
  );
export type StackNames = z.infer<typeof stackNamesSchema>;
