/**
 * dynalite with whole index keys. dynalite 4.0.0 files each secondary index entry under the item's
 * index key values followed by only six hex digits of an MD5 of the item's table key
 * (`createIndexKey` in dynalite/db/index.js). Two items with the same index key values (an open
 * shard and a due date: requests received on the same day share one) whose digests share those six
 * digits get one entry between them: the later write replaces the earlier item's entry, and when
 * either item later leaves the index, the delete takes the other's. With 10,000 requests of one due
 * date about three such pairs are expected, and `list`, the deadline sweep and the reconciler no
 * longer see those requests, though the items themselves are intact.
 *
 * This module ends each index entry's key with the item's whole table key instead, so every item
 * has an entry of its own. dynalite's actions reach the index code through its `db` module's
 * exports, so replacing `updateIndexes` (which files entries) and `createIndexKey` (which turns an
 * ExclusiveStartKey into a position) there covers PutItem, UpdateItem, DeleteItem, BatchWriteItem,
 * Query and Scan. A LevelDB store written before this has its index entries rebuilt from its items
 * once, when it is opened, before the server listens.
 */
import { Server } from 'node:http';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { z } from 'zod';
import { ConfigurationError } from '../../lambdas/shared/errors.ts';

/** dynalite's options (see its index.js). */
export interface DynaliteOptions {
  /** LevelDB directory; in memory when omitted. */
  readonly path?: string;
  readonly createTableMs?: number;
  readonly deleteTableMs?: number;
  readonly updateTableMs?: number;
}

/** A dynalite server, and when its store is ready to serve (its index entries rebuilt if needed). */
export interface Dynalite {
  readonly server: Server;
  readonly ready: Promise<void>;
}

/** The parts of dynalite's internals this module uses, as found at run time. */
const keySchema = z.array(z.looseObject({ AttributeName: z.string() }));
const indexSchema = z.looseObject({
  IndexName: z.string(),
  KeySchema: keySchema,
  Projection: z.looseObject({
    ProjectionType: z.string().optional(),
    NonKeyAttributes: z.array(z.string()).optional(),
  }),
});
/** A table as dynalite keeps its description. */
const tableSchema = z.looseObject({
  TableName: z.string(),
  KeySchema: keySchema,
  LocalSecondaryIndexes: z.array(indexSchema).optional(),
  GlobalSecondaryIndexes: z.array(indexSchema).optional(),
});
const itemSchema = z.record(z.string(), z.unknown());
type KeyPart = z.infer<typeof keySchema>[number];
type IndexDescription = z.infer<typeof indexSchema>;
type TableDescription = z.infer<typeof tableSchema>;
type Item = z.infer<typeof itemSchema>;
type Callback = (error?: unknown) => void;
interface SubDb {
  batch(operations: readonly BatchOperation[], callback: Callback): void;
  createKeyStream(): AsyncIterable<string>;
  createValueStream(options?: object): AsyncIterable<unknown>;
}
type BatchOperation = { type: 'del'; key: string } | { type: 'put'; key: string; value: Item };
interface Store {
  readonly db: {
    get(key: string, callback: (error: unknown, value?: unknown) => void): void;
    put(key: string, value: unknown, callback: Callback): void;
  };
  readonly tableDb: SubDb;
  getItemDb(table: string): SubDb;
  getIndexDb(type: 'Local' | 'Global', table: string, index: string): SubDb;
}
interface DynaliteDb {
  create(options: DynaliteOptions): Store;
  createKey(item: Item, table: TableDescription, keySchema?: readonly KeyPart[]): string;
  createIndexKey(item: Item, table: TableDescription, keySchema: readonly KeyPart[]): string;
  updateIndexes(
    store: Store,
    table: TableDescription,
    existing: Item | null | undefined,
    item: Item | null | undefined,
    callback: Callback,
  ): void;
}

const requireHere = createRequire(import.meta.url);
/** The dynalite whose internals this module was written against (package.json pins it). */
const DYNALITE_VERSION = '4.0.0';
const INDEX_TYPES = ['Local', 'Global'] as const;
/** A key of dynalite's LevelDB outside every range it uses: set once the index entries have whole keys. */
const WHOLE_INDEX_KEYS_MARKER = 'svc-dsr~whole-index-keys';

let patched: DynaliteDb | undefined;
/** The store the last `create` made: dynalite's server factory keeps it to itself. */
let lastStore: Store | undefined;

/** Starts dynalite (not listening yet) with whole index keys; wait for `ready` before `listen`. */
export function createDynalite(options: DynaliteOptions): Dynalite {
  const db = patchDynalite();
  const dynalite: unknown = requireHere('dynalite');
  if (typeof dynalite !== 'function') {
    throw new ConfigurationError(
      'The dynalite package did not export a server factory; reinstall dependencies',
    );
  }
  lastStore = undefined;
  const server: unknown = dynalite(options);
  const store = lastStore;
  if (!(server instanceof Server) || store === undefined) {
    throw new ConfigurationError('dynalite did not return an HTTP server; reinstall dependencies');
  }
  return { server, ready: options.path === undefined ? Promise.resolve() : rebuildOnce(db, store) };
}

/** Replaces dynalite's index key functions (once per process) and answers its `db` module. */
export function patchDynalite(): DynaliteDb {
  if (patched !== undefined) return patched;
  const root = dirname(requireHere.resolve('dynalite'));
  const manifest = z.object({ version: z.string() }).safeParse(requireHere(join(root, 'package.json')));
  if (!manifest.success || manifest.data.version !== DYNALITE_VERSION) {
    throw new ConfigurationError(
      `local mode replaces index code of dynalite ${DYNALITE_VERSION}, but ${manifest.success ? manifest.data.version : 'an unknown version'} is installed: run \`npm ci\` (package.json pins ${DYNALITE_VERSION}), or check local/dynalite-index.ts against the new version first`,
    );
  }
  const db: unknown = requireHere(join(root, 'db', 'index.js'));
  if (!isDynaliteDb(db)) {
    throw new ConfigurationError(
      'dynalite/db/index.js does not have the functions local mode replaces (create, createKey, createIndexKey, updateIndexes): keep dynalite at the version package.json names',
    );
  }
  const create = db.create;
  db.create = (options) => {
    const store = create(options);
    lastStore = store;
    return store;
  };
  db.createIndexKey = (item, table, keySchema) => wholeIndexKey(db, item, table, keySchema);
  db.updateIndexes = (store, table, existing, item, callback) => {
    Promise.all(
      INDEX_TYPES.flatMap((type) =>
        (table[`${type}SecondaryIndexes`] ?? []).map((index) => {
          const operations = indexOperations(db, table, index, existing ?? undefined, item ?? undefined);
          const indexDb = store.getIndexDb(type, table.TableName, index.IndexName);
          return operations.length === 0 ? undefined : batch(indexDb, operations);
        }),
      ),
    ).then(() => callback(), callback);
  };
  patched = db;
  return db;
}

/** The index key values, then the item's whole table key. */
function wholeIndexKey(db: DynaliteDb, item: Item, table: TableDescription, keySchema: readonly KeyPart[]) {
  return db.createKey(item, table, keySchema) + db.createKey(item, table);
}

/** What one write does to one index: its old entry removed if the key moved, its new entry put. */
function indexOperations(
  db: DynaliteDb,
  table: TableDescription,
  index: IndexDescription,
  existing: Item | undefined,
  item: Item | undefined,
): BatchOperation[] {
  const indexed = (candidate: Item | undefined): candidate is Item =>
    candidate !== undefined && index.KeySchema.every((key) => candidate[key.AttributeName] != null);
  const operations: BatchOperation[] = [];
  let key: string | undefined;
  if (indexed(item)) {
    const entry = projected(table, index, item);
    key = wholeIndexKey(db, entry, table, index.KeySchema);
    operations.push({ type: 'put', key, value: entry });
  }
  if (indexed(existing)) {
    const existingKey = wholeIndexKey(db, existing, table, index.KeySchema);
    if (existingKey !== key) operations.unshift({ type: 'del', key: existingKey });
  }
  return operations;
}

/** The attributes an index entry keeps, as dynalite projects them. */
function projected(table: TableDescription, index: IndexDescription, item: Item): Item {
  if (index.Projection.ProjectionType === 'ALL') return item;
  const names = [
    ...index.KeySchema.map((key) => key.AttributeName),
    ...table.KeySchema.map((key) => key.AttributeName),
    ...(index.Projection.NonKeyAttributes ?? []),
  ];
  const entry: Item = Object.create(null);
  for (const name of names) entry[name] = item[name];
  return entry;
}

function batch(subDb: SubDb, operations: readonly BatchOperation[]): Promise<void> {
  return new Promise((resolve, reject) =>
    subDb.batch(operations, (error) => (error ? reject(error) : resolve())),
  );
}

/**
 * Rebuilds every index of every table from the items, unless the store says it was done: index
 * entries filed under short keys would otherwise never be removed. Safe to repeat after a kill.
 */
async function rebuildOnce(db: DynaliteDb, store: Store): Promise<void> {
  const marker = await new Promise<unknown>((resolve, reject) =>
    store.db.get(WHOLE_INDEX_KEYS_MARKER, (error, value) => (error ? reject(error) : resolve(value))),
  );
  if (marker === true) return;
  for await (const value of store.tableDb.createValueStream()) {
    const table = tableSchema.parse(value);
    for (const type of INDEX_TYPES) {
      for (const index of table[`${type}SecondaryIndexes`] ?? []) {
        const indexDb = store.getIndexDb(type, table.TableName, index.IndexName);
        const stale: BatchOperation[] = [];
        for await (const key of indexDb.createKeyStream()) stale.push({ type: 'del', key });
        if (stale.length > 0) await batch(indexDb, stale);
        const fresh: BatchOperation[] = [];
        for await (const item of store.getItemDb(table.TableName).createValueStream()) {
          fresh.push(...indexOperations(db, table, index, undefined, itemSchema.parse(item)));
          if (fresh.length >= 1000) await batch(indexDb, fresh.splice(0));
        }
        if (fresh.length > 0) await batch(indexDb, fresh);
      }
    }
  }
  await new Promise<void>((resolve, reject) =>
    store.db.put(WHOLE_INDEX_KEYS_MARKER, true, (error) => (error ? reject(error) : resolve())),
  );
}

function isDynaliteDb(db: unknown): db is DynaliteDb {
  if (typeof db !== 'object' || db === null) return false;
  const functions = ['create', 'createKey', 'createIndexKey', 'updateIndexes'];
  return functions.every((name) => typeof (db as Record<string, unknown>)[name] === 'function');
}
