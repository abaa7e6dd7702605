import { describe, expect, it } from 'vitest';
import { parseRequestMessage } from '#shared/request';

const correction = {
  request_id: '0b6f3c1e-2d4a-4e8f-9a1b-3c5d7e9f1a2b',
  type: 'correction',
  regulation: 'ccpa',
  primary_key: 'u-1',
  received_at: '2026-11-02T09:30:00Z',
  verification: { method: 'account_login', verified_by: 'privacy team', verified_at: '2026-11-02T09:00:00Z' },
  corrections: {
    user_name: 'new_name',
    display_name: 'Ada Lovelace',
    email: 'ada@example.org',
    location: 'London',
    bio: 'Mathematician.\nWriter.',
    image_url: '',
  },
};

function errorsOf(body: unknown): readonly string[] {
  const parsed = parseRequestMessage(JSON.stringify(body));
  if (parsed.kind !== 'invalid') throw new Error(`expected invalid, got ${parsed.kind}`);
  return parsed.errors;
}

function withCorrections(corrections: Record<string, unknown>) {
  return { ...correction, corrections };
}

describe('a correction request', () => {
  it('is valid with every correctable field, and keeps exactly the fields given', () => {
    const parsed = parseRequestMessage(JSON.stringify(correction));
    expect(parsed.kind).toBe('valid');
    if (parsed.kind !== 'valid') return;
    expect(parsed.request.corrections).toEqual(correction.corrections);
  });

  it('needs a corrections object, and is refused one for another type', () => {
    const { corrections: _omitted, ...bare } = correction;
    expect(errorsOf(bare)).toEqual([
      'corrections: is required for a correction request: the profile fields to change and their new values',
    ]);
    expect(errorsOf({ ...correction, type: 'erasure' })).toEqual([
      'corrections: is only for a correction request: remove it, or set type to "correction"',
    ]);
    expect(errorsOf(withCorrections({}))).toEqual([
      'corrections: must name at least one field to correct: user_name, display_name, email, location, bio, image_url',
    ]);
  });

  it.each([
    ['user_name', 'abc', 'must be longer than 3 and shorter than 30 characters (it has 3)'],
    ['user_name', 'a'.repeat(30), 'must be longer than 3 and shorter than 30 characters (it has 30)'],
    ['user_name', 'ada lovelace', 'must not contain spaces, tabs, line breaks or other invisible characters'],
    ['user_name', 'ada\tl', 'must not contain spaces, tabs, line breaks or other invisible characters'],
    ['user_name', 'ada<b>x', 'must not contain < or >'],
    ['user_name', 'ada,love', 'must not contain delimiters (ASCII punctuation other than _ - .)'],
    ['display_name', 'd'.repeat(31), 'must be at most 30 characters'],
    ['display_name', '  ', 'must not be empty (the platform would show "Guest")'],
    ['display_name', 'Ada\u202eecalevoL', 'must be one line without control or invisible characters'],
    ['email', 'not-an-address', 'must be an e-mail address, e.g. name@example.com'],
    ['email', `${'a'.repeat(250)}@x.io`, 'must be at most 254 characters'],
    ['location', 'l'.repeat(101), 'must be at most 100 characters'],
    ['location', 'Lon\ndon', 'must be one line without control or invisible characters'],
    ['bio', 'b'.repeat(201), 'must be at most 200 characters'],
    ['bio', 'bell\u0007', 'must not contain control or invisible characters (line breaks are allowed)'],
    ['image_url', 'http://cdn.example/a.png', 'must be an https URL of the image, or "" to remove the image'],
    ['image_url', 'javascript:alert(1)', 'must be an https URL of the image, or "" to remove the image'],
  ])('refuses %s %j with its rule, never quoting the value', (field, value, message) => {
    const errors = errorsOf(withCorrections({ [field]: value }));
    expect(errors).toEqual([`corrections.${field}: ${message}`]);
    if (value.length > 3) expect(errors.join('\n')).not.toContain(value);
  });

  it.each([
    ['a Cyrillic а among Latin letters', '\u0430dmin_x'],
    ['a Greek ο among Latin letters', 'b\u03bfb_29'],
    ['Latin letters among Cyrillic ones', '\u0418\u0432\u0430\u043d_ivan'],
  ])('refuses a user_name with %s with mixed_script_user_name, never quoting it', (_label, userName) => {
    const errors = errorsOf(withCorrections({ user_name: userName }));
    expect(errors).toEqual([
      'corrections.user_name: mixed_script_user_name: mixes letters of more than one script (such as a Cyrillic "а" among Latin letters), so it would look like another name; write it in one script (Latin with Chinese, Japanese or Korean is allowed)',
    ]);
    expect(errors.join(' ')).not.toContain(userName);
  });

  it.each([
    'admin_x',
    'Jos\u00e9_7',
    '\u041f\u0430\u0432\u0435\u043b',
    '\u5c71\u7530\u3055\u3093',
    'kenji_\u5c71\u7530',
  ])('accepts the user_name %j: one script, or Latin with Chinese, Japanese or Korean', (userName) => {
    expect(parseRequestMessage(JSON.stringify(withCorrections({ user_name: userName }))).kind).toBe('valid');
  });

  it('counts characters as a person does: a 29-letter name in another script is accepted', () => {
    const parsed = parseRequestMessage(JSON.stringify(withCorrections({ user_name: 'ж'.repeat(29) })));
    expect(parsed.kind).toBe('valid');
  });

  it('refuses role and comments with the reason, and says the subject can edit or delete their own comments', () => {
    const errors = errorsOf(withCorrections({ display_name: 'Ada', role: 'admin', comments: ['c-1'] }));
    expect(errors).toEqual([
      expect.stringMatching(
        /^corrections\.role: cannot be corrected here: role is not personal data .*access the site grants/,
      ),
      expect.stringMatching(
        /^corrections\.comments: cannot be corrected here: comments cannot be corrected through the platform API: the subject can edit or delete their own comments/,
      ),
    ]);
  });

  it.each(['settings', 'user_metadata', 'metadata', 'private_profile', 'email_verified'])(
    'refuses %s with a reason of its own',
    (field) => {
      const [error] = errorsOf(withCorrections({ display_name: 'Ada', [field]: true }));
      expect(error).toMatch(new RegExp(`^corrections\\.${field}: cannot be corrected here: ${field} \\w+`));
    },
  );

  it.each([
    ['a user name and password', 'https://user:pw@cdn.example/x.png'],
    ['a user name alone', 'https://user@cdn.example/x.png'],
    ['a password alone', 'https://:pw@cdn.example/x.png'],
  ])('refuses an image_url with %s as image_url_credentials, never quoting them', (_label, url) => {
    const errors = errorsOf(withCorrections({ image_url: url }));
    expect(errors).toEqual([
      expect.stringMatching(
        /^corrections\.image_url: image_url_credentials: must not hold a user name or password/,
      ),
    ]);
    expect(errors.join('\n')).not.toContain('pw');
    expect(errors.join('\n')).not.toContain('user@');
  });

  it.each([
    ['loopback', 'https://127.0.0.1/x.png'],
    ['loopback elsewhere in 127/8', 'https://127.8.9.10/x.png'],
    ['loopback in decimal shorthand', 'https://2130706433/x.png'],
    ['loopback in hex shorthand', 'https://0x7f.1/x.png'],
    ['loopback in octal shorthand', 'https://0177.0.0.1/x.png'],
    ['"this host"', 'https://0.0.0.0/x.png'],
    ['10/8', 'https://10.20.30.40/x.png'],
    ['10/8 in hex', 'https://0x0a141e28/x.png'],
    ['172.16/12, low end', 'https://172.16.0.1/x.png'],
    ['172.16/12, high end', 'https://172.31.255.254/x.png'],
    ['192.168/16', 'https://192.168.1.10/x.png'],
    ['link-local (the cloud metadata address)', 'https://169.254.169.254/latest/meta-data'],
    ['IPv6 loopback', 'https://[::1]/x.png'],
    ['IPv6 loopback written out', 'https://[0:0:0:0:0:0:0:1]/x.png'],
    ['IPv6 unique local fc00::/7', 'https://[fd12:3456::1]/x.png'],
    ['IPv6 unique local fc00::', 'https://[fc00::]/x.png'],
    ['IPv6 link-local fe80::/10', 'https://[fe80::1]/x.png'],
    ['IPv6 link-local, high end', 'https://[febf::1]/x.png'],
    ['IPv4 loopback as IPv6', 'https://[::ffff:127.0.0.1]/x.png'],
    ['localhost', 'https://localhost/x.png'],
    ['localhost in capitals with a trailing dot', 'https://LOCALHOST./x.png'],
    ['a name under localhost', 'https://cdn.localhost/x.png'],
  ])('refuses an image_url on %s as image_url_private_address', (_label, url) => {
    const errors = errorsOf(withCorrections({ image_url: url }));
    expect(errors).toEqual([
      expect.stringMatching(
        /^corrections\.image_url: image_url_private_address: must not point at localhost or a loopback, private or link-local address .*give the image's public https URL$/,
      ),
    ]);
  });

  it.each([
    'https://cdn.example/ada.png',
    'https://172.32.0.1/x.png',
    'https://172.15.255.255/x.png',
    'https://192.169.0.1/x.png',
    'https://8.8.8.8/x.png',
    'https://[2001:db8::1]/x.png',
    'https://[fec0::1]/x.png',
    'https://[::ffff:8.8.8.8]/x.png',
    'https://notlocalhost.example/x.png',
  ])('accepts the public image_url %s', (url) => {
    expect(parseRequestMessage(JSON.stringify(withCorrections({ image_url: url }))).kind).toBe('valid');
  });

  it('names an unknown field as a typo', () => {
    expect(errorsOf(withCorrections({ displayname: 'Ada' }))).toEqual([
      'corrections: unknown field(s) "displayname": remove them or fix the spelling',
    ]);
  });

  it('reports every field error in one rejection, with the other fields of the request', () => {
    const errors = errorsOf({
      ...withCorrections({ user_name: 'ada love', bio: 'b'.repeat(201), email: 'nope', role: 'admin' }),
      received_at: 'yesterday',
    });
    expect(errors).toEqual([
      'received_at: must be an RFC 3339 date-time, e.g. 2026-11-02T09:30:00Z',
      'corrections.user_name: must not contain spaces, tabs, line breaks or other invisible characters',
      'corrections.email: must be an e-mail address, e.g. name@example.com',
      'corrections.bio: must be at most 200 characters',
      expect.stringMatching(/^corrections\.role: cannot be corrected here/),
    ]);
  });
});
