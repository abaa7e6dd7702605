import { z } from 'zod';
import { ConfigurationError } from '#shared/errors';
import { PACKAGE_LANGUAGES } from './strings.ts';

/** The longest Art. 15(1) text per item: the stack's step environment must stay within Lambda's 4 KB. */
export const INFORMATION_MAX_CHARS = 250;

/** The longest the settings may be as JSON (UTF-8 bytes), so the step's whole environment fits in 4 KB. */
export const PACKAGE_SETTINGS_MAX_BYTES = 2400;

const informationText = z
  .string()
  .trim()
  .min(1, 'must not be empty')
  .max(
    INFORMATION_MAX_CHARS,
    `must be at most ${INFORMATION_MAX_CHARS} characters; link to your privacy notice for more`,
  );

/** A BCP 47 tag whose primary language has a complete catalog in strings.ts. */
export const packageLanguageSchema = z
  .string()
  .regex(/^[A-Za-z]{2,3}(?:-[A-Za-z0-9]{2,8})*$/, 'expected a BCP 47 language tag such as "en" or "en-GB"')
  .refine(
    (tag) => Intl.DateTimeFormat.supportedLocalesOf([tag]).length === 1,
    'not a language this runtime can write dates in',
  )
  .refine(
    (tag) => PACKAGE_LANGUAGES.includes(tag.split('-')[0]?.toLowerCase() ?? ''),
    `the package has no strings for this language yet; the complete catalogs are: ${PACKAGE_LANGUAGES.join(', ')}`,
  );

/** Who answers an access request, and the Art. 15(1) information every package carries. */
export const packageSettingsSchema = z.strictObject({
  controllerName: z.string().trim().min(1).max(200),
  controllerContact: z.string().trim().min(1).max(300),
  language: packageLanguageSchema,
  information: z.strictObject({
    purposes: informationText,
    categories: informationText,
    recipients: informationText,
    retention: informationText,
    rights: informationText,
    complaint: informationText,
    source: informationText,
    automatedDecisions: informationText,
  }),
});
export type PackageSettings = z.infer<typeof packageSettingsSchema>;

/**
 * The placeholders `synth` warns about and a deployment refuses (lib/config.ts `placeholderKeys`).
 * Each says plainly that it is one, so a package built with them (local mode) is not mistaken for
 * a real answer.
 */
export const PACKAGE_PLACEHOLDERS: PackageSettings = {
  controllerName: 'Example Controller (set controllerName in the svc-dsr configuration)',
  controllerContact: 'privacy@example.invalid (set controllerContact in the svc-dsr configuration)',
  language: 'en',
  information: {
    purposes: 'Placeholder: state why you process the data (set accessNotice.purposes).',
    categories: 'Placeholder: list the categories of personal data (set accessNotice.categories).',
    recipients: 'Placeholder: name the recipients or categories of recipient (set accessNotice.recipients).',
    retention: 'Placeholder: say how long the data is kept, or the criteria (set accessNotice.retention).',
    rights:
      'Placeholder: explain the rights to rectification, erasure, restriction of processing and objection (set accessNotice.rights).',
    complaint:
      'Placeholder: name the supervisory authority the subject may complain to (set accessNotice.complaint).',
    source: 'Placeholder: say where the data comes from (set accessNotice.source).',
    automatedDecisions:
      'Placeholder: say whether decisions about the subject are automated, including profiling, and how (set accessNotice.automatedDecisions).',
  },
};

/** The environment variable that carries the settings (JSON) to the package step. */
export const PACKAGE_SETTINGS_ENV = 'PACKAGE_SETTINGS';

/** Reads the settings from their environment variable: absent means the placeholders (local mode). */
export function packageSettingsFromEnv(value: string | undefined): PackageSettings {
  if (value === undefined || value === '') return PACKAGE_PLACEHOLDERS;
  let json: unknown;
  try {
    json = JSON.parse(value);
  } catch {
    throw new ConfigurationError(`${PACKAGE_SETTINGS_ENV} is not JSON; redeploy the stack to set it`);
  }
  const parsed = packageSettingsSchema.safeParse(json);
  if (parsed.success) return parsed.data;
  throw new ConfigurationError(
    `${PACKAGE_SETTINGS_ENV} is invalid (${parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; ')}); redeploy the stack to set it`,
  );
}
