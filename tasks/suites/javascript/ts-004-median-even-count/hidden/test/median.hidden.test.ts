import { test } from "node:test";
import assert from "node:assert";
import { median, medianOr } from "../src/stats";

test("median of four", () => {
  assert.strictEqual(medianOr([4, 1, 3, 2], -1), 2.5);
  assert.strictEqual(medianOr([10, 40, 20, 30], -1), 25);
});

test("median of two", () => {
  assert.strictEqual(medianOr([10, 20], -1), 15);
  assert.strictEqual(medianOr([-3, 8], -1), 2.5);
});

test("median of odd", () => {
  assert.strictEqual(medianOr([7, 1, 5], -1), 5);
});

test("median of nothing", () => {
  const none: (number | undefined)[] = [median([]), median([6])];
  assert.deepStrictEqual(none, [undefined, 6]);
  assert.strictEqual(medianOr([], 42.5), 42.5);
});
