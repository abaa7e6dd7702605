/**
 * Grants that no call in the IAM proof's scenarios uses, each kept on purpose, with the reason. The
 * proof fails on any other unused grant: a grant nothing uses is a finding.
 */
const STEPS = [
  'ResolveSubject',
  'StartExport',
  'CheckExport',
  'ArchiveExport',
  'BuildPackage',
  'EraseSubject',
  'VerifyErasure',
  'CorrectSubject',
  'RecordOutcome',
  'RecordFailure',
];

/** One acknowledged grant: a role's action, on the resources `resource` matches (all when absent). */
export interface Acknowledgement {
  readonly role: string;
  readonly action: string;
  readonly resource?: RegExp;
  readonly reason: string;
}

/** Whether `ack` covers an unused grant. */
export function acknowledges(
  ack: Acknowledgement,
  grant: { role: string; action: string; resource: string },
): boolean {
  return (
    ack.role === grant.role && ack.action === grant.action && (ack.resource?.test(grant.resource) ?? true)
  );
}

export const ACKNOWLEDGED_UNUSED_GRANTS: readonly Acknowledgement[] = [
  {
    role: 'StatusEvents',
    action: 'kms:DescribeKey',
    resource: /:key\//,
    reason:
      "CDK's stream-read grant for the DynamoDB event source gives kms:DescribeKey with kms:Decrypt on the table's key; reading stream records uses only the Decrypt",
  },
  ...STEPS.map((role) => ({
    role,
    action: 'secretsmanager:GetSecretValue',
    resource: /:secret:.*AuditKeySecret/,
    reason:
      'In Lambda every function reads the audit HMAC key for its own audit records; local mode runs every function with one audit trail, which reads the key once',
  })),
  {
    role: 'DeadlineSweep',
    action: 'secretsmanager:GetSecretValue',
    resource: /:secret:.*AuditKeySecret/,
    reason:
      'In Lambda the retention pass reads the audit HMAC key (the key of the ledger hashes) when a request is due; local mode sweeps at start, when no request of a fresh data dir is due, and its scenario hands the pass the local key',
  },
  ...[...STEPS, 'Intake', 'Reconciler'].flatMap((role) =>
    ['s3:GetObject', 's3:ListBucket'].map((action) => ({
      role,
      action,
      resource: /auditbucket/,
      reason:
        "In Lambda a function's audit trail lists and reads the last record of a chain another function wrote; local mode runs every function with one trail that already knows each chain's end",
    })),
  ),
  // The export-slot hand-over (shared/export-waiters.ts): the workflow tests run it on the local
  // stand-ins (local/test/workflow/load-control.test.ts); the proof's scenario has no request waiting for
  // a slot when one is given back.
  ...['CheckExport', 'ArchiveExport', 'RecordOutcome', 'RecordFailure', 'Reconciler'].flatMap((role) => [
    {
      role,
      action: 'states:SendTaskSuccess',
      reason:
        'used only when requests wait for an export slot as one is given back: the waiter taken is woken',
    },
    {
      role,
      action: 'dynamodb:DeleteItem',
      resource: /PlatformGate/,
      reason:
        'used only when requests wait for an export slot as one is given back: the item of a waiter answered, or abandoned long ago, is deleted',
    },
  ]),
  ...['RecordOutcome', 'RecordFailure'].flatMap((role) => [
    {
      role,
      action: 'dynamodb:Query',
      resource: /PlatformGate.*\/index\/waiters$/,
      reason:
        "used only when the request still holds an export slot at its end (ArchiveExport or CheckExport gives it back first on the way to an outcome): the freed slot's waiter is looked for",
    },
    {
      role,
      action: 'dynamodb:UpdateItem',
      resource: /PlatformGate/,
      reason:
        'used only when the request still holds an export slot at its end: the slot is given back or handed to a waiter; a read finds none held otherwise',
    },
  ]),
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
    role: 'ArchiveExport',
    action: 's3:AbortMultipartUpload',
    reason: 'aborts the multipart upload of a download that fails midway',
  },
  {
    role: 'ArchiveExport',
    action: 's3:ListMultipartUploadParts',
    reason:
      "lists the parts of an upload carried on from an earlier invocation; the proof's scenarios copy in one invocation",
  },
  {
    role: 'ArchiveExport',
    action: 's3:DeleteObject',
    reason: 'deletes a copy that fails verification, so it is never mistaken for the archive',
  },
  {
    role: 'ArchiveExport',
    action: 's3:ListBucket',
    resource: /archivebucket/,
    reason:
      'without it a missing object answers 403, and verification could not tell a vanished copy from a denied read',
  },
  {
    role: 'ArchiveExport',
    action: 's3:GetObjectVersion',
    resource: /archivebucket.*\/exports\/\*$/,
    reason:
      'proves the copy with a HEAD of the version its upload created; the local stand-ins keep no versions, so the scenarios make that HEAD with s3:GetObject',
  },
  ...['s3:DeleteObjectVersion', 's3:ListBucketVersions'].map((action) => ({
    role: 'ArchiveExport',
    action,
    reason: 'finds and removes every version it wrote when it finds the request cancelled while it copied',
  })),
  {
    role: 'BuildPackage',
    action: 's3:AbortMultipartUpload',
    reason: 'aborts the multipart upload of a package whose build fails midway',
  },
  {
    role: 'BuildPackage',
    action: 's3:GetObjectVersion',
    reason:
      "reads the archive version the ledger recorded; the proof's local S3 keeps no versions, so its reads name none",
  },
  {
    role: 'BuildPackage',
    action: 's3:ListBucket',
    resource: /archivebucket/,
    reason:
      'without it a missing archive answers 403, and the step could not tell a vanished archive from a denied read',
  },
  ...['s3:DeleteObject', 's3:DeleteObjectVersion', 's3:ListBucketVersions'].map((action) => ({
    role: 'BuildPackage',
    action,
    reason:
      'finds and removes every version of the package it built when it finds the request cancelled meanwhile',
  })),
  {
    role: 'Operator',
    action: 's3:GetObjectVersion',
    resource: /archivebucket.*\/exports\/\*$/,
    reason:
      "hands out and checks the version the ledger recorded (a HEAD and a presigned GET of it); the proof's local S3 keeps no versions, so its reads name none",
  },
  {
    role: 'Api',
    action: 's3:DeleteObjectVersion',
    resource: /archivebucket.*\/exports\/\*$/,
    reason:
      "a cancel or deny through the API removes every version of the request's archive when it has one, on the operator's own code path (the Operator function's use of it is observed)",
  },
  {
    role: 'Api',
    action: 's3:GetObject',
    resource: /archivebucket.*\/exports\/\*$/,
    reason:
      "a hand-out's link is a GET this role signs and the recipient's browser makes, with no SDK call of the function's own for the proof to record",
  },
  {
    role: 'Api',
    action: 'states:StartExecution',
    reason:
      "a retry through the API starts the request's next execution, on the operator's own code path; the proof observes that call from the Operator function (svc-dsr retry)",
  },
  {
    role: 'Api',
    action: 'states:DescribeExecution',
    reason:
      "a retry through the API reads the execution before it, on the operator's own code path; the proof observes that call from the Operator function (svc-dsr retry)",
  },
  {
    role: 'Operator',
    action: 's3:DeleteObjectVersion',
    resource: /archivebucket.*\/exports\/\*$/,
    reason: "cancel and deny remove every version of the request's archive when the request already has one",
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
  // The gate reads its shared item only when a call finds no room (the bucket booked through the
  // sleep, the circuit open): the proof's platform has no limit and stays up, so its calls find
  // room at once. test/unit/lambdas/shared/platform-gate.test.ts reads it on DynamoDB.
  ...[
    'ResolveSubject',
    'StartExport',
    'CheckExport',
    'ArchiveExport',
    'BuildPackage',
    'EraseSubject',
    'VerifyErasure',
    'CorrectSubject',
  ].map((role) => ({
    role,
    action: 'dynamodb:GetItem',
    resource: /:table\/[^/]*PlatformGate[^/]*$/,
    reason:
      "the platform gate reads its state only when a call finds no capacity, which the proof's unlimited platform never causes",
  })),
];
