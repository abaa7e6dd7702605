/**
 * A zip writer for export archives: entries deflated once into buffers of their exact size, and a
 * plan of headers and entries that the download streams without building the archive in memory.
 */
import * as zlib from 'node:zlib';

/** An entry whose bytes are already in memory (the four JSON files). */
export interface BufferEntry {
  name: string;
  data: Buffer;
}

/**
 * A buffer entry already deflated. An export keeps its entries in this form, so the archive served
 * after a restart is byte-identical even if another zlib version would deflate differently.
 */
export interface DeflatedEntry {
  name: string;
  deflated: Buffer;
  crc32: number;
  /** Uncompressed length in bytes. */
  size: number;
}

/** An entry produced on demand, stored uncompressed so the archive size is known before sending. */
export interface StreamEntry {
  name: string;
  size: number;
  chunks: () => Iterable<Buffer>;
}

export interface ZipPlan {
  /** Exact byte length of the archive, usable as Content-Length before any byte is produced. */
  size: number;
  /** Produces the archive bytes in order; can be called once per download. */
  chunks: () => Generator<Buffer>;
}

/** The largest streamed entry this writer supports: ZIP64 is not needed below 4 GiB. */
export const MAX_STREAM_ENTRY_BYTES = 4_000_000_000;

const LOCAL_HEADER_SIGNATURE = 0x04034b50;
const DATA_DESCRIPTOR_SIGNATURE = 0x08074b50;
const CENTRAL_HEADER_SIGNATURE = 0x02014b50;
const END_OF_CENTRAL_DIRECTORY_SIGNATURE = 0x06054b50;
const FLAG_UTF8_NAME = 0x0800;
const FLAG_DATA_DESCRIPTOR = 0x0008;
const METHOD_STORED = 0;
const METHOD_DEFLATE = 8;
const VERSION_NEEDED = 20;
const VERSION_MADE_BY_UNIX = (3 << 8) | VERSION_NEEDED;
const UNIX_FILE_MODE = 0o100644;
// 2020-01-01 00:00:00 written as raw DOS fields, so the bytes do not depend on the time zone.
const DOS_DATE = ((2020 - 1980) << 9) | (1 << 5) | 1;
const DOS_TIME = 0;

const crc32 = (data: Buffer, previous: number): number => zlib.crc32(data, previous);

interface PreparedEntry {
  name: Buffer;
  method: number;
  flags: number;
  crc: number;
  compressedSize: number;
  uncompressedSize: number;
  data?: Buffer;
  stream?: StreamEntry;
  offset: number;
}

/**
 * Deflates a buffer entry the way planZip does. zlib answers in a buffer of its whole output chunk
 * (16 KiB); an export keeps its entries for as long as its link lasts, so it keeps an exact-size
 * copy instead.
 */
export function deflateEntry(entry: BufferEntry): DeflatedEntry {
  return {
    name: entry.name,
    deflated: exactSize(zlib.deflateRawSync(entry.data, { level: 6 })),
    crc32: crc32(entry.data, 0),
    size: entry.data.length,
  };
}

/**
 * Deflates an entry produced piece by piece, so only its compressed form is ever held whole (an
 * export of a heavy user is a hundred megabytes of JSON, a few of deflate). Each piece is deflated
 * on its own and ended with a sync flush, which leaves it a run of complete, non-final blocks; the
 * runs laid end to end, then a final empty block, are one valid deflate stream. Pieces of a
 * megabyte cost well under 1% of the ratio a single stream would reach.
 */
export function deflatePieces(name: string, pieces: Iterable<string>): DeflatedEntry {
  const compressed: Buffer[] = [];
  let crc = 0;
  let size = 0;
  for (const piece of pieces) {
    const bytes = Buffer.from(piece, 'utf8');
    crc = crc32(bytes, crc);
    size += bytes.length;
    compressed.push(zlib.deflateRawSync(bytes, { level: 6, finishFlush: zlib.constants.Z_SYNC_FLUSH }));
  }
  compressed.push(FINAL_EMPTY_BLOCK);
  return { name, deflated: exactSize(Buffer.concat(compressed)), crc32: crc, size };
}

/** A final deflate block with no data: BFINAL set, fixed codes, end of block. */
const FINAL_EMPTY_BLOCK = Buffer.from([0x03, 0x00]);

/** The bytes in a buffer of their own size, not a view of a larger one. */
export function exactSize(bytes: Buffer): Buffer {
  if (bytes.buffer.byteLength === bytes.length) return bytes;
  const copy = Buffer.allocUnsafeSlow(bytes.length);
  bytes.copy(copy);
  return copy;
}

/** Whether a deflated entry inflates to exactly its recorded size and CRC (a check on loaded data). */
export function entryMatches(entry: DeflatedEntry): boolean {
  try {
    const data = zlib.inflateRawSync(entry.deflated, { maxOutputLength: entry.size + 1 });
    return data.length === entry.size && crc32(data, 0) === entry.crc32;
  } catch {
    return false;
  }
}

/**
 * Plans a deterministic zip: buffer entries are deflated up front (or come deflated); stream
 * entries are stored and followed by a data descriptor, so their CRC is computed while the bytes
 * go out.
 */
export function planZip(buffers: (BufferEntry | DeflatedEntry)[], streams: StreamEntry[] = []): ZipPlan {
  const entries: PreparedEntry[] = [];
  let offset = 0;
  for (const entry of buffers) {
    const deflated = 'deflated' in entry ? entry : deflateEntry(entry);
    const prepared: PreparedEntry = {
      name: Buffer.from(deflated.name, 'utf8'),
      method: METHOD_DEFLATE,
      flags: FLAG_UTF8_NAME,
      crc: deflated.crc32,
      compressedSize: deflated.deflated.length,
      uncompressedSize: deflated.size,
      data: deflated.deflated,
      offset,
    };
    entries.push(prepared);
    offset += 30 + prepared.name.length + deflated.deflated.length;
  }
  for (const entry of streams) {
    if (!Number.isSafeInteger(entry.size) || entry.size < 0 || entry.size > MAX_STREAM_ENTRY_BYTES) {
      throw new RangeError(`zip entry ${entry.name} must be 0..${MAX_STREAM_ENTRY_BYTES} bytes`);
    }
    const prepared: PreparedEntry = {
      name: Buffer.from(entry.name, 'utf8'),
      method: METHOD_STORED,
      flags: FLAG_UTF8_NAME | FLAG_DATA_DESCRIPTOR,
      crc: 0,
      compressedSize: entry.size,
      uncompressedSize: entry.size,
      stream: entry,
      offset,
    };
    entries.push(prepared);
    offset += 30 + prepared.name.length + entry.size + 16;
  }
  const centralDirectorySize = entries.reduce((sum, entry) => sum + 46 + entry.name.length, 0);
  const size = offset + centralDirectorySize + 22;
  if (size > 0xffffffff) throw new RangeError('zip archive would need ZIP64');

  const chunks = function* (): Generator<Buffer> {
    // CRCs of stream entries are filled in as they are produced; keep the plan reusable.
    const crcs = entries.map((entry) => entry.crc);
    for (const [index, entry] of entries.entries()) {
      yield localHeader(entry);
      if (entry.data) {
        yield entry.data;
        continue;
      }
      let crc = 0;
      let produced = 0;
      for (const chunk of entry.stream?.chunks() ?? []) {
        crc = crc32(chunk, crc);
        produced += chunk.length;
        yield chunk;
      }
      if (produced !== entry.uncompressedSize) {
        throw new Error(
          `zip entry ${entry.name.toString()} produced ${produced} bytes, planned ${entry.uncompressedSize}`,
        );
      }
      crcs[index] = crc;
      yield dataDescriptor(crc, entry.uncompressedSize);
    }
    for (const [index, entry] of entries.entries()) {
      yield centralHeader(entry, crcs[index] ?? 0);
    }
    yield endOfCentralDirectory(entries.length, centralDirectorySize, offset);
  };
  return { size, chunks };
}

function localHeader(entry: PreparedEntry): Buffer {
  const header = Buffer.alloc(30 + entry.name.length);
  const deferred = (entry.flags & FLAG_DATA_DESCRIPTOR) !== 0;
  header.writeUInt32LE(LOCAL_HEADER_SIGNATURE, 0);
  header.writeUInt16LE(VERSION_NEEDED, 4);
  header.writeUInt16LE(entry.flags, 6);
  header.writeUInt16LE(entry.method, 8);
  header.writeUInt16LE(DOS_TIME, 10);
  header.writeUInt16LE(DOS_DATE, 12);
  header.writeUInt32LE(deferred ? 0 : entry.crc, 14);
  header.writeUInt32LE(deferred ? 0 : entry.compressedSize, 18);
  header.writeUInt32LE(deferred ? 0 : entry.uncompressedSize, 22);
  header.writeUInt16LE(entry.name.length, 26);
  header.writeUInt16LE(0, 28);
  entry.name.copy(header, 30);
  return header;
}

function dataDescriptor(crc: number, size: number): Buffer {
  const descriptor = Buffer.alloc(16);
  descriptor.writeUInt32LE(DATA_DESCRIPTOR_SIGNATURE, 0);
  descriptor.writeUInt32LE(crc, 4);
  descriptor.writeUInt32LE(size, 8);
  descriptor.writeUInt32LE(size, 12);
  return descriptor;
}

function centralHeader(entry: PreparedEntry, crc: number): Buffer {
  const header = Buffer.alloc(46 + entry.name.length);
  header.writeUInt32LE(CENTRAL_HEADER_SIGNATURE, 0);
  header.writeUInt16LE(VERSION_MADE_BY_UNIX, 4);
  header.writeUInt16LE(VERSION_NEEDED, 6);
  header.writeUInt16LE(entry.flags, 8);
  header.writeUInt16LE(entry.method, 10);
  header.writeUInt16LE(DOS_TIME, 12);
  header.writeUInt16LE(DOS_DATE, 14);
  header.writeUInt32LE(crc, 16);
  header.writeUInt32LE(entry.compressedSize, 20);
  header.writeUInt32LE(entry.uncompressedSize, 24);
  header.writeUInt16LE(entry.name.length, 28);
  header.writeUInt16LE(0, 30);
  header.writeUInt16LE(0, 32);
  header.writeUInt16LE(0, 34);
  header.writeUInt16LE(0, 36);
  header.writeUInt32LE((UNIX_FILE_MODE << 16) >>> 0, 38);
  header.writeUInt32LE(entry.offset, 42);
  entry.name.copy(header, 46);
  return header;
}

function endOfCentralDirectory(
  count: number,
  centralDirectorySize: number,
  centralDirectoryOffset: number,
): Buffer {
  const record = Buffer.alloc(22);
  record.writeUInt32LE(END_OF_CENTRAL_DIRECTORY_SIGNATURE, 0);
  record.writeUInt16LE(0, 4);
  record.writeUInt16LE(0, 6);
  record.writeUInt16LE(count, 8);
  record.writeUInt16LE(count, 10);
  record.writeUInt32LE(centralDirectorySize, 12);
  record.writeUInt32LE(centralDirectoryOffset, 16);
  record.writeUInt16LE(0, 20);
  return record;
}
