// Acknowledging a reviewed cdk-nag finding on exactly one resource, and how a finding names an ARN.
import { CfnElement, Stack } from 'aws-cdk-lib';
import { NagSuppressions } from 'cdk-nag';
import type { IConstruct } from 'constructs';

/**
 * Records a reviewed cdk-nag finding on exactly one resource. `appliesTo` narrows a wildcard
 * finding (AwsSolutions-IAM5) to the listed resource or action strings, so a new wildcard in the
 * same policy is still reported.
 */
export function acknowledge(
  resource: IConstruct,
  ruleId: `AwsSolutions-${string}`,
  reason: string,
  appliesTo?: readonly string[],
): void {
  NagSuppressions.addResourceSuppressions(resource, [
    { id: ruleId, reason, ...(appliesTo === undefined ? {} : { appliesTo: [...appliesTo] }) },
  ]);
}

/** How cdk-nag prints `Fn::GetAtt [<resource>, Arn]` in a finding, for `appliesTo`. */
export function nagArn(construct: IConstruct): string {
  const resource = construct.node.defaultChild ?? construct;
  if (!(resource instanceof CfnElement)) {
    throw new Error(`${construct.node.path} has no CloudFormation resource to name in a finding`);
  }
  return `<${Stack.of(resource).getLogicalId(resource)}.Arn>`;
}
