"use strict";

const { test } = require("node:test");
const assert = require("node:assert");
const { toRoman } = require("../src/roman");
const { evaluate } = require("../src/rpn");
const { wrap } = require("../src/text");
const { medianOr } = require("../src/stats");

test("roman small numbers", () => {
  assert.strictEqual(toRoman(4), "IV");
});

test("rpn adds", () => {
  assert.deepStrictEqual(evaluate("2 3 +"), { value: 5 });
});

test("wrap short text", () => {
  assert.deepStrictEqual(wrap("a b", 10), ["a b"]);
});

test("median of odd count", () => {
  assert.strictEqual(medianOr([5, 1, 3], -1), 3);
});
