// The package's settings: its language and GDPR and CCPA notice texts, with their placeholders.
import { z } from 'zod';
import { ConfigurationError } from '#shared/errors';
import { MAX_SITES, siteIdSchema } from '#shared/sites';
import { PACKAGE_LANGUAGES } from './strings.ts';

/**
 * The longest notice text per item: long enough to say what the law asks in plain words. The texts
 * are bundled into the package step's code at synth (lib/dsr-stack.ts), not its environment, so
 * Lambda's 4 KB environment does not bound them.
 */
export const INFORMATION_MAX_CHARS = 2000;

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

/** What GDPR Art. 15(1)(a)-(h) and 15(2) say a subject who asks for access is told. */
export const gdprNoticeSchema = z.strictObject({
  purposes: informationText,
  categories: informationText,
  recipients: informationText,
  retention: informationText,
  rights: informationText,
  complaint: informationText,
  source: informationText,
  automatedDecisions: informationText,
  transfers: informationText,
});
export type GdprNotice = z.infer<typeof gdprNoticeSchema>;

/** What Cal. Civ. Code §1798.110(a)(1)-(4) say a consumer who asks to know is told. */
export const ccpaNoticeSchema = z.strictObject({
  categories: informationText,
  sources: informationText,
  purposes: informationText,
  thirdParties: informationText,
});
export type CcpaNotice = z.infer<typeof ccpaNoticeSchema>;

/** The notice texts of each law: a package states those of its request's regulation only. */
export const accessNoticeSchema = z.strictObject({ gdpr: gdprNoticeSchema, ccpa: ccpaNoticeSchema });
export type AccessNotice = z.infer<typeof accessNoticeSchema>;

/** Who answers an access request, and the notice texts of each law. */
export const packageSettingsSchema = z.strictObject({
  controllerName: z.string().trim().min(1).max(200),
  controllerContact: z.string().trim().min(1).max(300),
  language: packageLanguageSchema,
  information: accessNoticeSchema,
  /**
   * The names the package gives the controller's sites, in the configuration's order, when it
   * lists several (`sites` in the configuration); a one-site package names none.
   */
  sites: z
    .array(z.strictObject({ id: siteIdSchema, name: z.string().trim().min(1).max(200) }))
    .max(MAX_SITES)
    .optional(),
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
    gdpr: {
      purposes: 'Placeholder: state why you process the data (set accessNotice.gdpr.purposes).',
      categories: 'Placeholder: list the categories of personal data (set accessNotice.gdpr.categories).',
      recipients:
        'Placeholder: name the recipients or categories of recipient (set accessNotice.gdpr.recipients).',
      retention:
        'Placeholder: say how long the data is kept, or the criteria (set accessNotice.gdpr.retention).',
      rights:
        'Placeholder: explain the rights to rectification, erasure, restriction of processing and objection (set accessNotice.gdpr.rights).',
      complaint:
        'Placeholder: name the supervisory authority the subject may complain to (set accessNotice.gdpr.complaint).',
      source: 'Placeholder: say where the data comes from (set accessNotice.gdpr.source).',
      automatedDecisions:
        'Placeholder: say whether decisions about the subject are automated, including profiling, and how (set accessNotice.gdpr.automatedDecisions).',
      transfers:
        'Placeholder: say whether the data goes to a third country or an international organisation, and the safeguards of Art. 46 that protect it (set accessNotice.gdpr.transfers).',
    },
    ccpa: {
      categories:
        'Placeholder: list the categories of personal information collected about the consumer (set accessNotice.ccpa.categories).',
      sources:
        'Placeholder: list the categories of sources the personal information comes from (set accessNotice.ccpa.sources).',
      purposes:
        'Placeholder: state the business or commercial purpose for collecting, selling or sharing it (set accessNotice.ccpa.purposes).',
      thirdParties:
        'Placeholder: list the categories of third parties it is disclosed to (set accessNotice.ccpa.thirdParties).',
    },
  },
};

/**
 * The settings a package states that are still on their placeholder, by the name they are set
 * under in the stack configuration: `controllerName`, `controllerContact`, `accessNotice.gdpr.purposes`...
 * Only the notice texts of the request's own law count, since only those are in its package.
 */
export function placeholderTexts(
  settings: Pick<PackageSettings, 'controllerName' | 'controllerContact' | 'information'>,
  regulation: 'gdpr' | 'ccpa',
): string[] {
  const texts: string[] = [];
  if (settings.controllerName === PACKAGE_PLACEHOLDERS.controllerName) texts.push('controllerName');
  if (settings.controllerContact === PACKAGE_PLACEHOLDERS.controllerContact) texts.push('controllerContact');
  const given: Readonly<Record<string, string>> = settings.information[regulation];
  const placeholders: Readonly<Record<string, string>> = PACKAGE_PLACEHOLDERS.information[regulation];
  for (const [item, placeholder] of Object.entries(placeholders)) {
    if (given[item] === placeholder) texts.push(`accessNotice.${regulation}.${item}`);
  }
  return texts;
}

/**
 * The environment variable that carries the settings (JSON) to the package step where it runs
 * unbundled (local mode, which reads them from the template's PACKAGE_SETTINGS_METADATA).
 */
export const PACKAGE_SETTINGS_ENV = 'PACKAGE_SETTINGS';

/**
 * The constant esbuild replaces with the settings (a string of JSON) when it bundles the package
 * step (lib/dsr-stack.ts): the notice texts travel in the step's code, which no size limit binds,
 * not in its 4 KB environment. A change of a text changes the code, so it deploys with it.
 */
export const PACKAGE_SETTINGS_DEFINE = 'SVC_DSR_PACKAGE_SETTINGS';

/** The metadata key under which the template keeps the same JSON on the package step's function. */
export const PACKAGE_SETTINGS_METADATA = 'svc-dsr:package-settings';

declare const SVC_DSR_PACKAGE_SETTINGS: string | undefined;

/** The settings bundled into this code at synth, or undefined when it runs unbundled. */
export function bundledPackageSettings(): string | undefined {
  return typeof SVC_DSR_PACKAGE_SETTINGS === 'string' ? SVC_DSR_PACKAGE_SETTINGS : undefined;
}

/** Reads the settings (JSON, bundled or from the environment): absent means the placeholders (local mode). */
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
