/**
 * A message as the local SQS holds it, and what SQS computes from one: the checks on its body, the
 * MD5s the SDK verifies, and the system and message attributes a receive asks for.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { ACCOUNT } from './limits.ts';

/** A character SQS refuses in a message body: anything outside #x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF. */
const SQS_INVALID_BODY_CHAR = /[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/u;

const messageAttributeSchema = z.object({
  DataType: z.string().min(1),
  StringValue: z.string().optional(),
  BinaryValue: z.string().optional(),
});
export type MessageAttribute = z.infer<typeof messageAttributeSchema>;
export const messageAttributesSchema = z.record(z.string(), messageAttributeSchema);

export interface Message {
  readonly id: string;
  readonly body: string;
  readonly md5: string;
  readonly attributes: Record<string, MessageAttribute> | undefined;
  readonly sent: number;
  visibleAt: number;
  receiveCount: number;
  firstReceive: number | undefined;
  receipt: string | undefined;
  /** False until its send record is on the disk: it is not received before it counts as sent. */
  stored: boolean;
}

/** Why SQS would refuse `body` in a queue whose messages are at most `maxBytes`, or undefined. */
export function bodyProblem(body: string, maxBytes: number): { code: string; message: string } | undefined {
  if (body.length === 0) {
    return { code: 'InvalidParameterValue', message: 'The request must contain the parameter MessageBody.' };
  }
  if (SQS_INVALID_BODY_CHAR.test(body)) {
    return {
      code: 'InvalidMessageContents',
      message:
        'Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF',
    };
  }
  if (Buffer.byteLength(body, 'utf8') > maxBytes) {
    return {
      code: 'InvalidParameterValue',
      message: `One or more parameters are invalid. Reason: Message must be shorter than ${maxBytes} bytes.`,
    };
  }
  return undefined;
}

/** The system attributes of `names` (or all of them for `All`), as a receive answers them. */
export function systemAttributes(message: Message, names: ReadonlySet<string>): Record<string, string> {
  const all: Record<string, string> = {
    SenderId: ACCOUNT,
    SentTimestamp: String(message.sent),
    ApproximateReceiveCount: String(message.receiveCount),
    ApproximateFirstReceiveTimestamp: String(message.firstReceive ?? message.sent),
  };
  if (names.has('All')) return all;
  return Object.fromEntries(Object.entries(all).filter(([name]) => names.has(name)));
}

/** The message attributes that `names` asks for (a name, `All`, `.*` or a `prefix.*`); undefined for none. */
export function selectAttributes(
  attributes: Record<string, MessageAttribute> | undefined,
  names: readonly string[],
): Record<string, MessageAttribute> | undefined {
  if (attributes === undefined || names.length === 0) return undefined;
  const wanted = (name: string) =>
    names.some(
      (pattern) =>
        pattern === 'All' ||
        pattern === '.*' ||
        pattern === name ||
        (pattern.endsWith('.*') && name.startsWith(pattern.slice(0, -1))),
    );
  const selected = Object.fromEntries(Object.entries(attributes).filter(([name]) => wanted(name)));
  return Object.keys(selected).length > 0 ? selected : undefined;
}

export function md5(text: string | Buffer): string {
  return createHash('md5').update(text).digest('hex');
}

/** MD5OfMessageAttributes as SQS computes it: length-prefixed name, type, transport byte and value, by name. */
export function md5OfAttributes(attributes: Record<string, MessageAttribute>): string {
  const parts: Buffer[] = [];
  const prefixed = (value: Buffer) => {
    const length = Buffer.alloc(4);
    length.writeUInt32BE(value.length);
    parts.push(length, value);
  };
  for (const name of Object.keys(attributes).sort()) {
    const attribute = attributes[name];
    if (attribute === undefined) continue;
    prefixed(Buffer.from(name, 'utf8'));
    prefixed(Buffer.from(attribute.DataType, 'utf8'));
    if (attribute.BinaryValue !== undefined) {
      parts.push(Buffer.from([2]));
      prefixed(Buffer.from(attribute.BinaryValue, 'base64'));
    } else {
      parts.push(Buffer.from([1]));
      prefixed(Buffer.from(attribute.StringValue ?? '', 'utf8'));
    }
  }
  return md5(Buffer.concat(parts));
}
