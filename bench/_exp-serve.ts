import './quiet.ts';
import { z } from 'zod';
import { emulatorControl, startEmulator } from '#local/emulator/server';
import { startS3Sink } from './s3-sink.ts';

const MiB = 1024 * 1024;
const mib = Number(process.env.MIB ?? 100);
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
emulatorControl(emulator).setFaults({
  export_ready_after_polls: 0,
  export_padding_bytes: mib * MiB,
  link_ttl_seconds: 86400,
} as never);
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
console.log(JSON.stringify({ link, s3Endpoint: sink.endpoint, bucket: 'bench', key: 'k' }));
setInterval(() => {}, 1 << 30);
