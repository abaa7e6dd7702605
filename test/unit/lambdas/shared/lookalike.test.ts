import { describe, expect, it } from 'vitest';
import { singleScriptForms, skeleton } from '#shared/lookalike';
import { mixesScripts, scriptsOf } from '#shared/scripts';

// The look-alike keys of issue 41: a Cyrillic а, a Greek ο and a Cyrillic е among Latin letters.
const CYRILLIC_A = 'u-p\u0430ul28';
const GREEK_O = 'u-b\u03bfb29';
const CYRILLIC_E = 'u-\u0435ve30';

describe('scriptsOf', () => {
  it.each([
    ['a', ['Latin']],
    ['\u0430', ['Cyrillic']],
    ['\u03bf', ['Greek']],
    ['\u540d', ['Han']],
    ['1', []],
    ['-', []],
    ['\u{1f600}', []],
  ])('answers the scripts of %j from its Script_Extensions', (character, scripts) => {
    expect(scriptsOf(character)).toEqual(scripts);
  });

  it('answers every script a shared character is used in (a combining accent of Latin, Greek and Cyrillic)', () => {
    expect(scriptsOf('\u0301')).toEqual(expect.arrayContaining(['Latin', 'Greek', 'Cyrillic']));
  });
});

describe('mixesScripts', () => {
  it.each([
    CYRILLIC_A,
    GREEK_O,
    CYRILLIC_E,
    '\u0430dmin_x',
    'Zo\u00eb-\u043e42',
    '\u0418\u0432\u0430\u043d_ivan',
  ])('says %j mixes scripts', (text) => {
    expect(mixesScripts(text)).toBe(true);
  });

  it.each([
    'u-paul28',
    'Jos\u00e9-7',
    'Zoe\u0308-42',
    '\u03a0\u03b1\u03cd\u03bb\u03bf\u03c2',
    '\u0440\u043e\u0435',
    '\u5c71\u7530\u3055\u3093',
    'user-\u540d\u524d',
    'kim-\ud55c\uad6d',
    'fan-\u{1f600}',
    '',
  ])('says %j does not: one script, Latin with Chinese, Japanese or Korean, or no script', (text) => {
    expect(mixesScripts(text)).toBe(false);
  });

  it('says Latin, kana and Hangul together mix scripts: no one writing system holds all three', () => {
    expect(mixesScripts('ab\u3042\ud55c')).toBe(true);
  });
});

describe('skeleton', () => {
  it.each([
    [CYRILLIC_A, 'u-paul28'],
    [GREEK_O, 'u-bob29'],
  ])('gives %j the skeleton of its Latin twin, %j', (lookAlike, latin) => {
    expect(skeleton(lookAlike)).toBe(skeleton(latin));
    expect(skeleton(lookAlike)).toBe(latin);
  });

  it('gives a whole-script look-alike (Cyrillic р о е) the skeleton of the Latin word', () => {
    expect(skeleton('\u0440\u043e\u0435')).toBe('poe');
  });

  it('maps ASCII look-alikes too, so a skeleton is for comparing, not for reading', () => {
    expect(skeleton('m0')).toBe('rnO');
    expect(skeleton(CYRILLIC_E)).toBe(skeleton('u-eve30'));
  });

  it('is in NFD, drops default-ignorable characters and maps each text to one skeleton', () => {
    expect(skeleton('Zo\u00eb')).toBe('Zoe\u0308');
    expect(skeleton('Zoe\u0308')).toBe('Zoe\u0308');
    expect(skeleton('pa\u00adul')).toBe(skeleton('paul'));
    expect(skeleton(skeleton(CYRILLIC_A))).toBe(skeleton(CYRILLIC_A));
  });
});

describe('singleScriptForms', () => {
  it.each([
    [CYRILLIC_A, 'u-paul28'],
    [GREEK_O, 'u-bob29'],
    [CYRILLIC_E, 'u-eve30'],
    ['u-m\u0430ry10', 'u-mary10'],
  ])('renders %j in Latin as %j, keeping its own Latin letters and digits as they are', (key, latin) => {
    expect(singleScriptForms(key, 3)).toEqual([{ script: 'Latin', text: latin }]);
  });

  it('gives no form in a script some letter has no look-alike in, and never a mathematical letter of no script', () => {
    // The Latin "u" has no Cyrillic look-alike; the mathematical bold "𝐮" (of no script) does not count.
    const forms = singleScriptForms(CYRILLIC_A, 3);
    expect(forms.map((form) => form.script)).toEqual(['Latin']);
    expect(forms.every((form) => /^[\0-\x7f]*$/.test(form.text))).toBe(true);
  });

  it('renders each script the key holds, the most used first, at most `max`', () => {
    // Five Cyrillic letters and one Latin "i": the Cyrillic form first, then the Latin one.
    const key = '\u0440\u0430\u0441\u0435\u0440-i';
    const forms = singleScriptForms(key, 3);
    expect(forms).toEqual([
      { script: 'Cyrillic', text: '\u0440\u0430\u0441\u0435\u0440-\u0456' },
      { script: 'Latin', text: 'pacep-i' },
    ]);
    expect(singleScriptForms(key, 1)).toEqual([forms[0]]);
    expect(singleScriptForms(key, 0)).toEqual([]);
  });

  it('answers in NFC, whatever normalisation the key is in', () => {
    expect(singleScriptForms('Zoe\u0308-\u043e42', 3)).toEqual([{ script: 'Latin', text: 'Zo\u00eb-o42' }]);
  });

  it.each(['u-paul28', '\u0440\u043e\u0435', 'user-\u540d\u524d'])(
    'gives %j none: it does not mix scripts',
    (key) => {
      expect(singleScriptForms(key, 3)).toEqual([]);
    },
  );
});
