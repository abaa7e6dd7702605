// Stream helpers for the package: a body counted and hashed as it is read, and a file read line by line.
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { StorageAnswerInvalidError } from '#shared/errors';

/**
 * A body counted and hashed as a store reads it. `result()` answers its bytes and SHA-256 once the
 * store has read it to its end, and throws otherwise: a store that answered before reading the
 * whole body would have a wrong SHA-256 recorded. `what` names the body in that error.
 */
export function measured(
  body: AsyncIterable<Uint8Array>,
  what: string,
): { body: AsyncIterable<Uint8Array>; result(): { bytes: number; sha256: string } } {
  const hash = createHash('sha256');
  let bytes = 0;
  let done = false;
  return {
    body: (async function* () {
      for await (const chunk of body) {
        hash.update(chunk);
        bytes += chunk.byteLength;
        yield chunk;
      }
      done = true;
    })(),
    result() {
      if (!done) throw new StorageAnswerInvalidError(`the store returned before it read the whole ${what}`);
      return { bytes, sha256: hash.digest('hex') };
    },
  };
}

/**
 * The lines of an NDJSON file on local disk, read `chunkBytes` at a time; a record never holds a raw
 * newline (JSON escapes it).
 */
export async function* readLines(file: string, chunkBytes: number): AsyncGenerator<string> {
  const stream = createReadStream(file, { encoding: 'utf8', highWaterMark: chunkBytes });
  let carry = '';
  for await (const chunk of stream as AsyncIterable<string>) {
    const text = carry + chunk;
    let start = 0;
    for (let end = text.indexOf('\n'); end >= 0; end = text.indexOf('\n', start)) {
      yield text.slice(start, end);
      start = end + 1;
    }
    carry = text.slice(start);
  }
  if (carry !== '') yield carry;
}
