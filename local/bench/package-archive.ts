/**
 * The heavy user's export archive written to disk as a stream: messages.json is generated item by
 * item into the zip, so a million comments (about a gigabyte of JSON) never exist in memory at
 * once. The JSON is what `JSON.stringify(value, null, 2)` writes, as the platform's export is.
 */
import { createWriteStream } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import yazl from 'yazl';
import { HEAVY_PROFILE, heavyLikes, heavyMessages } from './heavy-user.ts';

/** A JSON array, pretty-printed, from items produced one at a time, in buffers of about 1 MiB. */
function* prettyArray(items: Iterable<unknown>, counted: { bytes: number }): Generator<Buffer> {
  let pending = '';
  let first = true;
  for (const item of items) {
    pending += `${first ? '[' : ','}\n  ${JSON.stringify(item, null, 2).replaceAll('\n', '\n  ')}`;
    first = false;
    if (pending.length >= 1024 * 1024) {
      const buffer = Buffer.from(pending, 'utf8');
      counted.bytes += buffer.length;
      yield buffer;
      pending = '';
    }
  }
  pending += first ? '[]' : '\n]';
  const buffer = Buffer.from(pending, 'utf8');
  counted.bytes += buffer.length;
  yield buffer;
}

function* ids(count: number): Generator<string> {
  for (let index = 0; index < count; index++) yield `other-${index}`;
}

/** Writes the heavy user's archive to `path`; answers the bytes of JSON it holds and of the zip. */
export async function writeHeavyArchive(
  path: string,
  comments: number,
): Promise<{ jsonBytes: number; archiveBytes: number }> {
  const counted = { bytes: 0 };
  const likes = heavyLikes(comments);
  const zip = new yazl.ZipFile();
  const entry = (name: string, items: Iterable<unknown>) =>
    zip.addReadStreamLazy(name, (callback) => callback(null, Readable.from(prettyArray(items, counted))));
  entry('dislikes.json', ids(Math.floor(likes / 4)));
  entry('likes.json', ids(likes));
  entry('messages.json', heavyMessages(comments));
  const profile = Buffer.from(JSON.stringify(HEAVY_PROFILE, null, 2));
  counted.bytes += profile.length;
  zip.addBuffer(profile, 'profile.json');
  zip.end();
  let archiveBytes = 0;
  await pipeline(
    zip.outputStream,
    async function* (source: AsyncIterable<string | Buffer>) {
      for await (const chunk of source) {
        archiveBytes += chunk.length;
        yield chunk;
      }
    },
    createWriteStream(path),
  );
  return { jsonBytes: counted.bytes, archiveBytes };
}
