// The Unicode scripts of a text's characters, and whether the text mixes scripts (UTS #39 sections 5.1 and 5.2).
import propertyValueAliases from 'unicode-property-value-aliases-ecmascript';
import { z } from 'zod';

/*
 * The script names come from PropertyValueAliases.txt as `unicode-property-value-aliases-ecmascript`
 * ships it (docs/dependencies.md); which characters belong to a script is asked of the JavaScript
 * engine itself (`\p{Script_Extensions=…}`), so it follows the engine's Unicode version.
 */

const aliasesSchema = z.map(z.string(), z.map(z.string(), z.string()));

/** Scripts that are not one writing system: every script uses their characters (UTS #39 section 5.1). */
const SHARED_SCRIPTS = new Set(['Common', 'Inherited', 'Unknown']);

/**
 * One regular expression that, matched against one character, captures a group for each script
 * whose Script_Extensions hold it (one optional lookahead per script), with the scripts in group
 * order. Built on first use: about 50 ms, and the engine compiles it on its first few matches
 * (about 150 ms more, measured on Node 24), once per process. A script newer than the engine's
 * Unicode version makes `\p{…}` a syntax error: it is left out, as the engine has no character of
 * it either.
 */
let scriptMatcher: { readonly scripts: readonly string[]; readonly matcher: RegExp } | undefined;
function matcher(): { readonly scripts: readonly string[]; readonly matcher: RegExp } {
  if (scriptMatcher === undefined) {
    const aliases = aliasesSchema.parse(propertyValueAliases).get('Script_Extensions');
    if (aliases === undefined)
      throw new Error('the Unicode property value aliases have no Script_Extensions');
    const scripts = [...new Set(aliases.values())].filter((script) => {
      if (SHARED_SCRIPTS.has(script) || !/^[A-Za-z_]+$/.test(script)) return false;
      try {
        new RegExp(`\\p{Script_Extensions=${script}}`, 'u');
        return true;
      } catch {
        return false;
      }
    });
    const lookaheads = scripts.map((script) => `(?=(\\p{Script_Extensions=${script}})?)`).join('');
    scriptMatcher = { scripts, matcher: new RegExp(`^${lookaheads}`, 'u') };
  }
  return scriptMatcher;
}

const scriptCache = new Map<string, readonly string[]>();
const CACHED_CHARACTERS = 10_000;

/**
 * The scripts one character is written in (its Script_Extensions), or none for a character of
 * Common or Inherited (digits, punctuation, combining marks used by every script), which goes with
 * every script.
 */
export function scriptsOf(character: string): readonly string[] {
  const cached = scriptCache.get(character);
  if (cached !== undefined) return cached;
  let found: readonly string[];
  if (/^[\0-\x7f]$/.test(character)) found = /^[A-Za-z]$/.test(character) ? ['Latin'] : [];
  else {
    const { scripts, matcher: regex } = matcher();
    const match = regex.exec(character);
    found = match === null ? [] : scripts.filter((_, index) => match[index + 1] !== undefined);
  }
  if (scriptCache.size < CACHED_CHARACTERS) scriptCache.set(character, found);
  return found;
}

/**
 * The augmented script set of UTS #39 section 5.1: Han also counts as the writing systems it is
 * part of (Japanese, Korean, Chinese with Bopomofo), and so do kana, Hangul and Bopomofo, so
 * Japanese text that mixes kanji and kana is one writing system.
 */
function augmented(scripts: readonly string[]): Set<string> {
  const set = new Set(scripts);
  if (set.has('Han')) for (const extra of ['Han_with_Bopomofo', 'Japanese', 'Korean']) set.add(extra);
  if (set.has('Hiragana') || set.has('Katakana')) set.add('Japanese');
  if (set.has('Hangul')) set.add('Korean');
  if (set.has('Bopomofo')) set.add('Han_with_Bopomofo');
  return set;
}

/** The scripts every one of `sets` holds; none when there are no sets. */
export function resolvedScripts(sets: readonly ReadonlySet<string>[]): Set<string> {
  const [first, ...rest] = sets;
  if (first === undefined) return new Set();
  return new Set([...first].filter((script) => rest.every((set) => set.has(script))));
}

/** The Latin + CJK combinations UTS #39 section 5.2 allows at its "highly restrictive" level. */
const WITH_LATIN = ['Japanese', 'Han_with_Bopomofo', 'Korean'] as const;

/**
 * True when `text` mixes scripts so that it can pass for another text: it is neither in one script
 * (its resolved script set, UTS #39 section 5.1, is not empty) nor Latin together with Chinese,
 * Japanese or Korean (the "highly restrictive" level of UTS #39 section 5.2, whose letters do not
 * pass for each other). `u-pаul28` with a Cyrillic "а" mixes scripts; `José-7`, `Παύλος`, `山田さん`
 * and `user-名前` do not. Digits, punctuation and combining marks belong to every script. ASCII
 * text never mixes scripts and is answered without the script data.
 */
export function mixesScripts(text: string): boolean {
  if (/^[\0-\x7f]*$/.test(text)) return false;
  const sets: Set<string>[] = [];
  for (const character of text) {
    const scripts = scriptsOf(character);
    if (scripts.length > 0) sets.push(augmented(scripts));
  }
  if (sets.length === 0 || resolvedScripts(sets).size > 0) return false;
  return !WITH_LATIN.some((system) => sets.every((set) => set.has('Latin') || set.has(system)));
}
