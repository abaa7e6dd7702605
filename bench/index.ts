/**
 * `npm run bench`: figures, each beside a baseline measured in the same run.
 * 1. Archive copy: the ArchiveExport copy of a large export into S3 versus the same download
 *    streamed to nowhere by plain fetch; throughput and the copying process's peak RSS.
 * 2. State transitions per request, and the Step Functions cost per 1,000 requests.
 */
import './quiet.ts';
import '#local/polyfills';
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { SendMessageCommand } from '@aws-sdk/client-sqs';
import { z } from 'zod';
import { startAwsStandIns } from '#local/aws-standins';
import { emulatorControl, startEmulator } from '#local/emulator/server';
import { SqsPoller } from '#local/event-source';
import { startLocalWorkflow } from '#local/workflow';
import { startS3Sink } from './s3-sink.ts';

const run = promisify(execFile);
const MiB = 1024 * 1024;
const WORKER = fileURLToPath(new URL('./copy-worker.ts', import.meta.url));
const TRANSITION_PRICE_PER_1000 = 0.025;
const workerResult = z.object({ bytes: z.number(), seconds: z.number(), peakRssBytes: z.number() });

const sizes = (process.env.BENCH_SIZES_MIB ?? '100,1024').split(',').map(Number);

async function worker(args: Record<string, string>) {
  const { stdout } = await run(process.execPath, ['--import', 'tsx', WORKER, JSON.stringify(args)], {
    maxBuffer: 1024 * 1024,
    env: { ...process.env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  });
  return workerResult.parse(JSON.parse(stdout.trim().split('\n').pop() ?? '{}'));
}

async function archiveCopy() {
  const sink = await startS3Sink();
  const emulator = await startEmulator({
    state: {
      spot_id: 'sp_bench',
      conversations: [],
      users: [{ primary_key: 'bench-user', user_name: 'bench_user', svc_user_id: 'svc-bench' }],
      comments: [],
      votes: [],
    },
    faults: { export_ready_after_polls: 0 },
  });
  const rows: string[][] = [];
  const peaks: Record<number, number> = {};
  try {
    for (const mib of sizes) {
      emulatorControl(emulator).setFaults({ export_ready_after_polls: 0, export_padding_bytes: mib * MiB });
      const started = await fetch(`${emulator.url}/gdpr/export`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          access_token: emulator.exportToken,
          spot_id: emulator.spotId,
          user_id: 'svc-bench',
        }),
      });
      const { id } = z.object({ id: z.number() }).parse(await started.json());
      const status = await fetch(
        `${emulator.url}/gdpr/export/status/${id}?access_token=${emulator.exportToken}&spot_id=${emulator.spotId}`,
      );
      const { link } = z.object({ link: z.string() }).parse(await status.json());
      const baseline = await worker({ mode: 'baseline', link });
      const archive = await worker({
        mode: 'archive',
        link,
        s3Endpoint: sink.endpoint,
        bucket: 'bench',
        key: `copy-${mib}`,
      });
      const received = sink.stored.get(`/bench/copy-${mib}`);
      if (received !== archive.bytes || received !== baseline.bytes) {
        throw new Error(
          `the copy reported ${archive.bytes} bytes, S3 received ${received}, the baseline read ${baseline.bytes}`,
        );
      }
      const mbps = (result: z.infer<typeof workerResult>) => result.bytes / MiB / result.seconds;
      peaks[mib] = archive.peakRssBytes / MiB;
      rows.push(
        [
          `${mib} MiB`,
          'baseline: fetch to nowhere',
          mbps(baseline).toFixed(1),
          (baseline.peakRssBytes / MiB).toFixed(0),
          '',
        ],
        [
          `${mib} MiB`,
          'ArchiveExport copy to S3',
          mbps(archive).toFixed(1),
          (archive.peakRssBytes / MiB).toFixed(0),
          `${((mbps(archive) / mbps(baseline)) * 100).toFixed(0)}% of baseline`,
        ],
      );
    }
  } finally {
    await emulator.close();
    await sink.close();
  }
  printTable(
    'Archive copy (MiB/s; peak RSS of the copying process)',
    ['size', 'what', 'MiB/s', 'peak RSS MiB', 'vs baseline'],
    rows,
  );
  const small = peaks[100];
  const large = peaks[1024];
  if (small !== undefined && large !== undefined) {
    console.log(
      `peak RSS at 1 GiB minus peak RSS at 100 MiB: ${(large - small).toFixed(0)} MiB (target: within 50 MiB; under 200 MiB at 1 GiB)\n`,
    );
  }
}

async function transitions() {
  const aws = await startAwsStandIns();
  const emulator = await startEmulator({
    state: {
      spot_id: 'sp_bench',
      conversations: [],
      users: [
        { primary_key: 'bench-a', user_name: 'bench_a' },
        { primary_key: 'bench-b', user_name: 'bench_b' },
      ],
      comments: [],
      votes: [],
    },
    faults: { export_ready_after_polls: 3 },
  });
  const workflow = await startLocalWorkflow({ aws, platform: emulator });
  const poller = new SqsPoller(workflow.sqs, workflow.queueUrls.intake, workflow.intake);
  const rows: string[][] = [];
  try {
    for (const [label, type, key] of [
      ['access, export ready after 3 polls', 'access', 'bench-a'],
      ['erasure, export ready after 3 polls', 'erasure', 'bench-b'],
    ] as const) {
      const requestId = randomUUID();
      await workflow.sqs.send(
        new SendMessageCommand({
          QueueUrl: workflow.queueUrls.intake,
          MessageBody: JSON.stringify({
            request_id: requestId,
            type,
            regulation: 'gdpr',
            primary_key: key,
            received_at: new Date().toISOString(),
            verification: { method: 'bench', verified_by: 'bench', verified_at: new Date().toISOString() },
          }),
        }),
      );
      await poller.drain();
      const result = (await workflow.settled()).get(requestId);
      // Step Functions bills one transition per state entered, the start included.
      const entered = (result?.events ?? []).filter((event) => event.type.endsWith('StateEntered')).length;
      const billed = entered + 1;
      rows.push([
        label,
        String(result?.status),
        String(billed),
        `$${((billed * TRANSITION_PRICE_PER_1000 * 1000) / 1000).toFixed(4)}`,
      ]);
    }
  } finally {
    await workflow.close();
    await emulator.close();
    await aws.close();
  }
  printTable(
    'State transitions per request (Step Functions Standard, $0.025 per 1,000 transitions)',
    ['request', 'status', 'transitions', 'cost per 1,000 requests'],
    rows,
  );
}

function printTable(title: string, header: string[], rows: string[][]) {
  const widths = header.map((cell, index) =>
    Math.max(cell.length, ...rows.map((row) => (row[index] ?? '').length)),
  );
  const line = (cells: string[]) => cells.map((cell, index) => cell.padEnd(widths[index] ?? 0)).join(' | ');
  console.log(`\n${title}\n${line(header)}\n${widths.map((width) => '-'.repeat(width)).join('-|-')}`);
  for (const row of rows) console.log(line(row));
  console.log('');
}

await archiveCopy();
await transitions();
