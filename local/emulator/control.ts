/**
 * In-process twin of the HTTP control API under /_emulator/: the same operations with the same
 * JSON-shaped results, for tests that hold the emulator object.
 */
import type { CallRecord } from './calls.ts';
import type { Emulator } from './emulator.ts';
import type { ResolvedFaults } from './faults.ts';
import { failure, type JsonReply, json } from './http.ts';
import type { PlatformStats } from './limits.ts';
import type { FieldProblem } from './rules.ts';

export type ControlResult<T> = { ok: true; value: T } | { ok: false; problems: FieldProblem[] };

/** The control API's operations as methods, for tests that hold the emulator object. */
export class EmulatorControl {
  constructor(private readonly emulator: Emulator) {}

  reset(): void {
    this.emulator.reset();
  }

  loadState(document: unknown): ControlResult<{ users: number; comments: number }> {
    const outcome = this.emulator.loadState(document);
    if (!outcome.success) return { ok: false, problems: outcome.problems };
    return {
      ok: true,
      value: { users: this.emulator.data.users.size, comments: this.emulator.data.comments.size },
    };
  }

  faults(): ResolvedFaults {
    return structuredClone(this.emulator.faults);
  }

  setFaults(document: unknown): ControlResult<ResolvedFaults> {
    const outcome = this.emulator.setFaults(document);
    return outcome.success
      ? { ok: true, value: structuredClone(outcome.value) }
      : { ok: false, problems: outcome.problems };
  }

  users(): Record<string, unknown>[] {
    return this.emulator.usersView();
  }

  /** A user by primary_key, or by svc_user_id for guests. */
  user(key: string): Record<string, unknown> | undefined {
    const user = this.emulator.findUser(key);
    return user ? this.emulator.userView(user) : undefined;
  }

  comments(): Record<string, unknown>[] {
    return this.emulator.commentsView();
  }

  exports(): Record<string, unknown>[] {
    return this.emulator.exportsView();
  }

  /** undefined: no such export; false: it has no link yet (poll it to completion first). */
  expireExport(id: string): boolean | undefined {
    return this.emulator.expireExport(id);
  }

  calls(): CallRecord[] {
    return this.emulator.callsView().calls;
  }

  clearCalls(): void {
    this.emulator.clearCalls();
  }

  /** The highest request rate and open exports seen, the 429s sent and per-subject counts. */
  stats(): PlatformStats {
    return this.emulator.stats();
  }

  activityEnabled(): boolean {
    return this.emulator.activityEnabled;
  }

  setActivityEnabled(enabled: boolean): void {
    this.emulator.activityEnabled = enabled;
  }
}

function parseJson(body: Buffer): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: body.length === 0 ? {} : JSON.parse(body.toString('utf8')) };
  } catch {
    return { ok: false };
  }
}

const INVALID_JSON = failure(400, 'invalid_json', 'the request body is not valid JSON');

/**
 * Serves /_emulator/* for one site (the server picks it by the `spot_id` query, else the first).
 * No credentials and never faulted: it is the test harness's own door.
 */
export function handleControlRequest(
  emulator: Emulator,
  control: EmulatorControl,
  method: string,
  pathname: string,
  body: Buffer,
  /** Every site the emulator serves, for GET /_emulator/info. */
  sites: readonly Emulator[] = [emulator],
): JsonReply {
  const route = `${method} ${pathname.replace(/\/+$/, '')}`;
  const userMatch = /^GET \/_emulator\/users\/([^/]+)$/.exec(route);
  const expireMatch = /^POST \/_emulator\/exports\/([^/]+)\/expire$/.exec(route);
  const decode = (segment: string | undefined) => {
    try {
      return decodeURIComponent(segment ?? '');
    } catch {
      return '';
    }
  };
  if (userMatch) {
    const user = control.user(decode(userMatch[1]));
    return user
      ? json(200, { user })
      : failure(404, 'user_not_found', 'no user with this primary_key or svc_user_id');
  }
  if (expireMatch) {
    const id = decode(expireMatch[1]);
    const expired = control.expireExport(id);
    if (expired === undefined) return failure(404, 'export_not_found', 'no export with this id');
    if (!expired)
      return failure(409, 'export_has_no_link', 'the export has no link yet; poll it to completion first');
    return json(200, { success: true, export: control.exports().find((item) => item.id === id) });
  }
  switch (route) {
    case 'GET /_emulator':
    case 'GET /_emulator/info':
      return json(200, {
        url: emulator.baseUrl,
        spot_id: emulator.spotId,
        activity_enabled: emulator.activityEnabled,
        sites: sites.map((site) => ({ spot_id: site.spotId, activity_enabled: site.activityEnabled })),
        routes: CONTROL_ROUTES,
      });
    case 'POST /_emulator/reset':
      control.reset();
      return json(200, { success: true });
    case 'POST /_emulator/state': {
      const document = parseJson(body);
      if (!document.ok) return INVALID_JSON;
      const outcome = control.loadState(document.value);
      if (!outcome.ok) {
        return failure(400, 'invalid_state', describe('state document', outcome.problems), {
          problems: outcome.problems,
        });
      }
      return json(200, { success: true, spot_id: emulator.spotId, ...outcome.value });
    }
    case 'GET /_emulator/faults':
      return json(200, control.faults());
    case 'PUT /_emulator/faults': {
      const document = parseJson(body);
      if (!document.ok) return INVALID_JSON;
      const outcome = control.setFaults(document.value);
      if (!outcome.ok) {
        return failure(400, 'invalid_faults', describe('fault profile', outcome.problems), {
          problems: outcome.problems,
        });
      }
      return json(200, outcome.value);
    }
    case 'GET /_emulator/users':
      return json(200, { users: control.users() });
    case 'GET /_emulator/comments':
      return json(200, { comments: control.comments() });
    case 'GET /_emulator/exports':
      return json(200, { exports: control.exports() });
    case 'GET /_emulator/calls':
      return json(200, emulator.callsView());
    case 'DELETE /_emulator/calls':
      control.clearCalls();
      return json(200, { success: true });
    case 'GET /_emulator/stats':
      return json(200, control.stats());
    case 'GET /_emulator/activity':
      return json(200, { enabled: control.activityEnabled() });
    case 'PUT /_emulator/activity': {
      const document = parseJson(body);
      if (!document.ok) return INVALID_JSON;
      const enabled =
        typeof document.value === 'object' && document.value !== null
          ? Reflect.get(document.value, 'enabled')
          : undefined;
      if (typeof enabled !== 'boolean') {
        return failure(400, 'invalid_field', 'enabled: must be a boolean', { field: 'enabled' });
      }
      control.setActivityEnabled(enabled);
      return json(200, { enabled });
    }
    default:
      return failure(404, 'not_found', 'no such control route; GET /_emulator/info lists them', {
        routes: CONTROL_ROUTES,
      });
  }
}

function describe(what: string, problems: FieldProblem[]): string {
  return `invalid ${what}: ${problems.map((problem) => `${problem.field}: ${problem.message}`).join('; ')}`;
}

export const CONTROL_ROUTES = [
  'GET /_emulator/info',
  'POST /_emulator/reset',
  'POST /_emulator/state',
  'GET /_emulator/faults',
  'PUT /_emulator/faults',
  'GET /_emulator/users',
  'GET /_emulator/users/{primary_key or svc_user_id}',
  'GET /_emulator/comments',
  'GET /_emulator/exports',
  'POST /_emulator/exports/{id}/expire',
  'GET /_emulator/calls',
  'DELETE /_emulator/calls',
  'GET /_emulator/stats',
  'GET /_emulator/activity',
  'PUT /_emulator/activity',
];
