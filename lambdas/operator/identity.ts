/**
 * Who acted, as an operator record names them: the caller's IAM principal, which the operator
 * function reads from its invocation (docs/security.md), never from the command.
 */
import { identifierProblem } from '#shared/redact';

/**
 * The operator's name as an audit fact may hold it: an e-mail address in it (an SSO session
 * name, an OS login) is cut to its local part, since audit facts never hold e-mail addresses.
 */
export function auditableOperator(name: string): string {
  const cut = name.replace(/([^\s@/:]+)@[^\s/:]+/g, '$1').slice(0, 256);
  return identifierProblem(cut) === undefined ? cut : 'unnamed-operator';
}
