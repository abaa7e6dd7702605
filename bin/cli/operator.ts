/**
 * Who runs an operator command, as the CLI sees it: the caller's IAM ARN (STS GetCallerIdentity)
 * or the OS user. Only the in-process operator function of tests and local-mode code records it;
 * on a target the operator function takes the caller's principal from IAM (docs/security.md).
 */
import { userInfo } from 'node:os';
import { GetCallerIdentityCommand, type STSClient } from '@aws-sdk/client-sts';
import { auditableOperator } from '../../lambdas/operator/identity.ts';

export { auditableOperator };

/** The OS user running a command against local mode: `local-user:<login>`. */
export function localOperator(): string {
  let login: string;
  try {
    login = userInfo().username;
  } catch {
    login = process.env.USER ?? process.env.USERNAME ?? 'unknown';
  }
  return auditableOperator(`local-user:${login}`);
}

/** The caller's IAM ARN, asked once per command. */
export function awsOperator(sts: STSClient): () => Promise<string> {
  let arn: Promise<string> | undefined;
  return () => {
    arn ??= sts.send(new GetCallerIdentityCommand({})).then((identity) => {
      if (identity.Arn === undefined) throw new Error('STS GetCallerIdentity answered without an ARN');
      return auditableOperator(identity.Arn);
    });
    return arn;
  };
}
