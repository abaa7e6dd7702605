/**
 * The emulator's snapshot: its bytes are the text of its document after every kind of change and
 * after a restore, an expired export's entries leave it, and the call log's bytes stay whole.
 */
import { describe, expect, it } from 'vitest';
import { JsonListBytes, MAX_CALLS } from '#local/emulator/calls';
import { Emulator } from '#local/emulator/emulator';
import type { FaultProfile } from '#local/emulator/faults';
import { emulatorSnapshotSchema } from '#local/emulator/snapshot-schema';
import { parseEmulatorState } from '#local/emulator/state';
import { EXPORT_TOKEN, SPOT_ID, SSO_TOKEN, TEST_STATE } from './helpers.ts';

/** An emulator on the test state, without a server. */
function testEmulator(faults: FaultProfile, now: () => number): Emulator {
  const state = parseEmulatorState(TEST_STATE);
  if (!state.success) throw new Error('the test state is invalid');
  return new Emulator({
    spotId: SPOT_ID,
    ssoAccessToken: SSO_TOKEN,
    exportToken: EXPORT_TOKEN,
    state: state.value,
    faults,
    now,
  });
}

/** The user with this primary key; throws when there is none. */
function userOf(emulator: Emulator, key: string) {
  const found = emulator.findUser(key);
  if (!found) throw new Error(`no user ${key}`);
  return found;
}

describe('Emulator.snapshotBytes', () => {
  const savedAt = '2026-01-02T03:04:05.000Z';
  const call = (path: string) => ({
    at: savedAt,
    method: 'GET',
    path,
    status: 200,
    fault: null,
    credential: null,
    stray_credentials: [],
    duration_ms: 1,
  });
  const sameAsStringify = (emulator: Emulator) =>
    expect(emulator.snapshotBytes(savedAt).toString()).toBe(JSON.stringify(emulator.toSnapshot(savedAt)));

  it('is the text of toSnapshot() after every kind of change, and after a restore', () => {
    // Prepare
    const emulator = testEmulator(
      { export_ready_after_polls: 0, export_padding_bytes: 100 },
      () => 1_800_000_000_000,
    );
    const user = (key: string) => userOf(emulator, key);

    // Act and Assess
    sameAsStringify(emulator);
    emulator.record(call('/first'));
    const record = emulator.startExport(user('pk-bob'));
    sameAsStringify(emulator);
    emulator.pollExport(record);
    sameAsStringify(emulator);
    emulator.countDownload(record);
    sameAsStringify(emulator);
    emulator.expireExport(record.publicId);
    sameAsStringify(emulator);
    emulator.data.updateUser(user('pk-carol'), { display_name: 'Carol Ünïcode ✓', bio: 'new' });
    sameAsStringify(emulator);
    emulator.deleteUser(user('pk-alice'));
    sameAsStringify(emulator);
    for (let index = 0; index <= MAX_CALLS; index += 1) emulator.record(call(`/many/${index}`));
    sameAsStringify(emulator);
    const text = emulator.snapshotBytes(savedAt).toString();
    const restored = Emulator.restore(emulatorSnapshotSchema.parse(JSON.parse(text)), { now: () => 0 });
    expect(restored.snapshotBytes(savedAt).toString()).toBe(text);
    restored.record(call('/after-restore'));
    sameAsStringify(restored);
    restored.clearCalls();
    sameAsStringify(restored);
  });
});

describe('an export whose link has expired', () => {
  it('drops its entries, keeps its size and answers 410, before and after a restart', () => {
    // Prepare
    let clock = 1_800_000_000_000;
    const emulator = testEmulator({ export_ready_after_polls: 0, link_ttl_seconds: 60 }, () => clock);
    const user = (key: string) => userOf(emulator, key);
    const savedExports = (from: Emulator) =>
      emulatorSnapshotSchema.parse(JSON.parse(from.snapshotBytes('2026-01-02T03:04:05.000Z').toString()))
        .exports;
    const first = emulator.startExport(user('pk-bob'));
    emulator.pollExport(first);
    const sizeBefore = emulator.exportsView()[0]?.byte_size;
    const token = first.linkToken ?? '';

    // Act
    clock += 59_000;
    const beforeExpiry = savedExports(emulator);
    clock += 1_000;
    emulator.startExport(user('pk-carol'));
    const afterExpiry = savedExports(emulator);
    const restored = Emulator.restore(emulatorSnapshotSchema.parse(emulator.toSnapshot('now')), {
      now: () => clock,
    });

    // Assess
    expect(beforeExpiry[0]?.files).toHaveLength(4);
    expect(afterExpiry[0]?.files).toBeNull();
    expect(afterExpiry[0]?.byteSize).toBe(sizeBefore);
    expect(afterExpiry[1]?.files).toHaveLength(4);
    expect(emulator.exportsView()[0]).toMatchObject({ byte_size: sizeBefore, link_expired: true });
    expect(restored.exportsView()[0]).toMatchObject({ byte_size: sizeBefore, link_expired: true });
    expect(savedExports(restored)).toEqual(afterExpiry);
    expect(restored.findDownload(token)?.files).toBeNull();
  });
});

describe('JsonListBytes', () => {
  it('holds the JSON of the entries pushed and not shifted, across growth and multi-byte text', () => {
    // Prepare
    const list = new JsonListBytes();
    const entries = Array.from({ length: 3_000 }, (_, index) => ({
      index,
      text: `ünïcode ✓ ${'x'.repeat(index % 50)}`,
    }));

    // Act
    const empty = list.bytes().toString();
    for (const entry of entries.slice(0, 1_000)) list.push(JSON.stringify(entry));
    const early = list.bytes();
    const earlyText = early.toString();
    for (const entry of entries.slice(1_000)) list.push(JSON.stringify(entry));
    for (let index = 0; index < 1_500; index += 1) list.shift();

    // Assess
    expect(empty).toBe('');
    expect(earlyText).toBe(JSON.stringify(entries.slice(0, 1_000)).slice(1, -1));
    expect(early.toString()).toBe(earlyText);
    expect(`[${list.bytes().toString()}]`).toBe(JSON.stringify(entries.slice(1_500)));
    list.clear();
    list.push('{"a":1}');
    expect(list.bytes().toString()).toBe('{"a":1}');
  });
});
