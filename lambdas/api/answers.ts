// The API's answers: JSON that no browser or proxy keeps, and its one error shape.
/** One answer of the API, as an HTTP API (payload 2.0) function returns it. */
export interface ApiResponse {
  readonly statusCode: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

/** Every answer: JSON, never kept by a browser or a proxy. */
export const API_HEADERS = { 'content-type': 'application/json', 'cache-control': 'no-store' } as const;

export function answer(statusCode: number, body: unknown): ApiResponse {
  return { statusCode, headers: API_HEADERS, body: JSON.stringify(body) };
}

export function failure(statusCode: number, code: string, message: string): ApiResponse {
  return answer(statusCode, { error: { code, message } });
}

/** A refusal a route gives: its status, its code (the CLI's) and the sentence that says the fix. */
export class ApiFailure extends Error {
  override readonly name = 'ApiFailure';
  constructor(
    readonly statusCode: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** The first issue of a zod error as `field: message`, never quoting the value. */
export function firstIssue(
  issues: readonly { path: PropertyKey[]; message: string }[],
  whole: string,
): string {
  const issue = issues[0];
  const where = issue?.path.map(String).join('.') ?? '';
  return `${where === '' ? whole : where}: ${issue?.message ?? 'invalid'}`;
}
