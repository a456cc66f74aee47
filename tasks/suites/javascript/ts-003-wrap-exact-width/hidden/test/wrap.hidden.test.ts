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
  const blank: string[] = [...lines("", 5), ...lines("   ", 3), ...lines(" a b ", 4)];
  assert.deepStrictEqual(blank, ["a b"]);
  assert.ok(Array.isArray(lines(" ab ", 5)));
});
