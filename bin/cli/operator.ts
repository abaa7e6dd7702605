/**
 * Who runs an operator command, for its audit record: the caller's IAM ARN on AWS (STS
 * GetCallerIdentity, which needs no IAM permission), the OS user locally.
 */
import { userInfo } from 'node:os';
import { GetCallerIdentityCommand, type STSClient } from '@aws-sdk/client-sts';
import { identifierProblem } from '#shared/redact';

/**
 * The operator's name as an audit fact may hold it: an e-mail address in it (an SSO session
 * name, an OS login) is cut to its local part, since audit facts never hold e-mail addresses.
 */
export function auditableOperator(name: string): string {
  const cut = name.replace(/([^\s@/:]+)@[^\s/:]+/g, '$1').slice(0, 256);
  return identifierProblem(cut) === undefined ? cut : 'unnamed-operator';
}

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
