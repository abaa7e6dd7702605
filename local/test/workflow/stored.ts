/** What the local archive bucket holds at a key, and a zip's files by name (read with yauzl, as the product reads zips). */
import { GetObjectCommand } from '@aws-sdk/client-s3';
import yauzl from 'yauzl';
import { LOCAL_NAMES } from '#local/runtime/workflow';
import type { Harness } from './harness.ts';

export async function storedObject(h: Harness, key: string): Promise<Buffer> {
  const { Body } = await h.workflow.s3.send(
    new GetObjectCommand({ Bucket: LOCAL_NAMES.archiveBucket, Key: key }),
  );
  return Buffer.from((await Body?.transformToByteArray()) ?? []);
}

export async function zipEntries(zip: Buffer): Promise<Map<string, Buffer>> {
  const file = await yauzl.fromBufferPromise(zip, { lazyEntries: true });
  const entries = new Map<string, Buffer>();
  for await (const entry of file.eachEntry()) {
    const chunks: Buffer[] = [];
    for await (const chunk of await file.openReadStreamPromise(entry)) chunks.push(Buffer.from(chunk));
    entries.set(entry.fileName, Buffer.concat(chunks));
  }
  file.close();
  return entries;
}
