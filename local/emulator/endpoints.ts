/**
 * The platform's endpoints as docs/platform-api.md describes them (retrieve and delete user, start and poll an
 * export, download, activity): each request checked and answered as the platform would.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { z } from 'zod';
import { activityPage } from './activity.ts';
import type { CredentialKind, CredentialLocation, CredentialUse, StrayCredential } from './calls.ts';
import type { Emulator } from './emulator.ts';
import { exportArchive } from './exports.ts';
import { failure, invalidField, json, type Query, type Reply, tooManyRequests } from './http.ts';
import type { UserFields, UserRecord } from './platform.ts';
import {
  bioSchema,
  displayNameSchema,
  fieldProblems,
  queryBooleanSchema,
  roleSchema,
  settingsSchema,
  unknownKeys,
  userMetadataSchema,
  userNameSchema,
} from './rules.ts';

/** One platform request as the endpoint handlers see it. */
export interface PlatformRequest {
  method: string;
  pathname: string;
  query: Query;
  headers: IncomingHttpHeaders;
  body: Buffer;
  /** Filled by the router: what the request presented where the endpoint reads its credential. */
  credential: CredentialUse | null;
}

const SSO_HEADER = 'x-svc-sso-access-token';

/** Where an endpoint reads its credential, as the spec's Authentication table states. */
interface CredentialSpec {
  kind: CredentialKind;
  location: CredentialLocation;
  name: string;
}

const SSO_IN_QUERY: CredentialSpec = { kind: 'sso_access_token', location: 'query', name: 'access_token' };
const SSO_IN_HEADER: CredentialSpec = { kind: 'sso_access_token', location: 'header', name: SSO_HEADER };
const EXPORT_IN_BODY: CredentialSpec = { kind: 'export_token', location: 'body', name: 'access_token' };
const EXPORT_IN_QUERY: CredentialSpec = { kind: 'export_token', location: 'query', name: 'access_token' };
const EXPORT_IN_HEADER: CredentialSpec = { kind: 'export_token', location: 'header', name: 'apikey' };

type Handler = (emulator: Emulator, request: PlatformRequest, parameter: string) => Reply;

interface Route {
  pattern: RegExp;
  methods: Record<string, { credential: CredentialSpec | null; handle: Handler }>;
}

const ROUTES: Route[] = [
  {
    pattern: /^\/sso\/v1\/register-user$/,
    methods: { GET: { credential: SSO_IN_QUERY, handle: registerUser } },
  },
  { pattern: /^\/sso\/v1\/user$/, methods: { POST: { credential: SSO_IN_HEADER, handle: createUser } } },
  {
    pattern: /^\/sso\/v1\/user\/([^/]+)$/,
    methods: {
      GET: { credential: SSO_IN_HEADER, handle: retrieveUser },
      DELETE: { credential: SSO_IN_HEADER, handle: deleteUser },
    },
  },
  {
    pattern: /^\/sso\/v1\/update-user$/,
    methods: { GET: { credential: SSO_IN_HEADER, handle: updateUser } },
  },
  { pattern: /^\/gdpr\/export$/, methods: { POST: { credential: EXPORT_IN_BODY, handle: startExport } } },
  {
    pattern: /^\/gdpr\/export\/status\/([^/]+)$/,
    methods: { GET: { credential: EXPORT_IN_QUERY, handle: exportStatus } },
  },
  {
    pattern: /^\/v1\/user\/activity$/,
    methods: { POST: { credential: EXPORT_IN_HEADER, handle: userActivity } },
  },
  {
    pattern: /^\/_downloads\/([^/]+)\.zip$/,
    methods: { GET: { credential: null, handle: download }, HEAD: { credential: null, handle: download } },
  },
];

type Matched =
  | { ok: true; handle: Handler; credential: CredentialSpec | null; parameter: string }
  | { ok: false; reply: Reply };

function matchRoute(method: string, pathname: string): Matched {
  for (const route of ROUTES) {
    const match = route.pattern.exec(pathname);
    if (!match) continue;
    const endpoint = route.methods[method];
    if (!endpoint) {
      const allowed = Object.keys(route.methods).join(', ');
      return {
        ok: false,
        reply: json(
          405,
          { success: false, error: { code: 'method_not_allowed', message: `use ${allowed}` } },
          { Allow: allowed },
        ),
      };
    }
    try {
      return { ok: true, ...endpoint, parameter: decodeURIComponent(match[1] ?? '') };
    } catch {
      return {
        ok: false,
        reply: failure(400, 'invalid_path', 'the path segment is not valid percent-encoding'),
      };
    }
  }
  return { ok: false, reply: failure(404, 'not_found', 'no such endpoint') };
}

/**
 * Routes a platform request to its endpoint. The credential is checked first, where the spec puts
 * it: absent is 401, anything but the expected token is 403.
 */
export function handlePlatformRequest(emulator: Emulator, request: PlatformRequest): Reply {
  const matched = matchRoute(request.method, request.pathname);
  if (!matched.ok) return matched.reply;
  if (matched.credential) {
    if (matched.credential.location === 'body') {
      const body = jsonBody(request);
      if (!body.ok) return body.reply;
    }
    const use = presentedCredential(emulator, request, matched.credential);
    request.credential = use;
    const label = use.expected === 'sso_access_token' ? 'SSO access token' : 'export token';
    const where = `${use.location} ${use.name}`;
    if (!use.present) return failure(401, 'missing_token', `the ${label} is required in ${where}`);
    if (!use.valid) return failure(403, 'invalid_token', `the ${label} in ${where} is not valid`);
  }
  return matched.handle(emulator, request, matched.parameter);
}

/** What the request presents where its endpoint reads the credential; for the call log of faulted calls. */
export function credentialFor(emulator: Emulator, request: PlatformRequest): CredentialUse | null {
  const matched = matchRoute(request.method, request.pathname);
  return matched.ok && matched.credential ? presentedCredential(emulator, request, matched.credential) : null;
}

// ---------------------------------------------------------------- credentials

function sameSecret(presented: string, expected: string): boolean {
  const digest = (value: string) => createHash('sha256').update(value).digest();
  return timingSafeEqual(digest(presented), digest(expected));
}

function kindOf(emulator: Emulator, value: string): CredentialKind | 'unknown' {
  if (sameSecret(value, emulator.ssoAccessToken)) return 'sso_access_token';
  if (sameSecret(value, emulator.exportToken)) return 'export_token';
  return 'unknown';
}

function presentedCredential(
  emulator: Emulator,
  request: PlatformRequest,
  spec: CredentialSpec,
): CredentialUse {
  let value: unknown;
  if (spec.location === 'header') value = request.headers[spec.name];
  else if (spec.location === 'query') value = request.query.values.get(spec.name);
  else {
    const body = parseJsonObject(request.body);
    value = body.ok ? body.value[spec.name] : undefined;
  }
  const presented = typeof value === 'string' && value !== '' ? value : null;
  const present = presented !== null;
  const kind = presented === null ? 'none' : kindOf(emulator, presented);
  return {
    kind,
    expected: spec.kind,
    location: spec.location,
    name: spec.name,
    present,
    valid: kind === spec.kind,
  };
}

/** Known tokens found anywhere the endpoint does not read them from (URLs, other headers, body). */
export function strayCredentials(emulator: Emulator, request: PlatformRequest): StrayCredential[] {
  const tokens: [CredentialKind, string][] = [
    ['sso_access_token', emulator.ssoAccessToken],
    ['export_token', emulator.exportToken],
  ];
  const places: { location: CredentialLocation; name: string; value: string }[] = [];
  for (const [name, value] of Object.entries(request.headers)) {
    for (const item of Array.isArray(value) ? value : [value ?? ''])
      places.push({ location: 'header', name, value: item });
  }
  for (const [name, value] of request.query.values) places.push({ location: 'query', name, value });
  const body = parseJsonObject(request.body);
  if (body.ok) {
    for (const [name, value] of Object.entries(body.value)) {
      if (typeof value === 'string') places.push({ location: 'body', name, value });
    }
  }
  const strays: StrayCredential[] = [];
  for (const place of places) {
    const expectedHere =
      request.credential !== null &&
      request.credential.location === place.location &&
      request.credential.name === place.name;
    if (expectedHere) continue;
    for (const [kind, token] of tokens) {
      if (token !== '' && place.value.includes(token))
        strays.push({ kind, location: place.location, name: place.name });
    }
  }
  return strays;
}

// ---------------------------------------------------------------- request parsing

type JsonObject = { ok: true; value: Record<string, unknown> } | { ok: false; reply: Reply };

function parseJsonObject(body: Buffer): JsonObject {
  if (body.length === 0) return { ok: true, value: {} };
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    return { ok: false, reply: failure(400, 'invalid_json', 'the request body is not valid JSON') };
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    return { ok: false, reply: failure(400, 'invalid_json', 'the request body must be a JSON object') };
  }
  return { ok: true, value: Object.fromEntries(Object.entries(parsed)) };
}

function jsonBody(request: PlatformRequest): JsonObject {
  const contentType = request.headers['content-type'];
  if (request.body.length > 0 && contentType !== undefined && !/\bjson\b/i.test(contentType)) {
    return {
      ok: false,
      reply: failure(
        415,
        'unsupported_media_type',
        'send the body as JSON with Content-Type: application/json',
      ),
    };
  }
  return parseJsonObject(request.body);
}

function firstProblem(issues: readonly z.core.$ZodIssue[]): Reply {
  const [problem] = fieldProblems(issues);
  return problem
    ? invalidField(problem.field, problem.message)
    : failure(400, 'invalid_request', 'invalid request');
}

const identifier = z.string().min(1, { error: 'must not be empty' });

const userQueryShape = {
  primary_key: identifier,
  user_name: userNameSchema.optional(),
  display_name: displayNameSchema.optional(),
  email: z.string().optional(),
  email_verified: queryBooleanSchema.optional(),
  image_url: z.string().optional(),
  location: z.string().optional(),
  private_profile: queryBooleanSchema.optional(),
  user_metadata: userMetadataSchema.optional(),
};

const userBodyShape = {
  bio: bioSchema.optional(),
  role: roleSchema.optional(),
  settings: settingsSchema.optional(),
};
const userBodySchema = z.strictObject(userBodyShape, {
  error: unknownKeys(Object.keys(userBodyShape), 'unknown body field (user fields go in the query string)'),
});

type UserRequest = { ok: true; primaryKey: string; fields: UserFields } | { ok: false; reply: Reply };

/**
 * Validates the user fields of endpoints 1, 2 and 4: profile fields in the query, bio, role and
 * settings in a JSON body. Query parameters the endpoint does not define are refused, so that a
 * field sent in the wrong place is not silently dropped.
 */
function parseUserRequest(
  request: PlatformRequest,
  endpointParameters: string[],
  userNameRequired: boolean,
): UserRequest {
  if (request.query.duplicate !== null) {
    return { ok: false, reply: invalidField(request.query.duplicate, 'must be sent once') };
  }
  const allowed = [...endpointParameters, ...Object.keys(userQueryShape)];
  const shape = userNameRequired ? { ...userQueryShape, user_name: userNameSchema } : userQueryShape;
  const querySchema = z.strictObject(shape, {
    error: unknownKeys(allowed, 'unknown query parameter'),
  });
  const queryFields = Object.fromEntries(
    [...request.query.values].filter(([key]) => !endpointParameters.includes(key)),
  );
  const query = querySchema.safeParse(queryFields);
  if (!query.success) return { ok: false, reply: firstProblem(query.error.issues) };
  const body = jsonBody(request);
  if (!body.ok) return body;
  const parsedBody = userBodySchema.safeParse(body.value);
  if (!parsedBody.success) return { ok: false, reply: firstProblem(parsedBody.error.issues) };
  const { primary_key: primaryKey, ...profile } = query.data;
  return { ok: true, primaryKey, fields: { ...profile, ...parsedBody.data } };
}

/** The documented retrieval shape. */
function retrievalUser(user: UserRecord): Record<string, unknown> {
  return {
    primary_key: user.primaryKey,
    svc_user_id: user.svcUserId,
    user_name: user.userName,
    display_name: user.displayName,
    bio: user.bio,
    role: user.role,
    location: user.location ?? '',
    private_profile: user.privateProfile,
    image_url: user.imageUrl ?? '',
    email: user.email ?? '',
    email_verified: user.emailVerified,
    legacy_user_id: null,
    user_metadata: { ...user.userMetadata },
    settings: { notifications: { email: { ...user.settings.email }, in_app: { ...user.settings.in_app } } },
  };
}

function checkSpot(emulator: Emulator, field: string, value: unknown): Reply | null {
  if (typeof value !== 'string' || value === '')
    return invalidField(field, 'is required (the account spot_id)');
  if (value !== emulator.spotId)
    return failure(403, 'invalid_spot_id', `${field} does not match this account`);
  return null;
}

// ---------------------------------------------------------------- endpoints 1 to 5: SSO users

function registerUser(emulator: Emulator, request: PlatformRequest): Reply {
  const codeA = request.query.values.get('code_a');
  if (codeA === undefined || codeA === '')
    return invalidField('code_a', 'is required (the session code from startSSO)');
  const parsed = parseUserRequest(request, ['access_token', 'code_a'], false);
  if (!parsed.ok) return parsed.reply;
  const existing = emulator.data.userByPrimaryKey(parsed.primaryKey);
  if (existing) emulator.data.updateUser(existing, parsed.fields);
  else emulator.data.createUser(parsed.primaryKey, parsed.fields);
  const codeB = createHash('sha256')
    .update(`code_b\u0000${codeA}\u0000${emulator.now()}`)
    .digest('hex')
    .slice(0, 32);
  return { kind: 'text', status: 200, body: codeB };
}

function createUser(emulator: Emulator, request: PlatformRequest): Reply {
  const spotRefused = checkSpot(emulator, 'spot_id', request.query.values.get('spot_id'));
  if (spotRefused) return spotRefused;
  const parsed = parseUserRequest(request, ['spot_id'], false);
  if (!parsed.ok) return parsed.reply;
  if (emulator.data.userByPrimaryKey(parsed.primaryKey)) {
    return failure(409, 'user_exists', 'a user with this primary_key exists; use update-user');
  }
  const user = emulator.data.createUser(parsed.primaryKey, parsed.fields);
  return json(200, { success: true, user: retrievalUser(user) });
}

function retrieveUser(emulator: Emulator, _request: PlatformRequest, primaryKey: string): Reply {
  const user = emulator.data.userByPrimaryKey(primaryKey);
  if (!user) return json(404, { success: false });
  return json(200, { success: true, user: retrievalUser(user) });
}

function updateUser(emulator: Emulator, request: PlatformRequest): Reply {
  const parsed = parseUserRequest(request, [], true);
  if (!parsed.ok) return parsed.reply;
  const user = emulator.data.userByPrimaryKey(parsed.primaryKey);
  if (!user) return failure(404, 'user_not_found', 'no user with this primary_key');
  emulator.data.replaceUser(user, parsed.fields);
  return json(200, { success: true, user: retrievalUser(user) });
}

function deleteUser(emulator: Emulator, _request: PlatformRequest, primaryKey: string): Reply {
  const user = emulator.data.userByPrimaryKey(primaryKey);
  if (!user) return json(404, { success: false });
  emulator.deleteUser(user);
  return json(200, { success: true });
}

// ---------------------------------------------------------------- endpoints 6 and 7: export

const exportBodySchema = z.strictObject(
  { access_token: z.unknown(), spot_id: z.unknown(), user_id: identifier },
  { error: unknownKeys(['access_token', 'spot_id', 'user_id']) },
);

function startExport(emulator: Emulator, request: PlatformRequest): Reply {
  const body = jsonBody(request);
  if (!body.ok) return body.reply;
  const spotRefused = checkSpot(emulator, 'spot_id', body.value.spot_id);
  if (spotRefused) return spotRefused;
  const parsed = exportBodySchema.safeParse(body.value);
  if (!parsed.success) return firstProblem(parsed.error.issues);
  const user = emulator.data.users.get(parsed.data.user_id);
  if (!user) return failure(404, 'user_not_found', 'no user with this user_id (the svc_user_id)');
  if (!emulator.exportAllowed()) {
    emulator.limits.countThrottle('open_exports');
    return tooManyRequests(
      'too many open exports: download, or wait for, the exports already started (rate_limit.max_open_exports)',
      emulator.faults.retry_after_seconds,
      'open_exports',
      'too_many_open_exports',
    );
  }
  const record = emulator.startExport(user);
  return json(200, record.idBody);
}

function exportStatus(emulator: Emulator, request: PlatformRequest, exportId: string): Reply {
  const spotRefused = checkSpot(emulator, 'spot_id', request.query.values.get('spot_id'));
  if (spotRefused) return spotRefused;
  const record = emulator.findExport(exportId);
  if (!record) return failure(404, 'export_not_found', 'no export with this id');
  return json(200, emulator.pollExport(record));
}

function download(emulator: Emulator, request: PlatformRequest, token: string): Reply {
  const record = emulator.findDownload(token);
  if (!record) return failure(404, 'link_not_found', 'no export archive at this link');
  const archive = exportArchive(record);
  if (archive === undefined || (record.linkExpiresAt !== null && emulator.now() >= record.linkExpiresAt)) {
    return failure(410, 'link_expired', 'this download link has expired; start a new export');
  }
  return { kind: 'download', record, archive, head: request.method === 'HEAD' };
}

// ---------------------------------------------------------------- endpoint 8: activity

const MAX_ACTIVITY_COUNT = 100;
const activityBodySchema = z.strictObject(
  {
    profile_user_id: identifier,
    count: z
      .number()
      .int({ error: 'must be a whole number' })
      .min(1, { error: 'must be at least 1' })
      .max(MAX_ACTIVITY_COUNT, { error: `must be at most ${MAX_ACTIVITY_COUNT}` })
      .default(10),
    offset: z
      .number()
      .int({ error: 'must be a whole number' })
      .min(0, { error: 'must not be negative' })
      .default(0),
    primary_key: z.string().optional(),
  },
  { error: unknownKeys(['profile_user_id', 'count', 'offset', 'primary_key']) },
);

function userActivity(emulator: Emulator, request: PlatformRequest): Reply {
  const spotRefused = checkSpot(emulator, 'x-spot-id', request.headers['x-spot-id']);
  if (spotRefused) return spotRefused;
  if (!emulator.activityEnabled) {
    return failure(403, 'activity_not_enabled', 'the user activity call is not enabled for this account');
  }
  if (!/\bjson\b/i.test(request.headers['content-type'] ?? '')) {
    return failure(415, 'unsupported_media_type', 'send Content-Type: application/json');
  }
  const body = jsonBody(request);
  if (!body.ok) return body.reply;
  const parsed = activityBodySchema.safeParse(body.value);
  if (!parsed.success) return firstProblem(parsed.error.issues);
  const user = emulator.data.users.get(parsed.data.profile_user_id);
  if (!user) return failure(404, 'user_not_found', 'no user with this profile_user_id (the svc_user_id)');
  return json(200, activityPage(emulator.data, user, parsed.data.count, parsed.data.offset));
}
