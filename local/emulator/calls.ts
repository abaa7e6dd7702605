/**
 * The log of every platform request the emulator answered: what was asked, what came back, which
 * fault it drew and which credential it presented (never the credential's value), for tests and for
 * GET /_emulator/calls.
 */
import type { FaultKind, LimitAnswer } from './faults.ts';

/** The call log keeps this many entries; older ones are dropped and counted. */
export const MAX_CALLS = 10_000;

export type CredentialKind = 'sso_access_token' | 'export_token';
export type CredentialLocation = 'header' | 'query' | 'body';

/** What a request presented where its endpoint expects a credential. Never holds the value. */
export interface CredentialUse {
  /** The credential the value matched: the expected one, the other one, unknown, or none (absent). */
  kind: CredentialKind | 'unknown' | 'none';
  expected: CredentialKind;
  location: CredentialLocation;
  name: string;
  present: boolean;
  valid: boolean;
}

/** A known token found somewhere its endpoint does not read it from, e.g. in a URL. */
export interface StrayCredential {
  kind: CredentialKind;
  location: CredentialLocation;
  name: string;
}

export type InjectedFault = FaultKind | LimitAnswer | 'truncate';

export interface CallRecord {
  seq: number;
  at: string;
  method: string;
  path: string;
  status: number | null;
  fault: InjectedFault | null;
  credential: CredentialUse | null;
  stray_credentials: StrayCredential[];
  duration_ms: number;
}

/** A call log as a snapshot saves it. */
export interface SavedCalls {
  callCounter: number;
  droppedCalls: number;
  calls: CallRecord[];
}

/**
 * The last MAX_CALLS calls, numbered from 1 since the last reset, with a count of the older ones
 * dropped. Each entry's snapshot JSON is encoded once, when it is logged: entries never change.
 */
export class CallLog {
  private calls: CallRecord[] = [];
  /** The log as snapshot JSON, without its brackets. */
  private readonly callBytes = new JsonListBytes();
  private callCounter = 0;
  private droppedCalls = 0;

  /** An empty log, or the log a snapshot saved, numbering on from where it was. */
  constructor(saved?: SavedCalls) {
    if (saved === undefined) return;
    this.calls = saved.calls.map((call) => structuredClone(call));
    for (const call of this.calls) this.callBytes.push(JSON.stringify(call));
    this.callCounter = saved.callCounter;
    this.droppedCalls = saved.droppedCalls;
  }

  /** Appends a call under the next number, dropping the oldest beyond MAX_CALLS. */
  record(call: Omit<CallRecord, 'seq'>): void {
    this.callCounter += 1;
    const entry = { seq: this.callCounter, ...call };
    this.calls.push(entry);
    this.callBytes.push(JSON.stringify(entry));
    if (this.calls.length > MAX_CALLS) {
      this.calls.shift();
      this.callBytes.shift();
      this.droppedCalls += 1;
    }
  }

  /** A copy of the log and how many calls it dropped, for the control API. */
  view(): { calls: CallRecord[]; dropped: number } {
    return { calls: this.calls.map((call) => structuredClone(call)), dropped: this.droppedCalls };
  }

  /** Empties the log; numbering goes on from the last call. */
  clear(): void {
    this.calls = [];
    this.callBytes.clear();
    this.droppedCalls = 0;
  }

  /** The log as a snapshot holds it; the entries are the log's own, so serialise it before the next call. */
  toSnapshot(): SavedCalls {
    return { callCounter: this.callCounter, droppedCalls: this.droppedCalls, calls: this.calls };
  }

  /**
   * The text of toSnapshot()'s keys, as JSON.stringify writes them but without the braces, in
   * pieces for one Buffer.concat: the entries come from bytes kept since each call was logged.
   */
  snapshotParts(): Uint8Array[] {
    return [
      Buffer.from(`"callCounter":${this.callCounter},"droppedCalls":${this.droppedCalls},"calls":[`),
      this.callBytes.bytes(),
      Buffer.from(']'),
    ];
  }
}

/**
 * The JSON text of a list that grows at its end and loses entries at its start (the call log),
 * kept in one buffer: a snapshot then copies it in one piece, and no entry is encoded twice.
 */
export class JsonListBytes {
  private buffer = Buffer.alloc(0);
  private end = 0;
  /** Where each entry's JSON starts (after its comma). */
  private offsets: number[] = [];

  /** Appends an entry, given as its JSON text. */
  push(json: string): void {
    const separator = this.offsets.length > 0 ? 1 : 0;
    const length = Buffer.byteLength(json);
    if (this.end + separator + length > this.buffer.length) this.grow(separator + length);
    if (separator) this.buffer[this.end++] = 0x2c;
    this.offsets.push(this.end);
    this.end += this.buffer.write(json, this.end);
  }

  /** Drops the oldest entry. */
  shift(): void {
    this.offsets.shift();
  }

  clear(): void {
    this.buffer = Buffer.alloc(0);
    this.end = 0;
    this.offsets = [];
  }

  /** The entries, comma-separated, without brackets; later pushes never change these bytes. */
  bytes(): Buffer {
    const first = this.offsets[0];
    return first === undefined ? Buffer.alloc(0) : this.buffer.subarray(first, this.end);
  }

  /** Moves the live entries to a new buffer with room for `more` bytes and as much again. */
  private grow(more: number): void {
    const first = this.offsets[0] ?? this.end;
    const live = this.end - first;
    const buffer = Buffer.allocUnsafe(Math.max(64 * 1024, 2 * (live + more)));
    this.buffer.copy(buffer, 0, first, this.end);
    this.buffer = buffer;
    this.end = live;
    this.offsets = this.offsets.map((offset) => offset - first);
  }
}
