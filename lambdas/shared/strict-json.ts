/**
 * A strict JSON reader for untrusted input. It gives the same values as JSON.parse, but refuses what
 * JSON.parse silently accepts and a reader must not act on: a key repeated in one object (JSON.parse
 * keeps the last, so `{"type":"access","type":"erasure"}` would mean erasure) and nesting deeper than
 * any legitimate message (which would otherwise exhaust the stack of whatever walks the value next).
 */

/** Nesting accepted by default: a request is two levels deep. */
export const DEFAULT_MAX_DEPTH = 32;

/** The value, or what was wrong. `problem` never quotes the input, except a repeated key's name. */
export type StrictJsonResult = { ok: true; value: unknown } | { ok: false; problem: string };

const WHITESPACE = /[ \t\n\r]*/y;
/** The characters JSON allows after a backslash, other than `u` (which takes four hex digits). */
const SHORT_ESCAPES = new Set(['"', '\\', '/', 'b', 'f', 'n', 'r', 't']);
const HEX4 = /^[0-9a-fA-F]{4}$/;
const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
const LITERALS = { true: true, false: false, null: null } as const;
const MAX_KEY_SHOWN = 64;

class StrictJsonError extends Error {
  override readonly name = 'StrictJsonError';
}

/** Parses `text` as one JSON value; never throws. */
export function parseStrictJson(
  text: string,
  options: { readonly maxDepth?: number } = {},
): StrictJsonResult {
  const reader = new Reader(text, options.maxDepth ?? DEFAULT_MAX_DEPTH);
  try {
    const value = reader.document();
    return { ok: true, value };
  } catch (error) {
    if (error instanceof StrictJsonError) return { ok: false, problem: error.message };
    throw error;
  }
}

class Reader {
  #at = 0;

  constructor(
    private readonly text: string,
    private readonly maxDepth: number,
  ) {}

  document(): unknown {
    const value = this.#value(0, '');
    this.#skipWhitespace();
    if (this.#at < this.text.length) this.#fail('unexpected text after the JSON value');
    return value;
  }

  #value(depth: number, path: string): unknown {
    this.#skipWhitespace();
    const char = this.text[this.#at];
    if (char === '{' || char === '[') {
      if (depth >= this.maxDepth) {
        throw new StrictJsonError(`is nested more than ${this.maxDepth} levels deep`);
      }
      return char === '{' ? this.#object(depth + 1, path) : this.#array(depth + 1, path);
    }
    if (char === '"') return this.#string();
    const number = this.#match(NUMBER);
    if (number !== undefined) return Number(number);
    for (const [word, value] of Object.entries(LITERALS)) {
      if (this.text.startsWith(word, this.#at)) {
        this.#at += word.length;
        return value;
      }
    }
    return this.#fail(char === undefined ? 'ends where a value was expected' : 'has no valid value');
  }

  #object(depth: number, path: string): Record<string, unknown> {
    this.#at += 1;
    const object: Record<string, unknown> = {};
    const seen = new Set<string>();
    this.#skipWhitespace();
    if (this.#take('}')) return object;
    for (;;) {
      this.#skipWhitespace();
      if (this.text[this.#at] !== '"') this.#fail('has an object key that is not a string');
      const key = this.#string();
      const keyPath = path === '' ? key : `${path}.${key}`;
      if (seen.has(key)) {
        throw new StrictJsonError(
          `repeats the key ${shownKey(keyPath)} in one object, so its meaning is ambiguous: give each key once`,
        );
      }
      seen.add(key);
      this.#skipWhitespace();
      if (!this.#take(':')) this.#fail('lacks a ":" after an object key');
      // defineProperty, as JSON.parse does, so a "__proto__" key is a plain field, not a prototype.
      Object.defineProperty(object, key, {
        value: this.#value(depth, keyPath),
        enumerable: true,
        writable: true,
        configurable: true,
      });
      this.#skipWhitespace();
      if (this.#take('}')) return object;
      if (!this.#take(',')) this.#fail('lacks a "," or "}" after an object member');
    }
  }

  #array(depth: number, path: string): unknown[] {
    this.#at += 1;
    const array: unknown[] = [];
    this.#skipWhitespace();
    if (this.#take(']')) return array;
    for (;;) {
      array.push(this.#value(depth, `${path}[${array.length}]`));
      this.#skipWhitespace();
      if (this.#take(']')) return array;
      if (!this.#take(',')) this.#fail('lacks a "," or "]" after an array element');
    }
  }

  #string(): string {
    const end = this.#stringEnd();
    if (end === undefined) return this.#fail('has an unterminated or malformed string');
    const token = this.text.slice(this.#at, end);
    this.#at = end;
    // The token is a complete JSON string literal, so JSON.parse decodes it exactly.
    const decoded: unknown = JSON.parse(token);
    return typeof decoded === 'string' ? decoded : this.#fail('has a malformed string');
  }

  /**
   * Where the string literal that starts at the current position ends (just past its closing quote),
   * or undefined when it is unterminated or holds a raw control character or a bad escape. A scan,
   * not a regular expression: a regular expression with an alternation inside a repetition keeps
   * one backtracking entry per character and overflows the stack on a string of a few megabytes.
   */
  #stringEnd(): number | undefined {
    const { text } = this;
    for (let at = this.#at + 1; at < text.length; ) {
      const code = text.charCodeAt(at);
      if (code === 0x22) return at + 1;
      if (code < 0x20) return undefined;
      if (code !== 0x5c) {
        at += 1;
        continue;
      }
      const escaped = text[at + 1];
      if (escaped === 'u' && HEX4.test(text.slice(at + 2, at + 6))) at += 6;
      else if (escaped !== undefined && SHORT_ESCAPES.has(escaped)) at += 2;
      else return undefined;
    }
    return undefined;
  }

  #match(pattern: RegExp): string | undefined {
    pattern.lastIndex = this.#at;
    const match = pattern.exec(this.text);
    if (match === null || match[0] === '') return undefined;
    this.#at += match[0].length;
    return match[0];
  }

  #take(char: string): boolean {
    if (this.text[this.#at] !== char) return false;
    this.#at += 1;
    return true;
  }

  #skipWhitespace(): void {
    WHITESPACE.lastIndex = this.#at;
    WHITESPACE.exec(this.text);
    this.#at = WHITESPACE.lastIndex;
  }

  #fail(what: string): never {
    // The position, never the text around it: the input may hold a subject identifier.
    throw new StrictJsonError(`is not valid JSON: it ${what} (character ${this.#at + 1})`);
  }
}

/** A key path as a JSON string, shortened: enough to find the key, without echoing a whole value. */
function shownKey(keyPath: string): string {
  const shown = keyPath.length > MAX_KEY_SHOWN ? `${keyPath.slice(0, MAX_KEY_SHOWN)}…` : keyPath;
  return JSON.stringify(shown);
}
