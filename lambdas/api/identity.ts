// Who calls the API: the signed-in person of a verified token, with the roles its groups give, as an operator record names them.
import { z } from 'zod';
import { auditableOperator } from '../operator/identity.ts';

/** The roles the API enforces, each a group of the user pool of the same name. */
export const API_ROLES = ['privacy-team', 'auditor'] as const;
export type ApiRole = (typeof API_ROLES)[number];

/**
 * A group list as a JWT authorizer passes it on: a JSON array in the token, which API Gateway's
 * HTTP API hands to the function as one string, `[privacy-team auditor]`.
 */
const groupsSchema = z.union([z.array(z.string()), z.string()]).transform((groups) =>
  Array.isArray(groups)
    ? groups
    : groups
        .replace(/^\[|\]$/g, '')
        .split(/[\s,]+/)
        .filter((group) => group !== ''),
);

/**
 * The claims of a verified token the API reads: the identity provider's subject, the username
 * (Cognito's `cognito:username`, or `username` in an access token), and the groups.
 */
export const apiClaimsSchema = z.looseObject({
  sub: z.string().min(1).max(128),
  'cognito:username': z.string().min(1).max(128).optional(),
  username: z.string().min(1).max(128).optional(),
  'cognito:groups': groupsSchema.optional(),
});

/** The person behind a call: who, by which channel, and what they may do. */
export interface ApiCaller {
  readonly subject: string;
  readonly username: string;
  readonly roles: ReadonlySet<ApiRole>;
  /**
   * The operator as the audit records name them: the channel, the username and the identity
   * provider's subject, e.g. `console:jane (sub 5f3c…)`; an e-mail address in a username is cut
   * to its local part, as for every operator.
   */
  readonly operator: string;
}

/** The caller of a verified token's claims, or undefined where they name no subject. */
export function callerOf(claims: unknown): ApiCaller | undefined {
  const parsed = apiClaimsSchema.safeParse(claims);
  if (!parsed.success) return undefined;
  const { sub } = parsed.data;
  const username = parsed.data['cognito:username'] ?? parsed.data.username ?? sub;
  const roles = new Set(
    (parsed.data['cognito:groups'] ?? []).filter((group): group is ApiRole =>
      (API_ROLES as readonly string[]).includes(group),
    ),
  );
  return { subject: sub, username, roles, operator: auditableOperator(`console:${username} (sub ${sub})`) };
}
