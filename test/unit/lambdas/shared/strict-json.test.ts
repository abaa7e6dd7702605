import { describe, expect, it } from 'vitest';
import { parseStrictJson } from '#shared/strict-json';

describe('parseStrictJson', () => {
  it.each([
    '{"a":1,"b":[true,false,null],"c":{"d":"e"}}',
    ' { "n" : -12.5e+3 , "s" : "\\u00e9\\ud83d\\ude00\\n\\"\\\\\\/" } ',
    '[]',
    '{}',
    '"just a string"',
    '0',
    '[[],[{}],{"x":[1,2,3]}]',
    '{"a":{"a":{"a":1}}}',
    '{"same":1,"other":{"same":2}}',
  ])('gives the same value as JSON.parse for %s', (text) => {
    expect(parseStrictJson(text)).toEqual({ ok: true, value: JSON.parse(text) });
  });

  it('keeps a "__proto__" key as a plain field, as JSON.parse does', () => {
    const read = parseStrictJson('{"__proto__":{"polluted":true}}');
    expect(read.ok && Object.getPrototypeOf(read.value)).toBe(Object.prototype);
    expect(read.ok && Object.keys(read.value as object)).toEqual(['__proto__']);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('refuses a repeated key at the top and deeper, naming the key by its path', () => {
    expect(parseStrictJson('{"type":"access","type":"erasure"}')).toEqual({
      ok: false,
      problem: 'repeats the key "type" in one object, so its meaning is ambiguous: give each key once',
    });
    expect(parseStrictJson('{"v":{"m":1,"m":2}}')).toMatchObject({
      problem: expect.stringContaining('"v.m"'),
    });
    expect(parseStrictJson('[{"a":1},{"b":1,"b":1}]')).toMatchObject({
      problem: expect.stringContaining('"[1].b"'),
    });
    // Escapes do not hide a repeat: both keys decode to "type".
    expect(parseStrictJson('{"type":1,"typ\\u0065":2}')).toMatchObject({ ok: false });
  });

  it('refuses nesting deeper than the limit without exhausting the stack', () => {
    const deep = `${'['.repeat(100_000)}${']'.repeat(100_000)}`;
    expect(parseStrictJson(deep)).toEqual({ ok: false, problem: 'is nested more than 32 levels deep' });
    expect(parseStrictJson(`${'['.repeat(32)}${']'.repeat(32)}`).ok).toBe(true);
    expect(parseStrictJson(`${'['.repeat(3)}${']'.repeat(3)}`, { maxDepth: 2 }).ok).toBe(false);
  });

  it('reads strings of many megabytes, escaped or not, without exhausting the stack', () => {
    // Prepare: sizes at which the former regular expression threw "Maximum call stack size exceeded"
    const escaped = '\\u00e9'.repeat(1_500_000);
    const plain = 'x'.repeat(16_000_000);
    // Act
    const readEscaped = parseStrictJson(`{"a":"${escaped}"}`);
    const readPlain = parseStrictJson(`["${plain}"]`);
    // Assess
    expect(readEscaped).toEqual({ ok: true, value: { a: '\u00e9'.repeat(1_500_000) } });
    expect(readPlain.ok && Array.isArray(readPlain.value) && readPlain.value[0] === plain).toBe(true);
  });

  it.each([
    ['{"a":1,}', 'key that is not a string'],
    ['{"a" 1}', 'lacks a ":"'],
    ['{a:1}', 'not a string'],
    ['{"a":"secret-value', 'unterminated'],
    ['{"a":01}', 'lacks a "," or "}"'],
    ['{"a":"tab\there"}', 'malformed string'],
    ['{"a":"\\x"}', 'malformed string'],
    ['{"a":"\\u12"}', 'malformed string'],
    ['{"a":"ends with a backslash\\', 'malformed string'],
    ['{"a":1} trailing', 'unexpected text'],
    ['', 'ends where a value was expected'],
    ['\uFEFF{}', 'has no valid value'],
  ])('refuses %j as not valid JSON without quoting it', (text, expected) => {
    const read = parseStrictJson(text);
    expect(read).toMatchObject({ ok: false, problem: expect.stringContaining(expected) });
    expect(read.ok || read.problem.includes('secret')).toBe(false);
    expect(() => JSON.parse(text)).toThrow();
  });
});
