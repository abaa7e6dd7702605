import { localThroughput } from './local-throughput.ts';
const n = Number(process.env.N ?? '200');
const r = await localThroughput(n);
console.log(JSON.stringify({ ...r, rps: r.requests / r.seconds, cpuPer: r.cpuMs / r.requests }));
