import { test } from "node:test";
import assert from "node:assert";
import { wrap } from "../src/text";

const lines = (text: string, width: number): string[] => wrap(text, width);

test("line of exact width", () => {
  assert.deepStrictEqual(lines("aaa bbb ccc", 7), ["aaa bbb", "ccc"]);
  assert.deepStrictEqual(lines("one two three four", 9), ["one two", "three", "four"]);
});

test("two words filling the width", () => {
  assert.deepStrictEqual(lines("ab cd", 5), ["ab cd"]);
  assert.deepStrictEqual(lines("abc de fg", 6), ["abc de", "fg"]);
});

test("long word stands alone", () => {
  assert.deepStrictEqual(lines("abcdefgh ij", 4), ["abcdefgh", "ij"]);
});

test("empty text has no lines", () => {
  const empty: number = lines("", 5).length + lines("   ", 3).length;
  assert.strictEqual(empty, 0);
  assert.ok(Array.isArray(lines("", 5)));
});
