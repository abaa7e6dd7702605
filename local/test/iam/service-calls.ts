/**
 * The calls AWS services make on the stack's behalf, each with the principal AWS uses for it and the
 * context it sends, derived from the template: Step Functions invoking the step Lambdas and using
 * the data key, Lambda assuming roles, writing logs and traces and polling the intake queue,
 * CloudWatch Logs encrypting log groups, CloudWatch alarms publishing to the encrypted topic,
 * S3 delivering server access logs, and EventBridge invoking scheduled functions.
 */
import type { Authorisation } from './proof.ts';
import { impliedKeyUse, keyOf } from './proof.ts';
import { ACCOUNT, REGION, type TemplateModel } from './template-model.ts';

const SECURE = { 'aws:SecureTransport': 'true' } as const;

export function serviceAuthorisations(model: TemplateModel): Authorisation[] {
  const out: Authorisation[] = [];
  const roleOf = (arnValue: unknown) => {
    const arn = String(model.resolve(arnValue));
    const id = model.idOf('AWS::IAM::Role', arn);
    if (id === undefined) throw new Error(`no role of the template has the ARN ${arn}`);
    return id;
  };
  const service = (name: string) => ({ service: `${name}.amazonaws.com` });
  const sourced = (sourceArn: string) => ({
    'aws:SourceAccount': ACCOUNT,
    'aws:SourceArn': sourceArn,
    ...SECURE,
  });

  for (const id of model.ofType('AWS::StepFunctions::StateMachine')) {
    const p = model.properties(id);
    const roleId = roleOf(p.RoleArn);
    const machineArn = model.getAtt(id, 'Arn');
    const caller = `StepFunctions(${id})`;
    const role = { caller, principal: { roleId } } as const;
    out.push({
      caller: 'StepFunctions',
      principal: service('states'),
      action: 'sts:AssumeRole',
      resource: model.getAtt(roleId, 'Arn'),
      context: sourced(machineArn),
      reason: 'Step Functions assumes the state machine role',
    });
    const definition = JSON.parse(String(model.resolve(p.DefinitionString))) as {
      States: Record<string, unknown>;
    };
    // The state machine's direct service calls: each on a resource of the template, with the key
    // use the service makes for it.
    const direct = [
      ...dynamoUpdateTargets(definition.States).map((name) => ({
        type: 'AWS::DynamoDB::Table',
        name,
        operation: 'UpdateItem',
        action: 'dynamodb:UpdateItem',
        resource: { kind: 'dynamodb-table', table: name } as const,
        reason: 'a Task state (dynamodb:updateItem) records a failure RecordFailure could not',
        keyReason: "DynamoDB uses the table key for the state machine's write",
      })),
      ...dynamoSdkUpdateTargets(definition.States).map((name) => ({
        type: 'AWS::DynamoDB::Table',
        name,
        operation: 'UpdateItem',
        action: 'dynamodb:UpdateItem',
        resource: { kind: 'dynamodb-table', table: name } as const,
        reason:
          'a Task state (aws-sdk:dynamodb:updateItem.waitForTaskToken) writes an export-slot waiter its token',
        keyReason: "DynamoDB uses the table key for the state machine's write",
      })),
    ];
    for (const call of direct) {
      const id = model.ofType(call.type).find((candidate) => model.ref(candidate) === call.name);
      if (id === undefined) throw new Error(`no ${call.type} of the template is named ${call.name}`);
      const arn = model.getAtt(id, 'Arn');
      out.push({ ...role, action: call.action, resource: arn, context: { ...SECURE }, reason: call.reason });
      const recorded = {
        caller,
        operation: call.operation,
        action: call.action,
        resource: call.resource,
        context: {},
      };
      for (const use of impliedKeyUse(recorded, arn, model))
        out.push({ ...role, ...use, reason: call.keyReason });
    }
    for (const fnArn of lambdaTargets(definition.States)) {
      out.push({
        ...role,
        action: 'lambda:InvokeFunction',
        resource: fnArn,
        context: { ...SECURE },
        reason: 'a Task state invokes the step Lambda',
      });
    }
    const key = keyOf(model, machineArn);
    if (key !== undefined) {
      const context = {
        'kms:ViaService': `states.${REGION}.amazonaws.com`,
        'kms:CallerAccount': ACCOUNT,
        'kms:EncryptionContext:aws:states:stateMachineArn': machineArn,
        ...SECURE,
      };
      for (const action of ['kms:GenerateDataKey', 'kms:Decrypt']) {
        out.push({
          ...role,
          action,
          resource: key.keyArn,
          context,
          reason: 'Step Functions encrypts and decrypts execution data with the data key',
        });
      }
    }
    const logging = p.LoggingConfiguration as { Destinations?: unknown[] } | undefined;
    if ((logging?.Destinations ?? []).length > 0) {
      for (const action of [
        'logs:CreateLogDelivery',
        'logs:GetLogDelivery',
        'logs:UpdateLogDelivery',
        'logs:DeleteLogDelivery',
        'logs:ListLogDeliveries',
        'logs:PutResourcePolicy',
        'logs:DescribeResourcePolicies',
        'logs:DescribeLogGroups',
      ]) {
        out.push({
          ...role,
          action,
          resource: '*',
          context: { ...SECURE },
          reason: 'Step Functions delivers execution logs (vended logs)',
        });
      }
    }
    if ((p.TracingConfiguration as { Enabled?: boolean } | undefined)?.Enabled === true) {
      for (const action of [
        'xray:PutTraceSegments',
        'xray:PutTelemetryRecords',
        'xray:GetSamplingRules',
        'xray:GetSamplingTargets',
      ]) {
        out.push({
          ...role,
          action,
          resource: '*',
          context: { ...SECURE },
          reason: 'Step Functions sends X-Ray traces',
        });
      }
    }
  }

  for (const id of model.ofType('AWS::Lambda::Function')) {
    const p = model.properties(id);
    const roleId = roleOf(p.Role);
    const caller = `Lambda(${id})`;
    const role = { caller, principal: { roleId } } as const;
    out.push({
      caller: 'Lambda',
      principal: service('lambda'),
      action: 'sts:AssumeRole',
      resource: model.getAtt(roleId, 'Arn'),
      context: { ...SECURE },
      reason: 'Lambda assumes the function role',
    });
    const logGroup = (p.LoggingConfig as { LogGroup?: unknown } | undefined)?.LogGroup;
    if (logGroup !== undefined) {
      const groupArn = model.arn('logs', `log-group:${String(model.resolve(logGroup))}:*`);
      for (const action of ['logs:CreateLogStream', 'logs:PutLogEvents']) {
        out.push({
          ...role,
          action,
          resource: groupArn,
          context: { ...SECURE },
          reason: 'the function writes its log',
        });
      }
    }
    if ((p.TracingConfig as { Mode?: string } | undefined)?.Mode === 'Active') {
      for (const action of ['xray:PutTraceSegments', 'xray:PutTelemetryRecords']) {
        out.push({
          ...role,
          action,
          resource: '*',
          context: { ...SECURE },
          reason: 'the function sends X-Ray traces',
        });
      }
    }
  }

  for (const id of model.ofType('AWS::Lambda::EventSourceMapping')) {
    const p = model.resolve(model.properties(id)) as {
      FunctionName: string;
      EventSourceArn: string;
      DestinationConfig?: { OnFailure?: { Destination?: string } };
    };
    const fnId = model
      .ofType('AWS::Lambda::Function')
      .find((fn) => model.ref(fn) === p.FunctionName || model.getAtt(fn, 'Arn') === p.FunctionName);
    if (fnId === undefined) throw new Error(`${id} maps to an unknown function`);
    const roleId = roleOf(model.properties(fnId).Role);
    const role = { caller: `EventSource(${id})`, principal: { roleId } } as const;
    const onFailure = p.DestinationConfig?.OnFailure?.Destination;
    if (onFailure !== undefined) out.push(...failureSends(model, role, onFailure));
    if (p.EventSourceArn.includes(':dynamodb:')) {
      out.push(...streamReads(model, role, p.EventSourceArn));
      continue;
    }
    for (const action of ['sqs:ReceiveMessage', 'sqs:DeleteMessage', 'sqs:GetQueueAttributes']) {
      out.push({
        ...role,
        action,
        resource: p.EventSourceArn,
        context: { ...SECURE },
        reason: 'the SQS event source mapping polls the queue with the function role',
      });
    }
    const key = keyOf(model, p.EventSourceArn);
    if (key !== undefined) {
      out.push({
        ...role,
        action: 'kms:Decrypt',
        resource: key.keyArn,
        context: {
          'kms:ViaService': `sqs.${REGION}.amazonaws.com`,
          'kms:CallerAccount': ACCOUNT,
          'kms:EncryptionContext:aws:sqs:arn': p.EventSourceArn,
          ...SECURE,
        },
        reason: 'the event source mapping receives encrypted messages',
      });
    }
  }

  for (const id of model.ofType('AWS::Logs::LogGroup')) {
    const p = model.resolve(model.properties(id)) as { KmsKeyId?: string };
    if (p.KmsKeyId === undefined) continue;
    const groupArn = model.getAtt(id, 'Arn').replace(/:\*$/, '');
    for (const action of [
      'kms:Encrypt',
      'kms:Decrypt',
      'kms:GenerateDataKey',
      'kms:ReEncryptFrom',
      'kms:ReEncryptTo',
      'kms:DescribeKey',
    ]) {
      out.push({
        caller: 'CloudWatchLogs',
        principal: service(`logs.${REGION}`),
        action,
        resource: p.KmsKeyId,
        context: { 'kms:EncryptionContext:aws:logs:arn': groupArn, 'aws:SourceAccount': ACCOUNT, ...SECURE },
        reason: `CloudWatch Logs encrypts the log group ${groupArn}`,
      });
    }
  }

  for (const id of model.ofType('AWS::CloudWatch::Alarm')) {
    const p = model.resolve(model.properties(id)) as {
      AlarmActions?: string[];
      OKActions?: string[];
      AlarmName?: string;
    };
    const alarmArn = model.arn('cloudwatch', `alarm:${p.AlarmName ?? model.name(id)}`);
    for (const topicArn of new Set([...(p.AlarmActions ?? []), ...(p.OKActions ?? [])])) {
      if (!topicArn.includes(':sns:')) continue;
      const caller = 'CloudWatchAlarms';
      out.push({
        caller,
        principal: service('cloudwatch'),
        action: 'sns:Publish',
        resource: topicArn,
        context: sourced(alarmArn),
        reason: `the alarm ${id} notifies the topic`,
      });
      const topicId = model.ofType('AWS::SNS::Topic').find((topic) => model.ref(topic) === topicArn);
      const keyValue = topicId === undefined ? undefined : model.properties(topicId).KmsMasterKeyId;
      if (keyValue === undefined) continue;
      const keyArn = String(model.resolve(keyValue));
      for (const action of ['kms:GenerateDataKey', 'kms:Decrypt']) {
        out.push({
          caller,
          principal: service('cloudwatch'),
          action,
          resource: keyArn,
          context: sourced(alarmArn),
          reason: `the alarm ${id} publishes to the encrypted topic`,
        });
      }
    }
  }

  for (const id of model.ofType('AWS::S3::Bucket')) {
    const p = model.resolve(model.properties(id)) as {
      LoggingConfiguration?: { DestinationBucketName: string; LogFilePrefix?: string };
    };
    const logging = p.LoggingConfiguration;
    if (logging === undefined) continue;
    out.push({
      caller: 'S3ServerAccessLogging',
      principal: service('logging.s3'),
      action: 's3:PutObject',
      resource: `arn:aws:s3:::${logging.DestinationBucketName}/${logging.LogFilePrefix ?? ''}2026-11-23-00-00-00-0123456789ABCDEF`,
      context: sourced(model.getAtt(id, 'Arn')),
      reason: `S3 delivers ${id}'s access logs`,
    });
  }

  for (const id of model.ofType('AWS::Events::Rule')) {
    const p = model.resolve(model.properties(id)) as { Targets?: { Arn: string }[] };
    for (const target of p.Targets ?? []) {
      if (!target.Arn.includes(':lambda:')) continue;
      out.push({
        caller: 'EventBridge',
        principal: service('events'),
        action: 'lambda:InvokeFunction',
        resource: target.Arn,
        context: sourced(model.getAtt(id, 'Arn')),
        reason: `the rule ${id} invokes its target`,
      });
    }
  }
  return out;
}

/** The function ARN of every Lambda Task in a definition, Parallel and Map branches included. */
/** The Lambda functions the definition's lambda:invoke tasks call, by ARN. */
function lambdaTargets(states: Record<string, unknown>): string[] {
  return taskTargets(states, ':states:::lambda:invoke', 'FunctionName');
}

/** The tables the definition's direct DynamoDB UpdateItem tasks write, by name. */
function dynamoUpdateTargets(states: Record<string, unknown>): string[] {
  return taskTargets(states, ':states:::dynamodb:updateItem', 'TableName');
}

/** The tables the definition's AWS SDK UpdateItem tasks (plain or waiting for a token) write, by name. */
function dynamoSdkUpdateTargets(states: Record<string, unknown>): string[] {
  return [
    ...taskTargets(states, ':states:::aws-sdk:dynamodb:updateItem', 'TableName'),
    ...taskTargets(states, ':states:::aws-sdk:dynamodb:updateItem.waitForTaskToken', 'TableName'),
  ];
}

/** The values of `parameter` in every Task state whose resource ends with `resourceSuffix`. */
function taskTargets(states: Record<string, unknown>, resourceSuffix: string, parameter: string): string[] {
  const found = new Set<string>();
  const visit = (value: unknown) => {
    if (Array.isArray(value)) value.forEach(visit);
    else if (typeof value === 'object' && value !== null) {
      const state = value as Record<string, unknown>;
      if (state.Type === 'Task' && String(state.Resource).endsWith(resourceSuffix)) {
        const target = (state.Parameters as Record<string, unknown> | undefined)?.[parameter];
        if (typeof target === 'string') found.add(target);
      }
      Object.values(state).forEach(visit);
    }
  };
  visit(states);
  return [...found];
}

/**
 * What Lambda's DynamoDB stream event source does with the function role: it lists and describes
 * the table's streams and reads their shards; records of a table encrypted with a customer key are
 * decrypted through DynamoDB.
 */
function streamReads(
  model: TemplateModel,
  role: { readonly caller: string; readonly principal: { readonly roleId: string } },
  streamArn: string,
): Authorisation[] {
  const reason = 'the DynamoDB stream event source mapping reads the ledger stream with the function role';
  const reads: Authorisation[] = [
    ...['dynamodb:DescribeStream', 'dynamodb:GetRecords', 'dynamodb:GetShardIterator'].map((action) => ({
      ...role,
      action,
      resource: streamArn,
      context: { ...SECURE },
      reason,
    })),
    // ListStreams has no resource-level permission.
    { ...role, action: 'dynamodb:ListStreams', resource: '*', context: { ...SECURE }, reason },
  ];
  const tableArn = streamArn.replace(/\/stream\/.*$/, '');
  const key = keyOf(model, tableArn);
  if (key !== undefined) {
    reads.push({
      ...role,
      action: 'kms:Decrypt',
      resource: key.keyArn,
      context: {
        'kms:ViaService': `dynamodb.${REGION}.amazonaws.com`,
        'kms:CallerAccount': ACCOUNT,
        ...SECURE,
      },
      reason: 'the stream records of a table encrypted with a customer key are decrypted through DynamoDB',
    });
  }
  return reads;
}

/**
 * What Lambda does with the function role when an event source mapping gives a batch up: it sends
 * the batch's description to the on-failure queue, encrypted with the queue's key through SQS.
 */
function failureSends(
  model: TemplateModel,
  role: { readonly caller: string; readonly principal: { readonly roleId: string } },
  queueArn: string,
): Authorisation[] {
  if (!queueArn.includes(':sqs:'))
    throw new Error(`an on-failure destination the proof does not model: ${queueArn}`);
  const reason = 'the event source mapping sends a batch it gave up on to its on-failure queue';
  const sends: Authorisation[] = [
    { ...role, action: 'sqs:SendMessage', resource: queueArn, context: { ...SECURE }, reason },
  ];
  const key = keyOf(model, queueArn);
  if (key !== undefined) {
    for (const action of ['kms:GenerateDataKey', 'kms:Decrypt']) {
      sends.push({
        ...role,
        action,
        resource: key.keyArn,
        context: {
          'kms:ViaService': `sqs.${REGION}.amazonaws.com`,
          'kms:CallerAccount': ACCOUNT,
          'kms:EncryptionContext:aws:sqs:arn': queueArn,
          ...SECURE,
        },
        reason: 'SQS encrypts the failure record with the queue key',
      });
    }
  }
  return sends;
}
