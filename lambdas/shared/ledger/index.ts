/**
 * The request ledger: one DynamoDB item per request, the facts every part of svc-dsr reads and the
 * only place a request's status changes.
 * - schema.ts: the statuses, steps and outcomes, the item's schema and the open-by-due index;
 * - ledger.ts: the `Ledger` class, every read and every conditional write;
 * - key-reads.ts: the primary keys of a page of requests, and how a list masks them;
 * - rules.ts: the operator changes (cancel, deny, notice, extend, retry, minimise) as the
 *   conditions each write carries and the refusals each check gives.
 */
export * from './key-reads.ts';
export * from './ledger.ts';
export * from './open-pages.ts';
export * from './rules.ts';
export * from './schema.ts';
