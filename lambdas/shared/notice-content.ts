/**
 * What a notice to the subject said, as its locked audit record keeps it: the team's template id
 * and the values filled into it. Not the rendered text: that names the subject (a salutation, an
 * address), and the audit record outlives the ledger's minimisation and cannot be erased, so it
 * holds no personal data (docs/audit.md, "Notices").
 */
import { z } from 'zod';
import { auditEventProblem } from './audit.ts';
import { CONTROL_CHARACTERS_MESSAGE, hasControlCharacters } from './request.ts';

/** Values a notice may record; each is one audit fact (at most 256 characters). */
export const MAX_NOTICE_VALUES = 20;

const templateSchema = z
  .string({ message: 'is required' })
  .regex(
    /^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/,
    'must be 1-64 letters, digits, ".", "_", ":" or "-", starting with a letter or digit (a versioned id, e.g. gdpr-denial-v3)',
  );
const valueNameSchema = z
  .string()
  .regex(/^[a-z][a-z0-9_]{0,31}$/, 'names must be 1-32 lower-case letters, digits or "_", e.g. reason_code');

/** A notice's content: the template it was written from and the values filled in, by name. */
export const noticeContentSchema = z
  .object({
    template: templateSchema,
    values: z
      .record(
        valueNameSchema,
        z.string().refine((value) => !hasControlCharacters(value), `values ${CONTROL_CHARACTERS_MESSAGE}`),
      )
      .refine((values) => Object.keys(values).length <= MAX_NOTICE_VALUES, {
        message: `at most ${MAX_NOTICE_VALUES} values`,
      }),
  })
  .superRefine((content, context) => {
    const problem = noticeContentProblem(content);
    if (problem !== undefined) context.addIssue({ code: 'custom', message: problem });
  });
export type NoticeContent = z.infer<typeof noticeContentSchema>;

/**
 * Why the audit trail would refuse these values, or undefined: a value that looks like an e-mail
 * address or holds a link, one longer than an audit fact, or a name that only an identifier would
 * have (`name`, `email`...). Asked before anything is written, with the trail's own rule.
 */
function noticeContentProblem(content: {
  template: string;
  values: Record<string, string>;
}): string | undefined {
  const problem = auditEventProblem({
    eventId: 'Operator:notice',
    step: 'Operator',
    action: 'notice_given',
    facts: { template: content.template, ...content.values },
  });
  return problem?.replace(/^fact "([^"]+)"/, (_match, name: string) =>
    name === 'template' ? 'the template' : `value "${name}"`,
  );
}

/** The audit facts of a notice's content: `template`, and `value_<name>` per value. */
export function noticeContentFacts(content: NoticeContent): Record<string, string> {
  return {
    template: content.template,
    ...Object.fromEntries(Object.entries(content.values).map(([name, value]) => [`value_${name}`, value])),
  };
}

/** `name=value` pairs, as the command line gives them, as values by name (the first `=` splits). */
export function noticeValuesOf(pairs: readonly string[]): Record<string, string> | string {
  const values: Record<string, string> = {};
  for (const pair of pairs) {
    const split = pair.indexOf('=');
    if (split <= 0) return `"${pair}" is not name=value`;
    const name = pair.slice(0, split);
    if (name in values) return `"${name}" is given twice`;
    values[name] = pair.slice(split + 1);
  }
  return values;
}
