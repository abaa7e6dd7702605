import { describe, expect, it } from 'vitest';
import { InvalidArchiveError } from '#shared/errors';
import { JsonArrayScanner, jsonArrayItems } from '../../../../lambdas/build-package/json-array-stream.ts';

/** The bytes cut into chunks of `size`, as a stream delivers them (UTF-8 sequences cut too). */
async function* chunked(bytes: Buffer, size: number): AsyncGenerator<Buffer> {
  for (let offset = 0; offset < bytes.length; offset += size) yield bytes.subarray(offset, offset + size);
}

async function itemsOf(
  text: string,
  size = 7,
  scanner = new JsonArrayScanner('test.json'),
): Promise<unknown[]> {
  const out: unknown[] = [];
  for await (const item of jsonArrayItems(chunked(Buffer.from(text, 'utf8'), size), scanner)) out.push(item);
  return out;
}

describe('JsonArrayScanner', () => {
  it('reads every item as JSON.parse does, whatever the chunk size', async () => {
    const value = [
      { id: 'm1', text: 'brackets ] } [ { and "quotes" and \\ backslashes, commas, inside strings' },
      'plain string, with a comma',
      42,
      -1.5e3,
      null,
      true,
      [1, [2, [3]]],
      { nested: { emoji: '👩🏽‍💻', rtl: 'مرحبا', escape: '\u2028\n\t' } },
      {},
      [],
    ];
    const text = JSON.stringify(value, null, 2);
    for (const size of [1, 2, 3, 7, 64, text.length]) {
      expect(await itemsOf(text, size)).toEqual(value);
    }
  });

  it('reads an empty array and surrounding white space', async () => {
    expect(await itemsOf(' \n[ \n ]\n ')).toEqual([]);
  });

  it('holds one item at most, however long the array: its retained bytes do not grow with the items', async () => {
    const retained = async (items: number) => {
      const scanner = new JsonArrayScanner('messages.json');
      const text = JSON.stringify(
        Array.from({ length: items }, (_, index) => ({ id: `m-${index}`, text: 'x'.repeat(90) })),
      );
      await itemsOf(text, 4096, scanner);
      return { bytes: scanner.maxRetainedBytes, items: scanner.items };
    };

    const small = await retained(100);
    const large = await retained(20_000);

    expect(large.items).toBe(20_000);
    // One item is about 120 bytes: the scanner never held two, let alone the 2.4 MB file.
    expect(large.bytes).toBeLessThan(140);
    expect(large.bytes - small.bytes).toBeLessThanOrEqual(4);
  });

  it('refuses malformed arrays with an InvalidArchiveError naming the file only', async () => {
    const malformed = [
      '',
      '[',
      '[1',
      '[1,',
      '[,1]',
      '[1,,2]',
      '[1 2]',
      '[1]]',
      '["a]',
      '{}',
      'null',
      '[tru]',
      '[1}]',
    ];
    for (const text of malformed) {
      await expect(itemsOf(text), text).rejects.toBeInstanceOf(InvalidArchiveError);
      await expect(itemsOf(text), text).rejects.toThrow(/^test\.json in the archive /);
    }
  });

  it('refuses an item past its size limit before holding more of it', async () => {
    const scanner = new JsonArrayScanner('messages.json', { maxItemBytes: 100 });
    await expect(itemsOf(`["${'a'.repeat(10_000)}"]`, 16, scanner)).rejects.toThrow(
      /holds an item larger than 100 bytes/,
    );
    expect(scanner.maxRetainedBytes).toBeLessThanOrEqual(100 + 16);
  });
});
