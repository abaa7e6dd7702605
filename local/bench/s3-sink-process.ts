/**
 * The S3 sink in a process of its own, so that taking the parts does not compete with the
 * emulator's download on one event loop. Prints its endpoint as one JSON line; HEAD on a key
 * answers the size stored there. Runs until its stdin closes, which happens when the benchmark
 * ends or dies.
 */
import { startS3Sink } from './s3-sink.ts';

const sink = await startS3Sink();
// Nothing to keep: the counts live only as long as the benchmark that asked for them.
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
process.stdout.write(`${JSON.stringify({ endpoint: sink.endpoint })}\n`);
