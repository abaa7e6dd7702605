/**
 * The local AWS stand-ins checked call by call against an independent implementation of AWS, moto
 * (`moto_server`, a test prerequisite like chromium). For every AWS call the product makes (the
 * inventory is every `...Command` the product imports from `@aws-sdk/*`, the calls the call
 * recorder sees), one case runs the same calls against the stand-in and against moto and compares
 * what matters: the status, the error code, the answer's fields the product reads, and the side
 * effect a second call sees. Where the two differ the case says so, with the AWS documentation's
 * words for who is right; docs/local.md has the table.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  BatchGetItemCommand,
  CreateTableCommand,
  DeleteItemCommand,
  DescribeTableCommand,
  DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
  QueryCommand,
  ScanCommand,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import { CreateEventBusCommand, EventBridgeClient, PutEventsCommand } from '@aws-sdk/client-eventbridge';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetBucketVersioningCommand,
  GetObjectCommand,
  GetObjectLockConfigurationCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  ListObjectVersionsCommand,
  ListPartsCommand,
  PutBucketVersioningCommand,
  PutObjectCommand,
  PutObjectLockConfigurationCommand,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import {
  CreateSecretCommand,
  GetSecretValueCommand,
  SecretsManagerClient,
} from '@aws-sdk/client-secrets-manager';
import {
  CreateStateMachineCommand,
  DescribeExecutionCommand,
  ListExecutionsCommand,
  SendTaskSuccessCommand,
  SFNClient,
  StartExecutionCommand,
  StopExecutionCommand,
} from '@aws-sdk/client-sfn';
import {
  CreateQueueCommand,
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SendMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AwsStandIns, startAwsStandIns } from '#local/aws/aws-standins';
import { type EventsStandIn, startEventsStandIn } from '#local/aws/events-standin';
import { type SecretsStandIn, startSecretsStandIn } from '#local/aws/secrets-standin';
import { type SfnShim, startSfnShim } from '#local/aws/sfn-shim';
import { openExecutions, type Registry } from '#local/runtime/executions';
import { LocalStateMachine } from '#local/runtime/sfn-runner';

const REGION = 'us-east-1';
const CREDENTIALS = { accessKeyId: 'testing', secretAccessKey: 'testing' };
const BUCKET = 'conformance-archive';
const LOCKED_BUCKET = 'conformance-audit';
const TABLE = 'conformance-ledger';
const QUEUE = 'conformance-intake';
const SECRET = 'conformance/audit-hmac-key';
const SECRET_VALUE = 'a-local-secret-of-enough-length-0123456789';
const BUS = 'conformance-bus';
const MACHINE = 'conformance-machine';
/** A machine that waits: both implementations keep its executions RUNNING until stopped. */
const DEFINITION = { StartAt: 'Hold', States: { Hold: { Type: 'Wait', Seconds: 3600, End: true } } };

/** One implementation of AWS, with the clients and resources every case uses. */
interface Target {
  readonly name: 'local' | 'moto';
  readonly s3: S3Client;
  readonly sqs: SQSClient;
  readonly dynamo: DynamoDBClient;
  readonly sfn: SFNClient;
  readonly secrets: SecretsManagerClient;
  readonly events: EventBridgeClient;
  readonly queueUrl: string;
  readonly machineArn: string;
}

/** What a call came to: its status and error code, or the fields of its answer a case picked. */
type Outcome = Record<string, unknown>;

/** Runs a call; a failure is an outcome too (its status and error code), never a thrown error. */
async function outcome<T>(call: Promise<T>, pick: (answer: T) => Outcome = () => ({})): Promise<Outcome> {
  try {
    const answer = await call;
    const status = (answer as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
    return { status, ...pick(answer) };
  } catch (error) {
    const failure = error as { name?: string; $metadata?: { httpStatusCode?: number } };
    return { status: failure.$metadata?.httpStatusCode, code: failure.name };
  }
}

/**
 * A difference left between the stand-in and moto: the fields that differ, what each answers, and
 * which one AWS's documentation backs, in its words.
 */
interface Difference {
  readonly fields: readonly string[];
  readonly why: string;
}

interface Case {
  /** The SDK operation, as the call recorder names it. */
  readonly call: string;
  readonly run: (target: Target) => Promise<Outcome>;
  readonly difference?: Difference;
}

const sha256 = (text: string) => createHash('sha256').update(text, 'utf8').digest('base64');
const md5 = (text: string) => `"${createHash('md5').update(text, 'utf8').digest('hex')}"`;

async function text(answer: { Body?: { transformToString(): Promise<string> } }): Promise<string> {
  return (await answer.Body?.transformToString()) ?? '';
}

const NO_SUCH_UPLOAD =
  'A part for an upload that does not exist (never made, or aborted): the stand-in answers 404 NoSuchUpload, moto 500. AWS (NoSuchUpload): "The specified multipart upload does not exist." moto is wrong.';

const CASES: readonly Case[] = [
  // S3 ----------------------------------------------------------------------------------------
  {
    call: 'CreateBucket',
    run: async ({ s3 }) => ({
      again: await outcome(s3.send(new CreateBucketCommand({ Bucket: BUCKET }))),
    }),
    difference: {
      fields: ['again'],
      why: 'The stand-in answers 409 BucketAlreadyOwnedByYou, moto 200, and moto is right for us-east-1. AWS (BucketAlreadyOwnedByYou): "Amazon S3 returns this error in all Amazon Web Services Regions except in the North Virginia Region. For legacy compatibility, if you re-create an existing bucket that you already own in the North Virginia Region, Amazon S3 returns 200 OK". Only local set-up creates buckets, and it takes both answers as "exists".',
    },
  },
  {
    call: 'PutBucketVersioning',
    run: async ({ s3 }) => ({
      put: await outcome(
        s3.send(
          new PutBucketVersioningCommand({ Bucket: BUCKET, VersioningConfiguration: { Status: 'Enabled' } }),
        ),
      ),
      read: await outcome(s3.send(new GetBucketVersioningCommand({ Bucket: BUCKET })), (a) => ({
        Status: a.Status,
      })),
    }),
  },
  {
    call: 'PutObject',
    run: async ({ s3 }) => {
      const body = '{"record":1}';
      const put = (Key: string) =>
        s3.send(
          new PutObjectCommand({
            Bucket: BUCKET,
            Key,
            Body: body,
            IfNoneMatch: '*',
            ChecksumAlgorithm: 'SHA256',
            ChecksumSHA256: sha256(body),
          }),
        );
      return {
        first: await outcome(put('put/a.json'), (a) => ({ ETag: a.ETag, ChecksumSHA256: a.ChecksumSHA256 })),
        again: await outcome(put('put/a.json')),
        wrongChecksum: await outcome(
          s3.send(
            new PutObjectCommand({
              Bucket: BUCKET,
              Key: 'put/b.json',
              Body: body,
              ChecksumSHA256: sha256('other'),
            }),
          ),
        ),
        stored: await text(await s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: 'put/a.json' }))),
        expected: { ETag: md5(body), ChecksumSHA256: sha256(body) },
        // The bucket is versioned: each write without If-None-Match is a version of its own.
        versions: await (async () => {
          const first = await s3.send(new PutObjectCommand({ Bucket: BUCKET, Key: 'put/v', Body: '1' }));
          const second = await s3.send(new PutObjectCommand({ Bucket: BUCKET, Key: 'put/v', Body: '2' }));
          return {
            both: typeof first.VersionId === 'string' && typeof second.VersionId === 'string',
            distinct: first.VersionId !== second.VersionId,
          };
        })(),
      };
    },
    difference: {
      fields: ['wrongChecksum'],
      why: 'A body whose x-amz-checksum-sha256 does not match: the stand-in refuses it (400 BadDigest), moto stores it (200). AWS (S3 error codes): "BadDigest: The Content-MD5 or checksum value that you specified did not match what the server received." moto is wrong; the product relies on the refusal (audit records and archives are written with their SHA-256).',
    },
  },
  {
    call: 'PutObjectLockConfiguration',
    run: async ({ s3 }) => ({
      put: await outcome(
        s3.send(
          new PutObjectLockConfigurationCommand({
            Bucket: LOCKED_BUCKET,
            ObjectLockConfiguration: {
              ObjectLockEnabled: 'Enabled',
              Rule: { DefaultRetention: { Mode: 'COMPLIANCE', Days: 1 } },
            },
          }),
        ),
      ),
      read: await outcome(s3.send(new GetObjectLockConfigurationCommand({ Bucket: LOCKED_BUCKET })), (a) => ({
        configuration: a.ObjectLockConfiguration,
      })),
      plain: await outcome(s3.send(new GetObjectLockConfigurationCommand({ Bucket: BUCKET }))),
    }),
    difference: {
      fields: ['read'],
      why: 'Reading the configuration back, moto adds "Years": 0 beside "Days": 1. AWS (DefaultRetention): "The default Object Lock retention mode and period ... must specify Mode and Days or Years"; a rule has one of the two. moto is wrong; the stand-in answers what was set.',
    },
  },
  {
    call: 'GetObject',
    run: async ({ s3 }) => {
      await s3.send(
        new PutObjectCommand({
          Bucket: BUCKET,
          Key: 'get/a.txt',
          Body: 'héllo 😀',
          ChecksumAlgorithm: 'SHA256',
        }),
      );
      return {
        whole: await outcome(
          s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: 'get/a.txt', ChecksumMode: 'ENABLED' })),
          (a) => ({ ETag: a.ETag, ContentLength: a.ContentLength, ChecksumSHA256: a.ChecksumSHA256 }),
        ),
        range: await text(
          await s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: 'get/a.txt', Range: 'bytes=0-1' })),
        ),
        missing: await outcome(s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: 'get/none' }))),
        ...(await versionedReads(s3)),
      };
    },
    difference: {
      fields: ['markerById'],
      why: 'A GET naming a delete marker by its version id: the stand-in answers 405 MethodNotAllowed, moto 404 NoSuchVersion. AWS (GetObject, x-amz-delete-marker): "If the specified version in the request is a delete marker, the response returns a 405 Method Not Allowed error and the Last-Modified: timestamp response header." moto is wrong; the product never reads a delete marker by its id.',
    },
  },
  {
    call: 'HeadObject',
    run: async ({ s3 }) => {
      await s3.send(
        new PutObjectCommand({ Bucket: BUCKET, Key: 'head/a', Body: 'abc', ContentType: 'application/json' }),
      );
      return {
        found: await outcome(s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: 'head/a' })), (a) => ({
          ContentLength: a.ContentLength,
          ContentType: a.ContentType,
          ETag: a.ETag,
          lastModifiedIsDate: a.LastModified instanceof Date,
        })),
        missing: await outcome(s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: 'head/none' }))),
        versioned: await (async () => {
          const first = await s3.send(new PutObjectCommand({ Bucket: BUCKET, Key: 'head/v', Body: 'one' }));
          await s3.send(new PutObjectCommand({ Bucket: BUCKET, Key: 'head/v', Body: 'three' }));
          const marker = await s3.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: 'head/v' }));
          return {
            byVersion: await outcome(
              s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: 'head/v', VersionId: first.VersionId })),
              (a) => ({ ContentLength: a.ContentLength, sameVersion: a.VersionId === first.VersionId }),
            ),
            current: await outcome(s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: 'head/v' }))),
            marker: await outcome(
              s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: 'head/v', VersionId: marker.VersionId })),
            ),
          };
        })(),
      };
    },
  },
  {
    call: 'ListObjectsV2',
    run: async ({ s3 }) => {
      for (const key of ['list/a', 'list/b/c', 'list/d']) {
        await s3.send(new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: key }));
      }
      const first = await s3.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: 'list/', MaxKeys: 2 }));
      const rest = await s3.send(
        new ListObjectsV2Command({
          Bucket: BUCKET,
          Prefix: 'list/',
          ContinuationToken: first.NextContinuationToken,
        }),
      );
      const rolled = await s3.send(
        new ListObjectsV2Command({ Bucket: BUCKET, Prefix: 'list/', Delimiter: '/' }),
      );
      return {
        first: {
          keys: first.Contents?.map((item) => item.Key),
          truncated: first.IsTruncated,
          count: first.KeyCount,
        },
        rest: rest.Contents?.map((item) => item.Key),
        rolled: { keys: rolled.Contents?.map((item) => item.Key), prefixes: rolled.CommonPrefixes },
      };
    },
  },
  {
    call: 'ListObjectVersions',
    run: async ({ s3 }) => {
      const put = (Key: string, Body: string) => s3.send(new PutObjectCommand({ Bucket: BUCKET, Key, Body }));
      const written = [
        (await put('versions/a', '1')).VersionId,
        (await put('versions/a', '2')).VersionId,
        (await put('versions/b', '3')).VersionId,
      ];
      const marker = (await s3.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: 'versions/b' })))
        .VersionId;
      const listed = await s3.send(new ListObjectVersionsCommand({ Bucket: BUCKET, Prefix: 'versions/' }));
      const pages: { versions: unknown[]; markers: unknown[]; truncated: boolean | undefined }[] = [];
      let markers: { KeyMarker?: string; VersionIdMarker?: string } = {};
      for (let page = 0; page < 10; page += 1) {
        const answer = await s3.send(
          new ListObjectVersionsCommand({ Bucket: BUCKET, Prefix: 'versions/', MaxKeys: 1, ...markers }),
        );
        pages.push({
          versions: (answer.Versions ?? []).map((v) => [v.Key, v.IsLatest, written.indexOf(v.VersionId)]),
          markers: (answer.DeleteMarkers ?? []).map((m) => [m.Key, m.IsLatest, m.VersionId === marker]),
          truncated: answer.IsTruncated,
        });
        if (answer.IsTruncated !== true) break;
        markers = { KeyMarker: answer.NextKeyMarker, VersionIdMarker: answer.NextVersionIdMarker };
      }
      return {
        versions: listed.Versions?.map((v) => [v.Key, v.IsLatest, written.indexOf(v.VersionId), v.Size]),
        markers: listed.DeleteMarkers?.map((m) => [m.Key, m.IsLatest, m.VersionId === marker]),
        lastModifiedIsDate: listed.Versions?.every((v) => v.LastModified instanceof Date),
        pages,
      };
    },
  },
  {
    call: 'DeleteObject',
    run: async ({ s3 }) => {
      await s3.send(new PutObjectCommand({ Bucket: BUCKET, Key: 'delete/a', Body: 'x' }));
      const versions = await s3.send(new ListObjectVersionsCommand({ Bucket: BUCKET, Prefix: 'delete/a' }));
      const versionId = versions.Versions?.[0]?.VersionId;
      await s3.send(new PutObjectCommand({ Bucket: LOCKED_BUCKET, Key: 'delete/locked', Body: 'x' }));
      const lockedVersions = await s3.send(
        new ListObjectVersionsCommand({ Bucket: LOCKED_BUCKET, Prefix: 'delete/locked' }),
      );
      return {
        deleted: await outcome(
          s3.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: 'delete/a', VersionId: versionId })),
        ),
        after: await outcome(s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: 'delete/a' }))),
        locked: await outcome(
          s3.send(
            new DeleteObjectCommand({
              Bucket: LOCKED_BUCKET,
              Key: 'delete/locked',
              VersionId: lockedVersions.Versions?.[0]?.VersionId,
            }),
          ),
        ),
        lockedAfter: await outcome(
          s3.send(new HeadObjectCommand({ Bucket: LOCKED_BUCKET, Key: 'delete/locked' })),
          (a) => ({
            ObjectLockMode: a.ObjectLockMode,
          }),
        ),
        ...(await deleteMarkers(s3)),
      };
    },
  },
  ...multipartCases(),
  // DynamoDB ----------------------------------------------------------------------------------
  {
    call: 'PutItem',
    run: async ({ dynamo }) => {
      const put = () =>
        dynamo.send(
          new PutItemCommand({
            TableName: TABLE,
            Item: { pk: { S: 'put' }, sk: { S: 'meta' }, status: { S: 'RECEIVED' } },
            ConditionExpression: 'attribute_not_exists(pk)',
          }),
        );
      return { first: await outcome(put()), again: await outcome(put()) };
    },
  },
  {
    call: 'GetItem',
    run: async ({ dynamo }) => {
      await dynamo.send(
        new PutItemCommand({
          TableName: TABLE,
          Item: { pk: { S: 'get' }, sk: { S: 'meta' }, n: { N: '1' } },
        }),
      );
      return {
        found: await outcome(
          dynamo.send(
            new GetItemCommand({
              TableName: TABLE,
              Key: { pk: { S: 'get' }, sk: { S: 'meta' } },
              ConsistentRead: true,
            }),
          ),
          (a) => ({ Item: a.Item }),
        ),
        missing: await outcome(
          dynamo.send(
            new GetItemCommand({ TableName: TABLE, Key: { pk: { S: 'none' }, sk: { S: 'meta' } } }),
          ),
          (a) => ({ Item: a.Item }),
        ),
      };
    },
  },
  {
    call: 'UpdateItem',
    run: async ({ dynamo }) => {
      const update = (expected: string) =>
        dynamo.send(
          new UpdateItemCommand({
            TableName: TABLE,
            Key: { pk: { S: 'update' }, sk: { S: 'meta' } },
            UpdateExpression: 'SET #s = :next ADD version :one',
            ConditionExpression: 'attribute_not_exists(#s) OR #s = :expected',
            ExpressionAttributeNames: { '#s': 'status' },
            ExpressionAttributeValues: {
              ':next': { S: 'RUNNING' },
              ':one': { N: '1' },
              ':expected': { S: expected },
            },
            ReturnValues: 'ALL_NEW',
          }),
        );
      return {
        first: await outcome(update('RECEIVED'), (a) => ({ Attributes: a.Attributes })),
        stale: await outcome(update('RECEIVED')),
        current: await outcome(update('RUNNING'), (a) => ({ Attributes: a.Attributes })),
      };
    },
  },
  {
    call: 'DeleteItem',
    run: async ({ dynamo }) => {
      const key = { pk: { S: 'delete' }, sk: { S: 'meta' } };
      await dynamo.send(new PutItemCommand({ TableName: TABLE, Item: { ...key, a: { S: 'x' } } }));
      return {
        deleted: await outcome(
          dynamo.send(new DeleteItemCommand({ TableName: TABLE, Key: key, ReturnValues: 'ALL_OLD' })),
          (a) => ({
            Attributes: a.Attributes,
          }),
        ),
        after: await outcome(dynamo.send(new GetItemCommand({ TableName: TABLE, Key: key })), (a) => ({
          Item: a.Item,
        })),
      };
    },
  },
  {
    call: 'BatchGetItem',
    run: async ({ dynamo }) => {
      for (const pk of ['batch-1', 'batch-2']) {
        await dynamo.send(
          new PutItemCommand({
            TableName: TABLE,
            Item: { pk: { S: pk }, sk: { S: 'meta' }, shown: { S: `${pk}-shown` }, hidden: { S: 'x' } },
          }),
        );
      }
      const answer = await dynamo.send(
        new BatchGetItemCommand({
          RequestItems: {
            [TABLE]: {
              Keys: ['batch-1', 'batch-2', 'batch-none'].map((pk) => ({ pk: { S: pk }, sk: { S: 'meta' } })),
              ProjectionExpression: 'pk, shown',
            },
          },
        }),
      );
      const items = (answer.Responses?.[TABLE] ?? []).sort((a, b) =>
        String(a.pk?.S).localeCompare(String(b.pk?.S)),
      );
      return { items, unprocessed: answer.UnprocessedKeys?.[TABLE]?.Keys ?? [] };
    },
  },
  {
    call: 'Query',
    run: async ({ dynamo }) => {
      for (const sk of ['a', 'b', 'c']) {
        await dynamo.send(
          new PutItemCommand({ TableName: TABLE, Item: { pk: { S: 'query' }, sk: { S: sk } } }),
        );
      }
      const page = await dynamo.send(
        new QueryCommand({
          TableName: TABLE,
          KeyConditionExpression: 'pk = :pk AND sk > :after',
          ExpressionAttributeValues: { ':pk': { S: 'query' }, ':after': { S: 'a' } },
          Limit: 1,
          ScanIndexForward: false,
        }),
      );
      return { items: page.Items, count: page.Count, more: page.LastEvaluatedKey };
    },
  },
  {
    call: 'Scan',
    run: async ({ dynamo }) => {
      await dynamo.send(
        new PutItemCommand({
          TableName: TABLE,
          Item: { pk: { S: 'scan' }, sk: { S: 'meta' }, kind: { S: 'scanned' } },
        }),
      );
      const scanned = await dynamo.send(
        new ScanCommand({
          TableName: TABLE,
          FilterExpression: 'kind = :kind',
          ExpressionAttributeValues: { ':kind': { S: 'scanned' } },
        }),
      );
      return { items: scanned.Items, count: scanned.Count };
    },
  },
  // SQS ---------------------------------------------------------------------------------------
  {
    call: 'CreateQueue',
    run: async ({ sqs }) => {
      const create = (VisibilityTimeout: string) =>
        sqs.send(
          new CreateQueueCommand({ QueueName: 'conformance-created', Attributes: { VisibilityTimeout } }),
        );
      return {
        first: await outcome(create('30'), (a) => ({ name: a.QueueUrl?.split('/').at(-1) })),
        again: await outcome(create('30'), (a) => ({ name: a.QueueUrl?.split('/').at(-1) })),
        differentAttributes: await outcome(create('31')),
      };
    },
    difference: {
      fields: ['differentAttributes'],
      why: 'A second CreateQueue with other attribute values: moto refuses it (QueueNameExists), the stand-in updates the queue, on purpose, so a restarted local mode takes the settings a newer version gives its queues. AWS (QueueNameExists): "Amazon SQS returns this error only if the request includes attributes whose values differ from those of the existing queue." moto is right; only local set-up calls CreateQueue.',
    },
  },
  {
    call: 'GetQueueAttributes',
    run: async ({ sqs, queueUrl }) =>
      outcome(
        sqs.send(
          new GetQueueAttributesCommand({
            QueueUrl: queueUrl,
            AttributeNames: ['QueueArn', 'VisibilityTimeout'],
          }),
        ),
        (a) => ({
          arnQueue: a.Attributes?.QueueArn?.split(':').at(-1),
          visibility: a.Attributes?.VisibilityTimeout,
        }),
      ),
  },
  {
    call: 'SendMessage',
    run: async ({ sqs, queueUrl }) => {
      const body = '{"request_id":"r-1","note":"😀 é <&>"}';
      const sent = await outcome(
        sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: body })),
        (a) => ({
          MD5OfMessageBody: a.MD5OfMessageBody,
        }),
      );
      const received = await sqs.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, WaitTimeSeconds: 1 }));
      await sqs.send(
        new DeleteMessageBatchCommand({
          QueueUrl: queueUrl,
          Entries: (received.Messages ?? []).map((message, index) => ({
            Id: String(index),
            ReceiptHandle: message.ReceiptHandle,
          })),
        }),
      );
      return { sent, bodies: received.Messages?.map((message) => message.Body) };
    },
  },
  {
    call: 'SendMessageBatch',
    run: async ({ sqs, queueUrl }) => {
      const sent = await sqs.send(
        new SendMessageBatchCommand({
          QueueUrl: queueUrl,
          Entries: [
            { Id: 'a', MessageBody: 'one' },
            { Id: 'b', MessageBody: 'two' },
          ],
        }),
      );
      const duplicate = await outcome(
        sqs.send(
          new SendMessageBatchCommand({
            QueueUrl: queueUrl,
            Entries: [
              { Id: 'a', MessageBody: 'one' },
              { Id: 'a', MessageBody: 'two' },
            ],
          }),
        ),
      );
      return {
        successful: sent.Successful?.map((entry) => entry.Id).sort(),
        failed: sent.Failed ?? [],
        duplicate,
      };
    },
  },
  {
    call: 'ReceiveMessage',
    run: async ({ sqs, queueUrl }) => {
      const received = await sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: queueUrl,
          MaxNumberOfMessages: 10,
          WaitTimeSeconds: 1,
          MessageSystemAttributeNames: ['ApproximateReceiveCount'],
        }),
      );
      const hidden = await sqs.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, WaitTimeSeconds: 0 }));
      return {
        bodies: received.Messages?.map((message) => message.Body).sort(),
        counts: received.Messages?.map((message) => message.Attributes?.ApproximateReceiveCount),
        hiddenWhileInFlight: hidden.Messages ?? [],
      };
    },
  },
  {
    call: 'DeleteMessageBatch',
    run: async ({ sqs, queueUrl }) => {
      await sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: 'to delete' }));
      const received = await sqs.send(
        new ReceiveMessageCommand({ QueueUrl: queueUrl, WaitTimeSeconds: 1, VisibilityTimeout: 0 }),
      );
      const deleted = await sqs.send(
        new DeleteMessageBatchCommand({
          QueueUrl: queueUrl,
          Entries: (received.Messages ?? []).map((message, index) => ({
            Id: `m${index}`,
            ReceiptHandle: message.ReceiptHandle,
          })),
        }),
      );
      const after = await sqs.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, WaitTimeSeconds: 0 }));
      return {
        deleted: deleted.Successful?.map((entry) => entry.Id),
        failed: deleted.Failed ?? [],
        after: after.Messages ?? [],
      };
    },
  },
  // Step Functions ----------------------------------------------------------------------------
  {
    call: 'StartExecution',
    run: async ({ sfn, machineArn }) => {
      const start = (input: string) =>
        sfn.send(
          new StartExecutionCommand({ stateMachineArn: machineArn, name: 'conformance-start', input }),
        );
      return {
        first: await outcome(start('{"a":1}'), (a) => ({
          name: a.executionArn?.split(':').at(-1),
          dated: a.startDate instanceof Date,
        })),
        otherInput: await outcome(start('{"a":2}')),
        noMachine: await outcome(
          sfn.send(
            new StartExecutionCommand({ stateMachineArn: `${machineArn}-none`, name: 'x', input: '{}' }),
          ),
        ),
      };
    },
  },
  {
    call: 'DescribeExecution',
    run: async ({ sfn, machineArn }) => {
      const { executionArn } = await sfn.send(
        new StartExecutionCommand({
          stateMachineArn: machineArn,
          name: 'conformance-describe',
          input: '{"request_id":"r"}',
        }),
      );
      return {
        found: await outcome(sfn.send(new DescribeExecutionCommand({ executionArn })), (a) => ({
          status: a.status,
          name: a.name,
          input: a.input,
          stateMachineArn: a.stateMachineArn === machineArn,
        })),
        missing: await outcome(
          sfn.send(new DescribeExecutionCommand({ executionArn: `${executionArn}-none` })),
        ),
      };
    },
  },
  {
    call: 'ListExecutions',
    run: async ({ sfn, machineArn }) => {
      await sfn.send(
        new StartExecutionCommand({ stateMachineArn: machineArn, name: 'conformance-list', input: '{}' }),
      );
      return {
        listed: await outcome(
          sfn.send(new ListExecutionsCommand({ stateMachineArn: machineArn, maxResults: 1000 })),
          (a) => ({
            named: (a.executions ?? []).some((entry) => entry.name === 'conformance-list'),
          }),
        ),
      };
    },
  },
  {
    call: 'StopExecution',
    run: async ({ sfn, machineArn }) => {
      const { executionArn } = await sfn.send(
        new StartExecutionCommand({ stateMachineArn: machineArn, name: 'conformance-stop', input: '{}' }),
      );
      return {
        stopped: await outcome(
          sfn.send(new StopExecutionCommand({ executionArn, error: 'Cancelled', cause: 'operator' })),
          (a) => ({
            dated: a.stopDate instanceof Date,
          }),
        ),
        after: await outcome(sfn.send(new DescribeExecutionCommand({ executionArn })), (a) => ({
          status: a.status,
        })),
      };
    },
  },
  {
    call: 'SendTaskSuccess',
    run: async ({ sfn }) =>
      outcome(sfn.send(new SendTaskSuccessCommand({ taskToken: 'no-such-token', output: '{}' }))),
    difference: {
      fields: ['status', 'code'],
      why: 'For a token no task holds, the stand-in answers 400 TaskDoesNotExist, moto 200. AWS (SendTaskSuccess): the errors it lists include "InvalidToken: The provided token is not valid. HTTP Status Code: 400" and TaskDoesNotExist ("The activity does not exist"). moto is wrong; the product treats the error as "the waiter is gone" and hands the export slot on.',
    },
  },
  // Secrets Manager and EventBridge -----------------------------------------------------------
  {
    call: 'GetSecretValue',
    run: async ({ secrets }) => ({
      found: await outcome(secrets.send(new GetSecretValueCommand({ SecretId: SECRET })), (a) => ({
        SecretString: a.SecretString,
      })),
      missing: await outcome(secrets.send(new GetSecretValueCommand({ SecretId: 'conformance/none' }))),
    }),
    difference: {
      fields: ['missing'],
      why: 'An unknown secret: both answer ResourceNotFoundException, the stand-in with HTTP 400, moto with 404. AWS (Secrets Manager common errors) gives 400 for its client errors, e.g. "AccessDeniedException ... HTTP Status Code: 400", as the JSON protocol does; the SDK reads the error code, not the status, so the product sees the same error.',
    },
  },
  {
    call: 'PutEvents',
    run: async ({ events }) =>
      outcome(
        events.send(
          new PutEventsCommand({
            Entries: [
              {
                EventBusName: BUS,
                Source: 'svc-dsr',
                DetailType: 'DSR Status Changed',
                Detail: '{"status":"RUNNING"}',
              },
            ],
          }),
        ),
        (a) => ({
          FailedEntryCount: a.FailedEntryCount,
          ids: a.Entries?.map((entry) => typeof entry.EventId),
        }),
      ),
  },
];

/** GetObject by version id: an older version, one deleted since, and a delete marker. */
async function versionedReads(s3: S3Client): Promise<Outcome> {
  const Key = 'get/v';
  const first = await s3.send(new PutObjectCommand({ Bucket: BUCKET, Key, Body: 'first' }));
  const second = await s3.send(new PutObjectCommand({ Bucket: BUCKET, Key, Body: 'second' }));
  await s3.send(new DeleteObjectCommand({ Bucket: BUCKET, Key, VersionId: second.VersionId }));
  const marker = await s3.send(new DeleteObjectCommand({ Bucket: BUCKET, Key }));
  const read = (VersionId?: string) => s3.send(new GetObjectCommand({ Bucket: BUCKET, Key, VersionId }));
  return {
    byVersion: await outcome(
      read(first.VersionId).then(async (answer) => ({ ...answer, body: await text(answer) })),
      (a) => ({ body: a.body, sameVersion: a.VersionId === first.VersionId }),
    ),
    deletedVersion: await outcome(read(second.VersionId)),
    current: await outcome(read()),
    markerById: await outcome(read(marker.VersionId)),
  };
}

/**
 * DeleteObject without a version id in a versioned bucket (a delete marker), on a locked version
 * (a marker, the version kept), and of a marker by its id (the version before it current again).
 */
async function deleteMarkers(s3: S3Client): Promise<Outcome> {
  const put = (Bucket: string, Key: string) => s3.send(new PutObjectCommand({ Bucket, Key, Body: Key }));
  await put(BUCKET, 'delete/marked');
  const marked = await s3.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: 'delete/marked' }));
  const locked = await put(LOCKED_BUCKET, 'delete/kept');
  const lockedMarker = await s3.send(new DeleteObjectCommand({ Bucket: LOCKED_BUCKET, Key: 'delete/kept' }));
  const overwrite = await put(LOCKED_BUCKET, 'delete/kept');
  const lockedVersions = await s3.send(
    new ListObjectVersionsCommand({ Bucket: LOCKED_BUCKET, Prefix: 'delete/kept' }),
  );
  return {
    marker: { DeleteMarker: marked.DeleteMarker, hasVersionId: typeof marked.VersionId === 'string' },
    markedRead: await outcome(s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: 'delete/marked' }))),
    markerRemoved: await outcome(
      s3.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: 'delete/marked', VersionId: marked.VersionId })),
      // Not DeleteMarker: moto sets it on some of these answers and not on others (AWS always does).
      (a) => ({ sameVersion: a.VersionId === marked.VersionId }),
    ),
    restored: await outcome(s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: 'delete/marked' }))),
    lockedMarker: { DeleteMarker: lockedMarker.DeleteMarker },
    lockedKept: await outcome(
      s3.send(
        new HeadObjectCommand({ Bucket: LOCKED_BUCKET, Key: 'delete/kept', VersionId: locked.VersionId }),
      ),
      (a) => ({ ObjectLockMode: a.ObjectLockMode }),
    ),
    lockedOverwrite: {
      newVersion: typeof overwrite.VersionId === 'string' && overwrite.VersionId !== locked.VersionId,
    },
    lockedHistory: {
      versions: lockedVersions.Versions?.map((v) => [v.IsLatest, v.VersionId === locked.VersionId]),
      markers: lockedVersions.DeleteMarkers?.map((m) => [m.IsLatest, m.VersionId === lockedMarker.VersionId]),
    },
  };
}

function multipartCases(): Case[] {
  const part = 'x'.repeat(1024);
  return [
    {
      call: 'CreateMultipartUpload',
      run: async ({ s3 }) =>
        outcome(
          s3.send(new CreateMultipartUploadCommand({ Bucket: BUCKET, Key: 'multipart/created' })),
          (a) => ({
            key: a.Key,
            hasUploadId: typeof a.UploadId === 'string' && a.UploadId.length > 0,
          }),
        ),
    },
    {
      call: 'UploadPart',
      run: async ({ s3 }) => {
        const { UploadId } = await s3.send(
          new CreateMultipartUploadCommand({ Bucket: BUCKET, Key: 'multipart/part' }),
        );
        return {
          uploaded: await outcome(
            s3.send(
              new UploadPartCommand({
                Bucket: BUCKET,
                Key: 'multipart/part',
                UploadId,
                PartNumber: 1,
                Body: part,
              }),
            ),
            (a) => ({ ETag: a.ETag }),
          ),
          noUpload: await outcome(
            s3.send(
              new UploadPartCommand({
                Bucket: BUCKET,
                Key: 'multipart/part',
                UploadId: 'f'.repeat(32),
                PartNumber: 1,
                Body: part,
              }),
            ),
          ),
        };
      },
      difference: { fields: ['noUpload'], why: NO_SUCH_UPLOAD },
    },
    {
      call: 'CompleteMultipartUpload',
      run: async ({ s3 }) => {
        const Key = 'multipart/complete';
        const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket: BUCKET, Key }));
        const { ETag } = await s3.send(
          new UploadPartCommand({ Bucket: BUCKET, Key, UploadId, PartNumber: 1, Body: part }),
        );
        const completed = await outcome(
          s3.send(
            new CompleteMultipartUploadCommand({
              Bucket: BUCKET,
              Key,
              UploadId,
              MultipartUpload: { Parts: [{ ETag, PartNumber: 1 }] },
            }),
          ),
          (a) => ({ ETag: a.ETag }),
        );
        return {
          completed,
          stored: (await text(await s3.send(new GetObjectCommand({ Bucket: BUCKET, Key })))) === part,
        };
      },
    },
    {
      call: 'ListParts',
      run: async ({ s3 }) => {
        const Key = 'multipart/list-parts';
        const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket: BUCKET, Key }));
        await s3.send(new UploadPartCommand({ Bucket: BUCKET, Key, UploadId, PartNumber: 1, Body: part }));
        const listed = await outcome(
          s3.send(new ListPartsCommand({ Bucket: BUCKET, Key, UploadId })),
          (a) => ({
            parts: (a.Parts ?? []).map((entry) => ({ number: entry.PartNumber, size: entry.Size })),
            truncated: a.IsTruncated === true,
          }),
        );
        await s3.send(new AbortMultipartUploadCommand({ Bucket: BUCKET, Key, UploadId }));
        return { listed };
      },
    },
    {
      call: 'AbortMultipartUpload',
      run: async ({ s3 }) => {
        const Key = 'multipart/abort';
        const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket: BUCKET, Key }));
        return {
          aborted: await outcome(s3.send(new AbortMultipartUploadCommand({ Bucket: BUCKET, Key, UploadId }))),
          partAfter: await outcome(
            s3.send(new UploadPartCommand({ Bucket: BUCKET, Key, UploadId, PartNumber: 1, Body: part })),
          ),
        };
      },
      difference: { fields: ['partAfter'], why: NO_SUCH_UPLOAD },
    },
  ];
}

/**
 * Calls of the inventory that no local stand-in answers, with why: the table lists them too.
 */
const NOT_LOCAL: Readonly<Record<string, string>> = {
  GetCallerIdentity:
    'the operator CLI asks STS who it is only against AWS; local mode names the CLI caller itself',
  CreateTable: 'local set-up (CloudFormation creates the tables in AWS); dynalite answers it',
  DescribeTable: 'local set-up; dynalite answers it',
  DeleteTable: 'test set-up only',
};

/** The DynamoDB call each document-client command of @aws-sdk/lib-dynamodb sends. */
const DOCUMENT_COMMANDS: Readonly<Record<string, string>> = {
  Get: 'GetItem',
  Put: 'PutItem',
  Update: 'UpdateItem',
  Delete: 'DeleteItem',
  BatchGet: 'BatchGetItem',
  BatchWrite: 'BatchWriteItem',
};

/** Every AWS SDK command the product imports: the inventory the call recorder sees. */
async function productCommands(): Promise<Set<string>> {
  const commands = new Set<string>();
  const walk = async (folder: string): Promise<void> => {
    for (const entry of await readdir(folder, { withFileTypes: true })) {
      const path = join(folder, entry.name);
      if (entry.isDirectory()) await walk(path);
      else if (entry.name.endsWith('.ts')) {
        const source = await readFile(path, 'utf8');
        for (const match of source.matchAll(/import\s*\{([^}]*)\}\s*from\s*'@aws-sdk\/[^']+'/g)) {
          for (const name of (match[1] ?? '').split(',')) {
            const command = /^\s*(?:type\s+)?(\w+)Command\s*$/.exec(name)?.[1];
            // The document client's commands (lib-dynamodb) send DynamoDB's own: Get is GetItem.
            if (command !== undefined && !name.includes('type '))
              commands.add(DOCUMENT_COMMANDS[command] ?? command);
          }
        }
      }
    }
  };
  for (const folder of ['lambdas', 'bin', 'local/runtime']) await walk(folder);
  return commands;
}

// Set-up ------------------------------------------------------------------------------------

let moto: ChildProcess | undefined;
let motoEndpoint: string;
let standIns: AwsStandIns;
let secretsStandIn: SecretsStandIn;
let eventsStandIn: EventsStandIn;
let registry: Registry;
let shim: SfnShim;
let eventsDir: string;
let local: Target;
let remote: Target;

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === 'string') throw new Error('no free port');
  return address.port;
}

async function startMoto(): Promise<void> {
  const port = await freePort();
  motoEndpoint = `http://127.0.0.1:${port}`;
  moto = spawn('moto_server', ['-H', '127.0.0.1', '-p', String(port)], { stdio: 'ignore' });
  const failed = new Promise<never>((_resolve, reject) => {
    moto?.on('error', () =>
      reject(
        new Error(
          'moto_server is not on the PATH: it comes with the machine image (moto 5.2.1); see .ci/run',
        ),
      ),
    );
  });
  const ready = (async () => {
    for (let attempt = 0; attempt < 300; attempt++) {
      const answered = await fetch(`${motoEndpoint}/moto-api/`).then(
        () => true,
        () => false,
      );
      if (answered) return;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new Error('moto_server did not answer within 30 s');
  })();
  await Promise.race([ready, failed]);
}

function clients(endpoints: {
  s3: string;
  sqs: string;
  dynamo: string;
  sfn: string;
  secrets: string;
  events: string;
}) {
  const base = { region: REGION, credentials: CREDENTIALS, maxAttempts: 1 };
  return {
    s3: new S3Client({ ...base, endpoint: endpoints.s3, forcePathStyle: true }),
    sqs: new SQSClient({ ...base, endpoint: endpoints.sqs }),
    dynamo: new DynamoDBClient({ ...base, endpoint: endpoints.dynamo }),
    sfn: new SFNClient({ ...base, endpoint: endpoints.sfn }),
    secrets: new SecretsManagerClient({ ...base, endpoint: endpoints.secrets }),
    events: new EventBridgeClient({ ...base, endpoint: endpoints.events }),
  };
}

/** The same resources on both: the buckets (one locked), the table, the queue. */
async function createResources(target: ReturnType<typeof clients>): Promise<string> {
  await target.s3.send(new CreateBucketCommand({ Bucket: BUCKET }));
  await target.s3.send(new CreateBucketCommand({ Bucket: LOCKED_BUCKET, ObjectLockEnabledForBucket: true }));
  await target.s3.send(
    new PutObjectLockConfigurationCommand({
      Bucket: LOCKED_BUCKET,
      ObjectLockConfiguration: {
        ObjectLockEnabled: 'Enabled',
        Rule: { DefaultRetention: { Mode: 'COMPLIANCE', Days: 1 } },
      },
    }),
  );
  await target.dynamo.send(
    new CreateTableCommand({
      TableName: TABLE,
      BillingMode: 'PAY_PER_REQUEST',
      AttributeDefinitions: [
        { AttributeName: 'pk', AttributeType: 'S' },
        { AttributeName: 'sk', AttributeType: 'S' },
      ],
      KeySchema: [
        { AttributeName: 'pk', KeyType: 'HASH' },
        { AttributeName: 'sk', KeyType: 'RANGE' },
      ],
    }),
  );
  await target.dynamo.send(new DescribeTableCommand({ TableName: TABLE }));
  const { QueueUrl } = await target.sqs.send(new CreateQueueCommand({ QueueName: QUEUE }));
  return QueueUrl ?? '';
}

beforeAll(async () => {
  const motoStarting = startMoto();
  eventsDir = await mkdtemp(join(tmpdir(), 'svc-dsr-conformance-'));
  standIns = await startAwsStandIns();
  secretsStandIn = await startSecretsStandIn({ [SECRET]: SECRET_VALUE });
  eventsStandIn = await startEventsStandIn(eventsDir);
  const machineArn = `arn:aws:states:${REGION}:000000000000:stateMachine:${MACHINE}`;
  const machine = new LocalStateMachine(
    { logicalId: MACHINE, definition: DEFINITION, functions: new Map() },
    { handlers: {}, waitMs: 3_600_000 },
  );
  registry = await openExecutions({ machine, stateMachineArn: machineArn });
  shim = await startSfnShim({ executions: registry });
  const localClients = clients({
    s3: standIns.endpoints.s3,
    sqs: standIns.endpoints.sqs,
    dynamo: standIns.endpoints.dynamodb,
    sfn: shim.endpoint,
    secrets: secretsStandIn.endpoint,
    events: eventsStandIn.endpoint,
  });
  local = { name: 'local', ...localClients, queueUrl: await createResources(localClients), machineArn };

  await motoStarting;
  const motoClients = clients({
    s3: motoEndpoint,
    sqs: motoEndpoint,
    dynamo: motoEndpoint,
    sfn: motoEndpoint,
    secrets: motoEndpoint,
    events: motoEndpoint,
  });
  const queueUrl = await createResources(motoClients);
  await motoClients.secrets.send(new CreateSecretCommand({ Name: SECRET, SecretString: SECRET_VALUE }));
  await motoClients.events.send(new CreateEventBusCommand({ Name: BUS }));
  const created = await motoClients.sfn.send(
    new CreateStateMachineCommand({
      name: MACHINE,
      definition: JSON.stringify(DEFINITION),
      roleArn: 'arn:aws:iam::123456789012:role/conformance',
    }),
  );
  remote = { name: 'moto', ...motoClients, queueUrl, machineArn: created.stateMachineArn ?? '' };
}, 60_000);

afterAll(async () => {
  for (const target of [local, remote]) {
    if (target === undefined) continue;
    for (const client of [target.s3, target.sqs, target.dynamo, target.sfn, target.secrets, target.events])
      client.destroy();
  }
  moto?.kill();
  await registry?.close({ timeoutMs: 100 });
  await shim?.close();
  await secretsStandIn?.close();
  await eventsStandIn?.close();
  await standIns?.close();
  await rm(eventsDir, { recursive: true, force: true });
});

describe('the inventory', () => {
  it('has a conformance case, or a reason it is not served locally, for every AWS call the product makes', async () => {
    // Act
    const inventory = await productCommands();
    const covered = new Set([...CASES.map((entry) => entry.call), ...Object.keys(NOT_LOCAL)]);

    // Assess
    expect([...inventory].filter((command) => !covered.has(command))).toEqual([]);
    expect(inventory.size).toBeGreaterThan(25);
  });
});

describe('the local stand-ins against moto, call by call', () => {
  it.each(CASES.map((entry) => [entry.call, entry] as const))('%s', async (_call, entry) => {
    // Act: one implementation after the other, so neither's timing touches the other's
    const onLocal = await entry.run(local);
    const onMoto = await entry.run(remote);

    // Assess
    const differing = entry.difference?.fields ?? [];
    const strip = (observed: Outcome) =>
      Object.fromEntries(Object.entries(observed).filter(([field]) => !differing.includes(field)));
    expect(strip(onLocal)).toEqual(strip(onMoto));
    // A difference named here must still be one: when moto or the stand-in changes, the table must too.
    for (const field of differing) expect(onLocal[field]).not.toEqual(onMoto[field]);
  });
});
