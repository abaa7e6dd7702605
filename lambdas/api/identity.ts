// Who calls the API: the signed-in person of a verified token, with the roles its groups give, as an operator record names them.
import { z } from 'zod';
import { auditableOperator } from '../operator/identity.ts';

/** The roles the API enforces: each of the first two a group of the user pool of the same name. */
export const API_ROLES = ['privacy-team', 'auditor'] as const;
/**
 * A system that signs its calls with SigV4 (the API's `/iam` routes): the privacy team's actions;
 * a package hand-out only where its IAM policy grants that route too (docs/console-api.md).
 */
export const MACHINE_ROLE = 'machine';
export type ApiRole = (typeof API_ROLES)[number] | typeof MACHINE_ROLE;

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
  const roles = new Set<ApiRole>(
    (parsed.data['cognito:groups'] ?? []).filter((group): group is (typeof API_ROLES)[number] =>
      (API_ROLES as readonly string[]).includes(group),
    ),
  );
  return { subject: sub, username, roles, operator: auditableOperator(`console:${username} (sub ${sub})`) };
}

/** The IAM caller of an `/iam` route, as API Gateway's IAM authorization passes it on. */
export const iamCallerSchema = z.looseObject({
  userArn: z.string().min(1).max(2048),
  accountId: z
    .string()
    .regex(/^\d{12}$/)
    .optional(),
  principalOrgId: z.string().nullable().optional(),
});

/**
 * The machine caller of a SigV4-signed call, when it is of this account or, with `organization`,
 * of that AWS organisation; undefined otherwise. API Gateway has checked the signature and the
 * caller's execute-api:Invoke permission on the route before the event arrives.
 */
export function machineCallerOf(
  iam: unknown,
  own: { readonly accountId: string; readonly organization?: string },
): ApiCaller | undefined {
  const parsed = iamCallerSchema.safeParse(iam);
  if (!parsed.success) return undefined;
  const { userArn, accountId, principalOrgId } = parsed.data;
  const member =
    accountId === own.accountId || (own.organization !== undefined && principalOrgId === own.organization);
  if (!member) return undefined;
  return {
    subject: userArn,
    username: userArn,
    roles: new Set<ApiRole>([MACHINE_ROLE]),
    operator: auditableOperator(`machine:${userArn}`),
  };
}
