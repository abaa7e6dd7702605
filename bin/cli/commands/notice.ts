// The `svc-dsr notice` command: records a receipt, extension, response or denial notice given to the subject.
import { z } from 'zod';
import { NOTICE_KINDS, type Notice, type NoticeKind } from '#shared/ledger';
import { type NoticeContent, noticeContentSchema, noticeValuesOf } from '#shared/notice-content';
import { identifierProblem } from '#shared/redact';
import {
  CONTROL_CHARACTERS_MESSAGE,
  hasControlCharacters,
  MAX_CLOCK_SKEW_MS,
  rfc3339Instant,
} from '#shared/request';
import { type CliIo, type CommandResult, parseRequestId, processIo, writeJson } from '../format.ts';
import { CliError, EXIT, parseOption } from '../io.ts';
import { type CliContext, type TargetFlags, withTarget } from '../target.ts';

/** How a notice was given, as the command line says it. */
export interface NoticeFlags {
  readonly channel?: string;
  /** RFC 3339; default: now. */
  readonly at?: string;
  readonly reference?: string;
}

/** Audit text: short, and no e-mail address or link (it is kept in the audit record). */
const auditText = (max: number) =>
  z
    .string({ message: 'is required' })
    .trim()
    .min(1, 'must not be empty')
    .max(max, `must be at most ${max} characters`)
    .refine((value) => !hasControlCharacters(value), CONTROL_CHARACTERS_MESSAGE)
    .refine((value) => identifierProblem(value) === undefined, {
      message:
        'must not hold an e-mail address or a link: it is kept in the audit record (say "email", not the address)',
    });
const instantSchema = z.string().refine((value) => rfc3339Instant(value) !== undefined, {
  message: 'must be an RFC 3339 date-time, e.g. 2026-11-20T09:30:00Z',
});

/**
 * The notice the flags describe (`prefix` names them in messages: `--` for notice, `--notice-`
 * for extend), or exit 2 naming the flag: a time that is not RFC 3339 or lies in the future too.
 */
export function parseNoticeFlags(flags: NoticeFlags, prefix: string, now: Date): Omit<Notice, 'recorded_at'> {
  const channel = parseOption(`${prefix}channel`, auditText(64), flags.channel);
  const at =
    flags.at === undefined
      ? now.toISOString()
      : (rfc3339Instant(parseOption(`${prefix}at`, instantSchema, flags.at)) ?? now).toISOString();
  // A time to come is a mistyped flag, refused as one (exit 2) before anything is read or written.
  if (Date.parse(at) > now.getTime() + MAX_CLOCK_SKEW_MS) {
    throw new CliError(
      `${prefix}at: ${flags.at} is in the future; give the time the subject was told (clocks may differ by 5 minutes at most)`,
    );
  }
  const reference =
    flags.reference === undefined
      ? undefined
      : parseOption(`${prefix}reference`, auditText(128), flags.reference);
  return { channel, at, ...(reference === undefined ? {} : { reference }) };
}

/** Options of `svc-dsr notice`. */
export interface NoticeOptions extends NoticeFlags {
  readonly requestId: string;
  readonly kind: string;
  /** The team's id of the template the notice was written from, e.g. gdpr-denial-v3. */
  readonly template?: string;
  /** The values filled into it, as `name=value`; only with `template`. */
  readonly values?: readonly string[];
  readonly json?: boolean;
}

/** What `notice --json` prints. */
export interface NoticeResult {
  readonly request_id: string;
  readonly kind: NoticeKind;
  readonly channel: string;
  readonly at: string;
  readonly reference: string | null;
  /** The template and the values filled in, as the audit record keeps them; null when not given. */
  readonly content: NoticeContent | null;
  /** For the response to an erased subject: what the platform keeps, which the response must say. */
  readonly platform_keeps?: string;
}

const kindSchema = z.enum(NOTICE_KINDS, { message: `must be one of ${NOTICE_KINDS.join(', ')}` });

/**
 * What the notice said, from --template and --value, or exit 2 naming the flag: a value the audit
 * trail would refuse (an e-mail address, a link, a name only an identifier has) is refused here,
 * before anything is written.
 */
export function parseNoticeContent(
  options: Pick<NoticeOptions, 'template' | 'values'>,
): NoticeContent | undefined {
  const pairs = options.values ?? [];
  if (options.template === undefined) {
    if (pairs.length > 0)
      throw new CliError('--value: give --template too: values are filled into a template');
    return undefined;
  }
  const values = noticeValuesOf(pairs);
  if (typeof values === 'string') throw new CliError(`--value: ${values}`);
  const parsed = noticeContentSchema.safeParse({ template: options.template, values });
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const flag = issue?.path[0] === 'template' ? '--template' : '--value';
  throw new CliError(`${flag}: ${issue?.message ?? 'invalid'}`);
}

/**
 * Records that the subject was told (a receipt confirmation, an extension, the response, a
 * denial), through the operator function: ledger fields and an audit record naming who recorded
 * it. Refusals are exit 1.
 */
export async function runNotice(
  context: Pick<CliContext, 'operatorFunction' | 'clock'>,
  options: NoticeOptions,
  io: CliIo,
): Promise<CommandResult<NoticeResult>> {
  const requestId = parseRequestId(options.requestId);
  const kind = parseOption('--kind', kindSchema, options.kind);
  const content = parseNoticeContent(options);
  const notice = parseNoticeFlags(options, '--', context.clock());
  const result: NoticeResult = await context.operatorFunction({
    command: 'notice',
    request_id: requestId,
    kind,
    notice,
    ...(content === undefined ? {} : { content }),
  });
  if (options.json === true) writeJson(io, result);
  else {
    io.out(`recorded the ${kind} notice to the subject of ${requestId} (${notice.channel}, ${notice.at})\n`);
    if (result.platform_keeps !== undefined)
      io.out(`the response must say what the platform keeps: ${result.platform_keeps}\n`);
  }
  return { exitCode: EXIT.ok, result };
}

export interface NoticeCommandFlags extends TargetFlags, NoticeFlags {
  readonly kind?: string;
  readonly template?: string;
  readonly value?: string[];
  readonly json?: boolean;
}

/** `svc-dsr notice` run with its parsed arguments and flags (registered in ../register/notice.ts). */
export async function noticeAction(requestId: string, flags: NoticeCommandFlags): Promise<void> {
  const options: NoticeOptions = {
    requestId: parseRequestId(requestId),
    kind: parseOption('--kind', kindSchema, flags.kind),
    ...(flags.channel === undefined ? {} : { channel: flags.channel }),
    ...(flags.at === undefined ? {} : { at: flags.at }),
    ...(flags.reference === undefined ? {} : { reference: flags.reference }),
    ...(flags.template === undefined ? {} : { template: flags.template }),
    ...(flags.value === undefined ? {} : { values: flags.value }),
    json: flags.json === true,
  };
  parseNoticeFlags(options, '--', new Date());
  parseNoticeContent(options);
  const { exitCode } = await withTarget(flags, (context) => runNotice(context, options, processIo));
  process.exitCode = exitCode;
}
