/**
 * Grants that no call in the IAM proof's scenarios uses, each kept on purpose, with the reason. The
 * proof fails on any other unused grant: a grant nothing uses is a finding.
 */
const STEPS = [
  'ResolveSubject',
  'StartExport',
  'CheckExport',
  'ArchiveExport',
  'EraseSubject',
  'VerifyErasure',
  'RecordOutcome',
  'RecordFailure',
];
const SECRET_READERS = [...STEPS, 'Intake'];
/** Steps whose audit trail, in Lambda, finds the end of a chain another function wrote. */
const CHAIN_READERS = [
  'ResolveSubject',
  'EraseSubject',
  'VerifyErasure',
  'RecordOutcome',
  'RecordFailure',
  'ArchiveExport',
  'StartExport',
  'CheckExport',
];

export const ACKNOWLEDGED_UNUSED_GRANTS: readonly { role: string; action: string; reason: string }[] = [
  ...SECRET_READERS.map((role) => ({
    role,
    action: 'secretsmanager:GetSecretValue',
    reason:
      'In Lambda the platform secret is read through Powertools Parameters; local mode hands the functions the secret it keeps in the data dir, so the call is not observed there',
  })),
  ...CHAIN_READERS.flatMap((role) =>
    ['s3:GetObject', 's3:ListBucket'].map((action) => ({
      role,
      action,
      reason:
        "In Lambda each function's audit trail lists and reads the last record of a chain it did not write; local mode runs every function with one trail that already knows each chain's end",
    })),
  ),
  {
    role: 'CheckExport',
    action: 'dynamodb:GetItem',
    reason:
      'read only when its conditional poll count does not hold (a re-run, a cancel, another export under way)',
  },
  {
    role: 'RecordOutcome',
    action: 'dynamodb:GetItem',
    reason: 'read only when its conditional completion does not hold (a re-run, a cancel, missing evidence)',
  },
  {
    role: 'Intake',
    action: 'dynamodb:GetItem',
    reason: 'read when a request id is already in the ledger, to tell a duplicate from a conflict',
  },
  {
    role: 'Intake',
    action: 's3:GetObject',
    reason: 'read when a redelivered message completes an intake cut short after the ledger write',
  },
  {
    role: 'ArchiveExport',
    action: 's3:AbortMultipartUpload',
    reason: 'aborts the multipart upload of a download that fails midway',
  },
  {
    role: 'ArchiveExport',
    action: 's3:DeleteObject',
    reason: 'deletes a copy that fails verification, so it is never mistaken for the archive',
  },
  {
    role: 'ArchiveExport',
    action: 's3:ListBucket',
    reason:
      'without it a missing object answers 403, and verification could not tell a vanished copy from a denied read',
  },
  {
    role: 'Intake',
    action: 'sqs:ChangeMessageVisibility',
    reason: "granted by CDK's SQS event source with the rest of the consume permissions",
  },
  {
    role: 'Intake',
    action: 'sqs:GetQueueUrl',
    reason: "granted by CDK's SQS event source with the rest of the consume permissions",
  },
];
