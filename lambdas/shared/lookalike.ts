// Look-alike spellings of a text (Unicode UTS #39): its confusable skeleton and its single-script forms.
import confusables from 'unhomoglyph/data.json' with { type: 'json' };
import { mixesScripts, resolvedScripts, scriptsOf } from './scripts.ts';

/*
 * The prototypes come from confusables.txt (UTS #39 section 4) as `unhomoglyph` ships it: one
 * source character -> the prototype it looks like (docs/dependencies.md).
 */

/** Source character -> prototype, read and checked once on first use. */
let prototypes: ReadonlyMap<string, string> | undefined;
function prototypeMap(): ReadonlyMap<string, string> {
  if (prototypes === undefined) {
    // Checked by hand: zod takes about 100 ms over the 6,000 entries.
    const entries = Object.entries(confusables as Record<string, unknown>);
    const map = new Map<string, string>();
    for (const [source, prototype] of entries) {
      if ([...source].length !== 1 || typeof prototype !== 'string' || prototype === '') {
        throw new Error(
          'the confusables data (unhomoglyph/data.json) is not a map of one character to its prototype: check the package version',
        );
      }
      map.set(source, prototype);
    }
    if (map.size < 1000) throw new Error('the confusables data (unhomoglyph/data.json) is nearly empty');
    prototypes = map;
  }
  return prototypes;
}

/** Prototype -> the characters it stands for, in code point order. */
let sources: ReadonlyMap<string, readonly string[]> | undefined;
function sourcesOf(prototype: string): readonly string[] {
  if (sources === undefined) {
    const built = new Map<string, string[]>();
    for (const [source, target] of prototypeMap()) {
      const list = built.get(target) ?? [];
      list.push(source);
      built.set(target, list);
    }
    for (const list of built.values()) list.sort((a, b) => (a.codePointAt(0) ?? 0) - (b.codePointAt(0) ?? 0));
    sources = built;
  }
  return sources.get(prototype) ?? [];
}

/** Characters a reader cannot see: UTS #39 (from Unicode 15.1) drops them before mapping. */
const DEFAULT_IGNORABLE = /\p{Default_Ignorable_Code_Point}/gu;

/**
 * The confusable skeleton of `text` (UTS #39 section 4): NFD, without default-ignorable characters,
 * each character replaced by its prototype (confusables.txt), NFD again. Texts that look alike
 * have one skeleton: `u-pаul28` with a Cyrillic "а" and `u-paul28` both give `u-paul28`. It is for
 * comparing, not reading: an "m" becomes "rn", a "0" an "O".
 */
export function skeleton(text: string): string {
  const map = prototypeMap();
  let mapped = '';
  for (const character of text.normalize('NFD').replace(DEFAULT_IGNORABLE, '')) {
    mapped += map.get(character) ?? character;
  }
  return mapped.normalize('NFD');
}

/** A rendering of a mixed-script text in one of its scripts. */
export interface SingleScriptForm {
  /** The Unicode script name, e.g. "Latin". */
  readonly script: string;
  /** The text with each letter of another script replaced by its look-alike in `script`, in NFC. */
  readonly text: string;
}

/** Letters count towards a script; marks do not (a combining accent is of many scripts). */
const MARK = /^\p{M}$/u;

/**
 * The single-script forms of a text that mixes scripts (see mixesScripts), for at most `max` of
 * its scripts, the script most of its letters are in first: each letter of another script is
 * replaced by a look-alike in that script (the Cyrillic "а" of `u-pаul28` by the Latin "a", giving
 * `u-paul28`): the prototype itself when it is of that script or of none (a digit), else the first
 * character of that script with the same prototype. A script some letter has no look-alike in gives
 * no form. A text that does not mix scripts has none.
 */
export function singleScriptForms(text: string, max: number): SingleScriptForm[] {
  if (max <= 0 || !mixesScripts(text)) return [];
  const characters = [...text.normalize('NFD')];
  const perCharacter = characters.map((character) => scriptsOf(character));
  const counts = new Map<string, number>();
  characters.forEach((character, index) => {
    if (MARK.test(character)) return;
    for (const script of perCharacter[index] ?? []) counts.set(script, (counts.get(script) ?? 0) + 1);
  });
  // Most letters first; on a tie the script met first (a Map keeps insertion order, sort is stable).
  const ranked = [...counts.entries()].sort((a, b) => b[1] - a[1]).map(([script]) => script);
  const forms: SingleScriptForm[] = [];
  const original = text.normalize('NFC');
  for (const script of ranked) {
    if (forms.length >= max) break;
    const rendered = renderIn(characters, perCharacter, script);
    if (rendered !== undefined && rendered !== original) forms.push({ script, text: rendered });
  }
  return forms;
}

/** `characters` with each one of another script than `script` replaced by its look-alike in it, or undefined. */
function renderIn(
  characters: readonly string[],
  perCharacter: readonly (readonly string[])[],
  script: string,
): string | undefined {
  let rendered = '';
  for (const [index, character] of characters.entries()) {
    const scripts = perCharacter[index] ?? [];
    if (scripts.length === 0 || scripts.includes(script)) {
      rendered += character;
      continue;
    }
    const lookAlike = lookAlikeIn(character, script);
    if (lookAlike === undefined) return undefined;
    rendered += lookAlike;
  }
  return rendered.normalize('NFC');
}

/**
 * The look-alike of `character` in `script`: its prototype when that is written in the script, or
 * in no script at all (a digit for a letter shaped like one); else the first character of the
 * script with the same prototype. Never a character of no script standing in for a letter (the
 * mathematical alphanumerics, which are of no script, look like letters of every one).
 */
function lookAlikeIn(character: string, script: string): string | undefined {
  const prototype = prototypeMap().get(character) ?? character;
  if (prototype !== character && inScript(prototype, script, true)) return prototype;
  return sourcesOf(prototype).find((other) => other !== character && inScript(other, script, false));
}

/** True when every character of `text` is of `script` (or, when `orNone`, of no script). */
function inScript(text: string, script: string, orNone: boolean): boolean {
  const sets = [...text].map((character) => new Set(scriptsOf(character)));
  if (sets.some((set) => set.size === 0)) {
    return orNone && sets.every((set) => set.size === 0 || set.has(script));
  }
  return resolvedScripts(sets).has(script);
}
