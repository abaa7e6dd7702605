import { mkdir, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { join, resolve } from 'node:path';
import { closeServer, listen, trackSockets } from '../http.ts';
import { BUCKETS_DIR, META_DIR, TMP_DIR, UPLOADS_DIR, VERSIONS_DIR } from './s3/limits.ts';
import { handle } from './s3/protocol.ts';
import { DiskStore } from './s3/store.ts';

/** A running disk S3; `close()` stops it and cuts kept-alive connections. */
export interface DiskS3 {
  /** `http://127.0.0.1:<port>`: give it to an S3Client with `forcePathStyle: true`. */
  readonly endpoint: string;
  /** The absolute data folder. */
  readonly root: string;
  close(): Promise<void>;
}

/** Options for {@link startDiskS3}. */
export interface DiskS3Options {
  /** Data folder; created when missing. */
  readonly root: string;
  /** Sees the HTTP server before it listens, to put a wrapper (local mode's AWS throttle) in front of it. */
  readonly wrapServer?: (server: Server) => void;
  /** @default 0 (a free port) */
  readonly port?: number;
  /**
   * Flush each object and its sidecar to the disk (fdatasync) before answering. Without it, a
   * write is still renamed into place whole before the answer, so a killed process never loses
   * or tears an answered write; only a power cut or an operating-system crash can lose the writes
   * of the last seconds, as it can for local mode's ledger (LevelDB does not sync either) and its
   * emulator file. `svc-dsr verify` finds an archive lost that way. The flush costs about 1.5 ms
   * per small object here, a sixth of a PUT and GET through the SDK.
   * @default false
   */
  readonly syncWrites?: boolean;
  /**
   * The stand-in's own clock, which sets every object's LastModified (a writer cannot): tests that
   * play out days pass a clock they advance. @default the real time
   */
  readonly clock?: () => Date;
}

/**
 * Starts the disk S3 on loopback. Leftovers of interrupted writes under `.tmp` are removed;
 * objects, sidecars and unfinished multipart uploads are kept.
 */
export async function startDiskS3(options: DiskS3Options): Promise<DiskS3> {
  const root = resolve(options.root);
  await mkdir(join(root, META_DIR), { recursive: true });
  await mkdir(join(root, UPLOADS_DIR), { recursive: true });
  await mkdir(join(root, BUCKETS_DIR), { recursive: true });
  await mkdir(join(root, VERSIONS_DIR), { recursive: true });
  await rm(join(root, TMP_DIR), { recursive: true, force: true });
  await mkdir(join(root, TMP_DIR), { recursive: true });
  const store = new DiskStore(root, options.syncWrites ?? false, options.clock);
  const server = createServer((req, res) => {
    void handle(store, req, res);
  });
  options.wrapServer?.(server);
  const sockets = trackSockets(server);
  const { endpoint } = await listen(server, options.port ?? 0);
  let closing: Promise<void> | undefined;
  return {
    endpoint,
    root,
    close() {
      closing ??= closeServer(server, sockets).then(() => store.idle());
      return closing;
    },
  };
}
