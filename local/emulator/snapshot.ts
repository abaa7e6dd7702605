/**
 * A running emulator's snapshot, as a document and as the bytes persistence.ts writes: the same
 * text either way, the bytes made mostly of pieces kept from earlier saves, so that a save of a busy
 * emulator costs little more than a copy.
 */
import type { CallLog } from './calls.ts';
import type { ExportBook } from './exports.ts';
import type { FaultProfile, ResolvedFaults } from './faults.ts';
import type { PlatformData } from './platform.ts';
import { type EmulatorSnapshot, SNAPSHOT_FORMAT, SNAPSHOT_VERSION } from './snapshot-schema.ts';
import type { EmulatorState } from './state.ts';

/** Where each of the emulator's random streams stands (see prng.ts). */
export type StreamPositions = EmulatorSnapshot['randomStreams'];

/** What a snapshot holds of an emulator, each part in its live form. */
export interface SnapshotSource {
  readonly spotId: string;
  readonly ssoAccessToken: string;
  readonly exportToken: string;
  readonly baselineState: EmulatorState;
  readonly initialFaults: FaultProfile;
  readonly faults: ResolvedFaults;
  readonly activityEnabled: boolean;
  readonly randomStreams: StreamPositions;
  readonly platform: PlatformData;
  readonly exports: ExportBook;
  readonly calls: CallLog;
}

/** The snapshot's first keys, in the order both snapshotDocument() and snapshotBytes() write them. */
function snapshotHead(source: SnapshotSource, savedAt: string) {
  return {
    format: SNAPSHOT_FORMAT,
    version: SNAPSHOT_VERSION,
    savedAt,
    spotId: source.spotId,
    ssoAccessToken: source.ssoAccessToken,
    exportToken: source.exportToken,
  } as const;
}

/** The fault and randomness settings, which follow the baseline state in a snapshot. */
function snapshotSettings(source: SnapshotSource) {
  return {
    initialFaults: source.initialFaults,
    faults: source.faults,
    activityEnabled: source.activityEnabled,
    randomStreams: source.randomStreams,
  };
}

/** The whole state as a plain document; it shares the live objects, so serialise it before the next change. */
export function snapshotDocument(source: SnapshotSource, savedAt: string): EmulatorSnapshot {
  return {
    ...snapshotHead(source, savedAt),
    baselineState: source.baselineState,
    ...snapshotSettings(source),
    platform: source.platform.toSnapshot(),
    ...source.exports.toSnapshot(),
    ...source.calls.toSnapshot(),
  };
}

/**
 * JSON.stringify(snapshotDocument(source, savedAt)) as UTF-8, made of bytes kept from earlier saves
 * where nothing changed: call-log entries never change once logged, an export's entry changes only
 * with its polls, link and downloads, and the platform data and the baseline now and then. On a
 * busy emulator those are nearly all of the snapshot.
 */
export function snapshotBytes(source: SnapshotSource, savedAt: string): Buffer {
  const head = JSON.stringify(snapshotHead(source, savedAt));
  const settings = JSON.stringify(snapshotSettings(source));
  return Buffer.concat([
    Buffer.from(`${head.slice(0, -1)},"baselineState":`),
    stateBytes(source.baselineState),
    Buffer.from(`,${settings.slice(1, -1)},"platform":`),
    source.platform.toSnapshotBytes(),
    COMMA,
    ...source.exports.snapshotParts(),
    COMMA,
    ...source.calls.snapshotParts(),
    Buffer.from('}'),
  ]);
}

const COMMA = Buffer.from(',');

// Snapshot JSON of a baseline state, which is replaced, never changed.
const savedStates = new WeakMap<EmulatorState, Buffer>();

function stateBytes(state: EmulatorState): Buffer {
  let bytes = savedStates.get(state);
  if (bytes === undefined) {
    bytes = Buffer.from(JSON.stringify(state));
    savedStates.set(state, bytes);
  }
  return bytes;
}
