/**
 * The S3 sink in a process of its own, so that taking the parts does not compete with the
 * emulator's download on one event loop. Prints its endpoint as one JSON line; HEAD on a key
 * answers the size stored there. Runs until it is killed.
 */
import { startS3Sink } from './s3-sink.ts';

const sink = await startS3Sink();
process.stdout.write(`${JSON.stringify({ endpoint: sink.endpoint })}\n`);
