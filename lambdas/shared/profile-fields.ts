/**
 * The profile fields a correction request may change, and the platform's own rules for each
 * (docs/platform-api.md, "The user"), checked at intake so the platform is never sent a value it would refuse
 * or silently alter. The rules are written out here rather than shared with the emulator, which is
 * an independent double of the platform.
 */
import { z } from 'zod';
import { mixesScripts } from './scripts.ts';
import { CORRECTABLE_FIELDS, type CorrectableField } from './vocabulary.ts';

export { CORRECTABLE_FIELDS, type CorrectableField };

/**
 * Fields a correction may not name, with why: the platform stores them, but a correction of the
 * subject's personal data is not the way to change them.
 */
export const UNCORRECTABLE_FIELDS: Readonly<Record<string, string>> = {
  role: 'is not personal data the subject can have corrected: it is the access the site grants (an administrator changes it on the platform)',
  settings:
    "are the subject's notification preferences, not data to correct: the subject changes them in the comment widget's settings",
  user_metadata:
    "is the site's subscriber flag, set from the site's own records at sign-in, not data this request can correct",
  metadata:
    "is the site's subscriber flag (user_metadata), set from the site's own records at sign-in, not data this request can correct",
  private_profile: 'is a privacy choice the subject makes in the comment widget, not data to correct',
  comments:
    'cannot be corrected through the platform API: the subject can edit or delete their own comments in the comment widget, or ask for erasure',
  email_verified: 'is set by the service, not requested: a corrected e-mail is always sent as unverified',
  primary_key:
    "is the site's own user id, which identifies the subject: it cannot be corrected on the platform",
  svc_user_id: "is the platform's own user id: it cannot be corrected",
};

const USER_NAME_MIN_EXCLUSIVE = 3;
const USER_NAME_MAX_EXCLUSIVE = 30;
const DISPLAY_NAME_MAX = 30;
const BIO_MAX = 200;
/** No platform limit is documented for these: ours keep a request well inside its 16 KiB. */
const LOCATION_MAX = 100;
const IMAGE_URL_MAX = 2048;
const EMAIL_MAX = 254;

// ASCII punctuation that delimits user names in mentions, URLs and CSV; '_', '-' and '.' are allowed.
const USER_NAME_DELIMITERS = new Set('!"#$%&\'()*+,/:;=?@[\\]^`{|}~');
const CONTROL_OR_FORMAT = /[\p{Cc}\p{Cf}\u2028\u2029]/u;

/** Counts code points, as a person counts characters in a name in any script. */
function length(value: string): number {
  return [...value].length;
}

/** The code that starts the message of a user_name that mixes scripts, for tooling that matches on it. */
export const MIXED_SCRIPT_USER_NAME = 'mixed_script_user_name';

/**
 * A user_name that mixes scripts (UTS #39, see mixesScripts) can pass for another user's name:
 * `аdmin_x` with a Cyrillic "а" shows as `admin_x`. The platform takes it; this service refuses to
 * set it.
 */
const USER_NAME_MIXES_SCRIPTS = `${MIXED_SCRIPT_USER_NAME}: mixes letters of more than one script (such as a Cyrillic "а" among Latin letters), so it would look like another name; write it in one script (Latin with Chinese, Japanese or Korean is allowed)`;

/** A rule's message never quotes the value: a correction's values stay out of every error. */
const userName = z.string().superRefine((value, context) => {
  const count = length(value);
  if (count <= USER_NAME_MIN_EXCLUSIVE || count >= USER_NAME_MAX_EXCLUSIVE) {
    context.addIssue({
      code: 'custom',
      message: `must be longer than ${USER_NAME_MIN_EXCLUSIVE} and shorter than ${USER_NAME_MAX_EXCLUSIVE} characters (it has ${count})`,
    });
    return;
  }
  for (const character of value) {
    if (character === '<' || character === '>') {
      context.addIssue({ code: 'custom', message: 'must not contain < or >' });
      return;
    }
    if (/\s/u.test(character) || CONTROL_OR_FORMAT.test(character)) {
      context.addIssue({
        code: 'custom',
        message: 'must not contain spaces, tabs, line breaks or other invisible characters',
      });
      return;
    }
    if (USER_NAME_DELIMITERS.has(character)) {
      context.addIssue({
        code: 'custom',
        message: 'must not contain delimiters (ASCII punctuation other than _ - .)',
      });
      return;
    }
  }
  if (mixesScripts(value)) context.addIssue({ code: 'custom', message: USER_NAME_MIXES_SCRIPTS });
});

/** One line of text without control or invisible formatting characters. */
function line(max: number, what = 'characters') {
  return z
    .string()
    .refine((value) => length(value) <= max, `must be at most ${max} ${what}`)
    .refine(
      (value) => !CONTROL_OR_FORMAT.test(value),
      'must be one line without control or invisible characters',
    );
}

/** The code that starts the message of an image_url with a user name or password in it. */
export const IMAGE_URL_CREDENTIALS = 'image_url_credentials';
/** The code that starts the message of an image_url on a loopback, private or link-local address. */
export const IMAGE_URL_PRIVATE_ADDRESS = 'image_url_private_address';

/** IPv4 ranges no public image lives at: this host, loopback, private networks, link-local. */
const PRIVATE_IPV4: readonly (readonly [number, number])[] = [
  [0x00000000, 8], // 0.0.0.0/8: "this network", which reaches the host itself
  [0x0a000000, 8], // 10/8
  [0x7f000000, 8], // 127/8
  [0xa9fe0000, 16], // 169.254/16
  [0xac100000, 12], // 172.16/12
  [0xc0a80000, 16], // 192.168/16
];

/** The IPv4 address as a number, for a hostname the URL parser wrote as a dotted quad. */
function ipv4Number(hostname: string): number | undefined {
  const parts = hostname.split('.');
  if (parts.length !== 4 || !parts.every((part) => /^\d{1,3}$/.test(part))) return undefined;
  return parts.reduce((number, part) => number * 256 + Number(part), 0);
}

function privateIpv4(address: number): boolean {
  return PRIVATE_IPV4.some(
    ([base, bits]) => Math.floor(address / 2 ** (32 - bits)) === base / 2 ** (32 - bits),
  );
}

/** The eight 16-bit groups of an IPv6 address as the URL parser writes it (compressed, no brackets). */
function ipv6Groups(address: string): number[] | undefined {
  const [head = '', tail, extra] = address.split('::');
  if (extra !== undefined) return undefined;
  const groups = (part: string) =>
    part === '' ? [] : part.split(':').map((group) => Number.parseInt(group, 16));
  const before = groups(head);
  const after = tail === undefined ? [] : groups(tail);
  const missing = 8 - before.length - after.length;
  if (missing < 0 || (tail === undefined && missing !== 0)) return undefined;
  const all = [...before, ...Array<number>(missing).fill(0), ...after];
  return all.every((group) => Number.isInteger(group) && group >= 0 && group <= 0xffff) ? all : undefined;
}

function privateIpv6(address: string): boolean {
  const groups = ipv6Groups(address);
  if (groups === undefined) return true;
  const [first = 0] = groups;
  const zeros = (count: number) => groups.slice(0, count).every((group) => group === 0);
  if (zeros(7) && (groups[7] === 0 || groups[7] === 1)) return true; // :: and ::1
  if ((first & 0xfe00) === 0xfc00) return true; // fc00::/7, unique local
  if ((first & 0xffc0) === 0xfe80) return true; // fe80::/10, link-local
  // An IPv4 address written as IPv6 (::ffff:a.b.c.d) reaches that IPv4 address.
  if (zeros(5) && groups[5] === 0xffff) return privateIpv4((groups[6] ?? 0) * 0x10000 + (groups[7] ?? 0));
  return false;
}

/**
 * Why an https image URL is refused, or undefined: the platform fetches the image from where the
 * URL points, so a URL with credentials would hand them on, and one on a loopback or private
 * address would point it inside a network. The hostname is read as WHATWG URL reads it, which
 * writes IPv4 shorthands (`2130706433`, `0x7f.1`) as the dotted address they stand for.
 */
export function imageUrlRefusal(value: string): string | undefined {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return undefined;
  }
  if (url.username !== '' || url.password !== '') {
    return `${IMAGE_URL_CREDENTIALS}: must not hold a user name or password (before "@"): the platform would send them wherever it fetches the image; give the image's public https URL`;
  }
  const hostname = url.hostname.toLowerCase().replace(/\.$/, '');
  const ipv4 = ipv4Number(hostname);
  const isPrivate =
    hostname === 'localhost' ||
    hostname.endsWith('.localhost') ||
    (ipv4 !== undefined && privateIpv4(ipv4)) ||
    (hostname.startsWith('[') && privateIpv6(hostname.slice(1, -1)));
  if (isPrivate) {
    return `${IMAGE_URL_PRIVATE_ADDRESS}: must not point at localhost or a loopback, private or link-local address (127.0.0.0/8, 10/8, 172.16/12, 192.168/16, 169.254/16, ::1, fc00::/7, fe80::/10): the platform fetches the image from there; give the image's public https URL`;
  }
  return undefined;
}

/** The rule of each correctable field. */
export const correctionValueSchemas = {
  user_name: userName,
  display_name: line(DISPLAY_NAME_MAX).refine(
    (value) => value.trim() !== '',
    'must not be empty (the platform would show "Guest")',
  ),
  email: z
    .string()
    .max(EMAIL_MAX, `must be at most ${EMAIL_MAX} characters`)
    .pipe(z.email('must be an e-mail address, e.g. name@example.com')),
  location: line(LOCATION_MAX),
  // A bio may hold line breaks; other control characters are refused.
  bio: z
    .string()
    .refine((value) => length(value) <= BIO_MAX, `must be at most ${BIO_MAX} characters`)
    .refine(
      (value) => !CONTROL_OR_FORMAT.test(value.replaceAll('\n', '')),
      'must not contain control or invisible characters (line breaks are allowed)',
    ),
  image_url: z
    .string()
    .max(IMAGE_URL_MAX, `must be at most ${IMAGE_URL_MAX} characters`)
    .refine((value) => value === '' || z.url({ protocol: /^https$/ }).safeParse(value).success, {
      message: 'must be an https URL of the image, or "" to remove the image',
      abort: true,
    })
    .superRefine((value, context) => {
      const refusal = value === '' ? undefined : imageUrlRefusal(value);
      if (refusal !== undefined) context.addIssue({ code: 'custom', message: refusal });
    }),
} as const satisfies Record<CorrectableField, z.ZodType<string>>;

/** The field -> new value map of a correction request. */
export type Corrections = Partial<Record<CorrectableField, string>>;

const uncorrectable = Object.fromEntries(
  Object.entries(UNCORRECTABLE_FIELDS).map(([field, why]) => [
    field,
    z
      .unknown()
      .optional()
      .refine((value) => value === undefined, `cannot be corrected here: ${field} ${why}`),
  ]),
);

/**
 * The `corrections` object: at least one correctable field, each value checked by its rule, every
 * field error reported at once; a field that is not correctable is named with the reason.
 */
export const correctionsSchema = z
  .strictObject({
    ...Object.fromEntries(
      CORRECTABLE_FIELDS.map((field) => [field, correctionValueSchemas[field].optional()]),
    ),
    ...uncorrectable,
  })
  .transform((value, context) => {
    const corrections: Corrections = {};
    for (const field of CORRECTABLE_FIELDS) {
      const given = value[field];
      if (typeof given === 'string') corrections[field] = given;
    }
    // An object whose only fields were refused or misspelt has been told why already.
    if (Object.keys(corrections).length === 0 && context.issues.length === 0) {
      context.addIssue({
        code: 'custom',
        message: `must name at least one field to correct: ${CORRECTABLE_FIELDS.join(', ')}`,
      });
      return z.NEVER;
    }
    return corrections;
  });

/** The names of the fields a correction changes, in their fixed order. */
export function correctionFields(corrections: Corrections): CorrectableField[] {
  return CORRECTABLE_FIELDS.filter((field) => corrections[field] !== undefined);
}
